//! Launch: load a compiled kernel, pass the manifest's arguments, and classify what CUDA says.
//!
//! [`Module`] wraps a loaded cubin; [`launch`] turns a [`ResolvedLaunch`] into a
//! `cuLaunchKernel` call whose pointer arguments point into the [`DeviceArena`]; [`classify`]
//! maps a CUDA status onto a [`FindingKind`]. Synchronisation is the caller's: that is where a
//! faulting kernel's error surfaces, and where the supervisor's watchdog is armed.

pub mod call;
pub mod module;
pub mod views;

pub use module::{LaunchRejection, Module, DEFAULT_SMEM_LIMIT};

use std::ffi::c_void;

use cudarc::driver::{result, sys};

use crate::core::finding::FindingKind;
use crate::core::manifest::{ResolvedArg, ResolvedLaunch};
use crate::engine::arena::device::DeviceArena;
use crate::engine::arena::HostImage;
use crate::engine::gpu::CudaStatus;

/// One kernel argument's bytes, kept alive until the launch call returns.
enum ArgSlot {
    Ptr(u64),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
}

/// Launches `module` asynchronously on the null stream with the resolved geometry and arguments.
pub fn launch(module: &Module, launch: &ResolvedLaunch, arena: &DeviceArena, image: &HostImage) -> Result<(), LaunchRejection> {
    launch_at(module, 0, launch, arena, image)
}

/// [`launch`] of entry point `at` of the module (0 the kernel's, then a sequence's later
/// launches): on the same null stream, so a sequence runs in order. A launch whose host guard
/// holds ([`ResolvedLaunch::skip`]) launches nothing, as that host does; one with an empty grid
/// or block is made, and the driver refuses it as it would the host's.
pub fn launch_at(module: &Module, at: usize, launch: &ResolvedLaunch, arena: &DeviceArena, image: &HostImage) -> Result<(), LaunchRejection> {
    if launch.skip {
        return Ok(());
    }
    let mut slots: Vec<ArgSlot> = launch
        .args
        .iter()
        .map(|a| match *a {
            ResolvedArg::Tensor(t) => ArgSlot::Ptr(arena.data_ptr(image, t)),
            ResolvedArg::I32(x) => ArgSlot::I32(x),
            ResolvedArg::U32(x) => ArgSlot::U32(x),
            ResolvedArg::I64(x) => ArgSlot::I64(x),
            ResolvedArg::U64(x) => ArgSlot::U64(x),
            ResolvedArg::F32(x) => ArgSlot::F32(x),
            ResolvedArg::F64(x) => ArgSlot::F64(x),
        })
        .collect();
    let mut params: Vec<*mut c_void> = slots
        .iter_mut()
        .map(|s| match s {
            ArgSlot::Ptr(p) => p as *mut u64 as *mut c_void,
            ArgSlot::I32(x) => x as *mut i32 as *mut c_void,
            ArgSlot::U32(x) => x as *mut u32 as *mut c_void,
            ArgSlot::I64(x) => x as *mut i64 as *mut c_void,
            ArgSlot::U64(x) => x as *mut u64 as *mut c_void,
            ArgSlot::F32(x) => x as *mut f32 as *mut c_void,
            ArgSlot::F64(x) => x as *mut f64 as *mut c_void,
        })
        .collect();
    let [gx, gy, gz] = launch.grid;
    let [bx, by, bz] = launch.block;
    // SAFETY: every parameter points into `slots`, alive for the duration of the call, and the
    // argument list matches the kernel's signature as declared in its manifest (a mismatch is the
    // manifest author's bug and shows up as a finding, not as host memory corruption).
    unsafe { result::launch_kernel(module.function_at(at), (gx, gy, gz), (bx, by, bz), launch.shared_bytes, std::ptr::null_mut(), &mut params) }
        .map_err(|e| LaunchRejection::Cuda(CudaStatus::from_driver(e)))
}

/// Whether an error leaves the context unusable, so the worker must exit after reporting it.
pub fn is_sticky(status: &CudaStatus) -> bool {
    use sys::cudaError_enum::*;
    [
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_MISALIGNED_ADDRESS,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_HARDWARE_STACK_ERROR,
        CUDA_ERROR_ILLEGAL_INSTRUCTION,
        CUDA_ERROR_INVALID_ADDRESS_SPACE,
        CUDA_ERROR_INVALID_PC,
        CUDA_ERROR_ASSERT,
        CUDA_ERROR_LAUNCH_TIMEOUT,
        CUDA_ERROR_ECC_UNCORRECTABLE,
    ]
    .iter()
    .any(|e| *e as u32 == status.code)
}

/// Maps a CUDA status from the launch or the synchronisation onto a finding kind.
pub fn classify(status: &CudaStatus, at_launch: bool) -> FindingKind {
    use sys::cudaError_enum::*;
    match status.code {
        c if c == CUDA_ERROR_MISALIGNED_ADDRESS as u32 => FindingKind::MisalignedAddress,
        c if c == CUDA_ERROR_ILLEGAL_ADDRESS as u32 => FindingKind::IllegalAddress,
        c if c == CUDA_ERROR_LAUNCH_FAILED as u32 => FindingKind::LaunchFailure,
        c if at_launch || c == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES as u32 || c == CUDA_ERROR_INVALID_VALUE as u32 => FindingKind::LaunchRejected,
        _ => FindingKind::CudaError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u32) -> CudaStatus {
        CudaStatus { code, name: String::new() }
    }

    #[test]
    fn sticky_errors_are_classified_by_code() {
        assert_eq!(classify(&status(716), false), FindingKind::MisalignedAddress);
        assert_eq!(classify(&status(700), false), FindingKind::IllegalAddress);
        assert_eq!(classify(&status(719), false), FindingKind::LaunchFailure);
        assert_eq!(classify(&status(701), true), FindingKind::LaunchRejected);
        assert!(is_sticky(&status(716)) && is_sticky(&status(700)) && !is_sticky(&status(701)));
    }
}
