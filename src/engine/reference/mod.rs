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
//! # Built-in ops
//!
//! Built in: `attention_fwd` ([`attention`]), `softmax` ([`softmax`]), `rmsnorm` ([`rmsnorm`]),
//! `layernorm` ([`layernorm`]), `gemm` ([`gemm`]) and `rotary` ([`rotary`]). Each is one [`OpReference`] in the [`OPS`] table; nothing
//! else in the crate names an op, so every stage (the CPU and GPU references, the emitted
//! repros, the worker) reaches an op through [`op_reference`].
//!
//! ## Adding a built-in op
//!
//! 1. A `BuiltinOp` variant and its [`crate::core::manifest::OpSpec`] (`src/core/manifest/ops.rs`): the
//!    manifest name, the tensor roles with the rank each needs (required or optional), the
//!    scalar roles, and the role whose last dim the op reduces over with the boundary values
//!    to hint there. The manifest loader checks bindings against it (`reference.bind.<role>`).
//! 2. A module `src/reference/<op>.rs` with one unit struct implementing [`OpReference`]:
//!    * [`OpReference::case`]: the op's [`OpCase`] from the bound tensors' shapes and scalars
//!      (or a message saying why the binding does not fit). Its dims and scalars are exactly
//!      the dims and scalars of the op's GPU reference kernel's manifest, so the GPU path sets
//!      them without knowing the op.
//!    * [`OpReference::cpu`]: the fp64 gold and the same-precision baseline of every output
//!      role, logical order ([`OpValues`]), and where the rule is condition-derived, each
//!      element's condition. The baseline is computed the way a real kernel is:
//!      inputs as stored in the case's type, f32 accumulation, each output rounded to the type.
//!    * [`OpReference::gpu`]: the GPU reference kernel's manifest file (under
//!      `kernels/reference/`) and which of its outputs hold each role's gold and baseline.
//!    * [`OpReference::rule`]: the [`Rule`] that judges an output role, from the values (and
//!      the inputs, for a condition-derived floor).
//! 3. An entry in [`OPS`], and `kernels/reference/<op>_f64.cu` + `.toml`: its input tensors are
//!    named after the roles; an input of the case's rank reads the case's own allocation where
//!    it lies (any layout, offset, broadcast), another reads a dense copy of the case's values
//!    (a rank-3 `x` reduced over its last dim is a dense `[rows, n]`); its outputs are its own
//!    dense f64 tensors (`layout = "fixed"`). An op input bound to a tensor the kernel under
//!    test writes (gemm's `c`, rotary's in-place `x`) always reads a dense copy of that tensor's
//!    drawn initial contents, so the reference never depends on when it runs.

pub mod attention;
pub mod gemm;
pub mod layernorm;
pub mod rmsnorm;
pub mod rotary;
mod rows;
pub mod softmax;

use std::collections::BTreeMap;

use crate::core::case::{Dtype, Scalar};
use crate::core::manifest::{BuiltinOp, DtypeSpec, LayoutFreedom, Manifest, ReferenceKernel, ReferenceSpec, Role};
use crate::core::plan::{Plan, TensorPlan};
use crate::engine::data::Inputs;

pub use attention::attention_geometry;

/// Why a built-in op's binding does not fit a case: the manifest binds the op's roles to
/// tensors this case cannot give it. Not a kernel finding: the case has no CPU reference.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BindingError {
    /// The op needs a tensor for `role` and none is bound.
    #[error("no tensor is bound to `{role}`")]
    Unbound {
        /// The op's role.
        role: String,
    },
    /// An input has no generated values.
    #[error("input `{tensor}` has no generated values")]
    NoValues {
        /// The tensor.
        tensor: String,
    },
    /// The op reads a written tensor's initial contents, which the case does not draw.
    #[error("the op reads the initial contents of `{role}`, and tensor `{tensor}` ({tensor_role}) does not draw them: give it init = \"drawn\"")]
    NotDrawn {
        /// The op's role.
        role: String,
        /// The tensor bound to it.
        tensor: String,
        /// That tensor's role in the manifest.
        tensor_role: String,
    },
    /// A scalar the op needs has no value in the case.
    #[error("the scalar bound to `{role}` has no value")]
    NoScalar {
        /// The op's role.
        role: String,
    },
    /// The bound tensors' shapes do not make one case of the op (the message says how).
    #[error("{0}")]
    Shape(String),
}

/// The tensors and scalars a manifest binds to an op's roles, for one planned case.
#[derive(Clone, Copy, Debug)]
pub struct Bound<'a> {
    /// Role → tensor or scalar name (a literal binds a constant).
    pub bind: &'a BTreeMap<String, String>,
    /// The planned case.
    pub plan: &'a Plan,
}

impl<'a> Bound<'a> {
    /// The tensor bound to `role`.
    pub fn tensor(&self, role: &str) -> Option<&'a TensorPlan> {
        self.plan.tensor(self.bind.get(role)?)
    }

    /// The tensor bound to `role`, or a message naming the role.
    pub fn need(&self, role: &str) -> Result<&TensorPlan, BindingError> {
        self.tensor(role).ok_or_else(|| BindingError::Unbound { role: role.to_string() })
    }

    /// The value of the scalar (or literal) bound to `role`.
    pub fn scalar(&self, role: &str) -> Option<f64> {
        let name = self.bind.get(role)?;
        match self.plan.scalar(name) {
            Some(v) => Some(v.as_f64()),
            None => match name.as_str() {
                "true" => Some(1.0),
                "false" => Some(0.0),
                n => n.parse().ok(),
            },
        }
    }
}

/// One case of an op: the dims and scalars its GPU reference kernel's case takes (the same
/// names as that kernel's manifest), and the element type its baseline rounds into.
#[derive(Clone, Debug, PartialEq)]
pub struct OpCase {
    /// Dim name → value.
    pub dims: BTreeMap<String, u64>,
    /// Scalar name → value.
    pub scalars: BTreeMap<String, Scalar>,
    /// The inputs' element type.
    pub dtype: Dtype,
}

impl OpCase {
    /// A dim's value (0 when absent).
    pub fn dim(&self, name: &str) -> u64 {
        self.dims.get(name).copied().unwrap_or(0)
    }

    /// A scalar's value (0 when absent).
    pub fn scalar(&self, name: &str) -> f64 {
        self.scalars.get(name).map(|s| s.as_f64()).unwrap_or(0.0)
    }
}

/// An op's input values by role, logical order.
pub type RoleInputs<'a> = BTreeMap<String, &'a [f64]>;

/// One output role's values, logical order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoleValues {
    /// The fp64 gold.
    pub gold: Vec<f64>,
    /// The same-precision baseline.
    pub baseline: Vec<f64>,
    /// Per element, the condition a condition-derived bound scales with (gemm:
    /// `|alpha| Σ|a·b| + |beta·c₀|`); empty for ops whose rule needs none.
    pub cond: Vec<f64>,
}

impl RoleValues {
    /// Gold and baseline, no condition.
    pub fn new(gold: Vec<f64>, baseline: Vec<f64>) -> RoleValues {
        RoleValues { gold, baseline, cond: Vec::new() }
    }
}

/// Every output role's values.
pub type OpValues = BTreeMap<String, RoleValues>;

/// Where one output role's values are in the GPU reference kernel's outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuOutput {
    /// The op's output role.
    pub role: &'static str,
    /// The reference kernel's tensor holding the gold.
    pub gold: &'static str,
    /// The reference kernel's tensor holding the baseline (may be the gold's).
    pub baseline: &'static str,
    /// The reference kernel's tensor holding each element's condition, for ops that have one.
    pub cond: Option<&'static str>,
}

/// An op's GPU fp64 reference kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuReference {
    /// Its manifest's file name under `kernels/reference/`.
    pub manifest: &'static str,
    /// Its outputs, per output role.
    pub outputs: &'static [GpuOutput],
}

/// A built-in op: how its case is read from a binding, computed on the CPU, found on the GPU,
/// and judged. One unit struct per op, listed in [`OPS`]; see the module docs.
pub trait OpReference: Sync {
    /// The op.
    fn op(&self) -> BuiltinOp;
    /// The op's case from the bound tensors and scalars; a message when they do not fit.
    fn case(&self, b: &Bound<'_>) -> Result<OpCase, BindingError>;
    /// Gold and same-precision baseline of every output role, on the CPU.
    fn cpu(&self, c: &OpCase, inputs: &RoleInputs<'_>) -> OpValues;
    /// The GPU reference kernel.
    fn gpu(&self) -> GpuReference;
    /// How output `role` is judged, given every role's values and the inputs.
    fn rule(&self, role: &str, c: &OpCase, values: &OpValues, inputs: &RoleInputs<'_>) -> Rule;
    /// Whether [`OpReference::rule`] reads the inputs (a condition from their values); when it
    /// does not, a case judged on the device never brings them back to the host for it.
    fn rule_reads_inputs(&self) -> bool {
        false
    }
}

/// Every built-in op's reference.
pub static OPS: [&dyn OpReference; 6] =
    [&attention::AttentionOp, &softmax::Softmax, &rmsnorm::Rmsnorm, &layernorm::Layernorm, &gemm::GemmOp, &rotary::RotaryOp];

/// The reference of `op`.
pub fn op_reference(op: BuiltinOp) -> &'static dyn OpReference {
    *OPS.iter().find(|r| r.op() == op).expect("every built-in op is listed in OPS")
}

/// The values the op reads, by role: every bound input tensor's, and the drawn initial contents
/// of a bound tensor the kernel writes (`init = "drawn"`: gemm's `c`, rotary's in-place `x`).
pub fn role_inputs<'a>(op: BuiltinOp, b: &Bound<'_>, inputs: &'a Inputs) -> Result<RoleInputs<'a>, BindingError> {
    let mut out = RoleInputs::new();
    for r in op.spec().tensors {
        let Some(t) = b.tensor(r.name) else { continue };
        match inputs.get(t.index) {
            Some(values) => {
                out.insert(r.name.to_string(), values);
            }
            None if t.role == Role::Input => return Err(BindingError::NoValues { tensor: t.name.clone() }),
            None => {}
        }
    }
    Ok(out)
}

/// Whether the tensor bound to `role` has values the op can read before the kernel runs (an
/// input, or a written tensor whose initial contents are drawn); else a message with the fix.
pub fn readable(b: &Bound<'_>, role: &str) -> Result<(), BindingError> {
    let t = b.need(role)?;
    if t.role == Role::Input || t.init == crate::core::manifest::Init::Drawn {
        return Ok(());
    }
    Err(BindingError::NotDrawn { role: role.to_string(), tensor: t.name.clone(), tensor_role: t.role.name().to_string() })
}

/// The judged outputs of an op's case from its values: every output role that has values,
/// bound or written in place ([`crate::core::manifest::TensorRole::in_place`]), judged by the op's
/// rule.
pub fn op_expected(r: &dyn OpReference, c: &OpCase, b: &Bound<'_>, mut values: OpValues, inputs: &RoleInputs<'_>) -> RefOutputs {
    let mut expected = Vec::new();
    for role in r.op().spec().tensors {
        let Some(t) = judged_tensor(b, role) else { continue };
        if !values.contains_key(role.name) {
            continue;
        }
        let rule = r.rule(role.name, c, &values, inputs);
        let gold = values.remove(role.name).map(|v| v.gold).unwrap_or_default();
        expected.push(Expected { index: t.index, name: t.name.clone(), gold, rule });
    }
    RefOutputs { expected }
}

/// The judged tensor of the case that an op's output role `role` is compared with: the tensor
/// bound to it, or the one it is written into in place; `None` when that is not judged.
pub fn judged_tensor<'p>(b: &Bound<'p>, role: &crate::core::manifest::TensorRole) -> Option<&'p TensorPlan> {
    let target = b.tensor(role.name).or_else(|| b.tensor(role.in_place?));
    target.filter(|t| t.role.is_judged())
}

/// The CPU reference of a case whose manifest binds a built-in op: `None` for a reference
/// kernel or none; an error when the binding does not fit the case's tensors.
pub fn cpu_op_reference(m: &Manifest, plan: &Plan, inputs: &Inputs) -> Option<Result<RefOutputs, BindingError>> {
    let ReferenceSpec::Op { op, bind } = &m.reference else { return None };
    let r = op_reference(*op);
    let b = Bound { bind, plan };
    Some((|| {
        let c = r.case(&b)?;
        let ri = role_inputs(*op, &b, inputs)?;
        let values = r.cpu(&c, &ri);
        Ok(op_expected(r, &c, &b, values, &ri))
    })())
}

/// The tensor of the case an op's GPU reference kernel `refm` reads in place as its input
/// `name`: the case's input bound to that role, when it has the reference tensor's rank. Any
/// other input (another rank, or a tensor the kernel under test writes, such as gemm's in-out
/// `c`) is read from a dense copy of the case's drawn values.
pub fn gpu_viewed<'p>(refm: &Manifest, b: &Bound<'p>, name: &str) -> Option<&'p TensorPlan> {
    let ref_t = refm.tensor(name).filter(|t| t.role == Role::Input)?;
    b.plan.tensor(b.bind.get(name)?).filter(|t| t.role == Role::Input && t.shape.len() == ref_t.rank())
}

/// The case an op's GPU reference kernel `refm` runs for op case `oc` of `case`: the op case's
/// dims and scalars, the case's element type and placement, and the layout of every input read
/// in place ([`gpu_viewed`]); `None` when a bound tensor's element type is not the one the
/// reference declares (it reads the case's values as they are stored, or not at all).
pub fn gpu_case(refm: &Manifest, b: &Bound<'_>, oc: &OpCase, case: &crate::core::case::Case) -> Option<crate::core::case::Case> {
    let mut rc = crate::core::case::Case::new(&refm.path.display().to_string(), case.dtype);
    rc.params = refm.default_params();
    rc.dims = oc.dims.clone();
    rc.scalars = oc.scalars.clone();
    rc.placement = case.placement;
    let inputs = || refm.tensors.iter().filter(|t| t.role == Role::Input);
    if !inputs().all(|t| b.tensor(&t.name).is_none_or(|c| c.dtype == t.dtype.resolve(rc.dtype))) {
        return None;
    }
    // The values read are the case's, whatever their classes: the layout names one the
    // reference accepts (an integer tensor allows only `uniform`).
    for t in inputs() {
        if let Some(case_t) = gpu_viewed(refm, b, &t.name) {
            let values = t.values.first().map_or_else(|| crate::core::case::TensorLayout::dense().values, |&v| vec![v]);
            rc.tensors.insert(t.name.clone(), crate::core::case::TensorLayout { values, ..case_t.layout.clone() });
        }
    }
    Some(rc)
}

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

/// The CPU references of a case whose manifest binds a built-in op; `None` for a reference
/// kernel (GPU only), no reference, or a binding that does not fit the case.
pub fn cpu_reference(m: &Manifest, plan: &Plan, inputs: &Inputs) -> Option<RefOutputs> {
    cpu_op_reference(m, plan, inputs)?.ok()
}

/// The largest finite `|x|` (0 when none).
pub fn peak(values: &[f64]) -> f64 {
    values.iter().filter(|x| x.is_finite()).fold(0.0f64, |a, &x| a.max(x.abs()))
}

/// The same-precision baseline rule: `bound = factor · max|baseline − gold| + floor`, over the
/// elements where both are finite (special values are judged by their pattern, not here).
pub fn baseline_tolerance(gold: &[f64], baseline: &[f64], factor: f64, floor: f64) -> Tolerance {
    let (g, b): (Vec<f64>, Vec<f64>) = gold.iter().zip(baseline).filter(|(g, b)| g.is_finite() && b.is_finite()).map(|(g, b)| (*g, *b)).unzip();
    let err_lowp = max_abs_diff(&b, &g);
    Tolerance { factor, err_lowp, floor, bound: factor * err_lowp + floor }
}

/// The unit roundoff the default floor of a user's reference scales with: the output's own,
/// except for an f64 output. There the same-precision baseline is the gold itself (no error to
/// scale), so the floor alone must admit a correct kernel's other summation order: `2⁻³²`,
/// about a billionth of the output's magnitude.
pub fn floor_roundoff(dtype: Dtype) -> f64 {
    if dtype == Dtype::F64 {
        2f64.powi(-32)
    } else {
        dtype.unit_roundoff()
    }
}

/// The default floor of a user's reference: `4 · u · max|gold|`, a few units in the last place
/// of the output's own magnitude ([`floor_roundoff`]), so an output far below 1 is judged at
/// its own scale, not at 1's.
pub fn default_floor(dtype: Dtype, gold: &[f64]) -> f64 {
    4.0 * floor_roundoff(dtype) * peak(gold)
}

/// The judged outputs of a case from a user reference kernel's two runs: per output, `gold` and
/// `baseline` values (logical order); the bound is `factor · max|baseline − gold| + floor`, the
/// floor the manifest's or [`default_floor`].
pub fn kernel_expected(factor: f64, floor: Option<f64>, plan: &Plan, runs: Vec<(usize, Vec<f64>, Vec<f64>)>) -> RefOutputs {
    let expected = runs
        .into_iter()
        .map(|(index, gold, baseline)| {
            let tp = &plan.tensors[index];
            let floor = floor.unwrap_or_else(|| default_floor(tp.dtype, &gold));
            let tol = baseline_tolerance(&gold, &baseline, factor, floor);
            Expected { index, name: tp.name.clone(), gold, rule: Rule::Bound(tol) }
        })
        .collect();
    RefOutputs { expected }
}

/// The manifest a reference run compiles and launches: the kernel's roster with every tensor
/// dense and fixed at offset 0, floating tensors f64 in the gold run, the reference's source,
/// entry, options and launch, and `CUDAFUZZ_REFERENCE=1`.
pub fn kernel_manifest(m: &Manifest, k: &ReferenceKernel, gold: bool) -> Manifest {
    let mut rm = dense_reference_manifest(m, gold);
    rm.source = k.source.clone();
    rm.entry = k.entry.clone();
    rm.options = k.options.clone();
    rm.launch = k.launch.clone();
    rm.build = crate::core::target::Build::Nvrtc;
    rm.defines.insert("CUDAFUZZ_REFERENCE".into(), 1);
    rm
}

/// The manifest a Python reference's run calls: [`kernel_manifest`]'s dense roster, with the
/// reference's callable as its target.
pub fn python_reference_manifest(m: &Manifest, r: &crate::core::manifest::PythonReference, gold: bool) -> Manifest {
    let mut rm = dense_reference_manifest(m, gold);
    rm.target = crate::core::target::Target::Python(Box::new(r.call.clone()));
    rm
}

/// The roster a reference run sees: every tensor dense and fixed at offset 0, floating tensors
/// f64 in the gold run; its own path (`#reference-gold` or `-baseline`) and no reference.
fn dense_reference_manifest(m: &Manifest, gold: bool) -> Manifest {
    let mut rm = m.clone();
    rm.path = std::path::PathBuf::from(format!("{}#reference-{}", m.path.display(), if gold { "gold" } else { "baseline" }));
    rm.reference = ReferenceSpec::None;
    // The reference is one launch of its own kernel, never the kernel's sequence.
    rm.steps = Vec::new();
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
pub fn reference_case(case: &crate::core::case::Case, rm: &Manifest, gold: bool) -> crate::core::case::Case {
    let mut rc = case.clone();
    rc.kernel = rm.path.display().to_string();
    rc.dtype = if gold { Dtype::F64 } else { case.dtype };
    rc.tensors.clear();
    rc.placement = crate::core::case::Placement::Guarded;
    rc
}
