//! The oracles on fabricated downloads: a "perfect kernel" result (the image with o holding the
//! fp64 reference rounded to the case's precision), then one defect at a time.

use super::*;
use crate::core::case::{TensorLayout, ValueClass};
use crate::core::manifest::{Init, Manifest};
use crate::engine::reference::{cpu_reference, RefOutputs};
use crate::testing;

const O: usize = 3;

/// A case with a padded, permuted k and o (so there are gaps), its image and the download of a
/// kernel that writes the reference.
struct Fixture {
    m: Manifest,
    case: Case,
    plan: Plan,
    image: HostImage,
    refs: RefOutputs,
    after: Vec<Vec<u8>>,
}

fn build(m: Manifest, case: Case) -> Fixture {
    let plan = Plan::new(&case, &m).expect("valid case");
    let inputs = data::generate(&case, &plan, &m);
    let image = HostImage::build(&case, &plan, &inputs);
    let refs = cpu_reference(&m, &plan, &inputs).expect("attention has a CPU reference");
    let mut after = image.bytes.clone();
    let start = image.layout.allocs[O].data_offset as usize;
    data::write_strided(&refs.expected[0].gold, &plan.tensors[O], &mut after[O][start..]);
    Fixture { m, case, plan, image, refs, after }
}

fn fixture() -> Fixture {
    let mut case = testing::example();
    *case.layout_mut("k") = TensorLayout { order: vec![0, 2, 1, 3], pad: vec![0, 0, 1, 8], offset_bytes: 6, ..TensorLayout::dense() };
    *case.layout_mut("o") = TensorLayout { pad: vec![0, 0, 0, 3], offset_bytes: 2, ..TensorLayout::dense() };
    build(testing::attention(), case)
}

fn judged(f: &Fixture) -> Judged<'_> {
    Judged { case: &f.case, plan: &f.plan, kernel: "k", inside_contract: true }
}

fn memory(f: &Fixture) -> Vec<Finding> {
    check_memory(&judged(f), &f.image, &f.after)
}

fn values(f: &Fixture) -> Vec<Finding> {
    check_values(&judged(f), &f.image, &f.after, &f.refs)
}

fn element(f: &Fixture, t: usize, idx: &[u64]) -> usize {
    (f.image.layout.allocs[t].data_offset + f.plan.tensors[t].byte_offset(idx)) as usize
}

fn set(f: &mut Fixture, t: usize, idx: &[u64], x: f64) {
    let tp = &f.plan.tensors[t];
    let at = element(f, t, idx);
    let eb = tp.elem_bytes as usize;
    f.after[t][at..at + eb].copy_from_slice(&data::to_bits(x, tp.dtype).to_le_bytes()[..eb]);
}

fn get(f: &Fixture, t: usize, idx: &[u64]) -> f64 {
    let tp = &f.plan.tensors[t];
    let at = element(f, t, idx);
    let mut b = [0u8; 8];
    b[..tp.elem_bytes as usize].copy_from_slice(&f.after[t][at..at + tp.elem_bytes as usize]);
    data::from_bits(u64::from_le_bytes(b), tp.dtype)
}

#[test]
fn a_correct_result_passes_every_oracle() {
    let f = fixture();
    assert_eq!(memory(&f), vec![]);
    assert_eq!(values(&f), vec![]);
}

/// o's batches 68 MiB apart: the image holds the two blocks, not the gap between them; the
/// oracles judge the blocks (and the redzones joined to them) and never read the gap.
#[test]
fn an_output_with_an_unheld_gap_is_judged_on_its_held_blocks() {
    let mut case = testing::example();
    case.dims.insert("batch".into(), 2);
    *case.layout_mut("o") = TensorLayout { pad: vec![0, 8200, 0, 0], offset_bytes: 2, ..TensorLayout::dense() };
    let mut f = build(testing::attention(), case);
    assert_eq!(f.image.held.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1, 1, 2]);
    let held_bytes: u64 = f.image.held[O].iter().map(|r| r.end - r.start).sum();
    assert!(held_bytes < 8 << 20 && f.image.bytes[O].len() > 64 << 20, "{held_bytes} of {}", f.image.bytes[O].len());
    assert_eq!(memory(&f), vec![]);
    assert_eq!(values(&f), vec![]);
    // A byte in the unheld gap is never compared; one past the end is.
    let gap = f.image.held[O][0].end as usize + 4096;
    f.after[O][gap] = 0x11;
    assert_eq!(memory(&f), vec![]);
    let a = &f.image.layout.allocs[O];
    let end = (a.data_offset + a.span_bytes) as usize;
    f.after[O][end + 1] ^= 0xFF;
    assert_eq!(memory(&f).iter().map(|x| x.location.clone()).collect::<Vec<_>>(), [Some(Location::RedzoneAfter { bytes_past_end: 2 })]);
    // A standalone repro rebuilds every byte: the gap holds the canary there.
    let start = f.image.layout.allocs[O].data_offset as usize;
    let whole = f.image.clone().held_whole();
    assert!(whole.holds_whole(O) && whole.bytes[O][gap] == crate::core::layout::OUTPUT_CANARY);
    assert_eq!(whole.bytes[O][..start + 16], f.image.bytes[O][..start + 16]);
}

#[test]
fn a_write_past_the_end_is_canary_damage_located_in_bytes() {
    let mut f = fixture();
    let a = &f.image.layout.allocs[O];
    let end = (a.data_offset + a.span_bytes) as usize;
    f.after[O][end + 5] ^= 0xFF;
    let found = memory(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].kind, found[0].tensor.as_deref()), (FindingKind::CanaryDamage, Some("o")));
    assert_eq!(found[0].location, Some(Location::RedzoneAfter { bytes_past_end: 6 }));
}

#[test]
fn gap_and_underflow_writes_are_told_apart() {
    let mut f = fixture();
    let ds = f.image.layout.allocs[1].data_offset as usize;
    // k's row pitch is 72 elements of 2 bytes: bytes 128..144 of row 0 are padding.
    f.after[1][ds + 130] = 0;
    f.after[1][ds - 1] = 0;
    let regions: Vec<_> = memory(&f).into_iter().map(|x| (x.tensor, x.location)).collect();
    assert!(regions.contains(&(Some("k".into()), Some(Location::Gap { byte: 130 }))), "{regions:?}");
    assert!(regions.contains(&(Some("k".into()), Some(Location::RedzoneBefore { bytes_before: 1 }))), "{regions:?}");
}

#[test]
fn an_unwritten_row_leaves_the_sentinel_and_is_reported_once() {
    let mut f = fixture();
    let (last, head_dim) = (f.case.dim("seq_q") - 1, f.case.dim("head_dim"));
    for d in 0..head_dim {
        let at = element(&f, O, &[0, 1, last, d]);
        f.after[O][at..at + 2].copy_from_slice(&f.image.bytes[O][at..at + 2]);
    }
    let found = memory(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].kind, found[0].count), (FindingKind::UnwrittenOutput, head_dim));
    assert_eq!(found[0].location, Some(Location::Element { index: vec![0, 1, last, 0] }));
    // The value oracles skip sentinel elements instead of reporting them twice.
    assert_eq!(values(&f), vec![]);
}

#[test]
fn an_output_the_kernel_never_wrote_is_reported() {
    let mut f = fixture();
    f.after[O] = f.image.bytes[O].clone();
    let found = memory(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].kind, found[0].count), (FindingKind::UnwrittenOutput, f.plan.tensors[O].numel));
}

/// A caller that zero-fills o: no sentinel marks unwritten elements, so the memory oracles say
/// nothing and the value oracle (against a reference that starts from the same zeros) reports
/// the elements the kernel left.
#[test]
fn a_zero_filled_output_left_unwritten_is_a_value_finding() {
    let mut m = testing::attention();
    m.tensors.iter_mut().find(|t| t.name == "o").unwrap().init = Init::Zero;
    let mut f = build(m, testing::example());
    let start = f.image.layout.allocs[O].data_offset as usize;
    assert!(f.image.bytes[O][start..start + 64].iter().all(|&b| b == 0), "o starts zero-filled");
    let last = f.case.dim("seq_q") - 1;
    for d in 0..f.case.dim("head_dim") {
        set(&mut f, O, &[0, 0, last, d], 0.0);
    }
    assert_eq!(memory(&f), vec![], "{}", f.m.name);
    let found = values(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].kind, found[0].tensor.as_deref()), (FindingKind::NumericalError, Some("o")));
}

#[test]
fn a_changed_input_is_reported() {
    let mut f = fixture();
    let ds = f.image.layout.allocs[0].data_offset as usize;
    f.after[0][ds + 3] ^= 1;
    let found = memory(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, FindingKind::InputClobbered);
    assert_eq!(found[0].location, Some(Location::Element { index: vec![0, 0, 0, 1] }));
}

#[test]
fn nan_and_wrong_values_are_told_apart() {
    let mut f = fixture();
    set(&mut f, O, &[0, 0, 3, 7], f64::NAN);
    let found = values(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].kind, found[0].location.clone()), (FindingKind::NanLeak, Some(Location::Element { index: vec![0, 0, 3, 7] })));

    let mut f = fixture();
    let x = get(&f, O, &[0, 1, 10, 2]);
    set(&mut f, O, &[0, 1, 10, 2], x + 0.25);
    let found = values(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].kind, found[0].location.clone()), (FindingKind::NumericalError, Some(Location::Element { index: vec![0, 1, 10, 2] })));
}

/// Inputs allowed to hold NaN: the reference has NaN where they reach, and the kernel's NaN
/// there is expected; a NaN where the reference is finite, or a finite value where it has NaN,
/// is not.
#[test]
fn nan_inputs_are_judged_against_the_references_nan_pattern() {
    let mut case = testing::example();
    case.layout_mut("v").values = vec![ValueClass::Nan];
    let mut f = build(testing::attention(), case);
    let gold = &f.refs.expected[0].gold;
    let nan_at = gold.iter().position(|x| x.is_nan());
    let finite_at = gold.iter().position(|x| x.is_finite());
    assert!(nan_at.is_some(), "a NaN value class reaches the reference");
    assert_eq!(values(&f), vec![], "the kernel's NaNs are the reference's");
    if let Some(i) = nan_at {
        let idx = f.plan.tensors[O].logical_index(i as u64);
        set(&mut f, O, &idx, 1.0);
        let found = values(&f);
        assert_eq!(found.iter().map(|x| x.kind).collect::<Vec<_>>(), [FindingKind::NumericalError], "{found:?}");
        set(&mut f, O, &idx, f64::NAN);
    }
    if let Some(i) = finite_at {
        let idx = f.plan.tensors[O].logical_index(i as u64);
        set(&mut f, O, &idx, f64::NAN);
        assert_eq!(values(&f).iter().map(|x| x.kind).collect::<Vec<_>>(), [FindingKind::NanLeak]);
    }
}

#[test]
fn determinism_compares_bits_per_judged_output() {
    let f = fixture();
    assert_eq!(check_determinism(&judged(&f), &f.image, &f.after, &f.after), vec![]);
    let mut other = f.after.clone();
    let at = element(&f, O, &[0, 0, 0, 0]);
    other[O][at] ^= 1;
    let d = check_determinism(&judged(&f), &f.image, &f.after, &other);
    assert_eq!(d.iter().map(|x| (x.kind, x.count)).collect::<Vec<_>>(), [(FindingKind::Nondeterminism, 1)]);
    // An input is not judged: a difference there is the memory oracles' business.
    let mut input = f.after.clone();
    let q0 = element(&f, 0, &[0, 0, 0, 0]);
    input[0][q0] ^= 1;
    assert_eq!(check_determinism(&judged(&f), &f.image, &f.after, &input), vec![]);
    // An output declared order_dependent (atomics, split-K) may differ bit for bit.
    let mut f = f;
    f.plan.tensors[O].order_dependent = true;
    assert_eq!(check_determinism(&judged(&f), &f.image, &f.after, &other), vec![]);
}

#[test]
fn signatures_group_alignment_classes_per_named_tensor() {
    let f = fixture();
    let j = judged(&f);
    let mut a = j.finding(FindingKind::MisalignedAddress, Oracle::CudaStatus, String::new());
    let mut b = a.clone();
    a.alignment = testing::alignment([8, 16, 16, 16]);
    b.alignment = testing::alignment([4, 16, 16, 16]);
    assert_eq!(a.signature(), b.signature());
    b.alignment = testing::alignment([16, 8, 16, 16]);
    assert_ne!(a.signature(), b.signature());
    assert!(a.signature().as_str().ends_with("unaligned:q"), "{}", a.signature());
    // Alignment does not split findings about memory contents.
    let mut c = j.finding(FindingKind::CanaryDamage, Oracle::Canary, String::new());
    let mut d = c.clone();
    c.alignment = testing::alignment([8, 16, 16, 16]);
    d.alignment = testing::alignment([16, 16, 16, 2]);
    assert_eq!(c.signature(), d.signature());
}

/// A `capacity` larger than the tensor: writes into the don't-care tail are no finding, a write
/// past it is canary damage counted from the tail's end; the allocation grows by the tail.
#[test]
fn writes_into_a_capacity_tail_are_allowed_and_past_it_are_caught() {
    let mut m = testing::attention();
    let mut case = testing::example();
    *case.layout_mut("o") = TensorLayout::dense();
    let numel = Plan::new(&case, &m).unwrap().tensors[O].numel;
    m.tensors[O].capacity = Some(format!("{} + 10", numel));
    let mut f = build(m.clone(), case.clone());
    let (a, eb) = (f.image.layout.allocs[O].clone(), f.plan.tensors[O].elem_bytes as u64);
    assert_eq!((a.tail_bytes, f.plan.tensors[O].tail_bytes), (10 * eb, 10 * eb));
    assert_eq!(a.total_bytes(), a.data_offset + a.span_bytes + 10 * eb + a.redzone_after);
    let tail = (a.data_offset + a.span_bytes) as usize;
    for b in &mut f.after[O][tail..tail + 10 * eb as usize] {
        *b ^= 0x5A;
    }
    assert_eq!(memory(&f), vec![]);
    f.after[O][a.redzone_after_start() as usize + 1] ^= 0xFF;
    assert_eq!(memory(&f).iter().map(|x| x.location.clone()).collect::<Vec<_>>(), [Some(Location::RedzoneAfter { bytes_past_end: 2 })]);
    // A capacity below the tensor is refused by the plan, naming the field.
    m.tensors[O].capacity = Some(format!("{}", numel - 1));
    let e = Plan::new(&case, &m).unwrap_err().to_string();
    assert!(e.contains("capacity") && e.contains("fewer than the tensor's"), "{e}");
}
