//! Planning: pure host arithmetic from a [`Case`] to a [`Plan`].
//!
//! A plan holds, per tensor, the element strides of each logical dimension, the exact byte span
//! the tensor covers, and the alignment residues (`ptr % 16`, `stride_bytes % 16`) that decide
//! whether vector loads are legal. It also judges the case against a kernel's declared
//! [`Contract`]: a finding outside the contract is the caller's bug, not the kernel's, so every
//! later report says which side of the contract a case was on.
//!
//! Nothing here touches the GPU; the arena and launch stages read their numbers from the plan.

use serde::{Deserialize, Serialize};

use crate::case::{Case, Dim, Dtype, TensorId};

/// The alignment vector loads need; residues are taken modulo this.
pub const VECTOR_ALIGN: u64 = 16;

pub use crate::case::{span_elements, strides};

/// Where one tensor lives and how it is aligned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorPlan {
    /// Which tensor.
    pub tensor: TensorId,
    /// Logical shape `[b, h, s, d]`.
    pub shape: [u32; 4],
    /// Element strides `[b, h, s, d]`.
    pub strides: [u64; 4],
    /// Element size in bytes.
    pub elem_bytes: u32,
    /// Base byte offset from a 256-byte-aligned point.
    pub offset_bytes: u64,
    /// Bytes from the first to the last byte of the tensor, inclusive.
    pub span_bytes: u64,
    /// Logical elements (the span minus stride gaps).
    pub numel: u64,
    /// `base_ptr % 16`.
    pub base_residue: u64,
    /// `stride_bytes % 16` per logical dimension `[b, h, s, d]`.
    pub stride_residues: [u64; 4],
}

impl TensorPlan {
    /// Byte offset of element `[b, h, s, d]` from the tensor's base.
    pub fn byte_offset(&self, idx: [u32; 4]) -> u64 {
        self.elem_offset(idx) * self.elem_bytes as u64
    }

    /// Element offset of `[b, h, s, d]` from the tensor's base.
    pub fn elem_offset(&self, idx: [u32; 4]) -> u64 {
        (0..4).map(|i| idx[i] as u64 * self.strides[i]).sum()
    }

    /// The element offset of the tensor's last element: the largest index a kernel computes.
    pub fn max_element_offset(&self) -> u64 {
        self.span_bytes / self.elem_bytes as u64 - 1
    }

    /// Whether some element offset reaches 2³¹, where 32-bit signed index arithmetic wraps.
    pub fn reaches_past_int32(&self) -> bool {
        self.max_element_offset() >= crate::case::INT32_OFFSET_LIMIT
    }

    /// Whether the tensor's elements fill its span with no gaps.
    pub fn is_gapless(&self) -> bool {
        self.numel * self.elem_bytes as u64 == self.span_bytes
    }

    /// Stride of one logical dimension in elements.
    pub fn stride(&self, d: Dim) -> u64 {
        self.strides[d.index()]
    }

    /// Whether the base and every stride that can be stepped over (dimensions of extent > 1,
    /// and the row pitch of the innermost-contiguous feature dimension) are multiples of `align`
    /// bytes.
    pub fn aligned_to(&self, align: u64) -> bool {
        self.offset_bytes % align == 0
            && (0..4).all(|i| {
                let d = Dim::ALL[i];
                d == Dim::D && self.strides[i] == 1
                    || self.shape[i] == 1
                    || (self.strides[i] * self.elem_bytes as u64) % align == 0
            })
    }

    /// The smallest power-of-two alignment (≤ 16) the base and relevant strides all honour.
    pub fn alignment(&self) -> u64 {
        [16, 8, 4, 2, 1].into_iter().find(|&a| self.aligned_to(a)).unwrap_or(1)
    }
}

/// The full plan of a case: one [`TensorPlan`] per tensor, in [`TensorId::ALL`] order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Per-tensor plans.
    pub tensors: Vec<TensorPlan>,
}

impl Plan {
    /// Plans a validated case.
    pub fn new(case: &Case) -> Plan {
        let tensors = TensorId::ALL
            .into_iter()
            .map(|t| {
                let shape = case.shape(t);
                let layout = case.layouts.get(t);
                let st = strides(&shape, layout);
                let eb = case.dtype.size() as u64;
                TensorPlan {
                    tensor: t,
                    shape,
                    strides: st,
                    elem_bytes: eb as u32,
                    offset_bytes: layout.offset_bytes as u64,
                    span_bytes: span_elements(&shape, layout) * eb,
                    numel: case.numel(t),
                    base_residue: layout.offset_bytes as u64 % VECTOR_ALIGN,
                    stride_residues: st.map(|s| (s * eb) % VECTOR_ALIGN),
                }
            })
            .collect();
        Plan { tensors }
    }

    /// The plan of one tensor.
    pub fn tensor(&self, t: TensorId) -> &TensorPlan {
        &self.tensors[t.index()]
    }
}

/// Which layouts a kernel accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayoutSupport {
    /// Only dense BHSD.
    Contiguous,
    /// Any order and padding, as long as the head dimension is innermost with stride 1.
    InnerContiguous,
    /// Any element strides.
    #[default]
    Strided,
}

/// The preconditions a kernel declares in its manifest.
///
/// A case inside the contract that fails is the kernel's bug; a case outside it tells the kernel
/// author which precondition the host-side guard must check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// Accepted dtypes.
    pub dtypes: Vec<Dtype>,
    /// Accepted layouts.
    #[serde(default)]
    pub layouts: LayoutSupport,
    /// Inclusive head_dim range.
    pub head_dim: [u32; 2],
    /// head_dim must be a multiple of this.
    #[serde(default = "one")]
    pub head_dim_multiple: u32,
    /// Inclusive seq_q range.
    pub seq_q: [u32; 2],
    /// Inclusive seq_k range.
    pub seq_k: [u32; 2],
    /// Minimum alignment in bytes of every base pointer and stride; never less than the
    /// element size, whatever the manifest says.
    #[serde(default = "one")]
    pub min_align: u32,
    /// Whether causal masking is supported.
    #[serde(default)]
    pub causal: bool,
    /// Whether heads_q may differ from heads_kv.
    #[serde(default)]
    pub gqa: bool,
    /// Largest element offset (`Σ index · stride`, in elements) the kernel handles; `None`, the
    /// default, is no limit. A kernel that indexes in 32 bits declares `2147483647` here, and
    /// the fuzzer then never draws the over-2³¹ offsets it would otherwise try.
    #[serde(default)]
    pub max_element_offset: Option<u64>,
}

fn one() -> u32 {
    1
}

impl Contract {
    /// A contract that accepts every valid case.
    pub fn anything() -> Contract {
        Contract {
            dtypes: Dtype::ALL.to_vec(),
            layouts: LayoutSupport::Strided,
            head_dim: [1, crate::case::MAX_HEAD_DIM],
            head_dim_multiple: 1,
            seq_q: [1, crate::case::MAX_DIM],
            seq_k: [1, crate::case::MAX_DIM],
            min_align: 1,
            causal: true,
            gqa: true,
            max_element_offset: None,
        }
    }

    /// Whether the contract lets element offsets reach 2³¹ (the 32-bit index overflow class).
    pub fn allows_int32_overflow(&self) -> bool {
        self.layouts != LayoutSupport::Contiguous
            && self.max_element_offset.is_none_or(|m| m >= crate::case::INT32_OFFSET_LIMIT)
    }

    /// Whether `case` lies inside this contract: [`Contract::check`] on its own plan, for the
    /// callers that need only the answer.
    pub fn admits(&self, case: &Case) -> bool {
        self.check(case, &Plan::new(case)).is_inside()
    }

    /// Judges a case against this contract; every violated precondition is listed.
    pub fn check(&self, case: &Case, plan: &Plan) -> ContractVerdict {
        let mut reasons = Vec::new();
        if !self.dtypes.contains(&case.dtype) {
            reasons.push(format!("dtype {} is not one of {:?}", case.dtype, self.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>()));
        }
        let ranges = [
            ("head_dim", case.head_dim, self.head_dim),
            ("seq_q", case.seq_q, self.seq_q),
            ("seq_k", case.seq_k, self.seq_k),
        ];
        for (name, v, [lo, hi]) in ranges {
            if v < lo || v > hi {
                reasons.push(format!("{name} = {v} is outside {lo}..={hi}"));
            }
        }
        if self.head_dim_multiple > 1 && case.head_dim % self.head_dim_multiple != 0 {
            reasons.push(format!("head_dim = {} is not a multiple of {}", case.head_dim, self.head_dim_multiple));
        }
        if case.causal && !self.causal {
            reasons.push("causal masking is not supported".into());
        }
        if case.heads_q != case.heads_kv && !self.gqa {
            reasons.push(format!("heads_q = {} differs from heads_kv = {} (GQA/MQA not supported)", case.heads_q, case.heads_kv));
        }
        for tp in &plan.tensors {
            let t = tp.tensor;
            let layout = case.layouts.get(t);
            match self.layouts {
                LayoutSupport::Contiguous if !layout.is_dense_bhsd() => reasons.push(format!(
                    "{t} is {} with padding {:?}, but only dense bhsd is supported",
                    layout.order_name(),
                    layout.pad
                )),
                LayoutSupport::InnerContiguous if tp.stride(Dim::D) != 1 && tp.shape[3] > 1 => {
                    reasons.push(format!("{t} head_dim stride is {}, but it must be 1", tp.stride(Dim::D)))
                }
                _ => {}
            }
            if let Some(max) = self.max_element_offset {
                if tp.max_element_offset() > max {
                    reasons.push(format!("{t} reaches element offset {}, more than max_element_offset = {max}", tp.max_element_offset()));
                }
            }
            // No kernel loads an element from an address that is not a multiple of its size.
            let align = (self.min_align as u64).max(tp.elem_bytes as u64);
            if align > 1 && !tp.aligned_to(align) {
                if tp.offset_bytes % align != 0 {
                    reasons.push(format!("{t} base offset {} bytes is not a multiple of {align}", tp.offset_bytes));
                } else {
                    reasons.push(format!("{t} strides {:?} (elements) are not all multiples of {align} bytes", tp.strides));
                }
            }
        }
        if reasons.is_empty() {
            ContractVerdict::Inside
        } else {
            ContractVerdict::Outside { reasons }
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{Case, Dim, TensorLayout};

    #[test]
    fn bhsd_strides_are_dense() {
        let case = Case::example("k");
        let plan = Plan::new(&case);
        let q = plan.tensor(TensorId::Q);
        assert_eq!(q.strides, [2 * 65 * 64, 65 * 64, 64, 1]);
        assert!(q.is_gapless());
        assert_eq!(q.span_bytes, 2 * 65 * 64 * 2);
    }

    #[test]
    fn bshd_with_padding_has_gaps() {
        let mut case = Case::example("k");
        case.layouts.k = TensorLayout { order: [Dim::B, Dim::S, Dim::H, Dim::D], pad: [0, 0, 0, 8], offset_bytes: 6 };
        let plan = Plan::new(&case);
        let k = plan.tensor(TensorId::K);
        // heads_kv = 1, head_dim 64 padded to 72.
        assert_eq!(k.strides, [113 * 72, 72, 72, 1]);
        assert!(!k.is_gapless());
        assert_eq!(k.base_residue, 6);
        assert_eq!(k.stride_residues[2], (72 * 2) % 16);
    }

    #[test]
    fn q_offset_8_gives_residue_8_and_leaves_contract() {
        let mut case = Case::example("k");
        case.layouts.q.offset_bytes = 8;
        let plan = Plan::new(&case);
        assert_eq!(plan.tensor(TensorId::Q).base_residue, 8);
        let mut c = Contract::anything();
        c.min_align = 16;
        match c.check(&case, &plan) {
            ContractVerdict::Outside { reasons } => {
                assert_eq!(reasons.len(), 1, "{reasons:?}");
                assert!(reasons[0].contains("q base offset 8"), "{reasons:?}");
            }
            v => panic!("expected outside, got {v:?}"),
        }
    }

    #[test]
    fn alignment_is_the_weakest_of_base_and_strides() {
        let mut case = Case::example("k");
        case.head_dim = 59;
        let plan = Plan::new(&case);
        // 59 * 2 bytes = 118: a row pitch that is only 2-byte aligned.
        assert_eq!(plan.tensor(TensorId::Q).alignment(), 2);
        case.head_dim = 64;
        case.layouts.v.offset_bytes = 4;
        assert_eq!(Plan::new(&case).tensor(TensorId::V).alignment(), 4);
    }
}
