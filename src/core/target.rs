//! Targets: *how the launch happens*.
//!
//! Everything a case goes through is the same whatever the target: the case is drawn from the
//! manifest's roster, planned, laid out in a guarded arena (redzones, canaries, sentinels),
//! judged by the same oracles against the same references, run under the same sanitizers, and
//! its findings are triaged and saved as the same seeds. A target only decides the one step in
//! the middle: given the arena's tensors and the case's dims and scalars, make the GPU run the
//! code under test. That is the whole interface, so a new kind of target touches the launch
//! stage of the worker and nothing else.
//!
//! The kinds:
//!
//! * [`Target::Nvrtc`], a `__global__` function NVRTC builds from the manifest's `source` and
//!   `entry`, launched with the grid, block, shared memory and argument list of `[launch]`. Its
//!   fields stay where format 2 put them (`Manifest::source`, `entry`, `launch`).
//! * [`Target::Python`], a Python callable (a PyTorch extension's entry, a Triton kernel's
//!   wrapper, a CuPy `RawKernel` call) that picks its own grid and launches however it likes.
//!   The worker for such a target is the user's own interpreter running cudafuzz's extension
//!   module (`python -m cudafuzz worker`): the callable gets the arena's tensors as DLPack
//!   views (the exact base, strides and dtype the plan chose, inside the redzones), the dims and
//!   scalars as Python numbers, positionally or by keyword; what it returns is copied onto the
//!   roster's outputs; then the whole context is synchronised (a callable may use side streams)
//!   and the case is judged like any other.
//!
//! How an NVRTC-style target's module is made is a [`Build`]: NVRTC, nvcc, or a prebuilt
//! module; its entry may be a C++ name expression (`ns::kernel<{VEC}, {T}>`). A launch sequence
//! (`[[launch]]` steps, later kernels of the same module on the same allocations) is the launch
//! stage's too: it changes neither the arena, the oracles nor the seeds.
//!
//! This module holds the plain data (what the manifest declares, and the call resolved for one
//! case); the manifest resolves a call for a case (`Manifest::resolve_call`, beside its
//! launch's resolution) and the engine's launch stage (`crate::engine::launch`) performs it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How the code under test is launched.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Target {
    /// A `__global__` function built by NVRTC and launched as `[launch]` says.
    #[default]
    Nvrtc,
    /// A Python callable.
    Python(Box<PythonTarget>),
}

impl Target {
    /// The Python callable, when the target is one.
    pub fn python(&self) -> Option<&PythonTarget> {
        match self {
            Target::Python(p) => Some(p),
            Target::Nvrtc => None,
        }
    }

    /// Whether the code under test is built by cudafuzz (NVRTC): what `build`, `--emit cu` and
    /// coverage builds need.
    pub fn is_compiled_here(&self) -> bool {
        matches!(self, Target::Nvrtc)
    }
}

/// How an NVRTC-style target's module is made: what `compiler` and `module` say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Build {
    /// NVRTC, in process (the default).
    #[default]
    Nvrtc,
    /// nvcc, run on the source (`compiler = "nvcc"`): for code NVRTC cannot build.
    Nvcc,
    /// A module the user's own build made (`module = [...]`): the first of these paths, with
    /// `{arch}` filled in (`sm_90`), that exists; a `.cubin`, `.fatbin` or `.ptx`.
    Prebuilt(Vec<PathBuf>),
}

impl Build {
    /// The name `cudafuzz build` and errors use.
    pub fn name(&self) -> &'static str {
        match self {
            Build::Nvrtc => "nvrtc",
            Build::Nvcc => "nvcc",
            Build::Prebuilt(_) => "prebuilt module",
        }
    }
}

/// The array type a Python callable is given for each tensor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TensorApi {
    /// `torch.Tensor` (`torch.from_dlpack`).
    #[default]
    Torch,
    /// `cupy.ndarray` (`cupy.from_dlpack`).
    Cupy,
    /// `numpy.ndarray` (host memory only: the plumbing tests).
    Numpy,
    /// The DLPack producer itself (an object with `__dlpack__` and `__dlpack_device__`).
    Dlpack,
}

impl TensorApi {
    /// The name used in manifests.
    pub fn name(self) -> &'static str {
        match self {
            TensorApi::Torch => "torch",
            TensorApi::Cupy => "cupy",
            TensorApi::Numpy => "numpy",
            TensorApi::Dlpack => "dlpack",
        }
    }

    /// The Python package it needs, if any.
    pub fn package(self) -> Option<&'static str> {
        match self {
            TensorApi::Torch => Some("torch"),
            TensorApi::Cupy => Some("cupy"),
            TensorApi::Numpy => Some("numpy"),
            TensorApi::Dlpack => None,
        }
    }
}

/// A callable named as `module:function` (the function may be dotted: `ops:Softmax.apply`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallableName {
    /// The module to import (dotted).
    pub module: String,
    /// The attribute path inside it.
    pub function: String,
}

impl CallableName {
    /// Parses `module:function`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<CallableName, String> {
        let Some((module, function)) = text.split_once(':') else {
            return Err(format!("{text:?} is not `module:function`; name the module to import and the callable in it, e.g. \"my_ops:softmax\""));
        };
        let identifier = |s: &str| s.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_') && s.chars().all(|c| c.is_alphanumeric() || c == '_');
        let dotted = |s: &str| !s.is_empty() && s.split('.').all(identifier);
        if !dotted(module) || !dotted(function) {
            return Err(format!("{text:?} is not `module:function` with dotted Python identifiers on both sides"));
        }
        Ok(CallableName { module: module.to_string(), function: function.to_string() })
    }
}

impl std::fmt::Display for CallableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.module, self.function)
    }
}

/// A Python callable as a manifest's `[target]` declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct PythonTarget {
    /// The callable under test.
    pub callable: CallableName,
    /// Run once per worker before it takes cases (builds or loads an extension); its failure is
    /// a setup error, never a finding.
    pub setup: Option<CallableName>,
    /// The folder put first on `sys.path`, joined to the manifest's folder.
    pub path: PathBuf,
    /// The array type tensors are passed as.
    pub tensors: TensorApi,
    /// Positional arguments: a tensor's name, or an expression over dims, scalars and params.
    pub args: Vec<String>,
    /// Keyword arguments, in declaration order.
    pub kwargs: Vec<(String, String)>,
    /// The outputs the callable returns, in the order it returns them (empty: it writes its
    /// outputs in place and its return value is ignored).
    pub returns: Vec<String>,
    /// The interpreter named by the manifest (`--python` overrides it), joined to the manifest's
    /// folder when it is a path.
    pub interpreter: Option<PathBuf>,
}

/// One argument of a call, resolved for a case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallValue {
    /// The view of the tensor at this roster position.
    Tensor(usize),
    /// A Python `int`.
    Int(i64),
    /// A Python `float`.
    Float(f64),
    /// A Python `bool`.
    Bool(bool),
}

/// A call resolved for one case: plain values, no expressions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResolvedCall {
    /// Positional arguments.
    pub args: Vec<CallValue>,
    /// Keyword arguments.
    pub kwargs: Vec<(String, CallValue)>,
    /// Roster positions of the returned outputs, in return order.
    pub returns: Vec<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callables_are_module_colon_dotted_name() {
        let c = CallableName::parse("pkg.ops:Softmax.apply").unwrap();
        assert_eq!((c.module.as_str(), c.function.as_str()), ("pkg.ops", "Softmax.apply"));
        assert_eq!(c.to_string(), "pkg.ops:Softmax.apply");
        for bad in ["ops", "ops:", ":f", "ops:1f", "a b:f", "ops:f.", "ops::f"] {
            assert!(CallableName::parse(bad).is_err(), "{bad}");
        }
    }
}
