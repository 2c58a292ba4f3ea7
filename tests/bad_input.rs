//! Bad input as a demanding user gives it (issue 19), through the real binary: every case ends
//! with a clear error and exit 2 (or quietly with 0 when the reader of stdout went away), never
//! a panic, and leaves the user's files as they were. One group of tests per class: no panic on
//! any number or closed pipe (1), no silent wraps (2), no format guessing (3), no input
//! replaced (6), sizes (9). Classes 4, 5, 7 and 8 are in tests/bad_input_checks.rs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use cudafuzz::core::case::Dtype;
use cudafuzz::core::corpus::Seed;
use cudafuzz::core::exit;

mod common;
use common::{attention_example_named, exe, root};

const U64_MAX: &str = "18446744073709551615";

fn cudafuzz(args: &[&str]) -> Output {
    Command::new(exe()).current_dir(root()).args(args).output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The run ended with `code`, said something on stderr containing every one of `needles`, and
/// did not panic.
fn assert_exit(o: &Output, code: i32, needles: &[&str]) {
    let err = stderr(o);
    assert!(!err.contains("panicked") && o.status.code() != Some(101), "panic: {err}");
    assert_eq!(o.status.code(), Some(code), "stderr: {err}\nstdout: {}", String::from_utf8_lossy(&o.stdout));
    for n in needles {
        assert!(err.contains(n), "stderr should mention {n:?}: {err}");
    }
}

/// A seed of simple_attn's small example case, written to `dir/name`.
fn seed_file(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let case = attention_example_named("kernels/testing/simple_attn.toml", "simple_attn");
    std::fs::write(&p, Seed::new(case).to_json()).unwrap();
    p
}

/// A file's content and modification time: what "untouched" means.
fn snapshot(p: &Path) -> (Vec<u8>, SystemTime) {
    (std::fs::read(p).unwrap(), std::fs::metadata(p).unwrap().modified().unwrap())
}

// ---- 1. No panic on any input ----

/// Runs the command with a stdout whose reader is already gone: it must end quietly with 0.
fn with_closed_stdout(args: &[&str]) -> Output {
    let mut child = Command::new(exe()).current_dir(root()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary runs");
    drop(child.stdout.take());
    child.wait_with_output().expect("it ends")
}

#[test]
fn a_closed_stdout_ends_every_printing_command_with_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let seed = seed_file(dir.path(), "seed.json");
    let seed = seed.to_str().unwrap();
    let xml =
        root().join("tests/fixtures/sanitizer").read_dir().unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|x| x == "xml")).unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["kernels"],
        vec!["case", "example", "--kernel", "simple_attn"],
        vec!["case", "check", seed],
        vec!["repro", seed, "--emit", "cu", "-o", "-"],
        vec!["gate", "--config", "ci/gate.toml", "--check"],
        vec!["sanitizer", "parse", xml.to_str().unwrap()],
        vec!["contract", "--kernel", "simple_attn"],
    ];
    for args in commands {
        let o = with_closed_stdout(&args);
        assert_exit(&o, exit::OK, &[]);
        assert!(!stderr(&o).contains("Broken pipe"), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn huge_numbers_are_errors_or_saturate_never_panics() {
    let out = tempfile::tempdir().unwrap();
    let out = out.path().to_str().unwrap();
    let o = cudafuzz(&["fuzz", "--kernel", "simple_attn", "--cases", "3", "--gpu", U64_MAX, "--gpus", "1", "--out", out]);
    assert_exit(&o, exit::USAGE, &["--gpu 18446744073709551615 --gpus 1"]);
    let seed = seed_file(Path::new(out), "seed.json");
    let o = cudafuzz(&["run", "--gpu", U64_MAX, "--gpus", "1", "--out", out, seed.to_str().unwrap()]);
    assert_exit(&o, exit::USAGE, &["--gpus 1"]);
    let o = cudafuzz(&["fuzz", "--kernel", "simple_attn", "--cases", "3", "--time", &format!("{U64_MAX}m"), "--out", out]);
    assert_exit(&o, exit::USAGE, &["longer than this clock can count"]);
    let o = cudafuzz(&["contract", "--kernel", "simple_attn", "--cases-per-probe", U64_MAX, "--out", out]);
    assert_exit(&o, exit::USAGE, &["cases per probe"]);
    // Accepted values that only a long run would reach: no panic before the GPU is looked for.
    for args in [["--time", &format!("{U64_MAX}s")], ["--timeout-ms", U64_MAX], ["--seed", U64_MAX], ["--cases", U64_MAX]] {
        let o = cudafuzz(&["fuzz", "--kernel", "simple_attn", "--cases", "20", args[0], args[1], "--out", out]);
        let err = stderr(&o);
        assert!(!err.contains("panicked") && o.status.code() != Some(101), "{args:?}: {err}");
    }
}

// ---- 2. No silent wraps ----

#[test]
fn a_stride_past_a_64_bit_byte_offset_is_rejected_naming_the_pad() {
    let dir = tempfile::tempdir().unwrap();
    for (dtype, pad) in [(Dtype::F16, 2147483647u64), (Dtype::F32, 2147483647), (Dtype::F32, 1 << 31)] {
        let mut case = attention_example_named("kernels/testing/simple_attn.toml", "simple_attn");
        case.dims.insert("batch".into(), 1);
        case.dtype = dtype;
        case.layout_mut("q").pad = vec![0, pad, pad, 0];
        let p = dir.path().join(format!("pad-{dtype:?}-{pad}.json"));
        std::fs::write(&p, Seed::new(case).to_json()).unwrap();
        let o = cudafuzz(&["case", "check", p.to_str().unwrap()]);
        assert_exit(&o, exit::USAGE, &["tensors.q.pad", "stride"]);
        assert!(!String::from_utf8_lossy(&o.stdout).contains("inside"), "never judged");
    }
}

// ---- 3. No format guessing ----

#[test]
fn files_that_are_not_seeds_fail_naming_the_file_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let not_seeds: [(&str, &[u8]); 7] = [
        ("empty.json", b""),
        ("bom.json", b"\xEF\xBB\xBF{\"format\": \"cudafuzz-seed\"}"),
        ("array.json", b"[1,2,3]"),
        ("null.json", b"null"),
        ("oob_read_k.toml", b"[self_check]\nkernel = \"oob_read_k\"\n"),
        ("bytes.bin", &[7, 200, 3, 99, 0, 1, 2, 250, 17, 4, 4]),
        ("text.txt", b"hello"),
    ];
    for (name, bytes) in not_seeds {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let before = snapshot(&p);
        let path = p.to_str().unwrap();
        for args in [
            vec!["case", "check", path, "--kernel", "simple_attn"],
            vec!["repro", path, "--kernel", "simple_attn"],
            vec!["repro", path, "--kernel", "simple_attn", "--emit", "cu", "-o", "-"],
            vec!["run", "--kernel", "simple_attn", path],
            vec!["minimize", path, "--kernel", "simple_attn"],
            vec!["case", "migrate", path, "-o", "-"],
        ] {
            let o = cudafuzz(&args);
            assert_exit(&o, exit::USAGE, &[name, "not a cudafuzz seed"]);
        }
        assert_eq!(snapshot(&p), before);
    }
    let gate = dir.path().join("gate.toml");
    std::fs::write(&gate, "[self_check]\nkernel = \"oob_read_k\"\ncase = \"oob_read_k.toml\"\ntool = \"memcheck\"\nexpect = \"sanitizer_memory\"\n").unwrap();
    let o = cudafuzz(&["gate", "--config", gate.to_str().unwrap(), "--check"]);
    assert_exit(&o, exit::USAGE, &["oob_read_k.toml", "not a cudafuzz seed"]);
}

#[test]
fn raw_bytes_replay_from_libfuzzer_artifact_names_or_with_raw() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = [7u8, 200, 3, 99, 0, 1, 2, 250, 17, 4, 4, 9, 9, 1];
    for name in ["crash-0123abcd", "timeout-1", "oom-1", "leak-1", "slow-unit-1"] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let o = cudafuzz(&["case", "check", p.to_str().unwrap(), "--kernel", "simple_attn"]);
        assert_exit(&o, exit::OK, &[]);
    }
    let other = dir.path().join("input.bin");
    std::fs::write(&other, bytes).unwrap();
    let o = cudafuzz(&["case", "check", other.to_str().unwrap(), "--kernel", "simple_attn", "--raw"]);
    assert_exit(&o, exit::OK, &[]);
    let o = cudafuzz(&["case", "check", other.to_str().unwrap(), "--kernel", "simple_attn"]);
    assert_exit(&o, exit::USAGE, &["input.bin", "--raw"]);
}

// ---- 6. No input replaced ----

#[test]
fn repro_emit_never_writes_over_its_seed_even_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let seed = seed_file(dir.path(), "seed.json");
    std::fs::hard_link(&seed, dir.path().join("hard.cu")).unwrap();
    std::os::unix::fs::symlink(&seed, dir.path().join("soft.cu")).unwrap();
    let before = snapshot(&seed);
    for out in [seed.clone(), dir.path().join("hard.cu"), dir.path().join("soft.cu"), dir.path().join(".").join("seed.json")] {
        let o = cudafuzz(&["repro", seed.to_str().unwrap(), "--emit", "cu", "-o", out.to_str().unwrap(), "--force"]);
        assert_exit(&o, exit::USAGE, &["one of this command's inputs"]);
        assert_eq!(snapshot(&seed), before, "{}", out.display());
    }
}

/// Runs `cudafuzz ARGS` under `umask 022` (what a user's shell has).
fn with_umask_022(args: &[&str]) -> Output {
    Command::new("sh").current_dir(root()).arg("-c").arg("umask 022; exec \"$0\" \"$@\"").arg(exe()).args(args).output().expect("sh runs")
}

#[test]
fn report_merge_never_writes_into_a_shards_directory_and_writes_readable_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let shard = |i: u32| {
        let out = dir.path().join(format!("shard{i}"));
        // Without a GPU the gate still writes its reports (with the failed environment check).
        let o = cudafuzz(&["gate", "--config", "ci/gate.toml", "--out", out.to_str().unwrap(), "--shard", &format!("{i}/2")]);
        assert!(matches!(o.status.code(), Some(0 | 1 | 3)), "{}", stderr(&o));
        out
    };
    let (one, two) = (shard(1), shard(2));
    let files: Vec<PathBuf> = std::fs::read_dir(&one).unwrap().map(|e| e.unwrap().path()).collect();
    let before: Vec<_> = files.iter().map(|p| snapshot(p)).collect();
    let r1 = one.join("report.json");
    let r2 = two.join("report.json");
    for out in [one.clone(), one.join("..").join("shard1")] {
        let o = cudafuzz(&["report", "merge", "--out", out.to_str().unwrap(), r1.to_str().unwrap(), r2.to_str().unwrap()]);
        assert_exit(&o, exit::USAGE, &["one of this command's inputs"]);
    }
    assert_eq!(files.iter().map(|p| snapshot(p)).collect::<Vec<_>>(), before, "the shard's reports are untouched");
    let merged = dir.path().join("merged");
    let o = with_umask_022(&["report", "merge", "--out", merged.to_str().unwrap(), r1.to_str().unwrap(), r2.to_str().unwrap()]);
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    let mode = std::fs::metadata(merged.join("report.json")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "reports follow the umask, not tempfile's 0600");
}

#[test]
fn a_command_that_stops_on_a_check_creates_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // No GPU here (exit 3), or a GPU with --jobs far past what it can hold: either way the
    // command stops before running a case, and must not leave a journal per job behind.
    let o = cudafuzz(&["fuzz", "--kernel", "simple_attn", "--cases", "5", "--jobs", "100000", "--out", out.to_str().unwrap()]);
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    if o.status.code() != Some(exit::OK) && o.status.code() != Some(exit::FINDINGS) {
        let left: Vec<_> = std::fs::read_dir(&out).map(|d| d.map(|e| e.unwrap().path()).collect()).unwrap_or_default();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

// ---- 9. Sizes ----

#[test]
fn files_over_16_mib_fail_fast_whatever_their_reported_size() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let o = cudafuzz(&["case", "check", "/dev/zero"]);
    assert_exit(&o, exit::USAGE, &["/dev/zero", "is a device"]);
    assert!(t0.elapsed() < Duration::from_secs(20), "read with a limit, not to the end");
    // A seed padded past the limit with whitespace (valid JSON all the same).
    let big = dir.path().join("big.json");
    let mut text = std::fs::read(seed_file(dir.path(), "small.json")).unwrap();
    text.resize(17 << 20, b' ');
    std::fs::write(&big, text).unwrap();
    let o = cudafuzz(&["case", "check", big.to_str().unwrap()]);
    assert_exit(&o, exit::USAGE, &["big.json", "16 MiB"]);
    // A manifest and a gate configuration: TOML that is one long comment.
    let toml = dir.path().join("big.toml");
    let mut text = b"# ".to_vec();
    text.resize(17 << 20, b'x');
    std::fs::write(&toml, text).unwrap();
    let o = cudafuzz(&["case", "example", "--kernel", toml.to_str().unwrap()]);
    assert_exit(&o, exit::USAGE, &["big.toml", "16 MiB"]);
    let o = cudafuzz(&["gate", "--config", toml.to_str().unwrap(), "--check"]);
    assert_exit(&o, exit::USAGE, &[toml.to_str().unwrap(), "16 MiB"]);
    let o = cudafuzz(&["gate", "--config", "/dev/zero", "--check"]);
    assert_exit(&o, exit::USAGE, &["/dev/zero", "is a device"]);
}
