//! The built-in ops a manifest's `[reference]` can bind to, as plain data: each op's tensor and
//! scalar roles, the rank each role needs, and the dim it reduces over with the boundary values
//! to hint there ([`OpSpec`]). How an op is computed and judged lives in
//! `crate::engine::reference`; the loader checks bindings against these specs (`reference.rs`).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{DimSpec, Hint, TensorSpec};

/// The built-in ops a manifest can bind its tensors to. What each op needs is plain data, its
/// [`OpSpec`]; how it is computed and judged lives in `crate::engine::reference` (one module per op).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BuiltinOp {
    /// Scaled dot-product attention forward: `o = softmax(scale · q kᵀ + causal mask) v`, with
    /// GQA and an optional log-sum-exp output.
    AttentionFwd,
    /// Softmax over the last axis: `y = exp(x - max) / Σ exp(x - max)`, row by row.
    Softmax,
    /// RMSNorm over the last axis: `y = x / sqrt(mean(x²) + eps) · weight`.
    Rmsnorm,
    /// LayerNorm over the last axis: `y = (x - mean) / sqrt(var + eps) · weight + bias`, with
    /// the biased variance.
    Layernorm,
    /// `c = alpha · op(a) · op(b) + beta · c`, fp32 accumulate; `op` transposes when the
    /// `trans_a` / `trans_b` flag is set; `beta == 0` never reads `c` (BLAS semantics).
    Gemm,
    /// Rotary position embedding of `x [tokens, heads, head_dim]` by `cos`/`sin [max_pos,
    /// rot_dim / 2]` at `positions [tokens]`, interleaved or half-split pairs; into `y` when
    /// bound, else in place.
    Rotary,
}

/// The rank a role's tensor must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rank {
    /// Exactly this rank.
    Exact(usize),
    /// This rank or more (leading dims are rows).
    AtLeast(usize),
}

impl Rank {
    /// Whether a tensor of rank `r` fits.
    pub fn admits(self, r: usize) -> bool {
        match self {
            Rank::Exact(n) => r == n,
            Rank::AtLeast(n) => r >= n,
        }
    }
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rank::Exact(n) => write!(f, "rank {n}"),
            Rank::AtLeast(n) => write!(f, "rank {n} or more"),
        }
    }
}

/// One tensor role of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorRole {
    /// The role's name (`q`, `x`, `weight`), also the default tensor it binds.
    pub name: &'static str,
    /// The rank its tensor must have.
    pub rank: Rank,
    /// Whether a manifest must bind it (optional roles are judged when bound: `lse`).
    pub required: bool,
    /// For an optional output role: when unbound, the op writes it in place into the tensor
    /// bound to this role (rotary's `y` into `x`), which must then be written by the kernel.
    pub in_place: Option<&'static str>,
}

/// What a built-in op needs from a manifest: its tensor and scalar roles, and the dim it reduces
/// over (whose boundary values the op adds to that dim's hints).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpSpec {
    /// The name used in manifests.
    pub name: &'static str,
    /// Tensor roles, inputs then outputs.
    pub tensors: &'static [TensorRole],
    /// Scalar roles (a literal may stand in).
    pub scalars: &'static [ScalarRole],
    /// The role whose last dimension the op reduces over, when that is the shape's hard part.
    pub reduces: Option<&'static str>,
    /// Boundary values for that dimension: added to its dim's hints when the shape entry is a
    /// bare dim name.
    pub reduce_hints: &'static [u64],
}

impl OpSpec {
    /// Adds the op's boundary values to the dim it reduces over: the last shape entry of the
    /// tensor bound to its reduced role, when that is a bare dim name (values inside the dim's
    /// range, not already hinted).
    pub fn add_hints(&self, dims: &mut [DimSpec], tensors: &[TensorSpec], bind: &BTreeMap<String, String>) {
        let Some(t) = self.reduces.and_then(|role| bind.get(role)).and_then(|n| tensors.iter().find(|t| &t.name == n)) else { return };
        let Some(dim) = t.rank().checked_sub(1).and_then(|i| t.dim_name(i)).and_then(|n| dims.iter_mut().find(|d| d.name == n)) else { return };
        for &v in self.reduce_hints {
            let hint = Hint::Value(v);
            if (dim.range[0]..=dim.range[1]).contains(&v) && !dim.hints.contains(&hint) {
                dim.hints.push(hint);
            }
        }
    }
}

/// One scalar role of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScalarRole {
    /// The role's name (`eps`, `beta`), also the default scalar it binds.
    pub name: &'static str,
    /// Whether a manifest must bind it. An optional role binds the scalar of its name when the
    /// manifest has one (or the literal `bind` gives), else stays unbound; each op says what
    /// unbound means (gemm: no `beta` term, not transposed).
    pub required: bool,
}

const fn role(name: &'static str, rank: Rank) -> TensorRole {
    TensorRole { name, rank, required: true, in_place: None }
}

const fn optional_role(name: &'static str, rank: Rank) -> TensorRole {
    TensorRole { name, rank, required: false, in_place: None }
}

const fn scalar(name: &'static str) -> ScalarRole {
    ScalarRole { name, required: true }
}

const fn optional_scalar(name: &'static str) -> ScalarRole {
    ScalarRole { name, required: false }
}

/// Row lengths around the warp (32), the 16-byte vector widths (4 and 8 elements), the usual
/// block sizes (128 .. 1024) and one row of length 1.
const ROW_HINTS: &[u64] = &[
    1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096,
    4097,
];

const ATTENTION: OpSpec = OpSpec {
    name: "attention_fwd",
    tensors: &[
        role("q", Rank::Exact(4)),
        role("k", Rank::Exact(4)),
        role("v", Rank::Exact(4)),
        role("o", Rank::Exact(4)),
        optional_role("lse", Rank::Exact(3)),
    ],
    scalars: &[scalar("scale"), scalar("causal")],
    reduces: None,
    reduce_hints: &[],
};
const SOFTMAX: OpSpec =
    OpSpec { name: "softmax", tensors: &[role("x", Rank::AtLeast(1)), role("y", Rank::AtLeast(1))], scalars: &[], reduces: Some("x"), reduce_hints: ROW_HINTS };
const RMSNORM: OpSpec = OpSpec {
    name: "rmsnorm",
    tensors: &[role("x", Rank::AtLeast(1)), role("weight", Rank::Exact(1)), role("y", Rank::AtLeast(1))],
    scalars: &[scalar("eps")],
    reduces: Some("x"),
    reduce_hints: ROW_HINTS,
};
const LAYERNORM: OpSpec = OpSpec {
    name: "layernorm",
    tensors: &[role("x", Rank::AtLeast(1)), role("weight", Rank::Exact(1)), role("bias", Rank::Exact(1)), role("y", Rank::AtLeast(1))],
    scalars: &[scalar("eps")],
    reduces: Some("x"),
    reduce_hints: ROW_HINTS,
};
/// GEMM's reduced dim `k` is a shape expression of the transpose flags, so its boundary values
/// (around the tile sizes) are the kernel manifest's own hints.
const GEMM: OpSpec = OpSpec {
    name: "gemm",
    tensors: &[role("a", Rank::Exact(2)), role("b", Rank::Exact(2)), role("c", Rank::Exact(2))],
    scalars: &[scalar("alpha"), optional_scalar("beta"), optional_scalar("trans_a"), optional_scalar("trans_b")],
    reduces: None,
    reduce_hints: &[],
};
const ROTARY: OpSpec = OpSpec {
    name: "rotary",
    tensors: &[
        role("x", Rank::Exact(3)),
        role("cos", Rank::Exact(2)),
        role("sin", Rank::Exact(2)),
        role("positions", Rank::Exact(1)),
        TensorRole { name: "y", rank: Rank::Exact(3), required: false, in_place: Some("x") },
    ],
    scalars: &[optional_scalar("interleaved")],
    reduces: None,
    reduce_hints: &[],
};

impl BuiltinOp {
    /// Every op.
    pub const ALL: [BuiltinOp; 6] = [BuiltinOp::AttentionFwd, BuiltinOp::Softmax, BuiltinOp::Rmsnorm, BuiltinOp::Layernorm, BuiltinOp::Gemm, BuiltinOp::Rotary];

    /// What the op needs from a manifest.
    pub fn spec(self) -> &'static OpSpec {
        match self {
            BuiltinOp::AttentionFwd => &ATTENTION,
            BuiltinOp::Softmax => &SOFTMAX,
            BuiltinOp::Rmsnorm => &RMSNORM,
            BuiltinOp::Layernorm => &LAYERNORM,
            BuiltinOp::Gemm => &GEMM,
            BuiltinOp::Rotary => &ROTARY,
        }
    }

    /// The name used in manifests.
    pub fn name(self) -> &'static str {
        self.spec().name
    }
}

impl fmt::Display for BuiltinOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
