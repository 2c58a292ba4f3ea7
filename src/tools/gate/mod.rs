//! `cudafuzz gate`: the nightly job, as configuration, a time budget and an ordered plan.
//!
//! A [`GateConfig`] (TOML, see `ci/gate.toml`) names the kernels to fuzz and their share of the
//! budget, the seed directories to replay with what each seed must do, the sweep matrices, the
//! sanitizer passes, and the planted bug that proves compute-sanitizer works. [`GateConfig::plan`]
//! resolves it on the host (kernels, seeds, classes, parameter grids) into a [`GatePlan`], so a
//! bad configuration is an error before any GPU work starts.
//!
//! [`run`] executes the plan in order within the [`Budget`], through a [`Backend`] that runs
//! cases ([`GpuBackend`]: the supervisor and its workers; tests use a fake):
//!
//! 1. environment: GPU, driver, compute-sanitizer, and the planted bug caught under its tool. A
//!    gate that checked nothing must fail: without a GPU nothing else runs and the report says
//!    so; a missing sanitizer or an uncaught planted bug fails the gate whatever else happens.
//! 2. replay every seed this shard owns: an expected failure must still fail with its saved
//!    signature, a fixed bug (a seed under a `fixed/` directory, or `expect = "pass"`) must pass.
//! 3. the sweep matrices, cell by cell (cells are dealt round-robin to shards).
//! 4. fuzz each gated kernel for its share of what is left of the budget (every shard fuzzes
//!    every kernel, on its own slice of the case stream: case `i` of shard `s` of `N` is global
//!    case `s + i * N`).
//! 5. the sanitizer passes, in the time kept for them.
//!
//! The result is a [`RunReport`]; the CLI writes it in all four formats. A finding is *new*
//! unless its signature is one that an expected-failure seed carries (or it came from a sweep
//! row that is only recorded).
//!
//! [`run`]: run()
//! [`RunReport`]: crate::tools::report::export::RunReport

use std::time::Duration;

mod backend;
mod budget;
mod config;
mod gpu;
mod plan;
mod run;
#[cfg(test)]
mod testing;

pub use backend::{Backend, Found, FuzzJob, SanitizeJob, StepError};
pub use budget::{parse_budget, split, Budget, BudgetError};
pub use config::{GateConfig, GateError, GateSettings, GatedKernel, SanitizerSpec, SeedExpect, SeedSet, SelfCheck, SweepExpect, SweepSpec};
pub use gpu::GpuBackend;
pub use plan::{config_label, GatePlan, PlannedKernel, PlannedSanitizer, PlannedSeed, PlannedSelfCheck, PlannedSweep};
pub use run::{checks, run};

/// The budget when neither `--budget` nor `[gate] budget` gives one.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(20 * 60);
