//! A loaded module and its entry points ([`Module`]), and why a launch was refused before the
//! kernel ran ([`LaunchRejection`]). Apart from the launch itself, which reads the arena, so
//! that the harness's own kernels (the data generator, the sanitizer markers) load modules
//! without depending on the arena.

use std::ffi::{c_void, CString};

use cudarc::driver::{result, sys};

use crate::core::coverage::{self, Coverage};
use crate::core::manifest::ResolvedLaunch;
use crate::engine::gpu::{CudaStatus, GpuInfo};

/// Why one of the harness's own kernels (the data generator, the device oracles) could not be
/// built, loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// NVRTC could not build its source.
    #[error("building {path}: {source}")]
    Compile {
        /// The source.
        path: std::path::PathBuf,
        /// NVRTC's error.
        #[source]
        source: crate::engine::compile::CompileError,
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

    /// Builds `harness/<file>` of the kernels directory for `arch` with NVRTC, never contracting
    /// into fused multiply-adds (the host's builds of the same arithmetic never do), and loads
    /// its `entries` in order (entry `i` is [`Module::function_at`]`(i)`). `what` names the
    /// module in errors.
    pub fn harness(file: &str, entries: &[&str], arch: crate::engine::compile::Arch, what: &'static str) -> Result<Module, HarnessError> {
        use crate::engine::compile::{CompileRequest, Compiler};
        let req = CompileRequest::harness(file, entries[0], vec!["--fmad=false".into()], arch);
        let compiled = Compiler::new(None).and_then(|c| c.compile(&req)).map_err(|e| HarnessError::Compile { path: req.source.clone(), source: e })?;
        let loading = |status| HarnessError::Cuda { what, status };
        let mut module = Module::load(&compiled.cubin, &req.entry).map_err(loading)?;
        for entry in &entries[1..] {
            module.add_step(entry).map_err(loading)?;
        }
        Ok(module)
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

    /// Launches entry `at`, one of the harness's own grid-stride kernels, over `n` items (256
    /// threads a block, at most 65,535 blocks) on the null stream; nothing when `n` is 0.
    ///
    /// # Safety
    /// `params` must match the entry's parameters (structs by value, as C lays them out) and
    /// point at values that live through this call; every device pointer among them must stay
    /// allocated until the launch has run.
    pub unsafe fn launch_over(&self, at: usize, n: u64, params: &mut [*mut c_void]) -> Result<(), CudaStatus> {
        // SAFETY: the caller's promise.
        unsafe { self.launch_rows(at, n, 1, params) }
    }

    /// [`Module::launch_over`] with `rows` rows of blocks (`blockIdx.y`), each over `n` items:
    /// one launch for many small jobs. Nothing when either is 0.
    ///
    /// # Safety
    /// As for [`Module::launch_over`].
    pub unsafe fn launch_rows(&self, at: usize, n: u64, rows: u32, params: &mut [*mut c_void]) -> Result<(), CudaStatus> {
        if n == 0 || rows == 0 {
            return Ok(());
        }
        let blocks = n.div_ceil(256).min(65535) as u32;
        // SAFETY: the caller's promise above; the function handle is this module's.
        let mut params = params.to_vec();
        unsafe { result::launch_kernel(self.function_at(at), (blocks, rows, 1), (256, 1, 1), 0, std::ptr::null_mut(), &mut params) }
            .map_err(CudaStatus::from_driver)
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
