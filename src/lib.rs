//! cudafuzz finds memory-safety and correctness bugs in CUDA kernels.
//!
//! One case flows through the stages the modules are named after: [`core::case`] →
//! [`core::plan`] → [`engine::arena`] → [`engine::launch`] → [`engine::oracle`] →
//! [`core::finding`] → [`core::triage`] (bugs) → [`core::corpus`] (seeds). The folders are the
//! layers, each importing only from the ones below it:
//!
//! | layer | holds |
//! | --- | --- |
//! | [`core`] | plain types and pure host logic: cases, plans, manifests, findings, verdicts, bugs, seeds |
//! | [`engine`] | what runs inside a worker process: inputs, references, NVRTC, the arena, launch, oracles |
//! | [`run`] | supervision: worker processes, compute-sanitizer, campaigns |
//! | [`tools`] | what commands are made of: gate, sweep, minimize, contract inference, repro emitters, reports, bench |
//! | [`cli`] | argument parsing and rendering only |
//!
//! Everything up to the arena's layout and everything after the download is pure host code and
//! is tested without a GPU; the CUDA calls live in [`engine::gpu`], [`engine::launch`] and the
//! device half of [`engine::arena`], and run inside a [`engine::worker`] process that the
//! [`run::supervisor`] restarts when a sticky CUDA error poisons its context or a kernel hangs.
#![deny(missing_docs)]
// Errors are the cold path: a large `Err` (a CompileError carries the NVRTC log and paths) costs
// nothing measurable, and boxing every variant would only make construction noisier.
#![allow(clippy::result_large_err)]

pub mod cli;
pub mod core;
pub mod engine;
pub mod run;
#[cfg(test)]
mod testing;
pub mod tools;

// The types most callers need, at the crate root; everything else through its layer.
pub use crate::core::case::{Case, Dtype, Scalar, TensorLayout};
pub use crate::core::corpus::Seed;
pub use crate::core::finding::{Finding, FindingKind, Oracle, Signature};
pub use crate::core::manifest::Manifest;
pub use crate::core::plan::Plan;
pub use crate::core::tool::Tool;
pub use crate::core::triage::{Bug, BugId, Triage};
pub use crate::core::verdict::{Outcome, RunOptions, Verdict};
pub use crate::engine::compile::{Arch, Compiler};
pub use crate::run::campaign::{CampaignSpec, CaseStream, SeedKeeper};
pub use crate::run::config::EngineConfig;
pub use crate::run::supervisor::{Pool, Supervisor};
pub use crate::tools::report::export::RunReport;
