//! The device half of the arena: one `cuMemAlloc` per tensor, filled from a
//! [`HostImage`](super::HostImage) and read back whole after the launch.
//!
//! Allocations are separate on purpose: packing tensors into one slab would hide overruns from
//! compute-sanitizer (measured: memcheck does not report an access that lands in a neighbouring
//! allocation), and `cuMemAlloc` returns 256-byte-aligned pointers, so the case's byte offset
//! alone decides each tensor's alignment residue.

use cudarc::driver::{result, sys};

use super::{AllocationTable, HostImage};
use crate::gpu::CudaStatus;
use crate::plan::Plan;

/// Device allocations of one case, freed on drop.
#[derive(Debug)]
pub struct DeviceArena {
    /// `(device pointer, bytes)` per allocation, in the image's order.
    pub allocs: Vec<(sys::CUdeviceptr, u64)>,
}

impl DeviceArena {
    /// Allocates and uploads every allocation of `image`.
    pub fn upload(image: &HostImage) -> Result<DeviceArena, CudaStatus> {
        let mut arena = DeviceArena { allocs: Vec::with_capacity(image.bytes.len()) };
        for (i, bytes) in image.bytes.iter().enumerate() {
            if bytes.is_empty() {
                // Left out of the image (it stands for another arena's allocation).
                arena.allocs.push((0, 0));
                continue;
            }
            // SAFETY: plain allocation of a positive size.
            let ptr = unsafe { result::malloc_sync(bytes.len()) }.map_err(CudaStatus::from_driver)?;
            arena.allocs.push((ptr, bytes.len() as u64));
            arena.write(image, i)?;
        }
        Ok(arena)
    }

    /// Re-uploads allocation `i` from the image (e.g. the output before a second run). An
    /// uninitialised buffer gets only its redzones written; an allocation the image holds in
    /// ranges ([`HostImage::held`]) is set to its canary on the device, then gets its ranges.
    pub fn write(&self, image: &HostImage, i: usize) -> Result<(), CudaStatus> {
        let (ptr, len) = self.allocs[i];
        let bytes = &image.bytes[i];
        let a = &image.layout.allocs[i];
        let copy = |from: usize, to: usize| {
            if from < to {
                // SAFETY: the range lies inside the allocation, which is `bytes.len()` long.
                unsafe { result::memcpy_htod_sync(ptr + from as u64, &bytes[from..to]) }.map_err(CudaStatus::from_driver)
            } else {
                Ok(())
            }
        };
        if !image.holds_whole(i) {
            // SAFETY: the whole live allocation, `len` bytes.
            unsafe { result::memset_d8_sync(ptr, a.canary, len as usize) }.map_err(CudaStatus::from_driver)?;
            return image.held[i].iter().try_for_each(|r| copy(r.start as usize, r.end as usize));
        }
        if image.data_uninit[i] {
            copy(0, a.data_offset as usize)?;
            copy((a.data_offset + a.span_bytes) as usize, bytes.len())
        } else {
            copy(0, bytes.len())
        }
    }

    /// Downloads every allocation: whole, or only its held ranges (zeros elsewhere, never
    /// written, as in the image).
    pub fn download(&self, image: &HostImage) -> Result<Vec<Vec<u8>>, CudaStatus> {
        (0..self.allocs.len()).map(|i| self.download_one(image, i)).collect()
    }

    /// Downloads allocation `i` as [`DeviceArena::download`] does.
    pub fn download_one(&self, image: &HostImage, i: usize) -> Result<Vec<u8>, CudaStatus> {
        let (ptr, len) = self.allocs[i];
        let mut out = vec![0u8; len as usize];
        for r in &image.held[i] {
            // SAFETY: `ptr` is a live allocation of `len` bytes and the range lies inside it.
            unsafe { result::memcpy_dtoh_sync(&mut out[r.start as usize..r.end as usize], ptr + r.start) }.map_err(CudaStatus::from_driver)?;
        }
        Ok(out)
    }

    /// Device address of the first data byte of allocation `i`.
    pub fn data_ptr(&self, image: &HostImage, i: usize) -> u64 {
        self.allocs[i].0 + image.layout.allocs[i].data_offset
    }

    /// The allocation table for mapping device addresses back to tensors.
    pub fn table(&self, image: &HostImage, plan: &Plan) -> AllocationTable {
        AllocationTable {
            entries: self.allocs.iter().zip(&image.layout.allocs).map(|(&(p, _), a)| (p, a.clone())).collect(),
            plans: plan.tensors.clone(),
        }
    }
}

impl Drop for DeviceArena {
    fn drop(&mut self) {
        for &(ptr, _) in self.allocs.iter().filter(|(p, _)| *p != 0) {
            // SAFETY: each pointer came from malloc_sync and is freed once; after a sticky error
            // the free fails and the process is about to exit anyway.
            let _ = unsafe { result::free_sync(ptr) };
        }
    }
}
