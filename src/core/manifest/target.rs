//! The `[target]` section: a Python callable instead of a `__global__` function
//! (`crate::core::target` has the design). A manifest has either `source`, `entry` and
//! `[launch]` (NVRTC) or `[target]`, never both.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::load::Loader;
use super::{LaunchSpec, ManifestError, TensorSpec};
use crate::core::target::{CallableName, PythonTarget, Target, TensorApi};

/// The keys of a Python call, shared by `[target]` and a Python `[reference]`.
#[derive(Deserialize)]
pub(super) struct RawCall {
    python: String,
    setup: Option<String>,
    path: Option<String>,
    #[serde(default)]
    tensors: TensorApi,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    kwargs: toml::Table,
    #[serde(default)]
    returns: Vec<String>,
}

// serde's deny_unknown_fields does not reach through a flattened struct: the keys are checked
// against TARGET_KEYS first.
#[derive(Deserialize)]
struct RawTarget {
    #[serde(flatten)]
    call: RawCall,
    interpreter: Option<String>,
    timeout_ms: Option<u64>,
}

/// The keys of `[target]`.
const TARGET_KEYS: &[&str] = &["python", "setup", "path", "tensors", "args", "kwargs", "returns", "interpreter", "timeout_ms"];

/// What a `[target]` stands in for: the source file shown in reports (the callable's module),
/// the entry (`module:function`), and a launch with no geometry of its own.
pub(super) struct TargetParts {
    pub target: Target,
    pub source: PathBuf,
    pub entry: String,
    pub launch: LaunchSpec,
}

const EXAMPLE: &str = "[target] python = \"my_ops:softmax\", tensors = \"torch\", args = [\"x\", \"y\"]";

impl Loader<'_> {
    /// `[target]` when present (then `source`, `entry` and `[launch]` must not be).
    pub(super) fn target(&self, t: &mut toml::Table) -> Result<Option<TargetParts>, ManifestError> {
        let Some(raw) = t.remove("target") else { return Ok(None) };
        for key in ["source", "entry", "launch"] {
            if t.contains_key(key) {
                return Err(self.invalid(
                    key,
                    "a manifest with a [target] names its callable there; `source`, `entry` and [launch] describe an NVRTC kernel instead: keep one of the two"
                        .into(),
                ));
            }
        }
        self.known_keys(&raw, "target", TARGET_KEYS)?;
        let raw: RawTarget = self.required(Some(raw), "target", EXAMPLE)?;
        if raw.timeout_ms == Some(0) {
            return Err(self.invalid("target.timeout_ms", "0 ms would time out every call; remove it or give a positive value".into()));
        }
        let base = self.path.parent().unwrap_or(Path::new(""));
        let interpreter = raw.interpreter.map(|i| if i.contains('/') { base.join(i) } else { PathBuf::from(i) });
        let (target, source) = self.python_call(raw.call, "target")?;
        let target = PythonTarget { interpreter, ..target };
        let callable = target.callable.clone();
        let one = || ["1".to_string(), "1".to_string(), "1".to_string()];
        let launch =
            LaunchSpec { grid: one(), block: one(), shared_bytes: "0".into(), shared_opt_in: true, timeout_ms: raw.timeout_ms, args: Vec::new(), skip: None };
        Ok(Some(TargetParts { target: Target::Python(Box::new(target)), source, entry: callable.to_string(), launch }))
    }

    /// Refuses a key of table `v` (the section `section`) that is not one of `keys`.
    pub(super) fn known_keys(&self, v: &toml::Value, section: &str, keys: &[&str]) -> Result<(), ManifestError> {
        let Some(t) = v.as_table() else { return Ok(()) };
        match t.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(k) => Err(self.invalid(&format!("{section}.{k}"), format!("unknown key; [{section}] takes {}", keys.join(", ")))),
            None => Ok(()),
        }
    }

    /// A Python callable and how it is called (`[target]`, or a `[reference]` under `section`);
    /// with the file its module is imported from.
    pub(super) fn python_call(&self, raw: RawCall, section: &str) -> Result<(PythonTarget, PathBuf), ManifestError> {
        let callable = CallableName::parse(&raw.python).map_err(|p| self.invalid(&format!("{section}.python"), p))?;
        let setup = raw.setup.as_deref().map(CallableName::parse).transpose().map_err(|p| self.invalid(&format!("{section}.setup"), p))?;
        let base = self.path.parent().unwrap_or(Path::new(""));
        let path = base.join(raw.path.as_deref().unwrap_or("."));
        if !path.is_dir() {
            return Err(self.invalid(
                &format!("{section}.path"),
                format!("{} is not a directory; give the folder the callable's module is imported from, relative to the manifest", path.display()),
            ));
        }
        let source = module_file(&path, &callable.module).ok_or_else(|| {
            self.invalid(
                &format!("{section}.python"),
                format!(
                    "module `{}` is not a file under {} ({}.py or {}/__init__.py); set {section}.path to the folder it is imported from",
                    callable.module,
                    path.display(),
                    callable.module.replace('.', "/"),
                    callable.module.replace('.', "/")
                ),
            )
        })?;
        let mut kwargs = Vec::new();
        for (k, v) in raw.kwargs {
            if !super::expr::is_identifier(&k) {
                return Err(self.invalid(&format!("{section}.kwargs.{k}"), "is not a Python identifier".into()));
            }
            let toml::Value::String(v) = v else {
                return Err(self.invalid(&format!("{section}.kwargs.{k}"), "give a tensor's name or an expression, as a string".into()));
            };
            kwargs.push((k, v));
        }
        let target = PythonTarget { callable, setup, path, tensors: raw.tensors, args: raw.args, kwargs, returns: raw.returns, interpreter: None };
        Ok((target, source))
    }

    /// The call names only tensors of the roster among its returns, every output is either
    /// returned or passed, and nothing is both returned and passed.
    pub(super) fn check_target(&self, target: &Target, tensors: &[TensorSpec]) -> Result<(), ManifestError> {
        let Target::Python(p) = target else { return Ok(()) };
        self.check_call(p, tensors, "target")
    }

    /// [`Loader::check_target`] for a Python call under `section` (`target` or `reference`).
    pub(super) fn check_call(&self, p: &PythonTarget, tensors: &[TensorSpec], section: &str) -> Result<(), ManifestError> {
        let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
        for (i, r) in p.returns.iter().enumerate() {
            let Some(t) = tensors.iter().find(|t| &t.name == r) else {
                return Err(self.invalid(&format!("{section}.returns[{i}]"), format!("`{r}` is not a tensor (tensors: {})", names.join(", "))));
            };
            if !t.role.is_judged() {
                return Err(self.invalid(&format!("{section}.returns[{i}]"), format!("`{r}` is {}, but only outputs can be returned", t.role.name())));
            }
            if p.args.iter().chain(p.kwargs.iter().map(|(_, v)| v)).any(|a| a.trim() == r) {
                return Err(self.invalid(
                    &format!("{section}.returns[{i}]"),
                    format!("`{r}` is also passed to the callable; an output is either written in place (passed) or returned, not both"),
                ));
            }
        }
        let passed = |name: &str| p.args.iter().chain(p.kwargs.iter().map(|(_, v)| v)).any(|a| a.trim() == name) || p.returns.iter().any(|r| r == name);
        if let Some(t) = tensors.iter().find(|t| !passed(&t.name)) {
            return Err(self.invalid(
                &format!("{section}.args"),
                format!("tensor `{}` is neither passed nor returned; name it in {section}.args, {section}.kwargs or {section}.returns", t.name),
            ));
        }
        Ok(())
    }
}

/// The file a module is imported from under `dir`: `a/b.py` or `a/b/__init__.py` for `a.b`.
fn module_file(dir: &Path, module: &str) -> Option<PathBuf> {
    let rel = module.replace('.', "/");
    [dir.join(format!("{rel}.py")), dir.join(&rel).join("__init__.py")].into_iter().find(|p| p.is_file())
}
