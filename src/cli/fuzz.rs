//! `cudafuzz fuzz`: a campaign per kernel ([`crate::run::campaign::run`]), rendered as a progress bar
//! and one line per new bug, ending with the bug table (seeds arranged one per bug, the bug
//! index written); without a GPU, the host-side work only.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Result};

use super::build::{build_report, DEFAULT_ARCHS};
use super::{chain, fail, file_seeds, manifests_or_shipped, no_gpu, setup, workers_line, FuzzArgs};
use crate::core::exit;
use crate::core::manifest::Manifest;
use crate::core::tool::Escalate;
use crate::core::triage::{self, BugIndex, BUG_INDEX_FILE};
use crate::engine::compile::Compiler;
use crate::run::campaign::{self, CampaignEvent, CampaignSpec, CaseStream, Escalator, EventKind, SeedKeeper, Tally};
use crate::run::config::EngineConfig;
use crate::run::sanitizer::Sanitizer;
use crate::run::supervisor::SupervisorError;

pub(super) fn fuzz(f: FuzzArgs) -> Result<i32> {
    let manifests = manifests_or_shipped(&f.kernel, true)?;
    if manifests.is_empty() {
        bail!(fail(exit::USAGE, "no kernels to fuzz"));
    }
    super::refuse_trace_onto(manifests.iter().flat_map(super::manifest_inputs))?;
    let cfg = f.engine.config()?;
    let mut pool = cfg.pool().map_err(setup)?;
    let gpu = match pool.slots[0].gpu() {
        Ok(g) => g,
        Err(SupervisorError::NoGpu(msg)) => return without_gpu(&f, &manifests, &msg),
        Err(e) => return Err(no_gpu(e)),
    };
    outln!("{}", workers_line(&gpu, &mut pool))?;
    for m in &manifests {
        if let Some(note) = crate::engine::compile::module::line_info_note(m, gpu.arch) {
            outln!("{note}")?;
        }
    }
    let mut escalator = escalator(&f, &cfg)?;
    let mut keeper = SeedKeeper::new(cfg.out.join("seeds"));
    lend_earlier_mappings(&mut keeper, &cfg.out);
    let mut total = Tally::default();
    for m in &manifests {
        let bar = indicatif::ProgressBar::new(f.cases);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{prefix:>14} [{elapsed_precise}] {bar:30} {pos}/{len} {per_sec} {msg}").expect("valid template"),
        );
        bar.set_prefix(m.name.clone());
        let started = Instant::now();
        let spec = CampaignSpec {
            cases: f.cases,
            deadline: f.time.map(|t| crate::core::clock::deadline(started, t)),
            stop_after: f.stop_after,
            steer: !f.no_steer,
            ..cfg.campaign(m, CaseStream::campaign(m, f.seed, f.outside_contract))
        };
        let mut render = |e: CampaignEvent<'_>| render_event(&e, &bar, cfg.coverage);
        let (summary, result) = campaign::run(&mut pool, &spec, &mut keeper, escalator.as_mut(), &mut render);
        match result {
            Ok(()) => {}
            Err(SupervisorError::Interrupted) => {
                bar.abandon();
                total.absorb(&summary.tally);
                errln!(
                    "interrupted: {} passed, {} failed, {} errors; {} distinct findings saved in {}",
                    total.pass,
                    total.fail,
                    total.error,
                    keeper.len(),
                    keeper.dir().display()
                );
                // Stdout may be the reason it stopped (a closed pipe): the index is written first anyway.
                let _ = finish_bugs(&mut keeper, &cfg.out);
                return Ok(exit::INTERRUPTED);
            }
            Err(e) => return Err(no_gpu(e)),
        }
        bar.finish();
        let (t, secs) = (&summary.tally, summary.elapsed.as_secs_f64());
        outln!(
            "{}: {} cases in {secs:.1} s ({:.0}/s): {} passed, {} failed, {} errors{}; {} new bugs ({} new signatures); {} steered past known bugs; {}; {} worker starts so far ({} warm spares used)",
            m.name,
            t.total(),
            t.total() as f64 / secs.max(1e-9),
            t.pass,
            t.fail,
            t.error,
            rejected_text(t.rejected),
            summary.progress.new_bugs,
            summary.progress.new_findings,
            summary.steered,
            contract_rate(t.total(), summary.skipped, f.outside_contract),
            pool.starts(),
            pool.spares_used()
        )?;
        if cfg.coverage {
            let paths = &summary.progress.kernel_paths;
            outln!(
                "{}: kernel coverage: {} CF_COVER points reached ({} point x hit-count features), at lines {:?}",
                m.name,
                paths.points(),
                paths.features(),
                paths.lines()
            )?;
        }
        total.absorb(&summary.tally);
    }
    finish_bugs(&mut keeper, &cfg.out)?;
    Ok(total.exit_code())
}

/// Ids stay those of an earlier run into the same directory: its index's mappings are known.
fn lend_earlier_mappings(keeper: &mut SeedKeeper, out: &Path) {
    let path = out.join(BUG_INDEX_FILE);
    if !path.exists() {
        return;
    }
    match BugIndex::load(&path) {
        Ok(index) => index.aliases().for_each(|a| keeper.triage_mut().add_alias(a)),
        Err(e) => errln!("cudafuzz: {} (its mappings are not used; it is rewritten at the end)", chain(e)),
    }
}

/// The end of a run: one seed per bug in `seeds/` (the others moved to `seeds/<id>/examples/`),
/// the bug index written, and the bug table.
fn finish_bugs(keeper: &mut SeedKeeper, out: &Path) -> Result<()> {
    if let (_, Some(path)) = file_seeds(keeper, out, true) {
        outln!("bug index: {}", path.display())?;
    }
    out!("{}", triage::table(&keeper.triage().bugs(), None))?;
    Ok(())
}

/// One campaign event as `fuzz` shows it: a block per new bug above the progress bar.
/// A closed stdout is dropped here: it raised the stop flag, so the campaign ends at its next case.
fn render_event(e: &CampaignEvent<'_>, bar: &indicatif::ProgressBar, coverage: bool) {
    let _ = match &e.kind {
        EventKind::NewBug { index, bug } => {
            let after = e.elapsed.as_secs_f64();
            let seed = bug.smallest.as_ref().map(|p| format!("\n      seed: {}", p.display())).unwrap_or_default();
            bar.suspend(|| outln!("NEW   after {after:.2} s (case #{index}): {}{seed}", triage::bug_line(bug)))
        }
        // A finding being named is shown the moment its case is filed, its bug (NEW) once
        // the re-run names it.
        EventKind::NewFinding { index, finding, naming: true, shown: false, .. } | EventKind::FoundEarly { index, finding } => {
            let after = e.elapsed.as_secs_f64();
            let what = format!("{finding}");
            bar.suspend(|| outln!("FOUND after {after:.2} s (case #{index}): {}; naming it under the sanitizer", first_line(&what)))
        }
        // What a FOUND finding turned out to be, when not a new bug.
        EventKind::NamedKnown { index, bugs } => bar.suspend(|| outln!("      case #{index} is known bug {}", triage::bug_ids(bugs))),
        EventKind::NotNamed { index, why, .. } => bar.suspend(|| outln!("      case #{index}: {why}")),
        // A bug is reported once, with its site; its further signatures, smaller cases and
        // sanitizer records are in the bug table and the index at the end.
        EventKind::NewFinding { .. } | EventKind::SmallerCase { .. } | EventKind::Named { .. } => Ok(()),
        EventKind::EscalationSilent { note } => bar.suspend(|| outln!("      ({note})")),
        EventKind::NotYetNamed { bugs } => {
            let n = bugs.len();
            bar.suspend(|| {
                outln!(
                    "{n} finding{} not yet named when the campaign stopped ({}): their sanitizer re-runs were given up; they are in the bug table as provisional and may be bugs already shown",
                    if n == 1 { "" } else { "s" },
                    triage::bug_ids(bugs)
                )
            })
        }
        EventKind::HarnessError { case, message } => {
            bar.suspend(|| errln!("ERROR {}: {message}", case.summary()));
            Ok(())
        }
        EventKind::Rejected { case, exception, message } => {
            bar.suspend(|| {
                errln!(
                    "REJECTED by the target ({exception}: {}) on {}; cases it refuses are counted, not judged (the first of each exception is shown)",
                    first_line(message),
                    case.summary()
                )
            });
            Ok(())
        }
        EventKind::Note { case, note } => {
            bar.suspend(|| errln!("NOTE  {note} (first seen on {})", case.summary()));
            Ok(())
        }
        EventKind::CaseDone { progress, .. } => {
            bar.inc(1);
            bar.set_message(if coverage {
                format!("{} bugs, {} kernel paths", progress.new_bugs, progress.kernel_paths.features())
            } else {
                format!("{} bugs", progress.new_bugs)
            });
            Ok(())
        }
    };
}

/// The escalator that re-runs new findings under compute-sanitizer, if `--escalate` asks for
/// one; a missing compute-sanitizer is said once, and the campaign goes on without naming.
fn escalator(f: &FuzzArgs, cfg: &EngineConfig) -> Result<Option<Escalator>> {
    let tools = match &f.escalate {
        Escalate::Tools(list) if cfg.sanitize.is_none() => &list.0,
        _ => return Ok(None),
    };
    let sanitizer = match Sanitizer::locate() {
        Ok(s) => s,
        Err(e) => {
            errln!("cudafuzz: findings will not be re-run under compute-sanitizer (--escalate): {e}");
            return Ok(None);
        }
    };
    let order = tools.iter().map(|t| t.name()).collect::<Vec<_>>().join(", then ");
    // Wrong values (a numerical error, a nondeterministic or NaN output) are most often races:
    // the escalator tries racecheck first for them (`Request::value_only`).
    let values_first = if tools.iter().any(|t| t.name() == "racecheck") && tools.len() > 1 { "; wrong values try racecheck first" } else { "" };
    outln!("escalation: new findings are re-run under {order} (each tool only if the ones before named nothing{values_first}; {})", sanitizer.version)?;
    Ok(Some(cfg.escalator(&sanitizer, tools).map_err(setup)?))
}

/// With no GPU, do what the host can: compile every configuration, plan the cases the campaign
/// would run, and say clearly that nothing ran on a GPU.
fn without_gpu(f: &FuzzArgs, manifests: &[Manifest], why: &str) -> Result<i32> {
    errln!("cudafuzz: NO GPU: {why}.");
    errln!("cudafuzz: no kernel was run; doing the host-side work only: compile, plan, contract.");
    match Compiler::new(None) {
        Ok(compiler) => {
            let archs = DEFAULT_ARCHS.to_vec();
            let code = build_report(manifests, &archs, &compiler)?;
            if code != exit::OK {
                return Ok(code);
            }
        }
        Err(e) => errln!("cudafuzz: cannot compile either: {}", chain(e)),
    }
    for m in manifests {
        let stream = CaseStream::campaign(m, f.seed, f.outside_contract);
        let n = f.cases.min(100_000);
        let inside = (0..n).filter(|&i| crate::core::plan::admits(m, &stream.drawn(i))).count() as u64;
        outln!("{}: planned {n} cases: {inside} inside its contract, {} outside (not run: no GPU)", m.name, n - inside)?;
    }
    Ok(exit::NO_GPU)
}

/// `inside the contract: 99.6% of 1000 generated (4 outside, skipped)`; with `--outside-contract`
/// every generated case runs and the share inside is the verdicts' business.
fn contract_rate(ran: u64, skipped: u64, outside_contract: bool) -> String {
    if outside_contract {
        return "outside-contract cases run too".into();
    }
    let generated = ran + skipped;
    let share = if generated == 0 { 100.0 } else { 100.0 * ran as f64 / generated as f64 };
    format!("inside the contract: {share:.1}% of {generated} generated ({skipped} outside, skipped)")
}

/// `, N rejected by the target` when a Python target refused cases, else nothing.
pub(super) fn rejected_text(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(", {n} rejected by the target")
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
