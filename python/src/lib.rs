//! `cudafuzz._native`: cudafuzz inside the user's Python interpreter.
//!
//! The package's `python -m cudafuzz` runs the same command line as the binary (`main`); what
//! it adds is a worker that can call Python. `main` installs a [`PyCaller`] before the command
//! runs, so the worker loop (`cudafuzz worker --target MANIFEST`, which the supervisor starts
//! for a Python target) imports the target's module, runs its setup, and calls it for each case
//! with the arena's tensors as DLPack views (the `dlpack` module). The supervisor, the arena,
//! the oracles and the seeds are the library's, unchanged (`cudafuzz::core::target` has the
//! design).
//!
//! The Python half of the package (`cudafuzz/_call.py`) converts the views to the target's array
//! type, makes the call and reports what came of it as plain data; `plumbing` runs the same
//! call over a host image, so that the views can be checked where there is no GPU.

mod caller;
mod dlpack;
mod plumbing;

use pyo3::prelude::*;

pub use caller::PyCaller;

/// Runs the cudafuzz command line `argv` (program name first) and returns its exit status; a
/// worker started by it can call Python targets.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    let sys = py.import("sys")?;
    let executable: String = sys.getattr("executable")?.extract()?;
    cudafuzz::engine::launch::call::install_caller(Box::new(PyCaller::default()));
    // NVRTC installed into this interpreter's environment (`pip install "cudafuzz[nvrtc]"`) is
    // found even when it is not the python3 on PATH nor an activated virtualenv.
    // An interpreter without site.getsitepackages (an old virtualenv) is searched as before.
    let site = py.import("site")?;
    let call = |name: &str| site.getattr(name).and_then(|f| f.call0());
    let mut sites: Vec<String> = call("getsitepackages").and_then(|s| s.extract()).unwrap_or_default();
    if let Ok(user) = call("getusersitepackages").and_then(|u| u.extract::<String>()) {
        sites.push(user);
    }
    cudafuzz::engine::compile::search_running_interpreter(sites.into_iter().map(Into::into).collect());
    // Workers of native targets are this interpreter too (the binary may not be installed).
    cudafuzz::run::set_self_command(executable.into(), vec!["-m".into(), "cudafuzz".into()]);
    Ok(cudafuzz::cli::main_with(argv.into_iter().map(Into::into)))
}

/// Tells the supervisor that the running case's target starts (`true`) or stops compiling
/// (`_call.py` calls it from Triton's compile hooks), so the watchdog gives compiling its own
/// budget.
#[pyfunction]
fn compiling(started: bool) {
    cudafuzz::engine::worker::compiling(started);
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(plumbing::plumbing, m)?)?;
    m.add_function(wrap_pyfunction!(compiling, m)?)?;
    m.add_class::<dlpack::View>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
