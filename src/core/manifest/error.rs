//! Manifest errors: [`ManifestError`], the one error type of the `manifest` module.
//!
//! It exists apart from the model so that loading and resolution share one vocabulary: every
//! variant names the manifest file, and all but `Io` and `Syntax` name the dotted field and say
//! what to change. [`ManifestError::I32Overflow`] is its own variant because it describes the
//! case and the kernel's interface, not a broken manifest, and callers report it as a finding.

use std::path::PathBuf;

use thiserror::Error;

/// A manifest that cannot be used, or a case a manifest cannot be resolved for.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] crate::core::error::FileError),
    /// A manifest of an older format: the command that converts it is named.
    #[error("{path}: this is a format-1 (attention-only) manifest; this cudafuzz reads format 2 (named tensors over named dims): convert it with `cudafuzz manifest migrate {path}` (writes the format-2 manifest beside it), then review the result (kernels/README.md describes the schema)")]
    OldFormat {
        /// The manifest file.
        path: PathBuf,
    },
    /// The file is not valid TOML.
    #[error("{path}: invalid toml: {message}")]
    Syntax {
        /// The manifest file.
        path: PathBuf,
        /// The TOML parser's message, with line and column.
        message: String,
    },
    /// A field is missing, unknown, out of range or inconsistent.
    #[error("{path}: field {field}: {problem}")]
    Invalid {
        /// The manifest file.
        path: PathBuf,
        /// Dotted field, e.g. `launch.args[3]` or `contract.head_dim`.
        field: String,
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// An expression does not parse, names an unknown variable, or evaluates to something
    /// unusable (a float where an integer is needed, a negative size, an overflow).
    #[error("{path}: field {field}: {problem} in expression \"{}\"{hint}", clip_expr(expr))]
    Expr {
        /// The manifest file.
        path: PathBuf,
        /// Dotted field, e.g. `launch.grid[0]`.
        field: String,
        /// The expression as written.
        expr: String,
        /// What is wrong.
        problem: String,
        /// Known names or the fix, starting with its own separator.
        hint: String,
    },
    /// An `i32` kernel argument evaluates to a value outside `i32` for this case: the kernel
    /// would receive a wrapped number. This is a property of the case *and* the kernel's
    /// interface, so it is its own variant for callers to report as a finding.
    #[error("{path}: field launch.args[{index}]: {ty} argument {index} \"{expr}\" evaluates to {value}, which does not fit in {ty} (the kernel would see {wrapped}); pass it as {{ i64 = ... }} to a 64-bit parameter, or narrow the contract")]
    I32Overflow {
        /// The argument's C type (`i32`, `u32`).
        ty: &'static str,
        /// The manifest file.
        path: PathBuf,
        /// Position of the argument in `launch.args` (0-based).
        index: usize,
        /// The expression as written.
        expr: String,
        /// The exact value.
        value: i64,
        /// What a C cast would have produced.
        wrapped: i64,
    },
}

/// The key below a table at which `T` fails to decode (`shape`, `init.const`), found by
/// writing the table back to TOML and decoding that text, whose error carries a position: a
/// `toml::Value` decodes without one, and an error must name the full key, not the section.
pub(super) fn failing_key<T: serde::de::DeserializeOwned>(v: &toml::Value) -> Option<String> {
    let text = toml::to_string(v.as_table()?).ok()?;
    let err = toml::from_str::<T>(&text).err()?;
    let at = err.span()?.start;
    let mut section = String::new();
    let mut key = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if let Some(h) = trimmed.strip_prefix('[').and_then(|h| h.trim_start_matches('[').split(']').next()) {
            section = h.trim().to_string();
        } else if let Some((k, _)) = trimmed.split_once('=') {
            key = Some(k.trim().trim_matches('"').to_string());
        }
        offset += line.len();
        if offset > at {
            break;
        }
    }
    let key = key?;
    Some(if section.is_empty() { key } else { format!("{section}.{key}") })
}

/// An expression as an error shows it: whole when short, else its start (a message stays one
/// readable line even for a 100,000-term expression).
fn clip_expr(expr: &str) -> String {
    if expr.chars().count() > 120 {
        expr.chars().take(100).chain("...".chars()).collect()
    } else {
        expr.to_string()
    }
}
