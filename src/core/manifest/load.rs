//! TOML loading: [`Manifest::load`] and [`Manifest::from_toml`], and `Loader`, which decodes and
//! checks one section at a time.
//!
//! It exists so that every check that needs no GPU happens once, at load time, with an error
//! that names the file and the full key (`tensors.q.shape`, `dims.seq_q.range`). The sections
//! are read in a fixed order (format, identity, source and entry, fuzz flag and options, dtypes,
//! defines, params, dims, requires, scalars, tensors, contract, launch, reference), one function
//! each, and the first problem found is the one reported; the finished manifest is then
//! evaluated once for a sample case so that every expression is known to work.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::Deserialize;

use crate::core::case::{Dtype, Scalar, ValueClass, MAX_DIM};
use crate::core::target::Target;

use super::expr::{self, Env, TensorVars, Vars};
use super::{
    ContractSpec, DimSpec, DtypeSpec, Hint, Manifest, ManifestError, ReferenceSpec, ScalarChoice, ScalarSpec, ScalarType, TensorSpec, MANIFEST_FORMAT,
};

const TOP_LEVEL_KEYS: [&str; 23] = [
    "format",
    "name",
    "description",
    "source",
    "entry",
    "fuzz",
    "options",
    "include",
    "std",
    "compiler",
    "module",
    "dtypes",
    "defines",
    "params",
    "dims",
    "lengths",
    "requires",
    "scalars",
    "tensors",
    "contract",
    "reference",
    "launch",
    "target",
];

/// The value classes an input draws from when its manifest does not say: every finite class.
pub const DEFAULT_VALUES: [ValueClass; 6] =
    [ValueClass::Normal, ValueClass::Uniform, ValueClass::Large, ValueClass::Tiny, ValueClass::Zero, ValueClass::ConstantRows];

/// Largest value drawn at random from a dim whose manifest gives no `cap`.
pub const DEFAULT_CAP: u64 = 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDim {
    range: [u64; 2],
    #[serde(default = "one")]
    multiple: u64,
    max: Option<u64>,
    cap: Option<u64>,
    #[serde(default)]
    hints: Vec<toml::Value>,
}

fn one() -> u64 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScalar {
    #[serde(rename = "type")]
    ty: ScalarType,
    #[serde(default)]
    choices: Vec<toml::Value>,
    #[serde(default)]
    weights: Vec<u32>,
    range: Option<[f64; 2]>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawContract {
    #[serde(default)]
    relations: Vec<String>,
    max_element_offset: Option<u64>,
}

/// An expression written as a string or a bare number.
pub(super) struct Expression(pub(super) String);

impl<'de> Deserialize<'de> for Expression {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        expression(d).map(Expression)
    }
}

/// Decodes an expression: a string as written, or a number turned into its text.
pub(super) fn expression<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
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

impl Manifest {
    /// Reads, decodes and validates a manifest.
    ///
    /// Besides the schema (unknown keys are errors), this checks that the source files exist,
    /// that names are C identifiers and unique, that shapes, relations and arguments name only
    /// known dims, scalars, params and tensors, that the contract is satisfiable, and that every
    /// expression evaluates cleanly for a sample case.
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let text = crate::core::userfile::read_text(path).map_err(crate::core::error::FileError::at(path, "read manifest"))?;
        Manifest::from_toml(path, &text)
    }

    /// Like [`Manifest::load`], but with the file's text given (the source files must exist).
    pub fn from_toml(path: &Path, text: &str) -> Result<Manifest, ManifestError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| ManifestError::Syntax { path: path.to_path_buf(), message: crate::core::error::clip_lines(&e.to_string()) })?;
        let l = Loader { path };
        l.format(&table)?;
        l.check_top_level_keys(&table)?;
        let t = &mut table;
        let (name, description) = l.identity(t)?;
        let target_parts = l.target(t)?;
        // A sequence's first launch may name the entry in place of the top level.
        if let (None, Some(first)) = (t.get("entry"), t.get("launch").and_then(|v| v.as_array()).and_then(|a| a.first()).and_then(|f| f.get("entry")).cloned())
        {
            t.insert("entry".into(), first);
        }
        let (source, entry) = match &target_parts {
            Some(p) => (p.source.clone(), p.entry.clone()),
            None => l.source_and_entry(t)?,
        };
        let (fuzz, mut options) = l.fuzz_and_options(t)?;
        let (build, std) = l.build(t, target_parts.is_some())?;
        options.extend(std);
        let dtypes = l.dtypes(t)?;
        let defines = l.defines(t)?;
        let (params, derived_params) = l.params(t, &defines)?;
        let dims = l.dims(t, &defines, &params)?;
        let lengths = l.lengths(t, &dims)?;
        let requires = l.relations(t.remove("requires"), "requires")?;
        let scalars = l.scalars(t, &dims)?;
        let tensors = l.tensors(t, &dims, &scalars, &lengths)?;
        let dtypes = match dtypes {
            Some(d) => d,
            None => l.fixed_types_only(&tensors)?,
        };
        let contract = l.contract(t)?;
        super::entry::check_placeholders(&entry, &params, &defines, &tensors).map_err(|problem| l.invalid("entry", problem))?;
        let (target, launch, steps) = match target_parts {
            Some(p) => (p.target, p.launch, Vec::new()),
            None => {
                let (launch, steps) = l.launches(t, &tensors, &entry)?;
                (Target::Nvrtc, launch, steps)
            }
        };
        if !steps.is_empty() && (build != crate::core::target::Build::Nvrtc || !super::expr::is_identifier(&entry)) {
            return Err(l.invalid(
                "launch",
                "a launch sequence is built by NVRTC from extern \"C\" entry points; remove compiler/module, or name the kernels plainly".into(),
            ));
        }
        l.check_target(&target, &tensors)?;
        let mut reference = l.reference(t, &tensors, &scalars, &launch)?;
        if let ReferenceSpec::Python(r) = &reference {
            l.check_call(&r.call, &tensors, "reference")?;
        }
        if let ReferenceSpec::Kernel(k) = &mut reference {
            // The user's reference kernel sees the same header folders as the kernel.
            k.options.extend(options.iter().filter(|o| o.starts_with("--include-path=")).cloned());
            // Where a dim may be empty, a reference launch with an empty grid or block has
            // nothing to compute, whatever the host's guard says (a mutant's host may lack one).
            if dims.iter().any(|d| d.range[0] == 0) {
                let empty = k.launch.grid.iter().chain(&k.launch.block).map(|e| format!("({e}) == 0"));
                let terms: Vec<String> = k.launch.skip.iter().map(|s| format!("({s})")).chain(empty).collect();
                k.launch.skip = Some(terms.join(" || "));
            }
        }
        let mut dims = dims;
        if let ReferenceSpec::Op { op, bind } = &reference {
            op.spec().add_hints(&mut dims, &tensors, bind);
        }
        let manifest = Manifest {
            path: path.to_path_buf(),
            name,
            description,
            source,
            entry,
            fuzz,
            options,
            dtypes,
            defines,
            params,
            derived_params,
            dims,
            lengths,
            requires,
            scalars,
            tensors,
            contract,
            reference,
            launch,
            steps,
            target,
            build,
        };
        l.check_names(&manifest)?;
        l.check_sample(&manifest)?;
        manifest.check_combinations()?;
        Ok(manifest)
    }

    /// The values expressions see for a sample case: each dim at the low end of its range
    /// (rounded up to its multiple, and to the value an equality among the requires or the
    /// contract gives), scalars at their first choice, tensors dense at offset 0, default
    /// params, the first dtype. What load evaluates every expression against.
    pub fn sample_vars(&self) -> Vars {
        let mut vars = Vars { params: self.default_params(), defines: self.defines.clone(), elem_bytes: self.dtypes[0].size(), ..Vars::default() };
        for d in &self.dims {
            let m = d.multiple.max(1);
            let v = d.range[0].div_ceil(m).saturating_mul(m).clamp(1, d.max.max(1));
            vars.dims.insert(d.name.clone(), v);
        }
        // Equalities such as `seq_k == seq_q` hold in the sample too.
        for rel in self.requires.iter().chain(&self.contract.relations) {
            if let Some((a, b)) = rel.split_once("==") {
                let (a, b) = (a.trim(), b.trim());
                if let (Some(_), Some(&v)) = (vars.dims.get(a), vars.dims.get(b)) {
                    vars.dims.insert(a.to_string(), v);
                }
            }
        }
        for l in &self.lengths {
            let count = vars.dims.get(&l.count).copied().unwrap_or(1);
            vars.lengths.insert(l.name.clone(), vec![l.sample_length(); count as usize]);
        }
        for s in &self.scalars {
            let v = self.default_scalar(s, &vars);
            vars.scalars.insert(s.name.clone(), v);
        }
        // A derived param that does not evaluate keeps its first value here; check_sample says why.
        let _ = self.derive_params(&mut vars);
        vars.tensors = self.dense_tensor_vars(&vars, self.dtypes[0]);
        vars
    }

    /// Every tensor dense at offset 0 for the dims of `vars` (shapes that do not evaluate are
    /// left empty): the layout a user reference kernel reads.
    pub fn dense_tensor_vars(&self, vars: &Vars, dtype: Dtype) -> Vec<TensorVars> {
        let env = Env::new(&Vars { tensors: Vec::new(), ..vars.clone() });
        self.tensors
            .iter()
            .map(|t| {
                let shape: Vec<u64> = t.shape.iter().map(|e| env.size(e, u64::MAX, "extent").unwrap_or(0)).collect();
                let strides = crate::core::case::strides(&shape, &crate::core::case::TensorLayout::dense()).unwrap_or_else(|| vec![0; shape.len()]);
                TensorVars {
                    name: t.name.clone(),
                    dim_names: (0..t.rank()).map(|i| t.dim_name(i).map(str::to_string)).collect(),
                    shape,
                    strides,
                    offset_bytes: 0,
                    elem_bytes: t.dtype.resolve(dtype).size(),
                }
            })
            .collect()
    }
}

/// Error construction and section decoding for one manifest file.
pub(super) struct Loader<'a> {
    pub(super) path: &'a Path,
}

impl Loader<'_> {
    pub(super) fn invalid(&self, field: &str, problem: String) -> ManifestError {
        ManifestError::Invalid { path: self.path.to_path_buf(), field: field.to_string(), problem }
    }

    fn expr_error(&self, field: &str, expr: &str, f: expr::ExprFailure) -> ManifestError {
        ManifestError::Expr { path: self.path.to_path_buf(), field: field.to_string(), expr: expr.to_string(), problem: f.problem, hint: f.hint }
    }

    pub(super) fn decode<T: DeserializeOwned>(&self, v: toml::Value, field: &str) -> Result<T, ManifestError> {
        let key = |v: &toml::Value| match super::error::failing_key::<T>(v) {
            Some(k) => format!("{field}.{k}"),
            None => field.to_string(),
        };
        T::deserialize(v.clone()).map_err(|e| {
            let msg = e.message().trim_end().to_string();
            self.invalid(&key(&v), format!("{msg}; the manifest schema is in kernels/README.md"))
        })
    }

    pub(super) fn required<T: DeserializeOwned>(&self, v: Option<toml::Value>, field: &str, example: &str) -> Result<T, ManifestError> {
        match v {
            Some(v) => self.decode(v, field),
            None => Err(self.invalid(field, format!("missing; add {example}"))),
        }
    }

    pub(super) fn optional<T: DeserializeOwned>(&self, v: Option<toml::Value>, field: &str) -> Result<Option<T>, ManifestError> {
        v.map(|v| self.decode(v, field)).transpose()
    }

    /// `format = 2`; a manifest without it that looks like format 1 is refused with the command
    /// that converts it.
    fn format(&self, table: &toml::Table) -> Result<(), ManifestError> {
        if table.is_empty() {
            return Err(self.invalid("format", format!("the manifest is empty; a manifest starts with format = {MANIFEST_FORMAT}, name, source, entry (kernels/activation/silu_and_mul.toml is a complete example)")));
        }
        match table.get("format") {
            Some(toml::Value::Integer(n)) if *n == MANIFEST_FORMAT as i64 => Ok(()),
            Some(toml::Value::Integer(1)) => Err(ManifestError::OldFormat { path: self.path.to_path_buf() }),
            Some(other) => Err(self.invalid("format", format!("{other} is not a format this cudafuzz reads; write format = {MANIFEST_FORMAT}"))),
            None if table.contains_key("buffers") || table.get("contract").and_then(|c| c.get("head_dim")).is_some() || !table.contains_key("tensors") => {
                Err(ManifestError::OldFormat { path: self.path.to_path_buf() })
            }
            None => Err(self.invalid("format", format!("missing; add format = {MANIFEST_FORMAT} at the top"))),
        }
    }

    fn check_top_level_keys(&self, table: &toml::Table) -> Result<(), ManifestError> {
        for key in table.keys() {
            // Only the launch has a watchdog override; one at the top level would be ignored.
            if key == "timeout_ms" {
                return Err(self.invalid(key, "belongs to the launch; move it under [launch]".into()));
            }
            if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
                return Err(self.invalid(key, format!("unknown key; remove it or use one of {}", TOP_LEVEL_KEYS.join(", "))));
            }
        }
        Ok(())
    }

    /// `name` (required, usable in file names) and `description`.
    fn identity(&self, t: &mut toml::Table) -> Result<(String, String), ManifestError> {
        let name: String = self.required(t.remove("name"), "name", "name = \"my_kernel\"")?;
        if name.trim().is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control() || c == '/') {
            return Err(self.invalid("name", format!("{name:?} is not a usable kernel name; use letters, digits, `_` and `-`")));
        }
        let description: String = self.optional(t.remove("description"), "description")?.unwrap_or_default();
        Ok((name, description))
    }

    /// A source file relative to the manifest's directory, which must exist.
    pub(super) fn source_file(&self, rel: &str, field: &str) -> Result<PathBuf, ManifestError> {
        let dir = self.path.parent().unwrap_or(Path::new(""));
        let source = dir.join(rel);
        if !source.is_file() {
            let problem = match std::fs::metadata(&source) {
                Ok(m) if m.is_dir() => "is a directory, not a .cu file",
                Ok(_) => "is not a regular file (a device or socket?)",
                Err(_) => "does not exist",
            };
            return Err(self.invalid(field, format!("{} {problem}; give the .cu file's path relative to the manifest's directory", source.display())));
        }
        let limit = crate::core::userfile::MAX_SOURCE_BYTES;
        let size = std::fs::metadata(&source).map(|m| m.len()).unwrap_or(0);
        if size > limit {
            return Err(self.invalid(
                field,
                format!(
                    "{} is {} MiB, larger than {} MiB, the limit for kernel sources: is this the file you meant?",
                    source.display(),
                    size >> 20,
                    limit >> 20
                ),
            ));
        }
        Ok(source)
    }

    /// `source` (the `.cu` file, relative to the manifest) and `entry` (an `extern "C"` name or a
    /// C++ name expression, [`super::entry`]).
    fn source_and_entry(&self, t: &mut toml::Table) -> Result<(PathBuf, String), ManifestError> {
        let rel: String = self.required(t.remove("source"), "source", "source = \"my_kernel.cu\"")?;
        let source = self.source_file(&rel, "source")?;
        let entry: String = self.required(t.remove("entry"), "entry", "entry = \"my_kernel\"")?;
        super::entry::check_spelling(&entry).map_err(|problem| self.invalid("entry", problem))?;
        Ok((source, entry))
    }

    /// `dtypes`: the case element types, at least one, no duplicates, floating; `None` when
    /// absent (allowed only where every tensor has a fixed type: [`Self::fixed_types_only`]).
    fn dtypes(&self, t: &mut toml::Table) -> Result<Option<Vec<Dtype>>, ManifestError> {
        let Some(value) = t.remove("dtypes") else { return Ok(None) };
        let names: Vec<String> = self.required(Some(value), "dtypes", "dtypes = [\"f16\", \"bf16\"]")?;
        if names.is_empty() {
            return Err(self.invalid("dtypes", "empty; list at least one of \"f16\", \"bf16\", \"f32\"".into()));
        }
        let mut out = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let d = Dtype::from_name(n)
                .filter(|d| d.is_float())
                .ok_or_else(|| self.invalid(&format!("dtypes[{i}]"), format!("`{n}` is not a floating element type; use f16, bf16, f32 or f64")))?;
            if out.contains(&d) {
                return Err(self.invalid("dtypes", format!("lists {d} twice; remove the duplicate")));
            }
            out.push(d);
        }
        Ok(Some(out))
    }

    /// The case type of a kernel without `dtypes`: every tensor must have a fixed type (an
    /// fp64-only kernel has no case element type to vary). Cases then carry the widest fixed
    /// floating type, which reports show and nothing else reads.
    fn fixed_types_only(&self, tensors: &[TensorSpec]) -> Result<Vec<Dtype>, ManifestError> {
        if let Some(t) = tensors.iter().find(|t| t.dtype == DtypeSpec::Case) {
            return Err(self.invalid(
                "dtypes",
                format!("missing, and tensor `{}` has the case's type; add dtypes = [\"f16\", \"bf16\"], or give every tensor a fixed dtype", t.name),
            ));
        }
        let widest = tensors.iter().filter_map(|t| t.dtype.fixed()).filter(|d| d.is_float()).max_by_key(|d| d.size());
        Ok(vec![widest.unwrap_or(Dtype::F32)])
    }

    pub(super) fn check_define_name(&self, field: &str, name: &str) -> Result<(), ManifestError> {
        if !expr::is_identifier(name) {
            return Err(self.invalid(field, format!("`{name}` is not a C identifier, so it cannot be a -D define or a name in expressions; rename it")));
        }
        if expr::is_reserved(name) {
            return Err(self.invalid(field, format!("`{name}` is reserved (a function, `elem_bytes`, or a CUDAFUZZ_/CF_ define); rename it")));
        }
        Ok(())
    }

    fn defines(&self, t: &mut toml::Table) -> Result<BTreeMap<String, i64>, ManifestError> {
        let defines: BTreeMap<String, i64> = self.optional(t.remove("defines"), "defines")?.unwrap_or_default();
        for name in defines.keys() {
            self.check_define_name(&format!("defines.{name}"), name)?;
        }
        Ok(defines)
    }

    /// `[dims]`: each dim's range (0 ≤ lo ≤ hi ≤ max, 1 ≤ hi: a dim may be empty where the
    /// contract allows it, never always), multiple, validity maximum, random-draw cap and hints,
    /// in declaration order.
    fn dims(&self, t: &mut toml::Table, defines: &BTreeMap<String, i64>, params: &BTreeMap<String, Vec<i64>>) -> Result<Vec<DimSpec>, ManifestError> {
        let Some(raw) = t.remove("dims") else { return Ok(Vec::new()) };
        let table: toml::Table = self.decode(raw, "dims")?;
        let mut out = Vec::new();
        for (name, v) in table {
            let field = format!("dims.{name}");
            self.check_define_name(&field, &name)?;
            if defines.contains_key(&name) || params.contains_key(&name) {
                return Err(self.invalid(&field, format!("`{name}` is also a define or param; rename one")));
            }
            let r: RawDim = self.decode(v, &field)?;
            let [lo, hi] = r.range;
            let max = r.max.unwrap_or(MAX_DIM.max(hi));
            if max > i32::MAX as u64 {
                return Err(self.invalid(&format!("{field}.max"), format!("{max} is more than {}", i32::MAX)));
            }
            if hi == 0 || lo > hi || hi > max {
                return Err(self.invalid(
                    &format!("{field}.range"),
                    format!("[{lo}, {hi}] is not a range within 0..={max}; write [min, max] with 0 <= min <= max and max >= 1 (0 only where the kernel's contract allows an empty dim)"),
                ));
            }
            if r.multiple == 0 {
                return Err(self.invalid(&format!("{field}.multiple"), "0; use 1 for any value".into()));
            }
            if hi / r.multiple * r.multiple < lo {
                return Err(self.invalid(
                    &format!("{field}.multiple"),
                    format!("no multiple of {} lies in [{lo}, {hi}]; widen the range or lower the multiple", r.multiple),
                ));
            }
            let cap = r.cap.unwrap_or(DEFAULT_CAP).max(lo);
            let mut hints = Vec::new();
            for (i, h) in r.hints.into_iter().enumerate() {
                hints.push(match h {
                    toml::Value::Integer(n) if n >= 0 => Hint::Value(n as u64),
                    toml::Value::String(p) if params.contains_key(&p) || defines.contains_key(&p) => Hint::Param(p),
                    other => {
                        return Err(self.invalid(&format!("{field}.hints[{i}]"), format!("{other} is neither a non-negative value nor a param or define name")))
                    }
                });
            }
            out.push(DimSpec { name, range: [lo, hi], multiple: r.multiple, max, cap, hints });
        }
        Ok(out)
    }

    /// A list of relations (`requires`, `contract.relations`): comparisons over dims, params and
    /// defines, checked when the names are known ([`Loader::check_names`]).
    fn relations(&self, v: Option<toml::Value>, field: &str) -> Result<Vec<String>, ManifestError> {
        Ok(self.optional(v, field)?.unwrap_or_default())
    }

    /// `[scalars]`: each scalar's type and its choices or range.
    fn scalars(&self, t: &mut toml::Table, dims: &[DimSpec]) -> Result<Vec<ScalarSpec>, ManifestError> {
        let Some(raw) = t.remove("scalars") else { return Ok(Vec::new()) };
        let table: toml::Table = self.decode(raw, "scalars")?;
        let mut out = Vec::new();
        for (name, v) in table {
            let field = format!("scalars.{name}");
            self.check_define_name(&field, &name)?;
            if dims.iter().any(|d| d.name == name) {
                return Err(self.invalid(&field, format!("`{name}` is also a dim; rename one")));
            }
            let r: RawScalar = self.decode(v, &field)?;
            let mut choices = Vec::new();
            for (i, c) in r.choices.into_iter().enumerate() {
                choices.push(match (r.ty, c) {
                    (ScalarType::Bool, toml::Value::Boolean(b)) => ScalarChoice::Value(Scalar::Bool(b)),
                    (ScalarType::Int, toml::Value::Integer(n)) => ScalarChoice::Value(Scalar::Int(n)),
                    (ScalarType::F32, toml::Value::Float(x)) => ScalarChoice::Value(Scalar::Float(x as f32 as f64)),
                    (ScalarType::F32, toml::Value::Integer(n)) => ScalarChoice::Value(Scalar::Float(n as f32 as f64)),
                    (ScalarType::Int | ScalarType::F32, toml::Value::String(e)) => ScalarChoice::Expr(e),
                    (ty, other) => {
                        return Err(
                            self.invalid(&format!("{field}.choices[{i}]"), format!("{other} is not a {ty:?} value (or, for numbers, an expression string)"))
                        )
                    }
                });
            }
            // An f32 scalar holds what an f32 holds: a literal past its largest value (or `inf`,
            // `nan`) would reach the kernel as an infinity or NaN, and a seed as `null`.
            for (i, c) in choices.iter().enumerate() {
                if let ScalarChoice::Value(Scalar::Float(x)) = c {
                    if !x.is_finite() {
                        return Err(self.invalid(
                            &format!("{field}.choices[{i}]"),
                            format!("{x} is not a finite {ty:?} value (f32 holds up to {:e})", f32::MAX, ty = r.ty),
                        ));
                    }
                }
            }
            if !r.weights.is_empty() && r.weights.len() != choices.len() {
                return Err(
                    self.invalid(&format!("{field}.weights"), format!("{} weights for {} choices; give one per choice", r.weights.len(), choices.len()))
                );
            }
            if r.weights.iter().all(|&w| w == 0) && !r.weights.is_empty() {
                return Err(self.invalid(&format!("{field}.weights"), "all zero; give some choice a positive weight".into()));
            }
            if let Some([lo, hi]) = r.range {
                // NaN bounds are no range either: partial_cmp gives None for them.
                if !matches!(lo.partial_cmp(&hi), Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)) || r.ty == ScalarType::Bool {
                    return Err(self.invalid(&format!("{field}.range"), format!("[{lo}, {hi}] is not a range of a number scalar")));
                }
                if !lo.is_finite() || !hi.is_finite() {
                    return Err(self.invalid(&format!("{field}.range"), format!("[{lo}, {hi}] is not finite; give both ends as numbers")));
                }
                if r.ty == ScalarType::F32 && (lo.abs() > f32::MAX as f64 || hi.abs() > f32::MAX as f64) {
                    return Err(self.invalid(
                        &format!("{field}.range"),
                        format!("[{lo}, {hi}] reaches past f32's largest value, {:e}; keep both ends within it", f32::MAX),
                    ));
                }
                if r.ty == ScalarType::Int && (lo.abs() > i64::MAX as f64 || hi.abs() > i64::MAX as f64) {
                    return Err(self.invalid(&format!("{field}.range"), format!("[{lo}, {hi}] reaches past a 64-bit integer; keep both ends within it")));
                }
                if r.ty == ScalarType::Int && (lo.fract() != 0.0 || hi.fract() != 0.0) {
                    return Err(self.invalid(&format!("{field}.range"), format!("[{lo}, {hi}]: an int scalar's range has integer ends")));
                }
            }
            // Like the choices, an f32 scalar's range is held as the kernel receives it: the ends
            // rounded to f32, so a value drawn at an end (and rounded the same way) lies inside.
            let range = match r.ty {
                ScalarType::F32 => r.range.map(|[lo, hi]| [lo as f32 as f64, hi as f32 as f64]),
                _ => r.range,
            };
            out.push(ScalarSpec { name, ty: r.ty, choices, weights: r.weights, range });
        }
        Ok(out)
    }

    fn contract(&self, t: &mut toml::Table) -> Result<ContractSpec, ManifestError> {
        let raw: Option<RawContract> = self.optional(t.remove("contract"), "contract")?;
        Ok(raw.map(|r| ContractSpec { relations: r.relations, max_element_offset: r.max_element_offset }).unwrap_or_default())
    }

    /// An alignment in bytes: a power of two up to 256.
    pub(super) fn alignment(&self, bytes: u32, field: &str) -> Result<u32, ManifestError> {
        if bytes.is_power_of_two() && bytes <= 256 {
            return Ok(bytes);
        }
        Err(self.invalid(field, format!("{bytes} is not a power of two up to 256; use 1, 2, 4, 8, 16, ...")))
    }

    /// Shapes, relations, scalar expressions and integer ranges name only known dims, scalars,
    /// params and defines (and relations are comparisons).
    fn check_names(&self, m: &Manifest) -> Result<(), ManifestError> {
        let vars = m.sample_vars();
        let env = Env::new(&Vars { tensors: Vec::new(), ..vars.clone() });
        for t in &m.tensors {
            for (i, e) in t.shape.iter().enumerate() {
                env.parse(e).map_err(|f| self.expr_error(&format!("tensors.{}.shape[{i}]", t.name), e, f))?;
            }
            if let Some(e) = &t.capacity {
                env.parse(e).map_err(|f| self.expr_error(&format!("tensors.{}.capacity", t.name), e, f))?;
            }
            if let Some(r) = &t.range {
                for (i, e) in r.iter().enumerate() {
                    env.parse(e).map_err(|f| self.expr_error(&format!("tensors.{}.range[{i}]", t.name), e, f))?;
                }
            }
        }
        let dims_only = Env::new(&Vars { scalars: BTreeMap::new(), tensors: Vec::new(), ..vars.clone() });
        for (field, list) in [("requires", &m.requires), ("contract.relations", &m.contract.relations)] {
            for (i, rel) in list.iter().enumerate() {
                let f = format!("{field}[{i}]");
                env.parse(rel).map_err(|e| self.expr_error(&f, rel, e))?;
                if !expr::variables_in(rel).iter().any(|v| m.dim(v).is_some() || m.scalar(v).is_some()) {
                    return Err(self.invalid(&f, format!("\"{rel}\" names no dim or scalar; a relation constrains the case's dims and scalars")));
                }
            }
        }
        for s in &m.scalars {
            for (i, c) in s.choices.iter().enumerate() {
                if let ScalarChoice::Expr(e) = c {
                    dims_only.parse(e).map_err(|f| self.expr_error(&format!("scalars.{}.choices[{i}]", s.name), e, f))?;
                }
            }
        }
        for (name, e) in &m.derived_params {
            let field = format!("params.{name}.from");
            env.parse(e).map_err(|f| self.expr_error(&field, e, f))?;
            if let Some(other) = expr::variables_in(e).into_iter().find(|v| m.derived_params.contains_key(v)) {
                return Err(self.invalid(&field, format!("names the derived param {other}; derive each param from dims, scalars, plain params and defines")));
            }
        }
        Ok(())
    }

    /// Every expression evaluates for the sample case ([`Manifest::sample_vars`]): relations
    /// to true or false, shapes to positive sizes, the launch (and a reference kernel's) to a
    /// legal launch.
    fn check_sample(&self, m: &Manifest) -> Result<(), ManifestError> {
        let vars = m.sample_vars();
        m.derive_params(&mut vars.clone()).map_err(|(field, problem)| self.invalid(&field, problem))?;
        let env = Env::new(&vars);
        for (field, list) in [("requires", &m.requires), ("contract.relations", &m.contract.relations)] {
            for (i, rel) in list.iter().enumerate() {
                env.boolean(rel).map_err(|f| self.expr_error(&format!("{field}[{i}]"), rel, f))?;
            }
        }
        for t in &m.tensors {
            for (i, e) in t.shape.iter().enumerate() {
                let v = env.size(e, u64::MAX, "extent").map_err(|f| self.expr_error(&format!("tensors.{}.shape[{i}]", t.name), e, f))?;
                if v == 0 {
                    return Err(self.expr_error(
                        &format!("tensors.{}.shape[{i}]", t.name),
                        e,
                        expr::ExprFailure {
                            problem: "evaluates to 0 for the sample case".into(),
                            hint: "; an extent must be at least 1 (use max(1, ...))".into(),
                        },
                    ));
                }
            }
        }
        m.resolve(&vars)?;
        m.resolve_call(&vars)?;
        if let ReferenceSpec::Kernel(k) = &m.reference {
            m.resolve_launch(&k.launch, &vars, "reference")?;
        }
        Ok(())
    }
}
