//! The worker of a Python target: the user's interpreter running `python -m cudafuzz worker`
//! (the extension module's copy of the worker loop, which can call Python), and what to say when
//! it cannot start.
//!
//! The interpreter is, in order: `--python` (or `CUDAFUZZ_PYTHON`), the manifest's
//! `target.interpreter`, the interpreter running this command (`python -m cudafuzz`), the active
//! virtualenv's `python`, `python3` on the PATH.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use crate::core::manifest::Manifest;

/// The environment variable `--python` sets.
pub const PYTHON_ENV: &str = "CUDAFUZZ_PYTHON";

/// How to start the worker of one Python target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PythonWorker {
    /// The interpreter.
    pub(super) interpreter: PathBuf,
    /// The target's manifest (its setup runs before the worker says it is ready).
    pub(super) manifest: PathBuf,
    /// The packages the target's tensors need, named when the worker cannot start.
    packages: Vec<&'static str>,
}

impl PythonWorker {
    /// The worker `manifest` needs; `None` when neither its target nor its reference is Python.
    pub(super) fn for_manifest(manifest: &Manifest) -> Option<PythonWorker> {
        let p = manifest.python_calls().next()?;
        let mut packages: Vec<&'static str> = manifest.python_calls().filter_map(|c| c.tensors.package()).collect();
        packages.dedup();
        Some(PythonWorker { interpreter: interpreter(p.interpreter.as_deref()), manifest: manifest.path.clone(), packages })
    }

    /// Adds the target to a worker's command line (`... -m cudafuzz worker --gpu N`), and its
    /// environment.
    pub(super) fn configure(&self, cmd: &mut Command, sanitized: bool) {
        cmd.arg("--target").arg(&self.manifest);
        if sanitized {
            // The sanitizer must see each of PyTorch's allocations as the callable asked for
            // it, not carved out of a cached block.
            cmd.env("PYTORCH_NO_CUDA_MEMORY_CACHING", "1");
        }
    }

    /// Why the interpreter did not start.
    pub(super) fn cannot_start(&self, e: &std::io::Error) -> String {
        format!(
            "cannot start the Python interpreter {} for the target of {}: {e}; name an interpreter with --python PATH (or target.interpreter in the manifest), one with cudafuzz installed (pip install cudafuzz)",
            self.interpreter.display(),
            self.manifest.display()
        )
    }

    /// Why the worker ended before it was ready; `log` is the sanitizer's log tail, if any.
    pub(super) fn died(&self, status: Option<ExitStatus>, log: &str) -> String {
        let status = status.and_then(|s| s.code()).map(|c| format!(" with status {c}")).unwrap_or_default();
        let packages = if self.packages.is_empty() { String::new() } else { format!(" and {}", self.packages.join(", ")) };
        format!(
            "the Python worker `{} -m cudafuzz worker` for {} exited{status} before it was ready (its error is above): that interpreter needs cudafuzz{packages} installed (pip install cudafuzz), or name another with --python PATH{log}",
            self.interpreter.display(),
            self.manifest.display()
        )
    }
}

/// The interpreter to use (see the module docs).
fn interpreter(from_manifest: Option<&Path>) -> PathBuf {
    if let Some(p) = std::env::var_os(PYTHON_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(p) = from_manifest {
        return p.to_path_buf();
    }
    if let Some((program, _)) = crate::run::self_command() {
        return program.clone();
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV").filter(|p| !p.is_empty()) {
        let python = Path::new(&venv).join("bin/python");
        if python.exists() {
            return python;
        }
    }
    PathBuf::from("python3")
}
