//! Contract inference: which preconditions does a kernel really need?
//!
//! A manifest's `[contract]` is what the kernel's author believes. [`plan_probes`] checks that
//! belief from outside: it starts from a known-passing base case (the smallest case inside the
//! declared contract: batch = heads = 1, both sequences one tile long, the smallest allowed
//! head_dim whose rows are 16-byte aligned, dense BHSD at offset 0) and builds a [`ProbePlan`] of
//! [`Probe`]s, each changing ONE property of the base: a tensor's base offset (2, 4, 8, 16
//! bytes), its row pitch (padding that leaves it 2, 4 or 8 bytes past a multiple of 16, and a
//! padding that keeps it aligned), the padding of an outer extent, a non-unit `stride_d`, a
//! permuted dimension order, head_dim (the range's edges, non-multiples of 8, past the maximum),
//! seq_q and seq_k (1, a tile ± 1, the maximum and one more), the dtype, causal masking, GQA
//! ratios and each tunable parameter. Every probe has a few replicas (other data seeds, batch
//! and heads 2) so that a flaky outcome shows.
//!
//! The CLI runs the probes through the engine; [`summarise`] then turns the outcomes into
//! [`Precondition`]s, one sentence per property that failed ("q, k, v, o base must be 16-byte
//! aligned"), each marked declared (the contract already excludes every failing value) or not,
//! with a minimal failing case to save as a seed. Everything here is pure host code.

mod summary;

pub use summary::{numeric_rule, render_plan, render_preconditions, render_table, summarise, Example, Inference, NumRule, Precondition, ProbeRow};

use std::fmt;

use serde::Serialize;
use thiserror::Error;

use crate::generate::offsets_past_int32;
use crate::case::{Case, DataSpec, Dim, Dtype, Layouts, Placement, TensorId, ValueDist, MAX_DIM, MAX_HEAD_DIM, MAX_PAD};
use crate::manifest::Manifest;
use crate::plan::{ContractVerdict, Plan};

/// Replicas per probe when the caller does not say.
pub const DEFAULT_CASES_PER_PROBE: usize = 3;
/// Sequence-length probes stop here: a contract's larger maximum is probed at this length only.
pub const MAX_PROBE_SEQ: u32 = 16384;
/// Orders that keep d innermost but permute b, h and s: bshd, hbsd, sbhd.
const PERMUTED: [[Dim; 4]; 3] = [[Dim::B, Dim::S, Dim::H, Dim::D], [Dim::H, Dim::B, Dim::S, Dim::D], [Dim::S, Dim::B, Dim::H, Dim::D]];
/// Orders with d not innermost (`stride_d != 1`): bhds, dbhs.
const D_OUTER: [[Dim; 4]; 2] = [[Dim::B, Dim::H, Dim::D, Dim::S], [Dim::D, Dim::B, Dim::H, Dim::S]];
/// Tile size assumed when the manifest names none (`BLOCK_N`, `BLOCK_M`).
pub const DEFAULT_TILE: u32 = 64;

/// Why no probe plan could be made.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum InferError {
    /// The smallest case the planner builds lies outside the declared contract, so there is no
    /// known-good point to vary one property from.
    #[error("{kernel}: no base case inside the declared contract ({reasons}); widen the contract or check its ranges")]
    NoBase {
        /// The kernel's name.
        kernel: String,
        /// The contract's reasons, joined.
        reasons: String,
    },
}

/// The property a probe family varies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// A tensor's base byte offset.
    Offset(TensorId),
    /// A tensor's row pitch (the stride just outside d, `stride_s` in BHSD), in bytes.
    Pitch(TensorId),
    /// Padding of one outer extent of a tensor (`S` pads `stride_h`, `H` pads `stride_b`).
    Padding(TensorId, Dim),
    /// A dimension order with d not innermost (`stride_d != 1`).
    InnerStride(TensorId),
    /// Element offsets of a tensor past 2³¹ (its stride_b pushed there, batch 2): 32-bit
    /// index arithmetic.
    ElementOffset(TensorId),
    /// A permuted dimension order that keeps d innermost.
    Order(TensorId),
    /// head_dim.
    HeadDim,
    /// seq_q.
    SeqQ,
    /// seq_k.
    SeqK,
    /// The element type.
    Dtype,
    /// Causal masking (also with seq_q < seq_k).
    Causal,
    /// The GQA ratio heads_q / heads_kv, other than 1.
    Gqa,
    /// A tunable parameter's non-default value.
    Param(String),
}

/// What a probe set its property to, measured on its case.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(untagged)]
pub enum Value {
    /// A number: bytes, elements, a length, a head ratio or a parameter value.
    Num(i64),
    /// A name: a dtype, an order, `causal`.
    Name(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Num(n) => write!(f, "{n}"),
            Value::Name(s) => f.write_str(s),
        }
    }
}

impl Family {
    /// The tensor the family is about, if any.
    pub fn tensor(&self) -> Option<TensorId> {
        match self {
            Family::Offset(t) | Family::Pitch(t) | Family::Padding(t, _) | Family::InnerStride(t) | Family::Order(t) | Family::ElementOffset(t) => Some(*t),
            _ => None,
        }
    }

    /// The family with its tensor left out: families of one kind group across tensors.
    pub fn kind(&self) -> String {
        match self {
            Family::Offset(_) => "base offset".into(),
            Family::Pitch(_) => "row pitch".into(),
            Family::Padding(_, d) => format!("padding of the {} extent", d.letter()),
            Family::InnerStride(_) => "stride_d".into(),
            Family::Order(_) => "dimension order".into(),
            Family::ElementOffset(_) => "largest element offset".into(),
            other => other.to_string(),
        }
    }

    /// The probed property of `case`.
    pub fn measure(&self, case: &Case) -> Value {
        let plan = Plan::new(case);
        match self {
            Family::Offset(t) => Value::Num(case.layouts.get(*t).offset_bytes as i64),
            Family::Pitch(t) => Value::Num(pitch_bytes(case, &plan, *t) as i64),
            Family::Padding(t, d) => {
                let l = case.layouts.get(*t);
                let pos = l.order.iter().position(|x| x == d).unwrap_or(0);
                Value::Num(l.pad[pos] as i64)
            }
            Family::InnerStride(t) | Family::Order(t) => Value::Name(case.layouts.get(*t).order_name()),
            // Past 2³¹ or not: the exact offset moves with the replicas' heads.
            Family::ElementOffset(t) => Value::Name(
                if plan.tensor(*t).reaches_past_int32() { "≥ 2^31" } else { "< 2^31" }.into(),
            ),
            Family::HeadDim => Value::Num(case.head_dim as i64),
            Family::SeqQ => Value::Num(case.seq_q as i64),
            Family::SeqK => Value::Num(case.seq_k as i64),
            Family::Dtype => Value::Name(case.dtype.name().into()),
            Family::Causal => Value::Name(causal_name(case)),
            Family::Gqa => Value::Num((case.heads_q / case.heads_kv.max(1)) as i64),
            Family::Param(name) => Value::Num(case.params.get(name).copied().unwrap_or_default()),
        }
    }

    /// A value as the table shows it: `8 B`, `+1`, `bshd`, `63`.
    pub fn describe(&self, v: &Value) -> String {
        match (self, v) {
            (Family::Offset(_) | Family::Pitch(_), Value::Num(n)) => format!("{n} B"),
            (Family::Padding(..), Value::Num(n)) => format!("+{n}"),
            (Family::Gqa, Value::Num(n)) => format!("{n}:1"),
            _ => v.to_string(),
        }
    }

    /// Values in a sentence: `offset 2, 4, 8 bytes`, `head_dim 63, 65`, `order bshd`.
    pub fn phrase(&self, values: &[Value]) -> String {
        let list = values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
        match self {
            Family::Offset(_) => format!("offset {list} bytes"),
            Family::Pitch(_) => format!("row pitch {list} bytes"),
            Family::Padding(_, d) => format!("{list} extra elements of the {} extent", d.letter()),
            Family::InnerStride(_) | Family::Order(_) => format!("order {list}"),
            Family::Gqa => format!("heads_q:heads_kv = {}", values.iter().map(|v| format!("{v}:1")).collect::<Vec<_>>().join(", ")),
            Family::Param(name) => format!("{name} = {list}"),
            other => format!("{other} {list}"),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Family::Offset(t) => write!(f, "{t} base offset"),
            Family::Pitch(t) => write!(f, "{t} row pitch (stride_s)"),
            Family::Padding(t, d) => write!(f, "{t} stride_{} ({} padded)", outer_letter(*d), d.letter()),
            Family::InnerStride(t) => write!(f, "{t} stride_d"),
            Family::Order(t) => write!(f, "{t} order"),
            Family::ElementOffset(t) => write!(f, "{t} largest element offset"),
            Family::HeadDim => f.write_str("head_dim"),
            Family::SeqQ => f.write_str("seq_q"),
            Family::SeqK => f.write_str("seq_k"),
            Family::Dtype => f.write_str("dtype"),
            Family::Causal => f.write_str("causal"),
            Family::Gqa => f.write_str("heads_q:heads_kv"),
            Family::Param(name) => f.write_str(name),
        }
    }
}

/// The stride a padded extent changes, in BHSD: padding `S` changes `stride_h`, `H` changes
/// `stride_b`.
fn outer_letter(d: Dim) -> char {
    match d {
        Dim::S => 'h',
        Dim::H => 'b',
        Dim::D => 's',
        Dim::B => 'b',
    }
}

fn causal_name(case: &Case) -> String {
    match (case.causal, case.seq_q == case.seq_k) {
        (false, _) => "non-causal".into(),
        (true, true) => "causal".into(),
        (true, false) => "causal with seq_q < seq_k".into(),
    }
}

/// The row pitch of `t` in bytes: the stride of the dimension just outside d.
fn pitch_bytes(case: &Case, plan: &Plan, t: TensorId) -> u64 {
    let l = case.layouts.get(t);
    let pos = l.order.iter().position(|&d| d == Dim::D).unwrap_or(3);
    let outer = if pos == 0 { Dim::D } else { l.order[pos - 1] };
    let tp = plan.tensor(t);
    tp.stride(outer) * tp.elem_bytes as u64
}

/// One property value to try: its replicas and whether the declared contract accepts them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Probe {
    /// The property varied.
    pub family: Family,
    /// The value it was set to (measured on the first replica).
    pub value: Value,
    /// Whether every replica lies inside the declared contract.
    pub declared_inside: bool,
    /// The replicas: the base with this one property changed, then other data seeds and a
    /// batch and heads of 2.
    pub cases: Vec<Case>,
}

/// Every probe of one kernel.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbePlan {
    /// The kernel's name.
    pub kernel: String,
    /// The base case every probe starts from.
    pub base: Case,
    /// Replicas of the base, run first: if they fail, nothing can be inferred.
    pub base_cases: Vec<Case>,
    /// The probes, family by family.
    pub probes: Vec<Probe>,
}

impl ProbePlan {
    /// Cases the plan runs, base replicas included.
    pub fn total_cases(&self) -> usize {
        self.base_cases.len() + self.probes.iter().map(|p| p.cases.len()).sum::<usize>()
    }

    /// The families, in plan order, each once.
    pub fn families(&self) -> Vec<&Family> {
        let mut out: Vec<&Family> = Vec::new();
        for p in &self.probes {
            if !out.contains(&&p.family) {
                out.push(&p.family);
            }
        }
        out
    }
}

/// Plans the probes of `manifest`'s kernel, `cases_per_probe` replicas each (at least 1).
pub fn plan_probes(manifest: &Manifest, cases_per_probe: usize) -> Result<ProbePlan, InferError> {
    let base = base_case(manifest)?;
    let n = cases_per_probe.max(1);
    let tile = tile(manifest);
    let wide = widened(&base);
    let mut probes = Vec::new();
    let mut add = |family: Family, from: &Case, variants: Vec<Case>| {
        for case in variants {
            if &case == from || case.validate().is_err() {
                continue;
            }
            let cases = replicas(&case, n);
            let declared_inside = cases.iter().all(|c| manifest.contract.admits(c));
            probes.push(Probe { value: family.measure(&case), family: family.clone(), declared_inside, cases });
        }
    };
    for t in TensorId::ALL {
        add(Family::Offset(t), &base, offsets(&base, t));
    }
    for t in TensorId::ALL {
        add(Family::Pitch(t), &base, pitches(&base, t));
    }
    for t in TensorId::ALL {
        for d in [Dim::S, Dim::H] {
            add(Family::Padding(t, d), &wide, vec![with(&wide, |c| pad_extent(c, t, d, 1))]);
        }
    }
    for t in TensorId::ALL {
        add(Family::InnerStride(t), &wide, D_OUTER.into_iter().map(|o| with(&wide, |c| c.layouts.get_mut(t).order = o)).collect());
    }
    for t in TensorId::ALL {
        add(Family::Order(t), &wide, PERMUTED.into_iter().map(|o| with(&wide, |c| c.layouts.get_mut(t).order = o)).collect());
    }
    if manifest.contract.layouts != crate::plan::LayoutSupport::Contiguous {
        for t in TensorId::ALL {
            add(Family::ElementOffset(t), &base, vec![with(&base, |c| offsets_past_int32(c, t))]);
        }
    }
    add(Family::HeadDim, &base, head_dims(manifest, &base));
    add(Family::SeqQ, &base, seq_values(manifest.contract.seq_q, tile, base.seq_q).into_iter().map(|s| with(&base, |c| c.seq_q = s)).collect());
    add(Family::SeqK, &base, seq_values(manifest.contract.seq_k, tile, base.seq_k).into_iter().map(|s| with(&base, |c| c.seq_k = s)).collect());
    add(Family::Dtype, &base, Dtype::ALL.into_iter().map(|d| with(&base, |c| c.dtype = d)).collect());
    add(Family::Causal, &base, causal_variants(&base));
    add(Family::Gqa, &base, [(2, 1), (3, 1), (4, 1), (8, 1)].into_iter().map(|(q, kv)| with(&base, |c| (c.heads_q, c.heads_kv) = (q, kv))).collect());
    for (name, values) in &manifest.params {
        add(Family::Param(name.clone()), &base, values.iter().map(|&v| with(&base, |c| {
            c.params.insert(name.clone(), v);
        })).collect());
    }
    Ok(ProbePlan { kernel: manifest.name.clone(), base_cases: replicas(&base, n), base, probes })
}

fn with(base: &Case, f: impl FnOnce(&mut Case)) -> Case {
    let mut c = base.clone();
    f(&mut c);
    c
}

/// The smallest case inside the declared contract with 16-byte-aligned rows where possible.
pub fn base_case(manifest: &Manifest) -> Result<Case, InferError> {
    let c = &manifest.contract;
    let dtype = c.dtypes.first().copied().unwrap_or(Dtype::F16);
    let tile = tile(manifest);
    let head_dim = base_head_dim(c.head_dim, c.head_dim_multiple, dtype);
    let mut case = manifest.bind(Case {
        kernel: manifest.path.display().to_string(),
        dtype,
        batch: 1,
        heads_q: 1,
        heads_kv: 1,
        seq_q: tile.clamp(c.seq_q[0], c.seq_q[1]),
        seq_k: tile.clamp(c.seq_k[0], c.seq_k[1]),
        head_dim,
        causal: false,
        scale: 1.0 / (head_dim as f32).sqrt(),
        data: DataSpec { seed: 1, dist: ValueDist::Normal },
        layouts: Layouts::contiguous(),
        placement: Placement::Guarded,
        ..Case::example("")
    });
    case.params = manifest.default_params();
    let align = c.min_align.max(dtype.size());
    if !inside(manifest, &case) && align > dtype.size() && align % dtype.size() == 0 {
        for t in TensorId::ALL {
            let per = align / dtype.size();
            let pad = head_dim.next_multiple_of(per) - head_dim;
            if pad <= MAX_PAD {
                case.layouts.get_mut(t).pad[3] = pad;
            }
        }
    }
    match manifest.contract.check(&case, &Plan::new(&case)) {
        ContractVerdict::Inside => Ok(case),
        ContractVerdict::Outside { reasons } => Err(InferError::NoBase { kernel: manifest.name.clone(), reasons: reasons.join("; ") }),
    }
}

fn inside(manifest: &Manifest, case: &Case) -> bool {
    manifest.contract.admits(case)
}

/// The kernel's tile along the sequence: its `BLOCK_N` (keys) or `BLOCK_M` (queries), from the
/// defines or the default params, else [`DEFAULT_TILE`].
pub fn tile(manifest: &Manifest) -> u32 {
    let defaults = manifest.default_params();
    ["BLOCK_N", "BLOCK_M"]
        .iter()
        .find_map(|name| manifest.defines.get(*name).or_else(|| defaults.get(*name)).copied())
        .and_then(|v| u32::try_from(v).ok())
        .filter(|&v| v >= 1)
        .unwrap_or(DEFAULT_TILE)
}

/// The smallest allowed head_dim whose rows are a multiple of 16 bytes, else the smallest
/// allowed one.
fn base_head_dim([lo, hi]: [u32; 2], multiple: u32, dtype: Dtype) -> u32 {
    let m = multiple.max(1);
    let first = lo.max(1).div_ceil(m) * m;
    let hi = hi.min(MAX_HEAD_DIM);
    (first..=hi).step_by(m as usize).find(|d| (d * dtype.size()) % 16 == 0).unwrap_or(first.min(MAX_HEAD_DIM))
}

/// The base with batch and heads 2, for probes whose property only matters when a dimension
/// is stepped over (padding of outer extents, orders).
fn widened(base: &Case) -> Case {
    with(base, |c| {
        c.batch = 2;
        c.heads_q *= 2;
        c.heads_kv *= 2;
    })
}

/// `n` replicas of a probe's case: the case itself, then other data seeds, every third with
/// batch 2 and twice the heads (the same head ratio).
fn replicas(case: &Case, n: usize) -> Vec<Case> {
    (0..n)
        .map(|r| {
            with(case, |c| {
                c.data.seed += r as u64;
                if r % 3 == 1 {
                    c.batch = c.batch.max(2);
                    c.heads_q *= 2;
                    c.heads_kv *= 2;
                }
            })
        })
        .collect()
}

/// Base offsets 2, 4, 8 (misaligned for 16-byte accesses) and 16 (aligned), for one tensor;
/// offsets below the element size are left out (no kernel can take them).
fn offsets(base: &Case, t: TensorId) -> Vec<Case> {
    [2, 4, 8, 16]
        .into_iter()
        .filter(|o| o % base.dtype.size() == 0)
        .map(|o| with(base, |c| c.layouts.get_mut(t).offset_bytes = o))
        .collect()
}

/// Row-pitch paddings that leave the pitch 2, 4 or 8 bytes past a multiple of 16, and the
/// smallest one that keeps it aligned.
fn pitches(base: &Case, t: TensorId) -> Vec<Case> {
    let elem = base.dtype.size();
    let extent = base.head_dim;
    [2, 4, 8, 0]
        .into_iter()
        .filter_map(|residue| (1..=16u32).find(|e| ((extent + e) * elem) % 16 == residue))
        .map(|e| with(base, |c| c.layouts.get_mut(t).pad[3] = e))
        .collect()
}

/// Pads the extent of `d` in `t`'s (BHSD) layout by `n` elements.
fn pad_extent(c: &mut Case, t: TensorId, d: Dim, n: u32) {
    let l = c.layouts.get_mut(t);
    if let Some(pos) = l.order.iter().position(|&x| x == d) {
        l.pad[pos] = n;
    }
}

/// head_dim values around the declared range and the base: its edges and one past them,
/// non-multiples of 8 next to the base (±1, +2, +4), the next multiples of 8, and twice the
/// maximum.
fn head_dims(manifest: &Manifest, base: &Case) -> Vec<Case> {
    let [lo, hi] = manifest.contract.head_dim;
    let b = base.head_dim;
    let mut values = vec![lo.saturating_sub(1), lo, lo + 1, b.saturating_sub(8), b - 1, b + 1, b + 2, b + 4, b + 8, hi.saturating_sub(1), hi, hi + 1, hi * 2];
    values.retain(|&d| (1..=MAX_HEAD_DIM).contains(&d) && d != b);
    values.sort_unstable();
    values.dedup();
    values.into_iter().map(|d| with(base, |c| {
        c.head_dim = d;
        c.scale = 1.0 / (d as f32).sqrt();
    })).collect()
}

/// Sequence lengths: 1 and 2, one below the range's start, a tile ± 1, twice the tile + 1, the
/// range's maximum and one more (up to [`MAX_PROBE_SEQ`]).
pub fn seq_values([lo, hi]: [u32; 2], tile: u32, base: u32) -> Vec<u32> {
    let mut v = vec![1, 2, lo.saturating_sub(1), lo, tile.saturating_sub(1), tile + 1, 2 * tile + 1];
    if hi <= MAX_PROBE_SEQ {
        v.extend([hi, hi + 1]);
    } else {
        v.push(MAX_PROBE_SEQ);
    }
    v.retain(|&s| (1..=MAX_DIM).contains(&s) && s != base);
    v.sort_unstable();
    v.dedup();
    v
}

/// Causal with equal lengths, and causal with seq_q < seq_k (bottom-right aligned mask).
fn causal_variants(base: &Case) -> Vec<Case> {
    vec![
        with(base, |c| c.causal = true),
        with(base, |c| {
            c.causal = true;
            c.seq_q = (c.seq_k / 2).max(1);
        }),
    ]
}

#[cfg(test)]
mod tests;
