//! `[launch]`: the kernel's grid and block, its dynamic shared memory and whether its host
//! opts in past 48 KiB, its watchdog and its arguments, read by the manifest's [`Loader`]; a
//! reference kernel's launch reuses [`Loader::three`] and [`Loader::args`].

use serde::Deserialize;

use super::load::{Expression, Loader};
use super::{ArgSpec, LaunchSpec, ManifestError, TensorSpec};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLaunch {
    grid: Vec<Expression>,
    block: Vec<Expression>,
    #[serde(default)]
    shared_bytes: Option<Expression>,
    shared_opt_in: Option<bool>,
    timeout_ms: Option<u64>,
    args: Vec<toml::Value>,
}

impl Loader<'_> {
    pub(super) fn launch(&self, t: &mut toml::Table, tensors: &[TensorSpec]) -> Result<LaunchSpec, ManifestError> {
        let raw: RawLaunch = self.required(t.remove("launch"), "launch", "a [launch] section with grid, block and args")?;
        let launch = LaunchSpec {
            grid: self.three(raw.grid, "launch.grid")?,
            block: self.three(raw.block, "launch.block")?,
            shared_bytes: raw.shared_bytes.map(|e| e.0).unwrap_or_else(|| "0".into()),
            shared_opt_in: raw.shared_opt_in.unwrap_or(true),
            timeout_ms: raw.timeout_ms,
            args: self.args(raw.args, tensors, "launch.args")?,
        };
        if launch.timeout_ms == Some(0) {
            return Err(self.invalid("launch.timeout_ms", "0 ms would time out every launch; remove it or give a positive value".into()));
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
