//! The guarded arena: one allocation per tensor and buffer, surrounded by canaries.
//!
//! [`layout`] is pure host arithmetic (where everything sits, how addresses map back);
//! [`HostImage`] builds the exact bytes each allocation starts with — canaries in redzones and
//! stride gaps, generated inputs, sentinel-filled outputs — so that after a launch the oracles
//! compare the downloaded bytes against this image and nothing else. The device half
//! ([`device`]) copies these images up and the results down, or makes the same bytes on the GPU
//! ([`device::DeviceArena::fill`], from each tensor's [`crate::engine::data::Recipe`]): checked
//! byte for byte against the host image (`tests/gpu_datagen.rs`), the start of issue 30's
//! device-side data path: the engine fills eligible cases' arenas that way and downloads the
//! image its oracles read (`engine/worker/device_data.rs`). The oracles and references still
//! read the host's copy (inputs unchanged, the rules' input statistics, the CPU reference);
//! moving those to the device is that path's next step.

pub mod device;
pub mod sparse;
pub mod staging;
/// The arena's pure host arithmetic, kept with the other plain types in [`crate::core::layout`].
pub use crate::core::layout;

pub use layout::{
    changed_span_bytes, element_at, element_bytes_mask, held_ranges, sentinel_bits, AllocLayout, AllocationTable, ArenaLayout, Located, SpanChanges,
    UNHELD_GAP_BYTES,
};

use std::ops::Range;

use crate::core::case::Case;
use crate::core::plan::{Plan, TensorPlan};
use crate::engine::data::{self, Inputs};

/// The initial bytes of every allocation of a case, and which of them are uploaded.
#[derive(Clone, Debug)]
pub struct HostImage {
    /// Allocation layouts, one per tensor in roster order.
    pub layout: ArenaLayout,
    /// Initial bytes of each allocation, `layout.allocs[i].total_bytes()` long (empty for an
    /// allocation left out of the image: see [`HostImage::build_selected`]).
    pub bytes: Vec<Vec<u8>>,
    /// Per allocation: whether the data span is left uninitialised on the device (only the
    /// redzones are uploaded), so initcheck can see reads of it.
    pub data_uninit: Vec<bool>,
    /// Per allocation: the byte ranges held in `bytes` ([`held_ranges`]). Outside them the
    /// device holds the canary and `bytes` holds zeros that were never written (pages the OS
    /// never backs), so a gigabyte stride gap costs neither host memory nor copies.
    pub held: Vec<Vec<Range<u64>>>,
}

impl HostImage {
    /// Builds the images of every tensor of a planned case: canaries in redzones and stride
    /// gaps, drawn values in inputs (and in outputs whose initial contents are drawn), each
    /// written tensor's initial contents per its manifest (`sentinel`, `zero`, ...).
    pub fn build(case: &Case, plan: &Plan, inputs: &Inputs) -> HostImage {
        HostImage::build_selected(case, plan, inputs, &|_| true)
    }

    /// Like [`HostImage::build`], but an allocation `selected` refuses is left out (no bytes;
    /// the device half allocates nothing for it): a second kernel (a GPU reference) that reads
    /// the case's own inputs, whose allocations stand in for those.
    pub fn build_selected(case: &Case, plan: &Plan, inputs: &Inputs, selected: &dyn Fn(&TensorPlan) -> bool) -> HostImage {
        let layout = ArenaLayout::new(case, plan);
        let n = layout.allocs.len();
        let mut image = HostImage { layout, bytes: Vec::with_capacity(n), data_uninit: Vec::with_capacity(n), held: Vec::with_capacity(n) };
        for tp in &plan.tensors {
            if !selected(tp) {
                image.bytes.push(Vec::new());
                image.data_uninit.push(false);
                image.held.push(Vec::new());
                continue;
            }
            let alloc = &image.layout.allocs[tp.index];
            let ranges = held_ranges(alloc, tp);
            let mut img = if ranges.len() == 1 {
                vec![alloc.canary; alloc.total_bytes() as usize]
            } else {
                // Zeroed pages are mapped lazily: only the held ranges cost memory.
                let mut img = vec![0u8; alloc.total_bytes() as usize];
                for r in &ranges {
                    img[r.start as usize..r.end as usize].fill(alloc.canary);
                }
                img
            };
            let data = &mut img[alloc.data_offset as usize..];
            let uninit = fill_data(tp, inputs, data);
            image.bytes.push(img);
            image.data_uninit.push(uninit);
            image.held.push(ranges);
        }
        image
    }

    /// Whether allocation `i` is held whole (every allocation but a tensor with a gigabyte
    /// stride gap).
    pub fn holds_whole(&self, i: usize) -> bool {
        self.held[i].len() == 1
    }

    /// The same image with every allocation held whole, its unheld gaps filled with the canary
    /// the device holds there: for standalone repros, which rebuild every byte.
    pub fn held_whole(mut self) -> HostImage {
        for i in 0..self.bytes.len() {
            if self.holds_whole(i) || self.bytes[i].is_empty() {
                continue;
            }
            let canary = self.layout.allocs[i].canary;
            let held = std::mem::replace(&mut self.held[i], layout::held_whole(&self.layout.allocs[i]));
            // Held ranges start at 0 and end at the allocation's end: the gaps lie between them.
            for pair in held.windows(2) {
                self.bytes[i][pair[0].end as usize..pair[1].start as usize].fill(canary);
            }
        }
        self
    }

    /// Whether `bytes` (allocation `i` as downloaded) equals the image wherever the image holds
    /// it: a gigabyte stride gap, never held on the host, is never compared (reading it would
    /// touch gigabytes of pages that were never written: seconds for nothing).
    pub fn holds_same(&self, i: usize, bytes: &[u8]) -> bool {
        self.same_where_held(i, &self.bytes[i], bytes)
    }

    /// Whether two downloads of allocation `i` are equal wherever the image holds it.
    pub fn same_where_held(&self, i: usize, a: &[u8], b: &[u8]) -> bool {
        let r = |r: &Range<u64>| r.start as usize..r.end as usize;
        self.held[i].iter().all(|h| a.get(r(h)) == b.get(r(h)))
    }

    /// The data bytes of one allocation (the span, without redzones).
    pub fn data<'a>(&self, alloc: usize, bytes: &'a [u8]) -> &'a [u8] {
        let a = &self.layout.allocs[alloc];
        &bytes[a.data_offset as usize..(a.data_offset + a.span_bytes) as usize]
    }
}

/// Writes one tensor's initial contents into its data span; returns whether the span is left
/// uninitialised on the device.
fn fill_data(tp: &TensorPlan, inputs: &Inputs, data: &mut [u8]) -> bool {
    if data::is_drawn(tp) {
        if let Some(values) = inputs.get(tp.index) {
            data::write_strided(values, tp, data);
        }
        return false;
    }
    match data::initial_bits(tp) {
        Some(bits) => {
            data::fill_strided(bits, tp, data);
            false
        }
        None => true,
    }
}
