//! Properties of the CPU attention references and the data path feeding them.
//!
//! The f64 reference is the yardstick every kernel is judged by, so it is checked against an
//! independent formulation (materialised score and mask matrices, softmax through the
//! log-sum-exp), and against the metamorphic relations a correct attention must satisfy:
//! layout does not matter, GQA is MHA with repeated heads, a causal first row sees one key.

use cudafuzz::generate::strategy::{cases, CaseLimits, CaseStrategy};
use cudafuzz::generate::DecodeContext;
use cudafuzz::case::{Case, Dim, Dtype, Layouts, TensorId, TensorLayout, ValueDist};
use cudafuzz::data::{self, Inputs};
use cudafuzz::plan::Plan;
use cudafuzz::reference::{
    max_abs_diff, tolerance, CpuF64, CpuSamePrecision, RefOutput, Reference,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

fn small_cases() -> CaseStrategy {
    cases(
        DecodeContext::default(),
        CaseLimits {
            max_seq: 64,
            max_head_dim: 64,
            ..Default::default()
        },
    )
}

/// 64 cases each, and failures saved where the project keeps its committed proptest seeds
/// (the default would put them next to this file). The path is relative to the package root,
/// which is where `cargo test` runs integration tests.
fn config() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/reference_props.txt",
        ))),
        ..ProptestConfig::with_cases(64)
    }
}

/// `[b, h, s, d]` of a tensor with `shape` to its position in logical BHSD order.
fn at(shape: [u32; 4], b: u32, h: u32, s: u32, d: u32) -> usize {
    (((b * shape[1] + h) * shape[2] + s) * shape[3] + d) as usize
}

/// The naive formulation: per (b, h) the full score matrix and an explicit mask matrix, then
/// `lse_i = m_i + ln Σ_j exp(s_ij - m_i)` and `p_ij = exp(s_ij - lse_i)` (no separate
/// normalisation by the sum), with the output summed per `d` over descending `j`. The kv head is
/// found by `h * heads_kv / heads_q`, the mask by comparing `j - i` with `seq_k - seq_q`.
fn naive(case: &Case, x: &Inputs) -> RefOutput {
    let qs = case.shape(TensorId::Q);
    let ks = case.shape(TensorId::K);
    let (sq, sk, dim) = (case.seq_q, case.seq_k, case.head_dim);
    let scale = f64::from(case.scale);
    let mut o = vec![0.0; x.q.len()];
    let mut lse = vec![0.0; x.q.len() / dim as usize];
    for b in 0..case.batch {
        for h in 0..case.heads_q {
            let kvh = h * case.heads_kv / case.heads_q;
            let mut score = vec![vec![0.0f64; sk as usize]; sq as usize];
            let mut mask = vec![vec![false; sk as usize]; sq as usize];
            for i in 0..sq {
                for j in 0..sk {
                    mask[i as usize][j as usize] = !case.causal
                        || i64::from(j) - i64::from(i) <= i64::from(sk) - i64::from(sq);
                    let mut dot = 0.0;
                    for d in 0..dim {
                        dot += x.q[at(qs, b, h, i, d)] * x.k[at(ks, b, kvh, j, d)];
                    }
                    score[i as usize][j as usize] = scale * dot;
                }
            }
            for i in 0..sq {
                let (row, allowed) = (&score[i as usize], &mask[i as usize]);
                let r = at(qs, b, h, i, 0) / dim as usize;
                let m = (0..sk as usize)
                    .filter(|&j| allowed[j])
                    .map(|j| row[j])
                    .fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    lse[r] = f64::NEG_INFINITY;
                    continue;
                }
                let sum: f64 = (0..sk as usize)
                    .filter(|&j| allowed[j])
                    .map(|j| (row[j] - m).exp())
                    .sum();
                lse[r] = m + sum.ln();
                for d in 0..dim {
                    let mut acc = 0.0;
                    for j in (0..sk).rev().filter(|&j| allowed[j as usize]) {
                        acc += (row[j as usize] - lse[r]).exp() * x.v[at(ks, b, kvh, j, d)];
                    }
                    o[at(qs, b, h, i, d)] = acc;
                }
            }
        }
    }
    RefOutput { o, lse }
}

fn assert_close(what: &str, got: &[f64], want: &[f64]) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len());
    for (i, (&a, &b)) in got.iter().zip(want).enumerate() {
        let ok = a == b || (a - b).abs() <= 1e-12 * b.abs().max(1.0);
        prop_assert!(
            ok,
            "{}[{}]: {} vs {} (diff {:e})",
            what,
            i,
            a,
            b,
            (a - b).abs()
        );
    }
    Ok(())
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn assert_same_bits(a: &RefOutput, b: &RefOutput) -> Result<(), TestCaseError> {
    prop_assert_eq!(bits(&a.o), bits(&b.o));
    prop_assert_eq!(bits(&a.lse), bits(&b.lse));
    Ok(())
}

/// Every permutation of b, h, s, d.
fn all_orders() -> Vec<[Dim; 4]> {
    let mut out = Vec::new();
    for a in Dim::ALL {
        for b in Dim::ALL {
            for c in Dim::ALL {
                for d in Dim::ALL {
                    let o = [a, b, c, d];
                    if (0..4).all(|i| (0..i).all(|j| o[i] != o[j])) {
                        out.push(o);
                    }
                }
            }
        }
    }
    out
}

fn layout() -> impl Strategy<Value = TensorLayout> {
    (
        proptest::sample::select(all_orders()),
        proptest::array::uniform3(0u32..5),
        0u32..=64,
    )
        .prop_map(|(order, p, offset_bytes)| TensorLayout {
            order,
            pad: [0, p[0], p[1], p[2]],
            offset_bytes,
        })
}

fn layouts() -> impl Strategy<Value = Layouts> {
    (layout(), layout(), layout(), layout()).prop_map(|(q, k, v, o)| Layouts { q, k, v, o })
}

/// Writes q, k and v into buffers laid out as `case` says (after `offset_bytes` of garbage,
/// with a poisoned fill in every gap) and reads them back.
fn through_memory(case: &Case, x: &Inputs) -> Inputs {
    let plan = Plan::new(case);
    let one = |t: TensorId, values: &[f64]| {
        let tp = plan.tensor(t);
        let off = tp.offset_bytes as usize;
        let mut buf = vec![0xffu8; off + tp.span_bytes as usize + 5];
        data::write_strided(values, tp, case.dtype, &mut buf[off..]);
        data::read_strided(&buf[off..], tp, case.dtype)
    };
    Inputs {
        q: one(TensorId::Q, &x.q),
        k: one(TensorId::K, &x.k),
        v: one(TensorId::V, &x.v),
    }
}

proptest! {
    #![proptest_config(config())]

    /// 1. The f64 reference agrees with the naive formulation to 1e-12 relative.
    #[test]
    fn f64_reference_matches_naive_formulation(case in small_cases()) {
        let x = data::generate(&case);
        let r = CpuF64.forward(&case, &x);
        let n = naive(&case, &x);
        assert_close("o", &r.o, &n.o)?;
        assert_close("lse", &r.lse, &n.lse)?;
    }

    /// 2. The same logical inputs through two layouts give bit-identical inputs and outputs.
    #[test]
    fn layout_does_not_change_the_answer(case in small_cases(), other in layouts()) {
        let mut moved = case.clone();
        moved.layouts = other;
        prop_assert!(moved.validate().is_ok(), "{:?}", moved.validate());
        let x = data::generate(&case);
        let a = through_memory(&case, &x);
        let b = through_memory(&moved, &x);
        prop_assert_eq!(bits(&a.q), bits(&x.q));
        prop_assert_eq!(bits(&a.k), bits(&b.k));
        prop_assert_eq!(bits(&a.v), bits(&b.v));
        assert_same_bits(&CpuF64.forward(&case, &a), &CpuF64.forward(&moved, &b))?;
        assert_same_bits(&CpuSamePrecision.forward(&case, &a), &CpuSamePrecision.forward(&moved, &b))?;
        assert_same_bits(&CpuF64.forward(&case, &a), &CpuF64.forward(&case, &x))?;
    }

    /// 3. GQA is MHA with each kv head repeated for its group of query heads.
    #[test]
    fn gqa_equals_mha_with_repeated_heads(case in small_cases(), group in 2u32..=4) {
        let mut gqa = case;
        gqa.heads_kv = gqa.heads_kv.min(2);
        gqa.heads_q = gqa.heads_kv * group;
        let x = data::generate(&gqa);
        let mut mha = gqa.clone();
        mha.heads_kv = gqa.heads_q;
        let ks = gqa.shape(TensorId::K);
        let repeat = |t: &[f64]| {
            let mut out = Vec::with_capacity(t.len() * group as usize);
            for b in 0..gqa.batch {
                for h in 0..mha.heads_kv {
                    let start = at(ks, b, h / group, 0, 0);
                    out.extend_from_slice(&t[start..start + (gqa.seq_k * gqa.head_dim) as usize]);
                }
            }
            out
        };
        let xm = Inputs { q: x.q.clone(), k: repeat(&x.k), v: repeat(&x.v) };
        assert_same_bits(&CpuF64.forward(&gqa, &x), &CpuF64.forward(&mha, &xm))?;
        assert_same_bits(&CpuSamePrecision.forward(&gqa, &x), &CpuSamePrecision.forward(&mha, &xm))?;
    }

    /// 4a. Causal with seq_q == seq_k: query 0 sees only key 0, so its output is v row 0
    /// exactly and its lse is its one score.
    #[test]
    fn causal_first_row_is_the_first_value_row(case in small_cases()) {
        let mut c = case;
        c.causal = true;
        c.seq_k = c.seq_q;
        let x = data::generate(&c);
        let (qs, ks) = (c.shape(TensorId::Q), c.shape(TensorId::K));
        let dim = c.head_dim as usize;
        let group = c.heads_q / c.heads_kv;
        let r64 = CpuF64.forward(&c, &x);
        let lowp = CpuSamePrecision.forward(&c, &x);
        for b in 0..c.batch {
            for h in 0..c.heads_q {
                let (o0, v0) = (at(qs, b, h, 0, 0), at(ks, b, h / group, 0, 0));
                let (q0, k0) = (&x.q[o0..o0 + dim], &x.k[v0..v0 + dim]);
                prop_assert_eq!(bits(&r64.o[o0..o0 + dim]), bits(&x.v[v0..v0 + dim]));
                prop_assert_eq!(bits(&lowp.o[o0..o0 + dim]), bits(&x.v[v0..v0 + dim]));
                let s = f64::from(c.scale) * q0.iter().zip(k0).fold(0.0, |acc, (a, b)| acc + a * b);
                prop_assert_eq!(r64.lse[o0 / dim], s);
            }
        }
    }

    /// 4b. Causal with seq_q > seq_k: the first seq_q - seq_k rows of every head see no key and
    /// give 0 and -inf; every later row sees at least one key.
    #[test]
    fn causal_rows_without_keys_are_zero(case in small_cases(), k in 0u32..64) {
        let mut c = case;
        c.causal = true;
        c.seq_q = c.seq_q.max(2);
        c.seq_k = 1 + k % (c.seq_q - 1);
        let x = data::generate(&c);
        let dead = (c.seq_q - c.seq_k) as usize;
        let (sq, dim) = (c.seq_q as usize, c.head_dim as usize);
        for r in [CpuF64.forward(&c, &x), CpuSamePrecision.forward(&c, &x)] {
            for (row, &lse) in r.lse.iter().enumerate() {
                let o = &r.o[row * dim..(row + 1) * dim];
                if row % sq < dead {
                    prop_assert_eq!(lse, f64::NEG_INFINITY);
                    prop_assert!(o.iter().all(|&v| v.to_bits() == 0), "row {} is {:?}", row, o);
                } else {
                    prop_assert!(lse.is_finite(), "row {} lse {}", row, lse);
                }
            }
        }
    }

    /// 5a. The tolerance is positive, the f64 reference and the same-precision one pass it, and
    /// a single element moved by more than the bound fails it.
    #[test]
    fn tolerance_accepts_references_and_rejects_a_perturbation(case in small_cases(), pick in any::<prop::sample::Index>()) {
        let x = data::generate(&case);
        let r64 = CpuF64.forward(&case, &x);
        let lowp = CpuSamePrecision.forward(&case, &x);
        let t = tolerance(&case, &r64, &lowp);
        prop_assert!(t.bound > 0.0 && t.floor > 0.0 && t.bound.is_finite(), "{:?}", t);
        prop_assert!(max_abs_diff(&r64.o, &r64.o) <= t.bound);
        prop_assert!(max_abs_diff(&lowp.o, &r64.o) <= t.bound);
        // Ordinary data in f16/f32 is judged finely enough that 0.1 off is an error.
        let ordinary = case.dtype != Dtype::Bf16 && case.data.dist != ValueDist::LargeLogits;
        if ordinary {
            prop_assert!(t.bound < 0.1, "{:?}", t);
        }
        let delta = if ordinary { 0.1 } else { 2.0 * t.bound };
        let mut bad = r64.o.clone();
        let i = pick.index(bad.len());
        bad[i] += delta;
        prop_assert!(max_abs_diff(&bad, &r64.o) > t.bound, "{:?}", t);
    }

    /// 5b. For f16 normal data with enough keys the same-precision error is nonzero (the
    /// dtype costs something) and small (a few f16 ulps of the output).
    #[test]
    fn same_precision_error_is_small_but_nonzero_for_f16(case in small_cases()) {
        let mut c = case;
        c.dtype = Dtype::F16;
        c.data.dist = ValueDist::Normal;
        c.causal = false;
        c.seq_k = c.seq_k.max(16);
        let x = data::generate(&c);
        let r64 = CpuF64.forward(&c, &x);
        let t = tolerance(&c, &r64, &CpuSamePrecision.forward(&c, &x));
        let peak = r64.o.iter().fold(1.0f64, |a, &v| a.max(v.abs()));
        prop_assert!(t.err_lowp > 0.0, "{:?}", t);
        prop_assert!(t.err_lowp < 16.0 * Dtype::F16.unit_roundoff() * peak, "{:?} peak {}", t, peak);
    }

    /// 6. Logits far past expf's overflow point still give finite outputs in both references.
    #[test]
    fn large_logits_stay_finite(case in small_cases()) {
        let mut c = case;
        c.data.dist = ValueDist::LargeLogits;
        let x = data::generate(&c);
        for r in [CpuF64.forward(&c, &x), CpuSamePrecision.forward(&c, &x)] {
            prop_assert!(r.o.iter().all(|v| v.is_finite()));
            prop_assert!(r.lse.iter().all(|&v| v.is_finite() || v == f64::NEG_INFINITY));
        }
    }
    /// 7. CpuSamePrecision is exactly (bitwise) the documented semantics, transcribed
    /// literally: masked scores are -inf and take part in every max and sum, and rounding into
    /// the dtype goes through `half`'s f32 conversions instead of `data::round_to`.
    #[test]
    fn same_precision_matches_literal_transcription(case in small_cases()) {
        let x = data::generate(&case);
        let want = literal_same_precision(&case, &x);
        assert_same_bits(&CpuSamePrecision.forward(&case, &x), &want)?;
    }
}

fn round_t(x: f32, dtype: Dtype) -> f32 {
    match dtype {
        Dtype::F16 => half::f16::from_f32(x).to_f32(),
        Dtype::Bf16 => half::bf16::from_f32(x).to_f32(),
        Dtype::F32 => x,
    }
}

fn literal_same_precision(case: &Case, x: &Inputs) -> RefOutput {
    let (qs, ks) = (case.shape(TensorId::Q), case.shape(TensorId::K));
    let (sq, sk, dim, dt) = (case.seq_q, case.seq_k, case.head_dim, case.dtype);
    let mut o = vec![0.0; x.q.len()];
    let mut lse = vec![0.0; x.q.len() / dim as usize];
    for b in 0..case.batch {
        for h in 0..case.heads_q {
            let kvh = h / (case.heads_q / case.heads_kv);
            for i in 0..sq {
                let r = at(qs, b, h, i, 0) / dim as usize;
                let allowed = |j: u32| {
                    !case.causal || i64::from(j) <= i64::from(i) + i64::from(sk) - i64::from(sq)
                };
                if !(0..sk).any(allowed) {
                    lse[r] = f64::NEG_INFINITY;
                    continue;
                }
                let s: Vec<f32> = (0..sk)
                    .map(|j| {
                        if !allowed(j) {
                            return f32::NEG_INFINITY;
                        }
                        let mut acc = 0.0f32;
                        for d in 0..dim {
                            let prod = (x.q[at(qs, b, h, i, d)] as f32)
                                * (x.k[at(ks, b, kvh, j, d)] as f32);
                            acc += prod;
                        }
                        round_t(acc * case.scale, dt)
                    })
                    .collect();
                let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = s.iter().map(|&sj| libm::exp((sj - m) as f64) as f32).collect();
                let mut l = 0.0f32;
                for &ej in &e {
                    l += ej;
                }
                let p: Vec<f32> = e.iter().map(|&ej| round_t(ej / l, dt)).collect();
                for d in 0..dim {
                    let mut acc = 0.0f32;
                    for j in 0..sk {
                        let prod = p[j as usize] * (x.v[at(ks, b, kvh, j, d)] as f32);
                        acc += prod;
                    }
                    o[at(qs, b, h, i, d)] = f64::from(round_t(acc, dt));
                }
                lse[r] = f64::from(m) + libm::log(f64::from(l));
            }
        }
    }
    RefOutput { o, lse }
}

/// 5c. The pinned example: Case::example in f16 has a visible but small same-precision error.
#[test]
fn example_case_has_a_small_nonzero_f16_error() {
    let case = Case::example("k");
    let x = data::generate(&case);
    let r64 = CpuF64.forward(&case, &x);
    let t = tolerance(&case, &r64, &CpuSamePrecision.forward(&case, &x));
    assert!(t.err_lowp > 0.0 && t.err_lowp < 4e-3, "{t:?}");
    assert!(t.bound < 1e-2, "{t:?}");
}

/// 6b. Large logits really do overflow exp without the max subtraction, in every dtype: the
/// test above is only meaningful if they do.
#[test]
fn large_logits_are_large() {
    for dtype in Dtype::ALL {
        let mut c = Case::example("k");
        c.dtype = dtype;
        c.data.dist = ValueDist::LargeLogits;
        let x = data::generate(&c);
        let lse = CpuF64.forward(&c, &x).lse;
        let over = lse.iter().filter(|&&l| l > 90.0).count();
        assert!(
            over * 10 > lse.len() * 9,
            "{dtype}: {over} of {} rows have lse > 90",
            lse.len()
        );
    }
}
