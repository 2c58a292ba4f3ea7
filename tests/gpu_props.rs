//! Properties of the correct kernel (`flash_fwd`) over GPU runs, as proptest properties:
//!
//! 1. every generated case inside its contract passes every oracle (fp64 reference, canaries,
//!    sentinel, NaN leaks, determinism);
//! 2. layout/offset metamorphism: the same logical inputs in other layouts at other offsets give
//!    bitwise the same output (the kernel's vector and scalar paths compute the same thing);
//! 3. determinism across runs: running a case again, in the same worker, gives the same bits.
//!
//! Each test needs a GPU and skips with a printed reason without one (see tests/gpu_engine.rs
//! for how a GPU host runs them). Failures are shrunk by
//! proptest and persisted to `proptest-regressions/gpu_props.txt` (committed), whose seeds are
//! replayed first on every run.

use std::cell::RefCell;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use cudafuzz::core::case::Case;
use cudafuzz::core::generate::strategy::cases;
use cudafuzz::core::generate::DecodeContext;
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::plan::admits;
use cudafuzz::core::verdict::{Outcome, RunOptions, Verdict};
use cudafuzz::run::supervisor::{Supervisor, SupervisorConfig};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};

mod common;
use common::{exe, relayout, root, small};

fn config(cases: u32) -> Config {
    Config { failure_persistence: Some(Box::new(FileFailurePersistence::Direct("proptest-regressions/gpu_props.txt"))), ..Config::with_cases(cases) }
}

struct Gpu {
    sup: RefCell<Supervisor>,
    manifest: Manifest,
}

impl Gpu {
    fn new() -> Gpu {
        let journal = std::env::temp_dir().join(format!("cudafuzz-gpu-props-{}.jsonl", std::process::id()));
        let sup = Supervisor::new(SupervisorConfig {
            exe: exe(),
            gpu: 0,
            reference_dir: Some(root().join("kernels/reference")),
            journal: Some(journal),
            stop: Arc::new(AtomicBool::new(false)),
            sanitizer: None,
        })
        .unwrap();
        let manifest = Manifest::load(&root().join("kernels/attention/flash_fwd.toml")).unwrap();
        Gpu { sup: RefCell::new(sup), manifest }
    }

    fn inside(&self, case: &Case) -> bool {
        admits(&self.manifest, case)
    }

    fn run(&self, case: &Case, determinism: bool) -> Result<Verdict, TestCaseError> {
        let opts = RunOptions { determinism, digest: true, ..RunOptions::default() };
        self.sup.borrow_mut().run(case, &self.manifest, &opts, Duration::from_secs(20)).map_err(|e| TestCaseError::fail(format!("the GPU run failed: {e}")))
    }

    /// Cases of flash_fwd small enough for a few hundred GPU runs per test: every dim at most
    /// 160, head_dim at most 128.
    fn cases(&self) -> impl Strategy<Value = Case> {
        let m = self.manifest.clone();
        cases(DecodeContext::new(&m), |c| c).prop_map(move |c| m.bind(small(&m, c, &|d| if d == "head_dim" { 128 } else { 160 })))
    }
}

fn passes(v: &Verdict, what: &str) -> Result<(), TestCaseError> {
    match &v.outcome {
        Outcome::Pass => Ok(()),
        other => Err(TestCaseError::fail(format!("{what}: {other:?}"))),
    }
}

macro_rules! require_gpu {
    () => {
        if common::lacks_gpu(false) {
            return;
        }
    };
}

#[test]
fn correct_kernel_passes_every_oracle_on_generated_cases() {
    require_gpu!();
    let gpu = Gpu::new();
    let mut runner = TestRunner::new(config(96));
    let result = runner.run(&gpu.cases(), |case| {
        prop_assume!(gpu.inside(&case));
        let v = gpu.run(&case, true)?;
        passes(&v, &case.summary())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn output_does_not_depend_on_layout_or_offset() {
    require_gpu!();
    let gpu = Gpu::new();
    let mut runner = TestRunner::new(config(64));
    // Other cases' layouts (orders, padding, offsets), on the first case's dims and values.
    let other_layouts = gpu.cases();
    let result = runner.run(&(gpu.cases(), other_layouts), |(case, other): (Case, Case)| {
        let moved = relayout(&case, &other);
        prop_assume!(gpu.inside(&case) && gpu.inside(&moved));
        let a = gpu.run(&case, false)?;
        let b = gpu.run(&moved, false)?;
        passes(&a, &case.summary())?;
        passes(&b, &moved.summary())?;
        prop_assert_eq!(&a.output_digest, &b.output_digest, "{} vs {}", case.summary(), moved.summary());
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn a_case_run_again_gives_the_same_bits() {
    require_gpu!();
    let gpu = Gpu::new();
    let mut runner = TestRunner::new(config(48));
    let result = runner.run(&gpu.cases(), |case| {
        prop_assume!(gpu.inside(&case));
        let a = gpu.run(&case, false)?;
        let b = gpu.run(&case, false)?;
        passes(&a, &case.summary())?;
        prop_assert!(a.output_digest.is_some());
        prop_assert_eq!(&a.output_digest, &b.output_digest, "{}", case.summary());
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
