//! Supervision: worker processes and their watchdog ([`supervisor`]), compute-sanitizer around
//! them ([`sanitizer`]), and the loop of many cases on one kernel ([`campaign`]). [`config`] is
//! the engine configuration every command builds once from its options.

pub mod campaign;
pub mod config;
pub mod sanitizer;
pub mod supervisor;
