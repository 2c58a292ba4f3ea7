//! [`run`](run()): the gate's five steps, in the order the module docs give, within the budget.
//! Each step is a method of one `GateRun`, which carries what every step reads (plan, budget,
//! shard, backend) and what they all write (the report, whether the gate stopped), so that the
//! order of the steps reads in one short function and each step can be read on its own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use crate::core::finding::{Finding, Signature};
use crate::core::manifest::Manifest;
use crate::core::registry;
use crate::core::shard::Shard;
use crate::core::verdict::Outcome;
use crate::tools::report::export::{
    relative_path, timestamp, Expectation, FindingEntry, KernelSection, MatrixRow, Observed, RunReport, SanitizerRun, SeedReplay, Step, CHECK_GPU,
};

use super::backend::{Backend, Found, FuzzJob, SanitizeJob, StepError};
use super::budget::Budget;
use super::plan::{config_label, GatePlan, PlannedKernel, PlannedSanitizer, PlannedSeed, PlannedSweep};
use crate::tools::sweep::CellSpec;

/// The names of the environment checks, in order.
pub mod checks {
    /// A GPU is present ([`crate::tools::report::export::CHECK_GPU`]).
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
    known: &'a BTreeSet<Signature>,
}

impl Book<'_> {
    fn add(&self, report: &mut RunReport, manifest: &Manifest, step: Step, found: Found, expected: bool) {
        let sec = section(report, manifest);
        let signature = found.finding.signature();
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
                    bug: None,
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
    let known: BTreeSet<Signature> = plan
        .seeds
        .iter()
        .filter_map(|s| match &s.expected {
            Expectation::Fail { signature } => Some(signature.clone()),
            Expectation::Pass => None,
        })
        .collect();
    let mut gate = GateRun {
        plan,
        budget: plan.settings.budget(budget),
        started,
        shard: shard.unwrap_or(Shard::ALL),
        seed: plan.settings.seed,
        book: Book { known: &known },
        backend,
        log,
        report,
        sanitizer_ok: false,
        stopped: false,
    };
    // Sections in configuration order, so every report lists kernels the same way.
    for m in plan.kernels.iter().map(|k| &k.manifest).chain(plan.sweeps.iter().map(|s| &s.manifest)) {
        section(&mut gate.report, m);
    }

    let gpu_ok = gate.environment();
    let owned_seeds: Vec<&PlannedSeed> = gate.shard.split(plan.seeds.iter());
    if !gpu_ok || gate.report.interrupted {
        let reason = if gpu_ok { "interrupted" } else { "no GPU" };
        for s in owned_seeds {
            gate.not_run(s, reason.into());
        }
        return finish(gate.report, started);
    }
    gate.replay(owned_seeds);
    gate.sweep();
    gate.fuzz();
    gate.sanitizer_passes();
    finish(gate.report, started)
}

/// One gate in progress: what its steps share.
struct GateRun<'a> {
    plan: &'a GatePlan,
    budget: Budget,
    /// Each step's time is computed from it when the step starts (see [`Budget`]).
    started: Instant,
    /// `Shard::ALL` when the gate is not sharded.
    shard: Shard,
    /// Generator seed for sweep, fuzz and sanitizer cases.
    seed: u64,
    book: Book<'a>,
    backend: &'a mut dyn Backend,
    log: &'a mut dyn FnMut(&str),
    report: RunReport,
    /// compute-sanitizer runs: without it no sanitizer pass runs, fuzz findings are not
    /// escalated and seeds whose finding came from a sanitizer tool are not replayed.
    sanitizer_ok: bool,
    /// Interrupted, or the GPU was lost: nothing more runs, but the report is still written.
    stopped: bool,
}

impl GateRun<'_> {
    /// 1. Environment. Returns whether there is a GPU (without one nothing else runs).
    fn environment(&mut self) -> bool {
        (self.log)("== environment");
        let gpu_ok = match self.backend.gpu() {
            Ok(g) => {
                self.report.check(checks::GPU, true, format!("{} ({})", g.name, g.arch));
                self.report.check(checks::DRIVER, true, format!("CUDA driver API {}", g.driver));
                self.report.gpu = Some(g);
                true
            }
            Err(why) => {
                // A backend that cannot open a GPU says `no GPU: ...` itself.
                let why = match why {
                    StepError::NoGpu(_) => why.to_string(),
                    other => format!("no GPU: {other}"),
                };
                self.report.check(checks::GPU, false, format!("{why}; the gate must run on a CUDA host, and without a GPU nothing was checked"));
                self.report.check(checks::DRIVER, false, "not checked: no GPU");
                false
            }
        };
        self.sanitizer_ok = match self.backend.sanitizer() {
            Ok(v) => {
                self.report.check(checks::SANITIZER, true, v);
                true
            }
            Err(why) => {
                self.report.check(checks::SANITIZER, false, format!("{why}; the gate fails without it"));
                false
            }
        };
        self.planted_bug(gpu_ok);
        for e in &self.report.environment {
            (self.log)(&format!("{:<18} {:<6} {}", e.name, if e.ok { "ok" } else { "FAILED" }, e.detail));
        }
        gpu_ok
    }

    /// The planted bug under its tool: a gate whose sanitizer integration is broken must fail,
    /// since a clean gate would then mean nothing.
    fn planted_bug(&mut self, gpu_ok: bool) {
        let sc = &self.plan.self_check;
        let planted = format!("{} under {} must give {}", sc.manifest.name, sc.tool, sc.expect);
        match (gpu_ok, self.sanitizer_ok) {
            (false, _) => self.report.check(checks::PLANTED, false, format!("not run ({planted}): no GPU")),
            (true, false) => self.report.check(checks::PLANTED, false, format!("not run ({planted}): compute-sanitizer is not available")),
            (true, true) => match self.backend.run_case(&sc.manifest, &sc.case, Some(sc.tool)) {
                Ok(Outcome::Fail { findings }) if findings.iter().any(|f| f.kind == sc.expect && f.oracle.is_sanitizer()) => {
                    let f = findings.iter().find(|f| f.kind == sc.expect && f.oracle.is_sanitizer()).expect("just found");
                    self.report.check(checks::PLANTED, true, format!("caught: {f}"));
                }
                Ok(Outcome::Fail { findings }) => {
                    let seen: Vec<String> = findings.iter().map(|f| f.to_string()).collect();
                    self.report.check(
                        checks::PLANTED,
                        false,
                        format!("NOT caught ({planted}); saw only: {}: the sanitizer integration is broken", seen.join("; ")),
                    )
                }
                Ok(other) => self.report.check(
                    checks::PLANTED,
                    false,
                    format!("NOT caught ({planted}); the case gave {other:?}: the sanitizer integration is broken, so a clean gate would mean nothing"),
                ),
                Err(StepError::Interrupted) => self.report.interrupted = true,
                Err(e) => self.report.check(checks::PLANTED, false, format!("not run ({planted}): {e}")),
            },
        }
    }

    /// A seed the gate did not replay, listed with why: not run is never a pass.
    fn not_run(&mut self, s: &PlannedSeed, reason: String) {
        section(&mut self.report, &s.manifest).replays.push(SeedReplay {
            seed: relative_path(&s.path),
            case: s.case.summary(),
            expected: s.expected.clone(),
            observed: Observed::NotRun { reason },
            ok: false,
        });
    }

    /// 2. Seed replays: the seeds this shard owns.
    fn replay(&mut self, seeds: Vec<&PlannedSeed>) {
        (self.log)(&format!("== replay {} of {} seeds", seeds.len(), self.plan.seeds.len()));
        for s in seeds {
            if self.stopped {
                self.not_run(s, "the gate stopped early".into());
                continue;
            }
            self.replay_seed(s);
        }
    }

    /// One seed, under the tool its saved finding came from (a sanitizer finding only
    /// reproduces under its tool), checked against what it must do.
    fn replay_seed(&mut self, s: &PlannedSeed) {
        let shown = relative_path(&s.path);
        let result = match s.tool {
            Some(tool) if !self.sanitizer_ok => Err(format!("needs compute-sanitizer {tool} (its finding came from that tool), which is not available")),
            tool => Ok(self.backend.run_case(&s.manifest, &s.case, tool)),
        };
        let (observed, findings) = match result {
            Err(reason) => (Observed::NotRun { reason }, Vec::new()),
            Ok(result) => match result {
                Ok(Outcome::Pass) => (Observed::Pass, Vec::new()),
                Ok(Outcome::Fail { findings }) => {
                    let mut sigs: Vec<Signature> = Vec::new();
                    for f in &findings {
                        let sig = f.signature();
                        if !sigs.contains(&sig) {
                            sigs.push(sig);
                        }
                    }
                    (Observed::Fail { signatures: sigs }, findings)
                }
                Ok(Outcome::Error { message }) => (Observed::Error { message }, Vec::new()),
                Ok(Outcome::Rejected { exception, message }) => {
                    (Observed::Error { message: format!("rejected by the target: {exception}: {message}") }, Vec::new())
                }
                Err(e) => {
                    let observed = Observed::Error { message: e.to_string() };
                    self.fail_step(&format!("replay {shown}"), e);
                    (observed, Vec::new())
                }
            },
        };
        let ok = s.expected.met_by(&observed);
        (self.log)(&format!("{} {shown}: expected {}, observed {observed}", if ok { "ok    " } else { "FAILED" }, s.expected));
        for f in findings {
            // An expected failure's symptoms are all expected; anything else that fails is new
            // unless another seed expects its signature.
            self.book.add(&mut self.report, &s.manifest, Step::Replay, Found { case: s.case.summary(), finding: f, seed: Some(s.path.clone()) }, ok);
        }
        section(&mut self.report, &s.manifest).replays.push(SeedReplay { seed: shown, case: s.case.summary(), expected: s.expected.clone(), observed, ok });
    }

    /// 3. Sweeps: cells dealt round-robin over the shards.
    fn sweep(&mut self) {
        if self.stopped || self.plan.sweeps.is_empty() {
            return;
        }
        let deadline = crate::core::clock::deadline_in(self.budget.sweep(self.started.elapsed()));
        (self.log)(&format!("== sweep ({:.0} s at most)", deadline.saturating_duration_since(Instant::now()).as_secs_f64()));
        let mut cell_index = 0u64;
        let plan = self.plan;
        for sw in &plan.sweeps {
            for params in &sw.grid {
                let row = self.sweep_row(sw, params, deadline, &mut cell_index);
                // A row the gate stopped in is kept as far as it got.
                if self.stopped {
                    section(&mut self.report, &sw.manifest).sweep.push(row);
                    return;
                }
                if !row.cells.is_empty() {
                    section(&mut self.report, &sw.manifest).sweep.push(row);
                }
            }
        }
    }

    /// One row of a matrix: the cells this shard owns. `cell_index` counts every cell of every
    /// matrix, so each shard deals the same way; the row ends early when the gate stops.
    fn sweep_row(&mut self, sw: &PlannedSweep, params: &BTreeMap<String, i64>, deadline: Instant, cell_index: &mut u64) -> MatrixRow {
        let mut row = MatrixRow {
            config: config_label(&sw.manifest.name, params),
            expect_pass: sw.expect_pass,
            classes: sw.classes.iter().map(|c| c.to_string()).collect(),
            cells: BTreeMap::new(),
        };
        for class in &sw.classes {
            let mine = self.shard.owns(*cell_index);
            *cell_index += 1;
            if !mine {
                continue;
            }
            let job = CellSpec { manifest: &sw.manifest, params, class: class.clone(), repeat: sw.repeat, seed: self.seed, deadline: Some(deadline) };
            let mut found = Vec::new();
            let result = self.backend.sweep_cell(&job, &mut |f| found.push(f));
            for f in found {
                self.book.add(&mut self.report, &sw.manifest, Step::Sweep, f, !sw.expect_pass);
            }
            match result {
                Ok(cell) if cell.pass + cell.fail + cell.error + cell.skipped == 0 => {
                    (self.log)(&format!("{} {class}: not run (the sweep's share of the budget is used up)", row.config));
                }
                Ok(cell) => {
                    (self.log)(&format!("{} {class}: {} passed, {} failed, {} errors, {} skipped", row.config, cell.pass, cell.fail, cell.error, cell.skipped));
                    row.cells.insert(class.to_string(), cell);
                }
                Err(e) => {
                    self.fail_step(&format!("sweep {} {class}", row.config), e);
                    if self.stopped {
                        return row;
                    }
                }
            }
        }
        row
    }

    /// 4. Fuzz campaigns.
    fn fuzz(&mut self) {
        if self.stopped || self.plan.kernels.is_empty() {
            return;
        }
        let plan = self.plan;
        let weights: Vec<f64> = plan.kernels.iter().map(|k| k.share).collect();
        let times = self.budget.fuzz(self.started.elapsed(), &weights, !plan.sanitizers.is_empty());
        (self.log)("== fuzz");
        for (k, time) in plan.kernels.iter().zip(times) {
            if self.stopped {
                break;
            }
            self.fuzz_kernel(k, time);
        }
    }

    /// One kernel's campaign for its `time`; its counts record that budget, the time it took
    /// and the generator seed.
    fn fuzz_kernel(&mut self, k: &PlannedKernel, time: Duration) {
        let t0 = Instant::now();
        let plan = self.plan;
        let job = FuzzJob {
            manifest: &k.manifest,
            seed: self.seed,
            shard: self.shard,
            cases: k.cases,
            deadline: crate::core::clock::deadline(t0, time),
            outside_contract: k.outside_contract,
            escalate: if self.sanitizer_ok { &plan.settings.escalate } else { &[] },
        };
        let mut found = Vec::new();
        let result = self.backend.fuzz(&job, &mut |f| found.push(f));
        for f in found {
            self.book.add(&mut self.report, &k.manifest, Step::Fuzz, f, false);
        }
        match result {
            Ok(mut c) => {
                c.budget_secs = time.as_secs_f64();
                c.elapsed_secs = t0.elapsed().as_secs_f64();
                c.seed = self.seed;
                (self.log)(&format!(
                    "{}: {} cases in {:.0} s of {:.0} s: {} passed, {} failed, {} errors, {} skipped, {} steered past known bugs",
                    k.manifest.name, c.cases, c.elapsed_secs, c.budget_secs, c.passed, c.failed, c.errors, c.skipped, c.steered
                ));
                section(&mut self.report, &k.manifest).campaign = Some(c);
            }
            Err(e) => self.fail_step(&format!("fuzz {}", k.manifest.name), e),
        }
    }

    /// 5. Sanitizer passes.
    fn sanitizer_passes(&mut self) {
        if self.stopped || self.plan.sanitizers.is_empty() {
            return;
        }
        (self.log)("== sanitizer passes");
        if !self.sanitizer_ok {
            (self.log)("skipped: compute-sanitizer is not available (the gate fails on that check)");
            return;
        }
        let plan = self.plan;
        for (i, p) in plan.sanitizers.iter().enumerate() {
            if self.stopped {
                break;
            }
            self.sanitizer_pass(p, plan.sanitizers.len() - i);
        }
    }

    /// One pass, with an equal part of what is left for the `passes_left` passes (this one
    /// included), so time an earlier pass did not use goes to the later ones.
    fn sanitizer_pass(&mut self, p: &PlannedSanitizer, passes_left: usize) {
        let t0 = Instant::now();
        let time = self.budget.sanitizer(self.started.elapsed(), passes_left);
        let job = SanitizeJob {
            manifest: &p.manifest,
            tools: &p.tools,
            cases: p.cases,
            seed: self.seed,
            shard: self.shard,
            deadline: crate::core::clock::deadline(t0, time),
        };
        let mut found = Vec::new();
        let result = self.backend.sanitize(&job, &mut |f| found.push(f));
        for f in found {
            self.book.add(&mut self.report, &p.manifest, Step::Sanitizer, f, false);
        }
        let tools: Vec<&str> = p.tools.iter().map(|t| t.name()).collect();
        match result {
            Ok(mut c) => {
                c.budget_secs = time.as_secs_f64();
                c.elapsed_secs = t0.elapsed().as_secs_f64();
                c.seed = self.seed;
                let starved = if c.cases == 0 {
                    format!(" (NOT CHECKED: its {:.0} s of the budget ran out before a case finished; give the gate a longer --budget)", time.as_secs_f64())
                } else {
                    String::new()
                };
                (self.log)(&format!("{} under {}: {} cases, {} failed, {} errors{starved}", p.manifest.name, tools.join(","), c.cases, c.failed, c.errors));
                section(&mut self.report, &p.manifest).sanitizer.push(SanitizerRun { tools: tools.join(","), counts: c });
            }
            Err(e) => self.fail_step(&format!("{} under {}", p.manifest.name, tools.join(",")), e),
        }
    }

    /// A step error: interrupted stops the gate; a lost GPU stops it too (a failed check); any
    /// other failure is a failed check and the gate goes on.
    fn fail_step(&mut self, what: &str, e: StepError) {
        (self.log)(&format!("{what}: {e}"));
        match e {
            StepError::Interrupted => {
                self.report.interrupted = true;
                self.stopped = true;
            }
            StepError::NoGpu(why) => {
                self.report.check("gpu lost", false, format!("{what}: {why}"));
                self.stopped = true;
            }
            StepError::Failed(why) => self.report.check(&format!("harness: {what}"), false, why),
        }
    }
}

/// Closes the report: sections made up front (to keep the configuration's order) that got
/// nothing are dropped, and the counts are taken.
fn finish(mut report: RunReport, started: Instant) -> RunReport {
    report.finished = timestamp(SystemTime::now());
    report.duration_secs = started.elapsed().as_secs_f64();
    report.kernels.retain(|k| !(k.replays.is_empty() && k.sweep.is_empty() && k.campaign.is_none() && k.sanitizer.is_empty() && k.findings.is_empty()));
    report.recount();
    report
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::core::case::Case;
    use crate::core::exit;
    use crate::core::finding::{FindingKind, Oracle};
    use crate::run::sanitizer::Tool;
    use crate::tools::gate::testing::{config_dir, finding, seed_dir};
    use crate::tools::gate::GateConfig;
    use crate::tools::report::export::{Campaign, GpuSummary, MatrixCell};

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
        fn gpu(&mut self) -> Result<GpuSummary, StepError> {
            self.calls.push("gpu".into());
            if self.no_gpu {
                Err(StepError::NoGpu("no CUDA driver on this machine".into()))
            } else {
                Ok(GpuSummary { name: "Fake GPU".into(), arch: "sm_90".into(), driver: "13.0".into() })
            }
        }
        fn sanitizer(&mut self) -> Result<String, StepError> {
            if self.no_sanitizer {
                Err(StepError::Failed("compute-sanitizer was not found".into()))
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
            Ok(match self.replay.get(&case.seed) {
                Some(f) if !f.is_empty() => Outcome::Fail { findings: f.clone() },
                _ => Outcome::Pass,
            })
        }
        fn sweep_cell(&mut self, job: &CellSpec<'_>, _found: &mut dyn FnMut(Found)) -> Result<MatrixCell, StepError> {
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
