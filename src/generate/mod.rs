//! Case generation: fuzzer bytes decoded into cases ([`decode_case`], the `arbitrary` impl of
//! [`Case`](crate::case::Case)) and proptest strategies ([`strategy`]).
//!
//! Both draw from the same boundary tables and, given a kernel's [`DecodeContext`], from the part
//! of the case space its declared contract allows. Generation sits above the case model and the
//! plan (it needs the contract to stay inside it), so the model itself depends on nothing.

mod decode;
pub mod strategy;

pub use decode::{
    decode_case, offsets_past_int32, past_int32_variant, reaches_past_int32, DecodeContext, HEAD_DIM_BOUNDARY, MAX_DECODED_HEAD_DIM, MAX_DECODED_SEQ,
    OFFSETS_ALIGNED, OFFSETS_MISALIGNED, OFFSETS_ODD, ORDERS, PAST_INT32_ONE_IN, SEQ_BOUNDARY,
};
