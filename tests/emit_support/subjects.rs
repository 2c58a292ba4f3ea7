//! The subjects of the emit tests: a case of a shipped kernel each (or of a generic kernel with a
//! reference kernel of its own, written into a throwaway project), and what the library computes
//! for it ([`Expected`]), which the emitted files must embed.

use std::sync::Arc;

use cudafuzz::core::case::{Case, Dtype, Placement, Scalar, TensorLayout};
use cudafuzz::core::manifest::{Manifest, ReferenceSpec, ResolvedArg};
use cudafuzz::core::plan::Plan;
use cudafuzz::engine::arena::HostImage;
use cudafuzz::engine::reference::{cpu_reference, kernel_manifest, reference_case, Rule};
use cudafuzz::run::sanitizer::Tool;
use cudafuzz::tools::emit::SeedInfo;

use crate::common::root;

pub fn manifest(rel: &str) -> Manifest {
    Manifest::load(&root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A named case with its manifest and the sanitizer tool its repro is for.
pub struct Subject {
    pub name: &'static str,
    pub manifest: Manifest,
    pub case: Case,
    pub tool: Option<Tool>,
    /// Where a generated project lives (kept as long as the subject).
    _project: Option<Arc<tempfile::TempDir>>,
    /// An element of the first judged output that the stub tests get wrong.
    pub wrong_at: Vec<u64>,
}

/// A case of `m` with these dims and scalars, every tensor dense.
fn case_of(m: &Manifest, dtype: Dtype, dims: &[(&str, u64)], scalars: &[(&str, Scalar)]) -> Case {
    let mut c = Case::new("", dtype);
    for &(d, v) in dims {
        c.dims.insert(d.into(), v);
    }
    for &(s, v) in scalars {
        c.scalars.insert(s.into(), v);
    }
    m.bind(c)
}

/// The attention-only model's example: f16, batch 1, heads 2/1, seq 65 × 113, head_dim 64.
pub fn attention_case(m: &Manifest) -> Case {
    let dims = [("batch", 1), ("heads_kv", 1), ("heads_q", 2), ("seq_q", 65), ("seq_k", 113), ("head_dim", 64)];
    case_of(m, Dtype::F16, &dims, &[("causal", Scalar::Bool(false)), ("scale", Scalar::Float(0.125))])
}

fn subject(name: &'static str, manifest: Manifest, case: Case, tool: Option<Tool>) -> Subject {
    Subject { name, manifest, case, tool, _project: None, wrong_at: vec![0, 1, 3, 2] }
}

/// fa_s512's example case with q at +8 bytes: the seed's bug (716 at q's 16-byte load).
pub fn fa_s512_misaligned() -> Subject {
    let m = manifest("kernels/attention/fa_s512.toml");
    let mut case = attention_case(&m);
    case.layout_mut("q").offset_bytes = 8;
    subject("fa_s512_q8", m, case, None)
}

/// simple_attn, bf16, causal GQA, k in BSHD order with padding (stride gaps) at +6 bytes and o
/// padded at +2: exercises gaps, permuted orders and offsets.
pub fn simple_attn_strided() -> Subject {
    let m = manifest("kernels/testing/simple_attn.toml");
    let dims = [("batch", 1), ("heads_kv", 2), ("heads_q", 4), ("seq_q", 33), ("seq_k", 47), ("head_dim", 24)];
    let mut case = case_of(&m, Dtype::Bf16, &dims, &[("causal", Scalar::Bool(true)), ("scale", Scalar::Float(0.125))]);
    *case.layout_mut("k") = TensorLayout { order: vec![0, 2, 1, 3], pad: vec![0, 1, 0, 3], offset_bytes: 6, ..TensorLayout::dense() };
    *case.layout_mut("o") = TensorLayout { pad: vec![0, 0, 0, 5], offset_bytes: 2, ..TensorLayout::dense() };
    subject("simple_attn_strided", m, case, None)
}

/// A mutant of flash_fwd: more than 48 KB of shared memory (the opt-in attribute), an f32 `lse`
/// output (initially -inf) judged by its relative rule, headers included through `../` paths.
pub fn mutant_unchecked_vec() -> Subject {
    let m = manifest("kernels/mutants/unchecked_vec.toml");
    let mut case = attention_case(&m);
    case.dims.insert("seq_q".into(), 70);
    case.dims.insert("seq_k".into(), 90);
    case.layout_mut("v").offset_bytes = 4;
    subject("mutant_unchecked_vec", m, case, None)
}

/// The planted out-of-bounds read of oob_read_k (head_dim 40), laid out for memcheck.
pub fn oob_read_k_memcheck() -> Subject {
    let m = manifest("kernels/testing/oob_read_k.toml");
    let mut case = attention_case(&m);
    for (d, v) in [("head_dim", 40), ("seq_q", 9), ("seq_k", 17)] {
        case.dims.insert(d.into(), v);
    }
    subject("oob_read_k_memcheck", m, case, Some(Tool::Memcheck))
}

/// The fp64 reference kernel: no reference of its own, uninitialised f64 outputs and an NVRTC
/// option (`--fmad=false`).
pub fn attention_f64() -> Subject {
    let m = manifest("kernels/reference/attention_f64.toml");
    let mut case = attention_case(&m);
    case.dtype = Dtype::F32;
    case.dims.insert("seq_q".into(), 5);
    case.dims.insert("seq_k".into(), 7);
    subject("attention_f64", m, case, None)
}

const ROW_SCALE_TOML: &str = r#"format = 2
name = "row_scale"
description = "y = alpha * x * w + beta, s = the row sums of y; a reference kernel of its own"
source = "row_scale.cu"
entry = "row_scale"
fuzz = false
dtypes = ["f32", "f16", "bf16"]

[dims]
rows = { range = [1, 64] }
cols = { range = [1, 64] }

[scalars]
alpha = { type = "f32", choices = [0.5] }
beta = { type = "f32", choices = [0.25] }

[[tensors]]
name = "x"
role = "input"
shape = ["rows", "cols"]
layout = "strided"

[[tensors]]
name = "w"
role = "input"
shape = ["cols"]
dtype = "f32"
layout = "fixed"

[[tensors]]
name = "y"
role = "output"
shape = ["rows", "cols"]
layout = "strided"

[[tensors]]
name = "s"
role = "output"
shape = ["rows"]
dtype = "f32"
layout = "fixed"
init = "zero"

[reference]
source = "row_scale_ref.cu"
entry = "row_scale_ref"
factor = 2

[launch]
grid = ["rows", "1", "1"]
block = ["32", "1", "1"]
args = [
  { ptr = "x" }, { ptr = "w" }, { ptr = "y" }, { ptr = "s" }, { i32 = "rows" }, { u32 = "cols" },
  { i64 = "x.stride(0)" }, { i64 = "x.stride(1)" }, { u64 = "y.stride(0)" }, { i64 = "y.stride(1)" },
  { f32 = "alpha" }, { f64 = "beta" },
]
"#;

const ROW_SCALE_CU: &str = r#"#include "cudafuzz.cuh"
__device__ float row_scale_one(float x, float w, float alpha, double beta) { return alpha * x * w + (float)beta; }
extern "C" __global__ void row_scale(const CF_T_x* x, const float* w, CF_T_y* y, float* s, int rows, unsigned cols, long long xs0, long long xs1,
                                     unsigned long long ys0, long long ys1, float alpha, double beta) {
    int r = blockIdx.x;
    if (r >= rows || threadIdx.x != 0) return;
    float acc = 0.f;
    for (unsigned c = 0; c < cols; c++) {
        CF_T_y v = cf_from_float(row_scale_one(cf_to_float(x[r * xs0 + c * xs1]), w[c], alpha, beta));
        y[r * ys0 + c * ys1] = v;
        acc += cf_to_float(v);
    }
    s[r] = acc;
}
"#;

/// The reference: the same formulas over `CF_T_` pointers in `cf_acc`, with a helper and a
/// device variable of the same names in both copies (the namespaces keep them apart).
const ROW_SCALE_REF_CU: &str = r#"#include "cudafuzz.cuh"
__device__ int row_scale_calls;
__device__ cf_acc row_scale_one(cf_acc x, cf_acc w, float alpha, double beta) { return (cf_acc)alpha * x * w + (cf_acc)beta; }
extern "C" __global__ void row_scale_ref(const CF_T_x* x, const CF_T_w* w, CF_T_y* y, CF_T_s* s, int rows, unsigned cols, long long xs0, long long xs1,
                                         unsigned long long ys0, long long ys1, float alpha, double beta) {
    int r = blockIdx.x;
    if (r >= rows || threadIdx.x != 0) return;
    atomicAdd(&row_scale_calls, 1);
    cf_acc acc = 0;
    for (unsigned c = 0; c < cols; c++) {
        cf_store(&y[r * ys0 + c * ys1], (double)row_scale_one((cf_acc)cf_d(x[r * xs0 + c * xs1]), (cf_acc)cf_d(w[c]), alpha, beta));
        acc += (cf_acc)cf_d(y[r * ys0 + c * ys1]);
    }
    cf_store(&s[r], (double)acc);
}
"#;

/// A generic kernel with a reference kernel of its own, in a throwaway project (the repository's
/// `kernels/include` copied next to it): f32, x column-major and padded at +4 bytes, y padded
/// (stride gaps) at +8 bytes, a zero-initialised fixed f32 output, every argument kind.
pub fn row_scale() -> Subject {
    let dir = tempfile::tempdir().unwrap();
    let k = dir.path().join("kernels/testing");
    let inc = dir.path().join("kernels/include");
    std::fs::create_dir_all(&k).unwrap();
    std::fs::create_dir_all(&inc).unwrap();
    for h in ["cudafuzz.cuh", "cf_coverage.cuh"] {
        std::fs::copy(root().join("kernels/include").join(h), inc.join(h)).unwrap();
    }
    std::fs::write(k.join("row_scale.toml"), ROW_SCALE_TOML).unwrap();
    std::fs::write(k.join("row_scale.cu"), ROW_SCALE_CU).unwrap();
    std::fs::write(k.join("row_scale_ref.cu"), ROW_SCALE_REF_CU).unwrap();
    let m = Manifest::load(&k.join("row_scale.toml")).unwrap_or_else(|e| panic!("row_scale: {}", cudafuzz::core::error::chain(&e)));
    let mut case = case_of(&m, Dtype::F32, &[("rows", 3), ("cols", 5)], &[]);
    *case.layout_mut("x") = TensorLayout { order: vec![1, 0], pad: vec![0, 2], offset_bytes: 4, ..TensorLayout::dense() };
    *case.layout_mut("y") = TensorLayout { pad: vec![0, 3], offset_bytes: 8, ..TensorLayout::dense() };
    Subject { name: "row_scale", manifest: m, case, tool: None, _project: Some(Arc::new(dir)), wrong_at: vec![1, 2] }
}

/// The shipped silu_and_mul in f16 with padded rows: a user reference whose baseline run has the
/// kernel's element type, so both copies of the shared header hold the same overloads
/// (`cf_d(__half)`), which must not be ambiguous.
pub fn silu_f16() -> Subject {
    let m = manifest("kernels/activation/silu_and_mul.toml");
    let mut case = case_of(&m, Dtype::F16, &[("tokens", 3), ("d", 16)], &[]);
    *case.layout_mut("x") = TensorLayout { pad: vec![0, 2], offset_bytes: 2, ..TensorLayout::dense() };
    Subject { name: "silu_f16", manifest: m, case, tool: None, _project: None, wrong_at: vec![1, 2] }
}

pub fn subjects() -> Vec<Subject> {
    vec![fa_s512_misaligned(), simple_attn_strided(), mutant_unchecked_vec(), oob_read_k_memcheck(), attention_f64(), row_scale(), silu_f16()]
}

pub fn seed_info(s: &Subject, file_name: &str) -> SeedInfo {
    SeedInfo { path: format!("seeds/{}.json", s.name), file_name: file_name.to_string(), sanitizer: s.tool, ..SeedInfo::default() }
}

/// One program as the library lays it out: the kernel's case, or a reference run's.
pub struct ExpectedProgram {
    pub case: Case,
    pub plan: Plan,
    pub image: HostImage,
    pub args: Vec<ResolvedArg>,
}

/// What the library computes for a subject: its programs (the kernel, then a reference kernel's
/// gold and baseline runs) and the host gold of a built-in op, `(tensor, gold, rule)`.
pub struct Expected {
    pub programs: Vec<ExpectedProgram>,
    pub gold: Vec<(usize, Vec<f64>, Rule)>,
}

impl Expected {
    pub fn kernel(&self) -> &ExpectedProgram {
        &self.programs[0]
    }

    pub fn images(&self) -> Vec<&Vec<u8>> {
        self.programs.iter().flat_map(|p| &p.image.bytes).collect()
    }

    pub fn alloc_names(&self) -> Vec<String> {
        let prefixes = ["", "gold.", "baseline."];
        self.programs.iter().zip(prefixes).flat_map(|(p, pre)| p.plan.tensors.iter().map(move |t| format!("{pre}{}", t.name))).collect()
    }

    pub fn judged(&self) -> Vec<usize> {
        self.kernel().plan.tensors.iter().filter(|t| t.role.is_judged()).map(|t| t.index).collect()
    }
}

pub fn expected(s: &Subject) -> Expected {
    let mut case = s.case.clone();
    if s.tool == Some(Tool::Memcheck) {
        case.placement = Placement::Exact;
    }
    let m = &s.manifest;
    let plan = Plan::new(&case, m).unwrap();
    let inputs = cudafuzz::engine::data::generate(&case, &plan, m);
    let program = |m: &Manifest, case: Case, plan: Plan| {
        let args = m.resolve(&plan.vars).unwrap().args;
        let image = HostImage::build(&case, &plan, &inputs).held_whole();
        ExpectedProgram { case, plan, image, args }
    };
    let gold = cpu_reference(m, &plan, &inputs).map(|r| r.expected.into_iter().map(|e| (e.index, e.gold, e.rule)).collect()).unwrap_or_default();
    let mut programs = vec![program(m, case.clone(), plan)];
    if let ReferenceSpec::Kernel(k) = &m.reference {
        for gold in [true, false] {
            let rm = kernel_manifest(m, k, gold);
            let rc = reference_case(&case, &rm, gold);
            let rplan = Plan::new(&rc, &rm).unwrap();
            programs.push(program(&rm, rc, rplan));
        }
    }
    Expected { programs, gold }
}
