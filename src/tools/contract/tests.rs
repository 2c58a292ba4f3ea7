//! Probe planning and summarising, with synthetic verdicts from simulated kernels (no GPU).

use std::collections::BTreeSet;
use std::path::Path;

use super::*;
use crate::core::case::{Dtype, Scalar};
use crate::core::finding::{Finding, FindingKind, Location, Oracle};
use crate::core::verdict::Outcome;

fn manifest(rel: &str) -> Manifest {
    Manifest::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

fn finding(m: &Manifest, case: &Case, kind: FindingKind, oracle: Oracle, tensor: Option<&str>, cuda_error: Option<&str>) -> Finding {
    Finding {
        tensor: tensor.map(String::from),
        location: tensor.map(|_| Location::Element { index: vec![0; 4] }),
        cuda_error: cuda_error.map(String::from),
        alignment: Plan::new(case, m).unwrap().alignments(),
        ..Finding::new(kind, oracle, "fake", "simulated".into())
    }
}

fn fail(f: Finding) -> Outcome {
    Outcome::Fail { findings: vec![f] }
}

fn misaligned(m: &Manifest, case: &Case, t: &str) -> Outcome {
    fail(finding(m, case, FindingKind::MisalignedAddress, Oracle::CudaStatus, Some(t), Some("CUDA_ERROR_MISALIGNED_ADDRESS (716)")))
}

/// What fa_s512 does, as its README describes it: 16-byte accesses to every tensor (716 when a
/// base or stepped stride is not 16-byte aligned), nothing written unless head_dim is 64, keys
/// past 512 ignored, an innermost stride assumed 1, no f32 build.
fn fake_fa_s512(m: &Manifest, case: &Case) -> Outcome {
    if case.dtype == Dtype::F32 {
        return Outcome::Error { message: "compile failed: fa_s512.cu: #error f16/bf16 only\nmore log".into() };
    }
    let plan = Plan::new(case, m).unwrap();
    if let Some(tp) = plan.tensors.iter().find(|tp| tp.alignment() < 16) {
        return misaligned(m, case, &tp.name);
    }
    if case.dim("head_dim") != 64 {
        return fail(finding(m, case, FindingKind::UnwrittenOutput, Oracle::Sentinel, Some("o"), None));
    }
    let strided = plan.tensors.iter().any(|tp| tp.strides[3] != 1);
    if case.dim("seq_k") > 512 || strided {
        return fail(finding(m, case, FindingKind::NumericalError, Oracle::Reference, Some("o"), None));
    }
    Outcome::Pass
}

fn run(m: &Manifest, plan: &ProbePlan, kernel: impl Fn(&Manifest, &Case) -> Outcome) -> Inference {
    let base: Vec<Outcome> = plan.base_cases.iter().map(|c| kernel(m, c)).collect();
    let outcomes: Vec<Vec<Outcome>> = plan.probes.iter().map(|p| p.cases.iter().map(|c| kernel(m, c)).collect()).collect();
    summarise(m, plan, &base, &outcomes)
}

fn sentences(inf: &Inference) -> Vec<(&str, bool)> {
    inf.preconditions.iter().map(|p| (p.sentence.as_str(), p.declared)).collect()
}

fn values(plan: &ProbePlan, f: Family) -> Vec<String> {
    plan.probes.iter().filter(|p| p.family == f).map(|p| p.family.describe(&p.value)).collect()
}

/// A rows × cols kernel with tensors of rank 1 and 2, every layout kind, a fixed-type side
/// buffer, a tile-hinted dim with a multiple, and a contract relation: nothing attention-shaped.
fn rownorm() -> (tempfile::TempDir, Manifest) {
    let dir = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/testing/simple_attn.cu");
    let toml = format!(
        r#"format = 2
name = "rownorm"
description = "a row-wise normalisation (test fixture)"
source = "{}"
entry = "rownorm"
dtypes = ["f16", "f32"]

[params]
BLOCK = [256, 128]

[dims]
rows = {{ range = [1, 65536] }}
cols = {{ range = [2, 8192], multiple = 2, hints = ["BLOCK"] }}

[scalars]
eps = {{ type = "f32", choices = [0.00001] }}
affine = {{ type = "bool" }}

[contract]
relations = ["cols <= 4096"]

[[tensors]]
name = "x"
role = "input"
shape = ["rows", "cols"]
layout = "inner"
align = 4

[[tensors]]
name = "w"
role = "input"
shape = ["cols"]
layout = "dense"

[[tensors]]
name = "y"
role = "output"
shape = ["rows", "cols"]
layout = "strided"

[[tensors]]
name = "stats"
role = "output"
shape = ["rows", "2"]
dtype = "f32"
layout = "fixed"

[reference]
op = "none"

[launch]
grid = ["rows", "1", "1"]
block = ["BLOCK", "1", "1"]
args = [{{ ptr = "x" }}, {{ ptr = "w" }}, {{ ptr = "y" }}, {{ ptr = "stats" }}, {{ i32 = "rows" }}, {{ i32 = "cols" }}, {{ f32 = "eps" }}, {{ i32 = "affine" }}, {{ i64 = "x.stride(0)" }}, {{ i64 = "y.stride(0)" }}]
"#,
        source.display()
    );
    let path = dir.path().join("rownorm.toml");
    std::fs::write(&path, toml).unwrap();
    let m = Manifest::load(&path).unwrap();
    (dir, m)
}

#[test]
fn the_base_is_the_smallest_aligned_case_inside_the_contract() {
    let m = manifest("kernels/attention/fa_s512.toml");
    let base = base_case(&m).unwrap();
    let dims: Vec<u64> = ["batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim"].iter().map(|d| base.dim(d)).collect();
    assert_eq!(dims, [1, 1, 1, 1, 1, 64], "no tile hint: each dim at its smallest: {}", base.summary());
    assert_eq!((base.dtype, base.tensors.is_empty(), base.seed), (Dtype::F16, true, 1), "dense at offset 0");
    assert_eq!(base.scalar("causal"), Some(Scalar::Bool(false)));
    assert_eq!(base.scalar("scale"), Some(Scalar::Float(0.125)), "the default 1 / sqrt(head_dim)");
    let m = manifest("kernels/attention/flash_fwd.toml");
    let flash = base_case(&m).unwrap();
    assert_eq!((flash.dim("head_dim"), flash.dim("seq_q"), flash.dim("seq_k")), (8, 64, 64), "16-byte rows; one tile of the default BLOCK_M/BLOCK_N");
    assert_eq!(flash.params, m.default_params());
}

#[test]
fn the_base_keeps_relations_and_multiples_and_pads_rows_the_dims_cannot_align() {
    let mut m = manifest("kernels/attention/flash_fwd.toml");
    m.contract.relations = vec!["seq_k >= 2 * seq_q".into(), "head_dim % 3 == 0".into()];
    let base = base_case(&m).unwrap();
    assert_eq!((base.dim("seq_q"), base.dim("seq_k"), base.dim("head_dim")), (64, 128, 24), "{}", base.summary());
    assert!(crate::core::plan::admits(&m, &base));
    // head_dim fixed at 59 (118-byte rows): padded to 64 elements where the layout allows it.
    let mut m = manifest("kernels/attention/flash_fwd.toml");
    m.dims.iter_mut().find(|d| d.name == "head_dim").unwrap().range = [59, 59];
    let base = base_case(&m).unwrap();
    assert_eq!(base.layout("q").pad, [0, 0, 0, 5], "{}", base.summary());
    let plan = Plan::new(&base, &m).unwrap();
    assert!(plan.tensors.iter().filter(|t| t.drawn).all(|t| pitch_bytes(t).is_multiple_of(16)));
    let (_dir, m) = rownorm();
    let base = base_case(&m).unwrap();
    assert_eq!((base.dim("rows"), base.dim("cols")), (1, 256), "{}", base.summary());
}

#[test]
fn probes_vary_one_property_each_and_say_which_side_of_the_contract_they_are() {
    let m = manifest("kernels/attention/fa_s512.toml");
    let plan = plan_probes(&m, 3).unwrap();
    assert_eq!(plan.base_cases.len(), 3);
    let wide = widened(&plan.base, &m);
    for p in &plan.probes {
        assert_eq!(p.cases.len(), 3, "{}", p.family);
        assert_ne!(p.value, p.family.measure(&plan.base, &m), "{}: a probe must change its property", p.family);
        for c in &p.cases {
            Plan::new(c, &m).unwrap_or_else(|e| panic!("{} {}: {e}", p.family, p.value));
            assert_eq!(p.family.measure(c, &m), p.value, "{}: replicas keep the probed value", p.family);
        }
        assert_eq!(p.declared_inside, p.cases.iter().all(|c| crate::core::plan::admits(&m, c)), "{} {}", p.family, p.value);
        // A layout probe changes only its tensor's layout, from the base or the widened base.
        if let Some(t) = p.family.tensor().filter(|_| !matches!(p.family, Family::ElementOffset(_))) {
            let from = if p.cases[0].dims == plan.base.dims { &plan.base } else { &wide };
            assert_eq!(p.cases[0].dims, from.dims, "{}", p.family);
            let others = |c: &Case| c.tensors.iter().filter(|(n, _)| *n != t).map(|(n, l)| (n.clone(), l.clone())).collect::<Vec<_>>();
            assert_eq!(others(&p.cases[0]), others(from), "{}", p.family);
        }
    }
    assert_eq!(values(&plan, Family::Offset("k".into())), ["2 B", "4 B", "8 B", "16 B"]);
    assert_eq!(values(&plan, Family::Pitch("q".into())), ["130 B", "132 B", "136 B", "144 B"]);
    assert_eq!(values(&plan, Family::Dim("seq_k".into())), ["2", "3", "5", "9", "512", "513"]);
    assert_eq!(values(&plan, Family::Dim("head_dim".into())), ["1", "2", "63", "65", "66", "68", "72"]);
    assert_eq!(values(&plan, Family::Dtype), ["bf16", "f32"]);
    assert_eq!(values(&plan, Family::InnerStride("v".into())), ["0132", "3012"]);
    assert_eq!(values(&plan, Family::Order("o".into())), ["0213", "1023", "2013"]);
    assert_eq!(values(&plan, Family::Broadcast("k".into())), ["batch", "heads_kv", "seq_k"]);
    assert!(values(&plan, Family::Broadcast("o".into())).is_empty(), "outputs are never broadcast");
    // align = 2 is what fa_s512's authors believed: the misaligned offsets are inside.
    let offset_8 = plan.probes.iter().find(|p| p.family == Family::Offset("q".into()) && p.value == Value::Num(8)).unwrap();
    assert!(offset_8.declared_inside);
    assert!(!plan.probes.iter().find(|p| p.family == Family::Dim("head_dim".into())).unwrap().declared_inside);
    let mut expect = plan.base.clone();
    expect.layout_mut("q").offset_bytes = 8;
    assert_eq!(offset_8.cases[0], expect, "one property at a time");
    assert!(plan.total_cases() > 200 && plan.total_cases() < 400, "{}", plan.total_cases());
    let text = render_plan(&plan);
    assert!(text.contains("probe plan for fa_s512:") && text.contains("q base offset"), "{text}");
}

#[test]
fn dim_probes_keep_the_requires_and_replicas_grow_the_outer_dims() {
    let m = manifest("kernels/attention/flash_fwd.toml");
    let plan = plan_probes(&m, 3).unwrap();
    // heads_q % heads_kv == 0 is required: heads_q follows a probed heads_kv.
    for p in plan.probes.iter().filter(|p| p.family == Family::Dim("heads_kv".into())) {
        let c = &p.cases[0];
        assert_eq!(c.dim("heads_q") % c.dim("heads_kv"), 0, "{}", c.summary());
    }
    assert!(values(&plan, Family::Dim("heads_kv".into())).contains(&"16384".to_string()));
    // heads_q = 3 cannot share the widened heads_kv = 2: it is probed from the base (GQA 3:1).
    assert_eq!(values(&plan, Family::Dim("heads_q".into())), ["2", "3", "5", "9", "16384"]);
    let gqa = plan.probes.iter().find(|p| p.family == Family::Dim("heads_q".into()) && p.value == Value::Num(3)).unwrap();
    assert_eq!((gqa.cases[0].dim("heads_kv"), gqa.cases[0].dim("batch")), (1, 1));
    let seq_q = values(&plan, Family::Dim("seq_q".into()));
    for v in ["1", "63", "65", "129", "16384", "16385"] {
        assert!(seq_q.contains(&v.to_string()), "tile ± 1, two tiles + 1, the maximum and past it: {seq_q:?}");
    }
    // The second replica doubles batch and heads (seq_q and seq_k are tied to tiles).
    let r = &plan.base_cases[1];
    assert_eq!((r.dim("batch"), r.dim("heads_kv"), r.dim("heads_q"), r.dim("seq_q"), r.seed), (2, 2, 2, 64, 2), "{}", r.summary());
    let batch = plan.probes.iter().find(|p| p.family == Family::Dim("batch".into()) && p.value == Value::Num(3)).unwrap();
    assert_eq!((batch.cases[0].dim("batch"), batch.cases[0].dim("heads_q")), (3, 2), "dims probe from the widened base");
    assert_eq!((batch.cases[1].dim("batch"), batch.cases[1].dim("heads_q")), (3, 4), "the probed dim is pinned");
    let causal = plan.probes.iter().find(|p| p.family == Family::Flag("causal".into())).unwrap();
    assert!(causal.cases.iter().all(|c| c.scalar("causal") == Some(Scalar::Bool(true))), "a probed flag survives growth");
    let head = plan.probes.iter().find(|p| p.family == Family::Dim("head_dim".into()) && p.value == Value::Num(16)).unwrap();
    assert_eq!(head.cases[0].scalar("scale"), Some(Scalar::Float(0.25)), "scale follows its default 1 / sqrt(head_dim)");
    assert!(plan.probes.iter().all(|p| p.cases.iter().all(|c| footprint(c, &m) <= MAX_PROBE_BYTES)));
}

#[test]
fn fa_s512_preconditions_from_simulated_verdicts() {
    let m = manifest("kernels/attention/fa_s512.toml");
    let inf = run(&m, &plan_probes(&m, 3).unwrap(), fake_fa_s512);
    assert_eq!(inf.base_failure, None);
    eprintln!("{}{}", render_table(&inf), render_preconditions(&inf));
    assert_eq!(
        sentences(&inf),
        [
            ("q, k, v, o base must be 16-byte aligned", false),
            ("q, k, v, o row pitch must be a multiple of 16 bytes (8 elements)", false),
            ("q, k, v, o innermost stride must be 1", true),
            ("seq_k must be ≤ 512", true),
            ("head_dim must be 64", true),
            ("dtype must be one of bf16, f16", true),
        ],
        "{}",
        render_preconditions(&inf)
    );
    let aligned = &inf.preconditions[0];
    assert_eq!(aligned.evidence, "fails at offset 2, 4, 8 bytes: CUDA error 716 (misaligned_address)");
    assert!(aligned.consistent);
    let ex = aligned.example.as_ref().unwrap();
    assert_eq!((ex.case.dim("batch"), ex.case.dim("heads_q")), (1, 1), "the minimal replica");
    assert_eq!(ex.finding.as_ref().unwrap().kind, FindingKind::MisalignedAddress);
    assert!(inf.preconditions[4].evidence.contains("unwritten_output in o (sentinel)"), "{}", inf.preconditions[4].evidence);
    assert_eq!(inf.preconditions[5].example.as_ref().unwrap().error.as_deref(), Some("compile failed: fa_s512.cu: #error f16/bf16 only"));
    assert_eq!(inf.undeclared(), 2);
    assert!(inf.relaxations.contains(&"seq_q 513 passes although the declared contract excludes it".to_string()), "{:?}", inf.relaxations);
    assert!(inf.relaxations.contains(&"q, k, v broadcast batch passes although the declared contract excludes it".to_string()), "{:?}", inf.relaxations);
    let text = render_preconditions(&inf);
    assert!(text.contains("q, k, v, o base must be 16-byte aligned  [NOT DECLARED"), "{text}");
    let table = render_table(&inf);
    assert!(table.lines().any(|l| l.starts_with("q base offset") && l.contains(" 2 B ") && l.contains("FAIL 3/3") && l.contains("unaligned:q")), "{table}");
    serde_json::to_string(&inf).unwrap();
}

#[test]
fn a_kernel_that_passes_everything_has_no_preconditions_and_reports_relaxations() {
    let m = manifest("kernels/attention/fa_s512.toml");
    let inf = run(&m, &plan_probes(&m, 2).unwrap(), |_, _| Outcome::Pass);
    assert!(inf.preconditions.is_empty());
    assert!(inf.relaxations.iter().any(|r| r == "head_dim 65 passes although the declared contract excludes it"), "{:?}", inf.relaxations);
    assert!(inf.relaxations.iter().any(|r| r == "q, k, v, o innermost stride 0132 passes although the declared contract excludes it"), "{:?}", inf.relaxations);
}

#[test]
fn a_failing_base_stops_inference() {
    let m = manifest("kernels/attention/fa_s512.toml");
    let plan = plan_probes(&m, 1).unwrap();
    let inf = run(&m, &plan, |m, c| {
        let mut c = c.clone();
        c.layout_mut("q").offset_bytes = 2;
        fake_fa_s512(m, &c)
    });
    assert!(inf.base_failure.as_deref().unwrap().contains("CUDA error 716"));
    assert!(inf.preconditions.is_empty());
    assert!(render_preconditions(&inf).contains("the base case fails inside the declared contract"));
}

#[test]
fn flaky_failures_are_marked_and_single_tensor_preconditions_stay_apart() {
    let m = manifest("kernels/testing/vec_load_q.toml");
    let plan = plan_probes(&m, 3).unwrap();
    // Only q is loaded with 16-byte vectors, and only the first replica (seed) fails at +2.
    let inf = run(&m, &plan, |m, c| {
        let q = Plan::new(c, m).unwrap().tensor("q").unwrap().clone();
        let flaky = q.offset_bytes == 2 && c.seed != 1;
        if q.alignment() < 16 && !flaky {
            misaligned(m, c, "q")
        } else {
            Outcome::Pass
        }
    });
    assert_eq!(
        sentences(&inf),
        [
            ("q base must be 16-byte aligned", false),
            ("q row pitch must be a multiple of 16 bytes (8 elements)", false),
            ("q innermost stride must be 1", false),
            // head_dim 1..256 in f16: the q row pitch misaligns every head_dim not a multiple of 8.
            ("head_dim must be a multiple of 8", false),
        ],
        "{}",
        render_preconditions(&inf)
    );
    let base = &inf.preconditions[0];
    assert!(!base.consistent && base.evidence.ends_with("(not every replica failed the same way)"), "{}", base.evidence);
    assert!(inf.preconditions.iter().all(|p| !p.sentence.starts_with('k')));
}

/// Nothing attention-shaped: a rank-1 dense input, a rank-2 `inner` input with a 4-byte
/// alignment, a rank-2 strided output the kernel (wrongly) loads in 16-byte vectors, and a fixed
/// side buffer that is never probed.
#[test]
fn a_row_kernel_gets_probes_per_tensor_and_per_dim_and_declared_marks() {
    let (_dir, m) = rownorm();
    let plan = plan_probes(&m, 3).unwrap();
    let families: Vec<String> = plan.families().iter().map(|f| f.to_string()).collect();
    for f in [
        "x base offset",
        "w base offset",
        "y base offset",
        "x row pitch",
        "y row pitch",
        "x innermost stride",
        "x broadcast",
        "x largest element offset",
        "rows",
        "cols",
        "dtype",
        "affine",
        "BLOCK",
    ] {
        assert!(families.contains(&f.to_string()), "{f} missing: {families:?}");
    }
    for f in ["w row pitch", "x order", "y broadcast", "w broadcast", "eps"] {
        assert!(!families.contains(&f.to_string()), "{f}: {families:?}");
    }
    assert!(families.iter().all(|f| !f.starts_with("stats")), "a fixed buffer is never probed: {families:?}");
    assert_eq!(values(&plan, Family::Dim("cols".into())), ["1", "2", "3", "255", "257", "258", "260", "264", "513", "8192", "8193"]);
    assert_eq!(values(&plan, Family::Broadcast("x".into())), ["rows"]);
    let inf = run(&m, &plan, |m, c| {
        let plan = Plan::new(c, m).unwrap();
        match (plan.tensor("x").unwrap().alignment(), plan.tensor("y").unwrap().alignment()) {
            (a, _) if a < 4 => misaligned(m, c, "x"),
            (_, a) if a < 16 => misaligned(m, c, "y"),
            _ => Outcome::Pass,
        }
    });
    eprintln!("{}{}", render_table(&inf), render_preconditions(&inf));
    assert_eq!(
        sentences(&inf),
        [
            ("x base must be 4-byte aligned", true),
            ("y base must be 16-byte aligned", false),
            ("x row pitch must be a multiple of 4 bytes (2 elements)", true),
            ("y row pitch must be a multiple of 16 bytes (8 elements)", false),
            ("x, y innermost stride must be 1", false),
            ("cols must be a multiple of 8", false),
        ],
        "{}",
        render_preconditions(&inf)
    );
    assert!(inf.relaxations.iter().any(|r| r == "dtype bf16 passes although the declared contract excludes it"), "{:?}", inf.relaxations);
}

#[test]
fn numeric_rules() {
    let set = |v: &[i64]| v.iter().copied().collect::<BTreeSet<i64>>();
    let r = numeric_rule(&set(&[0, 16]), &set(&[2, 4, 8]));
    assert_eq!(r, NumRule { multiple: Some(16), ..NumRule::default() });
    let r = numeric_rule(&set(&[64]), &set(&[56, 63, 65, 128]));
    assert_eq!((r.min, r.max, r.multiple), (Some(64), Some(64), None));
    let r = numeric_rule(&set(&[8, 16, 256]), &set(&[1, 2, 7, 9, 12, 255, 257, 512]));
    assert_eq!(r, NumRule { max: Some(256), multiple: Some(8), ..NumRule::default() });
    let r = numeric_rule(&set(&[1, 5, 9]), &set(&[3, 4]));
    assert_eq!(r, NumRule { unexplained: vec![3, 4], ..NumRule::default() });
    let r = numeric_rule(&set(&[]), &set(&[3]));
    assert_eq!(r.unexplained, [3]);
}

#[test]
fn a_base_outside_the_contract_is_a_typed_error() {
    let mut m = manifest("kernels/attention/flash_fwd.toml");
    let q = m.tensors.iter_mut().find(|t| t.name == "q").unwrap();
    q.layout = crate::core::manifest::LayoutFreedom::Dense;
    q.align = 256;
    let e = plan_probes(&m, 1).unwrap_err();
    assert!(matches!(e, InferError::NoBase { .. }), "{e}");
    assert!(e.to_string().contains("no base case inside the declared contract"), "{e}");
}

/// A kernel with 32-bit offsets: every tensor's probe past 2³¹ elements faults, and the
/// precondition names the contract key that declares it.
#[test]
fn a_kernel_indexing_in_32_bits_is_told_to_declare_max_element_offset() {
    let int32 = |m: &Manifest, case: &Case| {
        let plan = Plan::new(case, m).unwrap();
        match plan.tensors.iter().find(|tp| tp.reaches_past_int32()) {
            Some(tp) => fail(finding(m, case, FindingKind::IllegalAddress, Oracle::CudaStatus, Some(&tp.name), Some("CUDA_ERROR_ILLEGAL_ADDRESS (700)"))),
            None => Outcome::Pass,
        }
    };
    let mut m = manifest("kernels/mutants/int32_offset.toml");
    let inf = run(&m, &plan_probes(&m, 3).unwrap(), int32);
    let sentence = "q, k, v, o element offsets must stay below 2^31: the kernel indexes in 32 bits (declare max_element_offset = 2147483647)";
    assert_eq!(sentences(&inf), [(sentence, false)], "{}", render_preconditions(&inf));
    assert!(inf.preconditions[0].evidence.contains("CUDA error 700"), "{}", inf.preconditions[0].evidence);
    m.contract.max_element_offset = Some((1 << 31) - 1);
    let inf = run(&m, &plan_probes(&m, 3).unwrap(), int32);
    assert_eq!(sentences(&inf), [(sentence, true)]);
}

/// fa_accum takes one sequence length (`seq_k == seq_q` in its contract): probing seq_k alone
/// fails at every value but the base's, and the precondition is the relation, not that value.
#[test]
fn a_dim_tied_to_another_by_a_relation_is_reported_as_the_relation() {
    let m = manifest("kernels/attention/fa_accum.toml");
    let plan = plan_probes(&m, 2).unwrap();
    let inf = run(&m, &plan, |m, c| {
        if c.dim("seq_k") != c.dim("seq_q") {
            fail(finding(m, c, FindingKind::NumericalError, Oracle::Reference, Some("o"), None))
        } else {
            Outcome::Pass
        }
    });
    assert_eq!(sentences(&inf), [("`seq_k == seq_q` must hold", true)], "{:?}", inf.preconditions);
}
