//! The built-in op `softmax`: `y = exp(x - max) / Σ exp(x - max)` over the last axis of `x`
//! (any rank ≥ 1), `y` of x's shape. Judged by the row ops' tolerance (the `rows` module) with
//! `S = max|y|`.
//!
//! # Semantics (row by row, `n` elements)
//!
//! * Gold, f64: `m = max_j x_j` (by `>`, from `-inf`, so NaN never wins);
//!   `e_j = exp(x_j - m)`; `l = Σ_j e_j` sequential; `y_j = e_j / l`.
//! * Baseline for type `T` (f32 arithmetic, no FMA): the same with `x_j` in f32 (exact),
//!   `e_j = (f32) exp((f64)(x_j - m))` (correctly rounded), `l` summed sequentially in f32, and
//!   `y_j = round_T(e_j / l)`.
//!
//! A row holding NaN or `+inf` gives NaN everywhere (as a kernel subtracting the row maximum
//! does: `inf - inf`), a row of `-inf` too; `-inf` elements of another row give exact zeros.

use super::rows::{round_t, row_case, row_max, shape, tolerance};
use super::BindingError;
use super::{peak, Bound, GpuOutput, GpuReference, OpCase, OpReference, OpValues, RoleInputs, RoleValues, Rule};
use crate::core::manifest::BuiltinOp;

/// The `softmax` op.
#[derive(Clone, Copy, Debug, Default)]
pub struct Softmax;

/// Gold and baseline of softmax over rows of `n` of `x` (logical order).
pub fn softmax(c: &OpCase, x: &[f64]) -> RoleValues {
    let (rows, n) = shape(c);
    assert_eq!(x.len(), rows * n, "x does not match the case");
    let mut gold = Vec::with_capacity(x.len());
    let mut baseline = Vec::with_capacity(x.len());
    let mut e32 = vec![0.0f32; n];
    for row in x.chunks_exact(n.max(1)).take(rows) {
        let m = row_max(row, f64::NEG_INFINITY);
        let e: Vec<f64> = row.iter().map(|&v| libm::exp(v - m)).collect();
        let l: f64 = e.iter().fold(0.0, |a, &v| a + v);
        gold.extend(e.iter().map(|&v| v / l));

        let m32 = row_max(row, f64::NEG_INFINITY) as f32;
        let mut l32 = 0.0f32;
        for (ej, &v) in e32.iter_mut().zip(row) {
            *ej = libm::exp(((v as f32) - m32) as f64) as f32;
            l32 += *ej;
        }
        baseline.extend(e32.iter().map(|&ej| round_t(ej / l32, c.dtype) as f64));
    }
    RoleValues::new(gold, baseline)
}

impl OpReference for Softmax {
    fn op(&self) -> BuiltinOp {
        BuiltinOp::Softmax
    }

    fn case(&self, b: &Bound<'_>) -> Result<OpCase, BindingError> {
        row_case(b, &[], false)
    }

    fn cpu(&self, c: &OpCase, inputs: &RoleInputs<'_>) -> OpValues {
        OpValues::from([("y".to_string(), softmax(c, inputs["x"]))])
    }

    fn gpu(&self) -> GpuReference {
        GpuReference { manifest: "softmax_f64.toml", outputs: &[GpuOutput { role: "y", gold: "ref_y", baseline: "ref_y_lowp", cond: None }] }
    }

    fn rule(&self, _role: &str, c: &OpCase, values: &OpValues, _inputs: &RoleInputs<'_>) -> Rule {
        let y = &values["y"];
        Rule::Bound(tolerance(c, &y.gold, &y.baseline, peak(&y.gold)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::case::Dtype;

    fn case(rows: u64, n: u64, dtype: Dtype) -> OpCase {
        OpCase { dims: [("rows".to_string(), rows), ("n".to_string(), n)].into(), scalars: Default::default(), dtype }
    }

    #[test]
    fn by_hand() {
        // [0, ln 3] → [1/4, 3/4]; a row of length 1 is 1.
        let r = softmax(&case(1, 2, Dtype::F32), &[0.0, 3f64.ln()]);
        assert!((r.gold[0] - 0.25).abs() < 1e-15 && (r.gold[1] - 0.75).abs() < 1e-15, "{:?}", r.gold);
        assert_eq!(softmax(&case(3, 1, Dtype::F16), &[5.0, -1e4, 0.0]).gold, vec![1.0; 3]);
    }

    #[test]
    fn rows_sum_to_one_and_shift_invariant() {
        let x: Vec<f64> = (0..4 * 37).map(|i| ((i * 7919 % 113) as f64 - 56.0) / 4.0).collect();
        let c = case(4, 37, Dtype::Bf16);
        let r = softmax(&c, &x);
        for row in r.gold.chunks(37) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
        let shifted: Vec<f64> = x.iter().map(|v| v + 80.0).collect();
        let s = softmax(&c, &shifted);
        for (a, b) in r.gold.iter().zip(&s.gold) {
            assert!((a - b).abs() < 1e-12);
        }
        // Large logits neither overflow nor flag the baseline.
        let big: Vec<f64> = x.iter().map(|v| v * 1e3).collect();
        let r = softmax(&c, &big);
        assert!(r.gold.iter().all(|v| v.is_finite()));
        let t = tolerance(&c, &r.gold, &r.baseline, peak(&r.gold));
        assert!(super::super::max_abs_diff(&r.gold, &r.baseline) <= t.bound);
    }

    #[test]
    fn special_values_follow_the_row() {
        let inf = f64::INFINITY;
        let r = softmax(&case(3, 2, Dtype::F16), &[f64::NAN, 1.0, inf, 1.0, -inf, 1.0]);
        for v in [&r.gold, &r.baseline] {
            assert!(v[0].is_nan() && v[1].is_nan() && v[2].is_nan() && v[3].is_nan(), "{v:?}");
            assert_eq!(&v[4..], &[0.0, 1.0]);
        }
    }
}
