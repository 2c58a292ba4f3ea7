//! [`Backend`]: what runs a gate's cases, and the jobs and errors that pass through it. The gate
//! only plans and records; running cases is behind this trait so that the CLI can drive the
//! supervisor and its workers while the tests script every step with a fake.

use std::path::PathBuf;
use std::time::Instant;

use thiserror::Error;

use crate::core::case::Case;
use crate::core::finding::Finding;
use crate::core::manifest::Manifest;
use crate::core::shard::Shard;
use crate::core::verdict::Outcome;
use crate::run::sanitizer::Tool;
use crate::tools::report::export::{Campaign, GpuSummary, MatrixCell};
use crate::tools::sweep::CellSpec;

/// Why a backend could not do a step.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepError {
    /// The GPU went away (or was never there).
    #[error("no GPU: {0}")]
    NoGpu(String),
    /// The user stopped the run.
    #[error("interrupted")]
    Interrupted,
    /// The harness failed (a worker could not start, a journal could not be written, ...).
    #[error("{0}")]
    Failed(String),
}

/// A finding a backend reports while it runs cases.
#[derive(Clone, Debug)]
pub struct Found {
    /// The case in one line.
    pub case: String,
    /// The finding.
    pub finding: Finding,
    /// The seed saved for it (`None` when an earlier, smaller seed of the signature is kept).
    pub seed: Option<PathBuf>,
}

/// One fuzz campaign to run.
#[derive(Clone, Copy, Debug)]
pub struct FuzzJob<'a> {
    /// The kernel.
    pub manifest: &'a Manifest,
    /// Generator seed.
    pub seed: u64,
    /// This shard: local case `i` is global case [`Shard::global`]`(i)`.
    pub shard: Shard,
    /// Case limit.
    pub cases: Option<u64>,
    /// Stop at this time.
    pub deadline: Instant,
    /// Run cases outside the contract too.
    pub outside_contract: bool,
    /// Tools that name new findings; empty: none.
    pub escalate: &'a [Tool],
}

/// One sanitizer pass to run.
#[derive(Clone, Copy, Debug)]
pub struct SanitizeJob<'a> {
    /// The kernel.
    pub manifest: &'a Manifest,
    /// The tools.
    pub tools: &'a [Tool],
    /// Case limit.
    pub cases: u64,
    /// Generator seed (the same cases as the fuzz campaign's first ones).
    pub seed: u64,
    /// This shard.
    pub shard: Shard,
    /// Stop at this time.
    pub deadline: Instant,
}

/// What runs the cases of a gate: the CLI's backend drives the supervisor and its workers.
pub trait Backend {
    /// The GPU, or why there is none.
    fn gpu(&mut self) -> Result<GpuSummary, StepError>;
    /// compute-sanitizer's path and version, or why it cannot be used.
    fn sanitizer(&mut self) -> Result<String, StepError>;
    /// Runs one case natively, or under `tool`.
    fn run_case(&mut self, manifest: &Manifest, case: &Case, tool: Option<Tool>) -> Result<Outcome, StepError>;
    /// Runs one sweep cell; failing repetitions' findings go to `found`.
    fn sweep_cell(&mut self, job: &CellSpec<'_>, found: &mut dyn FnMut(Found)) -> Result<MatrixCell, StepError>;
    /// Runs a fuzz campaign; new findings go to `found`. The returned counts need no budget.
    fn fuzz(&mut self, job: &FuzzJob<'_>, found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError>;
    /// Runs a sanitizer pass; findings go to `found`.
    fn sanitize(&mut self, job: &SanitizeJob<'_>, found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError>;
}
