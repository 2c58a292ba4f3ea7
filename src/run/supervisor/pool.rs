//! [`Pool`]: several supervisors, each driven by its own thread over one shared run of case
//! indices, their results handed back in index order.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{RunLimits, Sent, Supervisor, SupervisorError};
use crate::core::case::Case;
use crate::core::manifest::Manifest;
use crate::core::verdict::{Outcome, RunOptions, Verdict};

/// How long cases still running at the deadline may take to finish before they are abandoned
/// (killed and not reported): `--time` is kept within this, and a normal case ends well inside it.
pub const DEADLINE_GRACE: Duration = Duration::from_secs(2);

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

/// What every slot's thread shares in one run.
struct Shared<'a> {
    n: u64,
    deadline: Option<Instant>,
    manifest: &'a Manifest,
    opts: &'a RunOptions,
    timeout: Duration,
    make: &'a (dyn Fn(u64, &AtomicBool) -> Option<Case> + Sync),
    next: AtomicU64,
    abort: AtomicBool,
}

type Report = (u64, Result<Slot, SupervisorError>);

/// What [`Pool::run_indexed_ticking`] hands its caller: a case's result, in case order, a failed
/// case's result ahead of that order, or a tick while results are awaited.
#[derive(Debug)]
pub enum Delivery<'a> {
    /// Case `i`'s result.
    Case(u64, Slot),
    /// Case `i` failed, and earlier cases are still out: a look at its verdict as it arrives,
    /// so that a finding can be shown at once (its `Case` delivery still follows, in order).
    Early(u64, &'a Verdict),
    /// About [`TICK`] passed: a caller with answers of its own to file (a campaign's sanitizer
    /// re-runs) files them now, not when the next case comes in order, which may be seconds
    /// later while a worker restarts.
    Tick,
}

/// How often [`Delivery::Tick`] comes.
pub const TICK: Duration = Duration::from_millis(100);

impl Pool {
    /// A pool of the given supervisors; the first case of each starts its worker.
    pub fn new(slots: Vec<Supervisor>) -> Pool {
        Pool { slots }
    }

    /// The GPUs the pool's workers opened (starting any worker not started yet).
    pub fn gpus(&mut self) -> std::collections::BTreeSet<usize> {
        self.slots.iter_mut().filter_map(|s| s.gpu().ok().map(|g| g.ordinal)).collect()
    }

    /// Total worker starts over all slots (warm spares included).
    pub fn starts(&self) -> u64 {
        self.slots.iter().map(|s| s.starts).sum()
    }

    /// Lost workers replaced by a warm spare, over all slots.
    pub fn spares_used(&self) -> u64 {
        self.slots.iter().map(|s| s.spares_used).sum()
    }

    /// The most cases one slot is handed at a time ([`Supervisor::max_chunk`]): a `make` that
    /// waits for earlier results must not wait for indices less than this far back.
    pub fn max_chunk(&self) -> usize {
        self.slots.iter().map(Supervisor::max_chunk).max().unwrap_or(1)
    }

    /// Runs indices `0..n` against `manifest`: `make(i, abort)` gives the case or `None` to
    /// skip; a `make` that waits (a campaign steering by what earlier cases found) must give up
    /// once `abort` is set, which happens when the run ends early or reaches its deadline.
    /// Stops handing out new indices at `deadline`, or once `on_result` answers
    /// `ControlFlow::Break` or fails (no later index is reported then, and cases still running
    /// are abandoned at once). Cases still running [`DEADLINE_GRACE`] after the deadline are
    /// abandoned too. `on_result` sees every handled index in increasing order; indices never
    /// handed out, or abandoned, are not reported.
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
        let mut on_delivery = |d: Delivery<'_>| match d {
            Delivery::Case(i, slot) => on_result(i, slot),
            Delivery::Early(..) | Delivery::Tick => Ok(ControlFlow::Continue(())),
        };
        self.run_indexed_ticking(n, deadline, manifest, opts, timeout, make, &mut on_delivery)
    }

    /// [`Pool::run_indexed`], with a [`Delivery::Tick`] about every [`TICK`] besides the
    /// results; a tick may end the run as a result does.
    // Each argument is one independent knob of the campaign loop; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub fn run_indexed_ticking(
        &mut self,
        n: u64,
        deadline: Option<Instant>,
        manifest: &Manifest,
        opts: &RunOptions,
        timeout: Duration,
        make: &(dyn Fn(u64, &AtomicBool) -> Option<Case> + Sync),
        on_delivery: &mut dyn FnMut(Delivery<'_>) -> Result<ControlFlow<()>, SupervisorError>,
    ) -> Result<(), SupervisorError> {
        let shared = Shared { n, deadline, manifest, opts, timeout, make, next: AtomicU64::new(0), abort: AtomicBool::new(false) };
        let cancel = Arc::new(AtomicBool::new(false));
        for sup in self.slots.iter_mut() {
            sup.limits = RunLimits { cancel: Some(cancel.clone()), deadline };
        }
        let (tx, rx) = mpsc::channel::<Report>();
        let result = std::thread::scope(|scope| {
            for sup in self.slots.iter_mut() {
                let (tx, shared) = (tx.clone(), &shared);
                scope.spawn(move || drive(sup, shared, &tx));
            }
            drop(tx);
            let mut order = InOrder { on_delivery, first_err: None, done: false, pending: BTreeMap::new(), expect: 0 };
            let mut ticked = Instant::now();
            // The run is over: nothing new starts, and what still runs is abandoned.
            let end = || {
                shared.abort.store(true, Ordering::SeqCst);
                cancel.store(true, Ordering::SeqCst);
            };
            loop {
                let now = Instant::now();
                let wait = match deadline {
                    Some(d) if now < d => d - now,
                    Some(d) if now < d + DEADLINE_GRACE => {
                        // Past the deadline: nothing new is started, and a `make` that waits gives up.
                        shared.abort.store(true, Ordering::SeqCst);
                        d + DEADLINE_GRACE - now
                    }
                    Some(_) => {
                        end();
                        Duration::from_secs(3600)
                    }
                    None => Duration::from_secs(3600),
                };
                let until_tick = TICK.saturating_sub(ticked.elapsed());
                match rx.recv_timeout(wait.min(until_tick)) {
                    Ok((i, slot)) => {
                        if order.push(i, slot) {
                            end();
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
                if ticked.elapsed() >= TICK {
                    ticked = Instant::now();
                    if order.tick() {
                        end();
                    }
                }
            }
            order.finish()
        });
        for sup in self.slots.iter_mut() {
            sup.limits = RunLimits::default();
        }
        result
    }
}

/// One slot's thread: takes indices until they, the time or the run run out.
fn drive(sup: &mut Supervisor, s: &Shared<'_>, tx: &Sender<Report>) {
    if sup.sanitized() {
        drive_batches(sup, s, tx);
    } else {
        drive_native(sup, s, tx);
    }
}

impl Shared<'_> {
    /// Whether the run is over: ended early, or past its deadline.
    fn over(&self) -> bool {
        self.abort.load(Ordering::SeqCst) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// Starts the slot's worker if it has none; whether the slot may take its next index. A start
/// that fails is reported as the result of the index the slot would have taken.
fn worker_ready(sup: &mut Supervisor, s: &Shared<'_>, tx: &Sender<Report>) -> bool {
    if let Err(e) = sup.ready_for(s.manifest) {
        let first = s.next.fetch_add(1, Ordering::SeqCst);
        if first < s.n && !matches!(e, SupervisorError::Cancelled) {
            let _ = tx.send((first, Err(e)));
        }
        return false;
    }
    // A worker's start may have outlasted the run.
    !s.over()
}

/// A case index, and its case when it was made ahead of its turn, with its request when that
/// was written to the worker ahead too.
type Ahead = (u64, Option<(Case, Option<Sent>)>);

/// [`drive`] on native workers: one case at a time, each next case made while the one before
/// runs and its request written to the worker behind it ([`Supervisor::send_ahead`]), so the
/// worker goes from one case to the next without waiting for this thread (the exchange cost a
/// small case about 0.4 ms on an H200 host).
fn drive_native(sup: &mut Supervisor, s: &Shared<'_>, tx: &Sender<Report>) {
    let mut ahead: Option<Ahead> = None;
    drive_ahead(sup, s, tx, &mut ahead);
    // A request written ahead whose turn never came is still in the worker: it runs there, or
    // goes with the worker, before the slot serves anything else; one that ran is reported.
    if let Some((j, Some((case, Some(sent))))) = ahead {
        if let Some(verdict) = sup.drain(sent, &case, s.manifest, s.opts, s.timeout) {
            let _ = tx.send((j, Ok(Slot::Ran(Box::new(case), Box::new(verdict)))));
        }
    }
}

fn drive_ahead(sup: &mut Supervisor, s: &Shared<'_>, tx: &Sender<Report>, ahead: &mut Option<Ahead>) {
    loop {
        if s.over() {
            return;
        }
        let (i, made) = match ahead.take() {
            Some(next) => next,
            None => {
                if !worker_ready(sup, s, tx) {
                    return;
                }
                let i = s.next.fetch_add(1, Ordering::SeqCst);
                if i >= s.n {
                    return;
                }
                (i, None)
            }
        };
        let (case, sent) = match made {
            Some(made) => made,
            None => match (s.make)(i, &s.abort) {
                Some(case) => (case, None),
                // A `make` that gave up on the abort declined its index for that reason alone.
                None if s.abort.load(Ordering::SeqCst) => return,
                None => {
                    if tx.send((i, Ok(Slot::Skipped))).is_err() {
                        return;
                    }
                    continue;
                }
            },
        };
        // Written now when it was not ahead, so that the next can queue behind it.
        let sent = match sent {
            Some(sent) => Some(sent),
            None => match sup.send_ahead(&case, s.manifest, s.opts) {
                Ok(sent) => sent,
                Err(e) => {
                    let _ = tx.send((i, Err(e)));
                    return;
                }
            },
        };
        // Only behind this case's own request: a next case written before it would run first.
        if sent.is_some() && !s.over() {
            let j = s.next.fetch_add(1, Ordering::SeqCst);
            if j < s.n {
                // A `make` that would wait for earlier results (a campaign's steering) is not
                // waited for here, where this slot's own case may be one of them: it is made
                // again when that case is done (a declined index is declined again).
                let now_or_later = AtomicBool::new(true);
                *ahead = Some(match (s.make)(j, &now_or_later) {
                    Some(next) => {
                        // A journal that cannot be written fails the case's own turn instead.
                        let sent = sup.send_ahead(&next, s.manifest, s.opts).unwrap_or(None);
                        (j, Some((next, sent)))
                    }
                    None => (j, None),
                });
            }
        }
        let verdict = match sup.run_sent(sent, &case, s.manifest, s.opts, s.timeout) {
            Ok(v) => v,
            Err(SupervisorError::Cancelled) => return,
            Err(e) => {
                let _ = tx.send((i, Err(e)));
                return;
            }
        };
        if crate::run::trace::on() {
            crate::run::trace::line(serde_json::json!({ "event": "verdict", "index": i, "pass": matches!(verdict.outcome, Outcome::Pass) }));
        }
        if tx.send((i, Ok(Slot::Ran(Box::new(case), Box::new(verdict))))).is_err() {
            return;
        }
    }
}

/// [`drive`] under a sanitizer: chunks of indices, each run as a batch in one tool process.
fn drive_batches(sup: &mut Supervisor, s: &Shared<'_>, tx: &Sender<Report>) {
    loop {
        if s.over() || !worker_ready(sup, s, tx) {
            return;
        }
        let chunk = sup.next_chunk(s.deadline) as u64;
        let first = s.next.fetch_add(chunk, Ordering::SeqCst);
        if first >= s.n {
            return;
        }
        let (mut ran, mut cases, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
        for i in first..(first + chunk).min(s.n) {
            match (s.make)(i, &s.abort) {
                Some(case) => {
                    ran.push(i);
                    cases.push(case);
                }
                None => skipped.push(i),
            }
        }
        // A `make` that gave up on the abort declined its index for that reason alone.
        if s.abort.load(Ordering::SeqCst) {
            return;
        }
        let verdicts = match sup.run_batch(&cases, s.manifest, s.opts, s.timeout) {
            Ok(v) => v,
            Err(SupervisorError::Cancelled) => return,
            Err(e) => {
                let _ = tx.send((first, Err(e)));
                return;
            }
        };
        if crate::run::trace::on() {
            for (i, v) in ran.iter().zip(&verdicts) {
                crate::run::trace::line(
                    serde_json::json!({ "event": "verdict", "index": i, "pass": matches!(v.outcome, crate::core::verdict::Outcome::Pass) }),
                );
            }
        }
        // A batch cut short by the deadline has fewer verdicts: its later cases are not reported
        // (zip stops at the shorter side), and neither are skipped indices after the cut.
        let cut = ran.get(verdicts.len()).copied().unwrap_or(u64::MAX);
        let ran = ran.into_iter().zip(cases).zip(verdicts).map(|((i, case), v)| (i, Slot::Ran(Box::new(case), Box::new(v))));
        let mut gone = false;
        for (i, slot) in skipped.into_iter().filter(|&i| i < cut).map(|i| (i, Slot::Skipped)).chain(ran) {
            gone |= tx.send((i, Ok(slot))).is_err();
        }
        if gone || cut != u64::MAX {
            return;
        }
    }
}

/// Delivers results to `on_result` in index order; after a `Break` or an error, nothing more.
struct InOrder<'f> {
    on_delivery: &'f mut dyn FnMut(Delivery<'_>) -> Result<ControlFlow<()>, SupervisorError>,
    first_err: Option<SupervisorError>,
    done: bool,
    pending: BTreeMap<u64, Result<Slot, SupervisorError>>,
    expect: u64,
}

impl InOrder<'_> {
    /// Takes index `i`'s result and delivers what is now in order; true when the run is over. A
    /// failed case that must wait for earlier ones is shown early first.
    fn push(&mut self, i: u64, slot: Result<Slot, SupervisorError>) -> bool {
        if let (false, Ok(Slot::Ran(_, verdict))) = (i == self.expect || self.done, &slot) {
            if matches!(verdict.outcome, Outcome::Fail { .. }) {
                let flow = (self.on_delivery)(Delivery::Early(i, verdict));
                self.settle(flow);
            }
        }
        self.pending.insert(i, slot);
        while let Some(slot) = self.pending.remove(&self.expect) {
            self.deliver(self.expect, slot);
            self.expect += 1;
        }
        self.done
    }

    /// A tick; true when the run is over.
    fn tick(&mut self) -> bool {
        if !self.done {
            let flow = (self.on_delivery)(Delivery::Tick);
            self.settle(flow);
        }
        self.done
    }

    fn deliver(&mut self, i: u64, slot: Result<Slot, SupervisorError>) {
        if self.done {
            return;
        }
        let flow = slot.and_then(|s| (self.on_delivery)(Delivery::Case(i, s)));
        self.settle(flow);
    }

    fn settle(&mut self, flow: Result<ControlFlow<()>, SupervisorError>) {
        match flow {
            Ok(ControlFlow::Continue(())) => {}
            Ok(ControlFlow::Break(())) => self.done = true,
            Err(e) => {
                self.first_err = Some(e);
                self.done = true;
            }
        }
    }

    /// Indices after a gap (a worker stopped by the deadline) are still reported, in order.
    fn finish(mut self) -> Result<(), SupervisorError> {
        for (i, slot) in std::mem::take(&mut self.pending) {
            self.deliver(i, slot);
        }
        self.first_err.map_or(Ok(()), Err)
    }
}
