//! Memory oracles: [`check_memory`] compares every allocation after the launch with its image:
//! canaries in redzones and stride gaps (writes out of bounds or between rows), inputs that must
//! not change, and outputs whose elements still hold the sentinel they were pre-filled with
//! (never written). An output whose contract sets other initial contents (zero for an
//! accumulator, drawn values for an in-out buffer) cannot show unwritten elements this way: the
//! value oracle, which compares every element with a reference that starts from the same
//! contents, is what catches those.

use crate::core::finding::{Finding, FindingKind, Location, Oracle};
use crate::core::manifest::Role;
use crate::core::plan::for_each_offset;
use crate::core::plan::TensorPlan;
use crate::engine::arena::{changed_span_bytes, element_at, sentinel_bits, AllocLayout, HostImage};

use super::Judged;

/// Memory oracles over every tensor: canaries in redzones and gaps, unchanged inputs, no
/// sentinel left in outputs.
pub fn check_memory(j: &Judged<'_>, image: &HostImage, after: &[Vec<u8>]) -> Vec<Finding> {
    let mut findings = Vec::new();
    for tp in &j.plan.tensors {
        let i = tp.index;
        let (before, now) = (&image.bytes[i], &after[i]);
        if before.is_empty() {
            continue;
        }
        // Only the held ranges exist on the host (HostImage::held); the rest is never compared.
        let held: Vec<std::ops::Range<usize>> = image.held[i].iter().map(|r| r.start as usize..r.end as usize).collect();
        let sentinel = tp.role.is_written() && tp.init.marks_unwritten();
        // Most inputs come back untouched: one memcmp settles them. Not an output with a
        // sentinel: an untouched one is the kernel writing nothing, which must be seen.
        if !sentinel && image.holds_same(i, now) {
            continue;
        }
        let alloc = &image.layout.allocs[i];
        findings.extend(redzones(j, tp, alloc, before, now));
        let (ds, de) = (alloc.data_offset as usize, (alloc.data_offset + alloc.span_bytes) as usize);
        let in_span: Vec<std::ops::Range<usize>> =
            held.iter().filter(|r| r.end > ds && r.start < de).map(|r| r.start.max(ds) - ds..r.end.min(de) - ds).collect();
        let changes = changed_span_bytes(tp, &before[ds..de], &now[ds..de], &in_span);
        if let Some(&first) = changes.gaps.first() {
            let mut f = j.finding(
                FindingKind::CanaryDamage,
                Oracle::Canary,
                format!("{} bytes in the stride gaps of {} were overwritten (write between rows)", changes.gaps.len(), tp.name),
            );
            f.tensor = Some(tp.name.clone());
            f.location = Some(Location::Gap { byte: first as u64 });
            f.count = changes.gaps.len() as u64;
            findings.push(f);
        }
        if sentinel {
            findings.extend(unwritten(j, tp, &now[ds..de]));
        } else if tp.role == Role::Input {
            if let Some(&first) = changes.elements.first() {
                let mut f = j.finding(
                    FindingKind::InputClobbered,
                    Oracle::InputIntegrity,
                    format!("{} bytes of input {} changed during the launch", changes.elements.len(), tp.name),
                );
                f.tensor = Some(tp.name.clone());
                f.location = element_at(tp, first as u64).map(|index| Location::Element { index });
                f.count = changes.elements.len() as u64;
                findings.push(f);
            }
        }
    }
    findings
}

/// Damage to the redzones before and after one tensor.
fn redzones(j: &Judged<'_>, tp: &TensorPlan, alloc: &AllocLayout, before: &[u8], now: &[u8]) -> Vec<Finding> {
    let mut findings = Vec::new();
    let name = &tp.name;
    let ds = alloc.data_offset as usize;
    // The redzone after starts past the don't-care tail (a `capacity`).
    let de = alloc.redzone_after_start() as usize;
    // Redzone before: report the damaged byte closest to the data (the likely underflow).
    if let Some(pos) = (0..ds).rev().find(|&b| before[b] != now[b]) {
        let count = (0..ds).filter(|&b| before[b] != now[b]).count() as u64;
        let mut f = j.finding(
            FindingKind::CanaryDamage,
            Oracle::Canary,
            format!("{count} bytes of the redzone before {name} were overwritten (write before the start)"),
        );
        f.tensor = Some(name.clone());
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
            format!("{count} bytes after the end of {name} were overwritten, up to {} bytes past its last byte (write past the end)", last - de + 1),
        );
        f.tensor = Some(name.clone());
        f.location = Some(Location::RedzoneAfter { bytes_past_end: (pos - de + 1) as u64 });
        f.count = count;
        findings.push(f);
    }
    findings
}

/// Elements of an output still holding the sentinel.
fn unwritten(j: &Judged<'_>, tp: &TensorPlan, data: &[u8]) -> Option<Finding> {
    let eb = tp.elem_bytes as usize;
    let sentinel = sentinel_bits(tp.dtype).to_le_bytes();
    let sentinel = &sentinel[..eb];
    let mut first = None;
    let mut count = 0u64;
    for_each_offset(tp, |linear, off| {
        if &data[off..off + eb] == sentinel {
            count += 1;
            first.get_or_insert(linear);
        }
    });
    let linear = first?;
    Some(j.element_finding(
        FindingKind::UnwrittenOutput,
        Oracle::Sentinel,
        tp.index,
        linear as u64,
        count,
        format!("{count} of {} elements of {} were never written", tp.numel, tp.name),
    ))
}
