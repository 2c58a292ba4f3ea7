//! Bugs for people: one line per new bug, and the table that ends a run and `triage`.

use std::fmt::Write as _;
use std::path::Path;

use super::{Bug, BugId};

/// What a bug is, in a few words: `invalid_global_read_misaligned in v at fa_s512.cu:209`.
fn what(b: &Bug) -> String {
    let mut s = b.what.clone();
    if let Some(t) = &b.tensor {
        let _ = write!(s, " in {t}");
    }
    if let Some(site) = &b.site {
        let _ = write!(s, " at {site}");
    }
    s
}

/// Bug ids as a list in one line (`B1e44477e5e, P1f24405f71`).
pub fn bug_ids(ids: &[BugId]) -> String {
    ids.iter().map(BugId::as_str).collect::<Vec<_>>().join(", ")
}

/// What `fuzz` prints after `NEW ... :` when a bug is seen for the first time: id and kernel,
/// then (indented lines) what, the site when known, the oracle, and the case.
pub fn bug_line(b: &Bug) -> String {
    let status = if b.key.is_provisional() { "; no sanitizer named its site" } else { "" };
    format!("bug {} in {}\n      {} (oracle {}{status})\n      first case: {}", b.id, b.kernel, what(b), b.oracle, b.first_case)
}

/// The bug table: id, kernel, what, site, cases seen, smallest seed and the command that
/// replays it, one row per bug; `root` is prefixed to relative seed paths.
pub fn table(bugs: &[Bug], root: Option<&Path>) -> String {
    let mut s = String::new();
    let findings: u64 = bugs.iter().map(|b| b.findings).sum();
    let cases: u64 = bugs.iter().map(|b| b.cases).sum();
    let _ = writeln!(s, "{} bug{} ({findings} findings in {cases} cases)", bugs.len(), if bugs.len() == 1 { "" } else { "s" });
    if bugs.is_empty() {
        return s;
    }
    let rows: Vec<[String; 7]> = bugs
        .iter()
        .map(|b| {
            let seed = b.smallest.as_ref().map(|p| match root {
                Some(r) if p.is_relative() => r.join(p),
                _ => p.clone(),
            });
            let shown = seed.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "-".into());
            let replay = seed.as_ref().map(|p| format!("cudafuzz repro {}", p.display())).unwrap_or_else(|| "-".into());
            let what = match &b.tensor {
                Some(t) => format!("{} in {t}", b.what),
                None => b.what.clone(),
            };
            [b.id.to_string(), b.kernel.clone(), what, b.site.clone().unwrap_or_else(|| "-".into()), b.cases.to_string(), shown, replay]
        })
        .collect();
    let head = ["id", "kernel", "what", "site", "cases", "smallest seed", "replay"];
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut line = |cells: &[String]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(width).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ");
            }
        }
        let _ = writeln!(s, "{}", l.trim_end());
    };
    line(&head.map(String::from));
    for r in &rows {
        line(r);
    }
    s
}
