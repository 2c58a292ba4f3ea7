//! GPU target: bytes → `Case` (the same `decode_case` as every other entry point) → the kernel
//! on the GPU, in a cudafuzz worker process → any finding aborts the input, so libFuzzer saves
//! it under `fuzz/artifacts/attention/`.
//!
//! The kernel comes from `CUDAFUZZ_KERNEL` (a shipped name or a manifest path; default
//! `flash_fwd`). Cases run in a worker process the supervisor restarts after a sticky CUDA error
//! or a hang, so neither ends the campaign. Kernel-path coverage (`CF_COVER(id)` points, see
//! `kernels/include/cf_coverage.cuh`) is copied into libFuzzer's extra counters after every
//! case; `CUDAFUZZ_COVERAGE=0` turns that off (the ablation in BENCHMARKS.md). The decoder keeps
//! cases inside the kernel's declared contract (`Manifest::decode_context`), the same context
//! `cudafuzz repro --kernel` decodes artifacts with; the few outside it are rejected (not added
//! to the corpus) unless `CUDAFUZZ_OUTSIDE_CONTRACT=1`.
//!
//! Replay an artifact with `cargo fuzz run attention ARTIFACT` or
//! `cudafuzz repro ARTIFACT --kernel <the same kernel>`.
#![no_main]

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cudafuzz::case::{decode_case, DecodeContext};
use cudafuzz::corpus::{self, Seed};
use cudafuzz::coverage::{self, Coverage};
use cudafuzz::manifest::Manifest;
use cudafuzz::plan::Plan;
use cudafuzz::registry;
use cudafuzz::supervisor::{Supervisor, SupervisorConfig};
use cudafuzz::worker::{Outcome, RunOptions};
use libfuzzer_sys::{fuzz_target, Corpus};

/// Kernel-path counts of the last case, read by libFuzzer after every input (it clears them
/// before). One byte per `CF_COVER(id)` slot.
#[used]
#[link_section = "__libfuzzer_extra_counters"]
static mut GPU_COUNTERS: [u8; coverage::SLOTS] = [0; coverage::SLOTS];

struct Target {
    supervisor: Supervisor,
    manifest: Manifest,
    spec: String,
    ctx: DecodeContext,
    opts: RunOptions,
    timeout: Duration,
    outside_contract: bool,
    seeds: PathBuf,
}

fn flag(name: &str, default: bool) -> bool {
    std::env::var(name).map(|v| !matches!(v.as_str(), "0" | "" | "false" | "no")).unwrap_or(default)
}

/// Set-up problems are the user's to fix: say which and stop the campaign.
fn setup_failure(msg: String) -> ! {
    eprintln!("cudafuzz attention target: {msg}");
    std::process::exit(2);
}

fn target() -> &'static Mutex<Target> {
    static TARGET: OnceLock<Mutex<Target>> = OnceLock::new();
    TARGET.get_or_init(|| {
        if let Err(e) = cudafuzz::gpu::device_count() {
            eprintln!("cudafuzz attention target: no GPU: {e}; this target runs kernels and needs an NVIDIA GPU (the host targets case_decode, seed_parse, sanitizer_xml do not)");
            std::process::exit(cudafuzz::exit::NO_GPU);
        }
        let spec = std::env::var("CUDAFUZZ_KERNEL").unwrap_or_else(|_| "flash_fwd".to_string());
        let manifest = registry::resolve(&spec).unwrap_or_else(|e| setup_failure(format!("CUDAFUZZ_KERNEL={spec}: {e}")));
        let exe = registry::worker_exe().unwrap_or_else(|e| setup_failure(e));
        let out = PathBuf::from(std::env::var("CUDAFUZZ_OUT").unwrap_or_else(|_| "fuzz/artifacts/attention-cudafuzz".to_string()));
        std::fs::create_dir_all(&out).unwrap_or_else(|e| setup_failure(format!("cannot create {}: {e}", out.display())));
        let supervisor = Supervisor::new(SupervisorConfig {
            exe,
            gpu: std::env::var("CUDAFUZZ_GPU").ok().and_then(|g| g.parse().ok()).unwrap_or(0),
            reference_manifest: registry::reference_manifest(),
            journal: Some(out.join("journal.jsonl")),
            stop: Arc::new(AtomicBool::new(false)),
            sanitizer: None,
        })
        .unwrap_or_else(|e| setup_failure(e.to_string()));
        let coverage = flag("CUDAFUZZ_COVERAGE", true);
        eprintln!(
            "cudafuzz attention target: kernel {} ({}), GPU coverage {}, outside-contract cases {}",
            manifest.name,
            manifest.path.display(),
            if coverage { "on" } else { "off (CUDAFUZZ_COVERAGE=0)" },
            if flag("CUDAFUZZ_OUTSIDE_CONTRACT", false) { "run" } else { "rejected" },
        );
        let timeout = manifest.launch.timeout_ms.map(Duration::from_millis).unwrap_or(Duration::from_secs(10));
        Mutex::new(Target {
            ctx: manifest.decode_context(),
            supervisor,
            spec,
            opts: RunOptions { determinism: true, coverage, ..RunOptions::default() },
            timeout,
            outside_contract: flag("CUDAFUZZ_OUTSIDE_CONTRACT", false),
            seeds: out.join("seeds"),
            manifest,
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

fuzz_target!(|data: &[u8]| -> Corpus {
    let mut guard = target().lock().unwrap_or_else(|p| p.into_inner());
    let t = &mut *guard;
    let Ok(case) = decode_case(&mut arbitrary::Unstructured::new(data), &t.ctx) else { return Corpus::Reject };
    let case = t.manifest.bind(case);
    if !t.outside_contract && !t.manifest.contract.check(&case, &Plan::new(&case)).is_inside() {
        return Corpus::Reject;
    }
    let verdict = match t.supervisor.run(&case, &t.manifest, &t.opts, t.timeout) {
        Ok(v) => v,
        Err(e) => setup_failure(format!("the GPU worker failed: {e}")),
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
            eprintln!("      replay the libFuzzer artifact: cudafuzz repro <artifact> --kernel {}\n", t.spec);
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
