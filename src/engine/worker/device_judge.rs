//! A run judged on the device (issue 30, steps 2 and 3): the case's arena was filled on the GPU
//! (`device_data`), so the oracles count on the device ([`DeviceJudge`]) and only their counts
//! come back. A run whose counts show something is downloaded and judged by the host oracles,
//! exactly as on the host path; a quiet run's arena never leaves the GPU.
//!
//! The order, in two batches of queued work with one synchronisation each (a third when the
//! determinism run's launch needs its own), because with several workers sharing a GPU each
//! synchronisation waits for the other contexts' turns:
//! 1. the run (launched by the engine, not waited for), the memory oracles, a built-in op's
//!    GPU reference (reading the inputs where they lie), and the downloads the host needs next:
//!    the counts, the reference's outputs (its rules are made on the host), and for the
//!    determinism run the first run's judged outputs. Damage (a redzone, a gap, an input
//!    changed, a sentinel left) sends the run to the host path whole ([`Engine::finish_on_host`],
//!    from the run's downloaded bytes: the arena still holds them).
//! 2. the value oracles against the gold (left on the device by the reference, else uploaded)
//!    and, for the determinism run, the written tensors made again on the device, the second
//!    run, and its judged outputs' download.
//!
//! A fault at a synchronisation is the run's: the oracles and the built-in references are this
//! harness's own kernels, launched inside their contracts (a user's reference kernel, a Python
//! reference or the CPU reference runs after the first batch has been waited for). Nothing of
//! the case is copied on the device: a copy would be memory that a kernel reading out of
//! bounds reaches.

use std::time::Instant;

use crate::core::finding::Finding;
use crate::core::verdict::{Outcome, ReferenceUsed, RunOptions, Verdict};
use crate::engine::arena::device::DeviceArena;
use crate::engine::arena::HostImage;
use crate::engine::gpu::CudaStatus;
use crate::engine::oracle::device::{DeviceJudge, DeviceJudgeError};
use crate::engine::oracle::{self, Judged};
use crate::engine::reference::Expected;

use super::engine::{micros, Engine, EngineError, Prepared, Progress};
use super::reference::{finish_gpu_op, PlannedOp};
use super::run::{judged_indices, judged_outputs, run_failed, spread, Stop};

impl Engine {
    /// Judges the run just launched (not waited for) on `arena`, runs the references (the
    /// built-in op's GPU reference `planned` before the arena was filled, if any) and the
    /// determinism run, and gives the case's verdict.
    pub(super) fn finish_on_device(
        &mut self,
        prep: &Prepared<'_>,
        arena: &DeviceArena,
        judged: &Judged<'_>,
        opts: &RunOptions,
        planned: Option<PlannedOp>,
        p: &mut Progress,
    ) -> Result<Verdict, Verdict> {
        // A harness failure here comes after the run: the worker restarts to be safe.
        let failed = |p: &Progress, e: DeviceJudgeError| p.error(e, true);
        // While a run is queued and not waited for, its fault shows at whatever call comes next:
        // a context that carries one makes it the run's finding.
        let in_flight = |p: &Progress, e: EngineError| match crate::engine::gpu::synchronize() {
            Err(s) => run_failed(judged, &s).verdict(p),
            Ok(()) => p.error(e, true),
        };
        let recipes = prep.pending.as_deref().expect("a run judged on the device has its recipes");
        let plan = &prep.plan;
        let layout = &prep.image.layout;
        let outputs = judged_indices(plan);

        // Batch 1: memory oracles, the reference, downloads.
        let t = Instant::now();
        if self.judge.is_none() {
            self.judge = Some(DeviceJudge::load(&self.gpu).map_err(|e| in_flight(p, e.into()))?);
        }
        let judge = self.judge.as_mut().expect("loaded above");
        judge.begin(plan.tensors.len()).map_err(|e| in_flight(p, e.into()))?;
        let bases: Vec<u64> = arena.allocs.iter().map(|&(ptr, _)| ptr).collect();
        let judged_here = judge.memory(plan, &layout.allocs, &bases, recipes).map_err(|e| in_flight(p, e.into()))?;
        if !judged_here {
            crate::engine::gpu::synchronize().map_err(|s| run_failed(judged, &s).verdict(p))?;
            let after = arena.download(&prep.image, &mut self.staging).map_err(|s| failed(p, cuda("downloading the run's results", s)))?;
            return self.finish_on_host(prep, arena, judged, opts, p, after);
        }
        judge.queue_read().map_err(|e| in_flight(p, e.into()))?;
        p.times.judge_us = micros(t);

        let t = Instant::now();
        self.device_gold = None;
        let queued = planned.map(|planned| self.queue_gpu_op(prep, planned, arena)).transpose().map_err(|e| in_flight(p, e))?;
        p.times.reference_us += micros(t);

        let t = Instant::now();
        let firsts: &[usize] = if opts.determinism { &outputs } else { &[] };
        let ref_bytes = queued.as_ref().map_or(0, |q| q.arena().0.download_bytes(&q.read));
        let staged =
            self.staging.reserve(ref_bytes + arena.download_bytes(firsts)).map_err(|s| in_flight(p, cuda("allocating the download buffer", s).into()))?;
        if let Some(buf) = staged {
            let (into_ref, into_firsts) = buf.split_at_mut(ref_bytes);
            // SAFETY: both halves are the staging buffer's (pinned), read only after the
            // synchronisation below, and the buffer is not touched in between.
            let queued_downloads = unsafe {
                match &queued {
                    Some(q) => q.arena().0.queue_download(q.arena().1, &q.read, into_ref),
                    None => Ok(()),
                }
                .and_then(|()| arena.queue_download(&prep.image, firsts, into_firsts))
            };
            queued_downloads.map_err(|s| in_flight(p, cuda("queueing the downloads", s).into()))?;
        }
        let synced = crate::engine::gpu::synchronize();
        // The GPU's queue: the run, the oracles, the reference.
        p.times.kernel_us += micros(t);
        synced.map_err(|s| run_failed(judged, &s).verdict(p))?;
        let memory = self.judge.as_mut().expect("loaded above").take();
        if memory.needs_host(plan) {
            drop(queued);
            let after = arena.download(&prep.image, &mut self.staging).map_err(|s| failed(p, cuda("downloading the run's results", s)))?;
            return self.finish_on_host(prep, arena, judged, opts, p, after);
        }

        let t = Instant::now();
        // What batch 1 downloaded (or, past the staging buffer's size, what is downloaded now):
        // the first run's judged outputs out of the buffer before anything reuses it, then the
        // reference's outputs, read into its rules.
        let staged_bytes = ref_bytes + arena.download_bytes(firsts);
        let first = match self.staging.reserve(staged_bytes).map_err(|s| failed(p, cuda("reading the downloads", s)))? {
            _ if !opts.determinism => None,
            Some(buf) => Some(spread(plan.tensors.len(), firsts, arena.split(firsts, &buf[ref_bytes..]).into_iter().map(<[u8]>::to_vec))),
            None => Some(judged_outputs(arena, &prep.image, judged, &mut self.staging).map_err(|stop| stop.verdict(p))?),
        };
        let references = match queued {
            Some(q) => {
                let (references, gold) = match self.staging.reserve(staged_bytes).map_err(|s| failed(p, cuda("reading the downloads", s)))? {
                    Some(buf) => {
                        let bytes = q.arena().0.split(&q.read, &buf[..ref_bytes]);
                        finish_gpu_op(prep, q, &bytes)
                    }
                    None => {
                        let got = q.arena().0.download_staged(q.arena().1, &q.read, &mut self.staging);
                        let got = got.map_err(|s| p.error(EngineError::Reference(format!("reference kernel failed: {s}")), true))?;
                        let bytes: Vec<&[u8]> = got.iter().map(|b| &**b).collect();
                        finish_gpu_op(prep, q, &bytes)
                    }
                }
                .map_err(|e| p.error(e, true))?;
                self.device_gold = gold;
                p.reference = ReferenceUsed::Gpu;
                references
            }
            None => {
                let (references, used) = self.references(prep, arena, opts.reference, false).map_err(|e| p.error(e, true))?;
                p.reference = used;
                references
            }
        };
        p.times.reference_us += micros(t);

        // Batch 2: value oracles; the determinism run.
        let t = Instant::now();
        let judge = self.judge.as_mut().expect("loaded above");
        judge.begin(plan.tensors.len()).map_err(|e| failed(p, e))?;
        // The gold the reference left on the device where it did, else uploaded.
        let kept = self.device_gold.take();
        let on_device = |e: &Expected| kept.as_ref()?.at.iter().find(|&&(i, _, n)| i == e.index && n == e.gold.len() as u64).map(|&(_, at, _)| at);
        let golds: Vec<&[f64]> = references.expected.iter().filter(|e| on_device(e).is_none()).map(|e| e.gold.as_slice()).collect();
        let mut staged = judge.stage_gold(&golds).map_err(|e| failed(p, e))?.into_iter();
        for e in &references.expected {
            let gold = match on_device(e) {
                Some(at) => at,
                None => staged.next().expect("one staged gold per output not kept on the device"),
            };
            let data = arena.allocs[e.index].0 + layout.allocs[e.index].data_offset;
            judge.values(&plan.tensors[e.index], data, gold, e.gold.len() as u64, &e.rule).map_err(|e| failed(p, e))?;
        }
        judge.queue_read().map_err(|e| failed(p, e))?;
        // Freed in stream order, behind the oracles that read it: the second run finds the
        // reference's memory as the host path leaves it, given back.
        drop(kept);
        p.times.judge_us += micros(t);

        let mut second = None;
        if let Some(first) = &first {
            let t = Instant::now();
            let generator = self.generator.as_ref().expect("the arena was filled by the generator");
            // As the host path's restore: every tensor the kernel may write, and any other
            // allocation it may have changed unseen (a capacity tail, which no oracle compares).
            arena
                .refill(layout, plan, recipes, generator, &|tp| tp.role.is_written() || layout.allocs[tp.index].tail_bytes > 0)
                .map_err(|e| p.error(EngineError::DeviceData(e), true))?;
            p.times.upload_us += micros(t);
            let t = Instant::now();
            let relaunched = self.relaunch(prep, arena, judged, opts, true);
            second = Some(match relaunched {
                Ok(()) => match self.queue_judged_outputs(arena, &prep.image, &outputs) {
                    Ok(staged) => staged,
                    // The second run's fault can show here already: as at the synchronisation
                    // below, the first run's values are still judged.
                    Err(s) => {
                        let findings = oracle::check_values(judged, &prep.image, first, &references);
                        return Err(match crate::engine::gpu::synchronize() {
                            Err(fault) => run_failed(judged, &fault).verdict_after(findings, p),
                            Ok(()) => failed(p, cuda("queueing the second run's download", s)),
                        });
                    }
                },
                Err(stop) => {
                    // Refused at its launch: the first run's values are still judged.
                    let findings = oracle::check_values(judged, &prep.image, first, &references);
                    return Err(stop.verdict_after(findings, p));
                }
            });
            p.times.kernel_us += micros(t);
        }
        let t = Instant::now();
        let synced = crate::engine::gpu::synchronize();
        p.times.kernel_us += micros(t);
        if let Err(s) = synced {
            // The second run faulted (the oracles before it are ours): the first run's values
            // are judged on the host, from its download, and the fault is the second run's.
            let Some(first) = &first else { return Err(failed(p, cuda("running the device oracles", s))) };
            let findings = oracle::check_values(judged, &prep.image, first, &references);
            return Err(run_failed(judged, &s).verdict_after(findings, p));
        }

        let t = Instant::now();
        let values = self.judge.as_mut().expect("loaded above").take();
        // Judged again on the host from the run's bytes: its findings, with their detail (the
        // memory oracles found nothing, so these are the value oracles').
        let mut findings: Vec<Finding> = Vec::new();
        if values.needs_host(plan) {
            findings = match &first {
                // The first run's outputs: the arena holds the second run's now.
                Some(first) => oracle::check_values(judged, &prep.image, first, &references),
                None => {
                    let after = arena.download(&prep.image, &mut self.staging).map_err(|s| failed(p, cuda("downloading the run's results", s)))?;
                    oracle::check_values(judged, &prep.image, &after, &references)
                }
            };
        }
        if let (Some(first), Some(second)) = (&first, second) {
            let second = self.take_judged_outputs(arena, &prep.image, &outputs, second, judged).map_err(|stop| stop.verdict(p))?;
            findings.extend(oracle::check_determinism(judged, &prep.image, first, &second));
        }
        p.times.judge_us += micros(t);
        let outcome = if findings.is_empty() { Outcome::Pass } else { Outcome::Fail { findings } };
        Ok(p.verdict(outcome, false))
    }

    /// Queues the download of the judged outputs `outputs` into the staging buffer, when they
    /// fit it (`true`); else they are downloaded after the synchronisation.
    fn queue_judged_outputs(&mut self, arena: &DeviceArena, image: &HostImage, outputs: &[usize]) -> Result<bool, CudaStatus> {
        let Some(buf) = self.staging.reserve(arena.download_bytes(outputs))? else { return Ok(false) };
        // SAFETY: pinned, read by `take_judged_outputs` after the synchronisation.
        unsafe { arena.queue_download(image, outputs, buf) }?;
        Ok(true)
    }

    /// The judged outputs [`Engine::queue_judged_outputs`] queued (`staged`), or downloaded now,
    /// in [`judged_outputs`]'s form.
    fn take_judged_outputs(
        &mut self,
        arena: &DeviceArena,
        image: &HostImage,
        outputs: &[usize],
        staged: bool,
        judged: &Judged<'_>,
    ) -> Result<Vec<Vec<u8>>, Stop> {
        if !staged {
            return judged_outputs(arena, image, judged, &mut self.staging);
        }
        let buf = self.staging.reserve(arena.download_bytes(outputs)).map_err(|s| run_failed(judged, &s))?.expect("reserved when queued");
        Ok(spread(judged.plan.tensors.len(), outputs, arena.split(outputs, buf).into_iter().map(<[u8]>::to_vec)))
    }
}

fn cuda(what: &'static str, status: CudaStatus) -> DeviceJudgeError {
    DeviceJudgeError::Cuda { what, status }
}
