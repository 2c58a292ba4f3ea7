//! Bad input met as a user meets it (issue 19, classes 4, 5, 7 and 8): every option and case is
//! checked before anything starts (exit 2 on any machine, never 3), manifest problems show at
//! load or in `build`, errors keep the reason and name the key or variable, and sanitizer XML
//! that holds nothing usable is refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cudafuzz::core::exit;

mod common;
use common::{exe, root};

fn cudafuzz_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(exe());
    c.current_dir(env!("CARGO_MANIFEST_DIR")).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the binary runs")
}

fn cudafuzz(args: &[&str]) -> Output {
    cudafuzz_env(args, &[])
}

/// The command failed as bad input: exit 2, no panic, and stderr names every `wanted` text.
fn refused(o: &Output, wanted: &[&str]) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(exit::USAGE), "stderr: {err}\nstdout: {}", String::from_utf8_lossy(&o.stdout));
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
    for w in wanted {
        assert!(err.contains(w), "`{w}` missing from: {err}");
    }
    err
}

/// simple_attn's example case, written to `dir`, with `edit` applied to its JSON text.
fn seed(dir: &Path, name: &str, edit: &dyn Fn(String) -> String) -> PathBuf {
    let o = cudafuzz(&["case", "example", "--kernel", "simple_attn"]);
    let p = dir.join(name);
    std::fs::write(&p, edit(String::from_utf8(o.stdout).unwrap())).unwrap();
    p
}

/// A copy of silu_and_mul (manifest and sources, under `dir/kernels/activation/` beside a copy
/// of the shared headers, as a user's tree has them), with `edit` applied to the manifest.
fn silu(dir: &Path, name: &str, edit: &dyn Fn(String) -> String) -> PathBuf {
    let src = root().join("kernels/activation");
    let (kdir, include) = (dir.join("kernels/activation"), dir.join("kernels/include"));
    std::fs::create_dir_all(&kdir).unwrap();
    std::fs::create_dir_all(&include).unwrap();
    for e in std::fs::read_dir(root().join("kernels/include")).unwrap().flatten() {
        std::fs::copy(e.path(), include.join(e.file_name())).unwrap();
    }
    for f in ["silu_and_mul.cu", "silu_and_mul_ref.cu"] {
        std::fs::copy(src.join(f), kdir.join(f)).unwrap();
    }
    let dir = kdir.as_path();
    let text = std::fs::read_to_string(src.join("silu_and_mul.toml")).unwrap();
    let edited = edit(text.clone());
    assert_ne!(edited, text, "the edit must change the manifest");
    let p = dir.join(name);
    std::fs::write(&p, edited).unwrap();
    p
}

#[test]
fn class4_options_are_checked_before_the_gpu_probe() {
    let dir = tempfile::tempdir().unwrap();
    let case = seed(dir.path(), "c.json", &|t| t);
    let c = case.to_str().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    for (args, wanted) in [
        (vec!["fuzz", "--kernel", "simple_attn", "--escalate", "bogus", "--out", o], "--escalate"),
        (vec!["fuzz", "--kernel", "simple_attn", "--timeout-ms", "0", "--out", o], "--timeout-ms"),
        (vec!["fuzz", "--kernel", "simple_attn", "--cases", "0", "--out", o], "--cases"),
        (vec!["run", "--sanitize-batch", "0", "--out", o, c], "--sanitize-batch"),
        (vec!["run", "--sanitize", "memchek", "--out", o, c], "memchek"),
        (vec!["run", "--jobs", "0", "--out", o, c], "--jobs"),
        (vec!["run", "--jobs", "257", "--out", o, c], "256"),
        (vec!["run", "--gpus", "0", "--out", o, c], "--gpus"),
        (vec!["sweep", "--kernel", "simple_attn", "--repeat", "0", "--out", o], "--repeat"),
        (vec!["sweep", "--kernel", "simple_attn", "--params", "NOPE=1", "--out", o], "params.NOPE"),
        (vec!["sweep", "--kernel", "simple_attn", "--params", "BLOCK_THREADS=77", "--out", o], "77"),
        (vec!["minimize", "--max-runs", "0", "--out", o, c], "--max-runs"),
    ] {
        refused(&cudafuzz(&args), &[wanted]);
    }
    assert!(!out.exists(), "a refused command created its output directory");
    let help = String::from_utf8_lossy(&cudafuzz(&["run", "--help"]).stdout).into_owned();
    assert!(help.contains("1 to 256"), "the --jobs cap is documented: {help}");
}

#[test]
fn class4_a_case_outside_its_manifest_is_refused_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let bad = seed(dir.path(), "bad.json", &|t| t.replace("\"BLOCK_THREADS\": 128", "\"BLOCK_THREADS\": 77"));
    let b = bad.to_str().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    for args in [
        vec!["case", "check", b],
        vec!["run", "--out", o, b],
        vec!["repro", "--out", o, b],
        vec!["repro", "--emit", "cu", "-o", "-", b],
        vec!["minimize", "--out", o, b],
    ] {
        refused(&cudafuzz(&args), &["bad.json", "params.BLOCK_THREADS", "77"]);
    }
    let unknown = seed(dir.path(), "unknown.json", &|t| t.replace("\"BLOCK_THREADS\": 128", "\"BLOCK_THREADS\": 128, \"TILE\": 3"));
    refused(&cudafuzz(&["case", "check", unknown.to_str().unwrap()]), &["params.TILE", "not a declared param"]);
    let nokernel = seed(dir.path(), "nokernel.json", &|t| t.replace("\"kernel\": \"simple_attn\"", "\"kernel\": \"no_such_kernel\""));
    refused(&cudafuzz(&["case", "check", nokernel.to_str().unwrap()]), &["no_such_kernel"]);
    assert!(!out.exists());
}

#[test]
fn class4_gate_budgets_and_sanitizer_passes_that_check_nothing() {
    let o = cudafuzz(&["gate", "--check", "--budget", "3s"]);
    refused(&o, &["ci/gate.toml", "gate.sweep_share", "budget"]);
    let dir = tempfile::tempdir().unwrap();
    let gate = std::fs::read_to_string(root().join("ci/gate.toml")).unwrap();
    let cfg = dir.path().join("gate.toml");
    let at = gate.find("[[sanitizers]]").expect("the shipped gate has a sanitizer pass");
    let (head, tail) = gate.split_at(at);
    std::fs::write(&cfg, format!("{head}{}", tail.replacen("cases = 100", "cases = 0", 1))).unwrap();
    let o = cudafuzz(&["gate", "--check", "--config", cfg.to_str().unwrap()]);
    refused(&o, &["sanitizers[0].cases"]);
}

#[test]
fn class5_launch_problems_at_other_params_and_dims_are_found_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let case = seed(dir.path(), "c.json", &|t| t);
    let c = case.to_str().unwrap();
    let div = silu(dir.path(), "div.toml", &|t| t.replace("grid = [\"tokens\", \"1\", \"1\"]", "grid = [\"cdiv(tokens, THREADS - 64)\", \"1\", \"1\"]"));
    refused(&cudafuzz(&["case", "check", "--kernel", div.to_str().unwrap(), c]), &["div.toml", "launch.grid[0]", "THREADS = 64"]);
    let hint = silu(dir.path(), "hint.toml", &|t| {
        t.replace(
            "{ i32 = \"d\" }, { i64 = \"x.stride(0)\" }, { i64 = \"out.stride(0)\" }]",
            "{ i32 = \"4096 / (d - 4097)\" }, { i64 = \"x.stride(0)\" }, { i64 = \"out.stride(0)\" }]",
        )
    });
    refused(&cudafuzz(&["build", "--kernel", hint.to_str().unwrap()]), &["launch.args[2]", "d = 4097"]);
    let smem =
        silu(dir.path(), "smem.toml", &|t| t.replace("block = [\"THREADS\", \"1\", \"1\"]", "block = [\"THREADS\", \"1\", \"1\"]\nshared_bytes = \"d * 32\""));
    refused(&cudafuzz(&["case", "check", "--kernel", smem.to_str().unwrap(), c]), &["launch.shared_bytes", "fits no target", "d = 16384", "sm_90"]);
    let threads = silu(dir.path(), "threads.toml", &|t| t.replace("block = [\"THREADS\", \"1\", \"1\"]", "block = [\"THREADS * 8\", \"1\", \"1\"]"));
    refused(&cudafuzz(&["case", "check", "--kernel", threads.to_str().unwrap(), c]), &["launch.block", "2048 threads"]);
}

#[test]
fn class5_build_compares_the_argument_list_with_the_compiled_entry() {
    let dir = tempfile::tempdir().unwrap();
    let args = "{ i32 = \"d\" }, { i64 = \"x.stride(0)\" }, { i64 = \"out.stride(0)\" }]";
    let narrow = silu(dir.path(), "narrow.toml", &|t| t.replace(args, "{ i32 = \"d\" }, { i32 = \"x.stride(0)\" }, { i64 = \"out.stride(0)\" }]"));
    if !common::env::have(common::env::Need::Nvrtc) {
        return;
    }
    let o = cudafuzz(&["build", "--arch", "sm_80", "--kernel", narrow.to_str().unwrap()]);
    refused(&o, &["narrow.toml", "launch.args", "lists 5 arguments", "takes 5 parameters", "position 3"]);
    let short = silu(dir.path(), "short.toml", &|t| t.replace(args, "{ i32 = \"d\" }, { i64 = \"x.stride(0)\" }]"));
    refused(&cudafuzz(&["build", "--arch", "sm_80", "--kernel", short.to_str().unwrap()]), &["lists 4 arguments", "takes 5 parameters"]);
    let o = cudafuzz(&["build", "--arch", "sm_89", "--kernel", "flash_fwd"]);
    refused(&o, &["BLOCK_M = 128, BLOCK_N = 64", "sm_89"]);
    let o = cudafuzz(&["build", "--arch", "sm_89,sm_90", "--kernel", "flash_fwd"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("is not built for sm_89"));
}

#[test]
fn class7_errors_keep_the_reason_and_name_the_key_or_variable() {
    let dir = tempfile::tempdir().unwrap();
    let case = seed(dir.path(), "c.json", &|t| t);
    let c = case.to_str().unwrap();
    refused(&cudafuzz(&["run", "--out", c, c]), &["--out", "regular file"]);
    refused(&cudafuzz(&["case", "check", dir.path().to_str().unwrap()]), &["directory"]);
    refused(&cudafuzz(&["sanitizer", "parse", dir.path().to_str().unwrap()]), &["directory"]);
    let latin1 = dir.path().join("latin1.toml");
    std::fs::write(&latin1, b"name = \"caf\xe9\"\n").unwrap();
    refused(&cudafuzz(&["case", "check", "--kernel", latin1.to_str().unwrap(), c]), &["UTF-8"]);
    refused(&cudafuzz(&["case", "check", "--kernel", dir.path().to_str().unwrap(), c]), &["directory"]);
    let layout = silu(dir.path(), "layout.toml", &|t| t.replacen("layout = \"inner\"", "layout = \"innr\"", 1));
    refused(&cudafuzz(&["case", "check", "--kernel", layout.to_str().unwrap(), c]), &["tensors.x.layout", "innr"]);
    let range = silu(dir.path(), "range.toml", &|t| t.replace("tokens = { range = [1, 65535]", "tokens = { range = [1, \"many\"]"));
    refused(&cudafuzz(&["case", "check", "--kernel", range.to_str().unwrap(), c]), &["dims.tokens.range"]);
    let long = dir.path().join("long.toml");
    std::fs::write(&long, format!("x = {}\n", "a".repeat(100_000))).unwrap();
    let err = refused(&cudafuzz(&["case", "check", "--kernel", long.to_str().unwrap(), c]), &["long.toml"]);
    assert!(err.len() < 2000, "the quoted line is cut short: {} bytes", err.len());
    let raw = dir.path().join("crash-1");
    std::fs::write(&raw, [7u8; 64]).unwrap();
    refused(&cudafuzz_env(&["repro", raw.to_str().unwrap()], &[("CUDAFUZZ_KERNEL", "no_such_kernel")]), &["CUDAFUZZ_KERNEL=no_such_kernel"]);
    refused(&cudafuzz_env(&["case", "check", "--kernel", "nope", c], &[("CUDAFUZZ_KERNELS", "/nonexistent-dir")]), &["CUDAFUZZ_KERNELS"]);
    refused(&cudafuzz_env(&["gate", "--check"], &[("CUDAFUZZ_SHARD", "abc")]), &["CUDAFUZZ_SHARD"]);
}

#[test]
fn class7_every_file_the_docs_and_scripts_point_to_exists() {
    let r = root();
    for doc in
        ["README.md", "kernels/README.md", "ci/gate.toml", "ci/gpu-check.sh", "ci/gpu-kernels.sh", "ci/gpu-any-kernel.sh", "ci/nightly.sh", "ci/gpu-results.md"]
    {
        let text = std::fs::read_to_string(r.join(doc)).unwrap();
        assert!(!text.contains("../shared") && !text.contains("DESIGN.md"), "{doc} points outside the project");
    }
    assert!(r.join("ci/gpu-pack").is_file());
}

#[test]
fn class8_sanitizer_xml_with_nothing_complete_or_malformed_records() {
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.xml");
    std::fs::write(&cut, "<?xml version=\"1.0\"?>\n<ComputeSanitizerOutput>\n<record><kind>Pre").unwrap();
    refused(&cudafuzz(&["sanitizer", "parse", cut.to_str().unwrap()]), &["cut.xml", "no complete record", "--partial"]);
    let o = cudafuzz(&["sanitizer", "parse", "--partial", cut.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", String::from_utf8_lossy(&o.stderr));
    let bad = dir.path().join("bad.xml");
    std::fs::write(
        &bad,
        "<ComputeSanitizerOutput><record><what><size>4</size></what></record>\
         <record><kind>Precise</kind><what><size>99999999999999999999999</size></what></record>\
         <record><kind>Precise</kind><who><threadIdx><x>5000000000</x></threadIdx></who></record></ComputeSanitizerOutput>",
    )
    .unwrap();
    let o = cudafuzz(&["sanitizer", "parse", bad.to_str().unwrap()]);
    let err = refused(&o, &["record 1: no <kind>", "record 2: <size>", "record 3: <x>"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("0 finding records"), "{err}");
}
