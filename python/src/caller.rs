//! [`PyCaller`]: the engine's [`Caller`] for Python targets, over the package's `_call` module.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::target::{CallValue, PythonTarget, ResolvedCall};
use cudafuzz::engine::launch::call::{Call, CallOutcome, Caller, TensorView, ViewDevice};
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::dlpack::View;

/// Calls Python targets: one prepared target (the `_call.Target` the setup returned) per
/// manifest.
#[derive(Default)]
pub struct PyCaller {
    targets: HashMap<PathBuf, Py<PyAny>>,
    /// The target of the last call, whose results are held until released, and its arena's
    /// lease.
    last: Option<(PathBuf, Arc<()>)>,
}

/// A Python error with its traceback, as text.
pub(crate) fn traceback(py: Python<'_>, e: PyErr) -> String {
    let formatted =
        py.import("traceback").and_then(|tb| tb.getattr("format_exception")?.call1((e.value(py),))).and_then(|lines| lines.extract::<Vec<String>>());
    match formatted {
        Ok(lines) => lines.concat(),
        Err(_) => e.to_string(),
    }
}

/// Prepares `target` (imports, device, setup callable) in the `_call` module; the error is the
/// traceback.
pub(crate) fn prepare(py: Python<'_>, target: &PythonTarget, device: ViewDevice) -> Result<Py<PyAny>, String> {
    let ordinal = match device {
        ViewDevice::Cuda(id) => Some(id),
        ViewDevice::Host => None,
    };
    let run = || -> PyResult<(Option<Py<PyAny>>, Option<String>)> {
        let call = py.import("cudafuzz._call")?;
        let setup = target.setup.as_ref().map(|s| (s.module.clone(), s.function.clone()));
        call.getattr("setup")?
            .call1((
                target.path.display().to_string(),
                target.callable.module.clone(),
                target.callable.function.clone(),
                setup,
                target.tensors.name(),
                ordinal,
            ))?
            .extract()
    };
    match run() {
        Ok((Some(handle), _)) => Ok(handle),
        Ok((None, log)) => Err(log.unwrap_or_else(|| "the setup failed without a traceback".into())),
        Err(e) => Err(traceback(py, e)),
    }
}

fn value(py: Python<'_>, v: &CallValue) -> PyResult<(&'static str, Py<PyAny>)> {
    Ok(match v {
        CallValue::Tensor(i) => ("tensor", i.into_py_any(py)?),
        CallValue::Int(i) => ("value", i.into_py_any(py)?),
        CallValue::Float(x) => ("value", x.into_py_any(py)?),
        CallValue::Bool(b) => ("value", b.into_py_any(py)?),
    })
}

/// Calls a prepared target with `views` and the resolved arguments; what came of it.
pub(crate) fn invoke(py: Python<'_>, handle: &Py<PyAny>, views: &[TensorView], lease: &Arc<()>, call: &ResolvedCall) -> CallOutcome {
    let run = || -> PyResult<String> {
        let views: Vec<Py<View>> = views.iter().map(|v| Py::new(py, View::new(v.clone(), Arc::clone(lease)))).collect::<PyResult<_>>()?;
        let args: Vec<(&str, Py<PyAny>)> = call.args.iter().map(|a| value(py, a)).collect::<PyResult<_>>()?;
        let kwargs: Vec<(String, (&str, Py<PyAny>))> = call.kwargs.iter().map(|(k, a)| Ok((k.clone(), value(py, a)?))).collect::<PyResult<_>>()?;
        handle.call_method1(py, "call", (views, args, kwargs, call.returns.clone()))?.extract(py)
    };
    match run() {
        Ok(json) => serde_json::from_str(&json)
            .unwrap_or_else(|e| CallOutcome::Rejected { exception: "cudafuzz".into(), message: format!("the call's report {json:?} does not read: {e}") }),
        Err(e) => CallOutcome::Rejected { exception: "cudafuzz".into(), message: format!("calling the target failed inside cudafuzz: {}", traceback(py, e)) },
    }
}

/// Drops what the last call of a prepared target made (see `Caller::release`). When views of
/// the case's memory are still alive afterwards (`lease` counts them beside its `owners`), a
/// reference cycle holds them: the garbage collector runs, so the arena leaves quarantine.
pub(crate) fn release(py: Python<'_>, handle: &Py<PyAny>, lease: &Arc<()>, owners: usize) {
    let _ = handle.call_method1(py, "release", (false,));
    if Arc::strong_count(lease) > owners {
        let _ = handle.call_method1(py, "release", (true,));
    }
}

impl Caller for PyCaller {
    fn setup(&mut self, manifest: &Manifest, device: ViewDevice) -> Result<(), String> {
        let target = manifest.target.python().ok_or_else(|| format!("{} has no Python target", manifest.path.display()))?;
        let handle = Python::attach(|py| prepare(py, target, device))?;
        self.targets.insert(manifest.path.clone(), handle);
        Ok(())
    }

    fn call(&mut self, call: &Call<'_>) -> CallOutcome {
        let Some(handle) = self.targets.get(&call.manifest.path) else {
            return CallOutcome::Rejected { exception: "cudafuzz".into(), message: format!("the target of {} was never set up", call.manifest.path.display()) };
        };
        self.last = Some((call.manifest.path.clone(), Arc::clone(&call.lease)));
        Python::attach(|py| invoke(py, handle, &call.views, &call.lease, call.call))
    }

    fn release(&mut self) {
        if let Some((path, lease)) = self.last.take() {
            if let Some(handle) = self.targets.get(&path) {
                // The arena's own lease and this clone.
                Python::attach(|py| release(py, handle, &lease, 2));
            }
        }
    }
}
