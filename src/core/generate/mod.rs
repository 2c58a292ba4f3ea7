//! Case generation for one kernel: fuzzer bytes decoded into cases ([`decode_case`]) and
//! proptest strategies ([`strategy`]), both driven by the kernel's manifest.
//!
//! Both draw from the same choices: the manifest's dims (hints, range edges, relations solved
//! as each dim is drawn: [`relations`]), scalars, value classes and layouts, inside the declared
//! contract unless asked otherwise ([`DecodeContext::unconstrained`]). Generation sits above the
//! case model, the manifest and the plan, so none of those depends on it.

mod decode;
pub mod lengths;
pub mod relations;
pub mod strategy;

pub use decode::{
    decode_case, offsets_past_int32, orders, past_int32_tensors, past_int32_variant, reaches_past_int32, DecodeContext, PastInt32, OFFSETS_ALIGNED,
    OFFSETS_MISALIGNED, OFFSETS_ODD, PADS, PAST_INT32_ONE_IN,
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
    case.params = m.free_params();
    case.dims = vars.dims;
    case.lengths = vars.lengths;
    case.scalars = vars.scalars;
    relations::repair(&mut case, m, 0);
    fit_lengths(&mut case, m);
    allowed_values(&mut case, m);
    case
}

/// Gives each tensor that does not allow the default value classes (an integer tensor: only
/// `uniform`) its first allowed class, so a case built from defaults lies inside the contract.
pub fn allowed_values(case: &mut Case, m: &Manifest) {
    let default = crate::core::case::TensorLayout::dense().values;
    for t in &m.tensors {
        if !t.values.is_empty() && !default.iter().all(|c| t.values.contains(c)) {
            case.layout_mut(&t.name).values = vec![t.values[0]];
        }
    }
}

/// Gives every list of lengths as many entries as its count dim says: a list cut where the count
/// fell, extended with its sample length where it grew (after a repair or a shrink moved the
/// count); a list the case lacks is the sample one.
pub fn fit_lengths(case: &mut Case, m: &Manifest) {
    for l in &m.lengths {
        let count = case.dim(&l.count) as usize;
        case.lengths.entry(l.name.clone()).or_default().resize(count, l.sample_length());
    }
}

/// [`smaller_for_naming`] keeps each dim's residue modulo this many elements: 16 is a multiple
/// of every vector width in elements, so strides keep their alignment class and a dim that took
/// a kernel's vector path still takes it.
pub const NAMING_DIM: u64 = 16;

/// A smaller case of the same configuration for a sanitizer to name a misaligned fault on: each
/// dim lowered to the smallest value of its residue modulo [`NAMING_DIM`] (at least 2 where it
/// was, so its stride is still stepped; within its range and multiple; relations kept), with
/// the same params, element type, scalars, layouts (orders, padding, offsets) and values. A
/// misaligned access depends on the layout, not on the sizes, and a sanitizer's time grows with
/// the threads that fault: a full-size attention case took memcheck 4 to 5 s. `None` when
/// nothing shrinks, when the case reaches past 2³¹ elements (its size is its trigger), or when
/// the smaller case leaves the contract.
pub fn smaller_for_naming(case: &Case, m: &Manifest) -> Option<Case> {
    if reaches_past_int32(case, m) {
        return None;
    }
    let mut small = case.clone();
    for d in &m.dims {
        let v = case.dim(&d.name);
        let mut lowered = match v % NAMING_DIM {
            0 => NAMING_DIM,
            1 if v > 1 => NAMING_DIM + 1,
            r => r,
        };
        while lowered < d.range[0] {
            lowered += NAMING_DIM;
        }
        if lowered < v && lowered.is_multiple_of(d.multiple.max(1)) {
            small.dims.insert(d.name.clone(), lowered);
        }
    }
    relations::repair(&mut small, m, 0);
    let small = m.bind(small);
    let inside = crate::core::plan::admits(m, &small);
    (small != *case && inside && small.dims.iter().all(|(k, &v)| v <= case.dim(k))).then_some(small)
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

/// Cases [`check_satisfiable`] draws before it calls a contract impossible.
pub const SATISFIABILITY_SAMPLES: u64 = 256;

/// The most bytes one tensor of a kernel's smallest case may span: more than any GPU holds.
pub const MAX_SMALLEST_TENSOR_BYTES: u64 = 256 << 30;

/// Whether the kernel of `m` can be fuzzed at all: its smallest case's tensors fit a GPU, and
/// among [`SATISFIABILITY_SAMPLES`] cases drawn inside its contract (the example first) one plans,
/// has a value for every scalar and lies inside the contract. A contradictory `requires`, an
/// unsatisfiable `[contract]` or a scalar choice that never evaluates is a load error naming the
/// keys involved, not a campaign that plans no case.
pub fn check_satisfiable(m: &Manifest) -> Result<(), crate::core::manifest::ManifestError> {
    use crate::core::manifest::ManifestError;
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    let invalid = |field: &str, problem: String| ManifestError::Invalid { path: m.path.clone(), field: field.into(), problem };
    let smallest = example(m);
    if let Ok(plan) = Plan::new(&smallest, m) {
        if let Some(t) = plan.tensors.iter().find(|t| t.span_bytes > MAX_SMALLEST_TENSOR_BYTES) {
            return Err(invalid(
                &format!("tensors.{}.shape", t.name),
                format!("{} bytes in the kernel's smallest case, more than any GPU holds; lower the dims' ranges", t.span_bytes),
            ));
        }
    }
    let ctx = DecodeContext::new(m);
    let mut first_problem: Option<(String, String)> = None;
    for i in 0..=SATISFIABILITY_SAMPLES {
        let case = if i == 0 {
            smallest.clone()
        } else {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5a71_5f1a);
            rng.set_stream(i);
            let mut bytes = [0u8; 128];
            rng.fill_bytes(&mut bytes);
            match decode_case(&mut arbitrary::Unstructured::new(&bytes), &ctx) {
                Ok(c) => c,
                Err(_) => continue,
            }
        };
        if let Some((field, problem)) = failing_choice(m, &case) {
            return Err(invalid(&field, problem));
        }
        let problem = match m.scalars.iter().find(|s| !case.scalars.contains_key(&s.name)) {
            Some(s) => {
                Some((format!("scalars.{}", s.name), "no choice gives it a value (an expression that divides by zero or fails for every case?)".to_string()))
            }
            None => match Plan::new(&case, m) {
                Err(e) => Some(plan_problem(&e)),
                Ok(plan) => match crate::core::plan::check_contract(m, &case, &plan) {
                    crate::core::plan::ContractVerdict::Inside => None,
                    crate::core::plan::ContractVerdict::Outside { reasons } => Some(("contract".to_string(), reasons.join("; "))),
                },
            },
        };
        match problem {
            None => return Ok(()),
            Some(p) if first_problem.is_none() => first_problem = Some(p),
            Some(_) => {}
        }
    }
    let (field, why) = first_problem.unwrap_or_else(|| ("dims".into(), "no case could be drawn".into()));
    Err(invalid(
        &field,
        format!("none of {} cases drawn inside the contract is valid (the first: {why}); the manifest's requires, [contract] and scalar choices contradict each other", SATISFIABILITY_SAMPLES + 1),
    ))
}

/// The first scalar choice expression that gives no finite value of its type for `case`'s dims
/// (it divides by zero, or leaves the type): a case drawing it would get another value than the
/// one the manifest names, so it is a load error naming the choice.
fn failing_choice(m: &Manifest, case: &Case) -> Option<(String, String)> {
    let vars = relations::dim_vars(case, m);
    m.scalars.iter().find_map(|s| {
        s.choices.iter().enumerate().find_map(|(i, c)| {
            let crate::core::manifest::ScalarChoice::Expr(e) = c else { return None };
            m.choice_value(s, c, &vars).is_none().then(|| {
                let dims: Vec<String> = case.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
                (
                    format!("scalars.{}.choices[{i}]", s.name),
                    format!("`{e}` gives no finite {:?} value for {} (a division by zero?); guard it, e.g. with max(1, ...)", s.ty, dims.join(", ")),
                )
            })
        })
    })
}

/// The manifest key a case's planning error is about: a tensor's size or layout problem is its
/// shape's (the dims' ranges make it), a dim's is that dim's, a relation's is `requires`.
fn plan_problem(e: &crate::core::error::CaseError) -> (String, String) {
    let why = crate::core::error::chain(e);
    let crate::core::error::CaseError::Invalid { field, .. } = e else { return ("requires".into(), why) };
    let mut parts = field.split('.');
    let key = match (parts.next(), parts.next()) {
        (Some("tensors" | "layouts"), Some(t)) => format!("tensors.{t}.shape"),
        (Some("dims"), Some(d)) => format!("dims.{d}"),
        (Some("dims"), None) => "requires".into(),
        (Some(other), _) if !other.is_empty() && other != "requires" => other.to_string(),
        _ => "requires".into(),
    };
    (key, why)
}

#[cfg(test)]
mod naming_tests {
    use super::*;

    #[test]
    fn the_case_a_fault_is_named_on_keeps_its_layout_and_lowers_its_sizes() {
        let m = crate::testing::attention();
        let mut big = m.bind(crate::testing::example());
        big.layout_mut("q").offset_bytes = 8;
        big.layout_mut("k").pad = vec![0, 0, 3, 0];
        let small = smaller_for_naming(&big, &m).expect("seq_q 65 and seq_k 113 shrink");
        // Each keeps its residue modulo 16 (65 and 113: 1, kept at 17 so the rows still step).
        assert_eq!((small.dim("seq_q"), small.dim("seq_k"), small.dim("head_dim"), small.dim("heads_q")), (17, 17, 16, 2));
        assert!(small.dims.iter().all(|(k, &v)| v <= big.dim(k)));
        assert_eq!((small.layout("q"), small.layout("k")), (big.layout("q"), big.layout("k")), "same offsets and padding");
        assert_eq!((small.dtype, &small.params, &small.scalars, small.seed), (big.dtype, &big.params, &big.scalars, big.seed));
        assert!(crate::core::plan::admits(&m, &small));
        // Nothing to lower: no smaller case.
        assert_eq!(smaller_for_naming(&small, &m), None);
    }
}
