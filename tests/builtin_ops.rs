//! The built-in ops `gemm` and `rotary` on generated cases of every shipped manifest that binds
//! them (the correct kernels and their mutants): the case is planned and its inputs drawn as the
//! engine does, the CPU reference judges, and
//! - the same-precision baseline never fails its own tolerance (no false alarm on the yardstick);
//! - the bound is finite, and the gold is finite wherever the inputs are (NaN in gemm's `c` only
//!   reaches the gold when `beta != 0`);
//! - the geometry read from the binding agrees with the case's dims;
//! - for every built-in op, the case its GPU reference kernel runs plans inside that kernel's
//!   contract (else the CPU would judge silently), reading in place only the case's inputs.

use cudafuzz::core::case::Case;
use cudafuzz::core::generate::strategy::CASE_BYTES;
use cudafuzz::core::generate::{decode_case, DecodeContext};
use cudafuzz::core::manifest::{BuiltinOp, Manifest, ReferenceSpec, Role};
use cudafuzz::core::plan::{check_contract, Plan};
use cudafuzz::engine::data;
use cudafuzz::engine::reference::{cpu_reference, gemm, gpu_case, gpu_viewed, max_abs_diff, op_reference, rotary, Bound, Rule};

mod common;
use common::{shipped, small};

/// Shipped manifests bound to `op`.
fn bound_to(op: BuiltinOp) -> Vec<Manifest> {
    shipped().into_iter().filter(|m| matches!(&m.reference, ReferenceSpec::Op { op: o, .. } if *o == op)).collect()
}

/// A deterministic byte stream per case number (no RNG crate needed for the decoder's input).
fn bytes(i: u64) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..CASE_BYTES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Runs `check` on `n` generated small cases of every manifest bound to `op`.
fn each_case(op: BuiltinOp, n: u64, limit: &dyn Fn(&str) -> u64, check: &mut dyn FnMut(&Manifest, &Plan, &data::Inputs)) {
    let kernels = bound_to(op);
    assert!(!kernels.is_empty(), "no shipped manifest binds {op}");
    for m in &kernels {
        for i in 0..n {
            let case = decode_case(&mut arbitrary::Unstructured::new(&bytes(i)), &DecodeContext::new(m)).expect("decoding never fails");
            let case = small(m, case, limit);
            let Ok(plan) = Plan::new(&case, m) else { continue };
            let inputs = data::generate(&case, &plan, m);
            check(m, &plan, &inputs);
        }
    }
}

/// The baseline passes its own bound: what the judged output's `lowp` would be judged like.
#[test]
fn gemm_baseline_never_fails_its_own_bound() {
    let mut seen_nan_c_beta0 = 0;
    each_case(BuiltinOp::Gemm, 40, &|d| if d == "k" { 1100 } else { 40 }, &mut |m, plan, inputs| {
        let ReferenceSpec::Op { bind, .. } = &m.reference else { unreachable!() };
        let g = gemm::geometry(&Bound { bind, plan }).expect("the binding fits every planned case");
        assert_eq!((g.m, g.n, g.k), (plan.dim("m"), plan.dim("n"), plan.dim("k")), "{}", m.name);
        let refs = cpu_reference(m, plan, inputs).expect("a CPU reference");
        let e = &refs.expected[0];
        let Rule::Bound(tol) = e.rule else { panic!("gemm judges by a bound") };
        assert!(tol.bound.is_finite() && tol.bound > 0.0, "{tol:?}");
        let c = plan.tensor("c").unwrap();
        let c0 = inputs.get(c.index).unwrap();
        let x =
            gemm::GemmInputs { a: inputs.get(plan.tensor("a").unwrap().index).unwrap(), b: inputs.get(plan.tensor("b").unwrap().index).unwrap(), c0: Some(c0) };
        let out = gemm::forward(&g, &x);
        let finite: (Vec<f64>, Vec<f64>) = out.baseline.iter().zip(&out.gold).filter(|(l, g)| l.is_finite() && g.is_finite()).map(|(l, g)| (*l, *g)).unzip();
        assert!(max_abs_diff(&finite.0, &finite.1) <= tol.bound, "{}: {tol:?}", m.name);
        if !g.reads_c() {
            if c0.iter().any(|v| v.is_nan()) {
                seen_nan_c_beta0 += 1;
            }
            assert!(e.gold.iter().all(|v| v.is_finite()), "{}: beta == 0 must not read c", m.name);
        }
    });
    assert!(seen_nan_c_beta0 > 0, "no case had NaN in c with beta == 0: the trigger of beta_reads_c is never drawn");
}

#[test]
fn rotary_baseline_never_fails_its_own_bound() {
    let mut variants = [0u32; 2];
    each_case(BuiltinOp::Rotary, 60, &|_| 64, &mut |m, plan, inputs| {
        let ReferenceSpec::Op { bind, .. } = &m.reference else { unreachable!() };
        let r = rotary::geometry(&Bound { bind, plan }).expect("the binding fits every planned case");
        assert_eq!(r.rot_dim, 2 * plan.dim("rot_half"));
        variants[r.interleaved as usize] += 1;
        let refs = cpu_reference(m, plan, inputs).expect("positions are drawn inside the cache");
        let e = &refs.expected[0];
        let Rule::Bound(tol) = e.rule else { panic!("rotary judges by a bound") };
        let get = |n: &str| inputs.get(plan.tensor(n).unwrap().index).unwrap();
        let out = rotary::forward(&r, &rotary::RotaryInputs { x: get("x"), cos: get("cos"), sin: get("sin"), positions: get("positions") });
        assert!(max_abs_diff(&out.baseline, &out.gold) <= tol.bound, "{}: {tol:?}", m.name);
        assert_eq!(e.gold, out.gold);
    });
    assert!(variants.iter().all(|&v| v > 0), "both pair layouts are drawn: {variants:?}");
}

#[test]
fn every_op_runs_its_gpu_reference_on_generated_cases() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/reference");
    for op in BuiltinOp::ALL {
        let r = op_reference(op);
        let refm = Manifest::load(&dir.join(r.gpu().manifest)).expect("the reference manifest loads");
        let (mut planned, mut copied) = (0, 0);
        each_case(op, 30, &|_| 48, &mut |m, plan, _| {
            let ReferenceSpec::Op { bind, .. } = &m.reference else { unreachable!() };
            let b = Bound { bind, plan };
            let oc = r.case(&b).expect("the binding fits");
            let case = cudafuzz::core::case::Case::new(&m.path.display().to_string(), plan.tensors[0].dtype);
            let rc = gpu_case(&refm, &b, &oc, &Case { dtype: b.need(op.spec().tensors[0].name).unwrap().dtype, ..case }).expect("same element types");
            let rplan = Plan::new(&rc, &refm).unwrap_or_else(|e| panic!("{op}: the reference case does not plan: {e}"));
            let verdict = check_contract(&refm, &rc, &rplan);
            assert!(verdict.is_inside(), "{op}: the reference case lies outside its contract: {verdict:?}\n{rc:?}");
            for t in refm.tensors.iter().filter(|t| t.role == Role::Input) {
                match gpu_viewed(&refm, &b, &t.name) {
                    Some(v) => assert_eq!(v.role, Role::Input, "{op}: only inputs are read in place"),
                    None => copied += 1,
                }
            }
            planned += 1;
        });
        assert!(planned > 0, "{op}: no case planned");
        if matches!(op, BuiltinOp::Gemm | BuiltinOp::Rotary) {
            assert!(copied > 0, "{op}: the in-out tensor is read from a copy");
        }
    }
}
