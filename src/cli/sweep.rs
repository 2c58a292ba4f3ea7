//! `cudafuzz sweep`: runs the failure matrix of [`crate::sweep`] on the GPU and prints it.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;

use crate::case::reaches_past_int32;
use super::{bind_case, fail, generated_case, manifests_or_shipped, no_gpu, options, pool, stop_flag, timeout, workers_line, EngineArgs};
use crate::case::Case;
use crate::exit;
use crate::finding::Finding;
use crate::manifest::Manifest;
use crate::plan::Plan;
use crate::supervisor::{Pool, Slot, SupervisorError};
use crate::worker::RunOptions;
use crate::sweep::{param_grid, render, Cell, InputClass, Row};
use crate::worker::Outcome;

/// Arguments of `cudafuzz sweep`.
#[derive(Debug, Args)]
pub(super) struct SweepArgs {
    /// Kernels (names or manifest paths), one table row per kernel × parameter combination.
    #[arg(long, required = true)]
    kernel: Vec<String>,
    /// Parameter values to sweep, `NAME=v1,v2,...` (repeatable); default: the manifest's first.
    #[arg(long)]
    params: Vec<String>,
    /// Repetitions per cell, each a fresh case inside the kernel's contract.
    #[arg(long, default_value_t = 20)]
    repeat: u64,
    /// Input classes (comma-separated): aligned, misaligned (one tensor at +2/+4/+8), q+2, q+4,
    /// q+8, q-pitch+1, tail, strided, causal.
    #[arg(long, value_delimiter = ',', default_value = "aligned,misaligned,q+2,q+4,q+8,q-pitch+1,tail,strided,causal")]
    classes: Vec<String>,
    /// Generator seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Also write the matrix as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

/// Tries per repetition to draw a generated case that lies inside the contract.
const DRAWS_PER_REPETITION: u64 = 1000;

pub(super) fn sweep(s: SweepArgs) -> Result<i32> {
    let classes: Vec<InputClass> = s
        .classes
        .iter()
        .map(|n| InputClass::from_name(n).ok_or_else(|| fail(exit::USAGE, format!("--classes: unknown class `{n}`"))))
        .collect::<Result<_>>()?;
    let grid = param_grid(&s.params).map_err(|e| fail(exit::USAGE, e))?;
    let manifests = manifests_or_shipped(&s.kernel, false)?;
    let mut pool = pool(&s.engine, stop_flag())?;
    let gpu = pool.slots[0].gpu().map_err(no_gpu)?;
    println!("{}; {} repetitions per cell", workers_line(&gpu, &mut pool), s.repeat);
    let opts = options(&s.engine);
    let mut rows = Vec::new();
    for m in &manifests {
        for params in &grid {
            let config = crate::gate::config_label(&m.name, params);
            let mut cells = BTreeMap::new();
            for &class in &classes {
                let job = CellSpec { m, params, class, repeat: s.repeat, seed: s.seed, deadline: None };
                let cell = run_cell(&mut pool, &job, &opts, timeout(&s.engine, m), &mut |_, _| Ok(())).map_err(no_gpu)?;
                eprintln!("{config} {class}: {} passed, {} failed, {} errors, {} skipped", cell.pass, cell.fail, cell.error, cell.skipped);
                cells.insert(class.to_string(), cell);
            }
            rows.push(Row { config, cells });
        }
    }
    print!("{}", render(&rows, &classes));
    if let Some(path) = &s.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let failed = rows.iter().flat_map(|r| r.cells.values()).any(|c| c.fail + c.error > 0);
    Ok(if failed { exit::FINDINGS } else { exit::OK })
}

/// One cell of the matrix to run (see [`run_cell`]).
pub(super) struct CellSpec<'a> {
    /// The kernel.
    pub m: &'a Manifest,
    /// The row's parameters (added to each generated case's).
    pub params: &'a BTreeMap<String, i64>,
    /// The column.
    pub class: InputClass,
    /// Repetitions.
    pub repeat: u64,
    /// Generator seed.
    pub seed: u64,
    /// Stop handing out repetitions at this time (`cudafuzz gate`'s budget).
    pub deadline: Option<Instant>,
}

/// What [`run_cell`] calls with each failing repetition's case and findings.
pub(super) type OnFail<'a> = dyn FnMut(&Case, &[Finding]) -> Result<(), SupervisorError> + 'a;

/// Runs one cell: `repeat` repetitions, each a fresh generated case inside the contract reshaped
/// to the class; `on_fail` sees each failing repetition's case and findings.
pub(super) fn run_cell(
    pool: &mut Pool,
    c: &CellSpec<'_>,
    opts: &RunOptions,
    timeout: Duration,
    on_fail: &mut OnFail<'_>,
) -> Result<Cell, SupervisorError> {
    let (m, class) = (c.m, c.class);
    let ctx = m.decode_context();
    let base = |rep: u64| {
        (0..DRAWS_PER_REPETITION).find_map(|t| {
            let mut case = generated_case(&ctx, c.seed, rep * DRAWS_PER_REPETITION + t);
            case.params.extend(c.params.clone());
            let case = class.apply(&bind_case(case, m));
            // A case past 2³¹ elements (the decoder's rare draw) would take 4–8 GiB of GPU memory
            // per repetition and test nothing the input class is about.
            (m.contract.check(&case, &Plan::new(&case)).is_inside() && !reaches_past_int32(&case)).then_some(case)
        })
    };
    let mut cell = Cell::default();
    let mut tally = |_i: u64, slot: Slot| -> Result<ControlFlow<()>, SupervisorError> {
        match slot {
            Slot::Skipped => cell.skipped += 1,
            Slot::Ran(case, v) => match &v.outcome {
                Outcome::Pass => cell.pass += 1,
                Outcome::Fail { findings } => {
                    cell.fail += 1;
                    let sigs: std::collections::BTreeSet<String> = findings.iter().map(|f| f.signature().0).collect();
                    for sig in sigs {
                        *cell.signatures.entry(sig).or_default() += 1;
                    }
                    on_fail(&case, findings)?;
                }
                Outcome::Error { message } => {
                    cell.error += 1;
                    *cell.signatures.entry(format!("error: {message}")).or_default() += 1;
                }
            },
        }
        Ok(ControlFlow::Continue(()))
    };
    pool.run_indexed(c.repeat, c.deadline, m, opts, timeout, &base, &mut tally)?;
    Ok(cell)
}
