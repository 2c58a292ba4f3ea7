//! The command line as a user meets it: exit statuses, messages that name the file and field,
//! and the no-GPU path.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cudafuzz::core::case::Case;
use cudafuzz::core::corpus::Seed;
use cudafuzz::core::exit;
use cudafuzz::core::plan::{admits, Plan};

mod common;
use common::{attention_example_named, exe, manifest};

/// The example case of simple_attn, naming its kernel the way a user's seed does.
fn example() -> Case {
    attention_example_named("kernels/testing/simple_attn.toml", "simple_attn")
}

fn cudafuzz(args: &[&str]) -> Output {
    Command::new(exe()).current_dir(env!("CARGO_MANIFEST_DIR")).args(args).output().expect("the binary runs")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn write_seed(dir: &tempfile::TempDir, name: &str, case: Case) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, Seed::new(case).to_json()).unwrap();
    p
}

/// The columns of a plan table row, a bracketed list (`[1, 2, 65, 64]`) counting as one.
fn columns(row: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut depth = 0;
    for word in row.split_whitespace() {
        if depth > 0 {
            let last = out.last_mut().expect("a list was opened");
            last.push(' ');
            last.push_str(word);
        } else {
            out.push(word.to_string());
        }
        depth += word.matches('[').count() as i32 - word.matches(']').count() as i32;
    }
    out
}

#[test]
fn kernels_checks_the_manifests_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "format = 2\nname = \"broken\"\n").unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let softmax = root.join("kernels/norm/softmax.toml");
    let o = cudafuzz(&["kernels", softmax.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::OK), "{out}{err}");
    assert!(out.contains("softmax") && out.contains("1 manifests load, 0 do not"), "{out}");
    // A folder is every manifest in it; a broken one and a missing path are errors naming them.
    let missing = dir.path().join("missing.toml");
    let o = cudafuzz(&["kernels", root.join("kernels/python").to_str().unwrap(), broken.to_str().unwrap(), missing.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{out}{err}");
    assert!(out.contains("triton_softmax") && out.contains("cupy_softmax"), "{out}");
    assert!(out.contains("broken.toml") && out.contains("missing.toml: no such file or folder") && out.contains("2 do not"), "{out}");
}

#[test]
fn case_check_exits_0_inside_the_contract_and_1_outside() {
    let dir = tempfile::tempdir().unwrap();
    let inside = write_seed(&dir, "inside.json", example());
    assert_eq!(cudafuzz(&["case", "check", inside.to_str().unwrap()]).status.code(), Some(exit::OK));
    // q is 2-byte aligned in simple_attn's contract: an odd base offset is outside it.
    let mut case = example();
    case.layout_mut("q").offset_bytes = 1;
    let outside = write_seed(&dir, "outside.json", case);
    let o = cudafuzz(&["case", "check", outside.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::OUTSIDE_CONTRACT), "{out}{err}");
    assert!(out.contains("OUTSIDE"), "{out}");
}

#[test]
fn case_check_reports_q_residue_8() {
    let dir = tempfile::tempdir().unwrap();
    let mut case = example();
    case.layout_mut("q").offset_bytes = 8;
    let p = write_seed(&dir, "q8.json", case);
    let o = cudafuzz(&["case", "check", p.to_str().unwrap(), "--kernel", "kernels/testing/vec_load_q.toml"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::OK), "{out}{err}");
    let q_row = out.lines().find(|l| l.starts_with("q ")).expect("a row for q");
    let cols = columns(q_row);
    // tensor, role, type, order, shape, strides, offset, span bytes, ptr%16, stride_bytes%16, align
    assert_eq!(cols.len(), 11, "{q_row}");
    assert_eq!((cols[1].as_str(), cols[2].as_str()), ("input", "f16"), "{q_row}");
    assert_eq!(cols[4], "[1, 2, 65, 64]", "shape column: {q_row}");
    assert_eq!(cols[6], "8", "offset column: {q_row}");
    assert_eq!(cols[8], "8", "ptr%16 column: {q_row}");
    assert_eq!(cols[10], "8", "an 8-byte base with 16-byte-multiple pitches is 8-byte aligned: {q_row}");
    let k_row = out.lines().find(|l| l.starts_with("k ")).expect("a row for k");
    assert_eq!(columns(k_row)[8], "0", "k stays at offset 0: {k_row}");
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
    // Another kernel's example names its own tensors (flash_fwd has an lse output).
    let o = cudafuzz(&["case", "example", "--kernel", "flash_fwd"]);
    assert_eq!(o.status.code(), Some(exit::OK));
    std::fs::write(&p, &o.stdout).unwrap();
    let o = cudafuzz(&["case", "check", p.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::OK), "{out}{err}");
    assert!(out.lines().any(|l| l.starts_with("lse ")) && out.contains("contract of flash_fwd: inside"), "{out}");
}

#[test]
fn bad_inputs_exit_2_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut v = serde_json::to_value(Seed::new(example())).unwrap();
    v["case"]["tensors"]["k"]["pad"] = serde_json::json!([4, 0, 0, 0]);
    let p = dir.path().join("padded.json");
    std::fs::write(&p, v.to_string()).unwrap();
    let o = cudafuzz(&["case", "check", p.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{err}");
    assert!(err.contains("padded.json") && err.contains("tensors.k.pad"), "{err}");

    // A tensor the kernel does not declare is named with the ones it does.
    let mut stray = serde_json::to_value(Seed::new(example())).unwrap();
    stray["case"]["tensors"]["lse"]["offset_bytes"] = 0.into();
    let p = dir.path().join("stray.json");
    std::fs::write(&p, stray.to_string()).unwrap();
    let o = cudafuzz(&["case", "check", p.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{err}");
    assert!(err.contains("stray.json") && err.contains("tensors.lse") && err.contains("q, k, v, o"), "{err}");

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
    assert_eq!(seed.case.kernel, "simple_attn", "a shipped kernel is named by name");
    // The decoder stays inside the kernel's contract, so the seed plans and is admitted.
    let m = manifest("kernels/testing/simple_attn.toml");
    let case = m.bind(seed.case);
    Plan::new(&case, &m).unwrap_or_else(|e| panic!("{e}"));
    assert!(admits(&m, &case), "{}", case.summary());
}

/// A seed of format 1 (the attention-only model) checks as it is, and `case migrate` rewrites
/// it as a seed of today's format holding the same case, its kernel named as today's seeds
/// name it, never over an existing file.
#[test]
fn format_1_seeds_check_and_migrate() {
    let old = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/seeds-v1/oob_read_k.json");
    let o = cudafuzz(&["case", "check", old]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::OK), "{out}{err}");
    // Format 1 drew the scale but accepted any; format 2 makes the drawn choices the contract,
    // so this seed (scale 0.125 at head_dim 40) is judged but no longer inside it.
    assert!(out.contains("head_dim=40") && out.contains("contract of oob_read_k: "), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("oob_read_k.v2.json");
    let o = cudafuzz(&["case", "migrate", old, "-o", new.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::OK), "{out}{err}");
    let text_v2 = std::fs::read_to_string(&new).unwrap();
    let raw: serde_json::Value = serde_json::from_str(&text_v2).unwrap();
    let current = cudafuzz::core::corpus::SEED_VERSION as u64;
    assert_eq!((raw["version"].as_u64(), raw["case"]["version"].as_u64()), (Some(current), Some(2)), "{text_v2}");
    assert_eq!(raw["case"]["dims"]["head_dim"], 40, "{text_v2}");
    assert_eq!(raw["case"]["kernel"], "oob_read_k", "the shipped kernel by name: {text_v2}");
    let (migrated, _) = cudafuzz::core::corpus::load(&new, None).unwrap();
    let (mut read_old, _) = cudafuzz::core::corpus::load(std::path::Path::new(old), None).unwrap();
    read_old.case.kernel = "oob_read_k".into();
    assert_eq!(migrated, read_old, "migrating on read and migrating the file agree");
    let o = cudafuzz(&["case", "migrate", old, "-o", new.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{err}");
    assert!(err.contains("exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&new).unwrap(), text_v2, "the existing file is left alone");
}

/// A seed file reads back the exact case it was written with: JSON numbers are parsed to the
/// nearest f64, so a scale that is an f32 (`1 / sqrt(108)`) keeps every bit, and a case's
/// content hash does not change when it is loaded.
#[test]
fn seed_files_keep_every_bit() {
    let dir = tempfile::tempdir().unwrap();
    let mut case = example();
    case.scalars.insert("scale".into(), cudafuzz::core::case::Scalar::Float(0.09622504562139512));
    let p = write_seed(&dir, "exact.json", case.clone());
    let (seed, _) = cudafuzz::core::corpus::load(&p, None).unwrap();
    assert_eq!(seed.case, case);
    assert_eq!(cudafuzz::core::corpus::case_hash(&seed.case), cudafuzz::core::corpus::case_hash(&case));
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
    if !common::env::have(common::env::Need::NoGpu) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = write_seed(&dir, "c.json", example());
    let out_dir = dir.path().join("out");
    let o = cudafuzz(&["run", "--out", out_dir.to_str().unwrap(), p.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::NO_GPU), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("NO GPU"), "{err}");
    let o = cudafuzz(&["repro", p.to_str().unwrap(), "--out", out_dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::NO_GPU));
    let o = cudafuzz(&["minimize", p.to_str().unwrap(), "--out", out_dir.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(exit::NO_GPU), "minimize: {err}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing saved beside the seed, and no out/: a run that stops before its first case creates nothing"
    );
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

#[test]
fn bench_against_another_kernel_is_refused_before_the_gpu() {
    let o = cudafuzz(&["bench", "--kernel", "simple_attn", "--against", "kernels/norm/softmax.toml"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("bench --against kernels/norm/softmax.toml: it cannot run the cases of") && err.contains("same tensors, dims and scalars"), "{err}");
}

#[test]
fn bench_floor_measures_on_a_gpu_and_says_no_gpu_without_one() {
    let o = cudafuzz(&["bench", "--floor", "--jobs", "2", "--floor-bytes", "4096"]);
    let (out, err) = text(&o);
    if common::lacks_gpu(false) {
        assert_eq!(o.status.code(), Some(exit::NO_GPU), "{out}{err}");
        assert!(err.contains("NO GPU"), "{err}");
        return;
    }
    assert_eq!(o.status.code(), Some(exit::OK), "{out}{err}");
    // Three configurations, in one process and in two.
    assert_eq!(out.lines().filter(|l| l.starts_with("4096 B up, empty kernel")).count(), 6, "{out}");
}

#[test]
fn mps_that_cannot_start_is_an_error_naming_the_way_without_it() {
    if cudafuzz::run::supervisor::mps::on_path() {
        println!("SKIP mps_that_cannot_start_is_an_error_naming_the_way_without_it: {} is installed here", cudafuzz::run::supervisor::mps::CONTROL);
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let o = cudafuzz(&["fuzz", "--kernel", "simple_attn", "--cases", "4", "--jobs", "2", "--gpu-sharing", "mps", "--out", out.path().to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(cudafuzz::core::exit::SETUP), "{err}");
    assert!(err.contains("--gpu-sharing mps") && err.contains("nvidia-cuda-mps-control") && err.contains("--gpu-sharing turns"), "{err}");
}
