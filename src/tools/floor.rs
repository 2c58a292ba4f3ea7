//! `cudafuzz bench --floor`: the rate of cases that cost only their device round trip
//! ([`crate::engine::floor`]), in one process and in several at once, each process a worker's
//! context time-slicing the GPU.
//!
//! Each process is this executable's hidden `floor` command, started together and read back as
//! one JSON line; the rate is every process's cases over the longest one's time.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;

use crate::engine::floor::{FloorCount, FloorSpec};

/// One measured configuration.
#[derive(Clone, Debug, Serialize)]
pub struct FloorRow {
    /// What each case did.
    pub spec: FloorSpec,
    /// Processes run at once.
    pub processes: usize,
    /// Cases done, all processes together.
    pub cases: u64,
    /// Cases per second, all processes together.
    pub cases_per_sec: f64,
}

/// The configurations measured: the device half of today's case (allocations made and freed,
/// the whole input downloaded again), with a summary-sized download instead, and with the
/// buffers kept from case to case as well.
pub fn specs(bytes: usize) -> [FloorSpec; 3] {
    [
        FloorSpec { upload_bytes: bytes, download_bytes: bytes, alloc_per_case: true },
        FloorSpec { upload_bytes: bytes, download_bytes: 8, alloc_per_case: true },
        FloorSpec { upload_bytes: bytes, download_bytes: 8, alloc_per_case: false },
    ]
}

/// Runs `processes` floor loops of `spec` at once on GPU `gpu` for `time` each, with the
/// executable `exe`; the first failure's message when any process fails.
pub fn measure(exe: &Path, gpu: usize, spec: FloorSpec, processes: usize, time: Duration) -> Result<FloorRow, String> {
    let spawn = || {
        let mut c = Command::new(exe);
        c.args(["floor", "--gpu", &gpu.to_string(), "--millis", &time.as_millis().to_string()]);
        c.args(["--upload-bytes", &spec.upload_bytes.to_string(), "--download-bytes", &spec.download_bytes.to_string()]);
        if spec.alloc_per_case {
            c.arg("--alloc-per-case");
        }
        c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("starting {}: {e}", exe.display()))
    };
    let children = (0..processes).map(|_| spawn()).collect::<Result<Vec<_>, _>>()?;
    let mut counts: Vec<FloorCount> = Vec::new();
    for child in children {
        let out = child.wait_with_output().map_err(|e| format!("waiting for a floor process: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        match serde_json::from_str::<FloorCount>(text.trim()) {
            Ok(c) if out.status.success() => counts.push(c),
            _ => return Err(format!("a floor process failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim())),
        }
    }
    Ok(row(spec, &counts))
}

/// The row of the processes' counts: their cases over the longest one's time.
pub fn row(spec: FloorSpec, counts: &[FloorCount]) -> FloorRow {
    let cases = counts.iter().map(|c| c.cases).sum();
    let secs = counts.iter().map(|c| c.secs).fold(0.0, f64::max);
    FloorRow { spec, processes: counts.len(), cases, cases_per_sec: if secs > 0.0 { cases as f64 / secs } else { 0.0 } }
}

/// The rows as a table.
pub fn table(rows: &[FloorRow]) -> String {
    let mut out = format!("{:<56} {:>9} {:>9} {:>10}\n", "floor: each case", "processes", "cases", "cases/s");
    for r in rows {
        let down = if r.spec.download_bytes > 8 { format!("{} B down", r.spec.download_bytes) } else { "8 B summary down".into() };
        let alloc = if r.spec.alloc_per_case { "alloc + free per case" } else { "buffers kept" };
        let what = format!("{} B up, empty kernel, {down}, {alloc}", r.spec.upload_bytes);
        out.push_str(&format!("{what:<56} {:>9} {:>9} {:>10.0}\n", r.processes, r.cases, r.cases_per_sec));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_add_their_cases_over_the_longest_time() {
        let spec = specs(4096)[1];
        let r = row(spec, &[FloorCount { cases: 100, secs: 1.0 }, FloorCount { cases: 300, secs: 2.0 }]);
        assert_eq!((r.processes, r.cases), (2, 400));
        assert!((r.cases_per_sec - 200.0).abs() < 1e-9);
        assert_eq!(row(spec, &[]).cases_per_sec, 0.0);
        let t = table(&[r]);
        assert!(t.contains("4096 B up, empty kernel, 8 B summary down, alloc + free per case"), "{t}");
    }
}
