//! The `[reference]` section of a manifest: a built-in op bound to the manifest's tensors and
//! scalars by role, the user's own reference kernel, or none (split from `load.rs`, which calls
//! [`Loader::reference`] once the roster and launch are known).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::expr;
use super::load::{Expression, Loader};
use super::target::RawCall;
use super::{BuiltinOp, LaunchSpec, ManifestError, PythonReference, ReferenceKernel, ReferenceSpec, ScalarSpec, TensorSpec};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReference {
    op: Option<String>,
    #[serde(default)]
    bind: BTreeMap<String, String>,
    source: Option<String>,
    entry: Option<String>,
    #[serde(default)]
    options: Vec<String>,
    factor: Option<f64>,
    floor: Option<f64>,
    grid: Option<Vec<Expression>>,
    block: Option<Vec<Expression>>,
    shared_bytes: Option<Expression>,
    args: Option<Vec<toml::Value>>,
}

#[derive(Deserialize)]
struct RawPythonReference {
    #[serde(flatten)]
    call: RawCall,
    factor: Option<f64>,
    floor: Option<f64>,
}

/// The keys of a Python `[reference]`.
const PYTHON_REFERENCE_KEYS: &[&str] = &["python", "setup", "path", "tensors", "args", "kwargs", "returns", "factor", "floor"];

impl Loader<'_> {
    /// `[reference]`: an op with its binding, the user's kernel, or `op = "none"`.
    pub(super) fn reference(
        &self,
        t: &mut toml::Table,
        tensors: &[TensorSpec],
        scalars: &[ScalarSpec],
        launch: &LaunchSpec,
    ) -> Result<ReferenceSpec, ManifestError> {
        if let Some(v) = t.get("reference").filter(|v| v.get("python").is_some()) {
            let v = v.clone();
            t.remove("reference");
            return self.python_reference(v);
        }
        let raw: RawReference = self.required(
            t.remove("reference"),
            "reference",
            "a [reference] section: op = \"attention_fwd\", source and entry of your reference kernel, python = \"module:callable\", or op = \"none\"",
        )?;
        match (raw.op.as_deref(), raw.source) {
            (Some("none"), None) => Ok(ReferenceSpec::None),
            (Some(op), None) => {
                let op = BuiltinOp::ALL.into_iter().find(|o| o.name() == op).ok_or_else(|| {
                    self.invalid(
                        "reference.op",
                        format!(
                            "`{op}` is not a built-in op (built in: {}, or \"none\"); or give the source and entry of your own reference kernel",
                            BuiltinOp::ALL.map(|o| o.name()).join(", ")
                        ),
                    )
                })?;
                Ok(ReferenceSpec::Op { op, bind: self.bind(op, raw.bind, tensors, scalars)? })
            }
            (None, Some(source)) => {
                let source = self.source_file(&source, "reference.source")?;
                let entry = raw.entry.ok_or_else(|| self.invalid("reference.entry", "missing; name the reference kernel's extern \"C\" function".into()))?;
                if !expr::is_identifier(&entry) {
                    return Err(self.invalid("reference.entry", format!("{entry:?} is not a C identifier")));
                }
                self.check_options(&raw.options, "reference.options")?;
                let (factor, floor) = self.rule(raw.factor, raw.floor)?;
                let launch = LaunchSpec {
                    grid: match raw.grid {
                        Some(g) => self.three(g, "reference.grid")?,
                        None => launch.grid.clone(),
                    },
                    block: match raw.block {
                        Some(b) => self.three(b, "reference.block")?,
                        None => launch.block.clone(),
                    },
                    shared_bytes: raw.shared_bytes.map(|e| e.0).unwrap_or_else(|| if raw.args.is_none() { launch.shared_bytes.clone() } else { "0".into() }),
                    // A reference kernel is the harness's own: it always gets what it asks for.
                    shared_opt_in: true,
                    timeout_ms: launch.timeout_ms,
                    args: match raw.args {
                        Some(a) => self.args(a, tensors, "reference.args")?,
                        None => launch.args.clone(),
                    },
                    // The host's guard: where it launches nothing, the outputs are empty or
                    // its bug, and the reference has nothing to compute either.
                    skip: launch.skip.clone(),
                };
                Ok(ReferenceSpec::Kernel(Box::new(ReferenceKernel { source, entry, options: raw.options, launch, factor, floor })))
            }
            (Some(_), Some(_)) => Err(self.invalid("reference", "give either op or source/entry, not both".into())),
            (None, None) => Err(self.invalid(
                "reference",
                "give op = \"attention_fwd\" or another built-in op, source and entry of your reference kernel, or op = \"none\"".into(),
            )),
        }
    }

    /// `[reference] python = "module:callable"`, with the keys of a Python `[target]` and the
    /// rule's `factor` and `floor`.
    fn python_reference(&self, v: toml::Value) -> Result<ReferenceSpec, ManifestError> {
        self.known_keys(&v, "reference", PYTHON_REFERENCE_KEYS)?;
        let raw: RawPythonReference = self.required(Some(v), "reference", "")?;
        let (factor, floor) = self.rule(raw.factor, raw.floor)?;
        let (call, _) = self.python_call(raw.call, "reference")?;
        Ok(ReferenceSpec::Python(Box::new(PythonReference { call, factor, floor })))
    }

    /// A reference's rule: `factor` (default 2) and an optional `floor`, checked.
    fn rule(&self, factor: Option<f64>, floor: Option<f64>) -> Result<(f64, Option<f64>), ManifestError> {
        let factor = factor.unwrap_or(2.0);
        if !(factor.is_finite() && factor >= 1.0) {
            return Err(self.invalid("reference.factor", format!("{factor} must be a finite number >= 1 (2 is FlashAttention's rule)")));
        }
        if floor.is_some_and(|f| !(f.is_finite() && f >= 0.0)) {
            return Err(self.invalid("reference.floor", "must be a finite number >= 0".into()));
        }
        Ok((factor, floor))
    }

    /// An op's binding: every role names a tensor (or scalar) of this manifest, of the rank the
    /// role needs; a role not listed binds the tensor or scalar of the same name.
    fn bind(
        &self,
        op: BuiltinOp,
        given: BTreeMap<String, String>,
        tensors: &[TensorSpec],
        scalars: &[ScalarSpec],
    ) -> Result<BTreeMap<String, String>, ManifestError> {
        let spec = op.spec();
        let roles: BTreeSet<&str> = spec.tensors.iter().map(|r| r.name).chain(spec.scalars.iter().map(|r| r.name)).collect();
        if let Some(unknown) = given.keys().find(|k| !roles.contains(k.as_str())) {
            return Err(self.invalid(
                &format!("reference.bind.{unknown}"),
                format!("`{unknown}` is not a role of {op} (roles: {})", roles.iter().copied().collect::<Vec<_>>().join(", ")),
            ));
        }
        let mut bind = BTreeMap::new();
        for r in spec.tensors {
            let role = r.name;
            let name = given.get(role).cloned().unwrap_or_else(|| role.to_string());
            match tensors.iter().find(|t| t.name == name) {
                Some(t) => {
                    if !r.rank.admits(t.rank()) {
                        return Err(self.invalid(
                            &format!("reference.bind.{role}"),
                            format!("{op} needs `{role}` of {}, and tensor `{name}` has rank {}", r.rank, t.rank()),
                        ));
                    }
                    bind.insert(role.to_string(), name);
                }
                None if r.required => {
                    return Err(self.invalid(
                        &format!("reference.bind.{role}"),
                        format!("{op} needs a tensor for `{role}`, and there is no tensor `{name}`; bind it: [reference.bind] {role} = \"...\""),
                    ));
                }
                None => {
                    // Unbound, the op writes the role in place: that tensor must be written.
                    let target = r.in_place.and_then(|to| bind.get(to)).and_then(|n| tensors.iter().find(|t| &t.name == n));
                    if let Some(t) = target.filter(|t| !t.role.is_written()) {
                        return Err(self.invalid(&format!("reference.bind.{role}"), format!("{op} writes `{role}` in place into `{}` when `{role}` is unbound, and tensor `{}` is an input; bind `{role}` to the output tensor, or give `{}` role = \"in_out\"", r.in_place.unwrap_or_default(), t.name, t.name)));
                    }
                }
            }
        }
        for r in spec.scalars {
            let role = r.name;
            let name = match given.get(role) {
                Some(name) => name.clone(),
                None if r.required || scalars.iter().any(|s| s.name == role) => role.to_string(),
                None => continue,
            };
            if !scalars.iter().any(|s| s.name == name) && name.parse::<f64>().is_err() && name != "true" && name != "false" {
                let fix = if r.required {
                    "declare it under [scalars] or bind a literal (\"false\", \"0.125\")"
                } else {
                    "declare it under [scalars], bind a literal (\"false\", \"0.5\") or leave it unbound"
                };
                return Err(
                    self.invalid(&format!("reference.bind.{role}"), format!("{op} needs a scalar for `{role}`, and there is no scalar `{name}`; {fix}"))
                );
            }
            bind.insert(role.to_string(), name);
        }
        Ok(bind)
    }
}
