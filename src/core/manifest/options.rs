//! The build-facing sections of a manifest: the `fuzz` flag, extra NVRTC `options`, the user's
//! `include` folders, and the tunable `[params]` (each combination a separate build, so their
//! count is bounded before anything is enumerated).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::load::Loader;
use super::ManifestError;

/// The most param combinations a manifest may have (each is a separate build per dtype and
/// architecture).
pub const MAX_PARAM_COMBINATIONS: u64 = 4096;

impl Loader<'_> {
    /// `fuzz` (default `true`) and the extra NVRTC `options`, with one `--include-path=DIR` per
    /// folder of `include` (the user's own headers, relative to the manifest) after them.
    pub(super) fn fuzz_and_options(&self, t: &mut toml::Table) -> Result<(bool, Vec<String>), ManifestError> {
        let fuzz = self.optional(t.remove("fuzz"), "fuzz")?.unwrap_or(true);
        let mut options: Vec<String> = self.optional(t.remove("options"), "options")?.unwrap_or_default();
        self.check_options(&options, "options")?;
        options.extend(self.include_dirs(t)?.iter().map(|d| format!("--include-path={}", d.display())));
        Ok((fuzz, options))
    }

    /// `std` (the language standard, `"c++20"`; default C++17) as an option, `compiler`
    /// (`"nvrtc"` or `"nvcc"`) and `module` (prebuilt modules: a path or a list, relative to
    /// the manifest, `{arch}` standing for `sm_90`): how the module is made.
    pub(super) fn build(&self, t: &mut toml::Table, python_target: bool) -> Result<(crate::core::target::Build, Option<String>), ManifestError> {
        use crate::core::target::Build;
        let std: Option<String> = self.optional(t.remove("std"), "std")?;
        let compiler: Option<String> = self.optional(t.remove("compiler"), "compiler")?;
        let module: Option<toml::Value> = t.remove("module");
        if python_target && (std.is_some() || compiler.is_some() || module.is_some()) {
            return Err(self.invalid("compiler", "a Python target builds itself; `std`, `compiler` and `module` describe a CUDA build: remove them".into()));
        }
        if let Some(s) = &std {
            if !["c++11", "c++14", "c++17", "c++20", "c++23"].contains(&s.as_str()) {
                return Err(self.invalid("std", format!("{s:?} is not a standard NVRTC or nvcc takes; use \"c++17\", \"c++20\" ...")));
            }
        }
        let build = match (compiler.as_deref(), module) {
            (Some(_), Some(_)) => {
                return Err(self.invalid("module", "a prebuilt module is not compiled: remove `compiler`, or remove `module` to compile the source".into()));
            }
            (None, Some(m)) => {
                let list: Vec<String> = match m {
                    toml::Value::String(s) => vec![s],
                    other => self.required(Some(other), "module", "module = [\"build/my_kernel.{arch}.cubin\", \"build/my_kernel.fatbin\"]")?,
                };
                if list.is_empty() || list.iter().any(|s| s.trim().is_empty()) {
                    return Err(self.invalid("module", "list at least one path (`build/my_kernel.{arch}.cubin`)".into()));
                }
                let base = self.path.parent().unwrap_or(Path::new("."));
                Build::Prebuilt(list.iter().map(|p| std::path::absolute(base.join(p)).unwrap_or_else(|_| base.join(p))).collect())
            }
            (None | Some("nvrtc"), None) => Build::Nvrtc,
            (Some("nvcc"), None) => Build::Nvcc,
            (Some(other), None) => {
                return Err(self.invalid("compiler", format!("{other:?} is not a compiler cudafuzz runs; use \"nvrtc\" (default) or \"nvcc\"")))
            }
        };
        Ok((build, std.map(|s| format!("--std={s}"))))
    }

    /// `include`: folders of the user's own headers, relative to the manifest; each must be a
    /// directory. They are searched after the kernel's own folder and before the built-in
    /// headers.
    pub(super) fn include_dirs(&self, t: &mut toml::Table) -> Result<Vec<PathBuf>, ManifestError> {
        let rel: Vec<String> = self.optional(t.remove("include"), "include")?.unwrap_or_default();
        let base = self.path.parent().unwrap_or(Path::new("."));
        rel.iter()
            .enumerate()
            .map(|(i, r)| {
                let dir = base.join(r);
                if dir.is_dir() {
                    Ok(std::path::absolute(&dir).unwrap_or(dir))
                } else {
                    Err(self.invalid(&format!("include[{i}]"), format!("{} is not a directory (include folders are relative to the manifest)", dir.display())))
                }
            })
            .collect()
    }

    /// Extra NVRTC options may not set the architecture (cudafuzz compiles each kernel for
    /// every `--arch` it is asked for, and NVRTC would take the last one given) or be empty.
    pub(super) fn check_options(&self, options: &[String], field: &str) -> Result<(), ManifestError> {
        for (i, o) in options.iter().enumerate() {
            if ["-arch", "--gpu-architecture", "--gpu-name"].iter().any(|p| o.starts_with(p)) {
                return Err(self.invalid(&format!("{field}[{i}]"), format!("{o:?} sets the architecture, which cudafuzz chooses per run (--arch); remove it")));
            }
            if o.trim().is_empty() {
                return Err(self.invalid(&format!("{field}[{i}]"), "empty option; remove it".into()));
            }
        }
        Ok(())
    }

    /// `[params]`: each a list of values to fuzz (`BLOCK = [128, 256]`), or a param the host
    /// derives from the case (`VEC = { from = "gcd(8, n)", values = [1, 2, 4, 8] }`): the values
    /// it can take are built, and each case gets the one its expression gives. Returns every
    /// param's values and the derived ones' expressions.
    pub(super) fn params(&self, t: &mut toml::Table, defines: &BTreeMap<String, i64>) -> Result<(ParamValues, DerivedParams), ManifestError> {
        let raw: BTreeMap<String, toml::Value> = self.optional(t.remove("params"), "params")?.unwrap_or_default();
        let mut params = BTreeMap::new();
        let mut derived = BTreeMap::new();
        for (name, value) in raw {
            let p: RawParam = value.try_into().map_err(|_| {
                self.invalid(
                    &format!("params.{name}"),
                    "a param is a list of integer values (`[128, 256]`) or a value the host derives (`{ from = \"gcd(8, n)\", values = [1, 2, 4, 8] }`)".into(),
                )
            })?;
            match p {
                RawParam::Values(v) => {
                    params.insert(name, v);
                }
                RawParam::Derived { from, values } => {
                    if from.trim().is_empty() {
                        return Err(self.invalid(&format!("params.{name}.from"), "empty; write the host's expression (`\"gcd(8, n)\"`)".into()));
                    }
                    params.insert(name.clone(), values);
                    derived.insert(name, from);
                }
            }
        }
        for (name, values) in &params {
            let field = format!("params.{name}");
            self.check_define_name(&field, name)?;
            if defines.contains_key(name) {
                return Err(self.invalid(&field, format!("`{name}` is also a fixed define; keep one")));
            }
            if values.is_empty() {
                return Err(self.invalid(&field, "empty; list at least one value".into()));
            }
            if let Some((i, v)) = values.iter().enumerate().find(|(i, v)| values[..*i].contains(v)) {
                return Err(self.invalid(&format!("{field}[{i}]"), format!("{v} is listed twice; list each value once")));
            }
        }
        // Counted, never enumerated: each combination is a separate build for every dtype and
        // architecture, and 41 params of two values would not fit in memory.
        let count = params.values().try_fold(1u64, |n, v| n.checked_mul(v.len() as u64));
        if count.is_none_or(|n| n > MAX_PARAM_COMBINATIONS) {
            let sizes: Vec<String> = params.values().map(|v| v.len().to_string()).collect();
            let shown = count.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string());
            return Err(self.invalid(
                "params",
                format!(
                    "{shown} combinations ({}), more than the {MAX_PARAM_COMBINATIONS} a manifest may build; fix some params as [defines] or list fewer values",
                    sizes.join(" x ")
                ),
            ));
        }
        Ok((params, derived))
    }
}

/// Each param's values to build.
type ParamValues = BTreeMap<String, Vec<i64>>;

/// Each derived param's expression.
type DerivedParams = BTreeMap<String, String>;

/// One `[params]` entry as written.
#[derive(serde::Deserialize)]
#[serde(untagged, deny_unknown_fields)]
enum RawParam {
    /// `BLOCK = [128, 256]`.
    Values(Vec<i64>),
    /// `VEC = { from = "gcd(8, n)", values = [1, 2, 4, 8] }`.
    Derived { from: String, values: Vec<i64> },
}
