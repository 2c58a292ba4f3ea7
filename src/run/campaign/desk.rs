//! The campaign's desk: what happens to each result, in case order. Its findings are kept as
//! seeds, the new native ones are sent to be named by a sanitizer, the case is filed into bugs,
//! steering learns from it, and bugs are announced.
//!
//! Naming runs beside the campaign ([`super::Escalator::serve`]): the workers do not wait for it.
//! Until a case's re-run comes back, the provisional bugs that case shows are *held*: one may turn
//! out to be a site a sanitizer names, and it is announced once, under its final id, when the
//! answer is filed ([`Desk::complete`]). A bug keyed by a site is final and announced at once.
//! A provisional bug of a wrong value (no fault) whose re-run came back with the tools silent
//! (passing under them, or failing only natively) is *settled*: nothing names a value bug's
//! site, so it is announced then, even while re-runs of its other cases are out (a value bug
//! shown 20 s late, after every new signature of it had been re-run, was the alternative). A
//! fault's provisional bug is never settled so: a later re-run may still name its site, and
//! announcing it early would show one bug twice.
//! Whatever is still held when the campaign ends is announced as it stands.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::mpsc::Sender;

use super::escalate::{Done, Request};
use super::steer::{features, named_trigger, Steering};
use super::{CampaignSpec, CampaignSummary, Escalation, EventKind, Kept, SeedKeeper};
use crate::core::case::Case;
use crate::core::finding::Finding;
use crate::core::triage::{BugId, BugKey};
use crate::core::verdict::Outcome;
use crate::run::supervisor::{Slot, SupervisorError};

/// Files results and escalation answers; see the module docs.
pub(super) struct Desk<'k> {
    keeper: &'k mut SeedKeeper,
    requests: Option<Sender<Request>>,
    /// Cases whose re-runs are still out: local case number -> (case hash, re-runs out).
    awaiting: BTreeMap<u64, (String, usize)>,
    /// The first case each bug was filed from.
    first_seen: BTreeMap<BugId, u64>,
    /// Provisional value bugs a silent re-run settled (see the module docs): never held.
    settled: BTreeSet<BugId>,
    /// The exception types a Python target has refused cases with.
    rejections: std::collections::BTreeSet<String>,
    /// The notes shown so far (each is shown once).
    notes: std::collections::BTreeSet<String>,
    /// Signatures shown ahead of case order ([`Desk::early`]).
    shown_early: BTreeSet<crate::core::finding::Signature>,
}

impl<'k> Desk<'k> {
    /// A desk that keeps seeds with `keeper` and sends new native findings to `requests`
    /// (none: findings are not named).
    pub(super) fn new(keeper: &'k mut SeedKeeper, requests: Option<Sender<Request>>) -> Desk<'k> {
        Desk {
            keeper,
            requests,
            awaiting: BTreeMap::new(),
            first_seen: BTreeMap::new(),
            settled: BTreeSet::new(),
            rejections: Default::default(),
            shown_early: BTreeSet::new(),
            notes: Default::default(),
        }
    }

    /// Whether re-runs are still out.
    pub(super) fn awaiting(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// No more findings will be sent to be named.
    pub(super) fn close_requests(&mut self) {
        self.requests = None;
    }

    /// Case `i`'s result: counted, its findings kept and filed, new native ones sent to be
    /// named, steering told, bugs announced. Says whether the campaign goes on.
    pub(super) fn deliver(
        &mut self,
        i: u64,
        slot: Slot,
        spec: &CampaignSpec<'_>,
        steering: Option<&Steering>,
        summary: &mut CampaignSummary,
        emit: &mut dyn FnMut(EventKind<'_>),
    ) -> Result<ControlFlow<()>, SupervisorError> {
        let m = spec.stream.manifest();
        let (case, verdict) = match slot {
            Slot::Skipped => {
                summary.skipped += 1;
                emit(EventKind::CaseDone { index: i, verdict: None, progress: &summary.progress });
                return Ok(ControlFlow::Continue(()));
            }
            Slot::Ran(case, verdict) => (case, verdict),
        };
        summary.tally.add(&verdict);
        if let Some(c) = &verdict.coverage {
            summary.progress.kernel_paths.add(c);
        }
        match &verdict.outcome {
            Outcome::Fail { findings } => {
                let mut filed: Vec<(Finding, Option<PathBuf>)> = Vec::new();
                let mut sent = 0;
                let value_only = findings.iter().all(|f| f.kind.is_wrong_value());
                for finding in findings {
                    let seed = match self.keeper.keep(m, &case, finding)? {
                        Kept::Known => None,
                        Kept::Smaller(seed) => {
                            emit(EventKind::SmallerCase { index: i, case: &case, finding, seed: &seed });
                            Some(seed)
                        }
                        Kept::New(seed) => {
                            summary.progress.new_findings += 1;
                            let naming = !finding.oracle.is_sanitizer() && self.send(i, spec.stream.global(i), &case, finding, &seed, value_only);
                            sent += naming as usize;
                            let shown = self.shown_early.contains(&finding.signature());
                            emit(EventKind::NewFinding { index: i, case: &case, finding, seed: &seed, naming, shown });
                            Some(seed)
                        }
                    };
                    filed.push((finding.clone(), seed));
                }
                let bugs = self.keeper.observe(m, &case, filed);
                self.seen(i, &bugs);
                if sent > 0 {
                    self.awaiting.insert(i, (crate::core::corpus::case_hash(&case), sent));
                }
                if let Some(s) = steering {
                    learn(s, m, &case, findings);
                }
                self.announce(i, summary, emit);
            }
            Outcome::Error { message } => emit(EventKind::HarnessError { case: &case, message }),
            // Only the first case of each exception type is shown; the tally counts them all.
            Outcome::Rejected { exception, message } if self.rejections.insert(exception.clone()) => {
                emit(EventKind::Rejected { case: &case, exception, message })
            }
            _ => {}
        }
        for note in &verdict.notes {
            if self.notes.insert(note.clone()) {
                emit(EventKind::Note { case: &case, note });
            }
        }
        emit(EventKind::CaseDone { index: i, verdict: Some(&verdict), progress: &summary.progress });
        Ok(stop_here(spec, summary))
    }

    /// Case `i` failed while earlier cases are still out: each of its native findings whose
    /// signature is not kept yet is shown now ([`EventKind::FoundEarly`]), once per signature,
    /// where findings are named. Nothing is kept or filed: that waits for the case's turn.
    pub(super) fn early(&mut self, i: u64, verdict: &crate::core::verdict::Verdict, emit: &mut dyn FnMut(EventKind<'_>)) {
        let Outcome::Fail { findings } = &verdict.outcome else { return };
        if self.requests.is_none() {
            return;
        }
        for finding in findings.iter().filter(|f| !f.oracle.is_sanitizer()) {
            let signature = finding.signature();
            if !self.keeper.knows(&signature) && self.shown_early.insert(signature) {
                emit(EventKind::FoundEarly { index: i, finding });
            }
        }
    }

    /// A re-run came back: what it named is kept and filed with its case, and the bugs it held
    /// are announced. Says whether the campaign goes on.
    pub(super) fn complete(
        &mut self,
        done: Done,
        spec: &CampaignSpec<'_>,
        summary: &mut CampaignSummary,
        emit: &mut dyn FnMut(EventKind<'_>),
    ) -> Result<ControlFlow<()>, SupervisorError> {
        let m = spec.stream.manifest();
        let Request { index: i, case, seed, finding, .. } = done.request;
        let mut case_bugs = Vec::new();
        // The tools named nothing: the re-run passed under them, or failed only natively.
        let unnamed = matches!(&done.escalation, Escalation::Silent(_)) || matches!(&done.escalation, Escalation::Named(n) if n.is_empty());
        if unnamed && finding.oracle != crate::core::finding::Oracle::CudaStatus {
            let bug = self.awaiting.get(&i).and_then(|(id, _)| self.keeper.triage().bug_of(id, &finding));
            self.settled.extend(bug.filter(BugId::is_provisional));
        }
        // Named findings are filed with the case that showed the fault (so its provisional bug
        // turns into the site); their seeds hold the case they were named on.
        let (named, smaller) = match done.escalation {
            Escalation::Named(named) => (Some(named), None),
            Escalation::NamedSmaller { named, case: smaller } => (Some(named), Some(*smaller)),
            Escalation::Explained(why) => {
                emit(EventKind::NotNamed { index: i, seed: &seed, why: &why });
                (None, None)
            }
            Escalation::Silent(note) => {
                emit(EventKind::EscalationSilent { note: &note });
                (None, None)
            }
        };
        if let Some(named) = named {
            let named_on = smaller.as_ref().unwrap_or(&case);
            let mut filed = Vec::new();
            for n in named {
                let kept = self.keeper.keep(m, named_on, &n)?;
                emit(EventKind::Named { index: i, case: named_on, finding: &n, kept: &kept });
                let seed = match kept {
                    Kept::New(p) | Kept::Smaller(p) => Some(p),
                    Kept::Known => None,
                };
                filed.push((n, seed));
            }
            case_bugs = self.keeper.observe(m, &case, filed);
            self.seen(i, &case_bugs);
        }
        if let Some((_, out)) = self.awaiting.get_mut(&i) {
            *out -= 1;
            if *out == 0 {
                self.awaiting.remove(&i);
            }
        }
        // The case's finding was shown when it was filed: when its re-run names only bugs
        // already announced, that is said too.
        let known: Vec<BugId> = case_bugs.iter().filter(|b| self.keeper.is_announced(b)).cloned().collect();
        self.announce(i, summary, emit);
        if !known.is_empty() && known.len() == case_bugs.len() {
            emit(EventKind::NamedKnown { index: i, bugs: &known });
        }
        Ok(stop_here(spec, summary))
    }

    /// The campaign is over. Re-runs still out were given up (it stopped early, or its time
    /// ran out): the provisional bugs they held are not announced as bugs, which they may not
    /// be (a twin of a bug named meanwhile), but counted as findings not yet named; they stay
    /// in the bug table as provisional.
    pub(super) fn finish(&mut self, summary: &mut CampaignSummary, emit: &mut dyn FnMut(EventKind<'_>)) {
        let held = self.held();
        self.announce(0, summary, emit);
        let unnamed = self.keeper.unannounced_of(&held);
        if !unnamed.is_empty() {
            emit(EventKind::NotYetNamed { bugs: &unnamed });
        }
        self.awaiting.clear();
    }

    /// The provisional bugs of the cases whose re-runs are still out.
    fn held(&self) -> BTreeSet<BugId> {
        self.awaiting.values().flat_map(|(id, _)| self.keeper.triage().bugs_of(id)).filter(|b| b.is_provisional() && !self.settled.contains(b)).collect()
    }

    /// Sends a finding to be named; false when nothing names findings (or it stopped).
    /// `value_only`: the case showed only wrong values (racecheck goes first).
    fn send(&mut self, index: u64, global: u64, case: &Case, finding: &Finding, seed: &std::path::Path, value_only: bool) -> bool {
        let Some(tx) = &self.requests else { return false };
        tx.send(Request { index, global, case: case.clone(), finding: finding.clone(), seed: seed.to_path_buf(), value_only }).is_ok()
    }

    fn seen(&mut self, i: u64, bugs: &[BugId]) {
        for b in bugs {
            self.first_seen.entry(b.clone()).or_insert(i);
        }
    }

    /// Announces every bug filed and not yet announced that no re-run still out may re-file.
    fn announce(&mut self, i: u64, summary: &mut CampaignSummary, emit: &mut dyn FnMut(EventKind<'_>)) {
        let held = self.held();
        for bug in self.keeper.announce(&held) {
            summary.progress.new_bugs += 1;
            let index = self.first_seen.get(&bug.id).copied().unwrap_or(i);
            emit(EventKind::NewBug { index, bug: &bug });
        }
    }
}

/// Whether `--stop-after` is reached.
fn stop_here(spec: &CampaignSpec<'_>, summary: &CampaignSummary) -> ControlFlow<()> {
    if spec.stop_after.is_some_and(|n| summary.progress.new_bugs >= n) {
        ControlFlow::Break(())
    } else {
        ControlFlow::Continue(())
    }
}

/// Tells steering which bugs a failing case showed, keyed by the case's own findings only (a
/// sanitizer's answer arrives at a time that depends on the workers, and steering must not).
fn learn(s: &Steering, m: &crate::core::manifest::Manifest, case: &Case, findings: &[Finding]) {
    let sanitized = findings.iter().any(|f| f.oracle.is_sanitizer());
    let features = features(m, case);
    for f in findings {
        if let Some(key) = BugKey::of(f, sanitized) {
            s.observe(key.id(), &features, named_trigger(f));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::core::finding::{FindingKind, Oracle, SanitizerKind, SourceLocation};
    use crate::core::verdict::{RunOptions, Verdict};
    use crate::run::campaign::CaseStream;

    fn fault(alignment: [u64; 4]) -> Finding {
        crate::testing::misaligned_fault("simple_attn", alignment)
    }

    fn q_site(alignment: [u64; 4]) -> Finding {
        Finding {
            kind: FindingKind::SanitizerMemory,
            oracle: Oracle::Memcheck,
            tensor: Some("q".into()),
            source: Some(SourceLocation { file: "simple_attn.cu".into(), line: 122, function: None }),
            access_size: Some(16),
            sanitizer_kind: Some(SanitizerKind::from("invalid_global_read_misaligned")),
            ..fault(alignment)
        }
    }

    fn failed(f: Finding) -> Slot {
        let verdict: Verdict = serde_json::from_value(serde_json::json!({
            "outcome": "fail", "findings": [f], "contract": {"verdict": "inside"}, "reference": "cpu", "sticky": true,
            "times": {"prepare_us": 0, "compile_us": 0, "upload_us": 0, "reference_us": 0, "kernel_us": 0, "judge_us": 0}
        }))
        .unwrap();
        let case = crate::core::case::Case { seed: f.alignment[0].1, ..crate::testing::example() };
        Slot::Ran(Box::new(case), Box::new(verdict))
    }

    /// Delivers cases and answers, returning the ids of the bugs announced at each step.
    struct Bench {
        dir: tempfile::TempDir,
        m: crate::core::manifest::Manifest,
    }

    impl Bench {
        fn new() -> Bench {
            Bench { dir: tempfile::tempdir().unwrap(), m: crate::testing::attention() }
        }

        fn keeper(&self) -> SeedKeeper {
            SeedKeeper::new(self.dir.path().join("seeds"))
        }

        fn spec(&self) -> CampaignSpec<'_> {
            CampaignSpec {
                stream: CaseStream::campaign(&self.m, 0, false),
                cases: 10,
                deadline: None,
                stop_after: None,
                options: RunOptions::default(),
                timeout: Duration::from_secs(1),
                steer: false,
            }
        }
    }

    fn announced(events: &mut Vec<String>) -> impl FnMut(EventKind<'_>) + '_ {
        |e| {
            if let EventKind::NewBug { index, bug } = e {
                events.push(format!("{index}:{}", bug.id.as_str().chars().next().unwrap()));
            }
        }
    }

    #[test]
    fn a_provisional_bug_waits_for_its_case_to_be_named_and_is_announced_once_under_the_site() {
        let b = Bench::new();
        let spec = b.spec();
        let mut keeper = b.keeper();
        let (tx, rx) = mpsc::channel();
        let (mut desk, mut summary) = (Desk::new(&mut keeper, Some(tx)), CampaignSummary::default());
        let mut events = Vec::new();
        assert!(desk.deliver(0, failed(fault([8, 16, 16, 16])), &spec, None, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        // Another case of the same provisional bug, before the first is named: still held.
        // (k unaligned too: a new signature, so its own re-run is requested.)
        assert!(desk.deliver(1, failed(fault([4, 4, 16, 16])), &spec, None, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        assert!(events.is_empty(), "held while its case is being named: {events:?}");
        assert!(desk.awaiting());
        let request = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(request.index, 0);
        let done = Done { request, escalation: Escalation::Named(vec![q_site([8, 16, 16, 16])]) };
        assert!(desk.complete(done, &spec, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        // The second case's own request is still out: nothing provisional may be announced yet,
        // but the site is final.
        assert_eq!(events, ["0:B"]);
        let request = rx.recv_timeout(Duration::from_secs(5)).expect("the second case's re-run was requested");
        assert_eq!(request.index, 1);
        let done = Done {
            request,
            escalation: Escalation::Explained(crate::core::finding::Explanation {
                kernel: "simple_attn".into(),
                tensor: "q".into(),
                named: "invalid_global_read_misaligned".into(),
                case_index: 0,
            }),
        };
        assert!(desk.complete(done, &spec, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        desk.finish(&mut summary, &mut announced(&mut events));
        assert_eq!(events, ["0:B"], "both cases are the q site's: one bug");
        assert_eq!(summary.progress.new_bugs, 1);
    }

    #[test]
    fn a_bug_no_re_run_names_is_announced_provisional_when_its_answer_comes_back() {
        let b = Bench::new();
        let spec = b.spec();
        let mut keeper = b.keeper();
        let (tx, rx) = mpsc::channel();
        let (mut desk, mut summary) = (Desk::new(&mut keeper, Some(tx)), CampaignSummary::default());
        let mut events = Vec::new();
        assert!(desk.deliver(3, failed(fault([8, 16, 16, 16])), &spec, None, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        let done = answered(&rx, Escalation::Silent("nothing".into()));
        assert!(desk.complete(done, &spec, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        assert_eq!(events, ["3:P"]);
        assert!(!desk.awaiting());
    }

    /// Two cases of one provisional bug delivered, then the first one's re-run answered: the
    /// bugs announced by then, and whether the second's re-run is still out.
    fn first_of_two_answered(b: &Bench, seeds: &str, first: Finding, second: Finding, escalation: Escalation) -> (Vec<String>, bool) {
        let spec = b.spec();
        let mut keeper = SeedKeeper::new(b.dir.path().join(seeds));
        let (tx, rx) = mpsc::channel();
        let (mut desk, mut summary) = (Desk::new(&mut keeper, Some(tx)), CampaignSummary::default());
        let mut events = Vec::new();
        for (i, f) in [first, second].into_iter().enumerate() {
            assert!(desk.deliver(i as u64, failed(f), &spec, None, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        }
        assert!(events.is_empty(), "held while its first re-run is out: {events:?}");
        let done = answered(&rx, escalation);
        assert!(desk.complete(done, &spec, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        (events, desk.awaiting())
    }

    #[test]
    fn a_value_bug_is_announced_when_a_re_run_of_it_is_silent_though_others_are_out() {
        let b = Bench::new();
        // Canary damage in o, before it and after it: two signatures of one provisional bug.
        let damage = |alignment, location| Finding {
            kind: FindingKind::CanaryDamage,
            oracle: Oracle::Canary,
            tensor: Some("o".into()),
            location: Some(location),
            ..fault(alignment)
        };
        let before = || damage([8, 16, 16, 16], crate::core::finding::Location::RedzoneBefore { bytes_before: 2 });
        let after = || damage([4, 4, 16, 16], crate::core::finding::Location::RedzoneAfter { bytes_past_end: 2 });
        let silent = first_of_two_answered(&b, "seeds-silent", before(), after(), Escalation::Silent("nothing".into()));
        assert_eq!(silent, (vec!["0:P".to_string()], true), "the tools were silent on a value bug: it is announced with case 1's re-run still out");
        // A re-run that fails only natively names nothing either.
        let native = first_of_two_answered(&b, "seeds-native", before(), after(), Escalation::Named(Vec::new()));
        assert_eq!(native.0, ["0:P"]);
        // A fault's provisional bug is not settled so: its other case's re-run may still name it.
        let fault = first_of_two_answered(&b, "seeds-fault", fault([8, 16, 16, 16]), fault([4, 4, 16, 16]), Escalation::Silent("nothing".into()));
        assert_eq!(fault, (Vec::new(), true));
    }

    #[test]
    fn a_site_named_on_a_smaller_case_is_filed_with_the_fault_and_keeps_the_smaller_seed() {
        let b = Bench::new();
        let spec = b.spec();
        let mut keeper = b.keeper();
        let (tx, rx) = mpsc::channel();
        let (mut desk, mut summary) = (Desk::new(&mut keeper, Some(tx)), CampaignSummary::default());
        let mut events = Vec::new();
        assert!(desk.deliver(0, failed(fault([8, 16, 16, 16])), &spec, None, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        let request = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let mut smaller = request.case.clone();
        smaller.dims.insert("seq_k".into(), 16);
        let done = Done { request, escalation: Escalation::NamedSmaller { named: vec![q_site([8, 16, 16, 16])], case: Box::new(smaller) } };
        assert!(desk.complete(done, &spec, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        desk.finish(&mut summary, &mut announced(&mut events));
        assert_eq!(events, ["0:B"], "the fault's provisional bug became the site: one bug");
        let saved: Vec<String> = std::fs::read_dir(b.dir.path().join("seeds")).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
        let site_seed = saved.iter().find(|t| t.contains("invalid_global_read_misaligned")).expect("the site's seed");
        assert!(site_seed.contains("\"seq_k\": 16"), "the seed holds the smaller case: {site_seed}");
    }

    #[test]
    fn a_finding_is_shown_when_its_case_is_filed_and_its_bug_when_it_is_named() {
        let b = Bench::new();
        let spec = b.spec();
        let mut keeper = b.keeper();
        let (tx, rx) = mpsc::channel();
        let (mut desk, mut summary) = (Desk::new(&mut keeper, Some(tx)), CampaignSummary::default());
        let mut seen = Vec::new();
        assert!(desk.deliver(2, failed(fault([8, 16, 16, 16])), &spec, None, &mut summary, &mut shown(&mut seen)).unwrap().is_continue());
        assert_eq!(seen, ["found 2 naming=true"], "the finding at once, its bug held");
        let done = answered(&rx, Escalation::Named(vec![q_site([8, 16, 16, 16])]));
        assert!(desk.complete(done, &spec, &mut summary, &mut shown(&mut seen)).unwrap().is_continue());
        assert_eq!(seen, ["found 2 naming=true", "bug 2"]);
        // Without a sanitizer to name it, the finding is not being named: its bug comes at once.
        let mut keeper = SeedKeeper::new(b.dir.path().join("seeds-2"));
        let mut desk = Desk::new(&mut keeper, None);
        let mut seen = Vec::new();
        assert!(desk.deliver(0, failed(fault([8, 16, 16, 16])), &spec, None, &mut CampaignSummary::default(), &mut shown(&mut seen)).unwrap().is_continue());
        assert_eq!(seen, ["found 0 naming=false", "bug 0"]);
    }

    #[test]
    fn a_failed_case_ahead_of_order_is_shown_at_once_and_not_again_when_filed() {
        let b = Bench::new();
        let spec = b.spec();
        let mut keeper = b.keeper();
        let (tx, _rx) = mpsc::channel();
        let (mut desk, mut summary) = (Desk::new(&mut keeper, Some(tx)), CampaignSummary::default());
        let mut seen = Vec::new();
        let verdict = |slot: &Slot| match slot {
            Slot::Ran(_, v) => (**v).clone(),
            Slot::Skipped => unreachable!(),
        };
        // Case 5 fails while case 4 is still out; then case 6 shows the same signature early.
        let five = failed(fault([8, 16, 16, 16]));
        desk.early(5, &verdict(&five), &mut shown(&mut seen));
        desk.early(6, &verdict(&failed(fault([8, 16, 16, 16]))), &mut shown(&mut seen));
        assert_eq!(seen, ["found early 5"], "once per signature");
        // Case 4 comes in with the same signature: filed and named, not shown again.
        assert!(desk.deliver(4, failed(fault([8, 16, 16, 16])), &spec, None, &mut summary, &mut shown(&mut seen)).unwrap().is_continue());
        assert!(desk.deliver(5, five, &spec, None, &mut summary, &mut shown(&mut seen)).unwrap().is_continue());
        assert_eq!(seen, ["found early 5", "filed 4, shown before"]);
        // A signature already kept is not shown early; without a sanitizer nothing is.
        desk.early(9, &verdict(&failed(fault([8, 16, 16, 16]))), &mut shown(&mut seen));
        let mut keeper = SeedKeeper::new(b.dir.path().join("seeds-2"));
        let mut plain = Desk::new(&mut keeper, None);
        plain.early(1, &verdict(&failed(fault([8, 16, 16, 16]))), &mut shown(&mut seen));
        assert_eq!(seen.len(), 2, "{seen:?}");
    }

    /// The next re-run request, answered with `escalation`.
    fn answered(rx: &mpsc::Receiver<Request>, escalation: Escalation) -> Done {
        Done { request: rx.recv_timeout(Duration::from_secs(5)).unwrap(), escalation }
    }

    fn shown(events: &mut Vec<String>) -> impl FnMut(EventKind<'_>) + '_ {
        |e| match e {
            EventKind::NewFinding { index, naming, shown: false, .. } => events.push(format!("found {index} naming={naming}")),
            EventKind::NewFinding { index, shown: true, .. } => events.push(format!("filed {index}, shown before")),
            EventKind::FoundEarly { index, .. } => events.push(format!("found early {index}")),
            EventKind::NewBug { index, .. } => events.push(format!("bug {index}")),
            EventKind::NotYetNamed { bugs } => events.push(format!("{} not yet named", bugs.len())),
            EventKind::NamedKnown { index, bugs } => events.push(format!("{index} is known {}", bugs.len())),
            _ => {}
        }
    }

    #[test]
    fn a_shown_finding_whose_re_run_names_a_known_bug_says_so() {
        let b = Bench::new();
        let spec = b.spec();
        let mut keeper = b.keeper();
        let (tx, rx) = mpsc::channel();
        let (mut desk, mut summary) = (Desk::new(&mut keeper, Some(tx)), CampaignSummary::default());
        let mut seen = Vec::new();
        for (i, alignments) in [(0, [8, 16, 16, 16]), (1, [8, 4, 16, 16])] {
            assert!(desk.deliver(i, failed(fault(alignments)), &spec, None, &mut summary, &mut shown(&mut seen)).unwrap().is_continue());
            let done = answered(&rx, Escalation::Named(vec![q_site([8, 16, 16, 16])]));
            assert!(desk.complete(done, &spec, &mut summary, &mut shown(&mut seen)).unwrap().is_continue());
        }
        assert_eq!(seen, ["found 0 naming=true", "bug 0", "found 1 naming=true", "1 is known 1"]);
        assert_eq!(summary.progress.new_bugs, 1);
    }

    #[test]
    fn a_campaign_that_stops_before_a_re_run_comes_back_says_not_yet_named_not_new_bug() {
        let b = Bench::new();
        let spec = b.spec();
        let mut keeper = b.keeper();
        let (tx, rx) = mpsc::channel();
        let (mut desk, mut summary) = (Desk::new(&mut keeper, Some(tx)), CampaignSummary::default());
        let mut seen = Vec::new();
        assert!(desk.deliver(0, failed(fault([8, 16, 16, 16])), &spec, None, &mut summary, &mut shown(&mut seen)).unwrap().is_continue());
        assert!(desk.deliver(1, failed(fault([16, 4, 16, 16])), &spec, None, &mut summary, &mut shown(&mut seen)).unwrap().is_continue());
        // Case #0 is named; case #1's re-run is still out when the campaign stops.
        let done = answered(&rx, Escalation::Named(vec![q_site([8, 16, 16, 16])]));
        assert!(desk.complete(done, &spec, &mut summary, &mut shown(&mut seen)).unwrap().is_continue());
        desk.finish(&mut summary, &mut shown(&mut seen));
        assert_eq!(seen, ["found 0 naming=true", "found 1 naming=true", "bug 0", "1 not yet named"]);
        assert_eq!(summary.progress.new_bugs, 1, "the unnamed finding is not counted as a bug");
        assert!(!desk.awaiting());
    }

    #[test]
    fn without_escalation_a_bug_is_announced_with_its_first_case() {
        let b = Bench::new();
        let spec = b.spec();
        let mut keeper = b.keeper();
        let mut desk = Desk::new(&mut keeper, None);
        let mut summary = CampaignSummary::default();
        let mut events = Vec::new();
        assert!(desk.deliver(5, failed(fault([8, 16, 16, 16])), &spec, None, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        assert!(desk.deliver(6, failed(fault([2, 16, 16, 16])), &spec, None, &mut summary, &mut announced(&mut events)).unwrap().is_continue());
        assert_eq!(events, ["5:P"]);
    }
}
