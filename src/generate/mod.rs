//! Case generation for one kernel: fuzzer bytes decoded into cases ([`decode_case`]) and
//! proptest strategies ([`strategy`]), both driven by the kernel's manifest.
//!
//! Both draw from the same choices: the manifest's dims (hints, range edges, relations solved
//! as each dim is drawn: [`relations`]), scalars, value classes and layouts, inside the declared
//! contract unless asked otherwise ([`DecodeContext::unconstrained`]). Generation sits above the
//! case model, the manifest and the plan, so none of those depends on it.

mod decode;
pub mod relations;
pub mod strategy;

pub use decode::{
    decode_case, offsets_past_int32, orders, past_int32_tensors, past_int32_variant, reaches_past_int32, DecodeContext, OFFSETS_ALIGNED, OFFSETS_MISALIGNED,
    OFFSETS_ODD, PADS, PAST_INT32_ONE_IN,
};

use crate::case::Case;
use crate::manifest::Manifest;

/// A small, valid case for the kernel of `m`: every dim at the low end of its range (relations
/// kept), scalars at their first choice, the first element type, default params, every tensor
/// dense at offset 0, data seed 1. What `cudafuzz case example` prints.
pub fn example(m: &Manifest) -> Case {
    let vars = m.sample_vars();
    let mut case = Case::new(&m.path.display().to_string(), m.dtypes[0]);
    case.params = m.default_params();
    case.dims = vars.dims;
    case.scalars = vars.scalars;
    relations::repair(&mut case, m, 0);
    case
}
