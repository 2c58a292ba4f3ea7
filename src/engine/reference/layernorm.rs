//! The built-in op `layernorm`: `y = (x - mean) / sqrt(var + eps) · weight + bias` over the last
//! axis of `x` (any rank ≥ 1), with the biased variance (`/ n`), `weight` and `bias` `[n]`,
//! scalar `eps` (f32). Judged by the row ops' tolerance (the `rows` module) with
//! `S = max_row(max|x| · rstd) · max|weight| + max|y|`.
//!
//! # Semantics (row by row, `n` elements; two passes, as numerically careful kernels do)
//!
//! * Gold, f64: `mean = (Σ_j x_j) / n`; `d_j = x_j - mean`; `var = (Σ_j d_j · d_j) / n`;
//!   `rstd = 1 / sqrt(var + eps)`; `y_j = (d_j · rstd) · w_j + b_j`; sums sequential.
//! * Baseline for type `T` (f32 arithmetic, no FMA, inputs as stored): the same in f32, each
//!   operation correctly rounded, `y_j = round_T((d_j · rstd) · w_j + b_j)`.
//!
//! A constant row has `var = 0` and gives `y = bias`; a NaN or an infinity in a row makes it NaN.

use super::rows::{round_t, row_case, shape, tolerance};
use super::BindingError;
use super::{peak, Bound, GpuOutput, GpuReference, OpCase, OpReference, OpValues, RoleInputs, RoleValues, Rule};
use crate::core::manifest::BuiltinOp;

/// The `layernorm` op.
#[derive(Clone, Copy, Debug, Default)]
pub struct Layernorm;

/// Mean and rstd of one row, in f64.
fn moments(row: &[f64], eps: f64) -> (f64, f64) {
    let n = row.len() as f64;
    let mean = row.iter().fold(0.0f64, |a, &v| a + v) / n;
    let var = row.iter().fold(0.0f64, |a, &v| a + (v - mean) * (v - mean)) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// Gold and baseline of LayerNorm over rows of `n` of `x` (logical order).
pub fn layernorm(c: &OpCase, x: &[f64], w: &[f64], b: &[f64]) -> RoleValues {
    let (rows, n) = shape(c);
    assert_eq!(x.len(), rows * n, "x does not match the case");
    assert!(w.len() == n && b.len() == n, "weight or bias does not match the case");
    let eps = c.scalar("eps");
    let mut gold = Vec::with_capacity(x.len());
    let mut baseline = Vec::with_capacity(x.len());
    for row in x.chunks_exact(n.max(1)).take(rows) {
        let (mean, rstd) = moments(row, eps);
        gold.extend(row.iter().zip(w.iter().zip(b)).map(|(&v, (&wj, &bj))| (v - mean) * rstd * wj + bj));

        let n32 = n as f32;
        let mean32 = row.iter().fold(0.0f32, |a, &v| a + v as f32) / n32;
        let var32 = row.iter().fold(0.0f32, |a, &v| a + (v as f32 - mean32) * (v as f32 - mean32)) / n32;
        let rstd32 = 1.0f32 / (var32 + eps as f32).sqrt();
        baseline.extend(row.iter().zip(w.iter().zip(b)).map(|(&v, (&wj, &bj))| round_t((v as f32 - mean32) * rstd32 * wj as f32 + bj as f32, c.dtype) as f64));
    }
    RoleValues::new(gold, baseline)
}

/// `max_row(max|x| · rstd)` over the finite rows: how far the mean's rounding is amplified.
fn amplification(c: &OpCase, x: &[f64]) -> f64 {
    let (rows, n) = shape(c);
    let eps = c.scalar("eps");
    x.chunks_exact(n.max(1)).take(rows).map(|row| peak(row) * moments(row, eps).1).filter(|a| a.is_finite()).fold(0.0, f64::max)
}

impl OpReference for Layernorm {
    fn op(&self) -> BuiltinOp {
        BuiltinOp::Layernorm
    }

    fn case(&self, b: &Bound<'_>) -> Result<OpCase, BindingError> {
        row_case(b, &["weight", "bias"], true)
    }

    fn cpu(&self, c: &OpCase, inputs: &RoleInputs<'_>) -> OpValues {
        OpValues::from([("y".to_string(), layernorm(c, inputs["x"], inputs["weight"], inputs["bias"]))])
    }

    fn gpu(&self) -> GpuReference {
        GpuReference { manifest: "layernorm_f64.toml", outputs: &[GpuOutput { role: "y", gold: "ref_y", baseline: "ref_y_lowp", cond: None }] }
    }

    fn rule_reads_inputs(&self) -> bool {
        true
    }

    fn rule(&self, _role: &str, c: &OpCase, values: &OpValues, inputs: &RoleInputs<'_>) -> Rule {
        let y = &values["y"];
        let w = inputs.get("weight").map(|w| peak(w)).unwrap_or(1.0);
        let x = inputs.get("x").map(|x| amplification(c, x)).unwrap_or(0.0);
        Rule::Bound(tolerance(c, &y.gold, &y.baseline, x * w + peak(&y.gold)))
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
        // [1, 3]: mean 2, biased var 1 → y = ±1 · w + b (eps 0).
        let r = layernorm(&case(1, 2, 0.0, Dtype::F32), &[1.0, 3.0], &[2.0, 3.0], &[0.5, -0.5]);
        assert_eq!(r.gold, vec![-1.5, 2.5]);
        assert_eq!(r.baseline, vec![-1.5, 2.5]);
        // Constant rows and rows of length 1 give the bias exactly.
        let r = layernorm(&case(2, 3, 1e-5, Dtype::F16), &[0.25; 6], &[1.0, 2.0, 3.0], &[7.0, 8.0, 9.0]);
        assert_eq!(r.gold, vec![7.0, 8.0, 9.0, 7.0, 8.0, 9.0]);
        let r = layernorm(&case(3, 1, 1e-5, Dtype::Bf16), &[1.0, -2.0, 1e-30], &[4.0], &[-1.0]);
        assert_eq!(r.gold, vec![-1.0; 3]);
        assert_eq!(r.baseline, vec![-1.0; 3]);
    }

    #[test]
    fn baseline_is_never_flagged() {
        for (n, dtype) in [(1usize, Dtype::F32), (33, Dtype::F16), (4097, Dtype::Bf16), (257, Dtype::F32)] {
            let x: Vec<f64> = (0..2 * n).map(|i| crate::engine::data::round_to(100.0 + ((i * 7919 % 211) as f64 - 105.0) / 64.0, dtype)).collect();
            let w = vec![1.5; n];
            let b = vec![0.25; n];
            let c = case(2, n as u64, 1e-5, dtype);
            let values = OpValues::from([("y".to_string(), layernorm(&c, &x, &w, &b))]);
            let inputs = RoleInputs::from([("x".to_string(), x.as_slice()), ("weight".to_string(), w.as_slice()), ("bias".to_string(), b.as_slice())]);
            let Rule::Bound(t) = Layernorm.rule("y", &c, &values, &inputs) else { panic!("y is judged by a bound") };
            assert!(t.err_lowp <= t.bound, "{n} {dtype:?}: {t:?}");
        }
    }
}
