//! `cudafuzz minimize SEED`: the smallest case that still fails with the seed's signature.

use std::cell::RefCell;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::{fail, load_seed, no_gpu, seed_kernel, setup, EngineArgs};
use crate::core::corpus::{self, Seed};
use crate::core::exit;
use crate::core::finding::{Finding, Signature};
use crate::core::verdict::Outcome;
use crate::run::supervisor::SupervisorError;
use crate::tools::minimize::{minimize, size};
use crate::tools::report;

/// Arguments of `cudafuzz minimize`.
#[derive(Debug, Args)]
pub(super) struct MinimizeArgs {
    /// The seed to shrink (its saved signature is the target; a seed without one is run first).
    seed: PathBuf,
    /// Kernel, when the seed does not name one; default: $CUDAFUZZ_KERNEL.
    #[arg(long)]
    kernel: Option<String>,
    /// The file is raw fuzzer bytes (decoded for --kernel), whatever its name; without this,
    /// only files named as libFuzzer artifacts (crash-*, timeout-*, oom-*, leak-*, slow-unit-*)
    /// are read as raw bytes and anything else must be a JSON seed or case.
    #[arg(long)]
    raw: bool,
    /// At most this many candidate runs.
    #[arg(long, default_value_t = 300, value_parser = super::positive::<usize>)]
    max_runs: usize,
    #[command(flatten)]
    engine: EngineArgs,
}

pub(super) fn minimize_command(a: MinimizeArgs) -> Result<i32> {
    let forced = super::forced_kernel(a.kernel.as_deref())?;
    let seed = load_seed(&a.seed, forced.as_ref(), a.raw)?;
    let manifest = seed_kernel(forced.as_ref(), &seed, &a.seed)?;
    let cfg = a.engine.config()?;
    let (start, _) = super::checked_case(&a.seed, &seed, &manifest)?;
    let mut sup = cfg.supervisor().map_err(setup)?;
    let opts = cfg.options();
    let limit = cfg.timeout(&manifest);
    // Set when the GPU run itself fails (no GPU, Ctrl-C): every later candidate is skipped.
    let interrupted: RefCell<Option<SupervisorError>> = RefCell::new(None);
    let mut last: Option<Finding> = None;
    let mut run = |case: &crate::core::case::Case, target: Option<&Signature>| -> Option<Finding> {
        if interrupted.borrow().is_some() {
            return None;
        }
        match sup.run(case, &manifest, &opts, limit) {
            Ok(v) => match v.outcome {
                Outcome::Fail { findings } => findings.into_iter().find(|f| target.is_none_or(|t| &f.signature() == t)),
                _ => None,
            },
            Err(e) => {
                *interrupted.borrow_mut() = Some(e);
                None
            }
        }
    };
    let target = match &seed.signature {
        Some(s) => s.clone(),
        None => match run(&start, None) {
            Some(f) => f.signature(),
            None => {
                if let Some(e) = interrupted.take() {
                    return Err(no_gpu(e));
                }
                return Err(fail(exit::USAGE, format!("{}: the case does not fail: nothing to minimise", a.seed.display())));
            }
        },
    };
    outln!("target signature: {target}")?;
    let inside = crate::core::plan::admits(&manifest, &start);
    let allowed = |c: &crate::core::case::Case| !inside || crate::core::plan::admits(&manifest, c);
    let m = minimize(&start, &manifest, a.max_runs, &allowed, &mut |c| match run(c, Some(&target)) {
        Some(f) => {
            last = Some(f);
            true
        }
        None => false,
    });
    if let Some(e) = interrupted.take() {
        return Err(no_gpu(e));
    }
    outln!("{} candidate runs, {} kept; {} -> {} tensor elements", m.runs, m.kept, size(&start, &manifest), size(&m.case, &manifest))?;
    outln!("minimal case: {}", m.case.summary())?;
    let Some(finding) = last.or(seed.finding.clone()) else {
        outln!("nothing smaller fails the same way")?;
        return Ok(exit::FINDINGS);
    };
    if m.kept == 0 {
        outln!("nothing smaller fails the same way; the seed is already minimal for this search")?;
        return Ok(exit::FINDINGS);
    }
    let dir = a.seed.parent().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    let saved = corpus::save(&dir, &Seed::with_finding(m.case, finding).naming_kernel(&manifest, &dir)).map_err(|e| fail(exit::SETUP, e.to_string()))?;
    outln!("saved: {}", saved.path.display())?;
    out!("{}", report::replay_lines(&saved.path))?;
    Ok(exit::FINDINGS)
}
