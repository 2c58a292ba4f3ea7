//! The one reader of `#include` lines: what a line includes and which project file that names.
//! The compile cache follows includes to key a build on every header it uses; the repro
//! emitter follows the same includes to inline them, so both must agree on every line.

use std::path::{Path, PathBuf};

/// What one `#include` line names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Include {
    /// `#include "name"`: the including file's directory first, then the include directories.
    Quoted(String),
    /// `#include <name>`: the include directories only.
    Angled(String),
    /// `#include MACRO`: cannot be followed without the preprocessor.
    Macro,
}

/// Parses a preprocessor include line (`#include`, `# include`); `None` for any other line,
/// `#include_next` and the like included (they are not followed).
pub fn parse_include(line: &str) -> Option<Include> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start().strip_prefix("include")?;
    if rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let rest = rest.trim_start();
    let parse = |open: char, close: char| rest.strip_prefix(open).and_then(|r| r.find(close).map(|end| r[..end].to_string()));
    Some(if let Some(n) = parse('"', '"') {
        Include::Quoted(n)
    } else if let Some(n) = parse('<', '>') {
        Include::Angled(n)
    } else {
        Include::Macro
    })
}

/// Every include line of `text`, in order.
pub fn includes(text: &str) -> Vec<Include> {
    text.lines().filter_map(parse_include).collect()
}

/// The project file `name` resolves to, as NVRTC searches: for a quoted include `here` (the
/// including file's directory) first, then `dirs` in order; canonical where possible. `None`
/// for a header outside the project (CUDA's, the system's).
pub fn resolve(name: &str, quoted: bool, here: &Path, dirs: &[PathBuf]) -> Option<PathBuf> {
    let local = quoted.then(|| here.join(name)).into_iter();
    local.chain(dirs.iter().map(|d| d.join(name))).find(|p| p.is_file()).map(|p| p.canonicalize().unwrap_or(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_lines_are_recognised() {
        let text = "#include \"a.cuh\"\n  #  include <cuda_fp16.h>\n#include_next <x.h>\n#include HEADER\n// #include \"c.h\"\n";
        assert_eq!(includes(text), [Include::Quoted("a.cuh".into()), Include::Angled("cuda_fp16.h".into()), Include::Macro]);
    }
}
