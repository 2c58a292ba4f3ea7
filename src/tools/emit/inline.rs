//! Self-contained kernel sources: [`inline_source`] replaces every project `#include` with the
//! header's text.
//!
//! Every `#include` that the harness's NVRTC compile resolves in the project (the including
//! file's directory for quoted includes, then the kernel's directory, its parent and
//! `kernels/include`, as [`Compiler::include_dirs`] lists them) is replaced by the header's text,
//! with `#line` directives so that compiler messages and compute-sanitizer reports name the
//! original files and lines; CUDA and system headers stay includes. A header with `#pragma once`
//! is wrapped in an include guard instead, which keeps its once-only meaning even inside
//! conditionals. The guards are listed ([`InlinedSource::guards`]) so that an emitter that puts
//! two sources, or one source twice, into one file can undefine them in between: each copy must
//! see its headers again, under its own defines.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{c_escape, relative_display, EmitError};
use crate::engine::compile::include::{parse_include, resolve, Include};
use crate::engine::compile::{builtin, with_option_dirs, Compiler};

/// A kernel source with its project headers inlined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InlinedSource {
    /// The self-contained text (with `#line` directives).
    pub text: String,
    /// Every file that went into it, main source first, as relative paths.
    pub files: Vec<String>,
    /// The include-guard macros that stand in for `#pragma once` (`CFR_ONCE_0`, ...).
    pub guards: Vec<String>,
    /// The include lines left as they were (CUDA and system headers), each once, in order.
    pub kept_includes: Vec<String>,
}

fn is_pragma_once(line: &str) -> bool {
    let Some(rest) = line.trim_start().strip_prefix('#') else { return false };
    let mut words = rest.split_whitespace();
    words.next() == Some("pragma") && words.next() == Some("once") && words.next().is_none_or(|w| w.starts_with("//"))
}

/// Where the built-in headers appear to live in an inlined source (`#line` names and notes):
/// they have no file, their text comes from the binary.
const BUILTIN_DIR: &str = "<cudafuzz built-in>";

/// Inlines every project header of a kernel source (see the module docs), searching the
/// include folders its NVRTC `options` add too (a manifest's `include`), and the built-in
/// headers last, as the compile does.
pub fn inline_source(source: &Path, options: &[String]) -> Result<InlinedSource, EmitError> {
    let canon = source.canonicalize().map_err(|e| EmitError::Source { path: source.to_path_buf(), source: e })?;
    let dirs = with_option_dirs(&Compiler::include_dirs(&canon), options);
    let mut state = Inliner { dirs, stack: Vec::new(), guards: BTreeMap::new(), files: Vec::new(), kept: Vec::new(), out: String::new() };
    state.file(&canon)?;
    let mut guards: Vec<(usize, String)> = state.guards.values().map(|&g| (g, format!("CFR_ONCE_{g}"))).collect();
    guards.sort();
    Ok(InlinedSource { text: state.out, files: state.files, guards: guards.into_iter().map(|(_, g)| g).collect(), kept_includes: state.kept })
}

struct Inliner {
    dirs: Vec<PathBuf>,
    stack: Vec<PathBuf>,
    guards: BTreeMap<PathBuf, usize>,
    files: Vec<String>,
    kept: Vec<String>,
    out: String,
}

impl Inliner {
    /// A file's text: a built-in header's from the binary, any other from disk.
    fn read(path: &Path) -> Result<String, EmitError> {
        if let Some(text) = path.strip_prefix(BUILTIN_DIR).ok().and_then(|n| n.to_str()).and_then(builtin::header) {
            return Ok(text.to_string());
        }
        crate::core::userfile::read_source_text(path).map_err(|e| EmitError::Source { path: path.to_path_buf(), source: e })
    }

    /// The header an include names: a project file, else a built-in header, else `None` (a
    /// CUDA or system header, kept as an include).
    fn find(&self, name: &str, quoted: bool, here: &Path) -> Option<PathBuf> {
        resolve(name, quoted, here, &self.dirs).or_else(|| builtin::header(name).map(|_| Path::new(BUILTIN_DIR).join(name)))
    }

    fn file(&mut self, path: &Path) -> Result<(), EmitError> {
        let text = Inliner::read(path)?;
        let shown = relative_display(path);
        if !self.files.contains(&shown) {
            self.files.push(shown.clone());
        }
        self.stack.push(path.to_path_buf());
        let _ = writeln!(self.out, "#line 1 \"{}\"", c_escape(&shown));
        let here = path.parent().map(Path::to_path_buf).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            if is_pragma_once(line) {
                let _ = writeln!(self.out, "// (once-only header: the CFR_ONCE include guard around it stands in for its pragma)");
                continue;
            }
            let (name, quoted) = match parse_include(line) {
                None => {
                    self.out.push_str(line);
                    self.out.push('\n');
                    continue;
                }
                Some(Include::Macro) => return Err(EmitError::MacroInclude { file: shown, line: i + 1, text: line.trim().to_string() }),
                Some(Include::Quoted(n)) => (n, true),
                Some(Include::Angled(n)) => (n, false),
            };
            match self.find(&name, quoted, &here) {
                Some(header) => self.header(&header, line, i, &shown)?,
                None => self.keep(line),
            }
        }
        self.stack.pop();
        Ok(())
    }

    /// A CUDA or system header: stays an include.
    fn keep(&mut self, line: &str) {
        let trimmed = line.trim().to_string();
        if !self.kept.contains(&trimmed) {
            self.kept.push(trimmed);
        }
        self.out.push_str(line);
        self.out.push('\n');
    }

    /// A project header included from line `i` (0-based) of `shown`: its text, guarded when it
    /// is once-only, then the including file's numbering resumed.
    fn header(&mut self, header: &Path, line: &str, i: usize, shown: &str) -> Result<(), EmitError> {
        let header_text = Inliner::read(header)?;
        let once = header_text.lines().any(is_pragma_once);
        let header_shown = relative_display(header);
        if self.stack.iter().any(|p| p == header) {
            if once {
                let _ = writeln!(self.out, "// {} (already being included; #pragma once)", line.trim());
                return Ok(());
            }
            return Err(EmitError::IncludeCycle { file: header_shown });
        }
        let _ = writeln!(self.out, "// {} -> inlined from {}", line.trim(), header_shown);
        let guard = once.then(|| {
            let n = self.guards.len();
            *self.guards.entry(header.to_path_buf()).or_insert(n)
        });
        if let Some(g) = guard {
            let _ = writeln!(self.out, "#ifndef CFR_ONCE_{g}\n#define CFR_ONCE_{g}");
        }
        self.file(header)?;
        if guard.is_some() {
            self.out.push_str("#endif\n");
        }
        let _ = writeln!(self.out, "// end of {header_shown}\n#line {} \"{}\"", i + 2, c_escape(shown));
        Ok(())
    }
}
