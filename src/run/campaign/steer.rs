//! Steering: once a bug's trigger is known, most later cases are drawn away from it, so a
//! campaign reaches the bugs hidden behind the first one instead of re-finding it (a kernel
//! whose misaligned `q` load faults on half of all cases hides everything else it does wrong).
//!
//! A case is described by plain boolean [`features`]: its element type and tile parameters, which
//! dims are 1 and which end in a partial tile or vector, which flags are set, and for each tensor
//! its alignment class (and whether any tensor is below an alignment: a CUDA fault does not name
//! its tensor), whether its rows hold a whole 16-byte vector, its layout class, value classes and
//! whether it reaches past 2³¹ elements. A tensor's alignment class counts only for accesses its
//! rows are long enough for: a vectorised kernel reads rows shorter than a vector with scalar
//! loads, which cannot trap, and the bugs of that path would otherwise be steered away with the
//! fault. A bug's trigger is what is known to bring it out:
//! - the tensor and alignment class compute-sanitizer named, for a misaligned access (a 16-byte
//!   load from `q` traps when `q` is below 16-byte alignment, whatever else the case holds), and
//!   for a misaligned-address fault that names no tensor, "some tensor below 16 bytes"
//!   ([`named_trigger`]); a case that contradicts the name (a fault with every tensor aligned)
//!   does not give it;
//! - otherwise the features that every case showing the bug had in common. One case says little
//!   (all its features); each further case of the bug drops the features it lacks, so the
//!   trigger narrows toward the cause. A trigger left empty cannot be steered around.
//!
//! A case is re-drawn (up to [`MAX_DRAWS`] times, from further bytes of the same stream) until it
//! shows no known trigger it is steered by ([`steers`], a fixed function of the seed and the case
//! number). How often a trigger is left alone depends on what is known of it:
//! - a trigger still narrowing: one case in [`UNSTEERED_ONE_IN`] (10) is not steered around it,
//!   so its bug keeps being seen and the trigger keeps narrowing;
//! - a *settled* trigger (one its findings named, or the common features of
//!   [`CONFIRMED_CASES`] cases): only one case in [`RECONFIRM_ONE_IN`] (25) re-confirms it. A
//!   kernel that faults spends most of its time on fault recovery (a sticky error costs the
//!   worker its process and context; the fault itself took 190 to 270 ms on fa_s512):
//!   measured on an H100 with fa_s512 and 4 jobs, one case in 25 gave 57 cases/s (37 faults in
//!   1000 cases), one in 50 gave 82 cases/s but left one of its four bugs unfound in 1000
//!   cases: a fault names no tensor, so the campaign steers around "some tensor unaligned", and
//!   the bug behind the others is reached only in the cases that re-confirm it.
//!
//! The cases must not depend on `--jobs`, so what a case is steered by is fixed at checkpoints
//! ([`Steering`]): after 4, 8, 16, 32 and 64 cases, then every 64 (every batch's worth, at least
//! 64, when a sanitizer pass hands out batches). A case between two checkpoints sees the bugs
//! known at the checkpoint before the last one, in case order, and waits for them if they are
//! still running: early checkpoints come quickly, because a kernel that faults on most cases
//! pays for each fault with a worker, and later ones leave the workers room to run ahead. The same `--seed` and
//! `--cases` give the same cases with one worker or sixteen, and shards stay disjoint (a shard's
//! cases are steered by what its own cases found).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::core::case::{Case, Scalar, ValueClass};
use crate::core::finding::{Finding, FindingKind};
use crate::core::manifest::{Hint, Manifest};
use crate::core::plan::{Plan, VECTOR_ALIGN};
use crate::core::triage::BugId;

/// One case in this many is not steered around a trigger still narrowing.
pub const UNSTEERED_ONE_IN: u64 = 10;
/// One case in this many is not steered around a settled trigger (it re-confirms its bug).
pub const RECONFIRM_ONE_IN: u64 = 25;
/// Cases of a bug after which what they had in common is its settled trigger.
pub const CONFIRMED_CASES: u64 = 4;
/// The first checkpoints (cases run before each), then one every [`CHECKPOINT_CASES`].
pub const FIRST_CHECKPOINTS: [u64; 5] = [4, 8, 16, 32, 64];
/// Cases between later checkpoints at least (more when a pool hands out larger batches).
pub const CHECKPOINT_CASES: u64 = 64;
/// Draws tried for a steered case before the one that shows the fewest triggers is taken.
pub const MAX_DRAWS: u32 = 64;

/// The boolean features of a case, as short names (`q.align<16`, `seq_k%BLOCK_N`, `f16`).
pub type Features = BTreeSet<String>;

/// What a case shows, in features a trigger is made of; empty when the case does not plan.
pub fn features(m: &Manifest, case: &Case) -> Features {
    let Ok(plan) = Plan::new(case, m) else {
        return Features::new();
    };
    let mut f = Features::new();
    f.insert(format!("dtype={}", case.dtype));
    for (p, v) in &case.params {
        f.insert(format!("{p}={v}"));
    }
    for (name, &v) in &case.dims {
        // Extent 1 is where index arithmetic and loops degenerate; as a pair, so that what
        // every case of a bug shares can be either.
        f.insert(if v == 1 { format!("{name}=1") } else { format!("{name}>1") });
        for w in [8, 16] {
            if v % w != 0 {
                f.insert(format!("{name}%{w}"));
            }
        }
        let tiles = m.dims.iter().find(|d| &d.name == name).map(|d| d.hints.as_slice()).unwrap_or_default();
        for h in tiles {
            let Hint::Param(p) = h else { continue };
            let tile = case.params.get(p).or_else(|| m.defines.get(p)).copied().unwrap_or(1);
            if tile > 1 && v % tile as u64 != 0 {
                f.insert(format!("{name}%{p}"));
            }
        }
    }
    for (name, s) in &case.scalars {
        match s {
            Scalar::Bool(_) | Scalar::Int(_) => {
                f.insert(format!("{name}={s}"));
            }
            Scalar::Float(_) => {}
        }
    }
    for t in plan.tensors.iter().filter(|t| t.drawn) {
        let align = t.alignment();
        // An access of `a` bytes within a row needs a row that long: a tensor whose rows are
        // shorter is never read that way, so its alignment cannot trap such an access (a
        // vectorised kernel takes its scalar path there, where other bugs hide).
        let row_bytes = t.shape.last().copied().unwrap_or(1) * t.elem_bytes as u64;
        for a in [16, 8, 4] {
            if align < a.min(VECTOR_ALIGN) && row_bytes >= a {
                f.insert(format!("{}.align<{a}", t.name));
                // A CUDA fault does not say which tensor: what its cases share is that some
                // tensor was below this alignment.
                f.insert(format!("any.align<{a}"));
            }
        }
        // Whether a row (the innermost logical dim) holds a whole vector: a vectorised path
        // runs only on rows that do, so its bugs share `row>=16`, and bugs of the scalar
        // path `row<16`.
        if let Some(&inner) = t.shape.last() {
            let wide = inner * t.elem_bytes as u64 >= VECTOR_ALIGN;
            f.insert(format!("{}.row{}{VECTOR_ALIGN}", t.name, if wide { ">=" } else { "<" }));
        }
        if !t.layout.is_dense() {
            f.insert(format!("{}.strided", t.name));
        }
        if !t.layout.broadcast.is_empty() {
            f.insert(format!("{}.broadcast", t.name));
        }
        if t.reaches_past_int32() {
            f.insert(format!("{}.past_int32", t.name));
        }
        for c in t.layout.values.iter().filter(|c| !matches!(c, ValueClass::Normal | ValueClass::Uniform)) {
            f.insert(format!("{}.{c}", t.name));
        }
    }
    f
}

/// The feature that is a finding's whole trigger, when the finding says it: a misaligned access
/// of `n` bytes that a sanitizer traced to a tensor traps exactly when that tensor is below
/// `n`-byte alignment; a misaligned-address fault that names no tensor (CUDA error 716) cannot
/// happen when every tensor is 16-byte aligned, the widest access a thread makes.
pub fn named_trigger(finding: &Finding) -> Option<String> {
    if finding.kind == FindingKind::MisalignedAddress && finding.tensor.is_none() && !finding.oracle.is_sanitizer() {
        return Some(format!("any.align<{VECTOR_ALIGN}"));
    }
    let kind = finding.sanitizer_kind.as_ref()?;
    if !finding.oracle.is_sanitizer() || !kind.is_misaligned() {
        return None;
    }
    let tensor = finding.tensor.as_ref()?;
    let size = finding.access_size.unwrap_or(VECTOR_ALIGN).clamp(4, VECTOR_ALIGN);
    Some(format!("{tensor}.align<{}", size.next_power_of_two().min(VECTOR_ALIGN)))
}

/// Which triggers case `global` of `seed` is steered around.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Steer {
    /// Triggers still narrowing (all but one case in [`UNSTEERED_ONE_IN`]).
    pub narrowing: bool,
    /// Settled triggers (all but one case in [`RECONFIRM_ONE_IN`]).
    pub settled: bool,
}

impl Steer {
    /// Whether the case is steered around any trigger.
    pub fn any(self) -> bool {
        self.narrowing || self.settled
    }
}

/// Which triggers case `global` of `seed` is steered around: two independent draws from one
/// hash, so the cases that re-confirm a settled trigger are not those that narrow the others.
pub fn steers(seed: u64, global: u64) -> Steer {
    let h = mix(seed ^ mix(global));
    Steer { narrowing: !h.is_multiple_of(UNSTEERED_ONE_IN), settled: !(h / UNSTEERED_ONE_IN).is_multiple_of(RECONFIRM_ONE_IN) }
}

/// splitmix64's finaliser: a cheap, well-spread hash of one word.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The triggers known at one checkpoint: a case that has every feature of one of them shows
/// that bug (as far as anyone can tell). Each says whether it is settled (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Triggers(Vec<(Features, bool)>);

impl Triggers {
    /// Triggers still narrowing, from explicit feature sets (empty sets are dropped: they match
    /// everything).
    pub fn new(sets: impl IntoIterator<Item = Features>) -> Triggers {
        Triggers::with(sets.into_iter().map(|s| (s, false)))
    }

    /// Triggers from feature sets, each with whether it is settled.
    pub fn with(sets: impl IntoIterator<Item = (Features, bool)>) -> Triggers {
        Triggers(sets.into_iter().filter(|(s, _)| !s.is_empty()).collect())
    }

    /// How many triggers the features show, of those a case steered by `steer` avoids.
    pub fn hits(&self, features: &Features, steer: Steer) -> usize {
        let applies = |settled: bool| if settled { steer.settled } else { steer.narrowing };
        self.0.iter().filter(|(t, settled)| applies(*settled) && t.is_subset(features)).count()
    }

    /// Whether no trigger is known.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What the campaign knows of each bug's trigger so far.
#[derive(Clone, Debug, Default)]
pub struct Knowledge {
    bugs: BTreeMap<BugId, Evidence>,
}

#[derive(Clone, Debug)]
struct Evidence {
    /// Features every case of the bug had.
    common: Features,
    /// The trigger a finding named, which no other evidence overrides.
    named: Option<String>,
    /// Cases of the bug observed.
    cases: u64,
}

impl Knowledge {
    /// One case of `bug` with these features; `named` when its finding names its trigger (a
    /// name the case's own features contradict is a wrong guess, and is dropped).
    pub fn observe(&mut self, bug: BugId, features: &Features, named: Option<String>) {
        let named = named.filter(|n| features.contains(n));
        match self.bugs.get_mut(&bug) {
            None => {
                self.bugs.insert(bug, Evidence { common: features.clone(), named, cases: 1 });
            }
            Some(e) => {
                e.cases += 1;
                e.common.retain(|f| features.contains(f));
                if e.named.is_none() {
                    e.named = named;
                }
            }
        }
    }

    /// The triggers as they stand: the feature a bug's findings named (settled), else what
    /// every case of it had in common (settled after [`CONFIRMED_CASES`] cases).
    pub fn triggers(&self) -> Triggers {
        Triggers::with(self.bugs.values().map(|e| match &e.named {
            Some(n) => (Features::from([n.clone()]), true),
            None => (e.common.clone(), e.cases >= CONFIRMED_CASES),
        }))
    }
}

/// A campaign's steering: the knowledge it gathers in case order, the triggers frozen at each
/// checkpoint, and the steered cases not yet reported.
pub struct Steering {
    /// Cases between checkpoints when batches are handed out (`None`: one case at a time, and
    /// the first checkpoints come early).
    batch_spacing: Option<u64>,
    state: Mutex<State>,
    frozen: Condvar,
}

#[derive(Default)]
struct State {
    knowledge: Knowledge,
    /// `checkpoints[j]`: the triggers after the first [`Steering::boundary`]`(j)` cases.
    checkpoints: Vec<Arc<Triggers>>,
    steered: BTreeSet<u64>,
}

impl Steering {
    /// Steering for a pool that hands out at most `max_chunk` cases at a time: with batches, a
    /// checkpoint every `max(max_chunk, CHECKPOINT_CASES)` cases, or a batch would wait for
    /// itself; one case at a time, `FIRST_CHECKPOINTS` first.
    pub fn new(max_chunk: u64) -> Steering {
        let state = State { checkpoints: vec![Arc::new(Triggers::default())], ..State::default() };
        let batch_spacing = (max_chunk > 1).then(|| max_chunk.max(CHECKPOINT_CASES));
        Steering { batch_spacing, state: Mutex::new(state), frozen: Condvar::new() }
    }

    /// How many cases run before checkpoint `j` (checkpoint 0: none).
    fn boundary(&self, j: u64) -> u64 {
        match self.batch_spacing {
            Some(spacing) => j * spacing,
            None => match j {
                0 => 0,
                j if j as usize <= FIRST_CHECKPOINTS.len() => FIRST_CHECKPOINTS[j as usize - 1],
                j => FIRST_CHECKPOINTS[FIRST_CHECKPOINTS.len() - 1] + (j - FIRST_CHECKPOINTS.len() as u64) * CHECKPOINT_CASES,
            },
        }
    }

    /// The checkpoint local case `local` is steered by: the one before the last checkpoint it
    /// has passed.
    fn checkpoint_of(&self, local: u64) -> usize {
        self.passed(local).saturating_sub(1) as usize
    }

    /// How many checkpoints lie at or before `local` cases (the inverse of [`Steering::boundary`],
    /// without walking every checkpoint: it is asked for each case).
    fn passed(&self, local: u64) -> u64 {
        let last_first = FIRST_CHECKPOINTS[FIRST_CHECKPOINTS.len() - 1];
        match self.batch_spacing {
            Some(spacing) => local / spacing,
            None if local < last_first => FIRST_CHECKPOINTS.iter().take_while(|&&b| b <= local).count() as u64,
            None => FIRST_CHECKPOINTS.len() as u64 + (local - last_first) / CHECKPOINT_CASES,
        }
    }

    /// The triggers that steer local case `local`, waiting until its checkpoint is frozen;
    /// `None` once `abort` is set.
    pub fn triggers_for(&self, local: u64, abort: &AtomicBool) -> Option<Arc<Triggers>> {
        let j = self.checkpoint_of(local);
        let mut state = self.state.lock().expect("steering lock");
        loop {
            if let Some(t) = state.checkpoints.get(j) {
                return Some(t.clone());
            }
            if abort.load(Ordering::SeqCst) {
                return None;
            }
            state = self.frozen.wait_timeout(state, Duration::from_millis(20)).expect("steering lock").0;
        }
    }

    /// Records that local case `local` was steered (reported with its result).
    pub fn mark_steered(&self, local: u64) {
        self.state.lock().expect("steering lock").steered.insert(local);
    }

    /// One case of `bug`, as `Knowledge::observe`.
    pub fn observe(&self, bug: BugId, features: &Features, named: Option<String>) {
        self.state.lock().expect("steering lock").knowledge.observe(bug, features, named);
    }

    /// Local case `local` is done and everything it showed observed: freezes the checkpoints it
    /// completes. Returns whether the case was steered.
    pub fn delivered(&self, local: u64) -> bool {
        let mut state = self.state.lock().expect("steering lock");
        while self.boundary(state.checkpoints.len() as u64) <= local + 1 {
            let t = Arc::new(state.knowledge.triggers());
            state.checkpoints.push(t);
        }
        let steered = state.steered.remove(&local);
        drop(state);
        self.frozen.notify_all();
        steered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bug_of(tensor: &str) -> BugId {
        crate::core::triage::BugKey::Native { kernel: "k".into(), kind: crate::core::finding::FindingKind::NanLeak, tensor: Some(tensor.into()) }.id()
    }

    const ALL: Steer = Steer { narrowing: true, settled: true };

    fn set(xs: &[&str]) -> Features {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_trigger_narrows_to_what_every_case_of_the_bug_had() {
        let mut k = Knowledge::default();
        let bug = bug_of("o");
        k.observe(bug.clone(), &set(&["dtype=f16", "seq_k%16", "q.align<16"]), None);
        assert_eq!(k.triggers().hits(&set(&["dtype=f32", "seq_k%16"]), ALL), 0, "one case: all of its features");
        k.observe(bug.clone(), &set(&["dtype=f32", "seq_k%16"]), None);
        assert_eq!(k.triggers(), Triggers::new([set(&["seq_k%16"])]));
        assert_eq!(k.triggers().hits(&set(&["dtype=bf16", "seq_k%16", "x"]), ALL), 1);
        k.observe(bug, &set(&["dtype=f32"]), None);
        assert!(k.triggers().is_empty(), "nothing in common: cannot be steered around");
    }

    #[test]
    fn a_named_misaligned_access_is_the_whole_trigger() {
        let mut k = Knowledge::default();
        let bug = bug_of("q");
        k.observe(bug.clone(), &set(&["q.align<16", "k.align<16", "dtype=f16"]), None);
        k.observe(bug.clone(), &set(&["q.align<16", "dtype=f32"]), Some("q.align<16".into()));
        assert_eq!(k.triggers(), Triggers::with([(set(&["q.align<16"]), true)]));
        // A name the case contradicts is a wrong guess.
        let mut k = Knowledge::default();
        k.observe(bug, &set(&["dtype=f32"]), Some("any.align<16".into()));
        assert_eq!(k.triggers(), Triggers::new([set(&["dtype=f32"])]));
    }

    #[test]
    fn a_fault_that_names_no_tensor_is_steered_to_aligned_tensors() {
        let mut fault = crate::testing::misaligned_fault("k", [16; 4]);
        assert_eq!(named_trigger(&fault).as_deref(), Some("any.align<16"));
        fault.kind = FindingKind::NanLeak;
        assert_eq!(named_trigger(&fault), None);
    }

    #[test]
    fn narrowing_triggers_are_left_one_case_in_ten_and_settled_ones_one_in_twenty_five() {
        let all: Vec<Steer> = (0..100_000).map(|i| steers(7, i)).collect();
        let narrowing = all.iter().filter(|s| !s.narrowing).count();
        let settled = all.iter().filter(|s| !s.settled).count();
        let both = all.iter().filter(|s| !s.narrowing && !s.settled).count();
        assert!((9_500..=10_500).contains(&narrowing), "{narrowing}");
        assert!((3_700..=4_300).contains(&settled), "{settled}");
        assert!((300..=500).contains(&both), "independent draws: {both}");
        assert_eq!((0..100).map(|i| steers(3, i)).collect::<Vec<_>>(), (0..100).map(|i| steers(3, i)).collect::<Vec<_>>());
    }

    #[test]
    fn a_trigger_settles_once_named_or_seen_in_enough_cases() {
        let mut k = Knowledge::default();
        let bug = bug_of("o");
        let f = set(&["seq_k%16"]);
        let only_settled = Steer { narrowing: false, settled: true };
        for seen in 1..=CONFIRMED_CASES {
            k.observe(bug.clone(), &f, None);
            assert_eq!(k.triggers().hits(&f, only_settled), (seen == CONFIRMED_CASES) as usize, "after {seen} cases");
        }
        assert_eq!(k.triggers().hits(&f, Steer { narrowing: true, settled: false }), 0);
    }

    #[test]
    fn a_case_waits_for_its_checkpoint_and_gives_up_on_abort() {
        let s = Steering::new(64);
        let abort = AtomicBool::new(false);
        assert!(s.triggers_for(127, &abort).is_some(), "the first two windows need nothing");
        let bug = bug_of("o");
        s.observe(bug, &set(&["o.nan"]), None);
        for i in 0..63 {
            s.delivered(i);
        }
        abort.store(true, Ordering::SeqCst);
        assert!(s.triggers_for(128, &abort).is_none(), "checkpoint 1 is not frozen yet");
        abort.store(false, Ordering::SeqCst);
        s.delivered(63);
        assert_eq!(s.triggers_for(128, &abort).unwrap().hits(&set(&["o.nan"]), ALL), 1);
        // A checkpoint is frozen once: later knowledge does not change it.
        s.observe(bug_of("x"), &set(&["x.nan"]), None);
        s.delivered(64);
        assert_eq!(s.triggers_for(191, &abort).unwrap().hits(&set(&["x.nan"]), ALL), 0);
    }

    #[test]
    fn one_case_at_a_time_the_first_checkpoints_come_early() {
        let s = Steering::new(1);
        let steered_by: Vec<u64> = [0, 7, 8, 15, 16, 63, 64, 127, 128, 200].iter().map(|&i| s.boundary(s.checkpoint_of(i) as u64)).collect();
        assert_eq!(steered_by, [0, 0, 4, 4, 8, 16, 32, 32, 64, 128]);
        for s in [Steering::new(1), Steering::new(200)] {
            for local in 0..2_000 {
                let walked = (1..).take_while(|&j| s.boundary(j) <= local).count() as u64;
                assert_eq!(s.passed(local), walked, "case {local}");
            }
        }
    }

    #[test]
    fn features_name_alignment_tails_and_values() {
        let m = crate::testing::attention();
        let mut case = crate::testing::example();
        case.tensors.entry("q".into()).or_insert_with(crate::core::case::TensorLayout::dense).offset_bytes = 2;
        let f = features(&m, &m.bind(case));
        assert!(f.contains("q.align<16") && f.contains("q.align<4") && f.contains("any.align<16"), "{f:?}");
        assert!(f.iter().any(|x| x.starts_with("q.row")) && f.iter().any(|x| x.starts_with("batch=1") || x.starts_with("batch>1")), "{f:?}");
        // Rows shorter than a vector cannot trap a vector access: no alignment class for them.
        let mut short = m.bind(crate::testing::example());
        short.dims.insert("head_dim".into(), 2);
        short.tensors.entry("q".into()).or_insert_with(crate::core::case::TensorLayout::dense).offset_bytes = 2;
        let f = features(&m, &short);
        assert!(f.contains("q.row<16") && !f.contains("q.align<16") && f.contains("q.align<4"), "{f:?}");
        assert!(f.iter().any(|x| x.starts_with("dtype=")));
    }
}
