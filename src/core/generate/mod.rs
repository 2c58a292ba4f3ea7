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

use crate::core::case::Case;
use crate::core::manifest::Manifest;
use crate::core::plan::Plan;

/// A small, valid case for the kernel of `m`: every dim at the low end of its range (relations
/// kept), scalars at their first choice, the first element type, default params, every tensor
/// dense at offset 0, values of the default class (`normal`) or, where the tensor does not
/// allow it (integer tensors: `uniform` over their range), its first allowed class; data seed 1.
/// What `cudafuzz case example` prints.
pub fn example(m: &Manifest) -> Case {
    let vars = m.sample_vars();
    let mut case = Case::new(&m.path.display().to_string(), m.dtypes[0]);
    case.params = m.default_params();
    case.dims = vars.dims;
    case.scalars = vars.scalars;
    relations::repair(&mut case, m, 0);
    let default = crate::core::case::TensorLayout::dense().values;
    for t in &m.tensors {
        if !t.values.is_empty() && !default.iter().all(|c| t.values.contains(c)) {
            case.layout_mut(&t.name).values = vec![t.values[0]];
        }
    }
    case
}

/// Lays tensor `t` of `case` out in its current order at offset 0, unbroadcast, with no padding
/// except on the innermost position of the order, where the extent is rounded up to a multiple
/// of `align` bytes and then `extra` elements are added. Every stride but the innermost is then a
/// multiple of `align` bytes when `extra` is a multiple of `align` bytes' worth of elements.
/// A tensor of rank below 2 has no row to pad (its one dimension is outermost) and only loses
/// its offset and broadcast; a case that does not plan is left as it is.
///
/// Shared by the sweep's input classes (`align = 16`) and contract inference's base case.
pub fn align_rows(case: &mut Case, m: &Manifest, t: &str, align: u64, extra: u64) {
    let Ok(plan) = Plan::new(case, m) else { return };
    let Some(tp) = plan.tensor(t) else { return };
    let per = (align / tp.elem_bytes.max(1) as u64).max(1);
    let rank = tp.rank();
    let layout = case.layout_mut(t);
    layout.offset_bytes = 0;
    layout.broadcast.clear();
    if rank < 2 {
        layout.pad.clear();
        return;
    }
    let order = layout.order_of(rank);
    let extent = tp.shape[order[rank - 1]];
    let mut pad = vec![0u64; rank];
    pad[rank - 1] = extent.div_ceil(per) * per - extent + extra;
    layout.pad = if pad.iter().all(|&p| p == 0) { Vec::new() } else { pad };
}
