//! Kernel-path coverage: which `CF_COVER(id)` points of a kernel a case reached.
//!
//! Kernels mark their interesting branches with `CF_COVER(id)` (`kernels/include/cf_coverage.cuh`);
//! compiled with [`COVERAGE_DEFINE`] each point counts the warps that reached it in a device
//! array, which the worker zeroes before the launch and reads after it (see
//! [`crate::engine::launch::Module::coverage`]). A [`Coverage`] is that reading, for one case; a
//! [`CoverageMap`] is the union over a campaign, counted in libFuzzer's hit-count buckets so
//! "the same point, reached by many more warps" is news too (a tail tile that now spans several
//! warps). The cargo-fuzz target copies a [`Coverage`] into libFuzzer's extra counters with
//! [`Coverage::fill_counters`]; the native fuzzer reports the map.
//!
//! This module is pure host code: the device half is in [`crate::engine::launch`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Coverage points a kernel can have (`CF_COVERAGE_SLOTS` in `cf_coverage.cuh`).
pub const SLOTS: usize = 256;

/// The define that turns the points on (`-DCUDAFUZZ_COVERAGE=1`).
pub const COVERAGE_DEFINE: &str = "CUDAFUZZ_COVERAGE";

/// Device symbol of the per-point warp counts.
pub const HITS_SYMBOL: &str = "cf_coverage_hits";

/// Device symbol of the per-point source lines.
pub const LINES_SYMBOL: &str = "cf_coverage_lines";

/// One reached point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    /// Its slot: the ID of its `CF_COVER(id)`.
    pub slot: u16,
    /// The source line of its `CF_COVER(id)` (in whichever file of the kernel holds it).
    pub line: u32,
    /// Warps that reached it in this launch.
    pub warps: u32,
}

/// The points one launch reached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// Reached points, by slot.
    pub points: Vec<Point>,
}

impl Coverage {
    /// Reads the two device arrays (as downloaded): a slot with no hits was not reached.
    pub fn from_arrays(hits: &[u32], lines: &[u32]) -> Coverage {
        let points =
            hits.iter().zip(lines).enumerate().filter(|(_, (&h, _))| h > 0).map(|(slot, (&warps, &line))| Point { slot: slot as u16, line, warps }).collect();
        Coverage { points }
    }

    /// Writes one saturated 8-bit count per slot into `counters` (libFuzzer's extra counters:
    /// it buckets the counts itself); slots past its end are dropped.
    pub fn fill_counters(&self, counters: &mut [u8]) {
        counters.fill(0);
        for p in &self.points {
            if let Some(c) = counters.get_mut(p.slot as usize) {
                *c = p.warps.min(u8::MAX as u32) as u8;
            }
        }
    }
}

/// libFuzzer's hit-count bucket of a count: 1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+.
pub fn bucket(count: u32) -> u8 {
    match count {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 3,
        4..=7 => 4,
        8..=15 => 5,
        16..=31 => 6,
        32..=127 => 7,
        _ => 8,
    }
}

/// The union of the coverage of many cases: per slot, its line and the buckets seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoverageMap {
    seen: BTreeMap<u16, (u32, u16)>,
}

impl CoverageMap {
    /// Adds a case's coverage; returns how many (point, bucket) features were new.
    pub fn add(&mut self, c: &Coverage) -> usize {
        let mut new = 0;
        for p in &c.points {
            let bit = 1u16 << bucket(p.warps);
            let entry = self.seen.entry(p.slot).or_insert((p.line, 0));
            if entry.1 & bit == 0 {
                entry.1 |= bit;
                new += 1;
            }
        }
        new
    }

    /// Points reached at least once.
    pub fn points(&self) -> usize {
        self.seen.len()
    }

    /// (point, bucket) features seen.
    pub fn features(&self) -> usize {
        self.seen.values().map(|(_, b)| b.count_ones() as usize).sum()
    }

    /// The source lines of the reached points, ascending.
    pub fn lines(&self) -> Vec<u32> {
        let mut lines: Vec<u32> = self.seen.values().map(|(l, _)| *l).collect();
        lines.sort_unstable();
        lines.dedup();
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cov(points: &[(u16, u32, u32)]) -> Coverage {
        Coverage { points: points.iter().map(|&(slot, line, warps)| Point { slot, line, warps }).collect() }
    }

    #[test]
    fn arrays_keep_only_reached_slots() {
        let mut hits = vec![0u32; SLOTS];
        let mut lines = vec![0u32; SLOTS];
        hits[3] = 7;
        lines[3] = 240;
        hits[200] = 1;
        lines[200] = 561;
        assert_eq!(Coverage::from_arrays(&hits, &lines), cov(&[(3, 240, 7), (200, 561, 1)]));
    }

    #[test]
    fn counters_saturate_and_clear() {
        let mut counters = [9u8; 8];
        cov(&[(1, 10, 1000), (2, 11, 3), (100, 12, 1)]).fill_counters(&mut counters);
        assert_eq!(counters, [0, 255, 3, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn map_counts_new_buckets_not_repeats() {
        let mut m = CoverageMap::default();
        assert_eq!(m.add(&cov(&[(1, 10, 1), (2, 20, 5)])), 2);
        assert_eq!(m.add(&cov(&[(1, 10, 1), (2, 20, 6)])), 0, "same buckets");
        assert_eq!(m.add(&cov(&[(1, 10, 40)])), 1, "a new bucket of a known point");
        assert_eq!((m.points(), m.features()), (2, 3));
        assert_eq!(m.lines(), vec![10, 20]);
    }

    #[test]
    fn buckets_follow_libfuzzer() {
        let got: Vec<u8> = [0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 127, 128, 5000].iter().map(|&c| bucket(c)).collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8]);
    }
}
