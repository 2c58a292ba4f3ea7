//! Value oracles: [`check_values`] compares each judged output with its reference
//! ([`RefOutputs`]): non-finite values where the reference is finite (a read of a poisoned
//! redzone or gap reached the result), special values that do not match the reference's own
//! (where inputs may hold NaN or infinity, the reference's NaN pattern is the expected one), and
//! the error bound of the output's rule. Elements still holding the sentinel are skipped:
//! [`super::check_memory`] already reported them.

use crate::core::finding::{Finding, FindingKind, Oracle};
use crate::engine::arena::{sentinel_bits, HostImage};
use crate::engine::data;
use crate::engine::reference::{max_abs_diff, Expected, RefOutputs, Rule};

use super::Judged;

/// Value oracles over every judged output.
pub fn check_values(j: &Judged<'_>, image: &HostImage, after: &[Vec<u8>], refs: &RefOutputs) -> Vec<Finding> {
    refs.expected.iter().flat_map(|e| check_output(j, image, after, e)).collect()
}

fn check_output(j: &Judged<'_>, image: &HostImage, after: &[Vec<u8>], e: &Expected) -> Vec<Finding> {
    let tp = &j.plan.tensors[e.index];
    let bytes = image.data(e.index, &after[e.index]);
    let bits = data::read_strided_bits(bytes, tp);
    let sentinel = (tp.init.marks_unwritten()).then(|| sentinel_bits(tp.dtype));
    let mut findings = Vec::new();
    let (mut nonfinite, mut first_nonfinite) = (0u64, None);
    let (mut special, mut first_special) = (0u64, None);
    let mut compared = Vec::with_capacity(bits.len());
    for (i, (&b, &r)) in bits.iter().zip(&e.gold).enumerate() {
        if Some(b) == sentinel {
            continue;
        }
        let x = data::from_bits(b, tp.dtype);
        // A finite gold value past the output type's range is infinite once stored: the kernel's
        // infinity of that sign is right there, not a leak.
        if r.is_finite() && x.is_infinite() && x == data::round_to(r, tp.dtype) {
            continue;
        }
        if r.is_finite() {
            if !x.is_finite() {
                nonfinite += 1;
                first_nonfinite.get_or_insert(i);
            } else {
                compared.push((i, x, r));
            }
        } else if !(x == r || (x.is_nan() && r.is_nan())) {
            special += 1;
            first_special.get_or_insert(i);
        }
    }
    if let Some(i) = first_nonfinite {
        findings.push(j.element_finding(
            FindingKind::NanLeak,
            Oracle::NanLeak,
            e.index,
            i as u64,
            nonfinite,
            format!(
                "{nonfinite} elements of {} are NaN or infinite where the fp64 reference is finite (out-of-bounds read of a poisoned redzone or gap?)",
                tp.name
            ),
        ));
    }
    if let Some(i) = first_special {
        findings.push(j.element_finding(
            FindingKind::NumericalError,
            Oracle::Reference,
            e.index,
            i as u64,
            special,
            format!("{special} elements of {} are not the NaN or infinity the fp64 reference has there", tp.name),
        ));
    }
    findings.extend(bounded(j, e, &compared));
    findings
}

/// The rule's verdict on the finite elements: `(logical position, kernel, gold)`.
fn bounded(j: &Judged<'_>, e: &Expected, compared: &[(usize, f64, f64)]) -> Option<Finding> {
    let name = &j.plan.tensors[e.index].name;
    match e.rule {
        Rule::Bound(tol) => {
            let (xs, rs): (Vec<f64>, Vec<f64>) = compared.iter().map(|&(_, x, r)| (x, r)).unzip();
            let err = max_abs_diff(&xs, &rs);
            if err <= tol.bound {
                return None;
            }
            let over = compared.iter().filter(|(_, x, r)| (x - r).abs() > tol.bound).count() as u64;
            let worst = compared.iter().max_by(|a, b| (a.1 - a.2).abs().total_cmp(&(b.1 - b.2).abs())).map(|c| c.0).unwrap_or(0);
            Some(j.element_finding(
                FindingKind::NumericalError,
                Oracle::Reference,
                e.index,
                worst as u64,
                over,
                format!(
                    "max |{name} - ref64| = {err:.3e} exceeds {} x {:.3e} (same-precision error) + {:.3e} = {:.3e}",
                    tol.factor, tol.err_lowp, tol.floor, tol.bound
                ),
            ))
        }
        Rule::Relative(rel) => {
            let bad: Vec<&(usize, f64, f64)> = compared.iter().filter(|(_, x, r)| (x - r).abs() > rel * r.abs().max(1.0)).collect();
            let &&(i, x, r) = bad.first()?;
            Some(j.element_finding(
                FindingKind::NumericalError,
                Oracle::Reference,
                e.index,
                i as u64,
                bad.len() as u64,
                format!("{} values of {name} differ from the reference by more than {rel} (relative); first: {x} vs {r}", bad.len()),
            ))
        }
    }
}
