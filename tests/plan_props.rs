//! Properties of planning and the arena layout over generated cases of every shipped kernel,
//! checked against brute force: spans, gaps, address mapping, the contract the decoder keeps,
//! and the boundary bias of the fuzzer decoder.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use arbitrary::Unstructured;
use cudafuzz::core::case::{Case, Placement};
use cudafuzz::core::finding::Location;
use cudafuzz::core::generate::strategy::CASE_BYTES;
use cudafuzz::core::generate::{decode_case, example, past_int32_tensors, past_int32_variant, DecodeContext, PastInt32};
use cudafuzz::core::manifest::{Hint, Manifest};
use cudafuzz::core::plan::for_each_offset;
use cudafuzz::core::plan::{admits, check_contract, Plan};
use cudafuzz::engine::arena::{element_at, element_bytes_mask, held_ranges, AllocationTable, ArenaLayout};
use proptest::prelude::*;
use rand_chacha::rand_core::{RngCore, SeedableRng};

mod common;
use common::{shipped, small};

/// Every shipped manifest, loaded once per test binary.
static SHIPPED: LazyLock<Vec<Manifest>> = LazyLock::new(shipped);

/// Decodes `bytes` for shipped kernel `k`, inside its contract or (`outside`) anywhere.
fn decode(k: usize, outside: bool, bytes: &[u8]) -> Case {
    let m = &SHIPPED[k];
    let ctx = if outside { DecodeContext::new(m).unconstrained() } else { DecodeContext::new(m) };
    decode_case(&mut Unstructured::new(bytes), &ctx).expect("decoding never fails")
}

/// `(kernel index, case)` for any shipped kernel, inside or outside its contract, every dim at
/// most 40 (the brute-force checks walk every element).
fn any_case() -> impl Strategy<Value = (usize, Case)> {
    (0..SHIPPED.len(), any::<bool>(), proptest::collection::vec(any::<u8>(), CASE_BYTES))
        .prop_map(|(k, outside, bytes)| (k, small(&SHIPPED[k], decode(k, outside, &bytes), &|_| 40)))
}

fn plan_of(k: usize, case: &Case) -> Plan {
    Plan::new(case, &SHIPPED[k]).unwrap_or_else(|e| panic!("{}: {} does not plan: {e}", SHIPPED[k].name, case.summary()))
}

/// 64 cases each; failures saved with the project's other committed proptest seeds (the
/// path is relative to the package root, where `cargo test` runs integration tests).
fn config() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::Direct("proptest-regressions/plan_props.txt"))),
        ..ProptestConfig::with_cases(64)
    }
}

proptest! {
    #![proptest_config(config())]

    /// Every element's byte offset is `Σ index · stride · elem_bytes`, the span ends exactly at
    /// the last element's last byte, elements overlap only along broadcast (stride-0)
    /// dimensions, and every byte of an element maps back to that element.
    #[test]
    fn spans_and_elements_agree_with_brute_force((k, case) in any_case()) {
        let plan = plan_of(k, &case);
        for tp in &plan.tensors {
            let eb = tp.elem_bytes as u64;
            let mut last = 0;
            let mut seen = BTreeSet::new();
            let mut count = 0u64;
            for_each_offset(tp, |linear, off| {
                let idx = tp.logical_index(linear as u64);
                assert_eq!(off as u64, tp.byte_offset(&idx), "{} element {idx:?}", tp.name);
                let stored: Vec<u64> = idx.iter().zip(&tp.strides).map(|(&i, &s)| if s == 0 { 0 } else { i }).collect();
                for byte in off as u64..off as u64 + eb {
                    assert_eq!(element_at(tp, byte).as_ref(), Some(&stored), "{} byte {byte}", tp.name);
                }
                last = last.max(off as u64);
                seen.insert(off);
                count += 1;
            });
            prop_assert_eq!(count, tp.numel);
            if tp.numel == 0 {
                // A dim that may be 0 (a range from 0): no element, no span, still gapless.
                prop_assert_eq!(tp.span_bytes, 0, "{}", tp.name);
                prop_assert!(tp.is_gapless() && element_bytes_mask(tp).is_empty(), "{}", tp.name);
                continue;
            }
            prop_assert_eq!(tp.span_bytes, last + eb, "{}", tp.name);
            let stored_elements: u64 = tp.shape.iter().zip(&tp.strides).map(|(&n, &s)| if s == 0 { 1 } else { n }).product();
            prop_assert_eq!(seen.len() as u64, stored_elements, "{}: elements overlap", tp.name);
            let mask = element_bytes_mask(tp);
            prop_assert_eq!(mask.iter().filter(|&&m| m).count() as u64, stored_elements * eb);
            prop_assert_eq!(tp.is_gapless(), stored_elements * eb == tp.span_bytes, "{}", tp.name);
            prop_assert_eq!(tp.base_residue, tp.offset_bytes % 16);
        }
    }

    /// Every byte of every allocation maps back to the right tensor and to its element, stride
    /// gap or redzone.
    #[test]
    fn addresses_map_back_exactly((k, case) in any_case()) {
        let plan = plan_of(k, &case);
        let arena = ArenaLayout::new(&case, &plan);
        prop_assert_eq!(arena.allocs.len(), plan.tensors.len());
        let mut base = 1u64 << 40;
        let mut entries = Vec::new();
        for a in &arena.allocs {
            entries.push((base, a.clone()));
            base += a.total_bytes().next_multiple_of(512) + 4096;
        }
        let table = AllocationTable { entries: entries.clone(), plans: plan.tensors.clone() };
        for (tp, (b, a)) in plan.tensors.iter().zip(&entries) {
            prop_assert_eq!(&a.holder, &tp.name);
            prop_assert_eq!(a.span_bytes, tp.span_bytes);
            if case.placement == Placement::Exact {
                prop_assert_eq!(a.redzone_after, 0, "exact placement ends the allocation at the tensor's last byte");
            }
            let first = b + a.data_offset;
            let mask = element_bytes_mask(tp);
            for byte in (0..tp.span_bytes).step_by(7) {
                let got = table.locate(first + byte).unwrap();
                prop_assert_eq!(&got.holder, &tp.name);
                if mask[byte as usize] {
                    let index = element_at(tp, byte).expect("an element byte");
                    prop_assert_eq!(got.location, Location::Element { index });
                } else {
                    prop_assert_eq!(got.location, Location::Gap { byte });
                }
            }
            // A capacity's don't-care tail follows the span; the redzone after begins past it.
            prop_assert_eq!(a.tail_bytes, tp.tail_bytes);
            if a.tail_bytes > 0 {
                let tail = table.locate(first + tp.span_bytes).unwrap();
                prop_assert_eq!(tail.location, Location::Gap { byte: tp.span_bytes });
            }
            let after = table.locate(first + tp.span_bytes + a.tail_bytes).unwrap();
            prop_assert_eq!((&after.holder, after.location), (&tp.name, Location::RedzoneAfter { bytes_past_end: 1 }));
            let before = table.locate(first - 1).unwrap();
            prop_assert_eq!((&before.holder, before.location), (&tp.name, Location::RedzoneBefore { bytes_before: 1 }));
        }
    }

    /// The constrained decoder stays inside the kernel's contract, and cases decoded outside it
    /// still plan (what makes a case well formed is never given up).
    #[test]
    fn decoded_cases_plan_and_constrained_ones_are_inside(k in 0..SHIPPED.len(), bytes in proptest::collection::vec(any::<u8>(), CASE_BYTES)) {
        let m = &SHIPPED[k];
        let inside = m.bind(decode(k, false, &bytes));
        let plan = plan_of(k, &inside);
        let verdict = check_contract(m, &inside, &plan);
        prop_assert!(verdict.is_inside(), "{}: {} is {:?}", m.name, inside.summary(), verdict);
        plan_of(k, &m.bind(decode(k, true, &bytes)));
    }

    /// A case pushed past 2³¹ elements keeps its few elements, reaches an element offset of 2³¹
    /// on the pushed tensor, and holds in host memory only the blocks around its elements: every
    /// element byte lies in a held range, and the ranges cover the redzones.
    #[test]
    fn past_int32_cases_hold_every_element_and_little_else(k in 0..SHIPPED.len(), bytes in proptest::collection::vec(any::<u8>(), CASE_BYTES)) {
        let m = &SHIPPED[k];
        let case = small(m, decode(k, false, &bytes), &|_| 40);
        for (form, t) in PastInt32::ALL.iter().flat_map(|&f| past_int32_tensors(m, false, f).into_iter().map(move |t| (f, t))) {
            let Some(pushed) = past_int32_variant(&case, m, &t, form) else { continue };
            let plan = plan_of(k, &pushed);
            let arena = ArenaLayout::new(&pushed, &plan);
            let tp = plan.tensor(&t).unwrap();
            prop_assert!(tp.reaches_past_int32(), "{}: {}", t, pushed.summary());
            // Every tensor the kernel reads holds values that differ between elements, where
            // its manifest allows a class that does (a wrapped index must read a different value).
            for spec in m.tensors.iter().filter(|s| matches!(s.role, cudafuzz::core::manifest::Role::Input | cudafuzz::core::manifest::Role::InOut)) {
                let varied = |c: &cudafuzz::core::case::ValueClass| !matches!(c, cudafuzz::core::case::ValueClass::Zero | cudafuzz::core::case::ValueClass::ConstantRows | cudafuzz::core::case::ValueClass::Nan | cudafuzz::core::case::ValueClass::Inf);
                if spec.values.iter().any(varied) {
                    prop_assert!(pushed.layout(&spec.name).values.iter().any(varied), "{}: {:?}", spec.name, pushed.layout(&spec.name).values);
                }
            }
            prop_assert!(tp.numel <= form.rows() * plan_of(k, &case).tensor(&t).unwrap().numel);
            // The form is the one asked for: a narrow push's strides all fit in 32 bits.
            prop_assert_eq!(PastInt32::of(tp), form, "{}: {:?}", t, tp.strides);
            for (tp, a) in plan.tensors.iter().zip(&arena.allocs) {
                let ranges = held_ranges(a, tp);
                prop_assert_eq!(ranges.first().map(|r| r.start), Some(0));
                prop_assert_eq!(ranges.last().map(|r| r.end), Some(a.total_bytes()));
                prop_assert!(ranges.windows(2).all(|w| w[0].end < w[1].start), "{:?}", ranges);
                let held: u64 = ranges.iter().map(|r| r.end - r.start).sum();
                prop_assert!(held < 1 << 30, "{} holds {} bytes", tp.name, held);
                let eb = tp.elem_bytes as u64;
                for_each_offset(tp, |_, off| {
                    let (lo, hi) = (a.data_offset + off as u64, a.data_offset + off as u64 + eb);
                    assert!(ranges.iter().any(|r| r.start <= lo && hi <= r.end), "{} element at byte {off} is not held", tp.name);
                });
            }
        }
    }
}

/// A broadcast input whose repeated elements add up to exactly its span still has gaps: k of
/// shape [1, 2, 2, 2] broadcast over its heads, rows padded from 2 to 6 elements, spans 8
/// elements and holds 8 logical ones, but only 4 distinct ones in memory.
#[test]
fn a_broadcast_tensor_with_gaps_is_not_gapless() {
    let m = common::manifest("kernels/testing/simple_attn.toml");
    let mut case = common::attention_example(&m);
    for (d, v) in [("heads_kv", 2), ("heads_q", 2), ("seq_k", 2), ("head_dim", 2)] {
        case.dims.insert(d.into(), v);
    }
    let k = case.layout_mut("k");
    k.broadcast = vec![1];
    k.pad = vec![0, 0, 0, 4];
    let plan = Plan::new(&case, &m).unwrap();
    let tp = plan.tensor("k").unwrap();
    assert_eq!((tp.strides.clone(), tp.span_bytes, tp.numel), (vec![12, 0, 6, 1], 8 * 2, 8));
    assert!(!tp.is_gapless());
    assert_eq!(element_bytes_mask(tp).iter().filter(|&&b| b).count(), 4 * 2, "only the 4 stored elements are element bytes");
    assert_eq!(element_at(tp, 2 * 2), None, "element 2 of the span lies in a row's padding");
}

/// Every shipped kernel's example case (`cudafuzz case example`) plans and lies inside its
/// contract.
#[test]
fn every_shipped_example_is_inside_its_contract() {
    assert!(SHIPPED.len() >= 20, "{} shipped manifests", SHIPPED.len());
    for m in SHIPPED.iter() {
        let case = example(m);
        assert!(admits(m, &case), "{}: {}", m.name, case.summary());
    }
}

/// The decoder's bias, measured over random inputs: most sequence lengths sit on a tile
/// boundary, some head dims are not multiples of 8, and every residue class of offsets shows up
/// (odd offsets only outside the contract of a kernel that needs 2-byte alignment).
#[test]
fn random_inputs_hit_the_boundaries_that_break_kernels() {
    let m = common::manifest("kernels/attention/flash_fwd.toml");
    let outside = DecodeContext::new(&m).unconstrained();
    let inside = DecodeContext::new(&m);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let n = 4000;
    let (mut boundary_seq, mut odd_hd, mut mis16, mut odd_off, mut aligned, mut odd_inside) = (0, 0, 0, 0, 0, 0);
    for _ in 0..n {
        let mut bytes = [0u8; 128];
        rng.fill_bytes(&mut bytes);
        let case = decode_case(&mut Unstructured::new(&bytes), &outside).unwrap();
        Plan::new(&case, &m).unwrap();
        let near_tile = |s: u64| [16, 32, 64, 80, 128, 256, 512, 1024].iter().any(|t: &u64| s.abs_diff(*t) <= 1);
        boundary_seq += near_tile(case.dim("seq_k")) as u32;
        odd_hd += !case.dim("head_dim").is_multiple_of(8) as u32;
        let off = case.layout("q").offset_bytes;
        mis16 += (!off.is_multiple_of(16) && off.is_multiple_of(2)) as u32;
        odd_off += (off % 2 == 1) as u32;
        aligned += off.is_multiple_of(16) as u32;
        let constrained = decode_case(&mut Unstructured::new(&bytes), &inside).unwrap();
        odd_inside += m.tensors.iter().filter(|t| constrained.layout(&t.name).offset_bytes % 2 == 1).count() as u32;
    }
    let pct = |x: u32| 100.0 * x as f64 / n as f64;
    eprintln!(
        "seq_k on a tile ±1: {:.0}%, head_dim % 8 != 0: {:.0}%, q offset 2/4/8 mod 16: {:.0}%, odd: {:.0}%, 16-aligned: {:.0}%",
        pct(boundary_seq),
        pct(odd_hd),
        pct(mis16),
        pct(odd_off),
        pct(aligned)
    );
    assert!(pct(boundary_seq) > 40.0);
    assert!(pct(odd_hd) > 15.0);
    assert!(pct(mis16) > 15.0 && pct(odd_off) > 1.0 && pct(aligned) > 60.0);
    assert_eq!(odd_inside, 0, "flash_fwd's tensors are 2-byte aligned: no odd offset inside its contract");
}

/// For every shipped kernel, most draws of a dim with hints land on a boundary value: a hint,
/// a param's tile size ± 1, or an edge of the range or of the random-draw cap.
#[test]
fn every_hinted_dim_is_drawn_mostly_on_its_boundaries() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    for (k, m) in SHIPPED.iter().enumerate() {
        let hinted: Vec<_> = m.dims.iter().filter(|d| !d.hints.is_empty()).collect();
        let mut on = vec![0u32; hinted.len()];
        let n = 500;
        for _ in 0..n {
            let mut bytes = [0u8; 128];
            rng.fill_bytes(&mut bytes);
            let case = decode(k, false, &bytes);
            for (i, d) in hinted.iter().enumerate() {
                let mut boundary: BTreeSet<u64> = m.hint_values(d).into_iter().collect();
                for h in &d.hints {
                    if let Hint::Param(_) = h {
                        let values = m.hint_values(&cudafuzz::core::manifest::DimSpec { hints: vec![h.clone()], ..(*d).clone() });
                        boundary.extend(values.iter().flat_map(|&t| [t.saturating_sub(1), t + 1]));
                    }
                }
                let top = d.range[1].min(d.cap.max(d.range[0]));
                boundary.extend([d.range[0], d.range[0] + 1, top.saturating_sub(1), top]);
                on[i] += boundary.contains(&case.dim(&d.name)) as u32;
            }
        }
        for (d, hits) in hinted.iter().zip(on) {
            assert!(hits * 2 > n, "{}: {} on a boundary in only {hits} of {n} draws", m.name, d.name);
        }
    }
}
