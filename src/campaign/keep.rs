//! Keeping seeds: one per finding signature, the smallest case seen, never a file overwritten.
//!
//! [`SeedKeeper`] is shared by every step of a run (each kernel of `fuzz`, the gate's sweep,
//! fuzz and sanitizer steps), so a signature found twice is saved once, and a smaller case for
//! a known signature is saved beside the earlier seed rather than over it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::case::Case;
use crate::corpus::{self, Seed};
use crate::finding::{Finding, Signature};
use crate::manifest::Manifest;
use crate::plan::Plan;
use crate::supervisor::SupervisorError;

/// What [`SeedKeeper::keep`] did with a finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    /// A new signature: its seed was saved here.
    New(PathBuf),
    /// A known signature with a smaller case than before: saved here as well (the earlier seed
    /// stays).
    Smaller(PathBuf),
    /// A known signature, no smaller.
    Known,
}

/// The seeds a run has saved, by signature, with the size of each one's case.
#[derive(Debug)]
pub struct SeedKeeper {
    dir: PathBuf,
    seen: BTreeMap<Signature, (PathBuf, u64)>,
}

impl SeedKeeper {
    /// A keeper that saves under `dir` (created on the first save).
    pub fn new(dir: PathBuf) -> SeedKeeper {
        SeedKeeper { dir, seen: BTreeMap::new() }
    }

    /// Where seeds are saved.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Distinct signatures saved so far.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether nothing was saved.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The seed kept for each signature, in signature order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.seen.values().map(|(p, _)| p.as_path())
    }

    /// Saves the seed of a finding whose signature is new, or whose case is smaller (fewer
    /// tensor elements) than the one kept so far: each signature keeps its smallest case.
    pub fn keep(&mut self, m: &Manifest, case: &Case, finding: &Finding) -> Result<Kept, SupervisorError> {
        let sig = finding.signature();
        let size = case_size(m, case);
        let smaller = match self.seen.get(&sig) {
            Some((_, kept)) if *kept <= size => return Ok(Kept::Known),
            Some(_) => true,
            None => false,
        };
        let saved = corpus::save(&self.dir, &Seed::with_finding(case.clone(), finding.clone()))?;
        self.seen.insert(sig, (saved.path.clone(), size));
        Ok(if smaller { Kept::Smaller(saved.path) } else { Kept::New(saved.path) })
    }
}

/// A case's size for "smallest": its tensors' logical elements (a case that does not plan
/// counts as the largest).
pub fn case_size(m: &Manifest, case: &Case) -> u64 {
    Plan::new(case, m).map(|p| p.tensors.iter().map(|t| t.numel).sum()).unwrap_or(u64::MAX)
}
