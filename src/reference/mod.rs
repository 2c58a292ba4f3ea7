//! References: what a kernel's outputs are judged against, and how closely.
//!
//! A manifest's `[reference]` is a built-in op bound to its tensors by name, or a reference
//! kernel of the user's (run on the GPU by the worker), or none. Either way the result is the
//! same plain data, [`RefOutputs`]: for each judged output tensor the fp64 gold values and the
//! [`Rule`] that bounds the kernel's error. The rule follows FlashAttention's own tests: a
//! kernel's error against the gold may be at most a factor (2) times the error of a reference
//! computed in the kernel's own precision (the same-precision baseline, which measures what the
//! element type costs on *this* case), plus a small floor.
//!
//! Built in: `attention_fwd` ([`attention`]), on the CPU here and on the GPU through the
//! `attention_f64` reference kernel; `gemm` ([`gemm`]) and `rotary` ([`rotary`]) on the CPU
//! (their fp64 GPU kernels are `gemm_f64` and `rotary_f64`).

pub mod attention;
pub mod gemm;
pub mod rotary;

use crate::data::Inputs;
use crate::case::Dtype;
use crate::manifest::{BuiltinOp, DtypeSpec, LayoutFreedom, Manifest, ReferenceKernel, ReferenceSpec};
use crate::plan::Plan;

use attention::{Attention, AttentionInputs, CpuF64, CpuSamePrecision, RefOutput, Reference, LSE_REL};

/// How far a kernel's output may be from the gold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// How many times the baseline's error a kernel may have.
    pub factor: f64,
    /// Largest absolute error of the same-precision baseline against the gold.
    pub err_lowp: f64,
    /// The floor added to the bound.
    pub floor: f64,
    /// The bound: a kernel passes when its largest absolute error is at most this.
    pub bound: f64,
}

/// How one output is judged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    /// Largest absolute error at most the tolerance's bound.
    Bound(Tolerance),
    /// Each element within `rel · max(1, |gold|)`; infinite gold values must be matched.
    Relative(f64),
}

/// One judged output: its gold values and its rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    /// The tensor's roster position.
    pub index: usize,
    /// The tensor's name.
    pub name: String,
    /// fp64 gold values, logical order.
    pub gold: Vec<f64>,
    /// How close the kernel must come.
    pub rule: Rule,
}

/// What a case's outputs are judged against.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RefOutputs {
    /// One entry per judged output.
    pub expected: Vec<Expected>,
}

/// Largest `|a_i - b_i|`.
///
/// Equal elements count 0 even when infinite (so `-inf` lse of masked rows agree), and any
/// other pair involving NaN or an infinity counts `+inf`: `f64::max` silently drops NaN, and an
/// oracle must never let a NaN output pass as "no error". Panics if the lengths differ.
pub fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "compared outputs differ in length");
    let mut worst = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        if x == y {
            continue;
        }
        let d = (x - y).abs();
        if d.is_nan() {
            return f64::INFINITY;
        }
        if d > worst {
            worst = d;
        }
    }
    worst
}

/// The attention op's geometry for a planned case, read from the tensors and scalars the
/// manifest binds (`bind` role → name; a literal binds a constant).
pub fn attention_geometry(bind: &std::collections::BTreeMap<String, String>, plan: &Plan) -> Option<Attention> {
    let q = plan.tensor(bind.get("q")?)?;
    let k = plan.tensor(bind.get("k")?)?;
    let scalar = |role: &str| bound_scalar(bind, plan, role);
    Some(Attention {
        batch: q.shape[0],
        heads_q: q.shape[1],
        heads_kv: k.shape[1],
        seq_q: q.shape[2],
        seq_k: k.shape[2],
        head_dim: q.shape[3],
        causal: scalar("causal")? != 0.0,
        scale: scalar("scale")? as f32,
        dtype: q.dtype,
    })
}

/// The value of the scalar a binding gives `role` in a planned case: the case's scalar of that
/// name, or the literal bound (`true`/`false` read as 1/0); `None` when the role is unbound.
pub fn bound_scalar(bind: &std::collections::BTreeMap<String, String>, plan: &Plan, role: &str) -> Option<f64> {
    let name = bind.get(role)?;
    match plan.scalar(name) {
        Some(v) => Some(v.as_f64()),
        None => match name.as_str() {
            "true" => Some(1.0),
            "false" => Some(0.0),
            n => n.parse().ok(),
        },
    }
}

/// The judged outputs of an attention case from its fp64 and same-precision results: `o` by
/// the FlashAttention rule, `lse` (when bound) within [`LSE_REL`].
pub fn attention_expected(m: &Manifest, plan: &Plan, bind: &std::collections::BTreeMap<String, String>, gold: RefOutput, lowp: &RefOutput) -> RefOutputs {
    let bound = |role: &str| bind.get(role).and_then(|n| plan.tensor(n));
    let dtype = bound("q").map(|t| t.dtype).unwrap_or(m.dtypes[0]);
    let tol = attention::tolerance(dtype, &gold, lowp);
    let mut expected = Vec::new();
    if let Some(o) = bound("o") {
        expected.push(Expected { index: o.index, name: o.name.clone(), gold: gold.o, rule: Rule::Bound(tol) });
    }
    if let Some(lse) = bound("lse") {
        expected.push(Expected { index: lse.index, name: lse.name.clone(), gold: gold.lse, rule: Rule::Relative(LSE_REL) });
    }
    RefOutputs { expected }
}

/// The CPU references of a case whose manifest binds a built-in op; `None` for a reference
/// kernel (GPU only) or no reference.
pub fn cpu_reference(m: &Manifest, plan: &Plan, inputs: &Inputs) -> Option<RefOutputs> {
    let ReferenceSpec::Op { op, bind } = &m.reference else { return None };
    match op {
        BuiltinOp::AttentionFwd => {}
        BuiltinOp::Gemm => return gemm::cpu_expected(bind, plan, inputs),
        BuiltinOp::Rotary => return rotary::cpu_expected(bind, plan, inputs),
    }
    let a = attention_geometry(bind, plan)?;
    let get = |role: &str| bind.get(role).and_then(|n| plan.tensor(n)).and_then(|t| inputs.get(t.index));
    let view = AttentionInputs { q: get("q")?, k: get("k")?, v: get("v")? };
    let gold = CpuF64.forward(&a, &view);
    let lowp = CpuSamePrecision.forward(&a, &view);
    Some(attention_expected(m, plan, bind, gold, &lowp))
}

/// The judged outputs of a case from a user reference kernel's two runs: per output, `gold` and
/// `baseline` values (logical order); the bound is `factor · max|baseline − gold| + floor`, the
/// floor the manifest's or `4 · u · max(1, max|gold|)` with `u` the output's unit roundoff in
/// the case.
pub fn kernel_expected(k: &ReferenceKernel, plan: &Plan, runs: Vec<(usize, Vec<f64>, Vec<f64>)>) -> RefOutputs {
    let expected = runs
        .into_iter()
        .map(|(index, gold, baseline)| {
            let tp = &plan.tensors[index];
            let finite_pairs: (Vec<f64>, Vec<f64>) = gold.iter().zip(&baseline).filter(|(g, b)| g.is_finite() && b.is_finite()).map(|(g, b)| (*g, *b)).unzip();
            let err_lowp = max_abs_diff(&finite_pairs.1, &finite_pairs.0);
            let peak = gold.iter().filter(|x| x.is_finite()).fold(0.0f64, |a, &x| a.max(x.abs()));
            let floor = k.floor.unwrap_or(4.0 * tp.dtype.unit_roundoff() * peak.max(1.0));
            let tol = Tolerance { factor: k.factor, err_lowp, floor, bound: k.factor * err_lowp + floor };
            Expected { index, name: tp.name.clone(), gold, rule: Rule::Bound(tol) }
        })
        .collect();
    RefOutputs { expected }
}

/// The manifest a reference run compiles and launches: the kernel's roster with every tensor
/// dense and fixed at offset 0, floating tensors f64 in the gold run, the reference's source,
/// entry, options and launch, and `CUDAFUZZ_REFERENCE=1`.
pub fn kernel_manifest(m: &Manifest, k: &ReferenceKernel, gold: bool) -> Manifest {
    let mut rm = m.clone();
    rm.path = std::path::PathBuf::from(format!("{}#reference-{}", m.path.display(), if gold { "gold" } else { "baseline" }));
    rm.source = k.source.clone();
    rm.entry = k.entry.clone();
    rm.options = k.options.clone();
    rm.launch = k.launch.clone();
    rm.reference = ReferenceSpec::None;
    rm.defines.insert("CUDAFUZZ_REFERENCE".into(), 1);
    if gold {
        rm.dtypes = vec![Dtype::F64];
    }
    for t in &mut rm.tensors {
        t.layout = LayoutFreedom::Fixed;
        t.broadcast = false;
        if gold && t.dtype.resolve(Dtype::F64).is_float() {
            t.dtype = DtypeSpec::Fixed(Dtype::F64);
        }
    }
    rm
}

/// The case a reference run plans against [`kernel_manifest`]`(.., gold)`: the kernel's case
/// with the element type f64 (gold) or the case's own (baseline), every tensor dense at offset
/// 0 and guarded placement; the values it reads are the case's generated ones, whatever the
/// layouts.
pub fn reference_case(case: &crate::case::Case, rm: &Manifest, gold: bool) -> crate::case::Case {
    let mut rc = case.clone();
    rc.kernel = rm.path.display().to_string();
    rc.dtype = if gold { Dtype::F64 } else { case.dtype };
    rc.tensors.clear();
    rc.placement = crate::case::Placement::Guarded;
    rc
}
