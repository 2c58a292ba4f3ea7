//! `cudafuzz bench`: throughput of the engine by case size, with where the time goes.
//!
//! A benchmark, not a test: it prints a table (and JSON with `--json`) for the GPU it ran on.
//! Small cases are the fuzzer's bread and butter (batch·heads ≤ 8, seq ≤ 256, head_dim ≤ 128),
//! so their rate is what bounds how many cases a campaign tries per second; medium and large
//! cases show how the cost grows with the tensors. Each row also gives the floor: the rate if a
//! case cost only its upload, launch and download ([`BenchRow::floor_per_sec`]).

use std::ops::ControlFlow;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::core::case::Case;
use crate::core::generate::{past_int32_variant, reaches_past_int32, DecodeContext, PastInt32};
use crate::core::manifest::Manifest;
use crate::core::plan::Plan;
use crate::core::verdict::{Outcome, RunOptions, StageTimes};
use crate::run::supervisor::{Pool, Slot, SupervisorError};

/// How big the benchmarked cases are. A dim is a *count* when its manifest caps random draws
/// at 16 or less (batch, heads); the *innermost* dim is the last dimension of the first input
/// (head_dim, cols); every other dim is a *length* (sequences, rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CaseSize {
    /// Counts ≤ 2, lengths ≤ 256, innermost ≤ 128: what fuzzing mostly draws.
    Small,
    /// Counts ≤ 2, lengths 256..=1024, innermost ≤ 128.
    Medium,
    /// Counts ≤ 2 (the first one 1), lengths 2048..=4096, innermost 64..=128.
    Large,
    /// A small case with one tensor pushed past 2³¹ elements
    /// ([`crate::core::generate::offsets_past_int32`]): a 4–8 GiB allocation holding a few elements,
    /// the case `cudafuzz fuzz` schedules every 512 cases.
    PastInt32,
}

impl std::str::FromStr for CaseSize {
    type Err = String;

    /// The names `--sizes` takes.
    fn from_str(s: &str) -> Result<CaseSize, String> {
        CaseSize::from_name(s.trim()).ok_or_else(|| format!("`{s}`: expected small, medium, large or past-int32"))
    }
}

impl CaseSize {
    /// Parses `small`, `medium`, `large` or `past-int32`.
    pub fn from_name(name: &str) -> Option<CaseSize> {
        match name {
            "small" => Some(CaseSize::Small),
            "medium" => Some(CaseSize::Medium),
            "large" => Some(CaseSize::Large),
            "past-int32" => Some(CaseSize::PastInt32),
            _ => None,
        }
    }

    /// The name [`CaseSize::from_name`] reads.
    pub fn name(self) -> &'static str {
        match self {
            CaseSize::Small => "small",
            CaseSize::Medium => "medium",
            CaseSize::Large => "large",
            CaseSize::PastInt32 => "past-int32",
        }
    }

    /// (length lower bound, length upper bound, innermost lower bound, count cap).
    fn bounds(self) -> (u64, u64, u64, u64) {
        match self {
            CaseSize::Small | CaseSize::PastInt32 => (1, 256, 1, 2),
            CaseSize::Medium => (256, 1024, 1, 2),
            CaseSize::Large => (2048, 4096, 64, 2),
        }
    }
}

/// Which of the kernel's cases a benchmark runs, beyond its contract and size class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alignment {
    /// Any case.
    Any,
    /// Only cases whose every tensor has its base and strides at multiples of this many bytes:
    /// the cases a kernel that faults on the others (fa_s512) passes.
    Aligned(u64),
    /// Only cases with some tensor not so aligned: on such a kernel every case faults, so the
    /// row measures a worker's restart.
    Misaligned(u64),
}

impl Alignment {
    /// Whether case `c` of `m` is one this alignment runs.
    pub fn keeps(self, m: &Manifest, c: &Case) -> bool {
        let aligned = |bytes: u64| Plan::new(c, m).is_ok_and(|p| p.tensors.iter().all(|t| t.aligned_to(bytes)));
        match self {
            Alignment::Any => true,
            Alignment::Aligned(bytes) => aligned(bytes),
            Alignment::Misaligned(bytes) => !aligned(bytes),
        }
    }
}

/// The `index`-th small case inside the kernel's contract (see [`sized_case`]).
pub fn small_case(m: &Manifest, ctx: &DecodeContext, seed: u64, index: u64) -> Case {
    sized_case(m, ctx, CaseSize::Small, Alignment::Any, seed, index)
}

/// The `index`-th case of a size class inside the kernel's contract: generated cases brought
/// into the class's bounds, with the manifest's default parameters; cases outside the contract
/// or not of the `alignment` asked for are passed over (a sticky fault would measure worker
/// restarts, not the engine).
pub fn sized_case(m: &Manifest, ctx: &DecodeContext, size: CaseSize, alignment: Alignment, seed: u64, index: u64) -> Case {
    let inside = |c: &Case| crate::core::plan::admits(m, c);
    let case = (0u64..)
        .map(|k| clamp(m, size, crate::run::campaign::generated_case(ctx, seed, index.wrapping_mul(1 << 20).wrapping_add(k))))
        .take(1 << 16)
        .find(|c| inside(c) && !reaches_past_int32(c, m) && alignment.keeps(m, c))
        .unwrap_or_else(|| clamp(m, CaseSize::Small, crate::run::campaign::generated_case(ctx, seed, index)));
    if size != CaseSize::PastInt32 {
        return case;
    }
    let eligible = ctx.past_int32_tensors(PastInt32::WideStride);
    if eligible.is_empty() {
        return case;
    }
    past_int32_variant(&case, m, &eligible[(index % eligible.len() as u64) as usize], PastInt32::WideStride).filter(inside).unwrap_or(case)
}

/// A generated case brought into a size class's bounds (see [`CaseSize`]); relations between
/// dims are restored afterwards, and scalars whose choices depend on the dims re-evaluated.
fn clamp(m: &Manifest, size: CaseSize, mut c: Case) -> Case {
    let (len_lo, len_hi, inner_lo, cap) = size.bounds();
    let innermost = m.tensors.iter().find(|t| t.role == crate::core::manifest::Role::Input).and_then(|t| t.dim_name(t.rank() - 1)).map(str::to_string);
    for (i, d) in m.dims.iter().enumerate() {
        let v = c.dim(&d.name);
        let (lo, hi) = if d.cap <= 16 {
            (d.range[0], cap.min(if size == CaseSize::Large && i == 0 { 1 } else { cap }).max(d.range[0]))
        } else if innermost.as_deref() == Some(d.name.as_str()) {
            (inner_lo.max(d.range[0]), 128.min(d.range[1]).max(d.range[0]))
        } else {
            (len_lo.max(d.range[0]), len_hi.min(d.range[1]).max(d.range[0]))
        };
        let lo = lo.min(hi);
        let into = if d.cap <= 16 || innermost.as_deref() == Some(d.name.as_str()) {
            v.clamp(lo, hi)
        } else if v >= lo && v <= hi {
            v
        } else {
            lo + v % (hi - lo + 1)
        };
        c.dims.insert(d.name.clone(), into);
    }
    crate::core::generate::relations::repair(&mut c, m, 0);
    c.params = m.default_params();
    if let Ok(plan) = crate::core::plan::Plan::new(&c, m) {
        for s in &m.scalars {
            let allowed: Vec<crate::core::case::Scalar> = s.choices.iter().filter_map(|ch| m.choice_value(s, ch, &plan.vars)).collect();
            if !allowed.is_empty() && !c.scalar(&s.name).is_some_and(|v| allowed.contains(&v) || matches!(v, crate::core::case::Scalar::Bool(_))) {
                c.scalars.insert(s.name.clone(), allowed[0]);
            }
        }
    }
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
    /// Cases per second if a case cost only its upload and its launch, synchronisation and
    /// download (`upl` + `kern`, per worker): what a harness that checks nothing would reach.
    pub floor_per_sec: f64,
}

/// The table `cudafuzz bench` prints.
pub fn table(rows: &[BenchRow]) -> String {
    let mut s = format!(
        "{:<44} {:>7} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>6}\n",
        "configuration", "cases", "cases/s", "floor/s", "prep_us", "comp_us", "upl_us", "ref_us", "kern_us", "judge_us", "ipc_us", "fail"
    );
    for r in rows {
        s.push_str(&format!(
            "{:<44} {:>7} {:>9} {:>9.0} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>6}\n",
            r.label,
            r.cases,
            // A row of faulting cases runs below 10 a second: its decimal is the measurement.
            if r.cases_per_sec < 10.0 { format!("{:.2}", r.cases_per_sec) } else { format!("{:.0}", r.cases_per_sec) },
            r.floor_per_sec,
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

/// What a benchmark row runs: the kernel of `run` on cases drawn from `drawn` (the same
/// manifest, or another way of calling the same kernel, so that two rows run the same cases),
/// of one size and alignment.
#[derive(Clone, Copy, Debug)]
pub struct Workload<'a> {
    /// The manifest whose kernel runs.
    pub run: &'a Manifest,
    /// The manifest the cases are drawn from.
    pub drawn: &'a Manifest,
    /// Their size class.
    pub size: CaseSize,
    /// Their alignment.
    pub alignment: Alignment,
}

/// Runs `cases` cases of `work` with `opts` over every worker of `pool` and measures them; a
/// warm-up of 16 cases per worker (compiling and loading each configuration) is excluded.
pub fn measure_pool(pool: &mut Pool, work: Workload<'_>, opts: &RunOptions, cases: u64, label: &str) -> Result<BenchRow, SupervisorError> {
    let Workload { run: m, drawn, size, alignment } = work;
    let ctx = DecodeContext::new(drawn);
    let timeout = Duration::from_secs(30);
    let warm = |i: u64, _: &AtomicBool| Some(sized_case(drawn, &ctx, size, alignment, 99, i));
    // Under a sanitizer one warm-up case per worker loads the caches; more would only measure
    // sanitizer start-ups.
    let per_worker = if pool.slots[0].sanitized() { 1 } else { 16 };
    pool.run_indexed(per_worker * pool.slots.len() as u64, None, m, opts, timeout, &warm, &mut |_, _| Ok(ControlFlow::Continue(())))?;
    let mut sum = StageTimes::default();
    let mut not_passed = 0;
    let make = |i: u64, _: &AtomicBool| Some(sized_case(drawn, &ctx, size, alignment, 1, i));
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
    Ok(row(label, cases, started.elapsed().as_secs_f64(), &sum, not_passed, pool.slots.len()))
}

fn add(sum: &mut StageTimes, t: &StageTimes) {
    sum.prepare_us += t.prepare_us;
    sum.compile_us += t.compile_us;
    sum.upload_us += t.upload_us;
    sum.reference_us += t.reference_us;
    sum.kernel_us += t.kernel_us;
    sum.judge_us += t.judge_us;
}

fn row(label: &str, cases: u64, secs: f64, sum: &StageTimes, not_passed: u64, workers: usize) -> BenchRow {
    let n = cases.max(1);
    let mean = StageTimes {
        prepare_us: sum.prepare_us / n,
        compile_us: sum.compile_us / n,
        upload_us: sum.upload_us / n,
        reference_us: sum.reference_us / n,
        kernel_us: sum.kernel_us / n,
        judge_us: sum.judge_us / n,
        ..StageTimes::default()
    };
    let staged = mean.prepare_us + mean.compile_us + mean.upload_us + mean.reference_us + mean.kernel_us + mean.judge_us;
    let per_case_us = (secs * 1e6 / n as f64) as u64;
    let floor_per_sec = workers as f64 * 1e6 / (mean.upload_us + mean.kernel_us).max(1) as f64;
    BenchRow {
        label: label.to_string(),
        cases,
        cases_per_sec: cases as f64 / secs,
        mean,
        overhead_us: per_case_us.saturating_sub(staged),
        not_passed,
        floor_per_sec,
    }
}
