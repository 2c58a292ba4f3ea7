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

    pub(super) fn params(&self, t: &mut toml::Table, defines: &BTreeMap<String, i64>) -> Result<BTreeMap<String, Vec<i64>>, ManifestError> {
        let params: BTreeMap<String, Vec<i64>> = self.optional(t.remove("params"), "params")?.unwrap_or_default();
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
        Ok(params)
    }
}
