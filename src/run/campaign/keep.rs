//! Keeping seeds: one per finding signature, the smallest case seen, never a file overwritten.
//!
//! [`SeedKeeper`] is shared by every step of a run (each kernel of `fuzz`, the gate's sweep,
//! fuzz and sanitizer steps), so a signature found twice is saved once, and a smaller case for
//! a known signature is saved beside the earlier seed rather than over it. The keeper also files
//! every failing case into bugs ([`Triage`]), so a run can say when a bug is new however many
//! signatures it shows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::core::case::Case;
use crate::core::corpus::{self, Seed};
use crate::core::finding::{Finding, Signature};
use crate::core::manifest::Manifest;
use crate::core::plan::Plan;
use crate::core::triage::{Bug, BugId, Triage};
use crate::run::supervisor::SupervisorError;

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
    triage: Triage,
    announced: BTreeSet<BugId>,
    /// Ids observed cases were filed under that were not announced yet.
    unannounced: BTreeSet<BugId>,
}

impl SeedKeeper {
    /// A keeper that saves under `dir` (created on the first save).
    pub fn new(dir: PathBuf) -> SeedKeeper {
        SeedKeeper { dir, seen: BTreeMap::new(), triage: Triage::new(), announced: BTreeSet::new(), unannounced: BTreeSet::new() }
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

    /// Whether a seed is kept for `signature`.
    pub fn knows(&self, signature: &crate::core::finding::Signature) -> bool {
        self.seen.contains_key(signature)
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
        let saved = corpus::save(&self.dir, &Seed::with_finding(case.clone(), finding.clone()).naming_kernel(m, &self.dir))?;
        self.seen.insert(sig, (saved.path.clone(), size));
        Ok(if smaller { Kept::Smaller(saved.path) } else { Kept::New(saved.path) })
    }
}

impl SeedKeeper {
    /// Files one failing case into bugs: every finding it showed (native and, after
    /// escalation, the sanitizer's) with the seed saved for it, if any. A case filed again (its
    /// escalation came back) gains the new findings. Returns the case's bugs as they now stand.
    pub fn observe(&mut self, m: &Manifest, case: &Case, findings: Vec<(Finding, Option<PathBuf>)>) -> Vec<BugId> {
        let id = corpus::case_hash(case);
        self.triage.observe(&id, &case.summary(), case_size(m, case), findings);
        let bugs = self.triage.bugs_of(&id);
        self.unannounced.extend(bugs.iter().filter(|b| !self.announced.contains(*b)).cloned());
        bugs
    }

    /// The bugs filed so far that were never announced, except those in `held` (a bug whose
    /// case is still being named by a sanitizer, which may file it under a site instead); the
    /// returned ones count as announced from now on.
    pub fn announce(&mut self, held: &BTreeSet<BugId>) -> Vec<Bug> {
        // Grouping every case is the expensive part, and most failing cases show known bugs:
        // only group when a case filed an id that may be announced now. (Every bug is some
        // observed case's id: a mapping learnt from a case files others under that case's own.)
        if self.unannounced.iter().all(|b| held.contains(b)) {
            return Vec::new();
        }
        let bugs = self.triage.bugs();
        let fresh: Vec<Bug> = bugs.iter().filter(|b| !self.announced.contains(&b.id) && !held.contains(&b.id)).cloned().collect();
        self.announced.extend(fresh.iter().map(|b| b.id.clone()));
        // Ids re-filed under another by a mapping are no bug any more.
        self.unannounced.retain(|id| !self.announced.contains(id) && bugs.iter().any(|b| &b.id == id));
        fresh
    }

    /// Whether bug `id` was announced.
    pub fn is_announced(&self, id: &BugId) -> bool {
        self.announced.contains(id)
    }

    /// The bugs of `ids` that exist and were never announced: those a campaign that stops
    /// leaves unnamed.
    pub fn unannounced_of(&self, ids: &BTreeSet<BugId>) -> Vec<BugId> {
        let bugs = self.triage.bugs();
        ids.iter().filter(|id| !self.announced.contains(*id) && bugs.iter().any(|b| &b.id == *id)).cloned().collect()
    }

    /// Arranges the saved seeds one per bug ([`crate::core::triage::layout::arrange`]: each bug's
    /// smallest in the seed directory, its others under `<id>/examples/`, nothing overwritten)
    /// and records where they went. Returns each move as (old path, new path).
    pub fn arrange(&mut self) -> std::io::Result<Vec<(PathBuf, PathBuf)>> {
        let moves = crate::core::triage::layout::arrange(&self.dir, &self.triage.bugs())?;
        moves.iter().for_each(|(from, to)| self.triage.rename_seed(from, to));
        Ok(moves)
    }

    /// The bugs filed so far.
    pub fn triage(&self) -> &Triage {
        &self.triage
    }

    /// The bugs filed so far, for changes (seeds moved, mappings from an earlier index).
    pub fn triage_mut(&mut self) -> &mut Triage {
        &mut self.triage
    }
}

/// A case's size for "smallest": its tensors' logical elements (a case that does not plan
/// counts as the largest).
pub fn case_size(m: &Manifest, case: &Case) -> u64 {
    Plan::new(case, m).map(|p| p.tensors.iter().map(|t| t.numel).sum()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bug_is_new_once_whatever_signatures_its_cases_show() {
        let m = crate::testing::attention();
        let dir = tempfile::tempdir().unwrap();
        let mut keeper = SeedKeeper::new(dir.path().join("seeds"));
        let fault = |al: [u64; 4]| crate::testing::misaligned_fault("simple_attn", al);
        let mut new_bugs = 0;
        for (seed, al) in [[8, 16, 16, 16], [8, 2, 16, 16], [16, 4, 16, 16]].into_iter().enumerate() {
            let case = Case { seed: seed as u64, ..crate::testing::example() };
            let f = fault(al);
            let kept = keeper.keep(&m, &case, &f).unwrap();
            assert!(matches!(kept, Kept::New(_)), "a new signature each time");
            keeper.observe(&m, &case, vec![(f, None)]);
            new_bugs += keeper.announce(&BTreeSet::new()).len();
        }
        assert_eq!(new_bugs, 1);
        assert_eq!(keeper.triage().bugs()[0].cases, 3);
    }
}
