//! `cudafuzz kernels` and `cudafuzz build`: the shipped manifests, and every kernel
//! configuration compiled with NVRTC (no GPU needed).

use std::time::Instant;

use anyhow::Result;

use super::{chain, fail, manifests_or_shipped, BuildArgs};
use crate::core::exit;
use crate::core::manifest::{params_text, Manifest};
use crate::core::registry;
use crate::engine::compile::ptx::check_entry_params;
use crate::engine::compile::{build_all, Arch, CompileError, Compiler};

/// `cudafuzz kernels`: one line per shipped manifest (and one per manifest that fails to load).
pub(super) fn kernels(paths: &[std::path::PathBuf]) -> Result<i32> {
    let (mut bad, mut fuzzed, mut all) = (0, 0, 0);
    let loaded: Vec<Result<Manifest, String>> = if paths.is_empty() {
        outln!("shipped kernels in {} (* = fuzzed by a plain `cudafuzz fuzz`):", registry::kernels_dir().display())?;
        registry::shipped().into_iter().map(|m| m.map_err(|e| crate::core::error::chain(&e))).collect()
    } else {
        registry::manifests_at(paths)
    };
    for m in loaded {
        match m {
            Ok(m) => {
                all += 1;
                fuzzed += m.fuzz as usize;
                kernel_lines(&m)?;
            }
            Err(e) => {
                bad += 1;
                outln!("  error: {e}")?;
            }
        }
    }
    if paths.is_empty() {
        outln!("{all} kernels, {fuzzed} fuzzed by default; fuzz any of them with `cudafuzz fuzz --kernel NAME`")?;
    } else {
        outln!("{all} manifests load, {bad} do not; fuzz one with `cudafuzz fuzz --kernel PATH`")?;
    }
    Ok(if bad > 0 { exit::USAGE } else { exit::OK })
}

/// One kernel as `cudafuzz kernels` lists it: name, path, dtypes, params, its Python target,
/// and its description on a line of its own.
fn kernel_lines(m: &Manifest) -> Result<()> {
    let params: Vec<String> = m.params.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    let mark = if m.fuzz { '*' } else { ' ' };
    let target = m.target.python().map(|p| format!(" python {} ({})", p.callable, p.tensors.name())).unwrap_or_default();
    outln!(
        "{mark} {:<16} {:<40} {} [{}]{target}",
        m.name,
        m.path.display(),
        m.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>().join(","),
        params.join(" ")
    )?;
    if !m.description.is_empty() {
        outln!("  {:<16} {}", "", m.description)?;
    }
    Ok(())
}

/// The architectures a build targets when none is asked for (the GPUs users run most).
pub(super) const DEFAULT_ARCHS: [Arch; 3] = [Arch::new(8, 0), Arch::new(8, 9), Arch::new(9, 0)];

pub(super) fn build(b: BuildArgs) -> Result<i32> {
    let archs = b.arch;
    let manifests = manifests_or_shipped(&b.kernel, false)?;
    let compiler = Compiler::new(None).map_err(|e| fail(exit::SETUP, chain(e)))?;
    for &arch in &archs {
        compiler.check_arch(arch).map_err(|e| fail(exit::USAGE, format!("--arch {arch}: {e}")))?;
    }
    build_report(&manifests, &archs, &compiler)
}

pub(super) fn build_report(manifests: &[Manifest], archs: &[Arch], compiler: &Compiler) -> Result<i32> {
    let started = Instant::now();
    let (python, compiled_here): (Vec<&Manifest>, Vec<&Manifest>) = manifests.iter().partition(|m| m.target.python().is_some());
    for m in &python {
        outln!("note: {} is a Python target ({}): its own code builds it, at setup; nothing to compile here", m.name, m.entry)?;
    }
    let manifests: Vec<Manifest> = compiled_here.into_iter().cloned().collect();
    let manifests = &manifests[..];
    let mut bad_manifests = 0;
    if let Some(&lowest) = archs.iter().min() {
        for m in manifests {
            if let Err(e) = check_entry_params(compiler, m, lowest) {
                bad_manifests += 1;
                errln!("MANIFEST {e}");
            }
        }
    }
    let (outcomes, skipped) = build_with_progress(manifests, archs, compiler);
    for s in &skipped {
        outln!("note: {} ({}) is not built for {}: {}; it runs on the other targets", s.manifest, params_text(&s.params), s.arch, s.why)?;
    }
    let mut unlined: Vec<&str> = outcomes.iter().filter(|o| o.no_line_info).map(|o| o.manifest.as_str()).collect();
    unlined.dedup();
    for name in unlined {
        outln!("note: {name}: its module carries no line information (built without -lineinfo): sanitizer reports will name no source line")?;
    }
    let mut failed = 0;
    let mut cached = 0;
    let mut over = 0;
    for o in &outcomes {
        match &o.result {
            Ok((_, from_cache)) => cached += *from_cache as usize,
            Err(e) if matches!(e.as_ref(), CompileError::OverLimits { .. }) => {
                over += 1;
                errln!("MANIFEST {e}");
            }
            Err(e) => {
                failed += 1;
                errln!("FAILED {} {:?} {} {}:\n{}", o.manifest, o.params, o.dtype, o.arch, crate::core::error::chain(e.as_ref()));
            }
        }
    }
    bad_manifests += over;
    let compiled = outcomes.len() - over;
    outln!(
        "compiled {} configurations ({} kernels x params x dtypes x {} archs) in {:.1} s: {} ok ({} from cache), {} failed, {} skipped past an architecture's limits{}",
        compiled,
        manifests.len(),
        archs.len(),
        started.elapsed().as_secs_f64(),
        compiled.saturating_sub(failed),
        cached,
        failed,
        skipped.len(),
        if bad_manifests > 0 { format!("; {bad_manifests} manifest error(s)") } else { String::new() }
    )?;
    Ok(if bad_manifests > 0 {
        exit::USAGE
    } else if failed > 0 {
        exit::SETUP
    } else {
        exit::OK
    })
}

/// [`build_all`], one manifest at a time, saying which one is being built: a bar on a terminal,
/// one line per manifest otherwise (a CI log shows progress through a build of minutes).
fn build_with_progress(
    manifests: &[Manifest],
    archs: &[Arch],
    compiler: &Compiler,
) -> (Vec<crate::engine::compile::BuildOutcome>, Vec<crate::engine::compile::Skipped>) {
    let bar = indicatif::ProgressBar::new(manifests.len() as u64);
    bar.set_style(indicatif::ProgressStyle::with_template("building [{elapsed_precise}] {bar:30} {pos}/{len} {msg}").expect("valid template"));
    let lines = bar.is_hidden();
    let (mut outcomes, mut skipped) = (Vec::new(), Vec::new());
    for (i, m) in manifests.iter().enumerate() {
        bar.set_message(m.name.clone());
        let started = Instant::now();
        let (o, s) = build_all(std::slice::from_ref(m), archs, compiler);
        if lines {
            let bad = o.iter().filter(|o| o.result.is_err()).count();
            let cached = o.iter().filter(|o| matches!(o.result, Ok((_, true)))).count();
            let verdict = if bad > 0 { format!("{bad} FAILED") } else { "ok".to_string() };
            errln!(
                "[{}/{}] {}: {} configurations, {verdict} ({cached} from cache) in {:.1} s",
                i + 1,
                manifests.len(),
                m.name,
                o.len(),
                started.elapsed().as_secs_f64()
            );
        }
        bar.inc(1);
        outcomes.extend(o);
        skipped.extend(s);
    }
    bar.finish_and_clear();
    (outcomes, skipped)
}
