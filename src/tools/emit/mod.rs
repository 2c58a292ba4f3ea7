//! Standalone repros: one saved case as a single file that someone without Rust can build and run.
//! The main functions are [`emit_cu`] and [`emit_python`]; both start from a [`Prepared`] case.
//!
//! [`prepare`] does everything on the host with the library's own code, exactly as a worker
//! would before its launch: the [`Plan`](crate::core::plan::Plan), the generated inputs
//! ([`crate::engine::data::generate`]), the arena's initial bytes ([`HostImage`](crate::engine::arena::HostImage):
//! one allocation per tensor of the manifest's roster, redzones, canaries, stride gaps, each
//! written tensor's initial contents), the resolved launch ([`Manifest::resolve`]: grid, block,
//! shared memory and the argument list in order), the compile defines
//! ([`request_for`](crate::engine::compile::request_for)) and the reference. The emitters only print
//! these numbers: the emitted program embeds the arena images byte for byte (run-length coded by
//! [`encode`]: redzones are long runs of one canary byte, an untouched output is one repeated
//! sentinel), allocates one buffer per tensor (so `ptr % 256 == 0` and the case's byte offset
//! alone sets each tensor's residue), launches the kernel with the same arguments, and then
//! judges the result with the harness's rules, ported to C++ and Python, per tensor: CUDA status,
//! canary damage before, after and between rows, unchanged inputs, no sentinel left in outputs
//! whose initial contents are the sentinel, non-finite values the reference does not have, the
//! error bound of each judged output, and a second run for bitwise determinism.
//!
//! The reference ([`Judge`]) is whatever the manifest declares:
//!
//! * a built-in op (`attention_fwd`): the fp64 gold and the error bound are computed here on the
//!   CPU ([`crate::engine::reference::cpu_reference`]) and embedded;
//! * the user's reference kernel: there is no CPU reference, so the repro carries the reference
//!   kernel's source too and runs it first, as the worker does (`worker::reference`): twice, on
//!   dense copies of the case's inputs, with every floating tensor in f64 (the gold) and at the
//!   case's precision (the baseline), each run compiled with its own defines
//!   (`CUDAFUZZ_REFERENCE=1`, `CUDAFUZZ_DTYPE_*`, `CF_T_<tensor>`). The bound of each output is
//!   then `factor · max|baseline − gold| + floor`, computed by the repro exactly as
//!   [`crate::engine::reference::kernel_expected`] computes it. The `.cu` file holds the reference source
//!   twice, each copy in its own namespace with its entry renamed; the Python script compiles it
//!   twice with NVRTC;
//! * none: CUDA status, memory oracles and determinism only.
//!
//! Kernel sources are made self-contained by [`inline_source`] (the `inline` module).
//!
//! Cases are embedded, not regenerated: the input generator (ChaCha8, Box–Muller with `libm`) is
//! not ported, so repros above [`MAX_EMBED_BYTES`] of literal data are refused with the advice to
//! minimise the seed first.

pub mod cu;
mod cu_program;
mod encode;
mod inline;
mod prepare;
pub mod python;
mod python_program;
mod python_target;

pub use cu::emit_cu;
pub use encode::{decode, encode, fnv1a64, Encoded, Run};
pub use inline::{inline_source, InlinedSource};
pub use prepare::{prepare, AllocRow, ExpectRow, Judge, Prepared, Program, ProgramRole};
pub use python::emit_python;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::core::case::{Case, Dtype, Placement};
use crate::core::corpus::Seed;
use crate::core::error::CaseError;
use crate::core::finding::Finding;
use crate::core::manifest::{ArgSpec, Manifest, ManifestError, ResolvedArg, Role};
use crate::core::plan::ContractVerdict;
use crate::engine::reference::Rule;
use crate::run::sanitizer::Tool;

/// Largest amount of literal data (input bytes, short runs, embedded gold values) an emitted
/// repro embeds: 8 MiB, about 40 MB of C++ source. Minimised cases are far below it.
pub const MAX_EMBED_BYTES: u64 = 8 << 20;

/// Why a repro could not be written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EmitError {
    /// A `.cu` repro of a Python target (its launch is Python code).
    #[error("{} is a Python target: its repro is a Python script that calls it (--emit python)", manifest.display())]
    PythonTarget {
        /// The manifest.
        manifest: PathBuf,
    },
    /// A `.cu` repro of a prebuilt module (it compiles the source it inlines, which need not be
    /// what the module was built from).
    #[error("{} loads a prebuilt module: its repro is a Python script that loads the same module (--emit python)", manifest.display())]
    PrebuiltModule {
        /// The manifest.
        manifest: PathBuf,
    },
    /// No prebuilt module file of the manifest exists for any architecture.
    #[error("{}: {problem}", manifest.display())]
    NoModule {
        /// The manifest.
        manifest: PathBuf,
        /// Which files were tried, or why the entry is not in them.
        problem: String,
    },
    /// The manifest's reference is a Python callable, which an emitted repro does not run.
    #[error("{} is judged by the Python reference {callable}, which an emitted repro does not run; replay the seed with `cudafuzz repro SEED` (it judges with that reference), or judge with a built-in op or a reference kernel", manifest.display())]
    PythonReference {
        /// The manifest.
        manifest: PathBuf,
        /// The reference's callable.
        callable: String,
    },
    /// The case cannot be resolved against the manifest (params, expressions, i32 overflow).
    #[error("the case does not resolve against manifest {manifest}")]
    Manifest {
        /// The manifest file.
        manifest: PathBuf,
        /// Why.
        #[source]
        source: Box<ManifestError>,
    },
    /// The case does not plan for the kernel (or for its reference kernel's dense runs).
    #[error("the case does not fit {kernel}")]
    Case {
        /// The kernel (or `name (reference gold run)`).
        kernel: String,
        /// Why.
        #[source]
        source: CaseError,
    },
    /// The manifest's reference cannot judge this case.
    #[error("{0}")]
    Reference(String),
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
    if kind == EmitKind::Cu && manifest.target.python().is_some() {
        return Err(EmitError::PythonTarget { manifest: manifest.path.clone() });
    }
    if kind == EmitKind::Cu && matches!(manifest.build, crate::core::target::Build::Prebuilt(_)) {
        return Err(EmitError::PrebuiltModule { manifest: manifest.path.clone() });
    }
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
    pub signature: Option<crate::core::finding::Signature>,
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

/// The dtype code both emitted programs use: the position in [`Dtype::EVERY`] (0 f16, 1 bf16,
/// 2 f32, 3 f64, 4 i8, 5 u8, 6 i32, 7 u32, 8 i64).
pub(crate) fn dtype_code(d: Dtype) -> u32 {
    Dtype::EVERY.iter().position(|&x| x == d).expect("every dtype is listed") as u32
}

/// The role code both emitted programs use: 0 input, 1 output, 2 in_out, 3 scratch.
pub(crate) fn role_code(r: Role) -> u32 {
    match r {
        Role::Input => 0,
        Role::Output => 1,
        Role::InOut => 2,
        Role::Scratch => 3,
    }
}

/// The legend of [`dtype_code`], for comments in the emitted files.
pub(crate) const DTYPE_LEGEND: &str = "0 f16, 1 bf16, 2 f32, 3 f64, 4 i8, 5 u8, 6 i32, 7 u32, 8 i64";

/// One argument as both emitted programs code it: `(kind, value)`, the kind 0 pointer (the value
/// is the allocation's index in the repro), 1 i32, 2 u32, 3 i64, 4 u64, 5 f32, 6 f64 (floats as
/// their bits, integers as their two's-complement bits).
pub(crate) fn arg_code(arg: &ResolvedArg, alloc_base: usize) -> (u32, u64) {
    match *arg {
        ResolvedArg::Tensor(t) => (0, (alloc_base + t) as u64),
        ResolvedArg::I32(x) => (1, x as i64 as u64),
        ResolvedArg::U32(x) => (2, x as u64),
        ResolvedArg::I64(x) => (3, x as u64),
        ResolvedArg::U64(x) => (4, x),
        ResolvedArg::F32(x) => (5, x.to_bits() as u64),
        ResolvedArg::F64(x) => (6, x.to_bits()),
    }
}

/// An argument's value as a comment shows it (`= 65`, `= 0.125`); empty for a pointer.
pub(crate) fn arg_value_text(arg: &ResolvedArg) -> String {
    match *arg {
        ResolvedArg::Tensor(_) => String::new(),
        ResolvedArg::I32(x) => format!("= {x}"),
        ResolvedArg::U32(x) => format!("= {x}"),
        ResolvedArg::I64(x) => format!("= {x}"),
        ResolvedArg::U64(x) => format!("= {x}"),
        ResolvedArg::F32(x) => format!("= {x:?}"),
        ResolvedArg::F64(x) => format!("= {x:?}"),
    }
}

/// The manifest's text for argument `i` (`ptr q`, `i32 seq_q`).
pub(crate) fn arg_text(specs: &[ArgSpec], i: usize) -> String {
    match specs.get(i) {
        Some(ArgSpec::Ptr(n)) => format!("ptr {n}"),
        Some(ArgSpec::I32(e)) => format!("i32 {e}"),
        Some(ArgSpec::U32(e)) => format!("u32 {e}"),
        Some(ArgSpec::I64(e)) => format!("i64 {e}"),
        Some(ArgSpec::U64(e)) => format!("u64 {e}"),
        Some(ArgSpec::F32(e)) => format!("f32 {e}"),
        Some(ArgSpec::F64(e)) => format!("f64 {e}"),
        None => String::new(),
    }
}

/// The header lines both emitted files start with (without comment markers).
pub(crate) fn header_lines(p: &Prepared, seed: &SeedInfo, what: &str, commands: &[String]) -> Vec<String> {
    let k = p.kernel();
    let mut h = vec![
        format!("cudafuzz standalone repro ({what}), written by `cudafuzz repro --emit`; no Rust needed."),
        String::new(),
        format!("seed:       {}", seed.path),
        format!("kernel:     {} (manifest {}, entry {})", p.kernel_label, p.manifest_path, k.entry),
        format!("source:     {}", k.source.files.join(", ")),
        format!("case:       {}", k.case.summary()),
        format!("placement:  {}", placement_text(k.case.placement)),
        format!(
            "contract:   {}",
            match &p.contract {
                ContractVerdict::Inside => "inside".to_string(),
                ContractVerdict::Outside { reasons } => format!("OUTSIDE ({})", reasons.join("; ")),
            }
        ),
        format!(
            "launch:     grid {:?}, block {:?}, {} bytes of dynamic shared memory{}",
            k.launch.grid,
            k.launch.block,
            k.launch.shared_bytes,
            match (k.launch.shared_bytes > crate::engine::launch::DEFAULT_SMEM_LIMIT, k.launch.shared_opt_in) {
                (true, true) => " (opt-in attribute set)",
                (true, false) => " (no opt-in: the host never raises the 48 KiB limit)",
                _ => "",
            }
        ),
        "tensors:    one allocation each, in the manifest's order".to_string(),
    ];
    for tp in &k.plan.tensors {
        let a = &k.image.layout.allocs[tp.index];
        h.push(format!(
            "  {} ({}, {}): shape {:?} strides {:?} (elements), base offset {} (ptr % 16 = {}), span {} bytes, allocation {} bytes",
            tp.name,
            tp.role.name(),
            tp.dtype,
            tp.shape,
            tp.strides,
            tp.offset_bytes,
            tp.base_residue,
            tp.span_bytes,
            a.total_bytes()
        ));
    }
    h.extend(reference_lines(p));
    match &seed.finding {
        Some(f) => h.push(format!("finding:    {}", one_line(&f.to_string()))),
        None => h.push("finding:    none saved with this seed".to_string()),
    }
    if let Some(s) = &seed.signature {
        h.push(format!("signature:  {s}"));
    }
    for prog in &p.programs {
        let label = if prog.role == ProgramRole::Kernel { "defines:   ".to_string() } else { format!("{} defines:", prog.role.name()) };
        h.push(format!("{label} {}", prog.defines.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")));
        if !prog.options.is_empty() {
            h.push(format!("{} options: {}", prog.role.name(), prog.options.join(" ")));
        }
    }
    h.push(String::new());
    h.push("Build and run:".to_string());
    h.extend(commands.iter().map(|c| format!("  {c}")));
    h.push(String::new());
    h.push("Exit status: 0 PASS; 1 the bug reproduced (CUDA error, hang, canary or sentinel damage,".to_string());
    h.push("changed input, NaN leak, error above the bound, nondeterminism); 2 could not run.".to_string());
    h
}

fn placement_text(p: Placement) -> &'static str {
    match p {
        Placement::Guarded => "guarded (redzones with canaries before and after every tensor)",
        Placement::Exact => "exact (each tensor ends at its allocation's end: memcheck --padding sees overruns)",
    }
}

/// What judges the outputs, for the header.
fn reference_lines(p: &Prepared) -> Vec<String> {
    let k = p.kernel();
    match &p.judge {
        Judge::None => vec!["reference:  none in the manifest: CUDA status, memory oracles and determinism only".to_string()],
        Judge::Host(refs) => {
            let mut h = vec!["reference:  the manifest's built-in op, computed by cudafuzz on the host (fp64 gold, embedded)".to_string()];
            for e in &refs.expected {
                h.push(match e.rule {
                    Rule::Bound(t) => format!(
                        "  {}: max |{} - gold| <= {} x {:e} (same-precision error) + {:e} = {:e}",
                        e.name, e.name, t.factor, t.err_lowp, t.floor, t.bound
                    ),
                    Rule::Relative(rel) => format!("  {}: every element within {rel} x max(1, |gold|)", e.name),
                });
            }
            h
        }
        Judge::Kernel { factor, floor, outputs } => {
            let gold = &p.programs[1];
            let names: Vec<&str> = outputs.iter().map(|&i| k.plan.tensors[i].name.as_str()).collect();
            let floor = match floor {
                Some(f) => format!("{f:e}"),
                None => "4 u max |gold|, u the output's unit roundoff (2^-32 for f64)".to_string(),
            };
            vec![
                format!("reference:  the manifest's reference kernel {} ({}), run first on the GPU,", gold.entry, gold.source.files.join(", ")),
                "  twice on dense copies of the inputs: gold (floating tensors f64) and baseline (the case's types);".to_string(),
                format!("  {} pass(es) when max |out - gold| <= {factor} x max |baseline - gold| + {floor}", names.join(", ")),
            ]
        }
    }
}
