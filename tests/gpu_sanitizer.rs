//! compute-sanitizer through the harness: each tool on its planted bug, clean kernels clean
//! under all four, and exact per-case attribution inside one persistent sanitizer process.
//!
//! Needs a CUDA GPU and compute-sanitizer: on a host lacking either each test prints
//! `SKIP <test>: <reason>` and returns, or fails under
//! `CUDAFUZZ_REQUIRE_GPU=1` (how `ci/gpu-check.sh` runs it): a sanitizer check must never pass
//! unchecked.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use cudafuzz::core::case::{Case, Scalar};
use cudafuzz::core::finding::{Finding, FindingKind, Location};
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::verdict::{Outcome, RunOptions, Verdict};
use cudafuzz::run::sanitizer::{Sanitizer, Tool};
use cudafuzz::run::supervisor::{SanitizerPass, Supervisor, SupervisorConfig};

mod common;
use common::{attention_example, exe, root};

macro_rules! require_gpu_and_sanitizer {
    () => {
        if common::lacks_gpu(true) {
            return;
        }
    };
}

fn supervisor(tools: &[Tool], batch: usize) -> (tempfile::TempDir, Supervisor) {
    let sanitizer = Sanitizer::locate().unwrap_or_else(|e| panic!("a GPU is present but {e}"));
    eprintln!("compute-sanitizer {}: {}", sanitizer.path.display(), sanitizer.version);
    let dir = tempfile::tempdir().unwrap();
    let sup = Supervisor::new(SupervisorConfig {
        exe: exe(),
        gpu: 0,
        reference_dir: Some(root().join("kernels/reference")),
        journal: Some(dir.path().join("journal.jsonl")),
        stop: Arc::new(AtomicBool::new(false)),
        sanitizer: Some(SanitizerPass { sanitizer, tools: tools.to_vec(), dir: dir.path().to_path_buf(), batch }),
    })
    .unwrap();
    (dir, sup)
}

fn manifest(rel: &str) -> Manifest {
    Manifest::load(&root().join(rel)).unwrap_or_else(|e| panic!("{e}"))
}

/// A small case of `m` with the given head_dim (40 triggers the planted bugs), scaled by
/// `1 / sqrt(head_dim)`: the scale the manifests' contracts admit (0.125 at head_dim 64), so the
/// GPU reference judges it as it did when format 1 put no term on the scale.
fn case(m: &Manifest, head_dim: u64, seed: u64) -> Case {
    let mut c = attention_example(m);
    c.dims.insert("head_dim".into(), head_dim);
    c.scalars.insert("scale".into(), Scalar::Float((1.0 / (head_dim as f64).sqrt()) as f32 as f64));
    c.dims.insert("seq_q".into(), 17);
    c.dims.insert("seq_k".into(), 33);
    c.seed = seed;
    c
}

fn run_all(sup: &mut Supervisor, m: &Manifest, cases: &[Case]) -> Vec<Verdict> {
    let opts = RunOptions { determinism: false, ..RunOptions::default() };
    sup.run_batch(cases, m, &opts, Duration::from_secs(10)).unwrap()
}

fn sanitizer_findings(v: &Verdict) -> Vec<Finding> {
    match &v.outcome {
        Outcome::Fail { findings } => findings.iter().filter(|f| f.oracle.is_sanitizer()).cloned().collect(),
        _ => Vec::new(),
    }
}

/// The line of `simple_attn.cu` that holds `needle` (1-based): where the planted bug is.
fn line_of(needle: &str) -> u32 {
    let src = std::fs::read_to_string(root().join("kernels/testing/simple_attn.cu")).unwrap();
    let i = src.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("`{needle}` not in simple_attn.cu"));
    i as u32 + 1
}

/// Runs the planted bug of `rel` (head_dim 40) under `tool` and checks the finding it names.
fn names_its_bug(rel: &str, tool: Tool, kind: FindingKind, tensor: Option<&str>, needle: &str) {
    let m = manifest(rel);
    let (_dir, mut sup) = supervisor(&[tool], 8);
    let v = &run_all(&mut sup, &m, &[case(&m, 40, 1)])[0];
    let found = sanitizer_findings(v);
    eprintln!("{rel} under {tool}: {:?}", found.iter().map(|f| f.to_string()).collect::<Vec<_>>());
    let f = found.iter().find(|f| f.kind == kind).unwrap_or_else(|| panic!("{rel}: {tool} found no {kind}: {:?}", v.outcome));
    let src = f.source.as_ref().unwrap_or_else(|| panic!("{rel}: no source line in {f}"));
    assert_eq!((src.file.as_str(), src.line), ("simple_attn.cu", line_of(needle)), "{rel}: {f}");
    assert_eq!(f.tensor.as_deref(), tensor, "{rel}: {f}");
    if tool == Tool::Memcheck {
        // Exact placement: the overrun lies past k's last byte, in memcheck's padding, where a
        // neighbouring allocation would otherwise hide it.
        assert!(matches!(f.location, Some(Location::RedzoneAfter { .. })), "{f}");
    }
}

#[test]
fn memcheck_names_an_overrun_into_padding() {
    require_gpu_and_sanitizer!();
    names_its_bug("kernels/testing/oob_read_k.toml", Tool::Memcheck, FindingKind::SanitizerMemory, Some("k"), "dot += cf_to_float(krow[(long long)d * k_sd]);");
}

#[test]
fn racecheck_names_a_missing_barrier() {
    require_gpu_and_sanitizer!();
    names_its_bug("kernels/testing/race_q_row.toml", Tool::Racecheck, FindingKind::Race, None, "row[d] = cf_to_float(qrow[(long long)d * q_sd]);");
}

#[test]
fn initcheck_names_an_uninitialised_read() {
    require_gpu_and_sanitizer!();
    // The scratch buffer is a named tensor of the roster (manifest v2), so the finding names it.
    names_its_bug("kernels/testing/uninit_scratch.toml", Tool::Initcheck, FindingKind::UninitializedRead, Some("scratch"), "scratch[s] == 12345.0f");
}

#[test]
fn synccheck_names_a_bad_syncwarp() {
    require_gpu_and_sanitizer!();
    names_its_bug("kernels/testing/bad_syncwarp.toml", Tool::Synccheck, FindingKind::BarrierError, None, "__syncwarp(0x1u)");
}

/// simple_attn and flash_fwd on three cases each under `tool`: every verdict a pass.
fn clean_under(tool: Tool) {
    let (_dir, mut sup) = supervisor(&[tool], 8);
    for rel in ["kernels/testing/simple_attn.toml", "kernels/attention/flash_fwd_hd64.toml"] {
        let m = manifest(rel);
        let mut odd = case(&m, 40, 2);
        odd.layout_mut("q").offset_bytes = 2;
        odd.scalars.insert("causal".into(), Scalar::Bool(true));
        for v in run_all(&mut sup, &m, &[case(&m, 40, 1), case(&m, 64, 3), odd]) {
            assert_eq!(v.outcome, Outcome::Pass, "{rel} under {tool}");
        }
    }
}

#[test]
fn clean_kernels_are_clean_under_memcheck() {
    require_gpu_and_sanitizer!();
    clean_under(Tool::Memcheck);
}

#[test]
fn clean_kernels_are_clean_under_racecheck() {
    require_gpu_and_sanitizer!();
    clean_under(Tool::Racecheck);
}

#[test]
fn clean_kernels_are_clean_under_initcheck() {
    require_gpu_and_sanitizer!();
    clean_under(Tool::Initcheck);
}

#[test]
fn clean_kernels_are_clean_under_synccheck() {
    require_gpu_and_sanitizer!();
    clean_under(Tool::Synccheck);
}

/// 200 cases of `rel` under `tool` in one batch, head_dim 40 (buggy) at five known positions and
/// 64 (clean) elsewhere: exactly those five get a `kind` finding, every other case passes.
fn batch_attribution(rel: &str, tool: Tool, kind: FindingKind) {
    let buggy = [3usize, 57, 58, 140, 199];
    let m = manifest(rel);
    let cases: Vec<Case> = (0..200).map(|i| case(&m, if buggy.contains(&i) { 40 } else { 64 }, i as u64)).collect();
    let (_dir, mut sup) = supervisor(&[tool], 200);
    let verdicts = run_all(&mut sup, &m, &cases);
    let flagged: Vec<usize> = verdicts.iter().enumerate().filter(|(_, v)| sanitizer_findings(v).iter().any(|f| f.kind == kind)).map(|(i, _)| i).collect();
    assert_eq!(flagged, buggy, "{tool} attribution");
    for (i, v) in verdicts.iter().enumerate() {
        if !buggy.contains(&i) {
            assert_eq!(v.outcome, Outcome::Pass, "{tool}: case {i}");
        }
    }
    eprintln!("{tool}: 200 cases, {} sanitizer process(es), flagged {flagged:?}", sup.starts);
}

#[test]
fn a_batch_of_200_attributes_exactly_the_5_buggy_cases_memcheck() {
    require_gpu_and_sanitizer!();
    // Each finding is fatal to its process; the next process takes the rest.
    batch_attribution("kernels/testing/oob_read_k.toml", Tool::Memcheck, FindingKind::SanitizerMemory);
}

#[test]
fn a_batch_of_200_attributes_exactly_the_5_buggy_cases_initcheck() {
    require_gpu_and_sanitizer!();
    // Non-fatal reports: one process serves the whole batch; markers split it.
    batch_attribution("kernels/testing/uninit_scratch.toml", Tool::Initcheck, FindingKind::UninitializedRead);
}

#[test]
fn a_batch_of_200_attributes_exactly_the_5_buggy_cases_synccheck() {
    require_gpu_and_sanitizer!();
    batch_attribution("kernels/testing/bad_syncwarp.toml", Tool::Synccheck, FindingKind::BarrierError);
}

#[test]
fn a_batch_of_200_attributes_exactly_the_5_buggy_cases_racecheck() {
    require_gpu_and_sanitizer!();
    batch_attribution("kernels/testing/race_q_row.toml", Tool::Racecheck, FindingKind::Race);
}
