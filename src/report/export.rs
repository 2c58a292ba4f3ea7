//! Run reports for machines and CI: [`RunReport`] and its four renderings.
//!
//! A [`RunReport`] is plain serde data written by `cudafuzz gate` (one per shard) and combined by
//! `cudafuzz report merge`: the environment checks, then one [`KernelSection`] per kernel with
//! its seed replays, sweep-matrix rows, fuzz campaign, sanitizer passes and findings. The JSON
//! form is the source of truth; Markdown (for `$GITHUB_STEP_SUMMARY`), JUnit XML (one test per
//! environment check, seed replay, matrix cell, campaign and sanitizer pass) and SARIF 2.1.0
//! (one result per finding, with file and line, for code-scanning UIs) are derived from it, so
//! a merged report renders exactly like a single one. XML is written with `quick-xml` and SARIF
//! through serde structs: nothing is escaped by hand.
//!
//! The verdict is derived from the content ([`RunReport::exit_code`]): a report passes only when
//! every environment check passed, no seed regressed, nothing new was found and the run was not
//! interrupted.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use quick_xml::events::{BytesDecl, BytesText, Event};
use quick_xml::Writer;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::exit;
use crate::finding::Finding;
use crate::shard::Shard;
use crate::sweep::{InputClass, Row};

/// Format tag of report files.
pub const REPORT_FORMAT: &str = "cudafuzz-report";
/// Report format version this build writes and reads.
pub const REPORT_VERSION: u32 = 1;
/// The SARIF version written.
pub const SARIF_VERSION: &str = "2.1.0";
/// The SARIF 2.1.0 JSON schema.
pub const SARIF_SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";
/// Name of the environment check that a GPU is present; when it fails the run exits with
/// [`exit::NO_GPU`].
pub const CHECK_GPU: &str = "gpu";

/// File names [`RunReport::write_all`] uses inside its directory.
pub const REPORT_FILES: [&str; 4] = ["report.json", "report.md", "junit.xml", "results.sarif"];

/// A report that cannot be read or written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReportError {
    /// Reading or writing a file failed.
    #[error("{path}: cannot {action}")]
    Io {
        /// The file.
        path: PathBuf,
        /// `read`, `write` or `create directory`.
        action: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a report this build reads.
    #[error("{path}: not a cudafuzz report (line {line}, column {column}): {message}; reports are the report.json that `cudafuzz gate` writes")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde's message, naming the field.
        message: String,
    },
    /// Another format tag or version.
    #[error("{path}: report format `{format}` version {version} is not supported (this build reads `{REPORT_FORMAT}` version {REPORT_VERSION})")]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// Format tag found.
        format: String,
        /// Version found.
        version: u32,
    },
}

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
        signature: String,
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
        signatures: Vec<String>,
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
            Observed::Fail { signatures } => write!(f, "fail with {}", signatures.join(", ")),
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

/// One cell of a sweep row: a serializable twin of [`crate::sweep::Cell`].
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
    /// The twin of a [`crate::sweep::Cell`].
    pub fn from_cell(c: &crate::sweep::Cell) -> MatrixCell {
        MatrixCell { pass: c.pass, fail: c.fail, error: c.error, skipped: c.skipped, signatures: c.signatures.clone() }
    }

    /// Back to a [`crate::sweep::Cell`] (for its verdict and consistency rules).
    pub fn to_cell(&self) -> crate::sweep::Cell {
        crate::sweep::Cell { pass: self.pass, fail: self.fail, error: self.error, skipped: self.skipped, signatures: self.signatures.clone() }
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
    /// The twin of a [`crate::sweep::Row`] swept over `classes`.
    pub fn from_row(row: &Row, classes: &[InputClass], expect_pass: bool) -> MatrixRow {
        MatrixRow {
            config: row.config.clone(),
            expect_pass,
            classes: classes.iter().map(|c| c.to_string()).collect(),
            cells: row.cells.iter().map(|(k, c)| (k.clone(), MatrixCell::from_cell(c))).collect(),
        }
    }

    /// Whether the outcome depends on alignment ([`crate::sweep::Row::alignment_dependent`]).
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
    pub signature: String,
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
    /// Whether anything new was found (the headline verdict).
    pub new_findings: bool,
    /// Whether the run was stopped before it finished.
    #[serde(default)]
    pub interrupted: bool,
}

/// Now, as RFC 3339 UTC with seconds (`2025-01-31T23:59:59Z`).
pub fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

impl RunReport {
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

    /// Recomputes [`RunReport::counts`] and [`RunReport::new_findings`] from the content.
    pub fn recount(&mut self) {
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
        self.new_findings = c.new_findings > 0;
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
        } else if self.new_findings || self.counts.new_findings > 0 || self.counts.regressions > 0 {
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
        if c.new_findings > 0 {
            why.push(format!("{} new finding{}", c.new_findings, plural(c.new_findings)));
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
            exit::OK => format!("PASSED: nothing new in {} cases ({} findings expected)", c.cases, c.findings),
            exit::NO_GPU => format!("FAILED: no GPU, nothing was checked ({})", why.join("; ")),
            _ => format!("FAILED: {}", why.join("; ")),
        }
    }

    /// Pretty JSON, newline-terminated.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("reports always serialize");
        s.push('\n');
        s
    }

    /// Parses a report written by [`RunReport::to_json`]; `path` names it in errors.
    pub fn from_json(path: &Path, text: &str) -> Result<RunReport, ReportError> {
        let json_err = |e: serde_json::Error| ReportError::Json { path: path.into(), line: e.line(), column: e.column(), message: e.to_string() };
        let value: serde_json::Value = serde_json::from_str(text).map_err(json_err)?;
        let format = value.get("format").and_then(|v| v.as_str()).unwrap_or("?").to_string();
        let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
        if format != REPORT_FORMAT || version != REPORT_VERSION {
            return Err(ReportError::UnknownFormat { path: path.into(), format, version });
        }
        serde_json::from_str(text).map_err(json_err)
    }

    /// Reads a report file.
    pub fn load(path: &Path) -> Result<RunReport, ReportError> {
        let text = std::fs::read_to_string(path).map_err(|source| ReportError::Io { path: path.into(), action: "read", source })?;
        RunReport::from_json(path, &text)
    }

    /// Writes the four renderings into `dir` ([`REPORT_FILES`]), each atomically; returns the
    /// paths written.
    pub fn write_all(&self, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
        std::fs::create_dir_all(dir).map_err(|source| ReportError::Io { path: dir.into(), action: "create directory", source })?;
        let texts = [self.to_json(), self.to_markdown(), self.to_junit(), self.to_sarif()];
        let mut out = Vec::new();
        for (name, text) in REPORT_FILES.iter().zip(texts) {
            let path = dir.join(name);
            let io = |source| ReportError::Io { path: path.clone(), action: "write", source };
            let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
            std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(io)?;
            tmp.persist(&path).map_err(|e| io(e.error))?;
            out.push(path);
        }
        Ok(out)
    }

    /// Markdown that fits `$GITHUB_STEP_SUMMARY`: the verdict first, then tables.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let mark = if self.passed() { "✅" } else { "❌" };
        let _ = writeln!(s, "## {mark} cudafuzz: {}\n", md(&self.headline()));
        let mut facts = vec![format!("{} {}", self.tool.name, self.tool.version)];
        if let Some(g) = &self.gpu {
            facts.push(format!("GPU {} ({}), driver {}", g.name, g.arch, g.driver));
        }
        match (&self.shard, self.merged_from.is_empty()) {
            (Some(sh), _) => facts.push(format!("shard {sh}")),
            (None, false) => facts.push(format!("merged from {}", self.merged_from.join(", "))),
            _ => {}
        }
        facts.push(format!("{:.0} s", self.duration_secs));
        if let Some(b) = self.budget_secs {
            facts.push(format!("budget {b:.0} s"));
        }
        facts.push(format!("started {}", self.started));
        let _ = writeln!(s, "{}\n", md(&facts.join(" · ")));
        let c = &self.counts;
        let _ = writeln!(
            s,
            "{} cases: {} passed, {} failed, {} errors, {} skipped · {} findings ({} new) · {} seed replays ({} regressions, {} not run) · {} sweep cells ({} failing)\n",
            c.cases, c.passed, c.failed, c.errors, c.skipped, c.findings, c.new_findings, c.replays, c.regressions, c.not_run, c.cells, c.cells_failed
        );

        s.push_str("### Environment\n\n| check | result | detail |\n| --- | --- | --- |\n");
        for e in &self.environment {
            let name = match e.shard {
                Some(sh) => format!("{} [{sh}]", e.name),
                None => e.name.clone(),
            };
            let _ = writeln!(s, "| {} | {} | {} |", md(&name), ok_word(e.ok), md(&e.detail));
        }

        let mut findings: Vec<(&KernelSection, &FindingEntry)> = self.findings().collect();
        if !findings.is_empty() {
            findings.sort_by_key(|(_, f)| !f.new);
            s.push_str("\n### Findings\n\n| | kernel | finding | source | step | seed |\n| --- | --- | --- | --- | --- | --- |\n");
            for (k, f) in findings {
                let source = f.finding.source.as_ref().map(|src| src.to_string()).unwrap_or_default();
                let seed = f.seed.as_deref().map(|p| format!("`{}`", md(p))).unwrap_or_default();
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} |",
                    if f.new { "**new**" } else { "expected" },
                    md(&k.kernel),
                    md(&f.finding.to_string()),
                    md(&source),
                    f.step.name(),
                    seed
                );
            }
        }

        let replays: Vec<&SeedReplay> = self.kernels.iter().flat_map(|k| &k.replays).collect();
        if !replays.is_empty() {
            s.push_str("\n### Seed replays\n\n| seed | expected | observed | result |\n| --- | --- | --- | --- |\n");
            for r in replays {
                let _ = writeln!(s, "| `{}` | {} | {} | {} |", md(&r.seed), md(&r.expected.to_string()), md(&r.observed.to_string()), ok_word(r.ok));
            }
        }

        for k in self.kernels.iter().filter(|k| !k.sweep.is_empty()) {
            let _ = writeln!(s, "\n### Sweep matrix: {}\n", md(&k.kernel));
            let classes = k.sweep[0].classes.clone();
            let _ = writeln!(s, "| configuration | {} | alignment-dependent |", classes.iter().map(|c| md(c)).collect::<Vec<_>>().join(" | "));
            let _ = writeln!(s, "| --- |{} --- |", " ---: |".repeat(classes.len()));
            for row in &k.sweep {
                let cells: Vec<String> = classes
                    .iter()
                    .map(|class| match row.cells.get(class) {
                        None => "·".into(),
                        Some(cell) => {
                            let mark = if !row.cell_ok(class) { " ❌" } else if cell.to_cell().consistent() { "" } else { " !" };
                            format!("{}/{}{mark}", cell.pass, cell.fail + cell.error)
                        }
                    })
                    .collect();
                let label = if row.expect_pass { md(&row.config) } else { format!("{} (recorded)", md(&row.config)) };
                let _ = writeln!(s, "| {label} | {} | {} |", cells.join(" | "), if row.alignment_dependent() { "yes" } else { "no" });
            }
            s.push_str("\ncells: passed/failed repetitions; ! = not consistent across repetitions; · = another shard's cell\n");
        }

        let campaigns: Vec<(&KernelSection, String, &Campaign)> = self
            .kernels
            .iter()
            .flat_map(|k| {
                k.campaign
                    .iter()
                    .map(move |c| (k, "fuzz".to_string(), c))
                    .chain(k.sanitizer.iter().map(move |r| (k, r.tools.clone(), &r.counts)))
            })
            .collect();
        if !campaigns.is_empty() {
            s.push_str("\n### Campaigns\n\n| kernel | run | budget s | elapsed s | cases | passed | failed | errors | skipped |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
            for (k, what, c) in campaigns {
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.0} | {:.1} | {} | {} | {} | {} | {} |",
                    md(&k.kernel),
                    md(&what),
                    c.budget_secs,
                    c.elapsed_secs,
                    c.cases,
                    c.passed,
                    c.failed,
                    c.errors,
                    c.skipped
                );
            }
        }
        s
    }

    /// JUnit XML: one test per environment check, seed replay, sweep cell, fuzz campaign and
    /// sanitizer pass; failures carry the finding text.
    pub fn to_junit(&self) -> String {
        let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
        self.write_junit(&mut w).expect("writing to memory cannot fail");
        let mut s = String::from_utf8(w.into_inner()).expect("the writer emits UTF-8");
        s.push('\n');
        s
    }

    fn junit_suites(&self) -> Vec<Suite> {
        let mut suites = Vec::new();
        let env = Suite {
            name: "environment".into(),
            cases: self
                .environment
                .iter()
                .map(|e| TestCase {
                    class: "cudafuzz.environment".into(),
                    name: match e.shard {
                        Some(sh) => format!("{} [{sh}]", e.name),
                        None => e.name.clone(),
                    },
                    time: 0.0,
                    result: if e.ok { TestResult::Pass } else { TestResult::Fail { message: e.detail.clone(), kind: "environment".into(), text: e.detail.clone() } },
                    out: if e.ok { e.detail.clone() } else { String::new() },
                })
                .collect(),
        };
        suites.push(env);
        for k in &self.kernels {
            let mut cases = Vec::new();
            let findings_text = |step: Step| -> Vec<&FindingEntry> { k.findings.iter().filter(|f| f.step == step && f.new).collect() };
            for r in &k.replays {
                let result = match (&r.observed, r.ok) {
                    (Observed::NotRun { reason }, _) => TestResult::Skipped { message: reason.clone() },
                    (_, true) => TestResult::Pass,
                    (observed, false) => {
                        let mut text = format!("expected: {}\nobserved: {}\n", r.expected, observed);
                        for f in k.findings.iter().filter(|f| f.step == Step::Replay && f.seed.as_deref() == Some(r.seed.as_str())) {
                            let _ = writeln!(text, "{}", f.finding);
                        }
                        TestResult::Fail { message: format!("expected {}, observed {}", r.expected, observed), kind: "regression".into(), text }
                    }
                };
                cases.push(TestCase { class: format!("cudafuzz.replay.{}", k.kernel), name: r.seed.clone(), time: 0.0, result, out: r.case.clone() });
            }
            for row in &k.sweep {
                for class in &row.classes {
                    let Some(cell) = row.cells.get(class) else { continue };
                    let sigs: Vec<String> = cell.signatures.iter().map(|(s, n)| format!("{n} × {s}")).collect();
                    let summary = format!("{} passed, {} failed, {} errors, {} skipped", cell.pass, cell.fail, cell.error, cell.skipped);
                    let result = if row.cell_ok(class) {
                        TestResult::Pass
                    } else {
                        TestResult::Fail { message: summary.clone(), kind: "sweep".into(), text: sigs.join("\n") }
                    };
                    let out = if sigs.is_empty() { summary } else { format!("{summary}\n{}", sigs.join("\n")) };
                    cases.push(TestCase { class: format!("cudafuzz.sweep.{}", k.kernel), name: format!("{} × {class}", row.config), time: 0.0, result, out });
                }
            }
            let runs = k
                .campaign
                .iter()
                .map(|c| ("fuzz".to_string(), Step::Fuzz, c))
                .chain(k.sanitizer.iter().map(|r| (r.tools.clone(), Step::Sanitizer, &r.counts)));
            for (what, step, c) in runs {
                let new = findings_text(step);
                let summary = format!("{} cases: {} passed, {} failed, {} errors, {} skipped", c.cases, c.passed, c.failed, c.errors, c.skipped);
                let result = if new.is_empty() {
                    TestResult::Pass
                } else {
                    let mut text = String::new();
                    for f in &new {
                        let _ = writeln!(text, "{}\n  signature: {}\n  case: {}", f.finding, f.signature, f.case);
                        if let Some(seed) = &f.seed {
                            let _ = writeln!(text, "  replay: cudafuzz repro {seed}");
                        }
                    }
                    TestResult::Fail { message: format!("{} new finding{}", new.len(), plural(new.len() as u64)), kind: "finding".into(), text }
                };
                cases.push(TestCase { class: format!("cudafuzz.{}", step.name()), name: format!("{} ({what})", k.kernel), time: c.elapsed_secs, result, out: summary });
            }
            suites.push(Suite { name: format!("kernel {}", k.kernel), cases });
        }
        suites
    }

    fn write_junit(&self, w: &mut Writer<Vec<u8>>) -> std::io::Result<()> {
        let suites = self.junit_suites();
        let total = |f: &dyn Fn(&TestCase) -> bool| suites.iter().flat_map(|s| &s.cases).filter(|c| f(c)).count().to_string();
        w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
        w.create_element("testsuites")
            .with_attribute(("name", "cudafuzz"))
            .with_attribute(("tests", total(&|_| true).as_str()))
            .with_attribute(("failures", total(&|c| matches!(c.result, TestResult::Fail { .. })).as_str()))
            .with_attribute(("skipped", total(&|c| matches!(c.result, TestResult::Skipped { .. })).as_str()))
            .with_attribute(("time", format!("{:.3}", self.duration_secs).as_str()))
            .write_inner_content(|w| {
                for suite in &suites {
                    let count = |f: &dyn Fn(&TestCase) -> bool| suite.cases.iter().filter(|c| f(c)).count().to_string();
                    w.create_element("testsuite")
                        .with_attribute(("name", suite.name.as_str()))
                        .with_attribute(("tests", count(&|_| true).as_str()))
                        .with_attribute(("failures", count(&|c| matches!(c.result, TestResult::Fail { .. })).as_str()))
                        .with_attribute(("errors", "0"))
                        .with_attribute(("skipped", count(&|c| matches!(c.result, TestResult::Skipped { .. })).as_str()))
                        .with_attribute(("timestamp", self.started.as_str()))
                        .write_inner_content(|w| {
                            if suite.name == "environment" {
                                w.create_element("properties").write_inner_content(|w| {
                                    let mut props = vec![("tool", format!("{} {}", self.tool.name, self.tool.version)), ("verdict", self.headline())];
                                    if let Some(g) = &self.gpu {
                                        props.push(("gpu", format!("{} ({}), driver {}", g.name, g.arch, g.driver)));
                                    }
                                    if let Some(sh) = self.shard {
                                        props.push(("shard", sh.to_string()));
                                    }
                                    for (name, value) in props {
                                        w.create_element("property").with_attribute(("name", name)).with_attribute(("value", xml_text(&value).as_str())).write_empty()?;
                                    }
                                    Ok(())
                                })?;
                            }
                            for case in &suite.cases {
                                let el = w
                                    .create_element("testcase")
                                    .with_attribute(("classname", xml_text(&case.class).as_str()))
                                    .with_attribute(("name", xml_text(&case.name).as_str()))
                                    .with_attribute(("time", format!("{:.3}", case.time).as_str()));
                                el.write_inner_content(|w| {
                                    match &case.result {
                                        TestResult::Pass => {}
                                        TestResult::Fail { message, kind, text } => {
                                            w.create_element("failure")
                                                .with_attribute(("message", xml_text(message).as_str()))
                                                .with_attribute(("type", kind.as_str()))
                                                .write_text_content(BytesText::new(&xml_text(text)))?;
                                        }
                                        TestResult::Skipped { message } => {
                                            w.create_element("skipped").with_attribute(("message", xml_text(message).as_str())).write_empty()?;
                                        }
                                    }
                                    if !case.out.is_empty() {
                                        w.create_element("system-out").write_text_content(BytesText::new(&xml_text(&case.out)))?;
                                    }
                                    Ok(())
                                })?;
                            }
                            Ok(())
                        })?;
                }
                Ok(())
            })?;
        Ok(())
    }

    /// The SARIF log: one result per finding.
    pub fn sarif(&self) -> SarifLog {
        let mut rules: Vec<SarifRule> = Vec::new();
        let mut results = Vec::new();
        for (k, f) in self.findings() {
            let id = rule_id(&f.finding);
            let index = match rules.iter().position(|r| r.id == id) {
                Some(i) => i,
                None => {
                    rules.push(SarifRule {
                        id: id.clone(),
                        name: f.finding.kind.name().to_string(),
                        short_description: SarifMessage { text: rule_text(&f.finding) },
                        help_uri: None,
                    });
                    rules.len() - 1
                }
            };
            let location = match (&f.finding.source, &f.source_path, &k.source) {
                (Some(src), path, _) => Some(SarifLocation::at(path.clone().unwrap_or_else(|| src.file.clone()), Some(src.line))),
                (None, _, Some(kernel_source)) => Some(SarifLocation::at(kernel_source.clone(), None)),
                (None, _, None) => None,
            };
            let mut text = format!("{}: {}", f.finding.kind, f.finding.detail);
            if let Some(seed) = &f.seed {
                let _ = write!(text, " (replay: cudafuzz repro {seed})");
            }
            results.push(SarifResult {
                rule_id: id,
                rule_index: index,
                level: if f.new { "error".into() } else { "warning".into() },
                message: SarifMessage { text },
                locations: location.into_iter().collect(),
                partial_fingerprints: BTreeMap::from([("cudafuzzSignature/v1".to_string(), f.signature.clone())]),
                baseline_state: if f.new { "new".into() } else { "unchanged".into() },
                properties: SarifResultProperties { kernel: k.kernel.clone(), case: f.case.clone(), seed: f.seed.clone(), step: f.step.name().into() },
            });
        }
        SarifLog {
            schema: SARIF_SCHEMA.into(),
            version: SARIF_VERSION.into(),
            runs: vec![SarifRun {
                tool: SarifTool {
                    driver: SarifDriver {
                        name: self.tool.name.clone(),
                        version: self.tool.version.clone(),
                        information_uri: None,
                        rules,
                    },
                },
                automation_details: Some(SarifAutomation {
                    id: match self.shard {
                        Some(sh) => format!("cudafuzz/gate/shard-{}-of-{}", sh.number(), sh.count()),
                        None => "cudafuzz/gate".into(),
                    },
                }),
                results,
            }],
        }
    }

    /// SARIF 2.1.0 JSON ([`RunReport::sarif`]).
    pub fn to_sarif(&self) -> String {
        let mut s = serde_json::to_string_pretty(&self.sarif()).expect("SARIF always serializes");
        s.push('\n');
        s
    }
}

impl Default for RunReport {
    fn default() -> RunReport {
        RunReport::new()
    }
}

/// A SARIF rule id: the sanitizer's record kind when there is one (finer), else the finding kind.
fn rule_id(f: &Finding) -> String {
    match &f.sanitizer_kind {
        Some(k) => k.clone(),
        None => f.kind.name().to_string(),
    }
}

fn rule_text(f: &Finding) -> String {
    match &f.sanitizer_kind {
        Some(k) => format!("{} reported by compute-sanitizer {} ({k})", f.kind, f.oracle),
        None => format!("{} (oracle {})", f.kind, f.oracle),
    }
}

struct Suite {
    name: String,
    cases: Vec<TestCase>,
}

struct TestCase {
    class: String,
    name: String,
    time: f64,
    result: TestResult,
    out: String,
}

enum TestResult {
    Pass,
    Fail { message: String, kind: String, text: String },
    Skipped { message: String },
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn ok_word(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "**FAILED**"
    }
}

/// Text made safe for a Markdown table cell: `|` would end the cell and a newline the row.
fn md(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// Text XML 1.0 can carry: control characters other than tab and newline are not allowed even
/// escaped (the writer escapes the rest).
fn xml_text(s: &str) -> String {
    s.chars().map(|c| if c.is_control() && c != '\n' && c != '\t' { '\u{fffd}' } else { c }).collect()
}

/// A SARIF 2.1.0 log (the subset cudafuzz writes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SarifLog {
    /// The schema URI.
    #[serde(rename = "$schema")]
    pub schema: String,
    /// `2.1.0`.
    pub version: String,
    /// One run.
    pub runs: Vec<SarifRun>,
}

/// A SARIF run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifRun {
    /// The tool.
    pub tool: SarifTool,
    /// Distinguishes the shards of one job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automation_details: Option<SarifAutomation>,
    /// One result per finding.
    pub results: Vec<SarifResult>,
}

/// `run.automationDetails`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SarifAutomation {
    /// `cudafuzz/gate` or `cudafuzz/gate/shard-I-of-N`.
    pub id: String,
}

/// `run.tool`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SarifTool {
    /// The driver.
    pub driver: SarifDriver,
}

/// `run.tool.driver`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifDriver {
    /// `cudafuzz`.
    pub name: String,
    /// The version.
    pub version: String,
    /// Where to read about the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub information_uri: Option<String>,
    /// The rules the results refer to.
    pub rules: Vec<SarifRule>,
}

/// A SARIF rule (one per finding kind or sanitizer record kind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifRule {
    /// The rule id.
    pub id: String,
    /// A readable name.
    pub name: String,
    /// One line.
    pub short_description: SarifMessage,
    /// Help page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help_uri: Option<String>,
}

/// A SARIF message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SarifMessage {
    /// Plain text.
    pub text: String,
}

/// A SARIF result: one finding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifResult {
    /// Finding kind or sanitizer record kind.
    pub rule_id: String,
    /// Index of the rule in `tool.driver.rules`.
    pub rule_index: usize,
    /// `error` for a new finding, `warning` for an expected one.
    pub level: String,
    /// The finding's detail.
    pub message: SarifMessage,
    /// The source line, or the kernel's source file.
    pub locations: Vec<SarifLocation>,
    /// The finding signature, so code-scanning UIs track one alert per bug.
    pub partial_fingerprints: BTreeMap<String, String>,
    /// `new` or `unchanged` (an expected failure).
    pub baseline_state: String,
    /// cudafuzz's own fields.
    pub properties: SarifResultProperties,
}

/// `result.properties`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SarifResultProperties {
    /// Kernel name.
    pub kernel: String,
    /// The case in one line.
    pub case: String,
    /// The seed that replays it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
    /// The gate step.
    pub step: String,
}

/// A SARIF location.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifLocation {
    /// The file and line.
    pub physical_location: SarifPhysicalLocation,
}

impl SarifLocation {
    /// `uri` (relative to the repository root), at `line` when known.
    pub fn at(uri: String, line: Option<u32>) -> SarifLocation {
        SarifLocation {
            physical_location: SarifPhysicalLocation {
                artifact_location: SarifArtifactLocation { uri: uri.replace('\\', "/"), uri_base_id: Some("%SRCROOT%".into()) },
                region: line.filter(|&l| l > 0).map(|start_line| SarifRegion { start_line }),
            },
        }
    }
}

/// `location.physicalLocation`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifPhysicalLocation {
    /// The file.
    pub artifact_location: SarifArtifactLocation,
    /// The line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<SarifRegion>,
}

/// `physicalLocation.artifactLocation`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifArtifactLocation {
    /// Path relative to `uriBaseId`.
    pub uri: String,
    /// `%SRCROOT%`: the repository root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri_base_id: Option<String>,
}

/// `physicalLocation.region`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifRegion {
    /// 1-based line.
    pub start_line: u32,
}

/// `path` relative to the current directory or the source tree when it lies inside one of
/// them, with `/` separators (for report links and SARIF URIs); otherwise unchanged.
pub fn relative_path(path: &Path) -> String {
    let bases = [std::env::current_dir().ok(), Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")))];
    let rel = bases.iter().flatten().find_map(|b| path.strip_prefix(b).ok()).unwrap_or(path);
    rel.to_string_lossy().replace('\\', "/")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::case::TensorId;
    use crate::finding::{FindingKind, Location, Oracle, SourceLocation};

    pub(crate) fn finding(kernel: &str, kind: FindingKind, oracle: Oracle, source: Option<(&str, u32)>) -> Finding {
        Finding {
            kind,
            oracle,
            kernel: kernel.into(),
            tensor: Some(TensorId::K),
            location: Some(Location::RedzoneAfter { bytes_past_end: 4 }),
            count: 1,
            cuda_error: None,
            source: source.map(|(file, line)| SourceLocation { file: file.into(), line, function: None }),
            access_size: Some(4),
            sanitizer_kind: oracle.is_sanitizer().then(|| "invalid_global_read_out_of_bounds".to_string()),
            alignment: [16, 16, 16, 16],
            inside_contract: true,
            detail: "read 4 bytes <past> k's end & \"more\" | pipes".into(),
        }
    }

    /// A report with one of everything: a failed check, a passing and a regressed replay, a
    /// sweep row with a failing cell, a campaign with a new finding (with a source line) and a
    /// sanitizer pass with an expected finding (without one).
    pub(crate) fn sample() -> RunReport {
        let mut r = RunReport::new();
        r.started = "2025-01-31T23:00:00Z".into();
        r.finished = "2025-01-31T23:20:00Z".into();
        r.duration_secs = 1200.0;
        r.budget_secs = Some(1200.0);
        r.gpu = Some(GpuSummary { name: "NVIDIA H100 80GB HBM3".into(), arch: "sm_90".into(), driver: "13.0".into() });
        r.shard = Shard::new(1, 4);
        r.check("gpu", true, "NVIDIA H100 80GB HBM3");
        r.check("compute-sanitizer", false, "not found <anywhere> & \u{1b}[31mred");
        let k = r.kernel_mut("oob_read_k");
        k.source = Some("kernels/testing/simple_attn.cu".into());
        k.replays.push(SeedReplay {
            seed: "seeds/expected/a.json".into(),
            case: "f16 b1".into(),
            expected: Expectation::Fail { signature: "sig-a".into() },
            observed: Observed::Fail { signatures: vec!["sig-a".into()] },
            ok: true,
        });
        k.replays.push(SeedReplay {
            seed: "seeds/fixed/b.json".into(),
            case: "f16 b2".into(),
            expected: Expectation::Pass,
            observed: Observed::Fail { signatures: vec!["sig-b".into()] },
            ok: false,
        });
        let mut cell = MatrixCell { pass: 3, ..MatrixCell::default() };
        let mut bad = MatrixCell { pass: 1, fail: 2, ..MatrixCell::default() };
        bad.signatures.insert("misaligned_address/cuda_status/oob_read_k/q/-/unaligned:q".into(), 2);
        cell.skipped = 1;
        k.sweep.push(MatrixRow {
            config: "oob_read_k[BLOCK_THREADS=128]".into(),
            expect_pass: true,
            classes: vec!["aligned".into(), "q+8".into()],
            cells: BTreeMap::from([("aligned".to_string(), cell), ("q+8".to_string(), bad)]),
        });
        k.campaign = Some(Campaign { budget_secs: 600.0, elapsed_secs: 600.5, seed: 0, cases: 1000, passed: 990, failed: 10, errors: 0, skipped: 50 });
        k.sanitizer.push(SanitizerRun { tools: "memcheck".into(), counts: Campaign { cases: 200, passed: 199, failed: 1, ..Campaign::default() } });
        let f = finding("oob_read_k", FindingKind::SanitizerMemory, Oracle::Memcheck, Some(("simple_attn.cu", 42)));
        k.findings.push(FindingEntry {
            signature: f.signature().0,
            finding: f,
            seed: Some("out/seeds/oob_read_k-sanitizer_memory-abc.json".into()),
            case: "f16 b1 h2/1 q17 k33 d40".into(),
            step: Step::Fuzz,
            new: true,
            source_path: Some("kernels/testing/simple_attn.cu".into()),
        });
        let g = finding("oob_read_k", FindingKind::CanaryDamage, Oracle::Canary, None);
        k.findings.push(FindingEntry { signature: g.signature().0, finding: g, seed: None, case: "f32 b1".into(), step: Step::Sanitizer, new: false, source_path: None });
        r.recount();
        r
    }

    #[test]
    fn counts_and_verdict_follow_the_content() {
        let mut r = sample();
        let c = &r.counts;
        assert_eq!((c.replays, c.regressions, c.cells, c.cells_failed, c.findings, c.new_findings, c.checks_failed), (2, 1, 2, 1, 2, 1, 1));
        assert_eq!(c.cases, 2 + 3 + 3 + 1000 + 200);
        assert_eq!(c.skipped, 1 + 50);
        assert!(r.new_findings);
        assert_eq!(r.exit_code(), exit::FINDINGS);
        assert!(r.headline().contains("1 new finding;") && r.headline().contains("1 seed regression"), "{}", r.headline());
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
    fn json_round_trips_and_rejects_other_formats() {
        let r = sample();
        let text = r.to_json();
        let back = RunReport::from_json(Path::new("r.json"), &text).unwrap();
        assert_eq!(back, r);
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["version"] = 99.into();
        let e = RunReport::from_json(Path::new("r.json"), &v.to_string()).unwrap_err();
        assert!(matches!(e, ReportError::UnknownFormat { version: 99, .. }), "{e}");
        let e = RunReport::from_json(Path::new("bad.json"), "{\"format\": \"cudafuzz-report\", \"version\": 1}").unwrap_err();
        assert!(e.to_string().contains("bad.json") && e.to_string().contains("tool"), "{e}");
    }

    #[test]
    fn junit_parses_back_with_one_test_per_check_replay_cell_and_campaign() {
        let r = sample();
        let xml = r.to_junit();
        let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "testsuites");
        let cases: Vec<roxmltree::Node> = root.descendants().filter(|n| n.has_tag_name("testcase")).collect();
        // 2 checks + 2 replays + 2 cells + 1 campaign + 1 sanitizer pass.
        assert_eq!(cases.len(), 8, "{xml}");
        assert_eq!(root.attribute("tests"), Some("8"));
        let failed: Vec<String> = cases
            .iter()
            .filter(|c| c.children().any(|n| n.has_tag_name("failure")))
            .map(|c| format!("{}::{}", c.attribute("classname").unwrap(), c.attribute("name").unwrap()))
            .collect();
        assert_eq!(
            failed,
            vec![
                "cudafuzz.environment::compute-sanitizer",
                "cudafuzz.replay.oob_read_k::seeds/fixed/b.json",
                "cudafuzz.sweep.oob_read_k::oob_read_k[BLOCK_THREADS=128] × q+8",
                "cudafuzz.fuzz::oob_read_k (fuzz)",
            ]
        );
        assert_eq!(root.attribute("failures"), Some("4"));
        // The failure carries the finding text, escaped by the writer and read back intact.
        let fuzz = cases.iter().find(|c| c.attribute("classname") == Some("cudafuzz.fuzz")).unwrap();
        let failure = fuzz.children().find(|n| n.has_tag_name("failure")).unwrap();
        let text = failure.text().unwrap();
        assert!(text.contains("<past> k's end & \"more\"") && text.contains("cudafuzz repro out/seeds/"), "{text}");
        let env = cases.iter().find(|c| c.attribute("name") == Some("compute-sanitizer")).unwrap();
        let msg = env.children().find(|n| n.has_tag_name("failure")).unwrap().attribute("message").unwrap();
        assert!(msg.starts_with("not found <anywhere> &") && !msg.contains('\u{1b}'), "{msg}");
        let props: Vec<&str> = root.descendants().filter(|n| n.has_tag_name("property")).filter_map(|n| n.attribute("name")).collect();
        assert!(props.contains(&"gpu") && props.contains(&"shard"), "{props:?}");
    }

    #[test]
    fn junit_marks_replays_not_run_as_skipped() {
        let mut r = RunReport::new();
        r.check(CHECK_GPU, false, "no CUDA driver");
        r.kernel_mut("k").replays.push(SeedReplay {
            seed: "s.json".into(),
            case: "c".into(),
            expected: Expectation::Pass,
            observed: Observed::NotRun { reason: "no GPU".into() },
            ok: false,
        });
        r.recount();
        let xml = r.to_junit();
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let skipped = doc.descendants().filter(|n| n.has_tag_name("skipped")).count();
        assert_eq!(skipped, 1, "{xml}");
        assert_eq!(doc.root_element().attribute("skipped"), Some("1"));
        assert_eq!(r.exit_code(), exit::NO_GPU);
    }

    #[test]
    fn sarif_has_the_required_fields_and_one_result_per_finding() {
        let r = sample();
        let v: serde_json::Value = serde_json::from_str(&r.to_sarif()).unwrap();
        assert_eq!(v["version"], "2.1.0");
        assert_eq!(v["$schema"], SARIF_SCHEMA);
        assert_eq!(v["runs"][0]["tool"]["driver"]["name"], "cudafuzz");
        assert_eq!(v["runs"][0]["tool"]["driver"]["version"], env!("CARGO_PKG_VERSION"));
        let results = v["runs"][0]["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        for res in results {
            let locs = res["locations"].as_array().unwrap();
            assert!(!locs.is_empty(), "{res}");
            for l in locs {
                let uri = l["physicalLocation"]["artifactLocation"]["uri"].as_str().unwrap();
                assert!(uri.ends_with(".cu") && !uri.starts_with('/'), "{uri}");
            }
            let rule = res["ruleId"].as_str().unwrap();
            let index = res["ruleIndex"].as_u64().unwrap() as usize;
            assert_eq!(v["runs"][0]["tool"]["driver"]["rules"][index]["id"], rule);
        }
        // The sanitizer finding: its record kind, its source line, level error (new).
        assert_eq!(results[0]["ruleId"], "invalid_global_read_out_of_bounds");
        assert_eq!(results[0]["level"], "error");
        assert_eq!(results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], "kernels/testing/simple_attn.cu");
        assert_eq!(results[0]["locations"][0]["physicalLocation"]["region"]["startLine"], 42);
        assert!(results[0]["message"]["text"].as_str().unwrap().contains("<past> k's end"));
        // The canary finding has no line: the kernel's source file, no region; expected = warning.
        assert_eq!(results[1]["ruleId"], "canary_damage");
        assert_eq!(results[1]["level"], "warning");
        assert_eq!(results[1]["baselineState"], "unchanged");
        assert!(results[1]["locations"][0]["physicalLocation"].get("region").is_none());
        let back: SarifLog = serde_json::from_value(v).unwrap();
        assert_eq!(back, r.sarif());
    }

    #[test]
    fn markdown_leads_with_the_verdict_and_has_the_tables() {
        let r = sample();
        let md = r.to_markdown();
        let first = md.lines().next().unwrap();
        assert!(first.starts_with("## ❌ cudafuzz: FAILED: 1 new finding;"), "{first}");
        for want in [
            "shard 2/4",
            "GPU NVIDIA H100 80GB HBM3 (sm_90), driver 13.0",
            "| compute-sanitizer | **FAILED** | not found <anywhere> &",
            "| **new** | oob_read_k | sanitizer_memory (oracle memcheck)",
            "simple_attn.cu:42",
            "\\| pipes",
            "| `seeds/fixed/b.json` | pass | fail with sig-b | **FAILED** |",
            "### Sweep matrix: oob_read_k",
            "| configuration | aligned | q+8 | alignment-dependent |",
            "| oob_read_k[BLOCK_THREADS=128] | 3/0 | 1/2 ❌ | yes |",
            "| oob_read_k | fuzz | 600 | 600.5 | 1000 | 990 | 10 | 0 | 50 |",
            "| oob_read_k | memcheck |",
        ] {
            assert!(md.contains(want), "missing {want:?} in:\n{md}");
        }
        // New findings come before expected ones.
        assert!(md.find("**new**").unwrap() < md.find("| expected |").unwrap(), "{md}");
        // Every table row has the same number of cells as its header.
        for table in md.split("\n\n").filter(|b| b.starts_with('|')) {
            let widths: Vec<usize> = table.lines().map(|l| l.matches('|').count() - l.matches("\\|").count()).collect();
            assert!(widths.iter().all(|&w| w == widths[0]), "ragged table:\n{table}");
        }
        let mut ok = RunReport::new();
        ok.check("gpu", true, "x");
        ok.recount();
        assert!(ok.to_markdown().starts_with("## ✅ cudafuzz: PASSED"), "{}", ok.to_markdown());
    }

    #[test]
    fn write_all_writes_the_four_files() {
        let dir = tempfile::tempdir().unwrap();
        let r = sample();
        let written = r.write_all(&dir.path().join("out")).unwrap();
        assert_eq!(written.len(), 4);
        let names: Vec<String> = written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, REPORT_FILES);
        assert_eq!(RunReport::load(&written[0]).unwrap(), r);
        // Written again (a rerun into the same directory) replaces the reports.
        r.write_all(&dir.path().join("out")).unwrap();
    }

    #[test]
    fn sweep_twin_keeps_the_rules() {
        let mut cell = crate::sweep::Cell { pass: 2, fail: 1, ..Default::default() };
        cell.signatures.insert("a".into(), 1);
        let row = Row { config: "k".into(), cells: BTreeMap::from([("q+8".to_string(), cell.clone()), ("aligned".to_string(), crate::sweep::Cell { pass: 3, ..Default::default() })]) };
        let classes = [InputClass::Aligned, InputClass::QOffset(8)];
        let twin = MatrixRow::from_row(&row, &classes, true);
        assert_eq!(twin.alignment_dependent(), row.alignment_dependent(&classes));
        assert!(twin.alignment_dependent());
        assert!(!twin.cell_ok("q+8") && twin.cell_ok("aligned"));
        assert!(MatrixRow { expect_pass: false, ..twin.clone() }.cell_ok("q+8"));
        assert_eq!(twin.cells["q+8"].to_cell().consistent(), cell.consistent());
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_738_364_399);
        assert_eq!(timestamp(t), "2025-01-31T22:59:59Z");
    }
}
