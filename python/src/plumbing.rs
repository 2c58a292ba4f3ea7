//! [`plumbing`]: a Python target called over host images instead of the GPU, so the views it
//! receives can be checked on any machine against what the plan says.

use std::path::PathBuf;
use std::sync::Arc;

use arbitrary::Unstructured;
use cudafuzz::core::generate::{decode_case, reaches_past_int32, DecodeContext};
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::plan::Plan;
use cudafuzz::engine::arena::HostImage;
use cudafuzz::engine::data;
use cudafuzz::engine::launch::call::ViewDevice;
use cudafuzz::engine::launch::views::host_views;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::caller::{invoke, prepare};

/// Draws `count` cases of `manifest` (the whole case space but the cases past 2³¹ elements:
/// every layout, offset and dtype the roster allows, `seed` choosing them), calls the manifest's Python target once per case with
/// views of a host image, and returns JSON: per case, its summary, what the call came to, and
/// per tensor the view handed over (address, shape, strides, dtype) with the bits of each
/// element in logical order, as the plan placed them.
#[pyfunction]
#[pyo3(signature = (manifest, count, seed = 0))]
pub fn plumbing(py: Python<'_>, manifest: PathBuf, count: usize, seed: u64) -> PyResult<String> {
    let m = Manifest::load(&manifest).map_err(|e| PyValueError::new_err(cudafuzz::core::error::chain(&e)))?;
    let target = m.target.python().ok_or_else(|| PyValueError::new_err(format!("{} has no [target] python", manifest.display())))?;
    let handle = prepare(py, target, ViewDevice::Host).map_err(PyRuntimeError::new_err)?;
    let ctx = DecodeContext::new(&m).unconstrained();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut report = Vec::with_capacity(count);
    while report.len() < count {
        let mut bytes = vec![0u8; 1024];
        rng.fill_bytes(&mut bytes);
        let case = decode_case(&mut Unstructured::new(&bytes), &ctx).map_err(|e| PyRuntimeError::new_err(format!("drawing a case: {e}")))?;
        // A case past 2^31 elements spans gigabytes of host image: its views are the same
        // arithmetic, checked by the engine's own tests.
        if reaches_past_int32(&case, &m) {
            continue;
        }
        let plan = Plan::new(&case, &m).map_err(|e| PyRuntimeError::new_err(format!("planning {}: {e}", case.summary())))?;
        let inputs = data::generate(&case, &plan, &m);
        let image = HostImage::build(&case, &plan, &inputs);
        let views = host_views(&plan, &image);
        let call = m.resolve_call(&plan.vars).map_err(|e| PyRuntimeError::new_err(cudafuzz::core::error::chain(&e)))?.expect("a Python target resolves a call");
        let lease = Arc::new(());
        let outcome = invoke(py, &handle, &views, &lease, &call);
        crate::caller::release(py, &handle, &lease, 1);
        if Arc::strong_count(&lease) > 1 {
            return Err(PyRuntimeError::new_err(format!(
                "the callable kept a view of {} past its call; host images are freed after each case",
                case.summary()
            )));
        }
        let tensors: Vec<serde_json::Value> = plan
            .tensors
            .iter()
            .zip(&views)
            .map(|(tp, v)| {
                let bits = data::read_strided_bits(image.data(tp.index, &image.bytes[tp.index]), tp);
                serde_json::json!({ "view": v, "offset_bytes": tp.offset_bytes, "bits": bits })
            })
            .collect();
        report.push(serde_json::json!({ "case": case.summary(), "outcome": outcome, "tensors": tensors }));
    }
    Ok(serde_json::Value::Array(report).to_string())
}
