//! Contract inference: which preconditions does a kernel really need?
//!
//! A manifest's contract is what the kernel's author believes: each dim's range and multiple,
//! the relations between dims, each tensor's layout kind, alignment and broadcast, the element
//! types. [`plan_probes`] checks that belief from outside, for any manifest. It starts from a
//! known-passing base case ([`base_case`]: the smallest case inside the declared contract, one
//! tile long where a dim names a tile parameter, every tensor dense at offset 0 with 16-byte
//! rows) and builds a [`ProbePlan`] of [`Probe`]s, each changing ONE property of the base (or
//! of the widened base, where each dim of 1 a tensor steps over is 2; see [`plan_probes`]):
//!
//! * per tensor whose layout a case chooses: its base offset (2, 4, 8, 16 bytes), its row pitch
//!   (padding that leaves it 2, 4 or 8 bytes past a multiple of 16, and one that keeps it
//!   aligned), the padding of each outer extent, orders that move the innermost dimension (a
//!   non-unit innermost stride) and orders that keep it, broadcast of each outer dimension
//!   (inputs), and element offsets past 2³¹;
//! * per dim: 1 and 2, the range's edges, non-multiples around the base, a tile ± 1, the maximum
//!   and one past it;
//! * the element type, each flag flipped, each tunable parameter value.
//!
//! A value is probed whether or not the contract admits it (probing past the contract is the
//! point), except where no kernel could take it: offsets that are not a multiple of the element
//! size, cases that do not plan, cases larger than [`MAX_PROBE_BYTES`]. Every probe has a few
//! replicas (other data seeds and, every third, doubled outer dims) so that a flaky outcome
//! shows.
//!
//! The CLI runs the probes through the engine; [`summarise`] then turns the outcomes into
//! [`Precondition`]s, one sentence per property that failed ("q, k, v, o base must be 16-byte
//! aligned", "head_dim must be a multiple of 8"), each marked declared (the contract already
//! excludes every failing value) or not, with a minimal failing case to save as a seed.
//! Everything here is pure host code.

mod base;
mod family;
mod probes;
mod render;
mod summary;

pub use base::{base_case, footprint, stepped_dims, widened, MAX_PROBE_BYTES};
pub use family::{pitch_bytes, Family, Value, NOT_BROADCAST};
pub use probes::{dim_values, MAX_PROBE_DIM};
pub use render::{render_plan, render_preconditions, render_table};
pub use summary::{numeric_rule, summarise, Example, Inference, NumRule, Precondition, ProbeRow};

use serde::Serialize;
use thiserror::Error;

use crate::core::case::Case;
use crate::core::manifest::Manifest;
use crate::core::plan::{admits, Plan};

use probes::Variants;

/// Replicas per probe when the caller does not say.
pub const DEFAULT_CASES_PER_PROBE: usize = 3;

/// Why no probe plan could be made.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum InferError {
    /// The smallest case the planner builds does not plan or lies outside the declared contract,
    /// so there is no known-good point to vary one property from.
    #[error("{kernel}: no base case inside the declared contract ({reasons}); widen the contract or check its ranges and relations")]
    NoBase {
        /// The kernel's name.
        kernel: String,
        /// Why the smallest case is not one, joined.
        reasons: String,
    },
    /// More replicas per probe than [`MAX_CASES_PER_PROBE`].
    #[error("{0} cases per probe is more than {MAX_CASES_PER_PROBE}: a handful shows a flaky outcome")]
    TooManyReplicas(usize),
}

/// Most replicas per probe: a few show flakiness, and every probe runs them all.
pub const MAX_CASES_PER_PROBE: usize = 1000;

/// One property value to try: its replicas and whether the declared contract accepts them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Probe {
    /// The property varied.
    pub family: Family,
    /// The value it was set to (measured on the first replica).
    pub value: Value,
    /// Whether every replica lies inside the declared contract.
    pub declared_inside: bool,
    /// The replicas: the probe's case, then other data seeds, every third with its outer dims
    /// doubled.
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

/// Plans the probes of `m`'s kernel, `cases_per_probe` replicas each (at least 1): tensors in
/// roster order (offsets of all, then pitches of all, ...), then dims in declaration order, the
/// element type, flags and params.
///
/// Base offsets and element offsets are probed on the base itself. Every other probe starts
/// from the widened base ([`widened`]: each dim of 1 that a tensor steps over at 2), because a
/// stride, a row length or a flag only shows when a dimension is stepped over: on a base of one
/// row, a head_dim of 65 misaligns nothing. The widened base is run as the base's second
/// replica, so both starting points are known to pass before anything is inferred.
pub fn plan_probes(m: &Manifest, cases_per_probe: usize) -> Result<ProbePlan, InferError> {
    if cases_per_probe > MAX_CASES_PER_PROBE {
        return Err(InferError::TooManyReplicas(cases_per_probe));
    }
    let base = base_case(m)?;
    let n = cases_per_probe.max(1);
    let wide = widened(&base, m);
    let mut families: Vec<Variants> = m.tensors.iter().filter(|t| t.layout_is_drawn()).flat_map(|t| probes::tensor_variants(m, t, &base, &wide)).collect();
    // Kind by kind across tensors (a stable sort keeps the roster order within a kind), so the
    // table reads `q base offset`, `k base offset`, ..., `q row pitch`, ...
    families.sort_by_key(|(f, _)| f.kind_index());
    families.extend((0..m.dims.len()).map(|i| probes::dim_variants(m, i, &base, &wide)));
    families.extend(probes::lengths_variants(m, &wide));
    families.push(probes::dtype_variants(m, &wide));
    families.extend(probes::flag_variants(m, &wide));
    families.extend(probes::param_variants(m, &wide));
    let mut probes = Vec::new();
    for (family, cases) in families {
        probes.extend(cases.into_iter().filter_map(|c| probe(m, &base, &family, c, n)));
    }
    // The widened base stands in for the second replica, so both starting points are run.
    let base_cases = (0..n).map(|r| Case { seed: base.seed + r as u64, ..if r % 3 == 1 { wide.clone() } else { base.clone() } }).collect();
    Ok(ProbePlan { kernel: m.name.clone(), base_cases, base, probes })
}

/// The probe of one case of `family`, unless it changes nothing, does not plan, or (a probe
/// meant to stay small) holds more than [`MAX_PROBE_BYTES`].
fn probe(m: &Manifest, base: &Case, family: &Family, mut case: Case, n: usize) -> Option<Probe> {
    case.normalize_layouts();
    let mut plain = base.clone();
    plain.normalize_layouts();
    let value = family.measure(&case, m);
    if case == plain || value == family.measure(base, m) || Plan::new(&case, m).is_err() || footprint(&case, m) > MAX_PROBE_BYTES {
        return None;
    }
    let cases = replicas(&case, m, &family.pinned_dims(m), n);
    let declared_inside = cases.iter().all(|c| admits(m, c));
    Some(Probe { family: family.clone(), value, declared_inside, cases })
}

/// `n` replicas of a case: the case itself, then other data seeds, every third with its outer
/// dims doubled (those `pinned` excepted) where that keeps the case valid and on the same side
/// of the contract.
fn replicas(case: &Case, m: &Manifest, pinned: &[String], n: usize) -> Vec<Case> {
    (0..n)
        .map(|r| {
            let mut c = if r % 3 == 1 { base::doubled(case, m, pinned) } else { case.clone() };
            c.seed = case.seed + r as u64;
            c
        })
        .collect()
}

#[cfg(test)]
mod tests;
