//! Supervision: worker processes and their watchdog ([`supervisor`]), compute-sanitizer around
//! them ([`sanitizer`]), and the loop of many cases on one kernel ([`campaign`]). [`config`] is
//! the engine configuration every command builds once from its options.

pub mod campaign;
pub mod config;
pub mod sanitizer;
pub mod supervisor;
pub mod trace;

use std::path::PathBuf;
use std::sync::OnceLock;

/// How this process starts another of itself, when that is not its executable alone.
static SELF_COMMAND: OnceLock<(PathBuf, Vec<String>)> = OnceLock::new();

/// Says how workers of this process are started: `program` and the arguments that come before
/// `worker` (the Python package runs as `python -m cudafuzz`, whose executable is the
/// interpreter). The first call wins.
pub fn set_self_command(program: PathBuf, lead: Vec<String>) {
    let _ = SELF_COMMAND.set((program, lead));
}

/// The program and leading arguments set by [`set_self_command`], if any.
pub fn self_command() -> Option<&'static (PathBuf, Vec<String>)> {
    SELF_COMMAND.get()
}
