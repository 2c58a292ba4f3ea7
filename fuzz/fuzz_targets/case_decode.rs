//! Host target: any bytes decode into a valid case for any kernel, the case plans, the
//! constrained decoder stays inside the kernel's contract, and planning and reporting never
//! panic or overflow.
//!
//! The first byte picks the kernel: every shipped manifest, and a generic one written here
//! whose roster exercises what the attention kernels do not (rank 1 to 3 tensors, shapes that
//! are expressions, fixed and integer element types, a broadcast input, an in-out tensor, dims
//! tied by relations and a multiple, number scalars drawn from ranges). The second byte picks
//! the side of the contract.
#![no_main]

use std::sync::OnceLock;

use cudafuzz::core::case::Case;
use cudafuzz::core::generate::{decode_case, DecodeContext};
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::plan::{check_contract, Plan};
use libfuzzer_sys::fuzz_target;

/// A kernel over rows of groups of columns; only its manifest matters here (nothing compiles).
const GENERIC: &str = r#"
format = 2
name = "generic"
source = "generic.cu"
entry = "generic"
dtypes = ["f16", "bf16", "f32"]
requires = ["rows >= groups", "rows % groups == 0"]

[params]
BLOCK = [32, 64]

[dims]
groups = { range = [1, 8], cap = 4 }
rows = { range = [1, 4096], cap = 256, hints = [1, 31, 32, 33, "BLOCK"] }
cols = { range = [8, 1024], multiple = 8, max = 65536, hints = [8, 64, 1024] }

[scalars]
alpha = { type = "f32", choices = ["1 / sqrt(cols)", 1.0], weights = [3, 1] }
eps = { type = "f32", range = [1e-6, 1e-2] }
steps = { type = "int", range = [1, 4] }
flag = { type = "bool" }

[contract]
relations = ["cols <= 8 * BLOCK", "rows != 7"]
max_element_offset = 2147483647

[[tensors]]
name = "x"
role = "input"
shape = ["rows", "cols"]
align = 4
values = ["normal", "tiny", "zero", "nan"]

[[tensors]]
name = "gamma"
role = "input"
shape = ["cols"]
dtype = "f32"
layout = "dense"

[[tensors]]
name = "idx"
role = "input"
shape = ["rows"]
dtype = "i32"
range = ["0", "cols - 1"]

[[tensors]]
name = "w"
role = "input"
shape = ["groups", "rows / groups", "cols"]
layout = "inner"
broadcast = true

[[tensors]]
name = "y"
role = "in_out"
shape = ["rows", "cols"]

[[tensors]]
name = "stats"
role = "output"
shape = ["rows", "2"]
dtype = "f32"
layout = "fixed"
init = "zero"

[[tensors]]
name = "work"
role = "scratch"
shape = ["cdiv(cols, BLOCK)"]
dtype = "u8"
layout = "fixed"

[reference]
op = "none"

[launch]
grid = ["rows", "1", "1"]
block = ["BLOCK", "1", "1"]
args = [ { ptr = "x" }, { ptr = "gamma" }, { ptr = "idx" }, { ptr = "w" }, { ptr = "y" }, { ptr = "stats" }, { ptr = "work" },
         { i32 = "rows" }, { i64 = "x.stride(0)" }, { f32 = "alpha" }, { f32 = "eps" }, { i32 = "steps" } ]
"#;

/// Every shipped manifest and the generic one, each with its constrained and unconstrained
/// decoding context.
fn kernels() -> &'static [(Manifest, DecodeContext, DecodeContext)] {
    static KERNELS: OnceLock<Vec<(Manifest, DecodeContext, DecodeContext)>> = OnceLock::new();
    KERNELS.get_or_init(|| {
        // The manifest only needs its source to exist while it loads; the folder goes with `dir`.
        let dir = tempfile::Builder::new().prefix("cudafuzz-case-decode-").tempdir().expect("temp dir");
        std::fs::write(dir.path().join("generic.cu"), "").expect("temp file");
        let generic = Manifest::from_toml(&dir.path().join("generic.toml"), GENERIC).unwrap_or_else(|e| panic!("{e}"));
        drop(dir);
        let shipped = cudafuzz::core::registry::shipped().into_iter().map(|m| m.unwrap_or_else(|e| panic!("{e}")));
        std::iter::once(generic)
            .chain(shipped)
            .map(|m| {
                let ctx = DecodeContext::new(&m);
                let anywhere = ctx.unconstrained();
                (m, ctx, anywhere)
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let ks = kernels();
    let (pick, data) = data.split_first().unwrap_or((&0, data));
    let (side, data) = data.split_first().unwrap_or((&0, data));
    let (m, constrained, anywhere) = &ks[*pick as usize % ks.len()];
    let inside = side % 2 == 0;
    let ctx = if inside { constrained } else { anywhere };
    let case = decode_case(&mut arbitrary::Unstructured::new(data), ctx).expect("decoding never fails");
    case.validate().expect("every decoded case is valid");
    let plan = Plan::new(&case, m).unwrap_or_else(|e| panic!("{}: a decoded case does not plan: {e}\n{}", m.name, case.summary()));
    let verdict = check_contract(m, &case, &plan);
    assert!(!inside || verdict.is_inside(), "{}: decoded outside its contract: {verdict:?}\n{}", m.name, case.summary());
    for tp in &plan.tensors {
        assert!(tp.span_bytes >= tp.stored_elements() * tp.elem_bytes as u64, "{}: span {} of {}", m.name, tp.span_bytes, tp.name);
        assert!(tp.base_residue < 16);
        let _ = tp.alignment();
    }
    let _ = m.resolve(&plan.vars);
    let _ = cudafuzz::tools::report::plan_table(&case, &plan);
    let json = serde_json::to_string(&case).expect("serializes");
    let back: Case = serde_json::from_str(&json).expect("round-trips");
    assert_eq!(back, case);
});
