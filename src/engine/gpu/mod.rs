//! The CUDA device: finding the driver, opening a context, reading the GPU's limits.
//!
//! [`Gpu::open`] is the only place a context is created, and it first checks that libcuda can be
//! loaded at all, because cudarc's loader panics when the library is absent; a host without a
//! GPU gets [`GpuError::NoDriver`] and a one-line message instead.

use std::fmt;

use cudarc::driver::{result, sys};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::engine::compile::Arch;

/// A CUDA driver status, as reported to users and stored in findings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaStatus {
    /// Numeric `CUresult` (e.g. 716).
    pub code: u32,
    /// `CUDA_ERROR_*` name.
    pub name: String,
}

impl CudaStatus {
    /// Converts a cudarc driver error.
    pub fn from_driver(e: result::DriverError) -> CudaStatus {
        let name = e.error_name().map(|c| c.to_string_lossy().into_owned()).unwrap_or_else(|_| "CUDA_ERROR_UNKNOWN".into());
        CudaStatus { code: e.0 as u32, name }
    }
}

impl fmt::Display for CudaStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.code)
    }
}

/// Why the GPU cannot be used.
#[derive(Debug, Error, Clone)]
#[non_exhaustive]
pub enum GpuError {
    /// libcuda is not installed or not on the loader path.
    #[error("no CUDA driver on this machine (libcuda.so could not be loaded); GPU runs need an NVIDIA GPU with its driver installed")]
    NoDriver,
    /// The driver loaded but reports no device, or not the one asked for.
    #[error("no CUDA GPU with index {ordinal} ({count} visible); check CUDA_VISIBLE_DEVICES and nvidia-smi")]
    NoDevice {
        /// Requested device index.
        ordinal: usize,
        /// Devices visible.
        count: usize,
    },
    /// A driver call failed.
    #[error("{call} failed: {status}")]
    Driver {
        /// The driver call.
        call: &'static str,
        /// Its status.
        status: CudaStatus,
    },
}

fn driver(call: &'static str) -> impl Fn(result::DriverError) -> GpuError {
    move |e| GpuError::Driver { call, status: CudaStatus::from_driver(e) }
}

/// Number of visible GPUs, or why there are none.
pub fn device_count() -> Result<usize, GpuError> {
    // SAFETY: only probes whether the shared library can be opened.
    if !unsafe { sys::is_culib_present() } {
        return Err(GpuError::NoDriver);
    }
    result::init().map_err(driver("cuInit"))?;
    let n = result::device::get_count().map_err(driver("cuDeviceGetCount"))? as usize;
    if n == 0 {
        return Err(GpuError::NoDevice { ordinal: 0, count: 0 });
    }
    Ok(n)
}

/// Waits for all work on the current context; the error of a faulting kernel surfaces here.
pub fn synchronize() -> Result<(), CudaStatus> {
    result::ctx::synchronize().map_err(CudaStatus::from_driver)
}

/// Facts about one GPU that cases and reports need.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// Device index.
    pub ordinal: usize,
    /// Marketing name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Compute capability.
    pub arch: Arch,
    /// Multiprocessors.
    pub sm_count: u32,
    /// Largest dynamic shared memory a block may opt in to, in bytes.
    pub max_smem_optin: u32,
    /// Global memory in bytes.
    pub total_mem: u64,
    /// Driver API version, e.g. 13000.
    pub driver_version: i32,
}

/// An open primary context on one GPU, current on the calling thread.
#[derive(Debug)]
pub struct Gpu {
    /// What the GPU is.
    pub info: GpuInfo,
    device: sys::CUdevice,
    ctx: sys::CUcontext,
}

impl Gpu {
    /// Opens device `ordinal` and makes its primary context current.
    pub fn open(ordinal: usize) -> Result<Gpu, GpuError> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(GpuError::NoDevice { ordinal, count });
        }
        let device = result::device::get(ordinal as i32).map_err(driver("cuDeviceGet"))?;
        // SAFETY: `device` is a valid handle from cuDeviceGet; the context is released on drop.
        let ctx = unsafe { result::primary_ctx::retain(device) }.map_err(driver("cuDevicePrimaryCtxRetain"))?;
        // SAFETY: `ctx` was just retained.
        unsafe { result::ctx::set_current(ctx) }.map_err(driver("cuCtxSetCurrent"))?;
        let attr = |a| {
            // SAFETY: valid device and attribute enum.
            unsafe { result::device::get_attribute(device, a) }.map_err(driver("cuDeviceGetAttribute"))
        };
        use sys::CUdevice_attribute::*;
        let major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32;
        let minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32;
        let sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let max_smem_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32;
        // SAFETY: valid device.
        let total_mem = unsafe { result::device::total_mem(device) }.map_err(driver("cuDeviceTotalMem"))? as u64;
        let name = result::device::get_name(device).map_err(driver("cuDeviceGetName"))?;
        let mut driver_version = 0i32;
        // SAFETY: writes one int.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }.result().map_err(driver("cuDriverGetVersion"))?;
        Ok(Gpu { info: GpuInfo { ordinal, name, arch: Arch { major, minor }, sm_count, max_smem_optin, total_mem, driver_version }, device, ctx })
    }

    /// The raw context handle.
    pub fn context(&self) -> sys::CUcontext {
        self.ctx
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: releases the retain taken in `open`; errors after a sticky fault are moot.
        let _ = unsafe { result::primary_ctx::release(self.device) };
    }
}
