//! What the row-wise built-in ops (`softmax`, `rmsnorm`, `layernorm`) share: reading the case
//! (`x [..., n]`, `y` of x's shape, per-column `weight` / `bias` of length `n`, scalar `eps`)
//! as `rows × n`, and the tolerance that judges `y`.
//!
//! # Tolerance
//!
//! The same-precision baseline rule (see the crate's `reference` module) with a floor that is
//! derived from the op's conditioning, so that a correct kernel is never flagged where the
//! baseline happens to be (nearly) exact:
//!
//! `bound = 2 · max|baseline − gold| + 8 · u_T · max|gold| + (⌈log₂ n⌉ + 8) · u_f32 · S`
//!
//! * `8 · u_T · max|gold|`: a correct kernel pays the final rounding into the output
//!   type `T` (half an ulp) and, in f32, a few ulps more for fast intrinsics (`rsqrtf` is within
//!   2 ulp, `expf` 2 ulp) and another operation order; the baseline may be exact on the case
//!   (a row of length 1, a constant row), so the factor alone would demand bit-exactness. It
//!   scales with the output's own magnitude, not with `max(1, ·)`: an output far below 1 is
//!   judged at its own scale, where a wrong tail would hide under an absolute floor.
//! * `(⌈log₂ n⌉ + 8) · u_f32 · S`: any f32 reduction of `n` terms by a tree (warp shuffles, then
//!   a block) has relative error at most `⌈log₂ n⌉ · u_f32` per sum of like-signed terms; `S` is
//!   the size of what that error scales into the output: `max|y|` for softmax and RMSNorm (sums
//!   of positive terms, `y` proportional to `1/sum` or `1/sqrt(sum)`), and for LayerNorm
//!   `max_row(max|x| · rstd) · max|weight| + max|y|`, because the mean's rounding error, of size
//!   `u · max|x|`, is amplified by `rstd` (large for near-constant rows, as large as
//!   `1/sqrt(eps)`).
//!
//! Special values are judged by pattern, not by the bound: both references propagate NaN and
//! infinity the way a straightforward kernel does (a NaN in a row makes that row NaN; softmax of
//! a row holding `+inf` is NaN; RMSNorm of a row holding `inf` is `0` where `x` is finite and NaN
//! where it is infinite).

use crate::core::case::Dtype;

use super::BindingError;
use super::{baseline_tolerance, peak, Bound, OpCase, Tolerance};

/// The baseline rule's factor (FlashAttention's).
pub const FACTOR: f64 = 2.0;

/// A row op's case from its binding: dims `rows` (the product of x's leading dims, 1 for a
/// rank-1 x) and `n` (x's last dim), scalar `eps` when the op has one; `y` must have x's shape
/// and every `per_column` role shape `[n]`.
pub fn row_case(b: &Bound<'_>, per_column: &[&str], eps: bool) -> Result<OpCase, BindingError> {
    let x = b.need("x")?;
    let y = b.need("y")?;
    if y.shape != x.shape {
        return Err(BindingError::Shape(format!("`y` ({}, shape {:?}) must have the shape of `x` ({}, shape {:?})", y.name, y.shape, x.name, x.shape)));
    }
    let n = *x.shape.last().ok_or_else(|| BindingError::Shape("`x` has rank 0".into()))?;
    for role in per_column {
        let t = b.need(role)?;
        if t.shape != [n] {
            return Err(BindingError::Shape(format!("`{role}` ({}, shape {:?}) must have shape [{n}], the last dim of `x`", t.name, t.shape)));
        }
    }
    let rows = x.shape[..x.shape.len() - 1].iter().product::<u64>();
    let mut c = OpCase { dims: [("rows".to_string(), rows), ("n".to_string(), n)].into(), scalars: Default::default(), dtype: x.dtype };
    if eps {
        let e = b.scalar("eps").ok_or_else(|| BindingError::NoScalar { role: "eps".into() })?;
        c.scalars.insert("eps".into(), crate::core::case::Scalar::Float(e as f32 as f64));
    }
    Ok(c)
}

/// `(rows, n)` of a row op's case.
pub fn shape(c: &OpCase) -> (usize, usize) {
    (c.dim("rows") as usize, c.dim("n") as usize)
}

/// The tolerance of a row op's `y` (module docs); `scale` is `S`.
pub fn tolerance(c: &OpCase, gold: &[f64], baseline: &[f64], scale: f64) -> Tolerance {
    let n = c.dim("n").max(1);
    let log2n = 64 - (n - 1).leading_zeros() as u64;
    let u32_ = Dtype::F32.unit_roundoff();
    let floor = 8.0 * c.dtype.unit_roundoff() * peak(gold) + (log2n + 8) as f64 * u32_ * scale;
    baseline_tolerance(gold, baseline, FACTOR, floor)
}

/// Round-to-nearest-even of an f32 into `dtype`, staying in f32 (exact both ways).
pub fn round_t(x: f32, dtype: Dtype) -> f32 {
    match dtype {
        Dtype::F32 | Dtype::F64 => x,
        _ => crate::engine::data::round_to(x as f64, dtype) as f32,
    }
}

/// The largest of `values` by `>` (NaN never wins), from `-inf`: what a kernel's `fmaxf`
/// reduction gives.
pub fn row_max<T: Copy + PartialOrd>(values: &[T], neg_inf: T) -> T {
    values.iter().fold(neg_inf, |m, &v| if v > m { v } else { m })
}
