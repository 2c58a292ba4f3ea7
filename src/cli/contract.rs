//! `cudafuzz contract`: infers the preconditions a kernel really needs ([`crate::tools::contract`]) by
//! running probes, per tensor and per dim, outside and at the edges of its declared contract.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use super::{chain, fail, manifest_inputs, no_gpu, refuse_clobber, resolve_kernel, setup, workers_line, EngineArgs};
use crate::core::case::Case;
use crate::core::corpus::{self, Seed};
use crate::core::exit;
use crate::core::manifest::Manifest;
use crate::core::verdict::{Outcome, RunOptions};
use crate::run::supervisor::{Pool, Slot, SupervisorError};
use crate::tools::contract::{plan_probes, render_plan, render_preconditions, render_table, summarise, Inference, ProbePlan, DEFAULT_CASES_PER_PROBE};

/// Arguments of `cudafuzz contract`.
#[derive(Debug, Args)]
pub(super) struct ContractArgs {
    /// Kernel (name or manifest path) whose real preconditions to infer.
    #[arg(long)]
    kernel: String,
    /// Replicas per probe (other data seeds; every third with its outer dims doubled), so a
    /// flaky outcome shows.
    #[arg(long, default_value_t = DEFAULT_CASES_PER_PROBE, value_parser = super::positive::<usize>)]
    cases_per_probe: usize,
    /// Also write the probes' results and the preconditions as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

pub(super) fn contract_command(a: ContractArgs) -> Result<i32> {
    let m = resolve_kernel(&a.kernel)?;
    if let Some(json) = &a.json {
        refuse_clobber(json, manifest_inputs(&m))?;
        super::refuse_directory("--json", json)?;
    }
    let plan = plan_probes(&m, a.cases_per_probe).map_err(|e| fail(exit::USAGE, chain(e)))?;
    let cfg = a.engine.config()?;
    let mut pool = cfg.pool().map_err(setup)?;
    let gpu = match pool.slots[0].gpu() {
        Ok(g) => g,
        Err(SupervisorError::NoGpu(why)) => return without_gpu(&plan, &why),
        Err(e) => return Err(no_gpu(e)),
    };
    outln!("{}", workers_line(&gpu, &mut pool))?;
    out!("{}", render_plan(&plan))?;
    let opts = cfg.options();
    let limit = cfg.timeout(&m);
    let base = run_all(&mut pool, &m, &opts, limit, std::slice::from_ref(&plan.base_cases))?;
    let outcomes = match base[0].iter().all(|o| matches!(o, Outcome::Pass)) {
        true => run_all(&mut pool, &m, &opts, limit, &plan.probes.iter().map(|p| p.cases.clone()).collect::<Vec<_>>())?,
        false => Vec::new(),
    };
    let mut inference = summarise(&m, &plan, &base[0], &outcomes);
    save_examples(&mut inference, &m, &cfg.out.join("contract"))?;
    out!("{}", render_table(&inference))?;
    out!("{}", render_preconditions(&inference))?;
    if let Some(path) = &a.json {
        write_json(path, &plan, &inference)?;
    }
    Ok(if inference.base_failure.is_some() || inference.undeclared() > 0 { exit::FINDINGS } else { exit::OK })
}

/// No GPU: say so, show what would run, exit 3.
fn without_gpu(plan: &ProbePlan, why: &str) -> Result<i32> {
    errln!("cudafuzz: NO GPU: {why}.");
    errln!("cudafuzz: no probe was run, so no precondition was inferred; this is the plan a GPU host would run:");
    out!("{}", render_plan(plan))?;
    Ok(exit::NO_GPU)
}

/// Runs groups of cases (one group per probe) through the pool, in order; the outcomes come
/// back grouped the same way.
fn run_all(pool: &mut Pool, m: &Manifest, opts: &RunOptions, limit: std::time::Duration, groups: &[Vec<Case>]) -> Result<Vec<Vec<Outcome>>> {
    let index: Vec<(usize, &Case)> = groups.iter().enumerate().flat_map(|(g, cases)| cases.iter().map(move |c| (g, c))).collect();
    let mut out: Vec<Vec<Outcome>> = groups.iter().map(|g| Vec::with_capacity(g.len())).collect();
    let make = |i: u64, _: &std::sync::atomic::AtomicBool| Some(m.bind(index[i as usize].1.clone()));
    let mut on_result = |i: u64, slot: Slot| -> Result<ControlFlow<()>, SupervisorError> {
        let outcome = match slot {
            Slot::Ran(_, verdict) => verdict.outcome,
            Slot::Skipped => Outcome::Error { message: "skipped".into() },
        };
        out[index[i as usize].0].push(outcome);
        Ok(ControlFlow::Continue(()))
    };
    pool.run_indexed(index.len() as u64, None, m, opts, limit, &make, &mut on_result).map_err(no_gpu)?;
    Ok(out)
}

/// Saves each precondition's minimal failing case as a seed under `dir` (`corpus::save` names
/// it by its content and never overwrites another seed).
fn save_examples(inference: &mut Inference, m: &Manifest, dir: &Path) -> Result<()> {
    for p in &mut inference.preconditions {
        let Some(example) = &p.example else { continue };
        let mut seed = match &example.finding {
            Some(f) => Seed::with_finding(example.case.clone(), f.clone()),
            None => Seed::new(example.case.clone()),
        }
        .naming_kernel(m, dir);
        seed.note = format!("cudafuzz contract: {} ({})", p.sentence, p.evidence);
        let saved = corpus::save(dir, &seed).map_err(|e| fail(exit::SETUP, chain(e)))?;
        p.seed = Some(saved.path);
    }
    Ok(())
}

fn write_json(path: &Path, plan: &ProbePlan, inference: &Inference) -> Result<()> {
    let doc = serde_json::json!({ "plan": { "kernel": plan.kernel, "base": plan.base, "probes": plan.probes.len(), "cases": plan.total_cases() }, "inference": inference });
    std::fs::write(path, serde_json::to_string_pretty(&doc)?).with_context(|| format!("cannot write {}", path.display()))
}
