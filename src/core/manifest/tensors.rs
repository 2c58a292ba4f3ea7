//! `[[tensors]]`: the roster, read by the manifest's [`Loader`]: each tensor's name, role,
//! shape, type, layout freedom, alignment, value classes or initial contents, value range,
//! capacity and where derived values come from ([`super::lengths`]).

use serde::Deserialize;

use super::load::{Loader, DEFAULT_VALUES};
use super::{expr, DimSpec, DtypeSpec, Init, LayoutFreedom, LengthsSpec, ManifestError, Role, ScalarSpec, TensorSpec};
use crate::core::case::{Dtype, ValueClass, MAX_RANK};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTensor {
    name: String,
    role: Role,
    shape: Vec<toml::Value>,
    dtype: Option<String>,
    layout: Option<LayoutFreedom>,
    #[serde(default)]
    broadcast: bool,
    align: Option<u32>,
    base_align: Option<u32>,
    values: Option<Vec<String>>,
    init: Option<toml::Value>,
    range: Option<[toml::Value; 2]>,
    #[serde(default)]
    order_dependent: bool,
    #[serde(default)]
    distinct: bool,
    capacity: Option<toml::Value>,
    derive: Option<toml::Value>,
}

impl Loader<'_> {
    /// `[[tensors]]`: the roster.
    pub(super) fn tensors(
        &self,
        t: &mut toml::Table,
        dims: &[DimSpec],
        scalars: &[ScalarSpec],
        lengths: &[LengthsSpec],
    ) -> Result<Vec<TensorSpec>, ManifestError> {
        let raw: Vec<toml::Value> = self.required(t.remove("tensors"), "tensors", "at least one [[tensors]] table")?;
        if raw.is_empty() {
            return Err(self.invalid("tensors", "empty; declare the kernel's tensors as [[tensors]] tables".into()));
        }
        let mut out: Vec<TensorSpec> = Vec::new();
        for (i, v) in raw.into_iter().enumerate() {
            let name_hint = v.get("name").and_then(|n| n.as_str()).map(str::to_string).unwrap_or_else(|| format!("[{i}]"));
            let field = format!("tensors.{name_hint}");
            let r: RawTensor = self.decode(v, &field)?;
            if !expr::is_identifier(&r.name) {
                return Err(self.invalid(
                    &format!("{field}.name"),
                    format!("{:?} is not a C identifier; tensor names appear in expressions (`{}.stride(0)`)", r.name, r.name),
                ));
            }
            let taken = out.iter().any(|o| o.name == r.name) || dims.iter().any(|d| d.name == r.name) || scalars.iter().any(|s| s.name == r.name);
            if taken || lengths.iter().any(|l| l.name == r.name) {
                return Err(self.invalid(&format!("{field}.name"), format!("`{}` is already a tensor, dim, scalar or lengths name; rename one", r.name)));
            }
            let derive = r.derive.clone().map(|v| self.derived_from(v, &format!("{field}.derive"), lengths)).transpose()?;
            let mut spec = self.tensor(r, &field)?;
            if let Some(d) = &derive {
                self.check_derived(&spec, d)?;
            }
            spec.derive = derive;
            out.push(spec);
        }
        Ok(out)
    }

    fn tensor(&self, r: RawTensor, field: &str) -> Result<TensorSpec, ManifestError> {
        if r.shape.is_empty() || r.shape.len() > MAX_RANK {
            return Err(self.invalid(&format!("{field}.shape"), format!("{} dimensions; a tensor has 1 to {MAX_RANK}", r.shape.len())));
        }
        let mut shape = Vec::new();
        for (i, s) in r.shape.into_iter().enumerate() {
            shape.push(match s {
                toml::Value::String(e) => e,
                toml::Value::Integer(n) if n > 0 => n.to_string(),
                other => {
                    return Err(self.invalid(&format!("{field}.shape[{i}]"), format!("{other} is neither a dim name, an expression nor a positive number")))
                }
            });
        }
        let dtype = match r.dtype.as_deref() {
            None | Some("case") => DtypeSpec::Case,
            Some(n) => DtypeSpec::Fixed(Dtype::from_name(n).ok_or_else(|| {
                self.invalid(&format!("{field}.dtype"), format!("`{n}` is not \"case\" or one of {}", Dtype::EVERY.map(|d| d.name()).join(", ")))
            })?),
        };
        let elem = match dtype {
            DtypeSpec::Fixed(d) => d.size(),
            DtypeSpec::Case => 1,
        };
        let align = self.alignment(r.align.unwrap_or(elem), &format!("{field}.align"))?;
        let base_align = self.alignment(r.base_align.unwrap_or(align), &format!("{field}.base_align"))?;
        if base_align < align {
            let problem = format!("{base_align} is less than align = {align}, which already holds for the base; remove base_align or raise it");
            return Err(self.invalid(&format!("{field}.base_align"), problem));
        }
        if r.broadcast && r.role != Role::Input {
            return Err(self.invalid(&format!("{field}.broadcast"), "only inputs may be broadcast (a stride-0 output would be written many times)".into()));
        }
        let float = !matches!(dtype, DtypeSpec::Fixed(d) if !d.is_float());
        let values = match r.values {
            None if float => DEFAULT_VALUES.to_vec(),
            None => vec![ValueClass::Uniform],
            Some(names) => {
                let mut v = Vec::new();
                for (i, n) in names.iter().enumerate() {
                    let c = ValueClass::from_name(n).ok_or_else(|| {
                        self.invalid(
                            &format!("{field}.values[{i}]"),
                            format!("`{n}` is not a value class; use {}", ValueClass::ALL.map(|c| c.name()).join(", ")),
                        )
                    })?;
                    if !v.contains(&c) {
                        v.push(c);
                    }
                }
                if v.is_empty() {
                    return Err(self.invalid(&format!("{field}.values"), "empty; list at least one class".into()));
                }
                v
            }
        };
        let init = match (r.role, r.init) {
            (Role::Input, Some(_)) => return Err(self.invalid(&format!("{field}.init"), "an input's contents are drawn from `values`; remove init".into())),
            (Role::Input, None) => Init::Drawn,
            (Role::Output, None) => Init::Sentinel,
            (Role::InOut, None) => Init::Drawn,
            (Role::Scratch, None) => Init::Uninit,
            (_, Some(v)) => self.init(v, &format!("{field}.init"))?,
        };
        if r.order_dependent && !r.role.is_judged() {
            return Err(self.invalid(
                &format!("{field}.order_dependent"),
                format!("`{}` is {}: only an output or in-out the kernel writes can have bits that depend on the order of its writes", r.name, r.role.name()),
            ));
        }
        let range = match r.range {
            None => None,
            Some([lo, hi]) => Some([self.expr_text(lo, &format!("{field}.range[0]"))?, self.expr_text(hi, &format!("{field}.range[1]"))?]),
        };
        if r.distinct && (float || r.broadcast) {
            return Err(self.invalid(
                &format!("{field}.distinct"),
                "only an integer tensor without broadcast dims holds distinct values (slot mappings, scatter targets); remove it".into(),
            ));
        }
        let layout = r.layout.unwrap_or_default();
        let capacity = match r.capacity {
            None => None,
            Some(_) if !matches!(layout, LayoutFreedom::Dense | LayoutFreedom::Fixed) => {
                return Err(self.invalid(
                    &format!("{field}.capacity"),
                    format!(
                        "needs layout = \"dense\" or \"fixed\" (a {} tensor's span is drawn, so no fixed count of elements holds it)",
                        format!("{layout:?}").to_lowercase()
                    ),
                ))
            }
            Some(v) => Some(self.expr_text(v, &format!("{field}.capacity"))?),
        };
        Ok(TensorSpec {
            name: r.name,
            role: r.role,
            shape,
            dtype,
            layout,
            broadcast: r.broadcast,
            align,
            base_align,
            values,
            init,
            range,
            order_dependent: r.order_dependent,
            distinct: r.distinct,
            capacity,
            derive: None,
        })
    }

    pub(super) fn expr_text(&self, v: toml::Value, field: &str) -> Result<String, ManifestError> {
        match v {
            toml::Value::String(s) => Ok(s),
            toml::Value::Integer(n) => Ok(n.to_string()),
            toml::Value::Float(x) if x.is_finite() => Ok(format!("{x:?}")),
            other => Err(self.invalid(field, format!("{other} is neither a finite number nor an expression"))),
        }
    }

    /// `init`: `"sentinel"`, `"zero"`, `"neg_inf"`, `"drawn"`, `"uninit"` or `{ const = 1.5 }`.
    fn init(&self, v: toml::Value, field: &str) -> Result<Init, ManifestError> {
        match v {
            toml::Value::String(s) => match s.as_str() {
                "sentinel" => Ok(Init::Sentinel),
                "zero" => Ok(Init::Zero),
                "neg_inf" => Ok(Init::NegInf),
                "drawn" => Ok(Init::Drawn),
                "uninit" => Ok(Init::Uninit),
                other => Err(self.invalid(field, format!("`{other}` is not one of sentinel, zero, neg_inf, drawn, uninit, {{ const = X }}"))),
            },
            toml::Value::Table(t) => match t.get("const") {
                Some(toml::Value::Float(x)) => Ok(Init::Const(*x)),
                Some(toml::Value::Integer(n)) => Ok(Init::Const(*n as f64)),
                _ => Err(self.invalid(field, "write { const = 1.5 }".into())),
            },
            other => Err(self.invalid(field, format!("{other} is not an initial contents; use e.g. \"zero\""))),
        }
    }
}
