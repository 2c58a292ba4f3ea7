//! The headers cudafuzz ships (`kernels/include/`), built into the binary so that a kernel
//! anywhere compiles with `#include "cudafuzz.cuh"`: NVRTC is handed them by name
//! (`nvrtcCreateProgram`'s headers), and the compile cache keys every build on their text.
//!
//! A header of the same name found on disk in the kernel's include directories (its own
//! folder, the folder above, `kernels/include` of the tree it sits in, the manifest's
//! `include`) is used instead: that is how a kernel pins its own copy.

use std::path::{Path, PathBuf};

/// Every built-in header: (the name kernels include it by, its text).
pub const HEADERS: [(&str, &str); 3] = [
    ("cudafuzz.cuh", include_str!("../../../kernels/include/cudafuzz.cuh")),
    ("cf_coverage.cuh", include_str!("../../../kernels/include/cf_coverage.cuh")),
    ("cf_ptx.cuh", include_str!("../../../kernels/include/cf_ptx.cuh")),
];

/// The text of the built-in header `name`, if there is one.
pub fn header(name: &str) -> Option<&'static str> {
    HEADERS.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
}

/// The built-in headers a compile with project include directories `dirs` needs: those no
/// directory holds a file of the same name for.
pub fn needed(dirs: &[PathBuf]) -> Vec<(&'static str, &'static str)> {
    HEADERS.iter().copied().filter(|(name, _)| !dirs.iter().any(|d| d.join(name).is_file())).collect()
}

/// Whether `path` is a file the built-in headers could stand for (so tests can tell them
/// apart from a user's).
pub fn shadows(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| header(n).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_headers_are_the_shipped_files() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/include");
        for (name, text) in HEADERS {
            assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), text, "{name}");
        }
        let on_disk = std::fs::read_dir(&dir).unwrap().filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "cuh")).count();
        assert_eq!(on_disk, HEADERS.len(), "every header in kernels/include is built in");
    }

    #[test]
    fn a_header_on_disk_is_not_needed_from_the_binary() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("cudafuzz.cuh"), "// mine").unwrap();
        let needed: Vec<&str> = needed(&[tmp.path().to_path_buf()]).into_iter().map(|(n, _)| n).collect();
        assert_eq!(needed, ["cf_coverage.cuh", "cf_ptx.cuh"]);
        assert!(shadows(&tmp.path().join("cudafuzz.cuh")) && !shadows(&tmp.path().join("mine.cuh")));
    }
}
