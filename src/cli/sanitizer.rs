//! `cudafuzz sanitizer parse FILE.xml`: compute-sanitizer XML as findings, outside the harness.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;

use super::fail;
use crate::core::exit;
use crate::core::finding::Oracle;
use crate::run::sanitizer::xml::{self, to_finding, FindingContext};

/// `cudafuzz sanitizer ...`.
#[derive(Debug, Subcommand)]
pub(super) enum SanitizerCommand {
    /// Read a compute-sanitizer `--xml --save` file and print its records as findings.
    Parse {
        /// The XML file.
        file: PathBuf,
        /// Print the parsed records as JSON instead.
        #[arg(long)]
        json: bool,
        /// Accept a file cut off before its first complete record (a killed process) and report
        /// what it holds instead of failing.
        #[arg(long)]
        partial: bool,
    },
}

pub(super) fn sanitizer_command(c: SanitizerCommand) -> Result<i32> {
    let SanitizerCommand::Parse { file, json, partial } = c;
    let parsed = xml::parse_file(&file).map_err(|e| fail(exit::USAGE, super::chain(e)))?;
    if let Some(cut) = &parsed.truncated {
        if parsed.records.is_empty() && !partial {
            return Err(fail(exit::USAGE, format!("{}: no complete record: {cut}; pass --partial to accept a cut-off file", file.display())));
        }
        errln!("{}: truncated: {cut}", file.display());
    }
    for m in &parsed.malformed {
        errln!("{}: malformed, not a finding: {m}", file.display());
    }
    let found = parsed.findings().count();
    if json {
        outln!("{}", serde_json::to_string_pretty(&parsed)?)?;
    } else {
        let ctx = FindingContext { kernel: "-", alignment: &[], inside_contract: true, table: None, tool: Oracle::Memcheck };
        for r in parsed.findings() {
            let func = r.user_frame().and_then(|f| f.func.clone()).unwrap_or_else(|| "?".into());
            let f = FindingContext { kernel: &func, ..ctx };
            outln!("{}", to_finding(r, &f))?;
        }
        let notices = parsed.notices().count();
        for r in parsed.notices() {
            outln!("note: {}", r.notice_note())?;
        }
        let api = parsed.records.len() - found - notices;
        outln!("{}: {found} finding records, {api} API-error records, {notices} notices, {} malformed records", file.display(), parsed.malformed.len())?;
    }
    Ok(if found > 0 {
        exit::FINDINGS
    } else if !parsed.malformed.is_empty() {
        exit::USAGE
    } else {
        exit::OK
    })
}
