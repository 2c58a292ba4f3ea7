//! The GPU build of data scheme v2 ([`super::scheme2`]): `kernels/harness/datagen.cu`, compiled
//! by NVRTC with `--fmad=false` from the same header the host links, fills a device buffer with
//! a tensor's stored elements. Today it is the cross-check that both builds make the same bits
//! (`tests/gpu_datagen.rs`, `ci/gpu-check.sh`'s `datagen` stage); writing the case's arena in
//! place is the device-side data path's next step (issue 30).

use std::ffi::c_void;

use cudarc::driver::result;

use super::scheme2::DgTensor;
use crate::engine::compile::{CompileError, CompileRequest, Compiler};
use crate::engine::gpu::{CudaStatus, Gpu};
use crate::engine::launch::Module;

/// Why the GPU generator could not run.
#[derive(Debug, thiserror::Error)]
pub enum DeviceGenError {
    /// NVRTC could not build datagen.cu.
    #[error("building {path}: {source}")]
    Compile {
        /// The source.
        path: std::path::PathBuf,
        /// NVRTC's error.
        #[source]
        source: CompileError,
    },
    /// A CUDA call failed.
    #[error("{what}: {status}")]
    Cuda {
        /// The step.
        what: &'static str,
        /// What the driver said.
        status: CudaStatus,
    },
}

/// The generator loaded on an open GPU.
pub struct DeviceGenerator {
    module: Module,
}

impl DeviceGenerator {
    /// Compiles and loads `harness/datagen.cu` of the kernels directory for `gpu`.
    pub fn load(gpu: &Gpu) -> Result<DeviceGenerator, DeviceGenError> {
        // The host build never contracts into fused multiply-adds; nor may this one.
        let req = CompileRequest::harness("datagen.cu", "cf_dg_fill", vec!["--fmad=false".into()], gpu.info.arch);
        let compiled = Compiler::new(None).and_then(|c| c.compile(&req)).map_err(|e| DeviceGenError::Compile { path: req.source.clone(), source: e })?;
        let module = Module::load(&compiled.cubin, &req.entry).map_err(|status| DeviceGenError::Cuda { what: "loading the generator", status })?;
        Ok(DeviceGenerator { module })
    }

    /// Stored elements `first..first + n` of the tensor `t` describes, made on the GPU.
    pub fn fill(&self, t: &DgTensor, first: u64, n: usize, integer: bool) -> Result<Vec<f64>, DeviceGenError> {
        let cuda = |what: &'static str| move |e| DeviceGenError::Cuda { what, status: CudaStatus::from_driver(e) };
        let mut out = vec![0f64; n];
        if n == 0 {
            return Ok(out);
        }
        // SAFETY: one allocation of n doubles, written by the kernel and copied back whole; the
        // parameters match cf_dg_fill's signature (the struct by value, as C lays it out) and
        // outlive the launch call.
        unsafe {
            let buf = result::malloc_sync(n * 8).map_err(cuda("cuMemAlloc"))?;
            let (mut tv, mut f, mut count, mut int, mut ptr) = (*t, first, n as u64, i32::from(integer), buf);
            let mut params: Vec<*mut c_void> = vec![
                (&mut tv as *mut DgTensor).cast(),
                (&mut f as *mut u64).cast(),
                (&mut count as *mut u64).cast(),
                (&mut int as *mut i32).cast(),
                (&mut ptr as *mut u64).cast(),
            ];
            let blocks = (n as u64).div_ceil(256).min(65535) as u32;
            let launched = result::launch_kernel(self.module.function(), (blocks, 1, 1), (256, 1, 1), 0, std::ptr::null_mut(), &mut params)
                .map_err(cuda("launching the generator"));
            let done =
                launched.and_then(|()| crate::engine::gpu::synchronize().map_err(|status| DeviceGenError::Cuda { what: "running the generator", status }));
            let copied = done.and_then(|()| result::memcpy_dtoh_sync(&mut out, buf).map_err(cuda("downloading")));
            let _ = result::free_sync(buf);
            copied?;
        }
        Ok(out)
    }
}
