//! `cudafuzz report merge|render`: shard reports into one, and a report into another format.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Subcommand, ValueEnum};

use super::{chain, fail, refuse_clobber};
use crate::core::exit;
use crate::tools::report::export::RunReport;
use crate::tools::report::merge::{copy_seeds, merge, relink_seeds, CopyAction};

/// `cudafuzz report ...`.
#[derive(Debug, Subcommand)]
pub(super) enum ReportCommand {
    /// Merge the report.json of each shard (`cudafuzz gate --shard I/N`) into one report, and
    /// their seed directories into DIR/seeds (never overwriting a file). Writes report.json,
    /// report.md, junit.xml and results.sarif into DIR and exits as the gate would have: 0 only
    /// when every shard is there and the merged report passes.
    Merge {
        /// Directory for the merged reports (and `seeds/`).
        #[arg(long)]
        out: PathBuf,
        /// The shards' report.json files.
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// The shards' seed directories (each gate writes OUT/seeds).
        #[arg(long, num_args = 1..)]
        seeds: Vec<PathBuf>,
    },
    /// Print a report.json in another format on stdout.
    Render {
        /// Output format.
        #[arg(long, value_enum, default_value = "md")]
        format: Format,
        /// The report.json.
        report: PathBuf,
    },
}

/// Formats `report render` prints.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum Format {
    /// Markdown (fits $GITHUB_STEP_SUMMARY).
    Md,
    /// JUnit XML.
    Junit,
    /// SARIF 2.1.0.
    Sarif,
    /// The report as JSON.
    Json,
}

pub(super) fn report_command(c: ReportCommand) -> Result<i32> {
    match c {
        ReportCommand::Merge { out, reports, seeds } => {
            // A shard's directory holds that shard's reports: merging into it would replace them.
            for name in crate::tools::report::export::REPORT_FILES {
                refuse_clobber(&out.join(name), reports.iter().map(|p| p.as_path()))?;
            }
            let shard_dirs: Vec<&std::path::Path> =
                reports.iter().map(|p| p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."))).collect();
            refuse_clobber(&out, shard_dirs)?;
            let loaded = reports.iter().map(|p| RunReport::load(p).map_err(|e| fail(exit::USAGE, chain(e)))).collect::<Result<Vec<_>>>()?;
            let mut merged = merge(&loaded);
            if !seeds.is_empty() {
                let copies = copy_seeds(&seeds, &out.join("seeds")).map_err(|e| fail(exit::USAGE, chain(e)))?;
                let count = |a: CopyAction| copies.iter().filter(|c| c.action == a).count();
                outln!(
                    "seeds: {} copied, {} renamed (a different seed had the name), {} already there, into {}",
                    count(CopyAction::Copied),
                    count(CopyAction::Renamed),
                    count(CopyAction::Same),
                    out.join("seeds").display()
                )?;
                relink_seeds(&mut merged, &copies);
            }
            let written = merged.write_all(&out).map_err(|e| fail(exit::SETUP, chain(e)))?;
            for e in merged.environment.iter().filter(|e| !e.ok) {
                outln!("FAILED {}{}: {}", e.name, e.shard.map(|s| format!(" [{s}]")).unwrap_or_default(), e.detail)?;
            }
            outln!("merged {} report(s) ({}): {}", loaded.len(), merged.merged_from.join(", "), merged.headline())?;
            for p in written {
                outln!("  {}", p.display())?;
            }
            Ok(merged.exit_code())
        }
        ReportCommand::Render { format, report } => {
            let r = RunReport::load(&report).map_err(|e| fail(exit::USAGE, chain(e)))?;
            out!(
                "{}",
                match format {
                    Format::Md => r.to_markdown(),
                    Format::Junit => r.to_junit(),
                    Format::Sarif => r.to_sarif(),
                    Format::Json => r.to_json(),
                }
            )?;
            Ok(exit::OK)
        }
    }
}
