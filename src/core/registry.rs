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

/// Loads a manifest a command is given: [`Manifest::load`] (every check that reads the file),
/// then [`crate::core::generate::check_satisfiable`] (a kernel some case can be drawn for).
pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
    let m = Manifest::load(path)?;
    crate::core::generate::check_satisfiable(&m)?;
    Ok(m)
}

/// Every shipped manifest, loaded; the ones that fail to load are returned as errors.
pub fn shipped() -> Vec<Result<Manifest, ManifestError>> {
    find_manifests(&kernels_dir()).iter().map(|p| load(p)).collect()
}

/// The manifests at `paths`, loaded: a file is one manifest, a folder every manifest under it
/// (as for the shipped ones). A path that is neither is an error of its own.
pub fn manifests_at(paths: &[PathBuf]) -> Vec<Result<Manifest, String>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let found = find_manifests(p);
            if found.is_empty() {
                out.push(Err(format!("{}: a folder with no manifest (*.toml) in it", p.display())));
            }
            out.extend(found.iter().map(|f| load(f).map_err(|e| crate::core::error::chain(&e))));
        } else if p.exists() {
            // The whole chain: "cannot read manifest" alone does not say that it is a device.
            out.push(load(p).map_err(|e| crate::core::error::chain(&e)));
        } else {
            out.push(Err(format!("{}: no such file or folder", p.display())));
        }
    }
    out
}

/// Resolves `--kernel`: an existing path, or the name of a shipped manifest.
pub fn resolve(spec: &str) -> Result<Manifest, RegistryError> {
    let p = Path::new(spec);
    if p.is_file() {
        return Ok(load(p)?);
    }
    // A path that exists but is not a file (a directory, a device) is no kernel name either.
    if p.exists() && (spec.contains('/') || p.extension().is_some()) {
        return Err(RegistryError::NotAFile { path: p.to_path_buf() });
    }
    let dir = kernels_dir();
    for path in find_manifests(&dir) {
        if let Ok(m) = Manifest::load(&path) {
            if m.name == spec {
                crate::core::generate::check_satisfiable(&m)?;
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
        Some(p) => Ok(load(p)?),
        None => Err(RegistryError::ManifestNotFound { spec: spec.to_string() }),
    }
}

/// What a seed records about a kernel that is not shipped: its name (to tell it from a shipped
/// kernel of the same name) and the SHA-256 of its manifest when the seed was saved (to warn
/// when the manifest found later is not the one the seed was saved with).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelOrigin {
    /// The manifest's `name`.
    pub name: String,
    /// Lowercase hex SHA-256 of the manifest file's bytes.
    pub sha256: String,
}

/// A kernel found for a seed, and what the user should know about how.
#[derive(Debug)]
pub struct SeedKernel {
    /// The manifest.
    pub manifest: Manifest,
    /// A warning to print (the manifest changed since the seed was saved; `--kernel` differs
    /// from the kernel the seed was saved for).
    pub warning: Option<String>,
}

/// Why a seed's kernel could not be found.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SeedKernelError {
    /// The seed's manifest is nowhere it was looked for.
    #[error("{}: its kernel `{kernel}` is not found (looked {looked}); pass --kernel PATH to its manifest", seed.display())]
    NotFound {
        /// The seed file.
        seed: PathBuf,
        /// The kernel as the seed names it.
        kernel: String,
        /// Where it was looked for.
        looked: String,
    },
    /// The seed was saved for a user kernel whose manifest is gone, and a shipped kernel has the
    /// same name: replaying on the shipped one would silently test another kernel.
    #[error("{}: it was saved for your kernel `{name}` ({kernel}, not found from the seed's folder); a shipped kernel is also named `{name}` but is not the same kernel, so it is not used: pass --kernel PATH to your manifest", seed.display())]
    NameClash {
        /// The seed file.
        seed: PathBuf,
        /// The kernel's name.
        name: String,
        /// The manifest path the seed names.
        kernel: String,
    },
    /// The seed's finding names another kernel than the one its case names.
    #[error("{}: its finding is of kernel `{finding}`, but its case names kernel `{kernel}`; fix `finding.kernel` or the case's `kernel` (or pass --kernel to replay it on another kernel)", seed.display())]
    OtherKernel {
        /// The seed file.
        seed: PathBuf,
        /// The kernel the finding names.
        finding: String,
        /// The kernel the case resolves to.
        kernel: String,
    },
    /// The seed's manifest was found and does not load, or its name does not resolve.
    #[error("{}: {source}", seed.display())]
    Resolve {
        /// The seed file.
        seed: PathBuf,
        /// Why.
        #[source]
        source: RegistryError,
    },
}

/// Lowercase hex SHA-256 of a file's bytes (`None` when it cannot be read).
pub fn file_sha256(path: &Path) -> Option<String> {
    use sha2::{Digest, Sha256};
    let bytes = crate::core::userfile::read(path).ok()?;
    Some(Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `m` is a shipped kernel: its name resolves to this very manifest file among the
/// shipped ones.
pub fn is_shipped(m: &Manifest) -> bool {
    let canon = |p: &Path| p.canonicalize().ok();
    let Some(mine) = canon(&m.path) else { return false };
    let Some(dir) = canon(&kernels_dir()) else { return false };
    mine.starts_with(&dir) && find_manifests(&dir).iter().any(|p| canon(p).as_ref() == Some(&mine))
}

/// `target` as a path relative to the directory `base` (`../kernels/k.toml`), both made
/// absolute and canonical first (a `base` not created yet: its nearest existing ancestor made
/// canonical, the rest appended); `None` when `target` does not exist.
pub fn relative_path(target: &Path, base: &Path) -> Option<PathBuf> {
    let target = target.canonicalize().ok()?;
    let base = canonical_to_be(base)?;
    let t: Vec<_> = target.components().collect();
    let b: Vec<_> = base.components().collect();
    let common = t.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    Some(out)
}

/// `path` made absolute and canonical where it exists: the nearest existing ancestor is
/// canonicalised and the missing components appended as written.
fn canonical_to_be(path: &Path) -> Option<PathBuf> {
    let abs = std::path::absolute(path).ok()?;
    let mut missing = Vec::new();
    let mut here = abs.as_path();
    loop {
        if let Ok(c) = here.canonicalize() {
            return Some(missing.iter().rev().fold(c, |acc: PathBuf, part| acc.join(part)));
        }
        missing.push(here.file_name()?.to_os_string());
        here = here.parent()?;
    }
}

/// How a seed saved in `dir` names `m`'s kernel, so that it replays from any working
/// directory: a shipped kernel by its name; any other by its manifest's path relative to `dir`,
/// with the manifest's name and hash. Never an absolute path: a manifest that cannot be
/// related to `dir` keeps the path it was loaded by when that is relative, else its file name.
pub fn seed_reference(m: &Manifest, dir: &Path) -> (String, Option<KernelOrigin>) {
    if is_shipped(m) {
        return (m.name.clone(), None);
    }
    let rel = relative_path(&m.path, dir)
        .or_else(|| m.path.is_relative().then(|| m.path.clone()))
        .unwrap_or_else(|| m.path.file_name().map(PathBuf::from).unwrap_or_default());
    let origin = file_sha256(&m.path).map(|sha256| KernelOrigin { name: m.name.clone(), sha256 });
    (rel.to_string_lossy().into_owned(), origin)
}

/// Whether a kernel reference is a manifest path rather than a shipped kernel's name.
fn is_path_reference(spec: &str) -> bool {
    spec.ends_with(".toml") || spec.contains('/')
}

/// Finds the kernel of the seed at `seed`, whose case names `kernel` (and, for a kernel that is
/// not shipped, `origin`), in this order: `forced` (`--kernel`) when given, with a warning
/// when the seed was saved for another kernel; a manifest path relative to the seed's folder
/// (then each folder above it, since output trees move seeds into `<bug>/examples/`), the one
/// whose hash matches first; for seeds saved before kernels were named this way, the path as
/// written relative to the current directory and to the source tree; a shipped kernel by name.
/// A seed of a user kernel whose manifest is gone is never replayed on a shipped kernel that
/// happens to share its name.
pub fn resolve_for_seed(seed: &Path, kernel: &str, origin: Option<&KernelOrigin>, forced: Option<&Manifest>) -> Result<SeedKernel, SeedKernelError> {
    if let Some(m) = forced {
        let own = resolve_own(seed, kernel, origin).ok();
        let same = own.as_ref().is_none_or(|o| o.manifest.path.canonicalize().ok() == m.path.canonicalize().ok());
        let warning = (!same).then(|| {
            let o = own.as_ref().expect("checked above");
            format!(
                "{}: replaying with --kernel {} as asked; the seed was saved for {} ({})",
                seed.display(),
                m.name,
                o.manifest.name,
                o.manifest.path.display()
            )
        });
        return Ok(SeedKernel { manifest: m.clone(), warning });
    }
    resolve_own(seed, kernel, origin)
}

fn resolve_own(seed: &Path, kernel: &str, origin: Option<&KernelOrigin>) -> Result<SeedKernel, SeedKernelError> {
    let load = |p: &Path| load(p).map_err(|e| SeedKernelError::Resolve { seed: seed.into(), source: RegistryError::Manifest(e) });
    if !is_path_reference(kernel) {
        return resolve(kernel).map(|manifest| SeedKernel { manifest, warning: None }).map_err(|source| SeedKernelError::Resolve { seed: seed.into(), source });
    }
    let spec = Path::new(kernel);
    // Beside the seed, then the folders above it.
    let seed_dir = seed.parent().map(|d| if d.as_os_str().is_empty() { Path::new(".") } else { d }).unwrap_or(Path::new("."));
    let beside: Vec<PathBuf> = if spec.is_relative() { seed_dir.ancestors().map(|d| d.join(spec)).filter(|p| p.is_file()).collect() } else { Vec::new() };
    if let Some(o) = origin {
        if let Some(p) = beside.iter().find(|p| file_sha256(p).as_deref() == Some(o.sha256.as_str())) {
            return Ok(SeedKernel { manifest: load(p)?, warning: None });
        }
        if let Some(p) = beside.first() {
            let warning = format!(
                "{}: its kernel manifest {} changed since the seed was saved (sha256 {} then); replaying with it as it is now",
                seed.display(),
                p.display(),
                &o.sha256[..o.sha256.len().min(12)]
            );
            return Ok(SeedKernel { manifest: load(p)?, warning: Some(warning) });
        }
        if resolve(&o.name).is_ok() {
            return Err(SeedKernelError::NameClash { seed: seed.into(), name: o.name.clone(), kernel: kernel.into() });
        }
        return Err(SeedKernelError::NotFound { seed: seed.into(), kernel: kernel.into(), looked: "beside the seed and in the folders above it".into() });
    }
    if let Some(p) = beside.first() {
        return Ok(SeedKernel { manifest: load(p)?, warning: None });
    }
    // Seeds saved before kernels were named this way hold the path they were loaded by:
    // relative to the directory cudafuzz ran in (usually the source tree) or absolute.
    let tree = kernels_dir().parent().map(Path::to_path_buf);
    let legacy = [Some(spec.to_path_buf()), tree.as_ref().map(|t| t.join(spec)), shipped_suffix(spec)];
    if let Some(p) = legacy.iter().flatten().find(|p| p.is_file()) {
        return Ok(SeedKernel { manifest: load(p)?, warning: None });
    }
    Err(SeedKernelError::NotFound {
        seed: seed.into(),
        kernel: kernel.into(),
        looked: "beside the seed and in the folders above it, in the current directory and among the shipped kernels".into(),
    })
}

/// A path written as `.../kernels/<dir>/<file>.toml` found among today's shipped kernels.
fn shipped_suffix(spec: &Path) -> Option<PathBuf> {
    let parts: Vec<_> = spec.components().collect();
    let at = parts.iter().rposition(|c| c.as_os_str() == "kernels")?;
    let rest: PathBuf = parts[at + 1..].iter().collect();
    Some(kernels_dir().join(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_reach_the_target_from_a_folder_not_made_yet() {
        let tmp = tempfile::tempdir().unwrap();
        let k = tmp.path().join("my/k.toml");
        std::fs::create_dir_all(k.parent().unwrap()).unwrap();
        std::fs::write(&k, "").unwrap();
        assert_eq!(relative_path(&k, &tmp.path().join("out/seeds")), Some(PathBuf::from("../../my/k.toml")));
        assert_eq!(relative_path(&k, tmp.path()), Some(PathBuf::from("my/k.toml")));
        assert_eq!(relative_path(&tmp.path().join("nope.toml"), tmp.path()), None);
    }
}
