//! Host oracles: judge one run from the bytes downloaded after it, cheapest check first.
//!
//! Every oracle compares the downloaded allocations with the [`HostImage`] they were uploaded
//! from, or the outputs with the references, and returns [`Finding`]s. They never touch the
//! GPU, so they run identically in tests on fabricated buffers. The order is deliberate: memory
//! oracles ([`check_memory`]: canaries, unchanged inputs, outputs left holding their sentinel)
//! say *where* a kernel went wrong and do not depend on numerics; the value oracles
//! ([`check_values`]: NaN the reference does not have, error beyond the tolerance) run on what is
//! left, per judged output tensor; [`check_determinism`] compares two runs bit for bit.

pub mod device;
mod memory;
mod values;

pub use memory::check_memory;
pub use values::check_values;

use crate::core::case::Case;
use crate::core::finding::{Finding, FindingKind, Location, Oracle};
use crate::core::plan::Plan;
use crate::engine::arena::HostImage;
use crate::engine::data;

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
        Finding { alignment: self.plan.alignments(), inside_contract: self.inside_contract, ..Finding::new(kind, oracle, self.kernel, detail) }
    }

    /// A finding about tensor `index`'s element at logical position `linear`.
    pub fn element_finding(&self, kind: FindingKind, oracle: Oracle, index: usize, linear: u64, count: u64, detail: String) -> Finding {
        let tp = &self.plan.tensors[index];
        let mut f = self.finding(kind, oracle, detail);
        f.tensor = Some(tp.name.clone());
        f.location = Some(Location::Element { index: tp.logical_index(linear) });
        f.count = count;
        f
    }
}

/// Bitwise determinism: the same case run twice must give identical bytes in every judged
/// output. `first` and `second` are the downloads of both runs (allocations the second run did
/// not download are empty and skipped).
pub fn check_determinism(j: &Judged<'_>, image: &HostImage, first: &[Vec<u8>], second: &[Vec<u8>]) -> Vec<Finding> {
    let mut findings = Vec::new();
    for tp in j.plan.tensors.iter().filter(|t| t.role.is_judged() && !t.order_dependent) {
        let i = tp.index;
        if second[i].is_empty() {
            continue;
        }
        if image.same_where_held(i, &first[i], &second[i]) {
            continue;
        }
        let (a, b) = (image.data(i, &first[i]), image.data(i, &second[i]));
        let (a, b) = (data::read_strided_bits(a, tp), data::read_strided_bits(b, tp));
        let diff: Vec<usize> = (0..a.len()).filter(|&e| a[e] != b[e]).collect();
        let Some(&first_diff) = diff.first() else { continue };
        findings.push(j.element_finding(
            FindingKind::Nondeterminism,
            Oracle::Determinism,
            i,
            first_diff as u64,
            diff.len() as u64,
            format!("{} elements of {} differ between two runs of the same case (a race?)", diff.len(), tp.name),
        ));
    }
    findings
}

#[cfg(test)]
mod tests;
