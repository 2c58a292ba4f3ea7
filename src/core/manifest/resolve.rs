//! Resolution: [`ResolvedLaunch`], a launch evaluated for one concrete case, and
//! [`Manifest::resolve`], which computes it from the case's [`Vars`].
//!
//! It exists so that everything past this point (the launcher, the emitters) sees plain
//! numbers and argument values, never an expression. Resolution is where a case meets the
//! manifest, so it is also where a case's params are checked against the declared ones
//! ([`Manifest::check_params`]) and where an `i32` or `u32` argument that overflows is refused
//! rather than wrapped: a silently wrapped offset is precisely the bug class users want named.

use std::collections::BTreeMap;

use super::expr::{Env, ExprFailure, Vars};
use super::load::Loader;
use super::{ArgSpec, LaunchSpec, Manifest, ManifestError};
use crate::core::case::Scalar;
use crate::core::target::{CallValue, PythonTarget, ResolvedCall};

/// One kernel argument with its value for a concrete case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ResolvedArg {
    /// Device pointer to the tensor at this roster position.
    Tensor(usize),
    /// 32-bit signed integer.
    I32(i32),
    /// 32-bit unsigned integer.
    U32(u32),
    /// 64-bit signed integer.
    I64(i64),
    /// 64-bit unsigned integer.
    U64(u64),
    /// 32-bit float.
    F32(f32),
    /// 64-bit float.
    F64(f64),
}

/// Everything needed to launch a kernel for one case.
///
/// Hardware limits (block ≤ 1024 threads, grid y/z ≤ 65535, shared memory per block) are left
/// to the driver, which reports them at launch as resource errors.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedLaunch {
    /// Grid size; every component ≥ 1 unless the launch has a `skip` guard
    /// ([`super::LaunchSpec::skip`]).
    pub grid: [u32; 3],
    /// Block size; every component ≥ 1 unless the launch has a `skip` guard.
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes.
    pub shared_bytes: u32,
    /// Whether the host opts in to more than 48 KiB of it ([`super::LaunchSpec::shared_opt_in`]).
    pub shared_opt_in: bool,
    /// Watchdog override in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Kernel arguments in order.
    pub args: Vec<ResolvedArg>,
    /// The host launches nothing for this case (its `skip` guard holds): geometry and arguments
    /// are empty, and launching it is a no-op.
    pub skip: bool,
}

impl Manifest {
    /// Checks that `params` sets exactly the declared params, each to one of its listed values.
    pub fn check_params(&self, params: &BTreeMap<String, i64>) -> Result<(), ManifestError> {
        let l = Loader { path: &self.path };
        self.check_param_values(params).map_err(|(field, problem)| l.invalid(&field, problem))?;
        for (name, values) in self.params.iter().filter(|(name, _)| !self.derived_params.contains_key(*name)) {
            if !params.contains_key(name) {
                return Err(l.invalid(&format!("params.{name}"), format!("the case does not set it; set one of {values:?}")));
            }
        }
        Ok(())
    }

    /// Checks that every param `params` names is declared and set to one of its listed values
    /// (params it leaves out take their defaults); the error is the field and the problem.
    pub fn check_param_values(&self, params: &BTreeMap<String, i64>) -> Result<(), (String, String)> {
        for (name, value) in params {
            if let Some(e) = self.derived_params.get(name) {
                return Err((
                    format!("params.{name}"),
                    format!("{name} is derived from the case ({name} = {e}, declared in {}); leave it out of the case", self.path.display()),
                ));
            }
            match self.params.get(name) {
                None => {
                    let declared: Vec<&str> = self.params.keys().map(|s| s.as_str()).collect();
                    return Err((
                        format!("params.{name}"),
                        format!(
                            "`{name}` is not a declared param of {} (declared: {}); remove it or declare it in {}",
                            self.name,
                            if declared.is_empty() { "none".to_string() } else { declared.join(", ") },
                            self.path.display()
                        ),
                    ));
                }
                Some(values) if !values.contains(value) => {
                    return Err((
                        format!("params.{name}"),
                        format!("value {value} is not one of {values:?} (declared in {}); use one of them or add {value} there", self.path.display()),
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Evaluates the kernel's launch for one case's values.
    pub fn resolve(&self, vars: &Vars) -> Result<ResolvedLaunch, ManifestError> {
        self.resolve_launch(&self.launch, vars, if self.steps.is_empty() { "launch" } else { "launch[0]" })
    }

    /// The later launches of a launch sequence for one case, in order (empty for one launch).
    pub fn resolve_steps(&self, vars: &Vars) -> Result<Vec<ResolvedLaunch>, ManifestError> {
        self.steps.iter().enumerate().map(|(i, s)| self.resolve_launch(&s.launch, vars, &format!("launch[{}]", i + 1))).collect()
    }

    /// The Python calls a case of this manifest makes: its target's, then its reference's.
    pub fn python_calls(&self) -> impl Iterator<Item = &PythonTarget> {
        let reference = match &self.reference {
            super::ReferenceSpec::Python(r) => Some(&r.call),
            _ => None,
        };
        self.target.python().into_iter().chain(reference)
    }

    /// The Python target's call for one case (`None` for an NVRTC target): each argument a
    /// tensor's roster position when it names a tensor, a `bool` when it names a flag scalar,
    /// else its expression's value (an `int`, a `float` or a `bool`).
    pub fn resolve_call(&self, vars: &Vars) -> Result<Option<ResolvedCall>, ManifestError> {
        let Some(p) = self.target.python() else { return Ok(None) };
        self.resolve_python(p, vars, "target").map(Some)
    }

    /// [`Manifest::resolve_call`] for any Python call of this manifest (its target, or a Python
    /// reference under `section`).
    pub fn resolve_python(&self, p: &PythonTarget, vars: &Vars, section: &str) -> Result<ResolvedCall, ManifestError> {
        let env = Env::new(vars);
        let value = |field: String, text: &str| -> Result<CallValue, ManifestError> {
            let text = text.trim();
            if let Some(i) = self.tensor_index(text) {
                return Ok(CallValue::Tensor(i));
            }
            if let (Some(s), Some(Scalar::Bool(b))) = (self.scalar(text), vars.scalars.get(text)) {
                if s.ty == super::ScalarType::Bool {
                    return Ok(CallValue::Bool(*b));
                }
            }
            match env.value(text).map_err(|f| self.expr_error(field.clone(), text, f))? {
                evalexpr::Value::Int(i) => Ok(CallValue::Int(i)),
                evalexpr::Value::Float(x) => Ok(CallValue::Float(x)),
                evalexpr::Value::Boolean(b) => Ok(CallValue::Bool(b)),
                other => {
                    Err(self.expr_error(field, text, ExprFailure { problem: format!("evaluates to {other}, not a number or a flag"), hint: String::new() }))
                }
            }
        };
        let args = p.args.iter().enumerate().map(|(i, a)| value(format!("{section}.args[{i}]"), a)).collect::<Result<_, _>>()?;
        let kwargs = p.kwargs.iter().map(|(k, a)| value(format!("{section}.kwargs.{k}"), a).map(|v| (k.clone(), v))).collect::<Result<_, _>>()?;
        let returns = p.returns.iter().map(|r| self.tensor_index(r).expect("checked at load")).collect();
        Ok(ResolvedCall { args, kwargs, returns })
    }

    /// Evaluates a launch (the kernel's, or a reference kernel's under `section`) for one case.
    pub fn resolve_launch(&self, launch: &LaunchSpec, vars: &Vars, section: &str) -> Result<ResolvedLaunch, ManifestError> {
        let env = Env::new(vars);
        if let Some(guard) = &launch.skip {
            if env.boolean(guard).map_err(|f| self.expr_error(format!("{section}.skip"), guard, f))? {
                let (grid, block, shared_bytes, args) = ([0; 3], [0; 3], 0, Vec::new());
                return Ok(ResolvedLaunch { grid, block, shared_bytes, shared_opt_in: launch.shared_opt_in, timeout_ms: launch.timeout_ms, args, skip: true });
            }
        }
        let zero_ok = launch.skip.is_some();
        let grid = self.resolve_dim(&env, &launch.grid, section, "grid", zero_ok)?;
        let block = self.resolve_dim(&env, &launch.block, section, "block", zero_ok)?;
        let shared_bytes = env
            .size(&launch.shared_bytes, u32::MAX as u64, "shared memory size")
            .map_err(|f| self.expr_error(format!("{section}.shared_bytes"), &launch.shared_bytes, f))? as u32;
        let args = launch.args.iter().enumerate().map(|(i, a)| self.resolve_arg(&env, i, a, section)).collect::<Result<Vec<_>, _>>()?;
        Ok(ResolvedLaunch { grid, block, shared_bytes, shared_opt_in: launch.shared_opt_in, timeout_ms: launch.timeout_ms, args, skip: false })
    }

    fn expr_error(&self, field: String, expr: &str, f: ExprFailure) -> ManifestError {
        ManifestError::Expr { path: self.path.clone(), field, expr: expr.to_string(), problem: f.problem, hint: f.hint }
    }

    /// One of `grid` or `block`: three expressions, each at least 1 (or 0 too, `zero_ok`,
    /// behind a `skip` guard: the host's own launch, which the driver refuses).
    fn resolve_dim(&self, env: &Env, exprs: &[String; 3], section: &str, name: &str, zero_ok: bool) -> Result<[u32; 3], ManifestError> {
        let mut out = [0u32; 3];
        for (i, e) in exprs.iter().enumerate() {
            let field = format!("{section}.{name}[{i}]");
            let v = env.size(e, u32::MAX as u64, name).map_err(|f| self.expr_error(field.clone(), e, f))?;
            if v == 0 && !zero_ok {
                return Err(self.expr_error(
                    field,
                    e,
                    ExprFailure {
                        problem: format!("{name} evaluates to 0"),
                        hint: "; a launch needs at least 1 (use max(1, ...)), or say when the host launches nothing: [launch] skip = \"rows == 0\"".into(),
                    },
                ));
            }
            out[i] = v as u32;
        }
        Ok(out)
    }

    /// One argument: a tensor pointer, or an expression that fits its C type.
    fn resolve_arg(&self, env: &Env, i: usize, a: &ArgSpec, section: &str) -> Result<ResolvedArg, ManifestError> {
        let field = || format!("{section}.args[{i}]");
        let overflow = |ty: &'static str, e: &str, value: i64, wrapped: i64| ManifestError::I32Overflow {
            path: self.path.clone(),
            ty,
            index: i,
            expr: e.to_string(),
            value,
            wrapped,
        };
        Ok(match a {
            ArgSpec::Ptr(name) => match self.tensor_index(name) {
                Some(t) => ResolvedArg::Tensor(t),
                None => return Err(Loader { path: &self.path }.invalid(&field(), format!("pointer `{name}` is not a tensor; declare it under [[tensors]]"))),
            },
            ArgSpec::I32(e) => {
                let v = env.int(e).map_err(|f| self.expr_error(field(), e, f))?;
                ResolvedArg::I32(i32::try_from(v).map_err(|_| overflow("i32", e, v, v as i32 as i64))?)
            }
            ArgSpec::U32(e) => {
                let v = env.int(e).map_err(|f| self.expr_error(field(), e, f))?;
                ResolvedArg::U32(u32::try_from(v).map_err(|_| overflow("u32", e, v, v as u32 as i64))?)
            }
            ArgSpec::I64(e) => ResolvedArg::I64(env.int(e).map_err(|f| self.expr_error(field(), e, f))?),
            ArgSpec::U64(e) => {
                let v = env.int(e).map_err(|f| self.expr_error(field(), e, f))?;
                ResolvedArg::U64(u64::try_from(v).map_err(|_| overflow("u64", e, v, v))?)
            }
            ArgSpec::F32(e) => {
                let v = env.float(e).map_err(|f| self.expr_error(field(), e, f))?;
                let x = v as f32;
                if v.is_finite() && !x.is_finite() {
                    return Err(self.expr_error(
                        field(),
                        e,
                        ExprFailure { problem: format!("evaluates to {v}, which overflows f32"), hint: "; pass it as { f64 = ... } or rescale it".into() },
                    ));
                }
                ResolvedArg::F32(x)
            }
            ArgSpec::F64(e) => ResolvedArg::F64(env.float(e).map_err(|f| self.expr_error(field(), e, f))?),
        })
    }
}
