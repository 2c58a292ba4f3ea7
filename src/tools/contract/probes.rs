//! The probe cases of each family, each the base (or the widened base) with ONE property
//! changed. Which values are worth a run is decided here: offsets the element size allows,
//! pitches on each side of 16 bytes, orders that keep or move the innermost dimension, each
//! dim's edges, tiles and non-multiples, and so on.

use crate::core::case::{Dtype, Scalar};
use crate::core::generate::{orders, past_int32_tensors, past_int32_variant, PastInt32};
use crate::core::manifest::{DimSpec, Manifest, Role, ScalarType, TensorSpec};
use crate::core::plan::{Plan, VECTOR_ALIGN};

use super::base::{tile, with_dim};
use super::{Case, Family};

/// Base offsets probed: 2, 4 and 8 bytes break 16-byte vector loads, 16 keeps them.
const OFFSETS: [u32; 4] = [2, 4, 8, 16];
/// Row pitches probed, as their residue modulo 16 bytes (0: a padding that keeps it aligned).
const PITCH_RESIDUES: [u64; 4] = [2, 4, 8, 0];
/// Dim probes stop here: a contract's larger maximum is probed at this value only.
pub const MAX_PROBE_DIM: u64 = 16384;

/// One family and the cases that vary it (each becomes a probe).
pub type Variants = (Family, Vec<Case>);

/// `base` with `f` applied.
pub fn with(base: &Case, f: impl FnOnce(&mut Case)) -> Case {
    let mut c = base.clone();
    f(&mut c);
    c
}

/// The probes of one tensor whose layout a case chooses: offsets on `base`, the rest on `wide`
/// (where every dimension the tensor steps over is at least 2).
pub fn tensor_variants(m: &Manifest, t: &TensorSpec, base: &Case, wide: &Case) -> Vec<Variants> {
    let name = &t.name;
    let Ok(plan) = Plan::new(wide, m) else { return Vec::new() };
    let Some(tp) = plan.tensor(name) else { return Vec::new() };
    let rank = tp.rank();
    let elem = tp.elem_bytes;
    let mut out = vec![(
        Family::Offset(name.clone()),
        OFFSETS.iter().filter(|&&o| o % elem == 0).map(|&o| with(base, |c| c.layout_mut(name).offset_bytes = o)).collect(),
    )];
    if rank >= 2 {
        out.push((Family::Pitch(name.clone()), pitches(wide, name, tp)));
    }
    let order = tp.layout.order_of(rank);
    for pos in 1..rank.saturating_sub(1) {
        let family = Family::Padding { tensor: name.clone(), dim: order[pos], outer: order[pos - 1], label: t.shape[order[pos]].trim().to_string() };
        out.push((family, vec![with(wide, |c| pad_position(c, name, rank, pos, 1))]));
    }
    if rank >= 2 {
        out.extend(order_variants(wide, name, rank));
    }
    // Only inputs can be broadcast; a dimension of extent 1 broadcasts to nothing.
    if t.role == Role::Input && rank >= 2 {
        let dims = (0..rank - 1).filter(|&d| tp.shape[d] > 1);
        out.push((Family::Broadcast(name.clone()), dims.map(|d| with(wide, |c| c.layout_mut(name).broadcast = vec![d])).collect()));
    }
    let pushed: Vec<Case> = PastInt32::ALL
        .iter()
        .filter(|&&form| past_int32_tensors(m, false, form).contains(name))
        .filter_map(|&form| past_int32_variant(base, m, name, form))
        .collect();
    if !pushed.is_empty() {
        out.push((Family::ElementOffset(name.clone()), pushed));
    }
    out
}

/// Orders of a tensor of rank 2 or more: those that move the innermost logical dimension (a
/// non-unit innermost stride), and the other permutations that keep it innermost.
fn order_variants(wide: &Case, name: &str, rank: usize) -> Vec<Variants> {
    let with_order = |o: &Vec<usize>| with(wide, |c| c.layout_mut(name).order = o.clone());
    let moved: Vec<Case> = orders(rank, false).iter().filter(|o| o[rank - 1] != rank - 1).map(with_order).collect();
    let kept: Vec<Case> = orders(rank, true).iter().filter(|o| o.iter().enumerate().any(|(i, &d)| i != d)).map(with_order).collect();
    [(Family::InnerStride(name.to_string()), moved), (Family::Order(name.to_string()), kept)].into_iter().filter(|(_, cases)| !cases.is_empty()).collect()
}

/// Row paddings that leave the pitch 2, 4 or 8 bytes past a multiple of 16, and the smallest one
/// that keeps it a multiple (the residues the element size cannot reach are left out).
fn pitches(wide: &Case, name: &str, tp: &crate::core::plan::TensorPlan) -> Vec<Case> {
    let rank = tp.rank();
    let layout = wide.layout(name);
    let order = layout.order_of(rank);
    let pad = layout.pad_at(rank - 1);
    let extent = tp.shape[order[rank - 1]] + pad;
    let elem = tp.elem_bytes as u64;
    PITCH_RESIDUES
        .iter()
        .filter_map(|&residue| (1..=VECTOR_ALIGN).find(|e| ((extent + e) * elem) % VECTOR_ALIGN == residue))
        .map(|e| with(wide, |c| pad_position(c, name, rank, rank - 1, pad + e)))
        .collect()
}

/// Sets the padding of order position `pos` of tensor `name` to `n` elements.
fn pad_position(c: &mut Case, name: &str, rank: usize, pos: usize, n: u64) {
    let l = c.layout_mut(name);
    let mut pad: Vec<u64> = (0..rank).map(|i| l.pad_at(i)).collect();
    pad[pos] = n;
    l.pad = pad;
}

/// The probes of dim `i`: each value of [`dim_values`] around its value in `base`, set on
/// `wide` (on `base` where the widened dims before it make the value ill-formed: heads_q = 3
/// with heads_kv = 2 breaks `heads_q % heads_kv == 0`), the dims after it following their
/// relations.
pub fn dim_variants(m: &Manifest, i: usize, base: &Case, wide: &Case) -> Variants {
    let d = &m.dims[i];
    let values = dim_values(d, base.dim(&d.name), tile(m, base, d));
    let case = |v: u64| Some(with_dim(wide, m, i, v)).filter(|c| Plan::new(c, m).is_ok()).unwrap_or_else(|| with_dim(base, m, i, v));
    (Family::Dim(d.name.clone()), values.into_iter().map(case).collect())
}

/// Values worth a run for a dim at `b` in the base: 1 and 2; the range's start, one below and one
/// above it; one below `b` and `b` plus 1, 2, 4 and 8 (non-multiples of 2, 4, 8 and the next
/// multiple of 8 for an aligned `b`); a tile ± 1 and two tiles + 1; the range's maximum and one
/// past it (when at most [`MAX_PROBE_DIM`], else that value). Never 0, `b`, or past the dim's
/// validity maximum.
pub fn dim_values(d: &DimSpec, b: u64, tile: Option<u64>) -> Vec<u64> {
    let [lo, hi] = d.range;
    let mut v = vec![1, 2, lo.saturating_sub(1), lo, lo + 1, b.saturating_sub(1), b + 1, b + 2, b + 4, b + 8];
    if let Some(t) = tile {
        v.extend([t.saturating_sub(1), t + 1, 2 * t + 1]);
    }
    if hi <= MAX_PROBE_DIM {
        v.extend([hi, hi + 1]);
    } else {
        v.push(MAX_PROBE_DIM);
    }
    v.retain(|&x| x >= 1 && x <= d.max && x != b);
    v.sort_unstable();
    v.dedup();
    v
}

/// The probes of each list of lengths, on a batch of three sequences (the count dim set to 3,
/// the dims after it following their relations): an empty sequence (the range's low end)
/// between two others, one at the range's maximum (at most [`MAX_PROBE_DIM`]) with two of
/// length 1, one past it, all equal, and each hint ± 1 beside a sequence of 1.
pub fn lengths_variants(m: &Manifest, wide: &Case) -> Vec<Variants> {
    let mut out = Vec::new();
    for l in &m.lengths {
        let Some(i) = m.dims.iter().position(|d| d.name == l.count) else { continue };
        let [lo, hi] = l.range;
        let (top, mid) = (hi.min(MAX_PROBE_DIM), l.cap.clamp(1, hi));
        let mut lists = vec![vec![mid, lo, mid], vec![top, 1, 1], vec![mid, mid, mid], vec![1, 1, 1]];
        if hi < MAX_PROBE_DIM {
            lists.push(vec![hi + 1, 1, 1]);
        }
        for &h in &l.hints {
            lists.extend([h.saturating_sub(1), h, h + 1].map(|v| vec![1, v, 1]));
        }
        lists.retain(|list| list.iter().any(|&v| v > 0));
        let cases = lists
            .into_iter()
            .map(|list| {
                let mut c = wide.clone();
                c.lengths.insert(l.name.clone(), list);
                with_dim(&c, m, i, 3)
            })
            .collect();
        out.push((Family::Lengths(l.name.clone()), cases));
    }
    out
}

/// The other element types: every floating type a case may run at and every one the manifest
/// lists.
pub fn dtype_variants(m: &Manifest, base: &Case) -> Variants {
    let mut all: Vec<Dtype> = Dtype::ALL.to_vec();
    all.extend(m.dtypes.iter().copied());
    all.sort();
    all.dedup();
    (Family::Dtype, all.into_iter().filter(|&d| d != base.dtype).map(|d| with(base, |c| c.dtype = d)).collect())
}

/// Each flag (bool scalar) flipped.
pub fn flag_variants(m: &Manifest, base: &Case) -> Vec<Variants> {
    m.scalars
        .iter()
        .filter(|s| s.ty == ScalarType::Bool)
        .map(|s| {
            let now = base.scalar(&s.name).is_some_and(|v| v.is_true());
            (
                Family::Flag(s.name.clone()),
                vec![with(base, |c| {
                    c.scalars.insert(s.name.clone(), Scalar::Bool(!now));
                })],
            )
        })
        .collect()
}

/// Each tunable parameter at each of its other values.
pub fn param_variants(m: &Manifest, base: &Case) -> Vec<Variants> {
    m.params
        .iter()
        .map(|(name, values)| {
            let cases = values.iter().map(|&v| {
                with(base, |c| {
                    c.params.insert(name.clone(), v);
                })
            });
            (Family::Param(name.clone()), cases.collect())
        })
        .collect()
}
