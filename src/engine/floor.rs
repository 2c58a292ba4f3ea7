//! The floor of a case (`cudafuzz bench --floor`): one process's loop of what every case does
//! on the device when its kernel, reference and judging cost nothing: allocate, upload the
//! inputs, launch an (almost) empty kernel, synchronise, download, free.
//!
//! Run in several processes at once ([`crate::tools::floor`]), it says what that many worker
//! contexts time-slicing one GPU can reach, the ceiling of any host-side speed-up.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use cudarc::driver::result;
use serde::{Deserialize, Serialize};

use crate::engine::compile::{CompileRequest, Compiler};
use crate::engine::gpu::{CudaStatus, Gpu};
use crate::engine::launch::Module;

/// What one floor loop does per case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloorSpec {
    /// Input bytes uploaded per case.
    pub upload_bytes: usize,
    /// Bytes downloaded per case: the whole input back (today's engine downloads every
    /// allocation) or a summary.
    pub download_bytes: usize,
    /// Whether each case allocates and frees its buffers (`cuMemAlloc`), or reuses one set.
    pub alloc_per_case: bool,
}

/// What one floor loop did.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FloorCount {
    /// Cases done.
    pub cases: u64,
    /// Seconds the loop ran.
    pub secs: f64,
}

/// Why the floor could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    /// No GPU, or it would not open.
    #[error(transparent)]
    Gpu(#[from] crate::engine::gpu::GpuError),
    /// The floor kernel did not compile.
    #[error("the floor kernel ({path}) did not compile: {source}")]
    Compile {
        /// The kernel's source.
        path: std::path::PathBuf,
        /// Why.
        source: crate::engine::compile::CompileError,
    },
    /// A driver call failed.
    #[error("{what}: {status}")]
    Cuda {
        /// The step.
        what: &'static str,
        /// What the driver said.
        status: CudaStatus,
    },
}

/// Runs cases on GPU `gpu` for `time`, each as `spec` says.
pub fn measure(gpu: usize, spec: FloorSpec, time: Duration) -> Result<FloorCount, FloorError> {
    let gpu = Gpu::open(gpu)?;
    let req = CompileRequest::harness("floor.cu", "cudafuzz_floor", vec![], gpu.info.arch);
    let (entry, source) = (req.entry.clone(), req.source.clone());
    let compiled = Compiler::new(None).and_then(|c| c.compile(&req)).map_err(|e| FloorError::Compile { path: source, source: e })?;
    let cuda = |what: &'static str| move |e| FloorError::Cuda { what, status: CudaStatus::from_driver(e) };
    let module = Module::load(&compiled.cubin, &entry).map_err(|status| FloorError::Cuda { what: "loading the floor kernel", status })?;
    let input = vec![7u8; spec.upload_bytes.max(8)];
    // The whole input back, or the kernel's summary word.
    let (whole, down) = (spec.download_bytes > 8, spec.download_bytes.clamp(8, input.len()));
    let mut back = vec![0u8; down];
    let alloc = || -> Result<(u64, u64), FloorError> {
        // SAFETY: plain allocations of positive sizes, freed by `free`.
        unsafe { Ok((result::malloc_sync(input.len()).map_err(cuda("cuMemAlloc"))?, result::malloc_sync(8).map_err(cuda("cuMemAlloc"))?)) }
    };
    let free = |(a, b): (u64, u64)| {
        // SAFETY: allocated by `alloc`, freed once.
        unsafe {
            let _ = result::free_sync(a);
            let _ = result::free_sync(b);
        }
    };
    let mut kept = if spec.alloc_per_case { None } else { Some(alloc()?) };
    let started = Instant::now();
    let mut cases = 0;
    while started.elapsed() < time {
        let (inp, out) = match kept {
            Some(bufs) => bufs,
            None => alloc()?,
        };
        // SAFETY: copies within the allocations just made; the launch's parameters match the
        // floor kernel's signature and outlive the call.
        unsafe {
            result::memcpy_htod_sync(inp, &input).map_err(cuda("uploading"))?;
            let (mut a, mut n, mut s) = (inp, input.len() as u64, out);
            let mut params: Vec<*mut c_void> = vec![(&mut a as *mut u64).cast(), (&mut n as *mut u64).cast(), (&mut s as *mut u64).cast()];
            result::launch_kernel(module.function(), (1, 1, 1), (32, 1, 1), 0, std::ptr::null_mut(), &mut params).map_err(cuda("launching"))?;
            crate::engine::gpu::synchronize().map_err(|status| FloorError::Cuda { what: "synchronising", status })?;
            result::memcpy_dtoh_sync(&mut back, if whole { inp } else { out }).map_err(cuda("downloading"))?;
        }
        if kept.is_none() {
            free((inp, out));
        }
        cases += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    if let Some(bufs) = kept.take() {
        free(bufs);
    }
    Ok(FloorCount { cases, secs })
}
