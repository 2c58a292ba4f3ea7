//! The command line: parse, validate, call the library, map errors to exit statuses.
//!
//! Kept thin on purpose (ripgrep's shape): every command is a small function that builds library
//! objects and prints what they return. `anyhow` lives only here; the library's errors are typed.

mod contract;
mod gate;
mod minimize;
#[path = "report.rs"]
mod report_cmd;
mod sanitizer;
mod sweep;

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use rand_chacha::rand_core::{RngCore, SeedableRng};

use crate::case::{decode_case, past_int32_variant, Case, DecodeContext, TensorId, PAST_INT32_ONE_IN};
use crate::compile::{build_all, Arch, Compiler};
use crate::corpus::{self, Seed};
use crate::exit;
use crate::finding::Signature;
use crate::manifest::Manifest;
use crate::plan::{Contract, Plan};
use crate::registry;
use crate::report;
use crate::sanitizer::{Sanitizer, Tool};
use crate::supervisor::{Pool, SanitizerPass, Slot, Supervisor, SupervisorConfig, SupervisorError, DEFAULT_KERNEL_TIMEOUT};
use crate::worker::{self, Outcome, ReferenceChoice, RunOptions, Verdict};

/// cudafuzz: finds memory-safety and correctness bugs in CUDA attention kernels.
#[derive(Debug, Parser)]
#[command(name = "cudafuzz", version, about, long_about = None)]
pub struct RawArgs {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with case files: print an example, check and plan one, decode fuzzer bytes.
    #[command(subcommand)]
    Case(CaseCommand),
    /// List the shipped kernel manifests.
    Kernels,
    /// Compile every kernel × parameter combination × dtype × arch with NVRTC (no GPU needed).
    Build(BuildArgs),
    /// Run cases (JSON seeds, bare cases or raw fuzzer inputs) against a kernel on the GPU.
    Run(RunArgs),
    /// Replay a saved seed with its kernel and print the full report.
    Repro(ReproArgs),
    /// Generate cases and run them; save one seed per new finding signature.
    Fuzz(FuzzArgs),
    /// Measure engine throughput on small cases (a benchmark: prints a table).
    Bench(BenchArgs),
    /// The failure matrix: kernel configuration × input class (aligned, misaligned q, tail
    /// tiles, strided, causal) → pass/fail counts over repetitions, with finding signatures.
    Sweep(sweep::SweepArgs),
    /// Shrink a failing seed (batch, heads, sequences, head_dim, offsets, layout, data) while it
    /// keeps its finding signature; the minimal seed is saved next to the original.
    Minimize(minimize::MinimizeArgs),
    /// Infer the preconditions a kernel really needs: probes that vary one property at a time
    /// outside and at the edges of its declared contract, summarised as sentences ("q base must
    /// be 16-byte aligned"), each with a minimal failing case saved under OUT/contract/.
    Contract(contract::ContractArgs),
    /// compute-sanitizer utilities: `parse FILE.xml [--json]`.
    #[command(subcommand)]
    Sanitizer(sanitizer::SanitizerCommand),
    /// The nightly CI gate: environment and planted-bug check, seed replays, sweep, fuzz and
    /// sanitizer passes within a time budget; writes report.json/.md, junit.xml, results.sarif.
    Gate(gate::GateArgs),
    /// Reports: `merge` shard reports and seeds into one, `render` one in another format.
    #[command(subcommand)]
    Report(report_cmd::ReportCommand),
    /// Internal: the worker process the supervisor starts (cases in on stdin, events out).
    #[command(hide = true)]
    Worker {
        /// GPU index.
        #[arg(long, default_value_t = 0)]
        gpu: usize,
        /// GPU reference kernel manifest.
        #[arg(long)]
        reference: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum CaseCommand {
    /// Print an example seed file (a small valid case).
    Example {
        /// Kernel name or manifest to put in the case.
        #[arg(long, default_value = "simple_attn")]
        kernel: String,
    },
    /// Validate a seed/case file and print its plan: strides, spans, alignment residues, and the
    /// verdict against the kernel's contract.
    Check {
        /// The file.
        file: PathBuf,
        /// Kernel to judge the contract against (default: the case's own kernel).
        #[arg(long)]
        kernel: Option<String>,
    },
    /// Decode raw fuzzer bytes into a case and print it as a seed file.
    Decode {
        /// The raw input (e.g. a libFuzzer artifact).
        file: PathBuf,
        /// Kernel whose parameters and dtypes the fuzzer decoded with.
        #[arg(long)]
        kernel: Option<String>,
    },
}

#[derive(Debug, Args)]
struct BuildArgs {
    /// Kernels to build (names or manifest paths); default: every shipped manifest.
    #[arg(long)]
    kernel: Vec<String>,
    /// Target architectures.
    #[arg(long, value_delimiter = ',', default_value = "sm_80,sm_89,sm_90")]
    arch: Vec<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum RefArg {
    Gpu,
    Cpu,
}

#[derive(Debug, Args, Clone)]
pub(super) struct EngineArgs {
    /// GPU index.
    #[arg(long, default_value_t = 0)]
    gpu: usize,
    /// Which fp64 reference judges outputs.
    #[arg(long, value_enum, default_value = "gpu")]
    reference: RefArg,
    /// Skip the second run that checks bitwise determinism.
    #[arg(long)]
    no_determinism: bool,
    /// Watchdog: milliseconds a kernel may run before it is called a hang (default: the
    /// manifest's `timeout_ms`, else 10000).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Output directory for seeds and the journal.
    #[arg(long, default_value = "cudafuzz-out")]
    out: PathBuf,
    /// Worker processes (they share the GPUs round-robin); results stay in case order.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// GPUs to spread workers over: `all`, or a count starting at --gpu (at least one worker each).
    #[arg(long)]
    gpus: Option<String>,
    /// Run every case under compute-sanitizer: `memcheck`, `racecheck`, `initcheck`,
    /// `synccheck`, a comma-separated list, or `all` (one pass per tool).
    #[arg(long, value_name = "TOOL[,TOOL]|all")]
    sanitize: Option<String>,
    /// Cases per sanitizer process (each start costs seconds; a sticky error ends one early).
    #[arg(long, default_value_t = 200)]
    sanitize_batch: usize,
    /// Compile kernels with their `CF_COVER(id)` points on (kernels/include/cf_coverage.cuh) and
    /// report the kernel paths the cases reached.
    #[arg(long)]
    coverage: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Kernel name or manifest path (default: each case's own kernel).
    #[arg(long)]
    kernel: Option<String>,
    /// Case files: seed JSON, bare case JSON, or raw fuzzer bytes.
    #[arg(required = true)]
    cases: Vec<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Debug, Args)]
struct ReproArgs {
    /// The seed file (JSON or a raw libFuzzer artifact).
    seed: PathBuf,
    /// Kernel, when the seed does not name one (raw fuzzer bytes) or to replay against another.
    #[arg(long, env = "CUDAFUZZ_KERNEL")]
    kernel: Option<String>,
    /// Write a standalone repro instead of running the seed (no GPU needed): `cu`, one .cu file
    /// that `nvcc` builds, or `python`, a script using PyTorch, NVRTC and the CUDA driver. With
    /// `--sanitize memcheck` (or a seed saved for a sanitizer finding) the repro is laid out for
    /// that tool.
    #[arg(long, value_enum, value_name = "cu|python")]
    emit: Option<EmitArg>,
    /// The repro file to write (default: the seed's path with .cu or .py; `-` for stdout).
    #[arg(short = 'o', long = "output", requires = "emit")]
    output: Option<PathBuf>,
    /// Overwrite the repro file if it exists.
    #[arg(long, requires = "emit")]
    force: bool,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum EmitArg {
    Cu,
    Python,
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// Kernel to run (a correct one, so every case does the full pipeline).
    #[arg(long, default_value = "simple_attn")]
    kernel: String,
    /// Cases per configuration.
    #[arg(long, default_value_t = 2000)]
    cases: u64,
    /// Case sizes to measure: small, medium, large, past-int32 (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "small")]
    sizes: Vec<String>,
    /// Also write the rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Debug, Args)]
struct FuzzArgs {
    /// Kernels (names or manifest paths); default: every shipped kernel marked for fuzzing.
    #[arg(long)]
    kernel: Vec<String>,
    /// Cases per kernel.
    #[arg(long, default_value_t = 1000)]
    cases: u64,
    /// Stop each kernel after this long (e.g. 30s, 5m), whichever comes first.
    #[arg(long, value_parser = parse_duration)]
    time: Option<Duration>,
    /// Generator seed: the same seed and case count give the same cases.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Also run generated cases that lie outside the kernel's declared contract (their findings
    /// show which preconditions the kernel really has); by default they are skipped and counted.
    #[arg(long)]
    outside_contract: bool,
    /// Move on to the next kernel after this many distinct findings (e.g. 1: time to first
    /// finding).
    #[arg(long)]
    stop_after: Option<usize>,
    /// Re-run each new finding's case under these compute-sanitizer tools to name the bug
    /// (kind, source line, tensor, distance past its end); `none` turns this off.
    #[arg(long, default_value = "memcheck,racecheck", value_name = "TOOL[,TOOL]|all|none")]
    escalate: String,
    #[command(flatten)]
    engine: EngineArgs,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.find(|c: char| !c.is_ascii_digit()).map(|i| s.split_at(i)).unwrap_or((s, "s"));
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a duration like 30s, 5m or 1h"))?;
    match unit {
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        "ms" => Ok(Duration::from_millis(n)),
        _ => Err(format!("`{s}`: unknown unit `{unit}` (use ms, s, m or h)")),
    }
}

/// A user-facing failure with the exit status it maps to.
#[derive(Debug)]
struct Exit(i32, String);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.1)
    }
}

impl std::error::Error for Exit {}

/// An error and all its causes on one line, `outer: cause: root cause`.
fn chain(e: impl Into<anyhow::Error>) -> String {
    format!("{:#}", e.into())
}

fn fail(code: i32, msg: impl Into<String>) -> anyhow::Error {
    Exit(code, msg.into()).into()
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let args = RawArgs::parse();
    match run(args) {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            let code = e.downcast_ref::<Exit>().map(|x| x.0).unwrap_or(exit::USAGE);
            eprintln!("cudafuzz: {e:#}");
            ExitCode::from(code as u8)
        }
    }
}

fn run(args: RawArgs) -> Result<i32> {
    match args.command {
        Command::Case(c) => case_command(c),
        Command::Kernels => kernels(),
        Command::Build(b) => build(b),
        Command::Run(r) => run_cases(r),
        Command::Repro(r) => repro(r),
        Command::Fuzz(f) => fuzz(f),
        Command::Bench(b) => bench(b),
        Command::Sweep(s) => sweep::sweep(s),
        Command::Sanitizer(c) => sanitizer::sanitizer_command(c),
        Command::Minimize(a) => minimize::minimize_command(a),
        Command::Contract(a) => contract::contract_command(a),
        Command::Gate(a) => gate::gate_command(a),
        Command::Report(c) => report_cmd::report_command(c),
        Command::Worker { gpu, reference } => Ok(worker::main(gpu, reference)),
    }
}

fn resolve_kernel(spec: &str) -> Result<Manifest> {
    registry::resolve(spec).map_err(|e| fail(exit::USAGE, e))
}

fn decode_context(kernel: Option<&Manifest>) -> DecodeContext {
    kernel.map(|m| m.decode_context()).unwrap_or_default()
}

/// Loads a seed; raw bytes decode with the kernel's context.
fn load_seed(path: &Path, kernel: Option<&Manifest>) -> Result<Seed> {
    let (seed, _) = corpus::load(path, &decode_context(kernel)).map_err(|e| fail(exit::USAGE, chain(e)))?;
    Ok(seed)
}

fn case_command(c: CaseCommand) -> Result<i32> {
    match c {
        CaseCommand::Example { kernel } => {
            let mut case = Case::example(&kernel);
            if let Ok(m) = registry::resolve(&kernel) {
                case.params = m.default_params();
            }
            print!("{}", Seed::new(case).to_json());
            Ok(exit::OK)
        }
        CaseCommand::Check { file, kernel } => {
            let manifest = kernel.as_deref().map(resolve_kernel).transpose()?;
            let seed = load_seed(&file, manifest.as_ref())?;
            let case = &seed.case;
            let plan = Plan::new(case);
            print!("{}", report::plan_table(case, &plan));
            let manifest = match manifest {
                Some(m) => Some(m),
                None if !case.kernel.is_empty() => registry::resolve(&case.kernel).ok(),
                None => None,
            };
            match manifest {
                Some(m) => print!("{}", report::contract_lines(&m.name, &m.contract.check(case, &plan))),
                None => {
                    println!("kernel `{}` not found: no contract to check against (pass --kernel)", case.kernel);
                    print!("{}", report::contract_lines("any kernel", &Contract::anything().check(case, &plan)));
                }
            }
            Ok(exit::OK)
        }
        CaseCommand::Decode { file, kernel } => {
            let manifest = kernel.as_deref().map(resolve_kernel).transpose()?;
            let bytes = std::fs::read(&file).with_context(|| format!("{}: cannot read", file.display())).map_err(|e| fail(exit::USAGE, chain(e)))?;
            let case = decode_case(&mut arbitrary::Unstructured::new(&bytes), &decode_context(manifest.as_ref()))
                .map_err(|e| fail(exit::USAGE, format!("{}: cannot decode: {e}", file.display())))?;
            print!("{}", Seed::new(case).to_json());
            Ok(exit::OK)
        }
    }
}

fn kernels() -> Result<i32> {
    let dir = registry::kernels_dir();
    println!("shipped kernels in {}:", dir.display());
    let mut bad = 0;
    for m in registry::shipped() {
        match m {
            Ok(m) => {
                let params: Vec<String> = m.params.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
                println!(
                    "  {:<16} {:<40} {} [{}]",
                    m.name,
                    m.path.display(),
                    m.contract.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>().join(","),
                    params.join(" ")
                );
                if !m.description.is_empty() {
                    println!("  {:<16} {}", "", m.description);
                }
            }
            Err(e) => {
                bad += 1;
                println!("  error: {e}");
            }
        }
    }
    Ok(if bad > 0 { exit::USAGE } else { exit::OK })
}

fn parse_archs(list: &[String]) -> Result<Vec<Arch>> {
    list.iter()
        .map(|a| a.parse::<Arch>().map_err(|e| fail(exit::USAGE, format!("--arch {a}: {e}"))))
        .collect()
}

fn build(b: BuildArgs) -> Result<i32> {
    let archs = parse_archs(&b.arch)?;
    let manifests = manifests_or_shipped(&b.kernel, false)?;
    let compiler = Compiler::new(None).map_err(|e| fail(exit::SETUP, chain(e)))?;
    build_report(&manifests, &archs, &compiler)
}

fn build_report(manifests: &[Manifest], archs: &[Arch], compiler: &Compiler) -> Result<i32> {
    let started = Instant::now();
    let outcomes = build_all(manifests, archs, compiler);
    let mut failed = 0;
    let mut cached = 0;
    for o in &outcomes {
        match &o.result {
            Ok((_, from_cache)) => cached += *from_cache as usize,
            Err(log) => {
                failed += 1;
                eprintln!("FAILED {} {:?} {} {}:\n{log}", o.manifest, o.params, o.dtype, o.arch);
            }
        }
    }
    println!(
        "compiled {} configurations ({} kernels x params x dtypes x {} archs) in {:.1} s: {} ok ({} from cache), {} failed",
        outcomes.len(),
        manifests.len(),
        archs.len(),
        started.elapsed().as_secs_f64(),
        outcomes.len() - failed,
        cached,
        failed
    );
    Ok(if failed > 0 { exit::SETUP } else { exit::OK })
}

/// The named kernels, or every shipped one (`fuzz_only`: those marked for fuzzing).
fn manifests_or_shipped(names: &[String], fuzz_only: bool) -> Result<Vec<Manifest>> {
    if !names.is_empty() {
        return names.iter().map(|n| resolve_kernel(n)).collect();
    }
    let mut out = Vec::new();
    for m in registry::shipped() {
        let m = m.map_err(|e| fail(exit::USAGE, e.to_string()))?;
        if !fuzz_only || m.fuzz {
            out.push(m);
        }
    }
    Ok(out)
}

fn options(e: &EngineArgs) -> RunOptions {
    RunOptions {
        determinism: !e.no_determinism,
        reference: match e.reference {
            RefArg::Gpu => ReferenceChoice::Gpu,
            RefArg::Cpu => ReferenceChoice::Cpu,
        },
        sanitizer: None,
        coverage: e.coverage,
    }
}

fn supervisor(e: &EngineArgs, stop: Arc<AtomicBool>) -> Result<Supervisor> {
    slot_supervisor(e, stop, e.gpu, e.out.join("journal.jsonl"))
}

/// The GPUs a pool's workers opened (starting any worker not started yet).
fn pool_gpus(pool: &mut Pool) -> std::collections::BTreeSet<usize> {
    pool.slots.iter_mut().filter_map(|s| s.gpu().ok().map(|g| g.ordinal)).collect()
}

/// The line a command prints once its workers are up: the first worker's GPU, the worker count
/// and, with `--gpus`, every GPU the workers opened.
fn workers_line(gpu: &crate::gpu::GpuInfo, pool: &mut Pool) -> String {
    let ordinals = pool_gpus(pool);
    let on = if ordinals.len() > 1 {
        format!(" on GPUs {}", ordinals.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(", "))
    } else {
        String::new()
    };
    format!("gpu {}: {} ({}), driver {}; {} worker(s){on}", gpu.ordinal, gpu.name, gpu.arch, gpu.driver_version, pool.slots.len())
}

/// One supervisor per worker slot: `--jobs` of them, spread over `--gpus` round-robin.
fn pool(e: &EngineArgs, stop: Arc<AtomicBool>) -> Result<Pool> {
    let gpus: Vec<usize> = match e.gpus.as_deref() {
        None => vec![e.gpu],
        Some("all") => (0..crate::gpu::device_count().unwrap_or(1)).collect(),
        Some(n) => {
            let n: usize = n.parse().map_err(|_| fail(exit::USAGE, format!("--gpus {n}: expected `all` or a number")))?;
            (e.gpu..e.gpu + n.max(1)).collect()
        }
    };
    let jobs = e.jobs.max(gpus.len());
    let slots = (0..jobs)
        .map(|j| {
            let journal = if j == 0 { e.out.join("journal.jsonl") } else { e.out.join(format!("journal-{j}.jsonl")) };
            slot_supervisor(e, stop.clone(), gpus[j % gpus.len()], journal)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Pool::new(slots))
}

fn slot_supervisor(e: &EngineArgs, stop: Arc<AtomicBool>, gpu: usize, journal: PathBuf) -> Result<Supervisor> {
    let exe = std::env::current_exe().context("cannot find the cudafuzz executable")?;
    Supervisor::new(SupervisorConfig {
        exe,
        gpu,
        reference_manifest: match e.reference {
            RefArg::Gpu => registry::reference_manifest(),
            RefArg::Cpu => None,
        },
        journal: Some(journal),
        stop,
        sanitizer: sanitizer_pass(e)?,
    })
    .map_err(|e| fail(exit::SETUP, chain(e)))
}

/// The sanitizer pass `--sanitize` asks for; a missing tool is an error, never a skip.
fn sanitizer_pass(e: &EngineArgs) -> Result<Option<SanitizerPass>> {
    let Some(list) = &e.sanitize else { return Ok(None) };
    let tools = Tool::parse_list(list).map_err(|m| fail(exit::USAGE, format!("--sanitize {list}: {m}")))?;
    let sanitizer = Sanitizer::locate().map_err(|err| fail(exit::SETUP, err.to_string()))?;
    let dir = e.out.join("sanitizer");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(Some(SanitizerPass { sanitizer, tools, dir, batch: e.sanitize_batch }))
}

fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    // A second handler cannot be installed (e.g. in tests); Ctrl-C then just kills us.
    let _ = ctrlc::set_handler(move || s.store(true, Ordering::SeqCst));
    stop
}

fn timeout(e: &EngineArgs, m: &Manifest) -> Duration {
    e.timeout_ms
        .or(m.launch.timeout_ms)
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_KERNEL_TIMEOUT)
}

/// Fills in the manifest's default parameters a case does not set, and names the kernel.
fn bind_case(case: Case, m: &Manifest) -> Case {
    m.bind(case)
}

fn no_gpu(e: SupervisorError) -> anyhow::Error {
    match e {
        SupervisorError::NoGpu(msg) => fail(exit::NO_GPU, format!("no GPU: {msg}")),
        SupervisorError::Interrupted => fail(exit::INTERRUPTED, "interrupted"),
        e => fail(exit::SETUP, chain(e)),
    }
}

/// Counts of a batch of verdicts.
#[derive(Default, Debug)]
struct Tally {
    pass: u64,
    fail: u64,
    error: u64,
}

impl Tally {
    fn add(&mut self, v: &Verdict) {
        match v.outcome {
            Outcome::Pass => self.pass += 1,
            Outcome::Fail { .. } => self.fail += 1,
            _ => self.error += 1,
        }
    }

    fn exit_code(&self) -> i32 {
        if self.fail > 0 {
            exit::FINDINGS
        } else if self.error > 0 {
            exit::SETUP
        } else {
            exit::OK
        }
    }
}

fn run_cases(r: RunArgs) -> Result<i32> {
    let forced = r.kernel.as_deref().map(resolve_kernel).transpose()?;
    let stop = stop_flag();
    let mut sup = supervisor(&r.engine, stop.clone())?;
    let opts = options(&r.engine);
    let mut tally = Tally::default();
    let started = Instant::now();
    let mut loaded: Vec<(&PathBuf, Case, Manifest)> = Vec::new();
    for path in &r.cases {
        let seed = load_seed(path, forced.as_ref())?;
        let manifest = match &forced {
            Some(m) => m.clone(),
            None if seed.case.kernel.is_empty() => bail!(fail(exit::USAGE, format!("{}: the case names no kernel; pass --kernel", path.display()))),
            None => resolve_kernel(&seed.case.kernel)?,
        };
        loaded.push((path, bind_case(seed.case, &manifest), manifest));
    }
    // Consecutive cases of one kernel run as one batch: under a sanitizer, one process per
    // --sanitize-batch cases.
    let batch = if r.engine.sanitize.is_some() { r.engine.sanitize_batch.max(1) } else { usize::MAX };
    for group in loaded.chunk_by(|a, b| a.2.path == b.2.path).flat_map(|g| g.chunks(batch)) {
        let manifest = &group[0].2;
        let cases: Vec<Case> = group.iter().map(|g| g.1.clone()).collect();
        let verdicts = match sup.run_batch(&cases, manifest, &opts, timeout(&r.engine, manifest)) {
            Ok(v) => v,
            Err(SupervisorError::Interrupted) => {
                eprintln!("interrupted: {} passed, {} failed, {} errors before Ctrl-C", tally.pass, tally.fail, tally.error);
                return Ok(exit::INTERRUPTED);
            }
            Err(e) => return Err(no_gpu(e)),
        };
        for ((path, case, _), verdict) in group.iter().zip(verdicts) {
            tally.add(&verdict);
            println!("{}: {}", path.display(), report::one_line(case, &verdict));
        }
    }
    eprintln!(
        "{} cases in {:.2} s: {} passed, {} failed, {} errors; {} worker start(s)",
        r.cases.len(),
        started.elapsed().as_secs_f64(),
        tally.pass,
        tally.fail,
        tally.error,
        sup.starts
    );
    Ok(tally.exit_code())
}

fn repro(r: ReproArgs) -> Result<i32> {
    let forced = r.kernel.as_deref().map(resolve_kernel).transpose()?;
    let seed = load_seed(&r.seed, forced.as_ref())?;
    let manifest = match &forced {
        Some(m) => m.clone(),
        None if seed.case.kernel.is_empty() => {
            return Err(fail(exit::USAGE, format!("{}: raw fuzzer input names no kernel; pass --kernel or set CUDAFUZZ_KERNEL", r.seed.display())))
        }
        None => resolve_kernel(&seed.case.kernel)?,
    };
    if let Some(kind) = r.emit {
        return emit_repro(&r, kind, &seed, &manifest);
    }
    let case = bind_case(seed.case.clone(), &manifest);
    let plan = Plan::new(&case);
    print!("{}", report::plan_table(&case, &plan));
    print!("{}", report::contract_lines(&manifest.name, &manifest.contract.check(&case, &plan)));
    if let Some(f) = &seed.finding {
        println!("saved finding: {f}");
    }
    let mut sup = supervisor(&r.engine, stop_flag())?;
    let gpu = sup.gpu().map_err(no_gpu)?;
    println!("gpu {}: {} ({}), driver {}", gpu.ordinal, gpu.name, gpu.arch, gpu.driver_version);
    let verdict = sup.run(&case, &manifest, &options(&r.engine), timeout(&r.engine, &manifest)).map_err(no_gpu)?;
    println!("{}", report::one_line(&case, &verdict));
    println!("reference: {}; times (us): {:?}", verdict.reference, verdict.times);
    if let (Some(saved), Outcome::Fail { findings }) = (&seed.signature, &verdict.outcome) {
        let same = findings.iter().any(|f| &f.signature().0 == saved);
        println!("saved signature {}: {}", saved, if same { "reproduced" } else { "NOT reproduced (a different failure)" });
    }
    let mut tally = Tally::default();
    tally.add(&verdict);
    Ok(tally.exit_code())
}

/// `repro --emit`: writes the standalone repro (never over an existing file without `--force`)
/// and prints how to build and run it.
fn emit_repro(r: &ReproArgs, kind: EmitArg, seed: &Seed, manifest: &Manifest) -> Result<i32> {
    use crate::emit::{emit, EmitKind, SeedInfo};
    let kind = match kind {
        EmitArg::Cu => EmitKind::Cu,
        EmitArg::Python => EmitKind::Python,
    };
    let output = r.output.clone().unwrap_or_else(|| r.seed.with_extension(kind.extension()));
    let to_stdout = output.as_os_str() == "-";
    let file_name = match output.file_name() {
        Some(n) if !to_stdout => n.to_string_lossy().into_owned(),
        _ => format!("repro.{}", kind.extension()),
    };
    let tool = match &r.engine.sanitize {
        None => None,
        Some(list) => {
            let tools = Tool::parse_list(list).map_err(|m| fail(exit::USAGE, format!("--sanitize {list}: {m}")))?;
            match tools[..] {
                [t] => Some(t),
                _ => return Err(fail(exit::USAGE, format!("--sanitize {list}: --emit lays a repro out for one tool; name one"))),
            }
        }
    };
    let mut info = SeedInfo::from_seed(&r.seed, seed, &file_name);
    info.sanitizer = tool;
    let case = bind_case(seed.case.clone(), manifest);
    let emitted = emit(kind, &case, manifest, &info).map_err(|e| fail(exit::USAGE, format!("{}: {}", r.seed.display(), chain(e))))?;
    if to_stdout {
        print!("{}", emitted.text);
        return Ok(exit::OK);
    }
    let written = if r.force {
        std::fs::write(&output, &emitted.text)
    } else {
        use std::io::Write as _;
        std::fs::OpenOptions::new().write(true).create_new(true).open(&output).and_then(|mut f| f.write_all(emitted.text.as_bytes()))
    };
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(fail(exit::USAGE, format!("{} exists; pass --force to overwrite it, or -o another file", output.display())))
        }
        Err(e) => return Err(fail(exit::SETUP, format!("cannot write {}: {e}", output.display()))),
    }
    println!("wrote {} ({} bytes): {} {}", output.display(), emitted.text.len(), manifest.name, case.summary());
    if let Some(f) = &seed.finding {
        println!("saved finding: {f}");
    }
    let dir = output.parent().filter(|d| !d.as_os_str().is_empty());
    match dir {
        Some(d) => println!("build and run (in {}):", d.display()),
        None => println!("build and run:"),
    }
    for c in &emitted.commands {
        println!("  {c}");
    }
    Ok(exit::OK)
}

/// The case a fuzz campaign draws as number `index`: fuzzer-style bytes from a ChaCha stream,
/// decoded like libFuzzer inputs, so a `(seed, index)` pair always gives the same case.
pub fn generated_case(ctx: &DecodeContext, seed: u64, index: u64) -> Case {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index);
    let mut bytes = [0u8; 128];
    rng.fill_bytes(&mut bytes);
    decode_case(&mut arbitrary::Unstructured::new(&bytes), ctx).expect("decoding never fails")
}

/// Campaign case `index % PAST_INT32_EVERY == PAST_INT32_AT` has one tensor pushed past 2³¹
/// elements ([`crate::case::offsets_past_int32`]) where the kernel's contract allows it.
pub const PAST_INT32_AT: u64 = 64;
/// How often [`campaign_case`] schedules a case past 2³¹ elements: as often as the decoder
/// draws one by chance, so about 2 in 512 campaign cases are such cases.
pub const PAST_INT32_EVERY: u64 = PAST_INT32_ONE_IN as u64;

/// The case a fuzz campaign (`cudafuzz fuzz`, the gate's fuzz step) runs as number `index`:
/// [`generated_case`], except that a case past 2³¹ elements is scheduled early (case
/// #[`PAST_INT32_AT`]) and then every [`PAST_INT32_EVERY`] cases, on each tensor in turn,
/// instead of being left to the decoder's 1-in-512 chance: a campaign of a few hundred cases
/// (one minute of a slow kernel) would otherwise miss 32-bit index overflow about half the time.
pub fn campaign_case(ctx: &DecodeContext, seed: u64, index: u64) -> Case {
    let case = generated_case(ctx, seed, index);
    if index % PAST_INT32_EVERY == PAST_INT32_AT && ctx.allows_int32_overflow() {
        if let Some(pushed) = past_int32_variant(&case, TensorId::ALL[(index / PAST_INT32_EVERY % 4) as usize]) {
            return pushed;
        }
    }
    case
}

fn fuzz(f: FuzzArgs) -> Result<i32> {
    let manifests = manifests_or_shipped(&f.kernel, true)?;
    if manifests.is_empty() {
        bail!(fail(exit::USAGE, "no kernels to fuzz"));
    }
    let stop = stop_flag();
    let mut pool = pool(&f.engine, stop.clone())?;
    let gpu = match pool.slots[0].gpu() {
        Ok(g) => g,
        Err(SupervisorError::NoGpu(msg)) => return fuzz_without_gpu(&f, &manifests, &msg),
        Err(e) => return Err(no_gpu(e)),
    };
    println!("{}", workers_line(&gpu, &mut pool));
    let opts = options(&f.engine);
    let mut escalator = escalator(&f, stop.clone())?;
    let seeds_dir = f.engine.out.join("seeds");
    let mut seen: BTreeMap<Signature, (PathBuf, u64)> = BTreeMap::new();
    let mut total = Tally::default();
    for m in &manifests {
        let ctx = if f.outside_contract { m.decode_context().unconstrained() } else { m.decode_context() };
        let bar = indicatif::ProgressBar::new(f.cases);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{prefix:>14} [{elapsed_precise}] {bar:30} {pos}/{len} {per_sec} {msg}")
                .expect("valid template"),
        );
        bar.set_prefix(m.name.clone());
        let started = Instant::now();
        let mut tally = Tally::default();
        let mut new_here = 0;
        let mut skipped = 0u64;
        let mut kernel_paths = crate::coverage::CoverageMap::default();
        let make = |i: u64| {
            let case = bind_case(campaign_case(&ctx, f.seed, i), m);
            (f.outside_contract || m.contract.check(&case, &Plan::new(&case)).is_inside()).then_some(case)
        };
        let mut on_result = |i: u64, slot: Slot| -> Result<ControlFlow<()>, SupervisorError> {
            bar.inc(1);
            let (case, verdict) = match slot {
                Slot::Skipped => {
                    skipped += 1;
                    return Ok(ControlFlow::Continue(()));
                }
                Slot::Ran(case, verdict) => (case, verdict),
            };
            tally.add(&verdict);
            if let Some(c) = &verdict.coverage {
                kernel_paths.add(c);
            }
            match &verdict.outcome {
                Outcome::Fail { findings } => {
                    for finding in findings {
                        let saved = match keep_smallest(&mut seen, &seeds_dir, &case, finding)? {
                            Kept::Known => continue,
                            Kept::Smaller(path) => {
                                bar.suspend(|| println!("SMALLER case for {}: {}\n      seed: {}", finding.signature(), case.summary(), path.display()));
                                continue;
                            }
                            Kept::New(path) => path,
                        };
                        let after = started.elapsed().as_secs_f64();
                        bar.suspend(|| {
                            println!("NEW   after {after:.2} s (case #{i}): {}\n      {finding}\n      seed: {}", case.summary(), saved.display())
                        });
                        new_here += 1;
                        if let (Some(esc), false) = (escalator.as_mut(), finding.oracle.is_sanitizer()) {
                            let named = match bar.suspend(|| esc.name(finding, &case, m, timeout(&f.engine, m), i)) {
                                Ok(named) => named,
                                Err(e) => {
                                    bar.suspend(|| {
                                        println!(
                                            "      not re-run under {}: {e}\n      (`cudafuzz run --sanitize {} {}` re-runs this one)",
                                            f.escalate,
                                            f.escalate,
                                            saved.display()
                                        )
                                    });
                                    continue;
                                }
                            };
                            for named in named {
                                match keep_smallest(&mut seen, &seeds_dir, &case, &named)? {
                                    Kept::New(path) | Kept::Smaller(path) => {
                                        bar.suspend(|| println!("      named by {}: {named}\n      seed: {}", named.oracle, path.display()))
                                    }
                                    Kept::Known => bar.suspend(|| println!("      named by {}: {named}", named.oracle)),
                                }
                            }
                        }
                    }
                }
                Outcome::Error { message } => bar.suspend(|| eprintln!("ERROR {}: {message}", case.summary())),
                _ => {}
            }
            bar.set_message(if f.engine.coverage {
                format!("{new_here} findings, {} kernel paths", kernel_paths.features())
            } else {
                format!("{new_here} findings")
            });
            Ok(if f.stop_after.is_some_and(|n| new_here >= n) { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
        };
        let deadline = f.time.map(|t| started + t);
        match pool.run_indexed(f.cases, deadline, m, &opts, timeout(&f.engine, m), &make, &mut on_result) {
            Ok(()) => {}
            Err(SupervisorError::Interrupted) => {
                bar.abandon();
                eprintln!(
                    "interrupted: {} passed, {} failed, {} errors; {} distinct findings saved in {}",
                    total.pass + tally.pass,
                    total.fail + tally.fail,
                    total.error + tally.error,
                    seen.len(),
                    seeds_dir.display()
                );
                return Ok(exit::INTERRUPTED);
            }
            Err(e) => return Err(no_gpu(e)),
        }
        bar.finish();
        let n = tally.pass + tally.fail + tally.error;
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{}: {n} cases in {secs:.1} s ({:.0}/s): {} passed, {} failed, {} errors; {new_here} distinct findings; {skipped} outside the contract skipped; {} worker starts so far",
            m.name,
            n as f64 / secs.max(1e-9),
            tally.pass,
            tally.fail,
            tally.error,
            pool.starts()
        );
        if f.engine.coverage {
            println!(
                "{}: kernel coverage: {} CF_COVER points reached ({} point x hit-count features), at lines {:?}",
                m.name,
                kernel_paths.points(),
                kernel_paths.features(),
                kernel_paths.lines()
            );
        }
        total.pass += tally.pass;
        total.fail += tally.fail;
        total.error += tally.error;
    }
    for (path, _) in seen.values() {
        print!("{}", report::replay_lines(path));
    }
    Ok(total.exit_code())
}

/// What [`keep_smallest`] did with a finding.
enum Kept {
    /// A new signature: its seed was saved here.
    New(PathBuf),
    /// A known signature with a smaller case than before: saved here as well (the earlier seed
    /// stays).
    Smaller(PathBuf),
    /// A known signature, no smaller.
    Known,
}

/// Saves the seed of a finding whose signature is new, or whose case is smaller (fewer tensor
/// elements) than the one kept so far: each signature keeps its smallest case.
fn keep_smallest(seen: &mut BTreeMap<Signature, (PathBuf, u64)>, dir: &Path, case: &Case, finding: &crate::finding::Finding) -> Result<Kept, SupervisorError> {
    let sig = finding.signature();
    let size: u64 = crate::case::TensorId::ALL.iter().map(|&t| case.numel(t)).sum();
    let smaller = match seen.get(&sig) {
        Some((_, kept)) if *kept <= size => return Ok(Kept::Known),
        Some(_) => true,
        None => false,
    };
    let saved = corpus::save(dir, &Seed::with_finding(case.clone(), finding.clone()))
        .map_err(|e| SupervisorError::Journal { path: dir.to_path_buf(), source: std::io::Error::other(chain(e)) })?;
    seen.insert(sig, (saved.path.clone(), size));
    Ok(if smaller { Kept::Smaller(saved.path) } else { Kept::New(saved.path) })
}

/// The supervisor that re-runs new findings under compute-sanitizer, if `--escalate` asks for
/// one; a missing compute-sanitizer is said once, and the campaign goes on without naming.
fn escalator(f: &FuzzArgs, stop: Arc<AtomicBool>) -> Result<Option<Escalator>> {
    if f.escalate == "none" || f.engine.sanitize.is_some() {
        return Ok(None);
    }
    let tools = Tool::parse_list(&f.escalate).map_err(|m| fail(exit::USAGE, format!("--escalate {}: {m}", f.escalate)))?;
    let sanitizer = match Sanitizer::locate() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cudafuzz: findings will not be re-run under compute-sanitizer (--escalate): {e}");
            return Ok(None);
        }
    };
    let dir = f.engine.out.join("sanitizer");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    println!("escalation: new findings are re-run under {} ({})", f.escalate, sanitizer.version);
    let e = EngineArgs { sanitize: None, ..f.engine.clone() };
    let mut sup = slot_supervisor(&e, stop, e.gpu, e.out.join("journal-escalate.jsonl"))?;
    sup.set_sanitizer(Some(SanitizerPass { sanitizer, tools, dir, batch: 1 }));
    Ok(Some(Escalator::new(sup)))
}

/// Re-runs new findings under compute-sanitizer (a supervisor whose worker runs under the
/// tools), remembering the misaligned faults it has already traced to a tensor.
struct Escalator {
    sup: Supervisor,
    explained: crate::finding::ExplainedFaults,
}

impl Escalator {
    fn new(sup: Supervisor) -> Escalator {
        Escalator { sup, explained: Default::default() }
    }

    /// The sanitizer findings of the case behind `finding` (campaign index `index`), or the
    /// earlier re-run that already explains it (then nothing is run).
    fn name(&mut self, finding: &crate::finding::Finding, case: &Case, m: &Manifest, timeout: Duration, index: u64) -> Result<Vec<crate::finding::Finding>, crate::finding::Explanation> {
        if let Some(e) = self.explained.covering(finding) {
            return Err(e.clone());
        }
        let named = escalate(&mut self.sup, case, m, timeout);
        self.explained.record(finding, &named, index);
        Ok(named)
    }
}

/// The sanitizer findings of one case (empty when the tools saw nothing or could not run).
fn escalate(sup: &mut Supervisor, case: &Case, m: &Manifest, timeout: Duration) -> Vec<crate::finding::Finding> {
    let opts = RunOptions { determinism: false, ..RunOptions::default() };
    match sup.run(case, m, &opts, timeout) {
        Ok(Verdict { outcome: Outcome::Fail { findings }, .. }) => findings.into_iter().filter(|f| f.oracle.is_sanitizer()).collect(),
        Ok(Verdict { outcome: Outcome::Error { message }, .. }) => {
            println!("      (sanitizer re-run: {message})");
            Vec::new()
        }
        Ok(_) => {
            println!("      (the sanitizer tools reported nothing for this case)");
            Vec::new()
        }
        Err(e) => {
            println!("      (sanitizer re-run failed: {e})");
            Vec::new()
        }
    }
}

/// With no GPU, do what the host can: compile every configuration, plan the cases the campaign
/// would run, and say clearly that nothing ran on a GPU.
fn fuzz_without_gpu(f: &FuzzArgs, manifests: &[Manifest], why: &str) -> Result<i32> {
    eprintln!("cudafuzz: NO GPU on this machine ({why}).");
    eprintln!("cudafuzz: no kernel was run; doing the host-side work only: compile, plan, contract.");
    match Compiler::new(None) {
        Ok(compiler) => {
            let archs = parse_archs(&["sm_80".into(), "sm_89".into(), "sm_90".into()])?;
            let code = build_report(manifests, &archs, &compiler)?;
            if code != exit::OK {
                return Ok(code);
            }
        }
        Err(e) => eprintln!("cudafuzz: cannot compile either: {}", chain(e)),
    }
    for m in manifests {
        let ctx = if f.outside_contract { m.decode_context().unconstrained() } else { m.decode_context() };
        let (mut inside, mut outside) = (0u64, 0u64);
        let n = f.cases.min(100_000);
        for i in 0..n {
            let case = bind_case(campaign_case(&ctx, f.seed, i), m);
            if m.contract.check(&case, &Plan::new(&case)).is_inside() {
                inside += 1;
            } else {
                outside += 1;
            }
        }
        println!("{}: planned {n} cases: {inside} inside its contract, {outside} outside (not run: no GPU)", m.name);
    }
    Ok(exit::NO_GPU)
}

fn bench(b: BenchArgs) -> Result<i32> {
    let m = resolve_kernel(&b.kernel)?;
    let sizes = b
        .sizes
        .iter()
        .map(|s| crate::bench::CaseSize::from_name(s).ok_or_else(|| fail(exit::USAGE, format!("--sizes {s}: expected small, medium, large or past-int32"))))
        .collect::<Result<Vec<_>>>()?;
    let mut gpu_engine = b.engine.clone();
    gpu_engine.reference = RefArg::Gpu;
    let mut gpu_one = Pool::new(vec![supervisor(&gpu_engine, stop_flag())?]);
    let gpu = gpu_one.slots[0].gpu().map_err(no_gpu)?;
    let mut cpu_engine = b.engine.clone();
    cpu_engine.reference = RefArg::Cpu;
    let mut cpu_one = Pool::new(vec![supervisor(&cpu_engine, stop_flag())?]);
    let plain = RunOptions { determinism: false, reference: ReferenceChoice::Gpu, sanitizer: None, coverage: false };
    let configs = [
        ("gpu fp64 ref, no determinism run", plain.clone()),
        ("gpu fp64 ref + determinism run", RunOptions { determinism: true, ..plain.clone() }),
        ("cpu fp64 ref, no determinism run", RunOptions { reference: ReferenceChoice::Cpu, ..plain.clone() }),
    ];
    let mut rows = Vec::new();
    // Under a sanitizer only the first configuration: the sanitizer's cost is the question.
    let n_configs = if b.engine.sanitize.is_some() { 1 } else { configs.len() };
    for &size in &sizes {
        for (label, opts) in configs.iter().take(n_configs) {
            let one = if opts.reference == ReferenceChoice::Gpu { &mut gpu_one } else { &mut cpu_one };
            // The CPU reference is O(seq^2) in f64 on one core: seconds per large case.
            let cases = match (opts.reference, size) {
                (ReferenceChoice::Cpu, crate::bench::CaseSize::Large) => (b.cases / 100).clamp(1, 8),
                // A few suffice: each allocates and frees 4–8 GiB of GPU memory.
                (_, crate::bench::CaseSize::PastInt32) => (b.cases / 100).clamp(1, 10),
                (ReferenceChoice::Cpu, _) => (b.cases / 4).max(1),
                _ => b.cases,
            };
            let label = match &b.engine.sanitize {
                Some(tools) => format!("{}, {label}, {tools}, {} cases/process", size.name(), b.engine.sanitize_batch),
                None => format!("{}, {label}", size.name()),
            };
            rows.push(crate::bench::measure_pool(one, &m, opts, size, cases, &label).map_err(no_gpu)?);
            // Progress while the next configuration runs: the row without the header.
            eprintln!("{}", crate::bench::table(&rows[rows.len() - 1..]).lines().nth(1).unwrap_or_default());
        }
    }
    drop((gpu_one, cpu_one));
    if b.engine.jobs > 1 || b.engine.gpus.is_some() {
        let mut pool = pool(&gpu_engine, stop_flag())?;
        let gpus = pool_gpus(&mut pool);
        let label = format!("{}, gpu fp64 ref, {} workers on {} GPU(s)", sizes[0].name(), pool.slots.len(), gpus.len());
        let cases = b.cases * pool.slots.len() as u64;
        rows.push(crate::bench::measure_pool(&mut pool, &m, &plain, sizes[0], cases, &label).map_err(no_gpu)?);
    }
    println!(
        "cudafuzz bench: kernel {} on {} ({}), driver {}; sizes: small = batch*heads <= 8, seq <= 256; medium = seq 256..1024; large = seq 2048..4096, batch 1; past-int32 = small with one tensor's stride_b past 2^31 elements",
        m.name, gpu.name, gpu.arch, gpu.driver_version
    );
    print!("{}", crate::bench::table(&rows));
    if let Some(path) = &b.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(exit::OK)
}
