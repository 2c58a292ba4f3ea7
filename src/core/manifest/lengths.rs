//! Variable lengths: a list-valued dim (`[lengths] seqlens = { count = "batch", ... }`, one
//! length per sequence of a batch) and the index tensors a caller derives from it (`derive =
//! { cu_seqlens = "seqlens" }`, `{ page_table = "seqlens", page_size = "PAGE" }`).
//!
//! A case holds the lengths themselves ([`crate::core::case::Case::lengths`]), so `minimize`
//! shrinks them and `contract` probes them like dims. Expressions see each list through
//! `NAME.sum`, `NAME.max`, `NAME.min`, `NAME.count` and `NAME.pages(p)` (the pages of size `p`
//! the sequences occupy: `Σ cdiv(len, p)`); [`super::expr`] defines them. The values of the
//! derived tensors are the data stage's ([`crate::engine::data`]): prefix sums, the lengths, or
//! page tables whose pages are a counter-based random injection into the tensor's `range`.

use serde::Deserialize;

use super::load::Loader;
use super::{DimSpec, ManifestError, Role, TensorSpec};
use crate::core::case::MAX_DIM;

/// One list-valued dim: `count` lengths, each in `range`.
#[derive(Clone, Debug, PartialEq)]
pub struct LengthsSpec {
    /// The name expressions use (`seqlens.sum`) and cases store.
    pub name: String,
    /// The dim that gives the number of lengths (the batch).
    pub count: String,
    /// The contract's inclusive range of each length; 0 allows empty sequences.
    pub range: [u64; 2],
    /// Largest length drawn at random (hints and the range's ends above it are still drawn).
    pub cap: u64,
    /// Lengths to bias toward (a page size and one either side, a tile size).
    pub hints: Vec<u64>,
}

impl LengthsSpec {
    /// The length of every sequence of a sample case (load's checks, `case example`), and of
    /// those a grown count adds: the smallest positive length in range.
    pub fn sample_length(&self) -> u64 {
        self.range[0].max(1).min(self.range[1])
    }
}

/// Where a derived index tensor's values come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Derive {
    /// The lengths themselves (`seqused_k`, `context_lens`): `count` values.
    Lengths(String),
    /// Their exclusive prefix sums, `count + 1` values from 0 to the total (`cu_seqlens`).
    CuSeqlens(String),
    /// A page (block) table `[count, width]`: row `b` holds `cdiv(len_b, page_size)` distinct
    /// pages drawn from the tensor's `range` (every page of the table distinct, as an allocator
    /// hands them out), the rest of the row `pad`.
    PageTable {
        /// The list the rows follow.
        lengths: String,
        /// The page size, an expression.
        page_size: String,
        /// The value of a row's unused entries.
        pad: i64,
    },
}

impl Derive {
    /// The list it follows.
    pub fn lengths(&self) -> &str {
        match self {
            Derive::Lengths(l) | Derive::CuSeqlens(l) => l,
            Derive::PageTable { lengths, .. } => lengths,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLengths {
    count: String,
    range: [u64; 2],
    cap: Option<u64>,
    #[serde(default)]
    hints: Vec<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDerive {
    lengths: Option<String>,
    cu_seqlens: Option<String>,
    page_table: Option<String>,
    page_size: Option<super::load::Expression>,
    pad: Option<i64>,
}

/// The length drawn at random at most, when a list gives no `cap`.
pub const DEFAULT_LENGTH_CAP: u64 = 512;

impl Loader<'_> {
    /// `[lengths]`: each list's count dim, range (0 ≤ lo ≤ hi ≤ the largest dim), cap and hints.
    pub(super) fn lengths(&self, t: &mut toml::Table, dims: &[DimSpec]) -> Result<Vec<LengthsSpec>, ManifestError> {
        let Some(raw) = t.remove("lengths") else { return Ok(Vec::new()) };
        let table: toml::Table = self.decode(raw, "lengths")?;
        let mut out = Vec::new();
        for (name, v) in table {
            let field = format!("lengths.{name}");
            self.check_define_name(&field, &name)?;
            if dims.iter().any(|d| d.name == name) {
                return Err(self.invalid(&field, format!("`{name}` is also a dim; rename one")));
            }
            let r: RawLengths = self.decode(v, &field)?;
            if !dims.iter().any(|d| d.name == r.count) {
                let known: Vec<&str> = dims.iter().map(|d| d.name.as_str()).collect();
                return Err(self.invalid(
                    &format!("{field}.count"),
                    format!("`{}` is not a dim (dims: {}); name the dim that counts the lengths", r.count, known.join(", ")),
                ));
            }
            let [lo, hi] = r.range;
            if lo > hi || hi > MAX_DIM || hi == 0 {
                return Err(
                    self.invalid(&format!("{field}.range"), format!("[{lo}, {hi}] is not a range within 0..={MAX_DIM} with a positive max; write [min, max]"))
                );
            }
            let cap = r.cap.unwrap_or(DEFAULT_LENGTH_CAP.min(hi)).clamp(lo.max(1), hi);
            out.push(LengthsSpec { name, count: r.count, range: r.range, cap, hints: r.hints });
        }
        Ok(out)
    }

    /// A tensor's `derive`: one of `lengths`, `cu_seqlens` or `page_table` (with `page_size`,
    /// optional `pad`), naming a list of `[lengths]`.
    pub(super) fn derived_from(&self, v: toml::Value, field: &str, lengths: &[LengthsSpec]) -> Result<Derive, ManifestError> {
        let r: RawDerive = self.decode(v, field)?;
        let chosen = [r.lengths.is_some(), r.cu_seqlens.is_some(), r.page_table.is_some()].iter().filter(|&&b| b).count();
        if chosen != 1 {
            return Err(self.invalid(field, "give exactly one of lengths, cu_seqlens, page_table (each naming a list of [lengths])".into()));
        }
        if r.page_table.is_none() && (r.page_size.is_some() || r.pad.is_some()) {
            return Err(self.invalid(field, "page_size and pad belong to page_table; remove them".into()));
        }
        let d = match (r.lengths, r.cu_seqlens, r.page_table) {
            (Some(l), _, _) => Derive::Lengths(l),
            (_, Some(l), _) => Derive::CuSeqlens(l),
            (_, _, Some(l)) => {
                let page_size = r.page_size.ok_or_else(|| self.invalid(&format!("{field}.page_size"), "missing; add page_size = \"PAGE\"".into()))?.0;
                Derive::PageTable { lengths: l, page_size, pad: r.pad.unwrap_or(-1) }
            }
            _ => unreachable!("exactly one was given"),
        };
        if !lengths.iter().any(|l| l.name == d.lengths()) {
            let known: Vec<&str> = lengths.iter().map(|l| l.name.as_str()).collect();
            return Err(self.invalid(
                field,
                format!("`{}` is not a list of [lengths] (lists: {})", d.lengths(), if known.is_empty() { "none".into() } else { known.join(", ") }),
            ));
        }
        Ok(d)
    }

    /// What a derived tensor must be: an integer input of the rank its values have, without
    /// `distinct` (its values are set), a page table with the `range` its pages come from.
    pub(super) fn check_derived(&self, t: &TensorSpec, d: &Derive) -> Result<(), ManifestError> {
        let field = format!("tensors.{}.derive", t.name);
        let integer = t.dtype.fixed().is_some_and(|d| !d.is_float());
        if t.role != Role::Input || !integer {
            return Err(self.invalid(&field, format!("`{}` must be an input with an integer dtype (\"i32\", \"i64\") to hold derived indices", t.name)));
        }
        let rank = if matches!(d, Derive::PageTable { .. }) { 2 } else { 1 };
        if t.rank() != rank {
            return Err(self.invalid(&format!("tensors.{}.shape", t.name), format!("has {} dimensions; derived values of this kind need {rank}", t.rank())));
        }
        if t.distinct || t.broadcast {
            return Err(self.invalid(&field, "a derived tensor's values are set by its lengths; remove distinct and broadcast".into()));
        }
        match d {
            Derive::PageTable { .. } if t.range.is_none() => Err(self.invalid(
                &format!("tensors.{}.range", t.name),
                "missing; a page table draws its pages from its range, e.g. range = [0, \"num_pages - 1\"]".into(),
            )),
            Derive::Lengths(_) | Derive::CuSeqlens(_) if t.range.is_some() => {
                Err(self.invalid(&format!("tensors.{}.range", t.name), "lengths and prefix sums take their values from the lengths; remove range".into()))
            }
            _ => Ok(()),
        }
    }
}

pub use super::expr::pages;

/// The exclusive prefix sums of `lengths`: `count + 1` values, from 0 to the total.
pub fn prefix_sums(lengths: &[u64]) -> Vec<u64> {
    std::iter::once(0)
        .chain(lengths.iter().scan(0u64, |acc, &l| {
            *acc += l;
            Some(*acc)
        }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_sums_and_pages() {
        assert_eq!(prefix_sums(&[3, 0, 5]), [0, 3, 3, 8]);
        assert_eq!(prefix_sums(&[]), [0]);
        assert_eq!(pages(&[0, 1, 16, 17], 16), 4);
        assert_eq!(pages(&[5], 0), 0);
    }
}
