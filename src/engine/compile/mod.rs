//! Compiling kernels with NVRTC to cubins, cached on disk. The main type is [`Compiler`].
//!
//! A [`CompileRequest`] (source, defines, options, [`Arch`]) becomes a [`Compiled`] cubin for
//! that real architecture (`--gpu-architecture=sm_XY`, then `nvrtcGetCUBIN`). Never PTX: PTX
//! from an NVRTC newer than the driver cannot be loaded, while a cubin for the GPU's own arch
//! can, so a 13.x NVRTC from pip serves hosts with 12.x drivers. Every compile passes
//! `-lineinfo` (sanitizer reports name source lines) and `--std=c++17`, and puts on the include
//! path the kernel's directory, its parent, the nearest ancestor `kernels/include`, and the CUDA
//! include directory (for `cuda_fp16.h` and friends).
//!
//! libnvrtc is located without letting cudarc panic (see `nvrtc.rs`): `$CUDAFUZZ_NVRTC`, the
//! loader path (`LD_LIBRARY_PATH`), then the usual install locations including the pip wheels in
//! `.cuda-wheels/nvidia/cu13/lib`. The CUDA headers come from `$CUDAFUZZ_CUDA_INCLUDE`, the
//! `include` next to libnvrtc's directory, `$CUDA_HOME/include`, `$CUDA_PATH/include`,
//! `/usr/local/cuda/include` or `.cuda-wheels/nvidia/cu13/include`.
//!
//! Results are cached under `$CUDAFUZZ_CACHE/cubin` (else `$XDG_CACHE_HOME/cudafuzz/cubin`,
//! else `~/.cache/cudafuzz/cubin`), keyed by a hash of everything that can change the cubin
//! (see `cache.rs`), so a repeated configuration compiles once.

pub mod builtin;
mod cache;
pub use cache::{clear as clear_cache, default_dir as default_cache_dir, usage as cache_usage, CacheUsage};
pub use nvrtc::search_running_interpreter;
pub mod include;
pub mod module;
mod nvrtc;
pub mod ptx;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::core::case::Dtype;
use crate::core::manifest::{ArchLimits, Manifest};
pub use crate::core::target::Build;

/// A compilation that could not be done.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CompileError {
    /// No libnvrtc could be found.
    #[error("libnvrtc not found (searched the loader path and {} places: CUDA toolkits, .cuda-wheels, Python site-packages); install it with: python3 -m pip install nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cuda-cccl", .searched.len())]
    NvrtcMissing {
        /// Directories searched after the loader path.
        searched: Vec<PathBuf>,
    },
    /// `$CUDAFUZZ_NVRTC` does not lead to a usable libnvrtc.
    #[error("CUDAFUZZ_NVRTC={path}: {problem}; point it at a libnvrtc.so.N file or the directory holding one")]
    NvrtcOverride {
        /// The path from the environment (or the file found there).
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// `$CUDAFUZZ_CUDA_INCLUDE` does not hold the CUDA headers.
    #[error("CUDAFUZZ_CUDA_INCLUDE={path}: no cuda_fp16.h there; point it at the CUDA include directory (e.g. <site-packages>/nvidia/cu13/include)")]
    CudaInclude {
        /// The directory from the environment.
        path: PathBuf,
    },
    /// An architecture string that does not parse.
    #[error("invalid architecture `{input}`; write it as sm_90, 90 or 9.0")]
    BadArch {
        /// What was given.
        input: String,
    },
    /// The loaded NVRTC cannot compile for this architecture.
    #[error("nvrtc {}.{} cannot compile for {arch} (it supports {}); pick one of those or use another nvrtc (CUDAFUZZ_NVRTC)", .version.0, .version.1, show_archs(.supported))]
    UnsupportedArch {
        /// The requested architecture.
        arch: Arch,
        /// NVRTC's version.
        version: (i32, i32),
        /// `10 * major + minor` of every supported architecture.
        supported: Vec<i32>,
    },
    /// The kernel source could not be read.
    #[error("{path}: cannot read kernel source")]
    Source {
        /// The source file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An option, define or the source contains a NUL byte, which NVRTC cannot take.
    #[error("{path}: {what} contains a NUL byte; remove it")]
    Nul {
        /// The source file.
        path: PathBuf,
        /// `source text`, `option "..."`.
        what: String,
    },
    /// A parameter combination whose block or shared memory exceeds every target
    /// architecture's limits: the manifest promises launches no target GPU can make.
    #[error("{manifest}: {params} fits none of the target architectures: {why}; use smaller tiles for it, narrow the dims' ranges, or build for an architecture that allows it")]
    OverLimits {
        /// The manifest.
        manifest: PathBuf,
        /// The combination, `BLOCK_M = 128, BLOCK_N = 64`.
        params: String,
        /// Each architecture's refusal.
        why: String,
    },
    /// The cache directory could not be created or written.
    #[error("{path}: cannot {action} the compile cache; set CUDAFUZZ_CACHE to a writable directory")]
    Cache {
        /// The cache directory.
        path: PathBuf,
        /// `create` or `write`.
        action: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// NVRTC rejected the kernel: the log says why.
    #[error("{source_path}: nvrtc failed for {arch} with {}{}:\n{log}", show_defines(.defines), .hint)]
    Kernel {
        /// The source file.
        source_path: PathBuf,
        /// Target architecture.
        arch: Arch,
        /// The `-D` defines of this compilation.
        defines: BTreeMap<String, String>,
        /// NVRTC's log.
        log: String,
        /// Extra advice (e.g. that no CUDA include directory was found), or empty.
        hint: String,
    },
    /// The cubin has no symbol with the entry's name.
    #[error("{source_path}: entry `{entry}` is not in the cubin compiled for {arch}; declare it `extern \"C\" __global__`, or name a C++ kernel as the compiler sees it (`ns::my_kernel`, `my_kernel<{{VEC}}, {{T}}>`), or fix `entry` in the manifest")]
    EntryMissing {
        /// The source file.
        source_path: PathBuf,
        /// The entry point.
        entry: String,
        /// Target architecture.
        arch: Arch,
    },
    /// `compiler = "nvcc"` and no nvcc was found.
    #[error("{source_path}: the manifest says compiler = \"nvcc\" and no nvcc was found (CUDAFUZZ_NVCC, PATH, CUDA_HOME/bin, /usr/local/cuda/bin); install the CUDA toolkit or `python3 -m pip install nvidia-cuda-nvcc`, or set CUDAFUZZ_NVCC")]
    NvccMissing {
        /// The source file.
        source_path: PathBuf,
    },
    /// A module (nvcc's or prebuilt) that cannot serve the entry.
    #[error("{path}: {problem} (for {arch})")]
    Module {
        /// The module or source file.
        path: PathBuf,
        /// Target architecture.
        arch: Arch,
        /// What is wrong.
        problem: String,
    },
    /// An NVRTC call failed in a way that is not about the kernel.
    #[error("nvrtc call {call} failed")]
    Nvrtc {
        /// The function.
        call: &'static str,
        /// NVRTC's result code.
        #[source]
        source: cudarc::nvrtc::result::NvrtcError,
    },
}

fn show_archs(v: &[i32]) -> String {
    if v.is_empty() {
        return "an unknown set".into();
    }
    v.iter().map(|a| format!("sm_{a}")).collect::<Vec<_>>().join(", ")
}

fn show_defines(d: &BTreeMap<String, String>) -> String {
    if d.is_empty() {
        return "no defines".into();
    }
    d.iter().map(|(k, v)| format!("-D{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// A real GPU architecture (compute capability), e.g. `sm_90`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Arch {
    /// Major compute capability (9 for sm_90).
    pub major: u32,
    /// Minor compute capability (0 for sm_90).
    pub minor: u32,
}

impl Arch {
    /// `sm_{major}{minor}`.
    pub const fn new(major: u32, minor: u32) -> Arch {
        Arch { major, minor }
    }

    /// `10 * major + minor`, as NVRTC lists architectures.
    pub fn number(self) -> u32 {
        self.major * 10 + self.minor
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.major, self.minor)
    }
}

impl FromStr for Arch {
    type Err = CompileError;

    /// Parses `sm_90`, `90`, `sm_120`, `9.0`.
    fn from_str(s: &str) -> Result<Arch, CompileError> {
        let bad = || CompileError::BadArch { input: s.to_string() };
        let t = s.trim();
        if let Some((a, b)) = t.split_once('.') {
            let major = a.parse::<u32>().map_err(|_| bad())?;
            let minor = b.parse::<u32>().map_err(|_| bad())?;
            return if (1..=99).contains(&major) && minor <= 9 { Ok(Arch { major, minor }) } else { Err(bad()) };
        }
        let digits = t.strip_prefix("sm_").unwrap_or(t);
        if digits.len() < 2 || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let n: u32 = digits.parse().map_err(|_| bad())?;
        let arch = Arch { major: n / 10, minor: n % 10 };
        if arch.major == 0 {
            return Err(bad());
        }
        Ok(arch)
    }
}

impl TryFrom<String> for Arch {
    type Error = CompileError;
    fn try_from(s: String) -> Result<Arch, CompileError> {
        s.parse()
    }
}

impl From<Arch> for String {
    fn from(a: Arch) -> String {
        a.to_string()
    }
}

/// One compilation: what to compile and for which architecture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileRequest {
    /// The `.cu` file.
    pub source: PathBuf,
    /// The entry point: an `extern "C"` name, or a C++ name expression (`ns::kernel<4, float>`)
    /// that NVRTC instantiates and lowers to the cubin's symbol.
    pub entry: String,
    /// `-D NAME=VALUE` defines.
    pub defines: BTreeMap<String, String>,
    /// Extra NVRTC options, passed last.
    pub options: Vec<String>,
    /// Target architecture.
    pub arch: Arch,
    /// Who makes the module: NVRTC, nvcc, or nobody (a prebuilt module is loaded).
    pub build: Build,
}

impl CompileRequest {
    /// An NVRTC build of one of the harness's own kernels, `harness/<file>` of the kernels
    /// directory (the floor, the sanitizer markers, the data generator).
    pub fn harness(file: &str, entry: &str, options: Vec<String>, arch: Arch) -> CompileRequest {
        let source = crate::core::registry::kernels_dir().join("harness").join(file);
        CompileRequest { source, entry: entry.to_string(), defines: BTreeMap::new(), options, arch, build: Build::default() }
    }
}

/// A compiled kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiled {
    /// The cubin (an ELF image for `cuModuleLoadData`).
    pub cubin: Vec<u8>,
    /// NVRTC's log (warnings), possibly empty.
    pub log: String,
    /// The cache key: a hex SHA-256, equal for equal configurations.
    pub key: String,
    /// Whether the cubin came from the on-disk cache.
    pub from_cache: bool,
    /// The entry's symbol in the cubin, what `cuModuleGetFunction` is given: the entry itself
    /// for an `extern "C"` kernel, its lowered (mangled) name for a C++ one.
    pub symbol: String,
}

impl Compiled {
    /// Whether the module carries source line information, so that sanitizer reports name
    /// source lines: NVRTC and nvcc builds always do (`-lineinfo`), a prebuilt module when its
    /// own build did.
    pub fn has_line_info(&self) -> bool {
        module::has_line_info(&self.cubin)
    }
}

/// Compiles kernels with the process's libnvrtc, through an on-disk cache.
#[derive(Clone, Debug)]
pub struct Compiler {
    cache_dir: PathBuf,
    cuda_include: Option<PathBuf>,
    nvrtc_path: Option<PathBuf>,
    version: (i32, i32),
    supported: Vec<i32>,
}

impl Compiler {
    /// Loads libnvrtc and finds the CUDA headers. `cache_dir` is where cubins are kept; `None`
    /// means the default (`$CUDAFUZZ_CACHE/cubin`, `$XDG_CACHE_HOME/cudafuzz/cubin` or
    /// `~/.cache/cudafuzz/cubin`).
    ///
    /// Fails with [`CompileError::NvrtcMissing`] (never a panic) when no libnvrtc is found.
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Compiler, CompileError> {
        let n = nvrtc::load()?;
        let cuda_include = nvrtc::cuda_include(n.path.as_deref())?;
        let cache_dir = cache_dir.unwrap_or_else(cache::default_dir);
        std::fs::create_dir_all(&cache_dir).map_err(|source| CompileError::Cache { path: cache_dir.clone(), action: "create", source })?;
        Ok(Compiler { cache_dir, cuda_include, nvrtc_path: n.path.clone(), version: n.version, supported: n.supported.clone() })
    }

    /// NVRTC's `(major, minor)` version.
    pub fn nvrtc_version(&self) -> (i32, i32) {
        self.version
    }

    /// The libnvrtc file in use, when the loader could tell.
    pub fn nvrtc_path(&self) -> Option<&Path> {
        self.nvrtc_path.as_deref()
    }

    /// The CUDA include directory in use, if one was found.
    pub fn cuda_include(&self) -> Option<&Path> {
        self.cuda_include.as_deref()
    }

    /// Where cubins are cached.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// Architectures this NVRTC can compile for.
    pub fn supported_archs(&self) -> Vec<Arch> {
        self.supported.iter().map(|&n| Arch::new(n as u32 / 10, n as u32 % 10)).collect()
    }

    /// Whether the loaded NVRTC can compile for `arch` (when it could list what it supports):
    /// checked up front by commands that build many configurations, so a typo costs one line.
    pub fn check_arch(&self, arch: Arch) -> Result<(), CompileError> {
        if !self.supported.is_empty() && !self.supported.contains(&(arch.number() as i32)) {
            return Err(CompileError::UnsupportedArch { arch, version: self.version, supported: self.supported.clone() });
        }
        Ok(())
    }

    /// The project include directories of a source: its directory, that directory's parent,
    /// and the nearest ancestor `kernels/include` (an `include` directory inside an ancestor
    /// named `kernels`, or `kernels/include` under an ancestor).
    pub fn include_dirs(source: &Path) -> Vec<PathBuf> {
        let abs = source.canonicalize().unwrap_or_else(|_| std::path::absolute(source).unwrap_or(source.to_path_buf()));
        let dir = abs.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut out = vec![dir.clone()];
        if let Some(p) = dir.parent() {
            out.push(p.to_path_buf());
        }
        for anc in dir.ancestors() {
            let inside = anc.file_name().is_some_and(|n| n == "kernels") && anc.join("include").is_dir();
            let candidate = if inside { anc.join("include") } else { anc.join("kernels").join("include") };
            if candidate.is_dir() {
                if !out.contains(&candidate) {
                    out.push(candidate);
                }
                break;
            }
        }
        out
    }

    /// The full NVRTC option list for a request (without the CUDA include dir appended).
    fn options(&self, req: &CompileRequest, project_dirs: &[PathBuf]) -> Vec<String> {
        let mut o = vec![format!("--gpu-architecture={}", req.arch), "-lineinfo".to_string()];
        if !req.options.iter().any(|x| is_std_option(x)) {
            o.push(DEFAULT_STD.to_string());
        }
        o.extend(req.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
        for d in project_dirs.iter().chain(self.cuda_include.iter()).chain(self.cccl_include().as_ref()) {
            o.push(format!("--include-path={}", d.display()));
        }
        o.extend(req.options.iter().cloned());
        o
    }

    /// The CCCL headers (CUB, Thrust, libcu++) of the CUDA include directory: CUDA 13 keeps
    /// them in its `cccl` folder (the toolkit's, or the `nvidia-cuda-cccl` wheel's), where nvcc
    /// looks by itself and NVRTC does not.
    pub fn cccl_include(&self) -> Option<PathBuf> {
        self.cuda_include.as_ref().map(|d| d.join("cccl")).filter(|d| d.join("cub").is_dir())
    }

    /// Compiles a request, or returns the cached cubin of an identical earlier compilation; a
    /// prebuilt module is read from its file instead.
    pub fn compile(&self, req: &CompileRequest) -> Result<Compiled, CompileError> {
        if let Build::Prebuilt(paths) = &req.build {
            return module::prebuilt(req, paths);
        }
        let source_path = req.source.canonicalize().map_err(|source| CompileError::Source { path: req.source.clone(), source })?;
        let text = crate::core::userfile::read_source_text(&source_path).map_err(|source| CompileError::Source { path: req.source.clone(), source })?;
        let dirs = Compiler::include_dirs(&source_path);
        let options = self.options(req, &dirs);
        let searched = with_option_dirs(&dirs, &req.options);
        let builtins = builtin::needed(&searched);

        let mut key = cache::Key::new(self.version);
        key.add("source path", source_path.as_os_str().as_encoded_bytes());
        key.add("source", text.as_bytes());
        let fallback: Vec<PathBuf> = dirs.iter().enumerate().filter(|(i, _)| *i != 1).map(|(_, d)| d.clone()).collect();
        cache::add_dependencies(&mut key, &source_path, &text, &searched, self.cuda_include.as_deref(), &fallback);
        for (name, text) in &builtins {
            key.add(&format!("built-in header {name}"), text.as_bytes());
        }
        for o in &options {
            key.add("option", o.as_bytes());
        }
        // A plain entry does not change the cubin; a name expression instantiates what it names.
        if !crate::core::manifest::expr::is_identifier(&req.entry) {
            key.add("name expression", req.entry.as_bytes());
        }
        let nvcc = match req.build {
            Build::Nvcc => {
                let nvcc = module::find_nvcc().ok_or_else(|| CompileError::NvccMissing { source_path: source_path.clone() })?;
                key.add("nvcc", nvcc.as_os_str().as_encoded_bytes());
                if let Ok(meta) = std::fs::metadata(&nvcc) {
                    key.add("nvcc size", &meta.len().to_le_bytes());
                }
                Some(nvcc)
            }
            _ => None,
        };
        let key = key.finish();

        if let Some(hit) = cache::load(&self.cache_dir, &key) {
            let symbol = hit.symbol.clone().unwrap_or_else(|| req.entry.clone());
            if has_symbol(&hit.cubin, &symbol) {
                return Ok(Compiled { cubin: hit.cubin, log: hit.log, key, from_cache: true, symbol });
            }
        }

        let (cubin, log, symbol) = match &nvcc {
            Some(nvcc) => module::nvcc_build(nvcc, req, &source_path, &options, &builtins)?,
            None => {
                self.check_arch(req.arch)?;
                self.run_nvrtc(req, &source_path, &text, &options, &builtins)?
            }
        };
        if !has_symbol(&cubin, &symbol) {
            return Err(CompileError::EntryMissing { source_path, entry: req.entry.clone(), arch: req.arch });
        }
        cache::store(&self.cache_dir, &key, &cubin, &log, &symbol).map_err(|source| CompileError::Cache {
            path: self.cache_dir.clone(),
            action: "write",
            source,
        })?;
        Ok(Compiled { cubin, log, key, from_cache: false, symbol })
    }

    fn run_nvrtc(
        &self,
        req: &CompileRequest,
        source_path: &Path,
        text: &str,
        options: &[String],
        builtins: &[(&str, &str)],
    ) -> Result<(Vec<u8>, String, String), CompileError> {
        use cudarc::nvrtc::sys;
        let (prog, log, symbol) = self.nvrtc_program(req, source_path, text, options, builtins)?;
        let mut size = 0usize;
        // SAFETY: prog is live and compiled.
        unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }.result().map_err(|source| CompileError::Nvrtc { call: "nvrtcGetCUBINSize", source })?;
        let mut cubin = vec![0u8; size];
        if size > 0 {
            // SAFETY: the buffer has the size NVRTC reported.
            unsafe { sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr() as *mut std::ffi::c_char) }
                .result()
                .map_err(|source| CompileError::Nvrtc { call: "nvrtcGetCUBIN", source })?;
        }
        if !cubin.starts_with(b"\x7fELF") {
            return Err(CompileError::Kernel {
                source_path: source_path.to_path_buf(),
                arch: req.arch,
                defines: req.defines.clone(),
                log: format!("nvrtc produced no cubin ({size} bytes){}{log}", if log.is_empty() { "" } else { "; log:\n" }),
                hint: String::new(),
            });
        }
        Ok((cubin, log, symbol))
    }

    /// The PTX of a request compiled for the virtual architecture `compute_XY` of its arch
    /// (not cached: it is read once per build, for the entry point's parameter list), and the
    /// entry's symbol in it.
    pub fn ptx(&self, req: &CompileRequest) -> Result<(String, String), CompileError> {
        let source_path = req.source.canonicalize().map_err(|source| CompileError::Source { path: req.source.clone(), source })?;
        let text = crate::core::userfile::read_source_text(&source_path).map_err(|source| CompileError::Source { path: req.source.clone(), source })?;
        let dirs = Compiler::include_dirs(&source_path);
        let mut options = self.options(req, &dirs);
        options[0] = format!("--gpu-architecture=compute_{}", req.arch.number());
        let builtins = builtin::needed(&with_option_dirs(&dirs, &req.options));
        let (prog, _, symbol) = self.nvrtc_program(req, &source_path, &text, &options, &builtins)?;
        // SAFETY: prog is live and compiled.
        let ptx = unsafe { cudarc::nvrtc::result::get_ptx(prog.0) }.map_err(|source| CompileError::Nvrtc { call: "nvrtcGetPTX", source })?;
        let bytes: Vec<u8> = ptx.into_iter().take_while(|&c| c != 0).map(|c| c as u8).collect();
        Ok((String::from_utf8_lossy(&bytes).into_owned(), symbol))
    }

    /// A compiled NVRTC program, its log and the entry's symbol, the `builtins` handed to NVRTC
    /// by name; a failed compilation is a [`CompileError::Kernel`] with the log. A C++ entry
    /// (`ns::kernel<4, float>`) is added as a name expression, so a template is instantiated
    /// and its name lowered; a plain name is its own symbol.
    fn nvrtc_program(
        &self,
        req: &CompileRequest,
        source_path: &Path,
        text: &str,
        options: &[String],
        builtins: &[(&str, &str)],
    ) -> Result<(Program, String, String), CompileError> {
        use cudarc::nvrtc::{result, sys};
        let nul = |what: String| CompileError::Nul { path: source_path.to_path_buf(), what };
        let src = CString::new(text).map_err(|_| nul("source text".into()))?;
        let name = CString::new(source_path.as_os_str().as_encoded_bytes()).map_err(|_| nul("source path".into()))?;
        let mut c_opts = Vec::with_capacity(options.len());
        for o in options {
            c_opts.push(CString::new(o.as_str()).map_err(|_| nul(format!("option {o:?}")))?);
        }
        let header_texts: Vec<CString> = builtins.iter().map(|(_, t)| CString::new(*t).expect("built-in headers hold no NUL")).collect();
        let header_names: Vec<CString> = builtins.iter().map(|(n, _)| CString::new(*n).expect("built-in header names hold no NUL")).collect();
        let texts: Vec<*const std::ffi::c_char> = header_texts.iter().map(|c| c.as_ptr()).collect();
        let names: Vec<*const std::ffi::c_char> = header_names.iter().map(|c| c.as_ptr()).collect();
        let mut raw = std::mem::MaybeUninit::uninit();
        // SAFETY: every pointer is a NUL-terminated string that outlives the call; the header
        // arrays have `builtins.len()` entries each (NVRTC copies what it keeps).
        unsafe { sys::nvrtcCreateProgram(raw.as_mut_ptr(), src.as_ptr(), name.as_ptr(), builtins.len() as i32, texts.as_ptr(), names.as_ptr()) }
            .result()
            .map_err(|source| CompileError::Nvrtc { call: "nvrtcCreateProgram", source })?;
        // SAFETY: nvrtcCreateProgram succeeded, so it wrote the program handle.
        let prog = Program(unsafe { raw.assume_init() });
        // A plain name is an `extern "C"` symbol already (and may be declared only inside a
        // namespace the emitters add): only a C++ name expression is lowered.
        let lowers = !crate::core::manifest::expr::is_identifier(&req.entry);
        let name_expression = CString::new(req.entry.as_str()).map_err(|_| nul("entry".into()))?;
        if lowers {
            // SAFETY: prog is live and not yet compiled; the string outlives the call.
            unsafe { sys::nvrtcAddNameExpression(prog.0, name_expression.as_ptr()) }
                .result()
                .map_err(|source| CompileError::Nvrtc { call: "nvrtcAddNameExpression", source })?;
        }
        // SAFETY: prog is live; the option strings outlive the call.
        let compiled = unsafe { result::compile_program(prog.0, &c_opts) };
        // SAFETY: prog is live.
        let log = unsafe { result::get_program_log(prog.0) }
            .map(|v| {
                let bytes: Vec<u8> = v.into_iter().take_while(|&c| c != 0).map(|c| c as u8).collect();
                String::from_utf8_lossy(&bytes).trim_end().to_string()
            })
            .unwrap_or_default();
        if let Err(e) = compiled {
            let hint = if self.cuda_include.is_none() { "; no CUDA include directory was found: set CUDAFUZZ_CUDA_INCLUDE".to_string() } else { String::new() };
            let log = if log.is_empty() { format!("({e:?}, no log)") } else { log };
            return Err(CompileError::Kernel { source_path: source_path.to_path_buf(), arch: req.arch, defines: req.defines.clone(), log, hint });
        }
        if !lowers {
            return Ok((prog, log, req.entry.clone()));
        }
        let mut lowered: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: prog is live and compiled with this name expression; NVRTC owns the returned
        // string until the program is destroyed, and it is copied before then.
        let symbol = match unsafe { sys::nvrtcGetLoweredName(prog.0, name_expression.as_ptr(), &mut lowered) }.result() {
            Ok(()) if !lowered.is_null() => unsafe { std::ffi::CStr::from_ptr(lowered) }.to_string_lossy().into_owned(),
            _ => return Err(CompileError::EntryMissing { source_path: source_path.to_path_buf(), entry: req.entry.clone(), arch: req.arch }),
        };
        Ok((prog, log, symbol))
    }
}

/// The project include directories `dirs` and those the manifest's options add
/// (`--include-path=DIR`, `-I DIR`, `-IDIR`; a manifest's `include` becomes the first form):
/// every folder a project header may come from.
pub fn with_option_dirs(dirs: &[PathBuf], options: &[String]) -> Vec<PathBuf> {
    let mut out = dirs.to_vec();
    let mut it = options.iter();
    while let Some(o) = it.next() {
        let dir = if let Some(d) = o.strip_prefix("--include-path=") {
            Some(d.to_string())
        } else if o == "-I" || o == "--include-path" {
            it.next().cloned()
        } else {
            o.strip_prefix("-I").map(str::to_string)
        };
        if let Some(d) = dir.filter(|d| !d.is_empty()) {
            out.push(PathBuf::from(d));
        }
    }
    out
}

/// A live NVRTC program, destroyed on drop.
struct Program(cudarc::nvrtc::sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtc_program, destroyed once.
        let _ = unsafe { cudarc::nvrtc::result::destroy_program(self.0) };
    }
}

/// Whether the cubin's string table holds the symbol (`\0name\0` or `.name\0`, the latter
/// for a name shared with its `.text.name` section string).
fn has_symbol(cubin: &[u8], symbol: &str) -> bool {
    let name = symbol.as_bytes();
    !name.is_empty() && cubin.windows(name.len() + 2).any(|w| (w[0] == 0 || w[0] == b'.') && &w[1..=name.len()] == name && w[name.len() + 1] == 0)
}

/// The language standard every compile gets unless the manifest's `std` (or an option) names
/// another.
pub const DEFAULT_STD: &str = "--std=c++17";

/// Whether an option sets the language standard (`--std=c++20`, `-std=c++20`, `-std c++20`).
pub fn is_std_option(o: &str) -> bool {
    o.starts_with("--std") || o.starts_with("-std")
}

/// The request for one manifest configuration.
///
/// Defines: `CUDAFUZZ=1`, one of `CUDAFUZZ_DTYPE_F16` / `_BF16` / `_F32` = 1, every fixed
/// define, every param (from `params`; a param it does not set gets its default), then
/// `extra_defines`, which override all of the above.
pub fn request_for(manifest: &Manifest, params: &BTreeMap<String, i64>, dtype: Dtype, arch: Arch, extra_defines: &BTreeMap<String, String>) -> CompileRequest {
    let mut defines = BTreeMap::new();
    defines.insert("CUDAFUZZ".to_string(), "1".to_string());
    defines.insert(format!("CUDAFUZZ_DTYPE_{}", dtype.name().to_ascii_uppercase()), "1".to_string());
    for (k, v) in &manifest.defines {
        defines.insert(k.clone(), v.to_string());
    }
    for (k, v) in manifest.default_params().iter().chain(params.iter()) {
        defines.insert(k.clone(), v.to_string());
    }
    // Each tensor's C element type, for kernels (and reference kernels) that declare their
    // pointers per tensor: `const CF_T_x* x`.
    for t in &manifest.tensors {
        defines.insert(format!("CF_T_{}", t.name), t.dtype.resolve(dtype).c_type().to_string());
    }
    for (k, v) in extra_defines {
        defines.insert(k.clone(), v.clone());
    }
    let mut all_params = manifest.default_params();
    all_params.extend(params.iter().map(|(k, v)| (k.clone(), *v)));
    let entry = manifest.entry_for(&all_params, dtype);
    CompileRequest { source: manifest.source.clone(), entry, defines, options: manifest.options.clone(), arch, build: manifest.build.clone() }
}

/// The result of one configuration in [`build_all`].
#[derive(Clone, Debug)]
pub struct BuildOutcome {
    /// The manifest's name.
    pub manifest: String,
    /// The param values of this configuration.
    pub params: BTreeMap<String, i64>,
    /// The dtype compiled for.
    pub dtype: Dtype,
    /// The architecture compiled for.
    pub arch: Arch,
    /// `Ok((cubin size in bytes, from_cache))`, or why it failed (with NVRTC's log).
    pub result: Result<(usize, bool), std::sync::Arc<CompileError>>,
    /// Whether the module lacks line information (a prebuilt module built without
    /// `-lineinfo`): sanitizer reports then name no source line.
    pub no_line_info: bool,
}

/// A configuration [`build_all`] did not compile for an architecture whose limits it exceeds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The manifest's name.
    pub manifest: String,
    /// The param values of this configuration.
    pub params: BTreeMap<String, i64>,
    /// The architecture it was skipped for.
    pub arch: Arch,
    /// Why (threads or shared memory past the limit).
    pub why: String,
}

/// Compiles every manifest × param combination (cartesian product) × contract dtype × arch,
/// one after the other, through the cache. Failures are collected, not returned early. A
/// combination whose block or shared memory exceeds an architecture's limits is not compiled
/// for it (listed in the second vector); one that fits none of `archs` is a failure.
pub fn build_all(manifests: &[Manifest], archs: &[Arch], compiler: &Compiler) -> (Vec<BuildOutcome>, Vec<Skipped>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for m in manifests {
        let needs = m.launch_needs().unwrap_or_default();
        for params in m.param_combinations() {
            let need = needs.iter().find(|n| n.params == params);
            let refusals: Vec<(Arch, String)> =
                archs.iter().filter_map(|&a| need.and_then(|n| ArchLimits::of(a.number()).refuses(n)).map(|why| (a, why))).collect();
            if !archs.is_empty() && refusals.len() == archs.len() {
                let why = refusals.iter().map(|(_, w)| w.as_str()).collect::<Vec<_>>().join("; ");
                let e = CompileError::OverLimits { manifest: m.path.clone(), params: crate::core::manifest::params_text(&params), why };
                out.push(BuildOutcome {
                    manifest: m.name.clone(),
                    params: params.clone(),
                    dtype: m.dtypes[0],
                    arch: archs[0],
                    result: Err(std::sync::Arc::new(e)),
                    no_line_info: false,
                });
                continue;
            }
            for (arch, why) in &refusals {
                skipped.push(Skipped { manifest: m.name.clone(), params: params.clone(), arch: *arch, why: why.clone() });
            }
            for &dtype in &m.dtypes {
                for &arch in archs.iter().filter(|a| !refusals.iter().any(|(r, _)| r == *a)) {
                    out.push(build_one(compiler, m, m.name.clone(), &params, dtype, arch));
                }
            }
        }
        if let crate::core::manifest::ReferenceSpec::Kernel(k) = &m.reference {
            out.extend(build_reference(m, k, archs, compiler));
        }
    }
    (out, skipped)
}

/// One configuration of `m` compiled, reported under `label`.
fn build_one(compiler: &Compiler, m: &Manifest, label: String, params: &BTreeMap<String, i64>, dtype: Dtype, arch: Arch) -> BuildOutcome {
    let req = request_for(m, params, dtype, arch, &BTreeMap::new());
    // A launch sequence's later kernels must be in the same module: said here, not on a GPU.
    let compiled = compiler.compile(&req).and_then(|c| match m.steps.iter().find(|s| !has_symbol(&c.cubin, &s.entry)) {
        Some(s) => Err(CompileError::EntryMissing { source_path: m.source.clone(), entry: s.entry.clone(), arch }),
        None => Ok(c),
    });
    let no_line_info = compiled.as_ref().is_ok_and(|c| !c.has_line_info());
    let result = compiled.map(|c| (c.cubin.len(), c.from_cache)).map_err(std::sync::Arc::new);
    BuildOutcome { manifest: label, params: params.clone(), dtype, arch, result, no_line_info }
}

/// A user reference kernel's builds: the gold (every floating tensor double) and the baseline
/// at each of the kernel's dtypes, with the kernel's default params.
fn build_reference(m: &Manifest, k: &crate::core::manifest::ReferenceKernel, archs: &[Arch], compiler: &Compiler) -> Vec<BuildOutcome> {
    let params = m.default_params();
    let runs = std::iter::once((true, Dtype::F64)).chain(m.dtypes.iter().map(|&d| (false, d)));
    let mut out = Vec::new();
    for (gold, dtype) in runs {
        let rm = crate::engine::reference::kernel_manifest(m, k, gold);
        let label = format!("{} (reference {})", m.name, if gold { "gold" } else { "baseline" });
        for &arch in archs {
            out.push(build_one(compiler, &rm, label.clone(), &params, dtype, arch));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_parses_and_prints() {
        for (s, a) in [("sm_90", (9, 0)), ("90", (9, 0)), ("sm_89", (8, 9)), ("8.0", (8, 0)), ("sm_120", (12, 0)), ("100", (10, 0))] {
            let arch: Arch = s.parse().unwrap();
            assert_eq!((arch.major, arch.minor), a, "{s}");
        }
        assert_eq!(Arch::new(9, 0).to_string(), "sm_90");
        for bad in ["", "sm_", "9", "sm_9x", "compute_90", "sm_1000", "07"] {
            let e = bad.parse::<Arch>().unwrap_err();
            assert!(e.to_string().contains("sm_90"), "{bad}: {e}");
        }
        let json = serde_json::to_string(&Arch::new(8, 9)).unwrap();
        assert_eq!(json, "\"sm_89\"");
        assert_eq!(serde_json::from_str::<Arch>(&json).unwrap(), Arch::new(8, 9));
    }

    #[test]
    fn symbol_check_sees_whole_names_only() {
        let cubin = b"\x7fELF\0.text.my_fwd\0_Z6other_fwdPf\0";
        assert!(has_symbol(cubin, "my_fwd"));
        assert!(has_symbol(cubin, "_Z6other_fwdPf"));
        assert!(!has_symbol(cubin, "fwd"));
        assert!(!has_symbol(cubin, "other_fwd"));
        assert!(!has_symbol(cubin, ""));
    }
}
