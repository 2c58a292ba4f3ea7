//! Host-side arena layout: where every tensor and buffer sits inside its own allocation, what
//! bytes surround it, and how a device address maps back to a tensor element, redzone or gap.
//!
//! The layout is computed before anything touches the GPU, so the oracles, the sanitizer report
//! parser and the tests all read the same numbers the device half used to fill memory.

use serde::{Deserialize, Serialize};

use crate::core::case::{Case, Dtype, Placement};
use crate::core::finding::Location;
use crate::core::manifest::Role;
use crate::core::plan::{Plan, TensorPlan};

/// Bytes before every tensor's 256-aligned base point (before its case offset is applied).
pub const REDZONE_BEFORE: u64 = 256;
/// Smallest redzone after a guarded tensor.
pub const MIN_REDZONE_AFTER: u64 = 4096;
/// Largest redzone after a guarded tensor.
pub const MAX_REDZONE_AFTER: u64 = 4 << 20;
/// Canary byte around inputs: `0xFF` repeated is NaN in f16, bf16 and f32 at any alignment, so
/// an out-of-bounds read that reaches the result poisons it.
pub const INPUT_CANARY: u8 = 0xFF;
/// Canary byte around written tensors (outputs, in-outs, scratch).
pub const OUTPUT_CANARY: u8 = 0xA5;

/// The pattern outputs whose initial contents are the sentinel are pre-filled with (a quiet NaN
/// for floats, an unlikely value for integers); an element still holding it was never written.
pub fn sentinel_bits(dtype: Dtype) -> u64 {
    match dtype {
        Dtype::F16 => 0x7E55,
        Dtype::Bf16 => 0x7FD5,
        Dtype::F32 => 0x7FD5_5555,
        Dtype::F64 => 0x7FFA_AAAA_AAAA_AAAA,
        Dtype::I8 | Dtype::U8 => 0x5A,
        Dtype::I32 | Dtype::U32 => 0x5A5A_5A5A,
        Dtype::I64 => 0x5A5A_5A5A_5A5A_5A5A,
    }
}

/// One allocation: `[redzone before | data span | tail | redzone after]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocLayout {
    /// The tensor it holds.
    pub holder: String,
    /// Byte offset of the data's first byte from the allocation start (redzone + case offset).
    pub data_offset: u64,
    /// Bytes from the first to the last data byte, inclusive.
    pub span_bytes: u64,
    /// Bytes after the span that the caller allocated too: a don't-care tail the kernel may read
    /// and write, filled with the canary but never checked (0 without a `capacity`).
    #[serde(default)]
    pub tail_bytes: u64,
    /// Bytes after the tail (0 with [`Placement::Exact`]).
    pub redzone_after: u64,
    /// Canary byte for the redzones and gaps.
    pub canary: u8,
}

impl AllocLayout {
    /// Total allocation size in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.data_offset + self.span_bytes + self.tail_bytes + self.redzone_after
    }

    /// The first byte of the redzone after: past the span and its tail.
    pub fn redzone_after_start(&self) -> u64 {
        self.data_offset + self.span_bytes + self.tail_bytes
    }

    /// The redzone after a tensor of `span` bytes under `placement`: large enough to hold a tail
    /// tile read or written past the end, capped so large cases stay affordable.
    pub fn redzone_after_for(span: u64, placement: Placement) -> u64 {
        match placement {
            Placement::Exact => 0,
            Placement::Guarded => span.clamp(MIN_REDZONE_AFTER, MAX_REDZONE_AFTER).next_multiple_of(256),
        }
    }
}

/// The layout of every allocation of one case: one per tensor, in the manifest's roster order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArenaLayout {
    /// Allocations in roster order.
    pub allocs: Vec<AllocLayout>,
}

impl ArenaLayout {
    /// Lays out every tensor of a planned case.
    pub fn new(case: &Case, plan: &Plan) -> ArenaLayout {
        let allocs = plan
            .tensors
            .iter()
            .map(|tp| AllocLayout {
                holder: tp.name.clone(),
                data_offset: REDZONE_BEFORE + tp.offset_bytes,
                span_bytes: tp.span_bytes,
                tail_bytes: tp.tail_bytes,
                redzone_after: AllocLayout::redzone_after_for(tp.span_bytes, case.placement),
                canary: if tp.role == Role::Input { INPUT_CANARY } else { OUTPUT_CANARY },
            })
            .collect();
        ArenaLayout { allocs }
    }

    /// The allocation of a tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&AllocLayout> {
        self.allocs.iter().find(|a| a.holder == name)
    }

    /// Total bytes over all allocations.
    pub fn total_bytes(&self) -> u64 {
        self.allocs.iter().map(|a| a.total_bytes()).sum()
    }
}

/// Stride gaps between a tensor's outermost blocks at least this long are never held in host
/// memory: they are canary on the device (one `cuMemsetD8`) and neither copied nor compared.
/// Only cases past 2³¹ elements (gigabyte gaps, a few elements) reach this.
pub const UNHELD_GAP_BYTES: u64 = 64 << 20;

/// The byte ranges of an allocation that the host holds, uploads, downloads and compares: the
/// whole allocation, or for a tensor whose outermost blocks are [`UNHELD_GAP_BYTES`] or more
/// apart, one range per block (the redzones joined to the first and last), ascending.
pub fn held_ranges(alloc: &AllocLayout, tp: &TensorPlan) -> Vec<std::ops::Range<u64>> {
    let whole = held_whole(alloc);
    let eb = tp.elem_bytes as u64;
    let rank = tp.rank();
    let Some(outer) = (0..rank).filter(|&i| tp.shape[i] > 1).max_by_key(|&i| tp.strides[i]) else { return whole };
    if tp.numel == 0 {
        return whole;
    }
    let inner_span = 1 + (0..rank).filter(|&i| i != outer).map(|i| (tp.shape[i] - 1) * tp.strides[i]).sum::<u64>();
    if tp.strides[outer] <= inner_span || (tp.strides[outer] - inner_span) * eb < UNHELD_GAP_BYTES {
        return whole;
    }
    let ds = alloc.data_offset;
    let mut ranges: Vec<std::ops::Range<u64>> =
        (0..tp.shape[outer]).map(|i| ds + i * tp.strides[outer] * eb..ds + (i * tp.strides[outer] + inner_span) * eb).collect();
    ranges.first_mut().expect("extent > 1").start = 0;
    ranges.last_mut().expect("extent > 1").end = alloc.total_bytes();
    ranges
}

/// The held ranges of an allocation held whole: one range, all of it.
pub fn held_whole(alloc: &AllocLayout) -> Vec<std::ops::Range<u64>> {
    std::iter::once(0..alloc.total_bytes()).collect()
}

/// For each byte of a tensor's span, whether it belongs to a logical element (`true`) or to a
/// stride gap (`false`).
pub fn element_bytes_mask(tp: &TensorPlan) -> Vec<bool> {
    let mut mask = vec![false; tp.span_bytes as usize];
    if tp.is_gapless() {
        mask.fill(true);
        return mask;
    }
    let eb = tp.elem_bytes as usize;
    crate::core::plan::for_each_offset(tp, |_, off| mask[off..off + eb].fill(true));
    mask
}

/// The bytes of a tensor's span that differ between `before` and `now` (offsets from the
/// span's first byte, ascending), split by what they belong to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanChanges {
    /// Changed bytes of logical elements.
    pub elements: Vec<usize>,
    /// Changed bytes of stride gaps.
    pub gaps: Vec<usize>,
}

/// Compares one tensor's span before and after a launch, inside `ranges` (offsets from the
/// span's first byte, ascending: the whole span, or the blocks an image holds). Equal 4 KiB
/// chunks are skipped with one comparison each, and the changed bytes are then sorted into
/// elements and gaps either by an element mask (one byte per span byte) or, when few bytes
/// changed in a large span (a stride gap gigabytes long), by locating each changed byte with
/// [`element_at`].
pub fn changed_span_bytes(tp: &TensorPlan, before: &[u8], now: &[u8], ranges: &[std::ops::Range<usize>]) -> SpanChanges {
    const CHUNK: usize = 4096;
    let mut changed = Vec::new();
    for r in ranges {
        let (before_r, now_r) = (&before[r.clone()], &now[r.clone()]);
        for (c, (b, n)) in before_r.chunks(CHUNK).zip(now_r.chunks(CHUNK)).enumerate() {
            if b != n {
                changed.extend((0..b.len()).filter(|&i| b[i] != n[i]).map(|i| r.start + c * CHUNK + i));
            }
        }
    }
    if tp.is_gapless() {
        return SpanChanges { elements: changed, gaps: Vec::new() };
    }
    let (elements, gaps) = if changed.len().saturating_mul(SPARSE_RATIO) < before.len() {
        changed.into_iter().partition(|&b| element_at(tp, b as u64).is_some())
    } else {
        let mask = element_bytes_mask(tp);
        changed.into_iter().partition(|&b| mask[b])
    };
    SpanChanges { elements, gaps }
}

/// Span bytes per changed byte above which [`changed_span_bytes`] locates bytes one by one
/// instead of building a mask.
const SPARSE_RATIO: usize = 64;

/// Maps a byte offset inside a tensor's span to the element that contains it (its logical
/// index), or `None` if the byte lies in a stride gap. Layouts never overlap, so peeling
/// dimensions from the largest stride down recovers the index uniquely; a broadcast dimension
/// (stride 0) reads as index 0.
pub fn element_at(tp: &TensorPlan, byte: u64) -> Option<Vec<u64>> {
    let eb = tp.elem_bytes as u64;
    let mut rem = byte / eb;
    let mut dims: Vec<usize> = (0..tp.rank()).filter(|&i| tp.strides[i] > 0).collect();
    dims.sort_by_key(|&i| std::cmp::Reverse((tp.strides[i], tp.shape[i])));
    let mut idx = vec![0u64; tp.rank()];
    for i in dims {
        let q = rem / tp.strides[i];
        if q >= tp.shape[i] {
            return None;
        }
        idx[i] = q;
        rem -= q * tp.strides[i];
    }
    (rem == 0).then_some(idx)
}

/// Where a device address falls, relative to one allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Located {
    /// The tensor whose allocation it is.
    pub holder: String,
    /// Where inside it.
    pub location: Location,
}

/// Device base addresses of every allocation of a case, for mapping addresses back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AllocationTable {
    /// `(device base address, layout)` per allocation.
    pub entries: Vec<(u64, AllocLayout)>,
    /// Tensor plans, to map data bytes to elements.
    pub plans: Vec<TensorPlan>,
}

impl AllocationTable {
    /// Maps a device address to the allocation, and the element, redzone byte or gap in it. An
    /// address outside every allocation is attributed to the nearest one (as compute-sanitizer's
    /// text output does), so "n bytes past the end of k" is reported even beyond the redzone.
    pub fn locate(&self, addr: u64) -> Option<Located> {
        let (base, alloc) = self.entries.iter().min_by_key(|(base, a)| {
            let start = *base;
            let end = base + a.total_bytes();
            if addr < start {
                start - addr
            } else if addr >= end {
                addr - end + 1
            } else {
                0
            }
        })?;
        let data_start = base + alloc.data_offset;
        let data_end = data_start + alloc.span_bytes;
        let tail_end = data_end + alloc.tail_bytes;
        let location = if addr < data_start {
            Location::RedzoneBefore { bytes_before: data_start - addr }
        } else if addr >= tail_end {
            Location::RedzoneAfter { bytes_past_end: addr - tail_end + 1 }
        } else if addr >= data_end {
            Location::Gap { byte: addr - data_start }
        } else {
            let byte = addr - data_start;
            match self.plans.iter().find(|p| p.name == alloc.holder) {
                Some(tp) => match element_at(tp, byte) {
                    Some(index) => Location::Element { index },
                    None => Location::Gap { byte },
                },
                None => Location::Gap { byte },
            }
        };
        Some(Located { holder: alloc.holder.clone(), location })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::case::TensorLayout;
    use crate::core::plan::for_each_offset;
    use crate::testing;

    fn padded() -> (Case, Plan) {
        let mut case = testing::example();
        *case.layout_mut("k") = TensorLayout { order: vec![0, 2, 1, 3], pad: vec![0, 1, 0, 3], offset_bytes: 6, ..TensorLayout::dense() };
        let plan = Plan::new(&case, &testing::attention()).unwrap();
        (case, plan)
    }

    /// A tensor pushed past 2³¹ elements is held as its two outermost blocks (4 GiB apart); a
    /// merely padded one is held whole.
    #[test]
    fn held_ranges_skip_only_gigabyte_gaps() {
        let m = testing::attention();
        let mut case = testing::example();
        assert!(crate::core::generate::offsets_past_int32(&mut case, &m, "v", crate::core::generate::PastInt32::WideStride));
        let plan = Plan::new(&case, &m).unwrap();
        let layout = ArenaLayout::new(&case, &plan);
        for tp in &plan.tensors {
            let alloc = layout.tensor(&tp.name).unwrap();
            let ranges = held_ranges(alloc, tp);
            if tp.name != "v" {
                assert_eq!(ranges, held_whole(alloc), "{}", tp.name);
                continue;
            }
            assert_eq!(ranges.len(), 2);
            assert_eq!((ranges[0].start, ranges[1].end), (0, alloc.total_bytes()));
            let held: u64 = ranges.iter().map(|r| r.end - r.start).sum();
            assert!(alloc.total_bytes() > 4 << 30 && held < 8 << 20, "{held} of {}", alloc.total_bytes());
            // Every element byte lies in a held range.
            for_each_offset(tp, |_, off| {
                let at = alloc.data_offset + off as u64;
                assert!(ranges.iter().any(|r| r.contains(&at) && r.contains(&(at + 1))), "element at {at}");
            });
        }
    }

    /// Both ways of sorting changed bytes (mask, and one lookup per byte) give the bytes a
    /// brute-force comparison against the mask gives.
    #[test]
    fn changed_span_bytes_sorts_elements_from_gaps_sparse_or_dense() {
        let (_, plan) = padded();
        let tp = plan.tensor("k").unwrap();
        let mask = element_bytes_mask(tp);
        let before = vec![0xFFu8; tp.span_bytes as usize];
        for every in [1usize, 7, 997, 20011] {
            let mut now = before.clone();
            for b in (3..now.len()).step_by(every) {
                now[b] = 0;
            }
            let got = changed_span_bytes(tp, &before, &now, std::slice::from_ref(&(0..now.len())));
            let diff: Vec<usize> = (0..now.len()).filter(|&b| before[b] != now[b]).collect();
            let dense = diff.len() * SPARSE_RATIO >= before.len();
            assert_eq!(got.elements, diff.iter().copied().filter(|&b| mask[b]).collect::<Vec<_>>(), "every {every}, dense {dense}");
            assert_eq!(got.gaps, diff.iter().copied().filter(|&b| !mask[b]).collect::<Vec<_>>(), "every {every}, dense {dense}");
        }
        assert_eq!(changed_span_bytes(tp, &before, &before, std::slice::from_ref(&(0..before.len()))), SpanChanges::default());
        // Only the given ranges are compared.
        let mut now = before.clone();
        now[10] = 0;
        now[before.len() - 1] = 0;
        let got = changed_span_bytes(tp, &before, &now, &[0..5, 20..before.len()]);
        assert_eq!(got.elements.len() + got.gaps.len(), 1);
    }

    #[test]
    fn element_at_inverts_offsets_and_finds_gaps() {
        let (_, plan) = padded();
        let tp = plan.tensor("k").unwrap();
        let mut n = 0u64;
        for_each_offset(tp, |linear, off| {
            n += 1;
            let idx = tp.logical_index(linear as u64);
            assert_eq!(element_at(tp, off as u64), Some(idx.clone()));
            assert_eq!(element_at(tp, off as u64 + 1), Some(idx));
        });
        assert_eq!(n, tp.numel);
        let mask = element_bytes_mask(tp);
        let gaps = mask.iter().filter(|&&m| !m).count() as u64;
        assert_eq!(gaps + tp.numel * 2, tp.span_bytes);
        for (i, m) in mask.iter().enumerate() {
            assert_eq!(*m, element_at(tp, i as u64).is_some(), "byte {i}");
        }
    }

    #[test]
    fn one_allocation_per_tensor_and_exact_placement_ends_at_the_allocation_end() {
        let (mut case, _) = padded();
        case.placement = Placement::Exact;
        let plan = Plan::new(&case, &testing::attention()).unwrap();
        let arena = ArenaLayout::new(&case, &plan);
        assert_eq!(arena.allocs.iter().map(|a| a.holder.as_str()).collect::<Vec<_>>(), ["q", "k", "v", "o"]);
        for a in &arena.allocs {
            assert_eq!(a.redzone_after, 0);
            assert_eq!(a.total_bytes(), a.data_offset + a.span_bytes);
        }
        assert_eq!(arena.tensor("k").unwrap().data_offset, REDZONE_BEFORE + 6);
    }

    #[test]
    fn addresses_map_back_to_regions() {
        let (case, plan) = padded();
        let arena = ArenaLayout::new(&case, &plan);
        let mut base = 0x7f00_0000_0000u64;
        let mut entries = Vec::new();
        for a in &arena.allocs {
            entries.push((base, a.clone()));
            base += a.total_bytes().next_multiple_of(512) + 512;
        }
        let table = AllocationTable { entries: entries.clone(), plans: plan.tensors.clone() };
        let (kbase, k) = &entries[1];
        let first = kbase + k.data_offset;
        assert_eq!(table.locate(first).unwrap().location, Location::Element { index: vec![0; 4] });
        assert_eq!(table.locate(first - 2).unwrap().location, Location::RedzoneBefore { bytes_before: 2 });
        let end = first + k.span_bytes;
        let past = table.locate(end + 9).unwrap();
        assert_eq!(past.holder, "k");
        assert_eq!(past.location, Location::RedzoneAfter { bytes_past_end: 10 });
        // Row pitch is 67 elements: bytes 128..134 are the 3-element pad of row 0.
        assert_eq!(table.locate(first + 128).unwrap().location, Location::Gap { byte: 128 });
    }
}
