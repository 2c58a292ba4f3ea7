//! The launch of a Python target: the arena's tensors as views, one call, and what came of it.
//!
//! The engine does not link Python. A worker that can call Python (the extension module that
//! `python -m cudafuzz worker` runs) installs a [`Caller`] with [`install_caller`] before the
//! worker loop starts; the engine hands it each case's [`Call`] and turns its [`CallOutcome`]
//! into a verdict the way it does a `cuLaunchKernel` status. What a framework raised is reported
//! as structured data (an error code and the API it belongs to), never as text to be parsed.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::core::case::Dtype;
use crate::core::finding::FindingKind;
use crate::core::manifest::Manifest;
use crate::core::target::ResolvedCall;
use crate::engine::gpu::CudaStatus;

/// Where a view's memory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ViewDevice {
    /// GPU memory of this device ordinal.
    Cuda(i32),
    /// Host memory (the plumbing tests' image).
    Host,
}

/// One tensor as the callable receives it: a DLPack description of memory inside the arena.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorView {
    /// The roster's name.
    pub name: String,
    /// Address of the element at index 0 (the allocation's base plus the case's offset).
    pub ptr: u64,
    /// Extent of each dimension, outermost first.
    pub shape: Vec<i64>,
    /// Stride of each dimension in elements (0 for a broadcast dimension).
    pub strides: Vec<i64>,
    /// Element type.
    pub dtype: Dtype,
    /// Where the memory is.
    pub device: ViewDevice,
}

/// One call of a Python target for one case.
pub struct Call<'a> {
    /// The manifest (its target is a Python one).
    pub manifest: &'a Manifest,
    /// The roster's views, in roster order.
    pub views: Vec<TensorView>,
    /// The arguments, resolved for the case.
    pub call: &'a ResolvedCall,
    /// Held by every view for as long as it lives (the arena's lease, see
    /// `crate::engine::arena::device`).
    pub lease: Arc<()>,
}

/// Which CUDA API an error code belongs to (their numbers differ past the common ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CudaApi {
    /// `CUresult` (CuPy's `CUDADriverError.status`, cuLaunchKernel).
    Driver,
    /// `cudaError_t` (torch's `AcceleratorError.error_code`, CuPy's `CUDARuntimeError.status`).
    Runtime,
}

/// What a call came to, before the context is synchronised.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CallOutcome {
    /// The callable returned (its returned outputs, if any, copied onto the roster's).
    Returned,
    /// The framework raised a CUDA error.
    CudaError {
        /// The API of `code`.
        api: CudaApi,
        /// The error code.
        code: u32,
        /// The exception's type and message, for the report.
        detail: String,
    },
    /// The framework refused the launch for its resources (Triton's `OutOfResources`).
    OutOfResources {
        /// The exception's type and message.
        detail: String,
    },
    /// The callable returned something that does not fit the roster's outputs (another shape,
    /// dtype or count).
    BadReturn {
        /// What did not fit.
        detail: String,
    },
    /// Any other exception: the target's own host-side check refused the case.
    Rejected {
        /// The exception's type.
        exception: String,
        /// Its message.
        message: String,
    },
}

impl CallOutcome {
    /// The finding kind of a failed call, with its words; `None` for a return or a rejection.
    pub fn finding(&self) -> Option<(FindingKind, String, Option<CudaStatus>)> {
        match self {
            CallOutcome::Returned | CallOutcome::Rejected { .. } => None,
            CallOutcome::CudaError { api, code, detail } => {
                let status = CudaStatus { code: driver_code(*api, *code), name: error_name(*api, *code) };
                let kind = super::classify(&status, !super::is_sticky(&status));
                Some((kind, format!("the target raised a CUDA error ({}): {detail}", status.name), Some(status)))
            }
            CallOutcome::OutOfResources { detail } => {
                Some((FindingKind::LaunchRejected, format!("the target's launch was refused for its resources: {detail}"), None))
            }
            CallOutcome::BadReturn { detail } => Some((FindingKind::CudaError, format!("the target's return value does not fit its outputs: {detail}"), None)),
        }
    }
}

/// A runtime error code as the driver numbers it, where the two differ; the sticky errors
/// (700, 716, 719, ...) have the same numbers in both.
fn driver_code(api: CudaApi, code: u32) -> u32 {
    match (api, code) {
        // cudaErrorInvalidConfiguration and cudaErrorInvalidDeviceFunction: bad launch
        // parameters, which the driver reports as CUDA_ERROR_INVALID_VALUE.
        (CudaApi::Runtime, 9) | (CudaApi::Runtime, 98) => 1,
        // cudaErrorMemoryAllocation
        (CudaApi::Runtime, 2) => 2,
        _ => code,
    }
}

/// A readable name for a framework's error code.
fn error_name(api: CudaApi, code: u32) -> String {
    let runtime = [
        (1, "cudaErrorInvalidValue"),
        (2, "cudaErrorMemoryAllocation"),
        (9, "cudaErrorInvalidConfiguration"),
        (98, "cudaErrorInvalidDeviceFunction"),
        (209, "cudaErrorNoKernelImageForDevice"),
        (700, "cudaErrorIllegalAddress"),
        (701, "cudaErrorLaunchOutOfResources"),
        (702, "cudaErrorLaunchTimeout"),
        (710, "cudaErrorAssert"),
        (715, "cudaErrorIllegalInstruction"),
        (716, "cudaErrorMisalignedAddress"),
        (719, "cudaErrorLaunchFailure"),
    ];
    let driver = [
        (1, "CUDA_ERROR_INVALID_VALUE"),
        (2, "CUDA_ERROR_OUT_OF_MEMORY"),
        (209, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
        (400, "CUDA_ERROR_INVALID_HANDLE"),
        (500, "CUDA_ERROR_NOT_FOUND"),
        (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
        (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
        (702, "CUDA_ERROR_LAUNCH_TIMEOUT"),
        (710, "CUDA_ERROR_ASSERT"),
        (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
        (716, "CUDA_ERROR_MISALIGNED_ADDRESS"),
        (719, "CUDA_ERROR_LAUNCH_FAILED"),
    ];
    match api {
        CudaApi::Runtime => runtime.iter().find(|(c, _)| *c == code).map(|(_, n)| n.to_string()).unwrap_or_else(|| format!("cudaError {code}")),
        CudaApi::Driver => driver.iter().find(|(c, _)| *c == code).map(|(_, n)| n.to_string()).unwrap_or_else(|| format!("CUresult {code}")),
    }
}

/// Performs calls of Python targets inside a worker.
pub trait Caller: Send {
    /// Imports the target's module, makes `device` the current one, and runs its setup
    /// callable; once per manifest, before the first case. The error is the setup's log (its
    /// traceback).
    fn setup(&mut self, manifest: &Manifest, device: ViewDevice) -> Result<(), String>;

    /// Calls the target for one case and waits for the call to return (not for the GPU).
    /// Everything the call made stays alive until [`Caller::release`].
    fn call(&mut self, call: &Call<'_>) -> CallOutcome;

    /// Drops what the last call made; called only once the context is known to be healthy
    /// (a framework's tensor freed after a sticky error can abort the process).
    fn release(&mut self);
}

static CALLER: Mutex<Option<Box<dyn Caller>>> = Mutex::new(None);

/// Installs the process's caller (the Python extension does, before the worker loop).
pub fn install_caller(caller: Box<dyn Caller>) {
    *CALLER.lock().unwrap_or_else(|e| e.into_inner()) = Some(caller);
}

/// Runs `f` with the installed caller, or says that this process cannot call Python.
pub fn with_caller<T>(f: impl FnOnce(&mut dyn Caller) -> T) -> Result<T, String> {
    let mut guard = CALLER.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_mut() {
        Some(c) => Ok(f(c.as_mut())),
        None => Err(
            "this worker cannot call Python targets: they run in `python -m cudafuzz worker`, started by the supervisor for a manifest with [target] python"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framework_errors_become_findings_by_code_and_rejections_do_not() {
        let (kind, words, status) = CallOutcome::CudaError { api: CudaApi::Runtime, code: 716, detail: "x".into() }.finding().unwrap();
        assert_eq!(kind, FindingKind::MisalignedAddress);
        assert!(words.contains("cudaErrorMisalignedAddress"), "{words}");
        assert_eq!(status.unwrap().code, 716);
        let (kind, ..) = CallOutcome::CudaError { api: CudaApi::Runtime, code: 9, detail: "bad grid".into() }.finding().unwrap();
        assert_eq!(kind, FindingKind::LaunchRejected);
        let (kind, ..) = CallOutcome::OutOfResources { detail: "shared memory".into() }.finding().unwrap();
        assert_eq!(kind, FindingKind::LaunchRejected);
        assert!(CallOutcome::Rejected { exception: "ValueError".into(), message: "x".into() }.finding().is_none());
        assert!(CallOutcome::Returned.finding().is_none());
    }
}
