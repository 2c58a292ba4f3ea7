//! The supervisor against a scripted fake worker: hangs, crashes, sticky exits, the journal and
//! Ctrl-C, all without a GPU. The fake speaks the real protocol (one JSON object per line) and
//! picks its behaviour from the case's dim `seq_q`: 1 passes, 2 hangs after launching, 3 dies after
//! launching, 4 reports a sticky fault and exits like a poisoned worker does, 5 passes after 0.2 s.
//! A fake compute-sanitizer takes 0.3 s to start its program and writes no XML.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudafuzz::core::case::Case;
use cudafuzz::core::finding::{FindingKind, Oracle};
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::verdict::{Outcome, RunOptions};
use cudafuzz::run::supervisor::{Delivery, Pool, SanitizerPass, Slot, Supervisor, SupervisorConfig, SupervisorError, SPARES};

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
    5) sleep 0.2; echo "{\"event\":\"done\",\"id\":$id,\"verdict\":{\"outcome\":\"pass\",\"contract\":{\"verdict\":\"inside\"},\"reference\":\"cpu\",\"sticky\":false,\"times\":$times}}" ;;
    4) echo "{\"event\":\"done\",\"id\":$id,\"verdict\":{\"outcome\":\"fail\",\"findings\":[],\"contract\":{\"verdict\":\"inside\"},\"reference\":\"none\",\"sticky\":true,\"times\":$times}}"; exit 86 ;;
    *) echo "{\"event\":\"done\",\"id\":$id,\"verdict\":{\"outcome\":\"pass\",\"contract\":{\"verdict\":\"inside\"},\"reference\":\"cpu\",\"sticky\":false,\"times\":$times}}" ;;
  esac
done
"#;

const FAKE_SANITIZER: &str = r#"#!/usr/bin/env bash
while [ "$#" -gt 0 ] && [ "$1" != "--show-backtrace=device" ]; do shift; done
shift
sleep 0.3
exec "$@"
"#;

fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn fake_worker(dir: &Path) -> PathBuf {
    script(dir, "fake-cudafuzz", FAKE_WORKER)
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

fn only_finding(v: &cudafuzz::core::verdict::Verdict) -> cudafuzz::core::finding::Finding {
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
    // The hang is confirmed once in a fresh worker, then the next case gets a third; after the
    // first loss each replacement is a warm spare, and SPARES stay warming for the next losses.
    assert_eq!((sup.starts, sup.spares_used), (1 + SPARES as u64 + 2, 2));
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
    assert_eq!(sup.spares_used, 2, "each lost worker is replaced by a warm spare");
    assert_eq!(sup.starts, 1 + SPARES as u64 + 2, "one start, SPARES spares after the first loss, one more after each hand-over");
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

#[test]
fn clean_kernels_hold_no_spare_worker() {
    let (_dir, m, cfg) = setup();
    let mut sup = Supervisor::new(cfg).unwrap();
    for _ in 0..5 {
        assert_eq!(sup.run(&case(1), &m, &opts(), Duration::from_secs(5)).unwrap().outcome, Outcome::Pass);
    }
    assert_eq!((sup.starts, sup.spares_used), (1, 0));
}

fn pool_of(cfg: &SupervisorConfig, slots: usize) -> Pool {
    let slots = (0..slots)
        .map(|j| {
            let mut c = cfg.clone();
            c.journal = cfg.journal.as_ref().map(|p| p.with_extension(format!("{j}.jsonl")));
            Supervisor::new(c).unwrap()
        })
        .collect();
    Pool::new(slots)
}

#[test]
fn a_pool_that_breaks_returns_at_once_though_other_workers_are_in_slow_cases() {
    let (_dir, m, cfg) = setup();
    let mut pool = pool_of(&cfg, 4);
    // Index 0 passes; every other case hangs far longer than the test may take.
    let make = |i: u64, _: &AtomicBool| Some(case(if i == 0 { 1 } else { 2 }));
    let started = Instant::now();
    let mut seen = Vec::new();
    pool.run_indexed(100, None, &m, &opts(), Duration::from_secs(60), &make, &mut |i, _| {
        seen.push(i);
        Ok(std::ops::ControlFlow::Break(()))
    })
    .unwrap();
    let returned = started.elapsed();
    drop(pool);
    let dropped = started.elapsed();
    assert_eq!(seen, [0]);
    assert!(returned < Duration::from_secs(1), "run_indexed returned after {returned:?}");
    assert!(dropped - returned < Duration::from_millis(500), "dropping the pool took {:?}", dropped - returned);
}

#[test]
fn a_pool_ticks_while_its_cases_run_and_a_tick_can_end_the_run() {
    let (_dir, m, cfg) = setup();
    let mut pool = pool_of(&cfg, 2);
    // Index 0 passes; every later case hangs: only ticks come after the first result.
    let make = |i: u64, _: &AtomicBool| Some(case(if i == 0 { 1 } else { 2 }));
    let started = Instant::now();
    let (mut cases, mut ticks) = (Vec::new(), 0);
    pool.run_indexed_ticking(100, None, &m, &opts(), Duration::from_secs(60), &make, &mut |d| {
        match d {
            Delivery::Case(i, _) => cases.push(i),
            Delivery::Tick => ticks += 1,
            Delivery::Early(..) => panic!("no case fails"),
        }
        Ok(if ticks >= 5 { std::ops::ControlFlow::Break(()) } else { std::ops::ControlFlow::Continue(()) })
    })
    .unwrap();
    let took = started.elapsed();
    assert_eq!(cases, [0]);
    assert_eq!(ticks, 5, "the run ends at the tick that says so");
    assert!(took < Duration::from_secs(2), "five ticks of {:?} took {took:?}", cudafuzz::run::supervisor::TICK);
}

#[test]
fn a_failed_case_is_shown_early_while_an_earlier_one_runs_and_still_comes_in_order() {
    let (_dir, m, cfg) = setup();
    let mut pool = pool_of(&cfg, 2);
    // Case 0 hangs until the watchdog (1 s); case 1 fails at once on the other worker.
    let make = |i: u64, _: &AtomicBool| Some(case(if i == 0 { 2 } else { 4 }));
    let mut seen = Vec::new();
    pool.run_indexed_ticking(2, None, &m, &opts(), Duration::from_secs(1), &make, &mut |d| {
        match d {
            Delivery::Case(i, _) => seen.push(format!("case {i}")),
            Delivery::Early(i, v) => seen.push(format!("early {i} {}", matches!(v.outcome, cudafuzz::core::verdict::Outcome::Fail { .. }))),
            Delivery::Tick => {}
        }
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    assert_eq!(seen, ["early 1 true", "case 0", "case 1"]);
}

#[test]
fn the_first_worker_ready_takes_case_zero() {
    let (dir, m, cfg) = setup();
    // Seven workers take 1.5 s to start, one starts at once: case #0 must not wait for a slow
    // one (case numbers are taken once a worker is ready; before, the first slot to ask took
    // case #0 and waited for its worker, here 7 times in 8).
    let slow = script(dir.path(), "slow-cudafuzz", &FAKE_WORKER.replacen("#!/usr/bin/env bash\n", "#!/usr/bin/env bash\nsleep 1.5\n", 1));
    let mut slots: Vec<Supervisor> = (0..7).map(|_| Supervisor::new(SupervisorConfig { exe: slow.clone(), ..cfg.clone() }).unwrap()).collect();
    slots.push(Supervisor::new(cfg.clone()).unwrap());
    let mut pool = Pool::new(slots);
    let make = |_: u64, _: &AtomicBool| Some(case(1));
    let started = Instant::now();
    let mut first = None;
    pool.run_indexed(8, None, &m, &opts(), Duration::from_secs(5), &make, &mut |i, _| {
        first.get_or_insert((i, started.elapsed()));
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    let (i, at) = first.unwrap();
    assert_eq!(i, 0);
    assert!(at < Duration::from_secs(1), "case #0 was delivered after {at:?}, behind the slow start");
}

#[test]
fn a_pool_abandons_cases_still_running_shortly_after_its_deadline() {
    let (_dir, m, cfg) = setup();
    let mut pool = pool_of(&cfg, 2);
    let make = |i: u64, _: &AtomicBool| Some(case(if i < 3 { 1 } else { 2 }));
    let started = Instant::now();
    let mut seen = Vec::new();
    let deadline = started + Duration::from_millis(500);
    pool.run_indexed(100, Some(deadline), &m, &opts(), Duration::from_secs(60), &make, &mut |i, _| {
        seen.push(i);
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    let took = started.elapsed();
    assert_eq!(seen, [0, 1, 2], "the hung cases are not reported");
    let latest = Duration::from_millis(500) + cudafuzz::run::supervisor::DEADLINE_GRACE + Duration::from_millis(700);
    assert!(took < latest, "returned after {took:?}");
}

fn sanitized(cfg: &SupervisorConfig, dir: &Path, batch: usize) -> SupervisorConfig {
    let sanitizer = cudafuzz::run::sanitizer::Sanitizer { path: script(dir, "fake-compute-sanitizer", FAKE_SANITIZER), version: "fake".into() };
    let pass = SanitizerPass { sanitizer, tools: vec![cudafuzz::run::sanitizer::Tool::Memcheck], dir: dir.to_path_buf(), batch };
    SupervisorConfig { sanitizer: Some(pass), ..cfg.clone() }
}

#[test]
fn sanitizer_batches_grow_from_a_measuring_pair_and_stop_at_the_deadline() {
    let (dir, m, cfg) = setup();
    let mut pool = Pool::new(vec![Supervisor::new(sanitized(&cfg, dir.path(), 200)).unwrap()]);
    assert_eq!((pool.max_chunk(), pool.slots[0].next_chunk(None)), (200, 2));
    // Cases of 0.2 s in processes that take 0.3 s to start: after the first pair, batches
    // are sized to the time left, never past it.
    let make = |_: u64, _: &AtomicBool| Some(case(5));
    let started = Instant::now();
    let mut seen = Vec::new();
    pool.run_indexed(1000, Some(started + Duration::from_secs(3)), &m, &opts(), Duration::from_secs(5), &make, &mut |i, _| {
        seen.push(i);
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(4000), "a 3 s run took {took:?}");
    assert_eq!(seen, (0..seen.len() as u64).collect::<Vec<_>>(), "the cases run are a prefix, reported in order");
    assert!(seen.len() >= 5, "only {} cases in 3 s", seen.len());
    // The fake writes no XML: its processes are counted, a few cases each.
    assert!(pool.starts() >= 2 && pool.starts() < seen.len() as u64, "{} processes for {} cases", pool.starts(), seen.len());
    let next = pool.slots[0].next_chunk(None);
    assert!((10..=30).contains(&next), "6 s of 0.2 s cases: {next}");
}

/// Natively a pool writes each slot's next case to its worker while the case before runs. A
/// worker that dies, faults or hangs with the case before takes that request with it: the case
/// is sent again to the next worker and ends as it would alone. A run that ends with a request
/// still waiting in the worker (here one that kills its worker) leaves nothing behind for the
/// next run's cases to be blamed for.
#[test]
fn a_case_written_ahead_ends_as_it_would_alone_and_outlives_no_run() {
    let (_dir, m, cfg) = setup();
    let mut pool = pool_of(&cfg, 1);
    let kinds = [1u64, 3, 1, 4, 1, 5, 1, 3, 3, 1, 2, 1];
    let make = |i: u64, _: &AtomicBool| Some(case(kinds[i as usize]));
    let mut got = Vec::new();
    pool.run_indexed(kinds.len() as u64, None, &m, &opts(), Duration::from_millis(500), &make, &mut |i, slot| {
        if let Slot::Ran(_, v) = slot {
            got.push((i, *v));
        }
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    assert_eq!(got.iter().map(|(i, _)| *i).collect::<Vec<_>>(), (0..kinds.len() as u64).collect::<Vec<_>>());
    for (i, v) in &got {
        let kind = kinds[*i as usize];
        match kind {
            1 | 5 => assert_eq!(v.outcome, Outcome::Pass, "case {i}"),
            3 => assert_eq!(only_finding(v).kind, FindingKind::WorkerCrash, "case {i}"),
            2 => assert_eq!(only_finding(v).kind, FindingKind::Hang, "case {i}"),
            _ => assert!(v.sticky, "case {i}"),
        }
    }
    // The run ends at its first result while the next case, one that kills its worker, waits
    // in the worker; the next run's cases all pass.
    let ends = |i: u64, _: &AtomicBool| Some(case(if i == 0 { 5 } else { 3 }));
    pool.run_indexed(4, None, &m, &opts(), Duration::from_secs(5), &ends, &mut |_, _| Ok(std::ops::ControlFlow::Break(()))).unwrap();
    let passes = |_: u64, _: &AtomicBool| Some(case(1));
    let mut outcomes = Vec::new();
    pool.run_indexed(3, None, &m, &opts(), Duration::from_secs(5), &passes, &mut |_, slot| {
        if let Slot::Ran(_, v) = slot {
            outcomes.push(v.outcome);
        }
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    assert_eq!(outcomes, vec![Outcome::Pass; 3]);
}

/// Several slots whose `make` waits for earlier results (as a campaign's steering does) still
/// run every case, in order: a slot never waits, while its own case runs, for a case of its own
/// that is not done. A run cut by its deadline ends within the grace, and its workers serve the
/// next run's cases as if nothing had been left in them.
#[test]
fn slots_whose_cases_wait_for_earlier_results_and_a_deadline_leave_nothing_behind() {
    let (_dir, m, cfg) = setup();
    let mut pool = pool_of(&cfg, 3);
    let delivered = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let make = |i: u64, abort: &AtomicBool| {
        // Waits for every case two or more behind it to be delivered.
        while !(0..i.saturating_sub(1)).all(|j| delivered.lock().unwrap().contains(&j)) {
            if abort.load(Ordering::SeqCst) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Some(case(if i % 4 == 2 { 5 } else { 1 }))
    };
    let mut seen = Vec::new();
    pool.run_indexed(30, None, &m, &opts(), Duration::from_secs(5), &make, &mut |i, slot| {
        delivered.lock().unwrap().insert(i);
        assert!(matches!(&slot, Slot::Ran(_, v) if v.outcome == Outcome::Pass), "case {i}: {slot:?}");
        seen.push(i);
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    assert_eq!(seen, (0..30).collect::<Vec<_>>());

    let slow = |_: u64, _: &AtomicBool| Some(case(5));
    let started = Instant::now();
    let mut cut = Vec::new();
    pool.run_indexed(1000, Some(Instant::now() + Duration::from_millis(700)), &m, &opts(), Duration::from_secs(5), &slow, &mut |i, _| {
        cut.push(i);
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    assert!(started.elapsed() < Duration::from_millis(700) + cudafuzz::run::supervisor::DEADLINE_GRACE, "{:?}", started.elapsed());
    assert!(!cut.is_empty() && cut.windows(2).all(|w| w[0] < w[1]), "{cut:?}");
    let passes = |_: u64, _: &AtomicBool| Some(case(1));
    let mut outcomes = Vec::new();
    pool.run_indexed(6, None, &m, &opts(), Duration::from_secs(5), &passes, &mut |_, slot| {
        if let Slot::Ran(_, v) = slot {
            outcomes.push(v.outcome);
        }
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    assert_eq!(outcomes, vec![Outcome::Pass; 6]);
}
