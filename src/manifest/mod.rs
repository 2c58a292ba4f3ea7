//! Kernel manifests: the TOML file next to a `.cu` that tells cudafuzz how to build and launch
//! a kernel without any Rust code. The main type is [`Manifest`].
//!
//! A manifest names the source and `extern "C"` entry point, fixed `-D` defines, tunable
//! parameters with the values to fuzz, the kernel's declared [`Contract`], extra device buffers,
//! and the launch: grid, block, dynamic shared memory and the ordered argument list. Sizes and
//! scalar arguments are expressions over the case (`cdiv(seq_q, BLOCK_M)`, `q.stride_s`,
//! `scale`), evaluated by the `evalexpr` crate (the `expr` submodule lists the variables).
//!
//! Everything that can be checked without a GPU is checked in [`Manifest::load`]: unknown keys,
//! missing source, undeclared pointer arguments, and every expression, which is evaluated once
//! against a sample case inside the contract. [`Manifest::resolve`] then turns one concrete
//! case into numbers ([`ResolvedLaunch`]); it refuses, rather than wraps, an `i32` argument
//! that overflows, because a silently wrapped offset is precisely the bug class users want named.
//! Every error names the manifest file and the dotted field and says what to change.
//!
//! The module is split by job: this file holds the model (what a manifest declares) and the
//! small queries on it; `error` the one error type; `load` the TOML decoding and every check
//! made at load time, one function per section; `resolve` the evaluation of a manifest for one
//! case ([`Manifest::resolve`], [`Manifest::check_params`]).

mod error;
mod expr;
mod load;
mod resolve;

pub use error::ManifestError;
pub use resolve::{ResolvedArg, ResolvedBuffer, ResolvedLaunch};

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::case::Case;
use crate::generate::DecodeContext;
use crate::plan::Contract;

/// Element type of an extra buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BufferDtype {
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
}

impl BufferDtype {
    /// Size of one element in bytes.
    pub fn size(self) -> u32 {
        match self {
            BufferDtype::F16 | BufferDtype::Bf16 => 2,
            BufferDtype::F32 | BufferDtype::I32 | BufferDtype::U32 => 4,
            BufferDtype::F64 => 8,
        }
    }

    /// The name used in manifests.
    pub fn name(self) -> &'static str {
        match self {
            BufferDtype::F16 => "f16",
            BufferDtype::Bf16 => "bf16",
            BufferDtype::F32 => "f32",
            BufferDtype::F64 => "f64",
            BufferDtype::I32 => "i32",
            BufferDtype::U32 => "u32",
        }
    }
}

impl fmt::Display for BufferDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Initial contents of an extra buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BufferInit {
    /// All bytes zero.
    Zero,
    /// Every element `-inf` (integers: their minimum value).
    NegInf,
    /// Left as the allocator returned it (the arena may poison it to expose reads).
    Uninit,
    /// Every element this value (`init = "const"`, `value = 1.5`).
    Const(f64),
}

/// What the harness does with a buffer after the launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BufferRole {
    /// Log-sum-exp per query row, `[batch, heads_q, seq_q]`: checked against the reference.
    Lse,
}

/// An extra buffer as declared (`[[buffers]]`).
#[derive(Clone, Debug, PartialEq)]
pub struct BufferSpec {
    /// Name used by `{ ptr = "name" }` arguments.
    pub name: String,
    /// Element count, an integer expression.
    pub count: String,
    /// Element type.
    pub dtype: BufferDtype,
    /// Initial contents.
    pub init: BufferInit,
    /// Checked output, or `None` for scratch.
    pub role: Option<BufferRole>,
}

/// One kernel argument as declared, in order.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgSpec {
    /// Device pointer to a tensor (`q`, `k`, `v`, `o`) or a declared buffer.
    Ptr(String),
    /// 32-bit signed integer expression.
    I32(#[serde(deserialize_with = "load::expression")] String),
    /// 64-bit signed integer expression.
    I64(#[serde(deserialize_with = "load::expression")] String),
    /// 32-bit float expression.
    F32(#[serde(deserialize_with = "load::expression")] String),
}

/// The launch as declared (`[launch]`).
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchSpec {
    /// Grid size `[x, y, z]`, integer expressions.
    pub grid: [String; 3],
    /// Block size `[x, y, z]`, integer expressions.
    pub block: [String; 3],
    /// Dynamic shared memory in bytes, an integer expression (`"0"` when not given).
    pub shared_bytes: String,
    /// Watchdog override in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Kernel arguments in order.
    pub args: Vec<ArgSpec>,
}

/// A loaded and validated kernel manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// The manifest file as given to [`Manifest::load`].
    pub path: PathBuf,
    /// Kernel name (used in cases, seeds and reports).
    pub name: String,
    /// One-line description.
    pub description: String,
    /// The `.cu` file: the manifest's `source` joined to the manifest's directory (absolute if
    /// the manifest path was, else relative to the current directory).
    pub source: PathBuf,
    /// `extern "C"` entry point.
    pub entry: String,
    /// Whether a plain `cudafuzz fuzz` (no `--kernel`) picks this kernel; `fuzz = false` in the
    /// manifest marks helpers such as the fp64 reference. Defaults to `true`.
    pub fuzz: bool,
    /// Extra NVRTC options.
    pub options: Vec<String>,
    /// Fixed `-D NAME=VALUE` defines.
    pub defines: BTreeMap<String, i64>,
    /// Tunable `-D` parameters and the values to fuzz (each list non-empty).
    pub params: BTreeMap<String, Vec<i64>>,
    /// Declared preconditions.
    pub contract: Contract,
    /// Extra buffers, in declaration order.
    pub buffers: Vec<BufferSpec>,
    /// Launch geometry and arguments.
    pub launch: LaunchSpec,
}

impl Manifest {
    /// What the case decoder needs: the kernel, its params, its dtypes and its contract, so
    /// that decoded cases lie inside the contract ([`DecodeContext::unconstrained`] drops it to
    /// explore outside). Raw libFuzzer inputs replay through this same context.
    ///
    /// The kernel is written into decoded cases as the manifest's path (as given to
    /// [`Manifest::load`]), so a seed replays the same kernel even when it is not a shipped one.
    pub fn decode_context(&self) -> DecodeContext {
        DecodeContext {
            kernel: self.path.display().to_string(),
            params: self.params.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            dtypes: self.contract.dtypes.clone(),
            contract: Some(self.contract.clone()),
        }
    }

    /// A case ready for this kernel: the default of every param it does not set filled in, and
    /// the kernel named (as the manifest's path) when it names none.
    pub fn bind(&self, mut case: Case) -> Case {
        for (k, v) in self.default_params() {
            case.params.entry(k).or_insert(v);
        }
        if case.kernel.is_empty() {
            case.kernel = self.path.display().to_string();
        }
        case
    }

    /// The first listed value of every param.
    pub fn default_params(&self) -> BTreeMap<String, i64> {
        self.params.iter().map(|(k, v)| (k.clone(), v[0])).collect()
    }

    /// Every combination of param values (the cartesian product), in a fixed order; a single
    /// empty map when the manifest has no params.
    pub fn param_combinations(&self) -> Vec<BTreeMap<String, i64>> {
        cartesian(self.params.iter().map(|(name, values)| (name.as_str(), values.as_slice())))
    }

    /// A small case inside the contract (from [`Case::example`]) with default params: what
    /// [`Manifest::load`] evaluates every expression against.
    pub fn sample_case(&self) -> Case {
        let c = &self.contract;
        let mut case = Case::example(&self.name);
        case.dtype = c.dtypes[0];
        case.params = self.default_params();
        let m = c.head_dim_multiple.max(1);
        let mut d = case.head_dim.clamp(c.head_dim[0], c.head_dim[1]) / m * m;
        if d < c.head_dim[0] {
            d += m;
        }
        case.head_dim = d;
        case.seq_q = case.seq_q.clamp(c.seq_q[0], c.seq_q[1]);
        case.seq_k = case.seq_k.clamp(c.seq_k[0], c.seq_k[1]);
        if !c.gqa {
            case.heads_kv = case.heads_q;
        }
        case.scale = 1.0 / (case.head_dim as f32).sqrt();
        case
    }
}

/// Every `*.toml` under `dir` (recursively) whose top level has both `entry` and `source`
/// keys, sorted. Unreadable files and directories are skipped.
pub fn find_manifests(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "toml") {
                let is_manifest = std::fs::read_to_string(&p)
                    .ok()
                    .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
                    .is_some_and(|t| t.contains_key("entry") && t.contains_key("source"));
                if is_manifest {
                    out.push(p);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// Every assignment of one value to each name (the cartesian product), in the order given; a
/// single empty map when there are no names.
pub fn cartesian<'a>(params: impl IntoIterator<Item = (&'a str, &'a [i64])>) -> Vec<BTreeMap<String, i64>> {
    let mut out = vec![BTreeMap::new()];
    for (name, values) in params {
        out = out
            .into_iter()
            .flat_map(|base| {
                values.iter().map(move |&v| {
                    let mut m = base.clone();
                    m.insert(name.to_string(), v);
                    m
                })
            })
            .collect();
    }
    out
}
