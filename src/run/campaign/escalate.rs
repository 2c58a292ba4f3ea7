//! Escalation: a new native finding's case re-run under compute-sanitizer, to name the bug
//! (kind, source line, tensor, distance past its end).
//!
//! [`Escalator`] owns a supervisor per tool, and remembers the misaligned faults it has already
//! traced to a tensor ([`ExplainedFaults`]), so a fault that an earlier re-run explains is not
//! re-run for every new set of unaligned tensors.
//!
//! A misaligned fault is first named on a smaller case of the same configuration
//! ([`crate::core::generate::smaller_for_naming`]: same layouts and offsets, dims lowered), under
//! memcheck alone: the tool's time grows with the threads that fault. That answer stands when
//! memcheck names a misaligned access of a tensor the fault's case left unaligned; otherwise the
//! full case is re-run as before. The named findings then say, in their sentence, that they were
//! named on the smaller case, whose seed is the one kept for them (a smaller case may reach the
//! fault in another phase of the kernel, so its site is the smaller case's).
//!
//! A case that shows only wrong values goes to racecheck first, on the smaller case of the same
//! configuration (a race is the likeliest cause a tool can name, racecheck sees a hazard whether
//! or not the race went wrong, and its time grows with the case: seconds on a full attention
//! case); when it names nothing there, the full case is re-run under the tools in order.
//!
//! A campaign does not wait for a re-run (seconds under a sanitizer): [`Escalator::serve`] runs
//! beside it on its own thread, taking [`Request`]s in order and answering each with a [`Done`],
//! while the workers go on with later cases.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use crate::core::case::Case;
use crate::core::finding::{misaligned_tensor_of, ExplainedFaults, Explanation, Finding, FindingKind};
use crate::core::manifest::Manifest;
use crate::core::verdict::{Outcome, RunOptions, Verdict};
use crate::run::supervisor::Supervisor;

/// What one escalation gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Escalation {
    /// The sanitizer's findings for the case: empty when the re-run failed only natively
    /// (under a sanitizer, a kernel's own fault can stop it before any tool reports).
    Named(Vec<Finding>),
    /// The sanitizer's findings on a smaller case of the same configuration (see the module
    /// docs), which named the fault's misaligned tensor.
    NamedSmaller {
        /// The findings, each saying it was named on the smaller case.
        named: Vec<Finding>,
        /// The smaller case.
        case: Box<Case>,
    },
    /// Not re-run: an earlier re-run already explains this fault.
    Explained(Explanation),
    /// Re-run, but the tools named nothing: why, as one sentence.
    Silent(String),
}

/// Re-runs new findings under compute-sanitizer (a supervisor per tool, whose worker runs under
/// it), remembering the misaligned faults it has already traced to a tensor.
///
/// The tools run in order and stop at the first that names something: memcheck names a fault's
/// site, and racecheck (a second sanitizer process, seconds more while the campaign waits) is
/// run only for a finding memcheck cannot explain, except for wrong values (see the module
/// docs).
pub struct Escalator {
    sups: Vec<Supervisor>,
    explained: ExplainedFaults,
}

impl Escalator {
    /// An escalator over supervisors already set up with their sanitizer passes, in the order
    /// the tools should be tried.
    pub fn new(sups: Vec<Supervisor>) -> Escalator {
        Escalator { sups, explained: ExplainedFaults::default() }
    }

    /// The sanitizer findings of the case behind `finding` (campaign index `index`), or the
    /// earlier re-run that already explains it (then nothing is run). `value_only`: the case
    /// showed only wrong values (no fault, no damaged memory), whose likeliest named cause is a
    /// race, so racecheck goes first.
    pub fn name(&mut self, finding: &Finding, case: &Case, m: &Manifest, timeout: Duration, index: u64, value_only: bool) -> Escalation {
        if let Some(e) = self.explained.covering(finding) {
            return Escalation::Explained(e.clone());
        }
        let racecheck = self.sups.iter().position(|s| s.tool_name() == Some("racecheck"));
        let mut order: Vec<usize> = (0..self.sups.len()).collect();
        if let (true, Some(r)) = (value_only, racecheck) {
            match crate::core::generate::smaller_for_naming(case, m) {
                Some(small) => {
                    if let Escalation::Named(named) = self.rerun(&small, m, timeout, &[r]) {
                        if !named.is_empty() {
                            return smaller(named, small, case, "configuration");
                        }
                    }
                }
                // No smaller case: racecheck goes first on this one.
                None => order.sort_by_key(|&i| i != r),
            }
        } else if let Some(small) = self.on_smaller(finding, case, m, timeout, index) {
            return small;
        }
        let named = self.rerun(case, m, timeout, &order);
        if let Escalation::Named(named) = &named {
            self.explained.record(finding, named, index);
        }
        named
    }

    /// A misaligned fault named on the smaller case (see the module docs), when memcheck names
    /// a misaligned access there of a tensor unaligned in the fault's case.
    fn on_smaller(&mut self, finding: &Finding, case: &Case, m: &Manifest, timeout: Duration, index: u64) -> Option<Escalation> {
        let memcheck = self.sups.first().is_some_and(|s| s.tool_name() == Some("memcheck"));
        if finding.kind != FindingKind::MisalignedAddress || !memcheck {
            return None;
        }
        let small = crate::core::generate::smaller_for_naming(case, m)?;
        let Escalation::Named(named) = self.rerun(&small, m, timeout, &[0]) else { return None };
        if !named.iter().any(|n| misaligned_tensor_of(n, finding).is_some()) {
            return None;
        }
        self.explained.record(finding, &named, index);
        Some(smaller(named, small, case, "layout"))
    }

    /// The sanitizer findings of one case from the first of the tools `order` (indices into
    /// the supervisors) that names any, or why there are none.
    fn rerun(&mut self, case: &Case, m: &Manifest, timeout: Duration, order: &[usize]) -> Escalation {
        let opts = RunOptions { determinism: false, ..RunOptions::default() };
        let mut last = Escalation::Silent("the sanitizer tools reported nothing for this case".into());
        for &i in order {
            let Some(sup) = self.sups.get_mut(i) else { continue };
            crate::run::trace::line(serde_json::json!({ "event": "rerun_begin", "tool": sup.tool_name() }));
            let ran = sup.run(case, m, &opts, timeout);
            crate::run::trace::line(serde_json::json!({ "event": "rerun_end", "tool": sup.tool_name(), "ok": ran.is_ok() }));
            last = match ran {
                Ok(Verdict { outcome: Outcome::Fail { findings }, .. }) => {
                    Escalation::Named(findings.into_iter().filter(|f| f.oracle.is_sanitizer()).collect())
                }
                Ok(Verdict { outcome: Outcome::Error { message }, .. }) => Escalation::Silent(format!("sanitizer re-run: {message}")),
                Ok(_) => Escalation::Silent("the sanitizer tools reported nothing for this case".into()),
                Err(e) => Escalation::Silent(format!("sanitizer re-run failed: {e}")),
            };
            if matches!(&last, Escalation::Named(named) if !named.is_empty()) {
                break;
            }
        }
        last
    }
}

/// Findings named on `small`, a smaller case of `case`'s `what` (layout, configuration): each
/// says so in its sentence, and the seed kept for them holds the smaller case.
fn smaller(named: Vec<Finding>, small: Case, case: &Case, what: &str) -> Escalation {
    let sizes = small.dims.iter().filter(|(k, &v)| v != case.dim(k)).map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
    let named = named
        .into_iter()
        .map(|mut n| {
            n.detail = format!("{} (named on a smaller case of the same {what}: {sizes}; the seed holds that case)", n.detail);
            n
        })
        .collect();
    Escalation::NamedSmaller { named, case: Box::new(small) }
}

/// A new native finding of campaign case `index` to name.
pub struct Request {
    /// Local case number.
    pub index: u64,
    /// Global case number (shards).
    pub global: u64,
    /// The case.
    pub case: Case,
    /// The finding.
    pub finding: Finding,
    /// The finding's saved seed.
    pub seed: std::path::PathBuf,
    /// Whether the case showed only wrong values (see [`Escalator::name`]).
    pub value_only: bool,
}

/// A [`Request`] answered.
pub struct Done {
    /// The request.
    pub request: Request,
    /// What the re-run gave.
    pub escalation: Escalation,
}

impl Escalator {
    /// Names each request's finding in turn until `requests` closes, sending every answer to
    /// `done`. Once `cancel` is set, a running re-run is given up and later requests are
    /// dropped unanswered.
    pub fn serve(&mut self, m: &Manifest, timeout: Duration, requests: Receiver<Request>, done: Sender<Done>, cancel: Arc<AtomicBool>) {
        for sup in &mut self.sups {
            sup.cancel_on(Some(cancel.clone()));
        }
        // The first tool's worker starts now, not when the first finding arrives: a sanitizer
        // process takes seconds to start, a Python target's worker many more.
        if let Some(first) = self.sups.first_mut() {
            first.prewarm(m);
        }
        for request in requests {
            if cancel.load(Ordering::SeqCst) {
                break;
            }
            let escalation = self.name(&request.finding, &request.case, m, timeout, request.global, request.value_only);
            if let Some(first) = self.sups.first_mut() {
                first.prewarm(m);
            }
            if cancel.load(Ordering::SeqCst) || done.send(Done { request, escalation }).is_err() {
                break;
            }
        }
        for sup in &mut self.sups {
            sup.cancel_on(None);
        }
    }
}
