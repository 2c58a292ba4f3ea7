//! Resolution: [`ResolvedLaunch`], a manifest evaluated for one concrete case, and
//! [`Manifest::resolve`], which computes it.
//!
//! It exists so that everything past this point (the arena, the launcher, the emitters) sees
//! plain numbers, buffer sizes and argument values, never an expression. Resolution is where a
//! case meets the manifest, so it is also where a case's params are checked against the declared
//! ones ([`Manifest::check_params`]) and where an `i32` argument that overflows is refused.

use std::collections::BTreeMap;

use crate::case::{Case, TensorId, MAX_SPAN_BYTES};
use crate::plan::Plan;

use super::expr::{Env, ExprFailure};
use super::load::Loader;
use super::{ArgSpec, BufferDtype, BufferInit, BufferRole, Manifest, ManifestError};

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

impl Manifest {
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
        let params = self.case_params(case)?;
        let env = Env::new(case, plan, &params, &self.defines);
        let grid = self.resolve_dim(&env, &self.launch.grid, "grid")?;
        let block = self.resolve_dim(&env, &self.launch.block, "block")?;
        let shared_bytes = env
            .size(&self.launch.shared_bytes, u32::MAX as u64, "shared memory size")
            .map_err(|f| self.expr_error("launch.shared_bytes".into(), &self.launch.shared_bytes, f))? as u32;
        let mut buffers = Vec::with_capacity(self.buffers.len());
        for (i, b) in self.buffers.iter().enumerate() {
            let max = MAX_SPAN_BYTES / b.dtype.size() as u64;
            let count = env
                .size(&b.count, max, "element count")
                .map_err(|f| self.expr_error(format!("buffers[{i}].count"), &b.count, f))?;
            buffers.push(ResolvedBuffer { name: b.name.clone(), count, dtype: b.dtype, init: b.init, role: b.role });
        }
        let mut args = Vec::with_capacity(self.launch.args.len());
        for (i, a) in self.launch.args.iter().enumerate() {
            args.push(self.resolve_arg(&env, i, a)?);
        }
        Ok(ResolvedLaunch { grid, block, shared_bytes, timeout_ms: self.launch.timeout_ms, buffers, args })
    }

    /// The params `case` is resolved with: the manifest's defaults, overridden by the case's own
    /// values; a case param the manifest does not declare is an error.
    fn case_params(&self, case: &Case) -> Result<BTreeMap<String, i64>, ManifestError> {
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
        Ok(params)
    }

    /// An expression in `field` that failed to evaluate for this case.
    fn expr_error(&self, field: String, expr: &str, f: ExprFailure) -> ManifestError {
        ManifestError::Expr {
            path: self.path.clone(),
            field,
            expr: expr.to_string(),
            problem: f.problem,
            hint: f.hint,
        }
    }

    /// `launch.grid` or `launch.block` (`name`) for this case; a component of 0 is an error.
    fn resolve_dim(&self, env: &Env, exprs: &[String; 3], name: &str) -> Result<[u32; 3], ManifestError> {
        let mut out = [0u32; 3];
        for (i, e) in exprs.iter().enumerate() {
            let field = format!("launch.{name}[{i}]");
            let v = env.size(e, u32::MAX as u64, name).map_err(|f| self.expr_error(field.clone(), e, f))?;
            if v == 0 {
                return Err(self.expr_error(
                    field,
                    e,
                    ExprFailure { problem: format!("{name} evaluates to 0"), hint: "; a launch needs at least 1 (use max(1, ...))".into() },
                ));
            }
            out[i] = v as u32;
        }
        Ok(out)
    }

    /// Argument `i` of `launch.args` for this case: a pointer names a tensor or a declared
    /// buffer; an `i32` that does not fit is [`ManifestError::I32Overflow`], never wrapped.
    fn resolve_arg(&self, env: &Env, i: usize, a: &ArgSpec) -> Result<ResolvedArg, ManifestError> {
        let l = Loader { path: &self.path };
        let field = || format!("launch.args[{i}]");
        Ok(match a {
            ArgSpec::Ptr(name) => match TensorId::from_name(name) {
                Some(t) => ResolvedArg::Tensor(t),
                None => match self.buffers.iter().position(|b| &b.name == name) {
                    Some(j) => ResolvedArg::Buffer(j),
                    None => return Err(l.invalid(&field(), format!("pointer `{name}` is neither a tensor nor a declared buffer; declare it under [[buffers]]"))),
                },
            },
            ArgSpec::I32(e) => {
                let v = env.int(e).map_err(|f| self.expr_error(field(), e, f))?;
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
            ArgSpec::I64(e) => ResolvedArg::I64(env.int(e).map_err(|f| self.expr_error(field(), e, f))?),
            ArgSpec::F32(e) => {
                let v = env.float(e).map_err(|f| self.expr_error(field(), e, f))?;
                let x = v as f32;
                if v.is_finite() && !x.is_finite() {
                    return Err(self.expr_error(field(), e, ExprFailure { problem: format!("evaluates to {v}, which overflows f32"), hint: "; pass it as { i64 = ... } or rescale it".into() }));
                }
                ResolvedArg::F32(x)
            }
        })
    }
}
