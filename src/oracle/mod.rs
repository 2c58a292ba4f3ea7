//! Host oracles: judge one run from the bytes downloaded after it, cheapest check first.
//!
//! Every oracle compares the downloaded allocations with the [`HostImage`] they were uploaded
//! from, or the output with the references, and returns [`Finding`]s. They never touch the GPU,
//! so they run identically in tests on fabricated buffers. The order is deliberate: memory
//! oracles (sentinel, canary, input integrity) say *where* a kernel went wrong and do not depend
//! on numerics; the value oracles (NaN leak, reference) run on what is left.

use crate::arena::{buffer_values, changed_span_bytes, element_at, for_each_element, sentinel_bits, HostImage};
use crate::case::{Case, TensorId};
use crate::data;
use crate::finding::{Finding, FindingKind, Location, Oracle};
use crate::manifest::{BufferRole, ResolvedBuffer};
use crate::plan::Plan;
use crate::reference::{max_abs_diff, tolerance, RefOutput};

/// What every oracle needs to know about the run it judges.
#[derive(Clone, Copy, Debug)]
pub struct Judged<'a> {
    /// The case.
    pub case: &'a Case,
    /// Its plan.
    pub plan: &'a Plan,
    /// Kernel label for findings (`name[BLOCK_M=64]`).
    pub kernel: &'a str,
    /// Whether the case is inside the kernel's contract.
    pub inside_contract: bool,
}

impl Judged<'_> {
    /// A finding with this run's kernel, alignment and contract filled in.
    pub fn finding(&self, kind: FindingKind, oracle: Oracle, detail: String) -> Finding {
        Finding {
            kind,
            oracle,
            kernel: self.kernel.to_string(),
            tensor: None,
            location: None,
            count: 1,
            cuda_error: None,
            source: None,
            access_size: None,
            sanitizer_kind: None,
            alignment: alignment_of(self.plan),
            inside_contract: self.inside_contract,
            detail,
        }
    }
}

/// The alignment class of q, k, v, o.
pub fn alignment_of(plan: &Plan) -> [u64; 4] {
    TensorId::ALL.map(|t| plan.tensor(t).alignment())
}

/// Memory oracles: canaries in redzones and gaps of every allocation, unchanged inputs, and
/// no sentinel left in the output.
pub fn check_memory(j: &Judged<'_>, image: &HostImage, after: &[Vec<u8>]) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (i, alloc) in image.layout.allocs.iter().enumerate() {
        let before = &image.bytes[i];
        let now = &after[i];
        let tensor = match &alloc.holder {
            crate::arena::Holder::Tensor(t) => Some(*t),
            crate::arena::Holder::Buffer(_) => None,
        };
        // Only the held ranges exist on the host (HostImage::held); the rest is never compared.
        let held: Vec<std::ops::Range<usize>> = image.held[i].iter().map(|r| r.start as usize..r.end as usize).collect();
        // Most inputs come back untouched: one memcmp settles them. Not an output: an untouched
        // output is the kernel writing nothing, which the sentinel check below must see.
        if held.iter().all(|r| before[r.clone()] == now[r.clone()]) && !tensor.is_some_and(|t| t.is_output()) {
            continue;
        }
        let name = alloc.holder.name();
        let ds = alloc.data_offset as usize;
        let de = ds + alloc.span_bytes as usize;
        // Redzone before: report the damaged byte closest to the data (the likely underflow).
        if let Some(pos) = (0..ds).rev().find(|&b| before[b] != now[b]) {
            let count = (0..ds).filter(|&b| before[b] != now[b]).count() as u64;
            let mut f = j.finding(
                FindingKind::CanaryDamage,
                Oracle::Canary,
                format!("{count} bytes of the redzone before {name} were overwritten (write before the start)"),
            );
            f.tensor = tensor;
            f.location = Some(Location::RedzoneBefore { bytes_before: (ds - pos) as u64 });
            f.count = count;
            findings.push(f);
        }
        if let Some(pos) = (de..now.len()).find(|&b| before[b] != now[b]) {
            let count = (de..now.len()).filter(|&b| before[b] != now[b]).count() as u64;
            let last = (de..now.len()).rev().find(|&b| before[b] != now[b]).unwrap_or(pos);
            let mut f = j.finding(
                FindingKind::CanaryDamage,
                Oracle::Canary,
                format!(
                    "{count} bytes after the end of {name} were overwritten, up to {} bytes past its last byte (write past the end)",
                    last - de + 1
                ),
            );
            f.tensor = tensor;
            f.location = Some(Location::RedzoneAfter { bytes_past_end: (pos - de + 1) as u64 });
            f.count = count;
            findings.push(f);
        }
        let Some(t) = tensor else { continue };
        let tp = j.plan.tensor(t);
        let in_span: Vec<std::ops::Range<usize>> =
            held.iter().filter(|r| r.end > ds && r.start < de).map(|r| r.start.max(ds) - ds..r.end.min(de) - ds).collect();
        let changes = changed_span_bytes(tp, &before[ds..de], &now[ds..de], &in_span);
        let changed_gap = &changes.gaps;
        if let Some(&first) = changed_gap.first() {
            let mut f = j.finding(
                FindingKind::CanaryDamage,
                Oracle::Canary,
                format!("{} bytes in the stride gaps of {name} were overwritten (write between rows)", changed_gap.len()),
            );
            f.tensor = Some(t);
            f.location = Some(Location::Gap { byte: first as u64 });
            f.count = changed_gap.len() as u64;
            findings.push(f);
        }
        let eb = tp.elem_bytes as usize;
        if t.is_output() {
            let sentinel = &sentinel_bits(j.case.dtype).to_le_bytes()[..eb];
            let mut first = None;
            let mut count = 0u64;
            for_each_element(tp, |idx, off| {
                let at = ds + off as usize * eb;
                if &now[at..at + eb] == sentinel {
                    count += 1;
                    first.get_or_insert(idx);
                }
            });
            if let Some(index) = first {
                let mut f = j.finding(
                    FindingKind::UnwrittenOutput,
                    Oracle::Sentinel,
                    format!("{count} of {} output elements were never written", tp.numel),
                );
                f.tensor = Some(t);
                f.location = Some(Location::Element { index });
                f.count = count;
                findings.push(f);
            }
        } else {
            let changed = &changes.elements;
            if let Some(&first) = changed.first() {
                let mut f = j.finding(
                    FindingKind::InputClobbered,
                    Oracle::InputIntegrity,
                    format!("{} bytes of input {name} changed during the launch", changed.len()),
                );
                f.tensor = Some(t);
                f.location = element_at(tp, first as u64).map(|index| Location::Element { index });
                f.count = changed.len() as u64;
                findings.push(f);
            }
        }
    }
    findings
}

/// Value oracles on the output: non-finite values the reference does not have (a read of a
/// poisoned redzone or gap reached the result), then the FlashAttention error rule
/// `max|out − ref64| ≤ 2·max|out_lowp − ref64| + floor`. Elements still holding the sentinel are
/// skipped: [`check_memory`] already reported them.
pub fn check_values(
    j: &Judged<'_>,
    image: &HostImage,
    after: &[Vec<u8>],
    buffers: &[ResolvedBuffer],
    ref64: &RefOutput,
    lowp: &RefOutput,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let o_index = TensorId::O.index();
    let tp = j.plan.tensor(TensorId::O);
    let data = image.data(o_index, &after[o_index]);
    let bits = data::read_strided_bits(data, tp, j.case.dtype);
    let out = data::read_strided(data, tp, j.case.dtype);
    let sentinel = sentinel_bits(j.case.dtype);
    let shape = tp.shape;
    let mut nonfinite = 0u64;
    let mut first_nonfinite = None;
    let mut worst = (0.0f64, None);
    let mut compared_out = Vec::with_capacity(out.len());
    let mut compared_ref = Vec::with_capacity(out.len());
    for (i, (&x, &r)) in out.iter().zip(&ref64.o).enumerate() {
        if bits[i] == sentinel {
            continue;
        }
        if !x.is_finite() && r.is_finite() {
            nonfinite += 1;
            first_nonfinite.get_or_insert(i);
            continue;
        }
        let err = (x - r).abs();
        if err > worst.0 || worst.1.is_none() {
            worst = (err, Some(i));
        }
        compared_out.push(x);
        compared_ref.push(r);
    }
    if let Some(i) = first_nonfinite {
        let mut f = j.finding(
            FindingKind::NanLeak,
            Oracle::NanLeak,
            format!("{nonfinite} output elements are NaN or infinite while the inputs and the fp64 reference are finite (out-of-bounds read of a poisoned redzone or gap?)"),
        );
        f.tensor = Some(TensorId::O);
        f.location = Some(Location::Element { index: data::logical_index(shape, i as u64) });
        f.count = nonfinite;
        findings.push(f);
    }
    let tol = tolerance(j.case, ref64, lowp);
    let err = max_abs_diff(&compared_out, &compared_ref);
    if err > tol.bound {
        let over = compared_out.iter().zip(&compared_ref).filter(|(x, r)| (*x - *r).abs() > tol.bound).count() as u64;
        let mut f = j.finding(
            FindingKind::NumericalError,
            Oracle::Reference,
            format!(
                "max |out - ref64| = {err:.3e} exceeds 2 x {:.3e} (same-precision error) + {:.3e} = {:.3e}",
                tol.err_lowp, tol.floor, tol.bound
            ),
        );
        f.tensor = Some(TensorId::O);
        f.location = worst.1.map(|i| Location::Element { index: data::logical_index(shape, i as u64) });
        f.count = over;
        findings.push(f);
    }
    findings.extend(check_lse(j, image, after, buffers, ref64));
    findings
}

/// Compares a manifest buffer with role `lse` against the reference log-sum-exp.
fn check_lse(j: &Judged<'_>, image: &HostImage, after: &[Vec<u8>], buffers: &[ResolvedBuffer], ref64: &RefOutput) -> Option<Finding> {
    let b = buffers.iter().position(|b| b.role == Some(BufferRole::Lse))?;
    let (index, dtype) = (crate::arena::buffer_slot(b), buffers[b].dtype);
    let values = buffer_values(dtype, image.data(index, &after[index]));
    let mut bad = 0u64;
    let mut first = None;
    for (i, (&x, &r)) in values.iter().zip(&ref64.lse).enumerate() {
        let ok = if r.is_finite() { (x - r).abs() <= 1e-3 * r.abs().max(1.0) } else { x == r };
        if !ok {
            bad += 1;
            first.get_or_insert((i, x, r));
        }
    }
    let (i, x, r) = first?;
    let mut f = j.finding(
        FindingKind::NumericalError,
        Oracle::Reference,
        format!("{bad} log-sum-exp values differ from the reference; first at row {i}: {x} vs {r}"),
    );
    f.count = bad;
    Some(f)
}

/// Bitwise determinism: the same case run twice must give identical output bytes.
pub fn check_determinism(j: &Judged<'_>, first: &[u8], second: &[u8]) -> Option<Finding> {
    if first == second {
        return None;
    }
    let tp = j.plan.tensor(TensorId::O);
    let a = data::read_strided_bits(first, tp, j.case.dtype);
    let b = data::read_strided_bits(second, tp, j.case.dtype);
    let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
    let first_diff = *diff.first()?;
    let mut f = j.finding(
        FindingKind::Nondeterminism,
        Oracle::Determinism,
        format!("{} output elements differ between two runs of the same case (a race?)", diff.len()),
    );
    f.tensor = Some(TensorId::O);
    f.location = Some(Location::Element { index: data::logical_index(tp.shape, first_diff as u64) });
    f.count = diff.len() as u64;
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{Case, Dim, TensorLayout};
    use crate::data::Inputs;
    use crate::reference::{CpuF64, CpuSamePrecision, Reference};

    /// A case with a padded, permuted k and o (so there are gaps), its image, inputs and a
    /// "perfect kernel" result: the image with o holding the fp64 reference rounded to f16.
    struct Fixture {
        case: Case,
        plan: Plan,
        image: HostImage,
        inputs: Inputs,
        after: Vec<Vec<u8>>,
    }

    fn fixture() -> Fixture {
        let mut case = Case::example("k");
        case.layouts.k = TensorLayout { order: [Dim::B, Dim::S, Dim::H, Dim::D], pad: [0, 0, 1, 8], offset_bytes: 6 };
        case.layouts.o = TensorLayout { order: [Dim::B, Dim::H, Dim::S, Dim::D], pad: [0, 0, 0, 3], offset_bytes: 2 };
        let plan = Plan::new(&case);
        let inputs = data::generate(&case);
        let image = HostImage::build(&case, &plan, &inputs, &[]);
        let mut after = image.bytes.clone();
        let o = 3;
        let start = image.layout.allocs[o].data_offset as usize;
        let r = CpuF64.forward(&case, &inputs);
        data::write_strided(&r.o, plan.tensor(TensorId::O), case.dtype, &mut after[o][start..]);
        Fixture { case, plan, image, inputs, after }
    }

    fn judged(f: &Fixture) -> Judged<'_> {
        Judged { case: &f.case, plan: &f.plan, kernel: "k", inside_contract: true }
    }

    fn values(f: &Fixture) -> Vec<Finding> {
        let r64 = CpuF64.forward(&f.case, &f.inputs);
        let lowp = CpuSamePrecision.forward(&f.case, &f.inputs);
        check_values(&judged(f), &f.image, &f.after, &[], &r64, &lowp)
    }

    #[test]
    fn a_correct_result_passes_every_oracle() {
        let f = fixture();
        assert_eq!(check_memory(&judged(&f), &f.image, &f.after), vec![]);
        assert_eq!(values(&f), vec![]);
    }

    /// o's batches 68 MiB apart: the image holds the two blocks, not the gap between them; the
    /// oracles judge the blocks (and the redzones joined to them) and never read the gap.
    #[test]
    fn an_output_with_an_unheld_gap_is_judged_on_its_held_blocks() {
        let mut case = Case::example("k");
        case.batch = 2;
        case.layouts.o = TensorLayout { order: [Dim::B, Dim::H, Dim::S, Dim::D], pad: [0, 8200, 0, 0], offset_bytes: 2 };
        let plan = Plan::new(&case);
        let inputs = data::generate(&case);
        let image = HostImage::build(&case, &plan, &inputs, &[]);
        assert_eq!(image.held.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1, 1, 2]);
        let held_bytes: u64 = image.held[3].iter().map(|r| r.end - r.start).sum();
        assert!(held_bytes < 8 << 20 && image.bytes[3].len() > 64 << 20, "{held_bytes} of {}", image.bytes[3].len());
        let mut after = image.bytes.clone();
        let start = image.layout.allocs[3].data_offset as usize;
        let r = CpuF64.forward(&case, &inputs);
        data::write_strided(&r.o, plan.tensor(TensorId::O), case.dtype, &mut after[3][start..]);
        let mut f = Fixture { case, plan, image, inputs, after };
        assert_eq!(check_memory(&judged(&f), &f.image, &f.after), vec![]);
        assert_eq!(values(&f), vec![]);
        // A byte in the unheld gap is never compared; one past the end is.
        let gap = f.image.held[3][0].end as usize + 4096;
        f.after[3][gap] = 0x11;
        assert_eq!(check_memory(&judged(&f), &f.image, &f.after), vec![]);
        let end = (f.image.layout.allocs[3].data_offset + f.image.layout.allocs[3].span_bytes) as usize;
        f.after[3][end + 1] ^= 0xFF;
        let found = check_memory(&judged(&f), &f.image, &f.after);
        assert_eq!(found.iter().map(|x| x.location.clone()).collect::<Vec<_>>(), [Some(Location::RedzoneAfter { bytes_past_end: 2 })]);
        // A standalone repro rebuilds every byte: the gap holds the canary there.
        let whole = f.image.clone().held_whole();
        assert!(whole.holds_whole(3) && whole.bytes[3][gap] == crate::arena::layout::OUTPUT_CANARY);
        assert_eq!(whole.bytes[3][..start + 16], f.image.bytes[3][..start + 16]);
    }

    #[test]
    fn a_write_past_the_end_is_canary_damage_located_in_bytes() {
        let mut f = fixture();
        let a = &f.image.layout.allocs[3];
        let end = (a.data_offset + a.span_bytes) as usize;
        f.after[3][end + 5] ^= 0xFF;
        let found = check_memory(&judged(&f), &f.image, &f.after);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, FindingKind::CanaryDamage);
        assert_eq!(found[0].tensor, Some(TensorId::O));
        assert_eq!(found[0].location, Some(Location::RedzoneAfter { bytes_past_end: 6 }));
    }

    #[test]
    fn gap_and_underflow_writes_are_told_apart() {
        let mut f = fixture();
        let k = &f.image.layout.allocs[1];
        let ds = k.data_offset as usize;
        // Row pitch of k is 72 elements of 2 bytes: bytes 128..144 of row 0 are padding.
        f.after[1][ds + 130] = 0;
        f.after[1][ds - 1] = 0;
        let found = check_memory(&judged(&f), &f.image, &f.after);
        let regions: Vec<_> = found.iter().map(|x| (x.tensor, x.location.clone())).collect();
        assert!(regions.contains(&(Some(TensorId::K), Some(Location::Gap { byte: 130 }))), "{found:?}");
        assert!(regions.contains(&(Some(TensorId::K), Some(Location::RedzoneBefore { bytes_before: 1 }))), "{found:?}");
    }

    #[test]
    fn an_unwritten_row_leaves_the_sentinel() {
        let mut f = fixture();
        let tp = f.plan.tensor(TensorId::O).clone();
        let ds = f.image.layout.allocs[3].data_offset as usize;
        let last = f.case.seq_q - 1;
        for d in 0..f.case.head_dim {
            let at = ds + tp.byte_offset([0, 1, last, d]) as usize;
            f.after[3][at..at + 2].copy_from_slice(&f.image.bytes[3][at..at + 2]);
        }
        let found = check_memory(&judged(&f), &f.image, &f.after);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, FindingKind::UnwrittenOutput);
        assert_eq!(found[0].count, f.case.head_dim as u64);
        assert_eq!(found[0].location, Some(Location::Element { index: [0, 1, last, 0] }));
        // The value oracles skip sentinel elements instead of reporting them twice.
        assert_eq!(values(&f), vec![]);
    }

    #[test]
    fn an_output_the_kernel_never_wrote_is_reported() {
        let mut f = fixture();
        f.after[3] = f.image.bytes[3].clone();
        let found = check_memory(&judged(&f), &f.image, &f.after);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, FindingKind::UnwrittenOutput);
        assert_eq!(found[0].count, f.case.numel(TensorId::O));
    }

    #[test]
    fn a_changed_input_is_reported() {
        let mut f = fixture();
        let ds = f.image.layout.allocs[0].data_offset as usize;
        f.after[0][ds + 3] ^= 1;
        let found = check_memory(&judged(&f), &f.image, &f.after);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, FindingKind::InputClobbered);
        assert_eq!(found[0].location, Some(Location::Element { index: [0, 0, 0, 1] }));
    }

    #[test]
    fn nan_and_wrong_values_are_told_apart() {
        let mut f = fixture();
        let tp = f.plan.tensor(TensorId::O).clone();
        let ds = f.image.layout.allocs[3].data_offset as usize;
        let at = ds + tp.byte_offset([0, 0, 3, 7]) as usize;
        f.after[3][at..at + 2].copy_from_slice(&[0xFF, 0xFF]);
        let found = values(&f);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, FindingKind::NanLeak);
        assert_eq!(found[0].location, Some(Location::Element { index: [0, 0, 3, 7] }));

        let mut f = fixture();
        let at = ds + tp.byte_offset([0, 1, 10, 2]) as usize;
        let x = data::from_bits(u16::from_le_bytes([f.after[3][at], f.after[3][at + 1]]) as u32, f.case.dtype);
        let bits = data::to_bits(x + 0.25, f.case.dtype) as u16;
        f.after[3][at..at + 2].copy_from_slice(&bits.to_le_bytes());
        let found = values(&f);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, FindingKind::NumericalError);
        assert_eq!(found[0].location, Some(Location::Element { index: [0, 1, 10, 2] }));
    }

    #[test]
    fn determinism_compares_bits() {
        let f = fixture();
        let o = &f.after[3];
        let data = f.image.data(3, o);
        assert_eq!(check_determinism(&judged(&f), data, data), None);
        let mut other = data.to_vec();
        other[0] ^= 1;
        let d = check_determinism(&judged(&f), data, &other).expect("a differing bit is found");
        assert_eq!((d.kind, d.count), (FindingKind::Nondeterminism, 1));
    }

    #[test]
    fn signatures_group_alignment_classes() {
        let f = fixture();
        let j = judged(&f);
        let mut a = j.finding(FindingKind::MisalignedAddress, Oracle::CudaStatus, String::new());
        let mut b = a.clone();
        a.alignment = [8, 16, 16, 16];
        b.alignment = [4, 16, 16, 16];
        assert_eq!(a.signature(), b.signature());
        b.alignment = [16, 8, 16, 16];
        assert_ne!(a.signature(), b.signature());
        assert!(a.signature().as_str().ends_with("unaligned:q"), "{}", a.signature());
        // Alignment does not split findings about memory contents.
        let mut c = j.finding(FindingKind::CanaryDamage, Oracle::Canary, String::new());
        let mut d = c.clone();
        c.alignment = [8, 16, 16, 16];
        d.alignment = [16, 16, 16, 2];
        assert_eq!(c.signature(), d.signature());
    }
}
