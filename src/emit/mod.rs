//! Standalone repros: one saved case as a single file that someone without Rust can build and run.
//! The main functions are [`emit_cu`] and [`emit_python`]; both start from a [`Prepared`] case.
//!
//! [`prepare`] does everything on the host with the library's own code, exactly as a worker
//! would before its launch: the [`Plan`], the generated inputs ([`crate::data::generate`]), the
//! arena's initial bytes ([`HostImage`]: redzones, canaries, stride gaps, the output sentinel,
//! manifest buffers), the resolved launch ([`Manifest::resolve`]: grid, block, shared memory and
//! the argument list in order), the compile defines ([`request_for`]) and both CPU references
//! with the FlashAttention error bound ([`tolerance`]). The emitters only print these numbers:
//! the emitted program embeds the arena images byte for byte (run-length coded: redzones are long
//! runs of one canary byte, an untouched output is one repeated sentinel), allocates one buffer
//! per allocation (so `ptr % 256 == 0` and the case's byte offset alone sets each tensor's
//! residue), launches the kernel with the same arguments, and then judges the result with the
//! harness's rules, ported to C++ and Python: CUDA status, canary damage before, after and
//! between rows, unchanged inputs, no sentinel left, NaN the inputs cannot explain, the error
//! bound against the embedded fp64 reference, the log-sum-exp buffer, and a second run for
//! bitwise determinism.
//!
//! The kernel source is made self-contained by [`inline_source`]: every `#include` that the
//! harness's NVRTC compile resolves in the project (the including file's directory for quoted
//! includes, then the kernel's directory, its parent and `kernels/include`, as
//! [`Compiler::include_dirs`] lists them) is replaced by the header's text, with `#line`
//! directives so that compiler messages and compute-sanitizer reports name the original files
//! and lines; CUDA and system headers stay includes. A header with `#pragma once` is wrapped in
//! an include guard instead, which keeps its once-only meaning even inside conditionals.
//!
//! Cases are embedded, not regenerated: the input generator (ChaCha8, Box–Muller with `libm`) is
//! not ported, so images above [`MAX_EMBED_BYTES`] of literal data are refused with the advice to
//! minimise the seed first.
//!
//! The reference is the CPU one ([`CpuF64`], [`CpuSamePrecision`]); the harness's GPU fp64
//! reference implements the same semantics, so the verdict agrees.

pub mod cu;
pub mod python;

pub use cu::emit_cu;
pub use python::emit_python;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::arena::HostImage;
use crate::case::{Case, Dtype, Placement, TensorId};
use crate::compile::{request_for, Arch, Compiler};
use crate::corpus::Seed;
use crate::finding::Finding;
use crate::manifest::{ArgSpec, BufferDtype, BufferRole, Manifest, ManifestError, ResolvedArg, ResolvedLaunch};
use crate::plan::{ContractVerdict, Plan};
use crate::reference::{tolerance, CpuF64, CpuSamePrecision, RefOutput, Reference, Tolerance};
use crate::sanitizer::{padding_for, Tool};
use crate::supervisor::kernel_timeout;

/// Largest amount of literal data (input bytes, short runs, the fp64 reference) an emitted repro
/// embeds: 8 MiB, about 40 MB of C++ source. Minimised cases are far below it.
pub const MAX_EMBED_BYTES: u64 = 8 << 20;

/// Shortest run of a repeated 1-, 2- or 4-byte pattern that is coded as a run rather than copied.
const MIN_RUN: usize = 32;

/// Why a repro could not be written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EmitError {
    /// The case cannot be resolved against the manifest (params, expressions, i32 overflow).
    #[error("the case does not resolve against manifest {manifest}")]
    Manifest {
        /// The manifest file.
        manifest: PathBuf,
        /// Why.
        #[source]
        source: Box<ManifestError>,
    },
    /// The kernel source or a header it includes could not be read.
    #[error("{path}: cannot read")]
    Source {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An `#include` whose file name is a macro: it cannot be inlined without preprocessing.
    #[error("{file}:{line}: `{text}` names its header through a macro, which cannot be inlined; write the header's name in quotes")]
    MacroInclude {
        /// The including file (relative path).
        file: String,
        /// 1-based line.
        line: usize,
        /// The line as written.
        text: String,
    },
    /// A header includes itself (directly or through others) and has no `#pragma once`.
    #[error("{file}: includes itself without #pragma once; inlining it would never end")]
    IncludeCycle {
        /// The header (relative path).
        file: String,
    },
    /// The case's data is too large to embed.
    #[error("the case needs {bytes} bytes of embedded data, more than the {limit} a repro embeds; shrink it first (`cudafuzz minimize SEED`) or pick a smaller case")]
    TooLarge {
        /// Literal bytes the repro would embed.
        bytes: u64,
        /// [`MAX_EMBED_BYTES`].
        limit: u64,
    },
}

/// Which kind of repro to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmitKind {
    /// One `.cu` file for `nvcc` ([`emit_cu`]).
    Cu,
    /// One Python script using PyTorch, NVRTC and the CUDA driver ([`emit_python`]).
    Python,
}

impl EmitKind {
    /// The file extension (`cu`, `py`).
    pub fn extension(self) -> &'static str {
        match self {
            EmitKind::Cu => "cu",
            EmitKind::Python => "py",
        }
    }
}

/// A written repro and the commands that build and run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emitted {
    /// The file's text.
    pub text: String,
    /// Build and run commands, to be run in the file's directory.
    pub commands: Vec<String>,
}

/// Writes a repro of `kind` (the text [`emit_cu`] or [`emit_python`] returns) with its commands.
pub fn emit(kind: EmitKind, case: &Case, manifest: &Manifest, seed: &SeedInfo) -> Result<Emitted, EmitError> {
    let p = prepare(case, manifest, seed.tool())?;
    let file_name = if seed.file_name.is_empty() { format!("repro.{}", kind.extension()) } else { seed.file_name.clone() };
    Ok(match kind {
        EmitKind::Cu => Emitted { text: cu::render(&p, seed), commands: cu::commands(&p, &file_name) },
        EmitKind::Python => Emitted { text: python::render(&p, seed), commands: python::commands(&p, &file_name) },
    })
}

/// Where a case came from, for the emitted file's header and commands.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeedInfo {
    /// The seed file as given on the command line (printed, never opened).
    pub path: String,
    /// The finding saved with the seed, if any.
    pub finding: Option<Finding>,
    /// The saved signature, if any.
    pub signature: Option<crate::finding::Signature>,
    /// The name of the file being written (`repro.cu`), used in the build and run commands.
    pub file_name: String,
    /// The compute-sanitizer tool the repro is meant for: memcheck switches the case to exact
    /// placement (each tensor ends at its allocation's end, so `--padding` catches overruns).
    /// `None` with a sanitizer finding means that finding's tool ([`SeedInfo::tool`]).
    pub sanitizer: Option<Tool>,
}

impl SeedInfo {
    /// The info of a loaded seed written to `file_name`.
    pub fn from_seed(path: &Path, seed: &Seed, file_name: &str) -> SeedInfo {
        SeedInfo {
            path: path.display().to_string(),
            finding: seed.finding.clone(),
            signature: seed.signature.clone(),
            file_name: file_name.to_string(),
            sanitizer: None,
        }
    }

    /// The tool the repro is for: the explicit one, else the saved finding's sanitizer tool.
    pub fn tool(&self) -> Option<Tool> {
        self.sanitizer.or_else(|| self.finding.as_ref().and_then(|f| Tool::of(f.oracle)))
    }
}

/// A kernel source with its project headers inlined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InlinedSource {
    /// The self-contained text (with `#line` directives).
    pub text: String,
    /// Every file that went into it, main source first, as relative paths.
    pub files: Vec<String>,
}

/// One allocation's initial bytes, run-length coded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The runs in order; their lengths add up to the allocation's size.
    pub runs: Vec<Run>,
    /// The bytes of the literal runs, concatenated.
    pub literal: Vec<u8>,
}

/// A stretch of an allocation's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Run {
    /// `bytes` bytes copied from the literal data.
    Literal {
        /// Length.
        bytes: u64,
    },
    /// `bytes` bytes of `pattern` repeated (`out[j] = pattern[j % pattern.len()]`); the pattern
    /// is 1, 2 or 4 bytes long.
    Fill {
        /// The repeated bytes.
        pattern: Vec<u8>,
        /// Length in bytes (not necessarily a multiple of the pattern's length).
        bytes: u64,
    },
}

impl Run {
    /// Length in bytes.
    pub fn bytes(&self) -> u64 {
        match self {
            Run::Literal { bytes } | Run::Fill { bytes, .. } => *bytes,
        }
    }
}

/// Codes `data` as runs: a 1-, 2- or 4-byte pattern repeated over at least 32 bytes becomes a
/// [`Run::Fill`], everything else is literal.
pub fn encode(data: &[u8]) -> Encoded {
    let n = data.len();
    let mut runs = Vec::new();
    let mut literal = Vec::new();
    let mut lit_start = 0;
    let mut i = 0;
    let flush = |from: usize, to: usize, runs: &mut Vec<Run>, literal: &mut Vec<u8>| {
        if to > from {
            runs.push(Run::Literal { bytes: (to - from) as u64 });
            literal.extend_from_slice(&data[from..to]);
        }
    };
    while i < n {
        let mut taken = None;
        for p in [1usize, 2, 4] {
            if i + p > n {
                break;
            }
            let mut j = i + p;
            while j < n && data[j] == data[j - p] {
                j += 1;
            }
            if j - i >= MIN_RUN {
                taken = Some((p, j - i));
                break;
            }
        }
        match taken {
            Some((p, len)) => {
                flush(lit_start, i, &mut runs, &mut literal);
                runs.push(Run::Fill { pattern: data[i..i + p].to_vec(), bytes: len as u64 });
                i += len;
                lit_start = i;
            }
            None => i += 1,
        }
    }
    flush(lit_start, n, &mut runs, &mut literal);
    Encoded { runs, literal }
}

/// Expands runs back into bytes (the inverse of [`encode`]; what the emitted programs do).
pub fn decode(runs: &[Run], literal: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut lit = 0usize;
    for r in runs {
        match r {
            Run::Literal { bytes } => {
                out.extend_from_slice(&literal[lit..lit + *bytes as usize]);
                lit += *bytes as usize;
            }
            Run::Fill { pattern, bytes } => out.extend((0..*bytes as usize).map(|j| pattern[j % pattern.len()])),
        }
    }
    out
}

/// FNV-1a, 64 bits: the checksum the emitted C++ verifies each decoded image against.
pub fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Everything an emitter prints, computed on the host with the library's own code.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The case as it runs (exact placement when the repro is for memcheck).
    pub case: Case,
    /// Its plan.
    pub plan: Plan,
    /// Whether the case lies inside the manifest's contract.
    pub contract: ContractVerdict,
    /// The kernel label findings use (`name[P=V]`).
    pub kernel_label: String,
    /// The manifest's path, as given.
    pub manifest_path: String,
    /// The `extern "C"` entry point.
    pub entry: String,
    /// The launch: grid, block, shared memory, buffers and arguments.
    pub launch: ResolvedLaunch,
    /// The manifest's argument list (for the expressions shown next to each value).
    pub arg_specs: Vec<ArgSpec>,
    /// The arena's initial bytes.
    pub image: HostImage,
    /// Each allocation's bytes, run-length coded.
    pub encoded: Vec<Encoded>,
    /// The fp64 reference.
    pub ref64: RefOutput,
    /// The error bound against it.
    pub tolerance: Tolerance,
    /// Index in `launch.buffers` of the buffer with role `lse`, if any.
    pub lse_buffer: Option<usize>,
    /// The kernel source with its project headers inlined.
    pub source: InlinedSource,
    /// The `-D` defines of the harness's compile, in order.
    pub defines: BTreeMap<String, String>,
    /// The manifest's extra compiler options.
    pub options: Vec<String>,
    /// The watchdog in milliseconds (the manifest's, else the harness default).
    pub timeout_ms: u64,
    /// The sanitizer tool the repro is meant for.
    pub tool: Option<Tool>,
    /// memcheck's `--padding`, sized as the harness sizes it.
    pub padding: u64,
}

impl Prepared {
    /// Literal bytes the repro embeds (images' literal runs plus the reference).
    pub fn embedded_bytes(&self) -> u64 {
        let lit: u64 = self.encoded.iter().map(|e| e.literal.len() as u64).sum();
        lit + 8 * (self.ref64.o.len() + self.reference_lse_count()) as u64
    }

    /// The fp64 reference as a repro embeds it after the literal runs: o, then lse when the kernel
    /// writes one, as little-endian doubles.
    pub fn reference_bytes(&self) -> Vec<u8> {
        let lse = &self.ref64.lse[..self.reference_lse_count()];
        self.ref64.o.iter().chain(lse).flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Elements of the reference lse a repro embeds (0 when the kernel writes none).
    pub fn reference_lse_count(&self) -> usize {
        self.lse_buffer.map_or(0, |_| self.ref64.lse.len())
    }

    /// The lse buffer's allocation index (after q, k, v, o) and its buffer dtype code, or
    /// `(-1, 2)` when the kernel writes no lse.
    pub fn lse_slot(&self) -> (i32, u32) {
        match self.lse_buffer {
            Some(b) => (TensorId::ALL.len() as i32 + b as i32, buffer_dtype_code(self.launch.buffers[b].dtype)),
            None => (-1, 2),
        }
    }

    /// The compute-sanitizer command line for `tool`, without the program.
    pub fn sanitizer_command(&self, tool: Tool) -> String {
        match tool {
            Tool::Memcheck => format!("compute-sanitizer --tool memcheck --padding={}", self.padding),
            Tool::Racecheck => "compute-sanitizer --tool racecheck --racecheck-report=analysis".to_string(),
            t => format!("compute-sanitizer --tool {}", t.name()),
        }
    }
}

/// Builds everything a repro embeds for `case` against `manifest`, for the sanitizer `tool`.
pub fn prepare(case: &Case, manifest: &Manifest, tool: Option<Tool>) -> Result<Prepared, EmitError> {
    let mf = |source| EmitError::Manifest { manifest: manifest.path.clone(), source: Box::new(source) };
    let mut case = manifest.bind(case.clone());
    if tool == Some(Tool::Memcheck) {
        // As the harness runs memcheck (supervisor::batch::case_for_tool).
        case.placement = Placement::Exact;
    }
    manifest.check_params(&case.params).map_err(mf)?;
    let plan = Plan::new(&case);
    let contract = manifest.contract.check(&case, &plan);
    let launch = manifest.resolve(&case, &plan).map_err(mf)?;
    let inputs = crate::data::generate(&case);
    let image = HostImage::build(&case, &plan, &inputs, &launch.buffers).held_whole();
    let encoded: Vec<Encoded> = image.bytes.iter().map(|b| encode(b)).collect();
    let ref64 = CpuF64.forward(&case, &inputs);
    let lowp = CpuSamePrecision.forward(&case, &inputs);
    let tol = tolerance(&case, &ref64, &lowp);
    let lse_buffer = launch.buffers.iter().position(|b| b.role == Some(BufferRole::Lse));
    // The arch is irrelevant here: only the defines and options are used.
    let req = request_for(manifest, &case.params, case.dtype, Arch::new(9, 0), &BTreeMap::new());
    let source = inline_source(&manifest.source)?;
    let largest = plan.tensors.iter().map(|t| t.span_bytes).max().unwrap_or(0);
    let prepared = Prepared {
        kernel_label: crate::worker::kernel_label(manifest, &case),
        manifest_path: relative_display(&manifest.path),
        entry: manifest.entry.clone(),
        arg_specs: manifest.launch.args.clone(),
        timeout_ms: kernel_timeout(manifest, None).as_millis() as u64,
        case,
        plan,
        contract,
        launch,
        image,
        encoded,
        ref64,
        tolerance: tol,
        lse_buffer,
        source,
        defines: req.defines,
        options: req.options,
        tool,
        padding: padding_for(largest),
    };
    let bytes = prepared.embedded_bytes();
    if bytes > MAX_EMBED_BYTES {
        return Err(EmitError::TooLarge { bytes, limit: MAX_EMBED_BYTES });
    }
    Ok(prepared)
}

/// A path for display in emitted files: relative to the current directory when under it, else
/// from the nearest ancestor directory named `kernels`, else the file name; never absolute.
pub fn relative_display(path: &Path) -> String {
    let abs = path.canonicalize().unwrap_or_else(|_| std::path::absolute(path).unwrap_or(path.to_path_buf()));
    if let Some(rel) = std::env::current_dir().ok().and_then(|d| d.canonicalize().ok()).and_then(|d| abs.strip_prefix(d).ok().map(Path::to_path_buf)) {
        return rel.display().to_string();
    }
    if path.is_relative() && !path.starts_with("..") {
        return path.display().to_string();
    }
    for anc in abs.ancestors() {
        if anc.file_name().is_some_and(|n| n == "kernels") {
            if let Some(parent) = anc.parent() {
                if let Ok(rel) = abs.strip_prefix(parent) {
                    return rel.display().to_string();
                }
            }
        }
    }
    abs.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// One `#include` line.
enum Include {
    Quoted(String),
    Angled(String),
    Macro,
}

/// Parses a preprocessor include line (`#include`, `# include`, not `#include_next`).
fn parse_include(line: &str) -> Option<Include> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start().strip_prefix("include")?;
    if rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let rest = rest.trim_start();
    let parse = |open: char, close: char| rest.strip_prefix(open).and_then(|r| r.find(close).map(|end| r[..end].to_string()));
    Some(if let Some(n) = parse('"', '"') {
        Include::Quoted(n)
    } else if let Some(n) = parse('<', '>') {
        Include::Angled(n)
    } else {
        Include::Macro
    })
}

fn is_pragma_once(line: &str) -> bool {
    let Some(rest) = line.trim_start().strip_prefix('#') else { return false };
    let mut words = rest.split_whitespace();
    words.next() == Some("pragma") && words.next() == Some("once") && words.next().is_none_or(|w| w.starts_with("//"))
}

/// Inlines every project header of a kernel source (see the module docs).
pub fn inline_source(source: &Path) -> Result<InlinedSource, EmitError> {
    let canon = source.canonicalize().map_err(|e| EmitError::Source { path: source.to_path_buf(), source: e })?;
    let dirs = Compiler::include_dirs(&canon);
    let mut state = Inliner { dirs, stack: Vec::new(), guards: BTreeMap::new(), files: Vec::new(), out: String::new() };
    state.file(&canon)?;
    Ok(InlinedSource { text: state.out, files: state.files })
}

struct Inliner {
    dirs: Vec<PathBuf>,
    stack: Vec<PathBuf>,
    guards: BTreeMap<PathBuf, usize>,
    files: Vec<String>,
    out: String,
}

impl Inliner {
    fn file(&mut self, path: &Path) -> Result<(), EmitError> {
        let text = std::fs::read_to_string(path).map_err(|e| EmitError::Source { path: path.to_path_buf(), source: e })?;
        let shown = relative_display(path);
        if !self.files.contains(&shown) {
            self.files.push(shown.clone());
        }
        self.stack.push(path.to_path_buf());
        let _ = writeln!(self.out, "#line 1 \"{}\"", c_escape(&shown));
        let here = path.parent().map(Path::to_path_buf).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            if is_pragma_once(line) {
                let _ = writeln!(self.out, "// (once-only header: the CFR_ONCE include guard around it stands in for its pragma)");
                continue;
            }
            let (name, quoted) = match parse_include(line) {
                None => {
                    self.out.push_str(line);
                    self.out.push('\n');
                    continue;
                }
                Some(Include::Macro) => {
                    return Err(EmitError::MacroInclude { file: shown, line: i + 1, text: line.trim().to_string() })
                }
                Some(Include::Quoted(n)) => (n, true),
                Some(Include::Angled(n)) => (n, false),
            };
            let found = quoted
                .then(|| here.join(&name))
                .into_iter()
                .chain(self.dirs.iter().map(|d| d.join(&name)))
                .find(|p| p.is_file())
                .map(|p| p.canonicalize().unwrap_or(p));
            let Some(header) = found else {
                // A CUDA or system header: stays an include.
                self.out.push_str(line);
                self.out.push('\n');
                continue;
            };
            let header_text = std::fs::read_to_string(&header).map_err(|e| EmitError::Source { path: header.clone(), source: e })?;
            let once = header_text.lines().any(is_pragma_once);
            let header_shown = relative_display(&header);
            if self.stack.contains(&header) {
                if once {
                    let _ = writeln!(self.out, "// {} (already being included; #pragma once)", line.trim());
                    continue;
                }
                return Err(EmitError::IncludeCycle { file: header_shown });
            }
            let _ = writeln!(self.out, "// {} -> inlined from {}", line.trim(), header_shown);
            let guard = once.then(|| {
                let n = self.guards.len();
                *self.guards.entry(header.clone()).or_insert(n)
            });
            if let Some(g) = guard {
                let _ = writeln!(self.out, "#ifndef CFR_ONCE_{g}\n#define CFR_ONCE_{g}");
            }
            self.file(&header)?;
            if guard.is_some() {
                self.out.push_str("#endif\n");
            }
            let _ = writeln!(self.out, "// end of {header_shown}\n#line {} \"{}\"", i + 2, c_escape(&shown));
        }
        self.stack.pop();
        Ok(())
    }
}

/// Escapes a string for a C string literal (and a `#line` file name).
pub(crate) fn c_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(o, "\\{:03o}", c as u32);
            }
            c => o.push(c),
        }
    }
    o
}

/// One line for a `//` or `#` comment: no line breaks.
pub(crate) fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

/// The dtype code both emitted programs use: 0 f16, 1 bf16, 2 f32.
pub(crate) fn dtype_code(d: Dtype) -> u32 {
    match d {
        Dtype::F16 => 0,
        Dtype::Bf16 => 1,
        Dtype::F32 => 2,
    }
}

/// The buffer dtype code: 0 f16, 1 bf16, 2 f32, 3 f64, 4 i32, 5 u32.
pub(crate) fn buffer_dtype_code(d: BufferDtype) -> u32 {
    match d {
        BufferDtype::F16 => 0,
        BufferDtype::Bf16 => 1,
        BufferDtype::F32 => 2,
        BufferDtype::F64 => 3,
        BufferDtype::I32 => 4,
        BufferDtype::U32 => 5,
    }
}

/// Index in the allocation list of a pointer argument.
pub(crate) fn arg_alloc(arg: &ResolvedArg) -> Option<usize> {
    match *arg {
        ResolvedArg::Tensor(t) => Some(t.index()),
        ResolvedArg::Buffer(b) => Some(crate::arena::buffer_slot(b)),
        _ => None,
    }
}

/// The manifest's text for argument `i` (`ptr q`, `i32 seq_q`).
pub(crate) fn arg_text(specs: &[ArgSpec], i: usize) -> String {
    match specs.get(i) {
        Some(ArgSpec::Ptr(n)) => format!("ptr {n}"),
        Some(ArgSpec::I32(e)) => format!("i32 {e}"),
        Some(ArgSpec::I64(e)) => format!("i64 {e}"),
        Some(ArgSpec::F32(e)) => format!("f32 {e}"),
        None => String::new(),
    }
}

/// The header lines both emitted files start with (without comment markers).
pub(crate) fn header_lines(p: &Prepared, seed: &SeedInfo, what: &str, commands: &[String]) -> Vec<String> {
    let mut h = vec![
        format!("cudafuzz standalone repro ({what}), written by `cudafuzz repro --emit`; no Rust needed."),
        String::new(),
        format!("seed:       {}", seed.path),
        format!("kernel:     {} (manifest {}, entry {})", p.kernel_label, p.manifest_path, p.entry),
        format!("source:     {}", p.source.files.join(", ")),
        format!("case:       {}", p.case.summary()),
        format!(
            "placement:  {}",
            match p.case.placement {
                Placement::Guarded => "guarded (redzones with canaries before and after every tensor)",
                Placement::Exact => "exact (each tensor ends at its allocation's end: memcheck --padding sees overruns)",
            }
        ),
        format!(
            "contract:   {}",
            match &p.contract {
                ContractVerdict::Inside => "inside".to_string(),
                ContractVerdict::Outside { reasons } => format!("OUTSIDE ({})", reasons.join("; ")),
            }
        ),
        format!(
            "launch:     grid {:?}, block {:?}, {} bytes of dynamic shared memory{}",
            p.launch.grid,
            p.launch.block,
            p.launch.shared_bytes,
            if p.launch.shared_bytes > crate::launch::DEFAULT_SMEM_LIMIT { " (opt-in attribute set)" } else { "" }
        ),
    ];
    for tp in &p.plan.tensors {
        let a = &p.image.layout.allocs[tp.tensor.index()];
        h.push(format!(
            "  {}: shape {:?} strides {:?} (elements), base offset {} (ptr % 16 = {}), span {} bytes, allocation {} bytes",
            tp.tensor, tp.shape, tp.strides, tp.offset_bytes, tp.base_residue, tp.span_bytes, a.total_bytes()
        ));
    }
    match &seed.finding {
        Some(f) => h.push(format!("finding:    {}", one_line(&f.to_string()))),
        None => h.push("finding:    none saved with this seed".to_string()),
    }
    if let Some(s) = &seed.signature {
        h.push(format!("signature:  {s}"));
    }
    h.push(format!(
        "defines:    {}",
        p.defines.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    ));
    if !p.options.is_empty() {
        h.push(format!("options:    {}", p.options.join(" ")));
    }
    h.push(String::new());
    h.push("Build and run:".to_string());
    h.extend(commands.iter().map(|c| format!("  {c}")));
    h.push(String::new());
    h.push("Exit status: 0 PASS; 1 the bug reproduced (CUDA error, hang, canary or sentinel damage,".to_string());
    h.push("changed input, NaN leak, error above the bound, nondeterminism); 2 could not run.".to_string());
    h
}
