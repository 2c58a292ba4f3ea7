//! The device half of the arena: one `cuMemAlloc` per tensor, filled from a
//! [`super::HostImage`] and read back whole after the launch.
//!
//! Allocations are separate on purpose: packing tensors into one slab would hide overruns from
//! compute-sanitizer (measured: memcheck does not report an access that lands in a neighbouring
//! allocation), and `cuMemAlloc` returns 256-byte-aligned pointers, so the case's byte offset
//! alone decides each tensor's alignment residue.
//!
//! Outside a sanitizer ([`pooled`]), allocations come from a stream-ordered pool of the arena's
//! own (`cuMemPoolCreate`, `cuMemAllocFromPoolAsync` on the null stream) with its release
//! threshold raised, so a worker reuses
//! the memory of its last cases instead of mapping and unmapping it per case: on an H100 that
//! mapping cost a faulting campaign's passing cases tens of milliseconds each, and stalled
//! while other workers' contexts were torn down. The allocations stay separate and keep their
//! exact sizes; a pointer that is not 256-byte aligned is never used. The pool is not the
//! device's default one, which a Python target's own `cudaMallocAsync` shares: memory the
//! target frees can never come back as an arena allocation, nor the other way round.
//!
//! A Python target sees the arena through DLPack views, which may outlive the call (a callable
//! that keeps a tensor). Each view holds a [`DeviceArena::lease`]; an arena dropped while a
//! lease is out keeps its memory until the last view's deleter has run, so no arena memory is
//! handed out again while anything can still reach it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys};

use super::{AllocationTable, HostImage};
use crate::core::plan::Plan;
use crate::engine::gpu::CudaStatus;

/// Device allocations of one case, freed on drop.
#[derive(Debug)]
pub struct DeviceArena {
    /// `(device pointer, bytes)` per allocation, in the image's order.
    pub allocs: Vec<(sys::CUdeviceptr, u64)>,
    /// Which allocations came from the stream-ordered pool ([`pooled`]).
    pooled: Vec<bool>,
    /// Held by every view of the arena's memory handed to a target ([`DeviceArena::lease`]).
    leases: Arc<()>,
}

/// Allocations of dropped arenas whose views are still alive, freed once their leases are back.
static QUARANTINE: Mutex<Vec<Quarantined>> = Mutex::new(Vec::new());

/// One dropped arena's allocations (pointer, pooled) and its lease counter.
type Quarantined = (Arc<()>, Vec<(sys::CUdeviceptr, bool)>);

/// Frees the quarantined allocations no view holds any more.
fn sweep_quarantine() {
    let mut q = QUARANTINE.lock().unwrap_or_else(|e| e.into_inner());
    q.retain(|(leases, allocs)| {
        if Arc::strong_count(leases) > 1 {
            return true;
        }
        allocs.iter().for_each(|&(ptr, pooled)| release(ptr, pooled));
        false
    });
}

/// The device pool allocations come from (see the module docs), as an address; 0 when off.
static POOL: AtomicUsize = AtomicUsize::new(0);

/// The pointer alignment the arena's layouts assume (`cuMemAlloc`'s guarantee).
const BASE_ALIGN: u64 = 256;

/// Pool requests are rounded up to this, as `cuMemAlloc` rounds its own: the pool packs its
/// allocations tightly, so without the slack a one-element overrun of a tensor placed at the
/// end of its allocation would land in the next tensor and show as a second bug (an input
/// clobbered) where `cuMemAlloc` gave the same bug one symptom (seen on an H100).
const SLACK_GRANULE: usize = 512;

/// Turns pooled allocation on or off for this process (off under a sanitizer, whose view of an
/// allocation's bounds must be `cuMemAlloc`'s). Turning it on the first time creates the arena's
/// pool on the current device, its release threshold raised so freed memory stays with the
/// process; a pool that cannot be created leaves allocation unpooled.
pub fn pooled(on: bool) {
    if !on {
        POOL.store(0, Ordering::Relaxed);
        return;
    }
    if POOL.load(Ordering::Relaxed) != 0 {
        return;
    }
    let keep = || -> Result<sys::CUmemoryPool, sys::CUresult> {
        let mut device = 0;
        // SAFETY: writes one device handle; a context is current on this thread.
        unsafe { sys::cuCtxGetDevice(&mut device) }.result().map_err(|e| e.0)?;
        // SAFETY: zeroed properties are the documented defaults; the fields set below name a
        // pinned allocation on this device.
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = device;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: writes one pool handle from valid properties.
        unsafe { sys::cuMemPoolCreate(&mut pool, &props) }.result().map_err(|e| e.0)?;
        let mut threshold = u64::MAX;
        // SAFETY: the release threshold attribute takes a u64.
        unsafe { result::mem_pool::set_attribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, (&mut threshold as *mut u64).cast()) }
            .map_err(|e| e.0)?;
        Ok(pool)
    };
    if let Ok(pool) = keep() {
        POOL.store(pool as usize, Ordering::Relaxed);
    }
}

/// One allocation of `len` bytes: from `pool` (a handle, 0 for none), else `cuMemAlloc`; says
/// which.
fn allocate(len: usize, pool: usize) -> Result<(sys::CUdeviceptr, bool), CudaStatus> {
    if pool != 0 {
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: a positive size from the arena's pool on the null stream, which orders it
        // before the copies and launches that use it.
        match unsafe { sys::cuMemAllocFromPoolAsync(&mut ptr, len.next_multiple_of(SLACK_GRANULE), pool as sys::CUmemoryPool, std::ptr::null_mut()) }.result() {
            Ok(()) if ptr.is_multiple_of(BASE_ALIGN) => return Ok((ptr, true)),
            Ok(()) => {
                // SAFETY: just allocated on the null stream.
                let _ = unsafe { result::free_async(ptr, std::ptr::null_mut()) };
            }
            Err(_) => {
                // Out of memory, perhaps for what the pool keeps: hand it back before
                // `cuMemAlloc` tries (which reports the error the user sees).
                // SAFETY: the pool handle `pooled` stored; syncing first lets pending frees land.
                let _ = crate::engine::gpu::synchronize();
                let _ = unsafe { result::mem_pool::trim_to(pool as sys::CUmemoryPool, 0) };
            }
        }
    }
    // SAFETY: plain allocation of a positive size.
    unsafe { result::malloc_sync(len) }.map(|ptr| (ptr, false)).map_err(CudaStatus::from_driver)
}

/// Frees what [`allocate`] returned: a pool's pointer goes back to the pool.
fn release(ptr: sys::CUdeviceptr, from_pool: bool) {
    if from_pool {
        // SAFETY: a live pool allocation, freed once, ordered on the null stream after its uses.
        let _ = unsafe { result::free_async(ptr, std::ptr::null_mut()) };
    } else {
        // SAFETY: a live cuMemAlloc allocation, freed once; after a sticky error the free fails
        // and the process is about to exit anyway.
        let _ = unsafe { result::free_sync(ptr) };
    }
}

impl DeviceArena {
    /// An arena over allocations it does not own (another arena's, viewed by a reference
    /// kernel): empty its list before it drops.
    pub fn view(allocs: Vec<(sys::CUdeviceptr, u64)>) -> DeviceArena {
        DeviceArena { allocs, pooled: Vec::new(), leases: Arc::new(()) }
    }

    /// Allocates and uploads every allocation of `image`.
    pub fn upload(image: &HostImage) -> Result<DeviceArena, CudaStatus> {
        sweep_quarantine();
        let pool = POOL.load(Ordering::Relaxed);
        let mut arena = DeviceArena { allocs: Vec::with_capacity(image.bytes.len()), pooled: Vec::with_capacity(image.bytes.len()), leases: Arc::new(()) };
        for (i, bytes) in image.bytes.iter().enumerate() {
            if bytes.is_empty() {
                // Left out of the image (it stands for another arena's allocation).
                arena.allocs.push((0, 0));
                arena.pooled.push(false);
                continue;
            }
            let (ptr, pooled) = allocate(bytes.len(), pool)?;
            arena.pooled.push(pooled);
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

    /// A lease on the arena's memory, for a view handed to a target: while any lease is out,
    /// dropping the arena keeps its memory (see the module docs).
    pub fn lease(&self) -> Arc<()> {
        Arc::clone(&self.leases)
    }

    /// The allocation table for mapping device addresses back to tensors.
    pub fn table(&self, image: &HostImage, plan: &Plan) -> AllocationTable {
        AllocationTable { entries: self.allocs.iter().zip(&image.layout.allocs).map(|(&(p, _), a)| (p, a.clone())).collect(), plans: plan.tensors.clone() }
    }
}

impl Drop for DeviceArena {
    fn drop(&mut self) {
        let owned: Vec<(sys::CUdeviceptr, bool)> =
            self.allocs.iter().enumerate().filter(|(_, (p, _))| *p != 0).map(|(i, &(ptr, _))| (ptr, self.pooled.get(i).copied().unwrap_or(false))).collect();
        if Arc::strong_count(&self.leases) > 1 {
            QUARANTINE.lock().unwrap_or_else(|e| e.into_inner()).push((Arc::clone(&self.leases), owned));
            return;
        }
        owned.into_iter().for_each(|(ptr, pooled)| release(ptr, pooled));
        sweep_quarantine();
    }
}
