//! Campaigns: many generated cases on one kernel, over a pool of workers, with every new
//! finding saved, escalated and reported. The main entry point is [`run`].
//!
//! A campaign is what `cudafuzz fuzz` does for each kernel, and what the gate's fuzz and
//! sanitizer steps do; `sweep` and `bench` draw from the same [`CaseStream`]. Like nextest's
//! dispatcher, [`run`] owns the loop and the state (the pool's results in case order, the
//! [`SeedKeeper`], the [`Escalator`], the [`Tally`]) and tells its caller what happened through
//! typed [`CampaignEvent`]s; the caller only renders them (a progress bar and `NEW` lines for
//! `fuzz`, report entries for the gate). The same seed and case count give the same events
//! whatever the number of workers, because the pool hands results back in case order.

mod desk;
mod escalate;
mod keep;
mod steer;
mod stream;

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use desk::Desk;
use escalate::{Done, Request};
pub use escalate::{Escalation, Escalator};
pub use keep::{case_size, Kept, SeedKeeper};
pub use steer::{features, named_trigger, Features, Steering, Triggers};
pub use stream::{
    campaign_case, generated_case, past_int32_slot, redrawn_case, CaseStream, PAST_INT32_AT, PAST_INT32_EVERY, PAST_INT32_FIRST_BLOCK, PAST_INT32_NARROW_AT,
};

use crate::core::case::Case;
use crate::core::coverage::CoverageMap;
use crate::core::finding::{Explanation, Finding};
use crate::core::verdict::{Outcome, RunOptions, Verdict};
use crate::run::supervisor::{Delivery, Pool, Slot, SupervisorError, DEADLINE_GRACE};
use crate::run::trace;

/// Counts of a batch of verdicts.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Tally {
    /// Cases every oracle passed.
    pub pass: u64,
    /// Cases with at least one finding.
    pub fail: u64,
    /// Cases the harness could not run.
    pub error: u64,
    /// Cases a Python target refused with an exception of its own.
    pub rejected: u64,
}

impl Tally {
    /// Counts one verdict.
    pub fn add(&mut self, v: &Verdict) {
        match v.outcome {
            Outcome::Pass => self.pass += 1,
            Outcome::Fail { .. } => self.fail += 1,
            Outcome::Rejected { .. } => self.rejected += 1,
            _ => self.error += 1,
        }
    }

    /// Adds another tally.
    pub fn absorb(&mut self, other: &Tally) {
        self.pass += other.pass;
        self.fail += other.fail;
        self.error += other.error;
        self.rejected += other.rejected;
    }

    /// Cases counted.
    pub fn total(&self) -> u64 {
        self.pass + self.fail + self.error + self.rejected
    }

    /// The exit status these counts call for: findings first, then harness errors.
    pub fn exit_code(&self) -> i32 {
        if self.fail > 0 {
            crate::core::exit::FINDINGS
        } else if self.error > 0 {
            crate::core::exit::SETUP
        } else {
            crate::core::exit::OK
        }
    }
}

/// One campaign to run.
pub struct CampaignSpec<'a> {
    /// Where the cases come from (kernel, seed, shard, contract side).
    pub stream: CaseStream<'a>,
    /// At most this many cases.
    pub cases: u64,
    /// Stop handing out cases at this time.
    pub deadline: Option<Instant>,
    /// Stop after this many new bugs (time to first finding).
    pub stop_after: Option<usize>,
    /// Run switches of every case.
    pub options: RunOptions,
    /// The watchdog's limit for one kernel run.
    pub timeout: Duration,
    /// Steer most cases away from the bugs already found (the `steer` module).
    pub steer: bool,
}

/// How far a campaign has got, as events report it.
#[derive(Debug, Default)]
pub struct Progress {
    /// New signatures so far.
    pub new_findings: usize,
    /// New bugs so far.
    pub new_bugs: usize,
    /// Kernel paths the cases reached (coverage runs).
    pub kernel_paths: CoverageMap,
}

/// Something that happened in a campaign, with the time since it started.
#[derive(Debug)]
pub struct CampaignEvent<'a> {
    /// Time since the campaign started.
    pub elapsed: Duration,
    /// What happened.
    pub kind: EventKind<'a>,
}

/// What happened; every finding event carries the local case number and the case.
#[derive(Debug)]
#[non_exhaustive]
pub enum EventKind<'a> {
    /// A finding with a new signature, as soon as its case is filed; its seed was saved.
    NewFinding {
        /// Local case number.
        index: u64,
        /// The case.
        case: &'a Case,
        /// The finding.
        finding: &'a Finding,
        /// The saved seed.
        seed: &'a Path,
        /// Whether it was sent to be named by a sanitizer re-run: its bug is announced
        /// ([`EventKind::NewBug`]) when the answer is filed, seconds later.
        naming: bool,
        /// Whether a finding of its signature was already shown ([`EventKind::FoundEarly`]).
        shown: bool,
    },
    /// A finding with a signature not kept yet, in a case whose verdict came in while earlier
    /// cases were still out: shown at once, before its case is filed in order (which brings
    /// its [`EventKind::NewFinding`], perhaps from an earlier case of the same signature).
    /// Only where findings are named (the line that waits for no one).
    FoundEarly {
        /// Local case number.
        index: u64,
        /// The finding.
        finding: &'a Finding,
    },
    /// A bug no earlier case showed: after the case's findings and their escalation.
    NewBug {
        /// Local case number.
        index: u64,
        /// The bug as filed so far.
        bug: &'a crate::core::triage::Bug,
    },
    /// A known signature in a smaller case; this seed was saved beside the earlier one.
    SmallerCase {
        /// Local case number.
        index: u64,
        /// The case.
        case: &'a Case,
        /// The finding.
        finding: &'a Finding,
        /// The saved seed.
        seed: &'a Path,
    },
    /// A sanitizer finding that escalating a new finding gave.
    Named {
        /// Local case number.
        index: u64,
        /// The case.
        case: &'a Case,
        /// The sanitizer's finding.
        finding: &'a Finding,
        /// Whether its seed was saved.
        kept: &'a Kept,
    },
    /// A new finding's re-run named only bugs already announced.
    NamedKnown {
        /// Local case number.
        index: u64,
        /// The bugs.
        bugs: &'a [crate::core::triage::BugId],
    },
    /// A new finding that was not escalated: an earlier re-run explains it.
    NotNamed {
        /// Local case number.
        index: u64,
        /// The new finding's seed.
        seed: &'a Path,
        /// The earlier re-run.
        why: &'a Explanation,
    },
    /// The campaign stopped (`--stop-after`, its time) while these provisional bugs' cases were
    /// still being named: findings not yet named, which may be bugs already announced. They
    /// stay in the bug table as provisional.
    NotYetNamed {
        /// The provisional bugs.
        bugs: &'a [crate::core::triage::BugId],
    },
    /// A new finding was escalated, but the tools named nothing.
    EscalationSilent {
        /// Why, as one sentence.
        note: &'a str,
    },
    /// A Python target refused a case with an exception of a type it had not raised before in
    /// this campaign (later ones are only counted).
    Rejected {
        /// The case.
        case: &'a Case,
        /// The exception's type.
        exception: &'a str,
        /// Its message.
        message: &'a str,
    },
    /// A sanitizer record of a Python target's framework (not a finding), the first of its
    /// kind in this campaign ([`crate::core::verdict::Verdict::notes`]).
    Note {
        /// The case.
        case: &'a Case,
        /// The note.
        note: &'a str,
    },
    /// The harness could not run a case.
    HarnessError {
        /// The case.
        case: &'a Case,
        /// Why.
        message: &'a str,
    },
    /// Case `index` is done (run, or skipped outside the contract): after its other events.
    CaseDone {
        /// Local case number.
        index: u64,
        /// Its verdict; `None` when skipped.
        verdict: Option<&'a Verdict>,
        /// The campaign so far.
        progress: &'a Progress,
    },
}

/// What a campaign did, complete or not.
#[derive(Debug, Default)]
pub struct CampaignSummary {
    /// Verdict counts of the cases that ran.
    pub tally: Tally,
    /// Cases skipped outside the contract.
    pub skipped: u64,
    /// Cases that ran re-drawn away from a known bug's trigger (the `steer` module).
    pub steered: u64,
    /// New signatures, and the kernel paths reached.
    pub progress: Progress,
    /// Wall time.
    pub elapsed: Duration,
}

/// Runs a campaign on `pool`: every case of `spec`'s stream in order, each finding kept by
/// `keeper` and, when new and native, named by `escalator` on a thread of its own while the
/// workers go on. `on_event` sees what happened, in case order, a bug when it is filed for good
/// (after its case's re-run). The summary is returned with the error that stopped the campaign,
/// if any.
pub fn run(
    pool: &mut Pool,
    spec: &CampaignSpec<'_>,
    keeper: &mut SeedKeeper,
    escalator: Option<&mut Escalator>,
    on_event: &mut dyn FnMut(CampaignEvent<'_>),
) -> (CampaignSummary, Result<(), SupervisorError>) {
    let started = Instant::now();
    trace::start(started);
    let mut summary = CampaignSummary::default();
    let m = spec.stream.manifest();
    let steering = spec.steer.then(|| Steering::new(pool.max_chunk() as u64));
    let make = |i: u64, abort: &AtomicBool| match &steering {
        None => spec.stream.case(i),
        Some(s) => {
            let triggers = s.triggers_for(i, abort)?;
            let (case, steered) = spec.stream.steered(i, &triggers);
            if steered {
                s.mark_steered(i);
            }
            case
        }
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let result = std::thread::scope(|scope| {
        let (done_tx, done_rx) = mpsc::channel::<Done>();
        let requests = escalator.map(|esc| {
            let (tx, rx) = mpsc::channel::<Request>();
            let cancel = cancel.clone();
            scope.spawn(move || esc.serve(m, spec.timeout, rx, done_tx, cancel));
            tx
        });
        let mut desk = Desk::new(keeper, requests);
        let mut emit = |kind: EventKind<'_>| {
            trace_event(&kind);
            on_event(CampaignEvent { elapsed: started.elapsed(), kind })
        };
        let mut stopped = false;
        let mut on_delivery = |delivery: Delivery<'_>| -> Result<ControlFlow<()>, SupervisorError> {
            // Answers that came back belong to earlier cases: filed first, and on every tick,
            // so that a named bug is shown as soon as its re-run ends.
            while let Ok(done) = done_rx.try_recv() {
                if desk.complete(done, spec, &mut summary, &mut emit)?.is_break() {
                    stopped = true;
                }
            }
            let (i, slot) = match delivery {
                Delivery::Case(i, slot) => (i, slot),
                Delivery::Early(i, verdict) => {
                    desk.early(i, verdict, &mut emit);
                    return Ok(if stopped { ControlFlow::Break(()) } else { ControlFlow::Continue(()) });
                }
                Delivery::Tick => return Ok(if stopped { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }),
            };
            let traced = trace_note(&slot, m);
            let flow = desk.deliver(i, slot, spec, steering.as_ref(), &mut summary, &mut emit)?;
            let steered = steering.as_ref().is_some_and(|s| s.delivered(i));
            summary.steered += steered as u64;
            trace_case(i, traced, steered, summary.progress.new_bugs);
            stopped |= flow.is_break();
            Ok(if stopped { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
        };
        let result = pool.run_indexed_ticking(spec.cases, spec.deadline, m, &spec.options, spec.timeout, &make, &mut on_delivery);
        // The re-runs still out are waited for, unless the campaign stopped early or its time
        // is up (a grace past the deadline); then they are given up, their bugs provisional.
        desk.close_requests();
        let until = spec.deadline.map(|d| d.max(Instant::now()) + DEADLINE_GRACE);
        let mut result = result;
        while desk.awaiting() && result.is_ok() && !stopped {
            let wait = until.map_or(Duration::from_secs(3600), |u| u.saturating_duration_since(Instant::now()));
            match done_rx.recv_timeout(wait) {
                Ok(done) => match desk.complete(done, spec, &mut summary, &mut emit) {
                    Ok(flow) => stopped = flow.is_break(),
                    Err(e) => result = Err(e),
                },
                Err(_) => break,
            }
        }
        cancel.store(true, Ordering::SeqCst);
        desk.finish(&mut summary, &mut emit);
        result
    });
    summary.elapsed = started.elapsed();
    trace::stop();
    (summary, result)
}

/// What the trace (`CUDAFUZZ_TRACE`, [`trace`]) records of a result before it is filed.
struct TraceNote {
    outcome: &'static str,
    times: Option<crate::core::verdict::StageTimes>,
    /// The tensor the case pushed past 2³¹ elements, if it did (which wrap a case probed).
    pushed: Option<String>,
}

/// The [`TraceNote`] of a result: nothing when not tracing.
fn trace_note(slot: &Slot, m: &crate::core::manifest::Manifest) -> Option<TraceNote> {
    if !trace::on() {
        return None;
    }
    Some(match slot {
        Slot::Skipped => TraceNote { outcome: "skipped", times: None, pushed: None },
        Slot::Ran(case, v) => {
            let outcome = match v.outcome {
                Outcome::Pass => "pass",
                Outcome::Fail { .. } => "fail",
                Outcome::Rejected { .. } => "rejected",
                _ => "error",
            };
            let pushed = crate::core::plan::Plan::new(case, m).ok().and_then(|p| p.tensors.iter().find(|t| t.reaches_past_int32()).map(|t| t.name.clone()));
            TraceNote { outcome, times: Some(v.times.clone()), pushed }
        }
    })
}

/// The trace line of a finding's events (new, named, filed as a bug), for the timeline from a
/// case's verdict to the bug on the screen.
fn trace_event(kind: &EventKind<'_>) {
    if !trace::on() {
        return;
    }
    let (event, index) = match kind {
        EventKind::NewFinding { index, .. } => ("new_finding", Some(*index)),
        EventKind::FoundEarly { index, .. } => ("found_early", Some(*index)),
        EventKind::NewBug { index, .. } => ("new_bug", Some(*index)),
        EventKind::Named { index, .. } => ("named", Some(*index)),
        EventKind::NotNamed { index, .. } => ("not_named", Some(*index)),
        EventKind::EscalationSilent { .. } => ("escalation_silent", None),
        EventKind::NotYetNamed { .. } => ("not_yet_named", None),
        EventKind::NamedKnown { index, .. } => ("named_known", Some(*index)),
        _ => return,
    };
    trace::line(serde_json::json!({ "event": event, "index": index }));
}

/// A case's trace line: its number, outcome, whether it was steered, bugs so far, the worker's
/// stage times, and the tensor it pushed past 2³¹ elements.
fn trace_case(index: u64, noted: Option<TraceNote>, steered: bool, bugs: usize) {
    if let Some(n) = noted {
        trace::line(serde_json::json!({ "case": index, "outcome": n.outcome, "steered": steered, "bugs": bugs, "times": n.times, "pushed": n.pushed }));
    }
}
