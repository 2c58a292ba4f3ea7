//! Expression evaluation for manifests: the variable environment ([`Env`]) and the checks on
//! what an expression may name and return.
//!
//! Parsing and arithmetic are the `evalexpr` crate's (checked `i64` arithmetic, integer division
//! of integers, `f64` floats); this module only decides which names exist and what a result must
//! look like. Builtin functions are switched off and exactly three are provided, so a manifest
//! cannot come to depend on an evalexpr builtin by accident.
//!
//! Dotted names: evalexpr's tokenizer treats `.` as part of an identifier (a literal that is not
//! a number becomes an identifier), so `q.stride_s` is a variable as written and no rewriting is
//! needed. The unit test `dotted_identifiers_are_plain_variables` pins that behaviour; should a
//! future evalexpr change it, [`Env::parse`] is the one place to rewrite `q.stride_s` into
//! `q__stride_s`.

use std::collections::BTreeMap;

use evalexpr::{
    build_operator_tree, Context, ContextWithMutableFunctions, ContextWithMutableVariables,
    DefaultNumericTypes, EvalexprError, Function, HashMapContext, Node, Value,
};

use crate::case::{Case, TensorId};
use crate::plan::Plan;

/// The functions an expression may call.
pub(crate) const FUNCTIONS: [&str; 3] = ["cdiv", "min", "max"];

/// Case variables every expression may use (besides params, defines and tensor strides).
pub(crate) const CASE_VARIABLES: [&str; 9] =
    ["batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim", "causal", "scale", "elem_bytes"];

/// Per-tensor variable suffixes: `q.stride_b`, ..., `o.offset_bytes`.
pub(crate) const TENSOR_FIELDS: [&str; 5] =
    ["stride_b", "stride_h", "stride_s", "stride_d", "offset_bytes"];

/// Every name that cannot be used for a param or define because an expression already means
/// something else by it.
pub(crate) fn is_reserved(name: &str) -> bool {
    CASE_VARIABLES.contains(&name)
        || FUNCTIONS.contains(&name)
        || TensorId::from_name(name).is_some()
        || name.starts_with("CUDAFUZZ")
}

/// Whether `name` is a C identifier (usable as `-D` name, entry point or buffer name).
pub(crate) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What went wrong with one expression; the caller adds file and field.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExprFailure {
    /// Lowercase description.
    pub problem: String,
    /// Text appended after the quoted expression: a list of known names or the fix.
    pub hint: String,
}

impl ExprFailure {
    fn new(problem: impl Into<String>, hint: impl Into<String>) -> ExprFailure {
        ExprFailure { problem: problem.into(), hint: hint.into() }
    }
}

/// The variables and functions of one evaluation.
pub(crate) struct Env {
    ctx: HashMapContext<DefaultNumericTypes>,
    /// Names of params and fixed defines, in the order they are listed in errors.
    extra: Vec<String>,
}

impl Env {
    /// The environment of `case` (planned as `plan`) with the given params and fixed defines.
    pub fn new(
        case: &Case,
        plan: &Plan,
        params: &BTreeMap<String, i64>,
        defines: &BTreeMap<String, i64>,
    ) -> Env {
        let mut ctx = HashMapContext::<DefaultNumericTypes>::new();
        // Builtins off: only cdiv, min and max exist (and cannot fail to exist).
        ctx.set_builtin_functions_disabled(true).expect("a hash map context can disable builtins");
        let mut set = |name: &str, value: Value| {
            ctx.set_value(name.to_string(), value).expect("a hash map context is mutable");
        };
        let int = |v: u64| Value::Int(v as i64);
        set("batch", int(case.batch as u64));
        set("heads_q", int(case.heads_q as u64));
        set("heads_kv", int(case.heads_kv as u64));
        set("seq_q", int(case.seq_q as u64));
        set("seq_k", int(case.seq_k as u64));
        set("head_dim", int(case.head_dim as u64));
        set("causal", int(case.causal as u64));
        set("scale", Value::Float(case.scale as f64));
        set("elem_bytes", int(case.dtype.size() as u64));
        for tp in &plan.tensors {
            let t = tp.tensor.name();
            for (i, field) in TENSOR_FIELDS[..4].iter().enumerate() {
                set(&format!("{t}.{field}"), int(tp.strides[i]));
            }
            set(&format!("{t}.offset_bytes"), int(tp.offset_bytes));
        }
        let mut extra = Vec::new();
        for (name, &value) in defines.iter().chain(params.iter()) {
            set(name, Value::Int(value));
            extra.push(name.clone());
        }
        ctx.set_function("cdiv".into(), Function::new(cdiv)).expect("mutable");
        ctx.set_function("min".into(), Function::new(|a: &Value| fold(a, "min", i64::min, f64::min)))
            .expect("mutable");
        ctx.set_function("max".into(), Function::new(|a: &Value| fold(a, "max", i64::max, f64::max)))
            .expect("mutable");
        Env { ctx, extra }
    }

    /// Every variable name, for error messages.
    pub fn known(&self) -> String {
        let mut names: Vec<String> = CASE_VARIABLES.iter().map(|s| s.to_string()).collect();
        names.extend(self.extra.iter().cloned());
        names.push(
            "t.stride_b, t.stride_h, t.stride_s, t.stride_d, t.offset_bytes for t in q, k, v, o"
                .into(),
        );
        names.join(", ")
    }

    fn has_variable(&self, name: &str) -> bool {
        self.ctx.get_value(name).is_some()
    }

    /// Parses `expr` and checks that it names only known variables and functions.
    pub fn parse(&self, expr: &str) -> Result<Node, ExprFailure> {
        if expr.trim().is_empty() {
            return Err(ExprFailure::new("empty expression", "; write e.g. \"1\" or \"seq_q\""));
        }
        let node = build_operator_tree::<DefaultNumericTypes>(expr)
            .map_err(|e| ExprFailure::new(format!("cannot parse ({})", describe(&e)), ""))?;
        for name in node.iter_variable_identifiers() {
            if !self.has_variable(name) {
                let close = self.suggest(name);
                let hint = if close.is_empty() {
                    format!(" (known: {})", self.known())
                } else {
                    let close: Vec<String> = close.iter().map(|c| format!("`{c}`")).collect();
                    format!(" (did you mean {}? known: {})", close.join(" or "), self.known())
                };
                return Err(ExprFailure::new(format!("unknown variable `{name}`"), hint));
            }
        }
        for name in node.iter_function_identifiers() {
            if !FUNCTIONS.contains(&name) {
                return Err(ExprFailure::new(
                    format!("unknown function `{name}`"),
                    format!(" (known: {})", FUNCTIONS.join(", ")),
                ));
            }
        }
        Ok(node)
    }

    /// The known names closest to `name` (ties all listed), if any is close enough.
    fn suggest(&self, name: &str) -> Vec<String> {
        let mut candidates: Vec<String> = CASE_VARIABLES.iter().map(|s| s.to_string()).collect();
        candidates.extend(self.extra.iter().cloned());
        for t in TensorId::ALL {
            for f in TENSOR_FIELDS {
                candidates.push(format!("{t}.{f}"));
            }
        }
        let scored: Vec<(usize, String)> = candidates
            .into_iter()
            .map(|c| (edit_distance(name, &c), c))
            .filter(|(d, c)| *d <= 2.max(c.len() / 3) && *d < c.len())
            .collect();
        let Some(best) = scored.iter().map(|(d, _)| *d).min() else { return Vec::new() };
        scored.into_iter().filter(|(d, _)| *d == best).map(|(_, c)| c).take(4).collect()
    }

    fn eval(&self, expr: &str) -> Result<Value, ExprFailure> {
        let node = self.parse(expr)?;
        node.eval_with_context(&self.ctx).map_err(|e| ExprFailure::new(describe(&e), ""))
    }

    /// Evaluates an expression that must yield an integer.
    pub fn int(&self, expr: &str) -> Result<i64, ExprFailure> {
        match self.eval(expr)? {
            Value::Int(v) => Ok(v),
            Value::Float(f) => Err(ExprFailure::new(
                format!("evaluates to {f}, not an integer"),
                "; use integer operands (`/` of two integers truncates) or cdiv(a, b)",
            )),
            other => Err(ExprFailure::new(
                format!("evaluates to {}, not an integer", show(&other)),
                "; write an arithmetic expression",
            )),
        }
    }

    /// Evaluates an expression that must yield a non-negative integer that fits in `max`.
    pub fn size(&self, expr: &str, max: u64, what: &str) -> Result<u64, ExprFailure> {
        let v = self.int(expr)?;
        if v < 0 {
            return Err(ExprFailure::new(
                format!("{what} evaluates to {v}, which is negative"),
                "; a size must be 0 or more",
            ));
        }
        if v as u64 > max {
            return Err(ExprFailure::new(
                format!("{what} evaluates to {v}, more than {max}"),
                "; make the expression smaller or narrow the contract",
            ));
        }
        Ok(v as u64)
    }

    /// Evaluates an expression that must yield a number (integer or float).
    pub fn float(&self, expr: &str) -> Result<f64, ExprFailure> {
        match self.eval(expr)? {
            Value::Int(v) => Ok(v as f64),
            Value::Float(f) => Ok(f),
            other => Err(ExprFailure::new(
                format!("evaluates to {}, not a number", show(&other)),
                "; write an arithmetic expression",
            )),
        }
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::Boolean(b) => b.to_string(),
        Value::String(s) => format!("the string {s:?}"),
        Value::Empty => "nothing".into(),
        Value::Tuple(t) => format!("a tuple of {}", t.len()),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
    }
}

/// evalexpr's errors in this crate's style: lowercase, short, the overflow named as such.
fn describe(e: &EvalexprError) -> String {
    use EvalexprError::*;
    match e {
        AdditionError { augend, addend } => format!("integer overflow in {augend} + {addend}"),
        SubtractionError { minuend, subtrahend } => {
            format!("integer overflow in {minuend} - {subtrahend}")
        }
        MultiplicationError { multiplicand, multiplier } => {
            format!("integer overflow in {multiplicand} * {multiplier}")
        }
        NegationError { argument } => format!("integer overflow in -{argument}"),
        DivisionError { dividend, divisor } => {
            format!("division by zero or overflow in {dividend} / {divisor}")
        }
        ModulationError { dividend, divisor } => {
            format!("division by zero or overflow in {dividend} % {divisor}")
        }
        CustomMessage(m) => m.clone(),
        other => {
            let s = other.to_string();
            let s = s.trim_end_matches('.');
            let mut c = s.chars();
            match c.next() {
                Some(first) => first.to_lowercase().chain(c).collect(),
                None => "invalid expression".into(),
            }
        }
    }
}

fn args(a: &Value, name: &str, n: usize) -> Result<Vec<Value>, EvalexprError> {
    match a {
        Value::Tuple(t) if t.len() == n => Ok(t.clone()),
        Value::Tuple(t) => {
            Err(EvalexprError::CustomMessage(format!("{name}() takes {n} arguments, got {}", t.len())))
        }
        _ if n == 1 => Ok(vec![a.clone()]),
        _ => Err(EvalexprError::CustomMessage(format!("{name}() takes {n} arguments, got 1"))),
    }
}

/// `cdiv(a, b)`: ceiling division of integers, `b > 0`.
fn cdiv(a: &Value) -> Result<Value, EvalexprError> {
    let v = args(a, "cdiv", 2)?;
    let (Value::Int(a), Value::Int(b)) = (&v[0], &v[1]) else {
        return Err(EvalexprError::CustomMessage(format!(
            "cdiv() takes integers, got {} and {}",
            show(&v[0]),
            show(&v[1])
        )));
    };
    if *b <= 0 {
        return Err(EvalexprError::CustomMessage(format!("cdiv({a}, {b}): divisor must be positive")));
    }
    let q = a / b;
    Ok(Value::Int(if a % b != 0 && *a > 0 { q + 1 } else { q }))
}

/// `min(a, b, ...)` / `max(a, b, ...)`: integers stay integers; any float makes the result float.
fn fold(
    a: &Value,
    name: &str,
    fi: fn(i64, i64) -> i64,
    ff: fn(f64, f64) -> f64,
) -> Result<Value, EvalexprError> {
    let items = match a {
        Value::Tuple(t) => t.clone(),
        v => vec![v.clone()],
    };
    let mut acc: Option<Value> = None;
    for item in items {
        acc = Some(match (acc, item) {
            (None, v @ (Value::Int(_) | Value::Float(_))) => v,
            (Some(Value::Int(x)), Value::Int(y)) => Value::Int(fi(x, y)),
            (Some(x), y @ (Value::Int(_) | Value::Float(_))) => {
                let xf = if let Value::Int(i) = x { i as f64 } else { x.as_float()? };
                let yf = if let Value::Int(i) = y { i as f64 } else { y.as_float()? };
                Value::Float(ff(xf, yf))
            }
            (_, other) => {
                return Err(EvalexprError::CustomMessage(format!(
                    "{name}() takes numbers, got {}",
                    show(&other)
                )))
            }
        });
    }
    acc.ok_or_else(|| EvalexprError::CustomMessage(format!("{name}() needs at least one argument")))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push((prev[j] + (ca != *cb) as usize).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env {
        let case = Case::example("k");
        let plan = Plan::new(&case);
        let params = BTreeMap::from([("BLOCK_N".to_string(), 64)]);
        Env::new(&case, &plan, &params, &BTreeMap::new())
    }

    #[test]
    fn dotted_identifiers_are_plain_variables() {
        let e = env();
        // Case::example: q is dense bhsd [1, 2, 65, 64].
        assert_eq!(e.int("q.stride_s").unwrap(), 64);
        assert_eq!(e.int("q.stride_h*2+k.stride_d").unwrap(), 2 * 65 * 64 + 1);
        assert_eq!(e.int("o.offset_bytes").unwrap(), 0);
    }

    #[test]
    fn functions_and_integer_rules() {
        let e = env();
        assert_eq!(e.int("cdiv(seq_k, BLOCK_N)").unwrap(), 2);
        assert_eq!(e.int("cdiv(128, 64)").unwrap(), 2);
        assert_eq!(e.int("cdiv(0, 64)").unwrap(), 0);
        assert_eq!(e.int("min(seq_q, 32, 100)").unwrap(), 32);
        assert_eq!(e.int("max(seq_q, seq_k)").unwrap(), 113);
        assert_eq!(e.int("seq_k / 2").unwrap(), 56);
        assert!((e.float("scale * 2").unwrap() - 0.25).abs() < 1e-12);
        let f = e.int("seq_k / 2.0").unwrap_err();
        assert!(f.problem.contains("not an integer"), "{f:?}");
        let f = e.int("9223372036854775807 + seq_q").unwrap_err();
        assert!(f.problem.contains("overflow"), "{f:?}");
        let f = e.size("seq_q - 100", u32::MAX as u64, "count").unwrap_err();
        assert!(f.problem.contains("negative"), "{f:?}");
        let f = e.int("cdiv(seq_q, 0)").unwrap_err();
        assert!(f.problem.contains("positive"), "{f:?}");
    }

    #[test]
    fn unknown_names_are_reported_with_suggestions() {
        let e = env();
        let f = e.parse("cdiv(seq, BLOCK_N)").unwrap_err();
        assert_eq!(f.problem, "unknown variable `seq`");
        assert!(f.hint.contains("known: batch, heads_q"), "{f:?}");
        let f = e.parse("q.strid_s").unwrap_err();
        assert!(f.hint.contains("did you mean `q.stride_s`"), "{f:?}");
        let f = e.parse("floor(seq_q)").unwrap_err();
        assert_eq!(f.problem, "unknown function `floor`");
        assert!(e.parse("(seq_q").is_err());
    }
}
