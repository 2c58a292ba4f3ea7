//! `cudafuzz sweep`: runs the failure matrix of [`crate::sweep`] on the GPU and prints it.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use super::{bind_case, fail, generated_case, manifests_or_shipped, no_gpu, options, pool, stop_flag, timeout, EngineArgs};
use crate::exit;
use crate::plan::Plan;
use crate::supervisor::{Slot, SupervisorError};
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
    println!("gpu {}: {} ({}), driver {}; {} worker(s); {} repetitions per cell", gpu.ordinal, gpu.name, gpu.arch, gpu.driver_version, pool.slots.len(), s.repeat);
    let opts = options(&s.engine);
    let mut rows = Vec::new();
    for m in &manifests {
        let ctx = m.decode_context();
        for params in &grid {
            let config = if params.is_empty() {
                m.name.clone()
            } else {
                format!("{}[{}]", m.name, params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
            };
            let mut cells = BTreeMap::new();
            for &class in &classes {
                let base = |rep: u64| {
                    (0..DRAWS_PER_REPETITION).find_map(|t| {
                        let mut case = generated_case(&ctx, s.seed, rep * DRAWS_PER_REPETITION + t);
                        case.params.extend(params.clone());
                        let case = class.apply(&bind_case(case, m));
                        m.contract.check(&case, &Plan::new(&case)).is_inside().then_some(case)
                    })
                };
                let mut cell = Cell::default();
                let mut tally = |_i: u64, slot: Slot| -> Result<ControlFlow<()>, SupervisorError> {
                    match slot {
                        Slot::Skipped => cell.skipped += 1,
                        Slot::Ran(_, v) => match &v.outcome {
                            Outcome::Pass => cell.pass += 1,
                            Outcome::Fail { findings } => {
                                cell.fail += 1;
                                let sigs: std::collections::BTreeSet<String> = findings.iter().map(|f| f.signature().0).collect();
                                for sig in sigs {
                                    *cell.signatures.entry(sig).or_default() += 1;
                                }
                            }
                            Outcome::Error { message } => {
                                cell.error += 1;
                                *cell.signatures.entry(format!("error: {message}")).or_default() += 1;
                            }
                        },
                    }
                    Ok(ControlFlow::Continue(()))
                };
                pool.run_indexed(s.repeat, None, m, &opts, timeout(&s.engine, m), &base, &mut tally).map_err(no_gpu)?;
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
