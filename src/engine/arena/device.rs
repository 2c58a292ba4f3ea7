//! The device half of the arena: one `cuMemAlloc` per tensor, filled from a
//! [`super::HostImage`] and read back whole after the launch.
//!
//! Allocations are separate on purpose: packing tensors into one slab would hide overruns from
//! compute-sanitizer (measured: memcheck does not report an access that lands in a neighbouring
//! allocation), and `cuMemAlloc` returns 256-byte-aligned pointers, so the case's byte offset
//! alone decides each tensor's alignment residue.
//!
//! An allocation the image holds only in ranges (a tensor pushed past 2³¹ elements by a
//! gigabyte stride gap) has memory only under those ranges, outside a sanitizer
//! ([`super::sparse`]).
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

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys};

use super::staging::Staging;
use super::{held_ranges, AllocationTable, ArenaLayout, HostImage};
use crate::core::plan::Plan;
use crate::engine::data::device::{DeviceGenError, DeviceGenerator};
use crate::engine::data::Recipe;
use crate::engine::gpu::CudaStatus;

/// Why [`DeviceArena::fill`] could not make a case's arena on the device.
#[derive(Debug, thiserror::Error)]
pub enum DeviceFillError {
    /// An allocation or copy failed.
    #[error("filling the arena on the device: {0}")]
    Cuda(CudaStatus),
    /// The generator could not run.
    #[error(transparent)]
    Generator(#[from] DeviceGenError),
    /// A tensor drawn on the host lies in a sparse allocation (pushed past 2^31 elements): the
    /// host image's upload handles it.
    #[error("{0}: values drawn on the host in an allocation held in ranges; upload the host image instead")]
    HostValuesInRanges(String),
}

/// Device allocations of one case, freed on drop.
#[derive(Debug)]
pub struct DeviceArena {
    /// `(device pointer, bytes)` per allocation, in the image's order.
    pub allocs: Vec<(sys::CUdeviceptr, u64)>,
    /// What backs each allocation.
    backing: Vec<Backing>,
    /// Held by every view of the arena's memory handed to a target ([`DeviceArena::lease`]).
    leases: Arc<()>,
}

/// Allocations of dropped arenas whose views are still alive, freed once their leases are back.
static QUARANTINE: Mutex<Vec<Quarantined>> = Mutex::new(Vec::new());

/// One dropped arena's allocations and its lease counter.
type Quarantined = (Arc<()>, Vec<(sys::CUdeviceptr, Backing)>);

/// What backs one allocation.
#[derive(Debug)]
enum Backing {
    /// `cuMemAlloc` (or nothing: an allocation left out of the image).
    Plain,
    /// The arena's stream-ordered pool ([`pooled`]).
    Pool,
    /// Memory under its held ranges only ([`super::sparse`]).
    Sparse(super::sparse::Sparse),
}

/// Frees the quarantined allocations no view holds any more.
fn sweep_quarantine() {
    let mut q = QUARANTINE.lock().unwrap_or_else(|e| e.into_inner());
    let (free, kept): (Vec<Quarantined>, Vec<Quarantined>) = std::mem::take(&mut *q).into_iter().partition(|(leases, _)| Arc::strong_count(leases) == 1);
    *q = kept;
    drop(q);
    free.into_iter().flat_map(|(_, allocs)| allocs).for_each(|(ptr, backing)| release(ptr, backing));
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
    if let Ok(pool) = new_pool() {
        POOL.store(pool as usize, Ordering::Relaxed);
    }
}

/// A stream-ordered pool on the current device, its release threshold raised so freed memory
/// stays with the process.
fn new_pool() -> Result<sys::CUmemoryPool, sys::CUresult> {
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

/// Frees one allocation: a pool's pointer goes back to the pool.
fn release(ptr: sys::CUdeviceptr, backing: Backing) {
    match backing {
        // SAFETY: a live pool allocation, freed once, ordered on the null stream after its uses.
        Backing::Pool => drop(unsafe { result::free_async(ptr, std::ptr::null_mut()) }),
        // SAFETY: a live cuMemAlloc allocation, freed once; after a sticky error the free fails
        // and the process is about to exit anyway.
        Backing::Plain => drop(unsafe { result::free_sync(ptr) }),
        Backing::Sparse(sparse) => super::sparse::release(sparse),
    }
}

impl DeviceArena {
    /// An arena over allocations it does not own (another arena's, viewed by a reference
    /// kernel): empty its list before it drops.
    pub fn view(allocs: Vec<(sys::CUdeviceptr, u64)>) -> DeviceArena {
        DeviceArena { allocs, backing: Vec::new(), leases: Arc::new(()) }
    }

    /// Allocates and uploads every allocation of `image`. Outside a sanitizer an allocation
    /// held in ranges is sparse ([`super::sparse`]); where the driver cannot map one, it is
    /// allocated whole as under a sanitizer (the same bytes, seconds slower).
    pub fn upload(image: &HostImage) -> Result<DeviceArena, CudaStatus> {
        let sizes: Vec<u64> = image.bytes.iter().map(|b| b.len() as u64).collect();
        let arena = DeviceArena::allocate(&sizes, &image.held)?;
        (0..sizes.len()).filter(|&i| sizes[i] > 0).try_for_each(|i| arena.write(image, i))?;
        Ok(arena)
    }

    /// Allocates `sizes[i]` bytes per allocation (0: left out, it stands for another arena's
    /// allocation); one held in more than one range ([`HostImage::held`]) is sparse outside a
    /// sanitizer. Nothing is written.
    fn allocate(sizes: &[u64], held: &[Vec<std::ops::Range<u64>>]) -> Result<DeviceArena, CudaStatus> {
        sweep_quarantine();
        let pool = POOL.load(Ordering::Relaxed);
        let mut arena = DeviceArena { allocs: Vec::with_capacity(sizes.len()), backing: Vec::with_capacity(sizes.len()), leases: Arc::new(()) };
        for (i, &len) in sizes.iter().enumerate() {
            if len == 0 {
                arena.allocs.push((0, 0));
                arena.backing.push(Backing::Plain);
                continue;
            }
            let sparse = (pool != 0 && held[i].len() > 1).then(|| super::sparse::allocate(len as usize, &held[i]).ok()).flatten();
            let (ptr, backing) = match sparse {
                Some(sparse) => (sparse.base, Backing::Sparse(sparse)),
                None => match allocate(len as usize, pool)? {
                    (ptr, true) => (ptr, Backing::Pool),
                    (ptr, false) => (ptr, Backing::Plain),
                },
            };
            arena.backing.push(backing);
            arena.allocs.push((ptr, len));
        }
        Ok(arena)
    }

    /// Allocates a case's arena and writes its initial contents on the device, byte for byte
    /// what [`DeviceArena::upload`] of its [`HostImage`] writes: the canary over every
    /// allocation (the mapped chunks of a sparse one), then each tensor's elements per its
    /// [`Recipe`] (drawn by the GPU's data scheme v2, a constant, or, for the few tensors drawn
    /// on the host, the host's values); an uninitialised tensor's span is left unwritten. Only
    /// the host's values cross the bus, nothing the GPU can make itself. Queued on the null
    /// stream; a fault shows at the next synchronisation.
    pub fn fill(layout: &ArenaLayout, plan: &Plan, recipes: &[Recipe], generator: &DeviceGenerator) -> Result<DeviceArena, DeviceFillError> {
        let arena = DeviceArena::for_layout(layout, plan)?;
        arena.refill(layout, plan, recipes, generator, &|_| true)?;
        Ok(arena)
    }

    /// The allocations [`DeviceArena::fill`] makes for `layout`, with nothing written yet: a
    /// caller that queues the fill later ([`DeviceArena::refill`] of every tensor) puts it next
    /// to the work that follows it.
    pub fn for_layout(layout: &ArenaLayout, plan: &Plan) -> Result<DeviceArena, DeviceFillError> {
        let held: Vec<Vec<std::ops::Range<u64>>> = plan.tensors.iter().map(|tp| held_ranges(&layout.allocs[tp.index], tp)).collect();
        let sizes: Vec<u64> = layout.allocs.iter().map(|a| a.total_bytes()).collect();
        DeviceArena::allocate(&sizes, &held).map_err(DeviceFillError::Cuda)
    }

    /// Writes, on the device, the initial contents of the tensors `which` selects, as
    /// [`DeviceArena::fill`] writes them (before a second run of the same case, or the first
    /// time into an arena made by [`DeviceArena::for_layout`]).
    pub fn refill(
        &self,
        layout: &ArenaLayout,
        plan: &Plan,
        recipes: &[Recipe],
        generator: &DeviceGenerator,
        which: &dyn Fn(&crate::core::plan::TensorPlan) -> bool,
    ) -> Result<(), DeviceFillError> {
        let held: Vec<Vec<std::ops::Range<u64>>> = plan.tensors.iter().map(|tp| held_ranges(&layout.allocs[tp.index], tp)).collect();
        self.write_recipes(layout, plan, recipes, generator, &held, which)
    }

    /// Writes each selected tensor's allocation per its recipe: canary, then its elements.
    fn write_recipes(
        &self,
        layout: &ArenaLayout,
        plan: &Plan,
        recipes: &[Recipe],
        generator: &DeviceGenerator,
        held: &[Vec<std::ops::Range<u64>>],
        which: &dyn Fn(&crate::core::plan::TensorPlan) -> bool,
    ) -> Result<(), DeviceFillError> {
        let arena = self;
        for tp in plan.tensors.iter().filter(|tp| which(tp)) {
            let (i, a) = (tp.index, &layout.allocs[tp.index]);
            let (ptr, len) = arena.allocs[i];
            let memset = |start: u64, bytes: u64| arena.memset(i, start, bytes, a.canary).map_err(DeviceFillError::Cuda);
            let data = ptr + a.data_offset;
            match &recipes[i] {
                Recipe::Uninit => {
                    memset(0, a.data_offset)?;
                    memset(a.data_offset + a.span_bytes, len - a.data_offset - a.span_bytes)?;
                }
                Recipe::Counter { params, integer } => {
                    arena.canary_everywhere(i, a.canary).map_err(DeviceFillError::Cuda)?;
                    generator.store(data, tp, params, *integer)?;
                }
                Recipe::Constant(bits) => {
                    arena.canary_everywhere(i, a.canary).map_err(DeviceFillError::Cuda)?;
                    generator.constant(data, tp, *bits)?;
                }
                Recipe::Host(values) => {
                    if held[i].len() > 1 {
                        return Err(DeviceFillError::HostValuesInRanges(tp.name.clone()));
                    }
                    let mut bytes = vec![a.canary; len as usize];
                    crate::engine::data::write_strided(values, tp, &mut bytes[a.data_offset as usize..]);
                    // SAFETY: `bytes` is the allocation's length; the copy is synchronous.
                    unsafe { result::memcpy_htod_sync(ptr, &bytes) }.map_err(|e| DeviceFillError::Cuda(CudaStatus::from_driver(e)))?;
                }
            }
        }
        Ok(())
    }

    /// Re-uploads allocation `i` from the image (e.g. the output before a second run). An
    /// uninitialised buffer gets only its redzones written; an allocation the image holds in
    /// ranges ([`HostImage::held`]) is set to its canary on the device, then gets its ranges.
    pub fn write(&self, image: &HostImage, i: usize) -> Result<(), CudaStatus> {
        let ptr = self.allocs[i].0;
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
            self.canary_everywhere(i, a.canary)?;
            return image.held[i].iter().try_for_each(|r| copy(r.start as usize, r.end as usize));
        }
        if image.data_uninit[i] {
            copy(0, a.data_offset as usize)?;
            copy((a.data_offset + a.span_bytes) as usize, bytes.len())
        } else {
            copy(0, bytes.len())
        }
    }

    /// Sets `bytes` bytes of allocation `i` from offset `start` to `byte`, queued on the null
    /// stream (ordered before the copies and launches that follow).
    fn memset(&self, i: usize, start: u64, bytes: u64, byte: u8) -> Result<(), CudaStatus> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: a range of the live allocation with memory behind it (the caller's promise).
        unsafe { result::memset_d8_async(self.allocs[i].0 + start, byte, bytes as usize, std::ptr::null_mut()) }.map_err(CudaStatus::from_driver)
    }

    /// The canary everywhere allocation `i` has memory: the whole allocation, or a sparse one's
    /// mapped chunks.
    fn canary_everywhere(&self, i: usize, canary: u8) -> Result<(), CudaStatus> {
        match self.backing.get(i) {
            Some(Backing::Sparse(sparse)) => sparse.mapped().try_for_each(|r| self.memset(i, r.start, r.end - r.start, canary)),
            _ => self.memset(i, 0, self.allocs[i].1, canary),
        }
    }

    /// Downloads every allocation: whole, or only its held ranges (zeros elsewhere, never
    /// written, as in the image).
    pub fn download(&self, image: &HostImage, staging: &mut Staging) -> Result<Vec<Vec<u8>>, CudaStatus> {
        let every: Vec<usize> = (0..self.allocs.len()).collect();
        Ok(self.download_staged(image, &every, staging)?.into_iter().map(Cow::into_owned).collect())
    }

    /// Downloads allocations `which`, as [`DeviceArena::download_one`] downloads each, with one
    /// synchronisation: into `staging` (pinned) when they fit it together, else one by one
    /// into pageable memory. Their bytes in `which` order, borrowed from `staging` or owned.
    pub fn download_staged<'s>(&self, image: &HostImage, which: &[usize], staging: &'s mut Staging) -> Result<Vec<Cow<'s, [u8]>>, CudaStatus> {
        let Some(buf) = staging.reserve(self.download_bytes(which))? else {
            return which.iter().map(|&i| self.download_one(image, i).map(Cow::Owned)).collect();
        };
        // SAFETY: `buf` is pinned (staging) and is read only after the synchronisation.
        unsafe { self.queue_download(image, which, buf) }?;
        crate::engine::gpu::synchronize()?;
        Ok(self.split(which, buf).into_iter().map(Cow::Borrowed).collect())
    }

    /// The bytes [`DeviceArena::queue_download`] of `which` needs.
    pub fn download_bytes(&self, which: &[usize]) -> usize {
        which.iter().map(|&i| self.allocs[i].1 as usize).sum()
    }

    /// Queues, on the null stream, the download of allocations `which` into `into`, one after
    /// another (as [`DeviceArena::download_one`] makes each: held ranges, zeros elsewhere);
    /// nothing waits. [`DeviceArena::split`] cuts `into` into them once the stream has been
    /// synchronised.
    ///
    /// # Safety
    /// `into` must be pinned host memory ([`Staging`]) of at least
    /// [`DeviceArena::download_bytes`] bytes that stays allocated, and is not read, until the
    /// stream has been synchronised.
    pub unsafe fn queue_download(&self, image: &HostImage, which: &[usize], into: &mut [u8]) -> Result<(), CudaStatus> {
        let mut at = 0;
        for &i in which {
            let (ptr, len) = self.allocs[i];
            let region = &mut into[at..at + len as usize];
            let held = &image.held[i];
            if held.iter().map(|r| r.end - r.start).sum::<u64>() != len {
                region.fill(0);
            }
            for r in held {
                // SAFETY: `ptr` is a live allocation of `len` bytes and the range lies inside it;
                // the region is pinned and outlives the copy (the caller's promise).
                unsafe { result::memcpy_dtoh_async(&mut region[r.start as usize..r.end as usize], ptr + r.start, std::ptr::null_mut()) }
                    .map_err(CudaStatus::from_driver)?;
            }
            at += len as usize;
        }
        Ok(())
    }

    /// `bytes`, filled by [`DeviceArena::queue_download`] of `which`, cut into its allocations.
    pub fn split<'b>(&self, which: &[usize], bytes: &'b [u8]) -> Vec<&'b [u8]> {
        let mut at = 0;
        which
            .iter()
            .map(|&i| {
                let len = self.allocs[i].1 as usize;
                at += len;
                &bytes[at - len..at]
            })
            .collect()
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

    /// Whether allocation `i` has memory only under its held ranges ([`super::sparse`]).
    pub fn is_sparse(&self, i: usize) -> bool {
        matches!(self.backing.get(i), Some(Backing::Sparse(_)))
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
        // A view's arena (`DeviceArena::view`) has no backing list: it owns nothing it may free.
        let backing = std::mem::take(&mut self.backing);
        let owned: Vec<(sys::CUdeviceptr, Backing)> = self.allocs.iter().zip(backing).filter(|((p, _), _)| *p != 0).map(|(&(ptr, _), b)| (ptr, b)).collect();
        if Arc::strong_count(&self.leases) > 1 {
            QUARANTINE.lock().unwrap_or_else(|e| e.into_inner()).push((Arc::clone(&self.leases), owned));
            return;
        }
        owned.into_iter().for_each(|(ptr, backing)| release(ptr, backing));
        sweep_quarantine();
    }
}
