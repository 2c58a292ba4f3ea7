//! The device-side data path in the engine (issue 30): a case whose inputs are drawn by data
//! scheme v2 has its arena filled on the GPU ([`DeviceArena::fill`]) instead of generated on the
//! host, imaged and uploaded. What the host's oracles and references read comes back from the
//! device: the arena's bytes (the host image, byte for byte: `tests/gpu_datagen.rs` checks it
//! over every shipped kernel), from which the drawn values are read (each is exact in its
//! element type, so reading it back gives the value drawn). Findings are therefore those of the
//! host path; only the work moves.
//!
//! The host path stays for what the device does not make: old seeds (data scheme v1), cases run
//! under a sanitizer (whose view of the arena must be the kernel's alone), Python targets and
//! references, tensors left uninitialised, and `CUDAFUZZ_DATA_PATH=host` (to compare the two).
//!
//! A filled arena whose allocations are all held whole, and whose tensors are all drawn by v2 or
//! constant, is judged on the device too (`device_judge`): nothing comes back to the host unless
//! something asks for it. `CUDAFUZZ_DATA_PATH=fill` fills on the device and judges on the host.

use crate::core::case::{Case, DataScheme};
use crate::core::layout::{held_ranges, ArenaLayout};
use crate::core::manifest::{Manifest, ReferenceSpec};
use crate::core::plan::Plan;
use crate::engine::arena::device::{DeviceArena, DeviceFillError};
use crate::engine::arena::HostImage;
use crate::engine::data::device::DeviceGenerator;
use crate::engine::data::{self, Inputs, Recipe};

use super::engine::{Engine, EngineError};

/// The environment variable that picks the data path: `host` keeps every case on the host (for
/// comparing the paths); `fill` fills eligible cases' arenas on the device and judges them on
/// the host; anything else, or unset, lets eligible cases take the device for both.
pub const DATA_PATH_ENV: &str = "CUDAFUZZ_DATA_PATH";

/// What [`DATA_PATH_ENV`] lets the device do: fill, and judge.
fn device_path() -> (bool, bool) {
    match std::env::var(DATA_PATH_ENV).as_deref() {
        Ok("host") => (false, false),
        Ok("fill") => (true, false),
        _ => (true, true),
    }
}

/// A case made on the device.
pub(super) struct Filled {
    /// Its drawn values, or `None` when the run is judged on the device: then they are drawn on
    /// the host only if something asks for them ([`super::engine::Prepared::inputs`]).
    pub(super) inputs: Option<Inputs>,
    /// Its image, without bytes when the run is judged on the device.
    pub(super) image: HostImage,
    /// Its arena.
    pub(super) arena: DeviceArena,
}

impl Engine {
    /// Queues the fill of a case judged on the device, whose arena [`Engine::prepare_on_device`]
    /// only allocated: right before the run, so that the fill, the run, the oracles and the
    /// reference reach the GPU together (with several workers on a GPU, a context whose queue
    /// ran dry waits for its turn again).
    pub(super) fn fill_before_run(&self, prep: &super::engine::Prepared<'_>, arena: &DeviceArena) -> Result<(), EngineError> {
        let recipes = prep.pending.as_deref().expect("a run judged on the device has its recipes");
        let generator = self.generator.as_ref().expect("loaded by prepare_on_device");
        Ok(arena.refill(&prep.image.layout, &prep.plan, recipes, generator, &|_| true)?)
    }

    /// Whether a run on an arena filled on the device is judged there too: the device oracles
    /// make again what every allocation held (all held whole, each tensor drawn by v2 or one
    /// constant), and `CUDAFUZZ_DATA_PATH` is not `fill`.
    pub(super) fn judges_on_device(image: &HostImage, recipes: &[Recipe]) -> bool {
        device_path().1
            && (0..image.held.len()).all(|i| image.holds_whole(i))
            && recipes.iter().all(|r| matches!(r, Recipe::Counter { .. } | Recipe::Constant(_)))
    }

    /// Whether a case's arena may be made on the device: v2 data, no sanitizer, no Python on
    /// either side, nothing left uninitialised, and the device path not switched off.
    pub(super) fn fills_on_device(case: &Case, m: &Manifest, recipes: &[Recipe], sanitized: bool) -> bool {
        case.data == DataScheme::V2
            && !sanitized
            && m.target.python().is_none()
            && !matches!(m.reference, ReferenceSpec::Python(_))
            && !recipes.iter().any(|r| matches!(r, Recipe::Uninit))
            && device_path().0
    }

    /// Fills the case's arena on the device. When the run is judged on the device
    /// ([`Engine::judges_on_device`], and the caller allows it: `judged_here`), the arena is only
    /// allocated, and nothing comes back: the engine queues its fill right before the run
    /// ([`Engine::fill_before_run`]); otherwise the image and drawn values are downloaded. The
    /// recipes stay the caller's: a case the device cannot take (out of memory) goes on to the
    /// host path with them.
    pub(super) fn prepare_on_device(&mut self, case: &Case, plan: &Plan, recipes: &[Recipe], judged_here: bool) -> Result<Filled, EngineError> {
        if self.generator.is_none() {
            self.generator = Some(DeviceGenerator::load(&self.gpu).map_err(DeviceFillError::from)?);
        }
        let generator = self.generator.as_ref().expect("loaded above");
        let layout = ArenaLayout::new(case, plan);
        let held = plan.tensors.iter().map(|tp| held_ranges(&layout.allocs[tp.index], tp)).collect();
        let mut image = HostImage { data_uninit: vec![false; layout.allocs.len()], layout, bytes: Vec::new(), held };
        if judged_here && Self::judges_on_device(&image, recipes) {
            let arena = DeviceArena::for_layout(&image.layout, plan)?;
            return Ok(Filled { inputs: None, image, arena });
        }
        let arena = DeviceArena::fill(&image.layout, plan, recipes, generator)?;
        // The fill is queued on the null stream; the downloads wait for it.
        image.bytes = arena.download(&image, &mut self.staging).map_err(DeviceFillError::Cuda)?;
        let inputs = read_back(recipes.to_vec(), plan, &image, &image.bytes);
        Ok(Filled { inputs: Some(inputs), image, arena })
    }
}

impl Engine {
    /// The arena of a built-in op's GPU reference made on the device, as
    /// [`HostImage::build_selected`] and its upload would make it: the allocations `selected`
    /// keeps (the others are the case's, viewed), the canary, copied inputs' values from
    /// `copies`, outputs' initial contents. The image comes back without bytes. `None` when a
    /// selected tensor is drawn but has no values to copy (the host's image leaves its canary
    /// there), or the generator is not loaded: the host path makes that arena.
    pub(super) fn reference_arena_on_device(
        &mut self,
        rc: &Case,
        rplan: &Plan,
        copies: &Inputs,
        selected: &dyn Fn(&crate::core::plan::TensorPlan) -> bool,
    ) -> Result<Option<(HostImage, DeviceArena)>, EngineError> {
        let Some(generator) = self.generator.as_ref() else { return Ok(None) };
        let mut layout = ArenaLayout::new(rc, rplan);
        let mut recipes = Vec::with_capacity(rplan.tensors.len());
        for tp in &rplan.tensors {
            let a = &mut layout.allocs[tp.index];
            if !selected(tp) {
                // No memory: the reference reads the case's own allocation there.
                (a.data_offset, a.span_bytes, a.tail_bytes, a.redzone_after) = (0, 0, 0, 0);
                recipes.push(Recipe::Uninit);
            } else if data::is_drawn(tp) {
                let Some(values) = copies.get(tp.index) else { return Ok(None) };
                recipes.push(Recipe::Host(values.to_vec()));
            } else {
                recipes.push(data::initial_bits(tp).map_or(Recipe::Uninit, Recipe::Constant));
            }
        }
        let arena = DeviceArena::fill(&layout, rplan, &recipes, generator)?;
        let held = rplan.tensors.iter().map(|tp| if selected(tp) { held_ranges(&layout.allocs[tp.index], tp) } else { Vec::new() }).collect();
        let data_uninit = rplan.tensors.iter().map(|tp| selected(tp) && matches!(recipes[tp.index], Recipe::Uninit)).collect();
        let n = layout.allocs.len();
        Ok(Some((HostImage { layout, bytes: vec![Vec::new(); n], data_uninit, held }, arena)))
    }
}

/// The drawn values of a case filled on the device, read from its arena's bytes `bytes` (each
/// value is exact in its element type, so reading it back gives the value drawn). Only
/// host-drawn index tensors carry values to copy; the rest are parameters.
pub(super) fn read_back(recipes: Vec<Recipe>, plan: &Plan, image: &HostImage, bytes: &[Vec<u8>]) -> Inputs {
    data::values_of(recipes, plan, |tp, _, _| data::read_strided(image.data(tp.index, &bytes[tp.index]), tp))
}
