//! Load-time checks of a manifest over every parameter combination: [`Manifest::launch_needs`]
//! evaluates the launch (grid, block, shared memory, arguments, tensor shapes, and a reference
//! kernel's launch) for each combination and element size at the dims' range ends and boundary
//! hints, and [`ArchLimits`] says which combinations a target architecture can launch.
//!
//! It exists because the sample case [`Manifest::sample_vars`] checks only the default params
//! at the low end of every range: a `cdiv(seq_q, BLOCK_M - 64)` that divides by zero for the
//! other `BLOCK_M`, or shared memory past a GPU's limit for the largest tile, would otherwise
//! pass `build` and `case check` and surface only as a launch failure on a GPU.
//!
//! Points vary one dim at a time from the sample (an equality among the relations carries the
//! value to its partner), and only dims that some non-trivial expression depends on: a bare dim
//! or stride cannot fail, and checking the full cartesian product of hints would cost more than
//! loading the manifest. A point that breaks `requires` or the contract's relations is not a
//! case any command draws, so it is skipped.

use std::collections::{BTreeMap, BTreeSet};

use super::expr::{self, Env, ExprFailure, Vars};
use super::{Manifest, ManifestError, ReferenceSpec};
use crate::core::case::Dtype;

/// What one parameter combination asks of the GPU, at its most demanding point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchNeeds {
    /// The combination.
    pub params: BTreeMap<String, i64>,
    /// Most threads per block.
    pub threads: u64,
    /// Most dynamic shared memory per block, in bytes.
    pub shared_bytes: u64,
    /// The point where the shared memory peaks, in words (`seq_k = 4096`).
    pub shared_at: String,
}

/// The per-block limits of one GPU architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchLimits {
    /// `10 * major + minor` (90 for sm_90).
    pub sm: u32,
    /// Threads per block.
    pub max_threads: u64,
    /// Dynamic shared memory per block with the opt-in the launcher makes.
    pub max_shared_bytes: u64,
}

/// The architectures `cudafuzz build` targets by default, and against which a manifest is
/// checked at load.
pub const DEFAULT_TARGETS: [u32; 3] = [80, 89, 90];

impl ArchLimits {
    /// The limits of `sm` (CUDA programming guide, "Technical Specifications per Compute
    /// Capability"); an architecture not listed gets those of the nearest older one.
    pub fn of(sm: u32) -> ArchLimits {
        const KB: u64 = 1024;
        let shared = match sm {
            0..=69 => 48 * KB,
            70..=72 => 96 * KB,
            73..=79 => 64 * KB,
            80 | 87 => 163 * KB,
            81..=89 => 99 * KB,
            90..=119 => 227 * KB,
            _ => 99 * KB,
        };
        ArchLimits { sm, max_threads: 1024, max_shared_bytes: shared }
    }

    /// Why `needs` cannot launch here, or `None` when it can.
    pub fn refuses(&self, needs: &LaunchNeeds) -> Option<String> {
        if needs.threads > self.max_threads {
            return Some(format!("{} threads per block, more than sm_{}'s {}", needs.threads, self.sm, self.max_threads));
        }
        if needs.shared_bytes > self.max_shared_bytes {
            return Some(format!(
                "{} bytes of dynamic shared memory{}, more than sm_{}'s {} KB",
                needs.shared_bytes,
                needs.shared_at,
                self.sm,
                self.max_shared_bytes / 1024
            ));
        }
        None
    }
}

/// `BLOCK_M = 64, BLOCK_N = 32`, or `the default params` when there are none.
pub fn params_text(params: &BTreeMap<String, i64>) -> String {
    if params.is_empty() {
        return "no params".into();
    }
    params.iter().map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", ")
}

/// How an expression's value is used, which decides what a bad value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    /// A grid or block extent: an integer from 1 to `u32::MAX` (0 too behind a `skip` guard).
    Launch,
    /// Dynamic shared memory: an integer from 0 to `u32::MAX`.
    Shared,
    /// A tensor extent: an integer of at least 1, or 0 where a dim it reads is 0.
    Extent,
    /// An integer argument (its width is checked per case: an overflow is a finding).
    Int,
    /// A float argument.
    Float,
}

/// One non-trivial expression of the manifest, and what it depends on.
struct Checked {
    field: String,
    expr: String,
    what: Use,
    dims: BTreeSet<String>,
    names_tensor: bool,
    /// The `skip` guard of the launch the expression belongs to: where it holds, the host
    /// launches nothing and the expression is not evaluated.
    skip: Option<String>,
}

impl Manifest {
    /// Every parameter combination's needs, evaluated at every point (see the module docs);
    /// the first expression that fails at some point is an error naming its field, the
    /// combination and the point.
    pub fn launch_needs(&self) -> Result<Vec<LaunchNeeds>, ManifestError> {
        let checked = self.checked_expressions();
        let dims: BTreeSet<&String> = checked.iter().flat_map(|c| &c.dims).collect();
        let mut sizes = BTreeSet::new();
        let dtypes: Vec<Dtype> = self.dtypes.iter().copied().filter(|d| sizes.insert(d.size())).collect();
        let mut out = Vec::new();
        for params in self.param_combinations() {
            let mut needs = LaunchNeeds { params: params.clone(), threads: 0, shared_bytes: 0, shared_at: String::new() };
            for &dtype in &dtypes {
                let mut base = Vars { params: params.clone(), elem_bytes: dtype.size(), ..self.sample_vars() };
                self.finish_point(&mut base, dtype);
                let label =
                    |at: &str| format!(" for {}{at}{}", params_text(&params), if dtypes.len() > 1 { format!(" ({})", dtype.name()) } else { String::new() });
                let launch = match self.resolve(&base) {
                    Ok(l) => Some(l),
                    Err(ManifestError::I32Overflow { .. }) => None,
                    Err(e) => return Err(at_point(e, &label(""))),
                };
                if let ReferenceSpec::Kernel(k) = &self.reference {
                    match self.resolve_launch(&k.launch, &base, "reference") {
                        Ok(_) | Err(ManifestError::I32Overflow { .. }) => {}
                        Err(e) => return Err(at_point(e, &label(""))),
                    }
                }
                if let Some(l) = launch {
                    needs.threads = needs.threads.max(l.block.iter().map(|&b| b as u64).product());
                    needs.shared_bytes = needs.shared_bytes.max(l.shared_bytes as u64);
                }
                for &d in &dims {
                    let relevant: Vec<&Checked> = checked.iter().filter(|c| c.dims.contains(d)).collect();
                    for v in self.point_values(d) {
                        let mut vars = base.clone();
                        self.set_dim(&mut vars, d, v);
                        if !self.relations_hold(&vars) {
                            continue;
                        }
                        let at = format!(", {d} = {v}");
                        let (threads, shared) = self.evaluate_point(&mut vars, dtype, &relevant).map_err(|e| at_point(e, &label(&at)))?;
                        needs.threads = needs.threads.max(threads);
                        if shared > needs.shared_bytes {
                            needs.shared_bytes = shared;
                            needs.shared_at = format!(" at {d} = {v}");
                        }
                    }
                }
            }
            out.push(needs);
        }
        Ok(out)
    }

    /// Each combination fits at least one of the default target architectures
    /// ([`DEFAULT_TARGETS`]); one that fits none is an error naming the field and the limits.
    pub(super) fn check_combinations(&self) -> Result<(), ManifestError> {
        for needs in self.launch_needs()? {
            let refusals: Vec<String> = DEFAULT_TARGETS.iter().filter_map(|&sm| ArchLimits::of(sm).refuses(&needs)).collect();
            if refusals.len() == DEFAULT_TARGETS.len() {
                let field = if needs.threads > ArchLimits::of(DEFAULT_TARGETS[0]).max_threads { "launch.block" } else { "launch.shared_bytes" };
                return Err(ManifestError::Invalid {
                    path: self.path.clone(),
                    field: field.into(),
                    problem: format!(
                        "{} fits no target GPU: {}; use smaller tiles for this combination, narrow the dims' ranges, or remove the param value",
                        params_text(&needs.params),
                        refusals.join("; ")
                    ),
                });
            }
        }
        Ok(())
    }

    /// The non-trivial expressions of the launch, a reference launch and the shapes (grid,
    /// block and shared memory always: their values are the needs), each with the dims it
    /// depends on, directly or through a tensor's shape.
    fn checked_expressions(&self) -> Vec<Checked> {
        let mut raw: Vec<(String, &String, Use, Option<&String>)> = Vec::new();
        let names: Vec<String> = (1..=self.steps.len()).map(|i| format!("launch[{i}]")).collect();
        let mut launches = vec![("launch", &self.launch)];
        launches.extend(names.iter().map(String::as_str).zip(self.steps.iter().map(|s| &s.launch)));
        if let ReferenceSpec::Kernel(k) = &self.reference {
            launches.push(("reference", &k.launch));
        }
        for (section, l) in launches {
            let skip = l.skip.as_ref();
            for (name, exprs) in [("grid", &l.grid), ("block", &l.block)] {
                raw.extend(exprs.iter().enumerate().map(|(i, e)| (format!("{section}.{name}[{i}]"), e, Use::Launch, skip)));
            }
            raw.push((format!("{section}.shared_bytes"), &l.shared_bytes, Use::Shared, skip));
            for (i, a) in l.args.iter().enumerate() {
                let what = if matches!(a, super::ArgSpec::F32(_) | super::ArgSpec::F64(_)) { Use::Float } else { Use::Int };
                raw.extend(a.expression().map(|e| (format!("{section}.args[{i}]"), e, what, skip)));
            }
        }
        for t in &self.tensors {
            raw.extend(t.shape.iter().enumerate().map(|(i, e)| (format!("tensors.{}.shape[{i}]", t.name), e, Use::Extent, None)));
            raw.extend(t.capacity.iter().map(|e| (format!("tensors.{}.capacity", t.name), e, Use::Extent, None)));
        }
        let mut out = Vec::new();
        for (field, expr, what, skip) in raw {
            if is_trivial(expr) && !matches!(what, Use::Launch | Use::Shared) {
                continue;
            }
            let mut dims = BTreeSet::new();
            let mut names_tensor = false;
            for v in expr::variables_in(expr) {
                match v.split_once('.').and_then(|(t, _)| self.tensor(t)) {
                    Some(t) => {
                        names_tensor = true;
                        dims.extend(t.shape.iter().flat_map(|s| expr::variables_in(s)).filter(|n| self.dim(n).is_some()));
                    }
                    None if self.dim(&v).is_some() => {
                        dims.insert(v);
                    }
                    None => {}
                }
            }
            if let Some(guard) = skip {
                dims.extend(expr::variables_in(guard).into_iter().filter(|n| self.dim(n).is_some()));
            }
            out.push(Checked { field, expr: expr.clone(), what, dims, names_tensor, skip: skip.cloned() });
        }
        out
    }

    /// A dim's range ends and boundary hints inside its range, on its multiple.
    fn point_values(&self, name: &str) -> Vec<u64> {
        let Some(d) = self.dim(name) else { return Vec::new() };
        let m = d.multiple.max(1);
        let (lo, hi) = (d.range[0], d.range[1].min(d.max.max(1)));
        let mut out = BTreeSet::new();
        for v in [lo, hi].into_iter().chain(self.hint_values(d)) {
            let v = v.div_ceil(m).saturating_mul(m);
            if (lo..=hi).contains(&v) {
                out.insert(v);
            }
        }
        out.into_iter().collect()
    }

    /// Sets `dim` and every dim an equality among the relations ties to it.
    fn set_dim(&self, vars: &mut Vars, dim: &str, v: u64) {
        vars.dims.insert(dim.to_string(), v);
        for rel in self.requires.iter().chain(&self.contract.relations) {
            if let Some((a, b)) = rel.split_once("==") {
                let (a, b) = (a.trim(), b.trim());
                let other = if a == dim {
                    b
                } else if b == dim {
                    a
                } else {
                    continue;
                };
                if vars.dims.contains_key(other) {
                    vars.dims.insert(other.to_string(), v);
                }
            }
        }
    }

    /// Scalars (which may depend on dims) and dense tensors for the point's dims.
    fn finish_point(&self, vars: &mut Vars, dtype: Dtype) {
        for s in &self.scalars {
            let v = self.default_scalar(s, vars);
            vars.scalars.insert(s.name.clone(), v);
        }
        vars.tensors = self.dense_tensor_vars(vars, dtype);
    }

    /// Whether the point is a case commands draw: every `requires` and contract relation holds.
    fn relations_hold(&self, vars: &Vars) -> bool {
        if self.requires.is_empty() && self.contract.relations.is_empty() {
            return true;
        }
        let env = Env::without_tensors(vars);
        self.requires.iter().chain(&self.contract.relations).all(|r| env.boolean(r).unwrap_or(false))
    }

    /// The expressions that depend on the varied dim, evaluated at one point: the block's
    /// thread count and the dynamic shared memory there (0 when they do not depend on it).
    fn evaluate_point(&self, vars: &mut Vars, dtype: Dtype, relevant: &[&Checked]) -> Result<(u64, u64), ManifestError> {
        let env = if relevant.iter().any(|c| c.names_tensor) {
            self.finish_point(vars, dtype);
            Env::new(vars)
        } else {
            Env::without_tensors(vars)
        };
        let (mut threads, mut shared) = (0, 0);
        let block_depends = relevant.iter().any(|c| c.field.starts_with("launch.block"));
        for c in relevant {
            let fail = |f: ExprFailure| ManifestError::Expr {
                path: self.path.clone(),
                field: c.field.clone(),
                expr: c.expr.clone(),
                problem: f.problem,
                hint: f.hint,
            };
            let zero = || ExprFailure {
                problem: "evaluates to 0".into(),
                hint: match c.what {
                    Use::Launch => "; a launch needs at least 1 (use max(1, ...)), or say when the host launches nothing: [launch] skip = \"rows == 0\"".into(),
                    _ => "; it must be at least 1 (use max(1, ...)), or let a dim it reads be 0 (range = [0, ...])".into(),
                },
            };
            if let Some(guard) = &c.skip {
                if env.boolean(guard).map_err(|f| ManifestError::Expr {
                    path: self.path.clone(),
                    field: format!("{}.skip", c.field.split('.').next().unwrap_or("launch")),
                    expr: guard.clone(),
                    problem: f.problem,
                    hint: f.hint,
                })? {
                    continue;
                }
            }
            // Behind a guard the host's launch may be empty (its bug to find); an extent may be
            // empty where a dim it reads is.
            let zero_ok = match c.what {
                Use::Launch => c.skip.is_some(),
                _ => c.dims.iter().any(|d| vars.dims.get(d) == Some(&0)),
            };
            match c.what {
                Use::Launch | Use::Extent => {
                    let max = if c.what == Use::Launch { u32::MAX as u64 } else { u64::MAX };
                    if env.size(&c.expr, max, "size").map_err(fail)? == 0 && !zero_ok {
                        return Err(fail(zero()));
                    }
                }
                Use::Shared => {
                    let v = env.size(&c.expr, u32::MAX as u64, "shared memory size").map_err(fail)?;
                    if c.field.starts_with("launch.") {
                        shared = v;
                    }
                }
                Use::Int => drop(env.int(&c.expr).map_err(fail)?),
                Use::Float => drop(env.float(&c.expr).map_err(fail)?),
            }
        }
        if block_depends {
            threads = self.launch.block.iter().map(|e| env.size(e, u32::MAX as u64, "size").unwrap_or(1)).product();
        }
        Ok((threads, shared))
    }
}

/// A bare name, number, or tensor accessor (`q.stride(2)`): nothing in it can divide by zero,
/// go negative or overflow.
fn is_trivial(e: &str) -> bool {
    let e = e.trim();
    e.parse::<i64>().is_ok()
        || expr::is_identifier(e)
        || e.split_once('.').is_some_and(|(t, rest)| expr::is_identifier(t) && rest.chars().all(|c| c.is_ascii_alphanumeric() || "_()".contains(c)))
}

/// The error with the point it happened at added to its problem.
fn at_point(e: ManifestError, point: &str) -> ManifestError {
    match e {
        ManifestError::Expr { path, field, expr, problem, hint } => ManifestError::Expr { path, field, expr, problem: format!("{problem}{point}"), hint },
        ManifestError::Invalid { path, field, problem } => ManifestError::Invalid { path, field, problem: format!("{problem}{point}") },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trivial_expressions_are_names_numbers_and_accessors() {
        for e in ["seq_q", "4", "q.stride(2)", "x.numel", " o.size_seq_q "] {
            assert!(is_trivial(e), "{e}");
        }
        for e in ["cdiv(seq_q, BLOCK_M)", "BLOCK_M / 16 * 32", "d - 8", "q.stride(0) * 2"] {
            assert!(!is_trivial(e), "{e}");
        }
    }

    #[test]
    fn limits_follow_the_architecture() {
        let needs = |threads, shared_bytes| LaunchNeeds { params: BTreeMap::new(), threads, shared_bytes, shared_at: String::new() };
        assert!(ArchLimits::of(90).refuses(&needs(256, 135_168)).is_none());
        let why = ArchLimits::of(89).refuses(&needs(256, 135_168)).unwrap();
        assert!(why.contains("sm_89") && why.contains("99 KB") && why.contains("135168"), "{why}");
        assert!(ArchLimits::of(80).refuses(&needs(2048, 0)).unwrap().contains("2048 threads"));
        assert_eq!(ArchLimits::of(86).max_shared_bytes, ArchLimits::of(89).max_shared_bytes);
    }
}
