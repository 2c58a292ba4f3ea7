//! Where the shipped kernels are, and turning a `--kernel` argument into a manifest path.
//!
//! A kernel is named either by a path to its manifest or by the `name` in a shipped manifest.
//! Shipped kernels live in `kernels/` of the source tree; `CUDAFUZZ_KERNELS` points elsewhere.

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::core::manifest::{find_manifests, Manifest, ManifestError};

/// A kernel or the worker binary that cannot be found.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The manifest exists but does not load.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// Neither a manifest file nor a shipped kernel's name.
    #[error("kernel `{spec}` is neither a manifest file nor the name of a shipped kernel in {}{} (list them with `cudafuzz kernels`)", dir.display(), if *from_env { " (CUDAFUZZ_KERNELS)" } else { "" })]
    UnknownKernel {
        /// What was asked for.
        spec: String,
        /// The shipped kernels directory searched.
        dir: PathBuf,
        /// Whether `CUDAFUZZ_KERNELS` chose that directory.
        from_env: bool,
    },
    /// A path that exists but is not a manifest file (a directory, a device).
    #[error("kernel `{}`: is a directory or other non-file; name the manifest file inside it (`*.toml`)", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// A manifest path (relative to a configuration file) that does not exist.
    #[error(
        "kernel manifest `{spec}` not found (relative paths are taken from the configuration's directory); or name a shipped kernel, see `cudafuzz kernels`"
    )]
    ManifestNotFound {
        /// The path as written.
        spec: String,
    },
    /// `CUDAFUZZ_BIN` names no file.
    #[error("CUDAFUZZ_BIN={}: no such file; point it at the cudafuzz binary", path.display())]
    BinMissing {
        /// The path it names.
        path: PathBuf,
    },
    /// No cudafuzz binary to serve as the worker.
    #[error("the cudafuzz binary (the worker) was not found: run `cargo build --release` in the project root, or set CUDAFUZZ_BIN to its path")]
    NoWorker,
}

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

/// The directory of the built-in ops' GPU fp64 reference kernels (`<op>_f64.toml`), when
/// shipped.
pub fn reference_dir() -> Option<PathBuf> {
    let p = kernels_dir().join("reference");
    p.is_dir().then_some(p)
}

/// The `cudafuzz` executable that serves as the worker for programs that are not it (the
/// cargo-fuzz target): `$CUDAFUZZ_BIN`, else `../bin/cudafuzz` beside the running program (the
/// `.gpu/` layout of gpu-pack), else `target/release/cudafuzz` or `target/debug/cudafuzz` under
/// the current directory, else `cudafuzz` on `PATH`.
pub fn worker_exe() -> Result<PathBuf, RegistryError> {
    if let Some(p) = std::env::var_os("CUDAFUZZ_BIN") {
        let path = PathBuf::from(p);
        return if path.is_file() { Ok(path) } else { Err(RegistryError::BinMissing { path }) };
    }
    let beside = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join("../bin/cudafuzz")));
    let on_path = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).map(|d| d.join("cudafuzz")).collect::<Vec<_>>()).unwrap_or_default();
    beside
        .into_iter()
        .chain([PathBuf::from("target/release/cudafuzz"), PathBuf::from("target/debug/cudafuzz")])
        .chain(on_path)
        .find(|p| p.is_file())
        .ok_or(RegistryError::NoWorker)
}

/// Every shipped manifest, loaded; the ones that fail to load are returned as errors.
pub fn shipped() -> Vec<Result<Manifest, ManifestError>> {
    find_manifests(&kernels_dir()).iter().map(|p| Manifest::load(p)).collect()
}

/// Resolves `--kernel`: an existing path, or the name of a shipped manifest.
pub fn resolve(spec: &str) -> Result<Manifest, RegistryError> {
    let p = Path::new(spec);
    if p.is_file() {
        return Ok(Manifest::load(p)?);
    }
    let dir = kernels_dir();
    for path in find_manifests(&dir) {
        if let Ok(m) = Manifest::load(&path) {
            if m.name == spec {
                return Ok(m);
            }
        }
    }
    if p.exists() {
        return Err(RegistryError::NotAFile { path: p.to_path_buf() });
    }
    Err(RegistryError::UnknownKernel { spec: spec.to_string(), dir, from_env: std::env::var_os("CUDAFUZZ_KERNELS").is_some() })
}

/// Resolves a kernel named in a configuration file under `base`: a manifest path (anything
/// ending in `.toml` or holding a `/`), taken relative to `base`, else to the current
/// directory, else to the source tree; or a shipped kernel's name.
pub fn resolve_relative(base: &Path, spec: &str) -> Result<Manifest, RegistryError> {
    let looks_like_path = spec.ends_with(".toml") || spec.contains('/');
    if !looks_like_path {
        return resolve(spec);
    }
    let tree = kernels_dir().parent().map(Path::to_path_buf);
    let candidates = [Some(base.join(spec)), Some(PathBuf::from(spec)), tree.map(|t| t.join(spec))];
    match candidates.iter().flatten().find(|p| p.is_file()) {
        Some(p) => Ok(Manifest::load(p)?),
        None => Err(RegistryError::ManifestNotFound { spec: spec.to_string() }),
    }
}
