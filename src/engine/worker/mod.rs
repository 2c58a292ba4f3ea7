//! The worker process: `cudafuzz worker`, cases in on stdin, events out on stdout.
//!
//! A sticky CUDA error (700, 716, 719) poisons the context for the rest of the process, and a
//! hung kernel cannot be cancelled from the host, so cases run in a child process that the
//! [`supervisor`](crate::run::supervisor) can restart or kill. The protocol is one JSON object per
//! line in each direction: [`WorkerRequest`] in, [`WorkerEvent`] out. After a verdict with
//! `sticky: true` the worker exits with [`EXIT_STICKY`] so the next case gets a fresh context.

mod device_data;
mod device_judge;
pub mod engine;
mod error;
mod reference;
mod run;

use std::io::{BufRead, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::core::case::Case;
use crate::core::verdict::{RunOptions, Verdict};
use crate::engine::gpu::GpuInfo;
pub use device_data::DATA_PATH_ENV;
pub use engine::{Engine, EngineError};

/// Exit status of a worker that stopped because its CUDA context is poisoned.
pub const EXIT_STICKY: i32 = 86;
/// Exit status of a worker that could not open the GPU.
pub const EXIT_NO_GPU: i32 = 87;

/// One case for a worker to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerRequest {
    /// Supervisor-assigned id, echoed in every event about this case.
    pub id: u64,
    /// The case.
    pub case: Case,
    /// Manifest of the kernel under test.
    pub manifest: PathBuf,
    /// Run switches.
    pub options: RunOptions,
}

/// What a worker reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    /// The GPU is open and the worker takes cases.
    Ready {
        /// The GPU.
        gpu: GpuInfo,
    },
    /// The worker could not start.
    StartFailed {
        /// Why.
        message: String,
        /// Whether it was the target's setup that failed (a Python target's import or setup
        /// callable), not the GPU.
        #[serde(default)]
        setup: bool,
    },
    /// The kernel under test is about to be launched: arm the watchdog.
    Launched {
        /// Case id.
        id: u64,
    },
    /// The target started (`started`) or finished compiling code inside its call (a Python
    /// target's JIT: a Triton specialisation, an autotuning run): the watchdog gives compiling
    /// its own budget instead of the kernel's.
    Compiling {
        /// Case id.
        id: u64,
        /// Whether compiling starts (`true`) or ends.
        started: bool,
    },
    /// The case is finished.
    Done {
        /// Case id.
        id: u64,
        /// Its verdict (boxed: it is most of the event's size).
        verdict: Box<Verdict>,
    },
}

fn emit(out: &mut impl Write, event: &WorkerEvent) {
    let line = serde_json::to_string(event).expect("events serialize");
    // A closed stdout means the supervisor is gone; there is nobody left to tell.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// Where [`compiling`] reports go while a case runs: the event channel and the case's id.
static COMPILE_NOTICES: std::sync::Mutex<Option<(std::fs::File, u64)>> = std::sync::Mutex::new(None);

/// Tells the supervisor that the running case's target starts (`true`) or stops compiling, so
/// the watchdog does not take a JIT compile for a hung kernel. Called by a Python target's hooks
/// (Triton's compile hooks, through `cudafuzz._native`); outside a case it does nothing.
pub fn compiling(started: bool) {
    let mut notices = COMPILE_NOTICES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((out, id)) = notices.as_mut() {
        let id = *id;
        emit(out, &WorkerEvent::Compiling { id, started });
    }
}

/// Exit status of a worker whose target's setup failed.
pub const EXIT_SETUP: i32 = 88;

/// Where events go: the process's stdout, or (in a Python worker, where the target's own
/// prints must not reach the supervisor as protocol) a copy of it taken before stdout was
/// pointed at stderr.
fn event_channel(python: bool) -> std::fs::File {
    use std::os::fd::FromRawFd;
    // SAFETY: duplicating and redirecting the process's own standard descriptors; the new
    // descriptor is owned by the returned file alone.
    unsafe {
        let fd = libc::dup(1);
        if python && fd >= 0 {
            libc::dup2(2, 1);
        }
        std::fs::File::from_raw_fd(if fd >= 0 { fd } else { 1 })
    }
}

/// The environment variable naming the directory of an MPS daemon's sockets: a CUDA program
/// whose value names a running daemon's becomes its client.
pub const MPS_PIPE_ENV: &str = "CUDA_MPS_PIPE_DIRECTORY";

/// How often a worker waiting for its next case under MPS looks whether its context was lost.
const IDLE_LOOK: std::time::Duration = std::time::Duration::from_millis(10);

/// The request lines on stdin, read by a thread of their own so that the loop can wait for one
/// with a timeout; the channel ends when stdin closes or fails.
fn request_lines() -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Runs the worker loop on stdin/stdout until stdin closes; returns the process exit status.
///
/// `target` is a Python target's manifest, given to a worker started for one: its setup runs
/// before the worker says it is ready, and a setup that fails ends the worker with
/// [`EXIT_SETUP`].
pub fn main(gpu: usize, reference_dir: Option<PathBuf>, target: Option<PathBuf>) -> i32 {
    let mut out = event_channel(target.is_some());
    let mut engine = match Engine::new(gpu, reference_dir) {
        Ok(e) => e,
        Err(e) => {
            emit(&mut out, &WorkerEvent::StartFailed { message: crate::core::error::chain(&e), setup: false });
            return EXIT_NO_GPU;
        }
    };
    if let Some(path) = &target {
        let set_up = engine.manifest(path).and_then(|m| engine.set_up(&m));
        if let Err(e) = set_up {
            emit(&mut out, &WorkerEvent::StartFailed { message: crate::core::error::chain(&e), setup: true });
            return EXIT_SETUP;
        }
    }
    emit(&mut out, &WorkerEvent::Ready { gpu: engine.gpu().clone() });
    let requests = request_lines();
    // An MPS client is reached by another client's fault while it waits for its next case, and
    // the server takes no new worker until it has exited: it looks while it waits.
    let watch = std::env::var_os(MPS_PIPE_ENV).is_some();
    let lost = || watch && crate::engine::gpu::synchronize().is_err();
    loop {
        let next = if watch { requests.recv_timeout(IDLE_LOOK) } else { requests.recv().map_err(|_| std::sync::mpsc::RecvTimeoutError::Disconnected) };
        let line = match next {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if lost() {
                    std::process::exit(EXIT_STICKY);
                }
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if line.trim().is_empty() {
            continue;
        }
        let req: WorkerRequest = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                emit(&mut out, &WorkerEvent::StartFailed { message: format!("bad request from supervisor: {e}"), setup: false });
                return 2;
            }
        };
        let id = req.id;
        let mut verdict = {
            let mut launch_out = out.try_clone().expect("the event channel can be shared");
            let mut on_launch = || emit(&mut launch_out, &WorkerEvent::Launched { id });
            *COMPILE_NOTICES.lock().unwrap_or_else(|p| p.into_inner()) = out.try_clone().ok().map(|o| (o, id));
            let mut v = engine.run_case(&req.case, &req.manifest, &req.options, &mut on_launch);
            *COMPILE_NOTICES.lock().unwrap_or_else(|p| p.into_inner()) = None;
            v.allocations = engine.take_allocations();
            v
        };
        // Under MPS another client's fault can take the context while a case runs, and a
        // harness call or a launch that meets it is not always told so as a fault: the context
        // says. A lost one makes the verdict sticky, so the case runs again alone.
        if !verdict.sticky && lost() {
            verdict.sticky = true;
        }
        let sticky = verdict.sticky;
        emit(&mut out, &WorkerEvent::Done { id, verdict: Box::new(verdict) });
        if sticky {
            // Straight out: tearing down caches on a poisoned context only fails slowly.
            std::process::exit(EXIT_STICKY);
        }
    }
    0
}
