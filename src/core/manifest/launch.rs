//! `[launch]`: the kernel's grid and block, its dynamic shared memory and whether its host
//! opts in past 48 KiB, its watchdog and its arguments, read by the manifest's [`Loader`]; a
//! reference kernel's launch reuses [`Loader::three`] and [`Loader::args`].
//!
//! `[[launch]]` (an array) is a launch sequence: several kernels of the same source launched in
//! order on one stream (a partial reduction, then its finalize kernel), each naming its
//! `entry`. The first is the manifest's launch; the others are [`LaunchStep`]s. The case is
//! judged once, after the last: the roster says what each tensor is (a buffer that passes
//! partial results between launches is `scratch`).

use serde::Deserialize;

use super::load::{Expression, Loader};
use super::{ArgSpec, LaunchSpec, LaunchStep, ManifestError, TensorSpec};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLaunch {
    entry: Option<String>,
    grid: Vec<Expression>,
    block: Vec<Expression>,
    #[serde(default)]
    shared_bytes: Option<Expression>,
    shared_opt_in: Option<bool>,
    timeout_ms: Option<u64>,
    args: Vec<toml::Value>,
    skip: Option<Expression>,
}

impl Loader<'_> {
    /// `[launch]`, or `[[launch]]`: the first launch and the later ones of a sequence. `entry`
    /// is the manifest's; a sequence's first launch may repeat it, each later one names its own
    /// `extern "C"` entry in the same source.
    pub(super) fn launches(&self, t: &mut toml::Table, tensors: &[TensorSpec], entry: &str) -> Result<(LaunchSpec, Vec<LaunchStep>), ManifestError> {
        let Some(value) = t.remove("launch") else {
            return Err(self.invalid("launch", "missing; add a [launch] section with grid, block and args".into()));
        };
        let toml::Value::Array(items) = value else {
            let raw: RawLaunch = self.decode(value, "launch")?;
            if raw.entry.is_some() {
                return Err(self.invalid("launch.entry", "only the launches of a sequence ([[launch]]) name an entry; use the top-level entry".into()));
            }
            return self.one_launch(raw, tensors, "launch").map(|l| (l, Vec::new()));
        };
        if items.is_empty() {
            return Err(self.invalid("launch", "an empty [[launch]] sequence; give at least one launch".into()));
        }
        let (mut first, mut steps) = (None, Vec::new());
        for (i, v) in items.into_iter().enumerate() {
            let field = format!("launch[{i}]");
            let raw: RawLaunch = self.decode(v, &field)?;
            let named = raw.entry.clone();
            let launch = self.one_launch(raw, tensors, &field)?;
            match (i, named) {
                (0, Some(e)) if e != entry => {
                    return Err(
                        self.invalid(&format!("{field}.entry"), format!("`{e}` differs from the manifest's entry `{entry}`; the first launch is the entry's"))
                    )
                }
                (0, _) => first = Some(launch),
                (_, None) => return Err(self.invalid(&format!("{field}.entry"), "missing; each later launch of a sequence names its kernel".into())),
                (_, Some(e)) if !super::expr::is_identifier(&e) => {
                    return Err(self
                        .invalid(&format!("{field}.entry"), format!("`{e}` is not an extern \"C\" name; a sequence's later kernels are plain entry points")))
                }
                (_, Some(e)) => steps.push(LaunchStep { entry: e, launch }),
            }
        }
        Ok((first.expect("a non-empty sequence has a first launch"), steps))
    }

    fn one_launch(&self, raw: RawLaunch, tensors: &[TensorSpec], field: &str) -> Result<LaunchSpec, ManifestError> {
        let launch = LaunchSpec {
            grid: self.three(raw.grid, &format!("{field}.grid"))?,
            block: self.three(raw.block, &format!("{field}.block"))?,
            shared_bytes: raw.shared_bytes.map(|e| e.0).unwrap_or_else(|| "0".into()),
            shared_opt_in: raw.shared_opt_in.unwrap_or(true),
            timeout_ms: raw.timeout_ms,
            args: self.args(raw.args, tensors, &format!("{field}.args"))?,
            skip: raw.skip.map(|e| e.0),
        };
        if launch.timeout_ms == Some(0) {
            return Err(self.invalid(&format!("{field}.timeout_ms"), "0 ms would time out every launch; remove it or give a positive value".into()));
        }
        Ok(launch)
    }

    pub(super) fn three(&self, v: Vec<Expression>, field: &str) -> Result<[String; 3], ManifestError> {
        match <[Expression; 3]>::try_from(v) {
            Ok([x, y, z]) => Ok([x.0, y.0, z.0]),
            Err(v) => Err(self.invalid(field, format!("{} entries; give exactly three: [x, y, z]", v.len()))),
        }
    }

    pub(super) fn args(&self, raw: Vec<toml::Value>, tensors: &[TensorSpec], field: &str) -> Result<Vec<ArgSpec>, ManifestError> {
        let mut args = Vec::new();
        for (i, v) in raw.into_iter().enumerate() {
            let f = format!("{field}[{i}]");
            let arg: ArgSpec = self.decode(v, &f).map_err(|_| self.invalid(&f, "write one of { ptr = \"q\" }, { i32 = \"seq_q\" }, { u32 = ... }, { i64 = \"q.stride(2)\" }, { u64 = ... }, { f32 = \"scale\" }, { f64 = ... }".into()))?;
            if let ArgSpec::Ptr(name) = &arg {
                if !tensors.iter().any(|t| &t.name == name) {
                    let known: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
                    return Err(self.invalid(
                        &f,
                        format!("pointer `{name}` is not a tensor (tensors: {}); declare it under [[tensors]] or fix the name", known.join(", ")),
                    ));
                }
            }
            args.push(arg);
        }
        Ok(args)
    }
}
