//! Rendering verdicts and findings for people.
//!
//! One line per case for `run` and `fuzz`, a full report for `repro`, and the ready-to-paste
//! replay lines that end every finding (as cargo-fuzz prints "Reproduce with").

pub mod export;
pub mod merge;

use std::fmt::Write as _;
use std::path::Path;

use crate::core::case::Case;
use crate::core::plan::{ContractVerdict, Plan};
use crate::core::verdict::{Outcome, Verdict};

/// `PASS`, `FAIL` or `ERROR`, and the first finding or error, on one line.
pub fn one_line(case: &Case, verdict: &Verdict) -> String {
    let contract = if verdict.contract.is_inside() { "" } else { " [outside contract]" };
    match &verdict.outcome {
        Outcome::Pass => format!("PASS  {}{contract}", case.summary()),
        Outcome::Fail { findings } => {
            let mut s = format!("FAIL  {}{contract}", case.summary());
            for f in findings {
                let _ = write!(s, "\n      {f}");
            }
            s
        }
        Outcome::Error { message } => format!("ERROR {}: {message}", case.summary()),
        Outcome::Rejected { exception, message } => format!("REJECTED by the target {}{contract}: {exception}: {message}", case.summary()),
        #[allow(unreachable_patterns)]
        _ => format!("????  {}", case.summary()),
    }
}

/// The plan of a case as a table: role, type, shape, strides, spans and alignment residues per
/// tensor.
pub fn plan_table(case: &Case, plan: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "case: {}", case.summary());
    let _ = writeln!(
        s,
        "{:<8} {:<7} {:<5} {:<6} {:<24} {:<32} {:>6} {:>12} {:>6} {:>18} {:>5}",
        "tensor", "role", "type", "order", "shape", "strides (elements)", "offset", "span bytes", "ptr%16", "stride_bytes%16", "align"
    );
    for tp in &plan.tensors {
        let _ = writeln!(
            s,
            "{:<8} {:<7} {:<5} {:<6} {:<24} {:<32} {:>6} {:>12} {:>6} {:>18} {:>5}",
            tp.name,
            tp.role.name(),
            tp.dtype.name(),
            tp.layout.order_name(),
            format!("{:?}", tp.shape),
            format!("{:?}", tp.strides),
            tp.offset_bytes,
            tp.span_bytes,
            tp.base_residue,
            format!("{:?}", tp.stride_residues),
            tp.alignment()
        );
    }
    s
}

/// The contract verdict in words.
pub fn contract_lines(kernel: &str, verdict: &ContractVerdict) -> String {
    match verdict {
        ContractVerdict::Inside => format!("contract of {kernel}: inside\n"),
        ContractVerdict::Outside { reasons } => {
            let mut s = format!("contract of {kernel}: OUTSIDE\n");
            for r in reasons {
                let _ = writeln!(s, "  - {r}");
            }
            s
        }
    }
}

/// The ready-to-paste commands that replay a saved seed.
pub fn replay_lines(seed: &Path) -> String {
    format!("Reproduce with:\n\n\tcudafuzz repro {}\n", seed.display())
}
