//! GPU engine tests: real kernels, real faults, real worker restarts.
//!
//! Each test needs a CUDA GPU: where there is none it prints `SKIP <test>: <reason>` and returns
//! (`tests/common/env.rs`). A GPU host runs them as they are (`ci/gpu-check.sh`, under
//! `CUDAFUZZ_REQUIRE_GPU=1`, where a test that opens no GPU fails instead of skipping).

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use cudafuzz::core::case::Case;
use cudafuzz::core::finding::{FindingKind, Location, Oracle};
use cudafuzz::core::generate::DecodeContext;
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::plan::admits;
use cudafuzz::core::verdict::{Outcome, ReferenceChoice, RunOptions, Verdict};
use cudafuzz::run::supervisor::{Supervisor, SupervisorConfig, SPARES};

mod common;
use common::{attention_example, exe, root};

macro_rules! require_gpu {
    () => {
        if common::lacks_gpu(false) {
            return;
        }
    };
}

fn manifest(rel: &str) -> Manifest {
    common::manifest(rel)
}

fn supervisor(reference: bool) -> Supervisor {
    let journal = std::env::temp_dir().join(format!("cudafuzz-test-journal-{}.jsonl", std::process::id()));
    Supervisor::new(SupervisorConfig {
        exe: exe(),
        gpu: 0,
        reference_dir: reference.then(|| root().join("kernels/reference")),
        journal: Some(journal),
        stop: Arc::new(AtomicBool::new(false)),
        sanitizer: None,
    })
    .unwrap()
}

/// The small attention example case for the kernel of `m` (default params, dense tensors).
fn case_for(m: &Manifest) -> Case {
    attention_example(m)
}

fn run(sup: &mut Supervisor, m: &Manifest, case: &Case) -> Verdict {
    let timeout = m.launch.timeout_ms.map(Duration::from_millis).unwrap_or(Duration::from_secs(10));
    sup.run(case, m, &RunOptions::default(), timeout).unwrap()
}

fn findings(v: &Verdict) -> Vec<cudafuzz::core::finding::Finding> {
    match &v.outcome {
        Outcome::Fail { findings } => findings.clone(),
        Outcome::Pass => vec![],
        o => panic!("harness error: {o:?}"),
    }
}

#[test]
fn misaligned_q_faults_with_716_every_time_and_the_worker_restarts() {
    require_gpu!();
    let m = manifest("kernels/testing/vec_load_q.toml");
    let mut sup = supervisor(true);
    let aligned = case_for(&m);
    let mut shifted = aligned.clone();
    shifted.layout_mut("q").offset_bytes = 8;
    let mut faults = 0;
    for round in 0..20 {
        let v = run(&mut sup, &m, &aligned);
        assert_eq!(v.outcome, Outcome::Pass, "round {round}: aligned case must pass: {v:?}");
        let f = findings(&run(&mut sup, &m, &shifted));
        // Counted only when the run really faulted with 716 on q's 8-byte offset.
        let faulted = f.len() == 1
            && f[0].kind == FindingKind::MisalignedAddress
            && f[0].cuda_error.as_deref().unwrap_or("").contains("716")
            && f[0].alignment_of("q") == 8;
        if faulted {
            faults += 1;
        } else {
            eprintln!("round {round}: misaligned case did not fault with 716 on q: {f:?}");
        }
    }
    assert_eq!(faults, 20);
    // One start; the first fault starts SPARES spares, each later round takes the oldest and
    // warms the next (20 faults: 19 hand-overs, 1 + SPARES + 19 starts).
    assert_eq!(sup.spares_used, 19, "each worker lost after the first must be replaced by a warm spare");
    assert_eq!(sup.starts, 1 + SPARES as u64 + 19, "the worker must be replaced after every sticky fault");
    eprintln!("716 on 20/20 misaligned runs, 20/20 aligned passes, {} worker starts", sup.starts);
}

#[test]
fn out_of_bounds_write_is_caught_by_the_canary_without_a_sanitizer() {
    require_gpu!();
    let m = manifest("kernels/testing/oob_write.toml");
    let mut sup = supervisor(true);
    let f = findings(&run(&mut sup, &m, &case_for(&m)));
    let canary: Vec<_> = f.iter().filter(|f| f.kind == FindingKind::CanaryDamage).collect();
    assert!(!canary.is_empty(), "{f:?}");
    assert!(canary.iter().all(|f| f.oracle == Oracle::Canary && f.tensor.as_deref() == Some("o")), "{f:?}");
    assert!(
        canary.iter().any(|f| matches!(f.location, Some(Location::RedzoneAfter { bytes_past_end: 1..=4 }))),
        "the write just past o's last element must be located: {f:?}"
    );
    for x in &f {
        eprintln!("oob_write: {x}");
    }
}

#[test]
fn unwritten_last_row_is_caught_by_the_sentinel() {
    require_gpu!();
    let m = manifest("kernels/testing/skip_last_row.toml");
    let mut sup = supervisor(true);
    let case = case_for(&m);
    let f = findings(&run(&mut sup, &m, &case));
    let unwritten: Vec<_> = f.iter().filter(|f| f.kind == FindingKind::UnwrittenOutput).collect();
    assert_eq!(unwritten.len(), 1, "{f:?}");
    let u = unwritten[0];
    assert_eq!(u.oracle, Oracle::Sentinel);
    assert_eq!(u.tensor.as_deref(), Some("o"), "{u}");
    // One row (head_dim elements) per (batch, head).
    assert_eq!(u.count, case.dim("batch") * case.dim("heads_q") * case.dim("head_dim"));
    assert_eq!(u.location, Some(Location::Element { index: vec![0, 0, case.dim("seq_q") - 1, 0] }));
    eprintln!("skip_last_row: {u}");
}

#[test]
fn a_hang_is_killed_by_the_watchdog_and_the_run_continues() {
    require_gpu!();
    let hang = manifest("kernels/testing/hang.toml");
    let ok = manifest("kernels/testing/simple_attn.toml");
    let mut sup = supervisor(true);
    let started = std::time::Instant::now();
    let f = findings(&run(&mut sup, &hang, &case_for(&hang)));
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].kind, f[0].oracle), (FindingKind::Hang, Oracle::Watchdog), "{f:?}");
    eprintln!("hang reported after {:.1} s: {}", started.elapsed().as_secs_f64(), f[0]);
    let after = run(&mut sup, &ok, &case_for(&ok));
    assert_eq!(after.outcome, Outcome::Pass, "the next case must run on a fresh worker: {after:?}");
    // The hang is confirmed once in a fresh worker (with twice the time) before it is reported,
    // then the next case gets a third worker; both are warm spares, and as many more warm.
    assert_eq!((sup.starts, sup.spares_used), (1 + SPARES as u64 + 2, 2));
}

#[test]
fn gpu_reference_agrees_with_the_cpu_reference() {
    require_gpu!();
    let m = manifest("kernels/testing/simple_attn.toml");
    let mut sup = supervisor(true);
    let ctx = DecodeContext::new(&m);
    let mut checked = 0;
    for i in 0..60u64 {
        let mut case = cudafuzz::run::campaign::generated_case(&ctx, 7, i);
        case.params = m.default_params();
        if !admits(&m, &case) {
            continue;
        }
        // The same case judged by each reference must pass under both.
        for reference in [ReferenceChoice::Gpu, ReferenceChoice::Cpu] {
            let opts = RunOptions { determinism: false, reference, sanitizer: None, coverage: false, digest: false };
            let v = sup.run(&case, &m, &opts, Duration::from_secs(10)).unwrap();
            assert_eq!(v.outcome, Outcome::Pass, "{:?} reference, case {}: {v:?}", reference, case.summary());
            if reference == ReferenceChoice::Gpu {
                assert_eq!(v.reference, cudafuzz::core::verdict::ReferenceUsed::Gpu);
            }
        }
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} cases inside the contract");
    eprintln!("{checked} cases pass under both the GPU and the CPU reference");
}

#[test]
fn correct_kernel_passes_generated_cases_inside_its_contract() {
    require_gpu!();
    let m = manifest("kernels/testing/simple_attn.toml");
    let mut sup = supervisor(true);
    let ctx = DecodeContext::new(&m);
    let (mut pass, mut outside) = (0, 0);
    for i in 0..300u64 {
        let case = m.bind(cudafuzz::run::campaign::generated_case(&ctx, 11, i));
        let v = run(&mut sup, &m, &case);
        if !v.contract.is_inside() {
            outside += 1;
            continue;
        }
        assert_eq!(v.outcome, Outcome::Pass, "case {}: {v:?}", serde_json::to_string(&case).unwrap());
        pass += 1;
    }
    eprintln!("simple_attn: {pass} generated cases pass, {outside} outside its contract");
    assert!(pass > 200);
}

#[test]
fn cli_run_prints_verdicts_and_exits_nonzero_on_a_finding() {
    require_gpu!();
    let dir = tempfile::tempdir().unwrap();
    let m = manifest("kernels/testing/vec_load_q.toml");
    let mut case = case_for(&m);
    let good = dir.path().join("good.json");
    std::fs::write(&good, cudafuzz::core::corpus::Seed::new(case.clone()).to_json()).unwrap();
    case.layout_mut("q").offset_bytes = 8;
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, cudafuzz::core::corpus::Seed::new(case).to_json()).unwrap();
    let out = std::process::Command::new(exe()).current_dir(root()).args(["run", "--out"]).arg(dir.path().join("out")).arg(&good).arg(&bad).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(cudafuzz::core::exit::FINDINGS));
    assert!(stdout.contains("PASS") && stdout.contains("misaligned_address"), "{stdout}");
    assert!(Path::new(&dir.path().join("out/journal.jsonl")).exists());
}

#[test]
fn coverage_runs_report_the_kernel_paths_a_case_reached() {
    require_gpu!();
    let m = manifest("kernels/attention/flash_fwd.toml");
    let mut sup = supervisor(true);
    let opts = RunOptions { determinism: true, coverage: true, ..RunOptions::default() };
    let limit = Duration::from_secs(20);
    let aligned = case_for(&m);
    let mut odd = aligned.clone();
    odd.layout_mut("k").offset_bytes = 2; // k off the 16-byte path: its scalar load branch
    let a = sup.run(&aligned, &m, &opts, limit).unwrap();
    let b = sup.run(&odd, &m, &opts, limit).unwrap();
    assert_eq!((&a.outcome, &b.outcome), (&Outcome::Pass, &Outcome::Pass), "{a:?}\n{b:?}");
    let (ca, cb) = (a.coverage.expect("coverage of the aligned case"), b.coverage.expect("coverage of the offset case"));
    let slots = |c: &cudafuzz::core::coverage::Coverage| c.points.iter().map(|p| p.slot).collect::<Vec<_>>();
    eprintln!("aligned reached {:?}\noffset k reached {:?}", slots(&ca), slots(&cb));
    assert!(!ca.points.is_empty(), "a coverage build reaches some CF_COVER point");
    assert_ne!(slots(&ca), slots(&cb), "an offset k takes another load path");
    let plain = sup.run(&aligned, &m, &RunOptions { coverage: false, ..opts }, limit).unwrap();
    assert!(plain.coverage.is_none(), "no coverage unless asked for");
}

#[test]
fn a_tensor_pushed_past_int32_elements_has_memory_only_under_its_rows() {
    require_gpu!();
    use cudafuzz::core::generate::{offsets_past_int32, PastInt32};
    use cudafuzz::engine::arena::device::{pooled, DeviceArena};
    use cudafuzz::engine::arena::HostImage;
    let m = manifest("kernels/testing/simple_attn.toml");
    let mut case = case_for(&m);
    assert!(offsets_past_int32(&mut case, &m, "v", PastInt32::WideStride));
    let plan = cudafuzz::core::plan::Plan::new(&case, &m).unwrap();
    let inputs = cudafuzz::engine::data::generate(&case, &plan, &m);
    let image = HostImage::build(&case, &plan, &inputs);
    let v = plan.tensors.iter().find(|t| t.name == "v").unwrap().index;
    assert!(!image.holds_whole(v) && image.bytes[v].len() > 4 << 30);
    let _gpu = cudafuzz::engine::gpu::Gpu::open(0).unwrap();
    let mut staging = cudafuzz::engine::arena::staging::Staging::default();
    pooled(true);
    let arena = DeviceArena::upload(&image).unwrap();
    assert!(arena.is_sparse(v), "v's gigabyte gap is not backed by memory");
    assert!((0..plan.tensors.len()).filter(|&i| i != v).all(|i| !arena.is_sparse(i)));
    // What was uploaded comes back: every held byte, canaries and data.
    let after = arena.download(&image, &mut staging).unwrap();
    assert!((0..after.len()).all(|i| image.holds_same(i, &after[i])));
    // Written again (an output restored before the determinism run), it is still the image.
    arena.write(&image, v).unwrap();
    assert!(image.holds_same(v, &arena.download_one(&image, v).unwrap()));
    // Under a sanitizer every allocation is whole.
    pooled(false);
    let whole = DeviceArena::upload(&image).unwrap();
    assert!(!whole.is_sparse(v));
    assert!(image.holds_same(v, &whole.download_one(&image, v).unwrap()));
}

#[test]
fn workers_sharing_the_gpu_through_mps_report_each_case_as_it_runs_alone() {
    require_gpu!();
    use cudafuzz::run::supervisor::mps::{self, MpsDaemon};
    use cudafuzz::run::supervisor::Pool;
    if !mps::on_path() {
        println!("SKIP workers_sharing_the_gpu_through_mps_report_each_case_as_it_runs_alone: {} is not on PATH", mps::CONTROL);
        return;
    }
    let m = manifest("kernels/testing/vec_load_q.toml");
    let aligned = case_for(&m);
    let mut shifted = aligned.clone();
    shifted.layout_mut("q").offset_bytes = 8;
    let daemon = Arc::new(MpsDaemon::start().expect("the MPS daemon starts"));
    let mut slots: Vec<Supervisor> = (0..4).map(|_| supervisor(true)).collect();
    slots.iter_mut().for_each(|s| s.share_gpu(daemon.clone()));
    let mut pool = Pool::new(slots);
    // Every eighth case faults: under MPS its fault reaches the other workers' cases too, which
    // must still be reported as they run alone (a pass).
    let faults = |i: u64| i % 8 == 3;
    let make = |i: u64, _: &AtomicBool| Some(if faults(i) { shifted.clone() } else { aligned.clone() });
    let (mut passed, mut faulted) = (0, 0);
    let timeout = Duration::from_secs(10);
    pool.run_indexed(64, None, &m, &RunOptions::default(), timeout, &make, &mut |i, slot| {
        let cudafuzz::run::supervisor::Slot::Ran(_, v) = slot else { panic!("case {i} skipped") };
        if faults(i) {
            let f = findings(&v);
            assert!(f.len() == 1 && f[0].kind == FindingKind::MisalignedAddress, "case {i}: the misaligned case faults with 716: {f:?}");
            faulted += 1;
        } else {
            assert_eq!(v.outcome, Outcome::Pass, "case {i}: an aligned case passes, whatever faulted beside it: {v:?}");
            passed += 1;
        }
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    assert_eq!((passed, faulted), (56, 8));
    let sharing = pool.slots.iter().filter(|s| s.shares_gpu()).count();
    println!("under MPS: 56 aligned cases passed, 8 misaligned faulted with 716; {sharing} of 4 workers still share the GPU, {} worker starts", pool.starts());
}
