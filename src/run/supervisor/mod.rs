//! The supervisor: owns worker processes, the journal and the watchdog.
//!
//! Like nextest's dispatcher, it alone holds run state; workers only exchange typed messages with
//! it. Each case is appended to the journal *before* it is sent, so a worker that dies — sticky
//! 700/716, segfault, `kill -9`, a hang the watchdog ends — never takes the case with it. A dead
//! worker becomes a [`FindingKind::WorkerCrash`] or [`FindingKind::Hang`] finding, and the next
//! case gets a fresh worker: once one worker has been lost, a spare is kept warming (its GPU
//! context opened) so that the next loss costs no start-up. Workers run in their own process
//! group, so the watchdog's SIGTERM, grace period and SIGKILL reach everything they started, and
//! a terminal's Ctrl-C reaches only the supervisor, which stops cleanly. A [`Pool`] whose run
//! ends early abandons the cases still running (their workers are killed, nothing waits).
//!
//! Natively a pool writes each worker's next case to it while the one before still runs
//! ([`Supervisor::send_ahead`]), so the worker never waits for the supervisor between cases. A
//! request written ahead is journalled like any other; when its worker is lost before its turn,
//! the journal says so (`not_run`) and the case is sent again to the next worker, and a request
//! whose turn never comes (the run reached its deadline) is run to its end and reported, or
//! killed with its worker when the run is cancelled, before the worker serves anything else
//! ([`Supervisor::drain`]). Only requests of up to 16 KiB are written ahead: a longer write
//! could wait for the running case, which nothing would watch meanwhile.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use thiserror::Error;

mod batch;
pub mod mps;
mod pool;
mod process;
mod python;
mod start;

pub use python::PYTHON_ENV;

pub use batch::{chunk_size, BatchCosts, FIRST_CHUNK, TARGET_BATCH};
pub use pool::{Delivery, Pool, Slot, DEADLINE_GRACE, TICK};
pub use process::KILL_GRACE;
use process::{kill_now, retire, Starting, WorkerHandle};

use crate::core::case::Case;
use crate::core::finding::{FindingKind, Oracle};
use crate::core::manifest::Manifest;
use crate::core::verdict::{kernel_label, Outcome, ReferenceUsed, RunOptions, StageTimes, Verdict};
use crate::engine::oracle::Judged;
use crate::engine::worker::{WorkerEvent, WorkerRequest, EXIT_STICKY};
use crate::run::sanitizer::{Sanitizer, Tool};

/// Default time a kernel may run before the watchdog calls it a hang.
pub const DEFAULT_KERNEL_TIMEOUT: Duration = Duration::from_secs(10);
/// The watchdog's limit for `manifest`'s kernel: `override_ms` when given, else the manifest's
/// `timeout_ms`, else [`DEFAULT_KERNEL_TIMEOUT`].
pub fn kernel_timeout(manifest: &Manifest, override_ms: Option<u64>) -> Duration {
    override_ms.or(manifest.launch.timeout_ms).map(Duration::from_millis).unwrap_or(DEFAULT_KERNEL_TIMEOUT)
}

/// Time a worker may spend before launching (compiling, reference) before it is presumed stuck.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(300);

/// Time a target may spend compiling inside its call (a Triton specialisation, an autotuning
/// run; [`WorkerEvent::Compiling`]): the kernel's watchdog limit is for the kernel, and restarts
/// when compiling ends.
pub const COMPILE_BUDGET: Duration = Duration::from_secs(120);

/// Waits before each retry of a worker restart that could not open a GPU that an earlier worker
/// opened (about 30 s in all).
const RESTART_BACKOFF: [Duration; 5] =
    [Duration::from_millis(500), Duration::from_secs(1), Duration::from_secs(4), Duration::from_secs(8), Duration::from_secs(16)];
/// The CUDA environment variable that sets a context's hardware work queues.
const MAX_CONNECTIONS: &str = "CUDA_DEVICE_MAX_CONNECTIONS";

/// Spares a supervisor keeps warming once it has lost a worker. One is not enough for a kernel
/// that faults often: under a burst of faults the driver opens contexts one at a time, so a
/// spare started at one loss may not be ready by the next (seen on an H100: passing cases waiting
/// over a second for a worker).
pub const SPARES: usize = 2;

/// How long a worker under compute-sanitizer gets to exit (the tool writes its XML then).
pub const SANITIZER_EXIT_PATIENCE: Duration = Duration::from_secs(120);

/// The end of a sanitizer process's text log (next to its XML), for error messages.
fn sanitizer_log_tail(xml: &Path) -> String {
    let log = crate::run::sanitizer::log_path(xml);
    match std::fs::read_to_string(&log) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            format!("; compute-sanitizer said ({}):\n{}", log.display(), lines[lines.len().saturating_sub(10)..].join("\n"))
        }
        Err(_) => String::new(),
    }
}

/// A fresh XML path in `dir` for one sanitizer process.
fn next_xml_path(dir: &Path, tool: Tool) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    dir.join(format!("{}-{}-{n}.xml", tool.name(), std::process::id()))
}

/// Why the supervisor cannot go on.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SupervisorError {
    /// The worker could not open a GPU.
    #[error("{0}")]
    NoGpu(String),
    /// The worker process could not be started.
    #[error("cannot start the worker process {exe}")]
    Spawn {
        /// The executable.
        exe: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The journal could not be written.
    #[error("cannot write the journal {path}")]
    Journal {
        /// The journal.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The user interrupted the run.
    #[error("interrupted")]
    Interrupted,
    /// The pool's run this case belonged to ended early (its result is no longer wanted); the
    /// pool drops the case, so callers of [`Pool::run_indexed`] never see this.
    #[error("the run ended before this case finished")]
    Cancelled,
    /// A Python target's worker could not start: no interpreter, cudafuzz or a package missing
    /// from it, or the target's setup failed (its log follows).
    #[error("{0}")]
    Setup(String),
    /// A finding's seed could not be saved: the run must stop rather than lose it.
    #[error("cannot save a seed")]
    Seed(#[from] crate::core::error::SeedError),
}

/// How workers are started and watched.
#[derive(Clone, Debug)]
pub struct SupervisorConfig {
    /// The executable that implements `worker` (normally this one).
    pub exe: PathBuf,
    /// GPU index for the worker.
    pub gpu: usize,
    /// The built-in ops' GPU reference kernels' directory, passed to workers.
    pub reference_dir: Option<PathBuf>,
    /// Where cases are journalled before they are sent.
    pub journal: Option<PathBuf>,
    /// Set to stop between (or during) cases.
    pub stop: Arc<AtomicBool>,
    /// Run workers under compute-sanitizer (see [`Supervisor::run_batch`]).
    pub sanitizer: Option<SanitizerPass>,
}

/// How cases run under compute-sanitizer: each tool in turn, `batch` cases per sanitizer
/// process, the XML files kept in `dir`.
#[derive(Clone, Debug)]
pub struct SanitizerPass {
    /// The located tool.
    pub sanitizer: Sanitizer,
    /// Tools to run, in order.
    pub tools: Vec<Tool>,
    /// Where each process's XML is saved.
    pub dir: PathBuf,
    /// Cases per sanitizer process (starting one costs seconds).
    pub batch: usize,
}

/// What a pool's run asks of its supervisors while it lasts: give up when `cancel` is set, and
/// start no new sanitizer case after `deadline`.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunLimits {
    cancel: Option<Arc<AtomicBool>>,
    deadline: Option<Instant>,
}

/// The longest request written to a worker ahead of its turn: well inside a pipe's 64 KiB, so
/// the write never waits for the worker.
const AHEAD_BYTES: usize = 16 << 10;

/// The JSON line of a request with id `id`.
fn request_line(id: u64, case: &Case, manifest: &Manifest, opts: &RunOptions) -> String {
    let req = WorkerRequest { id, case: case.clone(), manifest: manifest.path.clone(), options: opts.clone() };
    serde_json::to_string(&req).expect("requests serialize")
}

/// A request written to a worker ahead of its turn ([`Supervisor::send_ahead`]).
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    /// The request's id.
    id: u64,
    /// The worker it was written to ([`process::WorkerHandle`]'s serial).
    worker: u64,
}

/// One supervised worker slot and its journal.
pub struct Supervisor {
    cfg: SupervisorConfig,
    worker: Option<WorkerHandle>,
    /// The tool the next worker starts under, its memcheck padding, and the XML file of the
    /// running worker's sanitizer process.
    tool: Option<(Tool, u64)>,
    xml: Option<PathBuf>,
    journal: Option<File>,
    next_id: u64,
    /// How many workers were started (the first start included).
    pub starts: u64,
    /// Whether a worker of this supervisor has opened the GPU before: a later start that
    /// cannot is retried, since the driver may still be recovering from the last fault.
    opened_gpu: bool,
    /// Native workers warming in the background ([`SPARES`] of them, oldest first), kept once a
    /// worker has been lost, so the next loss costs no start-up (cuInit and a context take
    /// ~0.2 s, serialised by the driver).
    spares: std::collections::VecDeque<Starting>,
    /// Whether a worker was ever lost (sticky error, crash, hang): clean kernels hold no spare.
    lost_once: bool,
    /// How many lost workers were replaced by a warm spare.
    pub spares_used: u64,
    limits: RunLimits,
    /// Measured sanitizer batch costs, for sizing the next batch.
    costs: Option<BatchCosts>,
    /// The Python target the worker is started for (`None`: the native worker).
    python: Option<python::PythonWorker>,
    /// A sanitizer worker started ahead of its first case ([`Supervisor::prewarm`]).
    prewarmed: Option<Prewarmed>,
    /// Time spent starting and ending workers (spawn to ready, stdin closed to exit).
    overhead: Duration,
    /// How many spares it warms once it has lost a worker ([`SPARES`], or none).
    spares_kept: usize,
    /// The MPS daemon this slot's workers share their GPU through ([`Supervisor::share_gpu`]);
    /// `None`: each worker has a context of its own.
    mps: Option<Arc<mps::MpsDaemon>>,
    /// Runs again, in a context of its own, a case whose run under MPS another worker's fault
    /// may have ended ([`Supervisor::run_alone`]); started at the first such case.
    alone: Option<Box<Supervisor>>,
}

/// How long a worker's start under MPS is retried while the server refuses new clients (it does
/// until every worker that saw a fault has exited) before every worker leaves MPS.
const MPS_REFUSAL_PATIENCE: Duration = Duration::from_secs(5);

/// A sanitizer worker started before its case ([`Supervisor::prewarm`]).
struct Prewarmed {
    starting: Starting,
    tool: Tool,
    /// The memcheck padding it was started with.
    padding: u64,
    python: Option<python::PythonWorker>,
    /// Its sanitizer's XML file.
    xml: PathBuf,
}

#[derive(Serialize)]
struct JournalEntry<'a> {
    id: u64,
    manifest: &'a Path,
    case: &'a Case,
}

impl Supervisor {
    /// A supervisor with no worker yet; the first case starts one. Nothing is created on disk
    /// until then: the journal is opened with the first case it records, so a command that
    /// stops on a check (no GPU, a bad option) leaves no empty journals behind.
    pub fn new(cfg: SupervisorConfig) -> Result<Supervisor, SupervisorError> {
        Ok(Supervisor {
            cfg,
            worker: None,
            tool: None,
            xml: None,
            journal: None,
            next_id: 0,
            starts: 0,
            opened_gpu: false,
            spares: Default::default(),
            lost_once: false,
            spares_used: 0,
            limits: RunLimits::default(),
            costs: None,
            python: None,
            prewarmed: None,
            overhead: Duration::ZERO,
            spares_kept: SPARES,
            mps: None,
            alone: None,
        })
    }

    /// Makes this slot's workers (native or a Python target's) clients of `daemon` from their
    /// next start: they share the GPU's time with the other clients' instead of taking turns
    /// with them. A case whose run then ends in what another client's fault could cause is run
    /// again alone and that run is reported ([`mps::doubtful`]).
    pub fn share_gpu(&mut self, daemon: Arc<mps::MpsDaemon>) {
        self.end_process();
        self.spares.drain(..).for_each(Starting::discard);
        self.mps = Some(daemon);
    }

    /// Whether this slot's workers share their GPU through MPS now.
    pub fn shares_gpu(&self) -> bool {
        self.mps.is_some()
    }

    /// Ends MPS for this slot once any slot gave it up ([`mps::MpsDaemon::abandon`]), when it
    /// starts its next worker: a running worker may hold a case written ahead, which must not
    /// run unwatched, and a client of a server that gave up fails soon on its own.
    fn follow_mps(&mut self) {
        if self.mps.as_ref().is_some_and(|d| d.abandoned()) {
            self.mps = None;
        }
    }

    /// Runs `case` again in a worker with a context of its own (not an MPS client), for a run
    /// under MPS that ended in what another worker's fault could have caused; its verdict is the
    /// case's. The MPS worker carries on when it can: one whose context was lost has said so
    /// (its verdict is sticky, and it exits), and any case it runs next is judged the same way.
    fn run_alone(&mut self, case: &Case, manifest: &Manifest, opts: &RunOptions, timeout: Duration) -> Result<Verdict, SupervisorError> {
        let alone = match &mut self.alone {
            Some(alone) => alone,
            None => {
                let journal = self.cfg.journal.as_ref().map(|j| j.with_extension("alone.jsonl"));
                let cfg = SupervisorConfig { journal, ..self.cfg.clone() };
                let mut alone = Supervisor::new(cfg)?;
                // Contexts of their own beside the MPS clients' shared one are few: no spares.
                alone.spares_kept = 0;
                self.alone.insert(Box::new(alone))
            }
        };
        alone.limits = self.limits.clone();
        let starts = alone.starts;
        let verdict = alone.run_sent(None, case, manifest, opts, timeout);
        self.starts += alone.starts - starts;
        verdict
    }

    /// Switches the sanitizer pass (ends the current worker, which may be of the old kind, and
    /// any spare).
    pub fn set_sanitizer(&mut self, pass: Option<SanitizerPass>) {
        self.end_process();
        self.spares.drain(..).for_each(Starting::discard);
        if let Some(p) = self.prewarmed.take() {
            p.starting.discard();
        }
        self.costs = None;
        self.cfg.sanitizer = pass;
    }

    /// Gives up any case (or worker start) once `cancel` is set, as a pool's run does when it
    /// ends early: for a supervisor driven outside a pool (an escalation running beside a
    /// campaign). `None` clears it.
    pub fn cancel_on(&mut self, cancel: Option<Arc<AtomicBool>>) {
        self.limits = RunLimits { cancel, deadline: None };
    }

    /// Whether the user stopped the run, or the pool's run no longer wants this case.
    fn give_up(&self) -> Result<(), SupervisorError> {
        if self.cfg.stop.load(Ordering::SeqCst) {
            return Err(SupervisorError::Interrupted);
        }
        if self.limits.cancel.as_ref().is_some_and(|c| c.load(Ordering::SeqCst)) {
            return Err(SupervisorError::Cancelled);
        }
        Ok(())
    }

    fn journal(&mut self, entry: &impl Serialize) -> Result<(), SupervisorError> {
        let Some(path) = &self.cfg.journal else { return Ok(()) };
        let error = |source| SupervisorError::Journal { path: path.clone(), source };
        if self.journal.is_none() {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(error)?;
            }
            self.journal = Some(OpenOptions::new().create(true).append(true).open(path).map_err(error)?);
        }
        let f = self.journal.as_mut().expect("opened above");
        let line = serde_json::to_string(entry).expect("journal entries serialize");
        writeln!(f, "{line}").and_then(|()| f.flush()).map_err(error)
    }

    /// Runs one case in the worker and returns its verdict; hangs and dead workers become
    /// findings. `timeout` bounds the kernel's run from its launch.
    ///
    /// A kernel that outlives its timeout is run once more in a fresh worker with twice the
    /// time before it is called a hang: while other workers' kernels fault, the driver's
    /// recovery can stall a healthy kernel for seconds, and a false hang would hide the real bug.
    ///
    /// Under a sanitizer the case is a batch of one ([`Supervisor::run_batch`]).
    pub fn run(&mut self, case: &Case, manifest: &Manifest, opts: &RunOptions, timeout: Duration) -> Result<Verdict, SupervisorError> {
        if self.cfg.sanitizer.is_some() {
            let mut v = self.run_batch(std::slice::from_ref(case), manifest, opts, timeout)?;
            return Ok(v.pop().expect("one verdict per case"));
        }
        self.run_native(case, manifest, opts, timeout)
    }

    /// Starts the worker that `manifest`'s next case needs now, natively (under a sanitizer a
    /// worker lives for one batch and is started with it). A pool calls this before it takes
    /// the next case number, so that the first worker ready takes case #0 and results come in
    /// case order, instead of case #0 waiting for the slowest start (a Python worker takes
    /// seconds: its interpreter, `import torch`).
    pub fn ready_for(&mut self, manifest: &Manifest) -> Result<(), SupervisorError> {
        if self.sanitized() {
            return Ok(());
        }
        self.give_up()?;
        self.fit(manifest);
        self.ensure_worker()
    }

    fn run_native(&mut self, case: &Case, manifest: &Manifest, opts: &RunOptions, timeout: Duration) -> Result<Verdict, SupervisorError> {
        self.run_sent(None, case, manifest, opts, timeout)
    }

    /// [`Supervisor::run`] natively, for a case whose request may have been written to the
    /// worker ahead of its turn (`sent`, by [`Supervisor::send_ahead`]): when that worker is
    /// still the one running, the case is not sent again.
    pub fn run_sent(&mut self, sent: Option<Sent>, case: &Case, manifest: &Manifest, opts: &RunOptions, timeout: Duration) -> Result<Verdict, SupervisorError> {
        let (first, hung) = self.run_once(sent, case, manifest, opts, timeout)?;
        if self.mps.is_some() && (hung || mps::doubtful(&first)) {
            return self.run_alone(case, manifest, opts, timeout);
        }
        if !hung {
            return Ok(first);
        }
        let (second, hung_again) = self.run_once(None, case, manifest, opts, timeout.saturating_mul(2))?;
        Ok(if hung_again { first } else { second })
    }

    /// A request written ahead ([`Supervisor::send_ahead`]) whose case's turn never came (its
    /// run reached its deadline or ended): the worker runs it to its end, and its verdict is
    /// returned, since it ran; or, when the run is interrupted or cancelled meanwhile, the
    /// worker is killed with it. Either way the worker serves nothing else first, so no later
    /// case is blamed for what this one does. `None` when it did not run (journalled so).
    pub fn drain(&mut self, sent: Sent, case: &Case, manifest: &Manifest, opts: &RunOptions, timeout: Duration) -> Option<Verdict> {
        if self.worker.as_ref().map(|w| w.serial) != Some(sent.worker) {
            let _ = self.journal(&serde_json::json!({ "id": sent.id, "not_run": "its worker ended before its turn; its run ended" }));
            return None;
        }
        let (verdict, hung) = self.run_once(Some(sent), case, manifest, opts, timeout).ok()?;
        if self.mps.is_some() && (hung || mps::doubtful(&verdict)) {
            return self.run_alone(case, manifest, opts, timeout).ok();
        }
        Some(verdict)
    }

    /// Writes `case`'s request to the running worker now, while it still runs an earlier case,
    /// so that the worker finds it waiting and neither side waits for the other between the
    /// two (natively only: a sanitizer's batches are sent as they run). `None` when no worker is
    /// running for `manifest`: the case is sent when its turn comes. The request is journalled
    /// first, as every request is.
    pub fn send_ahead(&mut self, case: &Case, manifest: &Manifest, opts: &RunOptions) -> Result<Option<Sent>, SupervisorError> {
        if self.sanitized() || python::PythonWorker::for_manifest(manifest) != self.python {
            return Ok(None);
        }
        let Some(serial) = self.worker.as_ref().map(|w| w.serial) else { return Ok(None) };
        let line = request_line(self.next_id, case, manifest, opts);
        // A write that does not fit the pipe would wait for the running case to end, and
        // nothing would watch that case meanwhile: a long request waits for its turn.
        if line.len() > AHEAD_BYTES {
            return Ok(None);
        }
        let id = self.write_request(&line, case, manifest)?;
        Ok(id.map(|id| Sent { id, worker: serial }))
    }

    /// Journals and writes request `line` (made by [`request_line`] with the next id) to the
    /// running worker; its id, or `None` when the write failed (the worker is gone: the request
    /// is journalled as not run).
    fn write_request(&mut self, line: &str, case: &Case, manifest: &Manifest) -> Result<Option<u64>, SupervisorError> {
        let id = self.next_id;
        self.next_id += 1;
        self.journal(&JournalEntry { id, manifest: &manifest.path, case })?;
        let worker = self.worker.as_mut().expect("started");
        if writeln!(worker.stdin, "{line}").and_then(|()| worker.stdin.flush()).is_ok() {
            return Ok(Some(id));
        }
        self.journal(&serde_json::json!({ "id": id, "not_run": "its worker's input was closed" }))?;
        Ok(None)
    }

    /// One attempt; the flag says the watchdog killed a launched kernel. A request `sent` ahead
    /// to the worker still running is the attempt's; one sent to a worker since lost is
    /// journalled as not run, and the case is sent again.
    fn run_once(
        &mut self,
        sent: Option<Sent>,
        case: &Case,
        manifest: &Manifest,
        opts: &RunOptions,
        timeout: Duration,
    ) -> Result<(Verdict, bool), SupervisorError> {
        let current = self.worker.as_ref().map(|w| w.serial);
        if let Err(e) = self.give_up() {
            // A request written ahead is in the worker: it goes with the worker, or the
            // worker's next case would run after it and be blamed for what it does.
            if sent.is_some_and(|s| Some(s.worker) == current) {
                if let Some(w) = self.worker.take() {
                    kill_now(w.child);
                }
            }
            return Err(e);
        }
        let began = Instant::now();
        self.fit(manifest);
        let current = self.worker.as_ref().map(|w| w.serial);
        let ahead = match sent {
            Some(s) if Some(s.worker) == current => Some(s.id),
            Some(s) => {
                self.journal(&serde_json::json!({ "id": s.id, "not_run": "its worker ended before its turn; the case was sent again" }))?;
                None
            }
            None => None,
        };
        let (id, start_us) = match ahead {
            Some(id) => (id, 0),
            None => {
                self.ensure_worker()?;
                let start_us = began.elapsed().as_micros() as u64;
                let line = request_line(self.next_id, case, manifest, opts);
                match self.write_request(&line, case, manifest)? {
                    Some(id) => (id, start_us),
                    None => return Ok((self.bury(case, manifest, None), false)),
                }
            }
        };
        // Two runs of the kernel when checking determinism, plus host work around them.
        let kernel_budget = timeout.saturating_mul(if opts.determinism { 2 } else { 1 }).saturating_add(Duration::from_secs(2));
        let mut deadline = Instant::now() + SETUP_TIMEOUT;
        let mut launched_at = None;
        let mut compiling_since: Option<Instant> = None;
        loop {
            if let Err(e) = self.give_up() {
                // Nothing of this worker is wanted any more (not even a sanitizer's XML).
                if let Some(w) = self.worker.take() {
                    kill_now(w.child);
                }
                return Err(e);
            }
            let worker = self.worker.as_mut().expect("started");
            let slice = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(100));
            match worker.events.recv_timeout(slice) {
                Ok(line) => match serde_json::from_str::<WorkerEvent>(&line) {
                    Ok(WorkerEvent::Launched { id: got }) if got == id => {
                        launched_at = Some(Instant::now());
                        deadline = crate::core::clock::deadline_in(kernel_budget);
                    }
                    Ok(WorkerEvent::Compiling { id: got, started }) if got == id => {
                        compiling_since = started.then(Instant::now);
                        deadline = crate::core::clock::deadline_in(if started { COMPILE_BUDGET } else { kernel_budget });
                    }
                    Ok(WorkerEvent::Done { id: got, mut verdict }) if got == id => {
                        verdict.times.start_us = start_us;
                        verdict.times.supervised_us = began.elapsed().as_micros() as u64;
                        self.journal(&serde_json::json!({ "id": id, "outcome": &verdict.outcome }))?;
                        if verdict.sticky {
                            self.reap();
                        }
                        return Ok((*verdict, false));
                    }
                    // Anything else on stdout (stray prints from a kernel's host code) is ignored.
                    _ => {}
                },
                Err(RecvTimeoutError::Timeout) => {
                    if Instant::now() >= deadline {
                        let ran_for = launched_at.map(|at| at.elapsed());
                        let mut w = self.worker.take().expect("started");
                        // A process stuck in the driver can take tens of seconds to die after
                        // SIGKILL; the next case does not wait for it.
                        std::thread::spawn(move || process::kill_group(&mut w.child));
                        self.lost();
                        let verdict = match ran_for {
                            Some(_) if compiling_since.is_some() => self.synthesize(
                                case,
                                manifest,
                                FindingKind::Hang,
                                Oracle::Watchdog,
                                format!(
                                    "the target was still compiling {:.1} s after its compiler started (a JIT compile inside the call has {} s); the worker was killed",
                                    compiling_since.map_or(0.0, |at| at.elapsed().as_secs_f64()),
                                    COMPILE_BUDGET.as_secs()
                                ),
                            ),
                            Some(ran_for) => self.synthesize(
                                case,
                                manifest,
                                FindingKind::Hang,
                                Oracle::Watchdog,
                                format!(
                                    "the kernel did not finish within {:.1} s of its launch; the worker was killed (SIGTERM, then SIGKILL)",
                                    ran_for.as_secs_f64()
                                ),
                            ),
                            None => self.synthesize(
                                case,
                                manifest,
                                FindingKind::Hang,
                                Oracle::Watchdog,
                                format!("the worker did not launch the kernel within {} s (compiling or preparing the case)", SETUP_TIMEOUT.as_secs()),
                            ),
                        };
                        self.journal(&serde_json::json!({ "id": id, "outcome": &verdict.outcome }))?;
                        return Ok((verdict, ran_for.is_some()));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let verdict = self.bury(case, manifest, launched_at);
                    self.journal(&serde_json::json!({ "id": id, "outcome": &verdict.outcome }))?;
                    return Ok((verdict, false));
                }
            }
        }
    }

    /// Lets a worker that is exiting after a sticky error go, without waiting for it: the
    /// driver's teardown of a faulted context takes a while, and the next case need not wait.
    ///
    /// Under a sanitizer it does wait: the tool writes its XML only when the process exits.
    fn reap(&mut self) {
        if let Some(w) = self.worker.take() {
            if self.tool.is_some() {
                let ending = Instant::now();
                retire(w, SANITIZER_EXIT_PATIENCE, &|| self.give_up().is_err());
                self.overhead += ending.elapsed();
            } else {
                std::thread::spawn(move || retire(w, Duration::from_secs(5), &|| false));
            }
            self.lost();
        }
    }

    /// The worker died mid-case: report how.
    fn bury(&mut self, case: &Case, manifest: &Manifest, launched: Option<Instant>) -> Verdict {
        let mut w = self.worker.take().expect("started");
        let status = w.child.wait().ok();
        self.lost();
        let how = match status {
            Some(s) if s.signal().is_some() => format!("was killed by signal {}", s.signal().unwrap_or(0)),
            Some(s) if s.code() == Some(EXIT_STICKY) => "exited after a sticky CUDA error without reporting it".to_string(),
            Some(s) => format!("exited with status {}", s.code().unwrap_or(-1)),
            None => "vanished".to_string(),
        };
        let when = if launched.is_some() { "while the kernel ran" } else { "before the kernel was launched" };
        self.synthesize(case, manifest, FindingKind::WorkerCrash, Oracle::Worker, format!("the worker process {how} {when}"))
    }

    fn synthesize(&self, case: &Case, manifest: &Manifest, kind: FindingKind, oracle: Oracle, detail: String) -> Verdict {
        let (plan, contract) = crate::core::plan::plan_and_judge(case, manifest);
        let label = kernel_label(manifest, case);
        let j = Judged { case, plan: &plan, kernel: &label, inside_contract: contract.is_inside() };
        Verdict {
            outcome: Outcome::Fail { findings: vec![j.finding(kind, oracle, detail)] },
            contract,
            reference: ReferenceUsed::None,
            sticky: true,
            times: StageTimes::default(),
            allocations: None,
            coverage: None,
            output_digest: None,
            notes: Vec::new(),
        }
    }
}

/// Dropping ends the worker and any spare at once (SIGKILL to their process groups, reaped on
/// threads): nothing of them is needed any more, and a command's end must not wait seconds per
/// slot. A sanitizer's XML is no exception: every batch ends its process itself.
impl Drop for Supervisor {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            kill_now(w.child);
        }
        if let Some(p) = self.prewarmed.take() {
            p.starting.discard();
        }
        self.spares.drain(..).for_each(Starting::discard);
    }
}
