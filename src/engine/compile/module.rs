//! Modules NVRTC does not build: `compiler = "nvcc"` (nvcc run on the kernel, for code NVRTC
//! cannot compile) and prebuilt modules (`module = [...]`: a `.cubin`, `.fatbin` or `.ptx` the
//! user's build made), and finding an entry's symbol in a module nobody lowered it for.
//!
//! NVRTC lowers a name expression itself; for the others the module's names are read from its
//! bytes (an ELF string table, PTX text or an uncompressed fatbin all hold them verbatim), each
//! mangled one demangled, and the one whose name the entry spells is taken
//! ([`crate::core::manifest::entry::same_name`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Arch, CompileError, CompileRequest, Compiled};
use crate::core::manifest::entry::same_name;
use crate::core::manifest::expr::is_identifier;

/// Where nvcc is looked for: `$CUDAFUZZ_NVCC`, then `PATH`, `$CUDA_HOME/bin`, `$CUDA_PATH/bin`,
/// `/usr/local/cuda/bin`, and the `nvidia-cuda-nvcc` wheel in `.cuda-wheels`.
pub fn find_nvcc() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CUDAFUZZ_NVCC").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(d) = std::env::var_os(var).filter(|d| !d.is_empty()) {
            dirs.push(PathBuf::from(d).join("bin"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    dirs.push(PathBuf::from(".cuda-wheels/nvidia/cu13/bin"));
    dirs.into_iter().map(|d| d.join("nvcc")).find(|p| p.is_file())
}

/// The module bytes nvcc builds for a request: the source included by a generated file that
/// also takes the entry's address in host code, which makes nvcc instantiate a template entry.
fn run_nvcc(nvcc: &Path, req: &CompileRequest, source: &Path, options: &[String]) -> Result<(Vec<u8>, String), CompileError> {
    let dir = tempfile::tempdir().map_err(|source| CompileError::Cache { path: std::env::temp_dir(), action: "create", source })?;
    let wrapper = dir.path().join("cudafuzz_entry.cu");
    let mut text = format!("#include \"{}\"\n", source.display().to_string().replace('\\', "\\\\").replace('"', "\\\""));
    if !is_identifier(&req.entry) {
        text.push_str(&format!("[[maybe_unused]] static const void* const cudafuzz_entry_instance = (const void*)&{};\n", req.entry));
    }
    std::fs::write(&wrapper, text).map_err(|source| CompileError::Cache { path: dir.path().to_path_buf(), action: "write", source })?;
    let out = dir.path().join("module.cubin");
    let mut cmd = Command::new(nvcc);
    cmd.arg("-cubin").arg(format!("-arch={}", req.arch)).args(options).arg("-o").arg(&out).arg(&wrapper);
    let run = cmd.output().map_err(|e| nvcc_failed(req, source, format!("cannot run {}: {e}; set CUDAFUZZ_NVCC to an nvcc", nvcc.display())))?;
    let log = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr)).trim_end().to_string();
    if !run.status.success() {
        return Err(nvcc_failed(req, source, if log.is_empty() { format!("nvcc exited with {}", run.status) } else { log }));
    }
    let cubin = std::fs::read(&out).map_err(|e| nvcc_failed(req, source, format!("nvcc wrote no module: {e}")))?;
    Ok((cubin, log))
}

/// An nvcc build of a request: the module, nvcc's output and the entry's symbol. The built-in
/// headers NVRTC is handed by name are written to a folder on nvcc's include path.
pub(super) fn nvcc_build(
    nvcc: &Path,
    req: &CompileRequest,
    source: &Path,
    options: &[String],
    builtins: &[(&str, &str)],
) -> Result<(Vec<u8>, String, String), CompileError> {
    let headers = tempfile::tempdir().map_err(|source| CompileError::Cache { path: std::env::temp_dir(), action: "create", source })?;
    let mut options = options.to_vec();
    for (name, text) in builtins {
        std::fs::write(headers.path().join(name), text).map_err(|source| CompileError::Cache {
            path: headers.path().to_path_buf(),
            action: "write",
            source,
        })?;
    }
    if !builtins.is_empty() {
        options.push(format!("--include-path={}", headers.path().display()));
    }
    let (cubin, log) = run_nvcc(nvcc, req, source, &options)?;
    let symbol = find_symbol(&cubin, &req.entry).map_err(|problem| CompileError::Module { path: source.to_path_buf(), arch: req.arch, problem })?;
    Ok((cubin, log, symbol))
}

/// A prebuilt module's bytes and its entry's symbol (never cached: the file is the cache; the
/// key names the file and the symbol, so each instantiation is its own loaded module).
pub(super) fn prebuilt(req: &CompileRequest, paths: &[PathBuf]) -> Result<Compiled, CompileError> {
    let path = prebuilt_path(paths, req.arch).map_err(|problem| CompileError::Module { path: req.source.clone(), arch: req.arch, problem })?;
    let mut bytes = crate::core::userfile::read_module(&path).map_err(|source| CompileError::Source { path: path.clone(), source })?;
    let binary = bytes.starts_with(b"\x7fELF") || bytes.starts_with(&[0x50, 0xed, 0x55, 0xba]);
    if !binary && bytes.last() != Some(&0) {
        bytes.push(0); // PTX text: the driver reads it up to a NUL.
    }
    let symbol = find_symbol(&bytes, &req.entry).map_err(|problem| CompileError::Module { path: path.clone(), arch: req.arch, problem })?;
    Ok(Compiled { cubin: bytes, log: String::new(), key: format!("prebuilt:{}#{symbol}", path.display()), from_cache: true, symbol })
}

fn nvcc_failed(req: &CompileRequest, source: &Path, log: String) -> CompileError {
    CompileError::Kernel { source_path: source.to_path_buf(), arch: req.arch, defines: req.defines.clone(), log, hint: " (nvcc)".into() }
}

/// The prebuilt module for `arch`: the first of the manifest's `module` paths that exists, a
/// path with `{arch}` tried as the GPU's own architecture (`sm_89`) and then each lower minor
/// of the same major (`sm_88` … `sm_80`), whose cubins the GPU runs too.
pub fn prebuilt_path(paths: &[PathBuf], arch: Arch) -> Result<PathBuf, String> {
    let runs_on: Vec<Arch> = (0..=arch.minor).rev().map(|minor| Arch::new(arch.major, minor)).collect();
    let mut tried: Vec<PathBuf> = Vec::new();
    for p in paths {
        let text = p.to_string_lossy();
        if text.contains("{arch}") {
            tried.extend(runs_on.iter().map(|a| PathBuf::from(text.replace("{arch}", &a.to_string()))));
        } else {
            tried.push(p.clone());
        }
    }
    tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
        format!(
            "no prebuilt module for {arch}: none of {} exists; build one for it (`nvcc -cubin -arch={arch} -lineinfo ...`) or list a .fatbin / .ptx",
            list.join(", ")
        )
    })
}

/// The entry's symbol in a module's bytes: the name itself for an `extern "C"` entry, else the
/// mangled name that demangles to the entry's expression. The error lists the module's kernels.
pub fn find_symbol(module: &[u8], entry: &str) -> Result<String, String> {
    let names = names_in(module);
    if is_identifier(entry) && names.iter().any(|n| n == entry) {
        return Ok(entry.to_string());
    }
    let mangled: Vec<(&String, String)> = names.iter().filter(|n| n.starts_with("_Z")).filter_map(|n| Some((n, demangle(n)?))).collect();
    let hits: Vec<&String> = mangled.iter().filter(|(_, d)| same_name(d, entry)).map(|(n, _)| *n).collect();
    match hits.as_slice() {
        [one] => Ok((*one).clone()),
        [] => {
            let base = crate::core::manifest::entry::base_name(entry);
            let mut shown: Vec<String> = mangled.iter().map(|(_, d)| d.clone()).filter(|d| d.contains(base)).collect();
            shown.sort();
            shown.dedup();
            let total = shown.len();
            shown.truncate(8);
            let listed = match total {
                0 if mangled.is_empty() => "it holds no readable C++ names (a compressed fatbin? ship a .cubin)".to_string(),
                0 => format!("none of its {} C++ functions is named {base}", mangled.len()),
                n if n > shown.len() => format!("those named {base}: {}; and {} more", shown.join("; "), n - shown.len()),
                _ => format!("those named {base}: {}", shown.join("; ")),
            };
            Err(format!("no kernel named `{entry}` in the module; {listed}"))
        }
        many => Err(format!(
            "`{entry}` names {} functions in the module ({}); spell its template arguments out",
            many.len(),
            many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The note a campaign opens with when a kernel's prebuilt module for `arch` carries no line
/// information: its sanitizer findings will name no source line.
pub fn line_info_note(m: &crate::core::manifest::Manifest, arch: Arch) -> Option<String> {
    let crate::core::target::Build::Prebuilt(paths) = &m.build else { return None };
    let path = prebuilt_path(paths, arch).ok()?;
    let bytes = crate::core::userfile::read_module(&path).ok()?;
    (!has_line_info(&bytes)).then(|| {
        format!("note: {}: {} carries no line information (built without -lineinfo): sanitizer findings will name no source line", m.name, path.display())
    })
}

/// Whether a cubin carries source line information (`-lineinfo`): without it a sanitizer
/// report names no source line.
pub fn has_line_info(module: &[u8]) -> bool {
    if module.starts_with(b"//") || module.starts_with(b"\n") {
        return String::from_utf8_lossy(module).contains(".loc");
    }
    contains(module, b".nv_debug_line_sass") || contains(module, b".debug_line")
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every identifier-like run of bytes (`[A-Za-z0-9_$]`, starting with a letter or `_`) in the
/// module.
fn names_in(module: &[u8]) -> Vec<String> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let mut out = Vec::new();
    let mut i = 0;
    while i < module.len() {
        if word(module[i]) {
            let start = i;
            while i < module.len() && word(module[i]) {
                i += 1;
            }
            let w = &module[start..i];
            if w[0] == b'_' || w[0].is_ascii_alphabetic() {
                out.push(String::from_utf8_lossy(w).into_owned());
            }
        } else {
            i += 1;
        }
    }
    out.sort();
    out.dedup();
    out
}

fn demangle(name: &str) -> Option<String> {
    let sym = cpp_demangle::Symbol::new(name).ok()?;
    sym.demangle().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_entry_is_found_by_its_demangled_name() {
        let module = b"\x7fELF\0_ZN3cfx8rms_normILj4EfLi256EEEvPT0_PKS1_S4_ifxx\0_ZN3cfx9block_sumILi256EEEff\0plain_fwd\0";
        assert_eq!(find_symbol(module, "cfx::rms_norm<4, float, 256>").unwrap(), "_ZN3cfx8rms_normILj4EfLi256EEEvPT0_PKS1_S4_ifxx");
        assert_eq!(find_symbol(module, "plain_fwd").unwrap(), "plain_fwd");
        let e = find_symbol(module, "cfx::rms_norm<8, float, 256>").unwrap_err();
        assert!(e.contains("cfx::rms_norm<") && !e.contains("block_sum"), "{e}");
        let ptx = b"//\n.visible .entry _ZN3cfx8rms_normILj4EfLi256EEEvPT0_PKS1_S4_ifxx(\n.loc 1 2 3\n";
        assert!(find_symbol(ptx, "cfx::rms_norm<4, float, 256>").is_ok());
        assert!(has_line_info(ptx));
        assert!(!has_line_info(module));
    }

    #[test]
    fn a_prebuilt_module_is_the_first_that_exists_for_the_arch() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k.sm_90.cubin"), b"x").unwrap();
        std::fs::write(dir.path().join("k.sm_80.cubin"), b"x").unwrap();
        let paths = vec![dir.path().join("k.{arch}.cubin"), dir.path().join("k.fatbin")];
        assert_eq!(prebuilt_path(&paths, Arch::new(9, 0)).unwrap(), dir.path().join("k.sm_90.cubin"));
        assert_eq!(prebuilt_path(&paths, Arch::new(8, 9)).unwrap(), dir.path().join("k.sm_80.cubin"), "an sm_8x GPU runs sm_80 cubins");
        let e = prebuilt_path(&paths, Arch::new(10, 0)).unwrap_err();
        assert!(e.contains("k.sm_100.cubin") && e.contains("k.fatbin") && e.contains("-arch=sm_100"), "{e}");
    }
}
