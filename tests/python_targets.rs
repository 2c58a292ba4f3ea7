//! Python targets without a GPU: the plumbing (tests/python/test_plumbing.py: every offset,
//! stride and dtype lands in the callable's view where the plan says), the command line inside
//! the user's interpreter, and the manifest's `[target]` checks. Needs an interpreter with the
//! wheel installed (`CUDAFUZZ_TEST_PYTHON`); skips with the reason otherwise.

mod common;

use std::path::Path;
use std::process::Command;

use common::env::cudafuzz_python;
use cudafuzz::core::manifest::Manifest;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_python_side_tests_pass_plumbing_and_outcomes() {
    let Some(python) = cudafuzz_python() else { return };
    let out = Command::new(&python).args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/python"]).current_dir(root()).output().expect("pytest runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("13 passed") && !text.contains("skipped"), "every Python-side test runs: {text}");
}

#[test]
fn the_command_line_runs_inside_the_interpreter() {
    let Some(python) = cudafuzz_python() else { return };
    let out =
        Command::new(&python).args(["-m", "cudafuzz", "kernels"]).current_dir(root()).env("CUDAFUZZ_KERNELS", root().join("kernels")).output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("cupy_softmax") && text.contains("python softmax_cupy:softmax (cupy)"), "{text}");
    let bad = Command::new(&python).args(["-m", "cudafuzz", "fuzz", "--bogus"]).output().expect("runs");
    assert_eq!(bad.status.code(), Some(2), "a usage error exits 2 from Python too");
}

#[test]
fn a_python_worker_without_a_gpu_says_so_before_any_case() {
    let Some(python) = cudafuzz_python() else { return };
    if !common::env::have(common::env::Need::NoGpu) {
        return;
    }
    let manifest = root().join("kernels/python/cupy_softmax.toml");
    let out = Command::new(&python).args(["-m", "cudafuzz", "worker", "--target"]).arg(&manifest).stdin(std::process::Stdio::null()).output().expect("runs");
    let events = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(cudafuzz::engine::worker::EXIT_NO_GPU), "{events}");
    assert!(events.contains("\"event\":\"start_failed\"") && events.contains("\"setup\":false"), "{events}");
}

fn load(text: &str, dir: &Path) -> Result<Manifest, String> {
    let path = dir.join("t.toml");
    std::fs::write(&path, text).unwrap();
    Manifest::load(&path).map_err(|e| cudafuzz::core::error::chain(&e))
}

const ROSTER: &str = r#"
format = 2
name = "t"
dtypes = ["f32"]
[dims]
n = { range = [1, 8] }
[scalars]
on = { type = "bool" }
[[tensors]]
name = "x"
role = "input"
shape = ["n"]
[[tensors]]
name = "y"
role = "output"
shape = ["n"]
[reference]
op = "none"
"#;

#[test]
fn a_target_section_is_checked_at_load_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ops.py"), "def f(x, y):\n    pass\n").unwrap();
    let ok = load(&format!("{ROSTER}[target]\npython = \"ops:f\"\nargs = [\"x\", \"y\", \"n * 2\", \"on\"]\n"), dir.path()).unwrap();
    let p = ok.target.python().expect("a Python target");
    assert_eq!(p.callable.to_string(), "ops:f");
    assert_eq!(ok.entry, "ops:f");
    assert!(ok.source.ends_with("ops.py"));
    let bad = |target: &str| load(&format!("{ROSTER}[target]\n{target}\n"), dir.path()).unwrap_err();
    let e = bad("python = \"ops\"\nargs = [\"x\", \"y\"]");
    assert!(e.contains("target.python") && e.contains("module:function"), "{e}");
    let e = bad("python = \"missing:f\"\nargs = [\"x\", \"y\"]");
    assert!(e.contains("target.python") && e.contains("missing.py"), "{e}");
    let e = bad("python = \"ops:f\"\nargs = [\"x\"]");
    assert!(e.contains("tensor `y` is neither passed nor returned"), "{e}");
    let e = bad("python = \"ops:f\"\nargs = [\"x\", \"y\"]\nreturns = [\"y\"]");
    assert!(e.contains("target.returns[0]") && e.contains("either written in place"), "{e}");
    let e = bad("python = \"ops:f\"\nargs = [\"x\"]\nreturns = [\"x\"]");
    assert!(e.contains("only outputs can be returned"), "{e}");
    let e = bad("python = \"ops:f\"\nargs = [\"x\", \"y\", \"m + 1\"]");
    assert!(e.contains("target.args[2]") && e.contains("m + 1"), "{e}");
    let e = bad("python = \"ops:f\"\ntensors = \"jax\"\nargs = [\"x\", \"y\"]");
    assert!(e.contains("target.tensors") || e.contains("jax"), "{e}");
    let e = load(&format!("source = \"ops.py\"\n{ROSTER}[target]\npython = \"ops:f\"\nargs = [\"x\", \"y\"]\n"), dir.path()).unwrap_err();
    assert!(e.contains("keep one of the two"), "{e}");
}

#[test]
fn a_call_resolves_to_python_values_for_each_case() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ops.py"), "def f(x, y):\n    pass\n").unwrap();
    let m = load(
        &format!(
            "{ROSTER}[target]\npython = \"ops:f\"\nargs = [\"y\", \"n\", \"on\", \"n / 2.0\", \"n > 3\"]\nkwargs = {{ input = \"x\", s = \"x.stride(0)\" }}\n"
        ),
        dir.path(),
    )
    .unwrap();
    let case = cudafuzz::core::generate::example(&m);
    let plan = cudafuzz::core::plan::Plan::new(&case, &m).unwrap();
    let call = m.resolve_call(&plan.vars).unwrap().unwrap();
    use cudafuzz::core::target::CallValue;
    let n = *plan.vars.dims.get("n").unwrap() as i64;
    let on = case.scalars.get("on").unwrap().is_true();
    assert_eq!(call.args, vec![CallValue::Tensor(1), CallValue::Int(n), CallValue::Bool(on), CallValue::Float(n as f64 / 2.0), CallValue::Bool(n > 3)]);
    assert_eq!(call.kwargs, vec![("input".to_string(), CallValue::Tensor(0)), ("s".to_string(), CallValue::Int(1))]);
}

/// A Python target in `dir` whose interpreter is `interpreter`, and a supervisor for it.
fn supervised(dir: &Path, interpreter: &str) -> (Manifest, cudafuzz::run::supervisor::Supervisor) {
    use cudafuzz::run::supervisor::{Supervisor, SupervisorConfig};
    std::fs::write(dir.join("ops.py"), "def f(x, y):\n    y[...] = x\n").unwrap();
    let m =
        load(&format!("{ROSTER}[target]\npython = \"ops:f\"\ntensors = \"dlpack\"\nargs = [\"x\", \"y\"]\ninterpreter = \"{interpreter}\"\n"), dir).unwrap();
    let sup = Supervisor::new(SupervisorConfig {
        exe: env!("CARGO_BIN_EXE_cudafuzz").into(),
        gpu: 0,
        reference_dir: None,
        journal: None,
        stop: Default::default(),
        sanitizer: None,
    })
    .unwrap();
    (m, sup)
}

fn run_one(
    m: &Manifest,
    sup: &mut cudafuzz::run::supervisor::Supervisor,
) -> Result<cudafuzz::core::verdict::Verdict, cudafuzz::run::supervisor::SupervisorError> {
    let case = cudafuzz::core::generate::example(m);
    sup.run(&case, m, &cudafuzz::core::verdict::RunOptions::default(), std::time::Duration::from_secs(10))
}

#[test]
fn a_python_targets_worker_is_its_interpreter_running_cudafuzz() {
    use cudafuzz::run::supervisor::SupervisorError;
    let Some(python) = cudafuzz_python() else { return };
    if !common::env::have(common::env::Need::NoGpu) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (m, mut sup) = supervised(dir.path(), &python.display().to_string());
    // The interpreter started `-m cudafuzz worker --gpu 0 --target ...` (a wrong command line
    // would end it before it reported anything, a setup error) and it opened no GPU here.
    match run_one(&m, &mut sup) {
        Err(SupervisorError::NoGpu(msg)) => assert!(!msg.contains("exited before"), "{msg}"),
        other => panic!("expected NO GPU from the Python worker, got {other:?}"),
    }
}

/// The setup error a supervisor reports for a Python target whose interpreter is `interpreter`.
fn setup_error(interpreter: &str) -> String {
    use cudafuzz::run::supervisor::SupervisorError;
    let dir = tempfile::tempdir().unwrap();
    let (m, mut sup) = supervised(dir.path(), interpreter);
    match run_one(&m, &mut sup) {
        Err(e @ SupervisorError::Setup(_)) => e.to_string(),
        other => panic!("expected a setup error, got {other:?}"),
    }
}

#[test]
fn a_missing_interpreter_is_a_setup_error_naming_it() {
    let msg = setup_error("./no-such-python");
    assert!(msg.contains("no-such-python") && msg.contains("--python"), "{msg}");
}

#[test]
fn an_interpreter_without_cudafuzz_is_a_setup_error_naming_what_to_install() {
    let Some(python3) = common::env::python3() else { return };
    let has_it = Command::new(&python3).args(["-c", "import cudafuzz"]).status().map(|s| s.success()).unwrap_or(false);
    if has_it {
        common::env::skip("this machine's python3 has cudafuzz installed");
        return;
    }
    let msg = setup_error("python3");
    assert!(msg.contains("python3 -m cudafuzz worker") && msg.contains("pip install cudafuzz"), "{msg}");
}

#[test]
fn the_shipped_python_targets_load() {
    let dir = root().join("kernels/python");
    let found = cudafuzz::core::manifest::find_manifests(&dir);
    assert!(found.len() >= 3, "{found:?}");
    for path in found {
        let m = Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(m.python_calls().next().is_some() && !m.fuzz, "{}: a Python target or reference, out of the default run", m.name);
    }
}

#[test]
fn a_python_reference_is_checked_at_load_and_its_repro_is_not_emitted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ops.py"), "def f(x, y):\n    pass\ndef ref(x):\n    return x\n").unwrap();
    let roster = ROSTER.replace("[reference]\nop = \"none\"\n", "");
    let target = "[target]\npython = \"ops:f\"\nargs = [\"x\", \"y\"]\n";
    let with = |reference: &str| load(&format!("{roster}{target}[reference]\n{reference}\n"), dir.path());
    let m = with("python = \"ops:ref\"\nargs = [\"x\"]\nreturns = [\"y\"]\nfactor = 3").unwrap();
    let cudafuzz::core::manifest::ReferenceSpec::Python(r) = &m.reference else { panic!("{:?}", m.reference) };
    assert_eq!((r.call.callable.to_string(), r.factor, r.floor), ("ops:ref".to_string(), 3.0, None));
    assert_eq!(m.python_calls().count(), 2, "the target's call and the reference's");
    let call = m.resolve_python(&r.call, &cudafuzz::core::plan::Plan::new(&cudafuzz::core::generate::example(&m), &m).unwrap().vars, "reference").unwrap();
    assert_eq!(call.returns, vec![1]);
    let e = with("python = \"ops:ref\"\nargs = [\"x\"]").unwrap_err();
    assert!(e.contains("reference.args") && e.contains("tensor `y` is neither passed nor returned"), "{e}");
    let e = with("python = \"ops:ref\"\nargs = [\"x\"]\nreturns = [\"y\"]\nentry = \"k\"").unwrap_err();
    assert!(e.contains("reference.entry") && e.contains("unknown key"), "{e}");
    let e = with("python = \"ops:ref\"\nargs = [\"x\"]\nreturns = [\"y\"]\nfactor = 0.5").unwrap_err();
    assert!(e.contains("reference.factor"), "{e}");
    let e = with("python = \"nope:ref\"\nargs = [\"x\"]\nreturns = [\"y\"]").unwrap_err();
    assert!(e.contains("reference.python") && e.contains("nope.py"), "{e}");
    // The shipped example: an NVRTC kernel judged by a Python reference; its repro cannot be
    // emitted (the reference is Python), and says what to run instead.
    let shipped = root().join("kernels/python/simple_attn_sdpa.toml");
    let m = Manifest::load(&shipped).unwrap();
    assert!(m.target.is_compiled_here() && m.python_calls().count() == 1);
    let bin = env!("CARGO_BIN_EXE_cudafuzz");
    let example = Command::new(bin).args(["case", "example", "--kernel"]).arg(&shipped).output().unwrap();
    let seed = dir.path().join("seed.json");
    std::fs::write(&seed, &example.stdout).unwrap();
    let emit = Command::new(bin).args(["repro"]).arg(&seed).args(["--emit", "python", "-o"]).arg(dir.path().join("r.py")).current_dir(root()).output().unwrap();
    let err = String::from_utf8_lossy(&emit.stderr);
    assert!(!emit.status.success() && err.contains("Python reference sdpa_reference:attention") && err.contains("cudafuzz repro SEED"), "{err}");
}

#[test]
fn a_python_targets_repro_is_a_script_that_calls_it_and_never_a_cu_file() {
    let Some(python3) = common::env::python3() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_cudafuzz");
    let manifest = root().join("kernels/python/torch_softmax.toml");
    let example = Command::new(bin).args(["case", "example", "--kernel"]).arg(&manifest).output().unwrap();
    assert!(example.status.success(), "{}", String::from_utf8_lossy(&example.stderr));
    let seed = dir.path().join("seed.json");
    std::fs::write(&seed, &example.stdout).unwrap();
    let script = dir.path().join("repro.py");
    let emit = Command::new(bin).args(["repro"]).arg(&seed).args(["--emit", "python", "-o"]).arg(&script).current_dir(root()).output().unwrap();
    assert!(emit.status.success(), "{}", String::from_utf8_lossy(&emit.stderr));
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains("TARGET = dict(path=\"kernels/python\", module=\"softmax_torch\", function=\"softmax\", setup=None, tensors=\"torch\""), "{text}");
    assert!(text.contains("args=[(\"tensor\", 0)]") && text.contains("returns=[1]"), "the call as the manifest resolves it");
    let compiled = Command::new(&python3).args(["-m", "py_compile"]).arg(&script).output().unwrap();
    assert!(compiled.status.success(), "{}", String::from_utf8_lossy(&compiled.stderr));
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    let wrote = Command::new(&python3).arg(&script).arg("--write-image").arg(&images).output().unwrap();
    assert!(wrote.status.success() && std::fs::read_dir(&images).unwrap().count() == 2, "{}", String::from_utf8_lossy(&wrote.stderr));
    let cu = Command::new(bin).args(["repro"]).arg(&seed).args(["--emit", "cu", "-o"]).arg(dir.path().join("repro.cu")).current_dir(root()).output().unwrap();
    let err = String::from_utf8_lossy(&cu.stderr);
    assert!(!cu.status.success() && err.contains("is a Python target") && err.contains("--emit python"), "{err}");
    assert!(!dir.path().join("repro.cu").exists());
}
