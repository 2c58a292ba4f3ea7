//! `cudafuzz triage DIR...`: the seeds of earlier runs grouped into bugs
//! ([`crate::core::triage::scan`]), printed as the bug table or, with `--json`, as a bug index.
//! Nothing under the directories is written, moved or deleted.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::fail;
use crate::core::exit;
use crate::core::triage::{self, BugIndex};

#[derive(Debug, Args)]
pub(super) struct TriageArgs {
    /// Directories (searched recursively for seed files, any layout) or seed files.
    #[arg(required = true)]
    pub(super) dirs: Vec<PathBuf>,
    /// Print the bugs as JSON (the bug index format) instead of a table.
    #[arg(long)]
    pub(super) json: bool,
}

pub(super) fn triage(a: TriageArgs) -> Result<i32> {
    let scan = triage::scan::scan(&a.dirs).map_err(|e| fail(exit::USAGE, format!("{e}; give directories or seed files that exist")))?;
    // A file named on the command line is meant to be a seed: one that is not is an error, not
    // a skip (a directory scan skips what is not a seed, and names it below).
    if let Some((path, why)) = scan.skipped.iter().find(|(p, _)| a.dirs.iter().any(|d| d == p)) {
        let shown = path.display().to_string();
        let what = if why.starts_with(&shown) { why.clone() } else { format!("{shown}: {why}") };
        return Err(fail(exit::USAGE, format!("{what}; name seed files or directories of them")));
    }
    let bugs = scan.triage.bugs();
    if a.json {
        out!("{}", BugIndex::new(&scan.triage, std::path::Path::new("")).to_json())?;
        return Ok(exit::OK);
    }
    outln!(
        "{} seed files with findings in {} cases ({} other JSON files skipped{})",
        scan.seeds,
        scan.triage.case_count(),
        scan.skipped.len(),
        if scan.indexes.is_empty() { String::new() } else { format!("; mappings from {} bug index(es)", scan.indexes.len()) }
    )?;
    out!("{}", triage::table(&bugs, None))?;
    if !scan.skipped.is_empty() {
        outln!("skipped (not seeds with a finding):")?;
        for (path, why) in &scan.skipped {
            outln!("  {}: {why}", path.display())?;
        }
    }
    Ok(exit::OK)
}
