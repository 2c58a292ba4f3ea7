//! The engine configuration: how cases run, validated once from the command line and shared by
//! every command that runs cases. The main type is [`EngineConfig`].
//!
//! It builds the worker side of a run ([`EngineConfig::supervisor`], [`EngineConfig::pool`],
//! [`EngineConfig::sanitizer_supervisor`]) and answers the per-kernel questions (the run
//! switches, the watchdog's limit), so every command resolves them the same way. The Ctrl-C flag
//! ([`stop_flag`]) is installed once per process and shared by every supervisor.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use thiserror::Error;

use crate::core::manifest::Manifest;
use crate::core::registry;
use crate::core::verdict::{ReferenceChoice, RunOptions};
use crate::run::campaign::{CampaignSpec, CaseStream, Escalator};
use crate::run::sanitizer::{Sanitizer, SanitizerError, Tool};
use crate::run::supervisor::mps::MpsDaemon;
use crate::run::supervisor::{kernel_timeout, Pool, SanitizerPass, Supervisor, SupervisorConfig, SupervisorError};

/// The process's stop flag, set by Ctrl-C: installed on first use, shared afterwards (a second
/// handler cannot be installed, and every supervisor must see the same flag).
pub fn stop_flag() -> Arc<AtomicBool> {
    static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    STOP.get_or_init(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        // Fails only when another handler is installed (a test harness); Ctrl-C then just kills us.
        let _ = ctrlc::set_handler(move || s.store(true, Ordering::SeqCst));
        stop
    })
    .clone()
}

/// More GPUs than any one host has (CUDA numbers devices from 0): `--gpu` + `--gpus` past this
/// is a typo, not a machine.
pub const MAX_GPUS: usize = 1024;

/// The most worker processes a run may ask for (`--jobs`): far more than any GPU host keeps
/// busy, and few enough that a typo cannot start thousands of processes.
pub const MAX_JOBS: usize = 256;

/// Which GPUs workers are spread over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuSelection {
    /// Only `--gpu`.
    #[default]
    One,
    /// Every GPU the driver lists.
    All,
    /// This many GPUs, starting at `--gpu`.
    Count(usize),
}

/// A `--gpus` value that is neither `all` nor a count of at least 1.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("--gpus {0}: expected `all` or a number of GPUs (at least 1)")]
pub struct GpuSelectionError(pub String);

impl FromStr for GpuSelection {
    type Err = GpuSelectionError;

    /// `all`, or a count.
    fn from_str(s: &str) -> Result<GpuSelection, GpuSelectionError> {
        match s {
            "all" => Ok(GpuSelection::All),
            n => match n.parse() {
                Ok(0) | Err(_) => Err(GpuSelectionError(n.to_string())),
                Ok(count) => Ok(GpuSelection::Count(count)),
            },
        }
    }
}

/// What the worker side of a run could not set up.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The cudafuzz executable (the worker) cannot be found.
    #[error("cannot find the cudafuzz executable")]
    Exe(#[source] std::io::Error),
    /// compute-sanitizer is needed and cannot be used.
    #[error(transparent)]
    Sanitizer(#[from] SanitizerError),
    /// A directory for the run's files cannot be created.
    #[error("cannot create {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `--gpu` and `--gpus` name GPUs past any machine's.
    #[error("--gpu {first} --gpus {count}: GPU numbers go up to {}; give a first GPU and a count within them", MAX_GPUS - 1)]
    GpuRange {
        /// `--gpu`.
        first: usize,
        /// `--gpus`.
        count: usize,
    },
    /// `--gpu-sharing mps` cannot have its daemon.
    #[error("--gpu-sharing mps: {0}; use --gpu-sharing turns (or auto) to run without MPS")]
    Mps(String),
    /// A supervisor cannot start (its journal cannot be opened).
    #[error(transparent)]
    Supervisor(#[from] SupervisorError),
}

/// How cases run: GPUs and workers, reference, determinism, watchdog, sanitizer, coverage, and
/// where journals and seeds go.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The first (or only) GPU.
    pub gpu: usize,
    /// GPUs to spread workers over.
    pub gpus: GpuSelection,
    /// Worker processes (at least one per GPU).
    pub jobs: usize,
    /// Which fp64 reference judges outputs.
    pub reference: ReferenceChoice,
    /// Run each case twice and compare bits.
    pub determinism: bool,
    /// The watchdog's limit in milliseconds, over every manifest's own.
    pub timeout_ms: Option<u64>,
    /// Output directory: seeds, journals, sanitizer logs.
    pub out: PathBuf,
    /// Run every case under these compute-sanitizer tools.
    pub sanitize: Option<Vec<Tool>>,
    /// Cases per sanitizer process.
    pub sanitize_batch: usize,
    /// Compile kernels with their coverage points on.
    pub coverage: bool,
    /// How several workers on one GPU share it.
    pub gpu_sharing: GpuSharing,
    /// The stop flag every supervisor watches.
    pub stop: Arc<AtomicBool>,
}

/// How several worker processes on one GPU share it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuSharing {
    /// Through a private MPS daemon ([`GpuSharing::Mps`]) when more than one worker shares a
    /// single GPU and the daemon starts (a note says why not when it does not start); else in
    /// turns.
    Auto,
    /// Through a private MPS daemon, started by the pool (an error when it cannot start): the
    /// workers' work runs side by side, and a case that faults under it is run again alone.
    /// Workers under a sanitizer take turns whatever this says. With several GPUs one daemon
    /// serves them all.
    Mps,
    /// Each worker a context of its own, the GPU running them in turns. The default until MPS
    /// as it now stands (every worker under it to the end) has had its GPU runs.
    #[default]
    Turns,
}

/// The case limit of a campaign that only its deadline or the user stops.
pub const UNLIMITED_CASES: u64 = 1 << 40;

impl EngineConfig {
    /// The defaults: one worker on GPU 0, GPU reference, determinism on, `out` as the output
    /// directory, the process's [`stop_flag`].
    pub fn new(out: PathBuf) -> EngineConfig {
        EngineConfig {
            gpu: 0,
            gpus: GpuSelection::One,
            jobs: 1,
            reference: ReferenceChoice::Gpu,
            determinism: true,
            timeout_ms: None,
            out,
            sanitize: None,
            sanitize_batch: 200,
            coverage: false,
            gpu_sharing: GpuSharing::default(),
            stop: stop_flag(),
        }
    }

    /// The run switches of every case.
    pub fn options(&self) -> RunOptions {
        RunOptions { determinism: self.determinism, reference: self.reference, sanitizer: None, coverage: self.coverage, digest: false }
    }

    /// The watchdog's limit for `m`'s kernel: `--timeout-ms`, else the manifest's, else the
    /// default.
    pub fn timeout(&self, m: &Manifest) -> Duration {
        kernel_timeout(m, self.timeout_ms)
    }

    /// One supervisor on `--gpu`, journalling to `OUT/journal.jsonl`.
    pub fn supervisor(&self) -> Result<Supervisor, ConfigError> {
        self.slot_supervisor(self.gpu, self.out.join("journal.jsonl"))
    }

    /// One supervisor per worker slot: `jobs` of them (at least one per GPU), spread over the
    /// GPUs round-robin, each with its own journal.
    pub fn pool(&self) -> Result<Pool, ConfigError> {
        let gpus = self.gpu_ordinals()?;
        let jobs = self.jobs.max(gpus.len());
        let slots = (0..jobs)
            .map(|j| {
                let journal = if j == 0 { self.out.join("journal.jsonl") } else { self.out.join(format!("journal-{j}.jsonl")) };
                self.slot_supervisor(gpus[j % gpus.len()], journal)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut pool = Pool::new(slots);
        if let Some(daemon) = self.mps_daemon(jobs, gpus.len())? {
            let daemon = Arc::new(daemon);
            pool.slots.iter_mut().for_each(|s| s.share_gpu(daemon.clone()));
        }
        Ok(pool)
    }

    /// The MPS daemon a pool of `jobs` workers on `gpus` GPUs shares them through, as
    /// `--gpu-sharing` asks: `auto` wants one for several native workers on a single GPU (one
    /// daemon would tie several GPUs' fault recoveries together) and says so when it cannot
    /// have it.
    fn mps_daemon(&self, jobs: usize, gpus: usize) -> Result<Option<MpsDaemon>, ConfigError> {
        match self.gpu_sharing {
            GpuSharing::Turns => Ok(None),
            // compute-sanitizer's processes take turns (a gate's sanitizer pass clones this config).
            _ if self.sanitize.is_some() => Ok(None),
            GpuSharing::Mps => MpsDaemon::start().map(Some).map_err(ConfigError::Mps),
            // A host without the NVIDIA driver's device has nothing to share (and workers say why).
            GpuSharing::Auto if gpus > 1 || jobs <= gpus || !std::path::Path::new("/dev/nvidiactl").exists() => Ok(None),
            GpuSharing::Auto => Ok(match MpsDaemon::start() {
                Ok(daemon) => Some(daemon),
                Err(why) => {
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        use std::io::Write;
                        let _ = writeln!(
                            std::io::stderr(),
                            "cudafuzz: {jobs} workers take turns on GPU {} without MPS ({why}); one worker may be as fast",
                            self.gpu
                        );
                    });
                    None
                }
            }),
        }
    }

    /// The GPUs workers are spread over: never empty, and `--gpu` plus `--gpus N` must stay
    /// within GPU numbers (the sum is checked, not wrapped).
    pub fn gpu_ordinals(&self) -> Result<Vec<usize>, ConfigError> {
        Ok(match self.gpus {
            GpuSelection::One => vec![self.gpu],
            GpuSelection::All => (0..crate::engine::gpu::device_count().unwrap_or(1).max(1)).collect(),
            GpuSelection::Count(n) => {
                let n = n.max(1);
                let end = self.gpu.checked_add(n).filter(|end| *end <= MAX_GPUS).ok_or(ConfigError::GpuRange { first: self.gpu, count: n })?;
                (self.gpu..end).collect()
            }
        })
    }

    /// A supervisor on `gpu` journalling to `journal`, under `--sanitize` when it is given.
    pub fn slot_supervisor(&self, gpu: usize, journal: PathBuf) -> Result<Supervisor, ConfigError> {
        let exe = std::env::current_exe().map_err(ConfigError::Exe)?;
        let sanitizer = match &self.sanitize {
            Some(tools) => Some(self.sanitizer_pass(Sanitizer::locate()?, tools, self.sanitize_batch)?),
            None => None,
        };
        Ok(Supervisor::new(SupervisorConfig {
            exe,
            gpu,
            reference_dir: match self.reference {
                ReferenceChoice::Gpu => registry::reference_dir(),
                ReferenceChoice::Cpu => None,
            },
            journal: Some(journal),
            stop: self.stop.clone(),
            sanitizer,
        })?)
    }

    /// A one-worker supervisor on `--gpu` whose worker runs each case alone under `tools`
    /// (escalation, the gate's planted-bug check), journalling to `OUT/<journal>`.
    pub fn sanitizer_supervisor(&self, sanitizer: Sanitizer, tools: &[Tool], journal: &str) -> Result<Supervisor, ConfigError> {
        let pass = self.sanitizer_pass(sanitizer, tools, 1)?;
        let plain = EngineConfig { sanitize: None, ..self.clone() };
        let mut sup = plain.slot_supervisor(self.gpu, self.out.join(journal))?;
        sup.set_sanitizer(Some(pass));
        Ok(sup)
    }

    /// An escalation's supervisors: one per tool, in order, each journalled in
    /// `journal-escalate-<tool>.jsonl` ([`crate::run::campaign::Escalator`] runs the next tool only
    /// when the ones before it named nothing).
    pub fn escalation_supervisors(&self, sanitizer: &Sanitizer, tools: &[Tool]) -> Result<Vec<Supervisor>, ConfigError> {
        tools.iter().map(|&t| self.sanitizer_supervisor(sanitizer.clone(), &[t], &format!("journal-escalate-{}.jsonl", t.name()))).collect()
    }

    /// The escalator of new findings under `tools` on `sanitizer` (one supervisor per tool, see
    /// [`EngineConfig::escalation_supervisors`]).
    pub fn escalator(&self, sanitizer: &Sanitizer, tools: &[Tool]) -> Result<Escalator, ConfigError> {
        Ok(Escalator::new(self.escalation_supervisors(sanitizer, tools)?))
    }

    /// A campaign of `stream`'s cases on `m` under this configuration: its run switches and
    /// watchdog limit, steered, with no limit on cases, time or bugs. Commands set those limits
    /// on the result; this is the one place a campaign's defaults are chosen.
    pub fn campaign<'a>(&self, m: &Manifest, stream: CaseStream<'a>) -> CampaignSpec<'a> {
        CampaignSpec { stream, cases: UNLIMITED_CASES, deadline: None, stop_after: None, options: self.options(), timeout: self.timeout(m), steer: true }
    }

    fn sanitizer_pass(&self, sanitizer: Sanitizer, tools: &[Tool], batch: usize) -> Result<SanitizerPass, ConfigError> {
        let dir = self.out.join("sanitizer");
        std::fs::create_dir_all(&dir).map_err(|source| ConfigError::CreateDir { path: dir.clone(), source })?;
        Ok(SanitizerPass { sanitizer, tools: tools.to_vec(), dir, batch })
    }
}
