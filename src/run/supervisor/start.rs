//! Starting a slot's worker: spares, a prewarmed sanitizer worker, the command line (under a
//! sanitizer, a Python target's interpreter, an MPS daemon), the wait for it to open the GPU, and
//! the retries while the driver or the MPS server recovers from a fault.

use crate::core::manifest::Manifest;
use crate::engine::gpu::GpuInfo;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::process::{kill_now, spawn, StartFailure, Starting, WorkerHandle};
use super::{
    next_xml_path, python, sanitizer_log_tail, Prewarmed, Supervisor, SupervisorError, MAX_CONNECTIONS, MPS_REFUSAL_PATIENCE, RESTART_BACKOFF, SETUP_TIMEOUT,
};

impl Supervisor {
    /// A worker was lost: from now on a spare is kept warming (natively).
    pub(super) fn lost(&mut self) {
        self.lost_once = true;
        self.warm_spare();
    }

    /// Starts spares until [`SPARES`](super::SPARES) are warming, unless no worker was ever lost or workers run
    /// under a sanitizer (those processes live for one batch). A spare that cannot be started
    /// is no error: the next case starts its worker the usual way and reports why not.
    pub(super) fn warm_spare(&mut self) {
        // An MPS client started before a fault is hit by it too, and the server takes no new
        // client until it exits: a spare would hold every restart back.
        if !self.lost_once || self.cfg.sanitizer.is_some() || self.mps.is_some() {
            return;
        }
        while self.spares.len() < self.spares_kept {
            let Ok(s) = spawn(self.worker_command()) else { return };
            self.starts += 1;
            self.spares.push_back(s);
        }
    }

    /// The first tool of the supervisor's sanitizer pass, if it has one (for the trace).
    pub fn tool_name(&self) -> Option<&'static str> {
        self.cfg.sanitizer.as_ref().and_then(|p| p.tools.first()).map(|t| t.name())
    }

    /// The GPU of the current worker, starting one if needed.
    pub fn gpu(&mut self) -> Result<GpuInfo, SupervisorError> {
        self.ensure_worker()?;
        Ok(self.worker.as_ref().expect("started").gpu.clone())
    }

    /// Makes the next worker the one `manifest`'s target needs: the native worker, or the
    /// target's Python interpreter running cudafuzz's extension. A worker of the other kind is
    /// ended first.
    pub(super) fn fit(&mut self, manifest: &Manifest) {
        let wanted = python::PythonWorker::for_manifest(manifest);
        if wanted == self.python {
            return;
        }
        if let Some(w) = self.worker.take() {
            kill_now(w.child);
        }
        self.spares.drain(..).for_each(Starting::discard);
        self.python = wanted;
    }

    /// Starts the worker of `manifest`'s next sanitizer case now, under the pass's first tool
    /// and the largest padding, so that the case does not wait for it (a sanitizer process takes
    /// seconds to start, a Python target's tens: its interpreter, imports and setup). The
    /// escalator calls this while the campaign runs; a case it cannot serve (another tool, more
    /// padding, another target) discards it. Nothing happens without a sanitizer pass or when a
    /// worker is already running or prewarmed.
    pub fn prewarm(&mut self, manifest: &Manifest) {
        let Some(tool) = self.cfg.sanitizer.as_ref().and_then(|p| p.tools.first().copied()) else { return };
        if self.worker.is_some() || self.prewarmed.is_some() {
            return;
        }
        self.fit(manifest);
        let padding = crate::run::sanitizer::padding_for(u64::MAX);
        let (saved_tool, saved_xml) = (self.tool.replace((tool, padding)), self.xml.take());
        let cmd = self.worker_command();
        let xml = std::mem::replace(&mut self.xml, saved_xml);
        self.tool = saved_tool;
        if let (Ok(starting), Some(xml)) = (spawn(cmd), xml) {
            self.starts += 1;
            self.prewarmed = Some(Prewarmed { starting, tool, padding, python: self.python.clone(), xml });
        }
    }

    /// Takes the prewarmed worker when it serves the tool, padding and target the next case
    /// needs; discards it otherwise. Says whether a worker is now running.
    pub(super) fn take_prewarmed(&mut self) -> Result<bool, SupervisorError> {
        let Some(p) = self.prewarmed.take() else { return Ok(false) };
        let fits = self.tool.is_some_and(|(tool, padding)| tool == p.tool && padding <= p.padding) && self.python == p.python;
        if !fits {
            p.starting.discard();
            return Ok(false);
        }
        self.tool = Some((p.tool, p.padding));
        self.xml = Some(p.xml);
        match self.ready(p.starting) {
            Ok(w) => {
                self.worker = Some(w);
                Ok(true)
            }
            Err(e @ (SupervisorError::Interrupted | SupervisorError::Cancelled)) => Err(e),
            // The usual start below says why, if it fails too.
            Err(_) => Ok(false),
        }
    }

    pub(super) fn ensure_worker(&mut self) -> Result<(), SupervisorError> {
        if self.worker.is_some() {
            return Ok(());
        }
        if self.take_prewarmed()? {
            return Ok(());
        }
        if let Some(spare) = self.spares.pop_front() {
            match self.ready(spare) {
                Ok(w) => {
                    self.worker = Some(w);
                    self.spares_used += 1;
                    self.warm_spare();
                    return Ok(());
                }
                Err(e @ (SupervisorError::Interrupted | SupervisorError::Cancelled)) => return Err(e),
                // The start path below retries a GPU that cannot be opened yet.
                Err(_) => {}
            }
        }
        let mut waits = RESTART_BACKOFF.iter();
        let refused_since = Instant::now();
        self.follow_mps();
        loop {
            match self.start_worker() {
                Err(SupervisorError::NoGpu(message)) if self.mps.is_some() => {
                    // After a fault the server takes no client until every one it reached has
                    // exited (a waiting worker looks every few milliseconds): moments, unless one
                    // is stuck. Anything else is MPS failing here.
                    if message.contains("MPS_SERVER_NOT_READY") && refused_since.elapsed() < MPS_REFUSAL_PATIENCE {
                        self.starts -= 1;
                        self.pause(Duration::from_millis(10))?;
                    } else {
                        if let Some(daemon) = &self.mps {
                            daemon.abandon(self.cfg.gpu, &format!("the MPS server refused a worker: {message}"));
                        }
                        self.follow_mps();
                    }
                }
                Err(SupervisorError::NoGpu(message)) if self.opened_gpu => {
                    // Seen on an H100 after ~300 faults in a row: a fresh process's cuInit said
                    // CUDA_ERROR_NO_DEVICE while the driver recovered.
                    let Some(wait) = waits.next() else { return Err(SupervisorError::NoGpu(message)) };
                    // A closed stderr must not panic a run over a diagnostic.
                    let _ = writeln!(std::io::stderr(), "cudafuzz: worker restart could not open GPU {} ({message}); retrying in {wait:?}", self.cfg.gpu);
                    self.pause(*wait)?;
                }
                Err(e) => return Err(e),
                Ok(()) => {
                    self.opened_gpu = true;
                    self.warm_spare();
                    return Ok(());
                }
            }
        }
    }

    /// Sleeps `wait`, unless the run is stopped, cancelled or past its deadline first.
    pub(super) fn pause(&self, wait: Duration) -> Result<(), SupervisorError> {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            self.give_up()?;
            if self.limits.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(SupervisorError::Cancelled);
            }
            std::thread::sleep(until.saturating_duration_since(Instant::now()).min(Duration::from_millis(50)));
        }
        Ok(())
    }

    /// The command line of a new worker (under the pass's current tool, with a fresh XML path).
    pub(super) fn worker_command(&mut self) -> Command {
        let (program, lead): (PathBuf, Vec<String>) = match &self.python {
            Some(p) => (p.interpreter.clone(), ["-m", "cudafuzz"].map(String::from).to_vec()),
            None => match crate::run::self_command() {
                Some((program, lead)) => (program.clone(), lead.clone()),
                None => (self.cfg.exe.clone(), Vec::new()),
            },
        };
        let mut cmd = match (&self.cfg.sanitizer, self.tool) {
            (Some(pass), Some((tool, padding))) => {
                let xml = next_xml_path(&pass.dir, tool);
                let limit = if pass.batch <= 1 { crate::run::sanitizer::SINGLE_CASE_PRINT_LIMIT } else { crate::run::sanitizer::PRINT_LIMIT };
                let cmd = pass.sanitizer.command(tool, &xml, padding, limit, &program);
                self.xml = Some(xml);
                cmd
            }
            _ => Command::new(&program),
        };
        cmd.args(lead);
        cmd.arg("worker").arg("--gpu").arg(self.cfg.gpu.to_string());
        if let Some(p) = &self.python {
            p.configure(&mut cmd, self.tool.is_some());
        }
        if let (Some(daemon), None) = (&self.mps, &self.cfg.sanitizer) {
            daemon.configure(&mut cmd);
        }
        // A worker runs everything on the null stream, so one hardware queue serves it; the
        // default eight make each context dearer to create and to tear down, and a kernel that
        // faults often pays for one of each per fault, serialised by the driver across all
        // workers (an H100 fa_s512 campaign: 18.6 cases/s with eight, 26.8 with one).
        if std::env::var_os(MAX_CONNECTIONS).is_none() {
            cmd.env(MAX_CONNECTIONS, "1");
        }
        if let Some(r) = &self.cfg.reference_dir {
            cmd.arg("--reference").arg(r);
        }
        cmd
    }

    pub(super) fn start_worker(&mut self) -> Result<(), SupervisorError> {
        let cmd = self.worker_command();
        let starting = spawn(cmd).map_err(|source| match &self.python {
            Some(p) => SupervisorError::Setup(p.cannot_start(&source)),
            None => SupervisorError::Spawn { exe: self.cfg.exe.clone(), source },
        })?;
        self.starts += 1;
        self.worker = Some(self.ready(starting)?);
        Ok(())
    }

    /// Waits for a started worker to open the GPU, giving up when the run is stopped or
    /// cancelled; the time from its start counts as overhead.
    pub(super) fn ready(&mut self, starting: Starting) -> Result<WorkerHandle, SupervisorError> {
        let since = starting.since;
        let give_up = || self.give_up().is_err();
        let result = starting.ready(since + SETUP_TIMEOUT, &give_up);
        self.overhead += since.elapsed();
        if crate::run::trace::on() {
            let tool = self.tool.map(|(t, _)| t.name());
            let line = serde_json::json!({ "event": "worker_ready", "spawned_ms": crate::run::trace::ms(since), "ok": result.is_ok(), "python": self.python.is_some(), "sanitizer": tool });
            crate::run::trace::line(line);
        }
        match result {
            Ok(w) => Ok(w),
            Err(StartFailure::NoGpu(message)) => Err(SupervisorError::NoGpu(message)),
            Err(StartFailure::Setup(message)) => Err(SupervisorError::Setup(message)),
            Err(StartFailure::GaveUp) => Err(self.give_up().err().unwrap_or(SupervisorError::Cancelled)),
            Err(StartFailure::Died(status)) if self.python.is_some() => {
                let log = self.xml.as_ref().map(|x| sanitizer_log_tail(x)).unwrap_or_default();
                Err(SupervisorError::Setup(self.python.as_ref().expect("checked").died(status, &log)))
            }
            Err(StartFailure::Died(status)) => {
                let status = status.map(|s| format!(" (status {s})")).unwrap_or_default();
                let log = self.xml.as_ref().map(|x| sanitizer_log_tail(x)).unwrap_or_default();
                Err(SupervisorError::NoGpu(format!("the worker process exited before opening the GPU{status}{log}")))
            }
        }
    }
}
