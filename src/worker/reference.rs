//! The GPU references of a case: the built-in attention op's fp64 kernel (`attention_f64`),
//! and a user's reference kernel run twice, as gold and as same-precision baseline.
//!
//! The attention kernel reads the case's own q, k and v allocations (no copy): its plan uses the
//! case's layouts for them, and a view arena puts the case's allocations where its inputs go.
//! A user's reference kernel gets a fresh arena in which every tensor is dense at offset 0 and
//! every floating tensor is f64 (the gold run) or as the case has it (the baseline run); it reads
//! the case's generated values, so both runs see exactly the kernel's inputs, and its launch
//! arguments are the same expressions evaluated for that dense layout.

use crate::arena::device::DeviceArena;
use crate::arena::{sentinel_bits, ArenaLayout, HostImage};
use crate::case::{Case, Scalar, TensorLayout};
use crate::data::{self, Inputs};
use crate::launch;
use crate::manifest::{BuiltinOp, ReferenceKernel, ReferenceSpec, Role};
use crate::plan::{check_contract, Plan};
use crate::reference::attention::RefOutput;
use crate::reference::{attention_expected, attention_geometry, cpu_reference, kernel_expected, kernel_manifest, reference_case, RefOutputs};

use super::engine::{Engine, EngineError, Prepared, ReferenceChoice, ReferenceUsed};

impl Engine {
    /// The references of a prepared case: none, the attention op's (on the GPU kernel when
    /// asked for and it can take the case, else on the CPU), or the user's reference kernel (on
    /// the GPU, whatever `choice` says: it is a CUDA kernel).
    pub(super) fn references(&mut self, prep: &Prepared<'_>, arena: &DeviceArena, choice: ReferenceChoice) -> Result<(RefOutputs, ReferenceUsed), EngineError> {
        match &prep.manifest.reference {
            ReferenceSpec::None => Ok((RefOutputs::default(), ReferenceUsed::None)),
            ReferenceSpec::Op { op, bind } => {
                if choice == ReferenceChoice::Gpu && *op == BuiltinOp::AttentionFwd {
                    if let Some(refs) = self.gpu_attention(prep, bind, arena)? {
                        return Ok((refs, ReferenceUsed::Gpu));
                    }
                }
                let refs = cpu_reference(&prep.manifest, &prep.plan, &prep.inputs).ok_or_else(|| EngineError::Reference(format!("the {op} binding does not fit this case's tensors")))?;
                Ok((refs, ReferenceUsed::Cpu))
            }
            ReferenceSpec::Kernel(k) => Ok((self.reference_kernel(prep, k)?, ReferenceUsed::Gpu)),
        }
    }

    /// The attention op on the `attention_f64` kernel, reading the case's q, k, v; `None` when
    /// there is no such kernel or the case lies outside its contract.
    fn gpu_attention(&mut self, prep: &Prepared<'_>, bind: &std::collections::BTreeMap<String, String>, arena: &DeviceArena) -> Result<Option<RefOutputs>, EngineError> {
        let reference = |m: String| EngineError::Reference(m);
        let Some(path) = self.reference_manifest.clone() else { return Ok(None) };
        let refm = self.manifest(&path)?;
        let Some(a) = attention_geometry(bind, &prep.plan) else { return Ok(None) };
        let mut rc = Case::new(&refm.path.display().to_string(), prep.case.dtype);
        rc.params = refm.default_params();
        for (name, v) in [("batch", a.batch), ("heads_q", a.heads_q), ("heads_kv", a.heads_kv), ("seq_q", a.seq_q), ("seq_k", a.seq_k), ("head_dim", a.head_dim)] {
            rc.dims.insert(name.into(), v);
        }
        rc.scalars.insert("causal".into(), Scalar::Bool(a.causal));
        rc.scalars.insert("scale".into(), Scalar::Float(a.scale as f64));
        rc.placement = prep.case.placement;
        // The reference reads the case's q, k, v where they are: the same layouts (its plan then
        // has their strides); the values it reads are the case's, whatever their classes.
        for role in ["q", "k", "v"] {
            let layout = bind.get(role).and_then(|n| prep.plan.tensor(n)).map(|t| t.layout.clone()).unwrap_or_default();
            rc.tensors.insert(role.into(), TensorLayout { values: TensorLayout::dense().values, ..layout });
        }
        let Ok(rplan) = Plan::new(&rc, &refm) else { return Ok(None) };
        if !check_contract(&refm, &rc, &rplan).is_inside() {
            return Ok(None);
        }
        let resolved = refm.resolve(&rplan.vars)?;
        let rimage = HostImage::build_selected(&rc, &rplan, &Inputs::default(), &|tp| tp.role != Role::Input);
        let rarena = DeviceArena::upload(&rimage).map_err(|s| reference(format!("reference buffer allocation failed: {s}")))?;
        let gpu_info = self.gpu.info.clone();
        let module = self.module(&refm, &rc, false)?;
        module.reserve_shared(resolved.shared_bytes, &gpu_info).map_err(|r| reference(format!("reference kernel: {r}")))?;
        // A view with the case's own allocations where the reference reads its inputs; it owns
        // nothing, so its allocation list is emptied before it drops.
        let mut view = DeviceArena { allocs: Vec::with_capacity(rplan.tensors.len()) };
        let mut layouts = Vec::with_capacity(rplan.tensors.len());
        for tp in &rplan.tensors {
            // The reference's inputs are bound by role name (q, k, v); its outputs are its own.
            let case_input = bind.get(&tp.name).and_then(|n| prep.plan.tensor(n)).filter(|_| tp.role == Role::Input);
            match (tp.role, case_input) {
                (Role::Input, Some(case_t)) => {
                    view.allocs.push(arena.allocs[case_t.index]);
                    layouts.push(prep.image.layout.allocs[case_t.index].clone());
                }
                _ => {
                    view.allocs.push(rarena.allocs[tp.index]);
                    layouts.push(rimage.layout.allocs[tp.index].clone());
                }
            }
        }
        let view_image = HostImage { layout: ArenaLayout { allocs: layouts }, bytes: Vec::new(), data_uninit: Vec::new(), held: Vec::new() };
        let result = launch::launch(module, &resolved, &view, &view_image)
            .map_err(|r| reference(format!("reference kernel launch: {r}")))
            .and_then(|()| crate::gpu::synchronize().map_err(|s| reference(format!("reference kernel failed: {s}"))));
        view.allocs.clear();
        result?;
        let values = |name: &str| -> Result<Vec<f64>, EngineError> {
            let tp = rplan.tensor(name).ok_or_else(|| reference(format!("{} has no tensor `{name}`", refm.name)))?;
            let bytes = rarena.download_one(&rimage, tp.index).map_err(|s| reference(s.to_string()))?;
            Ok(data::read_strided(rimage.data(tp.index, &bytes), tp))
        };
        let lse = values("ref_lse")?;
        let gold = RefOutput { o: values("ref_o")?, lse: lse.clone() };
        let lowp = RefOutput { o: values("ref_o_lowp")?, lse };
        Ok(Some(attention_expected(&prep.manifest, &prep.plan, bind, gold, &lowp)))
    }

    /// A user's reference kernel, run as gold (every floating tensor f64) and as baseline (the
    /// case's types), on dense copies of the case's inputs.
    fn reference_kernel(&mut self, prep: &Prepared<'_>, k: &ReferenceKernel) -> Result<RefOutputs, EngineError> {
        let judged: Vec<usize> = prep.plan.tensors.iter().filter(|t| t.role.is_judged()).map(|t| t.index).collect();
        let gold = self.run_reference(prep, k, true)?;
        let baseline = self.run_reference(prep, k, false)?;
        let runs = judged.into_iter().zip(gold.into_iter().zip(baseline)).map(|(i, (g, b))| (i, g, b)).collect();
        Ok(kernel_expected(k, &prep.plan, runs))
    }

    /// One run of a reference kernel; the judged outputs' values in roster order.
    fn run_reference(&mut self, prep: &Prepared<'_>, k: &ReferenceKernel, gold: bool) -> Result<Vec<Vec<f64>>, EngineError> {
        let reference = |m: String| EngineError::Reference(m);
        let rm = kernel_manifest(&prep.manifest, k, gold);
        let rc = reference_case(prep.case, &rm, gold);
        let rplan = Plan::new(&rc, &rm).map_err(|e| reference(format!("the reference kernel's plan: {}", crate::error::chain(&e))))?;
        let resolved = rm.resolve(&rplan.vars)?;
        let image = HostImage::build(&rc, &rplan, &prep.inputs);
        let arena = DeviceArena::upload(&image).map_err(|s| reference(format!("reference allocation failed: {s}")))?;
        let gpu_info = self.gpu.info.clone();
        let module = self.module(&rm, &rc, false)?;
        module.reserve_shared(resolved.shared_bytes, &gpu_info).map_err(|r| reference(format!("reference kernel {}: {r}", k.entry)))?;
        launch::launch(module, &resolved, &arena, &image)
            .map_err(|r| reference(format!("reference kernel {} launch: {r}", k.entry)))
            .and_then(|()| crate::gpu::synchronize().map_err(|s| reference(format!("reference kernel {} failed: {s}", k.entry))))?;
        let run = if gold { "gold" } else { "same-precision" };
        let mut out = Vec::new();
        for tp in rplan.tensors.iter().filter(|t| t.role.is_judged()) {
            let bytes = arena.download_one(&image, tp.index).map_err(|s| reference(s.to_string()))?;
            let data = image.data(tp.index, &bytes);
            if tp.init.marks_unwritten() {
                let sentinel = sentinel_bits(tp.dtype);
                let left = data::read_strided_bits(data, tp).iter().filter(|&&b| b == sentinel).count();
                if left > 0 {
                    return Err(reference(format!("the reference kernel {} ({run} run) left {left} of {} elements of {} unwritten: fix the reference", k.entry, tp.numel, tp.name)));
                }
            }
            out.push(data::read_strided(data, tp));
        }
        Ok(out)
    }
}
