//! `cudafuzz contract` as a user meets it on a host without a GPU: it says so, prints the probe
//! plan and exits 3. (On a GPU host this test is skipped with a printed reason; ci/gpu-check.sh runs the real thing.)

use std::path::PathBuf;
use std::process::Command;

use cudafuzz::core::exit;

mod common;

fn exe() -> PathBuf {
    std::env::var_os("CUDAFUZZ_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cudafuzz")))
}

#[test]
fn without_a_gpu_contract_prints_the_probe_plan_and_exits_3() {
    if !common::env::have(common::env::Need::NoGpu) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(exe())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["contract", "--kernel", "kernels/attention/fa_s512.toml", "--cases-per-probe", "2", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(exit::NO_GPU), "{out}{err}");
    assert!(err.contains("NO GPU") && err.contains("no probe was run"), "{err}");
    assert!(out.contains("probe plan for fa_s512: 114 probes in 39 families, 2 base cases, 230 cases in all"), "{out}");
    assert!(out.contains("base case: f16 batch=1 head_dim=64 heads_kv=1 heads_q=1 seq_k=1 seq_q=1 scale=0.125"), "{out}");
    // Per tensor (offset, pitch, padding, strides, orders, broadcast, 2^31) and per dim.
    for family in [
        "q base offset",
        "o row pitch",
        "v stride(1) (seq_k padded)",
        "k innermost stride",
        "o order",
        "q broadcast",
        "k largest element offset",
        "batch",
        "heads_q",
        "head_dim",
        "seq_k",
        "dtype",
        "causal",
    ] {
        assert!(out.lines().any(|l| l.trim_start().starts_with(family)), "{family} missing:\n{out}");
    }
    assert!(!dir.path().join("contract").exists(), "no seed without a run");
}

#[test]
fn contract_rejects_an_unknown_kernel_with_exit_2() {
    let o = Command::new(exe()).current_dir(env!("CARGO_MANIFEST_DIR")).args(["contract", "--kernel", "no_such_kernel"]).output().unwrap();
    assert_eq!(o.status.code(), Some(exit::USAGE), "{}", String::from_utf8_lossy(&o.stderr));
}
