//! Finding libnvrtc and the CUDA headers without letting cudarc panic. The main item is
//! [`load`], which returns the process-wide [`Nvrtc`] facts (version, path, supported archs).
//!
//! cudarc 0.19 (`dynamic-loading`) opens libnvrtc lazily by *name* on the first NVRTC call,
//! trying `cudarc::get_lib_name_candidates("nvrtc")` in order (`libnvrtc.so`, ...,
//! `libnvrtc.so.13`, `libnvrtc.so.12`, ...), and panics when none opens. A bare name is looked
//! up by the dynamic loader: `LD_LIBRARY_PATH`, the ldconfig cache, `/usr/lib`, ... So before
//! any NVRTC call this module:
//!
//! 1. opens `$CUDAFUZZ_NVRTC` (a `libnvrtc.so*` file, or a directory holding one) by its path;
//! 2. tries cudarc's candidate names exactly as cudarc will (so we learn which library cudarc
//!    is going to use, and where it lives);
//! 3. if no name opens, looks in the usual install locations (`$CUDA_HOME`, `$CUDA_PATH`,
//!    `/usr/local/cuda`, the pip wheels under `./.cuda-wheels/nvidia/cu13/lib` and the crate's
//!    own `.cuda-wheels`, the running interpreter's site-packages (as `python -m cudafuzz`),
//!    `$VIRTUAL_ENV`/`.venv`/user site-packages and those of the `python3` on
//!    PATH, `nvidia/cu13/lib` and `nvidia/cuda_nvrtc/lib` under each) and opens the first `libnvrtc.so.N` found *by its full path*.
//!    glibc matches a later `dlopen("libnvrtc.so.13")` against the `DT_SONAME` of an already
//!    loaded object, so cudarc's by-name open then finds this copy. The handle is never closed.
//! 4. otherwise returns [`CompileError::NvrtcMissing`] with the fix, instead of a panic.
//!
//! libnvrtc finds its companion `libnvrtc-builtins.so.*` through its own `RPATH=$ORIGIN`, so
//! nothing else needs to be on the loader path. Setting
//! `LD_LIBRARY_PATH=<dir of libnvrtc.so.13>` remains the most explicit way to choose a copy.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::CompileError;

/// What was found when libnvrtc was loaded.
#[derive(Clone, Debug)]
pub(crate) struct Nvrtc {
    /// `(major, minor)` from `nvrtcVersion`.
    pub version: (i32, i32),
    /// The file the loader mapped, when it could be determined.
    pub path: Option<PathBuf>,
    /// `sm_XY` numbers (`10 * major + minor`) this NVRTC can compile for.
    pub supported: Vec<i32>,
}

#[derive(Clone, Debug)]
enum Failure {
    Missing { searched: Vec<PathBuf> },
    Override { path: PathBuf, problem: String },
}

static LOADED: OnceLock<Result<Nvrtc, Failure>> = OnceLock::new();

/// Loads libnvrtc once per process (see the module docs for where it looks).
pub(crate) fn load() -> Result<&'static Nvrtc, CompileError> {
    match LOADED.get_or_init(locate) {
        Ok(n) => Ok(n),
        Err(Failure::Missing { searched }) => Err(CompileError::NvrtcMissing { searched: searched.clone() }),
        Err(Failure::Override { path, problem }) => Err(CompileError::NvrtcOverride { path: path.clone(), problem: problem.clone() }),
    }
}

fn locate() -> Result<Nvrtc, Failure> {
    let mut searched = Vec::new();
    let mut wanted: Option<PathBuf> = None;
    if let Some(p) = std::env::var_os("CUDAFUZZ_NVRTC") {
        let p = PathBuf::from(p);
        let file = if p.is_dir() { lib_in_dir(&p) } else { Some(p.clone()) };
        let Some(file) = file.filter(|f| f.is_file()) else {
            return Err(Failure::Override { path: p, problem: "no libnvrtc.so* there".into() });
        };
        if let Err(e) = sys::open_path(&file) {
            return Err(Failure::Override { path: file, problem: format!("cannot load it: {e}") });
        }
        wanted = Some(file.canonicalize().unwrap_or(file));
    }
    let mut found = sys::open_like_cudarc();
    if found.is_none() && wanted.is_none() {
        for dir in search_dirs() {
            if let Some(file) = lib_in_dir(&dir) {
                if sys::open_path(&file).is_ok() {
                    found = sys::open_like_cudarc();
                    if found.is_some() {
                        break;
                    }
                }
            }
            searched.push(dir);
        }
    }
    let Some(path) = found else {
        return match wanted {
            Some(path) => Err(Failure::Override { path, problem: "it loads, but its soname is not one cudarc opens (libnvrtc.so.13, .12, ...)".into() }),
            None => Err(Failure::Missing { searched }),
        };
    };
    if let (Some(w), Some(p)) = (&wanted, &path) {
        let p = p.canonicalize().unwrap_or_else(|_| p.clone());
        if &p != w {
            return Err(Failure::Override {
                path: w.clone(),
                problem: format!(
                    "cudarc would use {} instead (found first by name); remove that directory from LD_LIBRARY_PATH or unset CUDAFUZZ_NVRTC",
                    p.display()
                ),
            });
        }
    }
    // Safe to call now: one of cudarc's candidate names opens, so cudarc's loader cannot panic.
    let version = unsafe {
        let (mut major, mut minor) = (0, 0);
        cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor);
        (major, minor)
    };
    let supported = unsafe {
        let mut n = 0;
        if cudarc::nvrtc::sys::nvrtcGetNumSupportedArchs(&mut n).result().is_ok() && n > 0 {
            let mut v = vec![0; n as usize];
            match cudarc::nvrtc::sys::nvrtcGetSupportedArchs(v.as_mut_ptr()).result() {
                Ok(()) => v,
                Err(_) => Vec::new(),
            }
        } else {
            Vec::new()
        }
    };
    Ok(Nvrtc { version, path, supported })
}

/// The libnvrtc file in `dir` that cudarc's names would pick (e.g. `libnvrtc.so.13`).
fn lib_in_dir(dir: &Path) -> Option<PathBuf> {
    cudarc::get_lib_name_candidates("nvrtc").into_iter().map(|name| dir.join(name)).find(|p| p.is_file())
}

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Python environments whose site-packages may hold the `nvidia-*` wheels.
fn site_packages() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = RUNNING_INTERPRETER_SITES.get().cloned().unwrap_or_default();
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(v) = env_dir("VIRTUAL_ENV") {
        roots.push(v.join("lib"));
    }
    roots.push(PathBuf::from(".venv/lib"));
    roots.push(Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/lib"));
    if let Some(h) = env_dir("HOME") {
        roots.push(h.join(".local/lib"));
    }
    roots.push(PathBuf::from("/usr/local/lib"));
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root) else { continue };
        let mut pys: Vec<PathBuf> =
            entries.flatten().map(|e| e.path()).filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("python3"))).collect();
        pys.sort();
        for py in pys.into_iter().rev() {
            out.push(py.join("site-packages"));
            out.push(py.join("dist-packages"));
        }
    }
    // The wrapper script's `pip install --target .cuda-wheels`: a site-packages of its own
    // (`nvidia/cu13` for CUDA 13 wheels, `nvidia/cuda_nvrtc` and `nvidia/cuda_runtime` for 12).
    out.push(PathBuf::from(".cuda-wheels"));
    out.push(Path::new(env!("CARGO_MANIFEST_DIR")).join(".cuda-wheels"));
    out.extend(python_site_packages());
    out
}

/// Site-packages searched before all others: those of the interpreter cudafuzz runs in, when it
/// runs as the Python package (`python -m cudafuzz`), which need not be the `python3` on PATH
/// nor an activated virtualenv.
static RUNNING_INTERPRETER_SITES: OnceLock<Vec<PathBuf>> = OnceLock::new();

/// Makes `sites` (the running interpreter's site-packages) the first place NVRTC and the CUDA
/// headers are looked for: where `pip install "cudafuzz[nvrtc]"` put them. Set once, before
/// anything is compiled.
pub fn search_running_interpreter(sites: Vec<PathBuf>) {
    let _ = RUNNING_INTERPRETER_SITES.set(sites);
}

/// The site-packages of the `python3` on PATH (its own and the user's), where
/// `python3 -m pip install nvidia-cuda-nvrtc` puts the library outside any virtualenv: asked of
/// the interpreter, once per process, because pyenv, conda and distributions each put it
/// elsewhere. Nothing is installed; an absent or failing python3 adds nothing.
fn python_site_packages() -> Vec<PathBuf> {
    static ASKED: OnceLock<Vec<PathBuf>> = OnceLock::new();
    ASKED
        .get_or_init(|| {
            let script = "import site, sys\nfor p in site.getsitepackages() + [site.getusersitepackages()]: print(p)";
            let Ok(out) = std::process::Command::new("python3").args(["-c", script]).stderr(std::process::Stdio::null()).output() else { return Vec::new() };
            if !out.status.success() {
                return Vec::new();
            }
            String::from_utf8_lossy(&out.stdout).lines().map(str::trim).filter(|l| !l.is_empty()).map(PathBuf::from).collect()
        })
        .clone()
}

/// Install prefixes in search order: `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`, the wheel
/// trees `./.cuda-wheels/nvidia/cu13` and `<crate>/.cuda-wheels/nvidia/cu13`.
fn prefixes() -> Vec<PathBuf> {
    let mut out = Vec::new();
    out.extend(env_dir("CUDA_HOME"));
    out.extend(env_dir("CUDA_PATH"));
    out.push(PathBuf::from("/usr/local/cuda"));
    out.push(PathBuf::from(".cuda-wheels/nvidia/cu13"));
    out.push(Path::new(env!("CARGO_MANIFEST_DIR")).join(".cuda-wheels/nvidia/cu13"));
    out
}

/// Directories searched for libnvrtc when no candidate name opens.
fn search_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in prefixes() {
        if p.ends_with("cu13") {
            out.push(p.join("lib"));
        } else {
            out.push(p.join("lib64"));
            out.push(p.join("lib"));
        }
    }
    for sp in site_packages() {
        out.push(sp.join("nvidia/cu13/lib"));
        out.push(sp.join("nvidia/cuda_nvrtc/lib"));
    }
    dedup(out)
}

/// The CUDA include directory (one holding `cuda_fp16.h`): `$CUDAFUZZ_CUDA_INCLUDE`, then the
/// `include` next to the loaded libnvrtc's directory, then `$CUDA_HOME/include`,
/// `$CUDA_PATH/include`, `/usr/local/cuda/include`, `./.cuda-wheels/nvidia/cu13/include`,
/// `<crate>/.cuda-wheels/nvidia/cu13/include`, and site-packages `nvidia/cu13/include` /
/// `nvidia/cuda_runtime/include`.
pub(crate) fn cuda_include(nvrtc_path: Option<&Path>) -> Result<Option<PathBuf>, CompileError> {
    let ok = |d: &Path| d.join("cuda_fp16.h").is_file();
    if let Some(d) = env_dir("CUDAFUZZ_CUDA_INCLUDE") {
        if ok(&d) {
            return Ok(Some(d));
        }
        return Err(CompileError::CudaInclude { path: d });
    }
    let mut candidates = Vec::new();
    if let Some(lib_dir) = nvrtc_path.and_then(|p| p.parent()).and_then(|p| p.parent()) {
        candidates.push(lib_dir.join("include"));
    }
    candidates.extend(prefixes().into_iter().map(|p| p.join("include")));
    for sp in site_packages() {
        candidates.push(sp.join("nvidia/cu13/include"));
        candidates.push(sp.join("nvidia/cuda_runtime/include"));
    }
    Ok(candidates.into_iter().find(|d| ok(d)).map(|d| std::path::absolute(&d).unwrap_or(d)))
}

fn dedup(v: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in v {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

#[cfg(unix)]
mod sys {
    use std::ffi::{CStr, CString};
    use std::path::{Path, PathBuf};

    fn last_error() -> String {
        // SAFETY: dlerror returns a thread-local string or null.
        let e = unsafe { libc::dlerror() };
        if e.is_null() {
            "unknown dlopen error".into()
        } else {
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        }
    }

    /// Opens a library by absolute path and keeps it loaded for the life of the process.
    pub fn open_path(path: &Path) -> Result<(), String> {
        let abs = std::path::absolute(path).map_err(|e| e.to_string())?;
        let c = CString::new(abs.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: loading a library runs its initialisers; libnvrtc's are benign.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            Err(last_error())
        } else {
            Ok(())
        }
    }

    /// Tries cudarc's candidate names in cudarc's order; on success returns the mapped file
    /// (`Some(None)` when it cannot be determined). The handle stays open.
    pub fn open_like_cudarc() -> Option<Option<PathBuf>> {
        for name in cudarc::get_lib_name_candidates("nvrtc") {
            let Ok(c) = CString::new(name) else { continue };
            // SAFETY: as above.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if h.is_null() {
                continue;
            }
            return Some(path_of(h));
        }
        None
    }

    fn path_of(h: *mut libc::c_void) -> Option<PathBuf> {
        // SAFETY: h is a live handle; dladdr only reads loader tables.
        unsafe {
            let sym = libc::dlsym(h, c"nvrtcVersion".as_ptr());
            if sym.is_null() {
                return None;
            }
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(sym, &mut info) == 0 || info.dli_fname.is_null() {
                return None;
            }
            let s = CStr::from_ptr(info.dli_fname).to_string_lossy().into_owned();
            Some(PathBuf::from(s))
        }
    }
}

#[cfg(not(unix))]
mod sys {
    use std::path::{Path, PathBuf};

    pub fn open_path(_path: &Path) -> Result<(), String> {
        Err("loading by path is only supported on unix".into())
    }

    pub fn open_like_cudarc() -> Option<Option<PathBuf>> {
        // SAFETY: probing only; the library is closed again.
        unsafe { cudarc::nvrtc::sys::is_culib_present() }.then_some(None)
    }
}
