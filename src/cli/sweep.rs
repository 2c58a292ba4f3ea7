//! `cudafuzz sweep`: runs the failure matrix of [`crate::tools::sweep`] on the GPU and prints it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use super::{fail, manifests_or_shipped, no_gpu, setup, workers_line, EngineArgs};
use crate::core::exit;
use crate::tools::sweep::{param_grid, render, run_cell, CellSpec, InputClass, Row};

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
    #[arg(long, default_value_t = 20, value_parser = super::positive::<u64>)]
    repeat: u64,
    /// Input classes (comma-separated): aligned, misaligned (one tensor at +2/+4/+8),
    /// <tensor>+<bytes> (e.g. q+8), <tensor>-pitch+1, tail, strided, or a flag's name (causal).
    /// Default: aligned, misaligned, the first input at +2, +4, +8 and pitch+1, tail, strided,
    /// and each flag of the first kernel.
    #[arg(long, value_delimiter = ',')]
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

pub(super) fn sweep(s: SweepArgs) -> Result<i32> {
    let grid = param_grid(&s.params).map_err(|e| fail(exit::USAGE, e.to_string()))?;
    let manifests = manifests_or_shipped(&s.kernel, false)?;
    if let Some(json) = &s.json {
        super::refuse_clobber(json, manifests.iter().flat_map(super::manifest_inputs))?;
        super::refuse_directory("--json", json)?;
    }
    let classes: Vec<InputClass> = if s.classes.is_empty() {
        manifests.first().map(InputClass::defaults).unwrap_or_default()
    } else {
        s.classes.iter().map(|n| InputClass::from_name(n).ok_or_else(|| fail(exit::USAGE, format!("--classes: unknown class `{n}`")))).collect::<Result<_>>()?
    };
    for m in &manifests {
        for c in &classes {
            c.check(m).map_err(|e| fail(exit::USAGE, format!("--classes: {e}")))?;
        }
        for params in &grid {
            m.check_param_values(params).map_err(|(field, problem)| fail(exit::USAGE, format!("--params: {field}: {problem}")))?;
        }
    }
    let cfg = s.engine.config()?;
    let mut pool = cfg.pool().map_err(setup)?;
    let gpu = pool.slots[0].gpu().map_err(no_gpu)?;
    outln!("{}; {} repetitions per cell", workers_line(&gpu, &mut pool), s.repeat)?;
    let opts = cfg.options();
    let mut rows = Vec::new();
    for m in &manifests {
        for params in &grid {
            let config = crate::tools::gate::config_label(&m.name, params);
            let mut cells = BTreeMap::new();
            for class in &classes {
                let job = CellSpec { manifest: m, params, class: class.clone(), repeat: s.repeat, seed: s.seed, deadline: None };
                let cell = run_cell(&mut pool, &job, &opts, cfg.timeout(m), &mut |_, _| Ok(())).map_err(no_gpu)?;
                errln!("{config} {class}: {} passed, {} failed, {} errors, {} skipped", cell.pass, cell.fail, cell.error, cell.skipped);
                cells.insert(class.to_string(), cell);
            }
            rows.push(Row { config, cells });
        }
    }
    out!("{}", render(&rows, &classes))?;
    if let Some(path) = &s.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let failed = rows.iter().flat_map(|r| r.cells.values()).any(|c| c.fail + c.error > 0);
    Ok(if failed { exit::FINDINGS } else { exit::OK })
}
