//! The built-in row ops (softmax, rmsnorm, layernorm) through the public surface: manifest
//! binding errors name `reference.bind.<role>`, the op adds its row-length hints, every op has
//! a reference, and on generated cases of the shipped kernels the same-precision baseline (what
//! a correct kernel computes) is never flagged: its special values are the gold's and its error
//! is within the rule.

use std::path::PathBuf;

use arbitrary::Unstructured;
use cudafuzz::data;
use cudafuzz::generate::{decode_case, DecodeContext};
use cudafuzz::manifest::{BuiltinOp, Hint, Manifest};
use cudafuzz::plan::Plan;
use cudafuzz::reference::{max_abs_diff, op_reference, role_inputs, Bound, Rule};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn shipped(op: &str) -> Manifest {
    Manifest::load(&root().join(format!("kernels/norm/{op}.toml"))).expect("shipped manifest loads")
}

/// The shipped manifest of `op` with `from` replaced by `to`, loaded from a scratch directory.
fn variant(op: &str, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(root().join(format!("kernels/norm/{op}.toml"))).unwrap();
    assert!(text.contains(from), "{from:?} not in {op}.toml");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(format!("{op}.cu")), "// stand-in\n").unwrap();
    let path = dir.path().join(format!("{op}.toml"));
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    Manifest::load(&path).expect_err("the variant should be rejected").to_string()
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
    assert!(msg.contains("reference.op") && msg.contains("softmax, rmsnorm, layernorm"), "{msg}");
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
            assert!(m.tensor(o.gold).is_some() && m.tensor(o.baseline).is_some(), "{op}: {o:?}");
            assert!(op.spec().tensors.iter().any(|t| t.name == o.role), "{op}: {} is not a role", o.role);
        }
        for t in m.tensors.iter().filter(|t| t.role == cudafuzz::manifest::Role::Input) {
            assert!(op.spec().tensors.iter().any(|r| r.name == t.name), "{op}: the reference's input {} is not a role", t.name);
        }
    }
}

/// Bytes that look random enough for the decoder (splitmix64).
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e3779b97f4a7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

fn check_baseline_on_generated_cases(op: &str, cases: u64) {
    let m = shipped(op);
    let ctx = DecodeContext::new(&m);
    let (mut judged, mut special, mut dtypes) = (0, 0, std::collections::BTreeSet::new());
    for seed in 0..cases {
        let raw = bytes(seed, 512);
        let Ok(case) = decode_case(&mut Unstructured::new(&raw), &ctx) else { continue };
        let Ok(plan) = Plan::new(&case, &m) else { continue };
        if plan.tensors.iter().map(|t| t.numel).sum::<u64>() > 1 << 20 {
            continue;
        }
        let inputs = data::generate(&case, &plan, &m);
        let cudafuzz::manifest::ReferenceSpec::Op { op: bop, bind } = &m.reference else { panic!("{op} binds an op") };
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
        assert!(t.floor > 0.0 && t.floor.is_finite(), "{op} seed {seed}: {t:?}");
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

