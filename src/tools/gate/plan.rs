//! [`GatePlan`]: a [`GateConfig`] resolved on the host (kernels, seeds and what each must do,
//! parameter grids, classes). Planning is its own step so that every kernel and seed the
//! configuration names is found and read before any GPU work starts: a bad configuration is an
//! error, not a gate that fails half-way.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::core::case::Case;
use crate::core::corpus;
use crate::core::finding::FindingKind;
use crate::core::manifest::Manifest;
use crate::core::registry;
use crate::run::sanitizer::Tool;
use crate::tools::report::export::Expectation;
use crate::tools::sweep::{param_grid, InputClass};

use super::config::{GateConfig, GateError, GateSettings, SeedExpect, SweepExpect};

/// The planted bug, resolved.
#[derive(Clone, Debug)]
pub struct PlannedSelfCheck {
    /// Its kernel.
    pub manifest: Manifest,
    /// Its case, bound to the kernel.
    pub case: Case,
    /// The tool that must catch it.
    pub tool: Tool,
    /// The finding kind it must produce.
    pub expect: FindingKind,
}

/// A kernel to fuzz, resolved.
#[derive(Clone, Debug)]
pub struct PlannedKernel {
    /// The kernel.
    pub manifest: Manifest,
    /// Weight of its fuzz time.
    pub share: f64,
    /// Case limit per shard.
    pub cases: Option<u64>,
    /// Run cases outside the contract too.
    pub outside_contract: bool,
}

/// A seed to replay, loaded.
#[derive(Clone, Debug)]
pub struct PlannedSeed {
    /// The seed file.
    pub path: PathBuf,
    /// Its kernel.
    pub manifest: Manifest,
    /// Its case, bound to the kernel.
    pub case: Case,
    /// What it must do.
    pub expected: Expectation,
    /// The compute-sanitizer tool it is replayed under: its saved finding's (a sanitizer finding
    /// only reproduces under its tool), else none.
    pub tool: Option<Tool>,
}

/// A sweep matrix, resolved.
#[derive(Clone, Debug)]
pub struct PlannedSweep {
    /// The kernel.
    pub manifest: Manifest,
    /// Parameter assignments, one row each.
    pub grid: Vec<BTreeMap<String, i64>>,
    /// Classes, one column each.
    pub classes: Vec<InputClass>,
    /// Repetitions per cell.
    pub repeat: u64,
    /// Whether failures fail the gate.
    pub expect_pass: bool,
}

/// A sanitizer pass over one kernel, resolved.
#[derive(Clone, Debug)]
pub struct PlannedSanitizer {
    /// The tools.
    pub tools: Vec<Tool>,
    /// The kernel.
    pub manifest: Manifest,
    /// Cases per shard.
    pub cases: u64,
}

/// A configuration resolved against the kernels and seeds on disk: everything [`run`](super::run()) needs.
#[derive(Clone, Debug)]
pub struct GatePlan {
    /// The configuration file.
    pub config_path: PathBuf,
    /// `[gate]`.
    pub settings: GateSettings,
    /// The planted bug.
    pub self_check: PlannedSelfCheck,
    /// Kernels to fuzz.
    pub kernels: Vec<PlannedKernel>,
    /// Seeds to replay, in a stable order (the shard split follows it).
    pub seeds: Vec<PlannedSeed>,
    /// Sweep matrices.
    pub sweeps: Vec<PlannedSweep>,
    /// Sanitizer passes, one per (spec, kernel).
    pub sanitizers: Vec<PlannedSanitizer>,
}

impl GateConfig {
    /// Resolves kernels, loads seeds and derives their expectations. `path` is the file this
    /// configuration came from: relative paths are taken from its directory.
    pub fn plan(&self, path: &Path) -> Result<GatePlan, GateError> {
        let base = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        let kernel = |field: String, spec: &str| {
            registry::resolve_relative(&base, spec).map_err(|e| GateError::Invalid { path: path.into(), field, problem: e.to_string() })
        };
        let manifest = kernel("self_check.kernel".into(), &self.self_check.kernel)?;
        let case_path = base.join(&self.self_check.case);
        let (seed, _) = corpus::load(&case_path, Some(&crate::core::generate::DecodeContext::new(&manifest))).map_err(|source| GateError::Seed {
            path: path.into(),
            field: "self_check.case".into(),
            source: Box::new(source),
        })?;
        // A case its kernel cannot take is refused here, with the key that names it, not on the GPU.
        let bound = |field: &str, file: &Path, m: &Manifest, case: Case| -> Result<Case, GateError> {
            let case = m.bind(case);
            crate::core::plan::Plan::new(&case, m).map_err(|e| GateError::Invalid {
                path: path.into(),
                field: field.into(),
                problem: format!("{}: {}", file.display(), crate::core::error::chain(&e)),
            })?;
            Ok(case)
        };
        let self_check = PlannedSelfCheck {
            case: bound("self_check.case", &case_path, &manifest, seed.case)?,
            manifest,
            tool: self.self_check.tool,
            expect: self.self_check.expect,
        };
        let kernels = self
            .kernels
            .iter()
            .enumerate()
            .map(|(i, k)| {
                Ok(PlannedKernel {
                    manifest: kernel(format!("kernels[{i}].kernel"), &k.kernel)?,
                    share: k.share,
                    cases: k.cases,
                    outside_contract: k.outside_contract,
                })
            })
            .collect::<Result<Vec<_>, GateError>>()?;
        let mut seeds = Vec::new();
        for (i, set) in self.seeds.iter().enumerate() {
            let field = format!("seeds[{i}].dir");
            let dir = base.join(&set.dir);
            if !dir.is_dir() {
                return Err(GateError::Invalid {
                    path: path.into(),
                    field,
                    problem: format!("{} is not a directory: create it (it may stay empty) or remove the entry", dir.display()),
                });
            }
            let forced = set.kernel.as_deref().map(|k| kernel(format!("seeds[{i}].kernel"), k)).transpose()?;
            for file in json_files(&dir) {
                let ctx = forced.as_ref().map(crate::core::generate::DecodeContext::new);
                let (mut seed, _) = corpus::load(&file, ctx.as_ref()).map_err(|source| GateError::Seed {
                    path: path.into(),
                    field: field.clone(),
                    source: Box::new(source),
                })?;
                let m = match &forced {
                    Some(m) => m.clone(),
                    None if seed.case.kernel.is_empty() => {
                        return Err(GateError::Invalid {
                            path: path.into(),
                            field,
                            problem: format!("{} names no kernel: set `kernel` for this directory", file.display()),
                        })
                    }
                    None => {
                        seed.kernel(&file, None)
                            .map_err(|e| GateError::Invalid {
                                path: path.into(),
                                field: field.clone(),
                                problem: format!("{}; or set `kernel` for this directory", crate::core::error::chain(&e)),
                            })?
                            .manifest
                    }
                };
                // A hand-edited signature that disagrees with its finding: the finding's counts.
                let _ = seed.reconcile();
                let saved = seed.signature.clone().or_else(|| seed.finding.as_ref().map(|f| f.signature()));
                let under_fixed = file.strip_prefix(&dir).unwrap_or(&file).components().any(|c| c == Component::Normal("fixed".as_ref()));
                let expected = match (set.expect, saved) {
                    (SeedExpect::Pass, _) => Expectation::Pass,
                    (SeedExpect::Auto, _) if under_fixed => Expectation::Pass,
                    (SeedExpect::Auto | SeedExpect::Fail, Some(signature)) => Expectation::Fail { signature },
                    (SeedExpect::Auto, None) => Expectation::Pass,
                    (SeedExpect::Fail, None) => {
                        return Err(GateError::Invalid {
                            path: path.into(),
                            field: format!("seeds[{i}].expect"),
                            problem: format!("{} has no saved finding, so it cannot be an expected failure: use expect = \"auto\" or \"pass\", or replace it with the seed `cudafuzz fuzz` saved", file.display()),
                        })
                    }
                };
                let tool = seed.finding.as_ref().and_then(|f| Tool::of(f.oracle));
                let case = bound(&field, &file, &m, seed.case)?;
                seeds.push(PlannedSeed { path: file, case, manifest: m, expected, tool });
            }
        }
        let sweeps = self
            .sweeps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let manifest = kernel(format!("sweeps[{i}].kernel"), &s.kernel)?;
                let classes =
                    if s.classes.is_empty() { InputClass::defaults(&manifest) } else { s.classes.iter().filter_map(|c| InputClass::from_name(c)).collect() };
                for c in &classes {
                    c.check(&manifest).map_err(|e| GateError::Invalid { path: path.into(), field: format!("sweeps[{i}].classes"), problem: e.to_string() })?;
                }
                let grid = param_grid(&s.params).map_err(|e| GateError::Invalid {
                    path: path.into(),
                    field: format!("sweeps[{i}].params"),
                    problem: e.to_string(),
                })?;
                for params in &grid {
                    manifest.check_param_values(params).map_err(|(_, problem)| GateError::Invalid {
                        path: path.into(),
                        field: format!("sweeps[{i}].params"),
                        problem,
                    })?;
                }
                Ok(PlannedSweep { manifest, grid, classes, repeat: s.repeat, expect_pass: s.expect == SweepExpect::Pass })
            })
            .collect::<Result<Vec<_>, GateError>>()?;
        let mut sanitizers = Vec::new();
        for (i, s) in self.sanitizers.iter().enumerate() {
            for (j, k) in s.kernels.iter().enumerate() {
                sanitizers.push(PlannedSanitizer { tools: s.tools.clone(), manifest: kernel(format!("sanitizers[{i}].kernels[{j}]"), k)?, cases: s.cases });
            }
        }
        Ok(GatePlan { config_path: path.into(), settings: self.gate.clone(), self_check, kernels, seeds, sweeps, sanitizers })
    }
}

impl GatePlan {
    /// Checks that a budget of `total` leaves every step at least a second when each earlier
    /// step uses all of its time: a step given 0 s would be reported as run while it checked
    /// nothing. The error names the key whose share is too small.
    pub fn check_budget(&self, total: Duration) -> Result<(), GateError> {
        let b = self.settings.budget(total);
        let short = |field: &str, step: String, t: Duration| GateError::Invalid {
            path: self.config_path.clone(),
            field: field.into(),
            problem: format!(
                "with a budget of {}, {step} gets {:.1} s; give it a larger share or the gate a larger budget (--budget or [gate] budget)",
                humantime::format_duration(total),
                t.as_secs_f64()
            ),
        };
        let sweep = if self.sweeps.is_empty() { Duration::ZERO } else { b.sweep(Duration::ZERO) };
        if !self.sweeps.is_empty() && sweep < MIN_STEP {
            return Err(short("gate.sweep_share", "the sweep".into(), sweep));
        }
        let weights: Vec<f64> = self.kernels.iter().map(|k| k.share).collect();
        let fuzz = b.fuzz(sweep, &weights, !self.sanitizers.is_empty());
        if let Some((i, t)) = fuzz.iter().enumerate().find(|(_, t)| **t < MIN_STEP) {
            return Err(short(&format!("kernels[{i}].share"), format!("fuzzing {}", self.kernels[i].manifest.name), *t));
        }
        if !self.sanitizers.is_empty() {
            let pass = total.mul_f64(b.sanitizer_share) / self.sanitizers.len() as u32;
            if pass < MIN_STEP {
                return Err(short("gate.sanitizer_share", format!("each of the {} sanitizer passes", self.sanitizers.len()), pass));
            }
        }
        Ok(())
    }
}

/// The least time a planned step may get.
const MIN_STEP: Duration = Duration::from_secs(1);

/// Every `*.json` under `dir`, recursively, sorted (hidden files and directories skipped).
fn json_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(&p, out),
                Ok(_) if p.extension().is_some_and(|x| x == "json") => out.push(p),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// The row label a sweep uses: the kernel's name, with its parameters in brackets.
pub fn config_label(kernel: &str, params: &BTreeMap<String, i64>) -> String {
    if params.is_empty() {
        kernel.to_string()
    } else {
        format!("{kernel}[{}]", params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::gate::testing::{config_dir, root, seed_dir};

    #[test]
    fn the_shipped_configuration_plans() {
        let path = root().join("ci/gate.toml");
        let cfg = GateConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let plan = cfg.plan(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.self_check.manifest.name, "oob_read_k");
        assert_eq!(plan.self_check.case.dim("head_dim"), 40, "the planted bug needs head_dim 40");
        assert_eq!(plan.self_check.tool, Tool::Memcheck);
        assert!(plan.kernels.iter().any(|k| k.manifest.name == "flash_fwd"));
        assert!(cfg.budget(&path).unwrap().is_some());
    }

    #[test]
    fn seed_expectations_follow_findings_and_fixed_directories() {
        let (dir, path) = config_dir("[[seeds]]\ndir = \"seeds\"\n");
        let (expected, _) = seed_dir(&dir.path().join("seeds"));
        let plan = GateConfig::load(&path).unwrap().plan(&path).unwrap();
        let got: Vec<(String, Expectation)> =
            plan.seeds.iter().map(|s| (s.path.strip_prefix(dir.path()).unwrap().display().to_string(), s.expected.clone())).collect();
        assert_eq!(
            got,
            vec![
                ("seeds/a.json".into(), Expectation::Fail { signature: expected.signature() }),
                ("seeds/c.json".into(), Expectation::Pass),
                ("seeds/fixed/b.json".into(), Expectation::Pass),
            ]
        );
        assert!(plan.seeds.iter().all(|s| s.manifest.name == "simple_attn"));
        // expect = "fail" on a seed without a finding is a configuration error naming the seed.
        std::fs::write(path.clone(), std::fs::read_to_string(&path).unwrap().replace("dir = \"seeds\"", "dir = \"seeds\"\nexpect = \"fail\"")).unwrap();
        let e = GateConfig::load(&path).unwrap().plan(&path).unwrap_err().to_string();
        assert!(e.contains("`seeds[0].expect`") && e.contains("c.json"), "{e}");
        // A broken seed names itself.
        std::fs::write(dir.path().join("seeds/broken.json"), "{ nope").unwrap();
        let e = GateConfig::load(&path).unwrap().plan(&path).unwrap_err();
        assert!(format!("{:#}", anyhow::Error::from(e)).contains("broken.json"));
    }

    #[test]
    fn config_labels_match_the_sweep_command() {
        assert_eq!(config_label("k", &BTreeMap::new()), "k");
        assert_eq!(config_label("k", &BTreeMap::from([("B".into(), 1), ("A".into(), 2)])), "k[A=2,B=1]");
    }
}
