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
    Ok(exit::OK)
}
