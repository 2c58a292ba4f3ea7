//! Drawing a list of lengths ([`crate::core::manifest::LengthsSpec`]) from fuzzer bytes, biased
//! toward the batches that break variable-length index arithmetic: every sequence the same
//! length, one long sequence among short ones, empty sequences, lengths on either side of a
//! page or tile boundary (the hints), and plain random ones.

use arbitrary::{Result, Unstructured};

use crate::core::case::MAX_DIM;
use crate::core::manifest::LengthsSpec;

/// The shapes of a batch the decoder picks from, one per case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Batch {
    /// Each length drawn on its own: a boundary value three times in four, else uniform.
    Mixed,
    /// Every sequence the same length.
    Equal,
    /// One sequence at the long end, the others at the short end.
    OneLong,
    /// Mixed, with about half the sequences at the range's low end (empty where it allows 0).
    Sparse,
}

const BATCHES: [Batch; 6] = [Batch::Mixed, Batch::Mixed, Batch::Equal, Batch::OneLong, Batch::Sparse, Batch::Mixed];

/// `count` lengths for `l`. Constrained: within its range, random draws up to its cap; else any
/// length up to [`MAX_DIM`]'s cap. Never all zero: a batch of only empty sequences makes tensors
/// of no elements, which the arena does not model.
pub fn draw_lengths(u: &mut Unstructured<'_>, l: &LengthsSpec, count: u64, constrained: bool) -> Result<Vec<u64>> {
    let (lo, hi) = if constrained { (l.range[0], l.range[1]) } else { (0, MAX_DIM) };
    let cap = l.cap.clamp(lo.max(1), hi);
    let boundary = boundary(l, lo, cap, hi);
    let one = |u: &mut Unstructured<'_>| -> Result<u64> {
        if u.int_in_range(0..=3u8)? < 3 {
            u.choose(&boundary).copied()
        } else {
            u.int_in_range(lo..=cap)
        }
    };
    let batch = *u.choose(&BATCHES)?;
    let n = count as usize;
    let mut out = Vec::with_capacity(n);
    match batch {
        Batch::Mixed => {
            for _ in 0..n {
                out.push(one(u)?);
            }
        }
        Batch::Equal => out.resize(n, one(u)?),
        Batch::OneLong => {
            let long = *u.choose(&[cap, hi.min(cap.saturating_mul(4)), boundary[boundary.len() - 1]])?;
            let short = *u.choose(&[lo, lo + 1, lo.max(1)])?;
            out.resize(n, short.min(hi));
            let at = u.int_in_range(0..=n.saturating_sub(1))?;
            out[at] = long;
        }
        Batch::Sparse => {
            for _ in 0..n {
                let empty = u.arbitrary::<bool>()?;
                out.push(if empty { lo } else { one(u)? });
            }
        }
    }
    if out.iter().all(|&v| v == 0) {
        if let Some(first) = out.first_mut() {
            *first = 1.min(hi);
        }
    }
    Ok(out)
}

/// The boundary lengths within `[lo, top]` (`top` = the cap, or a hint up to the range's end):
/// the range's ends and one inside them, and each hint and one either side.
fn boundary(l: &LengthsSpec, lo: u64, cap: u64, hi: u64) -> Vec<u64> {
    let mut out = vec![lo, lo + 1, cap.saturating_sub(1), cap];
    for &h in &l.hints {
        out.extend([h.saturating_sub(1), h, h + 1]);
    }
    out.retain(|&x| x >= lo && x <= hi);
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> LengthsSpec {
        LengthsSpec { name: "seqlens".into(), count: "batch".into(), range: [0, 300], cap: 64, hints: vec![16] }
    }

    /// Every byte string gives `count` lengths in range, never all zero; over many inputs each
    /// batch shape shows up: empty sequences, equal lengths, one long, page boundaries.
    #[test]
    fn lengths_stay_in_range_and_cover_the_boundary_batches() {
        let (mut empty, mut equal, mut one_long, mut page_edge) = (0, 0, 0, 0);
        for seed in 0..400u32 {
            let bytes: Vec<u8> = (0..64u32).map(|i| (seed.wrapping_mul(2654435761).wrapping_add(i * 40503) >> 11) as u8).collect();
            let list = draw_lengths(&mut Unstructured::new(&bytes), &spec(), 5, true).unwrap();
            assert_eq!(list.len(), 5);
            assert!(list.iter().all(|&v| v <= 300) && list.iter().any(|&v| v > 0), "{list:?}");
            empty += list.contains(&0) as u32;
            equal += list.iter().all(|&v| v == list[0]) as u32;
            one_long += (list.iter().filter(|&&v| v >= 64).count() == 1 && list.iter().filter(|&&v| v <= 1).count() == 4) as u32;
            page_edge += list.iter().any(|&v| [15, 16, 17].contains(&v)) as u32;
        }
        assert!(empty > 40 && equal > 20 && one_long > 10 && page_edge > 40, "{empty} {equal} {one_long} {page_edge}");
        assert_eq!(draw_lengths(&mut Unstructured::new(&[]), &spec(), 3, true).unwrap(), [1, 0, 0], "run-out bytes: the low end, one non-empty");
    }
}
