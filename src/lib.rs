//! cudafuzz finds memory-safety and correctness bugs in CUDA kernels.
//!
//! One case flows through the stages the modules are named after:
//! [`case`] → [`plan`] → [`arena`] → [`launch`] → [`oracle`] → [`finding`] → [`corpus`] (seeds).
//! Everything up to the arena's layout and everything after the download is pure host code and
//! is tested without a GPU; the CUDA calls live in [`gpu`], [`launch`] and the device half of
//! [`arena`], and run inside a [`worker`] process that the [`supervisor`] restarts when a sticky
//! CUDA error poisons its context.
#![deny(missing_docs)]

pub mod case;
pub mod error;
pub mod finding;
pub mod plan;
pub mod data;
pub mod reference;
pub mod manifest;
pub mod compile;
