//! [`EngineError`]: why the engine could not run a case or start.

use crate::core::manifest::ManifestError;
use crate::engine::compile::CompileError;
use crate::engine::gpu::{CudaStatus, GpuError};
use crate::engine::marker::MarkerError;
use std::path::PathBuf;
use thiserror::Error;

/// Why the engine could not run a case (or start): reported as an [`Outcome::Error`](crate::core::verdict::Outcome::Error), never as
/// a finding of the kernel's.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The GPU cannot be opened.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// NVRTC cannot be set up, or the kernel does not compile.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The manifest does not load or resolve for this case.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The compiled module does not load.
    #[error("loading {} (entry `{entry}`) failed: {status}{hint}", source_file.display())]
    ModuleLoad {
        /// The kernel source.
        source_file: PathBuf,
        /// The entry point.
        entry: String,
        /// What the driver said.
        status: CudaStatus,
        /// What to do about it, when the versions explain it (empty otherwise).
        hint: String,
    },
    /// The sanitizer's case markers cannot be set up or written.
    #[error(transparent)]
    Marker(#[from] MarkerError),
    /// The case does not plan for its kernel (a seed edited by hand, or saved for another
    /// version of the manifest).
    #[error("the case does not fit {kernel}")]
    Case {
        /// The kernel.
        kernel: String,
        /// Why.
        #[source]
        source: crate::core::error::CaseError,
    },
    /// A GPU reference (the built-in op's kernel, or the user's) cannot run this case.
    #[error("{0}")]
    Reference(String),
    /// The manifest binds a built-in op to tensors this case cannot give it.
    #[error("the reference op's binding does not fit this case")]
    Binding(#[from] crate::engine::reference::BindingError),
    /// A CUDA call around the kernel (upload, coverage counters) failed.
    #[error("{what} failed: {status}")]
    Cuda {
        /// What was being done.
        what: &'static str,
        /// What the driver said.
        status: CudaStatus,
    },
    /// The case does not fit in the GPU's memory.
    #[error("{0}")]
    OutOfMemory(String),
    /// The case's arena could not be made on the device.
    #[error(transparent)]
    DeviceData(#[from] crate::engine::arena::device::DeviceFillError),
    /// One of the harness's own kernels (the data generator, the device oracles) failed.
    #[error(transparent)]
    Harness(#[from] crate::engine::launch::module::HarnessError),
    /// A Python target's setup (import, setup callable) failed, or this worker cannot call
    /// Python.
    #[error("setting up the Python target of {manifest} failed:\n{log}")]
    Setup {
        /// The manifest.
        manifest: PathBuf,
        /// What Python said (the traceback).
        log: String,
    },
}
