//! Expression evaluation for manifests: the names an expression may use ([`Vars`], one case's
//! values) and the checks on what an expression may name and return ([`Env`]).
//!
//! Parsing and arithmetic are the `evalexpr` crate's (checked `i64` arithmetic, integer division
//! of integers, `f64` floats); this module only decides which names exist and what a result must
//! look like. Builtin functions are switched off and a fixed few are provided, so a manifest
//! cannot come to depend on an evalexpr builtin by accident.
//!
//! Names: every dim, scalar (flags are 0 or 1), param and define; `elem_bytes` (the case's
//! element size); per list of lengths `l`: `l.sum`, `l.max`, `l.min`, `l.count` and
//! `l.pages(p)` (`Σ cdiv(len, p)`); and per tensor `t`: `t.stride(i)` and `t.size(i)` (element stride and extent
//! of logical dimension `i`), `t.stride_<dim>` and `t.size_<dim>` for a dimension whose shape
//! entry is a dim name (`q.stride_seq_q`), `t.offset_bytes`, `t.numel`, `t.rank` and
//! `t.elem_bytes`. evalexpr's tokenizer treats `.` as part of an identifier, so `q.stride(2)`
//! is a call of a function named `q.stride` and `q.numel` a variable, as written; the unit test
//! `dotted_identifiers_are_plain_variables` pins that behaviour.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use evalexpr::{
    build_operator_tree, Context, ContextWithMutableFunctions, ContextWithMutableVariables, DefaultNumericTypes, EvalexprError, Function, HashMapContext, Node,
    Value,
};

use crate::core::case::Scalar;

/// The functions every expression may call: `cdiv(a, b)` (division rounding up), `min`, `max`,
/// `sqrt`, `gcd(a, b)`, the bit operations `bitand`, `bitor`, `bitxor` (two integers each),
/// `bitnot(a)`, `shl(a, n)`, `shr(a, n)`, and `if(condition, then, else)`, which evaluates only
/// the branch it takes (`if(d == 0, 0, n / d)` never divides by zero).
pub const FUNCTIONS: [&str; 11] = ["cdiv", "min", "max", "sqrt", "gcd", "bitand", "bitor", "bitxor", "bitnot", "shl", "shr"];

/// The conditional: a function name the parser knows, evaluated lazily by [`eval_lazily`].
pub const CONDITIONAL: &str = "if";

/// Per-tensor names an expression may use, besides `t.stride_<dim>` and `t.size_<dim>`.
pub const TENSOR_FIELDS: [&str; 4] = ["offset_bytes", "numel", "rank", "elem_bytes"];

/// Whether `name` is a C identifier (usable as `-D` name, entry point or tensor name).
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `name` cannot name a dim, scalar, param or define: an expression already means
/// something else by it.
pub fn is_reserved(name: &str) -> bool {
    FUNCTIONS.contains(&name) || name == CONDITIONAL || name == "elem_bytes" || name.starts_with("CUDAFUZZ") || name.starts_with("CF_")
}

/// What went wrong with one expression; the caller adds file and field.
#[derive(Debug, Clone, PartialEq)]
pub struct ExprFailure {
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

/// One tensor's values for expressions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TensorVars {
    /// The tensor's name.
    pub name: String,
    /// Extent of each logical dimension.
    pub shape: Vec<u64>,
    /// Element stride of each logical dimension.
    pub strides: Vec<u64>,
    /// The dim each shape entry names, when it is a bare dim name.
    pub dim_names: Vec<Option<String>>,
    /// Base byte offset.
    pub offset_bytes: u64,
    /// Element size in bytes.
    pub elem_bytes: u32,
}

/// Every value an expression may name for one case.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Vars {
    /// Dims by name.
    pub dims: BTreeMap<String, u64>,
    /// Lists of lengths by name ([`super::lengths`]).
    pub lengths: BTreeMap<String, Vec<u64>>,
    /// Scalars by name.
    pub scalars: BTreeMap<String, Scalar>,
    /// Params (the case's, defaults filled in).
    pub params: BTreeMap<String, i64>,
    /// Fixed defines.
    pub defines: BTreeMap<String, i64>,
    /// The case's element size.
    pub elem_bytes: u32,
    /// The tensors (strides and offsets known once a case is planned).
    pub tensors: Vec<TensorVars>,
}

/// The variables and functions of one evaluation.
pub struct Env {
    ctx: HashMapContext<DefaultNumericTypes>,
    /// Every variable name, in the order listed in errors.
    names: Vec<String>,
    /// Every function name.
    functions: Vec<String>,
}

fn int(v: u64) -> Value {
    Value::Int(v.min(i64::MAX as u64) as i64)
}

/// The longest expression a manifest may hold, in characters: the parser recurses per term, so
/// a 100,000-term expression would overflow the stack before any message.
pub const MAX_EXPR_CHARS: usize = 1000;
/// The deepest nesting of parentheses an expression may have, for the same reason.
pub const MAX_EXPR_DEPTH: usize = 32;

/// Refuses an expression too long or too deeply nested to parse safely, with the numbers.
fn within_limits(expr: &str) -> Result<(), EvalexprError> {
    let chars = expr.chars().count();
    if chars > MAX_EXPR_CHARS {
        return Err(EvalexprError::CustomMessage(format!(
            "{chars} characters long, more than the {MAX_EXPR_CHARS} an expression may have; split it with a helper dim or scalar"
        )));
    }
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in expr.chars() {
        match c {
            '(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_EXPR_DEPTH {
        return Err(EvalexprError::CustomMessage(format!("parentheses nested {deepest} deep, more than the {MAX_EXPR_DEPTH} an expression may have")));
    }
    Ok(())
}

/// Parse trees of the expressions seen on this thread: a manifest's few expressions are
/// evaluated for every case, and tokenizing them again each time cost more than the rest of
/// planning a case.
fn parsed(expr: &str) -> Result<Rc<Node>, EvalexprError> {
    thread_local! {
        static TREES: RefCell<HashMap<String, Rc<Node>>> = RefCell::new(HashMap::new());
    }
    if let Some(node) = TREES.with(|t| t.borrow().get(expr).cloned()) {
        return Ok(node);
    }
    within_limits(expr)?;
    let node = Rc::new(build_operator_tree::<DefaultNumericTypes>(expr)?);
    TREES.with(|t| {
        let mut trees = t.borrow_mut();
        // Expressions come from manifests, so few are distinct; the bound is for a caller that
        // evaluates generated text.
        if trees.len() >= 4096 {
            trees.clear();
        }
        trees.insert(expr.to_string(), node.clone());
    });
    Ok(node)
}

impl Env {
    /// The environment of one case's values.
    pub fn new(vars: &Vars) -> Env {
        Env::build(vars, true)
    }

    /// The environment of one case's dims, scalars, params and defines, without its tensors:
    /// what a scalar choice (`1 / sqrt(head_dim)`) may name, at a fraction of the cost.
    pub fn without_tensors(vars: &Vars) -> Env {
        Env::build(vars, false)
    }

    fn build(vars: &Vars, with_tensors: bool) -> Env {
        let mut ctx = HashMapContext::<DefaultNumericTypes>::new();
        // Builtins off: only the listed functions exist (and cannot fail to exist).
        ctx.set_builtin_functions_disabled(true).expect("a hash map context can disable builtins");
        let mut names = Vec::new();
        let mut set = |ctx: &mut HashMapContext, name: String, value: Value| {
            ctx.set_value(name.clone(), value).expect("a hash map context is mutable");
            names.push(name);
        };
        for (name, &v) in &vars.dims {
            set(&mut ctx, name.clone(), int(v));
        }
        for (name, v) in &vars.scalars {
            let value = match v {
                Scalar::Bool(b) => Value::Int(*b as i64),
                Scalar::Int(i) => Value::Int(*i),
                Scalar::Float(x) => Value::Float(*x),
            };
            set(&mut ctx, name.clone(), value);
        }
        for (name, &v) in vars.defines.iter().chain(&vars.params) {
            set(&mut ctx, name.clone(), Value::Int(v));
        }
        set(&mut ctx, "elem_bytes".into(), int(vars.elem_bytes as u64));
        let mut functions: Vec<String> = FUNCTIONS.iter().map(|s| s.to_string()).collect();
        for (name, list) in &vars.lengths {
            set(&mut ctx, format!("{name}.sum"), int(list.iter().sum()));
            set(&mut ctx, format!("{name}.max"), int(list.iter().copied().max().unwrap_or(0)));
            set(&mut ctx, format!("{name}.min"), int(list.iter().copied().min().unwrap_or(0)));
            set(&mut ctx, format!("{name}.count"), int(list.len() as u64));
            let (fname, list, label) = (format!("{name}.pages"), list.clone(), format!("{name}.pages"));
            let f = Function::new(move |a: &Value| match a {
                Value::Int(p) if *p >= 1 => Ok(int(pages(&list, *p as u64))),
                other => Err(EvalexprError::CustomMessage(format!("{label}() takes a page size of at least 1, got {}", show(other)))),
            });
            ctx.set_function(fname.clone(), f).expect("mutable");
            functions.push(fname);
        }
        for t in vars.tensors.iter().filter(|_| with_tensors) {
            let numel = t.shape.iter().fold(1u64, |a, &n| a.saturating_mul(n));
            set(&mut ctx, format!("{}.offset_bytes", t.name), int(t.offset_bytes));
            set(&mut ctx, format!("{}.numel", t.name), int(numel));
            set(&mut ctx, format!("{}.rank", t.name), int(t.shape.len() as u64));
            set(&mut ctx, format!("{}.elem_bytes", t.name), int(t.elem_bytes as u64));
            for (i, dim) in t.dim_names.iter().enumerate() {
                let Some(dim) = dim else { continue };
                // A dim named twice in one shape has no single stride.
                if t.dim_names.iter().filter(|d| d.as_deref() == Some(dim.as_str())).count() == 1 {
                    set(&mut ctx, format!("{}.stride_{dim}", t.name), int(t.strides.get(i).copied().unwrap_or(0)));
                    set(&mut ctx, format!("{}.size_{dim}", t.name), int(t.shape.get(i).copied().unwrap_or(0)));
                }
            }
            for (field, values) in [("stride", t.strides.clone()), ("size", t.shape.clone())] {
                let fname = format!("{}.{field}", t.name);
                let label = fname.clone();
                let f =
                    Function::new(move |a: &Value| {
                        let i = match a {
                            Value::Int(i) => *i,
                            other => return Err(EvalexprError::CustomMessage(format!("{label}() takes a dimension index, got {}", show(other)))),
                        };
                        usize::try_from(i).ok().and_then(|i| values.get(i)).map(|&v| int(v)).ok_or_else(|| {
                            EvalexprError::CustomMessage(format!("{label}({i}): the tensor has {} dimensions (0..{})", values.len(), values.len()))
                        })
                    });
                ctx.set_function(fname.clone(), f).expect("mutable");
                functions.push(fname);
            }
        }
        ctx.set_function("cdiv".into(), Function::new(cdiv)).expect("mutable");
        ctx.set_function("min".into(), Function::new(|a: &Value| fold(a, "min", i64::min, f64::min))).expect("mutable");
        ctx.set_function("max".into(), Function::new(|a: &Value| fold(a, "max", i64::max, f64::max))).expect("mutable");
        ctx.set_function("sqrt".into(), Function::new(sqrt)).expect("mutable");
        ctx.set_function("gcd".into(), Function::new(|a: &Value| two_ints(a, "gcd", |x, y| Ok(gcd(x, y))))).expect("mutable");
        ctx.set_function("bitand".into(), Function::new(|a: &Value| two_ints(a, "bitand", |x, y| Ok(x & y)))).expect("mutable");
        ctx.set_function("bitor".into(), Function::new(|a: &Value| two_ints(a, "bitor", |x, y| Ok(x | y)))).expect("mutable");
        ctx.set_function("bitxor".into(), Function::new(|a: &Value| two_ints(a, "bitxor", |x, y| Ok(x ^ y)))).expect("mutable");
        ctx.set_function("shl".into(), Function::new(|a: &Value| two_ints(a, "shl", shift_left))).expect("mutable");
        ctx.set_function("shr".into(), Function::new(|a: &Value| two_ints(a, "shr", shift_right))).expect("mutable");
        ctx.set_function("bitnot".into(), Function::new(bitnot)).expect("mutable");
        functions.push(CONDITIONAL.into());
        Env { ctx, names, functions }
    }

    /// Sets (or adds) the integer variable `name`: an environment reused for candidates that
    /// differ in one dim.
    pub fn set_int(&mut self, name: &str, v: u64) {
        if self.ctx.get_value(name).is_none() {
            self.names.push(name.to_string());
        }
        self.ctx.set_value(name.to_string(), int(v)).expect("a hash map context is mutable");
    }

    /// Every variable name, for error messages.
    pub fn known(&self) -> String {
        let mut names = self.names.clone();
        names.extend(self.functions.iter().filter(|f| f.contains('.')).map(|f| format!("{f}(i)")));
        if names.len() > 40 {
            let n = names.len();
            names.truncate(40);
            names.push(format!("... ({n} in all)"));
        }
        names.join(", ")
    }

    fn has_variable(&self, name: &str) -> bool {
        self.ctx.get_value(name).is_some()
    }

    /// Parses `expr` and checks that it names only known variables and functions.
    pub fn parse(&self, expr: &str) -> Result<Rc<Node>, ExprFailure> {
        if expr.trim().is_empty() {
            return Err(ExprFailure::new("empty expression", "; write e.g. \"1\" or a dim's name"));
        }
        let node = parsed(expr).map_err(|e| ExprFailure::new(format!("cannot parse ({})", describe(&e)), ""))?;
        if has_power(&node) {
            return Err(ExprFailure::new(
                "`^` is a power in these expressions, not C's exclusive or",
                "; write bitxor(a, b) for exclusive or, or a * a for a square",
            ));
        }
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
            if !self.functions.iter().any(|f| f == name) {
                return Err(ExprFailure::new(format!("unknown function `{name}`"), format!(" (known: {})", self.functions.join(", "))));
            }
        }
        Ok(node)
    }

    /// The known names closest to `name` (ties all listed), if any is close enough.
    fn suggest(&self, name: &str) -> Vec<String> {
        let scored: Vec<(usize, String)> = self
            .names
            .iter()
            .chain(&self.functions)
            .map(|c| (edit_distance(name, c), c.clone()))
            .filter(|(d, c)| *d <= 2.max(c.len() / 3) && *d < c.len())
            .collect();
        let Some(best) = scored.iter().map(|(d, _)| *d).min() else { return Vec::new() };
        scored.into_iter().filter(|(d, _)| *d == best).map(|(_, c)| c).take(4).collect()
    }

    fn eval(&self, expr: &str) -> Result<Value, ExprFailure> {
        let node = self.parse(expr)?;
        eval_lazily(&node, &self.ctx).map_err(|e| ExprFailure::new(describe(&e), ""))
    }

    /// Evaluates an expression to whatever value it has (a Python target's argument).
    pub fn value(&self, expr: &str) -> Result<Value, ExprFailure> {
        self.eval(expr)
    }

    /// Evaluates a parsed expression (a sub-expression of a relation) to a value.
    pub fn eval_node(&self, node: &Node) -> Result<Value, ExprFailure> {
        eval_lazily(node, &self.ctx).map_err(|e| ExprFailure::new(describe(&e), ""))
    }

    /// Evaluates an expression that must yield true or false (a relation).
    pub fn boolean(&self, expr: &str) -> Result<bool, ExprFailure> {
        match self.eval(expr)? {
            Value::Boolean(b) => Ok(b),
            other => Err(ExprFailure::new(format!("evaluates to {}, not true or false", show(&other)), "; write a comparison such as \"seq_q == seq_k\"")),
        }
    }

    /// Evaluates an expression that must yield an integer.
    pub fn int(&self, expr: &str) -> Result<i64, ExprFailure> {
        match self.eval(expr)? {
            Value::Int(v) => Ok(v),
            Value::Float(f) => {
                Err(ExprFailure::new(format!("evaluates to {f}, not an integer"), "; use integer operands (`/` of two integers truncates) or cdiv(a, b)"))
            }
            other => Err(ExprFailure::new(format!("evaluates to {}, not an integer", show(&other)), "; write an arithmetic expression")),
        }
    }

    /// Evaluates an expression that must yield a non-negative integer that fits in `max`.
    pub fn size(&self, expr: &str, max: u64, what: &str) -> Result<u64, ExprFailure> {
        let v = self.int(expr)?;
        if v < 0 {
            return Err(ExprFailure::new(format!("{what} evaluates to {v}, which is negative"), "; a size must be 0 or more"));
        }
        if v as u64 > max {
            return Err(ExprFailure::new(format!("{what} evaluates to {v}, more than {max}"), "; make the expression smaller or narrow the contract"));
        }
        Ok(v as u64)
    }

    /// Evaluates an expression that must yield a number (integer or float).
    pub fn float(&self, expr: &str) -> Result<f64, ExprFailure> {
        match self.eval(expr)? {
            Value::Int(v) => Ok(v as f64),
            Value::Float(f) => Ok(f),
            other => Err(ExprFailure::new(format!("evaluates to {}, not a number", show(&other)), "; write an arithmetic expression")),
        }
    }
}

/// The dims a relation or expression names, in the order they appear.
pub fn variables_in(expr: &str) -> Vec<String> {
    if within_limits(expr).is_err() {
        return Vec::new();
    }
    match build_operator_tree::<DefaultNumericTypes>(expr) {
        Ok(node) => node.iter_variable_identifiers().map(str::to_string).collect(),
        Err(_) => Vec::new(),
    }
}

/// Whether the tree uses `^` (evalexpr's power).
fn has_power(node: &Node) -> bool {
    matches!(node.operator(), evalexpr::Operator::Exp) || node.children().iter().any(has_power)
}

/// Whether the tree calls the conditional anywhere.
fn has_conditional(node: &Node) -> bool {
    // Walked here: evalexpr's identifier iterator leaves out the node it starts from.
    matches!(node.operator(), evalexpr::Operator::FunctionIdentifier { identifier } if identifier == CONDITIONAL) || node.children().iter().any(has_conditional)
}

/// Evaluates `node`, the conditional lazily: `if(c, a, b)` evaluates `c`, then only the branch
/// it takes. evalexpr evaluates every argument of a function first, so each conditional is
/// evaluated here and put in the tree as the constant it gave before evalexpr evaluates the rest.
pub fn eval_lazily(node: &Node, ctx: &HashMapContext<DefaultNumericTypes>) -> Result<Value, EvalexprError> {
    if !has_conditional(node) {
        return node.eval_with_context(ctx);
    }
    if matches!(node.operator(), evalexpr::Operator::FunctionIdentifier { identifier } if identifier == CONDITIONAL) {
        let parts = conditional_parts(node)?;
        let taken = match eval_lazily(parts[0], ctx)? {
            Value::Boolean(b) => b,
            other => return Err(EvalexprError::CustomMessage(format!("if(condition, then, else): the condition is {}, not true or false", show(&other)))),
        };
        return eval_lazily(if taken { parts[1] } else { parts[2] }, ctx);
    }
    let mut tree = node.clone();
    for child in tree.children_mut() {
        if has_conditional(child) {
            let value = eval_lazily(child, ctx)?;
            *child.operator_mut() = evalexpr::Operator::Const { value };
            child.children_mut().clear();
        }
    }
    tree.eval_with_context(ctx)
}

/// The three arguments of a conditional's call node.
fn conditional_parts(call: &Node) -> Result<[&Node; 3], EvalexprError> {
    // The call's one child is its argument: a tuple of three, possibly inside a root node.
    let mut arg = call.children().first();
    while let Some(n) = arg.filter(|n| matches!(n.operator(), evalexpr::Operator::RootNode) && n.children().len() == 1) {
        arg = n.children().first();
    }
    match arg {
        Some(t) if matches!(t.operator(), evalexpr::Operator::Tuple) && t.children().len() == 3 => {
            let c = t.children();
            Ok([&c[0], &c[1], &c[2]])
        }
        _ => Err(EvalexprError::CustomMessage("if takes three arguments: if(condition, then, else)".into())),
    }
}

/// Applies `f` to a function's two integer arguments.
fn two_ints(a: &Value, name: &str, f: impl Fn(i64, i64) -> Result<i64, String>) -> Result<Value, EvalexprError> {
    match a {
        Value::Tuple(t) if t.len() == 2 => match (&t[0], &t[1]) {
            (Value::Int(x), Value::Int(y)) => f(*x, *y).map(Value::Int).map_err(|m| EvalexprError::CustomMessage(format!("{name}({x}, {y}): {m}"))),
            (x, y) => Err(EvalexprError::CustomMessage(format!("{name}() takes two integers, got {} and {}", show(x), show(y)))),
        },
        other => Err(EvalexprError::CustomMessage(format!("{name}() takes two integers, got {}", show(other)))),
    }
}

/// The greatest common divisor, never negative; `gcd(0, 0)` is 0.
/// `Σ cdiv(len, page)`: the pages a list of sequences occupies (0 for a page size below 1);
/// what `l.pages(p)` evaluates to.
pub fn pages(lengths: &[u64], page: u64) -> u64 {
    if page == 0 {
        return 0;
    }
    lengths.iter().map(|l| l.div_ceil(page)).sum()
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.min(i64::MAX as u64) as i64
}

fn shift_left(a: i64, n: i64) -> Result<i64, String> {
    let n = u32::try_from(n).ok().filter(|&n| n < 63).ok_or("the shift must be 0 to 62")?;
    a.checked_mul(1i64 << n).ok_or_else(|| "integer overflow".to_string())
}

fn shift_right(a: i64, n: i64) -> Result<i64, String> {
    let n = u32::try_from(n).ok().filter(|&n| n < 64).ok_or("the shift must be 0 to 63")?;
    Ok(a >> n)
}

fn bitnot(a: &Value) -> Result<Value, EvalexprError> {
    match a {
        Value::Int(x) => Ok(Value::Int(!x)),
        other => Err(EvalexprError::CustomMessage(format!("bitnot() takes an integer, got {}", show(other)))),
    }
}

/// `sqrt(x)` of a number, as a float.
fn sqrt(a: &Value) -> Result<Value, EvalexprError> {
    let x = match a {
        Value::Int(i) => *i as f64,
        Value::Float(f) => *f,
        other => return Err(EvalexprError::CustomMessage(format!("sqrt() takes a number, got {}", show(other)))),
    };
    if x < 0.0 {
        return Err(EvalexprError::CustomMessage(format!("sqrt({x}): negative argument")));
    }
    Ok(Value::Float(libm::sqrt(x)))
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
        Value::Tuple(t) => Err(EvalexprError::CustomMessage(format!("{name}() takes {n} arguments, got {}", t.len()))),
        _ if n == 1 => Ok(vec![a.clone()]),
        _ => Err(EvalexprError::CustomMessage(format!("{name}() takes {n} arguments, got 1"))),
    }
}

/// `cdiv(a, b)`: ceiling division of integers, `b > 0`.
fn cdiv(a: &Value) -> Result<Value, EvalexprError> {
    let v = args(a, "cdiv", 2)?;
    let (Value::Int(a), Value::Int(b)) = (&v[0], &v[1]) else {
        return Err(EvalexprError::CustomMessage(format!("cdiv() takes integers, got {} and {}", show(&v[0]), show(&v[1]))));
    };
    if *b <= 0 {
        return Err(EvalexprError::CustomMessage(format!("cdiv({a}, {b}): divisor must be positive")));
    }
    let q = a / b;
    Ok(Value::Int(if a % b != 0 && *a > 0 { q + 1 } else { q }))
}

/// `min(a, b, ...)` / `max(a, b, ...)`: integers stay integers; any float makes the result float.
fn fold(a: &Value, name: &str, fi: fn(i64, i64) -> i64, ff: fn(f64, f64) -> f64) -> Result<Value, EvalexprError> {
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
            (_, other) => return Err(EvalexprError::CustomMessage(format!("{name}() takes numbers, got {}", show(&other)))),
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
        let vars = Vars {
            dims: [("batch", 1), ("heads_q", 2), ("seq_q", 65), ("seq_k", 113), ("head_dim", 64)].iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            scalars: [("scale".to_string(), Scalar::Float(0.125)), ("causal".to_string(), Scalar::Bool(true))].into(),
            params: BTreeMap::from([("BLOCK_N".to_string(), 64)]),
            defines: BTreeMap::new(),
            lengths: BTreeMap::from([("seqlens".to_string(), vec![3, 0, 17])]),
            elem_bytes: 2,
            tensors: vec![TensorVars {
                name: "q".into(),
                shape: vec![1, 2, 65, 64],
                strides: vec![2 * 65 * 64, 65 * 64, 64, 1],
                dim_names: ["batch", "heads_q", "seq_q", "head_dim"].iter().map(|s| Some(s.to_string())).collect(),
                offset_bytes: 8,
                elem_bytes: 2,
            }],
        };
        Env::new(&vars)
    }

    /// A list of lengths is seen through its sum, max, min, count and pages.
    #[test]
    fn lengths_are_seen_through_their_summaries() {
        let e = env();
        assert_eq!(e.int("seqlens.sum").unwrap(), 20);
        assert_eq!(e.int("seqlens.max + seqlens.min + seqlens.count").unwrap(), 20);
        assert_eq!(e.int("seqlens.pages(16)").unwrap(), 3);
        assert_eq!(e.int("cdiv(seqlens.max, 16)").unwrap(), 2);
        assert!(e.int("seqlens.pages(0)").unwrap_err().problem.contains("page size of at least 1"));
    }

    #[test]
    fn dotted_identifiers_are_plain_variables() {
        let e = env();
        assert_eq!(e.int("q.stride(2)").unwrap(), 64);
        assert_eq!(e.int("q.stride_seq_q").unwrap(), 64);
        assert_eq!(e.int("q.stride(1)*2+q.stride_head_dim").unwrap(), 2 * 65 * 64 + 1);
        assert_eq!(e.int("q.offset_bytes + q.size(3) + q.numel + q.rank").unwrap(), 8 + 64 + 2 * 65 * 64 + 4);
        assert!(e.int("q.stride(4)").unwrap_err().problem.contains("4 dimensions"));
    }

    #[test]
    fn functions_relations_and_integer_rules() {
        let e = env();
        assert_eq!(e.int("cdiv(seq_k, BLOCK_N)").unwrap(), 2);
        assert_eq!(e.int("cdiv(0, 64)").unwrap(), 0);
        assert_eq!(e.int("min(seq_q, 32, 100)").unwrap(), 32);
        assert_eq!(e.int("max(seq_q, seq_k)").unwrap(), 113);
        assert_eq!(e.int("seq_k / 2").unwrap(), 56);
        assert_eq!(e.int("causal").unwrap(), 1);
        assert!((e.float("scale * 2").unwrap() - 0.25).abs() < 1e-12);
        assert!((e.float("1 / sqrt(head_dim)").unwrap() - 0.125).abs() < 1e-12);
        assert!(e.boolean("heads_q % batch == 0 && seq_q <= seq_k").unwrap());
        assert!(e.boolean("seq_q + 1").is_err());
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
    fn gcd_bit_operations_and_comparisons() {
        let e = env();
        // The host's vector width from the hidden size: gcd(8, d).
        for (d, vec) in [(64, 8), (36, 4), (6, 2), (7, 1), (0, 8)] {
            let mut e = env();
            e.set_int("d", d);
            assert_eq!(e.int("gcd(8, d)").unwrap(), vec, "d = {d}");
        }
        assert_eq!(e.int("gcd(-12, 18)").unwrap(), 6);
        assert_eq!(e.int("bitand(seq_q, 7) + bitor(8, 1) + bitxor(5, 3) + bitnot(0)").unwrap(), 1 + 9 + 6 - 1);
        assert_eq!(e.int("shl(1, 10) + shr(seq_k, 4)").unwrap(), 1024 + 7);
        assert!(e.int("shl(1, 64)").unwrap_err().problem.contains("0 to 62"));
        assert!(e.int("shl(9223372036854775807, 1)").unwrap_err().problem.contains("overflow"));
        assert!(e.int("bitand(seq_q, 1.5)").unwrap_err().problem.contains("two integers"));
        assert!(e.boolean("seq_q != seq_k && !(seq_q > seq_k) || seq_q >= 1000").unwrap());
    }

    #[test]
    fn the_conditional_evaluates_only_the_branch_it_takes() {
        let mut e = env();
        e.set_int("d", 0);
        assert_eq!(e.int("if(d == 0, 0, seq_q / d)").unwrap(), 0);
        assert_eq!(e.int("1 + if(d == 0, 7, seq_q / d) * 2").unwrap(), 15, "inside a larger expression");
        assert_eq!(e.int("if(d > 0, seq_q % d, if(causal == 1, 3, 1 / d))").unwrap(), 3, "nested");
        assert!(e.boolean("if(d == 0, true, seq_q / d > 1)").unwrap());
        e.set_int("d", 4);
        assert_eq!(e.int("if(d == 0, 0, seq_q / d)").unwrap(), 16);
        // The branch taken still fails as it would alone.
        e.set_int("d", 0);
        assert!(e.int("if(d == 0, seq_q / d, 0)").unwrap_err().problem.contains("division by zero"));
        assert!(e.int("if(d, 1, 2)").unwrap_err().problem.contains("not true or false"));
        assert!(e.int("if(d == 0, 1)").unwrap_err().problem.contains("three arguments"));
    }

    #[test]
    fn a_caret_is_refused_naming_the_function_to_use() {
        let e = env();
        let f = e.parse("seq_q ^ 2").unwrap_err();
        assert!(f.problem.contains("`^` is a power") && f.hint.contains("bitxor(a, b)"), "{f:?}");
        assert!(e.parse("max(1, (seq_q ^ 2))").is_err(), "anywhere in the expression");
        assert!(is_reserved("gcd") && is_reserved("if") && is_reserved("shl"));
    }

    #[test]
    fn unknown_names_are_reported_with_suggestions() {
        let e = env();
        let f = e.parse("cdiv(seq, BLOCK_N)").unwrap_err();
        assert_eq!(f.problem, "unknown variable `seq`");
        assert!(f.hint.contains("known: batch"), "{f:?}");
        let f = e.parse("q.strid_seq_q").unwrap_err();
        assert!(f.hint.contains("did you mean `q.stride_seq_q`"), "{f:?}");
        let f = e.parse("floor(seq_q)").unwrap_err();
        assert_eq!(f.problem, "unknown function `floor`");
        assert!(e.parse("(seq_q").is_err());
        assert_eq!(variables_in("heads_q % heads_kv == 0"), vec!["heads_q", "heads_kv"]);
    }
}
