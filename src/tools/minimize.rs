//! Shrinking a failing case while it keeps failing the same way.
//!
//! Structured, not byte-level: each step proposes a simpler case along one axis (a dim toward
//! the low end of its range, a list of lengths toward its low end, all at once or one sequence
//! at a time, a tensor's layout toward dense, its offset toward 0, its values
//! toward normal, a flag off, a scalar to its first choice, guarded placement), and a step is
//! kept when the case still produces the target finding signature. After a dim shrinks, the dims
//! drawn after it are brought back into their relations (heads_q stays a multiple of heads_kv)
//! at their smallest such value. Steps repeat until none is kept or the run budget is spent.
//! Pure logic: the caller supplies `still_fails` (which runs the case on the GPU) and `allowed`
//! (the contract).

use crate::core::case::{Case, Scalar, TensorLayout};
use crate::core::generate::{fit_lengths, offsets_past_int32, relations::repair, PastInt32};
use crate::core::manifest::{Manifest, ScalarType};
use crate::core::plan::Plan;
use crate::run::campaign::case_size;

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
pub fn candidates(c: &Case, m: &Manifest) -> Vec<Case> {
    let Ok(plan) = Plan::new(c, m) else { return Vec::new() };
    let past: Vec<(String, PastInt32)> = plan.tensors.iter().filter(|t| t.reaches_past_int32()).map(|t| (t.name.clone(), PastInt32::of(t))).collect();
    let mut out = Vec::new();
    for (t, _) in &past {
        let mut n = c.clone();
        n.layout_mut(t).pad.clear();
        out.push(n);
    }
    // Candidates are compared in normal form: an entry holding the default layout (which
    // `layout_mut` inserts) is no change.
    let mut same = c.clone();
    same.normalize_layouts();
    let mut push = |f: &dyn Fn(&mut Case)| {
        let mut n = c.clone();
        f(&mut n);
        if let Ok(now) = Plan::new(&n, m) {
            for (t, form) in &past {
                if !now.tensor(t).is_some_and(|tp| tp.reaches_past_int32()) {
                    offsets_past_int32(&mut n, m, t, *form);
                }
            }
        }
        n.normalize_layouts();
        if n != same {
            out.push(n);
        }
    };
    for (i, d) in m.dims.iter().enumerate() {
        for v in smaller(c.dim(&d.name), d.range[0], &m.hint_values(d)) {
            push(&|n| {
                n.dims.insert(d.name.clone(), v);
                repair(n, m, i + 1);
                fit_lengths(n, m);
            });
        }
    }
    // Lists of lengths: all at once (to the low end, halved), then one sequence at a time.
    for l in &m.lengths {
        let list = c.lengths.get(&l.name).cloned().unwrap_or_default();
        let lo = l.range[0];
        let set = |n: &mut Case, f: &dyn Fn(usize, u64) -> u64| {
            let new: Vec<u64> = list.iter().enumerate().map(|(i, &v)| f(i, v)).collect();
            n.lengths.insert(l.name.clone(), new);
        };
        push(&|n| set(n, &|_, _| lo.max(1)));
        push(&|n| set(n, &|_, v| (v / 2).max(lo)));
        for i in 0..list.len() {
            push(&|n| set(n, &|j, v| if i == j { lo } else { v }));
            push(&|n| set(n, &|j, v| if i == j { (v / 2).max(lo) } else { v }));
        }
    }
    for t in m.tensors.iter().filter(|t| t.layout_is_drawn()) {
        let name = &t.name;
        push(&|n| n.layout_mut(name).offset_bytes = 0);
        push(&|n| n.layout_mut(name).pad.clear());
        push(&|n| n.layout_mut(name).order.clear());
        push(&|n| n.layout_mut(name).broadcast.clear());
        push(&|n| n.layout_mut(name).values = TensorLayout::dense().values);
    }
    let vars = plan.vars.clone();
    for s in &m.scalars {
        let simplest = match s.ty {
            ScalarType::Bool => Scalar::Bool(false),
            _ => m.default_scalar(s, &vars),
        };
        push(&|n| {
            n.scalars.insert(s.name.clone(), simplest);
        });
    }
    push(&|n| n.placement = crate::core::case::Placement::Guarded);
    out
}

/// Smaller values to try for a dim: the low end of its range, 1, hints below it (each ± 1),
/// half, and one less.
fn smaller(v: u64, lo: u64, hints: &[u64]) -> Vec<u64> {
    let mut out: Vec<u64> = [lo, 1, 2, v / 2, v.saturating_sub(1)]
        .into_iter()
        .chain(hints.iter().flat_map(|&h| [h.saturating_sub(1), h, h + 1]))
        .filter(|&x| x >= 1 && x < v)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// How big a case is (tensor elements in all), to prefer smaller ones.
pub fn size(c: &Case, m: &Manifest) -> u64 {
    case_size(m, c)
}

/// Greedy shrinking: tries [`candidates`] in order, keeps the first that plans, is `allowed`,
/// no larger, and `still_fails`, and starts again from it; stops when a full pass keeps nothing
/// or after `max_runs` runs of `still_fails`.
pub fn minimize(start: &Case, m: &Manifest, max_runs: usize, allowed: &dyn Fn(&Case) -> bool, still_fails: &mut dyn FnMut(&Case) -> bool) -> Minimized {
    let mut best = start.clone();
    let (mut runs, mut kept) = (0, 0);
    'outer: loop {
        for cand in candidates(&best, m) {
            if runs >= max_runs {
                break 'outer;
            }
            if Plan::new(&cand, m).is_err() || !allowed(&cand) || size(&cand, m) > size(&best, m) {
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
    use crate::core::case::{ValueClass, INT32_OFFSET_LIMIT};
    use crate::testing::{attention, example};

    fn big_case() -> Case {
        let mut c = example();
        for (d, v) in [("batch", 3), ("heads_q", 8), ("heads_kv", 2), ("seq_q", 300), ("seq_k", 257), ("head_dim", 96)] {
            c.dims.insert(d.into(), v);
        }
        c.scalars.insert("causal".into(), Scalar::Bool(true));
        for t in ["q", "k", "v"] {
            c.layout_mut(t).values = vec![ValueClass::Large];
        }
        *c.layout_mut("q") =
            TensorLayout { order: vec![0, 2, 1, 3], pad: vec![0, 1, 2, 8], offset_bytes: 8, values: vec![ValueClass::Large], ..TensorLayout::default() };
        *c.layout_mut("k") =
            TensorLayout { order: vec![1, 0, 2, 3], pad: vec![0, 0, 3, 0], offset_bytes: 2, values: vec![ValueClass::Large], ..TensorLayout::default() };
        c
    }

    #[test]
    fn a_misaligned_q_bug_shrinks_to_one_row_of_one_head_with_the_offset_kept() {
        let m = attention();
        // The planted "bug": fails whenever q's base is not 16-byte aligned and head_dim >= 8.
        let fails = |c: &Case| !c.layout("q").offset_bytes.is_multiple_of(16) && c.dim("head_dim") >= 8;
        let mut runs = 0;
        let r = minimize(&big_case(), &m, 500, &|_| true, &mut |c| {
            runs += 1;
            fails(c)
        });
        let c = &r.case;
        let dims: Vec<u64> = ["batch", "heads_q", "heads_kv", "seq_q", "seq_k"].iter().map(|d| c.dim(d)).collect();
        assert_eq!(dims, vec![1, 1, 1, 1, 1], "{}", c.summary());
        assert_eq!(c.dim("head_dim"), 8, "the smallest head_dim that still fails: {}", c.summary());
        assert_eq!(c.layout("q").offset_bytes, 8, "the bug needs the offset");
        assert!(c.layout("k").offset_bytes == 0 && c.layout("k").pad.is_empty() && c.layout("q").pad.is_empty());
        assert_eq!(c.scalar("causal"), Some(Scalar::Bool(false)));
        assert_eq!(c.layout("q").values, vec![ValueClass::Normal]);
        assert_eq!(r.runs, runs);
        assert!(fails(c));
    }

    /// A 32-bit overflow needs a tensor past 2³¹ elements: shrinking keeps one (recomputing its
    /// padding as the shape shrinks) and reaches the smallest shape; a bug that never needed it
    /// loses it.
    #[test]
    fn a_case_past_int32_shrinks_its_shape_and_keeps_the_overflow_only_when_needed() {
        let m = attention();
        let past = |c: &Case| crate::core::generate::reaches_past_int32(c, &m);
        let mut start = big_case();
        assert!(offsets_past_int32(&mut start, &m, "q", PastInt32::WideStride));
        assert!(past(&start));
        let r = minimize(&start, &m, 2000, &|_| true, &mut |c| past(c));
        let c = &r.case;
        let dims: Vec<u64> = ["batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim"].iter().map(|d| c.dim(d)).collect();
        assert_eq!(dims, vec![2, 1, 1, 1, 1, 1], "{}", c.summary());
        assert!(past(c) && c.layout("k").pad.is_empty(), "{}", c.summary());
        assert!(Plan::new(c, &m).unwrap().tensor("q").unwrap().max_element_offset() < INT32_OFFSET_LIMIT + 4, "just past 2^31: {}", c.summary());
        let r = minimize(&start, &m, 2000, &|_| true, &mut |c| c.dim("head_dim") >= 8);
        assert!(!past(&r.case), "{}", r.case.summary());
        assert_eq!((r.case.dim("batch"), r.case.dim("head_dim")), (1, 8));
    }

    #[test]
    fn the_contract_and_the_run_budget_are_respected() {
        let m = attention();
        // A contract that demands head_dim 96 and seq_k >= 64.
        let allowed = |c: &Case| c.dim("head_dim") == 96 && c.dim("seq_k") >= 64;
        let r = minimize(&big_case(), &m, 1000, &allowed, &mut |_| true);
        assert_eq!((r.case.dim("head_dim"), r.case.dim("seq_k")), (96, 64));
        let r = minimize(&big_case(), &m, 3, &|_| true, &mut |_| true);
        assert_eq!((r.runs, r.kept), (3, 3));
    }

    #[test]
    fn a_case_that_stops_failing_is_not_shrunk() {
        let m = attention();
        let r = minimize(&big_case(), &m, 100, &|_| true, &mut |_| false);
        assert_eq!(r.case, big_case());
        assert_eq!(r.kept, 0);
        assert!(r.runs > 10);
    }

    #[test]
    fn candidates_are_all_different_from_the_case_and_keep_the_requires() {
        let m = attention();
        let c = big_case();
        let cands = candidates(&c, &m);
        assert!(cands.iter().all(|n| n != &c));
        assert!(cands.iter().any(|n| n.dim("batch") == 1));
        // heads_kv shrinks: heads_q follows to a multiple of it.
        assert!(cands.iter().filter(|n| n.dim("heads_kv") == 1).all(|n| Plan::new(n, &m).is_ok()));
        assert!(cands.iter().any(|n| n.layout("q").offset_bytes == 0 && n.layout("q").pad == c.layout("q").pad));
        let done = minimize(&c, &m, 10_000, &|_| true, &mut |_| true).case;
        assert_eq!(
            candidates(&done, &m).iter().filter(|n| size(n, &m) <= size(&done, &m) && Plan::new(n, &m).is_ok() && *n != &done).count(),
            0,
            "fully shrunk: {}",
            done.summary()
        );
    }
}
