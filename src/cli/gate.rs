//! `cudafuzz gate`: loads the configuration, runs [`crate::gate::run`] with a backend made of the
//! same pool, supervisors and helpers as `fuzz`, `repro` and `sweep`, and writes the reports.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;

use super::sweep::{run_cell, CellSpec};
use super::{bind_case, campaign_case, chain, fail, Escalator, generated_case, keep_smallest, options, pool, slot_supervisor, stop_flag, timeout, EngineArgs, Kept};
use crate::case::Case;
use crate::exit;
use crate::finding::{Finding, Signature};
use crate::gate::{self, Backend, Budget, CellJob, Found, FuzzJob, GateConfig, SanitizeJob, StepError, DEFAULT_BUDGET};
use crate::manifest::Manifest;
use crate::plan::Plan;
use crate::report::export::{Campaign, GpuSummary, MatrixCell};
use crate::sanitizer::{Sanitizer, Tool};
use crate::shard::Shard;
use crate::supervisor::{Pool, SanitizerPass, Slot, Supervisor, SupervisorError};
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
    if a.engine.sanitize.is_some() {
        return Err(fail(exit::USAGE, "--sanitize does not apply to the gate: list sanitizer passes under [[sanitizers]] in the configuration"));
    }
    let sh = shard.unwrap_or(Shard::ALL);
    println!(
        "cudafuzz gate: {} · budget {} · shard {}{}",
        a.config.display(),
        humantime::format_duration(budget),
        sh,
        if shard.is_none() { " (whole gate)" } else { "" }
    );
    if a.check {
        print_plan(&plan, budget, sh);
        return Ok(exit::OK);
    }
    let mut backend = GpuBackend::new(a.engine.clone(), stop_flag());
    let report = gate::run(&plan, budget, shard, &mut backend, &mut |line| println!("{line}"));
    drop(backend);
    let written = report.write_all(&a.engine.out).map_err(|e| fail(exit::SETUP, chain(e)))?;
    println!("{}", report.headline());
    for p in &written {
        println!("  {}", p.display());
    }
    for (_, f) in report.findings().filter(|(_, f)| f.new) {
        println!("NEW {}: {}", f.signature, f.finding);
        if let Some(seed) = &f.seed {
            print!("{}", crate::report::replay_lines(std::path::Path::new(seed)));
        }
    }
    if report.no_gpu() {
        eprintln!("cudafuzz: NO GPU on this machine: the gate checked nothing and fails (exit 3); the report with the failed environment check is in {}", a.engine.out.display());
    }
    Ok(report.exit_code())
}

/// `--check`: what the gate would do.
fn print_plan(plan: &gate::GatePlan, total: Duration, sh: Shard) {
    let b = Budget::new(total, &plan.settings);
    let sc = &plan.self_check;
    println!("self check: {} ({}) under {} must give {}", sc.manifest.name, sc.case.summary(), sc.tool, sc.expect);
    println!("seeds: {} in all, {} for this shard", plan.seeds.len(), sh.len_of(plan.seeds.len() as u64));
    for s in sh.split(plan.seeds.iter()) {
        println!("  {}: {} must {}", s.path.display(), s.manifest.name, s.expected);
    }
    let cells: u64 = plan.sweeps.iter().map(|s| (s.grid.len() * s.classes.len()) as u64).sum();
    println!("sweep: {cells} cells in all, {} for this shard, within {:.0} s", sh.len_of(cells), b.sweep(Duration::ZERO).as_secs_f64());
    let weights: Vec<f64> = plan.kernels.iter().map(|k| k.share).collect();
    for (k, t) in plan.kernels.iter().zip(b.fuzz(b.sweep(Duration::ZERO), &weights, !plan.sanitizers.is_empty())) {
        println!("fuzz: {} for about {:.0} s (share {})", k.manifest.name, t.as_secs_f64(), k.share);
    }
    for s in &plan.sanitizers {
        let tools: Vec<&str> = s.tools.iter().map(|t| t.name()).collect();
        println!("sanitizer: {} under {}, up to {} cases", s.manifest.name, tools.join(","), s.cases);
    }
}

/// The gate's backend: the supervisor pool and helpers the other commands use.
struct GpuBackend {
    engine: EngineArgs,
    stop: Arc<AtomicBool>,
    pool: Option<Pool>,
    escalator: Option<Option<Escalator>>,
    seen: BTreeMap<Signature, (PathBuf, u64)>,
}

fn step_error(e: SupervisorError) -> StepError {
    match e {
        SupervisorError::NoGpu(m) => StepError::NoGpu(m),
        SupervisorError::Interrupted => StepError::Interrupted,
        e => StepError::Failed(chain(e)),
    }
}

impl GpuBackend {
    fn new(engine: EngineArgs, stop: Arc<AtomicBool>) -> GpuBackend {
        GpuBackend { engine, stop, pool: None, escalator: None, seen: BTreeMap::new() }
    }

    fn pool(&mut self) -> Result<&mut Pool, StepError> {
        if self.pool.is_none() {
            self.pool = Some(pool(&self.engine, self.stop.clone()).map_err(|e| StepError::Failed(chain(e)))?);
        }
        Ok(self.pool.as_mut().expect("just made"))
    }

    /// A one-worker supervisor whose worker runs under `tools`.
    fn sanitizer_supervisor(&self, tools: &[Tool], journal: &str) -> Result<Supervisor, StepError> {
        let sanitizer = Sanitizer::locate().map_err(|e| StepError::Failed(e.to_string()))?;
        let dir = self.engine.out.join("sanitizer");
        std::fs::create_dir_all(&dir).map_err(|e| StepError::Failed(format!("cannot create {}: {e}", dir.display())))?;
        let mut sup = slot_supervisor(&self.engine, self.stop.clone(), self.engine.gpu, self.engine.out.join(journal)).map_err(|e| StepError::Failed(chain(e)))?;
        sup.set_sanitizer(Some(SanitizerPass { sanitizer, tools: tools.to_vec(), dir, batch: 1 }));
        Ok(sup)
    }

    /// A case of the campaign stream (the fuzz step's, with its scheduled cases past 2³¹
    /// elements, or the plain generated one for a sanitizer pass), bound to `m`; `None` outside
    /// the contract.
    fn make_case(ctx: &crate::case::DecodeContext, m: &Manifest, seed: u64, global: u64, outside: bool, campaign: bool) -> Option<Case> {
        let case = if campaign { campaign_case(ctx, seed, global) } else { generated_case(ctx, seed, global) };
        let case = bind_case(case, m);
        (outside || m.contract.check(&case, &Plan::new(&case)).is_inside()).then_some(case)
    }
}

/// Adds a verdict to campaign counts.
fn tally(c: &mut Campaign, outcome: &Outcome) {
    c.cases += 1;
    match outcome {
        Outcome::Pass => c.passed += 1,
        Outcome::Fail { .. } => c.failed += 1,
        _ => c.errors += 1,
    }
}

/// Saves the seed of each finding whose signature is new (or whose case is smaller), and
/// reports those to the gate.
fn keep(seen: &mut BTreeMap<Signature, (PathBuf, u64)>, dir: &std::path::Path, case: &Case, findings: &[Finding], found: &mut dyn FnMut(Found)) -> Result<Vec<Finding>, SupervisorError> {
    let mut new = Vec::new();
    for f in findings {
        match keep_smallest(seen, dir, case, f)? {
            Kept::New(path) => {
                found(Found { case: case.summary(), finding: f.clone(), seed: Some(path) });
                new.push(f.clone());
            }
            Kept::Smaller(path) => found(Found { case: case.summary(), finding: f.clone(), seed: Some(path) }),
            Kept::Known => {}
        }
    }
    Ok(new)
}

impl Backend for GpuBackend {
    fn gpu(&mut self) -> Result<GpuSummary, String> {
        let pool = self.pool().map_err(|e| e.to_string())?;
        let workers = pool.slots.len();
        let g = pool.slots[0].gpu().map_err(|e| e.to_string())?;
        let name = if workers > 1 { format!("{} (gpu {}, {workers} workers)", g.name, g.ordinal) } else { format!("{} (gpu {})", g.name, g.ordinal) };
        Ok(GpuSummary { name, arch: g.arch.to_string(), driver: format!("{}.{}", g.driver_version / 1000, (g.driver_version % 1000) / 10) })
    }

    fn sanitizer(&mut self) -> Result<String, String> {
        Sanitizer::locate().map(|s| format!("{} ({})", s.version, s.path.display())).map_err(|e| e.to_string())
    }

    fn run_case(&mut self, m: &Manifest, case: &Case, tool: Option<Tool>) -> Result<Outcome, StepError> {
        let limit = timeout(&self.engine, m);
        let verdict = match tool {
            None => {
                let opts = options(&self.engine);
                self.pool()?.slots[0].run(case, m, &opts, limit)
            }
            Some(tool) => {
                let mut sup = self.sanitizer_supervisor(&[tool], "journal-selfcheck.jsonl")?;
                sup.run(case, m, &RunOptions { determinism: false, ..options(&self.engine) }, limit)
            }
        };
        verdict.map(|v| v.outcome).map_err(step_error)
    }

    fn sweep_cell(&mut self, job: &CellJob<'_>, found: &mut dyn FnMut(Found)) -> Result<MatrixCell, StepError> {
        let (opts, limit, dir) = (options(&self.engine), timeout(&self.engine, job.manifest), self.engine.out.join("seeds"));
        self.pool()?;
        let GpuBackend { pool, seen, .. } = self;
        let pool = pool.as_mut().expect("made above");
        let spec = CellSpec { m: job.manifest, params: job.params, class: job.class, repeat: job.repeat, seed: job.seed, deadline: Some(job.deadline) };
        let cell = run_cell(pool, &spec, &opts, limit, &mut |case, findings| keep(seen, &dir, case, findings, found).map(|_| ())).map_err(step_error)?;
        Ok(MatrixCell::from_cell(&cell))
    }

    fn fuzz(&mut self, job: &FuzzJob<'_>, found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError> {
        let m = job.manifest;
        let (opts, limit, dir) = (options(&self.engine), timeout(&self.engine, m), self.engine.out.join("seeds"));
        if self.escalator.is_none() && !job.escalate.is_empty() {
            let esc = match self.sanitizer_supervisor(job.escalate, "journal-escalate.jsonl") {
                Ok(s) => Some(Escalator::new(s)),
                Err(e) => {
                    println!("new findings will not be named by compute-sanitizer: {e}");
                    None
                }
            };
            self.escalator = Some(esc);
        }
        self.pool()?;
        let GpuBackend { pool, seen, escalator, .. } = self;
        let pool = pool.as_mut().expect("made above");
        let mut escalator = if job.escalate.is_empty() { None } else { escalator.as_mut().and_then(|e| e.as_mut()) };
        let ctx = m.decode_context();
        let make = |i: u64| GpuBackend::make_case(&ctx, m, job.seed, job.shard.global(i), job.outside_contract, true);
        let mut counts = Campaign::default();
        let mut on_result = |i: u64, slot: Slot| -> Result<ControlFlow<()>, SupervisorError> {
            let (case, verdict) = match slot {
                Slot::Skipped => {
                    counts.skipped += 1;
                    return Ok(ControlFlow::Continue(()));
                }
                Slot::Ran(case, verdict) => (case, verdict),
            };
            tally(&mut counts, &verdict.outcome);
            if let Outcome::Fail { findings } = &verdict.outcome {
                for f in keep(seen, &dir, &case, findings, found)? {
                    println!("NEW   {}: {f}", case.summary());
                    if let (Some(esc), false) = (escalator.as_deref_mut(), f.oracle.is_sanitizer()) {
                        match esc.name(&f, &case, m, limit, job.shard.global(i)) {
                            Ok(named) => {
                                keep(seen, &dir, &case, &named, found)?;
                            }
                            Err(e) => println!("      not re-run under the sanitizer: {e}"),
                        }
                    }
                }
            }
            Ok(ControlFlow::Continue(()))
        };
        pool.run_indexed(job.cases.unwrap_or(1 << 40), Some(job.deadline), m, &opts, limit, &make, &mut on_result).map_err(step_error)?;
        Ok(counts)
    }

    fn sanitize(&mut self, job: &SanitizeJob<'_>, found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError> {
        let m = job.manifest;
        let tools: Vec<&str> = job.tools.iter().map(|t| t.name()).collect();
        // Its own pool of workers under the tools, journalled apart from the native workers.
        let engine = EngineArgs { sanitize: Some(tools.join(",")), out: self.engine.out.join("sanitize"), ..self.engine.clone() };
        let mut spool = pool(&engine, self.stop.clone()).map_err(|e| StepError::Failed(chain(e)))?;
        let (opts, limit, dir) = (options(&self.engine), timeout(&self.engine, m), self.engine.out.join("seeds"));
        let ctx = m.decode_context();
        let make = |i: u64| GpuBackend::make_case(&ctx, m, job.seed, job.shard.global(i), false, false);
        let seen = &mut self.seen;
        let mut counts = Campaign::default();
        let started = Instant::now();
        let mut on_result = |_i: u64, slot: Slot| -> Result<ControlFlow<()>, SupervisorError> {
            match slot {
                Slot::Skipped => counts.skipped += 1,
                Slot::Ran(case, verdict) => {
                    tally(&mut counts, &verdict.outcome);
                    if let Outcome::Fail { findings } = &verdict.outcome {
                        keep(seen, &dir, &case, findings, found)?;
                    }
                }
            }
            Ok(ControlFlow::Continue(()))
        };
        spool.run_indexed(job.cases, Some(job.deadline), m, &opts, limit, &make, &mut on_result).map_err(step_error)?;
        counts.elapsed_secs = started.elapsed().as_secs_f64();
        Ok(counts)
    }
}
