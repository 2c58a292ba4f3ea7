//! Shrinking a failing case while it keeps failing the same way.
//!
//! Structured, not byte-level: each step proposes a simpler case along one axis (batch and heads
//! to 1, shorter sequences, a smaller head_dim, zero offsets, no padding, the plain layout, no
//! causal mask, plain data), and a step is kept when the case still produces the target finding
//! signature. Steps repeat until none is kept or the run budget is spent. Pure logic: the caller
//! supplies `still_fails` (which runs the case on the GPU) and `allowed` (the contract).

use crate::case::{Case, Dim, TensorId, ValueDist};
use crate::generate::offsets_past_int32;
use crate::plan::Plan;

/// The result of a minimisation.
#[derive(Clone, Debug, PartialEq)]
pub struct Minimized {
    /// The smallest case found that still fails the same way.
    pub case: Case,
    /// Candidate cases run.
    pub runs: usize,
    /// Candidates kept (each made the case simpler).
    pub kept: usize,
}

/// Simpler variants of `c`, most aggressive first along each axis.
///
/// A tensor past 2³¹ elements ([`offsets_past_int32`]) stays past it in every candidate but
/// one: its padding is recomputed after the shape shrinks (otherwise no smaller shape could
/// keep a 32-bit overflow), and a first candidate drops it, for bugs that never needed it.
pub fn candidates(c: &Case) -> Vec<Case> {
    let plan = Plan::new(c);
    let past: Vec<TensorId> = TensorId::ALL.into_iter().filter(|&t| plan.tensor(t).reaches_past_int32()).collect();
    let mut out = Vec::new();
    for &t in &past {
        let mut n = c.clone();
        n.layouts.get_mut(t).pad = [0; 4];
        out.push(n);
    }
    let mut push = |f: &dyn Fn(&mut Case)| {
        let mut n = c.clone();
        f(&mut n);
        let now = Plan::new(&n);
        for &t in &past {
            if !now.tensor(t).reaches_past_int32() {
                offsets_past_int32(&mut n, t);
            }
        }
        if &n != c {
            out.push(n);
        }
    };
    push(&|n| n.batch = 1);
    push(&|n| {
        n.heads_q = 1;
        n.heads_kv = 1;
    });
    push(&|n| n.heads_q = n.heads_kv);
    push(&|n| n.heads_kv = 1);
    for v in shorter(c.seq_q) {
        push(&|n| n.seq_q = v);
    }
    for v in shorter(c.seq_k) {
        push(&|n| n.seq_k = v);
    }
    for v in smaller_head_dims(c.head_dim) {
        push(&|n| n.head_dim = v);
    }
    for t in TensorId::ALL {
        push(&|n| n.layouts.get_mut(t).offset_bytes = 0);
        push(&|n| n.layouts.get_mut(t).pad = [0; 4]);
        push(&|n| n.layouts.get_mut(t).order = Dim::ALL);
    }
    push(&|n| n.causal = false);
    push(&|n| n.data.dist = ValueDist::Normal);
    out
}

/// Shorter sequence lengths to try: 1, a few tile boundaries below, halves, and one less.
fn shorter(s: u32) -> Vec<u32> {
    let mut v: Vec<u32> = [1, 2, 15, 16, 17, 63, 64, 65, s / 2, s.saturating_sub(1)].into_iter().filter(|&x| x >= 1 && x < s).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Smaller head dims to try: powers of two and their odd neighbours below it, half, one less.
fn smaller_head_dims(d: u32) -> Vec<u32> {
    let mut v: Vec<u32> = [1, 7, 8, 9, 15, 16, 31, 32, 63, 64, d / 2, d.saturating_sub(1)].into_iter().filter(|&x| x >= 1 && x < d).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// How big a case is (tensor elements in all), to prefer smaller ones.
pub fn size(c: &Case) -> u64 {
    TensorId::ALL.iter().map(|&t| c.numel(t)).sum()
}

/// Greedy shrinking: tries [`candidates`] in order, keeps the first that is `allowed`, no larger,
/// and `still_fails`, and starts again from it; stops when a full pass keeps nothing or after
/// `max_runs` runs of `still_fails`.
pub fn minimize(start: &Case, max_runs: usize, allowed: &dyn Fn(&Case) -> bool, still_fails: &mut dyn FnMut(&Case) -> bool) -> Minimized {
    let mut best = start.clone();
    let (mut runs, mut kept) = (0, 0);
    'outer: loop {
        for cand in candidates(&best) {
            if runs >= max_runs {
                break 'outer;
            }
            if cand.validate().is_err() || !allowed(&cand) || size(&cand) > size(&best) {
                continue;
            }
            runs += 1;
            if still_fails(&cand) {
                best = cand;
                kept += 1;
                continue 'outer;
            }
        }
        break;
    }
    Minimized { case: best, runs, kept }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{TensorLayout, INT32_OFFSET_LIMIT};

    fn big_case() -> Case {
        let mut c = Case::example("k");
        c.batch = 3;
        c.heads_q = 8;
        c.heads_kv = 2;
        c.seq_q = 300;
        c.seq_k = 257;
        c.head_dim = 96;
        c.causal = true;
        c.data.dist = ValueDist::LargeLogits;
        c.layouts.q = TensorLayout { order: [Dim::B, Dim::S, Dim::H, Dim::D], pad: [0, 1, 2, 8], offset_bytes: 8 };
        c.layouts.k = TensorLayout { order: [Dim::H, Dim::B, Dim::S, Dim::D], pad: [0, 0, 3, 0], offset_bytes: 2 };
        c
    }

    #[test]
    fn a_misaligned_q_bug_shrinks_to_one_row_of_one_head_with_the_offset_kept() {
        // The planted "bug": fails whenever q's base is not 16-byte aligned and head_dim >= 8.
        let fails = |c: &Case| c.layouts.q.offset_bytes % 16 != 0 && c.head_dim >= 8;
        let mut runs = 0;
        let m = minimize(&big_case(), 500, &|_| true, &mut |c| {
            runs += 1;
            fails(c)
        });
        let c = &m.case;
        assert_eq!((c.batch, c.heads_q, c.heads_kv, c.seq_q, c.seq_k), (1, 1, 1, 1, 1));
        assert_eq!(c.head_dim, 8, "the smallest head_dim that still fails");
        assert_eq!(c.layouts.q.offset_bytes, 8, "the bug needs the offset");
        assert_eq!((c.layouts.k.offset_bytes, c.layouts.k.pad, c.layouts.q.pad), (0, [0; 4], [0; 4]));
        assert!(!c.causal);
        assert_eq!(c.data.dist, ValueDist::Normal);
        assert_eq!(m.runs, runs);
        assert!(fails(c));
    }

    fn reaches_past_int32(c: &Case) -> bool {
        crate::generate::reaches_past_int32(c)
    }

    /// A 32-bit overflow needs a tensor past 2³¹ elements: shrinking keeps one (recomputing its
    /// padding as the shape shrinks) and reaches the smallest shape; a bug that never needed it
    /// loses it.
    #[test]
    fn a_case_past_int32_shrinks_its_shape_and_keeps_the_overflow_only_when_needed() {
        let mut start = big_case();
        offsets_past_int32(&mut start, TensorId::Q);
        assert!(reaches_past_int32(&start));
        let m = minimize(&start, 2000, &|_| true, &mut |c| reaches_past_int32(c));
        let c = &m.case;
        assert_eq!((c.batch, c.heads_q, c.heads_kv, c.seq_q, c.seq_k, c.head_dim), (2, 1, 1, 1, 1, 1), "{}", c.summary());
        assert!(reaches_past_int32(c) && c.layouts.k.pad == [0; 4] && c.layouts.q.pad[2..] == [0, 0], "{}", c.summary());
        assert!(Plan::new(c).tensor(TensorId::Q).max_element_offset() < INT32_OFFSET_LIMIT + 4, "just past 2^31: {}", c.summary());
        let m = minimize(&start, 2000, &|_| true, &mut |c| c.head_dim >= 8);
        assert!(!reaches_past_int32(&m.case), "{}", m.case.summary());
        assert_eq!((m.case.batch, m.case.head_dim), (1, 8));
    }

    #[test]
    fn the_contract_and_the_run_budget_are_respected() {
        // A contract that demands head_dim 96 and seq_k >= 64.
        let allowed = |c: &Case| c.head_dim == 96 && c.seq_k >= 64;
        let m = minimize(&big_case(), 1000, &allowed, &mut |_| true);
        assert_eq!(m.case.head_dim, 96);
        assert_eq!(m.case.seq_k, 64);
        let m = minimize(&big_case(), 3, &|_| true, &mut |_| true);
        assert_eq!((m.runs, m.kept), (3, 3));
    }

    #[test]
    fn a_case_that_stops_failing_is_not_shrunk() {
        let m = minimize(&big_case(), 100, &|_| true, &mut |_| false);
        assert_eq!(m.case, big_case());
        assert_eq!(m.kept, 0);
        assert!(m.runs > 10);
    }

    #[test]
    fn candidates_are_all_different_from_the_case() {
        let c = big_case();
        let cands = candidates(&c);
        assert!(cands.iter().all(|n| n != &c));
        assert!(cands.iter().any(|n| n.batch == 1));
        assert!(cands.iter().any(|n| n.layouts.q.offset_bytes == 0 && n.layouts.q.pad == c.layouts.q.pad));
        assert_eq!(candidates(&minimize(&c, 10_000, &|_| true, &mut |_| true).case).len(), 0, "fully shrunk: nothing simpler left");
    }
}
