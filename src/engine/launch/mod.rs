//! Launch: load a compiled kernel, pass the manifest's arguments, and classify what CUDA says.
//!
//! [`Module`] wraps a loaded cubin; [`launch`] turns a [`ResolvedLaunch`] into a
//! `cuLaunchKernel` call whose pointer arguments point into the [`DeviceArena`]; [`classify`]
//! maps a CUDA status onto a [`FindingKind`]. Synchronisation is the caller's: that is where a
//! faulting kernel's error surfaces, and where the supervisor's watchdog is armed.

pub mod call;
pub mod views;

use std::ffi::{c_void, CString};

use cudarc::driver::{result, sys};

use crate::core::coverage::{self, Coverage};
use crate::core::finding::FindingKind;
use crate::core::manifest::{ResolvedArg, ResolvedLaunch};
use crate::engine::arena::device::DeviceArena;
use crate::engine::arena::HostImage;
use crate::engine::gpu::{CudaStatus, GpuInfo};

/// Shared memory a block may use without opting in.
pub const DEFAULT_SMEM_LIMIT: u32 = 48 * 1024;

/// A loaded module and its entry points: the kernel's, then those of the later launches of a
/// launch sequence ([`crate::core::manifest::LaunchStep`]), each with the dynamic shared memory
/// limit set on it so far.
#[derive(Debug)]
pub struct Module {
    module: sys::CUmodule,
    functions: Vec<(sys::CUfunction, u32)>,
}

impl Module {
    /// Loads a cubin and looks up `entry`.
    pub fn load(cubin: &[u8], entry: &str) -> Result<Module, CudaStatus> {
        // The driver reads the image until its ELF end; keep a copy alive for the call.
        let image = cubin.to_vec();
        // SAFETY: `image` is a complete cubin produced by NVRTC.
        let module = unsafe { result::module::load_data(image.as_ptr() as *const c_void) }.map_err(CudaStatus::from_driver)?;
        let mut m = Module { module, functions: Vec::new() };
        m.add_step(entry)?;
        Ok(m)
    }

    /// Looks up one more entry point of the module (a later launch of a sequence); its index is
    /// the number of entries before it.
    pub fn add_step(&mut self, entry: &str) -> Result<(), CudaStatus> {
        let name = CString::new(entry).expect("entry names have no NUL");
        // SAFETY: `self.module` is loaded; the name is NUL-terminated.
        let function = unsafe { result::module::get_function(self.module, name) }.map_err(CudaStatus::from_driver)?;
        self.functions.push((function, DEFAULT_SMEM_LIMIT));
        Ok(())
    }

    /// The kernel's function handle.
    pub fn function(&self) -> sys::CUfunction {
        self.functions[0].0
    }

    /// The function handle of entry `i` (0 the kernel's, then [`Module::add_step`]'s in order).
    pub fn function_at(&self, i: usize) -> sys::CUfunction {
        self.functions[i].0
    }

    /// Raises the dynamic shared memory limit when `launch` needs more than 48 KB, as
    /// FlashAttention's launcher does; says so clearly when the GPU cannot give that much. A
    /// launch whose host never opts in ([`ResolvedLaunch::shared_opt_in`] false) is left as that
    /// host leaves it: `cuLaunchKernel` then refuses more than 48 KB, as it would there.
    pub fn reserve_shared(&mut self, launch: &ResolvedLaunch, gpu: &GpuInfo) -> Result<(), LaunchRejection> {
        self.reserve_shared_at(0, launch, gpu)
    }

    /// [`Module::reserve_shared`] for entry point `at` (0 the kernel's, then a sequence's).
    pub fn reserve_shared_at(&mut self, at: usize, launch: &ResolvedLaunch, gpu: &GpuInfo) -> Result<(), LaunchRejection> {
        let bytes = launch.shared_bytes;
        let (function, attribute) = &mut self.functions[at];
        if launch.skip || !launch.shared_opt_in || bytes <= (*attribute).max(DEFAULT_SMEM_LIMIT) {
            return Ok(());
        }
        if bytes > gpu.max_smem_optin {
            return Err(LaunchRejection::SharedMemory { asked: bytes, limit: gpu.max_smem_optin });
        }
        // SAFETY: valid function handle and attribute.
        unsafe {
            result::function::set_function_attribute(*function, sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32)
        }
        .map_err(|e| LaunchRejection::Cuda(CudaStatus::from_driver(e)))?;
        *attribute = bytes;
        Ok(())
    }

    /// The module's coverage arrays (hits, lines), when it was compiled with
    /// [`coverage::COVERAGE_DEFINE`] and includes `cf_coverage.cuh`.
    fn coverage_arrays(&self) -> Option<(sys::CUdeviceptr, sys::CUdeviceptr)> {
        let global = |name: &str| {
            let name = CString::new(name).expect("symbol names have no NUL");
            // SAFETY: `self.module` is loaded; the name is NUL-terminated.
            unsafe { result::module::get_global(self.module, name) }.ok().filter(|&(_, bytes)| bytes == coverage::SLOTS * 4).map(|(ptr, _)| ptr)
        };
        Some((global(coverage::HITS_SYMBOL)?, global(coverage::LINES_SYMBOL)?))
    }

    /// Zeroes the coverage counts before a launch; `Ok(false)` when the module has none.
    pub fn reset_coverage(&self) -> Result<bool, CudaStatus> {
        let Some((hits, _)) = self.coverage_arrays() else { return Ok(false) };
        // SAFETY: `hits` is a device array of SLOTS u32 owned by the module.
        unsafe { result::memset_d8_sync(hits, 0, coverage::SLOTS * 4) }.map_err(CudaStatus::from_driver)?;
        Ok(true)
    }

    /// The points the last launch reached (after it synchronised); `None` when the module has
    /// no coverage arrays.
    pub fn coverage(&self) -> Result<Option<Coverage>, CudaStatus> {
        let Some((hits_ptr, lines_ptr)) = self.coverage_arrays() else { return Ok(None) };
        let mut hits = vec![0u32; coverage::SLOTS];
        let mut lines = vec![0u32; coverage::SLOTS];
        // SAFETY: both are device arrays of SLOTS u32 owned by the module; the buffers match.
        unsafe {
            result::memcpy_dtoh_sync(&mut hits, hits_ptr).map_err(CudaStatus::from_driver)?;
            result::memcpy_dtoh_sync(&mut lines, lines_ptr).map_err(CudaStatus::from_driver)?;
        }
        Ok(Some(Coverage::from_arrays(&hits, &lines)))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: unloads the module loaded in `load`; fails harmlessly after a sticky error.
        let _ = unsafe { result::module::unload(self.module) };
    }
}

/// Why a launch was refused before the kernel ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchRejection {
    /// The launch asks for more dynamic shared memory than the GPU offers.
    SharedMemory {
        /// Bytes requested.
        asked: u32,
        /// The GPU's opt-in maximum.
        limit: u32,
    },
    /// `cuLaunchKernel` itself returned an error.
    Cuda(CudaStatus),
}

impl std::fmt::Display for LaunchRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchRejection::SharedMemory { asked, limit } => {
                write!(f, "launch asks for {asked} bytes of dynamic shared memory; this GPU allows at most {limit}")
            }
            LaunchRejection::Cuda(s) => write!(f, "cuLaunchKernel returned {s}"),
        }
    }
}

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
    unsafe { result::launch_kernel(module.functions[at].0, (gx, gy, gz), (bx, by, bz), launch.shared_bytes, std::ptr::null_mut(), &mut params) }
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
