//! Helpers shared by the GPU test files.

use std::path::PathBuf;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The cudafuzz binary that implements `worker`: `$CUDAFUZZ_BIN`, cargo's, or a staged `.gpu/bin`.
pub fn exe() -> PathBuf {
    if let Some(p) = std::env::var_os("CUDAFUZZ_BIN") {
        return p.into();
    }
    let cargo = PathBuf::from(env!("CARGO_BIN_EXE_cudafuzz"));
    if cargo.exists() {
        return cargo;
    }
    root().join(".gpu/bin/cudafuzz")
}
