//! The engine: runs one case on the GPU from start to verdict, inside a worker process.
//!
//! [`Engine::run_case`] is the pipeline (README, "The pipeline") in order: plan → contract →
//! generate inputs → build the arena image → compile (cached) → upload → fp64 reference →
//! launch → synchronise → classify → download → oracles → determinism. It keeps loaded modules
//! and manifests across cases, so a long-lived worker pays NVRTC and module loading once per
//! configuration. The GPU references (the `attention_f64` kernel, a user's reference kernel)
//! live in the `reference` module next to this one; a case whose arena is filled on the device
//! is made in `device_data`, and judged on the device in `device_judge` (a run its counts
//! flag comes back to `Engine::finish_on_host`, this module's host path).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use crate::core::layout::AllocationTable;
use crate::engine::arena::device::DeviceArena;
use crate::engine::arena::staging::Staging;

use crate::core::verdict::{kernel_label, Outcome, ReferenceChoice, ReferenceUsed, RunOptions, StageTimes, Verdict};

use crate::core::case::Case;
use crate::core::coverage::{self, Coverage};
use crate::core::error::chain;
use crate::core::finding::Finding;
use crate::core::manifest::{Manifest, ResolvedLaunch};
use crate::core::plan::{check_contract, ContractVerdict, Plan};
use crate::core::target::ResolvedCall;
use crate::core::tool::Tool;
use crate::engine::arena::HostImage;
use crate::engine::compile::{request_for, Compiler};
use crate::engine::data;
use crate::engine::gpu::{CudaStatus, Gpu, GpuInfo};
use crate::engine::launch::{self, Module};
use crate::engine::marker::Marker;
use crate::engine::oracle::{self, Judged};

use super::run::{failed_after_launch, judged_outputs, launch_and_wait, launch_queued, rejection_finding, run_once, Launcher, Stop};

pub use super::error::EngineError;

/// Why a cubin may not load, when NVRTC's CUDA major is newer than the driver's (a CUDA 13
/// NVRTC on a CUDA 12 driver); empty when the versions do not explain it. Within one major a
/// newer NVRTC's cubins load on an older driver (measured: NVRTC 13.5 on driver 580, CUDA 13.0).
fn version_hint(nvrtc: (i32, i32), driver_version: i32) -> String {
    let driver = driver_version / 1000;
    if nvrtc.0 <= driver {
        return String::new();
    }
    format!(
        "; NVRTC {}.{} is newer than this driver's CUDA {driver}.{}: install the driver's NVRTC (python3 -m pip install nvidia-cuda-nvrtc-cu{driver}) and point CUDAFUZZ_NVRTC at it, or update the driver",
        nvrtc.0,
        nvrtc.1,
        (driver_version % 1000) / 10
    )
}

/// A GPU context with caches, serving cases one at a time.
pub struct Engine {
    // Fields drop in order: modules must be unloaded while the context (held by `gpu`) lives,
    // or the driver reports invalid handles (compute-sanitizer shows them as API errors).
    marker: Option<Marker>,
    /// The last case's allocations, kept when running under a sanitizer.
    allocations: Option<AllocationTable>,
    modules: HashMap<String, Module>,
    /// The GPU's build of the data generator, loaded by the first case that fills its arena on
    /// the device (`device_data`).
    pub(super) generator: Option<crate::engine::data::device::DeviceGenerator>,
    /// The GPU's oracles, loaded by the first case judged on the device (`device_judge`).
    pub(super) judge: Option<crate::engine::oracle::device::DeviceJudge>,
    /// The gold values a built-in op's GPU reference left on the device for this case's value
    /// oracles (`device_judge`).
    pub(super) device_gold: Option<crate::engine::oracle::device::DeviceGold>,
    /// Pinned host memory the case's downloads land in, kept from case to case.
    pub(super) staging: Staging,
    pub(super) gpu: Gpu,
    compiler: Compiler,
    /// Loaded manifests, shared by the cases that use them (a clone per case cost more than
    /// planning it).
    manifests: HashMap<PathBuf, Rc<Manifest>>,
    /// Which loaded module serves a configuration: skips hashing sources per case.
    module_keys: HashMap<ModuleMemo, String>,
    /// Where the built-in ops' GPU reference kernels are (`<op>_f64.toml`).
    pub(super) reference_dir: Option<PathBuf>,
    /// The Python targets whose setup has run in this process.
    set_up: std::collections::HashSet<PathBuf>,
}

/// What a case's verdict holds besides its outcome, filled in as the case moves through the
/// stages, so a case that stops early still says how far it got.
#[derive(Default)]
pub(super) struct Progress {
    pub(super) times: StageTimes,
    contract: Option<ContractVerdict>,
    pub(super) reference: ReferenceUsed,
    pub(super) coverage: Option<Coverage>,
    digest: Option<String>,
}

impl Progress {
    pub(super) fn verdict(&self, outcome: Outcome, sticky: bool) -> Verdict {
        Verdict {
            outcome,
            contract: self.contract.clone().unwrap_or(ContractVerdict::Inside),
            reference: self.reference,
            sticky,
            times: self.times.clone(),
            allocations: None,
            coverage: self.coverage.clone(),
            output_digest: self.digest.clone(),
            notes: Vec::new(),
        }
    }

    /// The harness could not go on: an [`Outcome::Error`].
    pub(super) fn error(&self, e: impl Into<EngineError>, sticky: bool) -> Verdict {
        self.verdict(Outcome::Error { message: chain(&e.into()) }, sticky)
    }

    /// The kernel failed: a finding.
    pub(super) fn failed(&self, findings: Vec<Finding>, sticky: bool) -> Verdict {
        self.verdict(Outcome::Fail { findings }, sticky)
    }
}

pub(super) fn micros(t: Instant) -> u64 {
    t.elapsed().as_micros() as u64
}

/// A case ready to run: everything [`Engine::run_case`] computed on the host.
pub(super) struct Prepared<'a> {
    pub(super) manifest: Rc<Manifest>,
    pub(super) plan: Plan,
    label: String,
    resolved: ResolvedLaunch,
    /// The later launches of a launch sequence, resolved for the case.
    steps: Vec<ResolvedLaunch>,
    /// A Python target's call for the case.
    call: Option<ResolvedCall>,
    /// The drawn values, once known (a run judged on the device has them drawn on the host
    /// only when something asks: [`Prepared::inputs`]).
    inputs: std::cell::OnceCell<data::Inputs>,
    /// The recipes of a run judged on the device (`device_judge`), whose values and image the
    /// host has not made.
    pub(super) pending: Option<Vec<data::Recipe>>,
    /// The arena's layout, and its bytes unless the run is judged on the device (then
    /// [`Prepared::image_with_bytes`] makes them).
    pub(super) image: HostImage,
    pub(super) case: &'a Case,
    /// The arena, when it was filled on the device (`device_data`); else it is uploaded from
    /// the image.
    arena: Option<DeviceArena>,
}

impl Prepared<'_> {
    /// How the case's code under test is launched: the loaded kernel `module`, or (`None`) the
    /// Python target's call on GPU `ordinal`.
    fn launcher<'a>(&'a self, module: Option<&'a Module>, ordinal: i32) -> Launcher<'a> {
        match module {
            Some(module) => Launcher::Kernel(module, &self.resolved, &self.steps),
            None => Launcher::Python { manifest: &self.manifest, call: self.call.as_ref().expect("resolved for a Python target"), ordinal },
        }
    }

    fn judged(&self, inside_contract: bool) -> Judged<'_> {
        Judged { case: self.case, plan: &self.plan, kernel: &self.label, inside_contract }
    }

    /// The case's drawn values; a run judged on the device has them drawn on the host the first
    /// time they are asked for (the same values: one generator source, two builds).
    pub(super) fn inputs(&self) -> &data::Inputs {
        self.inputs.get_or_init(|| data::drawn_on_host(self.pending.clone().expect("values are drawn or pending"), &self.plan))
    }

    /// The arena's image with its bytes, made on the host when it has none (a run judged on the
    /// device that is judged again here).
    pub(super) fn image_with_bytes(&self) -> std::borrow::Cow<'_, HostImage> {
        match &self.pending {
            Some(_) => std::borrow::Cow::Owned(HostImage::build(self.case, &self.plan, self.inputs())),
            None => std::borrow::Cow::Borrowed(&self.image),
        }
    }

    /// Whether the run is judged on the device (`device_judge`).
    pub(super) fn judged_here(&self) -> bool {
        self.pending.is_some()
    }

    /// Whether the arena is written back to its initial contents after the first run: for a
    /// determinism run, and for a built-in op's GPU reference, which reads the case's inputs
    /// where they lie.
    pub(super) fn restores(&self, opts: &RunOptions) -> bool {
        let reads_arena = opts.reference == ReferenceChoice::Gpu && matches!(self.manifest.reference, crate::core::manifest::ReferenceSpec::Op { .. });
        opts.determinism || reads_arena
    }
}

impl Engine {
    /// Opens GPU `ordinal`; `reference_dir` holds the built-in ops' GPU reference kernels (a
    /// manifest file there stands for its directory).
    pub fn new(ordinal: usize, reference_dir: Option<PathBuf>) -> Result<Engine, EngineError> {
        let gpu = Gpu::open(ordinal)?;
        let compiler = Compiler::new(None)?;
        let reference_dir = reference_dir.map(|p| if p.is_file() { p.parent().map(Path::to_path_buf).unwrap_or(p) } else { p });
        Ok(Engine {
            marker: None,
            allocations: None,
            generator: None,
            judge: None,
            staging: Staging::default(),
            device_gold: None,
            gpu,
            compiler,
            manifests: HashMap::new(),
            modules: HashMap::new(),
            module_keys: HashMap::new(),
            reference_dir,
            set_up: Default::default(),
        })
    }

    /// What GPU this engine runs on.
    pub fn gpu(&self) -> &GpuInfo {
        &self.gpu.info
    }

    pub(super) fn manifest(&mut self, path: &Path) -> Result<Rc<Manifest>, EngineError> {
        if let Some(m) = self.manifests.get(path) {
            return Ok(Rc::clone(m));
        }
        let m = Rc::new(Manifest::load(path)?);
        self.manifests.insert(path.to_path_buf(), Rc::clone(&m));
        Ok(m)
    }

    /// The loaded module of a manifest configuration; `coverage` compiles its `CF_COVER(id)`
    /// points in (a separate module and cache entry).
    pub(super) fn module(&mut self, manifest: &Manifest, case: &Case, coverage: bool) -> Result<&mut Module, EngineError> {
        // Derived params (`VEC = gcd(8, n)`) pick the build too; the case was planned, so they
        // evaluate. Most manifests have none: their cases' own params, borrowed, per case.
        let params = if manifest.derived_params.is_empty() {
            std::borrow::Cow::Borrowed(&case.params)
        } else {
            std::borrow::Cow::Owned(manifest.case_params(case).unwrap_or_else(|_| case.params.clone()))
        };
        let memo = (manifest.path.clone(), params.iter().map(|(k, v)| (k.clone(), *v)).collect(), case.dtype, coverage);
        if let Some(key) = self.module_keys.get(&memo) {
            return Ok(self.modules.get_mut(key).expect("memoised modules stay loaded"));
        }
        let mut extra: BTreeMap<String, String> = BTreeMap::new();
        if coverage {
            extra.insert(coverage::COVERAGE_DEFINE.to_string(), "1".to_string());
        }
        let req = request_for(manifest, &params, case.dtype, self.gpu.info.arch, &extra);
        let compiled = self.compiler.compile(&req)?;
        if !self.modules.contains_key(&compiled.key) {
            let hint = version_hint(self.compiler.nvrtc_version(), self.gpu.info.driver_version);
            let load_error =
                |entry: &str, status| EngineError::ModuleLoad { source_file: manifest.source.clone(), entry: entry.to_string(), status, hint: hint.clone() };
            let mut module = Module::load(&compiled.cubin, &compiled.symbol).map_err(|status| load_error(&req.entry, status))?;
            // A launch sequence's later kernels live in the same module.
            for step in &manifest.steps {
                module.add_step(&step.entry).map_err(|status| load_error(&step.entry, status))?;
            }
            self.modules.insert(compiled.key.clone(), module);
        }
        self.module_keys.insert(memo, compiled.key.clone());
        Ok(self.modules.get_mut(&compiled.key).expect("inserted above"))
    }

    /// Runs a Python target's setup, and a Python reference's, once per process (a no-op for
    /// other targets and references).
    pub fn set_up(&mut self, manifest: &Manifest) -> Result<(), EngineError> {
        // A Python reference is set up with its target, before the worker is ready: its imports
        // (torch) must not count against the first case's watchdog.
        if let crate::core::manifest::ReferenceSpec::Python(r) = &manifest.reference {
            for gold in [true, false] {
                self.set_up(&crate::engine::reference::python_reference_manifest(manifest, r, gold))?;
            }
        }
        if manifest.target.python().is_none() || self.set_up.contains(&manifest.path) {
            return Ok(());
        }
        let device = launch::call::ViewDevice::Cuda(self.gpu.info.ordinal as i32);
        launch::call::with_caller(|c| c.setup(manifest, device)).and_then(|r| r).map_err(|log| EngineError::Setup { manifest: manifest.path.clone(), log })?;
        self.set_up.insert(manifest.path.clone());
        Ok(())
    }

    /// Makes `tool` write its marker record: the start of a case in the sanitizer's XML.
    fn mark(&mut self, tool: Tool) -> Result<(), EngineError> {
        if self.marker.as_ref().map(Marker::tool) != Some(tool) {
            self.marker = Some(Marker::new(tool, &self.compiler, self.gpu.info.arch)?);
        }
        self.allocations = None;
        Ok(self.marker.as_mut().expect("made above").emit()?)
    }

    /// The allocations of the last case run under a sanitizer (device addresses → tensors).
    pub fn take_allocations(&mut self) -> Option<AllocationTable> {
        self.allocations.take()
    }

    /// Runs one case against the kernel of `manifest_path`. `on_launch` is called right before
    /// the kernel under test is launched, so a supervisor can arm its watchdog then (compiling is
    /// not a hang).
    ///
    /// The stages, in order: prepare (plan, contract, inputs, arena image) → compile and load →
    /// upload → launch → memory oracles → restore → references → value oracles → determinism. A stage that fails ends the case with
    /// an error (the harness's problem) or a finding (the kernel's).
    pub fn run_case(&mut self, case: &Case, manifest_path: &Path, opts: &RunOptions, on_launch: &mut dyn FnMut()) -> Verdict {
        let mut p = Progress::default();
        let t = Instant::now();
        let mut verdict = self.run_stages(case, manifest_path, opts, on_launch, &mut p).unwrap_or_else(|early| early);
        verdict.times.case_us = micros(t);
        verdict
    }

    fn run_stages(&mut self, case: &Case, manifest_path: &Path, opts: &RunOptions, on_launch: &mut dyn FnMut(), p: &mut Progress) -> Result<Verdict, Verdict> {
        if let Some(tool) = opts.sanitizer {
            self.mark(tool).map_err(|e| p.error(e, false))?;
        }
        // Before the arena is made (prepare may fill it on the device): the pool is the arena's
        // outside a sanitizer only.
        crate::engine::arena::device::pooled(opts.sanitizer.is_none());
        let t = Instant::now();
        let mut prep = self.prepare(case, manifest_path, opts, p)?;
        p.times.prepare_us = micros(t);
        let filled = prep.arena.take();
        let judged = prep.judged(p.contract.as_ref().is_some_and(ContractVerdict::is_inside));
        // A run judged on the device has its GPU reference planned now, before its arena is
        // filled: the fill, the run, the oracles and the reference then reach the GPU together.
        let t = Instant::now();
        let planned = if prep.judged_here() { self.plan_references(&prep, opts.reference).map_err(|e| p.error(e, false))? } else { None };
        p.times.reference_us = micros(t);

        let t = Instant::now();
        let python = prep.manifest.target.python().is_some();
        if python {
            self.set_up(&prep.manifest).map_err(|e| p.error(e, false))?;
        } else {
            let gpu_info = self.gpu.info.clone();
            let module = self.module(&prep.manifest, case, opts.coverage).map_err(|e| p.error(e, false))?;
            let reserved = module
                .reserve_shared(&prep.resolved, &gpu_info)
                .and_then(|()| prep.steps.iter().enumerate().try_for_each(|(i, s)| module.reserve_shared_at(i + 1, s, &gpu_info)));
            p.times.compile_us = micros(t);
            reserved.map_err(|rejection| p.failed(vec![rejection_finding(&judged, &rejection)], false))?;
        }

        let t = Instant::now();
        let arena = match filled {
            Some(arena) => arena,
            None => DeviceArena::upload(&prep.image).map_err(|s| p.error(upload_failure(&s, &prep.image, &prep.plan), launch::is_sticky(&s)))?,
        };
        if prep.judged_here() {
            self.fill_before_run(&prep, &arena).map_err(|e| p.error(e, true))?;
        }
        p.times.upload_us = micros(t);
        if opts.sanitizer.is_some() {
            self.allocations = Some(arena.table(&prep.image, &prep.plan));
        }

        let t = Instant::now();
        let ordinal = self.gpu.info.ordinal as i32;
        // Out of `self` while the launcher borrows the module (a stop on the way costs only a
        // new staging buffer next case).
        let mut staging = std::mem::take(&mut self.staging);
        let module = if python { None } else { Some(&*self.module(&prep.manifest, case, opts.coverage).expect("compiled above")) };
        if let (true, Some(module)) = (opts.coverage, module) {
            module
                .reset_coverage()
                .map_err(|status| p.error(EngineError::Cuda { what: "zeroing the coverage counters", status: status.clone() }, launch::is_sticky(&status)))?;
        }
        let launcher = prep.launcher(module, ordinal);
        on_launch();
        // Read before a determinism run adds its own counts.
        let coverage = |module: Option<&Module>| match (opts.coverage, module) {
            (true, Some(module)) => module.coverage().ok().flatten(),
            _ => None,
        };
        if prep.judged_here() {
            // Not waited for: the device oracles and the reference queue up behind it.
            let launched = launch_queued(&launcher, &arena, &prep.image, &judged);
            p.times.kernel_us = micros(t);
            // Counted only for a run that went through, as before (the read waits for it).
            p.coverage = if launched.is_ok() { coverage(module) } else { None };
            self.staging = staging;
            launched.map_err(|stop| stop.verdict(p))?;
            return self.finish_on_device(&prep, &arena, &judged, opts, planned, p);
        }
        let first = run_once(&launcher, &arena, &prep.image, &judged, &mut staging);
        p.times.kernel_us = micros(t);
        p.coverage = if first.is_ok() { coverage(module) } else { None };
        self.staging = staging;
        let after = first.map_err(|stop| stop.verdict(p))?;
        self.finish_on_host(&prep, &arena, &judged, opts, p, after)
    }

    /// The rest of a case judged on the host, from the first run's bytes `after`: memory oracles,
    /// the arena written back, references, value oracles, the determinism run.
    pub(super) fn finish_on_host(
        &mut self,
        prep: &Prepared<'_>,
        arena: &DeviceArena,
        judged: &Judged<'_>,
        opts: &RunOptions,
        p: &mut Progress,
        after: Vec<Vec<u8>>,
    ) -> Result<Verdict, Verdict> {
        // A run first judged on the device has no image bytes on the host yet.
        let image = prep.image_with_bytes();
        let t = Instant::now();
        let mut findings = oracle::check_memory(judged, &image, &after);
        p.times.judge_us += micros(t);

        // The reference runs after the kernel, so a case whose kernel faults (the commonest
        // failure, and one that costs its worker) never pays for it. The reference reads the
        // case's own input allocations and the determinism run needs the first run's starting
        // state, so whatever the kernel changed is written back first.
        let t = Instant::now();
        if prep.restores(opts) {
            restore(prep, &image, arena, &after).map_err(|s| p.failed(vec![failed_after_launch(judged, &s).0], launch::is_sticky(&s)))?;
        }
        p.times.upload_us += micros(t);

        let t = Instant::now();
        let (references, used) = self.references(prep, arena, opts.reference, opts.sanitizer.is_some()).map_err(|e| p.error(e, true))?;
        // Gold kept on the device is for the device's oracles only.
        self.device_gold = None;
        p.times.reference_us = micros(t);
        p.reference = used;

        let t = Instant::now();
        findings.extend(oracle::check_values(judged, &image, &after, &references));
        if opts.digest {
            p.digest = Some(output_digest(&prep.plan, &image, &after));
        }
        p.times.judge_us += micros(t);
        if opts.determinism {
            self.determinism(prep, judged, arena, &after, opts, &mut findings, p)?;
        }
        let outcome = if findings.is_empty() { Outcome::Pass } else { Outcome::Fail { findings } };
        Ok(p.verdict(outcome, false))
    }

    /// The host side of a case: manifest, params, plan, contract verdict, launch, inputs and
    /// the arena image.
    fn prepare<'c>(&mut self, case: &'c Case, manifest_path: &Path, opts: &RunOptions, p: &mut Progress) -> Result<Prepared<'c>, Verdict> {
        let sanitized = opts.sanitizer.is_some();
        let manifest = self.manifest(manifest_path).map_err(|e| p.error(e, false))?;
        manifest.check_params(&case.params).map_err(|e| p.error(e, false))?;
        let plan = Plan::new(case, &manifest).map_err(|source| p.error(EngineError::Case { kernel: manifest.name.clone(), source }, false))?;
        p.contract = Some(check_contract(&manifest, case, &plan));
        let label = kernel_label(&manifest, case);
        let resolved = manifest.resolve(&plan.vars).map_err(|e| p.error(e, false))?;
        let steps = manifest.resolve_steps(&plan.vars).map_err(|e| p.error(e, false))?;
        let call = manifest.resolve_call(&plan.vars).map_err(|e| p.error(e, false))?;
        let recipes = data::recipes(case, &plan, &manifest);
        if Self::fills_on_device(case, &manifest, &recipes, sanitized) {
            use crate::engine::arena::device::DeviceFillError;
            // A digest reads every output on the host: such a run is judged there.
            match self.prepare_on_device(case, &plan, &recipes, !opts.digest) {
                Ok(filled) => {
                    let pending = filled.inputs.is_none().then(|| recipes.clone());
                    let inputs = filled.inputs.map(std::cell::OnceCell::from).unwrap_or_default();
                    let (image, arena) = (filled.image, Some(filled.arena));
                    return Ok(Prepared { manifest, plan, label, resolved, steps, call, inputs, pending, image, case, arena });
                }
                // Out of memory, or host-drawn values in a sparse allocation: the host path's
                // upload takes the case, and says what it needs when it cannot either.
                Err(EngineError::DeviceData(DeviceFillError::Cuda(s))) if s.code == 2 => {}
                Err(EngineError::DeviceData(DeviceFillError::HostValuesInRanges(_))) => {}
                Err(EngineError::DeviceData(DeviceFillError::Cuda(s))) => {
                    let sticky = launch::is_sticky(&s);
                    return Err(p.error(EngineError::DeviceData(DeviceFillError::Cuda(s)), sticky));
                }
                Err(e) => return Err(p.error(e, false)),
            }
        }
        let inputs = data::drawn_on_host(recipes, &plan);
        let image = HostImage::build(case, &plan, &inputs);
        let inputs = std::cell::OnceCell::from(inputs);
        Ok(Prepared { manifest, plan, label, resolved, steps, call, inputs, pending: None, image, case, arena: None })
    }

    /// Launches the code under test again on the arena, as it stands, and waits for it (or,
    /// `queued`, only launches it: [`launch_queued`]).
    pub(super) fn relaunch(&mut self, prep: &Prepared<'_>, arena: &DeviceArena, judged: &Judged<'_>, opts: &RunOptions, queued: bool) -> Result<(), Stop> {
        let ordinal = self.gpu.info.ordinal as i32;
        let module = match prep.call {
            Some(_) => None,
            None => Some(&*self.module(&prep.manifest, prep.case, opts.coverage).expect("compiled above")),
        };
        let launcher = prep.launcher(module, ordinal);
        if queued {
            launch_queued(&launcher, arena, &prep.image, judged)
        } else {
            launch_and_wait(&launcher, arena, &prep.image, judged)
        }
    }

    /// The determinism run: every written tensor rewritten with its initial contents, the
    /// kernel launched again, and every judged output compared bit for bit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn determinism(
        &mut self,
        prep: &Prepared<'_>,
        judged: &Judged<'_>,
        arena: &DeviceArena,
        after: &[Vec<u8>],
        opts: &RunOptions,
        findings: &mut Vec<Finding>,
        p: &mut Progress,
    ) -> Result<(), Verdict> {
        let t = Instant::now();
        let again = self.relaunch(prep, arena, judged, opts, false).and_then(|()| judged_outputs(arena, &prep.image, judged, &mut self.staging));
        p.times.kernel_us += micros(t);
        match again {
            Ok(second) => {
                findings.extend(oracle::check_determinism(judged, &prep.image, after, &second));
                Ok(())
            }
            Err(stop) => Err(stop.verdict_after(std::mem::take(findings), p)),
        }
    }
}

/// Writes back to its initial contents every tensor the kernel may write, and any other
/// allocation the first run changed (a kernel that scribbles on an input: the memory oracle has
/// already judged that from `after`).
fn restore(prep: &Prepared<'_>, image: &HostImage, arena: &DeviceArena, after: &[Vec<u8>]) -> Result<(), CudaStatus> {
    let written: Vec<usize> = prep.plan.tensors.iter().filter(|t| t.role.is_written()).map(|t| t.index).collect();
    (0..after.len()).filter(|&i| written.contains(&i) || !image.holds_same(i, &after[i])).try_for_each(|i| arena.write(image, i))
}

/// Why a case could not be uploaded; out of memory names what the case needs and, for a case
/// past 2³¹ elements, how a kernel's contract opts out of them.
fn upload_failure(s: &CudaStatus, image: &HostImage, plan: &Plan) -> EngineError {
    // CUDA_ERROR_OUT_OF_MEMORY
    if s.code != 2 {
        return EngineError::Cuda { what: "uploading the case", status: s.clone() };
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let free = cudarc::driver::result::mem_get_info().map(|(free, _)| format!("{:.1} GiB", gib(free as u64))).unwrap_or_else(|_| "unknown".into());
    let mut msg = format!("uploading the case failed: {s}: it needs {:.1} GiB of GPU memory, {free} is free", gib(image.layout.total_bytes()));
    if plan.reaches_past_int32() {
        msg.push_str("; it is a case past 2^31 elements (a 4-8 GiB stride gap): run on a GPU with more memory, or declare `max_element_offset = 2147483647` in the kernel's [contract] if it indexes in 32 bits");
    }
    EngineError::OutOfMemory(msg)
}

/// The digest of every judged output's element bits in logical order (see
/// [`Verdict::output_digest`]).
fn output_digest(plan: &Plan, image: &HostImage, after: &[Vec<u8>]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    // An order-dependent output's bits may differ between runs: it is not part of the digest.
    for tp in plan.tensors.iter().filter(|t| t.role.is_judged() && !t.order_dependent) {
        for b in data::read_strided_bits(image.data(tp.index, &after[tp.index]), tp) {
            h.update(b.to_le_bytes());
        }
    }
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// A kernel configuration as the engine memoises it: manifest, params, dtype, coverage build.
type ModuleMemo = (PathBuf, Vec<(String, i64)>, crate::core::case::Dtype, bool);

impl Stop {
    pub(super) fn verdict(self, p: &Progress) -> Verdict {
        self.verdict_after(Vec::new(), p)
    }

    /// The verdict of a run that stopped (a determinism run) after the case's earlier runs
    /// found `findings`: a finding joins them; anything else is the verdict alone.
    pub(super) fn verdict_after(self, mut findings: Vec<Finding>, p: &Progress) -> Verdict {
        match self {
            Stop::Finding(f, sticky) => {
                findings.push(*f);
                p.failed(findings, sticky)
            }
            Stop::Error(e) => p.error(e, false),
            Stop::Rejected(exception, message) => p.verdict(Outcome::Rejected { exception, message }, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::version_hint;

    #[test]
    fn a_newer_nvrtc_major_than_the_driver_is_explained_and_a_newer_minor_is_not() {
        assert_eq!(version_hint((13, 5), 13000), "");
        assert_eq!(version_hint((12, 4), 13000), "");
        let h = version_hint((13, 0), 12040);
        assert!(h.contains("NVRTC 13.0 is newer than this driver's CUDA 12.4") && h.contains("nvidia-cuda-nvrtc-cu12"), "{h}");
    }
}
