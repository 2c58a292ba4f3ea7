//! What users read, pinned as snapshots (`insta`; the `.snap` files under tests/snapshots/ are
//! the reviewed text): the bug table, a new bug's line, and what a machine without a GPU says.
//! A change to any of them shows up as a snapshot diff to review (`cargo insta review`, or
//! `INSTA_UPDATE=always` and read the diff), never silently.

use std::path::Path;
use std::process::Output;

use cudafuzz::core::triage::{bug_line, scan::scan};

mod common;
use common::env::{have, Need};

fn cudafuzz_in(cwd: &Path, args: &[&str]) -> Output {
    common::cudafuzz_in(cwd, args, &[])
}

#[test]
fn the_bug_table_of_committed_seeds() {
    let o = cudafuzz_in(&common::root(), &["triage", "tests/fixtures/triage"]);
    assert_eq!(o.status.code(), Some(0));
    insta::assert_snapshot!(String::from_utf8_lossy(&o.stdout));
}

#[test]
fn a_new_bugs_line_names_it_by_site_and_tensor() {
    let s = scan(&[common::root().join("tests/fixtures/triage/gate-fa_s512")]).unwrap();
    let lines: Vec<String> = s.triage.bugs().iter().map(bug_line).collect();
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn without_a_gpu_run_says_so_in_one_line() {
    if !have(Need::NoGpu) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = cudafuzz_in(dir.path(), &["case", "example", "--kernel", "simple_attn"]);
    std::fs::write(dir.path().join("case.json"), &o.stdout).unwrap();
    let o = cudafuzz_in(dir.path(), &["run", "case.json", "--out", "out"]);
    assert_eq!(o.status.code(), Some(cudafuzz::core::exit::NO_GPU));
    insta::assert_snapshot!(format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)));
}

#[test]
fn without_a_gpu_fuzz_says_so_and_does_the_host_side_work() {
    if !have(Need::NoGpu) || !have(Need::Nvrtc) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o =
        common::cudafuzz_in(dir.path(), &["fuzz", "--kernel", "vec_load_q", "--cases", "50", "--out", "out"], &[("CUDAFUZZ_CACHE", &dir.path().join("cache"))]);
    assert_eq!(o.status.code(), Some(cudafuzz::core::exit::NO_GPU));
    // Build times vary: they are replaced before the comparison.
    let text = format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let stable = regex_lite_seconds(&text);
    insta::assert_snapshot!(stable);
}

/// `text` with every `<number> s` (a measured time) written as `<T> s`.
fn regex_lite_seconds(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let mut fixed = Vec::with_capacity(words.len());
        for (i, w) in words.iter().enumerate() {
            let is_time = w.parse::<f64>().is_ok() && w.contains('.') && words.get(i + 1).is_some_and(|n| n.starts_with('s'));
            fixed.push(if is_time { "<T>" } else { w });
        }
        out.push_str(&fixed.join(" "));
        out.push('\n');
    }
    out
}
