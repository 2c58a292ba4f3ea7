//! compute-sanitizer: locating the tool, wrapping the worker in it, reading its XML, and
//! attributing every record to the case that produced it.
//!
//! The worker runs many cases in one sanitizer process (starting the tool costs seconds). The
//! XML is written only when the process exits, so attribution works by order: before each case
//! the worker makes the tool write one *marker* record ([`crate::engine::marker`]), and [`attribute`] splits the
//! record stream at the markers. A sticky CUDA error ends the process, so its records land after
//! the last marker: the in-flight case's.

pub mod attribute;
pub mod xml;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use crate::core::tool::{Tool, ToolListError};

/// Options beyond `--tool` that make `tool` useful here.
fn tool_options(tool: Tool, padding: u64) -> Vec<String> {
    match tool {
        // Padding after every allocation turns overruns into reports instead of silent
        // hits on a neighbouring allocation; API errors are the per-case markers.
        Tool::Memcheck => vec![format!("--padding={padding}"), "--report-api-errors=explicit".into(), "--leak-check=no".into()],
        // One analysed "Race condition" record per race (with its hazard count), not one
        // record per hazardous access pair.
        Tool::Racecheck => vec!["--racecheck-report=analysis".into()],
        Tool::Initcheck => vec![],
        Tool::Synccheck => vec![],
    }
}

/// What can go wrong with the sanitizer itself (never a kernel finding).
#[derive(Debug, Error)]
pub enum SanitizerError {
    /// The tool is not installed where we looked.
    #[error("compute-sanitizer was not found (looked at $CUDAFUZZ_SANITIZER, on PATH, in $CUDA_HOME/bin and /usr/local/cuda/bin): install the CUDA toolkit or set CUDAFUZZ_SANITIZER=/path/to/compute-sanitizer; a sanitizer pass never passes without the tool")]
    NotFound,
    /// The tool is there but does not run.
    #[error("{path} does not run (`--version` failed: {why}); check the CUDA toolkit installation")]
    Broken {
        /// The executable.
        path: PathBuf,
        /// What happened.
        why: String,
    },
    /// Its XML could not be read.
    #[error("{0}")]
    Xml(String),
}

/// A located, working compute-sanitizer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sanitizer {
    /// The executable.
    pub path: PathBuf,
    /// Its version line, e.g. `Version 2025.3.1.0 (build 36400806) (public-release)`.
    pub version: String,
}

impl Sanitizer {
    /// Finds compute-sanitizer and checks that it runs.
    pub fn locate() -> Result<Sanitizer, SanitizerError> {
        let path = candidates().into_iter().find(|p| p.is_file()).ok_or(SanitizerError::NotFound)?;
        Sanitizer::at(&path)
    }

    /// Uses the executable at `path`, checking that it runs.
    pub fn at(path: &Path) -> Result<Sanitizer, SanitizerError> {
        let out = Command::new(path).arg("--version").output().map_err(|e| SanitizerError::Broken { path: path.to_path_buf(), why: e.to_string() })?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let version = text.lines().find(|l| l.starts_with("Version")).map(str::to_string);
        match (out.status.success(), version) {
            (true, Some(version)) => Ok(Sanitizer { path: path.to_path_buf(), version }),
            _ => Err(SanitizerError::Broken { path: path.to_path_buf(), why: format!("status {:?}, output {:?}", out.status.code(), text.trim()) }),
        }
    }

    /// The command that runs `program args...` under `tool`, writing XML to `xml`.
    pub fn command(&self, tool: Tool, xml: &Path, padding: u64, print_limit: u64, program: &Path) -> Command {
        let mut cmd = Command::new(&self.path);
        cmd.arg("--tool").arg(tool.name());
        cmd.args(tool_options(tool, padding));
        // Findings are read from the XML, not the exit status; the status still tells a
        // process that reported errors from one that did not.
        cmd.args(["--xml", "--save"]).arg(xml);
        // The tool's own text goes to a file: the worker's stdout is its event stream.
        cmd.arg("--log-file").arg(log_path(xml));
        cmd.arg(format!("--error-exitcode={SANITIZER_ERROR_EXIT}"));
        // The default stops reporting after 100 errors, markers included: a persistent worker
        // would lose every case after the hundredth record ([`PRINT_LIMIT`]; one case needs
        // far fewer, [`SINGLE_CASE_PRINT_LIMIT`]).
        cmd.arg(format!("--print-limit={print_limit}"));
        // Device stacks name the user's line behind a CUDA header; host stacks are never read,
        // and unwinding one per record is what makes a kernel that faults in every thread
        // (tens of thousands of records) take a minute under memcheck.
        cmd.arg("--show-backtrace=device");
        cmd.arg(program);
        cmd
    }
}

/// Where the tool's text log for `xml` goes.
pub fn log_path(xml: &Path) -> PathBuf {
    xml.with_extension("log")
}

/// Records one sanitizer process may write before the tool stops reporting.
pub const PRINT_LIMIT: u64 = 1_000_000_000;

/// Records a process that runs one case (an escalation's re-run, a repro) may write: enough to
/// name every site a case reaches, few enough that a kernel faulting in every thread does not
/// keep the tool writing for a minute (an H100 re-run of a vectorised-load fault wrote 29,574
/// records, 19 MB of XML, and was still running when its one-minute campaign ended).
pub const SINGLE_CASE_PRINT_LIMIT: u64 = 2_000;

/// Exit status compute-sanitizer gives a target that had errors.
pub const SANITIZER_ERROR_EXIT: i32 = 99;

/// Where compute-sanitizer may be, in order.
fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("CUDAFUZZ_SANITIZER") {
        // An explicit choice is the only candidate: a wrong path must not fall back silently.
        return vec![PathBuf::from(p)];
    }
    if let Some(path) = std::env::var_os("PATH") {
        out.extend(std::env::split_paths(&path).map(|d| d.join("compute-sanitizer")));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(home) = std::env::var_os(var) {
            out.push(PathBuf::from(&home).join("bin/compute-sanitizer"));
            out.push(PathBuf::from(&home).join("compute-sanitizer/compute-sanitizer"));
        }
    }
    out.push(PathBuf::from("/usr/local/cuda/bin/compute-sanitizer"));
    out.push(PathBuf::from("/usr/local/cuda/compute-sanitizer/compute-sanitizer"));
    out
}

/// memcheck's `--padding` for a batch: as long as the largest tensor span (so an overrun by a
/// whole row or head still lands in padding), at least 4 KiB, at most 16 MiB.
pub fn padding_for(largest_span_bytes: u64) -> u64 {
    largest_span_bytes.clamp(4096, 16 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_lists() {
        assert_eq!(Tool::parse_list("all").unwrap(), Tool::ALL.to_vec());
        assert_eq!(Tool::parse_list("racecheck, memcheck,racecheck").unwrap(), vec![Tool::Racecheck, Tool::Memcheck]);
        assert!(Tool::parse_list("memchek").unwrap_err().to_string().contains("memchek"));
        assert!(Tool::parse_list("").is_err());
    }

    #[test]
    fn a_missing_explicit_sanitizer_is_an_error_naming_the_fix() {
        let e = Sanitizer::at(Path::new("/nonexistent/compute-sanitizer")).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/compute-sanitizer") && e.contains("CUDA toolkit"), "{e}");
        assert!(SanitizerError::NotFound.to_string().contains("CUDAFUZZ_SANITIZER"));
    }

    #[test]
    fn a_fake_sanitizer_is_accepted_only_when_it_prints_a_version() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good");
        std::fs::write(&good, "#!/bin/sh\necho 'NVIDIA (R) Compute Sanitizer'\necho 'Version 2025.3.1.0 (build 1)'\n").unwrap();
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "#!/bin/sh\nexit 3\n").unwrap();
        for p in [&good, &bad] {
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        }
        assert_eq!(Sanitizer::at(&good).unwrap().version, "Version 2025.3.1.0 (build 1)");
        assert!(matches!(Sanitizer::at(&bad), Err(SanitizerError::Broken { .. })));
    }

    #[test]
    fn the_command_asks_for_xml_padding_and_an_error_exit_code() {
        let s = Sanitizer { path: "/x/compute-sanitizer".into(), version: "v".into() };
        let cmd = s.command(Tool::Memcheck, Path::new("/tmp/a.xml"), 8192, PRINT_LIMIT, Path::new("/bin/worker"));
        let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().to_string()).collect();
        for want in [
            "memcheck",
            "--padding=8192",
            "--xml",
            "--save",
            "/tmp/a.xml",
            "--error-exitcode=99",
            "--print-limit=1000000000",
            "--show-backtrace=device",
            "/bin/worker",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} missing from {args:?}");
        }
        assert_eq!(padding_for(10), 4096);
        assert_eq!(padding_for(1 << 40), 16 << 20);
    }
}
