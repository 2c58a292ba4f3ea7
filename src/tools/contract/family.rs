//! What a probe varies ([`Family`]) and the value it set ([`Value`]), measured on a case.
//!
//! A family names its tensor, dim, flag or param by the manifest's names, so the table and the
//! sentences read in the kernel's own terms (`q base offset`, `head_dim`, `causal`). Values are
//! measured on the case rather than remembered from how it was built, so a replica that kept the
//! probed property measures the same, and a test can check that it did.

use std::fmt;

use serde::Serialize;

use crate::core::case::Case;
use crate::core::generate::PastInt32;
use crate::core::manifest::Manifest;
use crate::core::plan::Plan;

/// The property a probe family varies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// A tensor's base byte offset.
    Offset(String),
    /// A tensor's row pitch in bytes: the stride of the dimension just outside the innermost
    /// one of its order.
    Pitch(String),
    /// Padding of one outer extent of a tensor, which makes the stride outside it non-dense.
    Padding {
        /// The tensor.
        tensor: String,
        /// The logical dimension whose extent is padded.
        dim: usize,
        /// The logical dimension whose stride the padding changes (the next one out).
        outer: usize,
        /// The padded dimension's shape entry (`seq_q`), for the table.
        label: String,
    },
    /// An order with the innermost logical dimension not innermost (its stride is not 1).
    InnerStride(String),
    /// A permuted order that keeps the innermost logical dimension innermost.
    Order(String),
    /// One logical dimension of an input broadcast (stride 0).
    Broadcast(String),
    /// Element offsets of a tensor past 2³¹ (its outermost stride pushed there, that dim 2):
    /// 32-bit index arithmetic.
    ElementOffset(String),
    /// A dim's value.
    Dim(String),
    /// A list of lengths (`[lengths]`): a batch of three sequences of chosen lengths.
    Lengths(String),
    /// The case's element type.
    Dtype,
    /// A flag (bool scalar).
    Flag(String),
    /// A tunable parameter's value.
    Param(String),
}

/// What a probe set its property to, measured on its case.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(untagged)]
pub enum Value {
    /// A number: bytes, elements, a dim's or a parameter's value.
    Num(i64),
    /// A name: a dtype, an order, a broadcast dimension, a flag's value.
    Name(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Num(n) => write!(f, "{n}"),
            Value::Name(s) => f.write_str(s),
        }
    }
}

/// What [`Family::measure`] reports for an unbroadcast tensor.
pub const NOT_BROADCAST: &str = "none";

impl Family {
    /// The tensor the family is about, if any.
    pub fn tensor(&self) -> Option<&str> {
        match self {
            Family::Offset(t)
            | Family::Pitch(t)
            | Family::Padding { tensor: t, .. }
            | Family::InnerStride(t)
            | Family::Order(t)
            | Family::Broadcast(t)
            | Family::ElementOffset(t) => Some(t),
            _ => None,
        }
    }

    /// The family with its tensor left out: families of one kind group across tensors.
    pub fn kind(&self) -> String {
        match self {
            Family::Offset(_) => "base offset".into(),
            Family::Pitch(_) => "row pitch".into(),
            Family::Padding { .. } => "outer padding".into(),
            Family::InnerStride(_) => "innermost stride".into(),
            Family::Order(_) => "dimension order".into(),
            Family::Broadcast(_) => "broadcast".into(),
            Family::ElementOffset(_) => "largest element offset".into(),
            other => other.to_string(),
        }
    }

    /// The position of a tensor family's kind in the plan (offsets first); 0 for the others.
    pub(super) fn kind_index(&self) -> usize {
        match self {
            Family::Offset(_) => 0,
            Family::Pitch(_) => 1,
            Family::Padding { .. } => 2,
            Family::InnerStride(_) => 3,
            Family::Order(_) => 4,
            Family::Broadcast(_) => 5,
            Family::ElementOffset(_) => 6,
            _ => 0,
        }
    }

    /// The dims a probe of this family pins: replicas must not grow them, or the probed value
    /// would change with them.
    pub fn pinned_dims(&self, m: &Manifest) -> Vec<String> {
        match self {
            Family::Dim(d) => vec![d.clone()],
            // The list has one length per sequence: its count dim stays.
            Family::Lengths(l) => m.lengths_spec(l).map(|s| vec![s.count.clone()]).unwrap_or_default(),
            // The overflow is built on the outermost dim at 2 or 3, with a stride set by the
            // padding of the next: growing any dim of the tensor would change its span or its
            // form (a 32-bit stride grown past 2^31).
            Family::ElementOffset(t) => m.tensor(t).map(|s| (0..s.rank()).filter_map(|i| s.dim_name(i)).map(str::to_string).collect()).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// The probed property of `case` (which must plan for `m`; a case that does not measures
    /// as `?`).
    pub fn measure(&self, case: &Case, m: &Manifest) -> Value {
        let Ok(plan) = Plan::new(case, m) else { return Value::Name("?".into()) };
        let tensor = |t: &str| plan.tensor(t).cloned();
        match self {
            Family::Offset(t) => Value::Num(case.layout(t).offset_bytes as i64),
            Family::Pitch(t) => Value::Num(tensor(t).map_or(0, |tp| pitch_bytes(&tp)) as i64),
            Family::Padding { tensor: t, dim, .. } => {
                let l = case.layout(t);
                let rank = tensor(t).map_or(0, |tp| tp.rank());
                let pos = l.order_of(rank).iter().position(|x| x == dim).unwrap_or(0);
                Value::Num(l.pad_at(pos) as i64)
            }
            Family::InnerStride(t) | Family::Order(t) => Value::Name(order_digits(case, &plan, t)),
            Family::Broadcast(t) => {
                let spec = m.tensor(t);
                let names: Vec<String> =
                    case.layout(t).broadcast.iter().map(|&d| spec.and_then(|s| s.shape.get(d)).cloned().unwrap_or_else(|| d.to_string())).collect();
                Value::Name(if names.is_empty() { NOT_BROADCAST.into() } else { names.join(",") })
            }
            // Past 2³¹ or not: the exact offset moves with the replicas' dims.
            // A narrow push's stride fits 32 bits (PastInt32::NarrowStride): only products wrap.
            Family::ElementOffset(t) => Value::Name(
                match tensor(t).filter(|tp| tp.reaches_past_int32()) {
                    None => "< 2^31",
                    Some(tp) if PastInt32::of(&tp) == PastInt32::NarrowStride => "≥ 2^31 (32-bit stride)",
                    Some(_) => "≥ 2^31",
                }
                .into(),
            ),
            Family::Dim(d) => Value::Num(case.dim(d) as i64),
            Family::Lengths(l) => {
                let list: Vec<String> = case.lengths.get(l).map(|v| v.iter().map(u64::to_string).collect()).unwrap_or_default();
                Value::Name(format!("[{}]", list.join(" ")))
            }
            Family::Dtype => Value::Name(case.dtype.name().into()),
            Family::Flag(f) => Value::Name(plan.scalar(f).is_some_and(|s| s.is_true()).to_string()),
            Family::Param(p) => Value::Num(case.params.get(p).copied().unwrap_or_default()),
        }
    }

    /// A value as the table shows it: `8 B`, `+1`, `0213`, `63`.
    pub fn describe(&self, v: &Value) -> String {
        match (self, v) {
            (Family::Offset(_) | Family::Pitch(_), Value::Num(n)) => format!("{n} B"),
            (Family::Padding { .. }, Value::Num(n)) => format!("+{n}"),
            _ => v.to_string(),
        }
    }

    /// Values in a sentence: `offset 2, 4, 8 bytes`, `head_dim 63, 65`, `order 0213`.
    pub fn phrase(&self, values: &[Value]) -> String {
        let list = values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
        match self {
            Family::Offset(_) => format!("offset {list} bytes"),
            Family::Pitch(_) => format!("row pitch {list} bytes"),
            Family::Padding { dim, .. } => format!("{list} extra elements of dimension {dim}"),
            Family::InnerStride(_) | Family::Order(_) => format!("order {list}"),
            Family::Broadcast(_) => format!("broadcast over {list}"),
            Family::ElementOffset(_) => format!("element offsets {list}"),
            Family::Flag(name) | Family::Param(name) => format!("{name} = {list}"),
            other => format!("{other} {list}"),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Family::Offset(t) => write!(f, "{t} base offset"),
            Family::Pitch(t) => write!(f, "{t} row pitch"),
            Family::Padding { tensor, outer, label, .. } => write!(f, "{tensor} stride({outer}) ({label} padded)"),
            Family::InnerStride(t) => write!(f, "{t} innermost stride"),
            Family::Order(t) => write!(f, "{t} order"),
            Family::Broadcast(t) => write!(f, "{t} broadcast"),
            Family::ElementOffset(t) => write!(f, "{t} largest element offset"),
            Family::Dim(d) | Family::Lengths(d) => f.write_str(d),
            Family::Dtype => f.write_str("dtype"),
            Family::Flag(name) | Family::Param(name) => f.write_str(name),
        }
    }
}

/// The row pitch of a planned tensor in bytes: the stride of the dimension just outside the
/// innermost one of its order, whatever that dimension's extent (0 for rank 1).
pub fn pitch_bytes(tp: &crate::core::plan::TensorPlan) -> u64 {
    let rank = tp.rank();
    if rank < 2 {
        return 0;
    }
    let order = tp.layout.order_of(rank);
    // A broadcast row dimension has stride 0: the unbroadcast stride is the pitch.
    let unbroadcast = crate::core::case::TensorLayout { broadcast: Vec::new(), ..tp.layout.clone() };
    let strides = crate::core::case::strides(&tp.shape, &unbroadcast).unwrap_or_else(|| tp.strides.clone());
    strides[order[rank - 2]] * tp.elem_bytes as u64
}

/// A tensor's order as digits, outermost first (`0213`), the shape's own order included.
fn order_digits(case: &Case, plan: &Plan, t: &str) -> String {
    let rank = plan.tensor(t).map_or(0, |tp| tp.rank());
    case.layout(t).order_of(rank).iter().map(|d| d.to_string()).collect()
}
