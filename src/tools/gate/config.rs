//! [`GateConfig`]: the schema of a gate configuration (`ci/gate.toml`) and the checks on its
//! values. It exists apart from planning so that a file with an unknown key or an unusable value
//! is refused with the file, the key and the fix before any kernel or seed is looked at.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use crate::core::error::SeedError;
use crate::core::finding::FindingKind;
use crate::run::sanitizer::Tool;
use crate::tools::sweep::{param_grid, InputClass};

use super::budget::{parse_budget, Budget};

/// A configuration that cannot be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GateError {
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] crate::core::error::FileError),
    /// Not valid TOML, or a key that is unknown, missing or of the wrong type.
    #[error("{path}: {message}\n(every key is described in ci/gate.toml)")]
    Toml {
        /// The file.
        path: PathBuf,
        /// The parser's message with line, column and the key.
        message: String,
    },
    /// A value that parses but cannot be used.
    #[error("{path}: `{field}`: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key, e.g. `kernels[1].share`.
        field: String,
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// A seed in a seed directory cannot be read.
    #[error("{path}: `{field}`: a seed cannot be used")]
    Seed {
        /// The configuration file.
        path: PathBuf,
        /// The key of the seed directory, e.g. `seeds[0].dir`.
        field: String,
        /// What is wrong with the seed (names the seed file).
        #[source]
        source: Box<SeedError>,
    },
}

/// `cudafuzz gate`'s configuration file. Relative paths in it are relative to the directory
/// that holds the file.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// General settings.
    #[serde(default)]
    pub gate: GateSettings,
    /// The planted bug that must be caught before anything else counts.
    pub self_check: SelfCheck,
    /// Kernels to fuzz, with their budget shares.
    #[serde(default)]
    pub kernels: Vec<GatedKernel>,
    /// Seed directories to replay.
    #[serde(default)]
    pub seeds: Vec<SeedSet>,
    /// Sweep matrices.
    #[serde(default)]
    pub sweeps: Vec<SweepSpec>,
    /// Sanitizer passes.
    #[serde(default)]
    pub sanitizers: Vec<SanitizerSpec>,
}

/// `[gate]`: budget and generator settings.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateSettings {
    /// The time budget when `--budget` is not given, e.g. `20m`.
    #[serde(default)]
    pub budget: Option<String>,
    /// Generator seed for sweep, fuzz and sanitizer cases.
    #[serde(default)]
    pub seed: u64,
    /// Largest fraction of the budget the sweep may take.
    #[serde(default = "default_share")]
    pub sweep_share: f64,
    /// Fraction of the budget kept for the sanitizer passes (unused when there are none).
    #[serde(default = "default_share")]
    pub sanitizer_share: f64,
    /// Tools that re-run each new fuzz finding to name it (source line, tensor); empty: off.
    #[serde(default = "default_escalate")]
    pub escalate: Vec<Tool>,
}

fn default_share() -> f64 {
    0.15
}

fn default_escalate() -> Vec<Tool> {
    vec![Tool::Memcheck, Tool::Racecheck]
}

impl GateSettings {
    /// The gate's [`Budget`] for `total` time, with these settings' shares.
    pub fn budget(&self, total: Duration) -> Budget {
        Budget { total, sweep_share: self.sweep_share, sanitizer_share: self.sanitizer_share }
    }
}

impl Default for GateSettings {
    fn default() -> GateSettings {
        GateSettings { budget: None, seed: 0, sweep_share: default_share(), sanitizer_share: default_share(), escalate: default_escalate() }
    }
}

/// `[self_check]`: a kernel and case that must produce a finding of kind `expect` under `tool`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelfCheck {
    /// Kernel name or manifest path.
    pub kernel: String,
    /// A case or seed file.
    pub case: PathBuf,
    /// The compute-sanitizer tool that must catch it.
    #[serde(default = "default_tool")]
    pub tool: Tool,
    /// The finding kind it must produce.
    #[serde(default = "default_kind")]
    pub expect: FindingKind,
}

fn default_tool() -> Tool {
    Tool::Memcheck
}

fn default_kind() -> FindingKind {
    FindingKind::SanitizerMemory
}

/// `[[kernels]]`: a kernel to fuzz.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatedKernel {
    /// Kernel name or manifest path.
    pub kernel: String,
    /// Weight of its share of the fuzz time (1 = an equal share).
    #[serde(default = "one")]
    pub share: f64,
    /// At most this many cases (per shard); default: as many as the time allows.
    #[serde(default)]
    pub cases: Option<u64>,
    /// Also run generated cases outside the kernel's contract.
    #[serde(default)]
    pub outside_contract: bool,
}

fn one() -> f64 {
    1.0
}

/// What the seeds of a directory must do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeedExpect {
    /// A seed under a `fixed/` directory must pass; a seed with a saved finding must still fail
    /// with its signature; a seed without one must pass.
    #[default]
    Auto,
    /// Every seed must pass (the bugs were fixed).
    Pass,
    /// Every seed must fail with its saved signature.
    Fail,
}

/// `[[seeds]]`: a directory of seeds to replay (every `*.json` under it, recursively).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedSet {
    /// The directory.
    pub dir: PathBuf,
    /// What its seeds must do.
    #[serde(default)]
    pub expect: SeedExpect,
    /// Kernel to replay against instead of each seed's own.
    #[serde(default)]
    pub kernel: Option<String>,
}

/// Whether failing sweep cells fail the gate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepExpect {
    /// Every cell must pass; failures are findings.
    #[default]
    Pass,
    /// Recorded only (a kernel whose failures are known, e.g. fa_s512).
    Record,
}

/// `[[sweeps]]`: one failure matrix.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Kernel name or manifest path.
    pub kernel: String,
    /// Parameter values, `NAME=v1,v2` (as `cudafuzz sweep --params`).
    #[serde(default)]
    pub params: Vec<String>,
    /// Input class names (as `cudafuzz sweep --classes`); default: all.
    #[serde(default)]
    pub classes: Vec<String>,
    /// Repetitions per cell.
    #[serde(default = "default_repeat")]
    pub repeat: u64,
    /// Whether failures fail the gate.
    #[serde(default)]
    pub expect: SweepExpect,
}

fn default_repeat() -> u64 {
    20
}

/// `[[sanitizers]]`: a sanitizer pass over generated cases of some kernels.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SanitizerSpec {
    /// compute-sanitizer tools, run one after the other.
    pub tools: Vec<Tool>,
    /// Kernel names or manifest paths.
    pub kernels: Vec<String>,
    /// Cases per kernel (per shard), as time allows.
    #[serde(default = "default_sanitizer_cases")]
    pub cases: u64,
}

fn default_sanitizer_cases() -> u64 {
    200
}

impl GateConfig {
    /// Reads and checks a configuration file (the schema only; [`GateConfig::plan`] resolves it).
    pub fn load(path: &Path) -> Result<GateConfig, GateError> {
        let text = crate::core::userfile::read_text(path).map_err(crate::core::error::FileError::at(path, "read the gate configuration"))?;
        GateConfig::from_toml(path, &text)
    }

    /// Parses configuration text; `path` names it in errors.
    pub fn from_toml(path: &Path, text: &str) -> Result<GateConfig, GateError> {
        let cfg: GateConfig =
            toml::from_str(text).map_err(|e| GateError::Toml { path: path.into(), message: crate::core::error::clip_lines(&e.to_string()) })?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// The budget `[gate] budget` names, if any.
    pub fn budget(&self, path: &Path) -> Result<Option<Duration>, GateError> {
        self.gate
            .budget
            .as_deref()
            .map(|b| parse_budget(b).map_err(|e| GateError::Invalid { path: path.into(), field: "gate.budget".into(), problem: e.to_string() }))
            .transpose()
    }

    fn validate(&self, path: &Path) -> Result<(), GateError> {
        let invalid = |field: String, problem: String| GateError::Invalid { path: path.into(), field, problem };
        self.budget(path)?;
        for (field, share) in [("gate.sweep_share", self.gate.sweep_share), ("gate.sanitizer_share", self.gate.sanitizer_share)] {
            if !(0.0..1.0).contains(&share) {
                return Err(invalid(field.into(), format!("{share} is not a fraction of the budget: use a number from 0 to below 1, e.g. 0.15")));
            }
        }
        if self.gate.sweep_share + self.gate.sanitizer_share >= 0.9 {
            return Err(invalid(
                "gate.sanitizer_share".into(),
                format!(
                    "sweep_share + sanitizer_share = {:.2} leaves the fuzz campaigns almost no time: keep the sum below 0.9",
                    self.gate.sweep_share + self.gate.sanitizer_share
                ),
            ));
        }
        for (i, k) in self.kernels.iter().enumerate() {
            if !(k.share.is_finite() && k.share > 0.0) {
                return Err(invalid(
                    format!("kernels[{i}].share"),
                    format!("{} is not a positive weight: use e.g. 1 for an equal share, 2 for twice that", k.share),
                ));
            }
            if k.cases == Some(0) {
                return Err(invalid(format!("kernels[{i}].cases"), "0 cases fuzzes nothing: remove the key for no limit, or remove the kernel".into()));
            }
        }
        for (i, s) in self.sweeps.iter().enumerate() {
            if s.repeat == 0 {
                return Err(invalid(format!("sweeps[{i}].repeat"), "must be at least 1".into()));
            }
            for c in &s.classes {
                if InputClass::from_name(c).is_none() {
                    return Err(invalid(
                        format!("sweeps[{i}].classes"),
                        format!("unknown class `{c}`: expected aligned, misaligned, tail, strided, <tensor>+<bytes>, <tensor>-pitch+1 or a flag's name"),
                    ));
                }
            }
            param_grid(&s.params).map_err(|e| invalid(format!("sweeps[{i}].params"), format!("{}: {}", e.item, e.problem)))?;
        }
        for (i, s) in self.sanitizers.iter().enumerate() {
            if s.tools.is_empty() {
                return Err(invalid(format!("sanitizers[{i}].tools"), "name at least one tool, e.g. [\"memcheck\"]".into()));
            }
            if s.kernels.is_empty() {
                return Err(invalid(format!("sanitizers[{i}].kernels"), "name at least one kernel".into()));
            }
            if s.cases == 0 {
                return Err(invalid(
                    format!("sanitizers[{i}].cases"),
                    "0 cases checks nothing: remove the key for the default (200), or remove the pass".into(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::gate::testing::{config_dir, err};

    #[test]
    fn unknown_and_mistyped_keys_name_file_and_key() {
        let e = err("[[kernels]]\nkernal = \"simple_attn\"\n");
        assert!(e.contains("kernal") && e.contains("ci/gate.toml"), "{e}");
        let e = err("[gate]\nbudgte = \"5m\"\n");
        assert!(e.contains("budgte"), "{e}");
        let e = err("[[kernels]]\nkernel = \"simple_attn\"\nshare = \"lots\"\n");
        assert!(e.contains("share"), "{e}");
        let e = err("[[sanitizers]]\ntools = [\"memchek\"]\nkernels = [\"simple_attn\"]\n");
        assert!(e.contains("memchek") && e.contains("memcheck"), "{e}");
        let (dir, path) = config_dir("");
        std::fs::write(&path, "[gate]\nseed = 1\n").unwrap();
        let e = GateConfig::load(&path).unwrap_err().to_string();
        assert!(e.contains("self_check"), "a gate without a planted bug is refused: {e}");
        drop(dir);
        let e = GateConfig::load(Path::new("/nonexistent/gate.toml")).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/gate.toml"), "{e}");
    }

    #[test]
    fn bad_values_name_the_field_and_the_fix() {
        let e = err("[[kernels]]\nkernel = \"simple_attn\"\nshare = 0\n");
        assert!(e.contains("`kernels[0].share`") && e.contains("positive weight"), "{e}");
        let e = err("[gate]\nbudget = \"soon\"\n");
        assert!(e.contains("`gate.budget`") && e.contains("20m"), "{e}");
        let e = err("[gate]\nsweep_share = 1.5\n");
        assert!(e.contains("`gate.sweep_share`"), "{e}");
        let e = err("[gate]\nsweep_share = 0.5\nsanitizer_share = 0.45\n");
        assert!(e.contains("below 0.9"), "{e}");
        let e = err("[[sweeps]]\nkernel = \"simple_attn\"\nclasses = [\"aligned\", \"q+3\"]\n");
        assert!(e.contains("`sweeps[0].classes`") && e.contains("q+3") && e.contains("q-pitch+1"), "{e}");
        let e = err("[[sweeps]]\nkernel = \"simple_attn\"\nparams = [\"BLOCK_THREADS=x\"]\n");
        assert!(e.contains("`sweeps[0].params`") && e.contains("not an integer"), "{e}");
        let e = err("[[sweeps]]\nkernel = \"simple_attn\"\nrepeat = 0\n");
        assert!(e.contains("`sweeps[0].repeat`"), "{e}");
        let e = err("[[kernels]]\nkernel = \"no_such_kernel\"\n");
        assert!(e.contains("`kernels[0].kernel`") && e.contains("cudafuzz kernels"), "{e}");
        let e = err("[[kernels]]\nkernel = \"missing/k.toml\"\n");
        assert!(e.contains("not found"), "{e}");
        let e = err("[[seeds]]\ndir = \"nowhere\"\n");
        assert!(e.contains("`seeds[0].dir`") && e.contains("create it"), "{e}");
        let e = err("[[sanitizers]]\ntools = []\nkernels = [\"simple_attn\"]\n");
        assert!(e.contains("`sanitizers[0].tools`"), "{e}");
        let e = err("[[sanitizers]]\ntools = [\"memcheck\"]\nkernels = [\"simple_attn\"]\ncases = 0\n");
        assert!(e.contains("`sanitizers[0].cases`"), "{e}");
        let e = err("[[kernels]]\nkernel = \"simple_attn\"\ncases = 0\n");
        assert!(e.contains("`kernels[0].cases`"), "{e}");
    }
}
