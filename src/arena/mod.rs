//! The guarded arena: one allocation per tensor and buffer, surrounded by canaries.
//!
//! [`layout`] is pure host arithmetic (where everything sits, how addresses map back);
//! [`HostImage`] builds the exact bytes each allocation starts with — canaries in redzones and
//! stride gaps, generated inputs, sentinel-filled outputs — so that after a launch the oracles
//! compare the downloaded bytes against this image and nothing else. The device half
//! ([`device`]) only copies these images up and the results down.

pub mod device;
pub mod layout;

pub use layout::{
    changed_span_bytes, held_ranges, UNHELD_GAP_BYTES, element_at, element_bytes_mask, for_each_element, sentinel_bits, AllocLayout, AllocationTable, ArenaLayout,
    Holder, Located, SpanChanges,
};

use std::ops::Range;

use crate::case::{Case, TensorId};
use crate::data::{self, Inputs};
use crate::manifest::{BufferDtype, BufferInit, ResolvedBuffer};
use crate::plan::Plan;

/// The allocation index of a manifest's extra buffer `b`: every arena holds the tensors first,
/// in [`TensorId::ALL`] order, then the buffers in declaration order.
pub fn buffer_slot(b: usize) -> usize {
    TensorId::ALL.len() + b
}

/// The initial bytes of every allocation of a case, and which of them are uploaded.
#[derive(Clone, Debug)]
pub struct HostImage {
    /// Allocation layouts (q, k, v, o, then buffers).
    pub layout: ArenaLayout,
    /// Initial bytes of each allocation, `layout.allocs[i].total_bytes()` long.
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
    /// Builds the images for a planned case with its generated inputs and resolved buffers.
    pub fn build(case: &Case, plan: &Plan, inputs: &Inputs, buffers: &[ResolvedBuffer]) -> HostImage {
        let sizes: Vec<(String, u64)> =
            buffers.iter().map(|b| (b.name.clone(), b.count * b.dtype.size() as u64)).collect();
        let layout = ArenaLayout::new(case, plan, &sizes);
        let mut bytes = Vec::with_capacity(layout.allocs.len());
        let mut data_uninit = Vec::with_capacity(layout.allocs.len());
        let mut held = Vec::with_capacity(layout.allocs.len());
        for t in TensorId::ALL {
            let alloc = layout.tensor(t);
            let tp = plan.tensor(t);
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
            match t {
                TensorId::Q => data::write_strided(&inputs.q, tp, case.dtype, data),
                TensorId::K => data::write_strided(&inputs.k, tp, case.dtype, data),
                TensorId::V => data::write_strided(&inputs.v, tp, case.dtype, data),
                TensorId::O => {
                    let bits = sentinel_bits(case.dtype).to_le_bytes();
                    let eb = tp.elem_bytes as usize;
                    for_each_element(tp, |_, off| {
                        let at = off as usize * eb;
                        data[at..at + eb].copy_from_slice(&bits[..eb]);
                    });
                }
            }
            bytes.push(img);
            data_uninit.push(false);
            held.push(ranges);
        }
        for (alloc, buf) in layout.allocs[TensorId::ALL.len()..].iter().zip(buffers) {
            let (img, uninit) = buffer_image(alloc, buf);
            bytes.push(img);
            data_uninit.push(uninit);
            held.push(layout::held_whole(alloc));
        }
        HostImage { layout, bytes, data_uninit, held }
    }

    /// Images of the manifest buffers alone (no tensors), laid out as [`HostImage::build`]
    /// would lay them out: used for a second kernel (the GPU reference) that reads a case's
    /// tensors but writes buffers of its own.
    pub fn buffers_only(case: &Case, buffers: &[ResolvedBuffer]) -> HostImage {
        let allocs: Vec<AllocLayout> = buffers
            .iter()
            .map(|b| AllocLayout::for_buffer(&b.name, b.count * b.dtype.size() as u64, case.placement))
            .collect();
        let (bytes, data_uninit) = allocs.iter().zip(buffers).map(|(a, b)| buffer_image(a, b)).unzip();
        let held = allocs.iter().map(layout::held_whole).collect();
        HostImage { layout: ArenaLayout { allocs }, bytes, data_uninit, held }
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
            if self.holds_whole(i) {
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

    /// The data bytes of one allocation (the span, without redzones).
    pub fn data<'a>(&self, alloc: usize, bytes: &'a [u8]) -> &'a [u8] {
        let a = &self.layout.allocs[alloc];
        &bytes[a.data_offset as usize..(a.data_offset + a.span_bytes) as usize]
    }
}

/// The initial bytes of a buffer's allocation, and whether its data is left uninitialised.
fn buffer_image(alloc: &AllocLayout, buf: &ResolvedBuffer) -> (Vec<u8>, bool) {
    let mut img = vec![alloc.canary; alloc.total_bytes() as usize];
    let start = alloc.data_offset as usize;
    let fill = match buf.init {
        BufferInit::Zero => Some(0.0),
        BufferInit::NegInf => Some(f64::NEG_INFINITY),
        BufferInit::Const(x) => Some(x),
        BufferInit::Uninit => None,
    };
    if let Some(x) = fill {
        let elem = buffer_element_bytes(buf.dtype, x);
        for chunk in img[start..start + (buf.count as usize * elem.len())].chunks_exact_mut(elem.len()) {
            chunk.copy_from_slice(&elem);
        }
    }
    (img, fill.is_none())
}

/// Little-endian bytes of one buffer element holding `x` (saturating for integers).
pub fn buffer_element_bytes(dtype: BufferDtype, x: f64) -> Vec<u8> {
    match dtype {
        BufferDtype::F16 => half::f16::from_f64(x).to_le_bytes().to_vec(),
        BufferDtype::Bf16 => half::bf16::from_f64(x).to_le_bytes().to_vec(),
        BufferDtype::F32 => (x as f32).to_le_bytes().to_vec(),
        BufferDtype::F64 => x.to_le_bytes().to_vec(),
        BufferDtype::I32 => (x as i32).to_le_bytes().to_vec(),
        BufferDtype::U32 => (x as u32).to_le_bytes().to_vec(),
    }
}

/// Reads buffer elements back as f64.
pub fn buffer_values(dtype: BufferDtype, bytes: &[u8]) -> Vec<f64> {
    let size = dtype.size() as usize;
    bytes
        .chunks_exact(size)
        .map(|c| match dtype {
            BufferDtype::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f64(),
            BufferDtype::Bf16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f64(),
            BufferDtype::F32 => f32::from_le_bytes(c.try_into().expect("4 bytes")) as f64,
            BufferDtype::F64 => f64::from_le_bytes(c.try_into().expect("8 bytes")),
            BufferDtype::I32 => i32::from_le_bytes(c.try_into().expect("4 bytes")) as f64,
            BufferDtype::U32 => u32::from_le_bytes(c.try_into().expect("4 bytes")) as f64,
        })
        .collect()
}
