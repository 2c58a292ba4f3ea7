//! The failure matrix: kernel configuration × input class → outcome counts over repetitions.
//!
//! This is the table the seed's authors built by hand ("64/64/4 fails sometimes, 80/64/8 always").
//! Each repetition draws a fresh generated case inside the kernel's contract and then forces the
//! input class onto it (base offset, row pitch, tail tiles, causal), so a cell that is not
//! consistent across repetitions points at a property the class does not pin down. Pure host
//! logic; the CLI runs the cases.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::campaign::generated_case;
use crate::case::{Case, Dim, TensorId};
use crate::finding::Finding;
use crate::generate::reaches_past_int32;
use crate::manifest::{cartesian, Manifest};
use crate::supervisor::{Pool, Slot, SupervisorError};
use crate::worker::{Outcome, RunOptions};

/// How one repetition's case is reshaped before it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum InputClass {
    /// Every base at offset 0 and every row pitch a multiple of 16 bytes.
    Aligned,
    /// Aligned, except one tensor's base is 2, 4 or 8 bytes past a 16-byte boundary: which
    /// tensor and how far follow from the case's data seed, so repetitions cover all twelve.
    Misaligned,
    /// Aligned, except q's base is this many bytes past a 16-byte boundary.
    QOffset(u32),
    /// Aligned, except q's row pitch is one element longer (not a multiple of 16 bytes).
    QPitchPlusOne,
    /// Aligned, with seq_q and seq_k moved off multiples of 64 (partial last tiles).
    Tail,
    /// Aligned, with 8 extra elements per row in every tensor (gaps between rows).
    Strided,
    /// Aligned and causal.
    Causal,
}

impl InputClass {
    /// Every class, in table order.
    pub const ALL: [InputClass; 9] = [
        InputClass::Aligned,
        InputClass::Misaligned,
        InputClass::QOffset(2),
        InputClass::QOffset(4),
        InputClass::QOffset(8),
        InputClass::QPitchPlusOne,
        InputClass::Tail,
        InputClass::Strided,
        InputClass::Causal,
    ];

    /// Parses a name as printed by `Display` (`aligned`, `q+2`, `q-pitch+1`, `tail`, ...).
    pub fn from_name(name: &str) -> Option<InputClass> {
        InputClass::ALL.into_iter().find(|c| c.to_string() == name)
    }

    /// Whether the class breaks 16-byte alignment of some base or row pitch on purpose.
    pub fn is_misaligned(self) -> bool {
        matches!(self, InputClass::Misaligned | InputClass::QOffset(_) | InputClass::QPitchPlusOne)
    }

    /// The case of this class derived from `case`: same shape and data, reshaped memory.
    pub fn apply(self, case: &Case) -> Case {
        let mut c = case.clone();
        for t in TensorId::ALL {
            align_tensor(&mut c, t, 0);
        }
        match self {
            InputClass::Aligned => {}
            InputClass::Misaligned => {
                let pick = c.data.seed;
                let t = TensorId::ALL[(pick % 4) as usize];
                c.layouts.get_mut(t).offset_bytes = [2, 4, 8][((pick / 4) % 3) as usize];
            }
            InputClass::QOffset(bytes) => c.layouts.q.offset_bytes = bytes,
            InputClass::QPitchPlusOne => align_tensor(&mut c, TensorId::Q, 1),
            InputClass::Tail => {
                c.seq_q = off_tile(c.seq_q);
                c.seq_k = off_tile(c.seq_k);
            }
            InputClass::Strided => {
                for t in TensorId::ALL {
                    align_tensor(&mut c, t, 8);
                }
            }
            InputClass::Causal => c.causal = true,
        }
        c
    }
}

impl fmt::Display for InputClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputClass::Aligned => f.write_str("aligned"),
            InputClass::Misaligned => f.write_str("misaligned"),
            InputClass::QOffset(b) => write!(f, "q+{b}"),
            InputClass::QPitchPlusOne => f.write_str("q-pitch+1"),
            InputClass::Tail => f.write_str("tail"),
            InputClass::Strided => f.write_str("strided"),
            InputClass::Causal => f.write_str("causal"),
        }
    }
}

/// Offset 0, no padding except on the innermost dimension, where the extent is rounded up to
/// a multiple of 16 bytes and then `extra` elements are added: every stride but the innermost
/// is then a multiple of 16 bytes when `extra` is a multiple of 16 bytes' worth of elements.
fn align_tensor(case: &mut Case, t: TensorId, extra: u32) {
    let per_16 = 16 / case.dtype.size();
    let shape = case.shape(t);
    let layout = case.layouts.get_mut(t);
    let inner: Dim = layout.order[3];
    let extent = shape[inner.index()];
    layout.offset_bytes = 0;
    layout.pad = [0; 4];
    layout.pad[3] = extent.div_ceil(per_16) * per_16 - extent + extra;
}

/// A sequence length with a partial last tile of 64: unchanged when it already has one.
fn off_tile(seq: u32) -> u32 {
    if seq % 64 == 0 {
        seq - 1
    } else {
        seq
    }
}

/// A `NAME=v1,v2,...` item that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--params {item}: {problem}")]
pub struct ParamGridError {
    /// The item as written.
    pub item: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Parses `NAME=v1,v2,...` items into the cartesian product of parameter assignments (one
/// empty map when there are none), in the order given.
pub fn param_grid(items: &[String]) -> Result<Vec<BTreeMap<String, i64>>, ParamGridError> {
    let mut parsed: Vec<(String, Vec<i64>)> = Vec::new();
    for item in items {
        let bad = |problem: String| ParamGridError { item: item.clone(), problem };
        let (name, values) = item.split_once('=').ok_or_else(|| bad("expected NAME=v1,v2,...".into()))?;
        let values: Vec<i64> = values
            .split(',')
            .map(|v| v.trim().parse::<i64>().map_err(|_| bad(format!("`{v}` is not an integer"))))
            .collect::<Result<_, _>>()?;
        parsed.push((name.to_string(), values));
    }
    Ok(cartesian(parsed.iter().map(|(n, v)| (n.as_str(), v.as_slice()))))
}

/// One cell of the matrix.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Cell {
    /// Repetitions that passed every oracle.
    pub pass: u64,
    /// Repetitions with findings.
    pub fail: u64,
    /// Repetitions the harness could not run.
    pub error: u64,
    /// Repetitions outside the contract even after reshaping (not run).
    pub skipped: u64,
    /// How often each finding signature appeared (a repetition counts each of its signatures).
    pub signatures: BTreeMap<String, u64>,
}

impl Cell {
    /// Repetitions run.
    pub fn ran(&self) -> u64 {
        self.pass + self.fail + self.error
    }

    /// Every repetition ended the same way: all passed, or all failed with the same finding
    /// kinds. Signatures that differ only in the tensor, location or alignment part (which
    /// tensor a `misaligned` repetition offset) are the same way of failing.
    pub fn consistent(&self) -> bool {
        let outcomes = [self.pass, self.fail, self.error].iter().filter(|&&n| n > 0).count();
        let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
        for (sig, n) in &self.signatures {
            let kind = sig.match_indices('/').nth(1).map_or(sig.as_str(), |(i, _)| &sig[..i]);
            *kinds.entry(kind).or_default() += n;
        }
        outcomes <= 1 && kinds.values().all(|&n| n == self.fail)
    }

    /// `pass`, `FAIL` or `mixed` for the table.
    pub fn verdict(&self) -> &'static str {
        match (self.pass, self.fail + self.error) {
            (_, 0) => "pass",
            (0, _) => "FAIL",
            _ => "mixed",
        }
    }
}

/// One row: a kernel configuration and its cells, in class order.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Kernel name with its parameters, e.g. `fa_s512_80_64_8` or `flash_fwd[BLOCK_M=128]`.
    pub config: String,
    /// Cells by class name.
    pub cells: BTreeMap<String, Cell>,
}

impl Row {
    /// Whether the outcome depends on alignment: every aligned class passes and some misaligned
    /// class fails, or the reverse.
    pub fn alignment_dependent(&self, classes: &[InputClass]) -> bool {
        let fails = |c: &InputClass| self.cells.get(&c.to_string()).is_some_and(|cell| cell.fail + cell.error > 0);
        let (mis, ok): (Vec<&InputClass>, Vec<&InputClass>) = classes.iter().partition(|c| c.is_misaligned());
        !mis.is_empty() && !ok.is_empty() && mis.iter().any(|c| fails(c)) && !ok.iter().any(|c| fails(c))
    }
}

/// The matrix as a text table: one line per configuration, `pass/fail` per class, `!` after a
/// cell that was not consistent across repetitions, and the signatures seen below each row.
pub fn render(rows: &[Row], classes: &[InputClass]) -> String {
    let mut out = format!("{:<28}", "configuration");
    for c in classes {
        out.push_str(&format!(" {:>11}", c.to_string()));
    }
    out.push_str("  alignment-dependent\n");
    for row in rows {
        out.push_str(&format!("{:<28}", row.config));
        for c in classes {
            let cell = row.cells.get(&c.to_string()).cloned().unwrap_or_default();
            let mark = if cell.consistent() { " " } else { "!" };
            out.push_str(&format!(" {:>10}{mark}", format!("{}/{}", cell.pass, cell.fail + cell.error)));
        }
        out.push_str(if row.alignment_dependent(classes) { "  yes\n" } else { "  no\n" });
        let mut sigs: BTreeMap<&str, u64> = BTreeMap::new();
        for cell in row.cells.values() {
            for (s, n) in &cell.signatures {
                *sigs.entry(s).or_default() += n;
            }
        }
        for (s, n) in sigs {
            out.push_str(&format!("    {n:>5} × {s}\n"));
        }
    }
    out.push_str("cells: passed/failed repetitions; ! = repetitions ended differently (a pass/fail mix, or other finding kinds)\n");
    out
}

/// Tries per repetition to draw a generated case that lies inside the contract.
pub const DRAWS_PER_REPETITION: u64 = 1000;

/// One cell of the matrix to run (see [`run_cell`]).
pub struct CellSpec<'a> {
    /// The kernel.
    pub m: &'a Manifest,
    /// The row's parameters (added to each generated case's).
    pub params: &'a BTreeMap<String, i64>,
    /// The column.
    pub class: InputClass,
    /// Repetitions.
    pub repeat: u64,
    /// Generator seed.
    pub seed: u64,
    /// Stop handing out repetitions at this time (`cudafuzz gate`'s budget).
    pub deadline: Option<Instant>,
}

/// What [`run_cell`] calls with each failing repetition's case and findings.
pub type OnFail<'a> = dyn FnMut(&Case, &[Finding]) -> Result<(), SupervisorError> + 'a;

/// Runs one cell: `repeat` repetitions, each a fresh generated case inside the contract reshaped
/// to the class; `on_fail` sees each failing repetition's case and findings.
pub fn run_cell(
    pool: &mut Pool,
    c: &CellSpec<'_>,
    opts: &RunOptions,
    timeout: Duration,
    on_fail: &mut OnFail<'_>,
) -> Result<Cell, SupervisorError> {
    let (m, class) = (c.m, c.class);
    let ctx = m.decode_context();
    let base = |rep: u64| {
        (0..DRAWS_PER_REPETITION).find_map(|t| {
            let mut case = generated_case(&ctx, c.seed, rep * DRAWS_PER_REPETITION + t);
            case.params.extend(c.params.clone());
            let case = class.apply(&m.bind(case));
            // A case past 2³¹ elements (the decoder's rare draw) would take 4–8 GiB of GPU memory
            // per repetition and test nothing the input class is about.
            (m.contract.admits(&case) && !reaches_past_int32(&case)).then_some(case)
        })
    };
    let mut cell = Cell::default();
    let mut tally = |_i: u64, slot: Slot| -> Result<ControlFlow<()>, SupervisorError> {
        match slot {
            Slot::Skipped => cell.skipped += 1,
            Slot::Ran(case, v) => match &v.outcome {
                Outcome::Pass => cell.pass += 1,
                Outcome::Fail { findings } => {
                    cell.fail += 1;
                    let sigs: std::collections::BTreeSet<String> = findings.iter().map(|f| f.signature().to_string()).collect();
                    for sig in sigs {
                        *cell.signatures.entry(sig).or_default() += 1;
                    }
                    on_fail(&case, findings)?;
                }
                Outcome::Error { message } => {
                    cell.error += 1;
                    *cell.signatures.entry(format!("error: {message}")).or_default() += 1;
                }
            },
        }
        Ok(ControlFlow::Continue(()))
    };
    pool.run_indexed(c.repeat, c.deadline, m, opts, timeout, &base, &mut tally)?;
    Ok(cell)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{Dtype, TensorLayout};
    use crate::plan::Plan;

    fn odd_case() -> Case {
        let mut c = Case::example("k");
        c.head_dim = 59;
        c.seq_q = 128;
        c.seq_k = 64;
        c.layouts.q = TensorLayout { order: [Dim::B, Dim::S, Dim::H, Dim::D], pad: [0, 3, 1, 5], offset_bytes: 6 };
        c
    }

    #[test]
    fn aligned_class_makes_every_base_and_pitch_16_byte_aligned() {
        for dtype in [Dtype::F16, Dtype::F32] {
            let mut case = odd_case();
            case.dtype = dtype;
            let c = InputClass::Aligned.apply(&case);
            assert!(Plan::new(&c).tensors.iter().all(|t| t.alignment() == 16), "{dtype}: {:?}", c.layouts);
            assert_eq!(c.layouts.q.order, case.layouts.q.order, "order is kept");
        }
    }

    #[test]
    fn misaligned_classes_break_only_q() {
        let case = odd_case();
        for class in [InputClass::QOffset(2), InputClass::QOffset(4), InputClass::QOffset(8), InputClass::QPitchPlusOne] {
            let plan = Plan::new(&class.apply(&case));
            let al: Vec<u64> = plan.tensors.iter().map(|t| t.alignment()).collect();
            assert!(al[0] < 16 && al[1..].iter().all(|&a| a == 16), "{class}: {al:?}");
        }
        assert_eq!(Plan::new(&InputClass::QOffset(8).apply(&case)).tensors[0].alignment(), 8);
        let mut hit = std::collections::BTreeSet::new();
        for seed in 0..12 {
            let mut c = case.clone();
            c.data.seed = seed;
            let plan = Plan::new(&InputClass::Misaligned.apply(&c));
            let bad: Vec<(usize, u64)> = plan.tensors.iter().map(|t| t.alignment()).enumerate().filter(|(_, a)| *a < 16).collect();
            assert_eq!(bad.len(), 1, "exactly one tensor misaligned: {bad:?}");
            hit.insert(bad[0]);
        }
        assert_eq!(hit.len(), 12, "every tensor at +2, +4 and +8");
    }

    #[test]
    fn tail_and_causal_classes() {
        let c = InputClass::Tail.apply(&odd_case());
        assert_eq!((c.seq_q % 64 != 0, c.seq_k % 64 != 0), (true, true));
        assert!(InputClass::Causal.apply(&odd_case()).causal);
        assert!(Plan::new(&InputClass::Strided.apply(&odd_case())).tensors.iter().all(|t| t.alignment() == 16));
    }

    #[test]
    fn class_names_round_trip() {
        for c in InputClass::ALL {
            assert_eq!(InputClass::from_name(&c.to_string()), Some(c));
        }
    }

    #[test]
    fn param_grid_is_the_cartesian_product() {
        let g = param_grid(&["BLOCK_M=64,128".into(), "BLOCK_N=32,64".into()]).unwrap();
        assert_eq!(g.len(), 4);
        assert_eq!(g[1].get("BLOCK_N"), Some(&64));
        assert!(param_grid(&["BLOCK_M".into()]).is_err());
        assert!(param_grid(&["BLOCK_M=x".into()]).is_err());
        assert_eq!(param_grid(&[]).unwrap().len(), 1);
    }

    #[test]
    fn consistency_and_alignment_dependence() {
        let cell = |pass, fail, sig: &[(&str, u64)]| Cell {
            pass,
            fail,
            signatures: sig.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
            ..Cell::default()
        };
        assert!(cell(5, 0, &[]).consistent());
        assert!(cell(0, 5, &[("a", 5)]).consistent());
        assert!(!cell(3, 2, &[("a", 2)]).consistent());
        assert!(!cell(0, 5, &[("a/x", 3), ("b/x", 2)]).consistent(), "two kinds of failure");
        assert!(
            cell(0, 5, &[("misaligned_address/cuda_status/k/-/-/unaligned:q", 3), ("misaligned_address/cuda_status/k/-/-/unaligned:k", 2)]).consistent(),
            "the same failure at another tensor"
        );
        let classes = [InputClass::Aligned, InputClass::QOffset(2)];
        let row = |a: Cell, m: Cell| Row { config: "k".into(), cells: [("aligned".to_string(), a), ("q+2".to_string(), m)].into() };
        assert!(row(cell(5, 0, &[]), cell(0, 5, &[("x", 5)])).alignment_dependent(&classes));
        assert!(!row(cell(0, 5, &[("x", 5)]), cell(0, 5, &[("x", 5)])).alignment_dependent(&classes));
    }
}
