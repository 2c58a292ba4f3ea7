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
/// comparing the paths); anything else, or unset, lets eligible cases take the device.
pub const DATA_PATH_ENV: &str = "CUDAFUZZ_DATA_PATH";

impl Engine {
    /// Whether a case's arena may be made on the device: v2 data, no sanitizer, no Python on
    /// either side, nothing left uninitialised, and the device path not switched off.
    pub(super) fn fills_on_device(case: &Case, m: &Manifest, recipes: &[Recipe], sanitized: bool) -> bool {
        case.data == DataScheme::V2
            && !sanitized
            && m.target.python().is_none()
            && !matches!(m.reference, ReferenceSpec::Python(_))
            && !recipes.iter().any(|r| matches!(r, Recipe::Uninit))
            && std::env::var(DATA_PATH_ENV).map_or(true, |v| v != "host")
    }

    /// Fills the case's arena on the device and brings back its image and drawn values.
    /// The recipes stay the caller's: a case the device cannot take (out of memory) goes on to
    /// the host path with them.
    pub(super) fn prepare_on_device(&mut self, case: &Case, plan: &Plan, recipes: &[Recipe]) -> Result<(Inputs, HostImage, DeviceArena), EngineError> {
        if self.generator.is_none() {
            self.generator = Some(DeviceGenerator::load(&self.gpu).map_err(DeviceFillError::from)?);
        }
        let generator = self.generator.as_ref().expect("loaded above");
        let layout = ArenaLayout::new(case, plan);
        let arena = DeviceArena::fill(&layout, plan, recipes, generator)?;
        let held = plan.tensors.iter().map(|tp| held_ranges(&layout.allocs[tp.index], tp)).collect();
        let mut image = HostImage { data_uninit: vec![false; layout.allocs.len()], layout, bytes: Vec::new(), held };
        // The fill is queued on the null stream; the downloads wait for it.
        image.bytes = arena.download(&image).map_err(DeviceFillError::Cuda)?;
        // Only host-drawn index tensors carry values to copy; the rest are parameters.
        let inputs = data::values_of(recipes.to_vec(), plan, |tp, _, _| data::read_strided(image.data(tp.index, &image.bytes[tp.index]), tp));
        Ok((inputs, image, arena))
    }
}
