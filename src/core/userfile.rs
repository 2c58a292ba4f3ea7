//! Files a user hands cudafuzz or gets back from it: read with a size limit, written with the
//! user's normal permissions, and never written over one of the command's own inputs.
//!
//! Every file a user names is read here, through one function ([`read_limited`]): a directory
//! or a device (`/dev/zero`, `/dev/urandom`) is refused by name before anything is read, a
//! stream (a FIFO, `<(jq ...)`) is read like a file, and nothing is read past the limit, since a
//! file's reported size cannot be trusted (pipes and `/proc` files report 0). Seeds, manifests,
//! configurations, reports and bug indexes share [`MAX_INPUT_BYTES`]; compute-sanitizer XML, which a
//! long batch can legitimately make large, has [`MAX_SANITIZER_XML_BYTES`].
//!
//! Whether two paths are the same file is decided by device and inode ([`same_file`]), so hard
//! links, symbolic links and `dir/../dir` spellings all count.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The largest seed, case, manifest or configuration file cudafuzz reads: 16 MiB.
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

/// The largest compute-sanitizer XML file cudafuzz reads: 256 MiB.
pub const MAX_SANITIZER_XML_BYTES: u64 = 256 << 20;

/// The largest kernel source or header cudafuzz reads: 64 MiB (generated headers run to a few).
pub const MAX_SOURCE_BYTES: u64 = 64 << 20;

/// The largest prebuilt module (`.cubin`, `.fatbin`, `.ptx`) cudafuzz reads: 1 GiB (a fatbin for
/// many architectures runs to hundreds of MiB).
pub const MAX_MODULE_BYTES: u64 = 1 << 30;

/// A file larger than the limit of its kind (carried inside an [`io::Error`] so every caller's
/// `cannot read` error names the file and says why).
#[derive(Debug, thiserror::Error)]
#[error("larger than {} MiB, the limit for {what}: is this the file you meant?", limit >> 20)]
pub struct TooLarge {
    /// The limit, in bytes.
    pub limit: u64,
    /// What kind of file has it.
    pub what: &'static str,
}

/// A path that names something that is not a file to read (carried inside an [`io::Error`]).
#[derive(Debug, thiserror::Error)]
#[error("is {what}, not a file: name a file (a pipe such as <(...) is fine)")]
pub struct NotAFile {
    /// `a directory`, `a device`.
    pub what: &'static str,
}

/// Reads a user's file, failing once it passes [`MAX_INPUT_BYTES`] (without reading further).
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    read_limited(path, MAX_INPUT_BYTES, "seeds, manifests, configurations and reports")
}

/// Reads a user's file of a kind whose limit is `limit` bytes (`what` names the kind in the
/// error): a directory or device is refused before anything is read, a regular file or a stream
/// is read up to the limit and refused past it.
pub fn read_limited(path: &Path, limit: u64, what: &'static str) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::metadata(path)?.file_type();
    let not_a_file = |what| io::Error::new(io::ErrorKind::InvalidInput, NotAFile { what });
    if kind.is_dir() {
        return Err(not_a_file("a directory"));
    }
    if kind.is_block_device() || kind.is_char_device() {
        return Err(not_a_file("a device"));
    }
    let file = File::open(path)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(io::ErrorKind::InvalidData, TooLarge { limit, what }));
    }
    Ok(bytes)
}

/// [`read`] for a text file: UTF-8 is required, and the error says so.
pub fn read_text(path: &Path) -> io::Result<String> {
    utf8(read(path)?)
}

/// A kernel source or header, up to [`MAX_SOURCE_BYTES`].
pub fn read_source(path: &Path) -> io::Result<Vec<u8>> {
    read_limited(path, MAX_SOURCE_BYTES, "kernel sources and headers")
}

/// [`read_source`] for text: UTF-8 is required, and the error says so.
pub fn read_source_text(path: &Path) -> io::Result<String> {
    utf8(read_source(path)?)
}

/// A prebuilt module, up to [`MAX_MODULE_BYTES`].
pub fn read_module(path: &Path) -> io::Result<Vec<u8>> {
    read_limited(path, MAX_MODULE_BYTES, "prebuilt modules")
}

fn utf8(bytes: Vec<u8>) -> io::Result<String> {
    String::from_utf8(bytes)
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
    fn devices_and_directories_are_refused_and_a_stream_stops_at_the_limit() {
        assert!(read(Path::new("/dev/zero")).unwrap_err().to_string().contains("is a device"));
        assert!(read(Path::new("/")).unwrap_err().to_string().contains("is a directory"));
        // A FIFO that never ends (a writer that keeps writing) is read up to the limit only.
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("endless");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo of a path in our own temporary directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
                let block = vec![b' '; 1 << 20];
                // Stops when the reader closes its end (EPIPE).
                while f.write_all(&block).is_ok() {}
            })
        };
        let e = read(&fifo).unwrap_err();
        assert!(e.to_string().contains("16 MiB"), "{e}");
        writer.join().unwrap();
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
