//! Typed errors, one enum per stage.
//!
//! Messages are short and lowercase and do not repeat their cause, which hangs off `#[source]`;
//! the CLI prints the whole chain once. Errors a user can cause name the file or field and say
//! what to do about it.

use std::path::PathBuf;

use thiserror::Error;

/// A file or directory that could not be read or written, with the operating system's reason
/// (permission denied, is a directory, not found) as its source. Every stage's error enum
/// carries its file failures as this one value.
#[derive(Debug, Error)]
#[error("{path}: cannot {action}")]
pub struct FileError {
    /// The file or directory.
    pub path: PathBuf,
    /// What was being done: `read`, `write`, `create directory`, `read manifest`...
    pub action: &'static str,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

impl FileError {
    /// The error for an I/O failure while doing `action` on `path`, for `map_err`.
    pub fn at(path: impl Into<PathBuf>, action: &'static str) -> impl FnOnce(std::io::Error) -> FileError {
        let path = path.into();
        move |source| FileError { path, action, source }
    }
}

/// The most characters of one line of user text an error message quotes.
pub const MAX_QUOTED_LINE: usize = 160;

/// A parser's message with every line cut to [`MAX_QUOTED_LINE`] characters (`...` marks a
/// cut): TOML errors quote the offending line, and a line of a megabyte would bury the message.
pub fn clip_lines(message: &str) -> String {
    let clip = |line: &str| match line.char_indices().nth(MAX_QUOTED_LINE) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_string(),
    };
    message.trim_end().lines().map(clip).collect::<Vec<_>>().join("\n")
}

/// An error and all its causes on one line, `outer: cause: root cause`: how a library error
/// becomes the message of a verdict or a report entry.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// A case that cannot be used.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum CaseError {
    /// The case was written by another format version.
    #[error("case version {found} is not supported (this build reads version {supported})")]
    UnknownVersion {
        /// Version found in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// A field is out of range or inconsistent with another.
    #[error("field `{field}`: {problem}")]
    Invalid {
        /// Dotted path of the field, e.g. `layouts.q.pad`.
        field: String,
        /// What is wrong and, where it helps, how to fix it.
        problem: String,
    },
}

/// A seed file that cannot be read or written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SeedError {
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] FileError),
    /// The file looks like JSON but does not parse as a seed or a case.
    #[error("{path}: not a valid cudafuzz seed (line {line}, column {column}): {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// serde's description, naming the field.
        message: String,
    },
    /// The file is not a seed at all (empty, not JSON, not an object, a byte-order mark).
    #[error("{path}: not a cudafuzz seed: {problem}")]
    NotASeed {
        /// The file.
        path: PathBuf,
        /// What it is instead, and what a seed is.
        problem: String,
    },
    /// The file parses, but the case in it is invalid.
    #[error("{path}: invalid case")]
    Case {
        /// The file.
        path: PathBuf,
        /// What is wrong with the case.
        #[source]
        source: CaseError,
    },
    /// The seed's format tag or version is not one this build reads.
    #[error("{path}: seed format `{format}` version {version} is not supported (this build reads `{expected}` versions 1 to {supported}); replay it with the cudafuzz that wrote it")]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// Format tag found.
        format: String,
        /// Version found, as the file holds it (`9`, `"2" (not a number)`, `(none)`).
        version: String,
        /// Format tag expected.
        expected: &'static str,
        /// Version this build reads.
        supported: u32,
    },
    /// A key appears twice in one object (JSON decoders keep the last silently).
    #[error("{path}: key `{key}` appears twice; keep one")]
    RepeatedKey {
        /// The file.
        path: PathBuf,
        /// Where: `case.dims.d`.
        key: String,
    },
    /// Raw fuzzer bytes could not be decoded.
    #[error("{path}: raw fuzzer input could not be decoded: {message}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// arbitrary's message.
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_lines_are_cut_short() {
        let long = format!("TOML parse error at line 1\n1 | x = {}\n  |     ^\ninvalid string", "é".repeat(5000));
        let clipped = clip_lines(&long);
        assert!(clipped.lines().all(|l| l.chars().count() <= MAX_QUOTED_LINE + 3), "{clipped}");
        assert!(clipped.contains("...") && clipped.ends_with("invalid string"));
        assert_eq!(clip_lines("short\n"), "short");
    }
}
