//! The gate's [`Backend`] on a real GPU: the supervisor pool, campaign loop, escalation and seed
//! keeper that `fuzz`, `repro` and `sweep` use, driven step by step by [`super::run()`].

use crate::core::case::Case;
use crate::core::error::chain;
use crate::core::manifest::Manifest;
use crate::core::verdict::{Outcome, RunOptions};
use crate::run::campaign::{self, CampaignEvent, CampaignSpec, CaseStream, Escalator, EventKind, Kept, SeedKeeper};
use crate::run::config::{ConfigError, EngineConfig};
use crate::run::sanitizer::{Sanitizer, Tool};
use crate::run::supervisor::{Pool, Supervisor, SupervisorError};
use crate::tools::gate::{Backend, Found, FuzzJob, SanitizeJob, StepError};
use crate::tools::report::export::{Campaign, GpuSummary, MatrixCell};
use crate::tools::sweep::{run_cell, CellSpec};

/// The gate's backend: the supervisor pool, campaign loop and seed keeper the other commands
/// use.
pub struct GpuBackend<'s> {
    cfg: EngineConfig,
    pool: Option<Pool>,
    escalator: Option<Option<Escalator>>,
    keeper: SeedKeeper,
    /// Where lines for the user go: new bugs, escalation notes.
    say: Box<dyn FnMut(&str) + 's>,
}

fn step_error(e: SupervisorError) -> StepError {
    match e {
        SupervisorError::NoGpu(m) => StepError::NoGpu(m),
        SupervisorError::Interrupted => StepError::Interrupted,
        e => StepError::Failed(chain(&e)),
    }
}

impl<'s> GpuBackend<'s> {
    /// A backend on the engine configuration `cfg`, keeping seeds in `OUT/seeds`, telling the
    /// user about new bugs through `say`. Nothing starts until the gate asks.
    pub fn new(cfg: EngineConfig, say: impl FnMut(&str) + 's) -> GpuBackend<'s> {
        let keeper = SeedKeeper::new(cfg.out.join("seeds"));
        GpuBackend { cfg, pool: None, escalator: None, keeper, say: Box::new(say) }
    }

    /// The seeds kept so far (the gate files them one per bug at its end).
    pub fn keeper_mut(&mut self) -> &mut SeedKeeper {
        &mut self.keeper
    }

    fn pool(&mut self) -> Result<&mut Pool, StepError> {
        if self.pool.is_none() {
            self.pool = Some(self.cfg.pool().map_err(|e| StepError::Failed(chain(&e)))?);
        }
        Ok(self.pool.as_mut().expect("just made"))
    }

    fn sanitizer_supervisor(&self, tools: &[Tool], journal: &str) -> Result<Supervisor, StepError> {
        let sanitizer = Sanitizer::locate().map_err(|e| StepError::Failed(e.to_string()))?;
        self.cfg.sanitizer_supervisor(sanitizer, tools, journal).map_err(|e| StepError::Failed(chain(&e)))
    }

    /// Runs one campaign on `pool` and reports its findings to the gate (`found`); `log` prints
    /// new findings and escalation notes.
    fn campaign(
        pool: &mut Pool,
        spec: &CampaignSpec<'_>,
        keeper: &mut SeedKeeper,
        escalator: Option<&mut Escalator>,
        say: &mut dyn FnMut(&str),
        found: &mut dyn FnMut(Found),
    ) -> Result<Campaign, StepError> {
        let mut on_event = |e: CampaignEvent<'_>| match e.kind {
            EventKind::NewFinding { case, finding, seed, .. } => {
                found(Found { case: case.summary(), finding: finding.clone(), seed: Some(seed.to_path_buf()) })
            }
            // A line per bug, not per signature: further signatures of a known bug are in the
            // report's findings.
            EventKind::NewBug { index, bug } => {
                say(&format!("NEW   (case #{index}): {}", crate::core::triage::bug_line(bug)));
            }
            EventKind::SmallerCase { case, finding, seed, .. } => {
                found(Found { case: case.summary(), finding: finding.clone(), seed: Some(seed.to_path_buf()) })
            }
            EventKind::Named { case, finding, kept: Kept::New(seed) | Kept::Smaller(seed), .. } => {
                found(Found { case: case.summary(), finding: finding.clone(), seed: Some(seed.clone()) })
            }
            EventKind::NotNamed { why, .. } => {
                say(&format!("      not re-run under the sanitizer: {why}"));
            }
            EventKind::EscalationSilent { note } => {
                say(&format!("      ({note})"));
            }
            EventKind::NotYetNamed { bugs } => {
                say(&format!("      not yet named when the campaign stopped: {}", crate::core::triage::bug_ids(bugs)));
            }
            _ => {}
        };
        let (summary, result) = campaign::run(pool, spec, keeper, escalator, &mut on_event);
        result.map_err(step_error)?;
        let t = &summary.tally;
        Ok(Campaign {
            cases: t.total(),
            passed: t.pass,
            failed: t.fail,
            errors: t.error,
            skipped: summary.skipped,
            steered: summary.steered,
            elapsed_secs: summary.elapsed.as_secs_f64(),
            ..Campaign::default()
        })
    }
}

impl Backend for GpuBackend<'_> {
    fn gpu(&mut self) -> Result<GpuSummary, StepError> {
        let pool = self.pool()?;
        let workers = pool.slots.len();
        let g = pool.slots[0].gpu().map_err(step_error)?;
        let name = if workers > 1 { format!("{} (gpu {}, {workers} workers)", g.name, g.ordinal) } else { format!("{} (gpu {})", g.name, g.ordinal) };
        Ok(GpuSummary { name, arch: g.arch.to_string(), driver: format!("{}.{}", g.driver_version / 1000, (g.driver_version % 1000) / 10) })
    }

    fn sanitizer(&mut self) -> Result<String, StepError> {
        Sanitizer::locate().map(|s| format!("{} ({})", s.version, s.path.display())).map_err(|e| StepError::Failed(e.to_string()))
    }

    fn run_case(&mut self, m: &Manifest, case: &Case, tool: Option<Tool>) -> Result<Outcome, StepError> {
        let limit = self.cfg.timeout(m);
        let verdict = match tool {
            None => {
                let opts = self.cfg.options();
                self.pool()?.slots[0].run(case, m, &opts, limit)
            }
            Some(tool) => {
                let mut sup = self.sanitizer_supervisor(&[tool], "journal-selfcheck.jsonl")?;
                sup.run(case, m, &RunOptions { determinism: false, ..self.cfg.options() }, limit)
            }
        };
        verdict.map(|v| v.outcome).map_err(step_error)
    }

    fn sweep_cell(&mut self, job: &CellSpec<'_>, found: &mut dyn FnMut(Found)) -> Result<MatrixCell, StepError> {
        let (opts, limit) = (self.cfg.options(), self.cfg.timeout(job.manifest));
        self.pool()?;
        let GpuBackend { pool, keeper, .. } = self;
        let pool = pool.as_mut().expect("made above");
        let mut keep = |case: &Case, findings: &[crate::core::finding::Finding]| -> Result<(), SupervisorError> {
            for f in findings {
                if let Kept::New(seed) | Kept::Smaller(seed) = keeper.keep(job.manifest, case, f)? {
                    found(Found { case: case.summary(), finding: f.clone(), seed: Some(seed) });
                }
            }
            Ok(())
        };
        let cell = run_cell(pool, job, &opts, limit, &mut keep).map_err(step_error)?;
        Ok(MatrixCell::from_cell(&cell))
    }

    fn fuzz(&mut self, job: &FuzzJob<'_>, found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError> {
        let m = job.manifest;
        if self.escalator.is_none() && !job.escalate.is_empty() {
            let esc = match Sanitizer::locate().map_err(ConfigError::from).and_then(|s| self.cfg.escalator(&s, job.escalate)) {
                Ok(e) => Some(e),
                Err(e) => {
                    (self.say)(&format!("new findings will not be named by compute-sanitizer: {}", chain(&e)));
                    None
                }
            };
            self.escalator = Some(esc);
        }
        let stream = CaseStream::campaign(m, job.seed, job.outside_contract).sharded(job.shard);
        let mut spec = self.cfg.campaign(m, stream);
        spec.deadline = Some(job.deadline);
        if let Some(n) = job.cases {
            spec.cases = n;
        }
        self.pool()?;
        let GpuBackend { pool, keeper, escalator, say, .. } = self;
        let escalator = if job.escalate.is_empty() { None } else { escalator.as_mut().and_then(|e| e.as_mut()) };
        GpuBackend::campaign(pool.as_mut().expect("made above"), &spec, keeper, escalator, say, found)
    }

    fn sanitize(&mut self, job: &SanitizeJob<'_>, found: &mut dyn FnMut(Found)) -> Result<Campaign, StepError> {
        let m = job.manifest;
        // Its own pool of workers under the tools, journalled apart from the native workers.
        let cfg = EngineConfig { sanitize: Some(job.tools.to_vec()), out: self.cfg.out.join("sanitize"), ..self.cfg.clone() };
        let mut spool = cfg.pool().map_err(|e| StepError::Failed(chain(&e)))?;
        let mut spec = self.cfg.campaign(m, CaseStream::generated(m, job.seed).sharded(job.shard));
        spec.cases = job.cases;
        spec.deadline = Some(job.deadline);
        GpuBackend::campaign(&mut spool, &spec, &mut self.keeper, None, &mut self.say, found)
    }
}
