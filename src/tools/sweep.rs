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

use crate::core::case::Case;
use crate::core::finding::Finding;
use crate::core::generate::{align_rows, reaches_past_int32};
use crate::core::manifest::{cartesian, Manifest};
use crate::core::verdict::{Outcome, RunOptions};
use crate::run::campaign::generated_case;
use crate::run::supervisor::{Pool, Slot, SupervisorError};

/// How one repetition's case is reshaped before it runs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum InputClass {
    /// Every base at offset 0 and every row pitch a multiple of 16 bytes.
    Aligned,
    /// Aligned, except one tensor's base is 2, 4 or 8 bytes past a 16-byte boundary: which
    /// tensor and how far follow from the case's data seed, so repetitions cover them all.
    Misaligned,
    /// Aligned, except this tensor's base is this many bytes past a 16-byte boundary (`q+8`).
    Offset(String, u32),
    /// Aligned, except this tensor's row pitch is one element longer (`q-pitch+1`).
    PitchPlusOne(String),
    /// Aligned, with every dim that is a multiple of a tile size it names as a hint (a param of
    /// the case's configuration) moved one below it (partial last tiles).
    Tail,
    /// Aligned, with 8 extra elements per row in every tensor (gaps between rows).
    Strided,
    /// Aligned, with this flag set (`causal`).
    Flag(String),
}

/// An input class a kernel cannot take (a `--classes` or gate sweep entry).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("class `{class}`: {problem} (classes for {kernel}: {}, or TENSOR+BYTES)", .known.join(", "))]
pub struct ClassError {
    /// The class as written.
    pub class: String,
    /// The kernel.
    pub kernel: String,
    /// What is wrong with it for this kernel.
    pub problem: String,
    /// The classes the kernel does take.
    pub known: Vec<String>,
}

impl InputClass {
    /// The classes a sweep of `m` runs by default: aligned, misaligned, the first drawn input
    /// at +2, +4, +8 and with its pitch one element longer, tail, strided, and each flag set.
    pub fn defaults(m: &Manifest) -> Vec<InputClass> {
        let mut out = vec![InputClass::Aligned, InputClass::Misaligned];
        if let Some(t) = m.tensors.iter().find(|t| t.role == crate::core::manifest::Role::Input && t.layout_is_drawn()) {
            out.extend([2, 4, 8].map(|b| InputClass::Offset(t.name.clone(), b)));
            out.push(InputClass::PitchPlusOne(t.name.clone()));
        }
        out.extend([InputClass::Tail, InputClass::Strided]);
        out.extend(m.scalars.iter().filter(|s| s.ty == crate::core::manifest::ScalarType::Bool).map(|s| InputClass::Flag(s.name.clone())));
        out
    }

    /// Parses a name as printed by `Display` (`aligned`, `q+2`, `q-pitch+1`, `tail`, `causal`,
    /// ...); which tensor or flag it names is checked against a manifest by
    /// [`InputClass::check`].
    pub fn from_name(name: &str) -> Option<InputClass> {
        let ident = |s: &str| crate::core::manifest::expr::is_identifier(s);
        match name {
            "aligned" => Some(InputClass::Aligned),
            "misaligned" => Some(InputClass::Misaligned),
            "tail" => Some(InputClass::Tail),
            "strided" => Some(InputClass::Strided),
            _ => {
                if let Some(t) = name.strip_suffix("-pitch+1").filter(|t| ident(t)) {
                    return Some(InputClass::PitchPlusOne(t.to_string()));
                }
                if let Some((t, b)) = name.split_once('+').filter(|(t, _)| ident(t)) {
                    return b.parse().ok().filter(|&b: &u32| b <= crate::core::case::MAX_OFFSET_BYTES).map(|b| InputClass::Offset(t.to_string(), b));
                }
                ident(name).then(|| InputClass::Flag(name.to_string()))
            }
        }
    }

    /// Whether the tensor or flag the class names exists in `m` (and an offset keeps the
    /// tensor's declared alignment); the error lists the classes `m` does take.
    pub fn check(&self, m: &Manifest) -> Result<(), ClassError> {
        let problem = match self {
            InputClass::Offset(t, _) | InputClass::PitchPlusOne(t) if m.tensor(t).is_none_or(|s| !s.layout_is_drawn()) => {
                format!("{} has no tensor `{t}` whose layout a case chooses", m.name)
            }
            InputClass::Offset(t, b) if m.tensor(t).is_some_and(|s| *b % s.base_alignment().max(1) != 0) => {
                let align = m.tensor(t).map_or(1, |s| s.base_alignment());
                format!("{t}'s base must stay a multiple of {align} bytes (its `align` in {}); use an offset that is", m.name)
            }
            InputClass::Flag(f) if m.scalar(f).is_none_or(|s| s.ty != crate::core::manifest::ScalarType::Bool) => {
                format!("{} has no flag (bool scalar) `{f}`", m.name)
            }
            _ => return Ok(()),
        };
        let known: Vec<String> = InputClass::defaults(m).iter().map(|c| c.to_string()).collect();
        Err(ClassError { class: self.to_string(), kernel: m.name.clone(), problem, known })
    }

    /// Whether the class breaks 16-byte alignment of some base or row pitch on purpose.
    pub fn is_misaligned(&self) -> bool {
        matches!(self, InputClass::Misaligned | InputClass::Offset(..) | InputClass::PitchPlusOne(_))
    }

    /// The case of this class derived from `case`: same shape and data, reshaped memory.
    pub fn apply(&self, case: &Case, m: &Manifest) -> Case {
        let mut c = case.clone();
        let drawn: Vec<String> = m.tensors.iter().filter(|t| t.layout_is_drawn()).map(|t| t.name.clone()).collect();
        for t in &drawn {
            align_rows(&mut c, m, t, 16, 0);
        }
        match self {
            InputClass::Aligned => {}
            InputClass::Misaligned => {
                if !drawn.is_empty() {
                    let pick = c.seed;
                    let t = &drawn[(pick % drawn.len() as u64) as usize];
                    c.layout_mut(t).offset_bytes = [2, 4, 8][((pick / drawn.len() as u64) % 3) as usize];
                }
            }
            InputClass::Offset(t, bytes) => c.layout_mut(t).offset_bytes = *bytes,
            InputClass::PitchPlusOne(t) => align_rows(&mut c, m, t, 16, 1),
            InputClass::Tail => {
                for d in &m.dims {
                    let v = c.dim(&d.name);
                    let on_a_tile = d.hints.iter().any(|h| match h {
                        crate::core::manifest::Hint::Param(p) => c.params.get(p).is_some_and(|&t| t > 1 && v.is_multiple_of(t as u64)),
                        crate::core::manifest::Hint::Value(_) => false,
                    });
                    if on_a_tile && v > 1 {
                        c.dims.insert(d.name.clone(), v - 1);
                    }
                }
            }
            InputClass::Strided => {
                for t in &drawn {
                    align_rows(&mut c, m, t, 16, 8);
                }
            }
            InputClass::Flag(f) => {
                c.scalars.insert(f.clone(), crate::core::case::Scalar::Bool(true));
            }
        }
        c
    }
}

impl fmt::Display for InputClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputClass::Aligned => f.write_str("aligned"),
            InputClass::Misaligned => f.write_str("misaligned"),
            InputClass::Offset(t, b) => write!(f, "{t}+{b}"),
            InputClass::PitchPlusOne(t) => write!(f, "{t}-pitch+1"),
            InputClass::Tail => f.write_str("tail"),
            InputClass::Strided => f.write_str("strided"),
            InputClass::Flag(name) => f.write_str(name),
        }
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
        let values: Vec<i64> =
            values.split(',').map(|v| v.trim().parse::<i64>().map_err(|_| bad(format!("`{v}` is not an integer")))).collect::<Result<_, _>>()?;
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

/// One cell of the matrix to run (see [`run_cell`]): by `cudafuzz sweep`, and by the gate's
/// sweep step through its backend.
pub struct CellSpec<'a> {
    /// The kernel.
    pub manifest: &'a Manifest,
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
pub fn run_cell(pool: &mut Pool, c: &CellSpec<'_>, opts: &RunOptions, timeout: Duration, on_fail: &mut OnFail<'_>) -> Result<Cell, SupervisorError> {
    let (m, class) = (c.manifest, &c.class);
    let ctx = crate::core::generate::DecodeContext::new(m);
    let base = |rep: u64, _: &std::sync::atomic::AtomicBool| {
        (0..DRAWS_PER_REPETITION).find_map(|t| {
            let mut case = generated_case(&ctx, c.seed, rep * DRAWS_PER_REPETITION + t);
            case.params.extend(c.params.clone());
            let case = class.apply(&m.bind(case), m);
            // A case past 2³¹ elements (the decoder's rare draw) would take 4–8 GiB of GPU memory
            // per repetition and test nothing the input class is about.
            (crate::core::plan::admits(m, &case) && !reaches_past_int32(&case, m)).then_some(case)
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
                Outcome::Rejected { exception, .. } => {
                    cell.error += 1;
                    *cell.signatures.entry(format!("rejected by the target: {exception}")).or_default() += 1;
                }
                #[allow(unreachable_patterns)]
                _ => cell.error += 1,
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
    use crate::core::case::{Dtype, TensorLayout};
    use crate::core::plan::Plan;
    use crate::testing;

    fn odd_case() -> (Case, Manifest) {
        let m = testing::attention();
        let mut c = testing::example();
        c.params.insert("BLOCK_THREADS".into(), 64);
        c.dims.insert("head_dim".into(), 59);
        c.dims.insert("seq_q".into(), 128);
        c.dims.insert("seq_k".into(), 64);
        c.tensors.insert("q".into(), TensorLayout { order: vec![0, 2, 1, 3], pad: vec![0, 3, 1, 5], offset_bytes: 6, ..TensorLayout::dense() });
        (c, m)
    }

    fn alignments(c: &Case, m: &Manifest) -> Vec<u64> {
        Plan::new(c, m).expect("valid case").tensors.iter().map(|t| t.alignment()).collect()
    }

    #[test]
    fn aligned_class_makes_every_base_and_pitch_16_byte_aligned() {
        for dtype in [Dtype::F16, Dtype::F32] {
            let (mut case, m) = odd_case();
            case.dtype = dtype;
            let c = InputClass::Aligned.apply(&case, &m);
            assert!(alignments(&c, &m).iter().all(|&a| a == 16), "{dtype}: {:?}", c.tensors);
            assert_eq!(c.layout("q").order, case.layout("q").order, "order is kept");
        }
    }

    #[test]
    fn misaligned_classes_break_only_the_named_tensor() {
        let (case, m) = odd_case();
        for class in
            [InputClass::Offset("q".into(), 2), InputClass::Offset("q".into(), 4), InputClass::Offset("q".into(), 8), InputClass::PitchPlusOne("q".into())]
        {
            let al = alignments(&class.apply(&case, &m), &m);
            assert!(al[0] < 16 && al[1..].iter().all(|&a| a == 16), "{class}: {al:?}");
        }
        assert_eq!(alignments(&InputClass::Offset("q".into(), 8).apply(&case, &m), &m)[0], 8);
        let mut hit = std::collections::BTreeSet::new();
        for seed in 0..12 {
            let mut c = case.clone();
            c.seed = seed;
            let al = alignments(&InputClass::Misaligned.apply(&c, &m), &m);
            let bad: Vec<(usize, u64)> = al.into_iter().enumerate().filter(|(_, a)| *a < 16).collect();
            assert_eq!(bad.len(), 1, "exactly one tensor misaligned: {bad:?}");
            hit.insert(bad[0]);
        }
        assert_eq!(hit.len(), 12, "every tensor at +2, +4 and +8");
    }

    #[test]
    fn tail_flag_and_strided_classes() {
        let (case, m) = odd_case();
        let c = InputClass::Tail.apply(&case, &m);
        assert_eq!((!c.dim("seq_q").is_multiple_of(64), !c.dim("seq_k").is_multiple_of(64)), (true, true), "{:?}", c.dims);
        assert!(InputClass::Flag("causal".into()).apply(&case, &m).scalar("causal").is_some_and(|s| s.is_true()));
        assert!(alignments(&InputClass::Strided.apply(&case, &m), &m).iter().all(|&a| a == 16));
    }

    #[test]
    fn default_classes_name_the_manifest_tensors_and_flags_and_round_trip() {
        let m = testing::attention();
        let classes = InputClass::defaults(&m);
        let names: Vec<String> = classes.iter().map(|c| c.to_string()).collect();
        assert_eq!(names, ["aligned", "misaligned", "q+2", "q+4", "q+8", "q-pitch+1", "tail", "strided", "causal"]);
        for c in classes {
            assert_eq!(InputClass::from_name(&c.to_string()), Some(c.clone()));
            assert!(c.check(&m).is_ok());
        }
        assert!(InputClass::from_name("x+2").unwrap().check(&m).is_err(), "no tensor x");
        assert!(InputClass::from_name("scale").unwrap().check(&m).is_err(), "not a flag");
        assert_eq!(InputClass::from_name("q+999"), None);
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
        let cell = |pass, fail, sig: &[(&str, u64)]| Cell { pass, fail, signatures: sig.iter().map(|(s, n)| (s.to_string(), *n)).collect(), ..Cell::default() };
        assert!(cell(5, 0, &[]).consistent());
        assert!(cell(0, 5, &[("a", 5)]).consistent());
        assert!(!cell(3, 2, &[("a", 2)]).consistent());
        assert!(!cell(0, 5, &[("a/x", 3), ("b/x", 2)]).consistent(), "two kinds of failure");
        assert!(
            cell(0, 5, &[("misaligned_address/cuda_status/k/-/-/unaligned:q", 3), ("misaligned_address/cuda_status/k/-/-/unaligned:k", 2)]).consistent(),
            "the same failure at another tensor"
        );
        let classes = [InputClass::Aligned, InputClass::Offset("q".into(), 2)];
        let row = |a: Cell, m: Cell| Row { config: "k".into(), cells: [("aligned".to_string(), a), ("q+2".to_string(), m)].into() };
        assert!(row(cell(5, 0, &[]), cell(0, 5, &[("x", 5)])).alignment_dependent(&classes));
        assert!(!row(cell(0, 5, &[("x", 5)]), cell(0, 5, &[("x", 5)])).alignment_dependent(&classes));
    }
}
