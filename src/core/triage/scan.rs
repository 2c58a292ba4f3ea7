//! Seed files from any earlier run, read into a [`Triage`] without touching them.
//!
//! [`scan`] walks the given directories (any layout: a run's `seeds/`, a gate's output, a copy
//! of several runs) for `*.json` files, reads each as a seed with the ordinary loader (format-1
//! seeds migrate on read), and observes the ones that carry a finding. Seeds of one case (the
//! same case content, e.g. a native finding and the sanitizer finding its re-run gave) are one
//! case. A bug index found on the way (`bugs.json`) lends its mappings. Files that are not
//! seeds (reports, indexes, cases without findings) are counted and skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{BugIndex, Triage, BUG_INDEX_FILE};
use crate::core::case::Case;
use crate::core::corpus::{self, Seed};
use crate::core::manifest::Manifest;
use crate::core::plan::Plan;

/// What [`scan`] read.
#[derive(Debug, Default)]
pub struct Scan {
    /// The seeds with findings, observed.
    pub triage: Triage,
    /// Seed files with a finding that were read.
    pub seeds: usize,
    /// JSON files that were not seeds with a finding, with why.
    pub skipped: Vec<(PathBuf, String)>,
    /// Bug indexes whose mappings were used.
    pub indexes: Vec<PathBuf>,
}

/// A case's size for "smallest" when its manifest is not at hand: the product of its dims.
pub fn dims_size(case: &Case) -> u64 {
    case.dims.values().fold(1u64, |acc, &d| acc.saturating_mul(d.max(1)))
}

/// A seed's case size for "smallest" as a campaign counts it (its tensors' logical elements)
/// when its kernel's manifest resolves from the seed's file (each kernel reference of each
/// folder loaded once into `manifests`), else [`dims_size`]: seeds of one kernel are all
/// measured the same way.
fn case_size(seed: &Seed, path: &Path, manifests: &mut BTreeMap<(PathBuf, String), Option<Manifest>>) -> u64 {
    let case = &seed.case;
    let key = (path.parent().map(Path::to_path_buf).unwrap_or_default(), case.kernel.clone());
    let m = manifests.entry(key).or_insert_with(|| seed.kernel(path, None).ok().map(|k| k.manifest));
    m.as_ref().and_then(|m| Plan::new(&m.bind(case.clone()), m).ok()).map(|p| p.tensors.iter().map(|t| t.numel).sum()).unwrap_or_else(|| dims_size(case))
}

/// Reads every seed under `roots` (directories, walked recursively, or files). A root that does
/// not exist is an error naming it.
pub fn scan(roots: &[PathBuf]) -> Result<Scan, std::io::Error> {
    let mut files = Vec::new();
    for root in roots {
        let meta = std::fs::metadata(root).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", root.display())))?;
        if meta.is_dir() {
            walk(root, &mut files)?;
        } else {
            files.push(root.clone());
        }
    }
    files.sort();
    files.dedup();
    let mut out = Scan::default();
    let mut manifests = BTreeMap::new();
    for path in files {
        if path.file_name().is_some_and(|n| n == BUG_INDEX_FILE) {
            match BugIndex::load(&path) {
                Ok(index) => {
                    index.aliases().for_each(|a| out.triage.add_alias(a));
                    out.indexes.push(path);
                }
                Err(e) => out.skipped.push((path, e.to_string())),
            }
            continue;
        }
        match corpus::load(&path, None) {
            Ok((seed, _)) => match seed.finding.clone() {
                Some(f) => {
                    let id = corpus::case_hash(&seed.case);
                    let size = case_size(&seed, &path, &mut manifests);
                    out.triage.observe(&id, &seed.case.summary(), size, vec![(f, Some(path))]);
                    out.seeds += 1;
                }
                None => out.skipped.push((path, "a case without a finding".into())),
            },
            Err(e) => out.skipped.push((path, crate::core::error::chain(&e))),
        }
    }
    Ok(out)
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), std::io::Error> {
    for entry in std::fs::read_dir(dir).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(&path, files)?;
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "json") {
            files.push(path);
        }
    }
    Ok(())
}
