//! Data scheme v2 (issue 30): every stored element of a drawn tensor is a pure function of
//! (case seed, tensor, element index), computed by one C source, `kernels/harness/datagen.h`,
//! that the host's C compiler builds into this binary (build.rs) and NVRTC builds for the GPU
//! ([`DEVICE_SOURCE`], checked bit for bit against this side by `tests/gpu_datagen.rs`). Being
//! counter-based, a tensor's values need no sequential stream: the GPU can write them in place,
//! in any order, and a slice of a tensor costs only that slice.
//!
//! What stays on the host, in either scheme: tensors derived from lengths (cu_seqlens, page
//! tables) and `distinct` index tensors, whose Feistel permutation is counter-based already.
//! Those are small and are drawn as v1 draws them.

use crate::core::case::{Dtype, ValueClass};
use crate::core::plan::TensorPlan;

/// `cf_dg_tensor` of datagen.h: what one tensor's generation needs, laid out as C lays it out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DgTensor {
    /// The case's data seed.
    pub seed: u64,
    /// Roster position.
    pub tensor: u32,
    /// `CF_DG_F16` (0), `CF_DG_BF16` (1), `CF_DG_F32` (2), `CF_DG_F64` (3); unused for integers.
    pub dtype: u32,
    /// Mask of value classes, bit `k` the `k`-th [`ValueClass`]; 0 means normal.
    pub classes: u32,
    /// Whether `lo`/`hi` hold a float value range.
    pub has_range: u32,
    /// Float range, low end.
    pub lo: f64,
    /// Float range, high end.
    pub hi: f64,
    /// Innermost stored extent: `constant_rows` draws one value per such row.
    pub row: u64,
    /// Integer range, inclusive low end.
    pub ilo: i64,
    /// Integer range, inclusive high end.
    pub ihi: i64,
}

extern "C" {
    fn cf_dg_fill_float(t: *const DgTensor, first: u64, n: u64, out: *mut f64);
    fn cf_dg_fill_int(t: *const DgTensor, first: u64, n: u64, out: *mut f64);
    fn cf_dg_philox_words(ctr: *mut u32, k0: u32, k1: u32);
    fn cf_dg_log_host(x: f64) -> f64;
    fn cf_dg_quantile_host(p: f64) -> f64;
}

/// The generator's source (datagen.h) and its GPU entry (datagen.cu, `cf_dg_fill`), for NVRTC.
pub const DEVICE_SOURCE: (&str, &str) = (include_str!("../../../kernels/harness/datagen.h"), include_str!("../../../kernels/harness/datagen.cu"));

/// The bit of `class` in [`DgTensor::classes`].
fn class_bit(class: ValueClass) -> u32 {
    1 << match class {
        ValueClass::Normal => 0,
        ValueClass::Uniform => 1,
        ValueClass::Large => 2,
        ValueClass::Tiny => 3,
        ValueClass::Huge => 4,
        ValueClass::Zero => 5,
        ValueClass::ConstantRows => 6,
        ValueClass::Nan => 7,
        ValueClass::Inf => 8,
    }
}

/// The generator's code of a floating type.
fn dtype_code(dtype: Dtype) -> u32 {
    match dtype {
        Dtype::F16 => 0,
        Dtype::Bf16 => 1,
        Dtype::F64 => 3,
        _ => 2,
    }
}

/// The generation parameters of one tensor of a case with data seed `seed`: its classes, its
/// float `range` or integer `int_range` (the type's default range when none), its innermost
/// stored extent.
pub fn tensor_params(seed: u64, tp: &TensorPlan, classes: &[ValueClass], range: Option<(f64, f64)>, int_range: Option<(i64, i64)>) -> DgTensor {
    let row = tp.shape.iter().zip(&tp.strides).next_back().map(|(&n, &s)| if s == 0 { 1 } else { n }).unwrap_or(1).max(1);
    let (ilo, ihi) = int_range.unwrap_or(tp.dtype.default_int_range());
    DgTensor {
        seed,
        tensor: tp.index as u32,
        dtype: dtype_code(tp.dtype),
        classes: classes.iter().map(|&c| class_bit(c)).fold(0, |a, b| a | b),
        has_range: u32::from(range.is_some()),
        lo: range.map_or(0.0, |r| r.0),
        hi: range.map_or(0.0, |r| r.1),
        row,
        ilo,
        ihi,
    }
}

/// Stored elements `first..first + n` of a tensor, floating (`integer` false) or integer.
pub fn fill(t: &DgTensor, first: u64, n: usize, integer: bool) -> Vec<f64> {
    let mut out = vec![0.0; n];
    // SAFETY: `out` holds `n` doubles; the C side writes exactly `n` and reads only `t`.
    unsafe {
        if integer {
            cf_dg_fill_int(t, first, n as u64, out.as_mut_ptr());
        } else {
            cf_dg_fill_float(t, first, n as u64, out.as_mut_ptr());
        }
    }
    out
}

/// Philox4x32-10 of `counter` under key `(k0, k1)`: the generator's random words.
pub fn philox(counter: [u32; 4], k0: u32, k1: u32) -> [u32; 4] {
    let mut c = counter;
    // SAFETY: four words, read and written in place.
    unsafe { cf_dg_philox_words(c.as_mut_ptr(), k0, k1) };
    c
}

/// The generator's natural logarithm (finite `x > 0`).
pub fn log(x: f64) -> f64 {
    // SAFETY: a pure function of a double.
    unsafe { cf_dg_log_host(x) }
}

/// The generator's standard normal quantile (`p` in (0, 1)).
pub fn normal_quantile(p: f64) -> f64 {
    // SAFETY: a pure function of a double.
    unsafe { cf_dg_quantile_host(p) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's known-answer vectors for Philox4x32-10 (kat_vectors): the generator is the
    /// published one, not a look-alike.
    #[test]
    fn philox_matches_the_published_known_answers() {
        assert_eq!(philox([0, 0, 0, 0], 0, 0), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
        assert_eq!(philox([u32::MAX; 4], u32::MAX, u32::MAX), [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]);
        assert_eq!(philox([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], 0xa4093822, 0x299f31d0), [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]);
    }

    /// The class bits are datagen.h's enum, which follows `ValueClass::ALL`.
    #[test]
    fn class_bits_follow_the_class_order() {
        for (k, &c) in ValueClass::ALL.iter().enumerate() {
            assert_eq!(class_bit(c), 1 << k, "{c:?}");
        }
    }

    /// The portable logarithm and quantile agree with libm to a few units in the last place
    /// (they need not be correctly rounded, only the same on every machine).
    #[test]
    fn log_and_quantile_are_accurate() {
        for k in 1..2000 {
            let x = k as f64 / 1999.0 * 7.0 + 1e-300 * k as f64;
            let (ours, libm) = (log(x), libm::log(x));
            assert!((ours - libm).abs() <= 4.0 * f64::EPSILON * libm.abs().max(1.0), "log({x}): {ours} vs {libm}");
        }
        assert!((log(f64::MIN_POSITIVE / 8.0) - libm::log(f64::MIN_POSITIVE / 8.0)).abs() < 1e-12, "subnormals");
        for (p, z) in [(0.5, 0.0), (0.975, 1.959963984540054), (0.025, -1.959963984540054), (1e-10, -6.361340902404056)] {
            assert!((normal_quantile(p) - z).abs() < 2e-8 * z.abs().max(1.0), "quantile({p}) = {}", normal_quantile(p));
        }
    }
}
