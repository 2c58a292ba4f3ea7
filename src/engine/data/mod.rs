//! Input generation and strided (de)serialisation: [`generate`] turns a case's data seed into
//! [`Inputs`], and [`write_strided`] / [`read_strided`] move values between logical order and a
//! tensor's memory layout.
//!
//! [`Inputs`] holds, for every tensor whose contents are drawn (inputs, and outputs whose
//! initial contents are drawn), its values as `f64` in logical row-major order, every value
//! already rounded into the tensor's element type. Keeping the logical values separate from any
//! layout is what makes layout metamorphism an oracle: the same `Inputs` written into two layouts
//! must give the same answer, and the references never see a stride. `f64` holds every f16,
//! bf16, f32 and 32-bit integer value exactly, so nothing is lost by storing them that way.
//!
//! A case names its data scheme ([`DataScheme`]): new cases draw v2 ([`scheme2`]: each element
//! a pure function of (seed, tensor, index), from one C source that the GPU builds too, the
//! device-side data path's start), seeds written before schemes were recorded replay v1, the
//! stream described here.
//!
//! A seed must give the same bits on every machine, every day, or a saved case stops replaying.
//! So nothing platform-dependent is on the path from seed to bits: each tensor's v1 generator is
//! ChaCha8 keyed explicitly by (seed, roster position) with a versioned domain tag (no
//! `seed_from_u64` expansion whose scheme a crate update could change), transcendental functions
//! come from `libm` (a pure-Rust port of musl) rather than the host's C library, and rounding
//! into f16/bf16 is done here ([`round_to`]) rather than by `half`'s `from_f64`: that one
//! converts through `f32` on F16C hosts (double rounding) and ignores the low 32 mantissa bits in
//! its software path, so two machines could round the same `f64` differently. `half` is only
//! used to pack already exact values into bits, which is exact on every path. A tensor drawn
//! from one class consumes its stream exactly as the attention-only generator did (q, k, v are
//! the first three tensors of every attention roster), so seeds saved before named tensors
//! replay the same inputs.
//!
//! Values are finite unless the tensor's classes include `nan` or `inf` (which the manifest
//! allows only where the kernel's contract does): poisoned values are otherwise the arena's job
//! (redzone canaries), and a NaN in an input would make "NaN in the output" useless as an
//! out-of-bounds-read signal. A broadcast tensor's values are drawn per stored element and
//! repeated along its stride-0 dimensions, so every logical read of one address agrees.

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

pub mod device;
pub mod scheme2;

use crate::core::case::{Case, DataScheme, Dtype, ValueClass};
use crate::core::manifest::expr::Env;
use crate::core::manifest::{Derive, Init, Manifest};
use crate::core::plan::{for_each_offset, Plan, TensorPlan};

/// Domain tag mixed into every generator key. Bump the version when the generation scheme
/// changes on purpose, so old seeds are visibly tied to the old scheme.
const DOMAIN: &[u8; 16] = b"cudafuzz/data/v1";

/// Scale of the `large` class. With the usual attention scale `1/sqrt(head_dim)` a logit is
/// about `LARGE_SIGMA² · N(0, 1)`, so with 8 the row maximum passes 90 (where `expf` overflows)
/// for almost every row once there are a few dozen keys, while the largest possible value
/// (8 × 8.6, the Box–Muller tail) is far inside even f16.
const LARGE_SIGMA: f64 = 8.0;

/// The values a constant row may take. A small set on purpose: rows share values, so sums and
/// logits tie, and a zero row gives exactly uniform softmax weights.
const CONSTANT_ROW_VALUES: [f64; 7] = [-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0];

/// The drawn contents of one case's tensors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inputs {
    /// Per roster position: the tensor's values in logical row-major order, when its contents
    /// are drawn.
    pub values: Vec<Option<Vec<f64>>>,
}

impl Inputs {
    /// The values of the tensor at roster position `index`, if drawn.
    pub fn get(&self, index: usize) -> Option<&[f64]> {
        self.values.get(index).and_then(|v| v.as_deref())
    }
}

/// Generates the drawn contents of every tensor of a planned case from `case.seed`: inputs,
/// and outputs or in-outs whose initial contents are drawn.
///
/// Each tensor has its own generator keyed by (seed, roster position), so one tensor's values do
/// not change when another's shape does, and the same seed gives identical bits on every
/// platform. Classes ([`ValueClass`]): `normal` N(0, 1) (Box–Muller, so never beyond ±8.6),
/// `uniform` on [-1, 1), `large` 8 · N(0, 1), `tiny` magnitudes around the type's smallest
/// normal (subnormals included), `zero` ±0, `constant_rows` one value from {0, ±0.25, ±0.5, ±1}
/// per innermost row, `nan`, `inf`. A tensor with several classes picks one per element.
/// Integer tensors draw uniformly from their manifest range (default: a small symmetric range).
pub fn generate(case: &Case, plan: &Plan, m: &Manifest) -> Inputs {
    drawn_on_host(recipes(case, plan, m), plan)
}

/// [`values_of`] with every v2 tensor drawn by the host's build of the generator: what
/// [`generate`] gives, from recipes already made.
pub fn drawn_on_host(recipes: Vec<Recipe>, plan: &Plan) -> Inputs {
    values_of(recipes, plan, |tp, t, integer| {
        let (stored, n) = stored_extents(tp);
        expand(scheme2::fill(t, 0, n, integer), &stored, tp)
    })
}

/// The drawn values of every tensor from its [`Recipe`], in logical order, as [`generate`]
/// gives them; a v2 tensor's come from `counter(tensor, params, integer)`: the host's build of
/// the generator, or the tensor's elements read back from an arena the GPU filled (each exact in
/// its type, so the same values).
pub fn values_of(recipes: Vec<Recipe>, plan: &Plan, mut counter: impl FnMut(&TensorPlan, &scheme2::DgTensor, bool) -> Vec<f64>) -> Inputs {
    let values = recipes
        .into_iter()
        .zip(&plan.tensors)
        .map(|(r, tp)| match r {
            Recipe::Counter { params, integer } => Some(counter(tp, &params, integer)),
            Recipe::Host(values) => Some(values),
            Recipe::Constant(_) | Recipe::Uninit => None,
        })
        .collect();
    Inputs { values }
}

/// How one tensor's initial contents are made: what the host image writes into its data span,
/// and what the device-side fill ([`crate::engine::arena::device::DeviceArena::fill`]) writes
/// there in place.
#[derive(Clone, Debug, PartialEq)]
pub enum Recipe {
    /// Drawn by data scheme v2, per stored element: the generator's parameters, and whether the
    /// tensor holds integers.
    Counter {
        /// The generator's parameters ([`scheme2::tensor_params`]).
        params: scheme2::DgTensor,
        /// Whether the tensor holds integers.
        integer: bool,
    },
    /// Drawn on the host (data scheme v1; `distinct` and length-derived index tensors in both
    /// schemes): the values, in logical order.
    Host(Vec<f64>),
    /// Every element the same bit pattern: the sentinel, zero, -inf, a constant.
    Constant(u64),
    /// Left uninitialised on the device (only the redzones are written).
    Uninit,
}

/// Whether a tensor's initial contents are drawn: an input, or a written tensor whose manifest
/// says `init = "drawn"`.
pub fn is_drawn(tp: &TensorPlan) -> bool {
    tp.role == crate::core::manifest::Role::Input || tp.init == Init::Drawn
}

/// The bit pattern every element of a tensor that is not drawn starts with (the sentinel, zero,
/// -inf, a constant); `None` for a drawn or uninitialised one.
pub fn initial_bits(tp: &TensorPlan) -> Option<u64> {
    let constant = |x: f64| Some(to_bits(x, tp.dtype));
    match tp.init {
        _ if is_drawn(tp) => None,
        Init::Sentinel => Some(crate::core::layout::sentinel_bits(tp.dtype)),
        Init::Zero => constant(0.0),
        Init::NegInf => constant(if tp.dtype.is_float() { f64::NEG_INFINITY } else { i64::MIN as f64 }),
        Init::Const(x) => constant(x),
        Init::Uninit | Init::Drawn => None,
    }
}

/// Every tensor's [`Recipe`], in roster order.
pub fn recipes(case: &Case, plan: &Plan, m: &Manifest) -> Vec<Recipe> {
    // Only tensors with a value range or derived values need expressions evaluated.
    let env = std::cell::OnceCell::new();
    let env = || env.get_or_init(|| Env::new(&plan.vars));
    plan.tensors
        .iter()
        .map(|tp| {
            if !is_drawn(tp) {
                return initial_bits(tp).map_or(Recipe::Uninit, Recipe::Constant);
            }
            let spec = m.tensors.get(tp.index).and_then(|t| t.range.as_ref());
            if tp.dtype.is_float() {
                let range = spec.and_then(|[lo, hi]| Some((env().float(lo).ok()?, env().float(hi).ok()?))).filter(|(lo, hi)| lo <= hi);
                return match case.data {
                    DataScheme::V1 => Recipe::Host(generate_float(case.seed, tp, &tp.layout.values, range)),
                    DataScheme::V2 => Recipe::Counter { params: scheme2::tensor_params(case.seed, tp, &tp.layout.values, range, None), integer: false },
                };
            }
            let range = spec.and_then(|[lo, hi]| Some((env().int(lo).ok()?, env().int(hi).ok()?)));
            match m.tensors.get(tp.index).and_then(|t| t.derive.as_ref()) {
                Some(d) => Recipe::Host(derived_values(case.seed, tp, d, &plan.vars.lengths, range, env())),
                None if case.data == DataScheme::V1 || tp.distinct => Recipe::Host(generate_int(case.seed, tp, &tp.layout.values, range)),
                None => {
                    let int_range = Some(range.unwrap_or(tp.dtype.default_int_range()));
                    Recipe::Counter { params: scheme2::tensor_params(case.seed, tp, &tp.layout.values, None, int_range), integer: true }
                }
            }
        })
        .collect()
}

fn tensor_rng(seed: u64, tag: u64) -> ChaCha8Rng {
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

/// A multiply-shift pick of `0..n` from one u32: unbiased enough, and one draw.
fn pick(rng: &mut ChaCha8Rng, n: usize) -> usize {
    ((rng.next_u32() as u64 * n as u64) >> 32) as usize
}

/// The smallest positive normal value of a floating type.
fn min_normal(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => pow2(-14),
        Dtype::F64 => f64::MIN_POSITIVE,
        _ => pow2(-126),
    }
}

/// One value of `class` for a floating tensor (unrounded).
fn float_value(class: ValueClass, rng: &mut ChaCha8Rng, normal: &mut Normal, dtype: Dtype) -> f64 {
    match class {
        ValueClass::Normal | ValueClass::ConstantRows => normal.next(rng),
        ValueClass::Uniform => 2.0 * unit(rng) - 1.0,
        ValueClass::Large => LARGE_SIGMA * normal.next(rng),
        ValueClass::Tiny => {
            // Between 2^-10 and 4 times the smallest normal: subnormals and the first binades.
            let e = pick(rng, 12) as i32 - 10;
            let sign = if rng.next_u32() & 1 == 0 { 1.0 } else { -1.0 };
            sign * (1.0 + unit(rng)) * min_normal(dtype) * 2f64.powi(e)
        }
        ValueClass::Huge => {
            // 2^6 .. 2^15: past expf's overflow, inside f16's 65504.
            let e = 6 + pick(rng, 9) as i32;
            let sign = if rng.next_u32() & 1 == 0 { 1.0 } else { -1.0 };
            let fraction = if rng.next_u32() & 3 == 0 { 0.0 } else { unit(rng) };
            sign * (1.0 + fraction) * pow2(e)
        }
        ValueClass::Zero => {
            if rng.next_u32() & 1 == 0 {
                0.0
            } else {
                -0.0
            }
        }
        ValueClass::Nan => f64::NAN,
        ValueClass::Inf => {
            if rng.next_u32() & 1 == 0 {
                f64::INFINITY
            } else {
                f64::NEG_INFINITY
            }
        }
    }
}

/// The extent of each dimension as stored (a broadcast dimension counts once) and their product:
/// how many values a drawn tensor holds before they are repeated along its broadcast dimensions.
pub fn stored_extents(tp: &TensorPlan) -> (Vec<u64>, usize) {
    let stored: Vec<u64> = tp.shape.iter().zip(&tp.strides).map(|(&n, &s)| if s == 0 { 1 } else { n }).collect();
    let n = stored.iter().product::<u64>() as usize;
    (stored, n)
}

/// The values of one drawn integer tensor, in logical order: drawn per stored element
/// (broadcast dimensions count once) uniformly in its range (pairwise distinct where it is
/// `distinct`), then repeated along broadcast dimensions.
fn generate_int(seed: u64, tp: &TensorPlan, classes: &[ValueClass], int_range: Option<(i64, i64)>) -> Vec<f64> {
    let mut rng = tensor_rng(seed, tp.index as u64);
    let (stored, n) = stored_extents(tp);
    let mut out = Vec::with_capacity(n);
    let classes = if classes.is_empty() { &[ValueClass::Normal][..] } else { classes };
    let (lo, hi) = int_range.unwrap_or(tp.dtype.default_int_range());
    let span = (hi - lo).max(0) as u64 + 1;
    if tp.distinct {
        // A random injection of 0..n into the range: a keyed permutation of the range read
        // at 0..n (the plan checked that n fits). Counter-based, so element i needs no other.
        let keys = [rng.next_u64(), rng.next_u64(), rng.next_u64(), rng.next_u64()];
        out.extend((0..n as u64).map(|i| (lo + permute(i, span, &keys) as i64) as f64));
        return expand(out, &stored, tp);
    }
    for _ in 0..n {
        let zero = classes.len() > 1 && classes[pick(&mut rng, classes.len())] == ValueClass::Zero || classes == [ValueClass::Zero];
        out.push(if zero { 0.0f64.max(lo as f64).min(hi as f64) } else { (lo + ((rng.next_u64() % span) as i64)) as f64 });
    }
    expand(out, &stored, tp)
}

/// The values of one drawn floating tensor, in logical order: drawn per stored element,
/// rounded into the tensor's type, then repeated along broadcast dimensions. With a value range,
/// `uniform` spans it and other finite values are folded into it (their magnitude where the
/// range has one sign) and clamped, so a tensor of probabilities or of extreme magnitudes gets
/// its values.
fn generate_float(seed: u64, tp: &TensorPlan, classes: &[ValueClass], range: Option<(f64, f64)>) -> Vec<f64> {
    let mut rng = tensor_rng(seed, tp.index as u64);
    let (stored, n) = stored_extents(tp);
    let dtype = tp.dtype;
    let mut out = Vec::with_capacity(n);
    let classes = if classes.is_empty() { &[ValueClass::Normal][..] } else { classes };
    let into_range = |x: f64| match range {
        Some((lo, hi)) if x.is_finite() => {
            let folded = if lo >= 0.0 {
                x.abs()
            } else if hi <= 0.0 {
                -x.abs()
            } else {
                x
            };
            folded.clamp(lo, hi)
        }
        _ => x,
    };
    let fit = |x: f64| if x.is_finite() { finite_round(into_range(x), dtype) } else { x };
    let mut normal = Normal { spare: None };
    if classes == [ValueClass::ConstantRows] {
        let d = stored.last().copied().unwrap_or(1).max(1) as usize;
        for _ in 0..n / d {
            let x = fit(CONSTANT_ROW_VALUES[pick(&mut rng, CONSTANT_ROW_VALUES.len())]);
            out.extend(std::iter::repeat_n(x, d));
        }
    } else {
        let mut draw = |c: ValueClass, rng: &mut ChaCha8Rng| match (c, range) {
            (ValueClass::Uniform, Some((lo, hi))) => lo + (hi - lo) * unit(rng),
            _ => float_value(c, rng, &mut normal, dtype),
        };
        if let [only] = classes {
            out.extend((0..n).map(|_| fit(draw(*only, &mut rng))));
        } else {
            for _ in 0..n {
                let c = classes[pick(&mut rng, classes.len())];
                out.push(fit(draw(c, &mut rng)));
            }
        }
    }
    expand(out, &stored, tp)
}

/// The values of a tensor derived from a list of lengths ([`Derive`]), logical order: the
/// lengths, their prefix sums, or a page table whose pages are a random injection into `range`
/// (keyed by the case's seed and the tensor, counter-based: page `k` of the batch is
/// `lo + permute(k)`), each row's unused entries the pad. The plan checked that they fit.
fn derived_values(seed: u64, tp: &TensorPlan, d: &Derive, lengths: &BTreeMap<String, Vec<u64>>, range: Option<(i64, i64)>, env: &Env) -> Vec<f64> {
    let list = lengths.get(d.lengths()).map(Vec::as_slice).unwrap_or_default();
    match d {
        Derive::Lengths(_) => list.iter().map(|&l| l as f64).collect(),
        Derive::CuSeqlens(_) => crate::core::manifest::lengths::prefix_sums(list).into_iter().map(|v| v as f64).collect(),
        Derive::PageTable { page_size, pad, .. } => {
            let page = env.int(page_size).unwrap_or(1).max(1) as u64;
            let (lo, hi) = range.unwrap_or((0, i32::MAX as i64));
            let span = (hi - lo + 1).max(1) as u64;
            let mut rng = tensor_rng(seed, tp.index as u64);
            let keys = [rng.next_u64(), rng.next_u64(), rng.next_u64(), rng.next_u64()];
            let width = tp.shape.get(1).copied().unwrap_or(0) as usize;
            let mut out = vec![*pad as f64; tp.numel as usize];
            let mut next = 0u64;
            for (b, &len) in list.iter().enumerate() {
                for j in 0..(len.div_ceil(page) as usize).min(width) {
                    out[b * width + j] = (lo + permute(next, span, &keys) as i64) as f64;
                    next += 1;
                }
            }
            out
        }
    }
}

/// Element `i` of a keyed permutation of `0..span` (`i < span`): a four-round Feistel network on
/// the smallest even number of bits that holds `span`, cycle-walked back into range. A
/// bijection of the power-of-two domain, so walking from an `i` in range reaches an image in
/// range, and distinct `i` give distinct images.
pub fn permute(i: u64, span: u64, keys: &[u64; 4]) -> u64 {
    let bits = (64 - (span.max(2) - 1).leading_zeros()).div_ceil(2).max(1);
    let mask = (1u64 << bits) - 1;
    let mut x = i;
    loop {
        let (mut l, mut r) = (x >> bits, x & mask);
        for k in keys {
            let f = (r.wrapping_add(*k).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 17 ^ r.wrapping_mul(0xBF58_476D_1CE4_E5B9)) & mask;
            (l, r) = (r, l ^ f);
        }
        x = (l << bits) | r;
        if x < span {
            return x;
        }
    }
}

/// Values over the stored shape repeated along the broadcast dimensions into logical order.
fn expand(stored_values: Vec<f64>, stored: &[u64], tp: &TensorPlan) -> Vec<f64> {
    if stored[..] == tp.shape[..] {
        return stored_values;
    }
    (0..tp.numel)
        .map(|linear| {
            let idx = crate::core::plan::logical_index(&tp.shape, linear);
            let mut s = 0u64;
            for (i, &n) in stored.iter().enumerate() {
                s = s * n + if n == 1 { 0 } else { idx[i] };
            }
            stored_values[s as usize]
        })
        .collect()
}

/// Largest finite value of a floating type.
fn max_finite(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => 65504.0,
        Dtype::Bf16 => half::bf16::MAX.to_f64(),
        Dtype::F64 => f64::MAX,
        _ => f32::MAX as f64,
    }
}

/// Rounds into the dtype after clamping to its finite range, so generation never makes ±inf
/// by accident.
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
        Dtype::F64 => x,
        // Integers: nearest, saturating (NaN becomes 0), as the types hold them.
        Dtype::I8 => (x.round() as i8) as f64,
        Dtype::U8 => (x.round() as u8) as f64,
        Dtype::I32 => (x.round() as i32) as f64,
        Dtype::U32 => (x.round() as u32) as f64,
        Dtype::I64 => (x.round() as i64) as f64,
    }
}

/// The dtype's bit pattern of `x` rounded into it (see [`round_to`]), in the low bytes.
pub fn to_bits(x: f64, dtype: Dtype) -> u64 {
    let r = round_to(x, dtype);
    match dtype {
        // `r` is exact in the format, so even `half`'s truncating conversion is exact here.
        Dtype::F16 => half::f16::from_f64_const(r).to_bits() as u64,
        Dtype::Bf16 => half::bf16::from_f64_const(r).to_bits() as u64,
        Dtype::F32 => (r as f32).to_bits() as u64,
        Dtype::F64 => r.to_bits(),
        Dtype::I8 => (r as i8) as u8 as u64,
        Dtype::U8 => r as u8 as u64,
        Dtype::I32 => (r as i32) as u32 as u64,
        Dtype::U32 => r as u32 as u64,
        Dtype::I64 => (r as i64) as u64,
    }
}

/// The value of a dtype bit pattern (only the type's low bytes of `bits` are read).
pub fn from_bits(bits: u64, dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => half::f16::from_bits(bits as u16).to_f64(),
        Dtype::Bf16 => half::bf16::from_bits(bits as u16).to_f64(),
        Dtype::F32 => f32::from_bits(bits as u32) as f64,
        Dtype::F64 => f64::from_bits(bits),
        Dtype::I8 => bits as u8 as i8 as f64,
        Dtype::U8 => bits as u8 as f64,
        Dtype::I32 => bits as u32 as i32 as f64,
        Dtype::U32 => bits as u32 as f64,
        Dtype::I64 => bits as i64 as f64,
    }
}

fn check_buffer(len: usize, tp: &TensorPlan, what: &str) {
    assert!(len as u64 >= tp.span_bytes, "{what} buffer of {len} bytes is shorter than {}'s span of {} bytes", tp.name, tp.span_bytes);
}

/// Writes `values` (logical row-major order) into `dst` in the layout of `tp`, little-endian.
///
/// `dst[0]` is the tensor's base byte (the caller applies `offset_bytes` by slicing). Only the
/// bytes of logical elements are written; stride gaps are left as they are, which is what lets
/// the arena keep canaries there. Each value is rounded into the tensor's type first (a no-op
/// for generated values). Panics if `values` or `dst` is too short for the plan.
pub fn write_strided(values: &[f64], tp: &TensorPlan, dst: &mut [u8]) {
    check_buffer(dst.len(), tp, "destination");
    assert_eq!(values.len() as u64, tp.numel, "{} needs {} values", tp.name, tp.numel);
    let eb = tp.elem_bytes as usize;
    for_each_offset(tp, |i, off| dst[off..off + eb].copy_from_slice(&to_bits(values[i], tp.dtype).to_le_bytes()[..eb]));
}

/// Writes one bit pattern (a sentinel, a constant) into every logical element of `tp`.
pub fn fill_strided(bits: u64, tp: &TensorPlan, dst: &mut [u8]) {
    check_buffer(dst.len(), tp, "destination");
    let eb = tp.elem_bytes as usize;
    let b = bits.to_le_bytes();
    for_each_offset(tp, |_, off| dst[off..off + eb].copy_from_slice(&b[..eb]));
}

/// Reads the raw bit patterns of every logical element of `tp` from `src`, in row-major order.
///
/// Bits rather than values are what determinism and canary checks compare: two NaNs with
/// different payloads are different results.
pub fn read_strided_bits(src: &[u8], tp: &TensorPlan) -> Vec<u64> {
    check_buffer(src.len(), tp, "source");
    let eb = tp.elem_bytes as usize;
    if let Some(dense) = dense_bytes(src, tp) {
        return dense.chunks_exact(eb).map(le_bits).collect();
    }
    let mut out = vec![0u64; tp.numel as usize];
    for_each_offset(tp, |i, off| {
        let mut b = [0u8; 8];
        b[..eb].copy_from_slice(&src[off..off + eb]);
        out[i] = u64::from_le_bytes(b);
    });
    out
}

/// Reads every logical element of `tp` from `src` (base byte at `src[0]`), in row-major order;
/// the inverse of [`write_strided`].
pub fn read_strided(src: &[u8], tp: &TensorPlan) -> Vec<f64> {
    check_buffer(src.len(), tp, "source");
    // A dense tensor (every reference output, most kernels' outputs) is read in one pass, its
    // element type decided once: an f64 gold of a million elements is the case's largest read.
    match (dense_bytes(src, tp), tp.dtype) {
        (Some(d), Dtype::F64) => d.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect(),
        (Some(d), Dtype::F32) => d.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes(c.try_into().expect("4 bytes")))).collect(),
        (Some(d), Dtype::F16) => d.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
        (Some(d), Dtype::Bf16) => d.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
        _ => read_strided_bits(src, tp).into_iter().map(|b| from_bits(b, tp.dtype)).collect(),
    }
}

/// The bytes of a dense row-major tensor's elements, in logical order; `None` for any other
/// layout.
fn dense_bytes<'a>(src: &'a [u8], tp: &TensorPlan) -> Option<&'a [u8]> {
    tp.is_dense_row_major().then(|| &src[..(tp.numel * tp.elem_bytes as u64) as usize])
}

/// An element's bits from its little-endian bytes (1 to 8 of them).
fn le_bits(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::case::{Case, TensorLayout};
    use crate::core::manifest::Manifest;

    fn manifest() -> Manifest {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/testing/simple_attn.toml");
        Manifest::load(&dir).unwrap()
    }

    fn case(dtype: Dtype, classes: &[&[ValueClass]; 3], seed: u64) -> Case {
        let mut c = Case::new("k", dtype);
        for (k, v) in [("batch", 1), ("heads_q", 2), ("heads_kv", 1), ("seq_q", 65), ("seq_k", 113), ("head_dim", 64)] {
            c.dims.insert(k.into(), v);
        }
        for (t, cl) in ["q", "k", "v"].iter().zip(classes) {
            c.layout_mut(t).values = cl.to_vec();
        }
        c.seed = seed;
        c
    }

    fn gen(c: &Case) -> Vec<Vec<f64>> {
        let m = manifest();
        let plan = Plan::new(c, &m).unwrap();
        let i = generate(c, &plan, &m);
        (0..3).map(|t| i.get(t).unwrap().to_vec()).collect()
    }

    #[test]
    fn the_keyed_permutation_is_a_bijection_of_every_span() {
        for span in [1u64, 2, 3, 7, 64, 100, 1000, 4097] {
            for keys in [[1u64, 2, 3, 4], [u64::MAX, 0, 77, 1 << 40]] {
                let mut seen: Vec<u64> = (0..span).map(|i| permute(i, span, &keys)).collect();
                assert!(seen.iter().all(|&v| v < span), "span {span}");
                seen.sort_unstable();
                seen.dedup();
                assert_eq!(seen.len() as u64, span, "span {span}: a permutation");
            }
        }
        assert_ne!((0..8).map(|i| permute(i, 1000, &[1, 2, 3, 4])).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>(), "not the identity");
    }

    const N: &[ValueClass] = &[ValueClass::Normal];
    const L: &[ValueClass] = &[ValueClass::Large];
    const U: &[ValueClass] = &[ValueClass::Uniform];

    /// A floating tensor's `range`: `uniform` spans it (to the type's limits), other classes are
    /// folded and clamped into it; a tensor without one draws the same bits as before.
    #[test]
    fn a_float_range_bounds_every_class_and_uniform_spans_it() {
        let mut m = manifest();
        let c = case(Dtype::F16, &[U, N, L], 3);
        let before = gen(&c);
        m.tensors[0].range = Some(["-65504".into(), "65504.0".into()]);
        m.tensors[1].range = Some(["0".into(), "0.5".into()]);
        m.tensors[2].range = Some(["-4".into(), "-1".into()]);
        let plan = Plan::new(&c, &m).unwrap();
        let got = generate(&c, &plan, &m);
        let (q, k, v) = (got.get(0).unwrap(), got.get(1).unwrap(), got.get(2).unwrap());
        assert!(q.iter().all(|x| x.abs() <= 65504.0) && q.iter().any(|x| x.abs() > 30000.0), "uniform over f16's range");
        assert!(k.iter().all(|&x| (0.0..=0.5).contains(&x)) && k.iter().any(|&x| x > 0.1 && x < 0.4));
        assert!(v.iter().all(|&x| (-4.0..=-1.0).contains(&x)) && v.iter().any(|&x| x < -1.5));
        m.tensors[2].range = Some(["1".into(), "0".into()]);
        let e = Plan::new(&c, &m).unwrap_err().to_string();
        assert!(e.contains("tensors.v.range") && e.contains("min <= max"), "{e}");
        assert_eq!(gen(&c), before);
    }

    #[test]
    fn same_seed_gives_same_bits_and_pins_a_golden() {
        let c = case(Dtype::F16, &[N, N, N], 42);
        assert_eq!(gen(&c), gen(&c));
        // Golden bits, unchanged since the attention-only generator: a change here means saved
        // seeds no longer replay the same inputs (ChaCha, libm, Box–Muller or rounding changed).
        let bits = |v: &[f64], dt| v[..4].iter().map(|&x| to_bits(x, dt) as u32).collect::<Vec<_>>();
        // And data scheme v2's (Philox, datagen.h), so that its seeds replay as well.
        let golden = [
            (DataScheme::V1, [GOLDEN_F16_NORMAL, GOLDEN_BF16_LARGE, GOLDEN_F32_UNIFORM]),
            (DataScheme::V2, [GOLDEN_V2_F16_NORMAL, GOLDEN_V2_BF16_LARGE, GOLDEN_V2_F32_UNIFORM]),
        ];
        for (scheme, wants) in golden {
            for ((dt, classes), want) in [(Dtype::F16, [N, N, N]), (Dtype::Bf16, [L, L, N]), (Dtype::F32, [U, U, U])].into_iter().zip(wants) {
                let mut c = case(dt, &classes, 42);
                c.data = scheme;
                let g = gen(&c);
                let got = [bits(&g[0], dt), bits(&g[1], dt), bits(&g[2], dt)];
                assert_eq!(got, want.map(|r| r.to_vec()), "{scheme:?} {dt} {classes:?}");
            }
        }
    }

    /// First four values of q, k, v for seed 42 (e.g. q starts -0.0740).
    const GOLDEN_F16_NORMAL: [[u32; 4]; 3] = [[0xacbd, 0xba31, 0x2c28, 0x3c0e], [0xbb72, 0x3815, 0xad0f, 0xb3d8], [0xabcf, 0xbee9, 0x915e, 0xbe2d]];
    /// q and k are 8 × the normal stream above (q starts -0.594), v is the plain normal.
    const GOLDEN_BF16_LARGE: [[u32; 4]; 3] = [[0xbf18, 0xc0c6, 0x3f05, 0x4102], [0xc0ee, 0x4083, 0xbf22, 0xbffb], [0xbd7a, 0xbfdd, 0xba2c, 0xbfc6]];
    const GOLDEN_F32_UNIFORM: [[u32; 4]; 3] =
        [[0xbef4e30a, 0x3ef07474, 0xbe463eb7, 0xbf053678], [0xbe0e106c, 0xbe236c9b, 0xbf6f4aba, 0x3ecd2983], [0x3f0d01b8, 0x3efa3f11, 0x3ec923c4, 0x3effee4b]];

    /// Data scheme v2's first four values of q, k, v for seed 42.
    const GOLDEN_V2_F16_NORMAL: [[u32; 4]; 3] = [[0xad0b, 0xb72b, 0x3687, 0x3711], [0xbc94, 0x40c6, 0xbca5, 0x3782], [0x2a7f, 0x3cc5, 0xb5ea, 0x3e41]];
    const GOLDEN_V2_BF16_LARGE: [[u32; 4]; 3] = [[0xbf21, 0xc065, 0x4051, 0x4062], [0xc112, 0x4199, 0xc115, 0x4070], [0x3d50, 0x3f99, 0xbebd, 0x3fc8]];
    const GOLDEN_V2_F32_UNIFORM: [[u32; 4]; 3] =
        [[0xbd80ab6c, 0xbeb1164c, 0x3ea21d77, 0x3eaebc37], [0xbf3f5c2e, 0x3f7ba43b, 0xbf411eaa, 0x3eb8e96b], [0x3d25cb0d, 0x3f445959, 0xbe93a663, 0x3f61ceee]];

    #[test]
    fn classes_mix_and_stay_in_their_type() {
        let all = [ValueClass::Normal, ValueClass::Tiny, ValueClass::Zero, ValueClass::ConstantRows];
        for dt in Dtype::ALL {
            for class in all {
                let g = gen(&case(dt, &[&[class], &[class], &[class]], 3));
                for x in g.iter().flatten() {
                    assert!(x.is_finite(), "{dt} {class:?}: {x}");
                    assert_eq!(round_to(*x, dt), *x, "{dt} {class:?}");
                }
            }
            let mixed = gen(&case(dt, &[&[ValueClass::Normal, ValueClass::Zero, ValueClass::Nan], N, N], 3));
            assert!(mixed[0].iter().any(|x| x.is_nan()) && mixed[0].contains(&0.0) && mixed[0].iter().any(|x| x.is_finite() && *x != 0.0));
        }
        let tiny = gen(&case(Dtype::F16, &[&[ValueClass::Tiny], N, N], 5));
        assert!(tiny[0].iter().any(|&x| x != 0.0 && x.abs() < pow2(-14)), "subnormals come up");
    }

    #[test]
    fn huge_values_pass_expf_overflow_and_stay_finite_in_every_float_type() {
        const H: &[ValueClass] = &[ValueClass::Huge];
        for dt in [Dtype::F16, Dtype::Bf16, Dtype::F32, Dtype::F64] {
            let g = gen(&case(dt, &[H, H, N], 11));
            let x: Vec<f64> = g[0].iter().chain(&g[1]).copied().collect();
            assert!(x.iter().all(|v| v.is_finite() && (64.0..=65504.0).contains(&v.abs())), "{dt}");
            assert!(x.iter().any(|v| *v > 88.73) && x.iter().any(|v| *v < -88.73), "{dt}: past expf's overflow, both signs");
            assert!(x.iter().filter(|v| (v.abs().log2().fract()) == 0.0).count() > x.len() / 8, "{dt}: exact powers of two come up");
            assert!(x.iter().any(|v| v.abs() > 8192.0), "{dt}: the top binades come up");
        }
    }

    #[test]
    fn strided_round_trip_and_broadcast_reads_agree() {
        let m = manifest();
        let mut c = case(Dtype::F16, &[N, N, N], 9);
        *c.layout_mut("k") = TensorLayout { order: vec![0, 2, 1, 3], pad: vec![0, 3, 1, 2], offset_bytes: 6, ..TensorLayout::dense() };
        let p = Plan::new(&c, &m).unwrap();
        let k = p.tensor("k").unwrap();
        let values = generate(&c, &p, &m).get(1).unwrap().to_vec();
        let mut buf = vec![0u8; k.span_bytes as usize];
        write_strided(&values, k, &mut buf);
        assert_eq!(read_strided(&buf, k), values);
        c.layout_mut("k").broadcast = vec![2];
        let p = Plan::new(&c, &m).unwrap();
        let k = p.tensor("k").unwrap();
        let values = generate(&c, &p, &m).get(1).unwrap().to_vec();
        let mut buf = vec![0u8; k.span_bytes as usize];
        write_strided(&values, k, &mut buf);
        assert_eq!(read_strided(&buf, k), values, "every logical read of a broadcast element agrees");
    }

    #[test]
    fn a_dense_tensor_reads_as_the_element_by_element_walk_reads_it() {
        let m = manifest();
        for dt in [Dtype::F16, Dtype::Bf16, Dtype::F32, Dtype::F64] {
            let c = case(dt, &[N, N, N], 3);
            let p = Plan::new(&c, &m).unwrap();
            let q = p.tensor("q").unwrap();
            assert!(q.is_dense_row_major(), "{dt}");
            let bytes: Vec<u8> = (0..q.span_bytes).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut walked = vec![0u64; q.numel as usize];
            for_each_offset(q, |i, off| walked[i] = le_bits(&bytes[off..off + q.elem_bytes as usize]));
            assert_eq!(read_strided_bits(&bytes, q), walked, "{dt}");
            let values: Vec<u64> = read_strided(&bytes, q).iter().map(|v| v.to_bits()).collect();
            assert_eq!(values, walked.iter().map(|&b| from_bits(b, dt).to_bits()).collect::<Vec<_>>(), "{dt}");
        }
    }
}
