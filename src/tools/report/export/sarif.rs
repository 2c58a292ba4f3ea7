//! The SARIF 2.1.0 rendering of a [`RunReport`]: [`SarifLog`], built by [`RunReport::sarif`].
//!
//! It exists for code-scanning UIs (GitHub code scanning, IDE SARIF viewers): one result per
//! finding, pointing at the kernel source line, with the finding signature as fingerprint so
//! one bug stays one alert across runs. The log is a set of serde structs covering the subset
//! of SARIF that cudafuzz writes, so nothing is escaped by hand.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{RunReport, SARIF_SCHEMA, SARIF_VERSION};
use crate::core::finding::Finding;

impl RunReport {
    /// The SARIF log: one result per finding.
    pub fn sarif(&self) -> SarifLog {
        let mut rules: Vec<SarifRule> = Vec::new();
        let mut results = Vec::new();
        for (k, f) in self.findings() {
            let id = rule_id(&f.finding);
            let index = match rules.iter().position(|r| r.id == id) {
                Some(i) => i,
                None => {
                    rules.push(SarifRule {
                        id: id.clone(),
                        name: f.finding.kind.name().to_string(),
                        short_description: SarifMessage { text: rule_text(&f.finding) },
                        help_uri: None,
                    });
                    rules.len() - 1
                }
            };
            let location = match (&f.finding.source, &f.source_path, &k.source) {
                (Some(src), path, _) => Some(SarifLocation::at(path.clone().unwrap_or_else(|| src.file.clone()), Some(src.line))),
                (None, _, Some(kernel_source)) => Some(SarifLocation::at(kernel_source.clone(), None)),
                (None, _, None) => None,
            };
            let mut text = format!("{}: {}", f.finding.kind, f.finding.detail);
            if let Some(seed) = &f.seed {
                let _ = write!(text, " (replay: cudafuzz repro {seed})");
            }
            results.push(SarifResult {
                rule_id: id,
                rule_index: index,
                level: if f.new { "error".into() } else { "warning".into() },
                message: SarifMessage { text },
                locations: location.into_iter().collect(),
                // The bug id lets code-scanning UIs keep one alert per bug across runs.
                partial_fingerprints: std::iter::once(("cudafuzzSignature/v1".to_string(), f.signature.to_string()))
                    .chain(f.bug.as_ref().map(|b| ("cudafuzzBug/v1".to_string(), b.to_string())))
                    .collect(),
                baseline_state: if f.new { "new".into() } else { "unchanged".into() },
                properties: SarifResultProperties {
                    kernel: k.kernel.clone(),
                    case: f.case.clone(),
                    seed: f.seed.clone(),
                    step: f.step.name().into(),
                    bug: f.bug.as_ref().map(|b| b.to_string()),
                },
            });
        }
        SarifLog {
            schema: SARIF_SCHEMA.into(),
            version: SARIF_VERSION.into(),
            runs: vec![SarifRun {
                tool: SarifTool { driver: SarifDriver { name: self.tool.name.clone(), version: self.tool.version.clone(), information_uri: None, rules } },
                automation_details: Some(SarifAutomation {
                    id: match self.shard {
                        Some(sh) => format!("cudafuzz/gate/shard-{}-of-{}", sh.number(), sh.count()),
                        None => "cudafuzz/gate".into(),
                    },
                }),
                results,
            }],
        }
    }

    /// SARIF 2.1.0 JSON ([`RunReport::sarif`]).
    pub fn to_sarif(&self) -> String {
        let mut s = serde_json::to_string_pretty(&self.sarif()).expect("SARIF always serializes");
        s.push('\n');
        s
    }
}

/// A SARIF rule id: the sanitizer's record kind when there is one (finer), else the finding kind.
fn rule_id(f: &Finding) -> String {
    match &f.sanitizer_kind {
        Some(k) => k.to_string(),
        None => f.kind.name().to_string(),
    }
}

fn rule_text(f: &Finding) -> String {
    match &f.sanitizer_kind {
        Some(k) => format!("{} reported by compute-sanitizer {} ({k})", f.kind, f.oracle),
        None => format!("{} (oracle {})", f.kind, f.oracle),
    }
}

/// A SARIF 2.1.0 log (the subset cudafuzz writes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SarifLog {
    /// The schema URI.
    #[serde(rename = "$schema")]
    pub schema: String,
    /// `2.1.0`.
    pub version: String,
    /// One run.
    pub runs: Vec<SarifRun>,
}

/// A SARIF run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifRun {
    /// The tool.
    pub tool: SarifTool,
    /// Distinguishes the shards of one job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automation_details: Option<SarifAutomation>,
    /// One result per finding.
    pub results: Vec<SarifResult>,
}

/// `run.automationDetails`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SarifAutomation {
    /// `cudafuzz/gate` or `cudafuzz/gate/shard-I-of-N`.
    pub id: String,
}

/// `run.tool`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SarifTool {
    /// The driver.
    pub driver: SarifDriver,
}

/// `run.tool.driver`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifDriver {
    /// `cudafuzz`.
    pub name: String,
    /// The version.
    pub version: String,
    /// Where to read about the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub information_uri: Option<String>,
    /// The rules the results refer to.
    pub rules: Vec<SarifRule>,
}

/// A SARIF rule (one per finding kind or sanitizer record kind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifRule {
    /// The rule id.
    pub id: String,
    /// A readable name.
    pub name: String,
    /// One line.
    pub short_description: SarifMessage,
    /// Help page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help_uri: Option<String>,
}

/// A SARIF message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SarifMessage {
    /// Plain text.
    pub text: String,
}

/// A SARIF result: one finding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifResult {
    /// Finding kind or sanitizer record kind.
    pub rule_id: String,
    /// Index of the rule in `tool.driver.rules`.
    pub rule_index: usize,
    /// `error` for a new finding, `warning` for an expected one.
    pub level: String,
    /// The finding's detail.
    pub message: SarifMessage,
    /// The source line, or the kernel's source file.
    pub locations: Vec<SarifLocation>,
    /// The finding signature, so code-scanning UIs track one alert per bug.
    pub partial_fingerprints: BTreeMap<String, String>,
    /// `new` or `unchanged` (an expected failure).
    pub baseline_state: String,
    /// cudafuzz's own fields.
    pub properties: SarifResultProperties,
}

/// `result.properties`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SarifResultProperties {
    /// Kernel name.
    pub kernel: String,
    /// The case in one line.
    pub case: String,
    /// The seed that replays it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
    /// The gate step.
    pub step: String,
    /// The bug the finding is filed under ([`crate::core::triage`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bug: Option<String>,
}

/// A SARIF location.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifLocation {
    /// The file and line.
    pub physical_location: SarifPhysicalLocation,
}

impl SarifLocation {
    /// `uri` (relative to the repository root), at `line` when known.
    pub fn at(uri: String, line: Option<u32>) -> SarifLocation {
        SarifLocation {
            physical_location: SarifPhysicalLocation {
                artifact_location: SarifArtifactLocation { uri: uri.replace('\\', "/"), uri_base_id: Some("%SRCROOT%".into()) },
                region: line.filter(|&l| l > 0).map(|start_line| SarifRegion { start_line }),
            },
        }
    }
}

/// `location.physicalLocation`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifPhysicalLocation {
    /// The file.
    pub artifact_location: SarifArtifactLocation,
    /// The line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<SarifRegion>,
}

/// `physicalLocation.artifactLocation`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifArtifactLocation {
    /// Path relative to `uriBaseId`.
    pub uri: String,
    /// `%SRCROOT%`: the repository root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri_base_id: Option<String>,
}

/// `physicalLocation.region`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifRegion {
    /// 1-based line.
    pub start_line: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::report::export::tests::sample;

    #[test]
    fn sarif_has_the_required_fields_and_one_result_per_finding() {
        let r = sample();
        let v: serde_json::Value = serde_json::from_str(&r.to_sarif()).unwrap();
        assert_eq!(v["version"], "2.1.0");
        assert_eq!(v["$schema"], SARIF_SCHEMA);
        assert_eq!(v["runs"][0]["tool"]["driver"]["name"], "cudafuzz");
        assert_eq!(v["runs"][0]["tool"]["driver"]["version"], env!("CARGO_PKG_VERSION"));
        let results = v["runs"][0]["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        for res in results {
            let locs = res["locations"].as_array().unwrap();
            assert!(!locs.is_empty(), "{res}");
            for l in locs {
                let uri = l["physicalLocation"]["artifactLocation"]["uri"].as_str().unwrap();
                assert!(uri.ends_with(".cu") && !uri.starts_with('/'), "{uri}");
            }
            let rule = res["ruleId"].as_str().unwrap();
            let index = res["ruleIndex"].as_u64().unwrap() as usize;
            assert_eq!(v["runs"][0]["tool"]["driver"]["rules"][index]["id"], rule);
        }
        // The sanitizer finding: its record kind, its source line, level error (new).
        assert_eq!(results[0]["ruleId"], "invalid_global_read_out_of_bounds");
        assert_eq!(results[0]["level"], "error");
        assert_eq!(results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], "kernels/testing/simple_attn.cu");
        assert_eq!(results[0]["locations"][0]["physicalLocation"]["region"]["startLine"], 42);
        assert!(results[0]["message"]["text"].as_str().unwrap().contains("<past> k's end"));
        // The canary finding has no line: the kernel's source file, no region; expected = warning.
        assert_eq!(results[1]["ruleId"], "canary_damage");
        assert_eq!(results[1]["level"], "warning");
        assert_eq!(results[1]["baselineState"], "unchanged");
        assert!(results[1]["locations"][0]["physicalLocation"].get("region").is_none());
        let back: SarifLog = serde_json::from_value(v).unwrap();
        assert_eq!(back, r.sarif());
    }
}
