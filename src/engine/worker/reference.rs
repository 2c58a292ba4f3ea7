//! The GPU references of a case: a built-in op's fp64 reference kernel (`<op>_f64` under the
//! reference directory, named by the op's [`crate::engine::reference::OpReference::gpu`]), and a user's
//! reference kernel run twice, as gold and as same-precision baseline.
//!
//! An op's reference kernel takes the op's case dims and scalars. Each of its inputs is named
//! after an op role: where the case's tensor bound to that role is an input of the reference
//! tensor's rank, the reference reads the case's own allocation (no copy): its plan uses the
//! case's layout, and a view arena puts the case's allocation where that input goes. Otherwise
//! (a rank-3 `x` read as `[rows, n]`, or a tensor the kernel under test writes: gemm's in-out
//! `c`) it reads a dense copy of the case's drawn values, so it sees initial contents whenever
//! it runs. A bound tensor whose element type differs from the reference's leaves the case to
//! the CPU reference. Its outputs are its own.
//! A user's reference kernel gets a fresh arena in which every tensor is dense at offset 0 and
//! every floating tensor is f64 (the gold run) or as the case has it (the baseline run); it reads
//! the case's generated values, so both runs see exactly the kernel's inputs, and its launch
//! arguments are the same expressions evaluated for that dense layout.

use crate::core::manifest::{PythonReference, ReferenceKernel, ReferenceSpec, Role};
use crate::core::plan::{check_contract, Plan};
use crate::engine::arena::device::DeviceArena;
use crate::engine::arena::staging::Staging;
use crate::engine::arena::{sentinel_bits, ArenaLayout, HostImage};
use crate::engine::data::{self, Inputs};
use crate::engine::launch;
use crate::engine::reference::{
    cpu_op_reference, gpu_case, gpu_viewed, judged_tensor, kernel_expected, kernel_manifest, op_expected, op_reference, python_reference_manifest,
    reference_case, role_inputs, Bound, OpCase, OpReference, OpValues, RefOutputs, RoleValues,
};

use super::engine::{Engine, EngineError, Prepared};
use crate::core::verdict::{ReferenceChoice, ReferenceUsed};
use crate::engine::oracle::device::DeviceGold;

impl Engine {
    /// The references of a prepared case: none, a built-in op's (on its GPU kernel when asked
    /// for and it can take the case, else on the CPU), the user's reference kernel (on the
    /// GPU, whatever `choice` says: it is a CUDA kernel), or a Python reference (none under a
    /// sanitizer, `sanitized`).
    pub(super) fn references(
        &mut self,
        prep: &Prepared<'_>,
        arena: &DeviceArena,
        choice: ReferenceChoice,
        sanitized: bool,
    ) -> Result<(RefOutputs, ReferenceUsed), EngineError> {
        self.device_gold = None;
        match &prep.manifest.reference {
            // Under a sanitizer a Python reference would run its framework's kernels under the
            // tool too, for nothing: values are judged by the native runs. And a framework's own
            // kernel that the tool stops (H200, torch 2.11: SDPA's flash kernel at head_dim 255
            // under memcheck) kills the context and the worker with it, a failure that is not
            // the target's.
            ReferenceSpec::Python(_) if sanitized => Ok((RefOutputs::default(), ReferenceUsed::None)),
            ReferenceSpec::None => Ok((RefOutputs::default(), ReferenceUsed::None)),
            ReferenceSpec::Op { op, bind } => {
                if choice == ReferenceChoice::Gpu {
                    if let Some(refs) = self.gpu_op(prep, op_reference(*op), bind, arena)? {
                        return Ok((refs, ReferenceUsed::Gpu));
                    }
                }
                let refs = cpu_op_reference(&prep.manifest, &prep.plan, prep.inputs())
                    .expect("an op reference")
                    .map_err(|m| EngineError::Reference(format!("{op}: {m}")))?;
                Ok((refs, ReferenceUsed::Cpu))
            }
            ReferenceSpec::Kernel(k) => Ok((self.reference_kernel(prep, k)?, ReferenceUsed::Gpu)),
            ReferenceSpec::Python(r) => Ok((self.python_reference(prep, r)?, ReferenceUsed::Gpu)),
        }
    }

    /// A Python reference, called as gold (every floating tensor f64) and as baseline (the
    /// case's types), on dense copies of the case's inputs.
    fn python_reference(&mut self, prep: &Prepared<'_>, r: &PythonReference) -> Result<RefOutputs, EngineError> {
        let gold = self.run_python_reference(prep, r, true)?;
        let baseline = self.run_python_reference(prep, r, false)?;
        Ok(two_runs_expected(prep, r.factor, r.floor, gold, baseline))
    }

    /// One call of a Python reference; the judged outputs' values in roster order.
    fn run_python_reference(&mut self, prep: &Prepared<'_>, r: &PythonReference, gold: bool) -> Result<Vec<Vec<f64>>, EngineError> {
        let reference = |m: String| EngineError::Reference(m);
        let run = if gold { "gold" } else { "same-precision" };
        let rm = python_reference_manifest(&prep.manifest, r, gold);
        self.set_up(&rm).map_err(|e| reference(format!("the Python reference {} could not be set up: {}", r.call.callable, crate::core::error::chain(&e))))?;
        let rc = reference_case(prep.case, &rm, gold);
        let rplan = Plan::new(&rc, &rm).map_err(|e| reference(format!("the reference's plan: {}", crate::core::error::chain(&e))))?;
        let call = rm.resolve_python(&r.call, &rplan.vars, "reference")?;
        let image = HostImage::build(&rc, &rplan, prep.inputs());
        let arena = DeviceArena::upload(&image).map_err(|s| reference(format!("reference allocation failed: {s}")))?;
        let ordinal = launch::call::ViewDevice::Cuda(self.gpu.info.ordinal as i32);
        let views = launch::views::device_views(&rplan, &image, |i| arena.data_ptr(&image, i), ordinal);
        let frame = launch::call::Call { manifest: &rm, views, call: &call, lease: arena.lease() };
        let outcome = launch::call::with_caller(|c| c.call(&frame)).map_err(|log| reference(format!("the Python reference {}: {log}", r.call.callable)))?;
        drop(frame);
        crate::engine::gpu::synchronize().map_err(|s| reference(format!("the Python reference {} ({run} run) failed: {s}", r.call.callable)))?;
        let _ = launch::call::with_caller(|c| c.release());
        if outcome != launch::call::CallOutcome::Returned {
            return Err(reference(format!("the Python reference {} ({run} run) did not return normally: {outcome:?}; fix the reference", r.call.callable)));
        }
        judged_outputs(&rplan, &arena, &image, &format!("the Python reference {} ({run} run)", r.call.callable), &mut self.staging)
    }

    /// A built-in op on its GPU reference kernel; `None` when there is no such kernel, the
    /// binding does not fit, or the case lies outside the reference kernel's contract (the CPU
    /// reference then judges).
    fn gpu_op(
        &mut self,
        prep: &Prepared<'_>,
        op: &'static dyn OpReference,
        bind: &std::collections::BTreeMap<String, String>,
        arena: &DeviceArena,
    ) -> Result<Option<RefOutputs>, EngineError> {
        let Some(planned) = self.plan_gpu_op(prep, op, bind)? else { return Ok(None) };
        let queued = self.queue_gpu_op(prep, planned, arena)?;
        let bytes = queued
            .rarena
            .download_staged(&queued.rimage, &queued.read, &mut self.staging)
            .map_err(|s| EngineError::Reference(format!("reference kernel failed: {s}")))?;
        let bytes: Vec<&[u8]> = bytes.iter().map(|b| &**b).collect();
        let (refs, gold) = finish_gpu_op(prep, queued, &bytes)?;
        self.device_gold = gold;
        Ok(Some(refs))
    }

    /// The GPU reference of a case whose manifest binds a built-in op, planned on the host, when
    /// `choice` asks for the GPU and the op's reference kernel can take the case (else `None`:
    /// [`Engine::references`] runs the reference after the run is waited for). Planned before
    /// the case's arena is filled, so that nothing the host does stands between the fill, the
    /// run, the oracles and the reference's launch ([`Engine::queue_gpu_op`]).
    pub(super) fn plan_references(&mut self, prep: &Prepared<'_>, choice: ReferenceChoice) -> Result<Option<PlannedOp>, EngineError> {
        match &prep.manifest.reference {
            ReferenceSpec::Op { op, bind } if choice == ReferenceChoice::Gpu => self.plan_gpu_op(prep, op_reference(*op), bind),
            _ => Ok(None),
        }
    }

    /// [`Engine::gpu_op`]'s host half: the reference's case, plan, contract and launch, and
    /// the case's values it copies; `None` when the GPU reference cannot take the case.
    fn plan_gpu_op(
        &mut self,
        prep: &Prepared<'_>,
        op: &'static dyn OpReference,
        bind: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<PlannedOp>, EngineError> {
        let gpu = op.gpu();
        let Some(path) = self.reference_dir.as_ref().map(|d| d.join(gpu.manifest)).filter(|p| p.is_file()) else { return Ok(None) };
        let refm = self.manifest(&path)?;
        let b = Bound { bind, plan: &prep.plan };
        let Ok(oc) = op.case(&b) else { return Ok(None) };
        let Some(rc) = gpu_case(&refm, &b, &oc, prep.case) else { return Ok(None) };
        let viewed = |name: &str| gpu_viewed(&refm, &b, name);
        let Ok(rplan) = Plan::new(&rc, &refm) else { return Ok(None) };
        if !check_contract(&refm, &rc, &rplan).is_inside() {
            return Ok(None);
        }
        let resolved = refm.resolve(&rplan.vars)?;
        // Copied inputs carry the case's values, in logical order, into the reference's roster
        // (read back from the device only when some input is copied).
        let copied = rplan.tensors.iter().any(|tp| tp.role == Role::Input && viewed(&tp.name).is_none());
        let values = if copied { Some(prep.inputs()) } else { None };
        let copies = Inputs {
            values: rplan
                .tensors
                .iter()
                .map(|tp| {
                    if tp.role == Role::Input && viewed(&tp.name).is_none() {
                        b.tensor(&tp.name).and_then(|t| values?.get(t.index)).map(<[f64]>::to_vec)
                    } else {
                        None
                    }
                })
                .collect(),
        };
        Ok(Some(PlannedOp { op, bind: bind.clone(), oc, refm, rc, rplan, resolved, copies }))
    }

    /// [`Engine::gpu_op`] up to its launch: the reference's buffers, its launch; nothing waits.
    pub(super) fn queue_gpu_op(&mut self, prep: &Prepared<'_>, planned: PlannedOp, arena: &DeviceArena) -> Result<QueuedOp, EngineError> {
        let reference = |m: String| EngineError::Reference(m);
        let PlannedOp { op, bind, oc, refm, rc, rplan, resolved, copies } = planned;
        let gpu = op.gpu();
        let b = Bound { bind: &bind, plan: &prep.plan };
        let viewed = |name: &str| gpu_viewed(&refm, &b, name);
        let selected = |tp: &crate::core::plan::TensorPlan| viewed(&tp.name).is_none();
        // A case judged on the device has its reference's buffers made there too.
        let on_device = if prep.judged_here() { self.reference_arena_on_device(&rc, &rplan, &copies, &selected)? } else { None };
        let (rimage, rarena) = match on_device {
            Some(made) => made,
            None => {
                let rimage = HostImage::build_selected(&rc, &rplan, &copies, &selected);
                let rarena = DeviceArena::upload(&rimage).map_err(|s| reference(format!("reference buffer allocation failed: {s}")))?;
                (rimage, rarena)
            }
        };
        let gpu_info = self.gpu.info.clone();
        let module = self.module(&refm, &rc, false)?;
        module.reserve_shared(&resolved, &gpu_info).map_err(|r| reference(format!("reference kernel: {r}")))?;
        // A view with the case's own allocations where the reference reads its inputs; it owns
        // nothing, so its allocation list is emptied before it drops.
        let mut view = DeviceArena::view(Vec::with_capacity(rplan.tensors.len()));
        let mut layouts = Vec::with_capacity(rplan.tensors.len());
        for tp in &rplan.tensors {
            match viewed(&tp.name) {
                Some(case_t) => {
                    view.allocs.push(arena.allocs[case_t.index]);
                    layouts.push(prep.image.layout.allocs[case_t.index].clone());
                }
                None => {
                    view.allocs.push(rarena.allocs[tp.index]);
                    layouts.push(rimage.layout.allocs[tp.index].clone());
                }
            }
        }
        let view_image = HostImage { layout: ArenaLayout { allocs: layouts }, bytes: Vec::new(), data_uninit: Vec::new(), held: Vec::new() };
        let launched = launch::launch(module, &resolved, &view, &view_image).map_err(|r| reference(format!("reference kernel launch: {r}")));
        view.allocs.clear();
        launched?;
        // Every output the rules read: per output, gold, baseline and its condition if any.
        let tensor = |name: &str| rplan.tensor(name).map(|tp| tp.index).ok_or_else(|| reference(format!("{} has no tensor `{name}`", refm.name)));
        let mut read = Vec::new();
        for o in gpu.outputs {
            read.extend([tensor(o.gold)?, tensor(o.baseline)?]);
            read.extend(o.cond.map(tensor).transpose()?);
        }
        Ok(QueuedOp { op, bind, oc, rplan, rimage, rarena, read })
    }

    /// A user's reference kernel, run as gold (every floating tensor f64) and as baseline (the
    /// case's types), on dense copies of the case's inputs.
    fn reference_kernel(&mut self, prep: &Prepared<'_>, k: &ReferenceKernel) -> Result<RefOutputs, EngineError> {
        let gold = self.run_reference(prep, k, true)?;
        let baseline = self.run_reference(prep, k, false)?;
        Ok(two_runs_expected(prep, k.factor, k.floor, gold, baseline))
    }

    /// One run of a reference kernel; the judged outputs' values in roster order.
    fn run_reference(&mut self, prep: &Prepared<'_>, k: &ReferenceKernel, gold: bool) -> Result<Vec<Vec<f64>>, EngineError> {
        let reference = |m: String| EngineError::Reference(m);
        let rm = kernel_manifest(&prep.manifest, k, gold);
        let rc = reference_case(prep.case, &rm, gold);
        let rplan = Plan::new(&rc, &rm).map_err(|e| reference(format!("the reference kernel's plan: {}", crate::core::error::chain(&e))))?;
        let resolved = rm.resolve(&rplan.vars)?;
        let image = HostImage::build(&rc, &rplan, prep.inputs());
        let arena = DeviceArena::upload(&image).map_err(|s| reference(format!("reference allocation failed: {s}")))?;
        let gpu_info = self.gpu.info.clone();
        let module = self.module(&rm, &rc, false)?;
        module.reserve_shared(&resolved, &gpu_info).map_err(|r| reference(format!("reference kernel {}: {r}", k.entry)))?;
        launch::launch(module, &resolved, &arena, &image)
            .map_err(|r| reference(format!("reference kernel {} launch: {r}", k.entry)))
            .and_then(|()| crate::engine::gpu::synchronize().map_err(|s| reference(format!("reference kernel {} failed: {s}", k.entry))))?;
        let run = if gold { "gold" } else { "same-precision" };
        judged_outputs(&rplan, &arena, &image, &format!("the reference kernel {} ({run} run)", k.entry), &mut self.staging)
    }
}

/// The judged outputs of one reference run (`what`, for messages), in roster order; an output
/// whose initial contents mark unwritten elements must have none left.
fn judged_outputs(rplan: &Plan, arena: &DeviceArena, image: &HostImage, what: &str, staging: &mut Staging) -> Result<Vec<Vec<f64>>, EngineError> {
    let judged: Vec<&crate::core::plan::TensorPlan> = rplan.tensors.iter().filter(|t| t.role.is_judged()).collect();
    let which: Vec<usize> = judged.iter().map(|tp| tp.index).collect();
    let downloads = arena.download_staged(image, &which, staging).map_err(|s| EngineError::Reference(s.to_string()))?;
    let mut out = Vec::new();
    for (tp, bytes) in judged.into_iter().zip(&downloads) {
        let data = image.data(tp.index, bytes);
        if tp.init.marks_unwritten() {
            let sentinel = sentinel_bits(tp.dtype);
            let left = data::read_strided_bits(data, tp).iter().filter(|&&b| b == sentinel).count();
            if left > 0 {
                return Err(EngineError::Reference(format!("{what} left {left} of {} elements of {} unwritten: fix the reference", tp.numel, tp.name)));
            }
        }
        out.push(data::read_strided(data, tp));
    }
    Ok(out)
}

/// The rule of a user's reference (a kernel or a Python callable) from its gold and baseline
/// runs' judged outputs.
fn two_runs_expected(prep: &Prepared<'_>, factor: f64, floor: Option<f64>, gold: Vec<Vec<f64>>, baseline: Vec<Vec<f64>>) -> RefOutputs {
    let judged = prep.plan.tensors.iter().filter(|t| t.role.is_judged()).map(|t| t.index);
    let runs = judged.zip(gold.into_iter().zip(baseline)).map(|(i, (g, b))| (i, g, b)).collect();
    kernel_expected(factor, floor, &prep.plan, runs)
}

/// A built-in op's GPU reference planned on the host ([`Engine::plan_references`]).
pub(super) struct PlannedOp {
    op: &'static dyn OpReference,
    bind: std::collections::BTreeMap<String, String>,
    oc: OpCase,
    refm: std::rc::Rc<crate::core::manifest::Manifest>,
    rc: crate::core::case::Case,
    rplan: Plan,
    resolved: crate::core::manifest::ResolvedLaunch,
    /// The case's values of the inputs the reference reads from copies.
    copies: Inputs,
}

/// A built-in op's GPU reference, launched and not yet waited for ([`Engine::queue_gpu_op`]).
pub(super) struct QueuedOp {
    op: &'static dyn OpReference,
    bind: std::collections::BTreeMap<String, String>,
    oc: OpCase,
    rplan: Plan,
    rimage: HostImage,
    rarena: DeviceArena,
    /// The reference's tensors the rules read, in the order [`finish_gpu_op`] takes them.
    pub(super) read: Vec<usize>,
}

impl QueuedOp {
    /// The reference's arena and image, to queue the download of [`QueuedOp::read`] from.
    pub(super) fn arena(&self) -> (&DeviceArena, &HostImage) {
        (&self.rarena, &self.rimage)
    }
}

/// The rules of a queued op reference from its outputs `bytes` (the [`QueuedOp::read`]
/// allocations, downloaded after the reference ran), and, for a case judged on the device, the
/// gold it leaves there for the device's value oracles.
pub(super) fn finish_gpu_op(prep: &Prepared<'_>, q: QueuedOp, bytes: &[&[u8]]) -> Result<(RefOutputs, Option<DeviceGold>), EngineError> {
    let (op, gpu) = (q.op, q.op.gpu());
    let b = Bound { bind: &q.bind, plan: &prep.plan };
    let mut values = q.read.iter().zip(bytes).map(|(&i, b)| data::read_strided(q.rimage.data(i, b), &q.rplan.tensors[i]));
    let mut out = OpValues::new();
    for o in gpu.outputs {
        let (gold, baseline) = (values.next().expect("gold read"), values.next().expect("baseline read"));
        let cond = if o.cond.is_some() { values.next().expect("cond read") } else { Vec::new() };
        out.insert(o.role.to_string(), RoleValues { gold, baseline, cond });
    }
    let ri = if op.rule_reads_inputs() { role_inputs(op.op(), &b, prep.inputs())? } else { Default::default() };
    let kept = prep.judged_here().then(|| {
        // The gold stays where the reference wrote it, for the device's value oracles.
        let at = gpu.outputs.iter().filter_map(|o| {
            let role = op.op().spec().tensors.iter().find(|r| r.name == o.role)?;
            let (target, gold) = (judged_tensor(&b, role)?, q.rplan.tensor(o.gold)?);
            let dense = gold.dtype == crate::core::case::Dtype::F64 && gold.is_dense_row_major();
            dense.then(|| (target.index, q.rarena.allocs[gold.index].0 + q.rimage.layout.allocs[gold.index].data_offset, gold.numel))
        });
        let at = at.collect();
        DeviceGold { arena: q.rarena, at }
    });
    Ok((op_expected(op, &q.oc, &b, out, &ri), kept))
}
