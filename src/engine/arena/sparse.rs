//! Sparse allocations: an allocation the image holds only in ranges (a tensor pushed past 2³¹
//! elements by a gigabyte stride gap, [`super::HostImage::held`]) gets physical memory only
//! under its held ranges.
//!
//! Such an allocation spans 4 to 8 GiB, nearly all of it gap. Backing it whole made the driver
//! map every page of it: on an H100 that upload took 2 to 2.5 s (a pushed case of fa_s512,
//! against 20 ms for a plain case), which set the pace of a whole campaign, since every case
//! after it waits to be filed in order. Here the span is a reserved range of virtual addresses
//! (`cuMemAddressReserve`), and each held range, rounded out to the allocation granularity, is
//! backed by its own physical chunk (`cuMemCreate`, `cuMemMap`, `cuMemSetAccess`). The rest of
//! the span is unmapped: a kernel that reads or writes there (a wrapped 32-bit offset) faults
//! with an illegal address where it would have read the canary, which is as much a finding.
//!
//! Only outside a sanitizer: compute-sanitizer's view of an allocation's bounds is
//! `cuMemAlloc`'s, and its re-runs keep whole allocations.

use std::ops::Range;

use cudarc::driver::sys;

use crate::engine::gpu::CudaStatus;

/// One sparse allocation: the reserved span and its mapped chunks.
#[derive(Debug)]
pub struct Sparse {
    /// First address of the reserved span.
    pub base: sys::CUdeviceptr,
    /// Bytes reserved (the allocation's size rounded up to the granularity).
    reserved: usize,
    /// Mapped chunks: byte range from `base`, and the physical allocation behind it.
    chunks: Vec<(Range<u64>, sys::CUmemGenericAllocationHandle)>,
}

impl Sparse {
    /// The byte ranges (from `base`) that have memory behind them.
    pub fn mapped(&self) -> impl Iterator<Item = &Range<u64>> {
        self.chunks.iter().map(|(r, _)| r)
    }
}

/// The properties of device memory on the current context's device.
fn props() -> Result<sys::CUmemAllocationProp, CudaStatus> {
    let mut device = 0;
    // SAFETY: writes one device handle; a context is current on this thread.
    unsafe { sys::cuCtxGetDevice(&mut device) }.result().map_err(CudaStatus::from_driver)?;
    // SAFETY: zeroed properties are the documented defaults; the fields set below name pinned
    // memory on this device.
    let mut p: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    Ok(p)
}

/// The chunks that back `held` (ranges within `len` bytes): each range rounded out to
/// `granularity`, overlapping or touching ones merged.
pub fn chunks_of(held: &[Range<u64>], len: u64, granularity: u64) -> Vec<Range<u64>> {
    let end_of_span = len.next_multiple_of(granularity);
    let mut out: Vec<Range<u64>> = Vec::new();
    for r in held.iter().filter(|r| r.start < r.end) {
        let chunk = (r.start / granularity * granularity)..r.end.next_multiple_of(granularity).min(end_of_span);
        match out.last_mut() {
            Some(last) if chunk.start <= last.end => last.end = last.end.max(chunk.end),
            _ => out.push(chunk),
        }
    }
    out
}

/// Reserves `len` bytes of addresses and backs the ranges `held` with memory; on any failure
/// what was set up is undone and the driver's error returned.
pub fn allocate(len: usize, held: &[Range<u64>]) -> Result<Sparse, CudaStatus> {
    let prop = props()?;
    let mut granularity = 0usize;
    // SAFETY: writes one size from valid properties.
    unsafe { sys::cuMemGetAllocationGranularity(&mut granularity, &prop, sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM) }
        .result()
        .map_err(CudaStatus::from_driver)?;
    let reserved = len.next_multiple_of(granularity);
    let mut base: sys::CUdeviceptr = 0;
    // SAFETY: reserves addresses only; freed in `release`.
    unsafe { sys::cuMemAddressReserve(&mut base, reserved, granularity, 0, 0) }.result().map_err(CudaStatus::from_driver)?;
    let mut sparse = Sparse { base, reserved, chunks: Vec::new() };
    let access = sys::CUmemAccessDesc { location: prop.location, flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    for chunk in chunks_of(held, len as u64, granularity as u64) {
        let size = (chunk.end - chunk.start) as usize;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: a physical allocation of a multiple of the granularity.
        if let Err(e) = unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) }.result() {
            release(sparse);
            return Err(CudaStatus::from_driver(e));
        }
        let at = base + chunk.start;
        // SAFETY: maps the whole handle at an aligned address inside the reservation, then
        // opens it for reading and writing from this device.
        let mapped = unsafe { sys::cuMemMap(at, size, 0, handle, 0) }.result();
        if let Err(e) = mapped {
            // SAFETY: the handle was just created and is mapped nowhere.
            let _ = unsafe { sys::cuMemRelease(handle) };
            release(sparse);
            return Err(CudaStatus::from_driver(e));
        }
        sparse.chunks.push((chunk, handle));
        // SAFETY: the range was just mapped.
        if let Err(e) = unsafe { sys::cuMemSetAccess(at, size, &access, 1) }.result() {
            release(sparse);
            return Err(CudaStatus::from_driver(e));
        }
    }
    Ok(sparse)
}

/// Unmaps and frees a sparse allocation. Work queued on it is finished first (the arena's
/// launches run on the null stream); after a sticky error the calls fail and the process is
/// about to exit anyway.
pub fn release(sparse: Sparse) {
    let _ = crate::engine::gpu::synchronize();
    for (chunk, handle) in sparse.chunks {
        // SAFETY: each chunk was mapped once at this address, and its handle created once.
        let _ = unsafe { sys::cuMemUnmap(sparse.base + chunk.start, (chunk.end - chunk.start) as usize) };
        let _ = unsafe { sys::cuMemRelease(handle) };
    }
    // SAFETY: the reservation made in `allocate`, freed once, nothing mapped in it any more.
    let _ = unsafe { sys::cuMemAddressFree(sparse.base, sparse.reserved) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_ranges_become_granular_chunks_merged_where_they_meet() {
        const G: u64 = 2 << 20;
        // Two rows of a pushed tensor 4 GiB apart, the first with the leading redzone.
        let held = [0..4096 + 300, (4 << 30)..(4 << 30) + 8192];
        assert_eq!(chunks_of(&held, (4 << 30) + 8192, G), [0..G, (4 << 30)..(4 << 30) + G]);
        // Rows closer than a chunk share one; the span's end bounds the last.
        let held = [0..100, G - 10..G + 10, 3 * G + 5..3 * G + 6];
        assert_eq!(chunks_of(&held, 3 * G + 6, G), [0..2 * G, 3 * G..4 * G]);
        assert!(chunks_of(&[], 10, G).is_empty());
    }
}
