//! `cudafuzz gate`: loads the configuration, runs [`crate::tools::gate::run`] with a backend made of the
//! same pool, supervisors and helpers as `fuzz`, `repro` and `sweep`, and writes the reports.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use super::{chain, fail, file_seeds, refuse_clobber, EngineArgs};
use crate::core::exit;
use crate::core::shard::Shard;
use crate::tools::gate::{self, GateConfig, GpuBackend, DEFAULT_BUDGET};

/// Arguments of `cudafuzz gate`.
#[derive(Debug, Args)]
pub(super) struct GateArgs {
    /// The gate configuration (TOML; every key is described in ci/gate.toml).
    #[arg(long, default_value = "ci/gate.toml")]
    config: PathBuf,
    /// Time budget, e.g. 20m, 90s, 1h 30m (default: the configuration's `[gate] budget`, else 20m).
    #[arg(long, value_parser = |s: &str| gate::parse_budget(s).map_err(|e| e.to_string()))]
    budget: Option<std::time::Duration>,
    /// Run part I of N, counted from 1 (`--shard 2/4` is the second of four): seeds and sweep
    /// cells are dealt round-robin, every shard fuzzes its own slice of the case stream. Default:
    /// $CUDAFUZZ_SHARD (I/N), else a Slurm job array's task, else the whole gate.
    #[arg(long, value_name = "I/N", value_parser = |s: &str| Shard::parse(s, "--shard").map_err(|e| e.to_string()))]
    shard: Option<Shard>,
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
    let shard = match a.shard {
        Some(s) => Some(s),
        None => Shard::from_env().map_err(|e| fail(exit::USAGE, e.to_string()))?,
    };
    let budget = match a.budget {
        Some(b) => b,
        None => cfg.budget(&a.config).map_err(usage)?.unwrap_or(DEFAULT_BUDGET),
    };
    plan.check_budget(budget).map_err(usage)?;
    if a.engine.sanitize.is_some() {
        return Err(fail(exit::USAGE, "--sanitize does not apply to the gate: list sanitizer passes under [[sanitizers]] in the configuration"));
    }
    let cfg = a.engine.config()?;
    let inputs: Vec<&std::path::Path> = std::iter::once(a.config.as_path()).chain(plan.seeds.iter().map(|s| s.path.as_path())).collect();
    for name in crate::tools::report::export::REPORT_FILES {
        refuse_clobber(&cfg.out.join(name), inputs.iter().copied())?;
    }
    super::refuse_trace_onto(inputs.iter().copied())?;
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
    let mut backend = GpuBackend::new(cfg.clone(), |line: &str| {
        let _ = outln!("{line}");
    });
    let mut report = gate::run(&plan, budget, shard, &mut backend, &mut |line| {
        // A closed stdout raised the stop flag: the gate stops at its next step.
        let _ = outln!("{line}");
    });
    // One seed per bug in seeds/, the others under seeds/<id>/examples/, and the bug index.
    let (moves, _) = file_seeds(backend.keeper_mut(), &cfg.out, false);
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
            out!("{}", crate::tools::report::replay_lines(std::path::Path::new(seed)))?;
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
