//! proptest strategies for [`Case`]s of one kernel.
//!
//! [`cases`] generates valid cases with the decoder's own choices by drawing the bytes it
//! decodes, so proptest shrinks a failing case by shrinking bytes toward zero, which moves every
//! choice toward its first option: dims to the low end of their range, offset 0, the shape's own
//! order unpadded, normal values. That is the order a human would simplify a failing case in.

use proptest::prelude::*;

use crate::core::case::Case;

use super::decode::{decode_case, DecodeContext};

/// A boxed strategy producing valid [`Case`]s.
pub type CaseStrategy = BoxedStrategy<Case>;

/// Bytes the decoder reads for one case, with room to spare.
pub const CASE_BYTES: usize = 160;

/// Cases for the kernel of `ctx` (inside its contract when `ctx` is constrained), each
/// post-processed by `shape` (to cap sizes for a test's budget).
pub fn cases(ctx: DecodeContext, shape: fn(Case) -> Case) -> CaseStrategy {
    proptest::collection::vec(any::<u8>(), CASE_BYTES)
        .prop_map(move |bytes| shape(decode_case(&mut arbitrary::Unstructured::new(&bytes), &ctx).expect("decoding never fails")))
        .boxed()
}
