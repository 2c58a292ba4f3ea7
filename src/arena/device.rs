//! The device half of the arena: one `cuMemAlloc` per tensor and buffer, filled from a
//! [`HostImage`](super::HostImage) and read back whole after the launch.
//!
//! Allocations are separate on purpose: packing tensors into one slab would hide overruns from
//! compute-sanitizer (see DESIGN.md, measured facts), and `cuMemAlloc` returns 256-byte-aligned
//! pointers, so the case's byte offset alone decides each tensor's alignment residue.

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
            // SAFETY: plain allocation of a positive size.
            let ptr = unsafe { result::malloc_sync(bytes.len()) }.map_err(CudaStatus::from_driver)?;
            arena.allocs.push((ptr, bytes.len() as u64));
            arena.write(image, i)?;
        }
        Ok(arena)
    }

    /// Re-uploads allocation `i` from the image (e.g. the output before a second run). An
    /// uninitialised buffer gets only its redzones written.
    pub fn write(&self, image: &HostImage, i: usize) -> Result<(), CudaStatus> {
        let (ptr, _) = self.allocs[i];
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
        if image.data_uninit[i] {
            copy(0, a.data_offset as usize)?;
            copy((a.data_offset + a.span_bytes) as usize, bytes.len())
        } else {
            copy(0, bytes.len())
        }
    }

    /// Downloads every allocation whole.
    pub fn download(&self) -> Result<Vec<Vec<u8>>, CudaStatus> {
        self.allocs.iter().map(|&(ptr, len)| self.read(ptr, len)).collect()
    }

    /// Downloads allocation `i` whole.
    pub fn download_one(&self, i: usize) -> Result<Vec<u8>, CudaStatus> {
        let (ptr, len) = self.allocs[i];
        self.read(ptr, len)
    }

    fn read(&self, ptr: sys::CUdeviceptr, len: u64) -> Result<Vec<u8>, CudaStatus> {
        let mut out = vec![0u8; len as usize];
        // SAFETY: `ptr` is a live allocation of `len` bytes.
        unsafe { result::memcpy_dtoh_sync(&mut out, ptr) }.map_err(CudaStatus::from_driver)?;
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
        for &(ptr, _) in &self.allocs {
            // SAFETY: each pointer came from malloc_sync and is freed once; after a sticky error
            // the free fails and the process is about to exit anyway.
            let _ = unsafe { result::free_sync(ptr) };
        }
    }
}
