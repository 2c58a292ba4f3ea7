//! Probe planning and summarising, with synthetic verdicts from simulated kernels (no GPU).

use std::collections::BTreeSet;
use std::path::Path;

use super::*;
use crate::finding::{Finding, FindingKind, Location, Oracle};
use crate::oracle::alignment_of;
use crate::worker::Outcome;

fn manifest(rel: &str) -> Manifest {
    Manifest::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

fn finding(case: &Case, kind: FindingKind, oracle: Oracle, tensor: Option<TensorId>, cuda_error: Option<&str>) -> Finding {
    Finding {
        kind,
        oracle,
        kernel: "fake".into(),
        tensor,
        location: tensor.map(|_| Location::Element { index: [0; 4] }),
        count: 1,
        cuda_error: cuda_error.map(String::from),
        source: None,
        access_size: None,
        sanitizer_kind: None,
        alignment: alignment_of(&Plan::new(case)),
        inside_contract: true,
        detail: "simulated".into(),
    }
}

/// What fa_s512 does, as its README describes it: 16-byte accesses to every tensor (716 when a
/// base or stepped stride is not 16-byte aligned), nothing written unless head_dim is 64, keys
/// past 512 ignored, stride_d assumed 1, no f32 build.
fn fake_fa_s512(case: &Case) -> Outcome {
    if case.dtype == Dtype::F32 {
        return Outcome::Error { message: "compile failed: fa_s512.cu: #error f16/bf16 only\nmore log".into() };
    }
    let plan = Plan::new(case);
    if let Some(tp) = plan.tensors.iter().find(|tp| tp.alignment() < 16) {
        let f = finding(case, FindingKind::MisalignedAddress, Oracle::CudaStatus, Some(tp.tensor), Some("CUDA_ERROR_MISALIGNED_ADDRESS (716)"));
        return Outcome::Fail { findings: vec![f] };
    }
    if case.head_dim != 64 {
        return Outcome::Fail { findings: vec![finding(case, FindingKind::UnwrittenOutput, Oracle::Sentinel, Some(TensorId::O), None)] };
    }
    let strided_d = TensorId::ALL.iter().any(|&t| plan.tensor(t).stride(Dim::D) != 1);
    if case.seq_k > 512 || strided_d {
        return Outcome::Fail { findings: vec![finding(case, FindingKind::NumericalError, Oracle::Reference, Some(TensorId::O), None)] };
    }
    Outcome::Pass
}

fn run(plan: &ProbePlan, kernel: impl Fn(&Case) -> Outcome) -> Inference {
    let base: Vec<Outcome> = plan.base_cases.iter().map(&kernel).collect();
    let outcomes: Vec<Vec<Outcome>> = plan.probes.iter().map(|p| p.cases.iter().map(&kernel).collect()).collect();
    summarise(plan, &base, &outcomes)
}

fn sentences(inf: &Inference) -> Vec<(&str, bool)> {
    inf.preconditions.iter().map(|p| (p.sentence.as_str(), p.declared)).collect()
}

#[test]
fn the_base_is_the_smallest_aligned_case_inside_the_contract() {
    let m = manifest("kernels/attention/fa_s512.toml");
    let base = base_case(&m).unwrap();
    assert_eq!((base.batch, base.heads_q, base.heads_kv, base.seq_q, base.seq_k, base.head_dim), (1, 1, 1, 64, 64, 64));
    assert_eq!((base.dtype, base.causal, base.layouts.clone()), (Dtype::F16, false, Layouts::contiguous()));
    let flash = base_case(&manifest("kernels/attention/flash_fwd.toml")).unwrap();
    assert_eq!((flash.head_dim, flash.seq_k), (8, 64), "smallest head_dim with 16-byte rows; BLOCK_N's default");
    assert_eq!(flash.params, manifest("kernels/attention/flash_fwd.toml").default_params());
}

#[test]
fn probes_vary_one_property_each_and_say_which_side_of_the_contract_they_are() {
    let m = manifest("kernels/attention/fa_s512.toml");
    let plan = plan_probes(&m, 3).unwrap();
    assert_eq!(plan.base_cases.len(), 3);
    for p in &plan.probes {
        assert_eq!(p.cases.len(), 3, "{}", p.family);
        assert_ne!(p.value, p.family.measure(&plan.base), "{}: a probe must change its property", p.family);
        for c in &p.cases {
            c.validate().unwrap_or_else(|e| panic!("{} {}: {e}", p.family, p.value));
            assert_eq!(p.family.measure(c), p.value, "replicas keep the probed value");
        }
        let inside = p.cases.iter().all(|c| m.contract.admits(c));
        assert_eq!(p.declared_inside, inside, "{} {}", p.family, p.value);
    }
    let values = |f: Family| -> Vec<String> { plan.probes.iter().filter(|p| p.family == f).map(|p| p.family.describe(&p.value)).collect() };
    assert_eq!(values(Family::Offset(TensorId::K)), ["2 B", "4 B", "8 B", "16 B"]);
    assert_eq!(values(Family::Pitch(TensorId::Q)), ["130 B", "132 B", "136 B", "144 B"]);
    assert_eq!(values(Family::SeqK), ["1", "2", "63", "65", "129", "512", "513"]);
    assert_eq!(values(Family::HeadDim), ["56", "63", "65", "66", "68", "72", "128"]);
    assert_eq!(values(Family::Dtype), ["bf16", "f32"]);
    assert_eq!(values(Family::InnerStride(TensorId::V)), ["bhds", "dbhs"]);
    assert_eq!(values(Family::Order(TensorId::O)), ["bshd", "hbsd", "sbhd"]);
    // min_align 2 is what fa_s512's authors believed: the misaligned offsets are inside.
    let offset_8 = plan.probes.iter().find(|p| p.family == Family::Offset(TensorId::Q) && p.value == Value::Num(8)).unwrap();
    assert!(offset_8.declared_inside);
    assert!(!plan.probes.iter().find(|p| p.family == Family::HeadDim).unwrap().declared_inside);
    // One property at a time: an offset probe differs from the base only in that offset.
    let mut expect = plan.base.clone();
    expect.layouts.q.offset_bytes = 8;
    assert_eq!(offset_8.cases[0], expect);
    assert!(plan.total_cases() > 200 && plan.total_cases() < 400, "{}", plan.total_cases());
    let text = render_plan(&plan);
    assert!(text.contains("probe plan for fa_s512:") && text.contains("q base offset"), "{text}");
}

#[test]
fn fa_s512_preconditions_from_simulated_verdicts() {
    let m = manifest("kernels/attention/fa_s512.toml");
    let inf = run(&plan_probes(&m, 3).unwrap(), fake_fa_s512);
    assert_eq!(inf.base_failure, None);
    eprintln!("{}{}", render_table(&inf), render_preconditions(&inf));
    let got = sentences(&inf);
    assert_eq!(
        got,
        [
            ("q, k, v, o base must be 16-byte aligned", false),
            ("q, k, v, o stride_s must be a multiple of 16 bytes (8 elements)", false),
            ("q, k, v, o stride_d must be 1", true),
            ("head_dim must be 64", true),
            ("seq_k must be ≤ 512", true),
            ("dtype must be one of bf16, f16", true),
        ],
        "{}",
        render_preconditions(&inf)
    );
    let aligned = &inf.preconditions[0];
    assert_eq!(aligned.evidence, "fails at offset 2, 4, 8 bytes: CUDA error 716 (misaligned_address)");
    assert!(aligned.consistent);
    let ex = aligned.example.as_ref().unwrap();
    assert_eq!((ex.case.batch, ex.case.heads_q), (1, 1), "the minimal replica");
    assert_eq!(ex.finding.as_ref().unwrap().kind, FindingKind::MisalignedAddress);
    assert!(inf.preconditions[3].evidence.contains("unwritten_output in o (sentinel)"), "{}", inf.preconditions[3].evidence);
    assert_eq!(inf.preconditions[5].example.as_ref().unwrap().error.as_deref(), Some("compile failed: fa_s512.cu: #error f16/bf16 only"));
    assert_eq!(inf.undeclared(), 2);
    assert_eq!(inf.relaxations, ["seq_q 513 passes although the declared contract excludes it"]);
    let text = render_preconditions(&inf);
    assert!(text.contains("q, k, v, o base must be 16-byte aligned  [NOT DECLARED"), "{text}");
    let table = render_table(&inf);
    assert!(table.lines().any(|l| l.starts_with("q base offset") && l.contains(" 2 B ") && l.contains("FAIL 3/3") && l.contains("unaligned:q")), "{table}");
    serde_json::to_string(&inf).unwrap();
}

#[test]
fn a_kernel_that_passes_everything_has_no_preconditions_and_reports_relaxations() {
    let m = manifest("kernels/attention/fa_s512.toml");
    let inf = run(&plan_probes(&m, 2).unwrap(), |_| Outcome::Pass);
    assert!(inf.preconditions.is_empty());
    assert!(inf.relaxations.iter().any(|r| r == "head_dim 128 passes although the declared contract excludes it"), "{:?}", inf.relaxations);
    assert!(inf.relaxations.iter().any(|r| r == "q, k, v, o stride_d bhds passes although the declared contract excludes it"), "{:?}", inf.relaxations);
}

#[test]
fn a_failing_base_stops_inference() {
    let m = manifest("kernels/attention/fa_s512.toml");
    let plan = plan_probes(&m, 1).unwrap();
    let inf = run(&plan, |c| fake_fa_s512(&with(c, |c| c.layouts.q.offset_bytes = 2)));
    assert!(inf.base_failure.as_deref().unwrap().contains("CUDA error 716"));
    assert!(inf.preconditions.is_empty());
    assert!(render_preconditions(&inf).contains("the base case fails inside the declared contract"));
}

#[test]
fn flaky_failures_are_marked_and_single_tensor_preconditions_stay_apart() {
    let m = manifest("kernels/testing/vec_load_q.toml");
    let plan = plan_probes(&m, 3).unwrap();
    // Only q is loaded with 16-byte vectors, and only the first replica (seed) fails at +2.
    let inf = run(&plan, |c| {
        let plan = Plan::new(c);
        let q = plan.tensor(TensorId::Q);
        let flaky = q.offset_bytes == 2 && c.data.seed != 1;
        if q.alignment() < 16 && !flaky {
            Outcome::Fail { findings: vec![finding(c, FindingKind::MisalignedAddress, Oracle::CudaStatus, Some(TensorId::Q), Some("CUDA_ERROR_MISALIGNED_ADDRESS (716)"))] }
        } else {
            Outcome::Pass
        }
    });
    assert_eq!(
        sentences(&inf),
        [
            ("q base must be 16-byte aligned", false),
            ("q stride_s must be a multiple of 16 bytes (8 elements)", false),
            ("q stride_d must be 1", false),
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
    let mut m = manifest("kernels/attention/fa_s512.toml");
    m.contract.layouts = crate::plan::LayoutSupport::Contiguous;
    m.contract.min_align = 256;
    let e = plan_probes(&m, 1).unwrap_err();
    assert!(matches!(e, InferError::NoBase { .. }), "{e}");
    assert!(e.to_string().contains("no base case inside the declared contract"), "{e}");
}

/// A kernel with 32-bit offsets: every tensor's probe past 2³¹ elements faults, and the
/// precondition names the contract key that declares it.
#[test]
fn a_kernel_indexing_in_32_bits_is_told_to_declare_max_element_offset() {
    let int32 = |case: &Case| {
        let plan = Plan::new(case);
        match plan.tensors.iter().find(|tp| tp.reaches_past_int32()) {
            Some(tp) => Outcome::Fail { findings: vec![finding(case, FindingKind::IllegalAddress, Oracle::CudaStatus, Some(tp.tensor), Some("CUDA_ERROR_ILLEGAL_ADDRESS (700)"))] },
            None => Outcome::Pass,
        }
    };
    let mut m = manifest("kernels/mutants/int32_offset.toml");
    let inf = run(&plan_probes(&m, 3).unwrap(), int32);
    let sentence = "q, k, v, o element offsets must stay below 2^31: the kernel indexes in 32 bits (declare max_element_offset = 2147483647)";
    assert_eq!(sentences(&inf), [(sentence, false)], "{}", render_preconditions(&inf));
    assert!(inf.preconditions[0].evidence.contains("CUDA error 700"), "{}", inf.preconditions[0].evidence);
    m.contract.max_element_offset = Some((1 << 31) - 1);
    let inf = run(&plan_probes(&m, 3).unwrap(), int32);
    assert_eq!(sentences(&inf), [(sentence, true)]);
}
