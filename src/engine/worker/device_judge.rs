//! A run judged on the device (issue 30, step 2): the case's arena was filled on the GPU
//! (`device_data`), so the oracles count on the device ([`DeviceJudge`]) and only their counts
//! come back. A run whose counts show something is downloaded and judged by the host oracles,
//! exactly as on the host path; a quiet run's arena never leaves the GPU.
//!
//! The order: the memory oracles right after the run, their counts read at once. Damage (a
//! redzone, a gap, an input changed, a sentinel left) sends the run to the host path whole
//! ([`Engine::finish_on_host`], from the run's downloaded bytes). Otherwise the inputs are as
//! drawn, so the references read them where they lie without the arena being written back;
//! the value oracles compare the outputs in the arena with the gold (left on the device by a
//! built-in op's GPU reference, else uploaded). The determinism run keeps the first run's
//! judged outputs on the host, as the host path does, and writes the written tensors' initial
//! contents again on the device. Nothing of the case is copied on the device: a copy would be
//! memory that a kernel reading out of bounds reaches.

use std::time::Instant;

use crate::core::finding::Finding;
use crate::core::verdict::{Outcome, RunOptions, Verdict};
use crate::engine::arena::device::DeviceArena;
use crate::engine::gpu::CudaStatus;
use crate::engine::oracle::device::{DeviceJudge, DeviceJudgeError};
use crate::engine::oracle::{self, Judged};
use crate::engine::reference::Expected;

use super::engine::{judged_outputs, micros, Engine, Prepared, Progress};

impl Engine {
    /// Judges the run that just ended on `arena`, runs the references and the determinism run,
    /// and gives the case's verdict.
    pub(super) fn finish_on_device(
        &mut self,
        prep: &Prepared<'_>,
        arena: &DeviceArena,
        judged: &Judged<'_>,
        opts: &RunOptions,
        p: &mut Progress,
    ) -> Result<Verdict, Verdict> {
        // A harness failure here comes after a clean synchronisation of the kernel: the worker
        // restarts to be safe.
        let failed = |p: &Progress, e: DeviceJudgeError| p.error(e, true);
        let recipes = prep.pending.as_deref().expect("a run judged on the device has its recipes");
        let plan = &prep.plan;
        let t = Instant::now();
        if self.judge.is_none() {
            self.judge = Some(DeviceJudge::load(&self.gpu).map_err(|e| failed(p, e))?);
        }
        let judge = self.judge.as_mut().expect("loaded above");
        judge.begin(plan.tensors.len()).map_err(|e| failed(p, e))?;
        let bases: Vec<u64> = arena.allocs.iter().map(|&(ptr, _)| ptr).collect();
        let judged_here = judge.memory(plan, &prep.image.layout.allocs, &bases, recipes).map_err(|e| failed(p, e))?;
        let memory = judge.read().map_err(|e| failed(p, e))?;
        p.times.judge_us = micros(t);
        if !judged_here || memory.needs_host(plan) {
            let after = arena.download(&prep.image).map_err(|s| failed(p, cuda("downloading the run's results", s)))?;
            return self.finish_on_host(prep, arena, judged, opts, p, after);
        }

        let t = Instant::now();
        let (references, used) = self.references(prep, arena, opts.reference, false).map_err(|e| p.error(e, true))?;
        p.times.reference_us = micros(t);
        p.reference = used;

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
            let data = arena.allocs[e.index].0 + prep.image.layout.allocs[e.index].data_offset;
            judge.values(&plan.tensors[e.index], data, gold, e.gold.len() as u64, &e.rule).map_err(|e| failed(p, e))?;
        }
        let values = judge.read().map_err(|e| failed(p, e))?;
        drop(kept);
        // Judged again on the host from the run's bytes: its findings, with their detail (the
        // memory oracles found nothing, so these are the value oracles').
        let mut findings: Vec<Finding> = Vec::new();
        if values.needs_host(plan) {
            let after = arena.download(&prep.image).map_err(|s| failed(p, cuda("downloading the run's results", s)))?;
            findings.extend(oracle::check_values(judged, &prep.image, &after, &references));
        }
        p.times.judge_us += micros(t);

        if opts.determinism {
            let t = Instant::now();
            let first = judged_outputs(arena, &prep.image, judged).map_err(|stop| stop.verdict(p))?;
            let generator = self.generator.as_ref().expect("the arena was filled by the generator");
            // As the host path's restore: every tensor the kernel may write, and any other
            // allocation it may have changed unseen (a capacity tail, which no oracle compares).
            let layout = &prep.image.layout;
            arena
                .refill(layout, plan, recipes, generator, &|tp| tp.role.is_written() || layout.allocs[tp.index].tail_bytes > 0)
                .map_err(|e| p.error(crate::engine::worker::engine::EngineError::DeviceData(e), true))?;
            p.times.upload_us += micros(t);
            self.determinism(prep, judged, arena, &first, opts, &mut findings, p)?;
        }
        let outcome = if findings.is_empty() { Outcome::Pass } else { Outcome::Fail { findings } };
        Ok(p.verdict(outcome, false))
    }
}

fn cuda(what: &'static str, status: CudaStatus) -> DeviceJudgeError {
    DeviceJudgeError::Cuda { what, status }
}
