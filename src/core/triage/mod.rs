//! Triage: findings grouped into bugs, the stage after "finding" and before the seeds a person
//! reads.
//!
//! A [`Signature`](crate::core::finding::Signature) is too fine to count bugs by: it holds the set of
//! unaligned tensors, the region an overrun landed in and the kernel's parameters, so one
//! misaligned vector load shows up as a dozen "distinct" findings. A bug is keyed instead by what
//! the tools can say about its root cause ([`BugKey`]):
//! - a **site**, when compute-sanitizer named one: kernel, `file:line`, and the record's kind
//!   (class, memory space, direction, error: `invalid_global_read_misaligned`); for a race, the
//!   line of its read (`race_shared_read`): the read-after-write and write-after-read records of
//!   one missing barrier share it and are one bug (the race rule, [`BugKey::of`]), a race read
//!   elsewhere is a bug of its own;
//! - otherwise the **native** oracle's class for the kernel and tensor (`misaligned_address` in
//!   no particular tensor, `canary_damage` in `o`): a *provisional* bug.
//!
//! Parameter values and alignment classes are never part of a key. Ids ([`BugId`]) are a SHA-256
//! of the key's canonical text, so the same bug has the same id in every run, shard and machine:
//! `B…` for sanitizer-keyed bugs, `P…` for provisional ones.
//!
//! What one case shows ties keys together ([`Triage::observe`]):
//! - native and sanitizer findings of the same case: the native key *maps* to the site
//!   ([`Alias`]); for a misaligned access the mapping holds where the tensor the sanitizer named
//!   is unaligned, so a later case of the same native class that was never re-run under a
//!   sanitizer gets the site's id too;
//! - several native findings of one case with no site (a NaN leak and a numerical error in `o`
//!   and `lse`): one bug, named by the first key in [`BugKey`]'s order;
//! - a launch failure (719) in a case a sanitizer reported on is the sanitizer aborting the
//!   kernel: evidence for that case's bug, never a bug of its own;
//! - distinct sites stay distinct bugs, even in one case.
//!
//! The mappings are kept in the bug index ([`BugIndex`], `bugs.json` in the output directory)
//! and in reports, so that the gate, `report merge` and `triage` give a case the same final id
//! whether or not its own escalation ran. [`scan`] reads seed files from any earlier run;
//! [`layout`] keeps one seed per bug in `seeds/` with the others under `seeds/<id>/examples/`.

mod group;
mod index;
pub mod layout;
mod render;
pub mod scan;

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::core::finding::{Finding, FindingKind};

pub use group::{Bug, Triage};
pub use index::{BugIndex, IndexError, BUG_INDEX_FILE, BUG_INDEX_FORMAT, BUG_INDEX_VERSION};
pub use render::{bug_ids, bug_line, table};

/// What a bug is keyed by, as far as the tools can tell (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum BugKey {
    /// A compute-sanitizer record: final.
    Site {
        /// The kernel's name, without parameters.
        kernel: String,
        /// `file:line` of the access, or `-` when the record has none; for a race, its read's.
        site: String,
        /// The record's kind: class, memory space, direction, error
        /// (`invalid_global_read_misaligned`); for a race `race_`, the space and `_read`
        /// (`race_shared_read`), or `_write` for two writes.
        access: String,
    },
    /// A native oracle's class in one tensor: provisional until a sanitizer names its site.
    Native {
        /// The kernel's name, without parameters.
        kernel: String,
        /// The finding kind (`misaligned_address`, `canary_damage`).
        kind: FindingKind,
        /// The tensor, when the oracle knows it (CUDA faults do not).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tensor: Option<String>,
    },
}

impl BugKey {
    /// The key of one finding; `None` for a launch failure that a sanitizer's report explains
    /// (`sanitized`: the same case has a sanitizer finding), which is evidence, not a bug.
    pub fn of(f: &Finding, sanitized: bool) -> Option<BugKey> {
        let kernel = kernel_name(&f.kernel).to_string();
        if f.oracle.is_sanitizer() {
            let line = |s: &crate::core::finding::SourceLocation| format!("{}:{}", s.file, s.line);
            if let Some((access, at)) = race_key(f) {
                return Some(BugKey::Site { kernel, site: line(at), access });
            }
            let site = f.source.as_ref().map(line).unwrap_or_else(|| "-".into());
            let access = f.sanitizer_kind.as_ref().map(|k| k.to_string()).unwrap_or_else(|| f.kind.name().to_string());
            return Some(BugKey::Site { kernel, site, access });
        }
        if sanitized && f.kind == FindingKind::LaunchFailure {
            return None;
        }
        Some(BugKey::Native { kernel, kind: f.kind, tensor: f.tensor.clone() })
    }

    /// Whether the key is provisional (native).
    pub fn is_provisional(&self) -> bool {
        matches!(self, BugKey::Native { .. })
    }

    /// The kernel's name.
    pub fn kernel(&self) -> &str {
        match self {
            BugKey::Site { kernel, .. } | BugKey::Native { kernel, .. } => kernel,
        }
    }

    /// The stable id: `B` or `P` and 10 hex digits of the SHA-256 of [`BugKey`]'s text.
    pub fn id(&self) -> BugId {
        let digest = Sha256::digest(self.to_string().as_bytes());
        let hex: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
        BugId(format!("{}{hex}", if self.is_provisional() { 'P' } else { 'B' }))
    }
}

impl fmt::Display for BugKey {
    /// The canonical text the id hashes: `site/fa_s512/fa_s512.cu:209/invalid_global_read_misaligned`
    /// or `native/fa_s512/misaligned_address/-`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BugKey::Site { kernel, site, access } => write!(f, "site/{kernel}/{site}/{access}"),
            BugKey::Native { kernel, kind, tensor } => write!(f, "native/{kernel}/{kind}/{}", tensor.as_deref().unwrap_or("-")),
        }
    }
}

/// The race rule: a race is keyed by the line of its read, the access a missing barrier should
/// have ordered after the write (`race_shared_read` at that line), or for two writes by the
/// lesser of their lines (`race_shared_write`). The read-after-write and write-after-read
/// records of one missing barrier share their read, and so do the several writes one barrier
/// should have ordered before it (a tile filled by `cp.async` on one path and by plain stores
/// on another): one bug. A race between other data, read elsewhere, is a bug of its own. `None`
/// for a race saved before its second line was kept: it keeps its old key (and id).
fn race_key(f: &Finding) -> Option<(String, &crate::core::finding::SourceLocation)> {
    let kind = f.sanitizer_kind.as_ref().filter(|k| k.class == crate::core::finding::SanitizerClass::Race)?;
    let (first, second) = (f.source.as_ref()?, f.other_access.as_ref()?);
    let mut words = kind.detail.split('_');
    let space = words.next().filter(|s| !s.is_empty()).unwrap_or("shared");
    let directions: Vec<&str> = words.collect();
    let read = match directions.as_slice() {
        [_, "read"] => Some(second),
        ["read", _] => Some(first),
        _ => None,
    };
    Some(match read {
        Some(at) => (format!("race_{space}_read"), at),
        None => (format!("race_{space}_write"), std::cmp::min_by_key(first, second, |s| (s.file.clone(), s.line))),
    })
}

/// A bug's stable id (`B3f09c2a1d4`, or `P…` while provisional).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BugId(String);

impl BugId {
    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the id is a provisional bug's (`P…`).
    pub fn is_provisional(&self) -> bool {
        self.0.starts_with('P')
    }
}

impl fmt::Display for BugId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A native key mapped to the site a sanitizer named for one of its cases.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Alias {
    /// The provisional (native) key.
    pub from: BugKey,
    /// Where its cases go: a site, or (for native findings seen together) another native key.
    pub to: BugKey,
    /// The mapping holds only for cases in which this tensor is below 16-byte alignment (a
    /// misaligned access the sanitizer traced to it); `None`: for every case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_unaligned: Option<String>,
}

impl Alias {
    /// Whether the mapping holds for a case with these tensor alignments.
    pub fn holds(&self, alignment: &[(String, u64)]) -> bool {
        match &self.when_unaligned {
            None => true,
            Some(t) => alignment.iter().any(|(n, a)| n == t && *a < crate::core::plan::VECTOR_ALIGN),
        }
    }
}

/// A kernel label without its parameters: `fa_s512[BLOCK_M=64]` -> `fa_s512`.
pub fn kernel_name(label: &str) -> &str {
    label.split('[').next().unwrap_or(label)
}

#[cfg(test)]
mod tests;
