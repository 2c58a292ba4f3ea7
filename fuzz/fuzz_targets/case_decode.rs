//! Host target: any bytes decode into a valid case, and planning it never panics or overflows.
#![no_main]

use cudafuzz::case::Dtype;
use cudafuzz::generate::{decode_case, DecodeContext};
use cudafuzz::plan::{Contract, LayoutSupport, Plan};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ctx = DecodeContext {
        kernel: "fuzz".into(),
        params: vec![("BLOCK_M".into(), vec![64, 80, 128]), ("NUM_WARPS".into(), vec![4, 8])],
        dtypes: vec![Dtype::F16, Dtype::Bf16],
        contract: None,
    };
    let case = decode_case(&mut arbitrary::Unstructured::new(data), &ctx).expect("decoding never fails");
    case.validate().expect("every decoded case is valid");
    // Contract-aware decoding: fa_s512's declared contract (head_dim 64, seq <= 512, 2-byte).
    let contract = Contract { head_dim: [64, 64], seq_q: [1, 512], seq_k: [1, 512], layouts: LayoutSupport::InnerContiguous, ..Contract::anything() };
    let inside = decode_case(&mut arbitrary::Unstructured::new(data), &DecodeContext { contract: Some(contract.clone()), ..ctx.clone() })
        .expect("decoding never fails");
    inside.validate().expect("every decoded case is valid");
    assert!(contract.admits(&inside), "decoded outside its contract");
    let plan = Plan::new(&case);
    for tp in &plan.tensors {
        assert!(tp.span_bytes >= tp.numel * tp.elem_bytes as u64);
        assert!(tp.base_residue < 16);
    }
    let _ = Contract::anything().check(&case, &plan);
    let json = serde_json::to_string(&case).expect("serializes");
    let back: cudafuzz::case::Case = serde_json::from_str(&json).expect("round-trips");
    assert_eq!(back, case);
});
