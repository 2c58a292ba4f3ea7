//! The built-in op `attention_fwd` on the CPU: its two references behind the small [`Reference`]
//! trait, [`CpuF64`] and [`CpuSamePrecision`], the [`tolerance`] that judges a kernel's `o`
//! against them, and [`Attention`], the op's geometry read from the tensors a manifest binds.
//!
//! The judgment follows FlashAttention's own tests: a kernel's error against the f64 reference
//! may be at most twice the error of a reference computed in the kernel's own precision, plus a
//! small floor. A fixed tolerance would be too loose for benign f32 cases and too tight for
//! bf16 with large logits; the same-precision reference measures what the dtype itself costs on
//! *this* case. Both references are written as plain loops in one fixed order, because a GPU fp64
//! reference kernel written elsewhere implements the same semantics and their results are
//! compared.
//!
//! # Semantics (both references)
//!
//! Inputs are q `[batch, heads_q, seq_q, head_dim]` and k, v `[batch, heads_kv, seq_k,
//! head_dim]` in logical order (the bound tensors' shapes give the sizes); `o` has q's shape and
//! `lse` is `[batch, heads_q, seq_q]`, both in logical order.
//!
//! * **GQA**: query head `h` reads key/value head `h / (heads_q / heads_kv)`.
//! * **Causal mask**, bottom-right aligned (FlashAttention ≥ 2.1): query `i` may attend key `j`
//!   iff `j <= i + seq_k - seq_q` in signed arithmetic. The allowed keys of a row are therefore
//!   the prefix `0..min(seq_k, i + seq_k - seq_q + 1)`. A row with no allowed key (possible
//!   when `seq_q > seq_k`) outputs 0 for every `d` and `lse = -inf`. Without `causal` every key
//!   is allowed.
//! * **[`CpuF64`]**, all in f64 with `scale` widened from f32, sums sequential from `+0`:
//!   `s_j = scale * Σ_d q_d k_jd` (the dot first, then one multiply); `m = max_j s_j`;
//!   `e_j = exp(s_j - m)`; `l = Σ_j e_j`; `p_j = e_j / l`; `o_d = Σ_j p_j v_jd`;
//!   `lse = m + ln l`.
//! * **[`CpuSamePrecision`]** for dtype `T`, where `round_T` is round-to-nearest-even into `T`
//!   (the identity for f32), everything else f32 and no fused multiply-add anywhere:
//!   `acc = +0; for d in 0..D { acc = acc + q_d * k_jd }`; `s_j = round_T(acc * scale)` (kept as
//!   f32); masked `s = -inf`; `m = max_j s_j`; `e_j = (f32) exp((f64)(s_j - m))` (correctly rounded, as the GPU reference computes it);
//!   `l = Σ_j e_j` sequential in `j`; `p_j = round_T(e_j / l)`;
//!   `acc_d = Σ_j p_j * v_jd` sequential in `j`; `o_d = round_T(acc_d)`;
//!   `lse = (m as f64) + ln(l as f64)`. This mirrors a PyTorch reference run in the low
//!   precision (scores, probabilities and output materialised in `T`, f32 accumulation).
//!   Masked keys are a suffix and contribute exact zeros to sums that start at `+0` and so can
//!   never be `-0`; skipping them gives the same bits as summing them.
//!
//! Rows are computed one at a time into buffers allocated once per call; the only reordering
//! is that four keys' dot products run side by side, each still summed in the order above, so
//! the bits are unchanged (see `dots`).
//!
//! `exp`, `expf` and `ln` are `libm`'s, not the host C library's, so both references give the
//! same bits on every platform. Finite inputs keep every f64 quantity finite; in
//! `CpuSamePrecision` a score that overflows `T` would give NaN, which the input generator
//! rules out by keeping magnitudes far below f16's range.

use crate::core::case::Dtype;
use crate::engine::data::round_to;

/// The op's geometry for one case: sizes from the bound tensors' shapes (q `[batch, heads_q,
/// seq_q, head_dim]`, k `[_, heads_kv, seq_k, _]`), flags and scale from the bound scalars, and
/// the element type the same-precision reference rounds into.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attention {
    /// Batch.
    pub batch: u64,
    /// Query heads; a multiple of `heads_kv`.
    pub heads_q: u64,
    /// Key/value heads.
    pub heads_kv: u64,
    /// Query rows.
    pub seq_q: u64,
    /// Keys.
    pub seq_k: u64,
    /// Head dimension.
    pub head_dim: u64,
    /// Causal masking, bottom-right aligned.
    pub causal: bool,
    /// Softmax scale, as the kernel receives it (f32).
    pub scale: f32,
    /// The inputs' element type.
    pub dtype: Dtype,
}

/// The op's inputs, logical order.
#[derive(Clone, Copy, Debug)]
pub struct AttentionInputs<'a> {
    /// Queries.
    pub q: &'a [f64],
    /// Keys.
    pub k: &'a [f64],
    /// Values.
    pub v: &'a [f64],
}

/// The output of a reference forward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct RefOutput {
    /// Attention output, logical `[batch, heads_q, seq_q, head_dim]`.
    pub o: Vec<f64>,
    /// Log-sum-exp of the scaled scores per row, `[batch, heads_q, seq_q]`; `-inf` for a fully
    /// masked row.
    pub lse: Vec<f64>,
}

/// An attention-forward reference implementation.
pub trait Reference {
    /// A short name for reports, e.g. `cpu-f64`.
    fn name(&self) -> &'static str;
    /// Computes the forward pass for a geometry on its inputs (logical order).
    fn forward(&self, a: &Attention, inputs: &AttentionInputs<'_>) -> RefOutput;
}

/// The f64 reference: as exact as a straightforward f64 computation gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuF64;

/// The same-precision reference: what the case's dtype costs with f32 accumulation, the yardstick
/// of the error a kernel is allowed (see the module docs for its exact semantics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSamePrecision;

/// Sizes and per-row helpers shared by both references.
struct Geometry {
    batch: usize,
    heads_q: usize,
    heads_kv: usize,
    group: usize,
    seq_q: usize,
    seq_k: usize,
    dim: usize,
    causal: bool,
}

impl Geometry {
    fn new(a: &Attention, inputs: &AttentionInputs<'_>) -> Geometry {
        let g = Geometry {
            batch: a.batch as usize,
            heads_q: a.heads_q as usize,
            heads_kv: a.heads_kv as usize,
            group: (a.heads_q / a.heads_kv.max(1)).max(1) as usize,
            seq_q: a.seq_q as usize,
            seq_k: a.seq_k as usize,
            dim: a.head_dim as usize,
            causal: a.causal,
        };
        assert_eq!(inputs.q.len(), g.batch * g.heads_q * g.seq_q * g.dim, "q does not match the geometry");
        assert_eq!(inputs.k.len(), g.batch * g.heads_kv * g.seq_k * g.dim, "k does not match the geometry");
        assert_eq!(inputs.v.len(), inputs.k.len(), "v does not match the geometry");
        g
    }

    /// Number of keys query `i` may attend: they are always the prefix `0..n`.
    fn allowed(&self, i: usize) -> usize {
        if !self.causal {
            return self.seq_k;
        }
        let last = i as i64 + self.seq_k as i64 - self.seq_q as i64;
        (last + 1).clamp(0, self.seq_k as i64) as usize
    }

    /// Calls `f(q_row_start, kv_head_start, row_index)` for every query row, where the starts
    /// are element offsets of the row in q/o and of the head's first key in k/v, and
    /// `row_index` indexes `lse`.
    fn for_each_row(&self, mut f: impl FnMut(usize, usize, usize)) {
        let mut row = 0;
        for b in 0..self.batch {
            for h in 0..self.heads_q {
                let kvh = h / self.group;
                let kv_start = (b * self.heads_kv + kvh) * self.seq_k * self.dim;
                for _ in 0..self.seq_q {
                    f(row * self.dim, kv_start, row);
                    row += 1;
                }
            }
        }
    }
}

/// `out[j] = Σ_d q[d] · keys[j][d]` for the key rows of `keys`, each sum sequential over `d`
/// from `+0` with a separate multiply and add (Rust never contracts `a * b + c` into an FMA).
///
/// Four keys go at once with independent accumulators. Each key's sum still runs in the same
/// order, so the bits are exactly those of one key at a time; the point is that the four
/// additions overlap instead of each waiting for the previous one, the sequential order the
/// semantics fix being otherwise latency-bound.
#[inline]
fn dots<T>(q: &[T], keys: &[T], out: &mut [T])
where
    T: Copy + Default + std::ops::Add<Output = T> + std::ops::Mul<Output = T>,
{
    let dim = q.len();
    debug_assert_eq!(keys.len(), out.len() * dim);
    if dim == 0 {
        out.fill(T::default());
        return;
    }
    let mut blocks = keys.chunks_exact(4 * dim);
    let mut outs = out.chunks_exact_mut(4);
    for (k, o) in (&mut blocks).zip(&mut outs) {
        let (k0, rest) = k.split_at(dim);
        let (k1, rest) = rest.split_at(dim);
        let (k2, k3) = rest.split_at(dim);
        let (mut a0, mut a1, mut a2, mut a3) = (T::default(), T::default(), T::default(), T::default());
        for d in 0..dim {
            let x = q[d];
            a0 = a0 + x * k0[d];
            a1 = a1 + x * k1[d];
            a2 = a2 + x * k2[d];
            a3 = a3 + x * k3[d];
        }
        o.copy_from_slice(&[a0, a1, a2, a3]);
    }
    for (k, o) in blocks.remainder().chunks_exact(dim).zip(outs.into_remainder()) {
        let mut a = T::default();
        for d in 0..dim {
            a = a + q[d] * k[d];
        }
        *o = a;
    }
}

impl Reference for CpuF64 {
    fn name(&self) -> &'static str {
        "cpu-f64"
    }

    fn forward(&self, a: &Attention, inputs: &AttentionInputs<'_>) -> RefOutput {
        let g = Geometry::new(a, inputs);
        let (dim, seq_q) = (g.dim, g.seq_q);
        let scale = a.scale as f64;
        let mut o = vec![0.0f64; g.batch * g.heads_q * seq_q * dim];
        let mut lse = vec![f64::NEG_INFINITY; g.batch * g.heads_q * seq_q];
        let mut e = vec![0.0f64; g.seq_k];
        g.for_each_row(|q0, kv0, r| {
            let n = g.allowed(r % seq_q);
            if n == 0 {
                return;
            }
            let q = &inputs.q[q0..q0 + dim];
            let keys = &inputs.k[kv0..kv0 + n * dim];
            dots(q, keys, &mut e[..n]);
            let mut m = f64::NEG_INFINITY;
            for ej in &mut e[..n] {
                let s = scale * *ej;
                *ej = s;
                if s > m {
                    m = s;
                }
            }
            let mut l = 0.0f64;
            for ej in &mut e[..n] {
                *ej = libm::exp(*ej - m);
                l += *ej;
            }
            let out = &mut o[q0..q0 + dim];
            let values = &inputs.v[kv0..kv0 + n * dim];
            for (&ej, v) in e[..n].iter().zip(values.chunks_exact(dim)) {
                let p = ej / l;
                for (od, &vd) in out.iter_mut().zip(v) {
                    *od += p * vd;
                }
            }
            lse[r] = m + libm::log(l);
        });
        RefOutput { o, lse }
    }
}

/// Round-to-nearest-even of an f32 into `dtype`, staying in f32 (exact both ways for f16/bf16).
#[inline]
fn round_f32(x: f32, dtype: Dtype) -> f32 {
    match dtype {
        Dtype::F32 => x,
        _ => round_to(x as f64, dtype) as f32,
    }
}

impl Reference for CpuSamePrecision {
    fn name(&self) -> &'static str {
        "cpu-same-precision"
    }

    fn forward(&self, a: &Attention, inputs: &AttentionInputs<'_>) -> RefOutput {
        let g = Geometry::new(a, inputs);
        let (dim, seq_q, dt) = (g.dim, g.seq_q, a.dtype);
        let scale = a.scale;
        // Narrowed once up front: exact, since every input is representable in the dtype.
        let narrow = |x: &[f64]| x.iter().map(|&v| v as f32).collect::<Vec<f32>>();
        let (q32, k32, v32) = (narrow(inputs.q), narrow(inputs.k), narrow(inputs.v));
        let mut o = vec![0.0f64; g.batch * g.heads_q * seq_q * dim];
        let mut lse = vec![f64::NEG_INFINITY; g.batch * g.heads_q * seq_q];
        let mut e = vec![0.0f32; g.seq_k];
        let mut acc = vec![0.0f32; dim];
        g.for_each_row(|q0, kv0, r| {
            let n = g.allowed(r % seq_q);
            if n == 0 {
                return;
            }
            let q = &q32[q0..q0 + dim];
            let keys = &k32[kv0..kv0 + n * dim];
            dots(q, keys, &mut e[..n]);
            let mut m = f32::NEG_INFINITY;
            for ej in &mut e[..n] {
                let s = round_f32(*ej * scale, dt);
                *ej = s;
                if s > m {
                    m = s;
                }
            }
            let mut l = 0.0f32;
            for ej in &mut e[..n] {
                // Correctly rounded, like the GPU reference's `(float)exp((double)x)`.
                *ej = libm::exp((*ej - m) as f64) as f32;
                l += *ej;
            }
            acc.fill(0.0);
            let values = &v32[kv0..kv0 + n * dim];
            for (&ej, v) in e[..n].iter().zip(values.chunks_exact(dim)) {
                let p = round_f32(ej / l, dt);
                for (ad, &vd) in acc.iter_mut().zip(v) {
                    *ad += p * vd;
                }
            }
            for (od, &ad) in o[q0..q0 + dim].iter_mut().zip(&acc) {
                *od = round_f32(ad, dt) as f64;
            }
            lse[r] = m as f64 + libm::log(l as f64);
        });
        RefOutput { o, lse }
    }
}

/// The tolerance of a case: `bound = 2 * err_lowp + floor`.
///
/// `err_lowp = max |lowp.o - ref64.o|` is what the dtype itself costs on this case;
/// `floor = 4 · u · max(1, max |ref64.o|)` with `u` the dtype's unit roundoff. The floor exists
/// because the same-precision reference can happen to be exact (e.g. one allowed key, or a
/// constant row: `err_lowp = 0`) while a correct kernel that sums in another order still pays
/// the final rounding of `o` into the dtype, up to one ulp, plus a little for its different
/// accumulation order; without a floor such cases would demand bit-exactness. It never goes
/// below the roundoff at magnitude 1, so outputs near zero are not judged in ulps of tiny
/// numbers.
///
/// A second floor term, `16 · u_f32 · max(1, max |lse|) · max(1, max |ref64.o|)`, covers the
/// logits: kernels accumulate q·k in f32 in their own order, and an f32 rounding of a logit of
/// size `|s|` moves the output by about `u_f32 · |s| · |v|`. When the logits are large (the
/// large-logits distribution puts them near 100) that term can exceed twice the same-precision
/// reference's own error by chance; seen on an H100 with a correct f32 kernel, error 3.0e-4
/// against a bound of 2.2e-4. `max |lse|` stands in for the largest logit (`lse` lies between
/// the row maximum and the maximum plus `ln seq_k`). For f16/bf16 with ordinary data the term is
/// negligible next to the first.
pub fn tolerance(dtype: Dtype, ref64: &RefOutput, lowp: &RefOutput) -> Tolerance {
    tolerance_of(dtype, &ref64.o, &lowp.o, &ref64.lse)
}

/// [`tolerance`] from the gold and baseline `o` and the gold `lse` (empty when unknown).
fn tolerance_of(dtype: Dtype, gold_o: &[f64], lowp_o: &[f64], gold_lse: &[f64]) -> Tolerance {
    let err_lowp = max_abs_diff(lowp_o, gold_o);
    let peak = gold_o.iter().fold(0.0f64, |a, &x| a.max(x.abs()));
    let logits = gold_lse.iter().filter(|x| x.is_finite()).fold(0.0f64, |a, &x| a.max(x.abs()));
    let u_f32 = Dtype::F32.unit_roundoff();
    let floor = 4.0 * dtype.unit_roundoff() * peak.max(1.0) + 16.0 * u_f32 * logits.max(1.0) * peak.max(1.0);
    Tolerance { factor: 2.0, err_lowp, floor, bound: 2.0 * err_lowp + floor }
}

/// A kernel's log-sum-exp passes where it is within `1e-3 · max(1, |lse|)` of the f64
/// reference, or equal to it when that is infinite (a row with no allowed key).
pub const LSE_REL: f64 = 1e-3;

/// The attention op's geometry for a planned case, read from the tensors and scalars the
/// manifest binds (`bind` role → name; a literal binds a constant).
pub fn attention_geometry(bind: &BTreeMap<String, String>, plan: &Plan) -> Option<Attention> {
    let b = Bound { bind, plan };
    let (q, k) = (b.tensor("q")?, b.tensor("k")?);
    Some(Attention {
        batch: q.shape[0],
        heads_q: q.shape[1],
        heads_kv: k.shape[1],
        seq_q: q.shape[2],
        seq_k: k.shape[2],
        head_dim: q.shape[3],
        causal: b.scalar("causal")? != 0.0,
        scale: b.scalar("scale")? as f32,
        dtype: q.dtype,
    })
}

impl Attention {
    /// The geometry of an op case (the dims and scalars of `attention_f64`'s manifest).
    pub fn from_case(c: &OpCase) -> Attention {
        Attention {
            batch: c.dim("batch"),
            heads_q: c.dim("heads_q"),
            heads_kv: c.dim("heads_kv"),
            seq_q: c.dim("seq_q"),
            seq_k: c.dim("seq_k"),
            head_dim: c.dim("head_dim"),
            causal: c.scalar("causal") != 0.0,
            scale: c.scalar("scale") as f32,
            dtype: c.dtype,
        }
    }

    /// The op case of this geometry.
    pub fn to_case(&self) -> OpCase {
        let dims = [
            ("batch", self.batch),
            ("heads_q", self.heads_q),
            ("heads_kv", self.heads_kv),
            ("seq_q", self.seq_q),
            ("seq_k", self.seq_k),
            ("head_dim", self.head_dim),
        ];
        let scalars = [("causal", Scalar::Bool(self.causal)), ("scale", Scalar::Float(self.scale as f64))];
        OpCase {
            dims: dims.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            scalars: scalars.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            dtype: self.dtype,
        }
    }
}

/// The built-in op `attention_fwd`: `o` judged by [`tolerance`], `lse` (when bound) within
/// [`LSE_REL`]; on the GPU, `attention_f64` (whose `ref_lse` serves as both gold and baseline:
/// the lse rule uses only the gold).
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionOp;

impl OpReference for AttentionOp {
    fn op(&self) -> BuiltinOp {
        BuiltinOp::AttentionFwd
    }

    fn case(&self, b: &Bound<'_>) -> Result<OpCase, BindingError> {
        let a = attention_geometry(b.bind, b.plan).ok_or_else(|| BindingError::Shape("the attention binding does not fit this case's tensors".to_string()))?;
        let (q, k, v, o) = (b.need("q")?, b.need("k")?, b.need("v")?, b.need("o")?);
        if k.shape != v.shape || o.shape != q.shape || q.shape[0] != k.shape[0] || q.shape[3] != k.shape[3] || a.heads_kv == 0 || a.heads_q % a.heads_kv != 0 {
            return Err(BindingError::Shape(format!(
                "attention_fwd needs q {:?} and o of one shape, k and v {:?} of one shape with q's batch and head_dim, and heads_q a multiple of heads_kv",
                q.shape, k.shape
            )));
        }
        Ok(a.to_case())
    }

    fn cpu(&self, c: &OpCase, inputs: &RoleInputs<'_>) -> OpValues {
        let a = Attention::from_case(c);
        let view = AttentionInputs { q: inputs["q"], k: inputs["k"], v: inputs["v"] };
        let (gold, lowp) = (CpuF64.forward(&a, &view), CpuSamePrecision.forward(&a, &view));
        OpValues::from([("o".to_string(), RoleValues::new(gold.o, lowp.o)), ("lse".to_string(), RoleValues::new(gold.lse, lowp.lse))])
    }

    fn gpu(&self) -> GpuReference {
        const OUTPUTS: &[GpuOutput] = &[
            GpuOutput { role: "o", gold: "ref_o", baseline: "ref_o_lowp", cond: None },
            GpuOutput { role: "lse", gold: "ref_lse", baseline: "ref_lse", cond: None },
        ];
        GpuReference { manifest: "attention_f64.toml", outputs: OUTPUTS }
    }

    fn rule(&self, role: &str, c: &OpCase, values: &OpValues, _inputs: &RoleInputs<'_>) -> Rule {
        match (role, values.get("o")) {
            ("o", Some(o)) => {
                let lse = values.get("lse").map(|l| l.gold.as_slice()).unwrap_or(&[]);
                Rule::Bound(tolerance_of(c.dtype, &o.gold, &o.baseline, lse))
            }
            _ => Rule::Relative(LSE_REL),
        }
    }
}

use std::collections::BTreeMap;

use super::BindingError;
use super::{max_abs_diff, Bound, GpuOutput, GpuReference, OpCase, OpReference, OpValues, RoleInputs, RoleValues, Rule, Tolerance};
use crate::core::case::Scalar;
use crate::core::manifest::BuiltinOp;
use crate::core::plan::Plan;

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(seq_q: u64, seq_k: u64, dim: u64, causal: bool) -> Attention {
        Attention { batch: 1, heads_q: 1, heads_kv: 1, seq_q, seq_k, head_dim: dim, causal, scale: 1.0, dtype: Dtype::F16 }
    }

    struct Inputs {
        q: Vec<f64>,
        k: Vec<f64>,
        v: Vec<f64>,
    }

    impl Inputs {
        fn view(&self) -> AttentionInputs<'_> {
            AttentionInputs { q: &self.q, k: &self.k, v: &self.v }
        }
    }

    #[test]
    fn two_keys_by_hand() {
        // s = [0, ln 3] → p = [1/4, 3/4]; o = 1/4 · 2 + 3/4 · 6 = 5; lse = ln 4.
        let c = tiny(1, 2, 1, false);
        let ln3 = 3f64.ln();
        let inputs = Inputs { q: vec![1.0], k: vec![0.0, ln3], v: vec![2.0, 6.0] };
        let r = CpuF64.forward(&c, &inputs.view());
        assert!((r.o[0] - 5.0).abs() < 1e-15, "{}", r.o[0]);
        assert!((r.lse[0] - 4f64.ln()).abs() < 1e-15);
    }

    #[test]
    fn causal_mask_is_bottom_right_aligned() {
        // seq_q 3, seq_k 5: row i sees keys 0..=i+2. v_j = j and equal scores, so o is the mean.
        let c = tiny(3, 5, 1, true);
        let inputs = Inputs { q: vec![0.0; 3], k: vec![1.0; 5], v: (0..5).map(|j| j as f64).collect() };
        for r in [CpuF64.forward(&c, &inputs.view()), CpuSamePrecision.forward(&c, &inputs.view())] {
            for (got, want) in r.o.iter().zip([1.0, 1.5, 2.0]) {
                assert!((got - want).abs() < 2e-3, "{:?}", r.o);
            }
            assert!((r.lse[2] - 5f64.ln()).abs() < 1e-6, "{:?}", r.lse);
        }
        // seq_q 4, seq_k 2: rows 0 and 1 see nothing, row 2 key 0, row 3 keys 0 and 1.
        let c = tiny(4, 2, 1, true);
        let inputs = Inputs { q: vec![1.0; 4], k: vec![0.5, 0.5], v: vec![3.0, 5.0] };
        for r in [CpuF64.forward(&c, &inputs.view()), CpuSamePrecision.forward(&c, &inputs.view())] {
            assert_eq!(r.o, vec![0.0, 0.0, 3.0, 4.0]);
            assert_eq!(&r.lse[..2], &[f64::NEG_INFINITY; 2]);
            assert_eq!(r.lse[2], 0.5);
        }
    }

    #[test]
    fn gqa_maps_query_heads_to_kv_heads_by_division() {
        let mut c = tiny(1, 1, 1, false);
        c.heads_q = 4;
        c.heads_kv = 2;
        let inputs = Inputs { q: vec![1.0; 4], k: vec![1.0, 1.0], v: vec![10.0, 20.0] };
        assert_eq!(CpuF64.forward(&c, &inputs.view()).o, vec![10.0, 10.0, 20.0, 20.0]);
    }

    #[test]
    fn same_precision_rounds_probabilities_and_output() {
        // Three equal scores, v = [1, 0, 0]: o is p, rounded to the dtype (1/3 in f16 is
        // 0.33325195), where the f64 reference gives 1/3.
        let c = tiny(1, 3, 1, false);
        let inputs = Inputs { q: vec![0.0], k: vec![1.0; 3], v: vec![1.0, 0.0, 0.0] };
        let r = CpuSamePrecision.forward(&c, &inputs.view());
        assert_eq!(r.o[0], round_to(1.0 / 3.0, Dtype::F16));
        assert_eq!(r.o[0], 0.333251953125);
        assert_eq!(CpuF64.forward(&c, &inputs.view()).o[0], 1.0 / 3.0);
        let mut c32 = c;
        c32.dtype = Dtype::F32;
        assert_eq!(CpuSamePrecision.forward(&c32, &inputs.view()).o[0], (1.0f32 / 3.0) as f64);
    }

    #[test]
    fn tolerance_and_diff() {
        let a = Attention { batch: 1, heads_q: 2, heads_kv: 1, seq_q: 65, seq_k: 113, head_dim: 64, causal: false, scale: 0.125, dtype: Dtype::F16 };
        let gen = |n: usize, s: u64| (0..n).map(|i| round_to((((i as u64 * 2654435761 + s) % 1000) as f64 / 500.0) - 1.0, Dtype::F16)).collect::<Vec<f64>>();
        let inputs = Inputs { q: gen(2 * 65 * 64, 1), k: gen(113 * 64, 2), v: gen(113 * 64, 3) };
        let hi = CpuF64.forward(&a, &inputs.view());
        let lo = CpuSamePrecision.forward(&a, &inputs.view());
        let t = tolerance(a.dtype, &hi, &lo);
        assert!(t.err_lowp > 0.0 && t.err_lowp < 1e-2, "{t:?}");
        let peak_lse = hi.lse.iter().fold(0.0f64, |a, &x| a.max(x.abs()));
        assert!(hi.o.iter().all(|x| x.abs() <= 1.0), "outputs stay below 1");
        assert_eq!(t.floor, 4.0 * 2f64.powi(-11) + 16.0 * 2f64.powi(-24) * peak_lse.max(1.0));
        assert_eq!(t.bound, 2.0 * t.err_lowp + t.floor);
        assert_eq!(max_abs_diff(&[1.0, f64::NEG_INFINITY], &[1.5, f64::NEG_INFINITY]), 0.5);
        assert_eq!(max_abs_diff(&[f64::NAN], &[0.0]), f64::INFINITY);
        assert_eq!(max_abs_diff(&[f64::NAN], &[f64::NAN]), f64::INFINITY);
        assert_eq!(max_abs_diff(&[f64::INFINITY], &[0.0]), f64::INFINITY);
    }
}
