//! The base case every probe starts from, and the case edits probes and replicas share: setting
//! a dim while the dims drawn after it follow their relations, and growing dims.
//!
//! The base is the smallest known-passing case inside the declared contract: each dim at its
//! smallest allowed value (range, multiple, `requires` and contract relations kept), one tile
//! long where the dim names a tile parameter as a hint, preferring values that give 16-byte rows
//! where the dim is a tensor's innermost; every tensor dense at offset 0 in its own order (rows
//! padded to 16 bytes only where the dims cannot give them and the layout kind allows padding);
//! scalars at their defaults; the first element type and default params; data seed 1.

use crate::core::case::{Case, Scalar};
use crate::core::generate::align_rows;
use crate::core::generate::relations::{attach, int_of, Form};
use crate::core::manifest::expr::{variables_in, Env, Vars};
use crate::core::manifest::{DimSpec, Hint, LayoutFreedom, Manifest};
use crate::core::plan::{admits, check_contract, ContractVerdict, Plan, VECTOR_ALIGN};

use super::InferError;

/// Largest logical footprint (Σ elements × element size over every tensor) of a probe case: a
/// value whose case would hold more is not probed (a range's maximum of 2²⁰ heads, say).
pub const MAX_PROBE_BYTES: u64 = 256 << 20;
/// Values tried per dim when searching for one that satisfies its relations.
const SEARCH: u64 = 4096;

/// The smallest case inside the declared contract of `m` (see the module docs).
pub fn base_case(m: &Manifest) -> Result<Case, InferError> {
    // Data seed 1, guarded placement, every tensor dense at offset 0: a new case's defaults.
    let mut case = Case::new(&m.path.display().to_string(), m.dtypes[0]);
    case.params = m.default_params();
    for i in 0..m.dims.len() {
        let v = base_dim(m, &case, i);
        case.dims.insert(m.dims[i].name.clone(), v);
        // Lists follow their count at once, so later dims' relations may name them.
        crate::core::generate::fit_lengths(&mut case, m);
    }
    case.scalars = defaults(&case, m);
    crate::core::generate::allowed_values(&mut case, m);
    align_base_rows(&mut case, m);
    let plan = Plan::new(&case, m).map_err(|e| InferError::NoBase { kernel: m.name.clone(), reasons: e.to_string() })?;
    match check_contract(m, &case, &plan) {
        ContractVerdict::Inside => Ok(case),
        ContractVerdict::Outside { reasons } => Err(InferError::NoBase { kernel: m.name.clone(), reasons: reasons.join("; ") }),
    }
}

/// The value of dim `i` in the base, the dims before it already set: the smallest value from one
/// tile (or the range's start) up that is on the multiple and keeps the relations naming only
/// dims set so far; among those, the first that gives 16-byte rows where the dim is innermost.
fn base_dim(m: &Manifest, case: &Case, i: usize) -> u64 {
    let d = &m.dims[i];
    let step = d.multiple.max(1);
    let [lo, hi] = d.range;
    let first = lo.div_ceil(step) * step;
    let start = tile(m, case, d).filter(|&t| t >= first && t <= hi).map_or(first, |t| t.div_ceil(step) * step);
    let candidates = || (0..SEARCH).map(move |k| start + k * step).take_while(move |&v| v <= hi);
    let keeps = |v: u64| relations_hold(m, case, i, v);
    candidates()
        .find(|&v| keeps(v) && rows_aligned(m, case, &d.name, v))
        .or_else(|| candidates().find(|&v| keeps(v)))
        .or_else(|| (0..SEARCH).map(|k| first + k * step).take_while(|&v| v < start).find(|&v| keeps(v)))
        .unwrap_or(start)
}

/// One tile of dim `d`: the largest value the case gives the params (or defines) its hints
/// name; `None` when it names none.
pub fn tile(m: &Manifest, case: &Case, d: &DimSpec) -> Option<u64> {
    d.hints
        .iter()
        .filter_map(|h| match h {
            Hint::Param(p) => case.params.get(p).or_else(|| m.defines.get(p)).and_then(|&v| u64::try_from(v).ok()),
            Hint::Value(_) => None,
        })
        .filter(|&t| t >= 1)
        .max()
}

/// Whether dim `i` at `v` keeps every `requires` and contract relation that names it and no
/// dim declared after it.
fn relations_hold(m: &Manifest, case: &Case, i: usize, v: u64) -> bool {
    let later: Vec<&str> = m.dims[i + 1..].iter().map(|d| d.name.as_str()).collect();
    let name = &m.dims[i].name;
    let mut vars = vars_of(case, m);
    vars.dims.insert(name.clone(), v);
    let env = Env::new(&vars);
    m.requires.iter().chain(&m.contract.relations).all(|rel| {
        let names = variables_in(rel);
        !names.contains(name) || names.iter().any(|n| later.contains(&n.as_str())) || env.boolean(rel).unwrap_or(true)
    })
}

/// Whether dim `name` at `v` makes the rows of every drawn tensor of rank 2 or more it is the
/// innermost dim of a multiple of 16 bytes.
fn rows_aligned(m: &Manifest, case: &Case, name: &str, v: u64) -> bool {
    m.tensors
        .iter()
        .filter(|t| t.layout_is_drawn() && t.rank() >= 2 && t.dim_name(t.rank() - 1) == Some(name))
        .all(|t| (v * t.dtype.resolve(case.dtype).size() as u64).is_multiple_of(VECTOR_ALIGN))
}

/// Pads the rows of each drawn tensor whose row pitch is not a multiple of 16 bytes (or of its
/// contract's alignment, when larger) up to one, where its layout kind allows padding.
fn align_base_rows(case: &mut Case, m: &Manifest) {
    let Ok(plan) = Plan::new(case, m) else { return };
    for (t, tp) in m.tensors.iter().zip(&plan.tensors) {
        let align = VECTOR_ALIGN.max(t.align as u64);
        let pads = matches!(t.layout, LayoutFreedom::Inner | LayoutFreedom::Strided);
        if pads && tp.rank() >= 2 && !super::family::pitch_bytes(tp).is_multiple_of(align) {
            align_rows(case, m, &t.name, align, 0);
        }
    }
}

/// The values expressions see for `case`'s dims and params.
fn vars_of(case: &Case, m: &Manifest) -> Vars {
    let mut params = m.default_params();
    params.extend(case.params.clone());
    Vars { dims: case.dims.clone(), lengths: case.lengths.clone(), params, defines: m.defines.clone(), elem_bytes: case.dtype.size(), ..Vars::default() }
}

/// Every scalar's default for `case`'s dims (a default may be an expression: `1 / sqrt(head_dim)`).
fn defaults(case: &Case, m: &Manifest) -> std::collections::BTreeMap<String, Scalar> {
    let vars = vars_of(case, m);
    m.scalars.iter().map(|s| (s.name.clone(), m.default_scalar(s, &vars))).collect()
}

/// Applies `edit` to the dims of `case`; scalars that were at their default stay at it (`scale =
/// 1 / sqrt(head_dim)` follows head_dim), a scalar a probe set keeps its value.
pub fn edit_dims(case: &Case, m: &Manifest, edit: impl FnOnce(&mut Case)) -> Case {
    let before = defaults(case, m);
    let mut c = case.clone();
    edit(&mut c);
    // A list of lengths follows its count dim (cut or extended with its sample length).
    crate::core::generate::fit_lengths(&mut c, m);
    let after = defaults(&c, m);
    for (name, v) in c.scalars.iter_mut() {
        if before.get(name) == Some(v) {
            if let Some(&now) = after.get(name) {
                *v = now;
            }
        }
    }
    c
}

/// `case` with dim `i` set to `v` and every dim declared after it moved, where its relations
/// (`requires` and contract) no longer hold, to the nearest value that keeps them.
pub fn with_dim(case: &Case, m: &Manifest, i: usize, v: u64) -> Case {
    edit_dims(case, m, |c| {
        c.dims.insert(m.dims[i].name.clone(), v);
        follow(c, m, i + 1);
    })
}

/// Brings dims `from..` back into the relations attached to them (each relation belongs to the
/// last declared dim it names): an equality assigns, a multiple rounds up, anything else takes
/// the nearest value (up first) on the dim's multiple that holds. A dim no value satisfies is
/// left as it is; the case then does not plan or lies outside, and the caller sees that.
fn follow(c: &mut Case, m: &Manifest, from: usize) {
    let order: Vec<String> = m.dims.iter().map(|d| d.name.clone()).collect();
    let mut rels = attach(&crate::core::generate::relations::dim_parts(&m.requires, m), &order, true);
    rels.extend(attach(&crate::core::generate::relations::dim_parts(&m.contract.relations, m), &order, false));
    for d in &m.dims[from.min(m.dims.len())..] {
        let mine: Vec<_> = rels.iter().filter(|r| r.dim == d.name).collect();
        let holds = |c: &Case, v: u64| {
            let mut vars = vars_of(c, m);
            vars.dims.insert(d.name.clone(), v);
            let env = Env::new(&vars);
            mine.iter().all(|r| env.boolean(&r.text).unwrap_or(true))
        };
        let now = c.dim(&d.name);
        if holds(c, now) {
            continue;
        }
        // An equality or a multiple is solved directly (a multiple of 16384 heads is too far to
        // search for); anything else is searched for near the current value, up first.
        let env = Env::new(&vars_of(c, m));
        let solved = mine.iter().filter_map(|r| match &r.form {
            Form::Equal(e) => int_of(&env, e).and_then(|v| u64::try_from(v).ok()),
            Form::MultipleOf(e) => int_of(&env, e).and_then(|v| u64::try_from(v).ok()).filter(|&v| v >= 1).map(|v| now.next_multiple_of(v)),
            _ => None,
        });
        let step = d.multiple.max(1);
        let near = (1..SEARCH).flat_map(|k| [now.checked_add(k * step), now.checked_sub(k * step)]).flatten();
        let valid = |v: &u64| *v >= 1 && *v <= d.max && holds(c, *v);
        if let Some(v) = solved.chain(near).find(valid) {
            c.dims.insert(d.name.clone(), v);
        }
    }
}

/// The dims that some drawn tensor steps over: named by a non-innermost shape entry of a tensor
/// whose layout a case chooses. A stride only matters when its dim is at least 2.
pub fn stepped_dims(m: &Manifest) -> Vec<String> {
    let named = |d: &DimSpec| m.tensors.iter().filter(|t| t.layout_is_drawn()).any(|t| (0..t.rank().saturating_sub(1)).any(|i| t.dim_name(i) == Some(&d.name)));
    m.dims.iter().filter(|d| named(d)).map(|d| d.name.clone()).collect()
}

/// Logical bytes a case holds (Σ elements × element size); `u64::MAX` when it does not plan.
pub fn footprint(case: &Case, m: &Manifest) -> u64 {
    Plan::new(case, m).map_or(u64::MAX, |p| p.tensors.iter().map(|t| t.numel.saturating_mul(t.elem_bytes as u64)).fold(0, u64::saturating_add))
}

/// Whether `grown` can stand in for `case`: it plans, is on the same side of the contract, and
/// stays within [`MAX_PROBE_BYTES`].
fn acceptable(grown: &Case, case: &Case, m: &Manifest) -> bool {
    Plan::new(grown, m).is_ok() && admits(m, grown) == admits(m, case) && footprint(grown, m) <= MAX_PROBE_BYTES
}

/// `case` with `dims` set by `f` all at once, if acceptable; else each on its own in order,
/// keeping those that are.
fn grow(case: &Case, m: &Manifest, dims: &[String], f: impl Fn(u64) -> u64) -> Case {
    let set = |c: &Case, names: &[String]| {
        edit_dims(c, m, |n| {
            names.iter().for_each(|d| {
                n.dims.insert(d.clone(), f(n.dim(d)));
            })
        })
    };
    let all = set(case, dims);
    if acceptable(&all, case, m) {
        return all;
    }
    let mut out = case.clone();
    for d in dims {
        let one = set(&out, std::slice::from_ref(d));
        if acceptable(&one, &out, m) {
            out = one;
        }
    }
    out
}

/// The base with every stepped dim of 1 at 2 (all at once where that keeps the case valid and
/// inside the contract, else one by one): the starting point of every probe but the offsets,
/// since a stride, a row length or a flag only shows when a dimension is stepped over.
pub fn widened(base: &Case, m: &Manifest) -> Case {
    let ones: Vec<String> = stepped_dims(m).into_iter().filter(|d| base.dim(d) == 1).collect();
    grow(base, m, &ones, |_| 2)
}

/// A replica's larger outer dims: every stepped dim that no tile hint ties (growing those would
/// change the tile count, not the outer extent) and `pinned` does not hold, doubled.
pub fn doubled(case: &Case, m: &Manifest, pinned: &[String]) -> Case {
    let dims: Vec<String> =
        stepped_dims(m).into_iter().filter(|d| !pinned.contains(d) && m.dim(d).is_some_and(|s| !s.hints.iter().any(|h| matches!(h, Hint::Param(_))))).collect();
    grow(case, m, &dims, |v| v.saturating_mul(2))
}
