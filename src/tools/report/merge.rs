//! Combining shard reports and their seeds: `cudafuzz report merge`.
//!
//! [`merge`] folds the [`RunReport`]s of a sharded job into one: environment checks are kept per
//! shard, replays are concatenated, sweep cells of the same row and class are added up,
//! campaigns and sanitizer passes of the same kernel are summed, and findings are deduplicated
//! by signature (new if any shard found it new). A `shards` check says whether every shard
//! `1..N` is there exactly once: a missing shard is work nobody checked, so the merge fails.
//!
//! [`copy_seeds`] gathers the shards' seed directories into one without ever replacing a file:
//! the same bytes under the same name are skipped, different bytes under a taken name get the
//! next free `NAME-2.json`, `NAME-3.json`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::export::{Campaign, EnvCheck, FindingEntry, KernelSection, RunReport, ToolInfo};
use crate::core::shard::Shard;

/// A seed directory that cannot be merged.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MergeError {
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] crate::core::error::FileError),
}

/// Name of the environment check a merge adds about shard completeness.
pub const CHECK_SHARDS: &str = "shards";

/// Merges shard reports into one; see the module docs.
pub fn merge(reports: &[RunReport]) -> RunReport {
    let mut out = RunReport::new();
    let Some(first) = reports.first() else {
        out.check(CHECK_SHARDS, false, "no reports to merge");
        out.recount();
        return out;
    };
    out.tool = first.tool.clone();
    out.started = reports.iter().map(|r| r.started.clone()).min().unwrap_or_default();
    out.finished = reports.iter().map(|r| r.finished.clone()).max().unwrap_or_default();
    out.duration_secs = reports.iter().map(|r| r.duration_secs).fold(0.0, f64::max);
    out.budget_secs = first.budget_secs;
    out.config = first.config.clone();
    out.gpu = reports.iter().find_map(|r| r.gpu.clone());
    out.interrupted = reports.iter().any(|r| r.interrupted);
    let mut shards: Vec<Option<Shard>> = Vec::new();
    for r in reports {
        if r.merged_from.is_empty() {
            shards.push(r.shard);
            out.merged_from.push(r.shard.map(|s| s.to_string()).unwrap_or_else(|| "whole".into()));
        } else {
            for label in &r.merged_from {
                shards.push(label.parse().ok());
                out.merged_from.push(label.clone());
            }
        }
        for e in &r.environment {
            out.environment.push(EnvCheck { shard: e.shard.or(r.shard), ..e.clone() });
        }
    }
    let versions: BTreeSet<&ToolInfo> = reports.iter().map(|r| &r.tool).collect();
    if versions.len() > 1 {
        let list: Vec<String> = versions.iter().map(|t| format!("{} {}", t.name, t.version)).collect();
        out.check("same cudafuzz", false, format!("the shards ran different builds ({}): rerun them with one", list.join(", ")));
    }
    let (ok, detail) = shard_completeness(&shards);
    out.check(CHECK_SHARDS, ok, detail);
    for r in reports {
        for k in &r.kernels {
            absorb_kernel(out.kernel_mut(&k.kernel), k);
        }
        // Every shard's mappings: a case filed under a site in one shard is in the merge too.
        out.bug_aliases.extend(r.bug_aliases.iter().cloned());
    }
    out.recount();
    out
}

/// Whether `shards` covers `1..N` exactly once each, and the detail line.
fn shard_completeness(shards: &[Option<Shard>]) -> (bool, String) {
    let sharded: Vec<Shard> = shards.iter().flatten().copied().collect();
    let whole = shards.len() - sharded.len();
    if sharded.is_empty() {
        return (true, format!("{whole} unsharded report(s) merged"));
    }
    if whole > 0 {
        return (false, format!("{whole} unsharded report(s) mixed with sharded ones: merge the reports of one sharded job"));
    }
    let counts: BTreeSet<u64> = sharded.iter().map(|s| s.count()).collect();
    if counts.len() > 1 {
        return (false, format!("reports of different shardings ({:?} shards): merge the reports of one job", counts));
    }
    let n = sharded[0].count();
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for s in &sharded {
        *seen.entry(s.number()).or_default() += 1;
    }
    let missing: Vec<String> = (1..=n).filter(|i| !seen.contains_key(i)).map(|i| format!("{i}/{n}")).collect();
    let twice: Vec<String> = seen.iter().filter(|(_, &c)| c > 1).map(|(i, _)| format!("{i}/{n}")).collect();
    match (missing.is_empty(), twice.is_empty()) {
        (true, true) => (true, format!("all {n} shards merged")),
        _ => {
            let mut why = Vec::new();
            if !missing.is_empty() {
                why.push(format!("missing {} (their work was not checked: rerun them and merge again)", missing.join(", ")));
            }
            if !twice.is_empty() {
                why.push(format!("merged more than once: {}", twice.join(", ")));
            }
            (false, why.join("; "))
        }
    }
}

fn absorb_kernel(into: &mut KernelSection, k: &KernelSection) {
    if into.source.is_none() {
        into.source = k.source.clone();
    }
    into.replays.extend(k.replays.iter().cloned());
    for row in &k.sweep {
        match into.sweep.iter_mut().find(|r| r.config == row.config) {
            None => into.sweep.push(row.clone()),
            Some(mine) => {
                mine.expect_pass |= row.expect_pass;
                for class in &row.classes {
                    if !mine.classes.contains(class) {
                        mine.classes.push(class.clone());
                    }
                }
                for (class, cell) in &row.cells {
                    mine.cells.entry(class.clone()).or_default().absorb(cell);
                }
            }
        }
    }
    if let Some(c) = &k.campaign {
        into.campaign.get_or_insert_with(|| Campaign { seed: c.seed, ..Campaign::default() }).absorb(c);
    }
    for s in &k.sanitizer {
        match into.sanitizer.iter_mut().find(|m| m.tools == s.tools) {
            Some(mine) => mine.counts.absorb(&s.counts),
            None => into.sanitizer.push(s.clone()),
        }
    }
    for f in &k.findings {
        absorb_finding(&mut into.findings, f);
    }
}

fn absorb_finding(into: &mut Vec<FindingEntry>, f: &FindingEntry) {
    match into.iter_mut().find(|m| m.signature == f.signature) {
        None => into.push(f.clone()),
        Some(mine) => {
            mine.new |= f.new;
            if mine.seed.is_none() {
                mine.seed = f.seed.clone();
            }
            if mine.source_path.is_none() {
                mine.source_path = f.source_path.clone();
            }
        }
    }
}

/// What [`copy_seeds`] did with one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopyAction {
    /// Copied under its own name.
    Copied,
    /// An identical file was already there.
    Same,
    /// Its name was taken by different content: copied under another name.
    Renamed,
}

/// One file handled by [`copy_seeds`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopiedSeed {
    /// The shard's file.
    pub from: PathBuf,
    /// Where its content now is in the merged directory.
    pub to: PathBuf,
    /// What happened.
    pub action: CopyAction,
}

/// Copies every file directly inside each of `dirs` into `to` (created if needed), never
/// replacing a file: see the module docs. Directories that do not exist are an error (a shard
/// whose seeds are missing should be noticed); subdirectories are not descended into.
pub fn copy_seeds(dirs: &[PathBuf], to: &Path) -> Result<Vec<CopiedSeed>, MergeError> {
    std::fs::create_dir_all(to).map_err(crate::core::error::FileError::at(to, "create directory"))?;
    let mut out = Vec::new();
    for dir in dirs {
        let entries = std::fs::read_dir(dir).map_err(crate::core::error::FileError::at(dir.clone(), "read directory"))?;
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect();
        files.sort();
        for from in files {
            let bytes = crate::core::userfile::read(&from).map_err(crate::core::error::FileError::at(from.clone(), "read"))?;
            let bytes = renamed_kernel(&from, to).map(String::into_bytes).unwrap_or(bytes);
            let (to_path, action) = place(to, &from, &bytes)?;
            out.push(CopiedSeed { from, to: to_path, action });
        }
    }
    Ok(out)
}

/// The seed at `from` with its kernel named for a seed in `dir` instead, when it names a user's
/// manifest by a path relative to its own folder (which the copy would break) and that
/// manifest is found; `None` for any other file, which is copied as it is.
fn renamed_kernel(from: &Path, dir: &Path) -> Option<String> {
    let (seed, _) = crate::core::corpus::load(from, None).ok()?;
    seed.manifest.as_ref()?;
    let found = seed.kernel(from, None).ok()?;
    Some(seed.naming_kernel(&found.manifest, dir).to_json())
}

/// Writes `bytes` under `from`'s name in `dir`, or the first free numbered name; an identical
/// file under one of those names is reused.
fn place(dir: &Path, from: &Path, bytes: &[u8]) -> Result<(PathBuf, CopyAction), MergeError> {
    let name = from.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "seed".into());
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s.to_string(), format!(".{e}")),
        _ => (name.clone(), String::new()),
    };
    let io = |path: &Path, action, source| MergeError::Io(crate::core::error::FileError { path: path.into(), action, source });
    for n in 1u32.. {
        let candidate = if n == 1 { dir.join(&name) } else { dir.join(format!("{stem}-{n}{ext}")) };
        if candidate.exists() {
            let existing = std::fs::read(&candidate).map_err(|e| io(&candidate, "read", e))?;
            if existing == bytes {
                return Ok((candidate, CopyAction::Same));
            }
            continue;
        }
        let mut tmp = crate::core::userfile::temp_in(dir).map_err(|e| io(dir, "write", e))?;
        tmp.write_all(bytes).map_err(|e| io(dir, "write", e))?;
        match tmp.persist_noclobber(&candidate) {
            Ok(_) => return Ok((candidate, if n == 1 { CopyAction::Copied } else { CopyAction::Renamed })),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(&candidate, "write", e.error)),
        }
    }
    unreachable!("the loop above returns")
}

/// Points the findings' seed paths of `report` at their copies in the merged directory: a seed
/// whose file can still be read is matched by content, otherwise by name when that is unique.
pub fn relink_seeds(report: &mut RunReport, copies: &[CopiedSeed]) {
    for k in &mut report.kernels {
        for f in &mut k.findings {
            let Some(seed) = &f.seed else { continue };
            let path = Path::new(seed);
            let name = path.file_name();
            let by_name: BTreeSet<&PathBuf> = copies.iter().filter(|c| c.from.file_name() == name).map(|c| &c.to).collect();
            let target = match std::fs::read(path) {
                Ok(bytes) => copies.iter().filter(|c| c.from.file_name() == name).find(|c| std::fs::read(&c.to).is_ok_and(|b| b == bytes)).map(|c| &c.to),
                Err(_) if by_name.len() == 1 => by_name.into_iter().next(),
                Err(_) => None,
            };
            if let Some(t) = target {
                f.seed = Some(super::export::relative_path(t));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::finding::{Finding, FindingKind, Oracle};
    use crate::tools::report::export::tests::{finding, sample};
    use crate::tools::report::export::{MatrixCell, Step};

    fn shard_report(number: u64, of: u64) -> RunReport {
        let mut r = sample();
        r.shard = Shard::new(number - 1, of);
        r.environment.retain(|e| e.ok);
        for k in &mut r.kernels {
            k.replays.retain(|x| x.ok);
            k.findings.retain(|f| !f.new);
        }
        r.recount();
        r
    }

    #[test]
    fn merging_all_shards_sums_counts_and_dedupes_findings() {
        let mut a = shard_report(1, 2);
        let mut b = shard_report(2, 2);
        b.kernels[0].replays[0].seed = "seeds/expected/other.json".into();
        // Each shard found a new bug; one of them both did.
        let shared = finding("oob_read_k", FindingKind::IllegalAddress, Oracle::CudaStatus, None);
        let only_b = finding("oob_read_k", FindingKind::NanLeak, Oracle::NanLeak, None);
        let entry = |f: &Finding| FindingEntry {
            signature: f.signature(),
            finding: f.clone(),
            seed: None,
            case: "c".into(),
            step: Step::Fuzz,
            new: true,
            source_path: None,
            bug: None,
        };
        a.kernels[0].findings.push(entry(&shared));
        b.kernels[0].findings.push(entry(&shared));
        b.kernels[0].findings.push(entry(&only_b));
        a.recount();
        b.recount();
        let m = merge(&[a.clone(), b.clone()]);
        assert_eq!(m.merged_from, vec!["1/2", "2/2"]);
        assert_eq!(m.shard, None);
        let shards = m.environment.iter().find(|e| e.name == CHECK_SHARDS).unwrap();
        assert!(shards.ok, "{}", shards.detail);
        assert!(m.environment.iter().filter(|e| e.name == "gpu").map(|e| e.shard).eq([Shard::new(0, 2), Shard::new(1, 2)]));
        let k = &m.kernels[0];
        assert_eq!(k.replays.len(), 2);
        assert_eq!(k.findings.len(), 3, "the expected one, the shared one once, b's own");
        assert_eq!(m.counts.new_findings, 2);
        assert!(m.new_findings);
        assert_eq!(m.counts.cases, a.counts.cases + b.counts.cases);
        assert_eq!(m.counts.skipped, a.counts.skipped + b.counts.skipped);
        let camp = k.campaign.as_ref().unwrap();
        assert_eq!(camp.cases, 2000);
        assert_eq!(camp.budget_secs, 1200.0);
        assert_eq!(k.sanitizer.len(), 1);
        assert_eq!(k.sanitizer[0].counts.cases, 400);
        assert_eq!(k.sweep.len(), 1);
        assert_eq!(
            k.sweep[0].cells["q+8"],
            MatrixCell {
                pass: 2,
                fail: 4,
                signatures: BTreeMap::from([(k.sweep[0].cells["q+8"].signatures.keys().next().unwrap().clone(), 4)]),
                ..Default::default()
            }
        );
        assert_eq!(m.exit_code(), crate::core::exit::FINDINGS);
        // A merged report merges again (a merge of merges) to the same content.
        let again = merge(std::slice::from_ref(&m));
        assert_eq!(again.merged_from, m.merged_from);
        assert_eq!(again.counts, m.counts);
    }

    #[test]
    fn a_missing_or_repeated_shard_fails_the_merge() {
        let m = merge(&[shard_report(1, 3), shard_report(3, 3)]);
        let c = m.environment.iter().find(|e| e.name == CHECK_SHARDS).unwrap();
        assert!(!c.ok && c.detail.contains("missing 2/3"), "{}", c.detail);
        assert_eq!(m.exit_code(), crate::core::exit::SETUP);
        let m = merge(&[shard_report(1, 2), shard_report(2, 2), shard_report(2, 2)]);
        let c = m.environment.iter().find(|e| e.name == CHECK_SHARDS).unwrap();
        assert!(!c.ok && c.detail.contains("more than once: 2/2"), "{}", c.detail);
        let m = merge(&[shard_report(1, 2), shard_report(1, 3)]);
        assert!(!m.environment.iter().find(|e| e.name == CHECK_SHARDS).unwrap().ok);
        let m = merge(&[]);
        assert!(!m.passed());
        let mut whole = shard_report(1, 1);
        whole.shard = None;
        let m = merge(&[whole.clone(), whole]);
        assert!(m.environment.iter().find(|e| e.name == CHECK_SHARDS).unwrap().ok);
        assert!(m.passed(), "{}", m.headline());
    }

    #[test]
    fn campaigns_of_one_kernel_add_up() {
        let mut a = RunReport::new();
        a.kernel_mut("k").campaign = Some(Campaign { cases: 5, passed: 5, elapsed_secs: 1.0, ..Default::default() });
        let mut b = RunReport::new();
        b.kernel_mut("k").campaign = Some(Campaign { cases: 7, passed: 6, failed: 1, elapsed_secs: 2.0, ..Default::default() });
        let m = merge(&[a, b]);
        assert_eq!(m.kernels[0].campaign.as_ref().unwrap().cases, 12);
        assert_eq!(m.kernels[0].campaign.as_ref().unwrap().elapsed_secs, 3.0);
    }

    #[test]
    fn seeds_are_copied_never_overwritten() {
        let tmp = tempfile::tempdir().unwrap();
        let (s1, s2, out) = (tmp.path().join("s1"), tmp.path().join("s2"), tmp.path().join("merged"));
        for d in [&s1, &s2, &out] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(s1.join("a.json"), "A").unwrap();
        std::fs::write(s1.join("b.json"), "B1").unwrap();
        std::fs::write(s2.join("a.json"), "A").unwrap();
        std::fs::write(s2.join("b.json"), "B2").unwrap();
        std::fs::write(s2.join("noext"), "N").unwrap();
        std::fs::create_dir(s2.join("sub")).unwrap();
        // Something already in the merged directory under a shard's name is kept.
        std::fs::write(out.join("c.json"), "mine").unwrap();
        std::fs::write(s1.join("c.json"), "theirs").unwrap();
        let copies = copy_seeds(&[s1.clone(), s2.clone()], &out).unwrap();
        let got: Vec<(String, String, CopyAction)> = copies
            .iter()
            .map(|c| {
                (c.from.strip_prefix(tmp.path()).unwrap().display().to_string(), c.to.file_name().unwrap().to_string_lossy().into_owned(), c.action.clone())
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("s1/a.json".into(), "a.json".into(), CopyAction::Copied),
                ("s1/b.json".into(), "b.json".into(), CopyAction::Copied),
                ("s1/c.json".into(), "c-2.json".into(), CopyAction::Renamed),
                ("s2/a.json".into(), "a.json".into(), CopyAction::Same),
                ("s2/b.json".into(), "b-2.json".into(), CopyAction::Renamed),
                ("s2/noext".into(), "noext".into(), CopyAction::Copied),
            ]
        );
        assert_eq!(std::fs::read_to_string(out.join("c.json")).unwrap(), "mine");
        assert_eq!(std::fs::read_to_string(out.join("b-2.json")).unwrap(), "B2");
        // Copying again changes nothing.
        let again = copy_seeds(&[s1.clone(), s2.clone()], &out).unwrap();
        assert!(again.iter().all(|c| c.action == CopyAction::Same), "{again:?}");
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 6);
        assert!(copy_seeds(&[tmp.path().join("nope")], &out).unwrap_err().to_string().contains("nope"));

        // Findings follow their seeds: by content when the shard's file is readable.
        let mut r = RunReport::new();
        let f = finding("k", FindingKind::NanLeak, Oracle::NanLeak, None);
        for seed in [s2.join("b.json"), PathBuf::from("/gone/a.json"), PathBuf::from("/gone/b.json")] {
            r.kernel_mut("k").findings.push(FindingEntry {
                signature: format!("{}", seed.display()).into(),
                finding: f.clone(),
                seed: Some(seed.display().to_string()),
                case: "c".into(),
                step: Step::Fuzz,
                new: true,
                source_path: None,
                bug: None,
            });
        }
        relink_seeds(&mut r, &copies);
        let seeds: Vec<String> = r.kernels[0].findings.iter().map(|f| f.seed.clone().unwrap()).collect();
        assert!(seeds[0].ends_with("merged/b-2.json"), "{seeds:?}");
        assert!(seeds[1].ends_with("merged/a.json"), "unique by name: {seeds:?}");
        assert_eq!(seeds[2], "/gone/b.json", "ambiguous by name: left alone");
    }
}
