//! Properties of planning and the arena layout over generated cases, checked against brute
//! force: spans, gaps, address mapping, and the boundary bias of the fuzzer decoder.

use arbitrary::Unstructured;
use cudafuzz::arena::{element_at, element_bytes_mask, for_each_element, AllocationTable, ArenaLayout, Holder};
use cudafuzz::generate::strategy::{cases, CaseLimits};
use cudafuzz::case::TensorId;
use cudafuzz::generate::{decode_case, DecodeContext};
use cudafuzz::finding::Location;
use cudafuzz::plan::Plan;
use proptest::prelude::*;
use rand_chacha::rand_core::{RngCore, SeedableRng};

fn small() -> CaseLimits {
    CaseLimits { max_seq: 40, max_head_dim: 40, ..Default::default() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The span is exactly the last element's byte end, and elements never overlap.
    #[test]
    fn spans_and_elements_agree_with_brute_force(case in cases(DecodeContext::default(), small())) {
        let plan = Plan::new(&case);
        for tp in &plan.tensors {
            let eb = tp.elem_bytes as u64;
            let mut last = 0;
            let mut seen = std::collections::HashSet::new();
            for_each_element(tp, |_, off| {
                last = last.max(off);
                assert!(seen.insert(off), "two elements share offset {off}");
            });
            prop_assert_eq!(tp.span_bytes, (last + 1) * eb);
            prop_assert_eq!(seen.len() as u64, tp.numel);
            let mask = element_bytes_mask(tp);
            prop_assert_eq!(mask.iter().filter(|&&m| m).count() as u64, tp.numel * eb);
        }
    }

    /// Every byte of every allocation maps back to the right region, element or gap.
    #[test]
    fn addresses_map_back_exactly(case in cases(DecodeContext::default(), small())) {
        let plan = Plan::new(&case);
        let arena = ArenaLayout::new(&case, &plan, &[("lse".into(), 64)]);
        let mut base = 1u64 << 40;
        let mut entries = Vec::new();
        for a in &arena.allocs {
            entries.push((base, a.clone()));
            base += a.total_bytes().next_multiple_of(512) + 4096;
        }
        let table = AllocationTable { entries: entries.clone(), plans: plan.tensors.clone() };
        for (i, t) in TensorId::ALL.into_iter().enumerate() {
            let (b, a) = &entries[i];
            let tp = plan.tensor(t);
            let first = b + a.data_offset;
            for byte in (0..tp.span_bytes).step_by(7) {
                let got = table.locate(first + byte).unwrap();
                prop_assert_eq!(&got.holder, &Holder::Tensor(t));
                match element_at(tp, byte) {
                    Some(index) => prop_assert_eq!(got.location, Location::Element { index }),
                    None => prop_assert_eq!(got.location, Location::Gap { byte }),
                }
            }
            let after = table.locate(first + tp.span_bytes).unwrap();
            prop_assert_eq!(after.location, Location::RedzoneAfter { bytes_past_end: 1 });
            prop_assert_eq!(table.locate(first - 1).unwrap().location, Location::RedzoneBefore { bytes_before: 1 });
        }
    }
}

/// The decoder's bias, measured over random inputs: most sequence lengths sit on a tile
/// boundary, some head dims are not multiples of 8, and every residue class of offsets shows up.
#[test]
fn random_inputs_hit_the_boundaries_that_break_kernels() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let n = 4000;
    let (mut boundary_seq, mut odd_hd, mut mis16, mut odd_off, mut aligned) = (0, 0, 0, 0, 0);
    for _ in 0..n {
        let mut bytes = [0u8; 128];
        rng.fill_bytes(&mut bytes);
        let case = decode_case(&mut Unstructured::new(&bytes), &DecodeContext::default()).unwrap();
        case.validate().unwrap();
        let near_tile = |s: u32| [16, 32, 64, 80, 128, 256, 512, 1024].iter().any(|t: &u32| s.abs_diff(*t) <= 1);
        boundary_seq += near_tile(case.seq_k) as u32;
        odd_hd += (case.head_dim % 8 != 0) as u32;
        let off = case.layouts.q.offset_bytes;
        mis16 += (off % 16 != 0 && off % 2 == 0) as u32;
        odd_off += (off % 2 == 1) as u32;
        aligned += (off % 16 == 0) as u32;
    }
    let pct = |x: u32| 100.0 * x as f64 / n as f64;
    eprintln!(
        "seq_k on a tile ±1: {:.0}%, head_dim % 8 != 0: {:.0}%, q offset 2/4/8 mod 16: {:.0}%, odd: {:.0}%, 16-aligned: {:.0}%",
        pct(boundary_seq), pct(odd_hd), pct(mis16), pct(odd_off), pct(aligned)
    );
    assert!(pct(boundary_seq) > 40.0);
    assert!(pct(odd_hd) > 15.0);
    assert!(pct(mis16) > 15.0 && pct(odd_off) > 1.0 && pct(aligned) > 60.0);
}
