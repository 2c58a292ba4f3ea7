use super::*;
use crate::core::finding::{Oracle, SanitizerKind, SourceLocation};

fn native(kind: FindingKind, tensor: Option<&str>, alignment: [u64; 4]) -> Finding {
    let oracle = if kind.is_fault() { Oracle::CudaStatus } else { Oracle::Reference };
    Finding { kind, oracle, tensor: tensor.map(String::from), ..crate::testing::misaligned_fault("fa[BLOCK_M=64]", alignment) }
}

fn site(tensor: &str, line: u32, kind: &str, alignment: [u64; 4]) -> Finding {
    Finding {
        kind: FindingKind::SanitizerMemory,
        oracle: Oracle::Memcheck,
        tensor: Some(tensor.into()),
        source: Some(SourceLocation { file: "fa.cu".into(), line, function: None }),
        access_size: Some(16),
        sanitizer_kind: Some(SanitizerKind::from(kind)),
        ..native(FindingKind::MisalignedAddress, None, alignment)
    }
}

const MIS: &str = "invalid_global_read_misaligned";

#[test]
fn unaligned_sets_and_parameters_do_not_split_a_bug() {
    let mut t = Triage::new();
    for (i, al) in [[8, 16, 16, 16], [8, 2, 16, 16], [16, 4, 4, 16]].into_iter().enumerate() {
        let mut f = native(FindingKind::MisalignedAddress, None, al);
        f.kernel = format!("fa[BLOCK_M={}]", 64 << i);
        t.observe(&format!("c{i}"), "case", 10, vec![(f, None)]);
    }
    let bugs = t.bugs();
    assert_eq!(bugs.len(), 1, "{bugs:#?}");
    assert!(bugs[0].id.as_str().starts_with('P') && bugs[0].cases == 3 && bugs[0].signatures.len() == 3);
}

#[test]
fn a_sanitizer_site_takes_over_the_cases_it_explains_and_distinct_sites_stay_apart() {
    let mut t = Triage::new();
    // Case 0: q unaligned, escalated: memcheck names q's load at line 10.
    t.observe("c0", "c0", 10, vec![(native(FindingKind::MisalignedAddress, None, [8, 16, 16, 16]), None)]);
    let provisional = t.bugs_of("c0");
    assert!(provisional[0].as_str().starts_with('P'));
    t.observe("c0", "c0", 10, vec![(site("q", 10, MIS, [8, 16, 16, 16]), None)]);
    let q_bug = t.bugs_of("c0");
    assert_eq!(q_bug.len(), 1);
    assert!(q_bug[0].as_str().starts_with('B'));
    // Case 1: q and k unaligned, never escalated: q's site (the mapping holds: q unaligned).
    t.observe("c1", "c1", 5, vec![(native(FindingKind::MisalignedAddress, None, [4, 2, 16, 16]), None)]);
    assert_eq!(t.bugs_of("c1"), q_bug);
    // Case 2: only k unaligned: not q's bug; provisional until k's site is named.
    t.observe("c2", "c2", 5, vec![(native(FindingKind::MisalignedAddress, None, [16, 2, 16, 16]), None)]);
    assert_eq!(t.bugs_of("c2"), provisional);
    t.observe("c3", "c3", 7, vec![(native(FindingKind::MisalignedAddress, None, [16, 8, 16, 16]), None), (site("k", 20, MIS, [16, 8, 16, 16]), None)]);
    let k_bug = t.bugs_of("c3");
    assert_ne!(k_bug, q_bug, "distinct sites stay distinct bugs");
    assert_eq!(t.bugs_of("c2"), k_bug, "the mapping learnt later re-files the earlier case");
    let bugs = t.bugs();
    assert_eq!(bugs.len(), 2, "{bugs:#?}");
    assert_eq!((bugs[0].cases, bugs[1].cases), (2, 2));
    assert_eq!(bugs[0].site.as_deref(), Some("fa.cu:10"));
    assert_eq!(bugs[0].provisional, provisional);
}

#[test]
fn a_sanitizer_abort_is_evidence_not_a_bug() {
    let mut t = Triage::new();
    let oob = site("k", 42, "invalid_global_read_out_of_bounds", [16; 4]);
    let abort = native(FindingKind::LaunchFailure, None, [16; 4]);
    t.observe("c0", "c0", 1, vec![(oob.clone(), None), (abort.clone(), None)]);
    let bugs = t.bugs();
    assert_eq!(bugs.len(), 1, "{bugs:#?}");
    assert_eq!((bugs[0].findings, bugs[0].cases), (2, 1));
    // Natively, with no sanitizer in the case, a 719 is a finding of its own.
    t.observe("c1", "c1", 1, vec![(abort, None)]);
    assert_eq!(t.bugs().len(), 2);
}

#[test]
fn native_findings_of_one_case_are_one_bug() {
    let mut t = Triage::new();
    t.observe("c0", "c0", 1, vec![(native(FindingKind::NanLeak, Some("o"), [16; 4]), None), (native(FindingKind::NumericalError, Some("lse"), [16; 4]), None)]);
    t.observe("c1", "c1", 1, vec![(native(FindingKind::NumericalError, Some("lse"), [16; 4]), None)]);
    t.observe(
        "c2",
        "c2",
        1,
        vec![(native(FindingKind::NumericalError, Some("lse"), [16; 4]), None), (native(FindingKind::Nondeterminism, Some("o"), [16; 4]), None)],
    );
    let bugs = t.bugs();
    assert_eq!(bugs.len(), 1, "{bugs:#?}");
    assert_eq!(bugs[0].what, "nan_leak");
    assert_eq!(bugs[0].cases, 3);
}

#[test]
fn a_value_symptom_in_one_tensor_goes_to_the_site_that_read_another() {
    // gemm_tail_tile on an H100: a NaN read past b's end shows in c; memcheck names the read.
    let mut t = Triage::new();
    t.observe("c0", "c0", 1, vec![(native(FindingKind::NanLeak, Some("c"), [16; 4]), None)]);
    t.observe("c0", "c0", 1, vec![(site("b", 82, "invalid_global_read_out_of_bounds", [16; 4]), None)]);
    let bugs = t.bugs();
    assert_eq!(bugs.len(), 1, "{bugs:#?}");
    assert!(bugs[0].id.as_str().starts_with('B'));
    // A memory finding keeps to its tensor: canary damage in c is not b's read.
    let mut t = Triage::new();
    t.observe("c0", "c0", 1, vec![(native(FindingKind::CanaryDamage, Some("c"), [16; 4]), None)]);
    t.observe("c0", "c0", 1, vec![(site("b", 82, "invalid_global_read_out_of_bounds", [16; 4]), None)]);
    assert_eq!(t.bugs().len(), 2);
}

#[test]
fn a_tie_between_seeds_of_one_case_survives_arranging() {
    let mut t = Triage::new();
    let f = native(FindingKind::CanaryDamage, Some("o"), [16; 4]);
    t.observe("c0", "c0", 5, vec![(f.clone(), Some("s/k-canary-aa.json".into()))]);
    t.observe("c0", "c0", 5, vec![(native(FindingKind::NanLeak, Some("o"), [16; 4]), Some("s/k-canary-aa-2.json".into()))]);
    let before = t.bugs()[0].smallest.clone().unwrap();
    let other = if before.ends_with("k-canary-aa.json") { "k-canary-aa-2.json" } else { "k-canary-aa.json" };
    let bug_id = t.bugs()[0].id.clone();
    t.rename_seed(&std::path::Path::new("s").join(other), &std::path::Path::new("s").join(bug_id.as_str()).join("examples").join(other));
    assert_eq!(t.bugs()[0].smallest.as_ref(), Some(&before));
}

#[test]
fn ids_are_the_hash_of_the_key_text() {
    let key = BugKey::of(&site("v", 209, MIS, [16; 4]), false).unwrap();
    assert_eq!(key.to_string(), "site/fa/fa.cu:209/invalid_global_read_misaligned");
    // Pinned: a change here changes every user's bug ids.
    assert_eq!(key.id().as_str(), "B47a271bf22");
    let native_key = BugKey::of(&native(FindingKind::MisalignedAddress, None, [8, 16, 16, 16]), false).unwrap();
    assert_eq!(native_key.to_string(), "native/fa/misaligned_address/-");
    assert!(native_key.id().as_str().starts_with('P'));
}

#[test]
fn the_smallest_seed_represents_the_bug() {
    let mut t = Triage::new();
    let f = native(FindingKind::CanaryDamage, Some("o"), [16; 4]);
    t.observe("big", "big", 100, vec![(f.clone(), Some("s/big.json".into()))]);
    t.observe("small", "small", 3, vec![(f.clone(), Some("s/small.json".into()))]);
    t.observe("mid", "mid", 50, vec![(f, Some("s/mid.json".into()))]);
    let b = &t.bugs()[0];
    assert_eq!(b.smallest.as_deref(), Some(std::path::Path::new("s/small.json")));
    assert_eq!(b.examples, [std::path::PathBuf::from("s/mid.json"), "s/big.json".into()]);
    assert_eq!(b.first_case, "big");
}

#[test]
fn arrange_moves_seeds_without_losing_or_replacing_any() {
    let dir = tempfile::tempdir().unwrap();
    let seeds = dir.path().join("seeds");
    std::fs::create_dir_all(&seeds).unwrap();
    let f = native(FindingKind::CanaryDamage, Some("o"), [16; 4]);
    let mut t = Triage::new();
    for (name, size) in [("a.json", 9), ("b.json", 2)] {
        std::fs::write(seeds.join(name), name).unwrap();
        t.observe(name, name, size, vec![(f.clone(), Some(seeds.join(name)))]);
    }
    let bug = t.bugs().remove(0);
    // A file already at the example's place is not replaced.
    let ex = layout::examples_dir(&seeds, &bug);
    std::fs::create_dir_all(&ex).unwrap();
    std::fs::write(ex.join("a.json"), "other").unwrap();
    let moves = layout::arrange(&seeds, &[bug]).unwrap();
    assert_eq!(moves.len(), 1);
    assert_eq!(std::fs::read_to_string(ex.join("a.json")).unwrap(), "other");
    assert_eq!(std::fs::read_to_string(&moves[0].1).unwrap(), "a.json");
    assert_eq!(std::fs::read_to_string(seeds.join("b.json")).unwrap(), "b.json");
    assert!(!seeds.join("a.json").exists());
    for (from, to) in &moves {
        t.rename_seed(from, to);
    }
    assert_eq!(t.bugs()[0].examples, [moves[0].1.clone()]);
}

mod reports {
    use super::*;
    use crate::tools::report::export::{FindingEntry, RunReport, Step};
    use crate::tools::report::merge::merge;

    fn entry(f: Finding, case: &str, new: bool) -> FindingEntry {
        FindingEntry { signature: f.signature(), finding: f, seed: None, case: case.into(), step: Step::Fuzz, new, source_path: None, bug: None }
    }

    /// Shard 1 escalated case A (v unaligned) and saw a 719 abort in case C beside an
    /// out-of-bounds read; shard 2 saw case B (v and o unaligned) natively only.
    fn shards() -> (RunReport, RunReport) {
        let mut a = RunReport::new();
        let k = a.kernel_mut("fa");
        k.findings.push(entry(native(FindingKind::MisalignedAddress, None, [16, 16, 8, 16]), "A", true));
        k.findings.push(entry(site("v", 209, MIS, [16, 16, 8, 16]), "A", true));
        k.findings.push(entry(site("k", 99, "invalid_global_read_out_of_bounds", [16; 4]), "C", true));
        k.findings.push(entry(native(FindingKind::LaunchFailure, None, [16; 4]), "C", true));
        a.recount();
        let mut b = RunReport::new();
        b.kernel_mut("fa").findings.push(entry(native(FindingKind::MisalignedAddress, None, [16, 16, 2, 4]), "B", true));
        b.recount();
        (a, b)
    }

    #[test]
    fn reports_count_bugs_and_a_sanitizer_abort_is_not_one() {
        let (a, b) = shards();
        assert_eq!((a.counts.findings, a.counts.bugs, a.counts.new_bugs), (4, 2, 2));
        assert!(a.headline().starts_with("FAILED: 2 new bugs (4 findings)"), "{}", a.headline());
        assert_eq!(a.bug_aliases.len(), 1, "the fault maps to v's load while v is unaligned");
        // Alone, shard 2 knows only the provisional bug.
        assert!(b.kernels[0].findings[0].bug.as_ref().unwrap().as_str().starts_with('P'));
    }

    #[test]
    fn merge_applies_every_shards_mappings() {
        let (a, b) = shards();
        let m = merge(&[a.clone(), b]);
        assert_eq!((m.counts.findings, m.counts.bugs), (5, 2), "{:#?}", m.kernels[0].findings);
        let v_bug = a.kernels[0].findings[1].bug.clone();
        assert!(v_bug.as_ref().unwrap().as_str().starts_with('B'));
        let case_b = m.kernels[0].findings.iter().find(|f| f.case == "B").unwrap();
        assert_eq!(case_b.bug, v_bug, "case B gets v's site id without its own escalation");
        // An expected finding makes its bug known: a new signature of it is not a new bug.
        let mut known = m.clone();
        known.kernels[0].findings.iter_mut().filter(|f| f.case == "A").for_each(|f| f.new = false);
        known.recount();
        assert_eq!(known.counts.new_bugs, 1, "only the out-of-bounds read is new");
        assert!(known.headline().contains("1 new bug ("), "{}", known.headline());
    }
}

fn race(first: u32, other: Option<u32>, kind: &str) -> Finding {
    let at = |line| SourceLocation { file: "row_common.cuh".into(), line, function: None };
    Finding {
        kind: FindingKind::Race,
        oracle: Oracle::Racecheck,
        tensor: None,
        source: Some(at(first)),
        other_access: other.map(at),
        access_size: None,
        sanitizer_kind: Some(SanitizerKind::from(kind)),
        ..native(FindingKind::NumericalError, None, [16; 4])
    }
}

#[test]
fn the_records_of_one_missing_barrier_are_one_bug_and_a_race_read_elsewhere_another() {
    let mut t = Triage::new();
    // Read after write and write after read around the read at line 57: one barrier is missing.
    t.observe("c0", "c0", 10, vec![(race(52, Some(57), "race_shared_write_read"), None), (race(57, Some(52), "race_shared_read_write"), None)]);
    // Another write the same barrier should have ordered before that read.
    t.observe("c1", "c1", 10, vec![(race(49, Some(57), "race_shared_write_read"), None)]);
    // Another barrier, before the read at line 62.
    t.observe("c2", "c2", 10, vec![(race(59, Some(62), "race_shared_write_read"), None)]);
    let bugs = t.bugs();
    assert_eq!(bugs.len(), 2, "{bugs:#?}");
    let key = |b: &Bug| b.key.to_string();
    assert_eq!(key(&bugs[0]), "site/fa/row_common.cuh:57/race_shared_read");
    assert_eq!(bugs[0].cases, 2);
    assert_eq!(key(&bugs[1]), "site/fa/row_common.cuh:62/race_shared_read");
    // Two writes: the lesser line.
    assert_eq!(BugKey::of(&race(70, Some(66), "race_shared_write_write"), false).unwrap().to_string(), "site/fa/row_common.cuh:66/race_shared_write");
    // A race saved before the second line was kept keeps its one-line key (and id).
    let old = BugKey::of(&race(52, None, "race_shared_write_read"), false).unwrap();
    assert_eq!(old.to_string(), "site/fa/row_common.cuh:52/race_shared_write_read");
}
