//! The report model: [`RunReport`] and the serde data it is made of.
//!
//! These types are the JSON form of a report, the source of truth that the Markdown, JUnit and
//! SARIF renderings are derived from. They live apart from the renderers so that the data, its
//! totals ([`RunReport::recount`]) and its verdict ([`RunReport::exit_code`]) read in one place.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::{plural, timestamp, CHECK_GPU, REPORT_FORMAT, REPORT_VERSION};
use crate::core::exit;
use crate::core::finding::{Finding, Signature};
use crate::core::shard::Shard;
use crate::core::triage::{Alias, BugId, Triage};
use crate::tools::sweep::{InputClass, Row};

/// The program that wrote a report.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ToolInfo {
    /// `cudafuzz`.
    pub name: String,
    /// The crate version.
    pub version: String,
}

impl ToolInfo {
    /// This build.
    pub fn this() -> ToolInfo {
        ToolInfo { name: env!("CARGO_PKG_NAME").into(), version: env!("CARGO_PKG_VERSION").into() }
    }
}

/// The GPU a report's cases ran on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSummary {
    /// Marketing name.
    pub name: String,
    /// Compute capability, e.g. `sm_90`.
    pub arch: String,
    /// CUDA driver (API version as the driver reports it, e.g. `13.0`).
    pub driver: String,
}

/// One check of the environment (GPU, driver, compute-sanitizer, the planted bug, merged shards).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvCheck {
    /// Short name, e.g. `gpu`, `compute-sanitizer`, `planted bug`.
    pub name: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was found, or what is wrong and how to fix it.
    pub detail: String,
    /// The shard that ran the check, in merged reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

/// What a replayed seed must do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "expect", rename_all = "snake_case")]
pub enum Expectation {
    /// An expected failure: must still fail with this signature.
    Fail {
        /// The saved signature.
        signature: Signature,
    },
    /// A fixed bug or a clean case: must pass.
    Pass,
}

impl Expectation {
    /// Whether `observed` meets this expectation.
    pub fn met_by(&self, observed: &Observed) -> bool {
        match (self, observed) {
            (Expectation::Fail { signature }, Observed::Fail { signatures }) => signatures.contains(signature),
            (Expectation::Pass, Observed::Pass) => true,
            _ => false,
        }
    }
}

impl std::fmt::Display for Expectation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expectation::Fail { signature } => write!(f, "fail with {signature}"),
            Expectation::Pass => f.write_str("pass"),
        }
    }
}

/// What a replayed seed did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Observed {
    /// Every oracle passed.
    Pass,
    /// Findings, by signature.
    Fail {
        /// Signatures of the findings.
        signatures: Vec<Signature>,
    },
    /// The harness could not run the case.
    Error {
        /// Why.
        message: String,
    },
    /// Not run (no GPU, interrupted, ...): never counts as met.
    NotRun {
        /// Why.
        reason: String,
    },
}

impl std::fmt::Display for Observed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Observed::Pass => f.write_str("pass"),
            Observed::Fail { signatures } => write!(f, "fail with {}", signatures.iter().map(Signature::as_str).collect::<Vec<_>>().join(", ")),
            Observed::Error { message } => write!(f, "error: {message}"),
            Observed::NotRun { reason } => write!(f, "not run: {reason}"),
        }
    }
}

/// One replayed seed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedReplay {
    /// The seed file.
    pub seed: String,
    /// The case in one line.
    pub case: String,
    /// What it must do.
    pub expected: Expectation,
    /// What it did.
    pub observed: Observed,
    /// Whether `observed` met `expected`.
    pub ok: bool,
}

/// One cell of a sweep row: a serializable twin of [`crate::tools::sweep::Cell`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatrixCell {
    /// Repetitions that passed.
    pub pass: u64,
    /// Repetitions with findings.
    pub fail: u64,
    /// Repetitions the harness could not run.
    pub error: u64,
    /// Repetitions outside the contract (not run).
    pub skipped: u64,
    /// How often each signature appeared.
    pub signatures: BTreeMap<String, u64>,
}

impl MatrixCell {
    /// The twin of a [`crate::tools::sweep::Cell`].
    pub fn from_cell(c: &crate::tools::sweep::Cell) -> MatrixCell {
        MatrixCell { pass: c.pass, fail: c.fail, error: c.error, skipped: c.skipped, signatures: c.signatures.clone() }
    }

    /// Back to a [`crate::tools::sweep::Cell`] (for its verdict and consistency rules).
    pub fn to_cell(&self) -> crate::tools::sweep::Cell {
        crate::tools::sweep::Cell { pass: self.pass, fail: self.fail, error: self.error, skipped: self.skipped, signatures: self.signatures.clone() }
    }

    /// Adds another shard's repetitions of the same cell.
    pub fn absorb(&mut self, other: &MatrixCell) {
        self.pass += other.pass;
        self.fail += other.fail;
        self.error += other.error;
        self.skipped += other.skipped;
        for (s, n) in &other.signatures {
            *self.signatures.entry(s.clone()).or_default() += n;
        }
    }
}

/// One row of the sweep matrix: a kernel configuration and its cells by class name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatrixRow {
    /// Kernel with parameters, e.g. `fa_s512[BLOCK_M=80]`.
    pub config: String,
    /// Whether a failing cell fails the run (`false`: the row is recorded only, as for a kernel
    /// whose failures are known).
    pub expect_pass: bool,
    /// Class names in table order.
    pub classes: Vec<String>,
    /// Cells by class name (a shard holds only the cells it ran).
    pub cells: BTreeMap<String, MatrixCell>,
}

impl MatrixRow {
    /// The twin of a [`crate::tools::sweep::Row`] swept over `classes`.
    pub fn from_row(row: &Row, classes: &[InputClass], expect_pass: bool) -> MatrixRow {
        MatrixRow {
            config: row.config.clone(),
            expect_pass,
            classes: classes.iter().map(|c| c.to_string()).collect(),
            cells: row.cells.iter().map(|(k, c)| (k.clone(), MatrixCell::from_cell(c))).collect(),
        }
    }

    /// Whether the outcome depends on alignment ([`crate::tools::sweep::Row::alignment_dependent`]).
    pub fn alignment_dependent(&self) -> bool {
        let classes: Vec<InputClass> = self.classes.iter().filter_map(|c| InputClass::from_name(c)).collect();
        let row = Row { config: self.config.clone(), cells: self.cells.iter().map(|(k, c)| (k.clone(), c.to_cell())).collect() };
        row.alignment_dependent(&classes)
    }

    /// Whether the cell of `class` is acceptable: it passed, or this row is recorded only.
    pub fn cell_ok(&self, class: &str) -> bool {
        !self.expect_pass || self.cells.get(class).is_none_or(|c| c.fail + c.error == 0)
    }
}

/// A kernel's fuzz campaign within its budget share.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Campaign {
    /// The time it was given, in seconds (summed over shards in merged reports).
    pub budget_secs: f64,
    /// The time it took, in seconds (summed over shards in merged reports).
    pub elapsed_secs: f64,
    /// Generator seed.
    pub seed: u64,
    /// Cases run.
    pub cases: u64,
    /// Cases that passed.
    pub passed: u64,
    /// Cases with findings.
    pub failed: u64,
    /// Cases the harness could not run.
    pub errors: u64,
    /// Generated cases outside the contract, skipped.
    pub skipped: u64,
    /// Cases re-drawn away from a known bug's trigger (absent in reports before steering).
    #[serde(default)]
    pub steered: u64,
}

impl Campaign {
    /// Adds another shard's campaign of the same kernel.
    pub fn absorb(&mut self, o: &Campaign) {
        self.budget_secs += o.budget_secs;
        self.elapsed_secs += o.elapsed_secs;
        self.cases += o.cases;
        self.passed += o.passed;
        self.failed += o.failed;
        self.errors += o.errors;
        self.skipped += o.skipped;
        self.steered += o.steered;
    }
}

/// One sanitizer pass over a kernel's cases.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SanitizerRun {
    /// The tools, comma-separated (`memcheck,racecheck`).
    pub tools: String,
    /// Campaign-shaped counts of the pass.
    #[serde(flatten)]
    pub counts: Campaign,
}

/// Which gate step produced a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Replaying a saved seed.
    Replay,
    /// The sweep matrix.
    Sweep,
    /// A fuzz campaign (including its compute-sanitizer escalation).
    Fuzz,
    /// A sanitizer pass.
    Sanitizer,
}

impl Step {
    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Step::Replay => "replay",
            Step::Sweep => "sweep",
            Step::Fuzz => "fuzz",
            Step::Sanitizer => "sanitizer",
        }
    }
}

/// One distinct finding (by signature) and where to replay it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FindingEntry {
    /// [`Finding::signature`].
    pub signature: Signature,
    /// The finding of the smallest case seen.
    pub finding: Finding,
    /// The saved seed that replays it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
    /// The case in one line.
    pub case: String,
    /// The step that found it.
    pub step: Step,
    /// Whether it is new: its signature is not one of the expected failures.
    pub new: bool,
    /// The source file of `finding.source`, relative to the repository root, when it was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_path: Option<String>,
    /// The bug it is filed under ([`crate::core::triage`]), set by [`RunReport::recount`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bug: Option<BugId>,
}

/// Everything about one kernel.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelSection {
    /// Kernel name.
    pub kernel: String,
    /// The kernel's `.cu` file, relative to the repository root when possible (where SARIF points
    /// for findings without a source line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Seed replays, in seed order.
    #[serde(default)]
    pub replays: Vec<SeedReplay>,
    /// Sweep-matrix rows.
    #[serde(default)]
    pub sweep: Vec<MatrixRow>,
    /// The fuzz campaign, when the kernel is gated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign: Option<Campaign>,
    /// Sanitizer passes.
    #[serde(default)]
    pub sanitizer: Vec<SanitizerRun>,
    /// Distinct findings, by signature.
    #[serde(default)]
    pub findings: Vec<FindingEntry>,
}

/// Totals over a report (recomputed by [`RunReport::recount`], so they always match).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Cases run: replays, sweep repetitions, campaign and sanitizer cases.
    pub cases: u64,
    /// Of those, passed.
    pub passed: u64,
    /// Of those, with findings.
    pub failed: u64,
    /// Of those, the harness could not run.
    pub errors: u64,
    /// Generated cases skipped (outside the contract).
    pub skipped: u64,
    /// Distinct findings.
    pub findings: u64,
    /// Distinct findings not expected.
    pub new_findings: u64,
    /// Bugs the findings are filed under ([`crate::core::triage`]).
    #[serde(default)]
    pub bugs: u64,
    /// Bugs none of whose findings was expected: what fails a run.
    #[serde(default)]
    pub new_bugs: u64,
    /// Seeds replayed (or due to be).
    pub replays: u64,
    /// Replays that ran and did not do what they must.
    pub regressions: u64,
    /// Replays that could not run (no GPU, no compute-sanitizer, interrupted): never a pass.
    #[serde(default)]
    pub not_run: u64,
    /// Sweep cells.
    pub cells: u64,
    /// Sweep cells that failed in rows that must pass.
    pub cells_failed: u64,
    /// Environment checks that failed.
    pub checks_failed: u64,
}

/// A run's report: see the module docs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Always [`REPORT_FORMAT`].
    pub format: String,
    /// Always [`REPORT_VERSION`] when written by this build.
    pub version: u32,
    /// The program.
    pub tool: ToolInfo,
    /// Start, RFC 3339 UTC.
    pub started: String,
    /// End, RFC 3339 UTC.
    pub finished: String,
    /// Wall time in seconds (the longest shard's in merged reports).
    pub duration_secs: f64,
    /// The time budget in seconds, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_secs: Option<f64>,
    /// The configuration file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The GPU, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuSummary>,
    /// The shard this report covers (`None`: the whole job, or a merge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// For a merged report: the shards merged (`I/N`, or `whole` for an unsharded report).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<String>,
    /// Environment checks, in order.
    pub environment: Vec<EnvCheck>,
    /// Per-kernel sections, in order of first mention.
    pub kernels: Vec<KernelSection>,
    /// Totals.
    pub counts: Counts,
    /// Whether a new bug was found (the headline verdict).
    pub new_findings: bool,
    /// Whether the run was stopped before it finished.
    #[serde(default)]
    pub interrupted: bool,
    /// The provisional-to-site mappings the findings taught ([`crate::core::triage::Alias`]); merged
    /// reports keep every shard's, so a case gets the same bug in a merge as where it was found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bug_aliases: Vec<Alias>,
}

impl RunReport {
    /// Points the findings at seeds that moved (`(from, to)`, as [`crate::core::triage::layout::arrange`]
    /// moved them): seeds are arranged one per bug after the run that saved them.
    pub fn rename_seeds(&mut self, moves: &[(std::path::PathBuf, std::path::PathBuf)]) {
        let moved: BTreeMap<String, String> = moves.iter().map(|(from, to)| (super::relative_path(from), super::relative_path(to))).collect();
        for entry in self.kernels.iter_mut().flat_map(|k| k.findings.iter_mut()) {
            if let Some(to) = entry.seed.as_ref().and_then(|s| moved.get(s)) {
                entry.seed = Some(to.clone());
            }
        }
    }

    /// An empty report started now.
    pub fn new() -> RunReport {
        let now = timestamp(SystemTime::now());
        RunReport {
            format: REPORT_FORMAT.into(),
            version: REPORT_VERSION,
            tool: ToolInfo::this(),
            started: now.clone(),
            finished: now,
            duration_secs: 0.0,
            budget_secs: None,
            config: None,
            gpu: None,
            shard: None,
            merged_from: Vec::new(),
            environment: Vec::new(),
            kernels: Vec::new(),
            counts: Counts::default(),
            new_findings: false,
            interrupted: false,
            bug_aliases: Vec::new(),
        }
    }

    /// The section of `kernel`, created (at the end) if missing.
    pub fn kernel_mut(&mut self, kernel: &str) -> &mut KernelSection {
        match self.kernels.iter().position(|k| k.kernel == kernel) {
            Some(i) => &mut self.kernels[i],
            None => {
                self.kernels.push(KernelSection { kernel: kernel.into(), ..KernelSection::default() });
                self.kernels.last_mut().expect("just pushed")
            }
        }
    }

    /// Adds an environment check.
    pub fn check(&mut self, name: &str, ok: bool, detail: impl Into<String>) {
        self.environment.push(EnvCheck { name: name.into(), ok, detail: detail.into(), shard: None });
    }

    /// Every finding with its kernel section.
    pub fn findings(&self) -> impl Iterator<Item = (&KernelSection, &FindingEntry)> {
        self.kernels.iter().flat_map(|k| k.findings.iter().map(move |f| (k, f)))
    }

    /// Files every finding under its bug ([`FindingEntry::bug`]), applying the mappings in
    /// [`RunReport::bug_aliases`] and adding the ones the findings teach. A finding's case is its
    /// kernel and case line, so the sanitizer records of an escalated case join its fault.
    pub fn file_bugs(&mut self) {
        let mut triage = Triage::new();
        self.bug_aliases.iter().cloned().for_each(|a| triage.add_alias(a));
        let case_id = |k: &KernelSection, f: &FindingEntry| format!("{}\n{}", k.kernel, f.case);
        for k in &self.kernels {
            for f in &k.findings {
                triage.observe(&case_id(k, f), &f.case, 0, vec![(f.finding.clone(), None)]);
            }
        }
        for k in &mut self.kernels {
            let kernel = k.kernel.clone();
            for f in &mut k.findings {
                f.bug = triage.bug_of(&format!("{kernel}\n{}", f.case), &f.finding);
            }
        }
        self.bug_aliases = triage.aliases().cloned().collect();
    }

    /// The bugs of the report: each with its findings, in order of first mention.
    pub fn bugs(&self) -> Vec<(BugId, Vec<(&KernelSection, &FindingEntry)>)> {
        let mut out: Vec<(BugId, Vec<(&KernelSection, &FindingEntry)>)> = Vec::new();
        for (k, f) in self.findings() {
            let Some(id) = &f.bug else { continue };
            match out.iter_mut().find(|(b, _)| b == id) {
                Some((_, v)) => v.push((k, f)),
                None => out.push((id.clone(), vec![(k, f)])),
            }
        }
        out
    }

    /// Recomputes [`RunReport::counts`] and [`RunReport::new_findings`] from the content, after
    /// filing the findings under bugs ([`RunReport::file_bugs`]).
    pub fn recount(&mut self) {
        self.file_bugs();
        let mut c = Counts::default();
        for k in &self.kernels {
            for r in &k.replays {
                c.replays += 1;
                if let Observed::NotRun { .. } = r.observed {
                    c.not_run += 1;
                    continue;
                }
                c.regressions += u64::from(!r.ok);
                match r.observed {
                    Observed::Pass => c.passed += 1,
                    Observed::Fail { .. } => c.failed += 1,
                    Observed::Error { .. } => c.errors += 1,
                    Observed::NotRun { .. } => continue,
                }
                c.cases += 1;
            }
            for row in &k.sweep {
                for (class, cell) in &row.cells {
                    c.cells += 1;
                    c.cells_failed += u64::from(!row.cell_ok(class));
                    c.passed += cell.pass;
                    c.failed += cell.fail;
                    c.errors += cell.error;
                    c.skipped += cell.skipped;
                    c.cases += cell.pass + cell.fail + cell.error;
                }
            }
            for camp in k.campaign.iter().chain(k.sanitizer.iter().map(|s| &s.counts)) {
                c.cases += camp.cases;
                c.passed += camp.passed;
                c.failed += camp.failed;
                c.errors += camp.errors;
                c.skipped += camp.skipped;
            }
            c.findings += k.findings.len() as u64;
            c.new_findings += k.findings.iter().filter(|f| f.new).count() as u64;
        }
        c.checks_failed = self.environment.iter().filter(|e| !e.ok).count() as u64;
        let bugs = self.bugs();
        c.bugs = bugs.len() as u64;
        // A bug is new when none of its findings was expected: a new signature of a known bug
        // (another set of unaligned tensors) is not a new bug.
        c.new_bugs = bugs.iter().filter(|(_, fs)| fs.iter().all(|(_, f)| f.new)).count() as u64;
        self.new_findings = c.new_bugs > 0;
        self.counts = c;
    }

    /// Whether every environment check passed.
    pub fn environment_ok(&self) -> bool {
        self.environment.iter().all(|e| e.ok)
    }

    /// Whether the GPU check failed (nothing ran on a GPU).
    pub fn no_gpu(&self) -> bool {
        self.environment.iter().any(|e| e.name == CHECK_GPU && !e.ok)
    }

    /// Whether the run passed: environment ok, no regression, nothing new, not interrupted.
    pub fn passed(&self) -> bool {
        self.exit_code() == exit::OK
    }

    /// The process exit status for this report: [`exit::NO_GPU`] when there was no GPU,
    /// [`exit::INTERRUPTED`], [`exit::FINDINGS`] for new findings or regressions,
    /// [`exit::SETUP`] when another environment check failed or a seed could not be replayed,
    /// else [`exit::OK`].
    pub fn exit_code(&self) -> i32 {
        if self.no_gpu() {
            exit::NO_GPU
        } else if self.interrupted {
            exit::INTERRUPTED
        } else if self.new_findings || self.counts.new_bugs > 0 || self.counts.regressions > 0 {
            exit::FINDINGS
        } else if !self.environment_ok() || self.counts.not_run > 0 {
            exit::SETUP
        } else {
            exit::OK
        }
    }

    /// The verdict in a few words, for the Markdown headline and the terminal.
    pub fn headline(&self) -> String {
        let c = &self.counts;
        let mut why = Vec::new();
        if c.new_bugs > 0 {
            why.push(format!("{} new bug{} ({} finding{})", c.new_bugs, plural(c.new_bugs), c.new_findings, plural(c.new_findings)));
        }
        if c.regressions > 0 {
            why.push(format!("{} seed regression{}", c.regressions, plural(c.regressions)));
        }
        if c.not_run > 0 {
            why.push(format!("{} seed{} not replayed", c.not_run, plural(c.not_run)));
        }
        if c.checks_failed > 0 {
            let names: Vec<&str> = self.environment.iter().filter(|e| !e.ok).map(|e| e.name.as_str()).collect();
            why.push(format!("failed check{}: {}", plural(c.checks_failed), names.join(", ")));
        }
        if self.interrupted {
            why.push("interrupted".into());
        }
        match self.exit_code() {
            exit::OK => format!("PASSED: nothing new in {} cases ({} known bug{}, {} findings)", c.cases, c.bugs, plural(c.bugs), c.findings),
            exit::NO_GPU => format!("FAILED: no GPU, nothing was checked ({})", why.join("; ")),
            _ => format!("FAILED: {}", why.join("; ")),
        }
    }
}

impl Default for RunReport {
    fn default() -> RunReport {
        RunReport::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::report::export::tests::sample;

    #[test]
    fn counts_and_verdict_follow_the_content() {
        let mut r = sample();
        let c = &r.counts;
        assert_eq!((c.replays, c.regressions, c.cells, c.cells_failed, c.findings, c.new_findings, c.checks_failed), (2, 1, 2, 1, 2, 1, 1));
        assert_eq!(c.cases, 2 + 3 + 3 + 1000 + 200);
        assert_eq!(c.skipped, 1 + 50);
        assert!(r.new_findings);
        assert_eq!(r.exit_code(), exit::FINDINGS);
        assert!(r.headline().contains("1 new bug (1 finding);") && r.headline().contains("1 seed regression"), "{}", r.headline());
        // Without the new finding and the regression, the failed check still fails the run.
        for k in &mut r.kernels {
            k.findings.retain(|f| !f.new);
            k.replays.retain(|x| x.ok);
            k.sweep.clear();
        }
        r.recount();
        assert_eq!(r.exit_code(), exit::SETUP, "{}", r.headline());
        r.environment.retain(|e| e.ok);
        r.recount();
        assert_eq!(r.exit_code(), exit::OK);
        assert!(r.passed() && r.headline().starts_with("PASSED"), "{}", r.headline());
        r.check(CHECK_GPU, false, "no driver");
        assert_eq!(r.exit_code(), exit::NO_GPU);
    }

    #[test]
    fn expectations() {
        let fail = Expectation::Fail { signature: "s".into() };
        assert!(fail.met_by(&Observed::Fail { signatures: vec!["t".into(), "s".into()] }));
        assert!(!fail.met_by(&Observed::Fail { signatures: vec!["t".into()] }), "another signature is a regression");
        assert!(!fail.met_by(&Observed::Pass));
        assert!(Expectation::Pass.met_by(&Observed::Pass));
        assert!(!Expectation::Pass.met_by(&Observed::NotRun { reason: "no GPU".into() }), "not run is never met");
        assert!(!Expectation::Pass.met_by(&Observed::Error { message: "x".into() }));
    }

    #[test]
    fn sweep_twin_keeps_the_rules() {
        let mut cell = crate::tools::sweep::Cell { pass: 2, fail: 1, ..Default::default() };
        cell.signatures.insert("a".into(), 1);
        let row = Row {
            config: "k".into(),
            cells: BTreeMap::from([("q+8".to_string(), cell.clone()), ("aligned".to_string(), crate::tools::sweep::Cell { pass: 3, ..Default::default() })]),
        };
        let classes = [InputClass::Aligned, InputClass::Offset("q".into(), 8)];
        let twin = MatrixRow::from_row(&row, &classes, true);
        assert_eq!(twin.alignment_dependent(), row.alignment_dependent(&classes));
        assert!(twin.alignment_dependent());
        assert!(!twin.cell_ok("q+8") && twin.cell_ok("aligned"));
        assert!(MatrixRow { expect_pass: false, ..twin.clone() }.cell_ok("q+8"));
        assert_eq!(twin.cells["q+8"].to_cell().consistent(), cell.consistent());
    }
}
