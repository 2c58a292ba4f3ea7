//! Fixtures shared by the unit tests: a shipped attention manifest and the small case the
//! attention-only model called its example.

use std::path::Path;

use crate::core::case::{Case, Dtype, Scalar};
use crate::core::finding::{Finding, FindingKind, Oracle};
use crate::core::manifest::Manifest;

/// `kernels/testing/simple_attn.toml`: q, k, v, o of rank 4 over batch, heads_kv, heads_q,
/// seq_q, seq_k, head_dim; flags causal, scale.
pub fn attention() -> Manifest {
    Manifest::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/testing/simple_attn.toml")).expect("simple_attn loads")
}

/// f16, batch 1, heads 2/1, seq 65 × 113, head_dim 64, not causal, scale 0.125, seed 1, every
/// tensor dense at offset 0.
pub fn example() -> Case {
    let m = attention();
    let mut c = Case::new(&m.path.display().to_string(), Dtype::F16);
    c.params = m.default_params();
    for (d, v) in [("batch", 1), ("heads_kv", 1), ("heads_q", 2), ("seq_q", 65), ("seq_k", 113), ("head_dim", 64)] {
        c.dims.insert(d.into(), v);
    }
    c.scalars.insert("causal".into(), Scalar::Bool(false));
    c.scalars.insert("scale".into(), Scalar::Float(0.125));
    c
}

/// [`example`] with its kernel set to `kernel` (a manifest path or name).
pub fn example_for(kernel: &str) -> Case {
    Case { kernel: kernel.to_string(), ..example() }
}

/// Alignment classes of q, k, v, o, in roster order.
pub fn alignment(q_k_v_o: [u64; 4]) -> Vec<(String, u64)> {
    ["q", "k", "v", "o"].iter().zip(q_k_v_o).map(|(t, a)| (t.to_string(), a)).collect()
}

/// CUDA error 716 in `kernel`, naming no tensor, with q, k, v, o at these alignments: the
/// native fault the triage, keeping and steering tests start from (change `kind`, `oracle`,
/// `tensor` with struct update syntax).
pub fn misaligned_fault(kernel: &str, q_k_v_o: [u64; 4]) -> Finding {
    Finding { alignment: alignment(q_k_v_o), ..Finding::new(FindingKind::MisalignedAddress, Oracle::CudaStatus, kernel, String::new()) }
}
