//! What the commands are made of, above campaigns: the nightly [`gate`], the failure matrix
//! ([`sweep`]), [`minimize`], contract inference ([`contract`]), standalone repros ([`emit`]),
//! run reports ([`report`]) and throughput measurement ([`mod@bench`]).

pub mod bench;
pub mod contract;
pub mod emit;
pub mod floor;
pub mod gate;
pub mod minimize;
pub mod report;
pub mod sweep;
