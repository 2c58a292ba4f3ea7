//! [`MpsDaemon`]: a private CUDA MPS control daemon, so that the workers sharing one GPU share
//! one GPU context's time-slice instead of each holding its own.
//!
//! Why: without MPS, eight worker processes on one GPU are eight contexts that the GPU runs one
//! at a time, switching between them; each case's few short bursts of work wait for the other
//! seven's turns (an H200: 1,263 small cases/s with eight workers, 2,243 with one). Under MPS
//! their kernels and copies run side by side (8,435–10,184/s).
//!
//! The cost is isolation: under MPS a fatal fault of one client (an illegal address) reaches
//! every client on the GPU, with nothing saying whose it was, and the server takes no new client
//! until all of them have exited. So a case whose run under MPS ended in a fault, a crash, a hang
//! or an error is never reported as it is: [`super::Supervisor`] runs it again alone, in a
//! context of its own, and reports that run. A worker under MPS asks its context after each case
//! and while it waits for the next, and exits once it is lost (`engine/worker`).
//!
//! The daemon is this process's own: its pipe and log directories are a fresh temporary
//! directory, so no other program's CUDA calls reach it, and it is told to quit (and, should
//! this process die first, sent SIGTERM by the kernel) when the pool that started it ends.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::core::finding::FindingKind;
use crate::core::verdict::{Outcome, Verdict};

/// The program that starts and stops MPS servers (part of the NVIDIA driver's utilities).
pub const CONTROL: &str = "nvidia-cuda-mps-control";

pub use crate::engine::worker::MPS_PIPE_ENV as PIPE_ENV;
/// The environment variable naming the directory an MPS daemon logs into.
pub const LOG_ENV: &str = "CUDA_MPS_LOG_DIRECTORY";

/// How long the daemon gets to open its control socket.
const START_PATIENCE: Duration = Duration::from_secs(5);
/// How long the daemon gets to shut its server down and exit when told to quit.
const QUIT_PATIENCE: Duration = Duration::from_secs(5);

/// A running MPS control daemon of this process's (see the module's documentation), and the
/// workers that are its clients.
#[derive(Debug)]
pub struct MpsDaemon {
    dir: tempfile::TempDir,
    child: Child,
    /// Set once a worker could not be its client ([`MpsDaemon::abandon`]): every worker leaves
    /// MPS, so that none takes turns with the others' shared context (a mix of the two ran
    /// slower than either on an H200).
    abandoned: AtomicBool,
}

impl MpsDaemon {
    /// Starts a daemon in a fresh temporary directory and waits for its control socket; an error
    /// says why not in a sentence (the program is missing, it exited, it never listened).
    pub fn start() -> Result<MpsDaemon, String> {
        let dir = tempfile::Builder::new().prefix("cudafuzz-mps-").tempdir().map_err(|e| format!("cannot make its directory: {e}"))?;
        for sub in ["pipe", "log"] {
            std::fs::create_dir(dir.path().join(sub)).map_err(|e| format!("cannot make its directory: {e}"))?;
        }
        let mut cmd = Command::new(CONTROL);
        // A group of its own (with the server it starts): Ctrl-C at the terminal is cudafuzz's to
        // handle, and the daemon must outlive it until the workers have stopped.
        cmd.arg("-f").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).process_group(0);
        Self::point(&mut cmd, dir.path());
        // SAFETY: prctl is async-signal-safe, and nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // Should cudafuzz die without quitting it, the daemon is told to end too.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{CONTROL} is not on PATH (it comes with the NVIDIA driver's utilities)"),
            _ => format!("{CONTROL} could not start: {e}"),
        })?;
        let mut daemon = MpsDaemon { dir, child, abandoned: AtomicBool::new(false) };
        let control = daemon.pipe().join("control");
        let since = Instant::now();
        while !control.exists() {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(format!("{CONTROL} -f exited ({status}) before it listened{}", daemon.log_tail()));
            }
            if since.elapsed() > START_PATIENCE {
                return Err(format!("{CONTROL} -f did not listen within {} s{}", START_PATIENCE.as_secs(), daemon.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(daemon)
    }

    /// Makes `cmd` (a worker) a client of this daemon.
    pub fn configure(&self, cmd: &mut Command) {
        Self::point(cmd, self.dir.path());
    }

    /// A worker on `gpu` could not be a client (`why`): every worker leaves MPS, and this is
    /// said once.
    pub fn abandon(&self, gpu: usize, why: &str) {
        if !self.abandoned.swap(true, Ordering::SeqCst) {
            let _ = writeln!(std::io::stderr(), "cudafuzz: the workers leave MPS (on GPU {gpu}: {why}); each takes turns on its GPU from its next start");
        }
    }

    /// Whether the workers should leave MPS ([`MpsDaemon::abandon`]).
    pub fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::SeqCst)
    }

    fn point(cmd: &mut Command, dir: &Path) {
        cmd.env(PIPE_ENV, dir.join("pipe")).env(LOG_ENV, dir.join("log"));
    }

    fn pipe(&self) -> PathBuf {
        self.dir.path().join("pipe")
    }

    /// The last lines of the daemon's log, for an error message (empty when there are none).
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("log").join("control.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(3).collect();
        if lines.is_empty() {
            return String::new();
        }
        format!("; its log ends: {}", lines.into_iter().rev().collect::<Vec<_>>().join(" | "))
    }
}

/// Whether a run under MPS ended in something another client's fault could have caused: a
/// lost context, a fault, a crash, a hang, or a harness error (a module load that meets the
/// lost context fails with the fault's error). Such a case is run again alone. Another client
/// cannot change what a run computes (each has its own address space), so wrong values and
/// damaged canaries stand.
pub fn doubtful(v: &Verdict) -> bool {
    matches!(v.outcome, Outcome::Error { .. }) || faulted(v)
}

/// Whether a run ended in a fault of its kernel: a lost context, a fault, a crash or a hang.
pub fn faulted(v: &Verdict) -> bool {
    v.sticky || matches!(&v.outcome, Outcome::Fail { findings } if findings.iter().any(|f| f.kind.is_fault() || f.kind == FindingKind::Hang))
}

/// Whether [`CONTROL`] is on `PATH`.
pub fn on_path() -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(CONTROL).is_file()))
}

impl Drop for MpsDaemon {
    fn drop(&mut self) {
        let until = Instant::now() + QUIT_PATIENCE;
        let exited = |c: &mut Child| matches!(c.try_wait(), Ok(Some(_)));
        let wait = |c: &mut Child| {
            while Instant::now() < until {
                if exited(c) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            exited(c)
        };
        let mut quit = Command::new(CONTROL);
        quit.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
        Self::point(&mut quit, self.dir.path());
        if let Ok(mut q) = quit.spawn() {
            if let Some(mut stdin) = q.stdin.take() {
                let _ = stdin.write_all(b"quit\n");
            }
            // `quit` waits for the server, which waits for its clients: not forever.
            if !wait(&mut q) {
                let _ = q.kill();
                let _ = q.wait();
            }
        }
        if !wait(&mut self.child) {
            // The daemon and the server it started, which share its process group.
            // SAFETY: a plain signal to the group this daemon leads.
            unsafe { libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(outcome: Outcome, sticky: bool) -> Verdict {
        Verdict {
            outcome,
            contract: crate::core::plan::ContractVerdict::Inside,
            reference: crate::core::verdict::ReferenceUsed::None,
            sticky,
            times: Default::default(),
            allocations: None,
            coverage: None,
            output_digest: None,
            notes: Vec::new(),
        }
    }

    fn failing(kind: FindingKind) -> Outcome {
        Outcome::Fail { findings: vec![crate::core::finding::Finding { kind, ..crate::testing::misaligned_fault("k", [16; 4]) }] }
    }

    #[test]
    fn what_another_client_could_cause_runs_again_alone_and_wrong_values_stand() {
        for kind in [
            FindingKind::MisalignedAddress,
            FindingKind::IllegalAddress,
            FindingKind::LaunchFailure,
            FindingKind::CudaError,
            FindingKind::WorkerCrash,
            FindingKind::Hang,
        ] {
            assert!(doubtful(&verdict(failing(kind), false)), "{kind:?}");
        }
        assert!(doubtful(&verdict(Outcome::Error { message: "loading the generator: CUDA_ERROR_MISALIGNED_ADDRESS (716)".into() }, false)));
        // A lost context makes any verdict doubtful, even one the oracles passed.
        assert!(doubtful(&verdict(Outcome::Pass, true)));
        for kind in [FindingKind::NumericalError, FindingKind::CanaryDamage, FindingKind::UnwrittenOutput, FindingKind::NanLeak, FindingKind::Nondeterminism] {
            assert!(!doubtful(&verdict(failing(kind), false)), "{kind:?}: another client cannot change what a run computes");
        }
        assert!(!doubtful(&verdict(Outcome::Pass, false)));
    }

    #[test]
    fn a_missing_control_program_is_named_in_the_error() {
        if on_path() {
            println!("skipped: {CONTROL} is installed here, so it cannot be missing");
            return;
        }
        let err = MpsDaemon::start().expect_err("no control program");
        assert!(err.contains(CONTROL) && err.contains("PATH"), "{err}");
    }
}
