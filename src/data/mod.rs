//! Input generation and strided (de)serialisation: [`generate`] turns a case's data seed into
//! [`Inputs`], and [`write_strided`] / [`read_strided`] move them between logical order and a
//! tensor's memory layout.
//!
//! [`Inputs`] holds q, k and v as `f64` in logical BHSD order, every value already rounded into
//! the case's dtype. Keeping the logical values separate from any layout is what makes layout
//! metamorphism an oracle: the same `Inputs` written into two layouts must give the same answer,
//! and the references never see a stride. `f64` is wide enough to hold every f16, bf16 and f32
//! value exactly, so nothing is lost by storing them that way.
//!
//! A seed must give the same bits on every machine, every day, or a saved case stops replaying.
//! So nothing platform-dependent is on the path from seed to bits: the generator is ChaCha8 keyed
//! explicitly by (seed, tensor) with a versioned domain tag (no `seed_from_u64` expansion whose
//! scheme a crate update could change), transcendental functions come from `libm` (a pure-Rust
//! port of musl) rather than the host's C library, and rounding into f16/bf16 is done here
//! ([`round_to`]) rather than by `half`'s `from_f64`: that one converts through `f32` on F16C
//! hosts (double rounding) and ignores the low 32 mantissa bits in its software path, so two
//! machines could round the same `f64` differently. `half` is only used to pack already exact
//! values into bits, which is exact on every path.
//!
//! Generated values are always finite in the dtype: no distribution ever produces NaN or ±inf,
//! because poisoned values are the arena's job (redzone canaries), and a NaN in an input would
//! make "NaN in the output" useless as an out-of-bounds-read signal.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::case::{Case, Dtype, TensorId, ValueDist};
use crate::plan::TensorPlan;

/// Domain tag mixed into every generator key. Bump the version when the generation scheme
/// changes on purpose, so old seeds are visibly tied to the old scheme.
const DOMAIN: &[u8; 16] = b"cudafuzz/data/v1";

/// Standard deviation of q and k under [`ValueDist::LargeLogits`]. With the usual scale
/// `1/sqrt(head_dim)` a logit is about `LARGE_SIGMA² · N(0, 1)`, so with 8 the row maximum
/// passes 90 (where `expf` overflows) for almost every row once there are a few dozen keys,
/// while the largest possible value (8 × 8.6, the Box–Muller tail) is far inside even f16.
const LARGE_SIGMA: f64 = 8.0;

/// The values a [`ValueDist::ConstantRows`] row may take. A small set on purpose: rows share
/// values, so logits tie, and a zero query row gives exactly uniform weights.
const CONSTANT_ROW_VALUES: [f64; 7] = [-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0];

/// The generated inputs of one case.
///
/// Each vector is in logical BHSD order (`index = ((b*H + h)*S + s)*D + d`, with the tensor's own
/// H and S) and every value is finite and exactly representable in the case's dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Inputs {
    /// Queries, `[batch, heads_q, seq_q, head_dim]`.
    pub q: Vec<f64>,
    /// Keys, `[batch, heads_kv, seq_k, head_dim]`.
    pub k: Vec<f64>,
    /// Values, `[batch, heads_kv, seq_k, head_dim]`.
    pub v: Vec<f64>,
}

/// Generates the inputs of a case from `case.data.seed` and `case.data.dist`.
///
/// Each tensor has its own generator keyed by (seed, tensor), so q does not change when k's
/// shape does, and the same seed gives identical bits on every platform. Values are drawn in
/// logical order and rounded into the dtype:
///
/// * `Normal`: N(0, 1) (Box–Muller, so never beyond ±8.6).
/// * `Uniform`: uniform on [-1, 1).
/// * `LargeLogits`: q and k are 8 · N(0, 1), so with the usual scale the row maximum of the
///   logits is typically well past 90, where `expf` overflows unless the maximum is
///   subtracted; v stays N(0, 1) so the output keeps an ordinary magnitude.
/// * `ConstantRows`: each (b, h, s) row is one value from {0, ±0.25, ±0.5, ±1}; rows share
///   values, so logits tie, and a zero query row gives exactly uniform weights.
pub fn generate(case: &Case) -> Inputs {
    let one =
        |t: TensorId| generate_tensor(case.data.seed, t, case.data.dist, case.dtype, case.shape(t));
    Inputs {
        q: one(TensorId::Q),
        k: one(TensorId::K),
        v: one(TensorId::V),
    }
}

fn tensor_rng(seed: u64, tensor: TensorId) -> ChaCha8Rng {
    let tag: u64 = match tensor {
        TensorId::Q => 0,
        TensorId::K => 1,
        TensorId::V => 2,
        TensorId::O => 3,
    };
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&tag.to_le_bytes());
    key[16..].copy_from_slice(DOMAIN);
    ChaCha8Rng::from_seed(key)
}

/// A uniform draw on `[0, 1)` with 53 random bits: exact, no platform-dependent step.
fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Standard normals by Box–Muller, both values of each pair used. `1 - unit` lies in `(0, 1]`,
/// so the logarithm is finite and the largest magnitude is `sqrt(2 · 53 · ln 2) ≈ 8.6`.
struct Normal {
    spare: Option<f64>,
}

impl Normal {
    fn next(&mut self, rng: &mut ChaCha8Rng) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let u1 = 1.0 - unit(rng);
        let u2 = unit(rng);
        let r = libm::sqrt(-2.0 * libm::log(u1));
        let theta = 2.0 * core::f64::consts::PI * u2;
        let (s, c) = libm::sincos(theta);
        self.spare = Some(r * s);
        r * c
    }
}

fn generate_tensor(
    seed: u64,
    tensor: TensorId,
    dist: ValueDist,
    dtype: Dtype,
    shape: [u32; 4],
) -> Vec<f64> {
    let mut rng = tensor_rng(seed, tensor);
    let d = shape[3] as usize;
    let n = shape.iter().map(|&x| x as usize).product::<usize>();
    let mut out = Vec::with_capacity(n);
    let mut normal = Normal { spare: None };
    let fit = |x: f64| finite_round(x, dtype);
    match dist {
        ValueDist::Normal => out.extend((0..n).map(|_| fit(normal.next(&mut rng)))),
        ValueDist::Uniform => out.extend((0..n).map(|_| fit(2.0 * unit(&mut rng) - 1.0))),
        ValueDist::LargeLogits => {
            // Only q and k set the logits; v stays standard normal so the output keeps a
            // magnitude where tolerances mean something.
            let sigma = if tensor == TensorId::V {
                1.0
            } else {
                LARGE_SIGMA
            };
            out.extend((0..n).map(|_| fit(sigma * normal.next(&mut rng))))
        }
        ValueDist::ConstantRows => {
            for _ in 0..n / d.max(1) {
                // Multiply-shift instead of `%`: unbiased enough and a single u32 per row.
                let pick = (rng.next_u32() as u64 * CONSTANT_ROW_VALUES.len() as u64) >> 32;
                let x = fit(CONSTANT_ROW_VALUES[pick as usize]);
                out.extend(std::iter::repeat_n(x, d));
            }
        }
    }
    out
}

/// Largest finite value of a dtype.
fn max_finite(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => 65504.0,
        Dtype::Bf16 => half::bf16::MAX.to_f64(),
        Dtype::F32 => f32::MAX as f64,
    }
}

/// Rounds into the dtype after clamping to its finite range, so generation can never make ±inf.
fn finite_round(x: f64, dtype: Dtype) -> f64 {
    let m = max_finite(dtype);
    round_to(x.clamp(-m, m), dtype)
}

/// `2^k` for `k` in the normal f64 exponent range.
#[inline]
fn pow2(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// Round-to-nearest-even of `x` into a binary format with `frac_bits` stored fraction bits and
/// minimum normal exponent `emin`; overflow gives ±inf as IEEE 754 specifies.
///
/// The quantum (spacing of the format at `x`) is a power of two, so `x / quantum` and the final
/// product are exact. The one rounding, to an integer, is `(y + 2^52) - 2^52`: for
/// `0 <= y < 2^52` IEEE addition itself rounds to nearest-even there, identically on every
/// platform (Rust never changes the rounding mode or reassociates), and unlike
/// `f64::round_ties_even` it needs no SSE4.1 or library call, which matters in the reference's
/// inner loops.
#[inline]
fn round_binary(x: f64, frac_bits: i32, emin: i32, max: f64) -> f64 {
    const MAGIC: f64 = (1u64 << 52) as f64;
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    // f64 subnormals get -1023 here, which the max with emin makes irrelevant.
    let e = (((x.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin);
    let quantum = pow2(e - frac_bits);
    // |x| / quantum < 2^(frac_bits + 1) <= 2^24, far inside the magic trick's range.
    let y = (x / quantum).abs();
    let r = ((y + MAGIC) - MAGIC).copysign(x) * quantum;
    if r.abs() > max {
        f64::INFINITY.copysign(x)
    } else {
        r
    }
}

/// Rounds `x` to the nearest value of `dtype`, ties to even (IEEE 754 default rounding).
///
/// Values past the dtype's range become ±inf, NaN stays NaN. The result is exactly what
/// [`from_bits`]`(`[`to_bits`]`(x))` gives.
#[inline]
pub fn round_to(x: f64, dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => round_binary(x, 10, -14, 65504.0),
        Dtype::Bf16 => round_binary(x, 7, -126, max_finite(Dtype::Bf16)),
        // `as f32` is specified to round to nearest, ties to even.
        Dtype::F32 => x as f32 as f64,
    }
}

/// The dtype's bit pattern of `x` rounded into it (see [`round_to`]); 16-bit types occupy the
/// low half.
pub fn to_bits(x: f64, dtype: Dtype) -> u32 {
    let r = round_to(x, dtype);
    match dtype {
        // `r` is exact in the format, so even `half`'s truncating conversion is exact here.
        Dtype::F16 => half::f16::from_f64_const(r).to_bits() as u32,
        Dtype::Bf16 => half::bf16::from_f64_const(r).to_bits() as u32,
        Dtype::F32 => (r as f32).to_bits(),
    }
}

/// The value of a dtype bit pattern; for 16-bit types only the low half of `bits` is read.
pub fn from_bits(bits: u32, dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => half::f16::from_bits(bits as u16).to_f64(),
        Dtype::Bf16 => half::bf16::from_bits(bits as u16).to_f64(),
        Dtype::F32 => f32::from_bits(bits) as f64,
    }
}

/// The logical index `[b, h, s, d]` of position `linear` in BHSD order of a tensor of `shape`.
pub fn logical_index(shape: [u32; 4], linear: u64) -> [u32; 4] {
    let mut rest = linear;
    let mut idx = [0u32; 4];
    for i in (0..4).rev() {
        let n = shape[i] as u64;
        idx[i] = (rest % n) as u32;
        rest /= n;
    }
    idx
}

/// Calls `f(linear, byte_offset)` for every logical element in BHSD order. Offsets are built
/// incrementally per loop level so no per-element index arithmetic is repeated.
fn for_each_offset(tp: &TensorPlan, mut f: impl FnMut(usize, usize)) {
    let [nb, nh, ns, nd] = tp.shape.map(|x| x as u64);
    let eb = tp.elem_bytes as u64;
    let [sb, sh, ss, sd] = tp.strides.map(|s| s * eb);
    let mut linear = 0usize;
    for b in 0..nb {
        for h in 0..nh {
            for s in 0..ns {
                let row = b * sb + h * sh + s * ss;
                for d in 0..nd {
                    f(linear, (row + d * sd) as usize);
                    linear += 1;
                }
            }
        }
    }
}

fn check_buffer(len: usize, tp: &TensorPlan, dtype: Dtype, what: &str) {
    assert_eq!(
        tp.elem_bytes,
        dtype.size(),
        "{} plan element size does not match dtype {dtype}",
        tp.tensor
    );
    assert!(
        len as u64 >= tp.span_bytes,
        "{what} buffer of {len} bytes is shorter than {}'s span of {} bytes",
        tp.tensor,
        tp.span_bytes
    );
}

/// Writes `values` (logical BHSD order) into `dst` in the layout of `tp`, little-endian.
///
/// `dst[0]` is the tensor's base byte (the caller applies `offset_bytes` by slicing). Only the
/// bytes of logical elements are written; stride gaps are left as they are, which is what lets
/// the arena keep canaries there. Each value is rounded into `dtype` first (a no-op for
/// generated inputs). Panics if `values` or `dst` is too short for the plan.
pub fn write_strided(values: &[f64], tp: &TensorPlan, dtype: Dtype, dst: &mut [u8]) {
    check_buffer(dst.len(), tp, dtype, "destination");
    assert_eq!(
        values.len() as u64,
        tp.numel,
        "{} needs {} values",
        tp.tensor,
        tp.numel
    );
    match dtype.size() {
        2 => for_each_offset(tp, |i, off| {
            dst[off..off + 2].copy_from_slice(&(to_bits(values[i], dtype) as u16).to_le_bytes())
        }),
        _ => for_each_offset(tp, |i, off| {
            dst[off..off + 4].copy_from_slice(&to_bits(values[i], dtype).to_le_bytes())
        }),
    }
}

/// Reads the raw bit patterns of every logical element of `tp` from `src`, in BHSD order.
///
/// Bits rather than values are what determinism and canary checks compare: two NaNs with
/// different payloads are different results.
pub fn read_strided_bits(src: &[u8], tp: &TensorPlan, dtype: Dtype) -> Vec<u32> {
    check_buffer(src.len(), tp, dtype, "source");
    let mut out = vec![0u32; tp.numel as usize];
    match dtype.size() {
        2 => for_each_offset(tp, |i, off| {
            out[i] = u16::from_le_bytes([src[off], src[off + 1]]) as u32
        }),
        _ => for_each_offset(tp, |i, off| {
            out[i] = u32::from_le_bytes([src[off], src[off + 1], src[off + 2], src[off + 3]])
        }),
    }
    out
}

/// Reads every logical element of `tp` from `src` (base byte at `src[0]`), in BHSD order; the
/// inverse of [`write_strided`].
pub fn read_strided(src: &[u8], tp: &TensorPlan, dtype: Dtype) -> Vec<f64> {
    read_strided_bits(src, tp, dtype)
        .into_iter()
        .map(|b| from_bits(b, dtype))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{Dim, TensorLayout};
    use crate::plan::Plan;

    fn case(dtype: Dtype, dist: ValueDist, seed: u64) -> Case {
        let mut c = Case::example("k");
        c.dtype = dtype;
        c.data.dist = dist;
        c.data.seed = seed;
        c
    }

    #[test]
    fn same_seed_gives_same_bits_and_pins_a_golden() {
        let c = case(Dtype::F16, ValueDist::Normal, 42);
        let a = generate(&c);
        let b = generate(&c);
        assert_eq!(a, b);
        // Golden bits: a change here means saved seeds no longer replay the same inputs
        // (ChaCha, libm, Box–Muller or rounding changed). Update only with a new DOMAIN version.
        let bits = |v: &[f64], dt| v[..4].iter().map(|&x| to_bits(x, dt)).collect::<Vec<_>>();
        let golden = [
            (Dtype::F16, ValueDist::Normal, GOLDEN_F16_NORMAL),
            (Dtype::Bf16, ValueDist::LargeLogits, GOLDEN_BF16_LARGE),
            (Dtype::F32, ValueDist::Uniform, GOLDEN_F32_UNIFORM),
        ];
        for (dt, dist, want) in golden {
            let g = generate(&case(dt, dist, 42));
            let got = [bits(&g.q, dt), bits(&g.k, dt), bits(&g.v, dt)];
            assert_eq!(got, want.map(|r| r.to_vec()), "{dt} {dist:?}");
        }
    }

    /// First four values of q, k, v for seed 42 on `Case::example` (e.g. q starts -0.0740).
    const GOLDEN_F16_NORMAL: [[u32; 4]; 3] = [
        [0xacbd, 0xba31, 0x2c28, 0x3c0e],
        [0xbb72, 0x3815, 0xad0f, 0xb3d8],
        [0xabcf, 0xbee9, 0x915e, 0xbe2d],
    ];
    /// q and k are 8 × the normal stream above (q starts -0.594), v is the plain normal.
    const GOLDEN_BF16_LARGE: [[u32; 4]; 3] = [
        [0xbf18, 0xc0c6, 0x3f05, 0x4102],
        [0xc0ee, 0x4083, 0xbf22, 0xbffb],
        [0xbd7a, 0xbfdd, 0xba2c, 0xbfc6],
    ];
    const GOLDEN_F32_UNIFORM: [[u32; 4]; 3] = [
        [0xbef4e30a, 0x3ef07474, 0xbe463eb7, 0xbf053678],
        [0xbe0e106c, 0xbe236c9b, 0xbf6f4aba, 0x3ecd2983],
        [0x3f0d01b8, 0x3efa3f11, 0x3ec923c4, 0x3effee4b],
    ];

    #[test]
    fn tensors_and_seeds_get_different_streams() {
        let mut c = case(Dtype::F32, ValueDist::Normal, 7);
        c.heads_q = 1;
        c.seq_q = c.seq_k;
        let a = generate(&c);
        assert_ne!(a.q, a.k);
        assert_ne!(a.k, a.v);
        c.data.seed = 8;
        assert_ne!(generate(&c).q, a.q);
    }

    #[test]
    fn every_value_is_finite_and_exact_in_its_dtype() {
        for dt in Dtype::ALL {
            for dist in ValueDist::ALL {
                let g = generate(&case(dt, dist, 3));
                for x in g.q.iter().chain(&g.k).chain(&g.v) {
                    assert!(x.is_finite(), "{dt} {dist:?}: {x}");
                    assert_eq!(round_to(*x, dt), *x, "{dt} {dist:?}");
                }
            }
        }
    }

    #[test]
    fn normal_and_uniform_have_the_right_moments() {
        let mut c = case(Dtype::F32, ValueDist::Normal, 11);
        c.seq_q = 1000;
        let q = generate(&c).q;
        let n = q.len() as f64;
        let mean = q.iter().sum::<f64>() / n;
        let var = q.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
            "mean {mean} var {var}"
        );
        c.data.dist = ValueDist::Uniform;
        let q = generate(&c).q;
        assert!(q.iter().all(|&x| (-1.0..1.0).contains(&x)));
        let mean = q.iter().sum::<f64>() / n;
        assert!(mean.abs() < 0.02, "{mean}");
    }

    #[test]
    fn constant_rows_repeat_one_value_and_tie() {
        let c = case(Dtype::Bf16, ValueDist::ConstantRows, 5);
        let g = generate(&c);
        let d = c.head_dim as usize;
        for t in [&g.q, &g.k, &g.v] {
            for row in t.chunks(d) {
                assert!(row.iter().all(|&x| x == row[0]));
            }
        }
        let firsts: std::collections::BTreeSet<u64> =
            g.k.chunks(d).map(|r| r[0].to_bits()).collect();
        assert!(firsts.len() > 1 && firsts.len() <= CONSTANT_ROW_VALUES.len());
    }

    #[test]
    fn large_logits_overflow_expf_without_max_subtraction() {
        for dt in Dtype::ALL {
            let mut c = case(dt, ValueDist::LargeLogits, 9);
            c.heads_q = 1;
            c.seq_k = 64;
            let g = generate(&c);
            let d = c.head_dim as usize;
            let scale = c.scale as f64;
            let rows_over =
                g.q.chunks(d)
                    .filter(|q| {
                        let m =
                            g.k.chunks(d)
                                .map(|k| scale * q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>())
                                .fold(f64::MIN, f64::max);
                        m > 90.0
                    })
                    .count();
            assert!(
                rows_over * 10 >= c.seq_q as usize * 9,
                "{dt}: only {rows_over} of {} rows",
                c.seq_q
            );
        }
    }

    #[test]
    fn rounding_matches_correctly_rounded_f32_conversions() {
        // half's f32 -> f16/bf16 conversions see every bit of the input, so they are a
        // correct-rounding oracle for f32 inputs.
        let mut rng = tensor_rng(1, TensorId::Q);
        for i in 0..200_000u32 {
            let bits = if i < 65536 {
                (i << 16) | (i & 0xffff)
            } else {
                rng.next_u32()
            };
            let x = f32::from_bits(bits);
            if x.is_nan() {
                continue;
            }
            let f16 = half::f16::from_f32(x);
            assert_eq!(
                to_bits(x as f64, Dtype::F16),
                f16.to_bits() as u32,
                "f16 of {x:e} ({bits:#x})"
            );
            assert_eq!(
                round_to(x as f64, Dtype::F16).to_bits(),
                f16.to_f64().to_bits()
            );
            let bf = half::bf16::from_f32(x);
            assert_eq!(
                to_bits(x as f64, Dtype::Bf16),
                bf.to_bits() as u32,
                "bf16 of {x:e} ({bits:#x})"
            );
        }
    }

    #[test]
    fn rounding_sees_bits_below_f32_precision() {
        // Just above the tie between 1 and 1 + 2^-10: must round up. Converting through f32,
        // or truncating the low mantissa bits, sees an exact tie and rounds to even (down).
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(round_to(x, Dtype::F16), 1.0 + 2f64.powi(-10));
        assert_eq!(round_to(1.0 + 2f64.powi(-11), Dtype::F16), 1.0);
        assert_eq!(
            round_to(1.0 + 3.0 * 2f64.powi(-11), Dtype::F16),
            1.0 + 2.0 * 2f64.powi(-10)
        );
        let y = 1.0 + 2f64.powi(-8) + 2f64.powi(-45);
        assert_eq!(round_to(y, Dtype::Bf16), 1.0 + 2f64.powi(-7));
        // Overflow, the largest finite values, subnormals and signed zeros.
        assert_eq!(round_to(65519.9, Dtype::F16), 65504.0);
        assert_eq!(round_to(65520.0, Dtype::F16), f64::INFINITY);
        assert_eq!(round_to(-1e6, Dtype::F16), f64::NEG_INFINITY);
        assert_eq!(round_to(2f64.powi(-24), Dtype::F16), 2f64.powi(-24));
        assert_eq!(round_to(2f64.powi(-25), Dtype::F16), 0.0);
        assert_eq!(
            round_to(-2f64.powi(-26), Dtype::F16).to_bits(),
            (-0.0f64).to_bits()
        );
        assert_eq!(round_to(1.5 * 2f64.powi(-24), Dtype::F16), 2f64.powi(-23));
        assert_eq!(round_to(f64::MIN_POSITIVE / 4.0, Dtype::Bf16), 0.0);
        assert!(round_to(f64::NAN, Dtype::Bf16).is_nan());
        assert_eq!(finite_round(1e300, Dtype::Bf16), max_finite(Dtype::Bf16));
        assert_eq!(finite_round(-1e300, Dtype::F32), -(f32::MAX as f64));
    }

    #[test]
    fn bits_round_trip_in_every_dtype() {
        assert_eq!(to_bits(1.0, Dtype::F16), 0x3c00);
        assert_eq!(to_bits(1.0, Dtype::Bf16), 0x3f80);
        assert_eq!(to_bits(1.0, Dtype::F32), 0x3f80_0000);
        assert_eq!(to_bits(-2.0, Dtype::F16), 0xc000);
        assert_eq!(
            from_bits(0xffff_3c00, Dtype::F16),
            1.0,
            "only the low half counts"
        );
        for dt in [Dtype::F16, Dtype::Bf16] {
            for b in 0..=0xffffu32 {
                let x = from_bits(b, dt);
                if !x.is_nan() {
                    assert_eq!(to_bits(x, dt), b, "{dt} {b:#x}");
                }
            }
        }
        for x in [0.1f64, -3.75, 1e-40, 6.0e37] {
            assert_eq!(
                from_bits(to_bits(x, Dtype::F32), Dtype::F32),
                x as f32 as f64
            );
        }
    }

    #[test]
    fn logical_index_inverts_bhsd_order() {
        let shape = [2, 3, 5, 7];
        let mut linear = 0;
        for b in 0..2 {
            for h in 0..3 {
                for s in 0..5 {
                    for d in 0..7 {
                        assert_eq!(logical_index(shape, linear), [b, h, s, d]);
                        linear += 1;
                    }
                }
            }
        }
    }

    fn padded_case(dtype: Dtype) -> (Case, TensorPlan) {
        let mut c = Case::example("k");
        c.dtype = dtype;
        c.batch = 2;
        c.heads_kv = 2;
        c.heads_q = 2;
        c.seq_k = 9;
        c.head_dim = 5;
        // d is not innermost and every inner dimension is padded: lots of interleaved gaps.
        c.layouts.k = TensorLayout {
            order: [Dim::S, Dim::B, Dim::D, Dim::H],
            pad: [0, 1, 3, 2],
            offset_bytes: 7,
        };
        let tp = Plan::new(&c).tensor(TensorId::K).clone();
        (c, tp)
    }

    #[test]
    fn strided_round_trip_at_an_odd_offset_leaves_gaps_alone() {
        for dt in Dtype::ALL {
            let (c, tp) = padded_case(dt);
            assert!(!tp.is_gapless());
            let values = generate(&c).k;
            let off = tp.offset_bytes as usize;
            let mut buf = vec![0xa5u8; off + tp.span_bytes as usize + 13];
            write_strided(&values, &tp, dt, &mut buf[off..]);
            assert_eq!(read_strided(&buf[off..], &tp, dt), values, "{dt}");
            let bits = read_strided_bits(&buf[off..], &tp, dt);
            assert_eq!(
                bits,
                values.iter().map(|&x| to_bits(x, dt)).collect::<Vec<_>>()
            );

            // Every byte that is not part of an element still holds the fill.
            let mut owned = vec![false; buf.len()];
            for i in 0..tp.numel {
                let at = off + tp.byte_offset(logical_index(tp.shape, i)) as usize;
                owned[at..at + tp.elem_bytes as usize]
                    .iter_mut()
                    .for_each(|o| *o = true);
            }
            let written = owned.iter().filter(|&&o| o).count();
            assert_eq!(written as u64, tp.numel * tp.elem_bytes as u64);
            for (i, (&byte, &own)) in buf.iter().zip(&owned).enumerate() {
                assert!(
                    own || byte == 0xa5,
                    "{dt}: byte {i} outside the elements was written"
                );
            }
            assert!(
                owned[off] && owned[off + tp.span_bytes as usize - 1],
                "span ends are elements"
            );
        }
    }

    #[test]
    #[should_panic(expected = "shorter than")]
    fn a_short_buffer_is_refused() {
        let (c, tp) = padded_case(Dtype::F16);
        let mut buf = vec![0u8; tp.span_bytes as usize - 1];
        write_strided(&generate(&c).k, &tp, Dtype::F16, &mut buf);
    }
}
