//! The built-in op `rotary` ([`RotaryOp`]): rotary position embedding as in vLLM and
//! FlashAttention, its geometry ([`Rotary`], read from the tensors and scalars a manifest
//! binds), its fp64 gold and same-precision baseline ([`forward`], on the GPU
//! `kernels/reference/rotary_f64`), judged by the same condition-derived bound as GEMM
//! ([`super::gemm::dot_tolerance`] with two terms).
//!
//! # Semantics
//!
//! * `x` is `[tokens, heads, head_dim]`; `cos` and `sin` are `[max_pos, rot_dim / 2]` (so
//!   `rot_dim` is twice `cos`'s second extent, at most `head_dim`), in f32 or the case's type;
//!   `positions` is `[tokens]` of integers in `0..max_pos`.
//! * Token `t` at position `p = positions[t]` rotates, in every head, the pairs `(i₁, i₂)` of its
//!   first `rot_dim` elements by the angle whose cosine and sine are `cos[p, i]` and `sin[p, i]`:
//!   `y[i₁] = x[i₁]·cos − x[i₂]·sin`, `y[i₂] = x[i₂]·cos + x[i₁]·sin`. The pairs are
//!   **interleaved** `(2i, 2i + 1)` (GPT-J style) when the optional flag `interleaved` is set, and
//!   **half-split** `(i, i + rot_dim/2)` (GPT-NeoX style, vLLM's default) when it is not or is
//!   unbound. Elements past `rot_dim` are copied unchanged.
//! * The result goes to `y` (same shape as `x`) when the manifest binds one; otherwise `x` is
//!   rotated in place (an in-out tensor, as vLLM's `rotary_embedding` does to query and key).
//! * **Gold** in f64; **baseline** as a real kernel: inputs as stored, the two products and their
//!   sum in f32 (no FMA), rounded to the output's type.
//! * The bound's condition per element is `|x[i₁]||cos| + |x[i₂]||sin|` (0 for copied elements,
//!   which must come back exactly, up to the floor).

use crate::core::case::{Dtype, Scalar};
use crate::core::manifest::BuiltinOp;
use crate::engine::data::round_to;

use super::gemm::dot_tolerance;
use super::BindingError;
use super::{readable, Bound, GpuOutput, GpuReference, OpCase, OpReference, OpValues, RoleInputs, RoleValues, Rule};

/// The op's geometry for one case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rotary {
    /// Tokens (rows of `x`, entries of `positions`).
    pub tokens: u64,
    /// Heads per token.
    pub heads: u64,
    /// Elements per head.
    pub head_dim: u64,
    /// Rotated elements per head (even, at most `head_dim`).
    pub rot_dim: u64,
    /// Rows of `cos` and `sin`.
    pub max_pos: u64,
    /// Pairs `(2i, 2i + 1)` rather than `(i, i + rot_dim / 2)`.
    pub interleaved: bool,
    /// The output's element type.
    pub dtype: Dtype,
}

impl Rotary {
    /// The element pair `i` of `0..rot_dim / 2` rotates.
    pub fn pair(&self, i: usize) -> (usize, usize) {
        if self.interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + self.rot_dim as usize / 2)
        }
    }
}

impl Rotary {
    /// The geometry of an op case (the dims and scalars of `rotary_f64`'s manifest).
    pub fn from_case(c: &OpCase) -> Rotary {
        let d = |n: &str| c.dim(n);
        Rotary {
            tokens: d("tokens"),
            heads: d("heads"),
            head_dim: d("head_dim"),
            rot_dim: 2 * d("rot_half"),
            max_pos: d("max_pos"),
            interleaved: c.scalar("interleaved") != 0.0,
            dtype: c.dtype,
        }
    }

    /// The op case of this geometry.
    pub fn to_case(&self) -> OpCase {
        let dims = [("tokens", self.tokens), ("heads", self.heads), ("head_dim", self.head_dim), ("rot_half", self.rot_dim / 2), ("max_pos", self.max_pos)];
        let scalars = [("interleaved".to_string(), Scalar::Bool(self.interleaved))].into();
        OpCase { dims: dims.map(|(k, v)| (k.to_string(), v)).into(), scalars, dtype: self.dtype }
    }
}

/// The geometry of a planned case from the bound tensors (`x`, `cos`, `sin`, `positions`,
/// optional `y`) and the optional flag `interleaved`; a message when the shapes do not agree.
pub fn geometry(b: &Bound<'_>) -> Result<Rotary, BindingError> {
    let (x, cos, sin, pos) = (b.need("x")?, b.need("cos")?, b.need("sin")?, b.need("positions")?);
    let out = b.tensor("y").unwrap_or(x);
    let r = Rotary {
        tokens: x.shape[0],
        heads: x.shape[1],
        head_dim: x.shape[2],
        rot_dim: 2 * cos.shape[1],
        max_pos: cos.shape[0],
        interleaved: b.scalar("interleaved").is_some_and(|v| v != 0.0),
        dtype: out.dtype,
    };
    if sin.shape != cos.shape || pos.shape[0] != r.tokens || r.rot_dim > r.head_dim || out.shape != x.shape {
        return Err(BindingError::Shape(format!(
            "rotary needs x and y [tokens, heads, head_dim], cos and sin [max_pos, rot_dim / 2] with rot_dim <= head_dim, positions [tokens]; x {:?}, y {:?}, cos {:?}, sin {:?}, positions {:?}",
            x.shape, out.shape, cos.shape, sin.shape, pos.shape
        )));
    }
    readable(b, "x")?;
    Ok(r)
}

/// The op's inputs in logical order.
#[derive(Clone, Copy, Debug)]
pub struct RotaryInputs<'a> {
    /// `x` (its initial contents when rotated in place).
    pub x: &'a [f64],
    /// Cosines.
    pub cos: &'a [f64],
    /// Sines.
    pub sin: &'a [f64],
    /// Positions, one per token.
    pub positions: &'a [f64],
}

/// Gold, baseline and condition, each in `x`'s logical order; a token whose position lies
/// outside `0..max_pos` (the op is undefined there) gets NaN in its rotated elements, as on the
/// GPU. Panics when the inputs do not match the geometry.
pub fn forward(r: &Rotary, x: &RotaryInputs<'_>) -> RoleValues {
    let (tokens, heads, dim, half) = (r.tokens as usize, r.heads as usize, r.head_dim as usize, r.rot_dim as usize / 2);
    assert_eq!(x.x.len(), tokens * heads * dim, "x does not match the geometry");
    assert_eq!(x.cos.len(), r.max_pos as usize * half, "cos does not match the geometry");
    let mut gold = x.x.to_vec();
    let mut lowp = x.x.to_vec();
    let mut cond = vec![0.0; x.x.len()];
    for (t, &p) in x.positions.iter().enumerate().take(tokens) {
        if !(p >= 0.0 && p < r.max_pos as f64) {
            for h in 0..heads {
                let base = (t * heads + h) * dim;
                for v in [&mut gold, &mut lowp, &mut cond] {
                    v[base..base + 2 * half].fill(f64::NAN);
                }
            }
            continue;
        }
        let row = p as usize * half;
        for h in 0..heads {
            let base = (t * heads + h) * dim;
            for i in 0..half {
                let (c, s) = (x.cos[row + i], x.sin[row + i]);
                let (i1, i2) = r.pair(i);
                let (a, b) = (x.x[base + i1], x.x[base + i2]);
                gold[base + i1] = a * c - b * s;
                gold[base + i2] = b * c + a * s;
                let (a32, b32, c32, s32) = (a as f32, b as f32, c as f32, s as f32);
                lowp[base + i1] = round_to((a32 * c32 - b32 * s32) as f64, r.dtype);
                lowp[base + i2] = round_to((b32 * c32 + a32 * s32) as f64, r.dtype);
                cond[base + i1] = (a * c).abs() + (b * s).abs();
                cond[base + i2] = (b * c).abs() + (a * s).abs();
            }
        }
    }
    RoleValues { gold, baseline: lowp, cond }
}

/// The built-in op `rotary`: `y` (or `x` rotated in place when `y` is unbound) judged by
/// [`dot_tolerance`] over two terms; on the GPU, `rotary_f64` (which reads a dense copy of an
/// in-place `x`'s initial contents).
#[derive(Clone, Copy, Debug, Default)]
pub struct RotaryOp;

impl OpReference for RotaryOp {
    fn op(&self) -> BuiltinOp {
        BuiltinOp::Rotary
    }

    fn case(&self, b: &Bound<'_>) -> Result<OpCase, BindingError> {
        geometry(b).map(|r| r.to_case())
    }

    fn cpu(&self, c: &OpCase, inputs: &RoleInputs<'_>) -> OpValues {
        let view = RotaryInputs { x: inputs["x"], cos: inputs["cos"], sin: inputs["sin"], positions: inputs["positions"] };
        OpValues::from([("y".to_string(), forward(&Rotary::from_case(c), &view))])
    }

    fn gpu(&self) -> GpuReference {
        GpuReference { manifest: "rotary_f64.toml", outputs: &[GpuOutput { role: "y", gold: "ref_y", baseline: "ref_y_lowp", cond: Some("ref_y_cond") }] }
    }

    fn rule(&self, _role: &str, c: &OpCase, values: &OpValues, _inputs: &RoleInputs<'_>) -> Rule {
        Rule::Bound(dot_tolerance(c.dtype, 2, &values["y"]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::reference::max_abs_diff;

    fn geo(interleaved: bool, dtype: Dtype) -> Rotary {
        Rotary { tokens: 2, heads: 1, head_dim: 6, rot_dim: 4, max_pos: 3, interleaved, dtype }
    }

    /// The direct formula: rotate pair (i₁, i₂) by angle θ = atan2(sin, cos).
    fn direct(r: &Rotary, x: &[f64], cos: &[f64], sin: &[f64], pos: &[f64]) -> Vec<f64> {
        let dim = r.head_dim as usize;
        let half = r.rot_dim as usize / 2;
        let mut y = x.to_vec();
        for (t, &p) in pos.iter().enumerate() {
            for i in 0..half {
                let (c, s) = (cos[p as usize * half + i], sin[p as usize * half + i]);
                let (i1, i2) = if r.interleaved { (2 * i, 2 * i + 1) } else { (i, i + half) };
                let (a, b) = (x[t * dim + i1], x[t * dim + i2]);
                // As a complex product (a + ib)(c + is).
                y[t * dim + i1] = a * c - b * s;
                y[t * dim + i2] = a * s + b * c;
            }
        }
        y
    }

    #[test]
    fn both_variants_by_hand() {
        // A quarter turn (cos 0, sin 1) at position 1 maps (a, b) to (-b, a); position 0 is the
        // identity. x rows: [1 2 3 4 5 6] at position 1, [7 8 9 10 11 12] at position 0.
        let x: Vec<f64> = (1..=12).map(|v| v as f64).collect();
        let cos = [1.0, 1.0, 0.0, 0.0, 0.5, 0.5];
        let sin = [0.0, 0.0, 1.0, 1.0, 0.5, 0.5];
        let pos = [1.0, 0.0];
        let view = RotaryInputs { x: &x, cos: &cos, sin: &sin, positions: &pos };
        let inter = forward(&geo(true, Dtype::F32), &view);
        assert_eq!(&inter.gold[..6], &[-2.0, 1.0, -4.0, 3.0, 5.0, 6.0]);
        assert_eq!(&inter.gold[6..], &x[6..]);
        let neox = forward(&geo(false, Dtype::F32), &view);
        assert_eq!(&neox.gold[..6], &[-3.0, -4.0, 1.0, 2.0, 5.0, 6.0]);
        assert_eq!(inter.baseline, inter.gold);
        // Position 2 (cos = sin = 1/2) against the direct formula, both variants, and a
        // position out of range is undefined.
        let pos = [2.0, 1.0];
        let view = RotaryInputs { positions: &pos, ..view };
        for il in [true, false] {
            let r = geo(il, Dtype::F32);
            assert_eq!(forward(&r, &view).gold, direct(&r, &x, &cos, &sin, &pos));
        }
        // A position outside the cache is undefined: NaN in the rotated elements, the rest copied.
        let out = forward(&geo(true, Dtype::F32), &RotaryInputs { positions: &[3.0, 0.0], ..view });
        assert!(out.gold[..4].iter().chain(&out.baseline[..4]).all(|v| v.is_nan()));
        assert_eq!(&out.gold[4..], &x[4..]);
    }

    #[test]
    fn baseline_and_fma_orders_pass_their_bound() {
        for dtype in [Dtype::F16, Dtype::Bf16, Dtype::F32] {
            for scale in [1.0, 8.0, 1e-4] {
                let r = Rotary { tokens: 5, heads: 3, head_dim: 10, rot_dim: 8, max_pos: 7, interleaved: false, dtype };
                let vals = |n: usize, seed: u64, s: f64| {
                    (0..n).map(|i| round_to(((((i as u64 + 3) * 2654435761 + seed) % 2001) as f64 / 1000.0 - 1.0) * s, dtype)).collect::<Vec<f64>>()
                };
                let (x, cos, sin) = (vals(150, 1, scale), vals(28, 2, 1.0), vals(28, 3, 1.0));
                let pos = [0.0, 6.0, 3.0, 3.0, 1.0];
                let out = forward(&r, &RotaryInputs { x: &x, cos: &cos, sin: &sin, positions: &pos });
                let tol = dot_tolerance(dtype, 2, &out);
                assert!(max_abs_diff(&out.baseline, &out.gold) <= tol.bound, "{dtype} {scale}: {tol:?}");
                // A kernel that fuses with FMA: x1·c − x2·s as fma(x1, c, −x2·s).
                let mut fused = x.clone();
                for (t, &p) in pos.iter().enumerate() {
                    for h in 0..3 {
                        for i in 0..4 {
                            let (c, s) = (cos[p as usize * 4 + i] as f32, sin[p as usize * 4 + i] as f32);
                            let b0 = (t * 3 + h) * 10;
                            let (a, b) = (x[b0 + i] as f32, x[b0 + i + 4] as f32);
                            fused[b0 + i] = round_to(a.mul_add(c, -(b * s)) as f64, dtype);
                            fused[b0 + i + 4] = round_to(b.mul_add(c, a * s) as f64, dtype);
                        }
                    }
                }
                assert!(max_abs_diff(&fused, &out.gold) <= tol.bound, "{dtype} {scale}: {tol:?}");
                // Pairs swapped (the wrong variant) are far outside, at magnitudes above the
                // floor's absolute part.
                if scale < 1e-2 {
                    continue;
                }
                let other = forward(&Rotary { interleaved: true, ..r }, &RotaryInputs { x: &x, cos: &cos, sin: &sin, positions: &pos });
                assert!(max_abs_diff(&other.gold, &out.gold) > tol.bound, "{dtype} {scale}");
            }
        }
    }
}
