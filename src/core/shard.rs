//! Sharding: splitting a gate or a sweep deterministically across CI jobs or machines.
//!
//! A [`Shard`] is "part `I` of `N`". Users write it **1-based**, as `I/N` (`--shard 2/4` is the
//! second of four parts, `1/1` is everything); inside, [`Shard::index`] is **0-based** (`2/4` has
//! index 1). Work items are numbered `0, 1, 2, ...` and dealt round-robin: item `i` belongs to
//! the shard whose index is `i % N` ([`Shard::owns`]), so the `N` shards partition every range
//! exactly, whatever its length, and the same item always lands on the same shard.
//!
//! Where the shard comes from, first match wins:
//! 1. an explicit `--shard I/N` on the command line;
//! 2. `CUDAFUZZ_SHARD=I/N` in the environment (a CI matrix sets it per job);
//! 3. a Slurm job array: `SLURM_ARRAY_TASK_ID` and `SLURM_ARRAY_TASK_COUNT`, with
//!    `SLURM_ARRAY_TASK_MIN` (task ids start there: `--array=1-4` numbers tasks 1..4) and
//!    `SLURM_ARRAY_TASK_STEP` (`--array=0-12:4` numbers them 0, 4, 8, 12);
//! 4. none: the whole job is one shard.
//!
//! Schedulers do the placing; cudafuzz only needs to know which part it is.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The environment variable a CI matrix sets to `I/N` (1-based `I`).
pub const SHARD_ENV: &str = "CUDAFUZZ_SHARD";

/// A bad shard specification.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardError {
    /// Not of the form `I/N`.
    #[error("{source_name} `{value}`: expected I/N with 1 <= I <= N, e.g. 2/4 for the second of four shards")]
    Syntax {
        /// Where the value came from (`--shard`, `CUDAFUZZ_SHARD`, ...).
        source_name: String,
        /// The value as given.
        value: String,
    },
    /// A part is not a whole number.
    #[error("{source_name} `{value}`: `{part}` is not a whole number")]
    NotANumber {
        /// Where the value came from.
        source_name: String,
        /// The value as given.
        value: String,
        /// The part that is not a number.
        part: String,
    },
    /// `N` is zero.
    #[error("{source_name} `{value}`: the shard count must be at least 1")]
    ZeroCount {
        /// Where the value came from.
        source_name: String,
        /// The value as given.
        value: String,
    },
    /// `I` is not in `1..=N` (or a Slurm task id not in the array).
    #[error("{source_name} `{value}`: shard {number} does not exist; shards are numbered 1 to {count}{hint}")]
    OutOfRange {
        /// Where the value came from.
        source_name: String,
        /// The value as given.
        value: String,
        /// The 1-based shard number asked for (0 when below the first).
        number: i128,
        /// The shard count.
        count: u64,
        /// Extra advice, empty or starting with `; `.
        hint: String,
    },
    /// A Slurm array variable is missing while another is set.
    #[error("{present} is set but {missing} is not: run under `sbatch --array` or set {SHARD_ENV}=I/N")]
    SlurmIncomplete {
        /// The variable that is set.
        present: &'static str,
        /// The variable that is missing.
        missing: &'static str,
    },
}

/// Part `index + 1` of `count`: see the module docs for the 1-based text form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Shard {
    index: u64,
    count: u64,
}

impl Shard {
    /// The whole job as one shard (`1/1`).
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// The shard with 0-based `index` of `count`; `None` unless `index < count`.
    pub fn new(index: u64, count: u64) -> Option<Shard> {
        (index < count).then_some(Shard { index, count })
    }

    /// Parses the 1-based `I/N` form; `source_name` names where it came from in errors.
    pub fn parse(value: &str, source_name: &str) -> Result<Shard, ShardError> {
        let syntax = || ShardError::Syntax { source_name: source_name.into(), value: value.into() };
        let (i, n) = value.trim().split_once('/').ok_or_else(syntax)?;
        let number = |part: &str| {
            part.trim().parse::<u64>().map_err(|_| ShardError::NotANumber { source_name: source_name.into(), value: value.into(), part: part.trim().into() })
        };
        let (i, n) = (number(i)?, number(n)?);
        if n == 0 {
            return Err(ShardError::ZeroCount { source_name: source_name.into(), value: value.into() });
        }
        if i == 0 || i > n {
            return Err(ShardError::OutOfRange {
                source_name: source_name.into(),
                value: value.into(),
                number: i as i128,
                count: n,
                hint: if i == 0 { "; I is 1-based: the first shard is 1/N".into() } else { String::new() },
            });
        }
        Ok(Shard { index: i - 1, count: n })
    }

    /// The 0-based index (`2/4` has index 1).
    pub fn index(self) -> u64 {
        self.index
    }

    /// The 1-based number as users write it (`2/4` is number 2).
    pub fn number(self) -> u64 {
        self.index + 1
    }

    /// How many shards there are.
    pub fn count(self) -> u64 {
        self.count
    }

    /// Whether this is the only shard (`1/1`).
    pub fn is_all(self) -> bool {
        self.count == 1
    }

    /// Whether work item `item_index` (0-based) belongs to this shard: round-robin, item `i`
    /// goes to the shard with index `i % count`.
    pub fn owns(self, item_index: u64) -> bool {
        item_index % self.count == self.index
    }

    /// How many of the items `0..n` this shard owns.
    pub fn len_of(self, n: u64) -> u64 {
        if n <= self.index {
            0
        } else {
            (n - self.index - 1) / self.count + 1
        }
    }

    /// The items of `0..n` this shard owns, in increasing order.
    pub fn indices(self, n: u64) -> impl Iterator<Item = u64> {
        (self.index..n).step_by(self.count as usize)
    }

    /// The `local`-th item (0-based) this shard owns: `index + local * count`. Maps a
    /// shard-local counter onto the global item numbering.
    pub fn global(self, local: u64) -> u64 {
        self.index + local * self.count
    }

    /// The elements of `items` whose position this shard owns, in order.
    pub fn split<T>(self, items: impl IntoIterator<Item = T>) -> Vec<T> {
        items.into_iter().enumerate().filter(|(i, _)| self.owns(*i as u64)).map(|(_, t)| t).collect()
    }

    /// The shard from the environment (`CUDAFUZZ_SHARD`, else a Slurm job array), or `None`.
    pub fn from_env() -> Result<Option<Shard>, ShardError> {
        Shard::from_vars(|name| std::env::var(name).ok())
    }

    /// [`Shard::from_env`] reading variables through `var` (for tests and other sources).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Shard>, ShardError> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if let Some(v) = var(SHARD_ENV) {
            return Shard::parse(&v, SHARD_ENV).map(Some);
        }
        const ID: &str = "SLURM_ARRAY_TASK_ID";
        const COUNT: &str = "SLURM_ARRAY_TASK_COUNT";
        const MIN: &str = "SLURM_ARRAY_TASK_MIN";
        const STEP: &str = "SLURM_ARRAY_TASK_STEP";
        let (id, count) = match (var(ID), var(COUNT)) {
            (None, None) => return Ok(None),
            (Some(_), None) => return Err(ShardError::SlurmIncomplete { present: ID, missing: COUNT }),
            (None, Some(_)) => return Err(ShardError::SlurmIncomplete { present: COUNT, missing: ID }),
            (Some(id), Some(count)) => (id, count),
        };
        let num = |name: &str, v: &str| {
            v.trim().parse::<u64>().map_err(|_| ShardError::NotANumber { source_name: name.into(), value: v.into(), part: v.trim().into() })
        };
        let id_n = num(ID, &id)?;
        let count_n = num(COUNT, &count)?;
        let min = var(MIN).map(|v| num(MIN, &v)).transpose()?.unwrap_or(0);
        let step = var(STEP).map(|v| num(STEP, &v)).transpose()?.unwrap_or(1).max(1);
        if count_n == 0 {
            return Err(ShardError::ZeroCount { source_name: COUNT.into(), value: count });
        }
        let shown = format!("{id} (min {min}, step {step}, count {count_n})");
        let out_of_range = |number: i128| ShardError::OutOfRange {
            source_name: ID.into(),
            value: shown.clone(),
            number,
            count: count_n,
            hint: "; only evenly spaced arrays (`--array=A-B` or `A-B:S`) map onto shards: for other task lists set CUDAFUZZ_SHARD=I/N in the job script"
                .into(),
        };
        if id_n < min || (id_n - min) % step != 0 {
            return Err(out_of_range((id_n as i128 - min as i128) / step as i128 + 1));
        }
        let index = (id_n - min) / step;
        Shard::new(index, count_n).map(Some).ok_or_else(|| out_of_range(index as i128 + 1))
    }

    /// The shard to use: `explicit` (`--shard`, 1-based `I/N`) beats the environment.
    pub fn resolve(explicit: Option<&str>) -> Result<Option<Shard>, ShardError> {
        match explicit {
            Some(v) => Shard::parse(v, "--shard").map(Some),
            None => Shard::from_env(),
        }
    }
}

impl fmt::Display for Shard {
    /// The 1-based `I/N` form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.number(), self.count)
    }
}

impl FromStr for Shard {
    type Err = ShardError;

    /// Parses the 1-based `I/N` form.
    fn from_str(s: &str) -> Result<Shard, ShardError> {
        Shard::parse(s, "shard")
    }
}

impl TryFrom<String> for Shard {
    type Error = ShardError;

    fn try_from(s: String) -> Result<Shard, ShardError> {
        s.parse()
    }
}

impl From<Shard> for String {
    fn from(s: Shard) -> String {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn parses_one_based_text_into_a_zero_based_index() {
        let s: Shard = "2/4".parse().unwrap();
        assert_eq!((s.index(), s.number(), s.count()), (1, 2, 4));
        assert_eq!(s.to_string(), "2/4");
        assert_eq!(Shard::parse(" 1 / 1 ", "--shard").unwrap(), Shard::ALL);
        assert!(Shard::ALL.is_all());
        assert_eq!(Shard::new(3, 4).unwrap().to_string(), "4/4");
        assert_eq!(Shard::new(4, 4), None);
    }

    #[test]
    fn bad_values_are_named_clearly() {
        let e = Shard::parse("0/4", "--shard").unwrap_err();
        assert!(matches!(e, ShardError::OutOfRange { number: 0, count: 4, .. }), "{e:?}");
        assert!(e.to_string().contains("1-based"), "{e}");
        let e = Shard::parse("5/4", "--shard").unwrap_err();
        assert!(e.to_string().contains("--shard `5/4`") && e.to_string().contains("1 to 4"), "{e}");
        assert!(matches!(Shard::parse("1/0", "x").unwrap_err(), ShardError::ZeroCount { .. }));
        let e = Shard::parse("a/4", "CUDAFUZZ_SHARD").unwrap_err();
        assert!(matches!(&e, ShardError::NotANumber { part, .. } if part == "a"), "{e:?}");
        assert!(e.to_string().starts_with("CUDAFUZZ_SHARD"), "{e}");
        assert!(matches!(Shard::parse("3", "x").unwrap_err(), ShardError::Syntax { .. }));
        assert!(matches!(Shard::parse("-1/4", "x").unwrap_err(), ShardError::NotANumber { .. }));
    }

    #[test]
    fn environment_ci_matrix_and_slurm_arrays() {
        assert_eq!(Shard::from_vars(vars(&[])).unwrap(), None);
        assert_eq!(Shard::from_vars(vars(&[("CUDAFUZZ_SHARD", "3/8")])).unwrap(), Shard::new(2, 8));
        // Slurm `--array=0-3`: ids from 0.
        let s = Shard::from_vars(vars(&[("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_COUNT", "4"), ("SLURM_ARRAY_TASK_MIN", "0")])).unwrap();
        assert_eq!(s, Shard::new(0, 4));
        // `--array=1-4`: ids start at the minimum, not 0.
        let s = Shard::from_vars(vars(&[("SLURM_ARRAY_TASK_ID", "4"), ("SLURM_ARRAY_TASK_COUNT", "4"), ("SLURM_ARRAY_TASK_MIN", "1")])).unwrap();
        assert_eq!(s, Shard::new(3, 4));
        // `--array=10-22:4`: ids 10, 14, 18, 22.
        let s = Shard::from_vars(vars(&[
            ("SLURM_ARRAY_TASK_ID", "18"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "10"),
            ("SLURM_ARRAY_TASK_STEP", "4"),
        ]))
        .unwrap();
        assert_eq!(s, Shard::new(2, 4));
        // The generic variable beats Slurm's.
        let s = Shard::from_vars(vars(&[("CUDAFUZZ_SHARD", "1/2"), ("SLURM_ARRAY_TASK_ID", "3"), ("SLURM_ARRAY_TASK_COUNT", "4")])).unwrap();
        assert_eq!(s, Shard::new(0, 2));
        // An irregular array (`--array=1,3,7`) cannot be mapped: a clear error, not a wrong shard.
        let e = Shard::from_vars(vars(&[("SLURM_ARRAY_TASK_ID", "7"), ("SLURM_ARRAY_TASK_COUNT", "3"), ("SLURM_ARRAY_TASK_MIN", "1")])).unwrap_err();
        assert!(matches!(e, ShardError::OutOfRange { .. }) && e.to_string().contains("CUDAFUZZ_SHARD"), "{e}");
        let e = Shard::from_vars(vars(&[("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_MIN", "1"), ("SLURM_ARRAY_TASK_COUNT", "2")])).unwrap_err();
        assert!(matches!(e, ShardError::OutOfRange { .. }), "{e}");
        let e = Shard::from_vars(vars(&[("SLURM_ARRAY_TASK_ID", "1")])).unwrap_err();
        assert!(matches!(e, ShardError::SlurmIncomplete { missing: "SLURM_ARRAY_TASK_COUNT", .. }), "{e}");
        let e = Shard::from_vars(vars(&[("SLURM_ARRAY_TASK_ID", "x"), ("SLURM_ARRAY_TASK_COUNT", "2")])).unwrap_err();
        assert!(e.to_string().contains("SLURM_ARRAY_TASK_ID"), "{e}");
        let e = Shard::from_vars(vars(&[("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_COUNT", "0")])).unwrap_err();
        assert!(matches!(e, ShardError::ZeroCount { .. }), "{e}");
        assert!(Shard::from_vars(vars(&[("CUDAFUZZ_SHARD", "9/8")])).is_err());
        // Empty variables count as unset.
        assert_eq!(Shard::from_vars(vars(&[("CUDAFUZZ_SHARD", "")])).unwrap(), None);
    }

    #[test]
    fn an_explicit_shard_beats_the_environment() {
        assert_eq!(Shard::resolve(Some("2/3")).unwrap(), Shard::new(1, 3));
        assert!(Shard::resolve(Some("4/3")).unwrap_err().to_string().starts_with("--shard"));
    }

    #[test]
    fn serde_uses_the_text_form() {
        let s = Shard::new(1, 4).unwrap();
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"2/4\"");
        assert_eq!(serde_json::from_str::<Shard>("\"2/4\"").unwrap(), s);
        assert!(serde_json::from_str::<Shard>("\"5/4\"").is_err());
    }

    #[test]
    fn helpers_agree() {
        let s = Shard::new(2, 3).unwrap();
        assert_eq!(s.indices(10).collect::<Vec<_>>(), vec![2, 5, 8]);
        assert_eq!(s.len_of(10), 3);
        assert_eq!(s.len_of(2), 0);
        assert_eq!(s.len_of(3), 1);
        assert_eq!((0..3).map(|l| s.global(l)).collect::<Vec<_>>(), vec![2, 5, 8]);
        assert_eq!(s.split("abcdefghij".chars()), vec!['c', 'f', 'i']);
    }

    proptest! {
        /// Every item of `0..n` belongs to exactly one of the `count` shards, and each shard's
        /// helpers agree with `owns`.
        #[test]
        fn shards_partition_every_range_exactly(n in 0u64..500, count in 1u64..17) {
            let shards: Vec<Shard> = (0..count).map(|i| Shard::new(i, count).unwrap()).collect();
            for item in 0..n {
                prop_assert_eq!(shards.iter().filter(|s| s.owns(item)).count(), 1);
            }
            let mut all: Vec<u64> = shards.iter().flat_map(|s| s.indices(n)).collect();
            all.sort_unstable();
            prop_assert_eq!(all, (0..n).collect::<Vec<_>>());
            for s in &shards {
                let owned: Vec<u64> = (0..n).filter(|&i| s.owns(i)).collect();
                prop_assert_eq!(s.len_of(n), owned.len() as u64);
                prop_assert_eq!(s.indices(n).collect::<Vec<_>>(), owned.clone());
                prop_assert_eq!((0..s.len_of(n)).map(|l| s.global(l)).collect::<Vec<_>>(), owned.clone());
                prop_assert_eq!(s.split(0..n), owned);
                prop_assert_eq!(Shard::parse(&s.to_string(), "x").unwrap(), *s);
            }
        }
    }
}
