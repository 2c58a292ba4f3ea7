//! Worker processes: starting one, waiting for it to open the GPU, and ending it (politely,
//! after a grace, or at once).
//!
//! A start is split in two so that a spare can warm while the current worker runs cases:
//! [`spawn`] starts the process and returns a [`Starting`] worker at once; [`Starting::ready`]
//! waits for its first event. The worker opens the GPU on its own meanwhile.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::engine::gpu::GpuInfo;
use crate::engine::worker::WorkerEvent;

/// Grace between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_millis(500);

/// A worker that opened its GPU and waits for cases.
pub(super) struct WorkerHandle {
    pub(super) child: Child,
    pub(super) stdin: ChildStdin,
    pub(super) events: Receiver<String>,
    pub(super) gpu: GpuInfo,
    /// This worker among every worker of the process (a pid can come back).
    pub(super) serial: u64,
}

/// The last [`WorkerHandle::serial`] given out.
static SERIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A started worker process that has not said yet whether it opened the GPU.
pub(super) struct Starting {
    child: Child,
    stdin: ChildStdin,
    events: Receiver<String>,
    /// When the process was started.
    pub(super) since: Instant,
}

/// How a start ended, short of a ready worker.
pub(super) enum StartFailure {
    /// The worker said it could not open the GPU.
    NoGpu(String),
    /// The worker said its target's setup failed (a Python target's import or setup callable).
    Setup(String),
    /// The process ended, or said nothing within its time, before opening the GPU.
    Died(Option<std::process::ExitStatus>),
    /// `give_up` answered true: the process was killed.
    GaveUp,
}

/// Starts `cmd` as a worker in its own process group, its stdout read line by line on a thread.
pub(super) fn spawn(mut cmd: Command) -> std::io::Result<Starting> {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).process_group(0);
    let mut child = cmd.spawn()?;
    let stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(Starting { child, stdin, events: rx, since: Instant::now() })
}

impl Starting {
    /// Waits until `deadline` for the worker's first event (lines that are not events, a
    /// wrapper's banner, are skipped), asking `give_up` every 100 ms.
    pub(super) fn ready(mut self, deadline: Instant, give_up: &dyn Fn() -> bool) -> Result<WorkerHandle, StartFailure> {
        loop {
            if give_up() {
                kill_now(self.child);
                return Err(StartFailure::GaveUp);
            }
            let slice = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(100));
            match self.events.recv_timeout(slice) {
                Ok(line) => match serde_json::from_str::<WorkerEvent>(&line) {
                    Ok(WorkerEvent::Ready { gpu }) => {
                        let serial = SERIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                        return Ok(WorkerHandle { child: self.child, stdin: self.stdin, events: self.events, gpu, serial });
                    }
                    Ok(WorkerEvent::StartFailed { message, setup }) => {
                        let _ = self.child.wait();
                        return Err(if setup { StartFailure::Setup(message) } else { StartFailure::NoGpu(message) });
                    }
                    _ => {}
                },
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(_) => {
                    kill_group(&mut self.child);
                    return Err(StartFailure::Died(self.child.try_wait().ok().flatten()));
                }
            }
        }
    }

    /// Ends the process at once (a spare no longer needed).
    pub(super) fn discard(self) {
        kill_now(self.child);
    }
}

/// Closes a worker's stdin (its signal to finish) and waits up to `patience` for it to exit,
/// then kills its process group; once `give_up` answers true, it is killed at once.
pub(super) fn retire(mut w: WorkerHandle, patience: Duration, give_up: &dyn Fn() -> bool) {
    drop(w.stdin);
    let deadline = crate::core::clock::deadline_in(patience);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = w.child.try_wait() {
            return;
        }
        if give_up() {
            kill_now(w.child);
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    kill_group(&mut w.child);
}

/// SIGTERM to the child's process group, a grace period, then SIGKILL; reaps the child.
pub(super) fn kill_group(child: &mut Child) {
    let pgid = child.id() as libc::pid_t;
    // SAFETY: signalling a process group we created; failure (already gone) is harmless.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    let deadline = Instant::now() + KILL_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            // SAFETY: as above; the group may still hold grandchildren.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let _ = child.wait();
}

/// SIGKILL to the child's process group now; the child is reaped on a thread, since a process
/// stuck in the driver can take seconds to die and nobody needs to wait for it.
pub(super) fn kill_now(mut child: Child) {
    // SAFETY: signalling a process group we created; failure (already gone) is harmless.
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
    std::thread::spawn(move || {
        let _ = child.wait();
    });
}
