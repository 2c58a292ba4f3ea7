//! The oracles on the device (issue 30, step 2): `kernels/harness/judge.cu`, compiled by NVRTC
//! with `--fmad=false`, counts on the GPU what the host oracles look for, and one small download
//! ([`DeviceSummary`]) says whether a run needs judging at all.
//!
//! The counts are a gate, not a second set of findings: a run whose counts show anything the
//! host oracles would report ([`DeviceSummary::needs_host`]) is downloaded and judged on the
//! host, by the same [`super::check_memory`] and [`super::check_values`] as any other run, so a
//! finding and its detail (first element, counts, message) are the host's whichever side looked
//! first. The gate is exact where it can be and errs towards the host where it cannot: an
//! infinite element where the gold is finite is sent to the host, which knows whether the gold
//! overflows the output's type there.
//!
//! What each count mirrors:
//! - memory: bytes that are not the canary in the redzones and in the data span, and at the
//!   stored elements' positions bytes that are not the canary (the span's others are its
//!   gaps') and bytes that are not the elements' initial contents, and elements still holding
//!   the sentinel. The initial contents are made again on the device from the case (canary,
//!   constant, v2 draw), never copied: a copy would be memory that a kernel reading out of
//!   bounds reaches, which changes what it reads (seen on an H200: a kernel that read past its
//!   tensors looked nondeterministic next to a copy of its arena);
//! - values: per judged output, against its fp64 gold (where a built-in op's GPU reference left
//!   it, else uploaded) in logical order, non-finite elements where the gold is finite,
//!   unmatched special values, and elements past the rule's limit.

use std::ffi::c_void;

use cudarc::driver::{result, sys};

use crate::core::layout::AllocLayout;
use crate::core::manifest::Role;
use crate::core::plan::{Plan, TensorPlan};
use crate::engine::arena::device::DeviceArena;
use crate::engine::arena::sentinel_bits;
use crate::engine::arena::staging::Staging;
use crate::engine::data::device::DgLayout;
use crate::engine::data::scheme2::DgTensor;
use crate::engine::data::Recipe;
use crate::engine::gpu::{CudaStatus, Gpu};
use crate::engine::launch::module::Module;
use crate::engine::reference::Rule;

/// Why the device oracles could not be built or run.
pub type DeviceJudgeError = crate::engine::launch::module::HarnessError;

/// judge.cu's entries, in the order [`DeviceJudge::load`] looks them up.
const MEMORY: usize = 0;
const VALUES: usize = 1;

/// `cf_j_alloc` of judge.cu: one allocation as the memory oracles check it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct JudgedAlloc {
    now: u64,
    len: u64,
    data: u64,
    span_end: u64,
    after: u64,
    row: u64,
    bits: u64,
    sentinel: u64,
    canary: u32,
    drawn: u32,
    integer: u32,
    check_sentinel: u32,
    params: DgTensor,
    stored: DgLayout,
}

/// Blocks per allocation and check of the memory launch, at most: a grid-stride loop does the
/// rest of a large allocation.
const MEMORY_BLOCKS: u64 = 1024;

/// Words per tensor in the summary (`CF_J_WORDS`).
const WORDS: usize = 8;

/// Where a built-in op's GPU reference left its gold on the device (`engine/worker/reference.rs`): its arena, kept until the
/// value oracles have read it, and per judged tensor of the case (roster position) the address
/// of its gold, dense f64 in logical order, and how many values.
pub struct DeviceGold {
    /// The reference's arena, held so its memory outlives the oracles' reads.
    pub arena: DeviceArena,
    /// `(tensor, address, values)` per judged output.
    pub at: Vec<(usize, u64, u64)>,
}

/// One tensor's counts, as judge.cu adds them (the `CF_J_*` words in order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorCounts {
    /// Bytes of the redzones that are not the canary (the don't-care tail is not compared).
    pub outside: u64,
    /// Bytes of the data span that are not the canary, at elements and in gaps.
    pub span: u64,
    /// Bytes at the stored elements' positions that are not their initial contents.
    pub elements: u64,
    /// Bytes at the stored elements' positions that are not the canary: `span` less these are
    /// the gaps' bytes that changed.
    pub noncanary: u64,
    /// Stored elements still holding the sentinel (counted only where it marks unwritten).
    pub sentinel: u64,
    /// Judged elements NaN or infinite where the gold is finite.
    pub nonfinite: u64,
    /// Judged elements that are not the gold's NaN or infinity.
    pub special: u64,
    /// Judged finite elements past the rule's limit.
    pub over: u64,
}

const _: () = assert!(std::mem::size_of::<TensorCounts>() == WORDS * 8);
// cf_j_alloc's size in judge.cu: eight u64s, four u32s, cf_dg_tensor (64), cf_dg_layout (152).
const _: () = assert!(std::mem::size_of::<JudgedAlloc>() == 296);

/// What the device oracles counted for one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceSummary {
    /// Per tensor of the plan, roster order.
    pub tensors: Vec<TensorCounts>,
    /// Set when a rule cannot be judged on the device (a NaN bound: the host's comparison fails
    /// whatever the values).
    pub undecided: bool,
}

impl DeviceSummary {
    /// Whether the host oracles would report anything for this run: then it is judged there.
    pub fn needs_host(&self, plan: &Plan) -> bool {
        self.undecided || plan.tensors.iter().zip(&self.tensors).any(|(tp, c)| tensor_needs_host(tp, c))
    }
}

/// The host oracles' conditions for one tensor, from its counts: damaged redzones or gaps (span
/// bytes that are not the canary, beyond those of elements); an input's element changed; a
/// written tensor's sentinel left; any value count.
fn tensor_needs_host(tp: &TensorPlan, c: &TensorCounts) -> bool {
    let memory = c.outside > 0
        || c.span > c.noncanary
        || match tp.role {
            Role::Input => c.elements > 0,
            _ => c.sentinel > 0,
        };
    memory || c.nonfinite > 0 || c.special > 0 || c.over > 0
}

/// A device buffer that grows on demand, freed on drop. A buffer it outgrows is kept (zeroed)
/// until then, not freed: between a case's two runs no memory may come or go that a kernel
/// reading out of bounds could have reached in the first.
#[derive(Debug, Default)]
struct Scratch {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    outgrown: Vec<(sys::CUdeviceptr, usize)>,
}

impl Scratch {
    /// At least `bytes` bytes; what it held before is lost when it grows.
    fn reserve(&mut self, bytes: usize) -> Result<sys::CUdeviceptr, CudaStatus> {
        if bytes > self.bytes {
            let want = bytes.next_power_of_two().max(4096);
            // SAFETY: a plain allocation of a positive size, freed once by `release`.
            let ptr = unsafe { result::malloc_sync(want) }.map_err(CudaStatus::from_driver)?;
            if self.bytes > 0 {
                self.outgrown.push((self.ptr, self.bytes));
            }
            (self.ptr, self.bytes) = (ptr, want);
            self.clear()?;
        }
        Ok(self.ptr)
    }

    /// Sets every byte to zero, queued on the null stream.
    fn clear(&self) -> Result<(), CudaStatus> {
        if self.bytes == 0 {
            return Ok(());
        }
        // SAFETY: the whole live buffer.
        unsafe { result::memset_d8_async(self.ptr, 0, self.bytes, std::ptr::null_mut()) }.map_err(CudaStatus::from_driver)
    }

    fn release(&mut self) {
        if self.bytes > 0 {
            self.outgrown.push((self.ptr, self.bytes));
            self.bytes = 0;
        }
        for (ptr, _) in self.outgrown.drain(..) {
            // SAFETY: allocated by `reserve`, freed once; cuMemFree waits for the work using it.
            let _ = unsafe { result::free_sync(ptr) };
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.release();
    }
}

/// The device oracles loaded on an open GPU, with the buffers they reuse from case to case.
pub struct DeviceJudge {
    module: Module,
    /// The counts of the run being judged: [`WORDS`] per tensor.
    summary: Scratch,
    /// The memory launch's allocations.
    allocs: Scratch,
    /// The gold values of the run's judged outputs.
    gold: Scratch,
    /// Pinned host memory the counts come back into ([`DeviceJudge::queue_read`]).
    landing: Staging,
    /// Pinned host memory the memory launch's allocations go up from: a copy from pageable
    /// memory would wait for the run queued before it.
    table: Staging,
    /// Tensors of the run being judged, and whether a rule was left undecided.
    tensors: usize,
    undecided: bool,
}

impl DeviceJudge {
    /// Compiles and loads `harness/judge.cu` of the kernels directory for `gpu`.
    pub fn load(gpu: &Gpu) -> Result<DeviceJudge, DeviceJudgeError> {
        let module = Module::harness("judge.cu", &["cf_j_memory", "cf_j_values"], gpu.info.arch, "loading the device oracles")?;
        Ok(DeviceJudge {
            module,
            summary: Scratch::default(),
            allocs: Scratch::default(),
            gold: Scratch::default(),
            landing: Staging::default(),
            table: Staging::default(),
            tensors: 0,
            undecided: false,
        })
    }

    /// Starts judging a run of a plan with `tensors` tensors: every count set to zero.
    pub fn begin(&mut self, tensors: usize) -> Result<(), DeviceJudgeError> {
        let bytes = tensors.max(1) * WORDS * 8;
        let ptr = self.summary.reserve(bytes).map_err(cuda("allocating the summary"))?;
        // SAFETY: `bytes` of the live summary buffer, on the null stream before the kernels.
        unsafe { result::memset_d8_async(ptr, 0, bytes, std::ptr::null_mut()) }.map_err(|e| cuda("clearing the summary")(CudaStatus::from_driver(e)))?;
        self.tensors = tensors;
        self.undecided = false;
        Ok(())
    }

    /// The memory oracles of every tensor of `plan`, in one launch: `allocs` are their
    /// allocations' layouts, `now` the allocations' bases after the run, `recipes` how each
    /// tensor's initial contents were made. Only drawn (v2) and constant contents can be made
    /// again on the device: a tensor of another recipe is refused (`false`), nothing launched.
    pub fn memory(&mut self, plan: &Plan, allocs: &[AllocLayout], now: &[u64], recipes: &[Recipe]) -> Result<bool, DeviceJudgeError> {
        let mut jobs: Vec<JudgedAlloc> = Vec::with_capacity(plan.tensors.len());
        for tp in plan.tensors.iter().filter(|tp| allocs[tp.index].total_bytes() > 0) {
            let (i, a) = (tp.index, &allocs[tp.index]);
            let (drawn, integer, params, bits) = match &recipes[i] {
                Recipe::Counter { params, integer } => (1, u32::from(*integer), *params, 0),
                Recipe::Constant(bits) => (0, 0, DgTensor::default(), *bits),
                Recipe::Host(_) | Recipe::Uninit => return Ok(false),
            };
            jobs.push(JudgedAlloc {
                now: now[i],
                len: a.total_bytes(),
                data: a.data_offset,
                span_end: a.data_offset + a.span_bytes,
                after: a.redzone_after_start(),
                row: self.row_index(i),
                bits,
                sentinel: sentinel_bits(tp.dtype),
                canary: u32::from(a.canary),
                drawn,
                integer,
                check_sentinel: u32::from(tp.role.is_written() && tp.init.marks_unwritten()),
                params,
                stored: DgLayout::of(tp),
            });
        }
        if jobs.is_empty() {
            return Ok(true);
        }
        let bytes = std::mem::size_of_val(jobs.as_slice());
        let mut table = self.allocs.reserve(bytes).map_err(cuda("allocating the memory checks"))?;
        let host = self.table.reserve(bytes).map_err(cuda("allocating the memory checks"))?.expect("a table is far below the staging limit");
        // SAFETY: JudgedAlloc is plain data laid out as judge.cu's, `bytes` long in all.
        host.copy_from_slice(unsafe { std::slice::from_raw_parts(jobs.as_ptr().cast::<u8>(), bytes) });
        // SAFETY: the table holds every job; the source is pinned and is written again only by
        // the next run's `memory`, after this run's checks have been waited for.
        unsafe { result::memcpy_htod_async(table, &*host, std::ptr::null_mut()) }
            .map_err(|e| cuda("uploading the memory checks")(CudaStatus::from_driver(e)))?;
        let items = jobs.iter().map(|j| j.len.max(j.stored.count())).max().unwrap_or(0).min(MEMORY_BLOCKS * 256);
        let mut summary = self.summary.ptr;
        let mut params = [ptr(&mut table), ptr(&mut summary)];
        // SAFETY: cf_j_memory(allocs, summary): the table and summary are this judge's, the
        // allocations the caller's, alive until `read` has waited.
        unsafe { self.module.launch_rows(MEMORY, items, 2 * jobs.len() as u32, &mut params) }.map_err(cuda("launching the device oracles"))?;
        Ok(true)
    }

    /// Copies each judged output's gold to the device, in one buffer; returns where each starts.
    /// Call before [`DeviceJudge::values`], and only once per run (the buffer is reused).
    pub fn stage_gold(&mut self, golds: &[&[f64]]) -> Result<Vec<u64>, DeviceJudgeError> {
        let total: usize = golds.iter().map(|g| g.len() * 8).sum();
        let base = self.gold.reserve(total).map_err(cuda("allocating the gold values"))?;
        let mut at = base;
        let mut starts = Vec::with_capacity(golds.len());
        for g in golds {
            starts.push(at);
            if !g.is_empty() {
                // SAFETY: `g` fits in the buffer from `at`: the buffer holds every gold.
                unsafe { result::memcpy_htod_sync(at, g) }.map_err(|e| cuda("uploading the gold values")(CudaStatus::from_driver(e)))?;
            }
            at += (g.len() * 8) as u64;
        }
        Ok(starts)
    }

    /// The value oracles of judged output `tp` (its data span at `data`) against `n` gold values
    /// at `gold`, under `rule`.
    pub fn values(&mut self, tp: &TensorPlan, data: u64, gold: u64, n: u64, rule: &Rule) -> Result<(), DeviceJudgeError> {
        let (relative, limit) = match *rule {
            Rule::Bound(tol) => (0i32, tol.bound),
            Rule::Relative(rel) => (1i32, rel),
        };
        // The host compares `error <= bound`, which a NaN bound fails even with nothing to
        // compare: no count can say that.
        if limit.is_nan() && relative == 0 {
            self.undecided = true;
            return Ok(());
        }
        let mut layout = DgLayout::logical(tp);
        let n = n.min(layout.count());
        let (mut d, mut g, mut count, mut r) = (data, gold, n, self.row(tp.index));
        let (mut sentinel, mut check) = (sentinel_bits(tp.dtype), i32::from(tp.init.marks_unwritten()));
        let (mut rel, mut lim) = (relative, limit);
        let mut params =
            [ptr(&mut d), ptr(&mut layout), ptr(&mut g), ptr(&mut count), ptr(&mut sentinel), ptr(&mut check), ptr(&mut rel), ptr(&mut lim), ptr(&mut r)];
        self.launch(VALUES, n, &mut params)
    }

    /// Waits for the run's checks and downloads their counts.
    pub fn read(&mut self) -> Result<DeviceSummary, DeviceJudgeError> {
        self.queue_read()?;
        crate::engine::gpu::synchronize().map_err(cuda("running the device oracles"))?;
        Ok(self.take())
    }

    /// Queues the counts' download behind the run's checks, and the buffers' clearing behind
    /// it; nothing waits. After the stream is synchronised, [`DeviceJudge::take`] reads them.
    pub fn queue_read(&mut self) -> Result<(), DeviceJudgeError> {
        let bytes = self.tensors * WORDS * 8;
        let landing = self.landing.reserve(bytes).map_err(cuda("allocating the summary's landing"))?.expect("a summary is far below the staging limit");
        if bytes > 0 {
            // SAFETY: the landing is pinned and lives in `self` until `take` reads it after the
            // caller's synchronisation; the summary buffer holds `self.tensors` rows.
            unsafe { result::memcpy_dtoh_async(landing, self.summary.ptr, std::ptr::null_mut()) }
                .map_err(|e| cuda("downloading the summary")(CudaStatus::from_driver(e)))?;
        }
        // Left as they were found: zeros. A kernel that reads out of bounds may reach these
        // buffers; what it reads there must not change between its two runs of a case.
        for scratch in [&self.summary, &self.allocs, &self.gold] {
            scratch.clear().map_err(cuda("clearing the device oracles' buffers"))?;
        }
        Ok(())
    }

    /// The counts [`DeviceJudge::queue_read`] queued, once the stream has been synchronised.
    pub fn take(&mut self) -> DeviceSummary {
        let bytes = self.tensors * WORDS * 8;
        let landing = self.landing.reserve(bytes).ok().flatten().expect("reserved by queue_read");
        let tensors = landing
            .chunks_exact(WORDS * 8)
            .map(|row| {
                let w = |k: usize| u64::from_le_bytes(row[k * 8..k * 8 + 8].try_into().expect("8 bytes"));
                TensorCounts { outside: w(0), span: w(1), elements: w(2), noncanary: w(3), sentinel: w(4), nonfinite: w(5), special: w(6), over: w(7) }
            })
            .collect();
        DeviceSummary { tensors, undecided: self.undecided }
    }

    /// The device address of tensor `i`'s counts.
    fn row(&self, i: usize) -> u64 {
        self.summary.ptr + self.row_index(i) * (WORDS * 8) as u64
    }

    /// Tensor `i`'s row of the summary.
    fn row_index(&self, i: usize) -> u64 {
        assert!(i < self.tensors, "tensor {i} of a run begun with {} tensors", self.tensors);
        i as u64
    }

    fn launch(&self, at: usize, n: u64, params: &mut [*mut c_void]) -> Result<(), DeviceJudgeError> {
        // SAFETY: every caller builds `params` in judge.cu's parameter order from locals that
        // outlive this call; the device pointers are the run's live allocations and this
        // judge's buffers, which stay allocated until `read` has waited for the kernels.
        unsafe { self.module.launch_over(at, n, params) }.map_err(cuda("launching the device oracles"))
    }
}

fn ptr<T>(v: &mut T) -> *mut c_void {
    (v as *mut T).cast()
}

fn cuda(what: &'static str) -> impl Fn(CudaStatus) -> DeviceJudgeError {
    move |status| DeviceJudgeError::Cuda { what, status }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        let m = crate::core::manifest::Manifest::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/testing/simple_attn.toml")).unwrap();
        let mut c = crate::core::case::Case::new("k", crate::core::case::Dtype::F16);
        for (k, v) in [("batch", 1), ("heads_q", 1), ("heads_kv", 1), ("seq_q", 4), ("seq_k", 4), ("head_dim", 8)] {
            c.dims.insert(k.into(), v);
        }
        Plan::new(&c, &m).unwrap()
    }

    fn summary(plan: &Plan, at: &str, counts: TensorCounts) -> DeviceSummary {
        let mut s = DeviceSummary { tensors: vec![TensorCounts::default(); plan.tensors.len()], undecided: false };
        s.tensors[plan.tensor(at).unwrap().index] = counts;
        s
    }

    #[test]
    fn a_quiet_run_needs_no_host_and_every_host_condition_sends_it_there() {
        let p = plan();
        let (input, output) = ("q", p.tensors.iter().find(|t| t.role.is_judged()).unwrap().name.clone());
        assert!(!summary(&p, input, TensorCounts::default()).needs_host(&p));
        // An output's elements change: that is its job. An input's elements differ from the canary.
        assert!(!summary(&p, &output, TensorCounts { span: 16, noncanary: 16, elements: 16, ..Default::default() }).needs_host(&p));
        assert!(!summary(&p, input, TensorCounts { span: 16, noncanary: 16, ..Default::default() }).needs_host(&p));
        for (at, counts, why) in [
            (input, TensorCounts { outside: 1, ..Default::default() }, "a redzone"),
            (input, TensorCounts { span: 16, noncanary: 16, elements: 1, ..Default::default() }, "an input's element"),
            (input, TensorCounts { span: 17, noncanary: 16, ..Default::default() }, "an input's gap"),
            (output.as_str(), TensorCounts { span: 17, noncanary: 16, elements: 16, ..Default::default() }, "an output's gap"),
            (output.as_str(), TensorCounts { sentinel: 1, ..Default::default() }, "a sentinel left"),
            (output.as_str(), TensorCounts { nonfinite: 1, ..Default::default() }, "a NaN"),
            (output.as_str(), TensorCounts { special: 1, ..Default::default() }, "a special value"),
            (output.as_str(), TensorCounts { over: 1, ..Default::default() }, "an error"),
        ] {
            assert!(summary(&p, at, counts).needs_host(&p), "{why}");
        }
        assert!(DeviceSummary { undecided: true, ..summary(&p, input, TensorCounts::default()) }.needs_host(&p));
    }

    #[test]
    fn the_counts_are_the_summary_words_in_judge_cu_order() {
        let src = include_str!("../../../kernels/harness/judge.cu");
        let words: Vec<&str> = ["OUTSIDE", "SPAN", "ELEMENTS", "NONCANARY", "SENTINEL", "NONFINITE", "SPECIAL", "OVER"].to_vec();
        for (i, w) in words.iter().enumerate() {
            assert!(src.contains(&format!("CF_J_{w} = {i},")), "CF_J_{w} is word {i}");
        }
        assert!(src.contains(&format!("CF_J_WORDS = {WORDS}")));
    }
}
