//! Cases of format 1: the attention-only model (`batch`, `heads_q`, `heads_kv`, `seq_q`,
//! `seq_k`, `head_dim`, `causal`, `scale`, one value distribution, four rank-4 layouts), read
//! from seeds written before named tensors and migrated on read by [`migrate`].
//!
//! The migrated case names the same dims, scalars and tensors the converted attention manifests
//! declare (`batch`, `heads_q`, ..., `q`, `k`, `v`, `o`, dims in BHSD order), and its inputs are
//! generated bit for bit as before: the same seed, the same per-tensor streams (q, k, v first in
//! every attention roster), and the old distribution spelled as per-tensor value classes.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Case, Dtype, Placement, Scalar, TensorLayout, ValueClass, CASE_VERSION};

/// A logical dimension of a format-1 attention tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
enum Dim {
    B,
    H,
    S,
    D,
}

impl Dim {
    fn index(self) -> usize {
        match self {
            Dim::B => 0,
            Dim::H => 1,
            Dim::S => 2,
            Dim::D => 3,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LayoutV1 {
    order: [Dim; 4],
    pad: [u32; 4],
    offset_bytes: u32,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LayoutsV1 {
    q: LayoutV1,
    k: LayoutV1,
    v: LayoutV1,
    o: LayoutV1,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ValueDistV1 {
    Normal,
    Uniform,
    LargeLogits,
    ConstantRows,
}

#[derive(Clone, Copy, Debug, Deserialize)]
struct DataSpecV1 {
    seed: u64,
    dist: ValueDistV1,
}

/// A case as format 1 wrote it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseV1 {
    version: u32,
    kernel: String,
    #[serde(default)]
    params: BTreeMap<String, i64>,
    dtype: Dtype,
    batch: u32,
    heads_q: u32,
    heads_kv: u32,
    seq_q: u32,
    seq_k: u32,
    head_dim: u32,
    causal: bool,
    scale: f32,
    data: DataSpecV1,
    layouts: LayoutsV1,
    #[serde(default)]
    placement: Placement,
}

impl CaseV1 {
    /// The format version the file claimed (always 1 for a case that parsed as this).
    pub fn version(&self) -> u32 {
        self.version
    }
}

/// The format-2 case of a format-1 case: dims `batch, heads_q, heads_kv, seq_q, seq_k,
/// head_dim`, scalars `causal` and `scale`, tensors `q, k, v, o` with their layouts (orders as
/// positions in BHSD), and the distribution as value classes (large logits: q and k `large`,
/// v `normal`, as the old generator drew them).
pub fn migrate(v1: CaseV1) -> Case {
    let dims = [("batch", v1.batch), ("heads_q", v1.heads_q), ("heads_kv", v1.heads_kv), ("seq_q", v1.seq_q), ("seq_k", v1.seq_k), ("head_dim", v1.head_dim)];
    let values = |t: &str| match v1.data.dist {
        ValueDistV1::Normal => vec![ValueClass::Normal],
        ValueDistV1::Uniform => vec![ValueClass::Uniform],
        ValueDistV1::LargeLogits if t == "v" => vec![ValueClass::Normal],
        ValueDistV1::LargeLogits => vec![ValueClass::Large],
        ValueDistV1::ConstantRows => vec![ValueClass::ConstantRows],
    };
    let layout = |t: &str, l: &LayoutV1, input: bool| {
        let order: Vec<usize> = l.order.iter().map(|d| d.index()).collect();
        let identity = order == [0, 1, 2, 3];
        TensorLayout {
            order: if identity { Vec::new() } else { order },
            pad: if l.pad == [0; 4] { Vec::new() } else { l.pad.iter().map(|&p| p as u64).collect() },
            offset_bytes: l.offset_bytes,
            broadcast: Vec::new(),
            values: if input { values(t) } else { vec![ValueClass::Normal] },
        }
    };
    let l = &v1.layouts;
    Case {
        version: CASE_VERSION,
        kernel: v1.kernel.clone(),
        params: v1.params.clone(),
        dtype: v1.dtype,
        dims: dims.iter().map(|(n, v)| (n.to_string(), *v as u64)).collect(),
        lengths: Default::default(),
        scalars: [("causal".to_string(), Scalar::Bool(v1.causal)), ("scale".to_string(), Scalar::Float(v1.scale as f64))].into(),
        seed: v1.data.seed,
        tensors: [("q", &l.q, true), ("k", &l.k, true), ("v", &l.v, true), ("o", &l.o, false)]
            .into_iter()
            .map(|(t, lay, input)| (t.to_string(), layout(t, lay, input)))
            .collect(),
        placement: v1.placement,
        // Drawn before schemes were recorded: the v1 stream.
        data: super::DataScheme::V1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_1_case_keeps_its_numbers() {
        let json = r#"{"version":1,"kernel":"kernels/attention/fa_s512.toml","params":{},"dtype":"bf16","batch":3,"heads_q":12,"heads_kv":4,
            "seq_q":33,"seq_k":113,"head_dim":64,"causal":true,"scale":0.125,"data":{"seed":7,"dist":"large_logits"},
            "layouts":{"q":{"order":["B","H","S","D"],"pad":[0,0,0,0],"offset_bytes":0},"k":{"order":["B","S","H","D"],"pad":[0,8,3,0],"offset_bytes":0},
            "v":{"order":["B","H","S","D"],"pad":[0,0,0,0],"offset_bytes":14},"o":{"order":["B","H","S","D"],"pad":[0,0,0,0],"offset_bytes":0}},"placement":"exact"}"#;
        let c = migrate(serde_json::from_str(json).unwrap());
        assert_eq!(c.dims["heads_q"], 12);
        assert_eq!(c.scalars["causal"], Scalar::Bool(true));
        assert_eq!(c.tensors["k"].order, vec![0, 2, 1, 3]);
        assert_eq!(c.tensors["k"].pad, vec![0, 8, 3, 0]);
        assert_eq!(c.tensors["v"].offset_bytes, 14);
        assert_eq!((c.tensors["q"].values.clone(), c.tensors["v"].values.clone()), (vec![ValueClass::Large], vec![ValueClass::Normal]));
        assert_eq!(c.placement, Placement::Exact);
        c.validate().unwrap();
    }
}
