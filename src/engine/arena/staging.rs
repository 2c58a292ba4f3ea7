//! Pinned host memory that a case's downloads land in (issue 30, step 3).
//!
//! A copy from the device into ordinary (pageable) memory goes through the driver's own bounce
//! buffer, a chunk at a time, and waits for each: on an H200 a small attention case's three
//! reference outputs (about 4 MB of f64) took 0.7 ms that way, half of the case. Into pinned
//! memory the copy is one DMA at the bus's speed, and several copies share one
//! synchronisation. The buffer is kept from case to case (page-locking memory costs more than
//! the copies it serves) and grows to the largest case seen, up to [`Staging::MAX_BYTES`];
//! larger downloads (a pushed case's gigabytes) stay pageable.

use std::ffi::c_void;

use cudarc::driver::result;

use crate::engine::gpu::CudaStatus;

/// A pinned host buffer, reused by every download of a worker. It belongs to the context that
/// was current when it first grew: drop it while that context lives (the engine declares it
/// before its GPU).
#[derive(Debug, Default)]
pub struct Staging {
    ptr: Option<std::ptr::NonNull<u8>>,
    bytes: usize,
}

// SAFETY: pinned host memory may be read and written from any thread; the buffer is used
// through `&mut self` only.
unsafe impl Send for Staging {}

impl Staging {
    /// The most a staging buffer holds; a download past it is made into pageable memory.
    pub const MAX_BYTES: usize = 256 << 20;

    /// At least `bytes` bytes of pinned memory (what it held is lost when it grows), or `None`
    /// past [`Staging::MAX_BYTES`].
    pub fn reserve(&mut self, bytes: usize) -> Result<Option<&mut [u8]>, CudaStatus> {
        if bytes > Self::MAX_BYTES {
            return Ok(None);
        }
        if bytes > self.bytes || self.ptr.is_none() {
            // A copy queued into the old buffer must land before it is freed.
            if self.ptr.is_some() {
                crate::engine::gpu::synchronize()?;
            }
            self.release();
            let want = bytes.next_power_of_two().max(1 << 16);
            // SAFETY: a pinned allocation of a positive size, freed once by `release`.
            let ptr = unsafe { result::malloc_host(want, 0) }.map_err(CudaStatus::from_driver)?;
            // Zeroed once, so that no slice ever covers memory that was never written.
            // SAFETY: `want` bytes were just allocated at `ptr`.
            unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, want) };
            self.ptr = std::ptr::NonNull::new(ptr.cast::<u8>());
            self.bytes = want;
        }
        let ptr = self.ptr.expect("allocated above");
        // SAFETY: `self.bytes` bytes of pinned memory owned by this buffer, borrowed mutably
        // through `self` for as long as the slice lives.
        Ok(Some(unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), bytes) }))
    }

    fn release(&mut self) {
        if let Some(ptr) = self.ptr.take() {
            // SAFETY: allocated by `reserve` with cuMemHostAlloc, freed once; nothing borrows it
            // (`reserve`'s slices borrow `self`).
            let _ = unsafe { result::free_host(ptr.as_ptr().cast::<c_void>()) };
        }
        self.bytes = 0;
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        self.release();
    }
}
