//! TOML loading: [`Manifest::load`] and [`Manifest::from_toml`], the raw serde shapes a
//! manifest file decodes into, and `Loader`, which decodes and checks one section at a time.
//!
//! It exists so that every check that needs no GPU happens once, at load time, with an error
//! that names the file and the dotted field. The sections are read in a fixed order (identity,
//! source and entry, fuzz flag and options, defines, params, contract, buffers, launch and
//! args), one function each, and the first problem found is the one reported; the finished
//! manifest is then resolved once against a sample case so that every expression is evaluated.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::Deserialize;

use crate::case::{TensorId, MAX_DIM, MAX_HEAD_DIM};
use crate::plan::{Contract, Plan};

use super::expr;
use super::{ArgSpec, BufferDtype, BufferInit, BufferRole, BufferSpec, LaunchSpec, Manifest, ManifestError};

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
        let mut table: toml::Table = toml::from_str(text).map_err(|e| ManifestError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let l = Loader { path };
        l.check_top_level_keys(&table)?;
        let t = &mut table;
        let (name, description) = l.identity(t)?;
        let (source, entry) = l.source_and_entry(t)?;
        let (fuzz, options) = l.fuzz_and_options(t)?;
        let defines = l.defines(t)?;
        let params = l.params(t, &defines)?;
        let contract = l.contract(t)?;
        let buffers = l.buffers(t)?;
        let launch = l.launch(t, &buffers)?;

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
}

/// Error construction and section decoding for one manifest file.
pub(super) struct Loader<'a> {
    pub(super) path: &'a Path,
}

impl Loader<'_> {
    pub(super) fn invalid(&self, field: &str, problem: String) -> ManifestError {
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

    // -----------------------------------------------------------------------------------------
    // Sections, in the order `Manifest::from_toml` reads them. Each takes its keys out of the
    // table.

    /// Every top-level key is one of [`TOP_LEVEL_KEYS`].
    fn check_top_level_keys(&self, table: &toml::Table) -> Result<(), ManifestError> {
        for key in table.keys() {
            if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
                return Err(self.invalid(
                    key,
                    format!("unknown key; remove it or use one of {}", TOP_LEVEL_KEYS.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// `name` (required, usable in file names) and `description`.
    fn identity(&self, t: &mut toml::Table) -> Result<(String, String), ManifestError> {
        let name: String = self.required(t.remove("name"), "name", "name = \"my_attn\"")?;
        if name.trim().is_empty() || name.chars().any(|c| c.is_whitespace() || c == '/') {
            return Err(self.invalid("name", format!("{name:?} is not a usable kernel name; use letters, digits, `_` and `-`")));
        }
        let description: String = self.optional(t.remove("description"), "description")?.unwrap_or_default();
        Ok((name, description))
    }

    /// `source` (joined to the manifest's directory; the file must exist) and `entry` (a C
    /// identifier).
    fn source_and_entry(&self, t: &mut toml::Table) -> Result<(PathBuf, String), ManifestError> {
        let source_rel: String = self.required(t.remove("source"), "source", "source = \"my_attn.cu\"")?;
        let dir = self.path.parent().unwrap_or(Path::new(""));
        let source = dir.join(&source_rel);
        if !source.is_file() {
            return Err(self.invalid(
                "source",
                format!(
                    "{} does not exist; give the .cu file's path relative to the manifest's directory",
                    source.display()
                ),
            ));
        }
        let entry: String = self.required(t.remove("entry"), "entry", "entry = \"my_attn_fwd\"")?;
        if !expr::is_identifier(&entry) {
            return Err(self.invalid("entry", format!("{entry:?} is not a C identifier; name the `extern \"C\" __global__` function")));
        }
        Ok((source, entry))
    }

    /// `fuzz` (default `true`) and the extra NVRTC `options` (none may set the architecture).
    fn fuzz_and_options(&self, t: &mut toml::Table) -> Result<(bool, Vec<String>), ManifestError> {
        let fuzz: bool = self.optional(t.remove("fuzz"), "fuzz")?.unwrap_or(true);
        let options: Vec<String> = self.optional(t.remove("options"), "options")?.unwrap_or_default();
        for (i, o) in options.iter().enumerate() {
            let arch_opt = ["-arch", "--gpu-architecture", "--gpu-name"].iter().any(|p| o.starts_with(p));
            if arch_opt {
                return Err(self.invalid(&format!("options[{i}]"), format!("{o:?} sets the architecture, which cudafuzz chooses per run (--arch); remove it")));
            }
            if o.trim().is_empty() {
                return Err(self.invalid(&format!("options[{i}]"), "empty option; remove it".into()));
            }
        }
        Ok((fuzz, options))
    }

    /// The fixed `[defines]`: C identifiers that are not reserved.
    fn defines(&self, t: &mut toml::Table) -> Result<BTreeMap<String, i64>, ManifestError> {
        let defines: BTreeMap<String, i64> = self.optional(t.remove("defines"), "defines")?.unwrap_or_default();
        for name in defines.keys() {
            self.check_define_name("defines", name)?;
        }
        Ok(defines)
    }

    /// The tunable `[params]`: C identifiers, not reserved, none also in `defines`, each with a
    /// non-empty list of distinct values.
    fn params(&self, t: &mut toml::Table, defines: &BTreeMap<String, i64>) -> Result<BTreeMap<String, Vec<i64>>, ManifestError> {
        let params: BTreeMap<String, Vec<i64>> = self.optional(t.remove("params"), "params")?.unwrap_or_default();
        for (name, values) in &params {
            self.check_define_name("params", name)?;
            let field = format!("params.{name}");
            if defines.contains_key(name) {
                return Err(self.invalid(&field, format!("`{name}` is also a fixed define; keep it in one of [defines] and [params]")));
            }
            if values.is_empty() {
                return Err(self.invalid(&field, "no values; list at least one, e.g. [64]".into()));
            }
            let distinct: BTreeSet<_> = values.iter().collect();
            if distinct.len() != values.len() {
                return Err(self.invalid(&field, format!("{values:?} lists a value twice; remove the duplicate")));
            }
        }
        Ok(params)
    }

    /// The `[contract]` table (required), checked by [`Loader::check_contract`].
    fn contract(&self, t: &mut toml::Table) -> Result<Contract, ManifestError> {
        let contract: Contract = self.required(
            t.remove("contract"),
            "contract",
            "a [contract] table (dtypes, head_dim, seq_q, seq_k, ...)",
        )?;
        self.check_contract(&contract)?;
        Ok(contract)
    }

    /// The `[[buffers]]`, in declaration order: unique identifiers that are not tensor names,
    /// a value exactly when `init = "const"`, and an f32 or f64 dtype for an lse buffer.
    fn buffers(&self, t: &mut toml::Table) -> Result<Vec<BufferSpec>, ManifestError> {
        let raw_buffers: Vec<toml::Value> = self.optional(t.remove("buffers"), "buffers")?.unwrap_or_default();
        let mut buffers = Vec::new();
        for (i, v) in raw_buffers.into_iter().enumerate() {
            let field = format!("buffers[{i}]");
            let raw: RawBuffer = self.decode(v, &field)?;
            if !expr::is_identifier(&raw.name) {
                return Err(self.invalid(&format!("{field}.name"), format!("{:?} is not an identifier; use letters, digits and `_`", raw.name)));
            }
            if TensorId::from_name(&raw.name).is_some() {
                return Err(self.invalid(&format!("{field}.name"), format!("`{}` is a tensor name; rename the buffer", raw.name)));
            }
            if buffers.iter().any(|b: &BufferSpec| b.name == raw.name) {
                return Err(self.invalid(&format!("{field}.name"), format!("buffer `{}` is declared twice; rename one", raw.name)));
            }
            let init = match (raw.init, raw.value) {
                (RawInit::Const, Some(v)) => BufferInit::Const(v),
                (RawInit::Const, None) => {
                    return Err(self.invalid(&format!("{field}.value"), "init = \"const\" needs a value; add e.g. `value = 1.5`".into()))
                }
                (_, Some(_)) => {
                    return Err(self.invalid(&format!("{field}.value"), "a value is only used with init = \"const\"; remove it or set init = \"const\"".into()))
                }
                (RawInit::Zero, None) => BufferInit::Zero,
                (RawInit::NegInf, None) => BufferInit::NegInf,
                (RawInit::Uninit, None) => BufferInit::Uninit,
            };
            if raw.role == Some(BufferRole::Lse) && !matches!(raw.dtype, BufferDtype::F32 | BufferDtype::F64) {
                return Err(self.invalid(&format!("{field}.dtype"), format!("an lse buffer must be f32 or f64, not {}", raw.dtype)));
            }
            buffers.push(BufferSpec { name: raw.name, count: raw.count, dtype: raw.dtype, init, role: raw.role });
        }
        Ok(buffers)
    }

    /// The `[launch]` table (required): grid and block of three expressions each, the
    /// arguments ([`Loader::args`]), shared memory (`"0"` when not given) and a non-zero
    /// timeout.
    fn launch(&self, t: &mut toml::Table, buffers: &[BufferSpec]) -> Result<LaunchSpec, ManifestError> {
        let raw_launch: RawLaunch = self.required(t.remove("launch"), "launch", "a [launch] table (grid, block, args)")?;
        let grid = self.three(raw_launch.grid, "launch.grid")?;
        let block = self.three(raw_launch.block, "launch.block")?;
        let args = self.args(raw_launch.args, buffers)?;
        let launch = LaunchSpec {
            grid,
            block,
            shared_bytes: raw_launch.shared_bytes.map(|e| e.0).unwrap_or_else(|| "0".into()),
            timeout_ms: raw_launch.timeout_ms,
            args,
        };
        if launch.timeout_ms == Some(0) {
            return Err(self.invalid("launch.timeout_ms", "0 ms would time out every launch; remove it or give a positive value".into()));
        }
        Ok(launch)
    }

    /// Exactly three expressions, `[x, y, z]`.
    fn three(&self, v: Vec<Expression>, field: &str) -> Result<[String; 3], ManifestError> {
        let n = v.len();
        let arr: [Expression; 3] = v.try_into().map_err(|_| {
            self.invalid(field, format!("lists {n} expressions; give exactly 3, [x, y, z], e.g. [\"cdiv(seq_q, 64)\", \"heads_q\", \"batch\"]"))
        })?;
        Ok(arr.map(|e| e.0))
    }

    /// `launch.args`, in order: every pointer names a tensor or one of `buffers`.
    fn args(&self, raw_args: Vec<toml::Value>, buffers: &[BufferSpec]) -> Result<Vec<ArgSpec>, ManifestError> {
        let mut args = Vec::new();
        for (i, v) in raw_args.into_iter().enumerate() {
            let field = format!("launch.args[{i}]");
            let arg: ArgSpec = self.decode(v, &field)?;
            if let ArgSpec::Ptr(name) = &arg {
                if TensorId::from_name(name).is_none() && !buffers.iter().any(|b| &b.name == name) {
                    let mut known: Vec<&str> = TensorId::ALL.iter().map(|t| t.name()).collect();
                    known.extend(buffers.iter().map(|b| b.name.as_str()));
                    return Err(self.invalid(
                        &field,
                        format!("pointer `{name}` is neither a tensor nor a declared buffer (known: {}); declare it under [[buffers]] or fix the name", known.join(", ")),
                    ));
                }
            }
            args.push(arg);
        }
        Ok(args)
    }

    // -----------------------------------------------------------------------------------------
    // Checks shared by the sections.

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
