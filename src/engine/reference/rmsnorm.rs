//! The built-in op `rmsnorm`: `y = x / sqrt(mean(x²) + eps) · weight` over the last axis of `x`
//! (any rank ≥ 1), `weight [n]`, scalar `eps` (as the kernel receives it, f32). Judged by the
//! row ops' tolerance (the `rows` module) with `S = max|y|`.
//!
//! # Semantics (row by row, `n` elements)
//!
//! * Gold, f64: `ms = (Σ_j x_j · x_j) / n` sequential; `r = 1 / sqrt(ms + eps)`;
//!   `y_j = (x_j · r) · w_j`.
//! * Baseline for type `T` (f32 arithmetic, no FMA, inputs as stored): the same in f32, each
//!   operation correctly rounded, `y_j = round_T((x_j · r) · w_j)`.
//!
//! A NaN in a row makes the row NaN; an infinite `x` makes `r = 0`, so the row's finite
//! elements give 0 and its infinite ones NaN.

use super::rows::{round_t, row_case, shape, tolerance};
use super::BindingError;
use super::{peak, Bound, GpuOutput, GpuReference, OpCase, OpReference, OpValues, RoleInputs, RoleValues, Rule};
use crate::core::manifest::BuiltinOp;

/// The `rmsnorm` op.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rmsnorm;

/// Gold and baseline of RMSNorm over rows of `n` of `x` (logical order).
pub fn rmsnorm(c: &OpCase, x: &[f64], w: &[f64]) -> RoleValues {
    let (rows, n) = shape(c);
    assert_eq!(x.len(), rows * n, "x does not match the case");
    assert_eq!(w.len(), n, "weight does not match the case");
    let eps = c.scalar("eps");
    let mut gold = Vec::with_capacity(x.len());
    let mut baseline = Vec::with_capacity(x.len());
    for row in x.chunks_exact(n.max(1)).take(rows) {
        let ms = row.iter().fold(0.0f64, |a, &v| a + v * v) / n as f64;
        let r = 1.0 / (ms + eps).sqrt();
        gold.extend(row.iter().zip(w).map(|(&v, &wj)| v * r * wj));

        let ms32 = row.iter().fold(0.0f32, |a, &v| a + (v as f32) * (v as f32)) / n as f32;
        let r32 = 1.0f32 / (ms32 + eps as f32).sqrt();
        baseline.extend(row.iter().zip(w).map(|(&v, &wj)| round_t((v as f32) * r32 * (wj as f32), c.dtype) as f64));
    }
    RoleValues::new(gold, baseline)
}

impl OpReference for Rmsnorm {
    fn op(&self) -> BuiltinOp {
        BuiltinOp::Rmsnorm
    }

    fn case(&self, b: &Bound<'_>) -> Result<OpCase, BindingError> {
        row_case(b, &["weight"], true)
    }

    fn cpu(&self, c: &OpCase, inputs: &RoleInputs<'_>) -> OpValues {
        OpValues::from([("y".to_string(), rmsnorm(c, inputs["x"], inputs["weight"]))])
    }

    fn gpu(&self) -> GpuReference {
        GpuReference { manifest: "rmsnorm_f64.toml", outputs: &[GpuOutput { role: "y", gold: "ref_y", baseline: "ref_y_lowp", cond: None }] }
    }

    fn rule(&self, _role: &str, c: &OpCase, values: &OpValues, _inputs: &RoleInputs<'_>) -> Rule {
        let y = &values["y"];
        Rule::Bound(tolerance(c, &y.gold, &y.baseline, peak(&y.gold)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::case::{Dtype, Scalar};

    fn case(rows: u64, n: u64, eps: f64, dtype: Dtype) -> OpCase {
        OpCase { dims: [("rows".to_string(), rows), ("n".to_string(), n)].into(), scalars: [("eps".to_string(), Scalar::Float(eps))].into(), dtype }
    }

    #[test]
    fn closed_forms() {
        // [3, 4]: mean square 12.5; eps 0 → y = x / sqrt(12.5) · w.
        let r = rmsnorm(&case(1, 2, 0.0, Dtype::F32), &[3.0, 4.0], &[1.0, 2.0]);
        let s = 12.5f64.sqrt();
        assert!((r.gold[0] - 3.0 / s).abs() < 1e-15 && (r.gold[1] - 8.0 / s).abs() < 1e-15, "{:?}", r.gold);
        // A constant row c gives sign(c) · w when eps is 0; a zero row gives 0 whatever eps.
        let r = rmsnorm(&case(2, 3, 0.0, Dtype::F16), &[-0.5, -0.5, -0.5, 0.0, 0.0, 0.0], &[1.0, 2.0, 3.0]);
        assert_eq!(&r.gold[..3], &[-1.0, -2.0, -3.0]);
        let r = rmsnorm(&case(1, 3, 1e-5, Dtype::Bf16), &[0.0; 3], &[1.0, 2.0, 3.0]);
        assert_eq!(r.gold, vec![0.0; 3]);
        // eps dominates a row far below it: y ≈ x / sqrt(eps).
        let r = rmsnorm(&case(1, 1, 1e-4, Dtype::F32), &[1e-6], &[1.0]);
        assert!((r.gold[0] - 1e-6 / (1e-12f64 + 1e-4).sqrt()).abs() < 1e-18);
    }

    #[test]
    fn baseline_is_never_flagged_and_specials_match() {
        let n = 1025;
        let x: Vec<f64> = (0..3 * n).map(|i| crate::engine::data::round_to(((i * 7919 % 211) as f64 - 105.0) / 13.0, Dtype::Bf16)).collect();
        let w: Vec<f64> = (0..n).map(|i| crate::engine::data::round_to(1.0 + (i % 7) as f64 / 8.0, Dtype::Bf16)).collect();
        let c = case(3, n as u64, 1e-6, Dtype::Bf16);
        let r = rmsnorm(&c, &x, &w);
        let t = tolerance(&c, &r.gold, &r.baseline, peak(&r.gold));
        assert!(t.err_lowp > 0.0 && t.err_lowp <= t.bound, "{t:?}");
        let r = rmsnorm(&case(1, 2, 1e-6, Dtype::F16), &[f64::INFINITY, 1.0], &[1.0, 1.0]);
        for v in [&r.gold, &r.baseline] {
            assert!(v[0].is_nan() && v[1] == 0.0, "{v:?}");
        }
    }
}
