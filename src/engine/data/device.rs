//! The GPU build of data scheme v2 ([`super::scheme2`]): `kernels/harness/datagen.cu`, compiled
//! by NVRTC with `--fmad=false` from the same header the host links.
//!
//! [`DeviceGenerator::fill`] makes a tensor's stored elements as f64 (the cross-check that both
//! builds make the same bits: `tests/gpu_datagen.rs`, `ci/gpu-check.sh`'s `datagen` stage).
//! [`DeviceGenerator::store`] and [`DeviceGenerator::constant`] write a tensor's initial contents
//! in place, into its allocation of the case's arena, as the host image holds them
//! ([`crate::engine::arena::device::DeviceArena::fill`] builds a whole case that way:
//! canaries, gaps, inputs, sentinels; issue 30's device-side data path).

use std::ffi::c_void;

use cudarc::driver::result;

use super::scheme2::DgTensor;
use crate::core::case::Dtype;
use crate::core::plan::TensorPlan;
use crate::engine::gpu::{CudaStatus, Gpu};
use crate::engine::launch::module::Module;

/// Why the GPU generator could not be built or run.
pub type DeviceGenError = crate::engine::launch::module::HarnessError;

/// The generator loaded on an open GPU.
pub struct DeviceGenerator {
    module: Module,
}

/// The module's entries, in the order [`DeviceGenerator::load`] looks them up.
const FILL: usize = 0;
const STORE: usize = 1;
const CONST: usize = 2;

/// `cf_dg_layout` of the harness's `layout.h`: where a tensor's elements sit in its data span
/// (its stored elements for the generator, its logical ones for the device oracles).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DgLayout {
    extent: [u64; MAX_RANK],
    stride: [u64; MAX_RANK],
    n: u64,
    rank: u32,
    elem: u32,
    elem_bytes: u32,
    unused: u32,
}

/// The highest rank datagen.cu's layouts hold (`CF_DG_MAX_RANK`): every rank a case may have.
pub const MAX_RANK: usize = 8;
const _: () = assert!(MAX_RANK >= crate::core::case::MAX_RANK);

impl DgLayout {
    /// The layout of `tp`'s stored elements (a broadcast dimension counts once), byte strides.
    pub(crate) fn of(tp: &TensorPlan) -> DgLayout {
        let (stored, n) = super::stored_extents(tp);
        DgLayout::over(tp, &stored, n as u64)
    }

    /// The layout of `tp`'s logical elements (a broadcast dimension counts in full), in the
    /// row-major order the host reads them in (`for_each_offset`).
    pub(crate) fn logical(tp: &TensorPlan) -> DgLayout {
        DgLayout::over(tp, &tp.shape, tp.numel)
    }

    /// How many elements the layout places.
    pub(crate) fn count(&self) -> u64 {
        self.n
    }

    /// Elements of `tp` over `extents` (`n` of them), at its strides.
    fn over(tp: &TensorPlan, extents: &[u64], n: u64) -> DgLayout {
        assert!(tp.rank() <= MAX_RANK, "{}: rank {} is past the device layouts' {MAX_RANK}", tp.name, tp.rank());
        let mut l = DgLayout {
            n,
            rank: tp.rank() as u32,
            elem: Dtype::EVERY.iter().position(|&d| d == tp.dtype).expect("every dtype is listed") as u32,
            elem_bytes: tp.elem_bytes,
            ..DgLayout::default()
        };
        for (d, (&e, &s)) in extents.iter().zip(&tp.strides).enumerate() {
            l.extent[d] = e;
            l.stride[d] = s * tp.elem_bytes as u64;
        }
        l
    }
}

impl DeviceGenerator {
    /// Compiles and loads `harness/datagen.cu` of the kernels directory for `gpu`.
    pub fn load(gpu: &Gpu) -> Result<DeviceGenerator, DeviceGenError> {
        let module = Module::harness("datagen.cu", &["cf_dg_fill", "cf_dg_store", "cf_dg_const"], gpu.info.arch, "loading the generator")?;
        Ok(DeviceGenerator { module })
    }

    /// Stored elements `first..first + n` of the tensor `t` describes, made on the GPU.
    pub fn fill(&self, t: &DgTensor, first: u64, n: usize, integer: bool) -> Result<Vec<f64>, DeviceGenError> {
        let cuda = |what: &'static str| move |e| DeviceGenError::Cuda { what, status: CudaStatus::from_driver(e) };
        let mut out = vec![0f64; n];
        if n == 0 {
            return Ok(out);
        }
        // SAFETY: one allocation of n doubles, written by the kernel and copied back whole, freed
        // once; the parameters match cf_dg_fill's signature and outlive the launch call.
        unsafe {
            let buf = result::malloc_sync(n * 8).map_err(cuda("cuMemAlloc"))?;
            let (mut tv, mut f, mut count, mut int, mut ptr) = (*t, first, n as u64, i32::from(integer), buf);
            let params: Vec<*mut c_void> = vec![
                (&mut tv as *mut DgTensor).cast(),
                (&mut f as *mut u64).cast(),
                (&mut count as *mut u64).cast(),
                (&mut int as *mut i32).cast(),
                (&mut ptr as *mut u64).cast(),
            ];
            let done = self
                .launch(FILL, n as u64, params)
                .and_then(|()| crate::engine::gpu::synchronize().map_err(|status| DeviceGenError::Cuda { what: "running the generator", status }));
            let copied = done.and_then(|()| result::memcpy_dtoh_sync(&mut out, buf).map_err(cuda("downloading")));
            let _ = result::free_sync(buf);
            copied?;
        }
        Ok(out)
    }

    /// Writes the drawn elements of `tp` (generator parameters `t`, integers when `integer`)
    /// into its data span at device address `data`, encoded in its element type, as the host
    /// image writes them. Queued on the null stream: ordered before the copies and launches that
    /// follow; synchronise to see a fault.
    pub fn store(&self, data: u64, tp: &TensorPlan, t: &DgTensor, integer: bool) -> Result<(), DeviceGenError> {
        let (mut tv, mut layout, mut int, mut ptr) = (*t, DgLayout::of(tp), i32::from(integer), data);
        let n = layout.n;
        let params: Vec<*mut c_void> =
            vec![(&mut tv as *mut DgTensor).cast(), (&mut layout as *mut DgLayout).cast(), (&mut int as *mut i32).cast(), (&mut ptr as *mut u64).cast()];
        self.launch(STORE, n, params)
    }

    /// Writes the bit pattern `bits` into every element of `tp` in its data span at `data`.
    /// Queued like [`DeviceGenerator::store`].
    pub fn constant(&self, data: u64, tp: &TensorPlan, bits: u64) -> Result<(), DeviceGenError> {
        let (mut b, mut layout, mut ptr) = (bits, DgLayout::of(tp), data);
        let n = layout.n;
        let params: Vec<*mut c_void> = vec![(&mut b as *mut u64).cast(), (&mut layout as *mut DgLayout).cast(), (&mut ptr as *mut u64).cast()];
        self.launch(CONST, n, params)
    }

    /// Launches entry `at` over `n` elements (a grid-stride loop), parameters as given.
    fn launch(&self, at: usize, n: u64, mut params: Vec<*mut c_void>) -> Result<(), DeviceGenError> {
        // SAFETY: the parameters match the entry's signature in datagen.cu and point at locals
        // of the caller that outlive this call, which copies them; the data pointer is the
        // caller's live allocation.
        unsafe { self.module.launch_over(at, n, &mut params) }.map_err(|status| DeviceGenError::Cuda { what: "launching the generator", status })
    }
}
