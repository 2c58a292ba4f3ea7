//! Where the shipped kernels are, and turning a `--kernel` argument into a manifest path.
//!
//! A kernel is named either by a path to its manifest or by the `name` in a shipped manifest.
//! Shipped kernels live in `kernels/` of the source tree; `CUDAFUZZ_KERNELS` points elsewhere.

use std::path::{Path, PathBuf};

use crate::manifest::{find_manifests, Manifest, ManifestError};

/// The shipped kernels directory: `$CUDAFUZZ_KERNELS`, else `./kernels`, else the source tree's.
pub fn kernels_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CUDAFUZZ_KERNELS") {
        return PathBuf::from(d);
    }
    let here = PathBuf::from("kernels");
    if here.join("reference").is_dir() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels")
}

/// The GPU fp64 reference kernel's manifest, when shipped.
pub fn reference_manifest() -> Option<PathBuf> {
    let p = kernels_dir().join("reference").join("attention_f64.toml");
    p.is_file().then_some(p)
}

/// The `cudafuzz` executable that serves as the worker for programs that are not it (the
/// cargo-fuzz target): `$CUDAFUZZ_BIN`, else `../bin/cudafuzz` beside the running program (the
/// `.gpu/` layout of gpu-pack), else `target/release/cudafuzz` or `target/debug/cudafuzz` under
/// the current directory, else `cudafuzz` on `PATH`.
pub fn worker_exe() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("CUDAFUZZ_BIN") {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(format!("CUDAFUZZ_BIN={}: no such file; point it at the cudafuzz binary", p.display())) };
    }
    let beside = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join("../bin/cudafuzz")));
    let on_path = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).map(|d| d.join("cudafuzz")).collect::<Vec<_>>()).unwrap_or_default();
    beside
        .into_iter()
        .chain([PathBuf::from("target/release/cudafuzz"), PathBuf::from("target/debug/cudafuzz")])
        .chain(on_path)
        .find(|p| p.is_file())
        .ok_or_else(|| "the cudafuzz binary (the worker) was not found: run `cargo build --release` in the project root, or set CUDAFUZZ_BIN to its path".to_string())
}

/// Every shipped manifest, loaded; the ones that fail to load are returned as errors.
pub fn shipped() -> Vec<Result<Manifest, ManifestError>> {
    find_manifests(&kernels_dir()).iter().map(|p| Manifest::load(p)).collect()
}

/// Resolves `--kernel`: an existing path, or the name of a shipped manifest.
pub fn resolve(spec: &str) -> Result<Manifest, String> {
    let p = Path::new(spec);
    if p.is_file() {
        return Manifest::load(p).map_err(|e| e.to_string());
    }
    let dir = kernels_dir();
    for path in find_manifests(&dir) {
        if let Ok(m) = Manifest::load(&path) {
            if m.name == spec {
                return Ok(m);
            }
        }
    }
    Err(format!(
        "kernel `{spec}` is neither a manifest file nor the name of a shipped kernel in {} (list them with `cudafuzz kernels`)",
        dir.display()
    ))
}
