//! From probe outcomes to preconditions: pure functions over a [`ProbePlan`] and the
//! [`Outcome`] of each replica (the text is [`super::render`]'s).
//!
//! For each family the values that passed (the base's own value among them) and the values
//! that failed are collected; a numeric family's failures are explained by the simplest rule
//! that separates them ([`numeric_rule`]: a minimum, a maximum, a power-of-two multiple), a named
//! family's by the names that failed. One family gives at most one [`Precondition`]; families of
//! one kind with the same sentence are then merged across tensors ("q, k, v, o base must be
//! 16-byte aligned"), which is why a tensor family's sentence names dimensions by position
//! (`stride(1)`) rather than by the dims of one tensor.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use super::{Family, Probe, ProbePlan, Value};
use crate::core::case::Case;
use crate::core::finding::Finding;
use crate::core::manifest::Manifest;
use crate::core::verdict::Outcome;
use crate::tools::minimize::size;

/// One probe's outcomes over its replicas: a row of the table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeRow {
    /// The family, e.g. `q base offset`.
    pub family: String,
    /// The value, e.g. `8 B`.
    pub value: String,
    /// Whether the declared contract accepts the probe's cases.
    pub declared_inside: bool,
    /// Replicas that passed.
    pub pass: usize,
    /// Replicas with findings.
    pub fail: usize,
    /// Replicas the harness could not run.
    pub error: usize,
    /// How often each finding signature (or error line) appeared.
    pub signatures: BTreeMap<String, usize>,
}

impl ProbeRow {
    /// `pass`, `FAIL` or `mixed`.
    pub fn verdict(&self) -> &'static str {
        match (self.pass, self.fail + self.error) {
            (_, 0) => "pass",
            (0, _) => "FAIL",
            _ => "mixed",
        }
    }
}

/// A minimal failing case of a precondition, with what it failed with.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Example {
    /// The case (the smallest failing replica).
    pub case: Case,
    /// Its first finding, when it had findings.
    pub finding: Option<Finding>,
    /// The harness's error, when it could not be run.
    pub error: Option<String>,
}

/// A precondition the kernel really has.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Precondition {
    /// The kind of property, e.g. `base offset`, `head_dim`.
    pub property: String,
    /// The tensors it concerns, in roster order (empty for case-wide properties).
    pub tensors: Vec<String>,
    /// The precondition, e.g. `q, k, v, o base must be 16-byte aligned`.
    pub sentence: String,
    /// The values that failed and what they failed with.
    pub evidence: String,
    /// Whether the declared contract already excludes every failing case.
    pub declared: bool,
    /// Whether every replica of every failing value failed, with one signature set.
    pub consistent: bool,
    /// The smallest failing case.
    pub example: Option<Example>,
    /// Where the example was saved as a seed (set by the caller).
    pub seed: Option<PathBuf>,
}

/// The result of contract inference for one kernel.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Inference {
    /// The kernel's name.
    pub kernel: String,
    /// The base case, summarised.
    pub base: String,
    /// Why the base case failed; `None` when every base replica passed.
    pub base_failure: Option<String>,
    /// Probes run.
    pub probes: usize,
    /// Cases run, base replicas included.
    pub cases: usize,
    /// One row per probe, in plan order.
    pub rows: Vec<ProbeRow>,
    /// The preconditions found, in plan order.
    pub preconditions: Vec<Precondition>,
    /// Values outside the declared contract that passed: where the contract is stricter than
    /// the kernel.
    pub relaxations: Vec<String>,
}

impl Inference {
    /// Preconditions the declared contract does not state: the kernel fails inside it.
    pub fn undeclared(&self) -> usize {
        self.preconditions.iter().filter(|p| !p.declared).count()
    }
}

/// Summarises a plan's outcomes for the kernel of `m`: `base` holds the base replicas'
/// outcomes, `outcomes[i]` those of `plan.probes[i]` (probes without outcomes, e.g. after an
/// interruption, are left out).
pub fn summarise(m: &Manifest, plan: &ProbePlan, base: &[Outcome], outcomes: &[Vec<Outcome>]) -> Inference {
    let ran: Vec<(&Probe, &[Outcome])> = plan.probes.iter().zip(outcomes).map(|(p, o)| (p, o.as_slice())).collect();
    let mut inference = Inference {
        kernel: plan.kernel.clone(),
        base: plan.base.summary(),
        base_failure: base.iter().find_map(failure_line),
        probes: ran.len(),
        cases: base.len() + ran.iter().map(|(_, o)| o.len()).sum::<usize>(),
        rows: ran.iter().map(|(p, o)| row(p, o)).collect(),
        preconditions: Vec::new(),
        relaxations: Vec::new(),
    };
    if inference.base_failure.is_some() || base.is_empty() {
        return inference;
    }
    let mut found = Vec::new();
    let mut relaxed = BTreeMap::new();
    for family in plan.families() {
        let stats = family_stats(m, family, &ran);
        if let Some(f) = precondition(m, family, &plan.base, &stats) {
            found.push(f);
        }
        for (value, s) in &stats {
            if s.fail == 0 && s.pass > 0 && !s.declared_inside {
                relaxed.entry((family.kind(), family.describe(value))).or_insert_with(Vec::new).extend(family.tensor().map(str::to_string));
            }
        }
    }
    inference.preconditions = merge(m, found);
    inference.relaxations = relaxed
        .into_iter()
        .map(|((kind, value), tensors)| match tensors.is_empty() {
            true => format!("{kind} {value} passes although the declared contract excludes it"),
            false => format!("{} {kind} {value} passes although the declared contract excludes it", list(&tensors)),
        })
        .collect();
    inference
}

fn row(p: &Probe, outcomes: &[Outcome]) -> ProbeRow {
    let mut r = ProbeRow {
        family: p.family.to_string(),
        value: p.family.describe(&p.value),
        declared_inside: p.declared_inside,
        pass: 0,
        fail: 0,
        error: 0,
        signatures: BTreeMap::new(),
    };
    for o in outcomes {
        match o {
            Outcome::Pass => r.pass += 1,
            Outcome::Fail { .. } => r.fail += 1,
            _ => r.error += 1,
        }
        for s in signatures(o) {
            *r.signatures.entry(s).or_default() += 1;
        }
    }
    r
}

/// The distinct signatures of an outcome (an error counts as `error: <first line>`).
fn signatures(o: &Outcome) -> BTreeSet<String> {
    match o {
        Outcome::Pass => BTreeSet::new(),
        Outcome::Fail { findings } => findings.iter().map(|f| f.signature().to_string()).collect(),
        Outcome::Error { message } => [format!("error: {}", first_line(message))].into(),
        Outcome::Rejected { exception, .. } => [format!("rejected by the target: {exception}")].into(),
        #[allow(unreachable_patterns)]
        _ => ["error: unknown outcome".to_string()].into(),
    }
}

/// What a failing outcome failed with, in words; `None` for a pass.
fn causes(o: &Outcome) -> Vec<String> {
    match o {
        Outcome::Pass => Vec::new(),
        Outcome::Fail { findings } => findings.iter().map(cause).collect(),
        Outcome::Error { message } => vec![format!("harness error: {}", first_line(message))],
        Outcome::Rejected { exception, message } => vec![format!("rejected by the target ({exception}: {})", first_line(message))],
        #[allow(unreachable_patterns)]
        _ => vec!["unknown outcome".into()],
    }
}

/// `CUDA error 716 (misaligned_address)`, or `unwritten_output in o (sentinel)`.
fn cause(f: &Finding) -> String {
    match (&f.cuda_error, &f.tensor) {
        (Some(e), _) => format!("CUDA error {} ({})", cuda_code(e), f.kind),
        (None, Some(t)) => format!("{} in {t} ({})", f.kind, f.oracle),
        (None, None) => format!("{} ({})", f.kind, f.oracle),
    }
}

/// The number in `CUDA_ERROR_MISALIGNED_ADDRESS (716)`, or the whole text.
fn cuda_code(e: &str) -> &str {
    e.rsplit_once('(').and_then(|(_, rest)| rest.strip_suffix(')')).filter(|c| c.chars().all(|x| x.is_ascii_digit())).unwrap_or(e)
}

fn failure_line(o: &Outcome) -> Option<String> {
    let c = causes(o);
    (!c.is_empty()).then(|| c.join("; "))
}

fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or_default();
    line.chars().take(120).collect()
}

/// Outcomes of one value of one family, over every probe and replica that set it.
struct ValueStats<'a> {
    declared_inside: bool,
    pass: usize,
    fail: usize,
    causes: BTreeSet<String>,
    signature_sets: BTreeSet<BTreeSet<String>>,
    example: Option<(&'a Case, &'a Outcome)>,
}

impl ValueStats<'_> {
    fn consistent(&self) -> bool {
        (self.pass == 0 || self.fail == 0) && self.signature_sets.len() <= 1
    }
}

fn family_stats<'a>(m: &Manifest, family: &Family, ran: &[(&'a Probe, &'a [Outcome])]) -> BTreeMap<Value, ValueStats<'a>> {
    let mut stats: BTreeMap<Value, ValueStats<'a>> = BTreeMap::new();
    for (probe, outcomes) in ran.iter().filter(|(p, _)| &p.family == family) {
        let s = stats.entry(probe.value.clone()).or_insert(ValueStats {
            declared_inside: true,
            pass: 0,
            fail: 0,
            causes: BTreeSet::new(),
            signature_sets: BTreeSet::new(),
            example: None,
        });
        s.declared_inside &= probe.declared_inside;
        for (case, outcome) in probe.cases.iter().zip(outcomes.iter()) {
            if matches!(outcome, Outcome::Pass) {
                s.pass += 1;
                continue;
            }
            s.fail += 1;
            s.causes.extend(causes(outcome));
            s.signature_sets.insert(signatures(outcome));
            if s.example.is_none_or(|(c, _)| size(case, m) < size(c, m)) {
                s.example = Some((case, outcome));
            }
        }
    }
    stats
}

/// A precondition of one family, before merging across tensors.
struct Found {
    family: Family,
    predicate: String,
    tensors: Vec<String>,
    failing: BTreeSet<Value>,
    causes: BTreeSet<String>,
    declared: bool,
    consistent: bool,
    example: Option<Example>,
}

fn precondition(m: &Manifest, family: &Family, base: &Case, stats: &BTreeMap<Value, ValueStats<'_>>) -> Option<Found> {
    let failing: BTreeSet<Value> = stats.iter().filter(|(_, s)| s.fail > 0).map(|(v, _)| v.clone()).collect();
    if failing.is_empty() {
        return None;
    }
    let mut passing: BTreeSet<Value> = stats.iter().filter(|(_, s)| s.fail == 0 && s.pass > 0).map(|(v, _)| v.clone()).collect();
    passing.insert(family.measure(base, m));
    let bad: Vec<&ValueStats<'_>> = stats.values().filter(|s| s.fail > 0).collect();
    let example = bad.iter().filter_map(|s| s.example).min_by_key(|(c, _)| size(c, m)).map(|(case, outcome)| Example {
        case: case.clone(),
        finding: match outcome {
            Outcome::Fail { findings } => findings.first().cloned(),
            _ => None,
        },
        error: match outcome {
            Outcome::Error { message } => Some(first_line(message)),
            _ => None,
        },
    });
    Some(Found {
        family: family.clone(),
        predicate: relation_predicate(m, family, base, &passing, &failing)
            .unwrap_or_else(|| predicate(family, &passing, &failing, elem_bytes(m, family, base))),
        tensors: family.tensor().map(str::to_string).into_iter().collect(),
        failing,
        causes: bad.iter().flat_map(|s| s.causes.iter().cloned()).collect(),
        declared: bad.iter().all(|s| !s.declared_inside),
        consistent: bad.iter().all(|s| s.consistent()),
        example,
    })
}

/// The simplest rule that separates failing numbers from passing ones.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NumRule {
    /// Values below this failed (the smallest passing value).
    pub min: Option<i64>,
    /// Values above this failed (the largest passing value).
    pub max: Option<i64>,
    /// Values between the passing ones that are not multiples of this failed.
    pub multiple: Option<i64>,
    /// Failing values no rule above explains.
    pub unexplained: Vec<i64>,
}

/// Separates `fail` from `pass`: the smallest power-of-two multiple (2..=1024) that every
/// passing value is and no failing value between the passing ones is; then a minimum and a
/// maximum for the failing values outside the passing ones that the multiple does not explain.
pub fn numeric_rule(pass: &BTreeSet<i64>, fail: &BTreeSet<i64>) -> NumRule {
    let (Some(&lo), Some(&hi)) = (pass.first(), pass.last()) else {
        return NumRule { unexplained: fail.iter().copied().collect(), ..NumRule::default() };
    };
    let between: Vec<i64> = fail.iter().copied().filter(|&f| f > lo && f < hi).collect();
    let multiple = (1..=10).map(|k| 1i64 << k).find(|&m| !between.is_empty() && pass.iter().all(|p| p % m == 0) && between.iter().all(|f| f % m != 0));
    let rest: Vec<i64> = fail.iter().copied().filter(|f| multiple.is_none_or(|m| f % m == 0)).collect();
    NumRule {
        min: rest.iter().any(|&f| f < lo).then_some(lo),
        max: rest.iter().any(|&f| f > hi).then_some(hi),
        multiple,
        unexplained: rest.into_iter().filter(|&f| f > lo && f < hi).collect(),
    }
}

fn nums(values: &BTreeSet<Value>) -> BTreeSet<i64> {
    values.iter().filter_map(|v| if let Value::Num(n) = v { Some(*n) } else { None }).collect()
}

fn list(values: impl IntoIterator<Item = impl ToString>) -> String {
    values.into_iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}

/// The precondition without its tensor subject, e.g. `base must be 16-byte aligned`.
fn predicate(family: &Family, passing: &BTreeSet<Value>, failing: &BTreeSet<Value>, elem: i64) -> String {
    let rule = numeric_rule(&nums(passing), &nums(failing));
    let only_multiple = rule.min.is_none() && rule.max.is_none() && rule.unexplained.is_empty();
    let every_value_fails = passing.len() == 1;
    match (family, rule.multiple) {
        (Family::Offset(_), Some(m)) if only_multiple => format!("base must be {m}-byte aligned"),
        (Family::Pitch(_), Some(m)) if only_multiple => format!("row pitch must be a multiple of {m} bytes ({} elements)", (m / elem).max(1)),
        (Family::Offset(_), _) => format!("base {}", numeric_clauses("offset (bytes)", &rule)),
        (Family::Pitch(_), _) => numeric_clauses("row pitch (bytes)", &rule),
        (Family::Padding { dim, outer, .. }, _) => format!("stride({outer}) must be dense (no padding of dimension {dim})"),
        (Family::ElementOffset(_), _) => "element offsets must stay below 2^31: the kernel indexes in 32 bits (declare max_element_offset = 2147483647)".into(),
        (Family::InnerStride(_), _) if every_value_fails => "innermost stride must be 1".into(),
        (Family::Order(_), _) if every_value_fails => format!("must be in order {}", list(passing)),
        (Family::InnerStride(_) | Family::Order(_), _) => format!("must not be in order {}", list(failing)),
        (Family::Broadcast(_), _) if every_value_fails => "cannot be broadcast".into(),
        (Family::Broadcast(_), _) => format!("cannot be broadcast over {}", list(failing)),
        (Family::Dtype, _) if every_value_fails => format!("dtype must be {}", list(passing)),
        (Family::Dtype, _) => format!("dtype must be one of {}", list(passing)),
        (Family::Flag(name), _) => format!("{name} = {} is not supported", list(failing)),
        (other, _) => numeric_clauses(&other.to_string(), &rule),
    }
}

/// For a dim probed alone: a relation of the manifest (`requires` or the contract's) between it
/// and other dims that holds, with the base case's other dims, at every passing value and at no
/// failing one, e.g. `seq_k == seq_q must hold`: what the probes found is that relation, not
/// one value.
fn relation_predicate(m: &Manifest, family: &Family, base: &Case, passing: &BTreeSet<Value>, failing: &BTreeSet<Value>) -> Option<String> {
    let Family::Dim(dim) = family else { return None };
    let (pass, fail) = (nums(passing), nums(failing));
    let holds = |rel: &str, v: i64| -> Option<bool> {
        let mut vars = crate::core::generate::relations::dim_vars(base, m);
        vars.dims.insert(dim.clone(), u64::try_from(v).ok()?);
        crate::core::manifest::expr::Env::without_tensors(&vars).boolean(rel).ok()
    };
    m.requires
        .iter()
        .chain(&m.contract.relations)
        .find(|rel| {
            let names = crate::core::manifest::expr::variables_in(rel);
            names.iter().any(|n| n == dim)
                && names.iter().any(|n| n != dim && m.dim(n).is_some())
                && !fail.is_empty()
                && pass.iter().all(|&v| holds(rel, v) == Some(true))
                && fail.iter().all(|&v| holds(rel, v) == Some(false))
        })
        .map(|rel| format!("`{rel}` must hold"))
}

/// The element size of the tensor a family is about (the case's element size for the others).
fn elem_bytes(m: &Manifest, family: &Family, base: &Case) -> i64 {
    let tensor = family.tensor().and_then(|t| m.tensor(t));
    tensor.map_or(base.dtype, |t| t.dtype.resolve(base.dtype)).size() as i64
}

/// `head_dim must be ≥ 8, ≤ 256 and a multiple of 8`, `seq_k must be 512`.
fn numeric_clauses(name: &str, rule: &NumRule) -> String {
    let mut parts = Vec::new();
    match (rule.min, rule.max) {
        (Some(a), Some(b)) if a == b => parts.push(a.to_string()),
        (a, b) => {
            parts.extend(a.map(|a| format!("≥ {a}")));
            parts.extend(b.map(|b| format!("≤ {b}")));
        }
    }
    parts.extend(rule.multiple.map(|m| format!("a multiple of {m}")));
    let mut s = match parts.len() {
        0 => format!("{name} fails"),
        1 => format!("{name} must be {}", parts[0]),
        n => format!("{name} must be {} and {}", parts[..n - 1].join(", "), parts[n - 1]),
    };
    if !rule.unexplained.is_empty() {
        let _ = write!(s, "{}at {} (no simple rule)", if parts.is_empty() { " " } else { "; it also fails " }, list(&rule.unexplained));
    }
    s
}

/// Merges preconditions of one kind with the same predicate across tensors.
fn merge(m: &Manifest, found: Vec<Found>) -> Vec<Precondition> {
    let mut groups: Vec<Found> = Vec::new();
    for f in found {
        match groups.iter_mut().find(|g| g.family.kind() == f.family.kind() && g.predicate == f.predicate) {
            Some(g) => {
                g.tensors.extend(f.tensors);
                g.failing.extend(f.failing);
                g.causes.extend(f.causes);
                g.declared &= f.declared;
                g.consistent &= f.consistent;
                if f.example.as_ref().is_some_and(|e| g.example.as_ref().is_none_or(|x| size(&e.case, m) < size(&x.case, m))) {
                    g.example = f.example;
                }
            }
            None => groups.push(f),
        }
    }
    groups.into_iter().map(|g| finish(m, g)).collect()
}

fn finish(m: &Manifest, mut g: Found) -> Precondition {
    g.tensors.sort_by_key(|t| m.tensor_index(t));
    g.tensors.dedup();
    let failing: Vec<Value> = g.failing.into_iter().collect();
    let causes: Vec<String> = g.causes.into_iter().collect();
    let mut evidence = format!("fails at {}: {}", g.family.phrase(&failing), causes.join("; "));
    if !g.consistent {
        evidence.push_str(" (not every replica failed the same way)");
    }
    Precondition {
        property: g.family.kind(),
        sentence: if g.tensors.is_empty() { g.predicate } else { format!("{} {}", list(&g.tensors), g.predicate) },
        tensors: g.tensors,
        evidence,
        declared: g.declared,
        consistent: g.consistent,
        example: g.example,
        seed: None,
    }
}
