//! Relations between dims, solved for one dim at a time, so the decoder constructs cases that
//! satisfy them instead of rejecting the ones that do not.
//!
//! Dims are drawn in the order the manifest declares them. Each relation belongs to the last
//! declared dim it names ([`attach`]): when that dim is drawn, every other dim it names is known,
//! so the relation is a condition on one unknown. The common shapes are recognised and solved
//! directly ([`Form`]): `x == E` assigns, `x % E == 0` draws a multiple, `E % x == 0` a divisor,
//! `x <= E` (and the other comparisons) narrows the range, `x != E` excludes a value. Anything
//! else is checked on the drawn value, and the nearest value that satisfies it is taken instead.

use evalexpr::{build_operator_tree, DefaultNumericTypes, Node, Operator, Value};

use crate::core::case::{Case, Scalar};
use crate::core::manifest::expr::{variables_in, Env, Vars};
use crate::core::manifest::Manifest;

/// A relation, solved for the dim it belongs to.
#[derive(Clone, Debug)]
pub enum Form {
    /// `x == E`.
    Equal(Node),
    /// `x % E == 0`.
    MultipleOf(Node),
    /// `E % x == 0`.
    Divides(Node),
    /// `x <= E` (`strict`: `x < E`).
    AtMost(Node, bool),
    /// `x >= E` (`strict`: `x > E`).
    AtLeast(Node, bool),
    /// `x != E`.
    NotEqual(Node),
    /// Anything else: checked on the value.
    Other,
}

/// One relation of the manifest, attached to the dim it constrains.
#[derive(Clone, Debug)]
pub struct Relation {
    /// As written.
    pub text: String,
    /// The dim it is solved for (the last declared dim it names).
    pub dim: String,
    /// Its recognised shape.
    pub form: Form,
    /// Whether it is a `requires` (never violated) rather than a contract relation.
    pub required: bool,
}

/// Splits conjunctions (`a && b`) and attaches each relation to the last dim of `order` it names.
/// Relations naming no dim of `order` are dropped (the manifest loader refuses those).
pub fn attach(relations: &[String], order: &[String], required: bool) -> Vec<Relation> {
    let mut out = Vec::new();
    for text in relations {
        for part in split_and(text) {
            let names = variables_in(&part);
            let Some(dim) = order.iter().rev().find(|d| names.contains(d)) else { continue };
            let form = build_operator_tree::<DefaultNumericTypes>(&part).ok().map(|n| solve(&n, dim)).unwrap_or(Form::Other);
            out.push(Relation { text: part, dim: dim.clone(), form, required });
        }
    }
    out
}

/// The parts (`&&` split) of `relations` that name no scalar: what the dims are solved for.
pub fn dim_parts(relations: &[String], m: &Manifest) -> Vec<String> {
    relations.iter().flat_map(|r| split_and(r)).filter(|p| !names_scalar(p, m)).collect()
}

/// The parts of `relations` that name a scalar (`causal == 0 || seq_q <= seq_k`): checked once
/// the scalars are drawn ([`satisfy_scalars`]), never solved for a dim.
pub fn scalar_parts(relations: &[String], m: &Manifest) -> Vec<String> {
    relations.iter().flat_map(|r| split_and(r)).filter(|p| names_scalar(p, m)).collect()
}

fn names_scalar(part: &str, m: &Manifest) -> bool {
    variables_in(part).iter().any(|n| m.scalar(n).is_some())
}

/// Makes the case's scalars satisfy `parts` (relations naming scalars, with its dims already
/// drawn): each part that fails moves the last declared scalar it names to the first value,
/// among that scalar's choices (both values of a flag, the ends and middle of a range), for
/// which every part that held still holds and this one does. A part no value satisfies is left
/// failing; the case is then outside (a contract relation) or does not plan (a `requires`).
pub fn satisfy_scalars(c: &mut Case, m: &Manifest, parts: &[String]) {
    let env_of = |c: &Case| {
        let mut vars = dim_vars(c, m);
        vars.scalars = c.scalars.clone();
        Env::new(&vars)
    };
    for part in parts {
        if env_of(c).boolean(part).unwrap_or(false) {
            continue;
        }
        let names = variables_in(part);
        let Some(s) = m.scalars.iter().rev().find(|s| names.contains(&s.name)) else { continue };
        let vars = dim_vars(c, m);
        let mut candidates: Vec<Scalar> = s.choices.iter().filter_map(|ch| m.choice_value(s, ch, &vars)).collect();
        match (s.ty, s.range) {
            (crate::core::manifest::ScalarType::Bool, _) => candidates.extend([Scalar::Bool(false), Scalar::Bool(true)]),
            (ty, Some([lo, hi])) => {
                for x in [lo, hi, (lo + hi) / 2.0] {
                    candidates.push(crate::core::manifest::coerce(
                        ty,
                        if ty == crate::core::manifest::ScalarType::Int { Scalar::Int(x as i64) } else { Scalar::Float(x) },
                    ));
                }
            }
            _ => {}
        }
        let held: Vec<&String> = parts.iter().filter(|p| env_of(c).boolean(p).unwrap_or(false)).collect();
        for v in candidates {
            let mut t = c.clone();
            t.scalars.insert(s.name.clone(), v);
            let env = env_of(&t);
            if env.boolean(part).unwrap_or(false) && held.iter().all(|p| env.boolean(p).unwrap_or(false)) {
                *c = t;
                break;
            }
        }
    }
}

/// `a && b && c` as its parts (a relation without `&&` as itself).
fn split_and(text: &str) -> Vec<String> {
    text.split("&&").map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect()
}

/// The root's single child (evalexpr wraps every tree in a root node).
fn top(node: &Node) -> &Node {
    match (node.operator(), node.children()) {
        (Operator::RootNode, [only]) => top(only),
        _ => node,
    }
}

fn is_var(node: &Node, x: &str) -> bool {
    matches!(top(node).operator(), Operator::VariableIdentifierRead { identifier } if identifier == x)
}

fn mentions(node: &Node, x: &str) -> bool {
    node.iter_variable_identifiers().any(|v| v == x)
}

fn is_zero(node: &Node) -> bool {
    matches!(top(node).operator(), Operator::Const { value: Value::Int(0) })
}

/// The shape of `node` as a condition on `x`.
fn solve(node: &Node, x: &str) -> Form {
    let n = top(node);
    let [a, b] = n.children() else { return Form::Other };
    let (a, b) = (top(a), top(b));
    let free = |e: &Node| !mentions(e, x);
    match n.operator() {
        Operator::Eq => {
            if is_var(a, x) && free(b) {
                return Form::Equal(b.clone());
            }
            if is_var(b, x) && free(a) {
                return Form::Equal(a.clone());
            }
            let (m, zero) = if is_zero(b) {
                (a, true)
            } else if is_zero(a) {
                (b, true)
            } else {
                (a, false)
            };
            if zero && matches!(m.operator(), Operator::Mod) {
                if let [p, q] = m.children() {
                    if is_var(p, x) && free(q) {
                        return Form::MultipleOf(top(q).clone());
                    }
                    if is_var(q, x) && free(p) {
                        return Form::Divides(top(p).clone());
                    }
                }
            }
            Form::Other
        }
        Operator::Neq if is_var(a, x) && free(b) => Form::NotEqual(b.clone()),
        Operator::Neq if is_var(b, x) && free(a) => Form::NotEqual(a.clone()),
        Operator::Leq | Operator::Lt | Operator::Geq | Operator::Gt => {
            let strict = matches!(n.operator(), Operator::Lt | Operator::Gt);
            let upper = matches!(n.operator(), Operator::Leq | Operator::Lt);
            if is_var(a, x) && free(b) {
                if upper {
                    Form::AtMost(b.clone(), strict)
                } else {
                    Form::AtLeast(b.clone(), strict)
                }
            } else if is_var(b, x) && free(a) {
                if upper {
                    Form::AtLeast(a.clone(), strict)
                } else {
                    Form::AtMost(a.clone(), strict)
                }
            } else {
                Form::Other
            }
        }
        _ => Form::Other,
    }
}

/// An integer sub-expression's value, if it has one.
pub fn int_of(env: &Env, node: &Node) -> Option<i64> {
    match env.eval_node(node).ok()? {
        Value::Int(i) => Some(i),
        Value::Float(f) if f.is_finite() => Some(f.floor() as i64),
        _ => None,
    }
}

/// The values a relation (or any expression without tensors) sees for a case: its dims so far,
/// its params over the manifest's defaults, the defines and the element size.
pub fn dim_vars(case: &Case, m: &Manifest) -> Vars {
    let mut params = m.default_params();
    params.extend(case.params.clone());
    Vars { dims: case.dims.clone(), lengths: case.lengths.clone(), params, defines: m.defines.clone(), elem_bytes: case.dtype.size(), ..Vars::default() }
}

/// Brings the dims from position `from` on back into their relations: a dim whose relations
/// (those naming it and earlier dims) no longer hold moves to the smallest value, from the low
/// end of its range up to its current value, that satisfies them (when none does, the nearest
/// larger value in its range: a lower bound set by an earlier dim); a dim they still hold for
/// keeps its value (a GQA ratio survives), and one that cannot be satisfied is left as it is.
pub fn repair(c: &mut Case, m: &Manifest, from: usize) {
    let rels = dim_parts(&m.requires.iter().chain(&m.contract.relations).cloned().collect::<Vec<_>>(), m);
    let rels: Vec<&String> = rels.iter().collect();
    for d in m.dims.iter().skip(from) {
        let known: Vec<&str> = m.dims.iter().take_while(|e| e.name != d.name).map(|e| e.name.as_str()).chain([d.name.as_str()]).collect();
        let mine: Vec<&&String> = rels
            .iter()
            .filter(|r| {
                let names = variables_in(r);
                names.iter().any(|n| n == &d.name) && names.iter().filter(|n| m.dim(n).is_some()).all(|n| known.contains(&n.as_str()))
            })
            .collect();
        if mine.is_empty() {
            continue;
        }
        let mut env = Env::new(&dim_vars(c, m));
        let mut holds = |v: u64| {
            env.set_int(&d.name, v);
            mine.iter().all(|r| env.boolean(r).unwrap_or(false))
        };
        let current = c.dim(&d.name);
        if holds(current) {
            continue;
        }
        // The smallest value that satisfies, else (`tokens <= num_slots` broken by a smaller
        // num_slots) the nearest larger one inside the dim's range.
        let below = (1..=current.min(d.range[0].max(1) + 4096)).find(|&v| holds(v));
        if let Some(v) = below.or_else(|| (current + 1..=d.range[1].min(current.saturating_add(4096))).find(|&v| holds(v))) {
            c.dims.insert(d.name.clone(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order() -> Vec<String> {
        ["batch", "heads_kv", "heads_q", "seq_q", "seq_k", "head_dim"].iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn common_shapes_are_solved_for_the_last_dim_they_name() {
        let rels = attach(
            &["heads_q % heads_kv == 0".into(), "seq_q == seq_k && head_dim % 8 == 0".into(), "seq_k <= seq_q".into(), "heads_kv != 3".into()],
            &order(),
            true,
        );
        let by = |d: &str| rels.iter().filter(|r| r.dim == d).map(|r| format!("{:?}", std::mem::discriminant(&r.form))).count();
        assert_eq!(rels.len(), 5);
        assert!(matches!(rels[0].form, Form::MultipleOf(_)) && rels[0].dim == "heads_q");
        assert!(matches!(rels[1].form, Form::Equal(_)) && rels[1].dim == "seq_k");
        assert!(matches!(rels[2].form, Form::MultipleOf(_)) && rels[2].dim == "head_dim");
        assert!(matches!(rels[3].form, Form::AtMost(_, false)) && rels[3].dim == "seq_k");
        assert!(matches!(rels[4].form, Form::NotEqual(_)) && rels[4].dim == "heads_kv");
        assert_eq!(by("seq_k"), 2);
        let rev: Vec<String> = ["heads_q", "heads_kv"].iter().map(|s| s.to_string()).collect();
        assert!(matches!(attach(&["heads_q % heads_kv == 0".into()], &rev, true)[0].form, Form::Divides(_)));
        assert!(matches!(attach(&["(seq_q + seq_k) % 2 == 1".into()], &order(), false)[0].form, Form::Other));
    }
}
