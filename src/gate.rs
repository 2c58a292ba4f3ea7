//! `cudafuzz gate`: the nightly job, as configuration, a time budget and an ordered plan.
//!
//! A [`GateConfig`] (TOML, see `ci/gate.toml`) names the kernels to fuzz and their share of the
//! budget, the seed directories to replay with what each seed must do, the sweep matrices, the
//! sanitizer passes, and the planted bug that proves compute-sanitizer works. [`GateConfig::plan`]
//! resolves it on the host (kernels, seeds, classes, parameter grids) into a [`GatePlan`], so a
//! bad configuration is an error before any GPU work starts.
//!
//! [`run`] executes the plan in order within the [`Budget`], through a [`Backend`] that runs
//! cases (the CLI's is the supervisor and its workers; tests use a fake):
//!
//! 1. environment: GPU, driver, compute-sanitizer, and the planted bug caught under its tool. A
//!    gate that checked nothing must fail: without a GPU nothing else runs and the report says
//!    so; a missing sanitizer or an uncaught planted bug fails the gate whatever else happens.
//! 2. replay every seed this shard owns: an expected failure must still fail with its saved
//!    signature, a fixed bug (a seed under a `fixed/` directory, or `expect = "pass"`) must pass.
//! 3. the sweep matrices, cell by cell (cells are dealt round-robin to shards).
//! 4. fuzz each gated kernel for its share of what is left of the budget (every shard fuzzes
//!    every kernel, on its own slice of the case stream: case `i` of shard `s` of `N` is global
//!    case `s + i * N`).
//! 5. the sanitizer passes, in the time kept for them.
//!
//! The result is a [`RunReport`]; the CLI writes it in all four formats. A finding is *new*
//! unless its signature is one that an expected-failure seed carries (or it came from a sweep
//! row that is only recorded).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;
use thiserror::Error;

use crate::case::Case;
use crate::corpus;
use crate::error::SeedError;
use crate::finding::{Finding, FindingKind};
use crate::manifest::Manifest;
use crate::registry;
use crate::report::export::{
    relative_path, timestamp, Campaign, Expectation, FindingEntry, GpuSummary, KernelSection, MatrixCell, MatrixRow, Observed, RunReport,
    SanitizerRun, SeedReplay, Step, CHECK_GPU,
};
use crate::sanitizer::Tool;
use crate::shard::Shard;
use crate::sweep::{param_grid, InputClass};
use crate::worker::Outcome;

/// The budget when neither `--budget` nor `[gate] budget` gives one.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(20 * 60);

/// A configuration that cannot be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GateError {
    /// The file cannot be read.
    #[error("{path}: cannot read the gate configuration")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML, or a key that is unknown, missing or of the wrong type.
    #[error("{path}: {message}\n(every key is described in ci/gate.toml)")]
    Toml {
        /// The file.
        path: PathBuf,
        /// The parser's message with line, column and the key.
        message: String,
    },
    /// A value that parses but cannot be used.
    #[error("{path}: `{field}`: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key, e.g. `kernels[1].share`.
        field: String,
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// A seed in a seed directory cannot be read.
    #[error("{path}: `{field}`: a seed cannot be used")]
    Seed {
        /// The configuration file.
        path: PathBuf,
        /// The key of the seed directory, e.g. `seeds[0].dir`.
        field: String,
        /// What is wrong with the seed (names the seed file).
        #[source]
        source: Box<SeedError>,
    },
}

/// `cudafuzz gate`'s configuration file. Relative paths in it are relative to the directory
/// that holds the file.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// General settings.
    #[serde(default)]
    pub gate: GateSettings,
    /// The planted bug that must be caught before anything else counts.
    pub self_check: SelfCheck,
    /// Kernels to fuzz, with their budget shares.
    #[serde(default)]
    pub kernels: Vec<GatedKernel>,
    /// Seed directories to replay.
    #[serde(default)]
    pub seeds: Vec<SeedSet>,
    /// Sweep matrices.
    #[serde(default)]
    pub sweeps: Vec<SweepSpec>,
    /// Sanitizer passes.
    #[serde(default)]
    pub sanitizers: Vec<SanitizerSpec>,
}

/// `[gate]`: budget and generator settings.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateSettings {
    /// The time budget when `--budget` is not given, e.g. `20m`.
    #[serde(default)]
    pub budget: Option<String>,
    /// Generator seed for sweep, fuzz and sanitizer cases.
    #[serde(default)]
    pub seed: u64,
    /// Largest fraction of the budget the sweep may take.
    #[serde(default = "default_share")]
    pub sweep_share: f64,
    /// Fraction of the budget kept for the sanitizer passes (unused when there are none).
    #[serde(default = "default_share")]
    pub sanitizer_share: f64,
    /// Tools that re-run each new fuzz finding to name it (source line, tensor); empty: off.
    #[serde(default = "default_escalate")]
    pub escalate: Vec<Tool>,
}

fn default_share() -> f64 {
    0.15
}

fn default_escalate() -> Vec<Tool> {
    vec![Tool::Memcheck, Tool::Racecheck]
}

impl Default for GateSettings {
    fn default() -> GateSettings {
        GateSettings { budget: None, seed: 0, sweep_share: default_share(), sanitizer_share: default_share(), escalate: default_escalate() }
    }
}

/// `[self_check]`: a kernel and case that must produce a finding of kind `expect` under `tool`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelfCheck {
    /// Kernel name or manifest path.
    pub kernel: String,
    /// A case or seed file.
    pub case: PathBuf,
    /// The compute-sanitizer tool that must catch it.
    #[serde(default = "default_tool")]
    pub tool: Tool,
    /// The finding kind it must produce.
    #[serde(default = "default_kind")]
    pub expect: FindingKind,
}

fn default_tool() -> Tool {
    Tool::Memcheck
}

fn default_kind() -> FindingKind {
    FindingKind::SanitizerMemory
}

/// `[[kernels]]`: a kernel to fuzz.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatedKernel {
    /// Kernel name or manifest path.
    pub kernel: String,
    /// Weight of its share of the fuzz time (1 = an equal share).
    #[serde(default = "one")]
    pub share: f64,
    /// At most this many cases (per shard); default: as many as the time allows.
    #[serde(default)]
    pub cases: Option<u64>,
    /// Also run generated cases outside the kernel's contract.
    #[serde(default)]
    pub outside_contract: bool,
}

fn one() -> f64 {
    1.0
}

/// What the seeds of a directory must do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeedExpect {
    /// A seed under a `fixed/` directory must pass; a seed with a saved finding must still fail
    /// with its signature; a seed without one must pass.
    #[default]
    Auto,
    /// Every seed must pass (the bugs were fixed).
    Pass,
    /// Every seed must fail with its saved signature.
    Fail,
}

/// `[[seeds]]`: a directory of seeds to replay (every `*.json` under it, recursively).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedSet {
    /// The directory.
    pub dir: PathBuf,
    /// What its seeds must do.
    #[serde(default)]
    pub expect: SeedExpect,
    /// Kernel to replay against instead of each seed's own.
    #[serde(default)]
    pub kernel: Option<String>,
}

/// Whether failing sweep cells fail the gate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepExpect {
    /// Every cell must pass; failures are findings.
    #[default]
    Pass,
    /// Recorded only (a kernel whose failures are known, e.g. fa_s512).
    Record,
}

/// `[[sweeps]]`: one failure matrix.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Kernel name or manifest path.
    pub kernel: String,
    /// Parameter values, `NAME=v1,v2` (as `cudafuzz sweep --params`).
    #[serde(default)]
    pub params: Vec<String>,
    /// Input class names (as `cudafuzz sweep --classes`); default: all.
    #[serde(default)]
    pub classes: Vec<String>,
    /// Repetitions per cell.
    #[serde(default = "default_repeat")]
    pub repeat: u64,
    /// Whether failures fail the gate.
    #[serde(default)]
    pub expect: SweepExpect,
}

fn default_repeat() -> u64 {
    20
}

/// `[[sanitizers]]`: a sanitizer pass over generated cases of some kernels.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SanitizerSpec {
    /// compute-sanitizer tools, run one after the other.
    pub tools: Vec<Tool>,
    /// Kernel names or manifest paths.
    pub kernels: Vec<String>,
    /// Cases per kernel (per shard), as time allows.
    #[serde(default = "default_sanitizer_cases")]
    pub cases: u64,
}

fn default_sanitizer_cases() -> u64 {
    200
}

/// The planted bug, resolved.
#[derive(Clone, Debug)]
pub struct PlannedSelfCheck {
    /// Its kernel.
    pub manifest: Manifest,
    /// Its case, bound to the kernel.
    pub case: Case,
    /// The tool that must catch it.
    pub tool: Tool,
    /// The finding kind it must produce.
    pub expect: FindingKind,
}

/// A kernel to fuzz, resolved.
#[derive(Clone, Debug)]
pub struct PlannedKernel {
    /// The kernel.
    pub manifest: Manifest,
    /// Weight of its fuzz time.
    pub share: f64,
    /// Case limit per shard.
    pub cases: Option<u64>,
    /// Run cases outside the contract too.
    pub outside_contract: bool,
}

/// A seed to replay, loaded.
#[derive(Clone, Debug)]
pub struct PlannedSeed {
    /// The seed file.
    pub path: PathBuf,
    /// Its kernel.
    pub manifest: Manifest,
    /// Its case, bound to the kernel.
    pub case: Case,
    /// What it must do.
    pub expected: Expectation,
    /// The compute-sanitizer tool it is replayed under: its saved finding's (a sanitizer finding
    /// only reproduces under its tool), else none.
    pub tool: Option<Tool>,
}

/// A sweep matrix, resolved.
#[derive(Clone, Debug)]
pub struct PlannedSweep {
    /// The kernel.
    pub manifest: Manifest,
    /// Parameter assignments, one row each.
    pub grid: Vec<BTreeMap<String, i64>>,
    /// Classes, one column each.
    pub classes: Vec<InputClass>,
    /// Repetitions per cell.
    pub repeat: u64,
    /// Whether failures fail the gate.
    pub expect_pass: bool,
}

/// A sanitizer pass over one kernel, resolved.
#[derive(Clone, Debug)]
pub struct PlannedSanitizer {
    /// The tools.
    pub tools: Vec<Tool>,
    /// The kernel.
    pub manifest: Manifest,
    /// Cases per shard.
    pub cases: u64,
}

/// A configuration resolved against the kernels and seeds on disk: everything [`run`] needs.
#[derive(Clone, Debug)]
pub struct GatePlan {
    /// The configuration file.
    pub config_path: PathBuf,
    /// `[gate]`.
    pub settings: GateSettings,
    /// The planted bug.
    pub self_check: PlannedSelfCheck,
    /// Kernels to fuzz.
    pub kernels: Vec<PlannedKernel>,
    /// Seeds to replay, in a stable order (the shard split follows it).
    pub seeds: Vec<PlannedSeed>,
    /// Sweep matrices.
    pub sweeps: Vec<PlannedSweep>,
    /// Sanitizer passes, one per (spec, kernel).
    pub sanitizers: Vec<PlannedSanitizer>,
}

impl GateConfig {
    /// Reads and checks a configuration file (the schema only; [`GateConfig::plan`] resolves it).
    pub fn load(path: &Path) -> Result<GateConfig, GateError> {
        let text = std::fs::read_to_string(path).map_err(|source| GateError::Io { path: path.into(), source })?;
        GateConfig::from_toml(path, &text)
    }

    /// Parses configuration text; `path` names it in errors.
    pub fn from_toml(path: &Path, text: &str) -> Result<GateConfig, GateError> {
        let cfg: GateConfig = toml::from_str(text).map_err(|e| GateError::Toml { path: path.into(), message: e.to_string().trim_end().to_string() })?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// The budget `[gate] budget` names, if any.
    pub fn budget(&self, path: &Path) -> Result<Option<Duration>, GateError> {
        self.gate
            .budget
            .as_deref()
            .map(|b| {
                parse_budget(b).map_err(|problem| GateError::Invalid { path: path.into(), field: "gate.budget".into(), problem })
            })
            .transpose()
    }

    fn validate(&self, path: &Path) -> Result<(), GateError> {
        let invalid = |field: String, problem: String| GateError::Invalid { path: path.into(), field, problem };
        self.budget(path)?;
        for (field, share) in [("gate.sweep_share", self.gate.sweep_share), ("gate.sanitizer_share", self.gate.sanitizer_share)] {
            if !(0.0..1.0).contains(&share) {
                return Err(invalid(field.into(), format!("{share} is not a fraction of the budget: use a number from 0 to below 1, e.g. 0.15")));
            }
        }
        if self.gate.sweep_share + self.gate.sanitizer_share >= 0.9 {
            return Err(invalid(
                "gate.sanitizer_share".into(),
                format!(
                    "sweep_share + sanitizer_share = {:.2} leaves the fuzz campaigns almost no time: keep the sum below 0.9",
                    self.gate.sweep_share + self.gate.sanitizer_share
                ),
            ));
        }
        for (i, k) in self.kernels.iter().enumerate() {
            if !(k.share.is_finite() && k.share > 0.0) {
                return Err(invalid(format!("kernels[{i}].share"), format!("{} is not a positive weight: use e.g. 1 for an equal share, 2 for twice that", k.share)));
            }
            if k.cases == Some(0) {
                return Err(invalid(format!("kernels[{i}].cases"), "0 cases fuzzes nothing: remove the key for no limit, or remove the kernel".into()));
            }
        }
        for (i, s) in self.sweeps.iter().enumerate() {
            if s.repeat == 0 {
                return Err(invalid(format!("sweeps[{i}].repeat"), "must be at least 1".into()));
            }
            for c in &s.classes {
                if InputClass::from_name(c).is_none() {
                    let all: Vec<String> = InputClass::ALL.iter().map(|c| c.to_string()).collect();
                    return Err(invalid(format!("sweeps[{i}].classes"), format!("unknown class `{c}`: expected one of {}", all.join(", "))));
                }
            }
            param_grid(&s.params).map_err(|e| invalid(format!("sweeps[{i}].params"), e.replace("--params ", "")))?;
        }
        for (i, s) in self.sanitizers.iter().enumerate() {
            if s.tools.is_empty() {
                return Err(invalid(format!("sanitizers[{i}].tools"), "name at least one tool, e.g. [\"memcheck\"]".into()));
            }
            if s.kernels.is_empty() {
                return Err(invalid(format!("sanitizers[{i}].kernels"), "name at least one kernel".into()));
            }
        }
        Ok(())
    }

    /// Resolves kernels, loads seeds and derives their expectations. `path` is the file this
    /// configuration came from: relative paths are taken from its directory.
    pub fn plan(&self, path: &Path) -> Result<GatePlan, GateError> {
        let base = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        let kernel = |field: String, spec: &str| resolve_kernel(&base, spec).map_err(|problem| GateError::Invalid { path: path.into(), field, problem });
        let manifest = kernel("self_check.kernel".into(), &self.self_check.kernel)?;
        let case_path = base.join(&self.self_check.case);
        let (seed, _) = corpus::load(&case_path, &manifest.decode_context())
            .map_err(|source| GateError::Seed { path: path.into(), field: "self_check.case".into(), source: Box::new(source) })?;
        let self_check = PlannedSelfCheck { case: manifest.bind(seed.case), manifest, tool: self.self_check.tool, expect: self.self_check.expect };
        let kernels = self
            .kernels
            .iter()
            .enumerate()
            .map(|(i, k)| {
                Ok(PlannedKernel { manifest: kernel(format!("kernels[{i}].kernel"), &k.kernel)?, share: k.share, cases: k.cases, outside_contract: k.outside_contract })
            })
            .collect::<Result<Vec<_>, GateError>>()?;
        let mut seeds = Vec::new();
        for (i, set) in self.seeds.iter().enumerate() {
            let field = format!("seeds[{i}].dir");
            let dir = base.join(&set.dir);
            if !dir.is_dir() {
                return Err(GateError::Invalid {
                    path: path.into(),
                    field,
                    problem: format!("{} is not a directory: create it (it may stay empty) or remove the entry", dir.display()),
                });
            }
            let forced = set.kernel.as_deref().map(|k| kernel(format!("seeds[{i}].kernel"), k)).transpose()?;
            for file in json_files(&dir) {
                let ctx = forced.as_ref().map(|m| m.decode_context()).unwrap_or_default();
                let (seed, _) = corpus::load(&file, &ctx).map_err(|source| GateError::Seed { path: path.into(), field: field.clone(), source: Box::new(source) })?;
                let m = match &forced {
                    Some(m) => m.clone(),
                    None if seed.case.kernel.is_empty() => {
                        return Err(GateError::Invalid { path: path.into(), field, problem: format!("{} names no kernel: set `kernel` for this directory", file.display()) })
                    }
                    None => kernel(field.clone(), &seed.case.kernel).map_err(|e| match e {
                        GateError::Invalid { problem, .. } => GateError::Invalid {
                            path: path.into(),
                            field: field.clone(),
                            problem: format!("{}: {problem}; or set `kernel` for this directory", file.display()),
                        },
                        e => e,
                    })?,
                };
                let saved = seed.signature.clone().or_else(|| seed.finding.as_ref().map(|f| f.signature().0));
                let under_fixed = file.strip_prefix(&dir).unwrap_or(&file).components().any(|c| c == Component::Normal("fixed".as_ref()));
                let expected = match (set.expect, saved) {
                    (SeedExpect::Pass, _) => Expectation::Pass,
                    (SeedExpect::Auto, _) if under_fixed => Expectation::Pass,
                    (SeedExpect::Auto | SeedExpect::Fail, Some(signature)) => Expectation::Fail { signature },
                    (SeedExpect::Auto, None) => Expectation::Pass,
                    (SeedExpect::Fail, None) => {
                        return Err(GateError::Invalid {
                            path: path.into(),
                            field: format!("seeds[{i}].expect"),
                            problem: format!("{} has no saved finding, so it cannot be an expected failure: use expect = \"auto\" or \"pass\", or replace it with the seed `cudafuzz fuzz` saved", file.display()),
                        })
                    }
                };
                let tool = seed.finding.as_ref().and_then(|f| Tool::of(f.oracle));
                seeds.push(PlannedSeed { path: file, case: m.bind(seed.case), manifest: m, expected, tool });
            }
        }
        let sweeps = self
            .sweeps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let classes = if s.classes.is_empty() {
                    InputClass::ALL.to_vec()
                } else {
                    s.classes.iter().filter_map(|c| InputClass::from_name(c)).collect()
                };
                let grid = param_grid(&s.params).map_err(|e| GateError::Invalid { path: path.into(), field: format!("sweeps[{i}].params"), problem: e })?;
                Ok(PlannedSweep { manifest: kernel(format!("sweeps[{i}].kernel"), &s.kernel)?, grid, classes, repeat: s.repeat, expect_pass: s.expect == SweepExpect::Pass })
            })
            .collect::<Result<Vec<_>, GateError>>()?;
        let mut sanitizers = Vec::new();
        for (i, s) in self.sanitizers.iter().enumerate() {
            for (j, k) in s.kernels.iter().enumerate() {
                sanitizers.push(PlannedSanitizer { tools: s.tools.clone(), manifest: kernel(format!("sanitizers[{i}].kernels[{j}]"), k)?, cases: s.cases });
            }
        }
        Ok(GatePlan { config_path: path.into(), settings: self.gate.clone(), self_check, kernels, seeds, sweeps, sanitizers })
    }
}

/// Parses a budget such as `20m`, `90s`, `1h 30m`.
pub fn parse_budget(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| format!("`{text}` is not a duration ({e}): write e.g. 20m, 90s or 1h 30m"))?;
    if d < Duration::from_secs(1) {
        return Err(format!("`{text}` is less than a second: give the gate at least a few minutes"));
    }
    Ok(d)
}

/// A kernel named in the configuration: a manifest path (relative to the configuration's
/// directory, or to the current directory, or to the source tree) or a shipped kernel's name.
fn resolve_kernel(base: &Path, spec: &str) -> Result<Manifest, String> {
    registry::resolve_relative(base, spec).map_err(|e| e.to_string())
}

/// Every `*.json` under `dir`, recursively, sorted (hidden files and directories skipped).
fn json_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(&p, out),
                Ok(_) if p.extension().is_some_and(|x| x == "json") => out.push(p),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// How a gate's time is divided. The sweep may take up to `sweep_share` of the total; the
/// sanitizer passes keep `sanitizer_share` (when there are any); the fuzz campaigns split the
/// rest by weight; a small reserve is kept for writing reports. Each step's time is computed
/// when the step starts, so time an earlier step did not use goes to the later ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// The whole budget.
    pub total: Duration,
    /// Most of the total the sweep may take.
    pub sweep_share: f64,
    /// Part of the total kept for sanitizer passes.
    pub sanitizer_share: f64,
}

impl Budget {
    /// A budget with the shares of `settings`.
    pub fn new(total: Duration, settings: &GateSettings) -> Budget {
        Budget { total, sweep_share: settings.sweep_share, sanitizer_share: settings.sanitizer_share }
    }

    /// Kept at the end for writing reports: 5% of the total, at most 10 s.
    pub fn reserve(&self) -> Duration {
        (self.total / 20).min(Duration::from_secs(10))
    }

    /// Time left after `elapsed`, less the reserve.
    pub fn remaining(&self, elapsed: Duration) -> Duration {
        self.total.saturating_sub(elapsed).saturating_sub(self.reserve())
    }

    /// The sweep's time when it starts after `elapsed`.
    pub fn sweep(&self, elapsed: Duration) -> Duration {
        self.total.mul_f64(self.sweep_share).min(self.remaining(elapsed))
    }

    /// Each fuzz campaign's time, by weight, when the campaigns start after `elapsed`;
    /// `sanitizer_passes` says whether time must be kept for sanitizer passes.
    pub fn fuzz(&self, elapsed: Duration, weights: &[f64], sanitizer_passes: bool) -> Vec<Duration> {
        let keep = if sanitizer_passes { self.total.mul_f64(self.sanitizer_share) } else { Duration::ZERO };
        split(self.remaining(elapsed).saturating_sub(keep), weights)
    }

    /// One sanitizer pass's time when `passes_left` passes (this one included) remain after
    /// `elapsed`: an equal part of what is left.
    pub fn sanitizer(&self, elapsed: Duration, passes_left: usize) -> Duration {
        self.remaining(elapsed) / passes_left.max(1) as u32
    }
}

/// `total` divided in proportion to `weights` (non-positive weights get nothing); the parts
/// never add up to more than `total`.
pub fn split(total: Duration, weights: &[f64]) -> Vec<Duration> {
    let sum: f64 = weights.iter().filter(|w| **w > 0.0).sum();
    weights
        .iter()
        .map(|&w| if w > 0.0 && sum > 0.0 { Duration::from_nanos((total.as_nanos() as f64 * (w / sum)).floor() as u64) } else { Duration::ZERO })
        .collect()
}

/// The row label a sweep uses: the kernel's name, with its parameters in brackets.
pub fn config_label(kernel: &str, params: &BTreeMap<String, i64>) -> String {
    if params.is_empty() {
        kernel.to_string()
    } else {
        format!("{kernel}[{}]", params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
    }
}

/// Why a backend could not do a step.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepError {
    /// The GPU went away (or was never there).
    #[error("no GPU: {0}")]
    NoGpu(String),
    /// The user stopped the run.
    #[error("interrupted")]
    Interrupted,
    /// The harness failed (a worker could not start, a journal could not be written, ...).
    #[error("{0}")]
    Failed(String),
}

/// A finding a backend reports while it runs cases.
#[derive(Clone, Debug)]
pub struct Found {
    /// The case in one line.
    pub case: String,
    /// The finding.
    pub finding: Finding,
    /// The seed saved for it (`None` when an earlier, smaller seed of the signature is kept).
    pub seed: Option<PathBuf>,
}

/// One sweep cell to run.
#[derive(Clone, Copy, Debug)]
pub struct CellJob<'a> {
    /// The kernel.
    pub manifest: &'a Manifest,
    /// The row's parameters.
    pub params: &'a BTreeMap<String, i64>,
    /// The column.
    pub class: InputClass,
    /// Repetitions.
    pub repeat: u64,
    /// Generator seed.
    pub seed: u64,
    /// Stop handing out repetitions at this time.
    pub deadline: Instant,
}

/// One fuzz campaign to run.
#[derive(Clone, Copy, Debug)]
pub struct FuzzJob<'a> {
    /// The kernel.
    pub manifest: &'a Manifest,
    /// Generator seed.
    pub seed: u64,
    /// This shard: local case `i` is global case [`Shard::global`]`(i)`.
    pub shard: Shard,
    /// Case limit.
    pub cases: Option<u64>,
    /// Stop at this time.
    pub deadline: Instant,
    /// Run cases outside the contract too.
    pub outside_contract: bool,
    /// Tools that name new findings; empty: none.
    pub escalate: &'a [Tool],
}

/// One sanitizer pass to run.
#[derive(Clone, Copy, Debug)]
pub struct SanitizeJob<'a> {
    /// The kernel.
    pub manifest: &'a Manifest,
    /// The tools.
    pub tools: &'a [Tool],
    /// Case limit.
    pub cases: u64,
    /// Generator seed (the same cases as the fuzz campaign's first ones).
    pub seed: u64,
    /// This shard.
    pub shard: Shard,
    /// Stop at this time.
    pub deadline: Instant,
}

/// What runs the cases of a gate: the CLI's backend drives the supervisor and its workers.
pub trait Backend {
    /// The GPU, or why there is none.
    fn gpu(&mut self) -> Result<GpuSummary, String>;
    /// compute-sanitizer's path and version, or why it cannot be used.
    fn sanitizer(&mut self) -> Result<String, String>;
    /// Runs one case natively, or under `tool`.
    fn run_case(&mut self, manifest: &Manifest, case: &Case, tool: Option<Tool>) -> Result<Outcome, StepError>;
    /// Runs one sweep cell; failing repetitions' findings go to `found`.
    fn sweep_cell(&mut self, job: &CellJob<'_>, found: &mut dyn FnMut(Found)) -> Result<MatrixCell, StepError>;
    /// Runs a fuzz campaign; new findings go to `found`. The returned counts need no budget.
    fn fuzz(&mut self, job: &FuzzJob<'_>, found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError>;
    /// Runs a sanitizer pass; findings go to `found`.
    fn sanitize(&mut self, job: &SanitizeJob<'_>, found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError>;
}

/// The names of the environment checks, in order.
pub mod checks {
    /// A GPU is present ([`crate::report::export::CHECK_GPU`]).
    pub const GPU: &str = super::CHECK_GPU;
    /// The CUDA driver answered.
    pub const DRIVER: &str = "driver";
    /// compute-sanitizer was found and runs.
    pub const SANITIZER: &str = "compute-sanitizer";
    /// The planted bug was caught.
    pub const PLANTED: &str = "planted bug";
}

/// Records findings into the report: one entry per signature, in the kernel's section.
struct Book<'a> {
    known: &'a BTreeSet<String>,
}

impl Book<'_> {
    fn add(&self, report: &mut RunReport, manifest: &Manifest, step: Step, found: Found, expected: bool) {
        let sec = section(report, manifest);
        let signature = found.finding.signature().0;
        let new = !expected && !self.known.contains(&signature);
        match sec.findings.iter_mut().find(|f| f.signature == signature) {
            Some(entry) => {
                // A smaller case of a known signature: point at its seed.
                if let Some(seed) = found.seed {
                    entry.seed = Some(relative_path(&seed));
                    entry.case = found.case;
                    entry.finding = found.finding;
                }
                entry.new |= new;
            }
            None => {
                let source_path = source_path(manifest, &found.finding);
                sec.findings.push(FindingEntry {
                    signature,
                    finding: found.finding,
                    seed: found.seed.map(|s| relative_path(&s)),
                    case: found.case,
                    step,
                    new,
                    source_path,
                });
            }
        }
    }
}

/// The kernel's section, with its source file filled in.
fn section<'r>(report: &'r mut RunReport, manifest: &Manifest) -> &'r mut KernelSection {
    let s = report.kernel_mut(&manifest.name);
    if s.source.is_none() {
        s.source = Some(relative_path(&manifest.source));
    }
    s
}

/// The repository path of the file a finding's source line is in: the kernel's `.cu` or a file
/// beside it or in `kernels/include`.
fn source_path(manifest: &Manifest, f: &Finding) -> Option<String> {
    let file = &f.source.as_ref()?.file;
    if manifest.source.file_name().is_some_and(|n| n == file.as_str()) {
        return Some(relative_path(&manifest.source));
    }
    let beside = manifest.source.parent().map(|d| d.join(file));
    let include = Some(registry::kernels_dir().join("include").join(file));
    [beside, include].into_iter().flatten().find(|p| p.is_file()).map(|p| relative_path(&p))
}

/// Runs the gate: see the module docs. `log` gets one line per step and result.
pub fn run(plan: &GatePlan, budget: Duration, shard: Option<Shard>, backend: &mut dyn Backend, log: &mut dyn FnMut(&str)) -> RunReport {
    let started = Instant::now();
    let mut report = RunReport::new();
    report.started = timestamp(SystemTime::now());
    report.budget_secs = Some(budget.as_secs_f64());
    report.config = Some(relative_path(&plan.config_path));
    report.shard = shard;
    let budget = Budget::new(budget, &plan.settings);
    let known: BTreeSet<String> = plan
        .seeds
        .iter()
        .filter_map(|s| match &s.expected {
            Expectation::Fail { signature } => Some(signature.clone()),
            Expectation::Pass => None,
        })
        .collect();
    let book = Book { known: &known };
    let sh = shard.unwrap_or(Shard::ALL);
    let seed = plan.settings.seed;
    // Sections in configuration order, so every report lists kernels the same way.
    for m in plan.kernels.iter().map(|k| &k.manifest).chain(plan.sweeps.iter().map(|s| &s.manifest)) {
        section(&mut report, m);
    }

    // 1. Environment.
    log("== environment");
    let gpu_ok = match backend.gpu() {
        Ok(g) => {
            report.check(checks::GPU, true, format!("{} ({})", g.name, g.arch));
            report.check(checks::DRIVER, true, format!("CUDA driver API {}", g.driver));
            report.gpu = Some(g);
            true
        }
        Err(why) => {
            report.check(checks::GPU, false, format!("no GPU: {why}; the gate must run on a CUDA host, and without a GPU nothing was checked"));
            report.check(checks::DRIVER, false, "not checked: no GPU");
            false
        }
    };
    let sanitizer_ok = match backend.sanitizer() {
        Ok(v) => {
            report.check(checks::SANITIZER, true, v);
            true
        }
        Err(why) => {
            report.check(checks::SANITIZER, false, format!("{why}; the gate fails without it"));
            false
        }
    };
    let sc = &plan.self_check;
    let planted = format!("{} under {} must give {}", sc.manifest.name, sc.tool, sc.expect);
    match (gpu_ok, sanitizer_ok) {
        (false, _) => report.check(checks::PLANTED, false, format!("not run ({planted}): no GPU")),
        (true, false) => report.check(checks::PLANTED, false, format!("not run ({planted}): compute-sanitizer is not available")),
        (true, true) => match backend.run_case(&sc.manifest, &sc.case, Some(sc.tool)) {
            Ok(Outcome::Fail { findings }) if findings.iter().any(|f| f.kind == sc.expect && f.oracle.is_sanitizer()) => {
                let f = findings.iter().find(|f| f.kind == sc.expect && f.oracle.is_sanitizer()).expect("just found");
                report.check(checks::PLANTED, true, format!("caught: {f}"));
            }
            Ok(Outcome::Fail { findings }) => {
                let seen: Vec<String> = findings.iter().map(|f| f.to_string()).collect();
                report.check(checks::PLANTED, false, format!("NOT caught ({planted}); saw only: {}: the sanitizer integration is broken", seen.join("; ")))
            }
            Ok(other) => report.check(
                checks::PLANTED,
                false,
                format!("NOT caught ({planted}); the case gave {other:?}: the sanitizer integration is broken, so a clean gate would mean nothing"),
            ),
            Err(StepError::Interrupted) => report.interrupted = true,
            Err(e) => report.check(checks::PLANTED, false, format!("not run ({planted}): {e}")),
        },
    }
    for e in &report.environment {
        log(&format!("{:<18} {:<6} {}", e.name, if e.ok { "ok" } else { "FAILED" }, e.detail));
    }
    let owned_seeds: Vec<&PlannedSeed> = sh.split(plan.seeds.iter());
    if !gpu_ok || report.interrupted {
        let reason = if gpu_ok { "interrupted" } else { "no GPU" };
        for s in owned_seeds {
            let observed = Observed::NotRun { reason: reason.into() };
            section(&mut report, &s.manifest).replays.push(SeedReplay {
                seed: relative_path(&s.path),
                case: s.case.summary(),
                expected: s.expected.clone(),
                observed,
                ok: false,
            });
        }
        return finish(report, started);
    }

    let mut stopped = false;

    // 2. Seed replays.
    log(&format!("== replay {} of {} seeds", owned_seeds.len(), plan.seeds.len()));
    for s in owned_seeds {
        let shown = relative_path(&s.path);
        if stopped {
            section(&mut report, &s.manifest).replays.push(SeedReplay {
                seed: shown,
                case: s.case.summary(),
                expected: s.expected.clone(),
                observed: Observed::NotRun { reason: "the gate stopped early".into() },
                ok: false,
            });
            continue;
        }
        let result = match s.tool {
            Some(tool) if !sanitizer_ok => Err(format!("needs compute-sanitizer {tool} (its finding came from that tool), which is not available")),
            tool => Ok(backend.run_case(&s.manifest, &s.case, tool)),
        };
        let (observed, findings) = match result {
            Err(reason) => (Observed::NotRun { reason }, Vec::new()),
            Ok(result) => match result {
            Ok(Outcome::Pass) => (Observed::Pass, Vec::new()),
            Ok(Outcome::Fail { findings }) => {
                let mut sigs: Vec<String> = Vec::new();
                for f in &findings {
                    let sig = f.signature().0;
                    if !sigs.contains(&sig) {
                        sigs.push(sig);
                    }
                }
                (Observed::Fail { signatures: sigs }, findings)
            }
            Ok(Outcome::Error { message }) => (Observed::Error { message }, Vec::new()),
            Err(e) => {
                let observed = Observed::Error { message: e.to_string() };
                fail_step(&mut report, log, &format!("replay {shown}"), e, &mut stopped);
                (observed, Vec::new())
            }
            },
        };
        let ok = s.expected.met_by(&observed);
        log(&format!("{} {shown}: expected {}, observed {observed}", if ok { "ok    " } else { "FAILED" }, s.expected));
        for f in findings {
            // An expected failure's symptoms are all expected; anything else that fails is new
            // unless another seed expects its signature.
            book.add(&mut report, &s.manifest, Step::Replay, Found { case: s.case.summary(), finding: f, seed: Some(s.path.clone()) }, ok);
        }
        section(&mut report, &s.manifest).replays.push(SeedReplay { seed: shown, case: s.case.summary(), expected: s.expected.clone(), observed, ok });
    }

    // 3. Sweeps: cells dealt round-robin over the shards.
    if !stopped && !plan.sweeps.is_empty() {
        let deadline = Instant::now() + budget.sweep(started.elapsed());
        log(&format!("== sweep ({:.0} s at most)", deadline.saturating_duration_since(Instant::now()).as_secs_f64()));
        let mut cell_index = 0u64;
        'sweeps: for sw in &plan.sweeps {
            for params in &sw.grid {
                let mut row = MatrixRow {
                    config: config_label(&sw.manifest.name, params),
                    expect_pass: sw.expect_pass,
                    classes: sw.classes.iter().map(|c| c.to_string()).collect(),
                    cells: BTreeMap::new(),
                };
                for &class in &sw.classes {
                    let mine = sh.owns(cell_index);
                    cell_index += 1;
                    if !mine {
                        continue;
                    }
                    let job = CellJob { manifest: &sw.manifest, params, class, repeat: sw.repeat, seed, deadline };
                    let mut found = Vec::new();
                    let result = backend.sweep_cell(&job, &mut |f| found.push(f));
                    for f in found {
                        book.add(&mut report, &sw.manifest, Step::Sweep, f, !sw.expect_pass);
                    }
                    match result {
                        Ok(cell) if cell.pass + cell.fail + cell.error + cell.skipped == 0 => {
                            log(&format!("{} {class}: not run (the sweep's share of the budget is used up)", row.config));
                        }
                        Ok(cell) => {
                            log(&format!("{} {class}: {} passed, {} failed, {} errors, {} skipped", row.config, cell.pass, cell.fail, cell.error, cell.skipped));
                            row.cells.insert(class.to_string(), cell);
                        }
                        Err(e) => {
                            fail_step(&mut report, log, &format!("sweep {} {class}", row.config), e, &mut stopped);
                            if stopped {
                                section(&mut report, &sw.manifest).sweep.push(row);
                                break 'sweeps;
                            }
                        }
                    }
                }
                if !row.cells.is_empty() {
                    section(&mut report, &sw.manifest).sweep.push(row);
                }
            }
        }
    }

    // 4. Fuzz campaigns.
    if !stopped && !plan.kernels.is_empty() {
        let weights: Vec<f64> = plan.kernels.iter().map(|k| k.share).collect();
        let times = budget.fuzz(started.elapsed(), &weights, !plan.sanitizers.is_empty());
        log("== fuzz");
        for (k, time) in plan.kernels.iter().zip(times) {
            if stopped {
                break;
            }
            let t0 = Instant::now();
            let job = FuzzJob {
                manifest: &k.manifest,
                seed,
                shard: sh,
                cases: k.cases,
                deadline: t0 + time,
                outside_contract: k.outside_contract,
                escalate: if sanitizer_ok { &plan.settings.escalate } else { &[] },
            };
            let mut found = Vec::new();
            let result = backend.fuzz(&job, &mut |f| found.push(f));
            for f in found {
                book.add(&mut report, &k.manifest, Step::Fuzz, f, false);
            }
            match result {
                Ok(mut c) => {
                    c.budget_secs = time.as_secs_f64();
                    c.elapsed_secs = t0.elapsed().as_secs_f64();
                    c.seed = seed;
                    log(&format!(
                        "{}: {} cases in {:.0} s of {:.0} s: {} passed, {} failed, {} errors, {} skipped",
                        k.manifest.name, c.cases, c.elapsed_secs, c.budget_secs, c.passed, c.failed, c.errors, c.skipped
                    ));
                    section(&mut report, &k.manifest).campaign = Some(c);
                }
                Err(e) => fail_step(&mut report, log, &format!("fuzz {}", k.manifest.name), e, &mut stopped),
            }
        }
    }

    // 5. Sanitizer passes.
    if !stopped && !plan.sanitizers.is_empty() {
        log("== sanitizer passes");
        if !sanitizer_ok {
            log("skipped: compute-sanitizer is not available (the gate fails on that check)");
        } else {
            for (i, p) in plan.sanitizers.iter().enumerate() {
                if stopped {
                    break;
                }
                let t0 = Instant::now();
                let time = budget.sanitizer(started.elapsed(), plan.sanitizers.len() - i);
                let job = SanitizeJob { manifest: &p.manifest, tools: &p.tools, cases: p.cases, seed, shard: sh, deadline: t0 + time };
                let mut found = Vec::new();
                let result = backend.sanitize(&job, &mut |f| found.push(f));
                for f in found {
                    book.add(&mut report, &p.manifest, Step::Sanitizer, f, false);
                }
                let tools: Vec<&str> = p.tools.iter().map(|t| t.name()).collect();
                match result {
                    Ok(mut c) => {
                        c.budget_secs = time.as_secs_f64();
                        c.elapsed_secs = t0.elapsed().as_secs_f64();
                        c.seed = seed;
                        let starved = if c.cases == 0 {
                            format!(" (NOT CHECKED: its {:.0} s of the budget ran out before a case finished; give the gate a longer --budget)", time.as_secs_f64())
                        } else {
                            String::new()
                        };
                        log(&format!("{} under {}: {} cases, {} failed, {} errors{starved}", p.manifest.name, tools.join(","), c.cases, c.failed, c.errors));
                        section(&mut report, &p.manifest).sanitizer.push(SanitizerRun { tools: tools.join(","), counts: c });
                    }
                    Err(e) => fail_step(&mut report, log, &format!("{} under {}", p.manifest.name, tools.join(",")), e, &mut stopped),
                }
            }
        }
    }
    finish(report, started)
}

/// A step error: interrupted stops the gate; a lost GPU stops it too (a failed check); any
/// other failure is a failed check and the gate goes on.
fn fail_step(report: &mut RunReport, log: &mut dyn FnMut(&str), what: &str, e: StepError, stopped: &mut bool) {
    log(&format!("{what}: {e}"));
    match e {
        StepError::Interrupted => {
            report.interrupted = true;
            *stopped = true;
        }
        StepError::NoGpu(why) => {
            report.check("gpu lost", false, format!("{what}: {why}"));
            *stopped = true;
        }
        StepError::Failed(why) => report.check(&format!("harness: {what}"), false, why),
    }
}

fn finish(mut report: RunReport, started: Instant) -> RunReport {
    report.finished = timestamp(SystemTime::now());
    report.duration_secs = started.elapsed().as_secs_f64();
    report.kernels.retain(|k| !(k.replays.is_empty() && k.sweep.is_empty() && k.campaign.is_none() && k.sanitizer.is_empty() && k.findings.is_empty()));
    report.recount();
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::TensorId;
    use crate::corpus::Seed;
    use crate::finding::{Location, Oracle};
    use crate::exit;

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    /// A configuration directory with the planted case and the given TOML body after the
    /// `[self_check]` table.
    fn config_dir(body: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let mut case = Case::example("kernels/testing/oob_read_k.toml");
        case.head_dim = 40;
        std::fs::write(dir.path().join("planted.json"), serde_json::to_string_pretty(&case).unwrap()).unwrap();
        let oob = root().join("kernels/testing/oob_read_k.toml");
        let text = format!("[self_check]\nkernel = {:?}\ncase = \"planted.json\"\n\n{body}", oob.display().to_string());
        let path = dir.path().join("gate.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn load(body: &str) -> Result<(tempfile::TempDir, GatePlan), GateError> {
        let (dir, path) = config_dir(body);
        let cfg = GateConfig::load(&path)?;
        let plan = cfg.plan(&path)?;
        Ok((dir, plan))
    }

    fn err(body: &str) -> String {
        match load(body) {
            Ok(_) => panic!("accepted:\n{body}"),
            Err(e) => {
                let s = e.to_string();
                assert!(s.contains("gate.toml"), "names the file: {s}");
                s
            }
        }
    }

    #[test]
    fn the_shipped_configuration_plans() {
        let path = root().join("ci/gate.toml");
        let cfg = GateConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let plan = cfg.plan(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.self_check.manifest.name, "oob_read_k");
        assert_eq!(plan.self_check.case.head_dim, 40, "the planted bug needs head_dim 40");
        assert_eq!(plan.self_check.tool, Tool::Memcheck);
        assert!(plan.kernels.iter().any(|k| k.manifest.name == "flash_fwd"));
        assert!(cfg.budget(&path).unwrap().is_some());
    }

    #[test]
    fn unknown_and_mistyped_keys_name_file_and_key() {
        let e = err("[[kernels]]\nkernal = \"simple_attn\"\n");
        assert!(e.contains("kernal") && e.contains("ci/gate.toml"), "{e}");
        let e = err("[gate]\nbudgte = \"5m\"\n");
        assert!(e.contains("budgte"), "{e}");
        let e = err("[[kernels]]\nkernel = \"simple_attn\"\nshare = \"lots\"\n");
        assert!(e.contains("share"), "{e}");
        let e = err("[[sanitizers]]\ntools = [\"memchek\"]\nkernels = [\"simple_attn\"]\n");
        assert!(e.contains("memchek") && e.contains("memcheck"), "{e}");
        let (dir, path) = config_dir("");
        std::fs::write(&path, "[gate]\nseed = 1\n").unwrap();
        let e = GateConfig::load(&path).unwrap_err().to_string();
        assert!(e.contains("self_check"), "a gate without a planted bug is refused: {e}");
        drop(dir);
        let e = GateConfig::load(Path::new("/nonexistent/gate.toml")).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/gate.toml"), "{e}");
    }

    #[test]
    fn bad_values_name_the_field_and_the_fix() {
        let e = err("[[kernels]]\nkernel = \"simple_attn\"\nshare = 0\n");
        assert!(e.contains("`kernels[0].share`") && e.contains("positive weight"), "{e}");
        let e = err("[gate]\nbudget = \"soon\"\n");
        assert!(e.contains("`gate.budget`") && e.contains("20m"), "{e}");
        let e = err("[gate]\nsweep_share = 1.5\n");
        assert!(e.contains("`gate.sweep_share`"), "{e}");
        let e = err("[gate]\nsweep_share = 0.5\nsanitizer_share = 0.45\n");
        assert!(e.contains("below 0.9"), "{e}");
        let e = err("[[sweeps]]\nkernel = \"simple_attn\"\nclasses = [\"aligned\", \"q+3\"]\n");
        assert!(e.contains("`sweeps[0].classes`") && e.contains("q+3") && e.contains("q-pitch+1"), "{e}");
        let e = err("[[sweeps]]\nkernel = \"simple_attn\"\nparams = [\"BLOCK_THREADS=x\"]\n");
        assert!(e.contains("`sweeps[0].params`") && e.contains("not an integer"), "{e}");
        let e = err("[[sweeps]]\nkernel = \"simple_attn\"\nrepeat = 0\n");
        assert!(e.contains("`sweeps[0].repeat`"), "{e}");
        let e = err("[[kernels]]\nkernel = \"no_such_kernel\"\n");
        assert!(e.contains("`kernels[0].kernel`") && e.contains("cudafuzz kernels"), "{e}");
        let e = err("[[kernels]]\nkernel = \"missing/k.toml\"\n");
        assert!(e.contains("not found"), "{e}");
        let e = err("[[seeds]]\ndir = \"nowhere\"\n");
        assert!(e.contains("`seeds[0].dir`") && e.contains("create it"), "{e}");
        let e = err("[[sanitizers]]\ntools = []\nkernels = [\"simple_attn\"]\n");
        assert!(e.contains("`sanitizers[0].tools`"), "{e}");
        let e = err("[[kernels]]\nkernel = \"simple_attn\"\ncases = 0\n");
        assert!(e.contains("`kernels[0].cases`"), "{e}");
    }

    fn finding(kind: FindingKind, oracle: Oracle, kernel: &str) -> Finding {
        Finding {
            kind,
            oracle,
            kernel: kernel.into(),
            tensor: Some(TensorId::Q),
            location: Some(Location::Element { index: [0, 0, 0, 0] }),
            count: 1,
            cuda_error: None,
            source: oracle.is_sanitizer().then(|| crate::finding::SourceLocation { file: "simple_attn.cu".into(), line: 7, function: None }),
            access_size: None,
            sanitizer_kind: None,
            alignment: [8, 16, 16, 16],
            inside_contract: true,
            detail: "d".into(),
        }
    }

    /// Seeds in a temporary directory: an expected failure, a fixed one, a plain case.
    fn seed_dir(dir: &Path) -> (Finding, Finding) {
        let expected = finding(FindingKind::MisalignedAddress, Oracle::CudaStatus, "simple_attn");
        let fixed = finding(FindingKind::CanaryDamage, Oracle::Canary, "simple_attn");
        std::fs::create_dir_all(dir.join("fixed")).unwrap();
        let mut a = Case::example("kernels/testing/simple_attn.toml");
        a.data.seed = 11;
        std::fs::write(dir.join("a.json"), Seed::with_finding(a, expected.clone()).to_json()).unwrap();
        let mut b = Case::example("kernels/testing/simple_attn.toml");
        b.data.seed = 22;
        std::fs::write(dir.join("fixed/b.json"), Seed::with_finding(b, fixed.clone()).to_json()).unwrap();
        let mut c = Case::example("kernels/testing/simple_attn.toml");
        c.data.seed = 33;
        std::fs::write(dir.join("c.json"), Seed::new(c).to_json()).unwrap();
        std::fs::write(dir.join("README.md"), "not a seed").unwrap();
        (expected, fixed)
    }

    #[test]
    fn seed_expectations_follow_findings_and_fixed_directories() {
        let (dir, path) = config_dir("[[seeds]]\ndir = \"seeds\"\n");
        let (expected, _) = seed_dir(&dir.path().join("seeds"));
        let plan = GateConfig::load(&path).unwrap().plan(&path).unwrap();
        let got: Vec<(String, Expectation)> =
            plan.seeds.iter().map(|s| (s.path.strip_prefix(dir.path()).unwrap().display().to_string(), s.expected.clone())).collect();
        assert_eq!(
            got,
            vec![
                ("seeds/a.json".into(), Expectation::Fail { signature: expected.signature().0 }),
                ("seeds/c.json".into(), Expectation::Pass),
                ("seeds/fixed/b.json".into(), Expectation::Pass),
            ]
        );
        assert!(plan.seeds.iter().all(|s| s.manifest.name == "simple_attn"));
        // expect = "fail" on a seed without a finding is a configuration error naming the seed.
        std::fs::write(path.clone(), std::fs::read_to_string(&path).unwrap().replace("dir = \"seeds\"", "dir = \"seeds\"\nexpect = \"fail\"")).unwrap();
        let e = GateConfig::load(&path).unwrap().plan(&path).unwrap_err().to_string();
        assert!(e.contains("`seeds[0].expect`") && e.contains("c.json"), "{e}");
        // A broken seed names itself.
        std::fs::write(dir.path().join("seeds/broken.json"), "{ nope").unwrap();
        let e = GateConfig::load(&path).unwrap().plan(&path).unwrap_err();
        assert!(format!("{:#}", anyhow::Error::from(e)).contains("broken.json"));
    }

    #[test]
    fn budget_split() {
        assert_eq!(split(Duration::from_secs(100), &[3.0, 1.0]), vec![Duration::from_secs(75), Duration::from_secs(25)]);
        assert_eq!(split(Duration::from_secs(10), &[1.0, 0.0, -1.0]), vec![Duration::from_secs(10), Duration::ZERO, Duration::ZERO]);
        assert_eq!(split(Duration::from_secs(10), &[]), Vec::<Duration>::new());
        let parts = split(Duration::from_millis(1000), &[1.0, 1.0, 1.0]);
        assert!(parts.iter().sum::<Duration>() <= Duration::from_millis(1000));
        assert!(parts.iter().all(|p| *p >= Duration::from_millis(333)));

        let b = Budget { total: Duration::from_secs(1200), sweep_share: 0.15, sanitizer_share: 0.2 };
        assert_eq!(b.reserve(), Duration::from_secs(10));
        assert_eq!(b.sweep(Duration::from_secs(60)), Duration::from_secs(180));
        // After 300 s: 1200 - 300 - 10 reserve - 240 for sanitizers = 650, split 1:1.
        assert_eq!(b.fuzz(Duration::from_secs(300), &[1.0, 1.0], true), vec![Duration::from_secs(325); 2]);
        assert_eq!(b.fuzz(Duration::from_secs(300), &[1.0], false), vec![Duration::from_secs(890)]);
        assert_eq!(b.sanitizer(Duration::from_secs(950), 2), Duration::from_secs(120));
        // Over budget: nothing left, never a negative or a panic.
        assert_eq!(b.fuzz(Duration::from_secs(5000), &[1.0], true), vec![Duration::ZERO]);
        assert_eq!(b.sweep(Duration::from_secs(5000)), Duration::ZERO);
        let small = Budget { total: Duration::from_secs(60), ..b };
        assert_eq!(small.reserve(), Duration::from_secs(3));
        assert_eq!(parse_budget("20m").unwrap(), Duration::from_secs(1200));
        assert_eq!(parse_budget("1h 30m").unwrap(), Duration::from_secs(5400));
        assert!(parse_budget("20").unwrap_err().contains("20m"));
        assert!(parse_budget("0s").is_err());
    }

    #[test]
    fn config_labels_match_the_sweep_command() {
        assert_eq!(config_label("k", &BTreeMap::new()), "k");
        assert_eq!(config_label("k", &BTreeMap::from([("B".into(), 1), ("A".into(), 2)])), "k[A=2,B=1]");
    }

    /// A scripted backend: which cases fail how, and what was asked of it.
    #[derive(Default)]
    struct Fake {
        no_gpu: bool,
        no_sanitizer: bool,
        planted_missed: bool,
        /// Data seed -> findings when that case is replayed.
        replay: BTreeMap<u64, Vec<Finding>>,
        /// A finding every fuzz campaign reports.
        fuzz_finding: Option<Finding>,
        interrupt_fuzz: bool,
        /// Sanitizer passes run no case (their time ran out first).
        sanitizer_starved: bool,
        calls: Vec<String>,
    }

    impl Backend for Fake {
        fn gpu(&mut self) -> Result<GpuSummary, String> {
            self.calls.push("gpu".into());
            if self.no_gpu {
                Err("no CUDA driver on this machine".into())
            } else {
                Ok(GpuSummary { name: "Fake GPU".into(), arch: "sm_90".into(), driver: "13.0".into() })
            }
        }
        fn sanitizer(&mut self) -> Result<String, String> {
            if self.no_sanitizer {
                Err("compute-sanitizer was not found".into())
            } else {
                Ok("Version 2025.3".into())
            }
        }
        fn run_case(&mut self, m: &Manifest, case: &Case, tool: Option<Tool>) -> Result<Outcome, StepError> {
            self.calls.push(format!("run {} {:?}", m.name, tool));
            if tool.is_some() {
                return Ok(if self.planted_missed {
                    Outcome::Pass
                } else {
                    Outcome::Fail { findings: vec![finding(FindingKind::SanitizerMemory, Oracle::Memcheck, &m.name)] }
                });
            }
            Ok(match self.replay.get(&case.data.seed) {
                Some(f) if !f.is_empty() => Outcome::Fail { findings: f.clone() },
                _ => Outcome::Pass,
            })
        }
        fn sweep_cell(&mut self, job: &CellJob<'_>, _found: &mut dyn FnMut(Found)) -> Result<MatrixCell, StepError> {
            self.calls.push(format!("cell {} {}", config_label(&job.manifest.name, job.params), job.class));
            Ok(MatrixCell { pass: job.repeat, ..MatrixCell::default() })
        }
        fn fuzz(&mut self, job: &FuzzJob<'_>, found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError> {
            self.calls.push(format!("fuzz {} shard {}", job.manifest.name, job.shard));
            if self.interrupt_fuzz {
                return Err(StepError::Interrupted);
            }
            if let Some(f) = &self.fuzz_finding {
                found(Found { case: "c".into(), finding: f.clone(), seed: Some(PathBuf::from("out/seeds/x.json")) });
            }
            Ok(Campaign { cases: 10, passed: 10, ..Campaign::default() })
        }
        fn sanitize(&mut self, job: &SanitizeJob<'_>, _found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError> {
            self.calls.push(format!("sanitize {} {:?}", job.manifest.name, job.tools));
            let cases = if self.sanitizer_starved { 0 } else { 5 };
            Ok(Campaign { cases, passed: cases, ..Campaign::default() })
        }
    }

    const BODY: &str = "[[seeds]]\ndir = \"seeds\"\n\n[[kernels]]\nkernel = \"simple_attn\"\n\n[[sweeps]]\nkernel = \"simple_attn\"\nclasses = [\"aligned\", \"q+8\", \"tail\"]\nrepeat = 2\n\n[[sanitizers]]\ntools = [\"memcheck\"]\nkernels = [\"simple_attn\"]\n";

    fn gate(fake: &mut Fake, shard: Option<Shard>) -> (tempfile::TempDir, RunReport, (Finding, Finding)) {
        let (dir, path) = config_dir(BODY);
        let found = seed_dir(&dir.path().join("seeds"));
        // Replays as they were recorded: a fails as saved; b (fixed) and c pass.
        fake.replay.entry(11).or_insert_with(|| vec![found.0.clone()]);
        let plan = GateConfig::load(&path).unwrap().plan(&path).unwrap();
        let report = run(&plan, Duration::from_secs(60), shard, fake, &mut |_| {});
        (dir, report, found)
    }

    #[test]
    fn a_clean_gate_passes_after_running_every_step() {
        let mut fake = Fake::default();
        let (_dir, r, _) = gate(&mut fake, None);
        assert_eq!(r.exit_code(), exit::OK, "{}\n{:#?}", r.headline(), r.environment);
        let names: Vec<&str> = r.environment.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, [checks::GPU, checks::DRIVER, checks::SANITIZER, checks::PLANTED]);
        assert_eq!(r.counts.replays, 3);
        assert_eq!(r.counts.cells, 3);
        assert_eq!(r.counts.findings, 1, "the expected failure is listed, as expected");
        assert!(!r.findings().next().unwrap().1.new);
        let order: Vec<&str> = fake.calls.iter().map(|c| c.split(' ').next().unwrap()).collect();
        assert_eq!(order, ["gpu", "run", "run", "run", "run", "cell", "cell", "cell", "fuzz", "sanitize"], "{:?}", fake.calls);
        assert_eq!(fake.calls[1], "run oob_read_k Some(Memcheck)");
        let k = &r.kernels[0];
        assert_eq!(k.source.as_deref(), Some("kernels/testing/simple_attn.cu"));
        assert!(k.campaign.as_ref().unwrap().budget_secs > 0.0);
    }

    #[test]
    fn a_sanitizer_pass_that_ran_no_case_says_so() {
        let mut fake = Fake { sanitizer_starved: true, ..Fake::default() };
        let (dir, path) = config_dir(BODY);
        seed_dir(&dir.path().join("seeds"));
        let plan = GateConfig::load(&path).unwrap().plan(&path).unwrap();
        let mut lines = Vec::new();
        run(&plan, Duration::from_secs(60), None, &mut fake, &mut |l| lines.push(l.to_string()));
        let line = lines.iter().find(|l| l.starts_with("simple_attn under memcheck")).expect("the pass is logged");
        assert!(line.contains("0 cases") && line.contains("NOT CHECKED") && line.contains("--budget"), "{line}");
    }

    #[test]
    fn no_gpu_fails_with_exit_3_and_lists_what_was_not_checked() {
        let mut fake = Fake { no_gpu: true, ..Fake::default() };
        let (_dir, r, _) = gate(&mut fake, None);
        assert_eq!(r.exit_code(), exit::NO_GPU);
        assert!(r.headline().contains("no GPU"), "{}", r.headline());
        assert!(!r.environment.iter().find(|e| e.name == checks::PLANTED).unwrap().ok);
        assert_eq!(r.counts.replays, 3);
        assert_eq!((r.counts.not_run, r.counts.regressions), (3, 0), "not run is never a pass, nor a regression");
        assert!(r.kernels.iter().all(|k| k.campaign.is_none() && k.sweep.is_empty()));
        assert_eq!(fake.calls, ["gpu"]);
    }

    #[test]
    fn a_missing_sanitizer_or_an_uncaught_planted_bug_fails_the_gate() {
        let mut fake = Fake { no_sanitizer: true, ..Fake::default() };
        let (_dir, r, _) = gate(&mut fake, None);
        assert_eq!(r.exit_code(), exit::SETUP, "{}", r.headline());
        assert!(r.headline().contains("compute-sanitizer") && r.headline().contains("planted bug"), "{}", r.headline());
        assert!(!fake.calls.iter().any(|c| c.starts_with("sanitize")), "no sanitizer pass without the tool");
        assert!(fake.calls.iter().any(|c| c.starts_with("fuzz")), "the rest still runs, for the report");
        let mut fake = Fake { planted_missed: true, ..Fake::default() };
        let (_dir, r, _) = gate(&mut fake, None);
        let planted = r.environment.iter().find(|e| e.name == checks::PLANTED).unwrap();
        assert!(!planted.ok && planted.detail.contains("NOT caught"), "{}", planted.detail);
        assert_eq!(r.exit_code(), exit::SETUP);
    }

    #[test]
    fn regressions_and_new_findings_fail_with_exit_1() {
        // The fixed seed fails again; the expected failure now fails differently.
        let mut fake = Fake::default();
        fake.replay.insert(22, vec![finding(FindingKind::CanaryDamage, Oracle::Canary, "simple_attn")]);
        fake.replay.insert(11, vec![finding(FindingKind::IllegalAddress, Oracle::CudaStatus, "simple_attn")]);
        let (_dir, r, _) = gate(&mut fake, None);
        assert_eq!(r.exit_code(), exit::FINDINGS);
        assert_eq!(r.counts.regressions, 2);
        assert_eq!(r.counts.new_findings, 2);

        // A fuzz finding with the expected failure's signature is known; another one is new.
        let mut fake = Fake { fuzz_finding: Some(finding(FindingKind::MisalignedAddress, Oracle::CudaStatus, "simple_attn")), ..Fake::default() };
        let (_dir, r, _) = gate(&mut fake, None);
        assert_eq!(r.exit_code(), exit::OK, "{}", r.headline());
        let mut fake = Fake { fuzz_finding: Some(finding(FindingKind::NanLeak, Oracle::NanLeak, "simple_attn")), ..Fake::default() };
        let (_dir, r, _) = gate(&mut fake, None);
        assert_eq!(r.exit_code(), exit::FINDINGS);
        let (_, f) = r.findings().find(|(_, f)| f.new).unwrap();
        assert_eq!((f.step, f.seed.as_deref()), (Step::Fuzz, Some("out/seeds/x.json")));
    }

    #[test]
    fn interrupted_stops_the_gate_but_keeps_the_report() {
        let mut fake = Fake { interrupt_fuzz: true, ..Fake::default() };
        let (_dir, r, _) = gate(&mut fake, None);
        assert!(r.interrupted);
        assert_eq!(r.exit_code(), exit::INTERRUPTED);
        assert!(!fake.calls.iter().any(|c| c.starts_with("sanitize")));
        assert_eq!(r.counts.replays, 3);
    }

    #[test]
    fn shards_split_seeds_and_cells_and_share_the_fuzz_stream() {
        let mut all_cells = Vec::new();
        let mut replays = 0;
        for i in 0..2 {
            let mut fake = Fake::default();
            let shard = Shard::new(i, 2);
            let (_dir, r, _) = gate(&mut fake, shard);
            assert_eq!(r.shard, shard);
            replays += r.counts.replays;
            all_cells.extend(fake.calls.iter().filter(|c| c.starts_with("cell")).cloned());
            assert!(fake.calls.contains(&format!("fuzz simple_attn shard {}/2", i + 1)), "{:?}", fake.calls);
        }
        assert_eq!(replays, 3, "each seed replayed by exactly one shard");
        all_cells.sort();
        assert_eq!(all_cells.len(), 3, "each cell swept by exactly one shard: {all_cells:?}");
        all_cells.dedup();
        assert_eq!(all_cells.len(), 3);
    }
}
