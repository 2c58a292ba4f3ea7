//! `cudafuzz triage` on real seed files written on an H100 (tests/fixtures/triage/README.md):
//! each planted bug is one bug, fa_s512's many signatures are its four real sites, ids are
//! stable, and no file is touched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use cudafuzz::core::triage::scan::scan;
use cudafuzz::core::triage::{Bug, BugIndex, Triage};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/triage")
}

fn bugs_of(dirs: &[PathBuf]) -> Vec<Bug> {
    let s = scan(dirs).expect("the fixtures exist");
    assert!(s.skipped.is_empty(), "every fixture is a seed with a finding: {:?}", s.skipped);
    s.triage.bugs()
}

#[test]
fn fa_s512_signatures_become_its_four_misaligned_sites() {
    let dir = fixtures().join("gate-fa_s512");
    let scan = scan(std::slice::from_ref(&dir)).unwrap();
    assert_eq!(scan.seeds, 27);
    let signatures: std::collections::BTreeSet<_> = scan.triage.bugs().iter().flat_map(|b| b.signatures.clone()).collect();
    assert_eq!(signatures.len(), 17, "the gate reported 17 new findings (signatures)");
    let bugs = scan.triage.bugs();
    let mut sites: Vec<(String, String, Option<String>)> =
        bugs.iter().map(|b| (b.site.clone().unwrap_or_default(), b.what.clone(), b.tensor.clone())).collect();
    sites.sort();
    let want = [
        ("fa_s512.cu:153", "invalid_global_read_misaligned", "q"),
        ("fa_s512.cu:188", "invalid_global_read_misaligned", "k"),
        ("fa_s512.cu:209", "invalid_global_read_misaligned", "v"),
        ("fa_s512.cu:338", "invalid_global_write_misaligned", "o"),
    ];
    let want: Vec<(String, String, Option<String>)> = want.iter().map(|(s, w, t)| (s.to_string(), w.to_string(), Some(t.to_string()))).collect();
    assert_eq!(sites, want, "{bugs:#?}");
    assert!(bugs.iter().all(|b| b.id.as_str().starts_with('B') && b.kernel == "fa_s512"));
    // Every case is filed under a site: the 19 that memcheck never saw through the mappings the
    // 4 escalated ones taught (the tensor it named is unaligned in them too).
    assert_eq!(bugs.iter().map(|b| b.cases).sum::<u64>(), 23);
    assert_eq!(bugs.iter().map(|b| b.findings).sum::<u64>(), 27);
    // One representative per bug, every other seed an example: none lost.
    let listed: usize = bugs.iter().map(|b| usize::from(b.smallest.is_some()) + b.examples.len()).sum();
    assert_eq!(listed, 27);
}

#[test]
fn each_mutant_is_one_bug() {
    for group in ["ttff", "format1"] {
        for entry in std::fs::read_dir(fixtures().join(group)).unwrap() {
            let dir = entry.unwrap().path();
            let bugs = bugs_of(std::slice::from_ref(&dir));
            assert_eq!(bugs.len(), 1, "{}: {bugs:#?}", dir.display());
        }
    }
    // All together: one bug per mutant (fa_s512 in ttff/ is a native fault: one provisional
    // bug), with fa_s512's gate its four sites, the ttff fault filed under one of them.
    let all = bugs_of(&[fixtures()]);
    let mutants = std::fs::read_dir(fixtures().join("ttff")).unwrap().count() - 1;
    assert_eq!(all.len(), mutants + 4, "{:#?}", all.iter().map(|b| (&b.id, &b.kernel, &b.what)).collect::<Vec<_>>());
    let fa: Vec<&Bug> = all.iter().filter(|b| b.kernel == "fa_s512").collect();
    assert_eq!(fa.len(), 4);
    assert_eq!(fa.iter().map(|b| b.cases).sum::<u64>(), 24);
    // format-1 seeds of read_o and seqk_tail are the same bugs as the format-2 ones.
    assert_eq!(all.iter().filter(|b| b.kernel == "flash_mut_read_o").count(), 1);
    assert_eq!(all.iter().find(|b| b.kernel == "flash_mut_read_o").unwrap().cases, 2);
}

#[test]
fn a_case_gets_its_site_id_through_the_index_without_its_own_escalation() {
    let lone = fixtures().join("ttff/fa_s512");
    let alone = bugs_of(std::slice::from_ref(&lone));
    assert_eq!(alone.len(), 1);
    assert!(alone[0].id.as_str().starts_with('P'), "natively known only: provisional");
    // The gate's index, written where a run writes it, lends its mappings.
    let gate = scan(&[fixtures().join("gate-fa_s512")]).unwrap();
    let out = tempfile::tempdir().unwrap();
    let index = BugIndex::new(&gate.triage, &fixtures());
    index.write(out.path()).unwrap();
    let loaded = BugIndex::load(&out.path().join("bugs.json")).unwrap();
    assert_eq!(loaded, index);
    let mut t = Triage::new();
    loaded.aliases().for_each(|a| t.add_alias(a));
    assert_eq!(t.aliases().count(), index.aliases.len());
    let s = scan(&[lone, out.path().to_path_buf()]).unwrap();
    assert_eq!(s.indexes.len(), 1);
    let bugs = s.triage.bugs();
    assert_eq!(bugs.len(), 1);
    assert!(index.bugs.iter().any(|b| b.id == bugs[0].id), "filed under one of the gate's sites: {:?}", bugs[0]);
    assert_eq!(bugs[0].provisional, alone.iter().map(|b| b.id.clone()).collect::<Vec<_>>());
}

#[test]
fn ids_are_stable_and_do_not_depend_on_order_or_location() {
    let ids = |dirs: &[PathBuf]| -> Vec<String> {
        let mut v: Vec<String> = bugs_of(dirs).iter().map(|b| b.id.to_string()).collect();
        v.sort();
        v
    };
    let all = ids(&[fixtures()]);
    // Listed the other way round, or copied elsewhere: the same ids.
    let mut parts: Vec<PathBuf> = ["gate-fa_s512", "ttff", "format1"].iter().map(|p| fixtures().join(p)).collect();
    parts.reverse();
    assert_eq!(ids(&parts), all);
    let copy = tempfile::tempdir().unwrap();
    copy_tree(&fixtures(), copy.path());
    assert_eq!(ids(&[copy.path().to_path_buf()]), all);
    // Pinned: fa_s512's v load (an id printed in reports and committed in bug indexes).
    assert!(all.contains(&"B46c72e8731".to_string()), "{all:?}");
}

#[test]
fn triage_touches_no_file() {
    let before = snapshot(&fixtures());
    let _ = bugs_of(&[fixtures()]);
    assert_eq!(snapshot(&fixtures()), before);
}

fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(snapshot(&p));
        } else {
            out.insert(p.clone(), (std::fs::read(&p).unwrap(), std::fs::metadata(&p).unwrap().modified().unwrap()));
        }
    }
    out
}

fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}
