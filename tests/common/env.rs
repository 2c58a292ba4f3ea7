//! What a test needs from the machine, checked in one place.
//!
//! A test that cannot do what its name says on this machine must not pass silently: it calls
//! [`have`] (or a helper built on it) first, and when the need is unmet it prints
//! `SKIP <test>: <reason>` and returns. `ci/test.sh` collects these lines through
//! `$CUDAFUZZ_SKIP_LOG` and prints the list at the end of the run.
//!
//! `CUDAFUZZ_REQUIRE` turns skips into failures where the machine is supposed to have what the
//! test needs: a comma-separated list of [`Need`] names (`gpu,sanitizer,nvrtc,python3`), or
//! `all`. `CUDAFUZZ_REQUIRE_GPU=1` (the GPU host's check) means `gpu,sanitizer`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use cudafuzz::engine::compile::Compiler;

/// Something a test needs from the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// A CUDA device and its driver.
    Gpu,
    /// compute-sanitizer on PATH (with a GPU).
    Sanitizer,
    /// libnvrtc and the CUDA headers.
    Nvrtc,
    /// A `python3` on PATH.
    Python3,
    /// A C++ compiler (`g++`) on PATH.
    Gxx,
    /// nvcc where `compiler = "nvcc"` looks for it.
    Nvcc,
    /// The absence of a GPU: tests of what a user without one sees.
    NoGpu,
    /// A Python interpreter with the cudafuzz package (the wheel) and pytest installed, named
    /// by `CUDAFUZZ_TEST_PYTHON` (ci/test.sh builds one in target/pyenv).
    CudafuzzPython,
}

impl Need {
    /// The name `CUDAFUZZ_REQUIRE` uses.
    pub fn name(self) -> &'static str {
        match self {
            Need::Gpu => "gpu",
            Need::Sanitizer => "sanitizer",
            Need::Nvrtc => "nvrtc",
            Need::Python3 => "python3",
            Need::Gxx => "g++",
            Need::Nvcc => "nvcc",
            Need::NoGpu => "no-gpu",
            Need::CudafuzzPython => "cudafuzz-python",
        }
    }

    /// Why this machine lacks it, or `None` when it has it.
    fn missing(self) -> Option<String> {
        match self {
            Need::Gpu => gpu_missing(),
            Need::Sanitizer => gpu_missing().or_else(|| cudafuzz::run::sanitizer::Sanitizer::locate().err().map(|e| e.to_string())),
            Need::Nvrtc => {
                let cache = tempfile::tempdir().expect("temp dir");
                Compiler::new(Some(cache.path().to_path_buf())).err().map(|e| e.to_string())
            }
            Need::Python3 => tool_missing("python3"),
            Need::Gxx => tool_missing("g++"),
            Need::Nvcc => cudafuzz::engine::compile::module::find_nvcc().is_none().then(|| {
                "no nvcc (CUDAFUZZ_NVCC, PATH, CUDA_HOME/bin, /usr/local/cuda/bin, .cuda-wheels): install the CUDA toolkit or the nvidia-cuda-nvcc wheel"
                    .to_string()
            }),
            Need::NoGpu => gpu_missing().is_none().then(|| "this machine has a GPU; the no-GPU path is tested on hosts without one".to_string()),
            Need::CudafuzzPython => cudafuzz_python_missing(),
        }
    }
}

/// The variable naming the interpreter of [`Need::CudafuzzPython`].
pub const TEST_PYTHON: &str = "CUDAFUZZ_TEST_PYTHON";

fn cudafuzz_python_missing() -> Option<String> {
    let Some(python) = std::env::var_os(TEST_PYTHON).filter(|p| !p.is_empty()) else {
        return Some(format!("{TEST_PYTHON} is not set (ci/python-env.sh builds the wheel into target/pyenv and prints the interpreter to name)"));
    };
    let out = Command::new(&python).args(["-c", "import cudafuzz._native, pytest"]).output();
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "{} cannot import cudafuzz._native and pytest: {}",
            Path::new(&python).display(),
            String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("")
        )),
        Err(e) => Some(format!("{} does not run: {e}", Path::new(&python).display())),
    }
}

fn gpu_missing() -> Option<String> {
    match cudafuzz::engine::gpu::device_count() {
        Ok(0) => Some("no CUDA device".to_string()),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

fn tool_missing(tool: &str) -> Option<String> {
    let ok = Command::new(tool).arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    (!ok).then(|| format!("no {tool} on PATH"))
}

/// Whether `CUDAFUZZ_REQUIRE` (or `CUDAFUZZ_REQUIRE_GPU=1`) demands `need`.
fn required(need: Need) -> bool {
    let gpu_host = std::env::var("CUDAFUZZ_REQUIRE_GPU").is_ok_and(|v| v == "1");
    if gpu_host && matches!(need, Need::Gpu | Need::Sanitizer) {
        return true;
    }
    let list = std::env::var("CUDAFUZZ_REQUIRE").unwrap_or_default();
    list.split(',').map(str::trim).any(|w| w == need.name() || (w == "all" && need != Need::NoGpu))
}

/// The running test's name (libtest runs each test on a thread named after it).
fn test_name() -> String {
    std::thread::current().name().filter(|n| *n != "main").unwrap_or("<unnamed test>").to_string()
}

/// Prints `SKIP <test>: <reason>` and appends it to `$CUDAFUZZ_SKIP_LOG` when set.
pub fn skip(reason: &str) {
    let line = format!("SKIP {}: {reason}", test_name());
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("CUDAFUZZ_SKIP_LOG") {
        // One write per line, in append mode: lines of tests running in parallel do not mix.
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&log) {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// Whether the machine has `need`; when not, the test is recorded as skipped (or fails, when
/// `CUDAFUZZ_REQUIRE` demands it) and the caller returns.
pub fn have(need: Need) -> bool {
    let Some(why) = need.missing() else { return true };
    if required(need) {
        panic!("CUDAFUZZ_REQUIRE demands {} but this test cannot run: {why}", need.name());
    }
    skip(&why);
    false
}

/// Whether the machine has every need in `needs` (checked in order; the first unmet one is the
/// reason given).
pub fn have_all(needs: &[Need]) -> bool {
    needs.iter().all(|&n| have(n))
}

/// An NVRTC compiler with its cache in `cache`, or `None` after recording the skip.
pub fn compiler(cache: &Path) -> Option<Compiler> {
    match Compiler::new(Some(cache.to_path_buf())) {
        Ok(c) => Some(c),
        Err(e) => {
            if required(Need::Nvrtc) {
                panic!("CUDAFUZZ_REQUIRE demands nvrtc but this test cannot run: {e}");
            }
            skip(&e.to_string());
            None
        }
    }
}

/// The interpreter with cudafuzz installed ([`Need::CudafuzzPython`]), or `None` after recording
/// the skip.
pub fn cudafuzz_python() -> Option<PathBuf> {
    have(Need::CudafuzzPython).then(|| PathBuf::from(std::env::var_os(TEST_PYTHON).expect("checked")))
}

/// `python3`, or `None` after recording the skip.
pub fn python3() -> Option<PathBuf> {
    have(Need::Python3).then(|| PathBuf::from("python3"))
}
