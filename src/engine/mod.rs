//! What runs inside a worker process, one case at a time: inputs ([`data`]), the fp64
//! references ([`mod@reference`]), NVRTC ([`compile`]), the GPU ([`gpu`]), the guarded [`arena`],
//! the [`launch`], the [`oracle`]s, and the sanitizer's case markers ([`marker`]). [`worker`] is
//! the process loop that runs them and reports a [`crate::core::verdict::Verdict`] per case.
//!
//! A sticky CUDA error poisons this whole layer's process; the [`crate::run`] layer above
//! restarts it.

pub mod arena;
pub mod compile;
pub mod data;
pub mod floor;
pub mod gpu;
pub mod launch;
pub mod marker;
pub mod oracle;
pub mod reference;
pub mod worker;
