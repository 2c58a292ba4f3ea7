//! The supervisor: owns worker processes, the journal and the watchdog.
//!
//! Like nextest's dispatcher, it alone holds run state; workers only exchange typed messages with
//! it. Each case is appended to the journal *before* it is sent, so a worker that dies — sticky
//! 700/716, segfault, `kill -9`, a hang the watchdog ends — never takes the case with it. A dead
//! worker becomes a [`FindingKind::WorkerCrash`] or [`FindingKind::Hang`] finding, and the next
//! case gets a fresh worker. Workers run in their own process group, so the watchdog's SIGTERM,
//! grace period and SIGKILL reach everything they started, and a terminal's Ctrl-C reaches only
//! the supervisor, which stops cleanly.

use std::ops::ControlFlow;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use thiserror::Error;

mod batch;

use crate::case::Case;
use crate::finding::{FindingKind, Oracle};
use crate::gpu::GpuInfo;
use crate::manifest::Manifest;
use crate::oracle::Judged;
use crate::sanitizer::{Sanitizer, Tool};
use crate::worker::{kernel_label, Outcome, ReferenceUsed, RunOptions, StageTimes, Verdict, WorkerEvent, WorkerRequest, EXIT_STICKY};

/// Default time a kernel may run before the watchdog calls it a hang.
pub const DEFAULT_KERNEL_TIMEOUT: Duration = Duration::from_secs(10);
/// The watchdog's limit for `manifest`'s kernel: `override_ms` when given, else the manifest's
/// `timeout_ms`, else [`DEFAULT_KERNEL_TIMEOUT`].
pub fn kernel_timeout(manifest: &Manifest, override_ms: Option<u64>) -> Duration {
    override_ms.or(manifest.launch.timeout_ms).map(Duration::from_millis).unwrap_or(DEFAULT_KERNEL_TIMEOUT)
}

/// Time a worker may spend before launching (compiling, reference) before it is presumed stuck.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(300);

/// Waits before each retry of a worker restart that could not open a GPU that an earlier worker
/// opened (about 30 s in all).
const RESTART_BACKOFF: [Duration; 5] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
];
/// Grace between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_millis(500);
/// How long a worker under compute-sanitizer gets to exit (the tool writes its XML then).
pub const SANITIZER_EXIT_PATIENCE: Duration = Duration::from_secs(120);

/// The end of a sanitizer process's text log (next to its XML), for error messages.
fn sanitizer_log_tail(xml: &Path) -> String {
    let log = crate::sanitizer::log_path(xml);
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
    /// A finding's seed could not be saved: the run must stop rather than lose it.
    #[error("cannot save a seed")]
    Seed(#[from] crate::error::SeedError),
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

struct WorkerHandle {
    child: Child,
    stdin: ChildStdin,
    events: Receiver<String>,
    gpu: GpuInfo,
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
        Ok(Supervisor { cfg, worker: None, tool: None, xml: None, journal: None, next_id: 0, starts: 0, opened_gpu: false })
    }

    /// Switches the sanitizer pass (ends the current worker, which may be of the old kind).
    pub fn set_sanitizer(&mut self, pass: Option<SanitizerPass>) {
        self.end_process();
        self.cfg.sanitizer = pass;
    }

    /// The GPU of the current worker, starting one if needed.
    pub fn gpu(&mut self) -> Result<GpuInfo, SupervisorError> {
        self.ensure_worker()?;
        Ok(self.worker.as_ref().expect("started").gpu.clone())
    }

    fn ensure_worker(&mut self) -> Result<(), SupervisorError> {
        if self.worker.is_some() {
            return Ok(());
        }
        let mut waits = RESTART_BACKOFF.iter();
        loop {
            match self.start_worker() {
                Err(SupervisorError::NoGpu(message)) if self.opened_gpu => {
                    // Seen on an H100 after ~300 faults in a row: a fresh process's cuInit said
                    // CUDA_ERROR_NO_DEVICE while the driver recovered.
                    let Some(wait) = waits.next() else { return Err(SupervisorError::NoGpu(message)) };
                    // A closed stderr must not panic a run over a diagnostic.
                    let _ = writeln!(std::io::stderr(), "cudafuzz: worker restart could not open GPU {} ({message}); retrying in {wait:?}", self.cfg.gpu);
                    std::thread::sleep(*wait);
                }
                Err(e) => return Err(e),
                Ok(()) => {
                    self.opened_gpu = true;
                    return Ok(());
                }
            }
        }
    }

    fn start_worker(&mut self) -> Result<(), SupervisorError> {
        let mut cmd = match (&self.cfg.sanitizer, self.tool) {
            (Some(pass), Some((tool, padding))) => {
                let xml = next_xml_path(&pass.dir, tool);
                let cmd = pass.sanitizer.command(tool, &xml, padding, &self.cfg.exe);
                self.xml = Some(xml);
                cmd
            }
            _ => Command::new(&self.cfg.exe),
        };
        cmd.arg("worker").arg("--gpu").arg(self.cfg.gpu.to_string());
        if let Some(r) = &self.cfg.reference_dir {
            cmd.arg("--reference").arg(r);
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).process_group(0);
        let mut child = cmd.spawn().map_err(|source| SupervisorError::Spawn { exe: self.cfg.exe.clone(), source })?;
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
        self.starts += 1;
        // The first event; lines that are not events (a wrapper's banner) are skipped.
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let first = std::iter::from_fn(|| rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok())
            .find_map(|l| serde_json::from_str::<WorkerEvent>(&l).ok());
        match first {
            Some(WorkerEvent::Ready { gpu }) => {
                self.worker = Some(WorkerHandle { child, stdin, events: rx, gpu });
                Ok(())
            }
            Some(WorkerEvent::StartFailed { message }) => {
                let _ = child.wait();
                Err(SupervisorError::NoGpu(message))
            }
            _ => {
                kill_group(&mut child);
                let status = child.try_wait().ok().flatten().map(|s| format!(" (status {s})")).unwrap_or_default();
                let log = self.xml.as_ref().map(|x| sanitizer_log_tail(x)).unwrap_or_default();
                Err(SupervisorError::NoGpu(format!("the worker process exited before opening the GPU{status}{log}")))
            }
        }
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

    fn run_native(&mut self, case: &Case, manifest: &Manifest, opts: &RunOptions, timeout: Duration) -> Result<Verdict, SupervisorError> {
        let (first, hung) = self.run_once(case, manifest, opts, timeout)?;
        if !hung {
            return Ok(first);
        }
        let (second, hung_again) = self.run_once(case, manifest, opts, timeout.saturating_mul(2))?;
        Ok(if hung_again { first } else { second })
    }

    /// One attempt; the flag says the watchdog killed a launched kernel.
    fn run_once(&mut self, case: &Case, manifest: &Manifest, opts: &RunOptions, timeout: Duration) -> Result<(Verdict, bool), SupervisorError> {
        if self.cfg.stop.load(Ordering::SeqCst) {
            return Err(SupervisorError::Interrupted);
        }
        self.ensure_worker()?;
        let id = self.next_id;
        self.next_id += 1;
        self.journal(&JournalEntry { id, manifest: &manifest.path, case })?;
        let req = WorkerRequest { id, case: case.clone(), manifest: manifest.path.clone(), options: opts.clone() };
        let line = serde_json::to_string(&req).expect("requests serialize");
        let worker = self.worker.as_mut().expect("started");
        if writeln!(worker.stdin, "{line}").and_then(|()| worker.stdin.flush()).is_err() {
            return Ok((self.bury(case, manifest, None), false));
        }
        // Two runs of the kernel when checking determinism, plus host work around them.
        let kernel_budget = timeout.saturating_mul(if opts.determinism { 2 } else { 1 }).saturating_add(Duration::from_secs(2));
        let mut deadline = Instant::now() + SETUP_TIMEOUT;
        let mut launched_at = None;
        loop {
            if self.cfg.stop.load(Ordering::SeqCst) {
                if let Some(mut w) = self.worker.take() {
                    kill_group(&mut w.child);
                }
                return Err(SupervisorError::Interrupted);
            }
            let worker = self.worker.as_mut().expect("started");
            let slice = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(100));
            match worker.events.recv_timeout(slice) {
                Ok(line) => match serde_json::from_str::<WorkerEvent>(&line) {
                    Ok(WorkerEvent::Launched { id: got }) if got == id => {
                        launched_at = Some(Instant::now());
                        deadline = crate::clock::deadline_in(kernel_budget);
                    }
                    Ok(WorkerEvent::Done { id: got, verdict }) if got == id => {
                        self.journal(&serde_json::json!({ "id": id, "outcome": &verdict.outcome }))?;
                        if verdict.sticky {
                            self.reap();
                        }
                        return Ok((verdict, false));
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
                        std::thread::spawn(move || kill_group(&mut w.child));
                        let verdict = match ran_for {
                            Some(ran_for) => self.synthesize(case, manifest, FindingKind::Hang, Oracle::Watchdog, format!(
                                "the kernel did not finish within {:.1} s of its launch; the worker was killed (SIGTERM, then SIGKILL)",
                                ran_for.as_secs_f64()
                            )),
                            None => self.synthesize(case, manifest, FindingKind::Hang, Oracle::Watchdog, format!(
                                "the worker did not launch the kernel within {} s (compiling or preparing the case)",
                                SETUP_TIMEOUT.as_secs()
                            )),
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
                retire(w, SANITIZER_EXIT_PATIENCE);
            } else {
                std::thread::spawn(move || retire(w, Duration::from_secs(5)));
            }
        }
    }

    /// The worker died mid-case: report how.
    fn bury(&mut self, case: &Case, manifest: &Manifest, launched: Option<Instant>) -> Verdict {
        let mut w = self.worker.take().expect("started");
        let status = w.child.wait().ok();
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
        let (plan, contract) = crate::plan::plan_and_judge(case, manifest);
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
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            retire(w, Duration::from_secs(2));
        }
    }
}

/// Closes a worker's stdin (its signal to finish) and waits up to `patience` for it to exit,
/// then kills its process group.
fn retire(mut w: WorkerHandle, patience: Duration) {
    drop(w.stdin);
    let deadline = crate::clock::deadline_in(patience);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = w.child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    kill_group(&mut w.child);
}

/// SIGTERM to the child's process group, a grace period, then SIGKILL; reaps the child.
fn kill_group(child: &mut Child) {
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

/// Several supervised workers (several per GPU, or one per GPU), each driven by its own thread.
///
/// Results are handed back in case-index order whatever order the workers finish in, so a
/// campaign with the same seed and case count saves the same seeds with 1 worker or 16.
pub struct Pool {
    /// One supervisor per worker slot.
    pub slots: Vec<Supervisor>,
}

/// What happened to case `i` of a pooled run.
#[derive(Debug)]
pub enum Slot {
    /// `make` declined the index (e.g. outside the contract).
    Skipped,
    /// The case ran.
    Ran(Box<Case>, Box<Verdict>),
}

impl Pool {
    /// A pool of the given supervisors; the first case of each starts its worker.
    pub fn new(slots: Vec<Supervisor>) -> Pool {
        Pool { slots }
    }

    /// The GPUs the pool's workers opened (starting any worker not started yet).
    pub fn gpus(&mut self) -> std::collections::BTreeSet<usize> {
        self.slots.iter_mut().filter_map(|s| s.gpu().ok().map(|g| g.ordinal)).collect()
    }

    /// Total worker starts over all slots.
    pub fn starts(&self) -> u64 {
        self.slots.iter().map(|s| s.starts).sum()
    }

    /// Runs indices `0..n` against `manifest`: `make(i, abort)` gives the case or `None` to
    /// skip; a `make` that waits (a campaign steering by what earlier cases found) must give up
    /// once `abort` is set, which happens when the run ends early.
    /// Stops handing out new indices at `deadline`, or once `on_result` answers
    /// `ControlFlow::Break` (no later index is reported then). `on_result` sees every handled
    /// index in increasing order; indices never handed out are not reported.
    // Each argument is one independent knob of the campaign loop; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub fn run_indexed(
        &mut self,
        n: u64,
        deadline: Option<Instant>,
        manifest: &Manifest,
        opts: &RunOptions,
        timeout: Duration,
        make: &(dyn Fn(u64, &AtomicBool) -> Option<Case> + Sync),
        on_result: &mut dyn FnMut(u64, Slot) -> Result<ControlFlow<()>, SupervisorError>,
    ) -> Result<(), SupervisorError> {
        let next = std::sync::atomic::AtomicU64::new(0);
        let abort = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel::<(u64, Result<Slot, SupervisorError>)>();
        std::thread::scope(|scope| {
            for sup in self.slots.iter_mut() {
                let (tx, next, abort) = (tx.clone(), &next, &abort);
                let chunk = sup.batch_size() as u64;
                scope.spawn(move || loop {
                    if abort.load(Ordering::SeqCst) || deadline.is_some_and(|d| Instant::now() >= d) {
                        break;
                    }
                    let first = next.fetch_add(chunk, Ordering::SeqCst);
                    if first >= n {
                        break;
                    }
                    let (mut ran, mut cases, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
                    for i in first..(first + chunk).min(n) {
                        match make(i, abort) {
                            Some(case) => {
                                ran.push(i);
                                cases.push(case);
                            }
                            None => skipped.push(i),
                        }
                    }
                    let verdicts = match sup.run_batch(&cases, manifest, opts, timeout) {
                        Ok(v) => v,
                        Err(e) => {
                            let _ = tx.send((first, Err(e)));
                            break;
                        }
                    };
                    let ran = ran.into_iter().zip(cases).zip(verdicts).map(|((i, case), v)| (i, Slot::Ran(Box::new(case), Box::new(v))));
                    let mut gone = false;
                    for (i, slot) in skipped.into_iter().map(|i| (i, Slot::Skipped)).chain(ran) {
                        gone |= tx.send((i, Ok(slot))).is_err();
                    }
                    if gone {
                        break;
                    }
                });
            }
            drop(tx);
            let mut first_err = None;
            let mut done = false;
            let mut deliver = |slot: Result<Slot, SupervisorError>, i: u64| {
                if done {
                    return;
                }
                match slot.and_then(|s| on_result(i, s)) {
                    Ok(ControlFlow::Continue(())) => {}
                    Ok(ControlFlow::Break(())) => {
                        abort.store(true, Ordering::SeqCst);
                        done = true;
                    }
                    Err(e) => {
                        abort.store(true, Ordering::SeqCst);
                        first_err = Some(e);
                        done = true;
                    }
                }
            };
            let mut pending = std::collections::BTreeMap::new();
            let mut expect = 0u64;
            for (i, slot) in rx.iter() {
                pending.insert(i, slot);
                while let Some(slot) = pending.remove(&expect) {
                    deliver(slot, expect);
                    expect += 1;
                }
            }
            // Indices after a gap (a worker stopped by the deadline) are still reported, in order.
            for (i, slot) in pending {
                deliver(slot, i);
            }
            first_err.map_or(Ok(()), Err)
        })
    }
}
