//! The supervisor against a scripted fake worker: hangs, crashes, sticky exits, the journal and
//! Ctrl-C, all without a GPU. The fake speaks the real protocol (one JSON object per line) and
//! picks its behaviour from the case's dim `seq_q`: 1 passes, 2 hangs after launching, 3 dies after
//! launching, 4 reports a sticky fault and exits like a poisoned worker does.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudafuzz::case::Case;
use cudafuzz::finding::{FindingKind, Oracle};
use cudafuzz::manifest::Manifest;
use cudafuzz::supervisor::{Pool, Slot, Supervisor, SupervisorConfig, SupervisorError};
use cudafuzz::worker::{Outcome, RunOptions};

mod common;
use common::attention_example_named;

const FAKE_WORKER: &str = r#"#!/usr/bin/env bash
echo '{"event":"ready","gpu":{"ordinal":0,"name":"Fake GPU","arch":"sm_90","sm_count":1,"max_smem_optin":232448,"total_mem":1,"driver_version":13000}}'
times='{"prepare_us":1,"compile_us":0,"upload_us":0,"reference_us":0,"kernel_us":0,"judge_us":0}'
while IFS= read -r line; do
  id=$(printf '%s' "$line" | grep -o '"id":[0-9]*' | head -n1 | cut -d: -f2)
  seq=$(printf '%s' "$line" | grep -o '"seq_q":[0-9]*' | head -n1 | cut -d: -f2)
  echo "{\"event\":\"launched\",\"id\":$id}"
  case "$seq" in
    2) sleep 600 ;;
    3) exit 9 ;;
    4) echo "{\"event\":\"done\",\"id\":$id,\"verdict\":{\"outcome\":\"fail\",\"findings\":[],\"contract\":{\"verdict\":\"inside\"},\"reference\":\"none\",\"sticky\":true,\"times\":$times}}"; exit 86 ;;
    *) echo "{\"event\":\"done\",\"id\":$id,\"verdict\":{\"outcome\":\"pass\",\"contract\":{\"verdict\":\"inside\"},\"reference\":\"cpu\",\"sticky\":false,\"times\":$times}}" ;;
  esac
done
"#;

fn fake_worker(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("fake-cudafuzz");
    std::fs::write(&p, FAKE_WORKER).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn setup() -> (tempfile::TempDir, Manifest, SupervisorConfig) {
    let dir = tempfile::tempdir().unwrap();
    let manifest = Manifest::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/testing/simple_attn.toml")).unwrap();
    let cfg = SupervisorConfig {
        exe: fake_worker(dir.path()),
        gpu: 0,
        reference_dir: None,
        journal: Some(dir.path().join("journal.jsonl")),
        stop: Arc::new(AtomicBool::new(false)),
        sanitizer: None,
    };
    (dir, manifest, cfg)
}

fn case(seq_q: u64) -> Case {
    let mut c = attention_example_named("kernels/testing/simple_attn.toml", "simple_attn");
    c.dims.insert("seq_q".into(), seq_q);
    c
}

fn opts() -> RunOptions {
    RunOptions { determinism: false, ..Default::default() }
}

fn only_finding(v: &cudafuzz::worker::Verdict) -> cudafuzz::finding::Finding {
    match &v.outcome {
        Outcome::Fail { findings } if findings.len() == 1 => findings[0].clone(),
        o => panic!("expected one finding, got {o:?}"),
    }
}

#[test]
fn a_hang_becomes_a_watchdog_finding_and_the_next_case_gets_a_new_worker() {
    let (_dir, m, cfg) = setup();
    let mut sup = Supervisor::new(cfg).unwrap();
    let started = Instant::now();
    let v = sup.run(&case(2), &m, &opts(), Duration::from_millis(200)).unwrap();
    let f = only_finding(&v);
    assert_eq!((f.kind, f.oracle), (FindingKind::Hang, Oracle::Watchdog));
    assert!(started.elapsed() < Duration::from_secs(10), "the watchdog fired late: {:?}", started.elapsed());
    assert!(f.detail.contains("did not finish"), "{}", f.detail);
    assert_eq!(sup.run(&case(1), &m, &opts(), Duration::from_secs(5)).unwrap().outcome, Outcome::Pass);
    // The hang is confirmed once in a fresh worker (a second start), then the next case gets a
    // third worker.
    assert_eq!(sup.starts, 3);
}

#[test]
fn a_dying_worker_becomes_a_crash_finding_with_its_exit_status() {
    let (_dir, m, cfg) = setup();
    let mut sup = Supervisor::new(cfg).unwrap();
    let f = only_finding(&sup.run(&case(3), &m, &opts(), Duration::from_secs(5)).unwrap());
    assert_eq!((f.kind, f.oracle), (FindingKind::WorkerCrash, Oracle::Worker));
    assert!(f.detail.contains("status 9") && f.detail.contains("while the kernel ran"), "{}", f.detail);
    assert_eq!(sup.run(&case(1), &m, &opts(), Duration::from_secs(5)).unwrap().outcome, Outcome::Pass);
}

#[test]
fn a_sticky_verdict_retires_the_worker_and_every_case_is_journalled_first() {
    let (dir, m, cfg) = setup();
    let mut sup = Supervisor::new(cfg).unwrap();
    for seq in [1, 4, 1, 4, 1] {
        let v = sup.run(&case(seq), &m, &opts(), Duration::from_secs(5)).unwrap();
        assert_eq!(v.sticky, seq == 4);
    }
    assert_eq!(sup.starts, 3, "one start, then one after each sticky verdict");
    let journal = std::fs::read_to_string(dir.path().join("journal.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = journal.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // Each case: its entry (with the full case) before its outcome.
    assert_eq!(lines.len(), 10);
    for (i, pair) in lines.chunks(2).enumerate() {
        assert_eq!(pair[0]["id"], i as u64);
        assert!(pair[0]["case"]["dims"]["seq_q"].is_u64(), "{}", pair[0]);
        assert_eq!(pair[1]["id"], i as u64);
        assert!(pair[1]["outcome"].is_object() || pair[1]["outcome"].is_string(), "{}", pair[1]);
    }
}

#[test]
fn the_stop_flag_interrupts_a_running_case() {
    let (_dir, m, cfg) = setup();
    let stop = cfg.stop.clone();
    let mut sup = Supervisor::new(cfg).unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::SeqCst);
    });
    let started = Instant::now();
    let r = sup.run(&case(2), &m, &opts(), Duration::from_secs(60));
    t.join().unwrap();
    assert!(matches!(r, Err(SupervisorError::Interrupted)), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_pool_reports_results_in_case_order() {
    let (_dir, m, cfg) = setup();
    let slots = (0..3)
        .map(|j| {
            let mut c = cfg.clone();
            c.journal = cfg.journal.as_ref().map(|p| p.with_extension(format!("{j}.jsonl")));
            Supervisor::new(c).unwrap()
        })
        .collect();
    let mut pool = Pool::new(slots);
    let mut seen = Vec::new();
    let make = |i: u64, _: &std::sync::atomic::AtomicBool| (i % 5 != 4).then(|| case(if i % 7 == 3 { 4 } else { 1 }));
    pool.run_indexed(40, None, &m, &opts(), Duration::from_secs(5), &make, &mut |i, slot| {
        seen.push((i, matches!(slot, Slot::Skipped)));
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), (0..40).collect::<Vec<_>>());
    assert!(seen.iter().all(|&(i, skipped)| skipped == (i % 5 == 4)));
}
