//! `cudafuzz run` and `cudafuzz repro`: given cases on the GPU, one verdict each; `repro --emit`
//! writes a standalone repro instead (no GPU needed).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;

use super::{chain, checked_case, fail, load_seed, manifest_inputs, no_gpu, refuse_clobber, seed_kernel, setup, EmitArg, ReproArgs, RunArgs};
use crate::core::case::Case;
use crate::core::corpus::Seed;
use crate::core::exit;
use crate::core::manifest::Manifest;
use crate::core::verdict::Outcome;
use crate::run::campaign::Tally;
use crate::run::config::EngineConfig;
use crate::run::supervisor::SupervisorError;
use crate::tools::report;

pub(super) fn run_cases(r: RunArgs) -> Result<i32> {
    let forced = super::forced_kernel(r.kernel.as_deref())?;
    super::refuse_trace_onto(r.cases.iter().map(PathBuf::as_path))?;
    let cfg = r.engine.config()?;
    let mut loaded: Vec<(&PathBuf, Case, Manifest)> = Vec::new();
    for path in &r.cases {
        let seed = load_seed(path, forced.as_ref(), r.raw)?;
        let manifest = seed_kernel(forced.as_ref(), &seed, path)?;
        let (case, _) = checked_case(path, &seed, &manifest)?;
        loaded.push((path, case, manifest));
    }
    let mut sup = cfg.supervisor().map_err(setup)?;
    let opts = cfg.options();
    let mut tally = Tally::default();
    let started = Instant::now();
    // Consecutive cases of one kernel run as one batch: under a sanitizer, one process per
    // --sanitize-batch cases.
    let batch = if cfg.sanitize.is_some() { cfg.sanitize_batch.max(1) } else { usize::MAX };
    for group in loaded.chunk_by(|a, b| a.2.path == b.2.path).flat_map(|g| g.chunks(batch)) {
        let manifest = &group[0].2;
        let cases: Vec<Case> = group.iter().map(|g| g.1.clone()).collect();
        let verdicts = match sup.run_batch(&cases, manifest, &opts, cfg.timeout(manifest)) {
            Ok(v) => v,
            Err(SupervisorError::Interrupted) => {
                errln!("interrupted: {} passed, {} failed, {} errors before Ctrl-C", tally.pass, tally.fail, tally.error);
                return Ok(exit::INTERRUPTED);
            }
            Err(e) => return Err(no_gpu(e)),
        };
        for ((path, case, _), verdict) in group.iter().zip(verdicts) {
            tally.add(&verdict);
            outln!("{}: {}", path.display(), report::one_line(case, &verdict))?;
        }
    }
    errln!(
        "{} cases in {:.2} s: {} passed, {} failed, {} errors{}; {} worker start(s)",
        r.cases.len(),
        started.elapsed().as_secs_f64(),
        tally.pass,
        tally.fail,
        tally.error,
        super::fuzz::rejected_text(tally.rejected),
        sup.starts
    );
    Ok(tally.exit_code())
}

pub(super) fn repro(r: ReproArgs) -> Result<i32> {
    let forced = super::forced_kernel(r.kernel.as_deref())?;
    super::refuse_trace_onto([r.seed.as_path()])?;
    let seed = load_seed(&r.seed, forced.as_ref(), r.raw)?;
    let manifest = seed_kernel(forced.as_ref(), &seed, &r.seed)?;
    let cfg = r.engine.config()?;
    let (case, plan) = checked_case(&r.seed, &seed, &manifest)?;
    if let Some(kind) = r.emit {
        return emit_repro(&r, &cfg, kind, &seed, &manifest);
    }
    out!("{}", report::plan_table(&case, &plan))?;
    out!("{}", report::contract_lines(&manifest.name, &crate::core::plan::check_contract(&manifest, &case, &plan)))?;
    if let Some(f) = &seed.finding {
        outln!("saved finding: {f}")?;
    }
    let mut sup = cfg.supervisor().map_err(setup)?;
    let gpu = sup.gpu().map_err(no_gpu)?;
    outln!("gpu {}: {} ({}), driver {}", gpu.ordinal, gpu.name, gpu.arch, gpu.driver_version)?;
    let verdict = sup.run(&case, &manifest, &cfg.options(), cfg.timeout(&manifest)).map_err(no_gpu)?;
    outln!("{}", report::one_line(&case, &verdict))?;
    outln!("reference: {}; times (us): {:?}", verdict.reference, verdict.times)?;
    if let (Some(saved), Outcome::Fail { findings }) = (&seed.signature, &verdict.outcome) {
        let same = findings.iter().any(|f| &f.signature() == saved);
        outln!("saved signature {}: {}", saved, if same { "reproduced" } else { "NOT reproduced (a different failure)" })?;
    }
    let mut tally = Tally::default();
    tally.add(&verdict);
    Ok(tally.exit_code())
}

/// `repro --emit`: writes the standalone repro (never over an existing file without `--force`)
/// and prints how to build and run it.
fn emit_repro(r: &ReproArgs, cfg: &EngineConfig, kind: EmitArg, seed: &Seed, manifest: &Manifest) -> Result<i32> {
    use crate::tools::emit::{emit, EmitKind, SeedInfo};
    let kind = match kind {
        EmitArg::Cu => EmitKind::Cu,
        EmitArg::Python => EmitKind::Python,
    };
    // By default into the output directory, never beside the seed (a seed folder is the user's).
    let stem = r.seed.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "seed".into());
    let output = r.output.clone().unwrap_or_else(|| cfg.out.join("repro").join(format!("{stem}.{}", kind.extension())));
    if r.output.is_none() {
        let dir = cfg.out.join("repro");
        std::fs::create_dir_all(&dir).map_err(|e| fail(exit::SETUP, format!("cannot create {}: {e}", dir.display())))?;
    }
    let to_stdout = output.as_os_str() == "-";
    let file_name = match output.file_name() {
        Some(n) if !to_stdout => n.to_string_lossy().into_owned(),
        _ => format!("repro.{}", kind.extension()),
    };
    let tool = match cfg.sanitize.as_deref() {
        None => None,
        Some([t]) => Some(*t),
        Some(_) => {
            let list = r.engine.sanitize.as_ref().map(|l| l.to_string()).unwrap_or_default();
            return Err(fail(exit::USAGE, format!("--sanitize {list}: --emit lays a repro out for one tool; name one")));
        }
    };
    let mut info = SeedInfo::from_seed(&r.seed, seed, &file_name);
    info.sanitizer = tool;
    let case = manifest.bind(seed.case.clone());
    let emitted = emit(kind, &case, manifest, &info).map_err(|e| fail(exit::USAGE, format!("{}: {}", r.seed.display(), chain(e))))?;
    if to_stdout {
        out!("{}", emitted.text)?;
        return Ok(exit::OK);
    }
    // Not even with --force: that replaces an old repro, never the seed or the kernel.
    refuse_clobber(&output, std::iter::once(r.seed.as_path()).chain(manifest_inputs(manifest)))?;
    let written = if r.force {
        std::fs::write(&output, &emitted.text)
    } else {
        use std::io::Write as _;
        std::fs::OpenOptions::new().write(true).create_new(true).open(&output).and_then(|mut f| f.write_all(emitted.text.as_bytes()))
    };
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(fail(exit::USAGE, format!("{} exists; pass --force to overwrite it, or -o another file", output.display())))
        }
        Err(e) => return Err(fail(exit::SETUP, format!("cannot write {}: {e}", output.display()))),
    }
    outln!("wrote {} ({} bytes): {} {}", output.display(), emitted.text.len(), manifest.name, case.summary())?;
    if let Some(f) = &seed.finding {
        outln!("saved finding: {f}")?;
    }
    let dir = output.parent().filter(|d| !d.as_os_str().is_empty());
    match dir {
        Some(d) => outln!("build and run (in {}):", d.display())?,
        None => outln!("build and run:")?,
    }
    for c in &emitted.commands {
        outln!("  {c}")?;
    }
    Ok(exit::OK)
}
