//! The contract check: [`check_contract`] judges a planned case against what the kernel's
//! manifest declares, and lists every precondition it breaks.
//!
//! The contract is spread over the manifest where each term belongs: the element types
//! (`dtypes`), each dim's range and multiple, each scalar's choices or range, each tensor's
//! layout kind, broadcast, alignment and value classes, the relations between dims
//! (`[contract] relations`) and the largest element offset. A case inside the contract that
//! fails is the kernel's bug; a case outside it tells the author which precondition the host-side
//! guard must check.

use serde::{Deserialize, Serialize};

use crate::core::case::{Case, Scalar};
use crate::core::manifest::expr::Env;
use crate::core::manifest::{LayoutFreedom, Manifest, Role, ScalarType};

use super::Plan;

/// Whether a case lies inside a kernel's declared contract.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum ContractVerdict {
    /// Every declared precondition holds.
    Inside,
    /// At least one precondition is violated.
    Outside {
        /// One line per violated precondition.
        reasons: Vec<String>,
    },
}

impl ContractVerdict {
    /// Whether the case is inside.
    pub fn is_inside(&self) -> bool {
        matches!(self, ContractVerdict::Inside)
    }
}

/// Whether `case` plans for `m` and lies inside its contract: the one-line answer for callers
/// that need only that.
pub fn admits(m: &Manifest, case: &Case) -> bool {
    Plan::new(case, m).is_ok_and(|p| check_contract(m, case, &p).is_inside())
}

/// The plan and contract verdict of a case that may not plan at all (a finding synthesised for
/// a case the worker could not even prepare): such a case gets an empty plan and is outside.
pub fn plan_and_judge(case: &Case, m: &Manifest) -> (Plan, ContractVerdict) {
    match Plan::new(case, m) {
        Ok(plan) => {
            let verdict = check_contract(m, case, &plan);
            (plan, verdict)
        }
        Err(e) => (
            Plan { tensors: Vec::new(), vars: Default::default() },
            ContractVerdict::Outside { reasons: vec![format!("the case does not fit {}: {e}", m.name)] },
        ),
    }
}

/// Judges a planned case against the contract of `m`; every violated precondition is listed.
pub fn check_contract(m: &Manifest, case: &Case, plan: &Plan) -> ContractVerdict {
    let mut reasons = Vec::new();
    if !m.dtypes.contains(&case.dtype) {
        reasons.push(format!("dtype {} is not one of {:?}", case.dtype, m.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>()));
    }
    dims(m, plan, &mut reasons);
    scalars(m, plan, &mut reasons);
    for tp in &plan.tensors {
        tensor(m, tp, &mut reasons);
    }
    if reasons.is_empty() {
        ContractVerdict::Inside
    } else {
        ContractVerdict::Outside { reasons }
    }
}

fn dims(m: &Manifest, plan: &Plan, reasons: &mut Vec<String>) {
    for d in &m.dims {
        let v = plan.dim(&d.name);
        let [lo, hi] = d.range;
        if v < lo || v > hi {
            reasons.push(format!("{} = {v} is outside {lo}..={hi}", d.name));
        }
        if d.multiple > 1 && !v.is_multiple_of(d.multiple) {
            reasons.push(format!("{} = {v} is not a multiple of {}", d.name, d.multiple));
        }
    }
    for l in &m.lengths {
        let [lo, hi] = l.range;
        let list = plan.vars.lengths.get(&l.name).map(Vec::as_slice).unwrap_or_default();
        if let Some((i, v)) = list.iter().enumerate().find(|(_, &v)| v < lo || v > hi) {
            reasons.push(format!("{}[{i}] = {v} is outside {lo}..={hi}", l.name));
        }
    }
    if m.contract.relations.is_empty() {
        return;
    }
    let env = Env::new(&plan.vars);
    for rel in &m.contract.relations {
        if !env.boolean(rel).unwrap_or(false) {
            let named: Vec<String> = crate::core::manifest::expr::variables_in(rel)
                .into_iter()
                .filter_map(|n| match (m.dim(&n), plan.scalar(&n)) {
                    (Some(_), _) => Some(format!("{n} = {}", plan.dim(&n))),
                    (None, Some(v)) => Some(format!("{n} = {}", v.as_f64())),
                    _ => None,
                })
                .collect();
            reasons.push(format!("`{rel}` does not hold ({})", named.join(", ")));
        }
    }
}

/// A scalar is inside the contract when it is one of its choices or lies in its range (a
/// manifest may give both: choices are what cases draw, the range what the kernel accepts).
fn scalars(m: &Manifest, plan: &Plan, reasons: &mut Vec<String>) {
    for s in &m.scalars {
        let Some(v) = plan.scalar(&s.name) else { continue };
        let in_range = s.range.map(|[lo, hi]| v.as_f64() >= lo && v.as_f64() <= hi);
        if s.choices.is_empty() {
            if in_range == Some(false) {
                let [lo, hi] = s.range.unwrap_or_default();
                reasons.push(format!("{} = {v} is outside {lo}..={hi}", s.name));
            }
            continue;
        }
        let allowed: Vec<Scalar> = s.choices.iter().filter_map(|c| m.choice_value(s, c, &plan.vars)).collect();
        let same = |a: &Scalar| match s.ty {
            ScalarType::F32 => (a.as_f64() - v.as_f64()).abs() <= 1e-6 * v.as_f64().abs().max(1e-30),
            _ => a.as_i64() == v.as_i64(),
        };
        if !allowed.iter().any(same) && in_range != Some(true) {
            let range = s.range.map(|[lo, hi]| format!(" nor in {lo}..={hi}")).unwrap_or_default();
            reasons.push(format!("{} = {v} is not one of {}{range}", s.name, allowed.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")));
        }
    }
}

fn tensor(m: &Manifest, tp: &super::TensorPlan, reasons: &mut Vec<String>) {
    let Some(spec) = m.tensor(&tp.name) else { return };
    let t = &tp.name;
    let layout = &tp.layout;
    let last = tp.rank().saturating_sub(1);
    match spec.layout {
        LayoutFreedom::Fixed if !layout.is_dense() || layout.offset_bytes != 0 => {
            reasons.push(format!("{t} is laid out {} at offset {}, but it is a fixed dense buffer at offset 0", layout_text(layout), layout.offset_bytes))
        }
        LayoutFreedom::Dense if !layout.is_dense() => reasons.push(format!("{t} is {}, but only the dense layout is supported", layout_text(layout))),
        LayoutFreedom::Inner if tp.strides[last] != 1 && tp.shape[last] > 1 => {
            reasons.push(format!("{t} innermost stride is {}, but it must be 1", tp.strides[last]))
        }
        _ => {}
    }
    if !layout.broadcast.is_empty() && !spec.broadcast {
        reasons.push(format!("{t} is broadcast over dimensions {:?}, which the kernel does not support", layout.broadcast));
    }
    if spec.role == Role::Input || spec.init == crate::core::manifest::Init::Drawn {
        if let Some(c) = layout.values.iter().find(|c| !spec.values.contains(c)) {
            reasons.push(format!(
                "{t} holds {c} values, which the kernel does not accept (allowed: {})",
                spec.values.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    if let Some(max) = m.contract.max_element_offset {
        if tp.max_element_offset() > max {
            reasons.push(format!("{t} reaches element offset {}, more than max_element_offset = {max}", tp.max_element_offset()));
        }
    }
    // No kernel loads an element from an address that is not a multiple of its size.
    let align = (spec.align as u64).max(tp.elem_bytes as u64);
    let base_align = (spec.base_alignment() as u64).max(align);
    if !tp.offset_bytes.is_multiple_of(base_align) {
        reasons.push(format!("{t} base offset {} bytes is not a multiple of {base_align}", tp.offset_bytes));
    } else if align > 1 && !tp.aligned_to(align) {
        reasons.push(format!("{t} strides {:?} (elements) are not all multiples of {align} bytes", tp.strides));
    }
}

fn layout_text(l: &crate::core::case::TensorLayout) -> String {
    let mut s = format!("order {}", l.order_name());
    if l.pad.iter().any(|&p| p != 0) {
        s.push_str(&format!(" with padding {:?}", l.pad));
    }
    if !l.broadcast.is_empty() {
        s.push_str(&format!(" broadcast over {:?}", l.broadcast));
    }
    s
}
