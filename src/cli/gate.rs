//! `cudafuzz gate`: loads the configuration, runs [`crate::gate::run`] with a backend made of the
//! same pool, supervisors and helpers as `fuzz`, `repro` and `sweep`, and writes the reports.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use super::{chain, fail, file_seeds, refuse_clobber, EngineArgs};
use crate::campaign::{self, CampaignEvent, CampaignSpec, CaseStream, Escalator, EventKind, Kept, SeedKeeper};
use crate::case::Case;
use crate::config::EngineConfig;
use crate::exit;
use crate::gate::{self, Backend, Found, FuzzJob, GateConfig, SanitizeJob, StepError, DEFAULT_BUDGET};
use crate::manifest::Manifest;
use crate::report::export::{Campaign, GpuSummary, MatrixCell};
use crate::sanitizer::{Sanitizer, Tool};
use crate::shard::Shard;
use crate::supervisor::{Pool, Supervisor, SupervisorError};
use crate::sweep::{run_cell, CellSpec};
use crate::worker::{Outcome, RunOptions};

/// Arguments of `cudafuzz gate`.
#[derive(Debug, Args)]
pub(super) struct GateArgs {
    /// The gate configuration (TOML; every key is described in ci/gate.toml).
    #[arg(long, default_value = "ci/gate.toml")]
    config: PathBuf,
    /// Time budget, e.g. 20m, 90s, 1h 30m (default: the configuration's `[gate] budget`, else 20m).
    #[arg(long)]
    budget: Option<String>,
    /// Run part I of N, counted from 1 (`--shard 2/4` is the second of four): seeds and sweep
    /// cells are dealt round-robin, every shard fuzzes its own slice of the case stream. Default:
    /// $CUDAFUZZ_SHARD (I/N), else a Slurm job array's task, else the whole gate.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Check the configuration and print the plan (seeds, cells, budget split), run nothing.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    engine: EngineArgs,
}

pub(super) fn gate_command(a: GateArgs) -> Result<i32> {
    let usage = |e: gate::GateError| fail(exit::USAGE, chain(e));
    let cfg = GateConfig::load(&a.config).map_err(usage)?;
    let plan = cfg.plan(&a.config).map_err(usage)?;
    let shard = Shard::resolve(a.shard.as_deref()).map_err(|e| fail(exit::USAGE, e.to_string()))?;
    let budget = match &a.budget {
        Some(b) => gate::parse_budget(b).map_err(|e| fail(exit::USAGE, format!("--budget: {e}")))?,
        None => cfg.budget(&a.config).map_err(usage)?.unwrap_or(DEFAULT_BUDGET),
    };
    plan.check_budget(budget).map_err(usage)?;
    if a.engine.sanitize.is_some() {
        return Err(fail(exit::USAGE, "--sanitize does not apply to the gate: list sanitizer passes under [[sanitizers]] in the configuration"));
    }
    let cfg = a.engine.config()?;
    let inputs: Vec<&std::path::Path> = std::iter::once(a.config.as_path()).chain(plan.seeds.iter().map(|s| s.path.as_path())).collect();
    for name in crate::report::export::REPORT_FILES {
        refuse_clobber(&cfg.out.join(name), inputs.iter().copied())?;
    }
    let sh = shard.unwrap_or(Shard::ALL);
    outln!(
        "cudafuzz gate: {} · budget {} · shard {}{}",
        a.config.display(),
        humantime::format_duration(budget),
        sh,
        if shard.is_none() { " (whole gate)" } else { "" }
    )?;
    if a.check {
        print_plan(&plan, budget, sh)?;
        return Ok(exit::OK);
    }
    let mut backend = GpuBackend::new(cfg.clone());
    let mut report = gate::run(&plan, budget, shard, &mut backend, &mut |line| {
        // A closed stdout raised the stop flag: the gate stops at its next step.
        let _ = outln!("{line}");
    });
    // One seed per bug in seeds/, the others under seeds/<id>/examples/, and the bug index.
    let (moves, _) = file_seeds(&mut backend.keeper, &cfg.out, false);
    report.rename_seeds(&moves);
    drop(backend);
    let written = report.write_all(&cfg.out).map_err(|e| fail(exit::SETUP, chain(e)))?;
    outln!("{}", report.headline())?;
    for p in &written {
        outln!("  {}", p.display())?;
    }
    // One entry per new bug (its findings are in the reports): the first finding and the
    // smallest saved seed that replays it.
    for (bug, entries) in report.bugs() {
        let new: Vec<_> = entries.iter().filter(|(_, f)| f.new).collect();
        // The sanitizer's record names the bug best (its site); a launch failure beside it is
        // only the tool aborting the kernel.
        let Some((k, first)) = new.iter().find(|(_, f)| f.finding.oracle.is_sanitizer()).or(new.first()) else { continue };
        outln!("NEW BUG {bug} in {}: {} ({} finding{})", k.kernel, first.finding, new.len(), if new.len() == 1 { "" } else { "s" })?;
        if let Some(seed) = first.seed.as_deref().or_else(|| new.iter().filter_map(|(_, f)| f.seed.as_deref()).next()) {
            out!("{}", crate::report::replay_lines(std::path::Path::new(seed)))?;
        }
    }
    if report.no_gpu() {
        errln!(
            "cudafuzz: NO GPU on this machine: the gate checked nothing and fails (exit 3); the report with the failed environment check is in {}",
            cfg.out.display()
        );
    }
    Ok(report.exit_code())
}

/// `--check`: what the gate would do.
fn print_plan(plan: &gate::GatePlan, total: Duration, sh: Shard) -> Result<()> {
    let b = plan.settings.budget(total);
    let sc = &plan.self_check;
    outln!("self check: {} ({}) under {} must give {}", sc.manifest.name, sc.case.summary(), sc.tool, sc.expect)?;
    outln!("seeds: {} in all, {} for this shard", plan.seeds.len(), sh.len_of(plan.seeds.len() as u64))?;
    for s in sh.split(plan.seeds.iter()) {
        outln!("  {}: {} must {}", s.path.display(), s.manifest.name, s.expected)?;
    }
    let cells: u64 = plan.sweeps.iter().map(|s| (s.grid.len() * s.classes.len()) as u64).sum();
    outln!("sweep: {cells} cells in all, {} for this shard, within {:.0} s", sh.len_of(cells), b.sweep(Duration::ZERO).as_secs_f64())?;
    let weights: Vec<f64> = plan.kernels.iter().map(|k| k.share).collect();
    for (k, t) in plan.kernels.iter().zip(b.fuzz(b.sweep(Duration::ZERO), &weights, !plan.sanitizers.is_empty())) {
        outln!("fuzz: {} for about {:.0} s (share {})", k.manifest.name, t.as_secs_f64(), k.share)?;
    }
    for s in &plan.sanitizers {
        let tools: Vec<&str> = s.tools.iter().map(|t| t.name()).collect();
        outln!("sanitizer: {} under {}, up to {} cases", s.manifest.name, tools.join(","), s.cases)?;
    }
    Ok(())
}

/// The gate's backend: the supervisor pool, campaign loop and seed keeper the other commands
/// use.
struct GpuBackend {
    cfg: EngineConfig,
    pool: Option<Pool>,
    escalator: Option<Option<Escalator>>,
    keeper: SeedKeeper,
}

fn step_error(e: SupervisorError) -> StepError {
    match e {
        SupervisorError::NoGpu(m) => StepError::NoGpu(m),
        SupervisorError::Interrupted => StepError::Interrupted,
        e => StepError::Failed(chain(e)),
    }
}

impl GpuBackend {
    fn new(cfg: EngineConfig) -> GpuBackend {
        let keeper = SeedKeeper::new(cfg.out.join("seeds"));
        GpuBackend { cfg, pool: None, escalator: None, keeper }
    }

    fn pool(&mut self) -> Result<&mut Pool, StepError> {
        if self.pool.is_none() {
            self.pool = Some(self.cfg.pool().map_err(|e| StepError::Failed(chain(e)))?);
        }
        Ok(self.pool.as_mut().expect("just made"))
    }

    /// A one-worker supervisor whose worker runs under `tools`.
    fn escalation_supervisors(&self, tools: &[Tool]) -> Result<Vec<Supervisor>, StepError> {
        let sanitizer = Sanitizer::locate().map_err(|e| StepError::Failed(e.to_string()))?;
        self.cfg.escalation_supervisors(&sanitizer, tools).map_err(|e| StepError::Failed(chain(e)))
    }

    fn sanitizer_supervisor(&self, tools: &[Tool], journal: &str) -> Result<Supervisor, StepError> {
        let sanitizer = Sanitizer::locate().map_err(|e| StepError::Failed(e.to_string()))?;
        self.cfg.sanitizer_supervisor(sanitizer, tools, journal).map_err(|e| StepError::Failed(chain(e)))
    }

    /// Runs one campaign on `pool` and reports its findings to the gate (`found`); `log` prints
    /// new findings and escalation notes.
    fn campaign(
        pool: &mut Pool,
        spec: &CampaignSpec<'_>,
        keeper: &mut SeedKeeper,
        escalator: Option<&mut Escalator>,
        found: &mut dyn FnMut(Found),
    ) -> Result<Campaign, StepError> {
        let mut on_event = |e: CampaignEvent<'_>| match e.kind {
            EventKind::NewFinding { case, finding, seed, .. } => {
                found(Found { case: case.summary(), finding: finding.clone(), seed: Some(seed.to_path_buf()) })
            }
            // A line per bug, not per signature: further signatures of a known bug are in the
            // report's findings.
            EventKind::NewBug { index, bug } => {
                let _ = outln!("NEW   (case #{index}): {}", crate::triage::bug_line(bug));
            }
            EventKind::SmallerCase { case, finding, seed, .. } => {
                found(Found { case: case.summary(), finding: finding.clone(), seed: Some(seed.to_path_buf()) })
            }
            EventKind::Named { case, finding, kept: Kept::New(seed) | Kept::Smaller(seed), .. } => {
                found(Found { case: case.summary(), finding: finding.clone(), seed: Some(seed.clone()) })
            }
            EventKind::NotNamed { why, .. } => {
                let _ = outln!("      not re-run under the sanitizer: {why}");
            }
            EventKind::EscalationSilent { note } => {
                let _ = outln!("      ({note})");
            }
            _ => {}
        };
        let (summary, result) = campaign::run(pool, spec, keeper, escalator, &mut on_event);
        result.map_err(step_error)?;
        let t = &summary.tally;
        Ok(Campaign {
            cases: t.total(),
            passed: t.pass,
            failed: t.fail,
            errors: t.error,
            skipped: summary.skipped,
            steered: summary.steered,
            elapsed_secs: summary.elapsed.as_secs_f64(),
            ..Campaign::default()
        })
    }
}

impl Backend for GpuBackend {
    fn gpu(&mut self) -> Result<GpuSummary, StepError> {
        let pool = self.pool()?;
        let workers = pool.slots.len();
        let g = pool.slots[0].gpu().map_err(step_error)?;
        let name = if workers > 1 { format!("{} (gpu {}, {workers} workers)", g.name, g.ordinal) } else { format!("{} (gpu {})", g.name, g.ordinal) };
        Ok(GpuSummary { name, arch: g.arch.to_string(), driver: format!("{}.{}", g.driver_version / 1000, (g.driver_version % 1000) / 10) })
    }

    fn sanitizer(&mut self) -> Result<String, StepError> {
        Sanitizer::locate().map(|s| format!("{} ({})", s.version, s.path.display())).map_err(|e| StepError::Failed(e.to_string()))
    }

    fn run_case(&mut self, m: &Manifest, case: &Case, tool: Option<Tool>) -> Result<Outcome, StepError> {
        let limit = self.cfg.timeout(m);
        let verdict = match tool {
            None => {
                let opts = self.cfg.options();
                self.pool()?.slots[0].run(case, m, &opts, limit)
            }
            Some(tool) => {
                let mut sup = self.sanitizer_supervisor(&[tool], "journal-selfcheck.jsonl")?;
                sup.run(case, m, &RunOptions { determinism: false, ..self.cfg.options() }, limit)
            }
        };
        verdict.map(|v| v.outcome).map_err(step_error)
    }

    fn sweep_cell(&mut self, job: &CellSpec<'_>, found: &mut dyn FnMut(Found)) -> Result<MatrixCell, StepError> {
        let (opts, limit) = (self.cfg.options(), self.cfg.timeout(job.manifest));
        self.pool()?;
        let GpuBackend { pool, keeper, .. } = self;
        let pool = pool.as_mut().expect("made above");
        let mut keep = |case: &Case, findings: &[crate::finding::Finding]| -> Result<(), SupervisorError> {
            for f in findings {
                if let Kept::New(seed) | Kept::Smaller(seed) = keeper.keep(job.manifest, case, f)? {
                    found(Found { case: case.summary(), finding: f.clone(), seed: Some(seed) });
                }
            }
            Ok(())
        };
        let cell = run_cell(pool, job, &opts, limit, &mut keep).map_err(step_error)?;
        Ok(MatrixCell::from_cell(&cell))
    }

    fn fuzz(&mut self, job: &FuzzJob<'_>, found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError> {
        let m = job.manifest;
        if self.escalator.is_none() && !job.escalate.is_empty() {
            let esc = match self.escalation_supervisors(job.escalate) {
                Ok(s) => Some(Escalator::new(s)),
                Err(e) => {
                    let _ = outln!("new findings will not be named by compute-sanitizer: {e}");
                    None
                }
            };
            self.escalator = Some(esc);
        }
        let spec = CampaignSpec {
            stream: CaseStream::campaign(m, job.seed, job.outside_contract).sharded(job.shard),
            cases: job.cases.unwrap_or(1 << 40),
            deadline: Some(job.deadline),
            stop_after: None,
            options: self.cfg.options(),
            timeout: self.cfg.timeout(m),
            steer: true,
        };
        self.pool()?;
        let GpuBackend { pool, keeper, escalator, .. } = self;
        let escalator = if job.escalate.is_empty() { None } else { escalator.as_mut().and_then(|e| e.as_mut()) };
        GpuBackend::campaign(pool.as_mut().expect("made above"), &spec, keeper, escalator, found)
    }

    fn sanitize(&mut self, job: &SanitizeJob<'_>, found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError> {
        let m = job.manifest;
        // Its own pool of workers under the tools, journalled apart from the native workers.
        let cfg = EngineConfig { sanitize: Some(job.tools.to_vec()), out: self.cfg.out.join("sanitize"), ..self.cfg.clone() };
        let mut spool = cfg.pool().map_err(|e| StepError::Failed(chain(e)))?;
        let spec = CampaignSpec {
            stream: CaseStream::generated(m, job.seed).sharded(job.shard),
            cases: job.cases,
            deadline: Some(job.deadline),
            stop_after: None,
            options: self.cfg.options(),
            timeout: self.cfg.timeout(m),
            steer: true,
        };
        GpuBackend::campaign(&mut spool, &spec, &mut self.keeper, None, found)
    }
}
