//! proptest strategies for [`Case`]s.
//!
//! [`cases`] generates valid cases with the same boundary bias as the fuzzer decoder, and
//! shrinks toward batch = heads = 1, short sequences, small head dims, offset 0 and dense BHSD,
//! which is the order a human would want a failing case simplified in.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::sample::select;

use super::decode::{DecodeContext, HEAD_DIM_BOUNDARY, OFFSETS_ALIGNED, OFFSETS_MISALIGNED, OFFSETS_ODD, ORDERS, SEQ_BOUNDARY};
use crate::case::{Case, DataSpec, Dtype, Layouts, Placement, TensorLayout, ValueDist, CASE_VERSION};

/// A boxed strategy producing valid [`Case`]s.
pub type CaseStrategy = BoxedStrategy<Case>;

/// Limits for [`cases`]: the largest sizes it draws.
#[derive(Clone, Debug)]
pub struct CaseLimits {
    /// Largest batch.
    pub max_batch: u32,
    /// Largest heads_kv and GQA group size.
    pub max_heads: u32,
    /// Largest seq_q / seq_k.
    pub max_seq: u32,
    /// Largest head_dim.
    pub max_head_dim: u32,
    /// Whether layouts other than dense BHSD at offset 0 are drawn.
    pub any_layout: bool,
}

impl Default for CaseLimits {
    fn default() -> Self {
        CaseLimits { max_batch: 3, max_heads: 4, max_seq: 300, max_head_dim: 160, any_layout: true }
    }
}

fn dim(boundary: &'static [u32], max: u32) -> BoxedStrategy<u32> {
    let picks: Vec<u32> = boundary.iter().copied().filter(|&x| x <= max).collect();
    prop_oneof![3 => 1..=max, 7 => select(picks)].boxed()
}

fn tensor_layout(any: bool) -> BoxedStrategy<TensorLayout> {
    if !any {
        return Just(TensorLayout::contiguous()).boxed();
    }
    // Same weights as the fuzzer decoder: mostly 0, every residue class still reached.
    let offsets = prop_oneof![
        10 => Just(0u32),
        4 => select(OFFSETS_ALIGNED.to_vec()),
        5 => select(OFFSETS_MISALIGNED.to_vec()),
        1 => select(OFFSETS_ODD.to_vec()),
    ];
    prop_oneof![
        3 => offsets.clone().prop_map(|offset_bytes| TensorLayout { offset_bytes, ..TensorLayout::contiguous() }),
        1 => (0..ORDERS.len(), prop::array::uniform3(select(vec![0u32, 1, 3, 8])), offsets)
            .prop_map(|(o, p, offset_bytes)| TensorLayout { order: ORDERS[o], pad: [0, p[0], p[1], p[2]], offset_bytes }),
    ]
    .boxed()
}

/// Valid cases for the kernel in `ctx`, bounded by `limits`.
pub fn cases(ctx: DecodeContext, limits: CaseLimits) -> CaseStrategy {
    let dtypes = if ctx.dtypes.is_empty() { Dtype::ALL.to_vec() } else { ctx.dtypes.clone() };
    let params: Vec<BoxedStrategy<(String, i64)>> = ctx
        .params
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| {
            let n = n.clone();
            select(v.clone()).prop_map(move |x| (n.clone(), x)).boxed()
        })
        .collect();
    let shape = (
        1..=limits.max_batch,
        1..=limits.max_heads,
        select(vec![1u32, 2, 4, 3]).prop_filter("group within max_heads", move |g| *g <= limits.max_heads.max(1)),
        dim(SEQ_BOUNDARY, limits.max_seq),
        dim(SEQ_BOUNDARY, limits.max_seq),
        dim(HEAD_DIM_BOUNDARY, limits.max_head_dim),
    );
    let layout = tensor_layout(limits.any_layout);
    let layouts = (layout.clone(), layout.clone(), layout.clone(), layout)
        .prop_map(|(q, k, v, o)| Layouts { q, k, v, o });
    let data = (any::<u32>(), select(ValueDist::ALL.to_vec()))
        .prop_map(|(seed, dist)| DataSpec { seed: seed as u64, dist });
    let kernel = ctx.kernel;
    (params, select(dtypes), shape, any::<bool>(), data, layouts, prop::bool::weighted(0.2))
        .prop_map(move |(params, dtype, (batch, heads_kv, group, seq_q, seq_k, head_dim), causal, data, layouts, exact)| Case {
            version: CASE_VERSION,
            kernel: kernel.clone(),
            params: params.into_iter().collect::<BTreeMap<_, _>>(),
            dtype,
            batch,
            heads_q: heads_kv * group,
            heads_kv,
            seq_q,
            seq_k,
            head_dim,
            causal,
            scale: 1.0 / (head_dim as f32).sqrt(),
            data,
            layouts,
            placement: if exact { Placement::Exact } else { Placement::Guarded },
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest! {
        #[test]
        fn generated_cases_are_valid(case in cases(DecodeContext::default(), CaseLimits::default())) {
            prop_assert!(case.validate().is_ok(), "{:?}", case.validate());
            prop_assert!(case.seq_q <= 300 && case.seq_k <= 300 && case.head_dim <= 160);
        }
    }
}
