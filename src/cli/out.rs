//! Printing to stdout and stderr without panicking: `println!` panics when the reader has gone
//! (`cudafuzz kernels | head -1`), so every command prints through [`outln!`] and [`out!`],
//! which return [`StdoutClosed`] instead.
//!
//! A closed stdout ends the command quietly with exit 0 (the reader had what it wanted): the
//! error propagates with `?` where the command prints, and the process's stop flag (the one
//! Ctrl-C sets) is raised so a campaign printing from a callback stops at its next case.
//! Stderr is best effort: a diagnostic that cannot be shown is dropped.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout failed because its reader went away.
static BROKEN_PIPE: AtomicBool = AtomicBool::new(false);

/// A write to stdout failed; the command should stop.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to stdout")]
pub(crate) struct StdoutClosed(#[source] io::Error);

/// Writes to stdout and flushes (so a closed pipe shows up here, not at exit).
pub(crate) fn print(args: fmt::Arguments<'_>) -> Result<(), StdoutClosed> {
    if BROKEN_PIPE.load(Ordering::SeqCst) {
        return Err(StdoutClosed(io::ErrorKind::BrokenPipe.into()));
    }
    let mut out = io::stdout().lock();
    out.write_fmt(args).and_then(|()| out.flush()).map_err(|e| {
        if e.kind() == io::ErrorKind::BrokenPipe {
            BROKEN_PIPE.store(true, Ordering::SeqCst);
            crate::run::config::stop_flag().store(true, Ordering::SeqCst);
        }
        StdoutClosed(e)
    })
}

/// Writes to stderr; a failure is dropped (there is nowhere left to report it). Once stdout's
/// reader has gone the command is ending quietly, and says nothing more (such as how a
/// campaign stopped by the closed pipe was "interrupted").
pub(crate) fn eprint(args: fmt::Arguments<'_>) {
    if !broken_pipe() {
        let _ = io::stderr().lock().write_fmt(args);
    }
}

/// Whether stdout's reader went away: the command then ends quietly with exit 0.
pub(crate) fn broken_pipe() -> bool {
    BROKEN_PIPE.load(Ordering::SeqCst)
}
