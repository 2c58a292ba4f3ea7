//! GPU target: bytes → `Case` (the same `decode_case` as every other entry point) → the kernel
//! on the GPU, in a cudafuzz worker process → any finding aborts the input, so libFuzzer saves
//! it under `fuzz/artifacts/kernel/`.
//!
//! The kernel comes from `CUDAFUZZ_KERNEL` (a shipped name or a manifest path, any tensor kernel
//! with a format-2 manifest; default `flash_fwd`): its manifest says what the bytes choose
//! (dims, scalars, layouts and values of its named tensors). Cases run in a worker process the supervisor restarts after a sticky CUDA error
//! or a hang, so neither ends the campaign. Kernel-path coverage (`CF_COVER(id)` points, see
//! `kernels/include/cf_coverage.cuh`) is copied into libFuzzer's extra counters after every
//! case; `CUDAFUZZ_COVERAGE=0` turns that off (the ablation in BENCHMARKS.md). The decoder keeps
//! cases inside the kernel's declared contract (`DecodeContext::new`), the same context
//! `cudafuzz repro --kernel` decodes artifacts with; the few outside it are rejected (not added
//! to the corpus) unless `CUDAFUZZ_OUTSIDE_CONTRACT=1`.
//!
//! Replay an artifact with `cargo fuzz run kernel ARTIFACT` (the same `CUDAFUZZ_KERNEL`) or
//! `cudafuzz repro ARTIFACT --kernel <the same kernel>`.
#![no_main]

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cudafuzz::core::corpus::{self, Seed};
use cudafuzz::core::coverage::{self, Coverage};
use cudafuzz::core::generate::{decode_case, DecodeContext};
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::plan::admits;
use cudafuzz::core::registry;
use cudafuzz::core::verdict::{Outcome, RunOptions};
use cudafuzz::run::supervisor::{kernel_timeout, Supervisor, SupervisorConfig};
use libfuzzer_sys::{fuzz_target, Corpus};

/// Kernel-path counts of the last case, read by libFuzzer after every input (it clears them
/// before). One byte per `CF_COVER(id)` slot.
#[used]
#[link_section = "__libfuzzer_extra_counters"]
static mut GPU_COUNTERS: [u8; coverage::SLOTS] = [0; coverage::SLOTS];

/// The running campaign: the checked settings and the worker they started.
struct Target {
    settings: &'static Settings,
    supervisor: Supervisor,
    ctx: DecodeContext,
    opts: RunOptions,
    timeout: Duration,
    seeds: PathBuf,
}

/// What the environment asks for, checked before libFuzzer starts (see [`settings`]).
struct Settings {
    spec: String,
    manifest: Manifest,
    exe: PathBuf,
    out: PathBuf,
    coverage: bool,
    outside_contract: bool,
}

fn flag(name: &str, default: bool) -> bool {
    std::env::var(name).map(|v| !matches!(v.as_str(), "0" | "" | "false" | "no")).unwrap_or(default)
}

/// Set-up problems are the user's to fix: say which and stop the campaign with `code`.
///
/// libFuzzer reports an `exit()` made while an input runs as a crash and saves that input as an
/// artifact; a harness that cannot run is not the input's fault, so this leaves through `_exit`,
/// which skips libFuzzer's exit hook. Before the first input (in `init`) the hook is not there yet.
fn setup_failure(code: i32, msg: String) -> ! {
    eprintln!("cudafuzz kernel target: {msg}");
    // SAFETY: _exit ends the process at once; stderr is unbuffered, so the message is out.
    unsafe { libc::_exit(code) }
}

/// Checks the GPU and the environment once, in libFuzzer's initialisation: without a GPU the
/// target exits with cudafuzz's no-GPU status (3) before any input runs, so nothing is saved.
fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        if let Err(e) = cudafuzz::engine::gpu::device_count() {
            setup_failure(
                cudafuzz::core::exit::NO_GPU,
                format!("no GPU: {e}; this target runs kernels and needs an NVIDIA GPU (the host targets case_decode, seed_parse, sanitizer_xml, manifest_parse and gate_config do not)"),
            );
        }
        let usage = |msg: String| -> ! { setup_failure(cudafuzz::core::exit::USAGE, msg) };
        let spec = std::env::var("CUDAFUZZ_KERNEL").unwrap_or_else(|_| "flash_fwd".to_string());
        let manifest = registry::resolve(&spec).unwrap_or_else(|e| usage(format!("CUDAFUZZ_KERNEL={spec}: {e}")));
        let exe = registry::worker_exe().unwrap_or_else(|e| setup_failure(cudafuzz::core::exit::SETUP, e.to_string()));
        let out = PathBuf::from(std::env::var("CUDAFUZZ_OUT").unwrap_or_else(|_| "fuzz/artifacts/kernel-cudafuzz".to_string()));
        std::fs::create_dir_all(&out).unwrap_or_else(|e| usage(format!("CUDAFUZZ_OUT: cannot create {}: {e}", out.display())));
        let settings = Settings { spec, manifest, exe, out, coverage: flag("CUDAFUZZ_COVERAGE", true), outside_contract: flag("CUDAFUZZ_OUTSIDE_CONTRACT", false) };
        eprintln!(
            "cudafuzz kernel target: kernel {} ({}), GPU coverage {}, outside-contract cases {}",
            settings.manifest.name,
            settings.manifest.path.display(),
            if settings.coverage { "on" } else { "off (CUDAFUZZ_COVERAGE=0)" },
            if settings.outside_contract { "run" } else { "rejected" },
        );
        settings
    })
}

/// The worker, started with the first input (a `-fork` parent, which runs no input, starts none).
fn target() -> &'static Mutex<Target> {
    static TARGET: OnceLock<Mutex<Target>> = OnceLock::new();
    TARGET.get_or_init(|| {
        let s = settings();
        let supervisor = Supervisor::new(SupervisorConfig {
            exe: s.exe.clone(),
            gpu: std::env::var("CUDAFUZZ_GPU").ok().and_then(|g| g.parse().ok()).unwrap_or(0),
            reference_dir: registry::reference_dir(),
            journal: Some(s.out.join("journal.jsonl")),
            stop: Arc::new(AtomicBool::new(false)),
            sanitizer: None,
        })
        .unwrap_or_else(|e| setup_failure(cudafuzz::core::exit::SETUP, e.to_string()));
        let timeout = kernel_timeout(&s.manifest, None);
        Mutex::new(Target {
            settings: s,
            supervisor,
            ctx: DecodeContext::new(&s.manifest),
            opts: RunOptions { determinism: true, coverage: s.coverage, ..RunOptions::default() },
            timeout,
            seeds: s.out.join("seeds"),
        })
    })
}

fn set_counters(c: Option<&Coverage>) {
    // SAFETY: libFuzzer reads the counters only between inputs, on this thread.
    let counters = unsafe { &mut *std::ptr::addr_of_mut!(GPU_COUNTERS) };
    match c {
        Some(c) => c.fill_counters(counters),
        None => counters.fill(0),
    }
}

fuzz_target!(init: { settings(); }, |data: &[u8]| -> Corpus {
    let mut guard = target().lock().unwrap_or_else(|p| p.into_inner());
    let t = &mut *guard;
    let Ok(case) = decode_case(&mut arbitrary::Unstructured::new(data), &t.ctx) else { return Corpus::Reject };
    let manifest = &t.settings.manifest;
    let case = manifest.bind(case);
    if !t.settings.outside_contract && !admits(manifest, &case) {
        return Corpus::Reject;
    }
    let verdict = match t.supervisor.run(&case, manifest, &t.opts, t.timeout) {
        Ok(v) => v,
        Err(e) => setup_failure(cudafuzz::core::exit::SETUP, format!("the GPU worker failed: {e}")),
    };
    set_counters(verdict.coverage.as_ref());
    match verdict.outcome {
        Outcome::Pass => Corpus::Keep,
        Outcome::Fail { findings } => {
            let first = findings[0].clone();
            let saved = corpus::save(&t.seeds, &Seed::with_finding(case.clone(), first.clone()));
            eprintln!("\ncudafuzz: FINDING on {}", case.summary());
            for f in &findings {
                eprintln!("      {f}");
            }
            match saved {
                Ok(s) => eprintln!("      seed: {}\n      replay: cudafuzz repro {}", s.path.display(), s.path.display()),
                Err(e) => eprintln!("      (seed not saved: {e})"),
            }
            eprintln!("      replay the libFuzzer artifact: cudafuzz repro <artifact> --kernel {}\n", t.settings.spec);
            // libFuzzer saves the input as a crash artifact on abort.
            std::process::abort();
        }
        Outcome::Error { message } => {
            eprintln!("cudafuzz: the harness could not run {}: {message}", case.summary());
            Corpus::Reject
        }
        _ => Corpus::Keep,
    }
});
