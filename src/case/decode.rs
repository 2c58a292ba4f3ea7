//! Decoding fuzzer bytes into a valid [`Case`] with `arbitrary`.
//!
//! Any byte string decodes (inputs that run out fall back to the smallest choices), so libFuzzer
//! can mutate bytes freely and every input still reaches the GPU. Choices are biased toward the
//! values that break kernels: sequence lengths one either side of a tile, head dims that are not
//! multiples of 8, and base offsets that are multiples of 2, 4 or 8 but not 16. Small changes to
//! the bytes make small changes to the case, which keeps libFuzzer's mutations meaningful.

use std::collections::BTreeMap;

use arbitrary::{Result, Unstructured};

use super::{Case, DataSpec, Dim, Dtype, Layouts, Placement, TensorLayout, ValueDist, CASE_VERSION};

/// Sequence lengths around common tile sizes (16, 32, 64, 80, 128, 256, 512, 1024) and the
/// shapes FlashAttention's own tests use.
pub const SEQ_BOUNDARY: &[u32] = &[
    1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 79, 80, 81, 113, 127, 128, 129, 203, 255, 256,
    257, 511, 512, 513, 1023, 1024,
];
/// Head dims: multiples of 8 and the odd ones real bugs were found with (46, 59, 111).
pub const HEAD_DIM_BOUNDARY: &[u32] =
    &[1, 2, 8, 16, 32, 40, 46, 59, 63, 64, 65, 72, 80, 96, 111, 127, 128, 160, 192, 256];
/// Offsets that are 16-byte aligned.
pub const OFFSETS_ALIGNED: &[u32] = &[16, 32, 48, 64];
/// Offsets that are multiples of 2, 4 or 8 but not 16: the misaligned-vector-load class.
pub const OFFSETS_MISALIGNED: &[u32] = &[8, 4, 2, 6, 12, 24, 40, 10, 14];
/// Offsets that are not even 2-byte aligned: outside every f16 kernel's contract.
pub const OFFSETS_ODD: &[u32] = &[1, 3, 5, 7, 9];
/// Dimension orders worth trying first: BHSD, BSHD, then ones with d not innermost.
pub const ORDERS: &[[Dim; 4]] = &[
    [Dim::B, Dim::H, Dim::S, Dim::D],
    [Dim::B, Dim::S, Dim::H, Dim::D],
    [Dim::H, Dim::B, Dim::S, Dim::D],
    [Dim::S, Dim::B, Dim::H, Dim::D],
    [Dim::B, Dim::H, Dim::D, Dim::S],
    [Dim::D, Dim::B, Dim::H, Dim::S],
];
/// Largest sequence length a decoded case draws outside the boundary table.
pub const MAX_DECODED_SEQ: u32 = 1024;
/// Largest head dim a decoded case draws outside the boundary table.
pub const MAX_DECODED_HEAD_DIM: u32 = 256;

/// What a decoder needs to know about the kernel: its name and the choices its manifest offers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecodeContext {
    /// Kernel name or manifest path written into the case.
    pub kernel: String,
    /// Tunable parameters and the values each may take.
    pub params: Vec<(String, Vec<i64>)>,
    /// Dtypes the kernel can be compiled for; empty means all.
    pub dtypes: Vec<Dtype>,
}

/// Decodes a case; never panics, and the result always passes [`Case::validate`].
pub fn decode_case(u: &mut Unstructured<'_>, ctx: &DecodeContext) -> Result<Case> {
    let mut params = BTreeMap::new();
    for (name, values) in &ctx.params {
        if !values.is_empty() {
            params.insert(name.clone(), *u.choose(values)?);
        }
    }
    let dtype = if ctx.dtypes.is_empty() { *u.choose(&Dtype::ALL)? } else { *u.choose(&ctx.dtypes)? };
    let heads_kv = u.int_in_range(1..=4u32)?;
    let group = *u.choose(&[1u32, 2, 4, 3])?;
    let batch = u.int_in_range(1..=3u32)?;
    let seq_q = biased(u, SEQ_BOUNDARY, MAX_DECODED_SEQ)?;
    let seq_k = biased(u, SEQ_BOUNDARY, MAX_DECODED_SEQ)?;
    let head_dim = biased(u, HEAD_DIM_BOUNDARY, MAX_DECODED_HEAD_DIM)?;
    let causal = u.arbitrary::<bool>()?;
    let scale = match u.int_in_range(0..=7u8)? {
        6 => 1.0,
        7 => 0.5,
        _ => 1.0 / (head_dim as f32).sqrt(),
    };
    let data = DataSpec {
        seed: u.arbitrary::<u32>()? as u64,
        dist: match u.int_in_range(0..=9u8)? {
            0..=5 => ValueDist::Normal,
            6 => ValueDist::Uniform,
            7 | 8 => ValueDist::LargeLogits,
            _ => ValueDist::ConstantRows,
        },
    };
    let layouts = Layouts { q: layout(u)?, k: layout(u)?, v: layout(u)?, o: layout(u)? };
    let placement = if u.int_in_range(0..=3u8)? == 3 { Placement::Exact } else { Placement::Guarded };
    Ok(Case {
        version: CASE_VERSION,
        kernel: ctx.kernel.clone(),
        params,
        dtype,
        batch,
        heads_q: heads_kv * group,
        heads_kv,
        seq_q,
        seq_k,
        head_dim,
        causal,
        scale,
        data,
        layouts,
        placement,
    })
}

/// Decoding with no kernel context: any dtype, no parameters, an empty kernel name. Fuzz targets
/// that know their kernel call [`decode_case`] with its [`DecodeContext`] instead, so that the
/// parameters and dtypes drawn are ones the kernel was compiled for.
impl<'a> arbitrary::Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        decode_case(u, &DecodeContext::default())
    }
}

/// Three times in four a boundary value, otherwise any value in `1..=max`.
fn biased(u: &mut Unstructured<'_>, boundary: &[u32], max: u32) -> Result<u32> {
    if u.int_in_range(0..=3u8)? < 3 {
        Ok(*u.choose(boundary)?)
    } else {
        u.int_in_range(1..=max)
    }
}

/// Half the time offset 0, then 16-aligned, misaligned-by-2/4/8 and, rarely, odd offsets, so
/// that most cases stay inside a kernel's contract while every residue class still comes up.
fn offset(u: &mut Unstructured<'_>) -> Result<u32> {
    Ok(match u.int_in_range(0..=19u8)? {
        0..=9 => 0,
        10..=13 => *u.choose(OFFSETS_ALIGNED)?,
        14..=18 => *u.choose(OFFSETS_MISALIGNED)?,
        _ => *u.choose(OFFSETS_ODD)?,
    })
}

fn layout(u: &mut Unstructured<'_>) -> Result<TensorLayout> {
    let kind = u.int_in_range(0..=7u8)?;
    let offset_bytes = offset(u)?;
    if kind < 4 {
        return Ok(TensorLayout { order: ORDERS[0], pad: [0; 4], offset_bytes });
    }
    let order = *u.choose(ORDERS)?;
    let mut pad = [0u32; 4];
    for p in pad.iter_mut().skip(1) {
        *p = *u.choose(&[0u32, 0, 1, 3, 8, 16])?;
    }
    Ok(TensorLayout { order, pad, offset_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arbitrary_impl_is_the_context_free_decoder() {
        let bytes = [9u8, 200, 17, 3, 250, 4, 4, 0, 128, 77, 1, 2, 3];
        let via_trait: Case = arbitrary::Arbitrary::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
        let direct = decode_case(&mut Unstructured::new(&bytes), &DecodeContext::default()).unwrap();
        assert_eq!(via_trait, direct);
        via_trait.validate().unwrap();
    }

    #[test]
    fn empty_input_decodes_to_a_small_aligned_case() {
        let mut u = Unstructured::new(&[]);
        let case = decode_case(&mut u, &DecodeContext::default()).unwrap();
        case.validate().unwrap();
        assert_eq!((case.batch, case.heads_q, case.seq_q, case.seq_k), (1, 1, 1, 1));
        assert_eq!(case.layouts, Layouts::contiguous());
    }

    #[test]
    fn every_byte_pattern_decodes_to_a_valid_case() {
        let ctx = DecodeContext {
            kernel: "k".into(),
            params: vec![("BLOCK_M".into(), vec![64, 128])],
            dtypes: vec![Dtype::F16, Dtype::Bf16],
        };
        for seed in 0u64..2000 {
            let bytes: Vec<u8> = (0..64).map(|i| (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (i % 57)) as u8 ^ i as u8).collect();
            let case = decode_case(&mut Unstructured::new(&bytes), &ctx).unwrap();
            case.validate().unwrap_or_else(|e| panic!("{e}: {case:?}"));
            assert!(ctx.dtypes.contains(&case.dtype));
            assert!([64, 128].contains(&case.params["BLOCK_M"]));
        }
    }
}
