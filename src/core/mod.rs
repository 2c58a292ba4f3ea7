//! The bottom layer: plain, serialisable types and the pure host logic over them. Nothing here
//! touches CUDA or starts a process, so all of it is tested on any machine.
//!
//! A [`case::Case`] (drawn by [`generate`]) is planned against its kernel's [`manifest`] into a
//! [`plan::Plan`] and an arena [`layout`]; a case's result is a [`verdict::Verdict`] holding
//! [`finding::Finding`]s, which [`triage`] files under bugs and [`corpus`] saves as seeds.

pub mod case;
pub mod clock;
pub mod corpus;
pub mod coverage;
pub mod error;
pub mod exit;
pub mod finding;
pub mod generate;
pub mod layout;
pub mod manifest;
pub mod plan;
pub mod registry;
pub mod shard;
pub mod target;
pub mod tool;
pub mod triage;
pub mod userfile;
pub mod verdict;
