//! Run reports for machines and CI: [`RunReport`] and its four renderings.
//!
//! A [`RunReport`] is plain serde data written by `cudafuzz gate` (one per shard) and combined by
//! `cudafuzz report merge`: the environment checks, then one [`KernelSection`] per kernel with
//! its seed replays, sweep-matrix rows, fuzz campaign, sanitizer passes and findings. The JSON
//! form is the source of truth; Markdown (for `$GITHUB_STEP_SUMMARY`), JUnit XML (one test per
//! environment check, seed replay, matrix cell, campaign and sanitizer pass) and SARIF 2.1.0
//! (one result per finding, with file and line, for code-scanning UIs) are derived from it, so
//! a merged report renders exactly like a single one. XML is written with `quick-xml` and SARIF
//! through serde structs: nothing is escaped by hand.
//!
//! The verdict is derived from the content ([`RunReport::exit_code`]): a report passes only when
//! every environment check passed, no seed regressed, nothing new was found and the run was not
//! interrupted.
//!
//! Layout: the model (the serde data and its verdict) is in `model`, each derived rendering in
//! its own file (`markdown`, `junit`, `sarif`); this module holds the format constants, the JSON
//! form (reading, writing, [`RunReport::write_all`]) and the helpers they share. Every type is
//! re-exported here, so paths stay `crate::tools::report::export::X`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use thiserror::Error;

mod junit;
mod markdown;
mod model;
mod sarif;

pub use model::{
    Campaign, Counts, EnvCheck, Expectation, FindingEntry, GpuSummary, KernelSection, MatrixCell, MatrixRow, Observed, RunReport, SanitizerRun, SeedReplay,
    Step, ToolInfo,
};
pub use sarif::{
    SarifArtifactLocation, SarifAutomation, SarifDriver, SarifLocation, SarifLog, SarifMessage, SarifPhysicalLocation, SarifRegion, SarifResult,
    SarifResultProperties, SarifRule, SarifRun, SarifTool,
};

/// Format tag of report files.
pub const REPORT_FORMAT: &str = "cudafuzz-report";
/// Report format version this build writes and reads.
pub const REPORT_VERSION: u32 = 1;
/// The SARIF version written.
pub const SARIF_VERSION: &str = "2.1.0";
/// The SARIF 2.1.0 JSON schema.
pub const SARIF_SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";
/// Name of the environment check that a GPU is present; when it fails the run exits with
/// [`exit::NO_GPU`](crate::core::exit::NO_GPU).
pub const CHECK_GPU: &str = "gpu";

/// File names [`RunReport::write_all`] uses inside its directory.
pub const REPORT_FILES: [&str; 4] = ["report.json", "report.md", "junit.xml", "results.sarif"];

/// A report that cannot be read or written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReportError {
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] crate::core::error::FileError),
    /// The file is not a report this build reads.
    #[error("{path}: not a cudafuzz report (line {line}, column {column}): {message}; reports are the report.json that `cudafuzz gate` writes")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde's message, naming the field.
        message: String,
    },
    /// A value no run can have written (a negative duration, a start that is not a time).
    #[error("{path}: field {field}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field, `kernels[0].campaign.elapsed_secs`.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// Another format tag or version.
    #[error("{path}: report format `{format}` version {version} is not supported (this build reads `{REPORT_FORMAT}` version {REPORT_VERSION})")]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// Format tag found.
        format: String,
        /// Version found, as the file holds it (`9`, `"2" (not a number)`, `(none)`).
        version: String,
    },
}

/// Now, as RFC 3339 UTC with seconds (`2025-01-31T23:59:59Z`).
pub fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

impl RunReport {
    /// Pretty JSON, newline-terminated.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("reports always serialize");
        s.push('\n');
        s
    }

    /// Parses a report written by [`RunReport::to_json`]; `path` names it in errors.
    pub fn from_json(path: &Path, text: &str) -> Result<RunReport, ReportError> {
        let json_err = |e: serde_json::Error| ReportError::Json { path: path.into(), line: e.line(), column: e.column(), message: e.to_string() };
        let value: serde_json::Value = serde_json::from_str(text).map_err(json_err)?;
        let format = value.get("format").and_then(|v| v.as_str()).unwrap_or("?").to_string();
        if format != REPORT_FORMAT || value.get("version").and_then(|v| v.as_u64()) != Some(REPORT_VERSION as u64) {
            let version = crate::core::corpus::version_as_held(&value);
            return Err(ReportError::UnknownFormat { path: path.into(), format, version });
        }
        let report: RunReport = serde_json::from_str(text).map_err(json_err)?;
        report.check_values().map_err(|(field, problem)| ReportError::Invalid { path: path.into(), field, problem })?;
        Ok(report)
    }

    /// Values only an edited report can have: times that are not RFC 3339, negative or
    /// non-finite durations and budgets. Returns the field and the problem.
    fn check_values(&self) -> Result<(), (String, String)> {
        for (field, t) in [("started", &self.started), ("finished", &self.finished)] {
            if humantime::parse_rfc3339_weak(t).is_err() {
                return Err((field.into(), format!("{t:?} is not a time like 2026-11-27T05:50:59Z")));
            }
        }
        let seconds = |field: String, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err((field, format!("{v} is not a number of seconds (finite, at least 0)")))
            }
        };
        seconds("duration_secs".into(), self.duration_secs)?;
        if let Some(b) = self.budget_secs {
            seconds("budget_secs".into(), b)?;
        }
        for (i, k) in self.kernels.iter().enumerate() {
            if let Some(c) = &k.campaign {
                seconds(format!("kernels[{i}].campaign.budget_secs"), c.budget_secs)?;
                seconds(format!("kernels[{i}].campaign.elapsed_secs"), c.elapsed_secs)?;
            }
        }
        Ok(())
    }

    /// Reads a report file.
    pub fn load(path: &Path) -> Result<RunReport, ReportError> {
        let text = crate::core::userfile::read_text(path).map_err(crate::core::error::FileError::at(path, "read"))?;
        RunReport::from_json(path, &text)
    }

    /// Writes the four renderings into `dir` ([`REPORT_FILES`]), each atomically; returns the
    /// paths written.
    pub fn write_all(&self, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
        std::fs::create_dir_all(dir).map_err(crate::core::error::FileError::at(dir, "create directory"))?;
        let texts = [self.to_json(), self.to_markdown(), self.to_junit(), self.to_sarif()];
        let mut out = Vec::new();
        for (name, text) in REPORT_FILES.iter().zip(texts) {
            let path = dir.join(name);
            let io = |source| ReportError::Io(crate::core::error::FileError { path: path.clone(), action: "write", source });
            let mut tmp = crate::core::userfile::temp_in(dir).map_err(io)?;
            std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(io)?;
            tmp.persist(&path).map_err(|e| io(e.error))?;
            out.push(path);
        }
        Ok(out)
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `path` relative to the current directory or the source tree when it lies inside one of
/// them, else relative to the current directory with `..` steps, with `/` separators (for
/// report links and SARIF URIs): a report never holds this machine's absolute paths, unless a
/// path cannot be related to the current directory at all (it does not exist).
pub fn relative_path(path: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    let bases = [cwd.clone(), Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")))];
    let rel = match bases.iter().flatten().find_map(|b| path.strip_prefix(b).ok()) {
        Some(r) => r.to_path_buf(),
        None if path.is_absolute() => cwd.and_then(|c| crate::core::registry::relative_path(path, &c)).unwrap_or_else(|| path.to_path_buf()),
        None => path.to_path_buf(),
    };
    rel.to_string_lossy().replace('\\', "/")
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::core::finding::{Finding, FindingKind, Location, Oracle, SourceLocation};
    use crate::core::shard::Shard;

    pub(crate) fn finding(kernel: &str, kind: FindingKind, oracle: Oracle, source: Option<(&str, u32)>) -> Finding {
        Finding {
            tensor: Some("k".into()),
            location: Some(Location::RedzoneAfter { bytes_past_end: 4 }),
            source: source.map(|(file, line)| SourceLocation { file: file.into(), line, function: None }),
            other_access: None,
            access_size: Some(4),
            sanitizer_kind: oracle.is_sanitizer().then(|| "invalid_global_read_out_of_bounds".into()),
            alignment: crate::testing::alignment([16, 16, 16, 16]),
            ..Finding::new(kind, oracle, kernel, "read 4 bytes <past> k's end & \"more\" | pipes".into())
        }
    }

    /// A report with one of everything: a failed check, a passing and a regressed replay, a
    /// sweep row with a failing cell, a campaign with a new finding (with a source line) and a
    /// sanitizer pass with an expected finding (without one).
    pub(crate) fn sample() -> RunReport {
        let mut r = RunReport::new();
        r.started = "2025-01-31T23:00:00Z".into();
        r.finished = "2025-01-31T23:20:00Z".into();
        r.duration_secs = 1200.0;
        r.budget_secs = Some(1200.0);
        r.gpu = Some(GpuSummary { name: "NVIDIA H100 80GB HBM3".into(), arch: "sm_90".into(), driver: "13.0".into() });
        r.shard = Shard::new(1, 4);
        r.check("gpu", true, "NVIDIA H100 80GB HBM3");
        r.check("compute-sanitizer", false, "not found <anywhere> & \u{1b}[31mred");
        let k = r.kernel_mut("oob_read_k");
        k.source = Some("kernels/testing/simple_attn.cu".into());
        k.replays.push(SeedReplay {
            seed: "seeds/expected/a.json".into(),
            case: "f16 b1".into(),
            expected: Expectation::Fail { signature: "sig-a".into() },
            observed: Observed::Fail { signatures: vec!["sig-a".into()] },
            ok: true,
        });
        k.replays.push(SeedReplay {
            seed: "seeds/fixed/b.json".into(),
            case: "f16 b2".into(),
            expected: Expectation::Pass,
            observed: Observed::Fail { signatures: vec!["sig-b".into()] },
            ok: false,
        });
        let mut cell = MatrixCell { pass: 3, ..MatrixCell::default() };
        let mut bad = MatrixCell { pass: 1, fail: 2, ..MatrixCell::default() };
        bad.signatures.insert("misaligned_address/cuda_status/oob_read_k/q/-/unaligned:q".into(), 2);
        cell.skipped = 1;
        k.sweep.push(MatrixRow {
            config: "oob_read_k[BLOCK_THREADS=128]".into(),
            expect_pass: true,
            classes: vec!["aligned".into(), "q+8".into()],
            cells: BTreeMap::from([("aligned".to_string(), cell), ("q+8".to_string(), bad)]),
        });
        k.campaign =
            Some(Campaign { budget_secs: 600.0, elapsed_secs: 600.5, seed: 0, cases: 1000, passed: 990, failed: 10, errors: 0, skipped: 50, steered: 0 });
        k.sanitizer.push(SanitizerRun { tools: "memcheck".into(), counts: Campaign { cases: 200, passed: 199, failed: 1, ..Campaign::default() } });
        let f = finding("oob_read_k", FindingKind::SanitizerMemory, Oracle::Memcheck, Some(("simple_attn.cu", 42)));
        k.findings.push(FindingEntry {
            signature: f.signature(),
            finding: f,
            seed: Some("out/seeds/oob_read_k-sanitizer_memory-abc.json".into()),
            case: "f16 b1 h2/1 q17 k33 d40".into(),
            step: Step::Fuzz,
            new: true,
            source_path: Some("kernels/testing/simple_attn.cu".into()),
            bug: None,
        });
        let g = finding("oob_read_k", FindingKind::CanaryDamage, Oracle::Canary, None);
        k.findings.push(FindingEntry {
            signature: g.signature(),
            finding: g,
            seed: None,
            case: "f32 b1".into(),
            step: Step::Sanitizer,
            new: false,
            source_path: None,
            bug: None,
        });
        r.recount();
        r
    }

    #[test]
    fn findings_follow_their_seeds_when_seeds_are_arranged_per_bug() {
        let mut r = sample();
        let cwd = std::env::current_dir().unwrap();
        let from = cwd.join("out/seeds/oob_read_k-sanitizer_memory-abc.json");
        let to = cwd.join("out/seeds/B0123456789/examples/oob_read_k-sanitizer_memory-abc.json");
        r.rename_seeds(&[(from, to)]);
        let seeds: Vec<Option<&str>> = r.kernels[0].findings.iter().map(|f| f.seed.as_deref()).collect();
        assert_eq!(seeds, [Some("out/seeds/B0123456789/examples/oob_read_k-sanitizer_memory-abc.json"), None]);
    }

    #[test]
    fn json_round_trips_and_rejects_other_formats() {
        let r = sample();
        let text = r.to_json();
        let back = RunReport::from_json(Path::new("r.json"), &text).unwrap();
        assert_eq!(back, r);
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["version"] = 99.into();
        let e = RunReport::from_json(Path::new("r.json"), &v.to_string()).unwrap_err();
        assert!(matches!(e, ReportError::UnknownFormat { ref version, .. } if version == "99"), "{e}");
        let e = RunReport::from_json(Path::new("bad.json"), "{\"format\": \"cudafuzz-report\", \"version\": 1}").unwrap_err();
        assert!(e.to_string().contains("bad.json") && e.to_string().contains("tool"), "{e}");
    }

    #[test]
    fn write_all_writes_the_four_files() {
        let dir = tempfile::tempdir().unwrap();
        let r = sample();
        let written = r.write_all(&dir.path().join("out")).unwrap();
        assert_eq!(written.len(), 4);
        let names: Vec<String> = written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, REPORT_FILES);
        assert_eq!(RunReport::load(&written[0]).unwrap(), r);
        // Written again (a rerun into the same directory) replaces the reports.
        r.write_all(&dir.path().join("out")).unwrap();
    }

    /// A report whose every user-controlled string is `s` and every duration `secs`.
    fn hostile(s: &str, secs: f64) -> RunReport {
        let mut r = sample();
        r.duration_secs = secs;
        r.budget_secs = Some(secs);
        r.check(s, false, s);
        let template = r.kernels[0].findings[0].clone();
        let k = r.kernel_mut(s);
        k.source = Some(s.into());
        k.campaign = Some(Campaign { budget_secs: secs, elapsed_secs: secs, ..Campaign::default() });
        let mut f = finding(s, FindingKind::SanitizerMemory, Oracle::Memcheck, Some((s, 1)));
        f.detail = s.into();
        k.findings.push(FindingEntry { signature: f.signature(), finding: f, case: s.into(), ..template });
        r
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        /// JUnit and SARIF parse back, and Markdown keeps its rows, whatever the strings hold
        /// (XML-invalid control characters, `]]>`, markup, huge text) and whatever the
        /// durations are (NaN, infinities, huge).
        #[test]
        fn exports_stay_well_formed_for_any_string_and_duration(
            s in proptest::prop_oneof![
                proptest::prelude::any::<String>(),
                proptest::strategy::Just("]]><x a=\"&\u{0}\u{1b}\u{fffe}\u{ffff}|\n\r".to_string()),
                proptest::strategy::Just("x".repeat(20_000)),
            ],
            secs in proptest::prop_oneof![
                proptest::prelude::any::<f64>(),
                proptest::strategy::Just(f64::NAN),
                proptest::strategy::Just(f64::INFINITY),
                proptest::strategy::Just(-1e300),
                proptest::strategy::Just(1e300),
            ],
        ) {
            let r = hostile(&s, secs);
            let xml = r.to_junit();
            let doc = roxmltree::Document::parse(&xml).map_err(|e| proptest::test_runner::TestCaseError::fail(format!("junit: {e}")))?;
            for n in doc.descendants().filter(|n| n.has_tag_name("testsuites") || n.has_tag_name("testsuite") || n.has_tag_name("testcase")) {
                if let Some(t) = n.attribute("time") {
                    let v: f64 = t.parse().map_err(|_| proptest::test_runner::TestCaseError::fail(format!("time {t}")))?;
                    proptest::prop_assert!(v.is_finite() && v >= 0.0, "time {}", t);
                }
            }
            serde_json::from_str::<serde_json::Value>(&r.to_sarif()).map_err(|e| proptest::test_runner::TestCaseError::fail(format!("sarif: {e}")))?;
            let plain = hostile("x", 1.0).to_markdown();
            let md = r.to_markdown();
            proptest::prop_assert_eq!(md.lines().count(), plain.lines().count(), "a string added or removed Markdown lines");
            proptest::prop_assert!(!md.chars().any(|c| c.is_control() && c != '\n'));
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_738_364_399);
        assert_eq!(timestamp(t), "2025-01-31T22:59:59Z");
    }
}
