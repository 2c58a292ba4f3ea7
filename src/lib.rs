//! cudafuzz finds memory-safety and correctness bugs in CUDA kernels.
//!
//! One case flows through the stages the modules are named after:
//! [`case`] → [`plan`] → [`arena`] → [`launch`] → [`oracle`] → [`finding`] → [`corpus`] (seeds).
//! Everything up to the arena's layout and everything after the download is pure host code and
//! is tested without a GPU; the CUDA calls live in [`gpu`], [`launch`] and the device half of
//! [`arena`], and run inside a [`worker`] process that the [`supervisor`] restarts when a sticky
//! CUDA error poisons its context or a kernel hangs. [`manifest`] describes a kernel to the
//! harness and [`compile`] turns it into a cubin with NVRTC.
#![deny(missing_docs)]
// Errors are the cold path: a large `Err` (a CompileError carries the NVRTC log and paths) costs
// nothing measurable, and boxing every variant would only make construction noisier.
#![allow(clippy::result_large_err)]

pub mod arena;
pub mod bench;
pub mod campaign;
pub mod case;
pub mod cli;
pub mod clock;
pub mod compile;
pub mod config;
pub mod corpus;
pub mod coverage;
pub mod data;
pub mod emit;
pub mod error;
pub mod exit;
pub mod finding;
pub mod gate;
pub mod generate;
pub mod gpu;
pub mod infer;
pub mod launch;
pub mod manifest;
pub mod minimize;
pub mod oracle;
pub mod plan;
pub mod reference;
pub mod registry;
pub mod report;
pub mod sanitizer;
pub mod shard;
pub mod supervisor;
pub mod sweep;
#[cfg(test)]
mod testing;
pub mod triage;
pub mod userfile;
pub mod worker;
