//! Batches of cases, and the compute-sanitizer pass over them.
//!
//! Natively a batch is just its cases one by one. Under a sanitizer, one sanitizer process
//! serves the whole batch (the tool's start-up costs seconds); the process is ended at the
//! batch's end, or earlier by a sticky error, a crash or a hang, and then its XML is read and
//! split at the worker's per-case markers ([`crate::run::sanitizer::attribute`]). A sticky error ends
//! the process right after the case that caused it, so that case holds the records after the
//! last marker. Each tool is one pass over the batch.
//!
//! Batches are sized by what they were measured to cost ([`chunk_size`]): a sanitizer's
//! findings are known only when its process ends, so a batch must end within seconds for its
//! findings to be printed soon after their cases, and within the time a campaign has left.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{retire, Supervisor, SupervisorError, SANITIZER_EXIT_PATIENCE};
use crate::core::case::{Case, Placement};
use crate::core::finding::{Finding, Oracle};
use crate::core::manifest::Manifest;
use crate::core::plan::Plan;
use crate::core::verdict::{kernel_label, Outcome, ReferenceChoice, RunOptions, Verdict};
use crate::run::sanitizer::attribute::split;
use crate::run::sanitizer::xml::{self, to_finding, FindingContext};
use crate::run::sanitizer::{padding_for, Tool};

/// Kernels run this many times slower under a sanitizer, at most: the watchdog allows for it.
pub const SANITIZER_SLOWDOWN: u32 = 50;

/// Cases in a supervisor's first sanitizer batch: few, to measure what a process and a case
/// cost before committing to more.
pub const FIRST_CHUNK: usize = 2;
/// A sanitizer batch is sized to take about this long, so that its findings are printed within
/// about 10 s of their cases (a finding waits for its batch's end, and for the batches before
/// it in case order, which started earlier).
pub const TARGET_BATCH: Duration = Duration::from_secs(6);
/// Time left for cases in a batch whose processes' start and end alone take [`TARGET_BATCH`].
const MIN_CASE_TIME: Duration = Duration::from_secs(2);

/// What a sanitizer batch costs, as measured by the supervisor that ran it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchCosts {
    /// Starting and ending the batch's sanitizer processes, one per tool of the pass.
    pub fixed: Duration,
    /// One case under every tool of the pass (restarts after its faults included).
    pub per_case: Duration,
}

impl BatchCosts {
    /// The costs of one batch of `cases` cases that took `total`, of which `overhead` went to
    /// starting and ending its `processes` processes; `tools` processes are the fixed part, and
    /// any more (a fault ends a process) are charged to the cases.
    pub fn measured(total: Duration, overhead: Duration, processes: u64, tools: usize, cases: usize) -> BatchCosts {
        let per_process = overhead.checked_div(processes.max(1) as u32).unwrap_or(overhead);
        let fixed = per_process.saturating_mul(tools.max(1) as u32).min(total);
        let per_case = total.saturating_sub(fixed).checked_div(cases.max(1) as u32).unwrap_or_default();
        BatchCosts { fixed, per_case }
    }

    /// The estimate after one more measurement: the mean of the two, so that one slow batch
    /// (a case that compiled, a fault) does not decide alone.
    pub fn blend(self, new: BatchCosts) -> BatchCosts {
        BatchCosts { fixed: (self.fixed + new.fixed) / 2, per_case: (self.per_case + new.per_case) / 2 }
    }
}

/// Cases in the next sanitizer batch: [`FIRST_CHUNK`] until costs are measured, then as many as
/// fit in [`TARGET_BATCH`] (at least `MIN_CASE_TIME` of cases, and at least as long as the
/// processes' start and end) and in `time_left`; never more
/// than `cap` (`--sanitize-batch`) nor fewer than 1.
pub fn chunk_size(costs: Option<BatchCosts>, time_left: Option<Duration>, cap: usize) -> usize {
    let cap = cap.max(1);
    let Some(c) = costs else { return FIRST_CHUNK.min(cap) };
    // A batch also gives its cases at least as long as its processes' start and end took: a Python
    // target's sanitizer process takes 4 to 5 s to start (interpreter, `import torch`, CUDA), and
    // batches of 2 s of cases spent two thirds of a memcheck campaign starting processes.
    let mut for_cases = TARGET_BATCH.saturating_sub(c.fixed).max(MIN_CASE_TIME).max(c.fixed);
    if let Some(left) = time_left {
        for_cases = for_cases.min(left.saturating_sub(c.fixed));
    }
    if c.per_case.is_zero() {
        return cap;
    }
    ((for_cases.as_secs_f64() / c.per_case.as_secs_f64()).floor() as usize).clamp(1, cap)
}

impl Supervisor {
    /// Whether workers run under compute-sanitizer.
    pub fn sanitized(&self) -> bool {
        self.cfg.sanitizer.is_some()
    }

    /// The most cases a pool hands this supervisor at a time: the pass's `--sanitize-batch`
    /// cap under a sanitizer, else 1.
    pub fn max_chunk(&self) -> usize {
        self.cfg.sanitizer.as_ref().map_or(1, |p| p.batch.max(1))
    }

    /// How many cases a pool should hand this supervisor next, given the run's deadline: 1
    /// natively; under a sanitizer, what [`chunk_size`] makes of the measured batch costs.
    pub fn next_chunk(&self, deadline: Option<Instant>) -> usize {
        match &self.cfg.sanitizer {
            None => 1,
            Some(pass) => chunk_size(self.costs, deadline.map(|d| d.saturating_duration_since(Instant::now())), pass.batch),
        }
    }

    /// Runs `cases` and returns their verdicts in order. Under a sanitizer every tool of the
    /// pass runs over the batch and its findings join the verdicts (deduplicated by signature);
    /// in a pool's run no case starts after its deadline, and only the verdicts of the leading
    /// cases that every tool ran are returned.
    pub fn run_batch(&mut self, cases: &[Case], manifest: &Manifest, opts: &RunOptions, timeout: Duration) -> Result<Vec<Verdict>, SupervisorError> {
        let Some(pass) = self.cfg.sanitizer.clone() else {
            return cases.iter().map(|c| self.run_native(c, manifest, opts, timeout)).collect();
        };
        let (started, starts, overhead) = (Instant::now(), self.starts, self.overhead);
        let mut verdicts: Vec<Option<Verdict>> = vec![None; cases.len()];
        let mut limit = cases.len();
        for &tool in &pass.tools {
            self.end_process();
            let tool_cases: Vec<Case> = cases[..limit].iter().map(|c| case_for_tool(c, tool)).collect();
            let largest = tool_cases.iter().filter_map(|c| Plan::new(c, manifest).ok()).flat_map(|p| p.tensors).map(|t| t.span_bytes).max().unwrap_or(0);
            self.tool = Some((tool, padding_for(largest)));
            // The GPU reference kernel would run under the tool too, for nothing: under a
            // sanitizer the CPU reference judges values (and no determinism rerun).
            let tool_opts = RunOptions { determinism: false, sanitizer: Some(tool), reference: ReferenceChoice::Cpu, coverage: false, digest: false };
            let mut next = 0;
            while next < limit {
                // One sanitizer process: until the batch ends, the worker does, or the time.
                let mut ran: Vec<(usize, Verdict)> = Vec::new();
                loop {
                    if self.limits.deadline.is_some_and(|d| Instant::now() >= d) {
                        limit = next;
                        break;
                    }
                    let (v, _) = self.run_once(None, &tool_cases[next], manifest, &tool_opts, timeout.saturating_mul(SANITIZER_SLOWDOWN))?;
                    if crate::run::trace::on() {
                        crate::run::trace::line(serde_json::json!({ "event": "sanitizer_case", "tool": tool.name(), "sticky": v.sticky, "times": v.times }));
                    }
                    ran.push((next, v));
                    next += 1;
                    if self.worker.is_none() || next == limit {
                        break;
                    }
                }
                let xml = self.end_process();
                crate::run::trace::line(serde_json::json!({ "event": "sanitizer_process_ended", "tool": tool.name(), "cases": ran.len() }));
                self.give_up()?;
                if ran.is_empty() {
                    break;
                }
                if let Err(ran) = merge_records(tool, xml, &tool_cases, manifest, ran, &mut verdicts) {
                    // The markers did not match the cases (the tool merged or dropped some
                    // reports): run each of them alone, where attribution needs no marker.
                    // A closed stderr must not panic a run over a diagnostic.
                    let _ = writeln!(
                        std::io::stderr(),
                        "cudafuzz: {tool}: markers did not match the {} cases of one process; re-running them one per process",
                        ran.len()
                    );
                    for (idx, _) in ran {
                        let (v, _) = self.run_once(None, &tool_cases[idx], manifest, &tool_opts, timeout.saturating_mul(SANITIZER_SLOWDOWN))?;
                        let xml = self.end_process();
                        let _ = merge_records(tool, xml, &tool_cases, manifest, vec![(idx, v)], &mut verdicts);
                    }
                }
            }
        }
        self.end_process();
        self.tool = None;
        if limit > 0 {
            let m = BatchCosts::measured(started.elapsed(), self.overhead - overhead, self.starts - starts, pass.tools.len(), limit);
            self.costs = Some(self.costs.map_or(m, |c| c.blend(m)));
        }
        Ok(verdicts.into_iter().take(limit).map(|v| v.expect("every case ran under every tool")).collect())
    }

    /// Ends the running worker (waiting, so its sanitizer writes the XML, unless the run is
    /// stopped or cancelled meanwhile) and returns the XML path of the process that just ended,
    /// if it ran under a sanitizer.
    pub(super) fn end_process(&mut self) -> Option<PathBuf> {
        if let Some(w) = self.worker.take() {
            let ending = Instant::now();
            retire(w, SANITIZER_EXIT_PATIENCE, &|| self.give_up().is_err());
            self.overhead += ending.elapsed();
        }
        self.xml.take()
    }
}

/// The case as a tool sees it: memcheck runs exact placement, so a tensor's last byte is its
/// allocation's last byte and any overrun lands in the tool's padding.
pub fn case_for_tool(case: &Case, tool: Tool) -> Case {
    let mut c = case.clone();
    if tool == Tool::Memcheck {
        c.placement = Placement::Exact;
    }
    c
}

/// Reads one process's XML and adds each case's records to its verdict. When the XML was read
/// but its markers do not match the cases (more or fewer), nothing is merged and the cases come
/// back, to be run again one by one.
fn merge_records(
    tool: Tool,
    xml: Option<PathBuf>,
    cases: &[Case],
    manifest: &Manifest,
    ran: Vec<(usize, Verdict)>,
    verdicts: &mut [Option<Verdict>],
) -> Result<(), Vec<(usize, Verdict)>> {
    let parsed = match &xml {
        Some(path) => xml::parse_file(path).map_err(|e| e.to_string()),
        None => Err("the worker did not run under compute-sanitizer".to_string()),
    };
    let ended_by_fault = ran.last().is_some_and(|(_, v)| v.sticky);
    // A Python target runs its framework's kernels too: their records are notes unless they
    // touch the roster's memory or come from code under the manifest's folder.
    let python = manifest.python_calls().next().is_some();
    let user_code = manifest.path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let (per_case, markers, lost) = match parsed {
        Ok(p) => {
            let a = split(p.records, tool, ran.len(), ended_by_fault);
            let complete = p.truncated.is_none() && a.unattributable.is_none();
            if complete && a.markers != ran.len() && ran.len() > 1 {
                return Err(ran);
            }
            (a.per_case, a.markers, a.unattributable.or(p.truncated))
        }
        Err(e) => (vec![Vec::new(); ran.len()], 0, Some(e)),
    };
    for (k, ((idx, native), records)) in ran.into_iter().zip(per_case).enumerate() {
        let case = &cases[idx];
        let (plan, contract) = crate::core::plan::plan_and_judge(case, manifest);
        let label = kernel_label(manifest, case);
        let alignment = plan.alignments();
        let ctx = FindingContext {
            kernel: &label,
            alignment: &alignment,
            inside_contract: contract.is_inside(),
            table: native.allocations.as_ref(),
            tool: oracle_of(tool),
        };
        // API errors are the native oracles' business (launch rejections, sticky statuses).
        // initcheck's "Host API uninitialized memory access" records are the harness copying a
        // never-written buffer back to check it, not the kernel.
        // The tool's notices about itself (a hazard limit reached) are notes, never findings.
        let judged: Vec<&xml::Record> = records.iter().filter(|r| !r.is_api() && !r.text.starts_with("Host API")).collect();
        let (notices, judged): (Vec<&xml::Record>, Vec<&xml::Record>) = judged.into_iter().partition(|r| r.is_notice());
        let (framework, kernel): (Vec<&xml::Record>, Vec<&xml::Record>) =
            judged.into_iter().partition(|r| python && xml::is_framework_record(r, native.allocations.as_ref(), &user_code));
        let found = dedupe(kernel.into_iter().map(|r| to_finding(r, &ctx)));
        let notes: Vec<String> = notices.iter().map(|r| r.notice_note()).chain(framework.iter().map(|r| xml::framework_note(r))).collect();
        let unknown = if k >= markers {
            Some(format!("{tool} results are unknown for this case: {}", lost.clone().unwrap_or_else(|| "the process ended before the case was marked".into())))
        } else {
            None
        };
        let slot = &mut verdicts[idx];
        let verdict = slot.get_or_insert(native);
        for n in notes {
            if !verdict.notes.contains(&n) {
                verdict.notes.push(n);
            }
        }
        add_findings(verdict, found, unknown);
    }
    Ok(())
}

fn oracle_of(tool: Tool) -> Oracle {
    match tool {
        Tool::Memcheck => Oracle::Memcheck,
        Tool::Racecheck => Oracle::Racecheck,
        Tool::Initcheck => Oracle::Initcheck,
        Tool::Synccheck => Oracle::Synccheck,
    }
}

/// One finding per signature, its count the sum of the records' counts.
fn dedupe(findings: impl Iterator<Item = Finding>) -> Vec<Finding> {
    let mut by_sig: BTreeMap<crate::core::finding::Signature, Finding> = BTreeMap::new();
    let mut order = Vec::new();
    for f in findings {
        let sig = f.signature();
        match by_sig.get_mut(&sig) {
            Some(first) => first.count += f.count,
            None => {
                order.push(sig.clone());
                by_sig.insert(sig, f);
            }
        }
    }
    order.into_iter().filter_map(|s| by_sig.remove(&s)).collect()
}

/// Adds sanitizer findings to a verdict; a pass whose sanitizer results are unknown is not a
/// pass.
fn add_findings(verdict: &mut Verdict, found: Vec<Finding>, unknown: Option<String>) {
    if let Some(why) = unknown {
        if matches!(verdict.outcome, Outcome::Pass) {
            verdict.outcome = Outcome::Error { message: why };
        }
        return;
    }
    if found.is_empty() {
        return;
    }
    match &mut verdict.outcome {
        Outcome::Fail { findings } => {
            let have: Vec<crate::core::finding::Signature> = findings.iter().map(|f| f.signature()).collect();
            findings.extend(found.into_iter().filter(|f| !have.contains(&f.signature())));
        }
        outcome @ Outcome::Pass => *outcome = Outcome::Fail { findings: found },
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::finding::FindingKind;
    use crate::core::plan::ContractVerdict;
    use crate::core::verdict::StageTimes;

    fn finding(kind: FindingKind, count: u64) -> Finding {
        Finding {
            kind,
            oracle: Oracle::Racecheck,
            kernel: "k".into(),
            tensor: None,
            location: None,
            count,
            cuda_error: None,
            alignment: crate::testing::alignment([16; 4]),
            inside_contract: true,
            detail: "d".into(),
            source: None,
            other_access: None,
            access_size: None,
            sanitizer_kind: Some("race_shared_write_read".into()),
        }
    }

    fn verdict(outcome: Outcome) -> Verdict {
        Verdict {
            outcome,
            contract: ContractVerdict::Inside,
            reference: crate::core::verdict::ReferenceUsed::Gpu,
            sticky: false,
            times: StageTimes::default(),
            allocations: None,
            coverage: None,
            output_digest: None,
            notes: Vec::new(),
        }
    }

    #[test]
    fn records_of_one_signature_become_one_finding_with_their_count() {
        let d = dedupe([finding(FindingKind::Race, 256), finding(FindingKind::Race, 10), finding(FindingKind::BarrierError, 1)].into_iter());
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].count, 266);
    }

    #[test]
    fn a_pass_with_sanitizer_findings_fails_and_unknown_results_are_not_a_pass() {
        let mut v = verdict(Outcome::Pass);
        add_findings(&mut v, vec![finding(FindingKind::Race, 1)], None);
        assert!(matches!(&v.outcome, Outcome::Fail { findings } if findings.len() == 1));
        add_findings(&mut v, vec![finding(FindingKind::Race, 1)], None);
        assert!(matches!(&v.outcome, Outcome::Fail { findings } if findings.len() == 1), "same signature added once");
        let mut v = verdict(Outcome::Pass);
        add_findings(&mut v, vec![], Some("lost".into()));
        assert!(matches!(v.outcome, Outcome::Error { .. }));
    }

    #[test]
    fn a_tools_notice_is_a_note_of_the_case_and_its_race_one_finding() {
        let dir = tempfile::tempdir().unwrap();
        let race = include_str!("../../../tests/fixtures/sanitizer/racecheck-race.xml");
        let race = &race[race.find("<record>").unwrap()..race.rfind("</record>").unwrap() + "</record>".len()];
        let notice = "<record><kind>Analysis</kind><level>Warning</level><what><text>Maximum number of hazards reached.</text></what></record>";
        let xml = dir.path().join("racecheck.xml");
        std::fs::write(&xml, format!("<ComputeSanitizerOutput>{notice}{race}</ComputeSanitizerOutput>")).unwrap();
        let (m, case) = (crate::testing::attention(), crate::testing::example());
        let mut verdicts = vec![None];
        merge_records(Tool::Racecheck, Some(xml), std::slice::from_ref(&case), &m, vec![(0, verdict(Outcome::Pass))], &mut verdicts).unwrap();
        let v = verdicts[0].take().unwrap();
        assert_eq!(v.notes, ["a compute-sanitizer notice (not a finding): Warning: Maximum number of hazards reached."]);
        match &v.outcome {
            Outcome::Fail { findings } => {
                assert_eq!(findings.len(), 1, "{findings:?}");
                assert_eq!(findings[0].kind, FindingKind::Race);
            }
            other => panic!("{other:?}"),
        }
    }

    fn costs(fixed_ms: u64, per_case_ms: u64) -> Option<BatchCosts> {
        Some(BatchCosts { fixed: Duration::from_millis(fixed_ms), per_case: Duration::from_millis(per_case_ms) })
    }

    #[test]
    fn the_first_batch_is_a_small_measuring_one_within_the_cap() {
        assert_eq!(chunk_size(None, None, 200), FIRST_CHUNK);
        assert_eq!(chunk_size(None, Some(Duration::from_secs(1000)), 1), 1);
        assert_eq!(chunk_size(None, None, 0), 1);
    }

    #[test]
    fn batches_take_about_six_seconds_and_fit_the_time_left() {
        // 2 s of start and end, 100 ms a case: 4 s of cases.
        assert_eq!(chunk_size(costs(2000, 100), None, 200), 40);
        assert_eq!(chunk_size(costs(2000, 100), Some(Duration::from_secs(100)), 200), 40);
        assert_eq!(chunk_size(costs(2000, 100), Some(Duration::from_secs(3)), 200), 10);
        assert_eq!(chunk_size(costs(2000, 100), None, 25), 25, "never above --sanitize-batch");
        // No time left, or cases longer than a batch: one case still runs.
        assert_eq!(chunk_size(costs(2000, 100), Some(Duration::ZERO), 200), 1);
        assert_eq!(chunk_size(costs(2000, 9000), None, 200), 1);
        // Start-up alone past the target: at least as long for cases as for the start.
        assert_eq!(chunk_size(costs(8000, 100), None, 200), 80);
        assert_eq!(chunk_size(costs(4500, 100), None, 200), 45);
        assert_eq!(chunk_size(costs(4500, 100), Some(Duration::from_secs(6)), 200), 15);
        assert_eq!(chunk_size(costs(500, 0), None, 200), 200);
    }

    #[test]
    fn costs_charge_extra_processes_to_the_cases() {
        let s = Duration::from_secs;
        // Two tools, two processes of 1 s each, 10 cases in 12 s: 1 s a case.
        assert_eq!(BatchCosts::measured(s(12), s(2), 2, 2, 10), BatchCosts { fixed: s(2), per_case: s(1) });
        // One tool, a fault restarted the process once: half the overhead is the cases'.
        assert_eq!(BatchCosts::measured(s(12), s(4), 2, 1, 10), BatchCosts { fixed: s(2), per_case: s(1) });
        let m = BatchCosts::measured(s(2), s(0), 1, 1, 0);
        assert_eq!(m.per_case, s(2));
        assert_eq!(BatchCosts { fixed: s(2), per_case: s(1) }.blend(BatchCosts { fixed: s(4), per_case: s(3) }), BatchCosts { fixed: s(3), per_case: s(2) });
    }

    #[test]
    fn memcheck_sees_exact_placement() {
        let c = crate::testing::example();
        assert_eq!(case_for_tool(&c, Tool::Memcheck).placement, Placement::Exact);
        assert_eq!(case_for_tool(&c, Tool::Racecheck).placement, c.placement);
    }
}
