//! `cudafuzz case example|check|migrate|decode` and `cudafuzz manifest migrate`: case and manifest files
//! without a GPU.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Subcommand;

use super::{chain, checked_case, fail, load_seed, resolve_kernel, seed_kernel, CaseCommand};
use crate::core::corpus::Seed;
use crate::core::exit;
use crate::core::generate::{decode_case, example, DecodeContext};
use crate::core::plan::check_contract;
use crate::tools::report;

pub(super) fn case_command(c: CaseCommand) -> Result<i32> {
    match c {
        CaseCommand::Example { kernel } => {
            let m = resolve_kernel(&kernel)?;
            // Printed for a file in the current directory (`> case.json`): the kernel is named
            // relative to it, or by name when shipped.
            out!("{}", Seed::new(example(&m)).naming_kernel(&m, Path::new(".")).to_json())?;
            Ok(exit::OK)
        }
        CaseCommand::Check { file, kernel, raw } => {
            let forced = kernel.as_deref().map(resolve_kernel).transpose()?;
            let seed = load_seed(&file, forced.as_ref(), raw)?;
            let m = seed_kernel(forced.as_ref(), &seed, &file)?;
            let (case, plan) = checked_case(&file, &seed, &m)?;
            out!("{}", report::plan_table(&case, &plan))?;
            let verdict = check_contract(&m, &case, &plan);
            out!("{}", report::contract_lines(&m.name, &verdict))?;
            Ok(if verdict.is_inside() { exit::OK } else { exit::OUTSIDE_CONTRACT })
        }
        CaseCommand::Migrate { file, output } => {
            let seed = load_seed(&file, None, false)?;
            let output = output.unwrap_or_else(|| file.with_extension(format!("v{}.json", crate::core::corpus::SEED_VERSION)));
            // Named the way this version names kernels, for the folder it is written to.
            let seed = match seed.kernel(&file, None) {
                Ok(k) => {
                    let dir = output.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
                    seed.naming_kernel(&k.manifest, dir)
                }
                Err(e) => {
                    errln!("cudafuzz: {e}; its kernel is kept as written");
                    seed
                }
            };
            write_new(&output, &seed.to_json(), &format!("format-{} seed", crate::core::corpus::SEED_VERSION))
        }
        CaseCommand::Decode { file, kernel } => {
            let m = super::forced_kernel(kernel.as_deref())?.ok_or_else(|| {
                fail(exit::USAGE, format!("{}: raw fuzzer bytes decode for one kernel: pass --kernel or set CUDAFUZZ_KERNEL", file.display()))
            })?;
            let bytes =
                crate::core::userfile::read(&file).with_context(|| format!("{}: cannot read", file.display())).map_err(|e| fail(exit::USAGE, chain(e)))?;
            let case = decode_case(&mut arbitrary::Unstructured::new(&bytes), &DecodeContext::new(&m))
                .map_err(|e| fail(exit::USAGE, format!("{}: cannot decode: {e}", file.display())))?;
            out!("{}", Seed::new(case).naming_kernel(&m, Path::new(".")).to_json())?;
            Ok(exit::OK)
        }
    }
}

/// `cudafuzz manifest ...`.
#[derive(Debug, Subcommand)]
pub(super) enum ManifestCommand {
    /// Convert a format-1 (attention-only) manifest to format 2 and write it (beside the old
    /// one as NAME.v2.toml unless -o is given; never over an existing file).
    Migrate {
        /// The format-1 manifest.
        file: PathBuf,
        /// Where to write the format-2 manifest (`-` for stdout).
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        /// Convert even when something of the old file cannot be carried over (a key format 1
        /// never had, a value of the wrong type); each is then printed as a warning.
        #[arg(long)]
        force: bool,
    },
}

pub(super) fn manifest_command(c: ManifestCommand) -> Result<i32> {
    let ManifestCommand::Migrate { file, output, force } = c;
    let old = crate::core::userfile::read_text(&file).with_context(|| format!("{}: cannot read", file.display())).map_err(|e| fail(exit::USAGE, chain(e)))?;
    let migration = crate::core::manifest::migrate::migrate(&old).map_err(|e| fail(exit::USAGE, format!("{}: cannot migrate: {e}", file.display())))?;
    if !migration.losses.is_empty() && !force {
        let losses: Vec<String> = migration.losses.iter().map(|l| format!("  {l}")).collect();
        return Err(fail(
            exit::USAGE,
            format!(
                "{}: not converted, it would lose what it says:\n{}\nfix the old file, or pass --force to convert anyway (each is then a warning)",
                file.display(),
                losses.join("\n")
            ),
        ));
    }
    for l in &migration.losses {
        errln!("warning: {l}");
    }
    for g in &migration.guesses {
        errln!("guess: {g}");
    }
    let new = migration.text;
    let output = output.unwrap_or_else(|| file.with_extension("v2.toml"));
    if output.as_os_str() == "-" {
        out!("{new}")?;
        return Ok(exit::OK);
    }
    // Check the result loads before writing it (its source must exist beside it).
    crate::core::manifest::Manifest::from_toml(&output, &new).map_err(|e| fail(exit::USAGE, format!("the converted manifest does not load: {}", chain(e))))?;
    write_new(&output, &new, "format-2 manifest; review it, then replace the old manifest with it")
}

/// Writes `text` to a file that must not exist yet (`-`: stdout), saying what it is.
fn write_new(output: &std::path::Path, text: &str, what: &str) -> Result<i32> {
    if output.as_os_str() == "-" {
        out!("{text}")?;
        return Ok(exit::OK);
    }
    let written = {
        use std::io::Write as _;
        std::fs::OpenOptions::new().write(true).create_new(true).open(output).and_then(|mut f| f.write_all(text.as_bytes()))
    };
    match written {
        Ok(()) => {
            outln!("wrote {} ({what})", output.display())?;
            Ok(exit::OK)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(fail(exit::USAGE, format!("{} exists; pass -o another file", output.display()))),
        Err(e) => Err(fail(exit::SETUP, format!("cannot write {}: {e}", output.display()))),
    }
}
