//! The command line as a user meets it: exit statuses, messages that name the file and field,
//! and the no-GPU path.

use std::path::PathBuf;
use std::process::{Command, Output};

use cudafuzz::case::Case;
use cudafuzz::corpus::Seed;
use cudafuzz::exit;

/// The binary under test: `$CUDAFUZZ_BIN` (a staged copy on a GPU host), else cargo's.
fn exe() -> PathBuf {
    std::env::var_os("CUDAFUZZ_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cudafuzz")))
}

fn cudafuzz(args: &[&str]) -> Output {
    Command::new(exe())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn write_seed(dir: &tempfile::TempDir, name: &str, case: Case) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, Seed::new(case).to_json()).unwrap();
    p
}

#[test]
fn case_check_reports_q_residue_8() {
    let dir = tempfile::tempdir().unwrap();
    let mut case = Case::example("simple_attn");
    case.layouts.q.offset_bytes = 8;
    let p = write_seed(&dir, "q8.json", case);
    let o = cudafuzz(&["case", "check", p.to_str().unwrap(), "--kernel", "kernels/testing/vec_load_q.toml"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::OK), "{out}{err}");
    let q_row = out.lines().find(|l| l.starts_with("q ")).expect("a row for q");
    let cols: Vec<&str> = q_row.split_whitespace().collect();
    // t, order, shape (4 tokens), strides (4 tokens), offset, span, ptr%16, ...
    assert_eq!(cols[10], "8", "offset column: {q_row}");
    assert_eq!(cols[12], "8", "ptr%16 column: {q_row}");
    assert!(out.contains("contract of vec_load_q: inside"), "{out}");
}

#[test]
fn case_example_round_trips_through_check() {
    let o = cudafuzz(&["case", "example"]);
    assert_eq!(o.status.code(), Some(exit::OK));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("example.json");
    std::fs::write(&p, &o.stdout).unwrap();
    let o = cudafuzz(&["case", "check", p.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::OK), "{out}{err}");
    assert!(out.contains("contract of simple_attn: inside"), "{out}");
}

#[test]
fn bad_inputs_exit_2_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut v = serde_json::to_value(Seed::new(Case::example("simple_attn"))).unwrap();
    v["case"]["layouts"]["k"]["pad"] = serde_json::json!([4, 0, 0, 0]);
    let p = dir.path().join("padded.json");
    std::fs::write(&p, v.to_string()).unwrap();
    let o = cudafuzz(&["case", "check", p.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{err}");
    assert!(err.contains("padded.json") && err.contains("layouts.k.pad"), "{err}");

    let p = dir.path().join("broken.json");
    std::fs::write(&p, "{\"format\": \"cudafuzz-seed\", \"version\": 1, \"case\": {").unwrap();
    let o = cudafuzz(&["case", "check", p.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{err}");
    assert!(err.contains("broken.json") && err.contains("line 1"), "{err}");

    v["version"] = 7.into();
    let p = dir.path().join("future.json");
    std::fs::write(&p, v.to_string()).unwrap();
    let o = cudafuzz(&["case", "check", p.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{err}");
    assert!(err.contains("future.json") && err.contains("version 7"), "{err}");

    let o = cudafuzz(&["case", "check", "/nonexistent/seed.json"]);
    assert_eq!(o.status.code(), Some(exit::USAGE));
}

#[test]
fn case_decode_turns_raw_bytes_into_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("crash-abc");
    std::fs::write(&p, [1u8, 2, 3, 200, 100, 7, 9, 11, 250, 0, 0, 3]).unwrap();
    let o = cudafuzz(&["case", "decode", p.to_str().unwrap(), "--kernel", "simple_attn"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::OK), "{err}");
    let seed: Seed = serde_json::from_str(&out).unwrap();
    seed.case.validate().unwrap();
    assert!(seed.case.kernel.ends_with("simple_attn.toml"), "{}", seed.case.kernel);
}

#[test]
fn kernels_lists_the_shipped_manifests() {
    let o = cudafuzz(&["kernels"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::OK), "{out}{err}");
    for name in ["simple_attn", "vec_load_q", "oob_write", "skip_last_row", "hang", "attention_f64"] {
        assert!(out.contains(name), "{name} missing from:\n{out}");
    }
}

#[test]
fn without_a_gpu_run_says_so_in_one_line_with_a_distinct_exit() {
    if cudafuzz::gpu::device_count().is_ok() {
        eprintln!("skipped: this machine has a GPU; the no-GPU path is tested on hosts without one");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = write_seed(&dir, "c.json", Case::example("simple_attn"));
    let out_dir = dir.path().join("out");
    let o = cudafuzz(&["run", "--out", out_dir.to_str().unwrap(), p.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::NO_GPU), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("no GPU"), "{err}");
    let o = cudafuzz(&["repro", p.to_str().unwrap(), "--out", out_dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::NO_GPU));
    let o = cudafuzz(&["minimize", p.to_str().unwrap(), "--out", out_dir.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::NO_GPU), "minimize: {err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "nothing saved beside the seed (c.json, out/)");
}

#[test]
fn sanitizer_parse_reads_a_real_racecheck_file_and_rejects_a_missing_one() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sanitizer/racecheck-race.xml");
    let o = cudafuzz(&["sanitizer", "parse", fixture]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::FINDINGS), "{out}{err}");
    assert!(out.contains("sanitizer_probe.cu:22") && out.contains("256 hazards"), "{out}");
    let o = cudafuzz(&["sanitizer", "parse", "/nonexistent/run.xml"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{err}");
    assert!(err.contains("/nonexistent/run.xml") && err.contains("--xml --save"), "{err}");
}
