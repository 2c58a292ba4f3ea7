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

mod expr;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::Deserialize;
use thiserror::Error;

use crate::case::{Case, TensorId, MAX_DIM, MAX_HEAD_DIM, MAX_SPAN_BYTES};
use crate::generate::DecodeContext;
use crate::plan::{Contract, Plan};

use expr::{Env, ExprFailure};

/// A manifest that cannot be used, or a case a manifest cannot be resolved for.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The file could not be read.
    #[error("{path}: cannot read manifest")]
    Io {
        /// The manifest file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{path}: invalid toml: {message}")]
    Syntax {
        /// The manifest file.
        path: PathBuf,
        /// The TOML parser's message, with line and column.
        message: String,
    },
    /// A field is missing, unknown, out of range or inconsistent.
    #[error("{path}: field {field}: {problem}")]
    Invalid {
        /// The manifest file.
        path: PathBuf,
        /// Dotted field, e.g. `launch.args[3]` or `contract.head_dim`.
        field: String,
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// An expression does not parse, names an unknown variable, or evaluates to something
    /// unusable (a float where an integer is needed, a negative size, an overflow).
    #[error("{path}: field {field}: {problem} in expression \"{expr}\"{hint}")]
    Expr {
        /// The manifest file.
        path: PathBuf,
        /// Dotted field, e.g. `launch.grid[0]`.
        field: String,
        /// The expression as written.
        expr: String,
        /// What is wrong.
        problem: String,
        /// Known names or the fix, starting with its own separator.
        hint: String,
    },
    /// An `i32` kernel argument evaluates to a value outside `i32` for this case: the kernel
    /// would receive a wrapped number. This is a property of the case *and* the kernel's
    /// interface, so it is its own variant for callers to report as a finding.
    #[error("{path}: field launch.args[{index}]: i32 argument {index} \"{expr}\" evaluates to {value}, which does not fit in i32 (the kernel would see {wrapped}); pass it as {{ i64 = ... }} to a 64-bit parameter, or narrow the contract")]
    I32Overflow {
        /// The manifest file.
        path: PathBuf,
        /// Position of the argument in `launch.args` (0-based).
        index: usize,
        /// The expression as written.
        expr: String,
        /// The exact value.
        value: i64,
        /// What a C cast to `int` would have produced.
        wrapped: i32,
    },
}

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
    I32(#[serde(deserialize_with = "expression")] String),
    /// 64-bit signed integer expression.
    I64(#[serde(deserialize_with = "expression")] String),
    /// 32-bit float expression.
    F32(#[serde(deserialize_with = "expression")] String),
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

/// One extra buffer, sized for a concrete case.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedBuffer {
    /// Name from the manifest.
    pub name: String,
    /// Element count.
    pub count: u64,
    /// Element type.
    pub dtype: BufferDtype,
    /// Initial contents.
    pub init: BufferInit,
    /// Checked output, or `None` for scratch.
    pub role: Option<BufferRole>,
}

impl ResolvedBuffer {
    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.count * self.dtype.size() as u64
    }
}

/// One kernel argument with its value for a concrete case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ResolvedArg {
    /// Device pointer to a tensor.
    Tensor(TensorId),
    /// Device pointer to `ResolvedLaunch::buffers[i]`.
    Buffer(usize),
    /// 32-bit signed integer.
    I32(i32),
    /// 64-bit signed integer.
    I64(i64),
    /// 32-bit float.
    F32(f32),
}

/// Everything needed to launch a kernel for one case.
///
/// Hardware limits (block ≤ 1024 threads, grid y/z ≤ 65535, shared memory per block) are left
/// to the driver, which reports them at launch as resource errors.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedLaunch {
    /// Grid size; every component ≥ 1.
    pub grid: [u32; 3],
    /// Block size; every component ≥ 1.
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes.
    pub shared_bytes: u32,
    /// Watchdog override in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Extra buffers, in declaration order.
    pub buffers: Vec<ResolvedBuffer>,
    /// Kernel arguments in order.
    pub args: Vec<ResolvedArg>,
}

// ---------------------------------------------------------------------------------------------
// Raw TOML shapes. Each section is decoded on its own so that errors can name the field.

const TOP_LEVEL_KEYS: [&str; 11] = [
    "name", "description", "source", "entry", "fuzz", "options", "defines", "params", "contract",
    "buffers", "launch",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBuffer {
    name: String,
    #[serde(deserialize_with = "expression")]
    count: String,
    dtype: BufferDtype,
    init: RawInit,
    value: Option<f64>,
    role: Option<BufferRole>,
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
enum RawInit {
    Zero,
    NegInf,
    Uninit,
    Const,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLaunch {
    grid: Vec<Expression>,
    block: Vec<Expression>,
    #[serde(default)]
    shared_bytes: Option<Expression>,
    timeout_ms: Option<u64>,
    args: Vec<toml::Value>,
}

/// An expression written as a string or a bare number.
struct Expression(String);

impl<'de> Deserialize<'de> for Expression {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        expression(d).map(Expression)
    }
}

fn expression<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an expression string such as \"cdiv(seq_q, 64)\", or a number")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
            Ok(format!("{v:?}"))
        }
    }
    d.deserialize_any(V)
}

// ---------------------------------------------------------------------------------------------

impl Manifest {
    /// Reads, decodes and validates a manifest.
    ///
    /// Besides the schema (unknown keys are errors), this checks that the source file exists,
    /// that names are C identifiers, that pointer arguments name a tensor or a declared buffer,
    /// that the contract's ranges are sane, and that every expression parses, names only known
    /// variables and evaluates cleanly for a sample case inside the contract (default params).
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ManifestError::Io { path: path.to_path_buf(), source })?;
        Manifest::from_toml(path, &text)
    }

    /// Like [`Manifest::load`], but with the file's text given (the source file must exist).
    pub fn from_toml(path: &Path, text: &str) -> Result<Manifest, ManifestError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ManifestError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let l = Loader { path };
        for key in table.keys() {
            if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
                return Err(l.invalid(
                    key,
                    format!("unknown key; remove it or use one of {}", TOP_LEVEL_KEYS.join(", ")),
                ));
            }
        }
        let mut table = table;
        let mut take = |key: &str| table.remove(key);

        let name: String = l.required(take("name"), "name", "name = \"my_attn\"")?;
        if name.trim().is_empty() || name.chars().any(|c| c.is_whitespace() || c == '/') {
            return Err(l.invalid("name", format!("{name:?} is not a usable kernel name; use letters, digits, `_` and `-`")));
        }
        let description: String = l.optional(take("description"), "description")?.unwrap_or_default();
        let source_rel: String = l.required(take("source"), "source", "source = \"my_attn.cu\"")?;
        let dir = path.parent().unwrap_or(Path::new(""));
        let source = dir.join(&source_rel);
        if !source.is_file() {
            return Err(l.invalid(
                "source",
                format!(
                    "{} does not exist; give the .cu file's path relative to the manifest's directory",
                    source.display()
                ),
            ));
        }
        let entry: String = l.required(take("entry"), "entry", "entry = \"my_attn_fwd\"")?;
        if !expr::is_identifier(&entry) {
            return Err(l.invalid("entry", format!("{entry:?} is not a C identifier; name the `extern \"C\" __global__` function")));
        }
        let fuzz: bool = l.optional(take("fuzz"), "fuzz")?.unwrap_or(true);
        let options: Vec<String> = l.optional(take("options"), "options")?.unwrap_or_default();
        for (i, o) in options.iter().enumerate() {
            let arch_opt = ["-arch", "--gpu-architecture", "--gpu-name"].iter().any(|p| o.starts_with(p));
            if arch_opt {
                return Err(l.invalid(&format!("options[{i}]"), format!("{o:?} sets the architecture, which cudafuzz chooses per run (--arch); remove it")));
            }
            if o.trim().is_empty() {
                return Err(l.invalid(&format!("options[{i}]"), "empty option; remove it".into()));
            }
        }
        let defines: BTreeMap<String, i64> = l.optional(take("defines"), "defines")?.unwrap_or_default();
        for name in defines.keys() {
            l.check_define_name("defines", name)?;
        }
        let params: BTreeMap<String, Vec<i64>> = l.optional(take("params"), "params")?.unwrap_or_default();
        for (name, values) in &params {
            l.check_define_name("params", name)?;
            let field = format!("params.{name}");
            if defines.contains_key(name) {
                return Err(l.invalid(&field, format!("`{name}` is also a fixed define; keep it in one of [defines] and [params]")));
            }
            if values.is_empty() {
                return Err(l.invalid(&field, "no values; list at least one, e.g. [64]".into()));
            }
            let distinct: BTreeSet<_> = values.iter().collect();
            if distinct.len() != values.len() {
                return Err(l.invalid(&field, format!("{values:?} lists a value twice; remove the duplicate")));
            }
        }
        let contract: Contract = l.required(
            take("contract"),
            "contract",
            "a [contract] table (dtypes, head_dim, seq_q, seq_k, ...)",
        )?;
        l.check_contract(&contract)?;

        let raw_buffers: Vec<toml::Value> = l.optional(take("buffers"), "buffers")?.unwrap_or_default();
        let mut buffers = Vec::new();
        for (i, v) in raw_buffers.into_iter().enumerate() {
            let field = format!("buffers[{i}]");
            let raw: RawBuffer = l.decode(v, &field)?;
            if !expr::is_identifier(&raw.name) {
                return Err(l.invalid(&format!("{field}.name"), format!("{:?} is not an identifier; use letters, digits and `_`", raw.name)));
            }
            if TensorId::from_name(&raw.name).is_some() {
                return Err(l.invalid(&format!("{field}.name"), format!("`{}` is a tensor name; rename the buffer", raw.name)));
            }
            if buffers.iter().any(|b: &BufferSpec| b.name == raw.name) {
                return Err(l.invalid(&format!("{field}.name"), format!("buffer `{}` is declared twice; rename one", raw.name)));
            }
            let init = match (raw.init, raw.value) {
                (RawInit::Const, Some(v)) => BufferInit::Const(v),
                (RawInit::Const, None) => {
                    return Err(l.invalid(&format!("{field}.value"), "init = \"const\" needs a value; add e.g. `value = 1.5`".into()))
                }
                (_, Some(_)) => {
                    return Err(l.invalid(&format!("{field}.value"), "a value is only used with init = \"const\"; remove it or set init = \"const\"".into()))
                }
                (RawInit::Zero, None) => BufferInit::Zero,
                (RawInit::NegInf, None) => BufferInit::NegInf,
                (RawInit::Uninit, None) => BufferInit::Uninit,
            };
            if raw.role == Some(BufferRole::Lse) && !matches!(raw.dtype, BufferDtype::F32 | BufferDtype::F64) {
                return Err(l.invalid(&format!("{field}.dtype"), format!("an lse buffer must be f32 or f64, not {}", raw.dtype)));
            }
            buffers.push(BufferSpec { name: raw.name, count: raw.count, dtype: raw.dtype, init, role: raw.role });
        }

        let raw_launch: RawLaunch = l.required(take("launch"), "launch", "a [launch] table (grid, block, args)")?;
        let three = |v: Vec<Expression>, field: &str| -> Result<[String; 3], ManifestError> {
            let n = v.len();
            let arr: [Expression; 3] = v.try_into().map_err(|_| {
                l.invalid(field, format!("lists {n} expressions; give exactly 3, [x, y, z], e.g. [\"cdiv(seq_q, 64)\", \"heads_q\", \"batch\"]"))
            })?;
            Ok(arr.map(|e| e.0))
        };
        let grid = three(raw_launch.grid, "launch.grid")?;
        let block = three(raw_launch.block, "launch.block")?;
        let mut args = Vec::new();
        for (i, v) in raw_launch.args.into_iter().enumerate() {
            let field = format!("launch.args[{i}]");
            let arg: ArgSpec = l.decode(v, &field)?;
            if let ArgSpec::Ptr(name) = &arg {
                if TensorId::from_name(name).is_none() && !buffers.iter().any(|b| &b.name == name) {
                    let mut known: Vec<&str> = TensorId::ALL.iter().map(|t| t.name()).collect();
                    known.extend(buffers.iter().map(|b| b.name.as_str()));
                    return Err(l.invalid(
                        &field,
                        format!("pointer `{name}` is neither a tensor nor a declared buffer (known: {}); declare it under [[buffers]] or fix the name", known.join(", ")),
                    ));
                }
            }
            args.push(arg);
        }
        let launch = LaunchSpec {
            grid,
            block,
            shared_bytes: raw_launch.shared_bytes.map(|e| e.0).unwrap_or_else(|| "0".into()),
            timeout_ms: raw_launch.timeout_ms,
            args,
        };
        if launch.timeout_ms == Some(0) {
            return Err(l.invalid("launch.timeout_ms", "0 ms would time out every launch; remove it or give a positive value".into()));
        }

        let manifest = Manifest {
            path: path.to_path_buf(),
            name,
            description,
            source,
            entry,
            fuzz,
            options,
            defines,
            params,
            contract,
            buffers,
            launch,
        };
        let sample = manifest.sample_case();
        manifest.resolve(&sample, &Plan::new(&sample))?;
        Ok(manifest)
    }

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

    /// Checks that `params` sets exactly the declared params, each to one of its listed values.
    pub fn check_params(&self, params: &BTreeMap<String, i64>) -> Result<(), ManifestError> {
        let l = Loader { path: &self.path };
        for (name, value) in params {
            match self.params.get(name) {
                None => {
                    let declared: Vec<&str> = self.params.keys().map(|s| s.as_str()).collect();
                    return Err(l.invalid(
                        "params",
                        format!("`{name}` is not a declared param (declared: {}); remove it from the case or declare it in the manifest", if declared.is_empty() { "none".to_string() } else { declared.join(", ") }),
                    ));
                }
                Some(values) if !values.contains(value) => {
                    return Err(l.invalid(
                        &format!("params.{name}"),
                        format!("value {value} is not one of {values:?}; use one of them or add {value} to the manifest"),
                    ));
                }
                Some(_) => {}
            }
        }
        for (name, values) in &self.params {
            if !params.contains_key(name) {
                return Err(l.invalid(&format!("params.{name}"), format!("the case does not set it; set one of {values:?}")));
            }
        }
        Ok(())
    }

    /// Evaluates the launch for one case.
    ///
    /// Params come from `case.params`, with the default of any param the case does not set; a
    /// case param the manifest does not declare is an error. Values outside the declared lists
    /// are allowed here (see [`Manifest::check_params`] for the strict check).
    pub fn resolve(&self, case: &Case, plan: &Plan) -> Result<ResolvedLaunch, ManifestError> {
        let l = Loader { path: &self.path };
        let mut params = self.default_params();
        for (name, &value) in &case.params {
            if !self.params.contains_key(name) {
                return Err(l.invalid(
                    "params",
                    format!("the case sets `{name}`, which the manifest does not declare; remove it from the case or declare it under [params]"),
                ));
            }
            params.insert(name.clone(), value);
        }
        let env = Env::new(case, plan, &params, &self.defines);
        let err = |field: String, expr: &str, f: ExprFailure| ManifestError::Expr {
            path: self.path.clone(),
            field,
            expr: expr.to_string(),
            problem: f.problem,
            hint: f.hint,
        };
        let dim = |exprs: &[String; 3], name: &str| -> Result<[u32; 3], ManifestError> {
            let mut out = [0u32; 3];
            for (i, e) in exprs.iter().enumerate() {
                let field = format!("launch.{name}[{i}]");
                let v = env.size(e, u32::MAX as u64, name).map_err(|f| err(field.clone(), e, f))?;
                if v == 0 {
                    return Err(err(
                        field,
                        e,
                        ExprFailure { problem: format!("{name} evaluates to 0"), hint: "; a launch needs at least 1 (use max(1, ...))".into() },
                    ));
                }
                out[i] = v as u32;
            }
            Ok(out)
        };
        let grid = dim(&self.launch.grid, "grid")?;
        let block = dim(&self.launch.block, "block")?;
        let shared_bytes = env
            .size(&self.launch.shared_bytes, u32::MAX as u64, "shared memory size")
            .map_err(|f| err("launch.shared_bytes".into(), &self.launch.shared_bytes, f))? as u32;
        let mut buffers = Vec::with_capacity(self.buffers.len());
        for (i, b) in self.buffers.iter().enumerate() {
            let max = MAX_SPAN_BYTES / b.dtype.size() as u64;
            let count = env
                .size(&b.count, max, "element count")
                .map_err(|f| err(format!("buffers[{i}].count"), &b.count, f))?;
            buffers.push(ResolvedBuffer { name: b.name.clone(), count, dtype: b.dtype, init: b.init, role: b.role });
        }
        let mut args = Vec::with_capacity(self.launch.args.len());
        for (i, a) in self.launch.args.iter().enumerate() {
            let field = || format!("launch.args[{i}]");
            args.push(match a {
                ArgSpec::Ptr(name) => match TensorId::from_name(name) {
                    Some(t) => ResolvedArg::Tensor(t),
                    None => match self.buffers.iter().position(|b| &b.name == name) {
                        Some(j) => ResolvedArg::Buffer(j),
                        None => return Err(l.invalid(&field(), format!("pointer `{name}` is neither a tensor nor a declared buffer; declare it under [[buffers]]"))),
                    },
                },
                ArgSpec::I32(e) => {
                    let v = env.int(e).map_err(|f| err(field(), e, f))?;
                    match i32::try_from(v) {
                        Ok(x) => ResolvedArg::I32(x),
                        Err(_) => {
                            return Err(ManifestError::I32Overflow {
                                path: self.path.clone(),
                                index: i,
                                expr: e.clone(),
                                value: v,
                                wrapped: v as i32,
                            })
                        }
                    }
                }
                ArgSpec::I64(e) => ResolvedArg::I64(env.int(e).map_err(|f| err(field(), e, f))?),
                ArgSpec::F32(e) => {
                    let v = env.float(e).map_err(|f| err(field(), e, f))?;
                    let x = v as f32;
                    if v.is_finite() && !x.is_finite() {
                        return Err(err(field(), e, ExprFailure { problem: format!("evaluates to {v}, which overflows f32"), hint: "; pass it as { i64 = ... } or rescale it".into() }));
                    }
                    ResolvedArg::F32(x)
                }
            });
        }
        Ok(ResolvedLaunch { grid, block, shared_bytes, timeout_ms: self.launch.timeout_ms, buffers, args })
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

/// Error construction and section decoding for one manifest file.
struct Loader<'a> {
    path: &'a Path,
}

impl Loader<'_> {
    fn invalid(&self, field: &str, problem: String) -> ManifestError {
        ManifestError::Invalid { path: self.path.to_path_buf(), field: field.to_string(), problem }
    }

    fn decode<T: DeserializeOwned>(&self, v: toml::Value, field: &str) -> Result<T, ManifestError> {
        T::deserialize(v).map_err(|e| {
            let msg = e.message().trim_end().to_string();
            self.invalid(field, format!("{msg}; see the manifest schema in DESIGN.md (Kernel manifest)"))
        })
    }

    fn required<T: DeserializeOwned>(&self, v: Option<toml::Value>, field: &str, example: &str) -> Result<T, ManifestError> {
        match v {
            Some(v) => self.decode(v, field),
            None => Err(self.invalid(field, format!("missing; add {example}"))),
        }
    }

    fn optional<T: DeserializeOwned>(&self, v: Option<toml::Value>, field: &str) -> Result<Option<T>, ManifestError> {
        v.map(|v| self.decode(v, field)).transpose()
    }

    fn check_define_name(&self, section: &str, name: &str) -> Result<(), ManifestError> {
        let field = format!("{section}.{name}");
        if !expr::is_identifier(name) {
            return Err(self.invalid(&field, format!("`{name}` is not a C identifier, so it cannot be a -D define; rename it")));
        }
        if expr::is_reserved(name) {
            return Err(self.invalid(&field, format!("`{name}` is reserved (a case variable, function, tensor or CUDAFUZZ_ define); rename it")));
        }
        Ok(())
    }

    fn check_contract(&self, c: &Contract) -> Result<(), ManifestError> {
        if c.dtypes.is_empty() {
            return Err(self.invalid("contract.dtypes", "empty; list at least one of \"f16\", \"bf16\", \"f32\"".into()));
        }
        let distinct: BTreeSet<_> = c.dtypes.iter().collect();
        if distinct.len() != c.dtypes.len() {
            return Err(self.invalid("contract.dtypes", "lists a dtype twice; remove the duplicate".into()));
        }
        for (field, [lo, hi], max) in [
            ("contract.head_dim", c.head_dim, MAX_HEAD_DIM),
            ("contract.seq_q", c.seq_q, MAX_DIM),
            ("contract.seq_k", c.seq_k, MAX_DIM),
        ] {
            if lo == 0 || lo > hi || hi > max {
                return Err(self.invalid(field, format!("[{lo}, {hi}] is not a range within 1..={max}; write [min, max] with 1 <= min <= max <= {max}")));
            }
        }
        let m = c.head_dim_multiple;
        if m == 0 {
            return Err(self.invalid("contract.head_dim_multiple", "0; use 1 for any head_dim".into()));
        }
        if c.head_dim[1] / m * m < c.head_dim[0] {
            return Err(self.invalid(
                "contract.head_dim_multiple",
                format!("no multiple of {m} lies in head_dim [{}, {}]; widen the range or lower the multiple", c.head_dim[0], c.head_dim[1]),
            ));
        }
        if !c.min_align.is_power_of_two() || c.min_align > 256 {
            return Err(self.invalid("contract.min_align", format!("{} is not a power of two up to 256; use 1, 2, 4, 8 or 16", c.min_align)));
        }
        Ok(())
    }
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
