//! Run-length coding of arena images: [`encode`], [`decode`] and the [`fnv1a64`] checksum.
//!
//! An arena image is mostly long runs: redzones of one canary byte, an untouched output of one
//! repeated sentinel, a zero-filled accumulator. Coding those as runs keeps an emitted repro a few
//! kilobytes for a minimised case while it still rebuilds every byte exactly.

/// Shortest run of a repeated 1-, 2- or 4-byte pattern that is coded as a run rather than copied.
const MIN_RUN: usize = 32;

/// One allocation's initial bytes, run-length coded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The runs in order; their lengths add up to the allocation's size.
    pub runs: Vec<Run>,
    /// The bytes of the literal runs, concatenated.
    pub literal: Vec<u8>,
}

/// A stretch of an allocation's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Run {
    /// `bytes` bytes copied from the literal data.
    Literal {
        /// Length.
        bytes: u64,
    },
    /// `bytes` bytes of `pattern` repeated (`out[j] = pattern[j % pattern.len()]`); the pattern
    /// is 1, 2 or 4 bytes long.
    Fill {
        /// The repeated bytes.
        pattern: Vec<u8>,
        /// Length in bytes (not necessarily a multiple of the pattern's length).
        bytes: u64,
    },
}

impl Run {
    /// Length in bytes.
    pub fn bytes(&self) -> u64 {
        match self {
            Run::Literal { bytes } | Run::Fill { bytes, .. } => *bytes,
        }
    }
}

/// Codes `data` as runs: a 1-, 2- or 4-byte pattern repeated over at least 32 bytes becomes a
/// [`Run::Fill`], everything else is literal.
pub fn encode(data: &[u8]) -> Encoded {
    let n = data.len();
    let mut runs = Vec::new();
    let mut literal = Vec::new();
    let mut lit_start = 0;
    let mut i = 0;
    let flush = |from: usize, to: usize, runs: &mut Vec<Run>, literal: &mut Vec<u8>| {
        if to > from {
            runs.push(Run::Literal { bytes: (to - from) as u64 });
            literal.extend_from_slice(&data[from..to]);
        }
    };
    while i < n {
        match run_at(data, i) {
            Some((p, len)) => {
                flush(lit_start, i, &mut runs, &mut literal);
                runs.push(Run::Fill { pattern: data[i..i + p].to_vec(), bytes: len as u64 });
                i += len;
                lit_start = i;
            }
            None => i += 1,
        }
    }
    flush(lit_start, n, &mut runs, &mut literal);
    Encoded { runs, literal }
}

/// The shortest period (1, 2 or 4 bytes) repeated over at least [`MIN_RUN`] bytes from `i`, with
/// the run's length.
fn run_at(data: &[u8], i: usize) -> Option<(usize, usize)> {
    let n = data.len();
    for p in [1usize, 2, 4] {
        if i + p > n {
            return None;
        }
        let mut j = i + p;
        while j < n && data[j] == data[j - p] {
            j += 1;
        }
        if j - i >= MIN_RUN {
            return Some((p, j - i));
        }
    }
    None
}

/// Expands runs back into bytes (the inverse of [`encode`]; what the emitted programs do).
pub fn decode(runs: &[Run], literal: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut lit = 0usize;
    for r in runs {
        match r {
            Run::Literal { bytes } => {
                out.extend_from_slice(&literal[lit..lit + *bytes as usize]);
                lit += *bytes as usize;
            }
            Run::Fill { pattern, bytes } => out.extend((0..*bytes as usize).map(|j| pattern[j % pattern.len()])),
        }
    }
    out
}

/// FNV-1a, 64 bits: the checksum the emitted C++ verifies each decoded image against.
pub fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
