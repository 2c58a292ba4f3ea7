//! The worker's per-case markers (CUDA side): one record of the running tool before each case.
//! Recognising them in the tool's output is the sanitizer's side (`crate::run::sanitizer::attribute`).
//!
//! memcheck reports failing API calls, so its marker is `cuMemFree` of an address that was
//! never allocated (`CUDA_ERROR_INVALID_VALUE`, harmless). racecheck and initcheck do not report
//! API errors; their markers are tiny kernels from `kernels/harness/sanitizer_markers.cu` that each
//! produce one record of that tool in a function named `cudafuzz_marker_*`. synccheck needs none:
//! its errors abort the kernel (719), so they belong to the case a process ended with.

use std::ffi::c_void;

use cudarc::driver::{result, sys};

use crate::core::tool::Tool;
use crate::engine::compile::{Arch, CompileRequest, Compiler};
use crate::engine::launch::Module;

/// The never-allocated address memcheck's marker frees.
const MARKER_FREE_ADDRESS: u64 = 0x20;
/// Words of the never-written buffer initcheck's markers read.
const INIT_WORDS: u64 = 1 << 20;
/// Words between two initcheck markers' reads: initcheck reports a region once, so each marker
/// reads its own 256 bytes (a fresh buffer is taken when these run out).
const INIT_STEP: u64 = 64;
/// Prefix of every marker kernel's name.
pub const MARKER_KERNEL_PREFIX: &str = "cudafuzz_marker_";

/// Why the case markers of a tool cannot be set up or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MarkerError {
    /// The marker kernels do not compile.
    #[error("compiling the sanitizer markers {}", path.display())]
    Compile {
        /// The marker source.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: crate::engine::compile::CompileError,
    },
    /// The compiled marker kernel does not load.
    #[error("loading {entry}: {status}")]
    Load {
        /// The marker kernel.
        entry: String,
        /// What the driver said.
        status: crate::engine::gpu::CudaStatus,
    },
    /// A marker buffer cannot be allocated.
    #[error("marker buffer: {0}")]
    Alloc(String),
    /// The marker kernel cannot be launched.
    #[error("launching the {tool} marker: {message}")]
    Launch {
        /// The tool.
        tool: Tool,
        /// What the driver said.
        message: String,
    },
    /// The marker kernel failed.
    #[error("the {tool} marker kernel failed: {status}")]
    Failed {
        /// The tool.
        tool: Tool,
        /// What the driver said.
        status: crate::engine::gpu::CudaStatus,
    },
}

/// Emits markers for one tool in a worker process.
pub struct Marker {
    tool: Tool,
    kernel: Option<Module>,
    never_written: sys::CUdeviceptr,
    out: sys::CUdeviceptr,
    emitted: u64,
}

impl Marker {
    /// Prepares the markers of `tool`: compiles and loads its kernel, allocates its buffers.
    pub fn new(tool: Tool, compiler: &Compiler, arch: Arch) -> Result<Marker, MarkerError> {
        let mut marker = Marker { tool, kernel: None, never_written: 0, out: 0, emitted: 0 };
        if matches!(tool, Tool::Memcheck | Tool::Synccheck) {
            return Ok(marker);
        }
        let entry = format!("{MARKER_KERNEL_PREFIX}{}", tool.name());
        let req = CompileRequest::harness("sanitizer_markers.cu", &entry, vec![], arch);
        let compiled = compiler.compile(&req).map_err(|e| MarkerError::Compile { path: req.source.clone(), source: e })?;
        marker.kernel = Some(Module::load(&compiled.cubin, &entry).map_err(|status| MarkerError::Load { entry: entry.clone(), status })?);
        // SAFETY: plain allocations; `never_written` is deliberately left uninitialised.
        unsafe {
            marker.never_written = result::malloc_sync((INIT_WORDS * 4) as usize).map_err(|e| MarkerError::Alloc(format!("{e:?}")))?;
            marker.out = result::malloc_sync(64 * 4).map_err(|e| MarkerError::Alloc(format!("{e:?}")))?;
        }
        Ok(marker)
    }

    /// Replaces the never-written buffer once every word of it has been read.
    fn fresh_init_buffer(&mut self) -> Result<(), MarkerError> {
        // SAFETY: the old buffer came from malloc_sync; the new one is left uninitialised.
        unsafe {
            let _ = result::free_sync(self.never_written);
            self.never_written = result::malloc_sync((INIT_WORDS * 4) as usize).map_err(|e| MarkerError::Alloc(format!("{e:?}")))?;
        }
        Ok(())
    }

    /// The tool these markers are for.
    pub fn tool(&self) -> Tool {
        self.tool
    }

    /// Makes the tool write one marker record, and waits until it has.
    pub fn emit(&mut self) -> Result<(), MarkerError> {
        if self.tool == Tool::Synccheck {
            return Ok(());
        }
        let mut word = (self.emitted * INIT_STEP % INIT_WORDS) as i64;
        if self.tool == Tool::Initcheck && self.emitted > 0 && word == 0 {
            self.fresh_init_buffer()?;
        }
        self.emitted += 1;
        let Some(kernel) = &self.kernel else {
            // SAFETY: freeing an address that was never allocated fails with
            // CUDA_ERROR_INVALID_VALUE and changes nothing; that failure is the marker.
            let _ = unsafe { result::free_sync(MARKER_FREE_ADDRESS) };
            return Ok(());
        };
        let (mut out, mut buf) = (self.out, self.never_written);
        let mut params: Vec<*mut c_void> = match self.tool {
            Tool::Initcheck => vec![&mut buf as *mut u64 as *mut c_void, &mut word as *mut i64 as *mut c_void, &mut out as *mut u64 as *mut c_void],
            _ => vec![&mut out as *mut u64 as *mut c_void],
        };
        let block = if self.tool == Tool::Racecheck { 64 } else { 32 };
        // SAFETY: the parameters match the marker kernels' signatures and outlive the call.
        unsafe { result::launch_kernel(kernel.function(), (1, 1, 1), (block, 1, 1), 0, std::ptr::null_mut(), &mut params) }
            .map_err(|e| MarkerError::Launch { tool: self.tool, message: format!("{e:?}") })?;
        crate::engine::gpu::synchronize().map_err(|status| MarkerError::Failed { tool: self.tool, status })
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        for p in [self.never_written, self.out] {
            if p != 0 {
                // SAFETY: allocated in `new`, freed once.
                let _ = unsafe { result::free_sync(p) };
            }
        }
    }
}
