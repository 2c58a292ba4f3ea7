//! Kernel manifests: the TOML file next to a `.cu` that tells cudafuzz how to build, feed, launch
//! and judge a kernel without any Rust code. The main type is [`Manifest`].
//!
//! A manifest (format 2) describes a kernel as a roster of **named tensors over named dims**:
//!
//! * the source, `extern "C"` entry point, fixed `-D` defines and tunable params;
//! * the element types it accepts (`dtypes`), the case's element type being one of them;
//! * **dims** ([`DimSpec`]): integer ranges, a multiple, boundary hints; **relations** between
//!   them: `requires` (what makes a case well formed, never violated) and the contract's
//!   `relations` (what the author believes, kept by default, probed past on request);
//! * **scalars** ([`ScalarSpec`]): flags, integers and floats drawn from choices or ranges;
//! * **tensors** ([`TensorSpec`]): name, role (input, output, in-out, scratch), shape (dims or
//!   expressions), dtype (the case's or fixed), layout freedom, broadcast, minimum alignment,
//!   value classes (inputs) or initial contents (outputs);
//! * the **reference** ([`ReferenceSpec`]): a built-in op bound to tensors by name, or a naive
//!   reference kernel of the user's over the same roster;
//! * the **launch**: grid, block, dynamic shared memory and the ordered argument list, as
//!   expressions over dims, scalars, params and tensors (`cdiv(seq_q, BLOCK_M)`, `q.stride(2)`,
//!   `scale`), evaluated by the `evalexpr` crate (the `expr` submodule lists the names).
//!
//! Everything that can be checked without a GPU is checked in [`Manifest::load`]: unknown keys
//! (named in full, `tensors.q.shape`), missing sources, expressions that do not parse or name
//! unknown variables, every expression evaluated for every parameter combination at the dims'
//! range ends and hints, and each combination's block and shared memory against the target
//! GPUs' limits (`check`). A manifest of
//! format 1 (attention only) is refused with the command that converts it
//! (`cudafuzz manifest migrate OLD.toml`, [`migrate`]).
//!
//! The module is split by job: this file holds the model; `ops` the built-in ops' roles;
//! `error` the one error type; `load`
//! the TOML decoding, one function per section; `check` the checks over every parameter
//! combination; `expr` expression evaluation; `resolve` the
//! evaluation of the launch for one case; `migrate` the format-1 converter.

mod check;
pub mod entry;
mod error;
pub mod expr;
mod launch;
pub mod lengths;
mod load;
pub mod migrate;
mod ops;
mod options;
mod reference;
mod resolve;
mod target;
mod tensors;

pub use check::{params_text, ArchLimits, LaunchNeeds, DEFAULT_TARGETS};
pub use error::ManifestError;
pub use expr::{TensorVars, Vars};
pub use lengths::{Derive, LengthsSpec};
pub use ops::{BuiltinOp, OpSpec, Rank, ScalarRole, TensorRole};
pub use resolve::{ResolvedArg, ResolvedLaunch};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::case::{Case, Dtype, Scalar, ValueClass};
use crate::core::target::Target;

/// The manifest format this build reads.
pub const MANIFEST_FORMAT: u32 = 2;

/// A boundary hint of a dim: a value, or a param whose values are tile sizes. The decoder biases
/// toward each hint and one either side of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hint {
    /// A fixed value.
    Value(u64),
    /// Every value of a param (or a define).
    Param(String),
}

/// One named dim.
#[derive(Clone, Debug, PartialEq)]
pub struct DimSpec {
    /// The name expressions and tensors use.
    pub name: String,
    /// The contract's inclusive range.
    pub range: [u64; 2],
    /// The contract's multiple (1: any).
    pub multiple: u64,
    /// Largest value a case may name at all (outside the contract included).
    pub max: u64,
    /// Largest value drawn at random; hints and range edges above it are still drawn up to
    /// `max(cap, range[0])`, so long shapes stay rare without going untested.
    pub cap: u64,
    /// Values to bias toward.
    pub hints: Vec<Hint>,
}

/// The type of a scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScalarType {
    /// A flag: `true`/`false`, 0/1 in expressions.
    Bool,
    /// A 64-bit integer.
    Int,
    /// A float (f32 unless an argument converts it otherwise).
    F32,
}

/// One choice of a scalar: a literal, or an expression over dims (`1 / sqrt(head_dim)`).
#[derive(Clone, Debug, PartialEq)]
pub enum ScalarChoice {
    /// A fixed value.
    Value(Scalar),
    /// An expression evaluated for each case.
    Expr(String),
}

/// One named scalar.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalarSpec {
    /// The name expressions use.
    pub name: String,
    /// Its type.
    pub ty: ScalarType,
    /// The contract's choices (empty: any value of the type, or `range`).
    pub choices: Vec<ScalarChoice>,
    /// Relative weights of the choices (empty: equal).
    pub weights: Vec<u32>,
    /// The contract's inclusive range: drawn from when there are no choices, and accepted
    /// beside them when there are (choices drawn, any value in the range allowed).
    pub range: Option<[f64; 2]>,
}

/// What the kernel does with a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Read only: generated values; must be unchanged after the launch.
    Input,
    /// Written: initial contents set by `init`, judged against the reference.
    Output,
    /// Read and written (an accumulator, a side buffer updated in place): initial contents set
    /// by `init`, judged against the reference.
    InOut,
    /// The kernel's working memory: initial contents set by `init`, never judged (its redzones
    /// still are).
    Scratch,
}

impl Role {
    /// Whether the kernel may write it.
    pub fn is_written(self) -> bool {
        !matches!(self, Role::Input)
    }

    /// Whether its contents are judged against the reference.
    pub fn is_judged(self) -> bool {
        matches!(self, Role::Output | Role::InOut)
    }

    /// The name used in manifests.
    pub fn name(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Output => "output",
            Role::InOut => "in_out",
            Role::Scratch => "scratch",
        }
    }
}

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DtypeSpec {
    /// The case's element type.
    Case,
    /// Always this type (fp32 side buffers, int32 indices).
    Fixed(Dtype),
}

impl DtypeSpec {
    /// The concrete type for a case of element type `case`.
    pub fn resolve(self, case: Dtype) -> Dtype {
        match self {
            DtypeSpec::Case => case,
            DtypeSpec::Fixed(d) => d,
        }
    }

    /// The fixed type, `None` for the case's.
    pub fn fixed(self) -> Option<Dtype> {
        match self {
            DtypeSpec::Case => None,
            DtypeSpec::Fixed(d) => Some(d),
        }
    }
}

/// How freely the caller may lay a tensor out (the contract's layout kind).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayoutFreedom {
    /// Dense at offset 0, always: the harness allocates it the way every caller does (a side
    /// buffer the kernel's host code would allocate itself). Never varied, never probed.
    Fixed,
    /// Only the shape's own order, unpadded (any base offset the alignment allows).
    Dense,
    /// Any order and padding of the outer dims; the innermost dim has stride 1.
    Inner,
    /// Any element strides.
    #[default]
    Strided,
}

/// The initial contents of an output, in-out or scratch tensor.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Init {
    /// A NaN sentinel (integers: a fixed bit pattern): elements left holding it were never
    /// written.
    Sentinel,
    /// All zero: a caller that zero-fills an accumulator.
    Zero,
    /// Every element `-inf` (integers: their minimum).
    NegInf,
    /// Every element this value.
    Const(f64),
    /// Drawn like an input (an in-out tensor's old contents).
    Drawn,
    /// Left as the allocator returned it (initcheck sees reads of it).
    Uninit,
}

impl Init {
    /// Whether elements left unwritten can be told from written ones (the sentinel).
    pub fn marks_unwritten(self) -> bool {
        matches!(self, Init::Sentinel)
    }
}

/// One tensor of the roster.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    /// The name cases, expressions and findings use.
    pub name: String,
    /// What the kernel does with it.
    pub role: Role,
    /// Extent of each dimension, outermost first: a dim name or an integer expression.
    pub shape: Vec<String>,
    /// Element type.
    pub dtype: DtypeSpec,
    /// The contract's layout kind.
    pub layout: LayoutFreedom,
    /// Whether stride-0 (broadcast) dims are allowed (inputs only).
    pub broadcast: bool,
    /// The contract's minimum alignment of the base and every stepped stride, in bytes; never
    /// less than the element size.
    pub align: u32,
    /// The contract's alignment of the base alone, in bytes, when the host guarantees more for
    /// the base pointer than for the strides (an allocator's 16 bytes, any row pitch); never
    /// less than [`TensorSpec::align`]. [`TensorSpec::base_alignment`] is the one to use.
    pub base_align: u32,
    /// Value classes the contract allows (inputs; outputs whose `init` is drawn).
    pub values: Vec<ValueClass>,
    /// Initial contents (outputs, in-outs, scratch).
    pub init: Init,
    /// Inclusive value range, as expressions: an integer tensor draws uniformly in it; a floating
    /// one draws `uniform` over it, and its other finite classes are folded into it (the
    /// magnitude, where the range has one sign) and clamped.
    pub range: Option<[String; 2]>,
    /// Whether the output's bits depend on the order of the kernel's writes (atomics, split-K,
    /// an autotuner's choice): judged by the tolerance, never compared bit for bit between two
    /// runs. Racecheck still runs.
    pub order_dependent: bool,
    /// How many elements the caller allocates from the tensor's base, as an expression, when
    /// more than the tensor holds (a buffer sized for the largest image): the bytes past the
    /// tensor up to it are a don't-care tail the kernel may read and write, never judged; past
    /// it the redzone begins. Only `dense` and `fixed` tensors.
    pub capacity: Option<String>,
    /// Where an index tensor's values come from when the caller derives them from a list of
    /// lengths (`cu_seqlens`, page tables) rather than drawing them.
    pub derive: Option<Derive>,
    /// Whether an integer tensor's values are pairwise distinct (slot mappings, scatter
    /// targets): drawn as a random injection into its range, so a correct kernel is never given
    /// the duplicate targets that would make it race. A case whose range is smaller than the
    /// tensor is refused.
    pub distinct: bool,
}

impl TensorSpec {
    /// The alignment the base must honour: `base_align`, or `align` when that is larger.
    pub fn base_alignment(&self) -> u32 {
        self.base_align.max(self.align)
    }

    /// The tensor's rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The dim that shape entry `i` names, when it is a bare dim name.
    pub fn dim_name(&self, i: usize) -> Option<&str> {
        let s = self.shape.get(i)?.trim();
        expr::is_identifier(s).then_some(s)
    }

    /// Whether a case chooses this tensor's layout and offset (every layout kind but
    /// `fixed`): the tensors whose alignment a finding's signature records.
    pub fn layout_is_drawn(&self) -> bool {
        self.layout != LayoutFreedom::Fixed
    }
}

/// A reference kernel of the user's: a naive kernel over the same roster, compiled twice, with
/// its floating tensors in f64 (the gold) and as the case has them (the same-precision
/// baseline), reading dense copies of the inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceKernel {
    /// The `.cu` file.
    pub source: PathBuf,
    /// Its `extern "C"` entry point.
    pub entry: String,
    /// Extra NVRTC options.
    pub options: Vec<String>,
    /// Its launch; the kernel's own grid, block and arguments where not given.
    pub launch: LaunchSpec,
    /// An output passes when its error against the gold is at most `factor` times the
    /// baseline's error plus the floor.
    pub factor: f64,
    /// An absolute floor for that bound; `None`: `4 · u · max |gold|` with `u` the
    /// element type's unit roundoff.
    pub floor: Option<f64>,
}

/// A `[reference] python = "module:callable"`: called like a Python target (the same keys), on
/// dense copies of the case's inputs, once with every floating tensor float64 and once in the
/// case's types; judged by the rule of a reference kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct PythonReference {
    /// The callable and how it is called.
    pub call: crate::core::target::PythonTarget,
    /// An output passes when its error against the gold is at most `factor` times the
    /// baseline's error plus the floor.
    pub factor: f64,
    /// An absolute floor for that bound; `None`: `4 · u · max |gold|` (u = 2⁻³² for f64).
    pub floor: Option<f64>,
}

/// What judges a kernel's outputs.
#[derive(Clone, Debug, PartialEq)]
pub enum ReferenceSpec {
    /// A built-in op; `bind` maps each of the op's roles to a tensor or scalar name.
    Op {
        /// The op.
        op: BuiltinOp,
        /// Role → name.
        bind: BTreeMap<String, String>,
    },
    /// The user's reference kernel.
    Kernel(Box<ReferenceKernel>),
    /// The user's Python reference: a callable run on float64 copies (the gold) and on copies
    /// in the case's types (the same-precision baseline).
    Python(Box<PythonReference>),
    /// None: only the memory oracles judge (a reference kernel's own manifest).
    None,
}

/// One kernel argument as declared, in order.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgSpec {
    /// Device pointer to a tensor (its first element).
    Ptr(String),
    /// 32-bit signed integer expression.
    I32(#[serde(deserialize_with = "load::expression")] String),
    /// 32-bit unsigned integer expression.
    U32(#[serde(deserialize_with = "load::expression")] String),
    /// 64-bit signed integer expression.
    I64(#[serde(deserialize_with = "load::expression")] String),
    /// 64-bit unsigned integer expression.
    U64(#[serde(deserialize_with = "load::expression")] String),
    /// 32-bit float expression.
    F32(#[serde(deserialize_with = "load::expression")] String),
    /// 64-bit float expression.
    F64(#[serde(deserialize_with = "load::expression")] String),
}

impl ArgSpec {
    /// The expression of a value argument (`None` for a pointer).
    pub fn expression(&self) -> Option<&String> {
        match self {
            ArgSpec::Ptr(_) => None,
            ArgSpec::I32(e) | ArgSpec::U32(e) | ArgSpec::I64(e) | ArgSpec::U64(e) | ArgSpec::F32(e) | ArgSpec::F64(e) => Some(e),
        }
    }

    /// Bytes the argument takes in the kernel's parameter list (a device pointer is 8).
    pub fn size_bytes(&self) -> u32 {
        match self {
            ArgSpec::I32(_) | ArgSpec::U32(_) | ArgSpec::F32(_) => 4,
            ArgSpec::Ptr(_) | ArgSpec::I64(_) | ArgSpec::U64(_) | ArgSpec::F64(_) => 8,
        }
    }

    /// The manifest's spelling: `ptr`, `i32`, ...
    pub fn type_name(&self) -> &'static str {
        match self {
            ArgSpec::Ptr(_) => "ptr",
            ArgSpec::I32(_) => "i32",
            ArgSpec::U32(_) => "u32",
            ArgSpec::I64(_) => "i64",
            ArgSpec::U64(_) => "u64",
            ArgSpec::F32(_) => "f32",
            ArgSpec::F64(_) => "f64",
        }
    }
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
    /// Whether the host raises the kernel's dynamic shared memory limit past 48 KiB
    /// (`cudaFuncSetAttribute(MaxDynamicSharedMemorySize)`) before a launch that needs it
    /// (default true). False describes a host that never does: such a launch is made as that
    /// host makes it, and the driver refuses it.
    pub shared_opt_in: bool,
    /// Watchdog override in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Kernel arguments in order.
    pub args: Vec<ArgSpec>,
    /// When the host launches nothing (`rows == 0`), a boolean expression. With it, grid and
    /// block may evaluate to 0 where it is false: that launch is made as the host makes it, and
    /// the driver refuses it (a host bug a case can find). Without it, they must be at least 1.
    pub skip: Option<String>,
}

/// A later launch of a launch sequence (`[[launch]]`): another `extern "C"` entry point of the
/// same source, launched after the ones before it on the same stream.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchStep {
    /// Its entry point.
    pub entry: String,
    /// Its launch.
    pub launch: LaunchSpec,
}

/// The contract terms that are not attached to one dim, scalar or tensor.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContractSpec {
    /// Relations between dims the author believes (`head_dim % 8 == 0`, `seq_q == seq_k`).
    pub relations: Vec<String>,
    /// Largest element offset (`Σ index · stride`) the kernel handles; `None` is no limit. A
    /// kernel that indexes in 32 bits declares `2147483647` here, and is then never given a
    /// case past 2³¹ elements.
    pub max_element_offset: Option<u64>,
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
    /// The `.cu` file, joined to the manifest's directory.
    pub source: PathBuf,
    /// The entry point as written: an `extern "C"` name or a C++ name expression with
    /// placeholders ([`entry`]; [`Manifest::entry_for`] fills them for one build).
    pub entry: String,
    /// Whether a plain `cudafuzz fuzz` (no `--kernel`) picks this kernel.
    pub fuzz: bool,
    /// Extra NVRTC options.
    pub options: Vec<String>,
    /// The element types the kernel accepts (the contract's; the first is the default).
    pub dtypes: Vec<Dtype>,
    /// Fixed `-D NAME=VALUE` defines.
    pub defines: BTreeMap<String, i64>,
    /// Tunable `-D` parameters and the values to fuzz (each list non-empty).
    pub params: BTreeMap<String, Vec<i64>>,
    /// The params the host derives from each case (`VEC = gcd(8, n)`): name to expression.
    /// Their declared values stay in `params` (every one is built); a case never stores them,
    /// its plan evaluates them ([`Manifest::derive_params`]).
    pub derived_params: BTreeMap<String, String>,
    /// Dims, in the order the decoder draws them.
    pub dims: Vec<DimSpec>,
    /// List-valued dims (`[lengths]`): each drawn right after its count dim.
    pub lengths: Vec<LengthsSpec>,
    /// Well-formedness relations between dims: never violated by any case.
    pub requires: Vec<String>,
    /// Scalars, in declaration order.
    pub scalars: Vec<ScalarSpec>,
    /// The tensor roster, in declaration order (the arena and the data streams follow it).
    pub tensors: Vec<TensorSpec>,
    /// Contract terms across dims and tensors.
    pub contract: ContractSpec,
    /// What judges the outputs.
    pub reference: ReferenceSpec,
    /// Launch geometry and arguments (an NVRTC target's; a Python target's has none).
    pub launch: LaunchSpec,
    /// The later launches of a launch sequence (`[[launch]]`), in order; empty for one launch.
    pub steps: Vec<LaunchStep>,
    /// How the module is made: NVRTC (default), nvcc or a prebuilt module.
    pub build: crate::core::target::Build,
    /// How the launch happens ([`crate::core::target`]): an NVRTC build of `source` launched as
    /// `launch` says, or a Python callable (then `source` is its module's file and `entry` is
    /// `module:function`).
    pub target: Target,
}

impl Manifest {
    /// A dim by name.
    pub fn dim(&self, name: &str) -> Option<&DimSpec> {
        self.dims.iter().find(|d| d.name == name)
    }

    /// A list of lengths by name.
    pub fn lengths_spec(&self, name: &str) -> Option<&LengthsSpec> {
        self.lengths.iter().find(|l| l.name == name)
    }

    /// A scalar by name.
    pub fn scalar(&self, name: &str) -> Option<&ScalarSpec> {
        self.scalars.iter().find(|s| s.name == name)
    }

    /// A tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorSpec> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A tensor's position in the roster.
    pub fn tensor_index(&self, name: &str) -> Option<usize> {
        self.tensors.iter().position(|t| t.name == name)
    }

    /// A case ready for this kernel: the default of every param it does not set filled in, and
    /// the kernel named (as the manifest's path) when it names none.
    pub fn bind(&self, mut case: Case) -> Case {
        for (k, v) in self.free_params() {
            case.params.entry(k).or_insert(v);
        }
        if case.kernel.is_empty() {
            case.kernel = self.path.display().to_string();
        }
        case
    }

    /// The entry of one build: the manifest's `entry` with its placeholders filled
    /// ([`entry::instantiate`]).
    pub fn entry_for(&self, params: &BTreeMap<String, i64>, dtype: Dtype) -> String {
        entry::instantiate(&self.entry, params, &self.defines, dtype, &self.tensors)
    }

    /// The first listed value of every param a case chooses (not the derived ones).
    pub fn free_params(&self) -> BTreeMap<String, i64> {
        self.params.iter().filter(|(k, _)| !self.derived_params.contains_key(*k)).map(|(k, v)| (k.clone(), v[0])).collect()
    }

    /// Sets each derived param in `vars` from its expression over the dims, scalars, plain
    /// params and defines there; the error (field, problem) names a value the manifest does not
    /// declare, so it was never built.
    pub fn derive_params(&self, vars: &mut Vars) -> Result<(), (String, String)> {
        if self.derived_params.is_empty() {
            return Ok(());
        }
        let env = expr::Env::without_tensors(vars);
        let mut got = Vec::new();
        for (name, e) in &self.derived_params {
            let field = format!("params.{name}");
            let v = env.int(e).map_err(|f| (field.clone(), format!("\"{e}\" {}{}", f.problem, f.hint)))?;
            let declared = &self.params[name];
            if !declared.contains(&v) {
                return Err((
                    field,
                    format!(
                        "{name} = {e} is {v} for this case, not one of the declared values {declared:?}; add {v} to params.{name}.values in {}",
                        self.path.display()
                    ),
                ));
            }
            got.push((name.clone(), v));
        }
        vars.params.extend(got);
        Ok(())
    }

    /// Every param of a case's build: its chosen ones, the defaults of those it leaves out,
    /// and the derived ones evaluated for its dims and scalars.
    pub fn case_params(&self, case: &Case) -> Result<BTreeMap<String, i64>, (String, String)> {
        let mut vars = Vars {
            params: self.default_params(),
            defines: self.defines.clone(),
            lengths: case.lengths.clone(),
            elem_bytes: case.dtype.size(),
            ..Vars::default()
        };
        vars.params.extend(case.params.iter().map(|(k, v)| (k.clone(), *v)));
        vars.dims = case.dims.clone();
        vars.scalars = case.scalars.clone();
        self.derive_params(&mut vars)?;
        Ok(vars.params)
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

    /// Every value a dim's hints stand for (param hints expanded), without the ±1 neighbours.
    pub fn hint_values(&self, dim: &DimSpec) -> Vec<u64> {
        let mut out = Vec::new();
        for h in &dim.hints {
            match h {
                Hint::Value(v) => out.push(*v),
                Hint::Param(p) => {
                    let values = self.params.get(p).cloned().or_else(|| self.defines.get(p).map(|v| vec![*v])).unwrap_or_default();
                    out.extend(values.into_iter().filter_map(|v| u64::try_from(v).ok()));
                }
            }
        }
        out
    }

    /// The scalar's value for a case where the case does not set it: its first choice (or the
    /// lower end of its range, or false/0).
    pub fn default_scalar(&self, s: &ScalarSpec, vars: &Vars) -> Scalar {
        match s.choices.first() {
            Some(ScalarChoice::Value(v)) => *v,
            Some(ScalarChoice::Expr(e)) => expr::Env::without_tensors(vars).float(e).map(Scalar::Float).unwrap_or(Scalar::Float(1.0)),
            None => match (s.ty, s.range) {
                (ScalarType::Bool, _) => Scalar::Bool(false),
                (ScalarType::Int, r) => Scalar::Int(r.map(|[lo, _]| lo as i64).unwrap_or(0)),
                (ScalarType::F32, r) => Scalar::Float(r.map(|[lo, _]| lo).unwrap_or(1.0)),
            },
        }
    }

    /// A scalar choice's value for a case.
    pub fn choice_value(&self, s: &ScalarSpec, c: &ScalarChoice, vars: &Vars) -> Option<Scalar> {
        match c {
            ScalarChoice::Value(v) => Some(coerce(s.ty, *v)),
            ScalarChoice::Expr(e) => {
                // An expression that divides by zero, or leaves the scalar's type, gives no value:
                // never an infinity or NaN handed to the kernel as if chosen.
                let x = expr::Env::without_tensors(vars).float(e).ok()?;
                let v = coerce(s.ty, Scalar::Float(x));
                let fits = match s.ty {
                    ScalarType::Int => x.is_finite() && x.abs() <= i64::MAX as f64,
                    _ => v.as_f64().is_finite(),
                };
                fits.then_some(v)
            }
        }
    }
}

/// A scalar value as the type `ty` holds it.
pub fn coerce(ty: ScalarType, v: Scalar) -> Scalar {
    match ty {
        ScalarType::Bool => Scalar::Bool(v.is_true()),
        ScalarType::Int => Scalar::Int(v.as_i64()),
        // Kernels receive f32: keep the value an f32 holds, so seeds replay bit for bit.
        ScalarType::F32 => Scalar::Float(v.as_f64() as f32 as f64),
    }
}

/// Every `*.toml` under `dir` (recursively) whose top level has both `entry` and `source` keys
/// (an NVRTC target) or a `[target]` with `python` (a Python target), sorted. Unreadable files
/// and directories are skipped.
pub fn find_manifests(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "toml") {
                let is_manifest = crate::core::userfile::read_text(&p)
                    .ok()
                    .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
                    .is_some_and(|t| (t.contains_key("entry") && t.contains_key("source")) || t.get("target").is_some_and(|t| t.get("python").is_some()));
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
