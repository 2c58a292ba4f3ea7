//! Files a user hands cudafuzz or gets back from it: read with a size limit, written with the
//! user's normal permissions, and never written over one of the command's own inputs.
//!
//! Seeds, manifests and configurations are small; a path that names something huge (or endless,
//! like `/dev/zero`) must fail at once with a clear error instead of eating memory, and the
//! file's reported size cannot be trusted (devices, pipes and `/proc` files report 0), so
//! [`read`] reads through [`std::io::Read::take`]. Sanitizer XML is not read here: a long
//! campaign's report may legitimately be large.
//!
//! Whether two paths are the same file is decided by device and inode ([`same_file`]), so hard
//! links, symbolic links and `dir/../dir` spellings all count.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The largest seed, case, manifest or configuration file cudafuzz reads: 16 MiB.
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

/// A file larger than [`MAX_INPUT_BYTES`] (carried inside an [`io::Error`] so every caller's
/// existing `cannot read` error names the file and says why).
#[derive(Debug, thiserror::Error)]
#[error("larger than {} MiB, the limit for seeds, manifests and configurations: is this the file you meant?", MAX_INPUT_BYTES >> 20)]
pub struct TooLarge;

/// Reads a user's file, failing once it passes [`MAX_INPUT_BYTES`] (without reading further).
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(io::Error::new(io::ErrorKind::InvalidData, TooLarge));
    }
    Ok(bytes)
}

/// [`read`] for a text file: UTF-8 is required, and the error says so.
pub fn read_text(path: &Path) -> io::Result<String> {
    String::from_utf8(read(path)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8 text (invalid byte at offset {})", e.utf8_error().valid_up_to())))
}

/// Whether `a` and `b` name the same existing file (same device and inode). A path that does
/// not exist is nobody's twin.
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// The first of `inputs` that `output` would write over (the same file, however spelled).
pub fn clobbered_input<'a>(output: &Path, inputs: impl IntoIterator<Item = &'a Path>) -> Option<PathBuf> {
    inputs.into_iter().find(|i| same_file(output, i)).map(Path::to_path_buf)
}

/// A temporary file in `dir` to be renamed over its final name: created with mode 0666 less the
/// umask, like any file the user makes (tempfile's own default of 0600 would leave reports and
/// seeds unreadable to the user's group).
pub fn temp_in(dir: &Path) -> io::Result<tempfile::NamedTempFile> {
    tempfile::Builder::new().prefix(".cudafuzz-").permissions(std::fs::Permissions::from_mode(0o666)).tempfile_in(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_that_never_ends_fails_at_the_limit() {
        let e = read(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("16 MiB"), "{e}");
    }

    #[test]
    fn links_are_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        std::fs::write(&a, "{}").unwrap();
        std::fs::hard_link(&a, dir.path().join("b.json")).unwrap();
        std::os::unix::fs::symlink(&a, dir.path().join("c.json")).unwrap();
        assert!(same_file(&a, &dir.path().join("b.json")));
        assert!(same_file(&dir.path().join("c.json"), &dir.path().join(".").join("a.json")));
        assert!(!same_file(&a, &dir.path().join("missing.json")));
        assert_eq!(read_text(&dir.path().join("c.json")).unwrap(), "{}");
    }

    #[test]
    fn temporary_files_follow_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let t = temp_in(dir.path()).unwrap();
        let mode = t.as_file().metadata().unwrap().permissions().mode() & 0o777;
        let umask = unsafe { libc::umask(0o022) };
        unsafe { libc::umask(umask) };
        assert_eq!(mode, 0o666 & !(umask as u32), "mode {mode:o}");
    }
}
