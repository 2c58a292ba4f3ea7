//! Every bad input, round two (issue 31): each class of input that crashed, read without end, was
//! accepted silently or checked too late has a real input here. Each bad one exits 2 within a
//! second with a message naming the input, and leaves every input file as it was; the stream a
//! shell's process substitution makes still works. No GPU needed: every check happens before one
//! is looked for.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cudafuzz::core::exit;

mod common;
use common::{cudafuzz_in, output_text};

/// Runs the binary in `dir`; asserts exit 2, promptly, and that every `needle` is in the output;
/// returns the output's text. The release binary refuses each of these within milliseconds
/// (the whole file's tests took 1.6 s); a runaway read or an enumeration took 24 s and more. The
/// bound here is for the debug build on a CI machine busy with other tests (measured there: up
/// to 1.1 s for a seed, 5.3 s for a gate configuration, which loads every kernel it names): 5 s,
/// tried once more when over, and the second try must be within it.
fn refused_fast(dir: &Path, args: &[&str], env: &[(&str, &Path)], needles: &[&str]) -> String {
    let timed = || {
        let t0 = Instant::now();
        let o = cudafuzz_in(dir, args, env);
        (o, t0.elapsed())
    };
    let (mut o, mut took) = timed();
    if took >= Duration::from_secs(5) {
        (o, took) = timed();
    }
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{args:?}: {text}");
    assert!(took < Duration::from_secs(5), "{args:?} took {took:?}, twice");
    for n in needles {
        assert!(text.contains(n), "{args:?}: `{n}` missing from: {text}");
    }
    assert!(text.len() < 4000, "{args:?}: a short message, not the input echoed: {} bytes", text.len());
    text
}

/// A copy of silu_and_mul (manifest, kernel and reference) in `dir` under the name `name`, the
/// manifest's text changed by `edit`.
fn manifest(dir: &Path, name: &str, edit: &dyn Fn(String) -> String) -> PathBuf {
    common::copy_silu(dir, name, edit)
}

/// A seed of the shipped simple_attn example with its text changed by `edit`.
fn seed(dir: &Path, name: &str, edit: &dyn Fn(String) -> String) -> PathBuf {
    let o = cudafuzz_in(dir, &["case", "example", "--kernel", "simple_attn"], &[]);
    let path = dir.join(name);
    std::fs::write(&path, edit(String::from_utf8(o.stdout).unwrap())).unwrap();
    path
}

/// The bytes of every file directly in `dir`, to show nothing was changed.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<(PathBuf, Vec<u8>)> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_file()).map(|p| (p.clone(), std::fs::read(&p).unwrap())).collect();
    v.sort();
    v
}

#[test]
fn devices_and_directories_are_refused_by_name_and_streams_are_read() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for args in [
        vec!["case", "check", "/dev/zero"],
        vec!["report", "render", "/dev/urandom"],
        vec!["report", "merge", "--out", "m", "/dev/zero"],
        vec!["sanitizer", "parse", "/dev/zero"],
        vec!["triage", "/dev/zero"],
        vec!["gate", "--config", "/dev/zero", "--check"],
    ] {
        refused_fast(d, &args, &[], &["/dev/", "is a device"]);
    }
    std::fs::create_dir(d.join("adir.json")).unwrap();
    refused_fast(d, &["case", "check", "adir.json"], &[], &["adir.json", "is a directory"]);
    refused_fast(d, &["case", "example", "--kernel", "adir.json"], &[], &["adir.json", "directory"]);

    // A FIFO, as `cudafuzz case check <(jq ...)` hands one: read like a file.
    let text = std::fs::read(seed(d, "s.json", &|t| t)).unwrap();
    let fifo = d.join("pipe.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a plain mkfifo of a path in our own temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, text).unwrap())
    };
    let o = cudafuzz_in(d, &["case", "check", "pipe.json"], &[]);
    writer.join().unwrap();
    assert_eq!(o.status.code(), Some(exit::OK), "{}", output_text(&o));
    assert!(output_text(&o).contains("contract of simple_attn: inside"));
}

#[test]
fn expressions_too_deep_or_too_long_are_load_errors_not_stack_overflows() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let grid = "grid = [\"tokens\", \"1\", \"1\"]";
    let deep = manifest(d, "deep.toml", &|t| t.replace(grid, &format!("grid = [\"{}tokens{}\", \"1\", \"1\"]", "(".repeat(100_000), ")".repeat(100_000))));
    let long = manifest(d, "long.toml", &|t| t.replace(grid, &format!("grid = [\"{}\", \"1\", \"1\"]", vec!["tokens"; 100_000].join("+"))));
    // Short enough, but nested past the parser's safe depth.
    let nested = manifest(d, "nested.toml", &|t| t.replace(grid, &format!("grid = [\"{}tokens{}\", \"1\", \"1\"]", "(".repeat(400), ")".repeat(400))));
    let before = snapshot(d);
    for (m, what) in [(&deep, "characters long"), (&long, "characters long"), (&nested, "nested 400 deep")] {
        let m = m.to_str().unwrap();
        for args in [vec!["build", "--arch", "sm_90", "--kernel", m], vec!["fuzz", "--kernel", m], vec!["case", "example", "--kernel", m]] {
            refused_fast(d, &args, &[], &[m, "launch.grid[0]", what]);
        }
    }
    assert_eq!(snapshot(d), before, "no input changed");
}

#[test]
fn param_combinations_are_counted_not_enumerated() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let many: String = (0..41).map(|i| format!("\nP{i} = [1, 2]")).collect();
    let p41 = manifest(d, "p41.toml", &|t| t.replace("THREADS = [256, 64]", &format!("THREADS = [256, 64]{many}")));
    refused_fast(d, &["build", "--arch", "sm_90", "--kernel", p41.to_str().unwrap()], &[], &["p41.toml", "field params", "combinations", "4096"]);
    let dup = manifest(d, "dup.toml", &|t| t.replace("THREADS = [256, 64]", "THREADS = [256, 64, 256]"));
    refused_fast(d, &["case", "example", "--kernel", dup.to_str().unwrap()], &[], &["dup.toml", "params.THREADS[2]", "listed twice"]);
}

#[test]
fn impossible_manifests_fail_to_load_naming_the_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    type Edit = Box<dyn Fn(String) -> String>;
    let cases: Vec<(&str, Edit, Vec<&str>)> = vec![
        ("requires.toml", Box::new(|t: String| t.replace("format = 2", "format = 2\nrequires = [\"d > 5\", \"d < 3\"]")), vec!["requires"]),
        ("contract.toml", Box::new(|t: String| format!("{t}\n[contract]\nrelations = [\"tokens > 70000\"]\n")), vec!["contract"]),
    ];
    for (name, edit, needles) in &cases {
        let m = manifest(d, name, edit.as_ref());
        let mut all = vec![*name];
        all.extend(needles);
        refused_fast(d, &["case", "example", "--kernel", m.to_str().unwrap()], &[], &all);
        refused_fast(d, &["build", "--arch", "sm_90", "--kernel", m.to_str().unwrap()], &[], &all);
    }
    // A 2 TB tensor (x is [tokens, 2 d]: 65535 x 2^31 halves) is refused at load, here by the
    // launch geometry it implies (a grid past 2^32 blocks) before the tensor-size check.
    let tb = manifest(d, "tb.toml", &|t| {
        t.replace("tokens = { range = [1, 65535], cap = 64", "tokens = { range = [65535, 65535], cap = 65535")
            .replace("d = { range = [1, 16384], cap = 4096", "d = { range = [1073741824, 1073741824], max = 1073741824")
    });
    refused_fast(d, &["case", "example", "--kernel", tb.to_str().unwrap()], &[], &["tb.toml", "grid"]);
}

#[test]
fn inconsistent_seeds_are_refused_or_repaired_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let dup = seed(d, "dup.json", &|t| t.replace("\"batch\": 1,", "\"batch\": 1,\n      \"batch\": 2,"));
    refused_fast(d, &["case", "check", dup.to_str().unwrap()], &[], &["dup.json", "case.dims.batch", "twice"]);
    let version = seed(d, "version.json", &|t| t.replace("\"version\": 3,", "\"version\": \"2\","));
    refused_fast(d, &["case", "check", version.to_str().unwrap()], &[], &["version.json", "\"2\" (not a number)"]);

    // A seed with a finding, as a campaign writes one, then edited by hand.
    let m = common::manifest("kernels/testing/simple_attn.toml");
    let mut case = cudafuzz::core::generate::example(&m);
    case.kernel = "simple_attn".into();
    let finding = cudafuzz::Finding::new(cudafuzz::FindingKind::MisalignedAddress, cudafuzz::Oracle::CudaStatus, "simple_attn", String::new());
    let good = cudafuzz::Seed::with_finding(case, finding).to_json();
    let write = |name: &str, text: String| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    // The finding's `kernel` comes after the case's.
    let at = good.rfind("\"kernel\": \"simple_attn\"").unwrap();
    let other = write("other.json", format!("{}\"kernel\": \"vec_load_q\"{}", &good[..at], &good[at + "\"kernel\": \"simple_attn\"".len()..]));
    refused_fast(d, &["case", "check", other.to_str().unwrap()], &[], &["other.json", "`vec_load_q`", "`simple_attn`"]);

    // A signature that disagrees with its finding (or is empty): recomputed, with a warning.
    let saved = cudafuzz::core::corpus::load(&write("good.json", good.clone()), None).unwrap().0.signature.unwrap();
    for (name, sig) in [("sig.json", "made-up"), ("empty.json", "")] {
        let p = write(name, good.replace(saved.as_str(), sig));
        let before = std::fs::read(&p).unwrap();
        let o = cudafuzz_in(d, &["case", "check", p.to_str().unwrap()], &[]);
        let text = output_text(&o);
        assert_eq!(o.status.code(), Some(exit::OK), "{text}");
        assert!(text.contains("warning") && text.contains(name) && text.contains("does not match its finding"), "{text}");
        assert_eq!(std::fs::read(&p).unwrap(), before, "the seed file is not rewritten");
    }
}

#[test]
fn triage_of_a_named_bad_file_fails_and_a_scan_names_what_it_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("notes.json"), "{\"hello\": 1}").unwrap();
    refused_fast(d, &["triage", "notes.json"], &[], &["notes.json"]);
    let o = cudafuzz_in(d, &["triage", "."], &[]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", output_text(&o));
    assert!(output_text(&o).contains("skipped") && output_text(&o).contains("notes.json"), "{}", output_text(&o));
}

#[test]
fn options_and_environment_are_checked_before_the_gpu() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let s = seed(d, "s.json", &|t| t);
    let s = s.to_str().unwrap();
    let m = manifest(d, "m.toml", &|t| t);
    let m = m.to_str().unwrap();
    let before = snapshot(d);
    refused_fast(d, &["run", "--gpu", "99999", s], &[], &["--gpu 99999"]);
    refused_fast(d, &["fuzz", "--kernel", "simple_attn", "--time", "0s"], &[], &["--time", "0s"]);
    refused_fast(d, &["run", s], &[("CUDAFUZZ_TRACE", d)], &["CUDAFUZZ_TRACE", "directory"]);
    refused_fast(d, &["run", s], &[("CUDAFUZZ_TRACE", Path::new(s))], &["CUDAFUZZ_TRACE", "s.json"]);
    refused_fast(d, &["fuzz", "--kernel", m], &[("CUDAFUZZ_TRACE", Path::new(m))], &["CUDAFUZZ_TRACE", "m.toml"]);
    refused_fast(d, &["run", s], &[("CUDAFUZZ_KERNELS", Path::new(s))], &["CUDAFUZZ_KERNELS", "not a directory"]);
    refused_fast(d, &["sweep", "--kernel", m, "--json", m], &[], &["m.toml", "inputs"]);
    refused_fast(d, &["contract", "--kernel", m, "--json", "."], &[], &["--json", "directory"]);
    assert_eq!(snapshot(d), before, "no input changed");
}

/// A copy of the shipped rmsnorm kernel (it has a scalar, `eps`) in `dir`, its manifest edited.
fn rmsnorm(dir: &Path, name: &str, edit: &dyn Fn(String) -> String) -> PathBuf {
    common::copy_kernel(dir, "norm/rmsnorm.toml", &["rmsnorm.cu", "row_common.cuh"], name, edit)
}

#[test]
fn lenient_values_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let eps = "eps = { type = \"f32\", choices = [1e-5, 1e-6, 0.01], weights = [4, 2, 1], range = [1e-12, 1.0] }";
    let inf = rmsnorm(d, "inf.toml", &|t| t.replace(eps, "eps = { type = \"f32\", range = [0.0, inf] }"));
    refused_fast(d, &["case", "example", "--kernel", inf.to_str().unwrap()], &[], &["inf.toml", "scalars.eps.range", "not finite"]);
    let div = rmsnorm(d, "div.toml", &|t| t.replace(eps, "eps = { type = \"f32\", choices = [\"1 / (rows - rows)\"] }"));
    refused_fast(d, &["case", "example", "--kernel", div.to_str().unwrap()], &[], &["div.toml", "eps"]);
    let nul = manifest(d, "nul.toml", &|t| t.replace("name = \"silu_and_mul\"", "name = \"silu\\u0000mul\""));
    refused_fast(d, &["case", "example", "--kernel", nul.to_str().unwrap()], &[], &["nul.toml", "field name"]);
    std::fs::write(d.join("empty.toml"), "").unwrap();
    refused_fast(d, &["case", "example", "--kernel", "empty.toml"], &[], &["empty.toml", "empty"]);

    // Reports no run wrote: a negative duration, a start that is not a time.
    let report = cudafuzz::RunReport::new().to_json();
    assert!(report.contains("\"duration_secs\": 0.0"), "{report}");
    std::fs::write(d.join("neg.json"), report.replace("\"duration_secs\": 0.0", "\"duration_secs\": -5.0")).unwrap();
    refused_fast(d, &["report", "render", "neg.json"], &[], &["neg.json", "duration_secs"]);
    let at = report.find("\"started\": \"").unwrap() + "\"started\": \"".len();
    let end = at + report[at..].find('"').unwrap();
    std::fs::write(d.join("when.json"), format!("{}yesterday{}", &report[..at], &report[end..])).unwrap();
    refused_fast(d, &["report", "render", "when.json"], &[], &["when.json", "started", "yesterday"]);
}

#[test]
fn a_huge_kernel_source_is_refused_at_load_not_read_into_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let m = manifest(d, "big.toml", &|t| t);
    // A sparse 3 GB source: reading it whole aborted `build` and `fuzz` on memory.
    std::fs::File::create(d.join("silu_and_mul.cu")).unwrap().set_len(3 << 30).unwrap();
    let before = std::fs::read(&m).unwrap();
    for args in [vec!["build", "--arch", "sm_90", "--kernel"], vec!["fuzz", "--cases", "1", "--kernel"], vec!["case", "example", "--kernel"]] {
        let mut args = args;
        args.push(m.to_str().unwrap());
        refused_fast(d, &args, &[], &["big.toml", "silu_and_mul.cu", "MiB", "limit for kernel sources"]);
    }
    assert_eq!(std::fs::read(&m).unwrap(), before);
}

#[test]
fn scalars_outside_their_type_and_failing_choices_name_their_key() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let eps = "eps = { type = \"f32\", choices = [1e-5, 1e-6, 0.01], weights = [4, 2, 1], range = [1e-12, 1.0] }";
    type Edit = (&'static str, &'static str, Vec<&'static str>);
    let cases: Vec<Edit> = vec![
        // Past f32's largest value: a case would hold an infinity (a seed `null`).
        ("range.toml", "eps = { type = \"f32\", range = [0.0, 1e39] }", vec!["scalars.eps.range", "f32's largest value"]),
        ("literal.toml", "eps = { type = \"f32\", choices = [1e39] }", vec!["scalars.eps.choices[0]", "not a finite"]),
        ("nan.toml", "eps = { type = \"f32\", choices = [0.01, nan] }", vec!["scalars.eps.choices[1]", "not a finite"]),
        // A choice that divides by zero, alone or among good ones, is named with the case's dims.
        ("div.toml", "eps = { type = \"f32\", choices = [\"1 / (rows - rows)\"] }", vec!["scalars.eps.choices[0]", "1 / (rows - rows)", "rows="]),
        ("mixed.toml", "eps = { type = \"f32\", choices = [0.01, \"1.0 / (rows - rows)\"] }", vec!["scalars.eps.choices[1]", "no finite"]),
    ];
    for (name, line, needles) in cases {
        let m = rmsnorm(d, name, &|t| t.replace(eps, line));
        let mut all = vec![name];
        all.extend(needles);
        refused_fast(d, &["case", "example", "--kernel", m.to_str().unwrap()], &[], &all);
    }
}

#[test]
fn outputs_and_environment_are_checked_before_the_gpu_round_three() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let m = manifest(d, "m.toml", &|t| t);
    let m = m.to_str().unwrap();
    let before = snapshot(d);
    // --json into a folder that does not exist, or naming a folder: refused before the GPU.
    for cmd in ["contract", "sweep", "bench"] {
        refused_fast(d, &[cmd, "--kernel", m, "--json", "no/such/folder/x.json"], &[], &["--json", "no/such/folder", "does not exist"]);
    }
    refused_fast(d, &["bench", "--kernel", m, "--json", "."], &[], &["--json", "directory"]);
    refused_fast(d, &["fuzz", "--kernel", m], &[("CUDAFUZZ_TRACE", Path::new("no/such/folder/t.log"))], &["CUDAFUZZ_TRACE", "does not exist"]);
    // `kernels` says why a named file does not load.
    refused_fast(d, &["kernels", "/dev/zero"], &[], &["/dev/zero", "is a device"]);
    // `kernels` reads CUDAFUZZ_KERNELS too.
    refused_fast(d, &["kernels"], &[("CUDAFUZZ_KERNELS", Path::new(m))], &["CUDAFUZZ_KERNELS", "not a directory"]);
    assert_eq!(snapshot(d), before, "no input changed");
    // The gate appends its trace: never onto its configuration (nor its seeds).
    let root = common::root();
    let config = root.join("ci/gate.toml");
    let before = std::fs::read(&config).unwrap();
    let o = cudafuzz_in(&root, &["gate", "--config", "ci/gate.toml", "--check"], &[("CUDAFUZZ_TRACE", &config)]);
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{text}");
    assert!(text.contains("CUDAFUZZ_TRACE") && text.contains("gate.toml"), "{text}");
    assert_eq!(std::fs::read(&config).unwrap(), before);
}

#[test]
fn wrong_facts_are_not_told() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // A report's version as the file holds it, not "version 0".
    let report = cudafuzz::RunReport::new().to_json();
    let at = report.find("\"version\": ").unwrap();
    let end = at + report[at..].find(',').unwrap();
    std::fs::write(d.join("v.json"), format!("{}\"version\": \"1\"{}", &report[..at], &report[end..])).unwrap();
    let text = refused_fast(d, &["report", "render", "v.json"], &[], &["v.json", "\"1\" (not a number)"]);
    assert!(!text.contains("version 0"), "{text}");
    // An order with a repeated axis on a rank-4 tensor is not "rank 5".
    let s = seed(d, "order.json", &|t| t.replacen("\"tensors\": {}", "\"tensors\": { \"q\": { \"order\": [0, 1, 2, 3, 3] } }", 1));
    assert!(std::fs::read_to_string(&s).unwrap().contains("[0, 1, 2, 3, 3]"), "the edit applied");
    let text = refused_fast(d, &["case", "check", s.to_str().unwrap()], &[], &["order.json", "order", "not a permutation"]);
    assert!(!text.contains("rank 5"), "{text}");
    // A flag holding 2.5.
    let s = seed(d, "flag.json", &|t| t.replacen("\"causal\": false", "\"causal\": 2.5", 1));
    assert!(std::fs::read_to_string(&s).unwrap().contains("2.5"), "the edit applied");
    refused_fast(d, &["case", "check", s.to_str().unwrap()], &[], &["flag.json", "scalars.causal", "not a flag"]);
}
