//! The built-in ops through the public surface: manifest binding errors name
//! `reference.bind.<role>` (ranks, optional scalar roles, in-place output roles), the row ops
//! add their row-length hints, every op has a reference whose GPU kernel reads only roles, an
//! op reads an in-out tensor's drawn initial contents and judges an in-place output, and on
//! generated cases of the shipped row-op kernels the same-precision baseline (what a correct
//! kernel computes) is never flagged: its special values are the gold's and its error is within
//! the rule. (gemm and rotary on generated cases: tests/builtin_ops.rs.)

mod common;

use std::path::PathBuf;

use arbitrary::Unstructured;
use cudafuzz::core::case::Case;
use cudafuzz::core::generate::{decode_case, DecodeContext};
use cudafuzz::core::manifest::{BuiltinOp, Hint, Manifest, ReferenceSpec, Role};
use cudafuzz::core::plan::Plan;
use cudafuzz::engine::data;
use cudafuzz::engine::reference::{cpu_op_reference, max_abs_diff, op_reference, role_inputs, Bound, Rule};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The shipped kernel of an op: `kernels/norm/<op>.toml`, or `kernels/<op>/<op>.toml`.
fn kernel_path(op: &str) -> PathBuf {
    let norm = root().join(format!("kernels/norm/{op}.toml"));
    if norm.is_file() {
        norm
    } else {
        root().join(format!("kernels/{op}/{op}.toml"))
    }
}

fn shipped(op: &str) -> Manifest {
    Manifest::load(&kernel_path(op)).expect("shipped manifest loads")
}

/// The shipped manifest of `op` with each `from` replaced by its `to`, loaded from a scratch
/// directory.
fn load_variant(op: &str, edits: &[(&str, &str)]) -> Result<Manifest, String> {
    let mut text = std::fs::read_to_string(kernel_path(op)).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "{from:?} not in {op}.toml");
        text = text.replacen(from, to, 1);
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(format!("{op}.cu")), "// stand-in\n").unwrap();
    let path = dir.path().join(format!("{op}.toml"));
    std::fs::write(&path, text).unwrap();
    Manifest::load(&path).map_err(|e| e.to_string())
}

/// The error of a variant that must be rejected.
fn variant(op: &str, from: &str, to: &str) -> String {
    load_variant(op, &[(from, to)]).expect_err("the variant should be rejected")
}

/// The small example case of a manifest, planned, with its drawn inputs.
fn example(m: &Manifest) -> (Case, Plan, data::Inputs) {
    let case = cudafuzz::core::generate::example(m);
    let plan = Plan::new(&case, m).expect("the example plans");
    let inputs = data::generate(&case, &plan, m);
    (case, plan, inputs)
}

#[test]
fn optional_scalar_roles_bind_by_name_literal_or_not_at_all() {
    let bind = |m: &Manifest| match &m.reference {
        ReferenceSpec::Op { bind, .. } => bind.clone(),
        _ => panic!("binds an op"),
    };
    // Shipped gemm: beta and the transpose flags bind the scalars of their names.
    let m = shipped("gemm");
    let b = bind(&m);
    assert_eq!((b["beta"].as_str(), b["trans_a"].as_str()), ("beta", "trans_a"));
    // Without a scalar `beta` the role stays unbound (no c₀ term), a literal binds.
    let m = load_variant("gemm", &[("bind = { a = \"a\", b = \"b\", c = \"c\" }", "bind = { a = \"a\", b = \"b\", c = \"c\", trans_b = \"true\" }")]).unwrap();
    assert_eq!(bind(&m)["trans_b"], "true");
    let m = load_variant("gemm", &[("beta = { type", "beta2 = { type"), ("{ f32 = \"beta\" }", "{ f32 = \"beta2\" }")]).unwrap();
    assert!(!bind(&m).contains_key("beta"));
    // A name that is neither a scalar nor a literal, for an optional role, still names the role.
    let msg = variant("gemm", "c = \"c\" }", "c = \"c\", beta = \"b0\" }");
    assert!(msg.contains("reference.bind.beta") && msg.contains("no scalar `b0`") && msg.contains("leave it unbound"), "{msg}");
    // A required scalar role is still required.
    let msg = variant("gemm", "alpha = { type", "alpha2 = { type");
    assert!(msg.contains("reference.bind.alpha") && msg.contains("no scalar `alpha`"), "{msg}");
    let msg = variant("gemm", "shape = [\"m\", \"n\"]", "shape = [\"m\", \"n\", \"1\"]");
    assert!(msg.contains("reference.bind.c") && msg.contains("rank 2") && msg.contains("has rank 3"), "{msg}");
}

#[test]
fn an_in_place_output_needs_a_written_tensor() {
    // rotary without `y` rotates `x` in place: an input `x` has nowhere to be judged.
    let msg = variant(
        "rotary",
        "role = \"in_out\"\nshape = [\"tokens\", \"heads\", \"head_dim\"]\nlayout = \"inner\"\nalign = 2\ninit = \"drawn\"",
        "role = \"input\"\nshape = [\"tokens\", \"heads\", \"head_dim\"]\nlayout = \"inner\"\nalign = 2",
    );
    assert!(msg.contains("reference.bind.y") && msg.contains("in place") && msg.contains("in_out"), "{msg}");
    let msg = variant(
        "rotary",
        "name = \"positions\"\nrole = \"input\"\nshape = [\"tokens\"]",
        "name = \"positions\"\nrole = \"input\"\nshape = [\"tokens\", \"1\"]",
    );
    assert!(msg.contains("reference.bind.positions") && msg.contains("rank 1"), "{msg}");
}

#[test]
fn in_out_tensors_are_read_as_drawn_and_judged_in_place() {
    // rotary in place: the op reads x's drawn initial contents and judges x by y's values.
    let m = shipped("rotary");
    let (_, plan, inputs) = example(&m);
    let refs = cpu_op_reference(&m, &plan, &inputs).unwrap().unwrap();
    let x = plan.tensor("x").unwrap();
    assert_eq!(x.role, Role::InOut);
    assert_eq!(refs.expected.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["x"]);
    let ReferenceSpec::Op { op, bind } = &m.reference else { unreachable!() };
    let ri = role_inputs(*op, &Bound { bind, plan: &plan }, &inputs).unwrap();
    assert_eq!(ri["x"], inputs.get(x.index).unwrap());
    // gemm: c is read when beta != 0 and judged; a c whose initial contents are not drawn
    // cannot be read, and the message says how to fix it.
    let m = shipped("gemm");
    let (mut case, _, _) = example(&m);
    case.scalars.insert("beta".into(), cudafuzz::core::case::Scalar::Float(1.0));
    let plan = Plan::new(&case, &m).unwrap();
    let inputs = data::generate(&case, &plan, &m);
    let refs = cpu_op_reference(&m, &plan, &inputs).unwrap().unwrap();
    assert_eq!(refs.expected[0].name, "c");
    let (a, c) = (inputs.get(plan.tensor("a").unwrap().index).unwrap(), inputs.get(plan.tensor("c").unwrap().index).unwrap());
    let k = plan.dim("k") as usize;
    let b = inputs.get(plan.tensor("b").unwrap().index).unwrap();
    if !case.scalars["trans_a"].as_f64().eq(&1.0) && !case.scalars["trans_b"].as_f64().eq(&1.0) {
        let n = plan.dim("n") as usize;
        let want = case.scalars["alpha"].as_f64() as f32 as f64 * (0..k).map(|kk| a[kk] * b[kk * n]).sum::<f64>() + c[0];
        assert!((refs.expected[0].gold[0] - want).abs() <= 1e-9 * want.abs().max(1.0), "{} vs {want}", refs.expected[0].gold[0]);
    }
    let m = load_variant("gemm", &[("init = \"drawn\"", "init = \"zero\"")]).unwrap();
    let plan = Plan::new(&Case { kernel: m.path.display().to_string(), ..case.clone() }, &m).unwrap();
    let inputs = data::generate(&case, &plan, &m);
    let err = cpu_op_reference(&m, &plan, &inputs).unwrap().unwrap_err();
    assert!(matches!(&err, cudafuzz::engine::reference::BindingError::NotDrawn { role, .. } if role == "c"), "{err:?}");
    assert!(err.to_string().contains("init = \"drawn\""), "{err}");
}

#[test]
fn binding_errors_name_the_role() {
    let msg = variant("rmsnorm", "bind = { eps = \"eps\" }", "bind = { eps = \"eps\", x = \"inp\" }");
    assert!(msg.contains("reference.bind.x") && msg.contains("no tensor `inp`"), "{msg}");
    let msg = variant("rmsnorm", "shape = [\"n\"]", "shape = [\"rows\", \"n\"]");
    assert!(msg.contains("reference.bind.weight") && msg.contains("rank 1") && msg.contains("has rank 2"), "{msg}");
    let msg = variant("layernorm", "bind = { eps = \"eps\" }", "bind = { eps = \"eps\", gamma = \"weight\" }");
    assert!(msg.contains("reference.bind.gamma") && msg.contains("not a role of layernorm"), "{msg}");
    let msg = variant("rmsnorm", "bind = { eps = \"eps\" }", "bind = { eps = \"epsilon\" }");
    assert!(msg.contains("reference.bind.eps") && msg.contains("no scalar `epsilon`"), "{msg}");
    let msg = variant("softmax", "op = \"softmax\"", "op = \"softmax2\"");
    assert!(msg.contains("reference.op") && msg.contains("softmax, rmsnorm, layernorm, gemm, rotary"), "{msg}");
}

#[test]
fn the_op_hints_its_reduced_dim() {
    let m = shipped("softmax");
    let n = m.dim("n").unwrap();
    for v in [1, 8, 9, 31, 33, 1023, 1025, 4097] {
        assert!(n.hints.contains(&Hint::Value(v)), "n lacks hint {v}: {:?}", n.hints);
    }
    assert!(m.dim("rows").unwrap().hints.iter().all(|h| !matches!(h, Hint::Value(1025))), "only the reduced dim gets the op's hints");
}

#[test]
fn every_op_has_a_reference_with_a_gpu_kernel() {
    for op in BuiltinOp::ALL {
        let r = op_reference(op);
        assert_eq!(r.op(), op);
        let gpu = r.gpu();
        let m = Manifest::load(&root().join("kernels/reference").join(gpu.manifest)).expect("the op's GPU reference kernel loads");
        for o in gpu.outputs {
            assert!(m.tensor(o.gold).is_some() && m.tensor(o.baseline).is_some() && o.cond.is_none_or(|c| m.tensor(c).is_some()), "{op}: {o:?}");
            assert!(op.spec().tensors.iter().any(|t| t.name == o.role), "{op}: {} is not a role", o.role);
        }
        for t in m.tensors.iter().filter(|t| t.role == cudafuzz::core::manifest::Role::Input) {
            assert!(op.spec().tensors.iter().any(|r| r.name == t.name), "{op}: the reference's input {} is not a role", t.name);
        }
    }
}

fn check_baseline_on_generated_cases(op: &str, cases: u64) {
    let m = shipped(op);
    let ctx = DecodeContext::new(&m);
    let (mut judged, mut special, mut dtypes) = (0, 0, std::collections::BTreeSet::new());
    for seed in 0..cases {
        let raw = common::decoder_bytes(seed, 512);
        let Ok(case) = decode_case(&mut Unstructured::new(&raw), &ctx) else { continue };
        let Ok(plan) = Plan::new(&case, &m) else { continue };
        if plan.tensors.iter().map(|t| t.numel).sum::<u64>() > 1 << 20 {
            continue;
        }
        let inputs = data::generate(&case, &plan, &m);
        let cudafuzz::core::manifest::ReferenceSpec::Op { op: bop, bind } = &m.reference else { panic!("{op} binds an op") };
        let r = op_reference(*bop);
        let b = Bound { bind, plan: &plan };
        let c = r.case(&b).expect("the shipped binding fits");
        let ri = role_inputs(*bop, &b, &inputs).unwrap();
        let values = r.cpu(&c, &ri);
        let y = &values["y"];
        for (g, l) in y.gold.iter().zip(&y.baseline) {
            if g.is_finite() {
                let stored = data::round_to(*g, case.dtype);
                assert!(l.is_finite() || *l == stored, "{op} seed {seed}: baseline {l} where gold {g} ({})", case.summary());
            } else {
                special += 1;
                assert!(g == l || (g.is_nan() && l.is_nan()), "{op} seed {seed}: baseline {l} where gold {g} ({})", case.summary());
            }
        }
        let Rule::Bound(t) = r.rule("y", &c, &values, &ri) else { panic!("y is judged by a bound") };
        let finite: (Vec<f64>, Vec<f64>) = y.gold.iter().zip(&y.baseline).filter(|(g, l)| g.is_finite() && l.is_finite()).map(|(g, l)| (*g, *l)).unzip();
        assert!(max_abs_diff(&finite.1, &finite.0) <= t.bound, "{op} seed {seed}: {t:?}");
        // The floor scales with the output: zero only where every gold value and the conditioning are 0.
        let all_zero = y.gold.iter().all(|g| !g.is_finite() || *g == 0.0);
        assert!((t.floor > 0.0 || all_zero) && t.floor.is_finite(), "{op} seed {seed}: {t:?}");
        judged += 1;
        dtypes.insert(format!("{:?}", case.dtype));
    }
    assert!(judged >= cases / 2, "{op}: only {judged} of {cases} cases judged");
    assert!(special > 0 && dtypes.len() == 3, "{op}: the cases cover special values ({special}) and every dtype ({dtypes:?})");
}

#[test]
fn softmax_baseline_is_never_flagged() {
    check_baseline_on_generated_cases("softmax", 150);
}

#[test]
fn rmsnorm_baseline_is_never_flagged() {
    check_baseline_on_generated_cases("rmsnorm", 150);
}

#[test]
fn layernorm_baseline_is_never_flagged() {
    check_baseline_on_generated_cases("layernorm", 150);
}

/// An op whose rule says it does not read the inputs (`rule_reads_inputs`) judges every output
/// the same without them: a case judged on the device never reads them back for it.
#[test]
fn a_rule_that_does_not_read_the_inputs_judges_the_same_without_them() {
    let kernels = [
        ("softmax", kernel_path("softmax")),
        ("rmsnorm", kernel_path("rmsnorm")),
        ("layernorm", kernel_path("layernorm")),
        ("gemm", kernel_path("gemm")),
        ("rotary", kernel_path("rotary")),
        ("attention_fwd", root().join("kernels/testing/simple_attn.toml")),
    ];
    let mut reading = Vec::new();
    for (op, path) in kernels.clone() {
        let m = Manifest::load(&path).unwrap();
        let ReferenceSpec::Op { op: bop, bind } = &m.reference else { panic!("{op} binds an op") };
        let r = op_reference(*bop);
        let (_, plan, inputs) = example(&m);
        let b = Bound { bind, plan: &plan };
        let c = r.case(&b).unwrap();
        let ri = role_inputs(*bop, &b, &inputs).unwrap();
        let values = r.cpu(&c, &ri);
        for role in values.keys() {
            let with = r.rule(role, &c, &values, &ri);
            let without = r.rule(role, &c, &values, &Default::default());
            if r.rule_reads_inputs() {
                reading.push(op);
            } else {
                assert_eq!(with, without, "{op}: the rule of {role} reads the inputs; say so in rule_reads_inputs");
            }
        }
    }
    assert!(reading.contains(&"layernorm"), "layernorm's bound scales with its inputs: {reading:?}");
    let covered: std::collections::BTreeSet<String> = kernels.iter().map(|(op, _)| op.to_string()).collect();
    let every: std::collections::BTreeSet<String> = BuiltinOp::ALL.iter().map(|op| op.to_string()).collect();
    assert_eq!(covered, every, "every built-in op's rule is checked here: add a kernel of the new op");
}
