//! The bug index: `bugs.json` in an output directory, beside `seeds/`.
//!
//! It lists every bug of the run ([`Bug`]: id, key, what, site, cases, the smallest seed and the
//! other seeds, paths relative to the index's directory) and every mapping learnt
//! ([`AliasRecord`]: a provisional id to the id its cases are filed under, with the condition).
//! Seeds keep their own format; the index is derived from them and the run, and is rewritten as
//! the run goes. README.md's section "Bugs, the bug index and `triage`" documents the format.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{Alias, Bug, BugId, BugKey, Triage};

/// The index's file name in an output directory.
pub const BUG_INDEX_FILE: &str = "bugs.json";
/// Format tag of bug index files.
pub const BUG_INDEX_FORMAT: &str = "cudafuzz-bugs";
/// Version this build writes and reads.
pub const BUG_INDEX_VERSION: u32 = 1;

/// A bug index that cannot be read or written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum IndexError {
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] crate::core::error::FileError),
    /// Not a bug index this build reads.
    #[error("{path}: not a cudafuzz bug index ({message}); it is the {BUG_INDEX_FILE} that `cudafuzz fuzz` writes, format `{BUG_INDEX_FORMAT}` version {BUG_INDEX_VERSION}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// One mapping, with both ids spelled out for readers of the file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AliasRecord {
    /// The provisional id.
    pub from: BugId,
    /// The id its cases are filed under (where the condition holds).
    pub to: BugId,
    /// The mapping itself: keys and condition.
    #[serde(flatten)]
    pub alias: AliasKeys,
}

/// [`Alias`] with its keys renamed for the file (`from_key`, `to_key`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AliasKeys {
    /// The provisional key.
    pub from_key: BugKey,
    /// The key its cases are filed under.
    pub to_key: BugKey,
    /// Only for cases in which this tensor is below 16-byte alignment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_unaligned: Option<String>,
}

/// The bug index of one output directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BugIndex {
    /// Always [`BUG_INDEX_FORMAT`].
    pub format: String,
    /// Always [`BUG_INDEX_VERSION`].
    pub version: u32,
    /// The bugs, in the order they were first seen.
    pub bugs: Vec<Bug>,
    /// The mappings learnt, in key order.
    pub aliases: Vec<AliasRecord>,
}

impl BugIndex {
    /// The index of what `triage` has seen, seed paths relative to `base` where they lie in it.
    pub fn new(triage: &Triage, base: &Path) -> BugIndex {
        let rel = |p: &Path| p.strip_prefix(base).map(Path::to_path_buf).unwrap_or_else(|_| p.to_path_buf());
        let bugs = triage
            .bugs()
            .into_iter()
            .map(|mut b| {
                b.smallest = b.smallest.as_deref().map(rel);
                b.examples = b.examples.iter().map(|p| rel(p)).collect();
                b
            })
            .collect();
        let aliases = triage
            .aliases()
            .map(|a| AliasRecord {
                from: a.from.id(),
                to: a.to.id(),
                alias: AliasKeys { from_key: a.from.clone(), to_key: a.to.clone(), when_unaligned: a.when_unaligned.clone() },
            })
            .collect();
        BugIndex { format: BUG_INDEX_FORMAT.into(), version: BUG_INDEX_VERSION, bugs, aliases }
    }

    /// The mappings, to hand to another [`Triage`].
    pub fn aliases(&self) -> impl Iterator<Item = Alias> + '_ {
        self.aliases.iter().map(|r| Alias { from: r.alias.from_key.clone(), to: r.alias.to_key.clone(), when_unaligned: r.alias.when_unaligned.clone() })
    }

    /// Pretty JSON, newline-terminated.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("indexes always serialize");
        s.push('\n');
        s
    }

    /// Reads an index file.
    pub fn load(path: &Path) -> Result<BugIndex, IndexError> {
        let text = crate::core::userfile::read_text(path).map_err(crate::core::error::FileError::at(path, "read"))?;
        let bad = |message: String| IndexError::Format { path: path.into(), message };
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let format = value.get("format").and_then(|v| v.as_str()).unwrap_or("?");
        let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
        if format != BUG_INDEX_FORMAT || version != u64::from(BUG_INDEX_VERSION) {
            return Err(bad(format!("format `{format}` version {version}")));
        }
        serde_json::from_value(value).map_err(|e| bad(e.to_string()))
    }

    /// Writes the index as `dir/bugs.json`, atomically (the index is derived, so a newer one
    /// replaces it; seeds are never touched).
    pub fn write(&self, dir: &Path) -> Result<PathBuf, IndexError> {
        let path = dir.join(BUG_INDEX_FILE);
        let io = |source| IndexError::Io(crate::core::error::FileError { path: path.clone(), action: "write", source });
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut tmp = crate::core::userfile::temp_in(dir).map_err(io)?;
        std::io::Write::write_all(&mut tmp, self.to_json().as_bytes()).map_err(io)?;
        tmp.persist(&path).map_err(|e| io(e.error))?;
        Ok(path)
    }
}
