//! DLPack producer: a [`View`] of one tensor of the arena, exported as a `dltensor` capsule that
//! `torch.from_dlpack`, `cupy.from_dlpack` and `numpy.from_dlpack` read without copying.
//!
//! The capsule describes the memory exactly as the plan laid it out: `data` is the address of
//! element 0 (base plus the case's byte offset, however misaligned), `byte_offset` is 0, the
//! strides are the plan's element strides (0 for a broadcast dimension). Every capsule and every
//! view holds the arena's lease, so the arena's memory outlives anything a consumer built on it
//! (`cudafuzz::engine::arena::device` explains the quarantine).

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use cudafuzz::core::case::Dtype;
use cudafuzz::engine::launch::call::{TensorView, ViewDevice};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

const DLTENSOR: &CStr = c"dltensor";

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// What a managed tensor owns: its shape and strides arrays, and a lease on the arena.
struct Owned {
    shape: Vec<i64>,
    strides: Vec<i64>,
    _lease: Arc<()>,
}

const KDL_CPU: i32 = 1;
const KDL_CUDA: i32 = 2;

/// DLPack's type code and bit width of an element type.
fn data_type(d: Dtype) -> DLDataType {
    // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4.
    let (code, bits) = match d {
        Dtype::F16 => (2, 16),
        Dtype::Bf16 => (4, 16),
        Dtype::F32 => (2, 32),
        Dtype::F64 => (2, 64),
        Dtype::I8 => (0, 8),
        Dtype::U8 => (1, 8),
        Dtype::I32 => (0, 32),
        Dtype::U32 => (1, 32),
        Dtype::I64 => (0, 64),
    };
    DLDataType { code, bits, lanes: 1 }
}

fn device(d: ViewDevice) -> DLDevice {
    match d {
        ViewDevice::Cuda(id) => DLDevice { device_type: KDL_CUDA, device_id: id },
        ViewDevice::Host => DLDevice { device_type: KDL_CPU, device_id: 0 },
    }
}

unsafe extern "C" fn delete_managed(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its context were made by `Box::into_raw` in `managed`, and a consumer
    // calls the deleter once.
    unsafe {
        let m = Box::from_raw(m);
        drop(Box::from_raw(m.manager_ctx as *mut Owned));
    }
}

/// The capsule's destructor: a capsule never consumed (still named `dltensor`) frees its
/// tensor; a consumer renames it to `used_dltensor` and calls the deleter itself.
unsafe extern "C" fn destroy_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with a capsule; `PyCapsule_IsValid` sets no error.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()) as *mut DLManagedTensor;
            if let Some(delete) = m.as_ref().and_then(|m| m.deleter) {
                delete(m);
            }
        }
    }
}

fn managed(v: &TensorView, lease: Arc<()>) -> *mut DLManagedTensor {
    let mut owned = Box::new(Owned { shape: v.shape.clone(), strides: v.strides.clone(), _lease: lease });
    let tensor = DLTensor {
        data: v.ptr as *mut c_void,
        device: device(v.device),
        ndim: v.shape.len() as i32,
        dtype: data_type(v.dtype),
        shape: owned.shape.as_mut_ptr(),
        strides: owned.strides.as_mut_ptr(),
        byte_offset: 0,
    };
    Box::into_raw(Box::new(DLManagedTensor { dl_tensor: tensor, manager_ctx: Box::into_raw(owned) as *mut c_void, deleter: Some(delete_managed) }))
}

/// One tensor of the case, as a DLPack producer (`__dlpack__`, `__dlpack_device__`). Its
/// attributes say where the plan put it, for reports and tests.
#[pyclass(module = "cudafuzz._native", frozen)]
pub struct View {
    view: TensorView,
    lease: Arc<()>,
}

impl View {
    /// A view of `view`'s memory, holding `lease` while it lives.
    pub fn new(view: TensorView, lease: Arc<()>) -> View {
        View { view, lease }
    }
}

#[pymethods]
impl View {
    /// A fresh `dltensor` capsule of the tensor. The keywords of the DLPack protocol are
    /// accepted; the data is ready on every stream (uploads are synchronous), and the capsule is
    /// always the unversioned kind, which every consumer reads.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<Py<PyAny>>,
        max_version: Option<Py<PyAny>>,
        dl_device: Option<Py<PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = (stream, max_version);
        if copy == Some(true) {
            return Err(PyBufferError::new_err("cudafuzz views are never copied: the callable must see the arena's own memory"));
        }
        if let Some(d) = dl_device {
            let (ty, id): (i32, i32) = d.extract(py)?;
            let own = device(self.view.device);
            if (ty, id) != (own.device_type, own.device_id) {
                return Err(PyBufferError::new_err(format!("the view is on device ({}, {}), not ({ty}, {id})", own.device_type, own.device_id)));
            }
        }
        let m = managed(&self.view, Arc::clone(&self.lease));
        // SAFETY: `m` is a valid managed tensor; the capsule owns it until a consumer takes it.
        let capsule = unsafe { ffi::PyCapsule_New(m as *mut c_void, DLTENSOR.as_ptr(), Some(destroy_capsule)) };
        if capsule.is_null() {
            // SAFETY: the capsule was not made, so nothing else owns `m`.
            unsafe { delete_managed(m) };
            return Err(PyErr::fetch(py));
        }
        // SAFETY: a new reference, owned from here.
        Ok(unsafe { Bound::from_owned_ptr(py, capsule) }.unbind())
    }

    /// `(device type, device id)`: `(2, ordinal)` for a GPU, `(1, 0)` for host memory.
    fn __dlpack_device__(&self) -> (i32, i32) {
        let d = device(self.view.device);
        (d.device_type, d.device_id)
    }

    /// The roster's name of the tensor.
    #[getter]
    fn name(&self) -> &str {
        &self.view.name
    }

    /// Address of element 0.
    #[getter]
    fn ptr(&self) -> u64 {
        self.view.ptr
    }

    /// Extents, outermost first.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.view.shape.clone()
    }

    /// Element strides.
    #[getter]
    fn strides(&self) -> Vec<i64> {
        self.view.strides.clone()
    }

    /// The element type's name (`f16`, `bf16`, `f32`, ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.view.dtype.name()
    }

    fn __repr__(&self) -> String {
        format!(
            "<cudafuzz view {} {} shape={:?} strides={:?} at {:#x}>",
            self.view.name,
            self.view.dtype.name(),
            self.view.shape,
            self.view.strides,
            self.view.ptr
        )
    }
}
