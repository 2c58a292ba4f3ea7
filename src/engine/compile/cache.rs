//! The on-disk cubin cache: its key ([`Key`]) and atomic storage.
//!
//! A key is the SHA-256 of everything that can change the cubin: the NVRTC version, the source
//! path (it ends up in `-lineinfo` and `__FILE__`) and text, the text of every header the source
//! includes from its own directory tree and `kernels/include` (found by following `#include`
//! lines transitively, which over-approximates: conditional includes are all followed), the
//! name, size and modification time of every other included header as found in the CUDA include
//! directory, and the complete option list (architecture, defines in sorted order, include
//! paths, manifest options). An `#include MACRO` that cannot be followed makes every header-like
//! file in the kernel's directory and `kernels/include` part of the key instead.
//!
//! Entries are `<key>.cubin` plus `<key>.log` and `<key>.entry` (the entry's symbol: the lowered
//! name of a C++ entry); each is written to a temporary file in the cache
//! directory and renamed into place, so a crash or a concurrent compiler never leaves a torn
//! entry, and the cubin (written last) marks the entry complete.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use super::include::{includes, resolve, Include};

/// The default cache directory: `$CUDAFUZZ_CACHE/cubin`, else `$XDG_CACHE_HOME/cudafuzz/cubin`,
/// else `~/.cache/cudafuzz/cubin`, else `./.cudafuzz-cache/cubin`.
pub fn default_dir() -> PathBuf {
    let var = |v: &str| std::env::var_os(v).filter(|s| !s.is_empty()).map(PathBuf::from);
    let root = var("CUDAFUZZ_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("cudafuzz")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("cudafuzz")))
        .unwrap_or_else(|| PathBuf::from(".cudafuzz-cache"));
    root.join("cubin")
}

/// What the cache directory holds: complete entries (a `.cubin` each) and their bytes, logs
/// and leftovers included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Cached cubins.
    pub cubins: u64,
    /// Bytes of every file in the directory.
    pub bytes: u64,
}

/// What `dir` holds; an absent directory holds nothing.
pub fn usage(dir: &Path) -> std::io::Result<CacheUsage> {
    let mut u = CacheUsage::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(u),
        Err(e) => return Err(e),
    };
    for e in entries {
        let e = e?;
        let meta = e.metadata()?;
        if meta.is_file() {
            u.bytes += meta.len();
            u.cubins += (e.path().extension().is_some_and(|x| x == "cubin")) as u64;
        }
    }
    Ok(u)
}

/// Removes every file the cache keeps in `dir` (`*.cubin`, `*.log` and temporary files left by
/// an interrupted write), and nothing else; returns what was removed.
pub fn clear(dir: &Path) -> std::io::Result<CacheUsage> {
    let before = usage(dir)?;
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(CacheUsage::default()) };
    for e in entries {
        let path = e?.path();
        let ours = path.extension().is_some_and(|x| x == "cubin" || x == "log" || x == "entry")
            || path.file_name().is_some_and(|n| n.to_string_lossy().starts_with(".tmp"));
        if ours && path.is_file() {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(before)
}

/// Builds a cache key from the pieces of one compilation.
pub(crate) struct Key {
    hasher: Sha256,
}

impl Key {
    /// A key for this NVRTC version.
    pub fn new(nvrtc: (i32, i32)) -> Key {
        let mut hasher = Sha256::new();
        hasher.update(b"cudafuzz nvrtc cubin cache v1\0");
        hasher.update(format!("nvrtc {}.{}\0", nvrtc.0, nvrtc.1).as_bytes());
        Key { hasher }
    }

    /// Adds a labelled, length-prefixed item.
    pub fn add(&mut self, label: &str, bytes: &[u8]) {
        self.hasher.update(label.as_bytes());
        self.hasher.update(b"\0");
        self.hasher.update((bytes.len() as u64).to_le_bytes());
        self.hasher.update(bytes);
    }

    /// The hex digest.
    pub fn finish(self) -> String {
        self.hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Adds the source's include closure to the key.
///
/// `dirs` are the project include directories (kernel dir, its parent, `kernels/include`),
/// searched after the including file's own directory for quoted includes; `cuda` is the CUDA
/// include directory, whose headers are keyed by name, size and mtime only; `fallback` are the
/// directories whose header-like files are all hashed when an include cannot be followed.
pub(crate) fn add_dependencies(key: &mut Key, source: &Path, text: &str, dirs: &[PathBuf], cuda: Option<&Path>, fallback: &[PathBuf]) {
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut system: BTreeSet<String> = BTreeSet::new();
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut unfollowed = false;
    let mut stack: Vec<(PathBuf, String)> = vec![(source.to_path_buf(), text.to_string())];
    seen.insert(source.to_path_buf());
    while let Some((file, text)) = stack.pop() {
        let here = file.parent().map(Path::to_path_buf).unwrap_or_default();
        for inc in includes(&text) {
            let (name, quoted) = match inc {
                Include::Quoted(n) => (n, true),
                Include::Angled(n) => (n, false),
                Include::Macro => {
                    unfollowed = true;
                    continue;
                }
            };
            match resolve(&name, quoted, &here, dirs) {
                Some(p) => {
                    if seen.insert(p.clone()) {
                        if let Ok(bytes) = crate::core::userfile::read_source(&p) {
                            stack.push((p.clone(), String::from_utf8_lossy(&bytes).into_owned()));
                            files.push((p, bytes));
                        }
                    }
                }
                None => {
                    let stamp = cuda
                        .map(|d| d.join(&name))
                        .and_then(|p| std::fs::metadata(p).ok())
                        .map(|m| {
                            let mtime = m.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_nanos()).unwrap_or(0);
                            format!("{} {}", m.len(), mtime)
                        })
                        .unwrap_or_else(|| "not found".into());
                    system.insert(format!("{name} {stamp}"));
                }
            }
        }
    }
    files.sort();
    for (p, bytes) in &files {
        key.add(&format!("header {}", p.display()), bytes);
    }
    for s in &system {
        key.add("system header", s.as_bytes());
    }
    if unfollowed {
        let mut all: Vec<PathBuf> = Vec::new();
        for d in fallback {
            let Ok(entries) = std::fs::read_dir(d) else { continue };
            all.extend(
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_file() && p.extension().is_some_and(|x| ["cu", "cuh", "h", "hpp", "hh", "inc", "inl"].contains(&&*x.to_string_lossy()))),
            );
        }
        all.sort();
        for p in all {
            if let Ok(bytes) = crate::core::userfile::read_source(&p) {
                key.add(&format!("unfollowed {}", p.display()), &bytes);
            }
        }
    }
}

/// A cached cubin and its log, if a complete entry exists.
pub(crate) fn load(dir: &Path, key: &str) -> Option<Cached> {
    let cubin = std::fs::read(dir.join(format!("{key}.cubin"))).ok()?;
    if !cubin.starts_with(b"\x7fELF") {
        return None; // not a cubin (foreign or damaged file): recompile and overwrite.
    }
    let log = std::fs::read_to_string(dir.join(format!("{key}.log"))).unwrap_or_default();
    let symbol = std::fs::read_to_string(dir.join(format!("{key}.entry"))).ok().filter(|s| !s.is_empty());
    Some(Cached { cubin, log, symbol })
}

/// A cache entry: the cubin, NVRTC's log and the entry's symbol in the cubin (absent in
/// entries written before symbols were kept: the entry's own name is then checked).
pub(crate) struct Cached {
    pub cubin: Vec<u8>,
    pub log: String,
    pub symbol: Option<String>,
}

/// Stores an entry atomically (log and symbol first, cubin last).
pub(crate) fn store(dir: &Path, key: &str, cubin: &[u8], log: &str, symbol: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in [(format!("{key}.log"), log.as_bytes()), (format!("{key}.entry"), symbol.as_bytes()), (format!("{key}.cubin"), cubin)] {
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(bytes)?;
        tmp.as_file().sync_all().ok();
        tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_a_header() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("k.cu");
        std::fs::write(&src, "#include \"h.cuh\"\n").unwrap();
        std::fs::write(dir.path().join("h.cuh"), "#define X 1\n").unwrap();
        let key = || {
            let mut k = Key::new((13, 5));
            add_dependencies(&mut k, &src, "#include \"h.cuh\"\n", &[], None, &[]);
            k.finish()
        };
        let a = key();
        assert_eq!(a, key());
        std::fs::write(dir.path().join("h.cuh"), "#define X 2\n").unwrap();
        assert_ne!(a, key());
    }
}
