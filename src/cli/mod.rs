//! The command line: parse, validate, call the library, render what it returns, and map errors
//! to exit statuses.
//!
//! Kept thin on purpose (ripgrep's shape): every command is a small function in its own file
//! that builds library objects from the arguments (`EngineArgs::config` turns the shared run
//! options into one validated [`EngineConfig`]) and prints what they return. `anyhow` lives only
//! here; the library's errors are typed.

/// `println!` to stdout, returning [`out::StdoutClosed`] instead of panicking on a closed pipe.
macro_rules! outln {
    () => { $crate::cli::out::print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::out::print(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` to stdout, returning [`out::StdoutClosed`] instead of panicking on a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::out::print(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics (a closed stderr drops the line).
macro_rules! errln {
    ($($arg:tt)*) => { $crate::cli::out::eprint(format_args!("{}\n", format_args!($($arg)*))) };
}

mod bench;
mod build;
mod case;
mod contract;
mod fuzz;
mod gate;
mod minimize;
mod out;
#[path = "report.rs"]
mod report_cmd;
mod run;
mod sanitizer;
mod setup;
mod sweep;
mod triage;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::core::corpus::{self, Seed};
use crate::core::exit;
use crate::core::manifest::Manifest;
use crate::core::registry;
use crate::core::tool::{Escalate, ToolList};
use crate::core::verdict::ReferenceChoice;
use crate::engine::compile::Arch;
use crate::engine::gpu::GpuInfo;
use crate::engine::worker;
use crate::run::config::{ConfigError, EngineConfig, GpuSelection, GpuSharing};
use crate::run::supervisor::{Pool, SupervisorError};
use crate::tools::bench::CaseSize;

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
    /// Work with manifests: `migrate OLD.toml` converts a format-1 manifest to format 2.
    #[command(subcommand)]
    Manifest(case::ManifestCommand),
    /// List the shipped kernel manifests, or load, check and list the given ones (files, or
    /// folders of manifests): exit 2 when any does not load.
    Kernels {
        /// Manifests or folders of manifests to check instead of the shipped ones.
        paths: Vec<PathBuf>,
    },
    /// What this machine has for cudafuzz (NVRTC, CUDA headers, GPUs, compute-sanitizer, the
    /// kernel cache), and the one line that installs what is missing.
    Doctor(setup::DoctorArgs),
    /// The compiled-kernel cache: where it is and how big; `--clear` empties it.
    Cache(setup::CacheArgs),
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
    /// Group the seed files of earlier runs (any directory layout) into bugs and print the bug
    /// table (`--json`: the bug index); no file is written or moved.
    Triage(triage::TriageArgs),
    /// Reports: `merge` shard reports and seeds into one, `render` one in another format.
    #[command(subcommand)]
    Report(report_cmd::ReportCommand),
    /// Internal: the worker process the supervisor starts (cases in on stdin, events out).
    #[command(hide = true)]
    Worker {
        /// GPU index.
        #[arg(long, default_value_t = 0)]
        gpu: usize,
        /// Directory of the built-in ops' GPU reference kernels (`kernels/reference`).
        #[arg(long)]
        reference: Option<PathBuf>,
        /// A Python target's manifest: its setup runs before the worker is ready (only a
        /// worker run by `python -m cudafuzz` can call Python).
        #[arg(long)]
        target: Option<PathBuf>,
    },
    /// Internal: one process of `bench --floor` (prints its count as one JSON line).
    #[command(hide = true)]
    Floor {
        /// GPU index.
        #[arg(long, default_value_t = 0)]
        gpu: usize,
        /// How long to run.
        #[arg(long)]
        millis: u64,
        /// Input bytes per case.
        #[arg(long)]
        upload_bytes: usize,
        /// Bytes downloaded per case (8: the summary word).
        #[arg(long)]
        download_bytes: usize,
        /// Allocate and free the buffers in every case.
        #[arg(long)]
        alloc_per_case: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum CaseCommand {
    /// Print an example seed file (a small valid case of the kernel).
    Example {
        /// Kernel name or manifest.
        #[arg(long, default_value = "simple_attn")]
        kernel: String,
    },
    /// Validate a seed/case file and print its plan: strides, spans, alignment residues, and the
    /// verdict against the kernel's contract. Exit 0 inside the contract, 1 outside, 2 for a
    /// file that does not load.
    Check {
        /// The file.
        file: PathBuf,
        /// Kernel to judge the contract against (default: the case's own kernel).
        #[arg(long)]
        kernel: Option<String>,
        /// The file is raw fuzzer bytes (decoded for --kernel), whatever its name; without this,
        /// only files named as libFuzzer artifacts (crash-*, timeout-*, oom-*, leak-*, slow-unit-*)
        /// are read as raw bytes and anything else must be a JSON seed or case.
        #[arg(long)]
        raw: bool,
    },
    /// Rewrite a seed or case file of format 1 (attention-only) as a format-2 seed, beside it as
    /// NAME.v2.json unless -o is given; never over an existing file. Format-1 files also load
    /// as they are (migrated on read).
    Migrate {
        /// The seed or case file.
        file: PathBuf,
        /// Where to write the format-2 seed (`-` for stdout).
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
    },
    /// Decode raw fuzzer bytes into a case and print it as a seed file.
    Decode {
        /// The raw input (e.g. a libFuzzer artifact).
        file: PathBuf,
        /// Kernel the fuzzer decoded for (its manifest says what the bytes choose); default:
        /// $CUDAFUZZ_KERNEL.
        #[arg(long)]
        kernel: Option<String>,
    },
}

#[derive(Debug, Args)]
pub(super) struct BuildArgs {
    /// Kernels to build (names or manifest paths); default: every shipped manifest.
    #[arg(long)]
    pub(super) kernel: Vec<String>,
    /// Target architectures.
    #[arg(long, value_delimiter = ',', default_value = "sm_80,sm_89,sm_90", value_parser = |s: &str| s.parse::<Arch>().map_err(|e| e.to_string()))]
    pub(super) arch: Vec<Arch>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum RefArg {
    Gpu,
    Cpu,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum SharingArg {
    Auto,
    Mps,
    Turns,
}

#[derive(Debug, Args, Clone)]
pub(super) struct EngineArgs {
    /// GPU index.
    #[arg(long, default_value_t = 0)]
    pub(super) gpu: usize,
    /// Which fp64 reference judges outputs.
    #[arg(long, value_enum, default_value = "gpu")]
    pub(super) reference: RefArg,
    /// Skip the second run that checks bitwise determinism.
    #[arg(long)]
    pub(super) no_determinism: bool,
    /// Watchdog: milliseconds a kernel may run before it is called a hang (default: the
    /// manifest's `timeout_ms`, else 10000).
    #[arg(long, value_parser = positive::<u64>)]
    pub(super) timeout_ms: Option<u64>,
    /// Output directory for seeds and the journal.
    #[arg(long, default_value = "cudafuzz-out")]
    pub(super) out: PathBuf,
    /// Worker processes (they share the GPUs round-robin), 1 to 256; results stay in case order.
    #[arg(long, default_value_t = 1, value_parser = jobs)]
    pub(super) jobs: usize,
    /// How several workers on one GPU share it: `turns` a context each (the GPU switches
    /// between them), `mps` through a private MPS daemon that cudafuzz starts and stops (their
    /// work runs side by side, 8x the cases/s of `turns` for small cases on an H200; a case that
    /// faults is run again alone, since a fault under MPS reaches every worker), `auto` MPS for
    /// several workers on a single GPU when the daemon starts, else turns.
    #[arg(long, value_enum, default_value = "turns")]
    pub(super) gpu_sharing: SharingArg,
    /// GPUs to spread workers over: `all`, or a count starting at --gpu (at least one worker each).
    #[arg(long, value_parser = |s: &str| s.parse::<GpuSelection>().map_err(|e| e.to_string()))]
    pub(super) gpus: Option<GpuSelection>,
    /// Run every case under compute-sanitizer: `memcheck`, `racecheck`, `initcheck`,
    /// `synccheck`, a comma-separated list, or `all` (one pass per tool).
    #[arg(long, value_name = "TOOL[,TOOL]|all", value_parser = |s: &str| s.parse::<ToolList>().map_err(|e| e.to_string()))]
    pub(super) sanitize: Option<ToolList>,
    /// At most this many cases per sanitizer process. Batches are sized from measured costs to
    /// take about 6 s (so findings are printed soon) and to end by `--time`; this caps them.
    #[arg(long, default_value_t = 200, value_parser = positive::<usize>)]
    pub(super) sanitize_batch: usize,
    /// Compile kernels with their `CF_COVER(id)` points on (kernels/include/cf_coverage.cuh) and
    /// report the kernel paths the cases reached.
    #[arg(long)]
    pub(super) coverage: bool,
    /// The Python interpreter that runs Python targets (one with cudafuzz and the target's
    /// packages installed); default: the manifest's `target.interpreter`, the interpreter
    /// running this command (`python -m cudafuzz`), the active virtualenv's, then `python3`.
    #[arg(long, value_name = "PATH", env = "CUDAFUZZ_PYTHON")]
    pub(super) python: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// Kernel name or manifest path (default: each case's own kernel).
    #[arg(long)]
    pub(super) kernel: Option<String>,
    /// Case files: seed JSON, bare case JSON, or raw fuzzer bytes (libFuzzer artifacts).
    #[arg(required = true)]
    pub(super) cases: Vec<PathBuf>,
    /// The file is raw fuzzer bytes (decoded for --kernel), whatever its name; without this,
    /// only files named as libFuzzer artifacts (crash-*, timeout-*, oom-*, leak-*, slow-unit-*)
    /// are read as raw bytes and anything else must be a JSON seed or case.
    #[arg(long)]
    pub(super) raw: bool,
    #[command(flatten)]
    pub(super) engine: EngineArgs,
}

#[derive(Debug, Args)]
pub(super) struct ReproArgs {
    /// The seed file (JSON or a raw libFuzzer artifact).
    pub(super) seed: PathBuf,
    /// Kernel, when the seed does not name one (raw fuzzer bytes) or to replay against another;
    /// default: $CUDAFUZZ_KERNEL.
    #[arg(long)]
    pub(super) kernel: Option<String>,
    /// The file is raw fuzzer bytes (decoded for --kernel), whatever its name; without this,
    /// only files named as libFuzzer artifacts (crash-*, timeout-*, oom-*, leak-*, slow-unit-*)
    /// are read as raw bytes and anything else must be a JSON seed or case.
    #[arg(long)]
    pub(super) raw: bool,
    /// Write a standalone repro instead of running the seed (no GPU needed): `cu`, one .cu file
    /// that `nvcc` builds, or `python`, a script using PyTorch, NVRTC and the CUDA driver. With
    /// `--sanitize memcheck` (or a seed saved for a sanitizer finding) the repro is laid out for
    /// that tool.
    #[arg(long, value_enum, value_name = "cu|python")]
    pub(super) emit: Option<EmitArg>,
    /// The repro file to write (default: OUT/repro/<seed name>.cu or .py, OUT being --out;
    /// `-` for stdout).
    #[arg(short = 'o', long = "output", requires = "emit")]
    pub(super) output: Option<PathBuf>,
    /// Overwrite the repro file if it exists.
    #[arg(long, requires = "emit")]
    pub(super) force: bool,
    #[command(flatten)]
    pub(super) engine: EngineArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum EmitArg {
    Cu,
    Python,
}

#[derive(Debug, Args)]
pub(super) struct BenchArgs {
    /// Kernel to run (a correct one, so every case does the full pipeline).
    #[arg(long, default_value = "simple_attn")]
    pub(super) kernel: String,
    /// Cases per configuration.
    #[arg(long, default_value_t = 2000, value_parser = positive::<u64>)]
    pub(super) cases: u64,
    /// Case sizes to measure: small, medium, large, past-int32 (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "small", value_parser = |s: &str| s.parse::<CaseSize>())]
    pub(super) sizes: Vec<CaseSize>,
    /// Also write the rows as JSON here.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Also run the same cases through this manifest, the same kernel called another way (a
    /// Python target against its native manifest), and print what a case costs each way.
    #[arg(long)]
    pub(super) against: Option<String>,
    /// Only cases whose every tensor's base and strides are multiples of this many bytes, for
    /// a kernel that faults on the others (fa_s512: 16); adds a row of the others, each of
    /// which faults and costs a worker restart.
    #[arg(long, value_parser = positive::<u64>)]
    pub(super) align: Option<u64>,
    /// Measure the floor instead: cases whose kernel is empty and whose reference and judging
    /// cost nothing (upload, launch, download), in 1 and in `--jobs` processes at once.
    #[arg(long)]
    pub(super) floor: bool,
    /// Input bytes per case of `--floor`.
    #[arg(long, default_value_t = 65536, value_parser = positive::<usize>)]
    pub(super) floor_bytes: usize,
    #[command(flatten)]
    pub(super) engine: EngineArgs,
}

#[derive(Debug, Args)]
pub(super) struct FuzzArgs {
    /// Kernels (names or manifest paths); default: every shipped kernel marked for fuzzing.
    #[arg(long)]
    pub(super) kernel: Vec<String>,
    /// Cases per kernel.
    #[arg(long, default_value_t = 1000, value_parser = positive::<u64>)]
    pub(super) cases: u64,
    /// Stop each kernel after this long (e.g. 30s, 5m), whichever comes first.
    #[arg(long, value_parser = parse_duration)]
    pub(super) time: Option<Duration>,
    /// Generator seed: the same seed and case count give the same cases.
    #[arg(long, default_value_t = 0)]
    pub(super) seed: u64,
    /// Also run generated cases that lie outside the kernel's declared contract (their findings
    /// show which preconditions the kernel really has); by default they are skipped and counted.
    #[arg(long)]
    pub(super) outside_contract: bool,
    /// Move on to the next kernel after this many new bugs (e.g. 1: time to first finding).
    #[arg(long, value_parser = positive::<usize>)]
    pub(super) stop_after: Option<usize>,
    /// Do not steer cases away from bugs already found. By default, nine cases in ten are
    /// re-drawn until they avoid every known bug's trigger (the tensor and alignment a sanitizer
    /// named, or what all of the bug's cases had in common), so bugs behind the first are reached.
    #[arg(long)]
    pub(super) no_steer: bool,
    /// Re-run each new finding's case under these compute-sanitizer tools to name the bug
    /// (kind, source line, tensor, distance past its end); `none` turns this off.
    #[arg(long, default_value = "memcheck,racecheck", value_name = "TOOL[,TOOL]|all|none", value_parser = |s: &str| s.parse::<Escalate>().map_err(|e| e.to_string()))]
    pub(super) escalate: Escalate,
    #[command(flatten)]
    pub(super) engine: EngineArgs,
}

/// A count option, which must be at least 1: 0 would run nothing, never what a user meant.
fn positive<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    let n: u64 = s.trim().parse().map_err(|_| format!("`{s}` is not a whole number"))?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    T::try_from(n).map_err(|_| format!("{n} is too large"))
}

/// `--jobs`: 1 to [`MAX_JOBS`](crate::run::config::MAX_JOBS) worker processes.
fn jobs(s: &str) -> Result<usize, String> {
    let n = positive::<usize>(s)?;
    if n > crate::run::config::MAX_JOBS {
        return Err(format!("{n} workers is more than the {} a run may start", crate::run::config::MAX_JOBS));
    }
    Ok(n)
}

/// A `--sanitize` / `--escalate` tool list, checked when the command line is parsed.
/// Parses a duration like `30s`, `5m`, `1h` or `250ms` (a bare number is seconds).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.find(|c: char| !c.is_ascii_digit()).map(|i| s.split_at(i)).unwrap_or((s, "s"));
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a duration like 30s, 5m or 1h"))?;
    if n == 0 {
        return Err(format!("`{s}` is no time at all; give a duration of at least 1ms, e.g. 30s"));
    }
    let secs = |per: u64| n.checked_mul(per).map(Duration::from_secs).ok_or_else(|| format!("`{s}` is longer than this clock can count"));
    match unit {
        "s" | "" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        "ms" => Ok(Duration::from_millis(n)),
        _ => Err(format!("`{s}`: unknown unit `{unit}` (use ms, s, m or h)")),
    }
}

/// The environment a run reads besides `CUDAFUZZ_KERNELS` (which `run` checks for every
/// command), checked before anything starts: `CUDAFUZZ_TRACE` names a file to append to, not a
/// directory, in a folder that exists.
fn check_environment() -> Result<()> {
    if let Some(trace) = std::env::var_os("CUDAFUZZ_TRACE").map(PathBuf::from) {
        if trace.is_dir() {
            return Err(fail(exit::USAGE, format!("CUDAFUZZ_TRACE={}: is a directory; name a file the trace is appended to", trace.display())));
        }
        if let Some(parent) = trace.parent().filter(|p| !p.as_os_str().is_empty() && !p.is_dir()) {
            return Err(fail(exit::USAGE, format!("CUDAFUZZ_TRACE={}: the folder {} does not exist; create it first", trace.display(), parent.display())));
        }
    }
    Ok(())
}

/// Refuses `CUDAFUZZ_KERNELS` naming anything but a directory.
fn check_kernels_env() -> Result<()> {
    if let Some(dir) = std::env::var_os("CUDAFUZZ_KERNELS").map(PathBuf::from) {
        if !dir.is_dir() {
            return Err(fail(
                exit::USAGE,
                format!("CUDAFUZZ_KERNELS={}: not a directory; point it at a folder of kernel manifests (like kernels/), or unset it", dir.display()),
            ));
        }
    }
    Ok(())
}

/// Refuses `CUDAFUZZ_TRACE` naming one of the command's inputs (it is appended to).
fn refuse_trace_onto<'a>(inputs: impl IntoIterator<Item = &'a Path>) -> Result<()> {
    match std::env::var_os("CUDAFUZZ_TRACE") {
        Some(trace) => refuse_clobber(Path::new(&trace), inputs).map_err(|e| fail(exit::USAGE, format!("CUDAFUZZ_TRACE: {e:#}"))),
        None => Ok(()),
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
    ExitCode::from(main_with(std::env::args_os()) as u8)
}

/// The command line `args` (program name first) run to its exit status: the binary's entry, and
/// the Python package's (`python -m cudafuzz`, whose worker can call Python targets).
pub fn main_with(args: impl IntoIterator<Item = std::ffi::OsString>) -> i32 {
    let args = match RawArgs::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { exit::OK };
            let _ = e.print();
            return code;
        }
    };
    let result = run(args);
    // The reader of stdout went away (`| head`): it had what it wanted.
    if out::broken_pipe() {
        return exit::OK;
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            let code = e.downcast_ref::<Exit>().map(|x| x.0).unwrap_or(if e.is::<out::StdoutClosed>() { exit::SETUP } else { exit::USAGE });
            errln!("cudafuzz: {e:#}");
            code
        }
    }
}

fn run(args: RawArgs) -> Result<i32> {
    // Every command that finds shipped kernels reads it: checked once, before any of them.
    check_kernels_env()?;
    match args.command {
        Command::Case(c) => case::case_command(c),
        Command::Manifest(c) => case::manifest_command(c),
        Command::Kernels { paths } => build::kernels(&paths),
        Command::Doctor(a) => setup::doctor(a),
        Command::Cache(a) => setup::cache(a),
        Command::Build(b) => build::build(b),
        Command::Run(r) => run::run_cases(r),
        Command::Repro(r) => run::repro(r),
        Command::Fuzz(f) => fuzz::fuzz(f),
        Command::Bench(b) => bench::bench(b),
        Command::Sweep(s) => sweep::sweep(s),
        Command::Sanitizer(c) => sanitizer::sanitizer_command(c),
        Command::Minimize(a) => minimize::minimize_command(a),
        Command::Contract(a) => contract::contract_command(a),
        Command::Gate(a) => gate::gate_command(a),
        Command::Report(c) => report_cmd::report_command(c),
        Command::Triage(a) => triage::triage(a),
        Command::Worker { gpu, reference, target } => Ok(worker::main(gpu, reference, target)),
        Command::Floor { gpu, millis, upload_bytes, download_bytes, alloc_per_case } => {
            bench::floor_process(gpu, crate::engine::floor::FloorSpec { upload_bytes, download_bytes, alloc_per_case }, millis)
        }
    }
}

impl EngineArgs {
    /// The validated engine configuration these arguments ask for.
    fn config(&self) -> Result<EngineConfig> {
        let gpus = self.gpus.unwrap_or_default();
        if let Ok(meta) = std::fs::metadata(&self.out) {
            if !meta.is_dir() {
                let what = if meta.is_file() { "a regular file" } else { "not a directory" };
                return Err(fail(
                    exit::USAGE,
                    format!("--out {}: is {what}; name a directory for seeds and journals (it is created when missing)", self.out.display()),
                ));
            }
        }
        let sanitize = self.sanitize.as_ref().map(|l| l.0.clone());
        let cfg = EngineConfig {
            gpu: self.gpu,
            gpus,
            jobs: self.jobs,
            reference: match self.reference {
                RefArg::Gpu => ReferenceChoice::Gpu,
                RefArg::Cpu => ReferenceChoice::Cpu,
            },
            determinism: !self.no_determinism,
            gpu_sharing: match self.gpu_sharing {
                SharingArg::Auto => GpuSharing::Auto,
                SharingArg::Mps => GpuSharing::Mps,
                SharingArg::Turns => GpuSharing::Turns,
            },
            timeout_ms: self.timeout_ms,
            out: self.out.clone(),
            sanitize,
            sanitize_batch: self.sanitize_batch,
            coverage: self.coverage,
            ..EngineConfig::new(self.out.clone())
        };
        // Every command, not only those that spread workers, refuses a GPU range past any machine.
        if matches!(cfg.gpus, GpuSelection::Count(_)) {
            cfg.gpu_ordinals().map_err(setup)?;
        }
        if self.gpu >= crate::run::config::MAX_GPUS {
            return Err(fail(
                exit::USAGE,
                format!("--gpu {}: GPU numbers go up to {}; name a GPU of this machine (0 is the first)", self.gpu, crate::run::config::MAX_GPUS - 1),
            ));
        }
        check_environment()?;
        if let Some(python) = &self.python {
            if python.components().count() > 1 && !python.is_file() {
                return Err(fail(
                    exit::USAGE,
                    format!("--python {}: no such file; name a Python interpreter (a virtualenv's bin/python, say)", python.display()),
                ));
            }
            // Supervisors read it when they start a Python target's worker.
            std::env::set_var(crate::run::supervisor::PYTHON_ENV, python);
        }
        Ok(cfg)
    }
}

/// A configuration error as the CLI reports it: compute-sanitizer missing or anything else that
/// stops the engine from starting is a setup error.
fn setup(e: ConfigError) -> anyhow::Error {
    let code = if matches!(e, ConfigError::GpuRange { .. }) { exit::USAGE } else { exit::SETUP };
    fail(code, chain(e))
}

/// A shipped kernel's name or a manifest path, as a loaded manifest.
fn resolve_kernel(spec: &str) -> Result<Manifest> {
    registry::resolve(spec).map_err(|e| fail(exit::USAGE, chain(e)))
}

/// The kernel a command that takes a seed is told to use: `--kernel`, else `$CUDAFUZZ_KERNEL`
/// (an error then names the variable), else none.
fn forced_kernel(flag: Option<&str>) -> Result<Option<Manifest>> {
    if let Some(k) = flag {
        return resolve_kernel(k).map(Some);
    }
    match std::env::var("CUDAFUZZ_KERNEL") {
        Ok(k) if !k.is_empty() => registry::resolve(&k).map(Some).map_err(|e| fail(exit::USAGE, format!("CUDAFUZZ_KERNEL={k}: {}", chain(e)))),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(fail(exit::USAGE, format!("CUDAFUZZ_KERNEL={}: not UTF-8; name a kernel or manifest path", v.to_string_lossy())))
        }
        _ => Ok(None),
    }
}

/// Loads a seed; raw bytes (a libFuzzer artifact, or any file with `raw`) decode with the
/// kernel's context.
fn load_seed(path: &Path, kernel: Option<&Manifest>, raw: bool) -> Result<Seed> {
    let ctx = kernel.map(crate::core::generate::DecodeContext::new);
    let raw = if raw { corpus::RawInput::Always } else { corpus::RawInput::ByName };
    let (mut seed, _) = corpus::load_as(path, ctx.as_ref(), raw).map_err(|e| fail(exit::USAGE, chain(e)))?;
    if let Some(fixed) = seed.reconcile() {
        errln!("cudafuzz: warning: {}: {fixed}", path.display());
    }
    Ok(seed)
}

/// A seed's case bound to its kernel and planned: a case the kernel cannot take (params not
/// among the manifest's values, a dim past its maximum, a broken relation) is bad input, found
/// before anything starts.
fn checked_case(path: &Path, seed: &Seed, manifest: &Manifest) -> Result<(crate::core::case::Case, crate::core::plan::Plan)> {
    let case = manifest.bind(seed.case.clone());
    let plan = crate::core::plan::Plan::new(&case, manifest).map_err(|e| fail(exit::USAGE, format!("{}: {}", path.display(), chain(e))))?;
    Ok((case, plan))
}

/// The kernel a seed runs against: `--kernel` when given, else the one the case names, found
/// from the seed's own folder first ([`Seed::kernel`]); a raw input that names none needs
/// `--kernel`. A warning (the manifest changed since the seed was saved, `--kernel` is not the
/// seed's kernel) is printed and the run goes on.
fn seed_kernel(forced: Option<&Manifest>, seed: &Seed, path: &Path) -> Result<Manifest> {
    if forced.is_none() && seed.case.kernel.is_empty() {
        return Err(fail(exit::USAGE, format!("{}: the case names no kernel (raw fuzzer input?); pass --kernel or set CUDAFUZZ_KERNEL", path.display())));
    }
    let found = seed.kernel(path, forced).map_err(|e| fail(exit::USAGE, chain(e)))?;
    if let Some(w) = &found.warning {
        errln!("cudafuzz: warning: {w}");
    }
    Ok(found.manifest)
}

/// Refuses an output that is one of the command's own inputs (the same file however it is
/// spelled: links and `dir/../dir` count), before anything is written.
fn refuse_clobber<'a>(output: &Path, inputs: impl IntoIterator<Item = &'a Path>) -> Result<()> {
    match crate::core::userfile::clobbered_input(output, inputs) {
        Some(input) => {
            Err(fail(exit::USAGE, format!("{} is {}, one of this command's inputs: write the output somewhere else", output.display(), input.display())))
        }
        None => Ok(()),
    }
}

/// Refuses an output file `option` names that is a directory, or whose folder does not exist,
/// before anything runs (a GPU campaign must not end unable to write its result).
fn refuse_directory(option: &str, path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(fail(exit::USAGE, format!("{option} {}: is a directory; name the file to write", path.display())));
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.is_dir() {
            return Err(fail(exit::USAGE, format!("{option} {}: the folder {} does not exist; create it first", path.display(), parent.display())));
        }
    }
    Ok(())
}

/// The files a kernel's manifest reads: the manifest, its source and its reference kernel's.
fn manifest_inputs(m: &Manifest) -> Vec<&Path> {
    let mut v = vec![m.path.as_path(), m.source.as_path()];
    if let crate::core::manifest::ReferenceSpec::Kernel(k) = &m.reference {
        v.push(k.source.as_path());
    }
    v
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

/// The end of a run that saved seeds into `keeper`: one seed per bug in `seeds/` (the others
/// moved under `seeds/<id>/examples/`) and the bug index written to `out` (also with no bug,
/// when `index_when_empty`). A failure of either is said, and the run's result stands. Returns
/// the moves and the index written.
fn file_seeds(keeper: &mut crate::run::campaign::SeedKeeper, out: &Path, index_when_empty: bool) -> (Vec<(PathBuf, PathBuf)>, Option<PathBuf>) {
    let moves = keeper.arrange().unwrap_or_else(|e| {
        errln!("cudafuzz: seeds stay where they were saved: cannot arrange {}: {e}", keeper.dir().display());
        Vec::new()
    });
    if keeper.is_empty() && !index_when_empty {
        return (moves, None);
    }
    let index = crate::core::triage::BugIndex::new(keeper.triage(), out).write(out).map_err(|e| errln!("cudafuzz: {}", chain(e))).ok();
    (moves, index)
}

/// The line a command prints once its workers are up: the first worker's GPU, the worker count
/// and, with `--gpus`, every GPU the workers opened.
fn workers_line(gpu: &GpuInfo, pool: &mut Pool) -> String {
    let ordinals = pool.gpus();
    let on = if ordinals.len() > 1 { format!(" on GPUs {}", ordinals.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(", ")) } else { String::new() };
    format!("gpu {}: {} ({}), driver {}; {} worker(s){on}", gpu.ordinal, gpu.name, gpu.arch, gpu.driver_version, pool.slots.len())
}

/// A supervisor error as the CLI reports it: no GPU is exit 3, Ctrl-C 130, anything else a
/// setup error.
fn no_gpu(e: SupervisorError) -> anyhow::Error {
    match e {
        SupervisorError::NoGpu(msg) => fail(exit::NO_GPU, format!("NO GPU: {msg}")),
        SupervisorError::Setup(msg) => fail(exit::SETUP, msg),
        SupervisorError::Interrupted => fail(exit::INTERRUPTED, "interrupted"),
        e => fail(exit::SETUP, chain(e)),
    }
}
