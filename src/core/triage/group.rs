//! [`Triage`]: cases and their findings in, bugs out (see the module docs for the rules).
//!
//! The grouping is recomputed from what was observed whenever it is asked for, so it never
//! depends on the order in which cases or mappings arrived: a mapping learnt late re-files every
//! earlier case it covers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Alias, BugId, BugKey};
use crate::core::finding::{Finding, FindingKind, Oracle, SanitizerKind, Signature};

/// One bug: its key and id, what it is, and the cases and seeds that show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bug {
    /// The stable id (`B…`, or `P…` while provisional).
    pub id: BugId,
    /// What the id is the hash of.
    pub key: BugKey,
    /// The kernel, without parameters.
    pub kernel: String,
    /// What goes wrong: the sanitizer record's kind, or the native finding kind.
    pub what: String,
    /// The tensor concerned, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// `file:line` of the access, when a sanitizer named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// The check that saw it first.
    pub oracle: Oracle,
    /// Distinct cases that showed it.
    pub cases: u64,
    /// Findings that showed it (a case may show several symptoms).
    pub findings: u64,
    /// Distinct finding signatures among them.
    pub signatures: Vec<Signature>,
    /// The first case that showed it, in one line.
    pub first_case: String,
    /// The smallest saved case: its seed file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smallest: Option<PathBuf>,
    /// The other saved seeds of this bug.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<PathBuf>,
    /// Provisional ids whose cases were filed here (their sanitizer re-run named this site).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provisional: Vec<BugId>,
}

/// One finding of a case, reduced to what grouping needs.
#[derive(Clone, Debug)]
struct Member {
    /// `None`: a sanitizer's abort, evidence for the case's bug.
    key: Option<BugKey>,
    tensor: Option<String>,
    oracle: Oracle,
    misaligned: bool,
    kind: FindingKind,
    signature: Signature,
    seed: Option<PathBuf>,
}

/// Everything seen of one case.
#[derive(Clone, Debug)]
struct CaseEntry {
    summary: String,
    size: u64,
    alignment: Vec<(String, u64)>,
    findings: Vec<(Finding, Option<PathBuf>)>,
    members: Vec<Member>,
}

/// Cases with their findings, and the mappings they taught; groups them into [`Bug`]s.
#[derive(Clone, Debug, Default)]
pub struct Triage {
    cases: Vec<CaseEntry>,
    by_id: BTreeMap<String, usize>,
    aliases: BTreeSet<Alias>,
}

impl Triage {
    /// Nothing observed yet.
    pub fn new() -> Triage {
        Triage::default()
    }

    /// Adds findings of the case `case_id` (any text that identifies a case: its content hash
    /// for seeds and campaigns, its summary in reports), with the seed saved for each finding
    /// if any. A case observed again (its escalation, another seed file of it) gains the new
    /// findings. `size` orders cases for "smallest".
    pub fn observe(&mut self, case_id: &str, summary: &str, size: u64, findings: Vec<(Finding, Option<PathBuf>)>) {
        let i = match self.by_id.get(case_id) {
            Some(&i) => i,
            None => {
                self.cases.push(CaseEntry { summary: summary.into(), size, alignment: Vec::new(), findings: Vec::new(), members: Vec::new() });
                self.by_id.insert(case_id.into(), self.cases.len() - 1);
                self.cases.len() - 1
            }
        };
        let entry = &mut self.cases[i];
        entry.size = entry.size.min(size);
        for (f, seed) in findings {
            if entry.alignment.is_empty() {
                entry.alignment = f.alignment.clone();
            }
            match entry.findings.iter_mut().find(|(g, _)| *g == f) {
                Some((_, s)) if s.is_none() => *s = seed,
                Some(_) => {}
                None => entry.findings.push((f, seed)),
            }
        }
        entry.members = members(&entry.findings);
        let learnt = learn(&entry.members);
        self.aliases.extend(learnt);
    }

    /// Adds a mapping learnt elsewhere (a bug index, a report).
    pub fn add_alias(&mut self, alias: Alias) {
        self.aliases.insert(alias);
    }

    /// Records that a seed file moved (see [`super::layout::arrange`]).
    pub fn rename_seed(&mut self, from: &std::path::Path, to: &std::path::Path) {
        for case in &mut self.cases {
            for seed in case.findings.iter_mut().map(|(_, s)| s).chain(case.members.iter_mut().map(|m| &mut m.seed)).flatten() {
                if seed == from {
                    *seed = to.to_path_buf();
                }
            }
        }
    }

    /// The mappings known, in order.
    pub fn aliases(&self) -> impl Iterator<Item = &Alias> {
        self.aliases.iter()
    }

    /// Cases observed.
    pub fn case_count(&self) -> usize {
        self.cases.len()
    }

    /// The final bug ids of one case (empty when it is unknown or had no findings).
    pub fn bugs_of(&self, case_id: &str) -> Vec<BugId> {
        let resolver = Resolver::new(&self.aliases);
        self.by_id.get(case_id).map(|&i| file_case(&self.cases[i], &resolver).into_iter().map(|(k, _)| k.id()).collect()).unwrap_or_default()
    }

    /// The final bug of one finding of the case `case_id` (`None` when the case or the finding
    /// was not observed).
    pub fn bug_of(&self, case_id: &str, finding: &Finding) -> Option<BugId> {
        let case = &self.cases[*self.by_id.get(case_id)?];
        let m = case.findings.iter().position(|(f, _)| f == finding)?;
        let resolver = Resolver::new(&self.aliases);
        file_case(case, &resolver).into_iter().find(|(_, idx)| idx.contains(&m)).map(|(k, _)| k.id())
    }

    /// Every bug, in the order their first case was observed.
    pub fn bugs(&self) -> Vec<Bug> {
        let resolver = Resolver::new(&self.aliases);
        let mut bugs: Vec<Bug> = Vec::new();
        let mut sizes: Vec<Vec<(u64, usize, PathBuf)>> = Vec::new();
        let mut own: Vec<bool> = Vec::new();
        for (order, case) in self.cases.iter().enumerate() {
            for (key, idx) in file_case(case, &resolver) {
                let id = key.id();
                let b = match bugs.iter().position(|b| b.id == id) {
                    Some(b) => b,
                    None => {
                        bugs.push(new_bug(&key, &case.members, &idx, &case.summary));
                        sizes.push(Vec::new());
                        own.push(false);
                        bugs.len() - 1
                    }
                };
                let bug = &mut bugs[b];
                bug.cases += 1;
                for &m in &idx {
                    let member = &case.members[m];
                    // The bug's own finding names the tensor and the tool, whichever case
                    // showed it first.
                    if member.key.as_ref() == Some(&key) && !own[b] {
                        own[b] = true;
                        bug.oracle = member.oracle;
                        if !key.is_provisional() {
                            bug.tensor = member.tensor.clone();
                        }
                    }
                    bug.findings += 1;
                    if !bug.signatures.contains(&member.signature) {
                        bug.signatures.push(member.signature.clone());
                    }
                    if let Some(k) = member.key.as_ref().filter(|k| k.is_provisional() && **k != key) {
                        if !bug.provisional.contains(&k.id()) {
                            bug.provisional.push(k.id());
                        }
                    }
                    if let Some(seed) = &member.seed {
                        if !sizes[b].iter().any(|(_, _, p)| p == seed) {
                            sizes[b].push((case.size, order, seed.clone()));
                        }
                    }
                }
            }
        }
        for (bug, mut seeds) in bugs.iter_mut().zip(sizes) {
            // Ties between seeds of one case break on the file's name, not its path: arranging
            // moves the others into `<id>/examples/` under their own names, and the choice must
            // not change because of that move.
            seeds.sort_by(|a, b| (a.0, a.1, a.2.file_name(), &a.2).cmp(&(b.0, b.1, b.2.file_name(), &b.2)));
            let mut paths = seeds.into_iter().map(|(_, _, p)| p);
            bug.smallest = paths.next();
            bug.examples = paths.collect();
            bug.provisional.sort();
        }
        bugs
    }
}

fn members(findings: &[(Finding, Option<PathBuf>)]) -> Vec<Member> {
    let sanitized = findings.iter().any(|(f, _)| f.oracle.is_sanitizer());
    findings
        .iter()
        .map(|(f, seed)| Member {
            key: BugKey::of(f, sanitized),
            tensor: f.tensor.clone(),
            oracle: f.oracle,
            misaligned: f.sanitizer_kind.as_ref().is_some_and(SanitizerKind::is_misaligned),
            kind: f.kind,
            signature: f.signature(),
            seed: seed.clone(),
        })
        .collect()
}

/// A bug's first entry, from the case that first showed it.
fn new_bug(key: &BugKey, members: &[Member], idx: &[usize], summary: &str) -> Bug {
    let own = idx.iter().map(|&m| &members[m]).find(|m| m.key.as_ref() == Some(key)).or_else(|| idx.first().map(|&m| &members[m]));
    let (what, site) = match key {
        BugKey::Site { site, access, .. } => (access.clone(), (site != "-").then(|| site.clone())),
        BugKey::Native { kind, .. } => (kind.name().to_string(), None),
    };
    let tensor = match key {
        BugKey::Native { tensor, .. } => tensor.clone(),
        BugKey::Site { .. } => own.and_then(|m| m.tensor.clone()),
    };
    Bug {
        id: key.id(),
        key: key.clone(),
        kernel: key.kernel().to_string(),
        what,
        tensor,
        site,
        oracle: own.map(|m| m.oracle).unwrap_or(Oracle::CudaStatus),
        cases: 0,
        findings: 0,
        signatures: Vec::new(),
        first_case: summary.to_string(),
        smallest: None,
        examples: Vec::new(),
        provisional: Vec::new(),
    }
}

/// Whether a native finding and a sanitizer record of the same case can be the same bug: a
/// misaligned fault only with a misaligned access; a value symptom with any site; a memory
/// finding in a tensor (canary damage, changed input, fault) only with a record in that tensor
/// (or in none the tool could name).
fn compatible(native: &Member, site: &Member) -> bool {
    if native.kind == FindingKind::MisalignedAddress {
        return site.misaligned;
    }
    // A symptom in an output's values (a NaN, a wrong, unwritten or unstable element) shows
    // where the damage arrived, not where the bad access was: a read past b's end leaks its NaN
    // into c. Any site the sanitizer named in the same case can be its cause.
    if matches!(native.kind, FindingKind::NanLeak | FindingKind::NumericalError | FindingKind::UnwrittenOutput | FindingKind::Nondeterminism) {
        return true;
    }
    match (&native.tensor, &site.tensor) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// The mappings one case teaches: natives to the compatible sites beside them, or, with no
/// site, every native to the first native.
fn learn(members: &[Member]) -> Vec<Alias> {
    let sites: Vec<&Member> = members.iter().filter(|m| matches!(m.key, Some(BugKey::Site { .. }))).collect();
    let natives: Vec<&Member> = members.iter().filter(|m| matches!(m.key, Some(BugKey::Native { .. }))).collect();
    let mut out = Vec::new();
    if sites.is_empty() {
        let Some(primary) = natives.iter().filter_map(|m| m.key.clone()).min() else { return out };
        for n in &natives {
            let from = n.key.clone().expect("natives have keys");
            if from != primary {
                out.push(Alias { from, to: primary.clone(), when_unaligned: None });
            }
        }
        return out;
    }
    for n in &natives {
        for s in sites.iter().filter(|s| compatible(n, s)) {
            let when_unaligned = if s.misaligned { s.tensor.clone() } else { None };
            out.push(Alias { from: n.key.clone().expect("natives have keys"), to: s.key.clone().expect("sites have keys"), when_unaligned });
        }
    }
    out
}

/// Applies mappings: native keys seen together are one (union-find, named by the least key);
/// a native's cases go to the least site whose mapping holds for the case.
struct Resolver<'a> {
    parent: BTreeMap<&'a BugKey, &'a BugKey>,
    to_sites: Vec<&'a Alias>,
}

impl<'a> Resolver<'a> {
    fn new(aliases: &'a BTreeSet<Alias>) -> Resolver<'a> {
        let mut r = Resolver { parent: BTreeMap::new(), to_sites: Vec::new() };
        for a in aliases {
            if a.to.is_provisional() {
                let (x, y) = (r.root(&a.from), r.root(&a.to));
                if x != y {
                    // The least key names the group, whatever order the mappings came in.
                    let (lo, hi) = if x < y { (x, y) } else { (y, x) };
                    r.parent.insert(hi, lo);
                }
            } else {
                r.to_sites.push(a);
            }
        }
        r
    }

    fn root(&self, k: &'a BugKey) -> &'a BugKey {
        let mut k = k;
        while let Some(p) = self.parent.get(k) {
            k = p;
        }
        k
    }

    /// The final key of a native finding's `key` in a case with these alignments.
    fn resolve(&self, key: &BugKey, alignment: &[(String, u64)]) -> BugKey {
        if !key.is_provisional() {
            return key.clone();
        }
        let root = self.group_of(key);
        let site = self.to_sites.iter().filter(|a| self.group_of(&a.from) == root && a.holds(alignment)).map(|a| &a.to).min();
        site.cloned().unwrap_or(root)
    }

    /// The key naming `k`'s group of natives.
    fn group_of(&self, k: &BugKey) -> BugKey {
        let mut k = k;
        while let Some(p) = self.parent.get(k) {
            k = p;
        }
        k.clone()
    }
}

/// The bugs of one case, each with the indices of the case's members filed under it.
fn file_case(case: &CaseEntry, r: &Resolver<'_>) -> Vec<(BugKey, Vec<usize>)> {
    let mut filed: Vec<(BugKey, Vec<usize>)> = Vec::new();
    fn put(filed: &mut Vec<(BugKey, Vec<usize>)>, key: BugKey, m: usize) {
        match filed.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(m),
            None => filed.push((key, vec![m])),
        }
    }
    let mut sites: Vec<&BugKey> = case.members.iter().filter_map(|m| m.key.as_ref()).filter(|k| !k.is_provisional()).collect();
    sites.sort();
    sites.dedup();
    let mut evidence = Vec::new();
    let mut natives = Vec::new();
    for (i, m) in case.members.iter().enumerate() {
        match &m.key {
            None => evidence.push(i),
            Some(k) if !k.is_provisional() => put(&mut filed, k.clone(), i),
            Some(_) => natives.push(i),
        }
    }
    // With no site in the case, its native findings are one bug, named by the least key.
    let primary = case.members.iter().filter_map(|m| m.key.as_ref()).filter(|k| k.is_provisional()).min().map(|k| r.resolve(k, &case.alignment));
    for i in natives {
        let m = &case.members[i];
        let own_site = sites.iter().find(|s| case.members.iter().any(|x| x.key.as_ref() == Some(**s) && compatible(m, x)));
        let key = match (own_site, &primary) {
            (Some(s), _) => (*s).clone(),
            (None, Some(p)) if sites.is_empty() => p.clone(),
            _ => r.resolve(m.key.as_ref().expect("natives have keys"), &case.alignment),
        };
        put(&mut filed, key, i);
    }
    if let Some(first) = filed.first().map(|(k, _)| k.clone()) {
        for i in evidence {
            put(&mut filed, first.clone(), i);
        }
    }
    filed
}
