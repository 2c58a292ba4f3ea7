//! Process exit statuses, in one place so scripts and CI can rely on them.

/// Everything ran and nothing was found.
pub const OK: i32 = 0;
/// At least one finding (or, for `gate`-style commands, a regression).
pub const FINDINGS: i32 = 1;
/// `case check`: the case lies outside its kernel's contract (the same status as a finding:
/// the check found something).
pub const OUTSIDE_CONTRACT: i32 = 1;
/// Bad input: a malformed seed, case or manifest, or a bad command line.
pub const USAGE: i32 = 2;
/// No usable GPU on this machine (no driver, or no device).
pub const NO_GPU: i32 = 3;
/// The harness could not do its job: a kernel failed to compile, NVRTC is missing, a worker
/// could not start, or a case could not be run for another reason that is not a kernel bug.
pub const SETUP: i32 = 4;
/// Stopped by Ctrl-C.
pub const INTERRUPTED: i32 = 130;
