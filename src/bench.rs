//! `cudafuzz bench`: throughput of the engine on small cases, with where the time goes.
//!
//! A benchmark, not a test: it prints a table (and JSON with `--json`) for the GPU it ran on.
//! Small cases are the fuzzer's bread and butter (batch·heads ≤ 8, seq ≤ 256, head_dim ≤ 128),
//! so their rate is what bounds how many cases a campaign tries per second.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::case::{Case, DecodeContext};
use crate::manifest::Manifest;
use crate::supervisor::{Pool, Slot, SupervisorError};
use crate::worker::{Outcome, RunOptions, StageTimes};

/// The `index`-th small case inside the kernel's contract: generated cases clamped to
/// batch·heads ≤ 8, seq ≤ 256 and head_dim ≤ 128, with the manifest's default parameters;
/// cases outside the contract are passed over (a sticky fault would measure worker restarts,
/// not the engine).
pub fn small_case(m: &Manifest, ctx: &DecodeContext, seed: u64, index: u64) -> Case {
    (0u64..)
        .map(|k| clamp_small(m, crate::cli::generated_case(ctx, seed, index.wrapping_mul(1 << 20).wrapping_add(k))))
        .find(|c| m.contract.check(c, &crate::plan::Plan::new(c)).is_inside())
        .expect("some generated case lies inside any satisfiable contract")
}

fn clamp_small(m: &Manifest, mut c: Case) -> Case {
    c.batch = c.batch.min(2);
    c.heads_kv = c.heads_kv.min(2);
    c.heads_q = c.heads_kv * (c.heads_q / c.heads_kv).min(2);
    c.seq_q = c.seq_q.min(256);
    c.seq_k = c.seq_k.min(256);
    c.head_dim = c.head_dim.min(128);
    c.scale = 1.0 / (c.head_dim as f32).sqrt();
    c.params = m.default_params();
    c
}

/// One benchmark row.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// What was measured.
    pub label: String,
    /// Cases run.
    pub cases: u64,
    /// Cases per second, end to end through the supervisor.
    pub cases_per_sec: f64,
    /// Mean stage times per case, microseconds.
    pub mean: StageTimes,
    /// Mean wall time per case not spent in any stage (supervisor ↔ worker messages; with
    /// several workers, negative overlap is clamped to 0), microseconds.
    pub overhead_us: u64,
    /// Cases that did not pass (should be 0 for a correct kernel).
    pub not_passed: u64,
}

/// The table `cudafuzz bench` prints.
pub fn table(rows: &[BenchRow]) -> String {
    let mut s = format!(
        "{:<34} {:>7} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>6}\n",
        "configuration", "cases", "cases/s", "prep_us", "comp_us", "upl_us", "ref_us", "kern_us", "judge_us", "ipc_us", "fail"
    );
    for r in rows {
        s.push_str(&format!(
            "{:<34} {:>7} {:>9.0} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>6}\n",
            r.label,
            r.cases,
            r.cases_per_sec,
            r.mean.prepare_us,
            r.mean.compile_us,
            r.mean.upload_us,
            r.mean.reference_us,
            r.mean.kernel_us,
            r.mean.judge_us,
            r.overhead_us,
            r.not_passed
        ));
    }
    s
}

/// Runs `cases` small cases with `opts` over every worker of `pool` and measures them; a
/// warm-up of 16 cases per worker (compiling and loading each configuration) is excluded.
pub fn measure_pool(pool: &mut Pool, m: &Manifest, opts: &RunOptions, cases: u64, label: &str) -> Result<BenchRow, SupervisorError> {
    let ctx = m.decode_context();
    let timeout = Duration::from_secs(10);
    let warm = |i: u64| Some(small_case(m, &ctx, 99, i));
    // Under a sanitizer one warm-up case per worker loads the caches; more would only measure
    // sanitizer start-ups.
    let per_worker = if pool.slots[0].sanitized() { 1 } else { 16 };
    pool.run_indexed(per_worker * pool.slots.len() as u64, None, m, opts, timeout, &warm, &mut |_, _| Ok(ControlFlow::Continue(())))?;
    let mut sum = StageTimes::default();
    let mut not_passed = 0;
    let make = |i: u64| Some(small_case(m, &ctx, 1, i));
    let started = Instant::now();
    pool.run_indexed(cases, None, m, opts, timeout, &make, &mut |_, slot| {
        if let Slot::Ran(_, v) = slot {
            if !matches!(v.outcome, Outcome::Pass) {
                not_passed += 1;
            }
            add(&mut sum, &v.times);
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(row(label, cases, started.elapsed().as_secs_f64(), &sum, not_passed))
}

fn add(sum: &mut StageTimes, t: &StageTimes) {
    sum.prepare_us += t.prepare_us;
    sum.compile_us += t.compile_us;
    sum.upload_us += t.upload_us;
    sum.reference_us += t.reference_us;
    sum.kernel_us += t.kernel_us;
    sum.judge_us += t.judge_us;
}

fn row(label: &str, cases: u64, secs: f64, sum: &StageTimes, not_passed: u64) -> BenchRow {
    let n = cases.max(1);
    let mean = StageTimes {
        prepare_us: sum.prepare_us / n,
        compile_us: sum.compile_us / n,
        upload_us: sum.upload_us / n,
        reference_us: sum.reference_us / n,
        kernel_us: sum.kernel_us / n,
        judge_us: sum.judge_us / n,
    };
    let staged = mean.prepare_us + mean.compile_us + mean.upload_us + mean.reference_us + mean.kernel_us + mean.judge_us;
    let per_case_us = (secs * 1e6 / n as f64) as u64;
    BenchRow {
        label: label.to_string(),
        cases,
        cases_per_sec: cases as f64 / secs,
        mean,
        overhead_us: per_case_us.saturating_sub(staged),
        not_passed,
    }
}
