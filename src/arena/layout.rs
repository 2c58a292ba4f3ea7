//! Host-side arena layout: where every tensor and buffer sits inside its own allocation, what
//! bytes surround it, and how a device address maps back to a tensor element, redzone or gap.
//!
//! The layout is computed before anything touches the GPU, so the oracles, the sanitizer report
//! parser and the tests all read the same numbers the device half used to fill memory.

use serde::{Deserialize, Serialize};

use crate::case::{Case, Dim, Dtype, Placement, TensorId};
use crate::finding::Location;
use crate::plan::{Plan, TensorPlan};

/// Bytes before every tensor's 256-aligned base point (before its case offset is applied).
pub const REDZONE_BEFORE: u64 = 256;
/// Smallest redzone after a guarded tensor.
pub const MIN_REDZONE_AFTER: u64 = 4096;
/// Largest redzone after a guarded tensor.
pub const MAX_REDZONE_AFTER: u64 = 4 << 20;
/// Canary byte around inputs: `0xFF` repeated is NaN in f16, bf16 and f32 at any alignment, so
/// an out-of-bounds read that reaches the result poisons it.
pub const INPUT_CANARY: u8 = 0xFF;
/// Canary byte around outputs and buffers.
pub const OUTPUT_CANARY: u8 = 0xA5;

/// The quiet-NaN pattern outputs are pre-filled with; an element still holding it was never
/// written.
pub fn sentinel_bits(dtype: Dtype) -> u32 {
    match dtype {
        Dtype::F16 => 0x7E55,
        Dtype::Bf16 => 0x7FD5,
        Dtype::F32 => 0x7FD5_5555,
    }
}

/// What an allocation holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Holder {
    /// One of q, k, v, o.
    Tensor(TensorId),
    /// A manifest buffer, by name.
    Buffer(String),
}

impl Holder {
    /// Display name (`q`, `lse`).
    pub fn name(&self) -> &str {
        match self {
            Holder::Tensor(t) => t.name(),
            Holder::Buffer(b) => b,
        }
    }
}

/// One allocation: `[redzone before | data span | redzone after]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocLayout {
    /// What it holds.
    pub holder: Holder,
    /// Byte offset of the data's first byte from the allocation start (redzone + case offset).
    pub data_offset: u64,
    /// Bytes from the first to the last data byte, inclusive.
    pub span_bytes: u64,
    /// Bytes after the last data byte (0 with [`Placement::Exact`]).
    pub redzone_after: u64,
    /// Canary byte for the redzones and gaps.
    pub canary: u8,
}

impl AllocLayout {
    /// Total allocation size in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.data_offset + self.span_bytes + self.redzone_after
    }

    /// The allocation of a manifest buffer of `bytes` bytes.
    pub fn for_buffer(name: &str, bytes: u64, placement: Placement) -> AllocLayout {
        AllocLayout {
            holder: Holder::Buffer(name.to_string()),
            data_offset: REDZONE_BEFORE,
            span_bytes: bytes.max(1),
            redzone_after: AllocLayout::redzone_after_for(bytes, placement),
            canary: OUTPUT_CANARY,
        }
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

/// The layout of every allocation of one case: q, k, v, o first, then manifest buffers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArenaLayout {
    /// Allocations in [`TensorId::ALL`] order, then buffers in manifest order.
    pub allocs: Vec<AllocLayout>,
}

impl ArenaLayout {
    /// Lays out the four tensors of a case, plus buffers of `(name, bytes)`.
    pub fn new(case: &Case, plan: &Plan, buffers: &[(String, u64)]) -> ArenaLayout {
        let mut allocs: Vec<AllocLayout> = plan
            .tensors
            .iter()
            .map(|tp| AllocLayout {
                holder: Holder::Tensor(tp.tensor),
                data_offset: REDZONE_BEFORE + tp.offset_bytes,
                span_bytes: tp.span_bytes,
                redzone_after: AllocLayout::redzone_after_for(tp.span_bytes, case.placement),
                canary: if tp.tensor.is_output() { OUTPUT_CANARY } else { INPUT_CANARY },
            })
            .collect();
        for (name, bytes) in buffers {
            allocs.push(AllocLayout::for_buffer(name, *bytes, case.placement));
        }
        ArenaLayout { allocs }
    }

    /// The allocation of one tensor.
    pub fn tensor(&self, t: TensorId) -> &AllocLayout {
        self.allocs
            .iter()
            .find(|a| a.holder == Holder::Tensor(t))
            .expect("every tensor has an allocation")
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
    let Some(outer) = (0..4).filter(|&i| tp.shape[i] > 1).max_by_key(|&i| tp.strides[i]) else { return whole };
    let inner_span = 1 + (0..4).filter(|&i| i != outer).map(|i| (tp.shape[i] as u64 - 1) * tp.strides[i]).sum::<u64>();
    if tp.strides[outer] <= inner_span || (tp.strides[outer] - inner_span) * eb < UNHELD_GAP_BYTES {
        return whole;
    }
    let ds = alloc.data_offset;
    let mut ranges: Vec<std::ops::Range<u64>> = (0..tp.shape[outer] as u64)
        .map(|i| ds + i * tp.strides[outer] * eb..ds + (i * tp.strides[outer] + inner_span) * eb)
        .collect();
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
    for_each_element(tp, |_, off| {
        let start = off as usize * eb;
        mask[start..start + eb].fill(true);
    });
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

/// Calls `f(index, element_offset)` for every logical element in BHSD order.
pub fn for_each_element(tp: &TensorPlan, mut f: impl FnMut([u32; 4], u64)) {
    let [nb, nh, ns, nd] = tp.shape;
    let [sb, sh, ss, sd] = tp.strides;
    for b in 0..nb {
        for h in 0..nh {
            for s in 0..ns {
                let row = b as u64 * sb + h as u64 * sh + s as u64 * ss;
                for d in 0..nd {
                    f([b, h, s, d], row + d as u64 * sd);
                }
            }
        }
    }
}

/// Maps a byte offset inside a tensor's span to the element that contains it, or `None` if the
/// byte lies in a stride gap. Layouts never overlap, so peeling dimensions from the largest
/// stride down recovers the index uniquely.
pub fn element_at(tp: &TensorPlan, byte: u64) -> Option<[u32; 4]> {
    let eb = tp.elem_bytes as u64;
    let mut rem = byte / eb;
    let mut dims = Dim::ALL;
    dims.sort_by_key(|d| std::cmp::Reverse((tp.strides[d.index()], tp.shape[d.index()])));
    let mut idx = [0u32; 4];
    for d in dims {
        let i = d.index();
        let q = rem / tp.strides[i];
        if q >= tp.shape[i] as u64 {
            return None;
        }
        idx[i] = q as u32;
        rem -= q * tp.strides[i];
    }
    (rem == 0).then_some(idx)
}

/// Where a device address falls, relative to one allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Located {
    /// The allocation's holder.
    pub holder: Holder,
    /// Where inside it.
    pub location: Location,
}

/// Device base addresses of every allocation of a case, for mapping addresses back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
        let location = if addr < data_start {
            Location::RedzoneBefore { bytes_before: data_start - addr }
        } else if addr >= data_end {
            Location::RedzoneAfter { bytes_past_end: addr - data_end + 1 }
        } else {
            let byte = addr - data_start;
            let plan = match &alloc.holder {
                Holder::Tensor(t) => self.plans.iter().find(|p| p.tensor == *t),
                Holder::Buffer(_) => None,
            };
            match plan {
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
    use crate::case::{Case, TensorLayout};

    fn padded_case() -> Case {
        let mut case = Case::example("k");
        case.layouts.k = TensorLayout { order: [Dim::B, Dim::S, Dim::H, Dim::D], pad: [0, 1, 0, 3], offset_bytes: 6 };
        case
    }

    /// A tensor pushed past 2³¹ elements is held as its two batch blocks (4 GiB apart); a
    /// merely padded one is held whole.
    #[test]
    fn held_ranges_skip_only_gigabyte_gaps() {
        let mut case = Case::example("k");
        crate::generate::offsets_past_int32(&mut case, TensorId::V);
        let plan = Plan::new(&case);
        let layout = ArenaLayout::new(&case, &plan, &[]);
        for t in TensorId::ALL {
            let (alloc, tp) = (layout.tensor(t), plan.tensor(t));
            let ranges = held_ranges(alloc, tp);
            if t != TensorId::V {
                assert_eq!(ranges, held_whole(alloc), "{t}");
                continue;
            }
            assert_eq!(ranges.len(), 2);
            assert_eq!((ranges[0].start, ranges[1].end), (0, alloc.total_bytes()));
            let held: u64 = ranges.iter().map(|r| r.end - r.start).sum();
            assert!(alloc.total_bytes() > 4 << 30 && held < 8 << 20, "{held} of {}", alloc.total_bytes());
            // Every element byte lies in a held range.
            for_each_element(tp, |_, off| {
                let at = alloc.data_offset + off * tp.elem_bytes as u64;
                assert!(ranges.iter().any(|r| r.contains(&at) && r.contains(&(at + 1))), "element at {at}");
            });
        }
    }

    /// Both ways of sorting changed bytes (mask, and one lookup per byte) give the bytes a
    /// brute-force comparison against the mask gives.
    #[test]
    fn changed_span_bytes_sorts_elements_from_gaps_sparse_or_dense() {
        let case = padded_case();
        let plan = Plan::new(&case);
        let tp = plan.tensor(TensorId::K);
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
        let case = padded_case();
        let plan = Plan::new(&case);
        let tp = plan.tensor(TensorId::K);
        let mut n = 0;
        for_each_element(tp, |idx, off| {
            n += 1;
            assert_eq!(element_at(tp, off * 2), Some(idx));
            assert_eq!(element_at(tp, off * 2 + 1), Some(idx));
        });
        assert_eq!(n as u64, tp.numel);
        let mask = element_bytes_mask(tp);
        let gaps = mask.iter().filter(|&&m| !m).count() as u64;
        assert_eq!(gaps + tp.numel * 2, tp.span_bytes);
        for (i, m) in mask.iter().enumerate() {
            assert_eq!(*m, element_at(tp, i as u64).is_some(), "byte {i}");
        }
    }

    #[test]
    fn exact_placement_ends_at_the_allocation_end() {
        let mut case = padded_case();
        case.placement = Placement::Exact;
        let plan = Plan::new(&case);
        let arena = ArenaLayout::new(&case, &plan, &[("lse".into(), 40)]);
        for a in &arena.allocs {
            assert_eq!(a.redzone_after, 0);
            assert_eq!(a.total_bytes(), a.data_offset + a.span_bytes);
        }
        assert_eq!(arena.tensor(TensorId::K).data_offset, REDZONE_BEFORE + 6);
    }

    #[test]
    fn addresses_map_back_to_regions() {
        let case = padded_case();
        let plan = Plan::new(&case);
        let arena = ArenaLayout::new(&case, &plan, &[]);
        let mut base = 0x7f00_0000_0000u64;
        let mut entries = Vec::new();
        for a in &arena.allocs {
            entries.push((base, a.clone()));
            base += a.total_bytes().next_multiple_of(512) + 512;
        }
        let table = AllocationTable { entries: entries.clone(), plans: plan.tensors.clone() };
        let (kbase, k) = &entries[1];
        let first = kbase + k.data_offset;
        assert_eq!(table.locate(first).unwrap().location, Location::Element { index: [0; 4] });
        assert_eq!(table.locate(first - 2).unwrap().location, Location::RedzoneBefore { bytes_before: 2 });
        let end = first + k.span_bytes;
        let past = table.locate(end + 9).unwrap();
        assert_eq!(past.holder, Holder::Tensor(TensorId::K));
        assert_eq!(past.location, Location::RedzoneAfter { bytes_past_end: 10 });
        // Row pitch is 67 elements: bytes 128..134 are the 3-element pad of row 0.
        assert_eq!(table.locate(first + 128).unwrap().location, Location::Gap { byte: 128 });
    }
}
