//! `cudafuzz doctor` (what this machine has for cudafuzz, and the one line that installs what
//! is missing) and `cudafuzz cache` (the compiled-kernel cache: where, how big, `--clear`).

use anyhow::Result;
use clap::Args;

use super::{chain, fail};
use crate::core::exit;
use crate::core::registry;
use crate::engine::compile::{self, Compiler};
use crate::engine::gpu::{self, Gpu};
use crate::run::sanitizer::Sanitizer;

/// The one line that installs NVRTC and the CUDA headers where cudafuzz finds them.
pub(super) const NVRTC_INSTALL: &str = "python3 -m pip install nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cuda-cccl";

/// Arguments of `cudafuzz doctor`.
#[derive(Debug, Args)]
pub(super) struct DoctorArgs {
    /// Check NVRTC, the CUDA headers and CUB only (what compiling the shipped kernels needs):
    /// exit 0 when found, 4 when not. Scripts use it to decide whether to install them.
    #[arg(long)]
    nvrtc: bool,
}

/// Arguments of `cudafuzz cache`.
#[derive(Debug, Args)]
pub(super) struct CacheArgs {
    /// Remove every cached cubin (they are rebuilt on demand).
    #[arg(long)]
    clear: bool,
}

/// `cudafuzz doctor`: one line per thing cudafuzz uses. Exit 4 when NVRTC or the CUDA headers
/// are missing (nothing can compile); a missing GPU or compute-sanitizer is said but is not a
/// failure, since the host-side work still runs.
pub(super) fn doctor(a: DoctorArgs) -> Result<i32> {
    let compiler = Compiler::new(None);
    let nvrtc_ok = match &compiler {
        Ok(c) => {
            let path = c.nvrtc_path().map(|p| format!(" ({})", p.display())).unwrap_or_default();
            let archs: Vec<String> = c.supported_archs().iter().map(|a| a.to_string()).collect();
            outln!("nvrtc      {}.{}{path}; compiles for {}", c.nvrtc_version().0, c.nvrtc_version().1, archs.join(" "))?;
            match c.cuda_include() {
                Some(d) => outln!("headers    {}", d.display())?,
                None => outln!("headers    none found beside NVRTC: kernels that include cuda_fp16.h will not compile; install them with: {NVRTC_INSTALL}")?,
            }
            // CUB: in the headers' cccl/ folder (CUDA 13, the nvidia-cuda-cccl wheel), or beside
            // them (a CUDA 12 toolkit).
            let cub = c.cccl_include().or_else(|| c.cuda_include().filter(|d| d.join("cub").is_dir()).map(std::path::Path::to_path_buf));
            match &cub {
                Some(d) => outln!("cub        {}", d.join("cub").display())?,
                None => outln!("cub        MISSING: shipped kernels that include <cub/...> will not compile; install it with: {NVRTC_INSTALL}")?,
            }
            c.cuda_include().is_some() && cub.is_some()
        }
        Err(e) => {
            outln!("nvrtc      MISSING: {}", chain(anyhow::anyhow!(e.to_string())))?;
            outln!("           install it with: {NVRTC_INSTALL}")?;
            false
        }
    };
    if a.nvrtc {
        return Ok(if nvrtc_ok { exit::OK } else { exit::SETUP });
    }
    match gpu::device_count() {
        Ok(n) => {
            for i in 0..n {
                match Gpu::open(i) {
                    Ok(g) => {
                        let i = &g.info;
                        let driver = format!("{}.{}", i.driver_version / 1000, (i.driver_version % 1000) / 10);
                        outln!("gpu {}      {} ({}), driver CUDA {driver}, {} GiB", i.ordinal, i.name, i.arch, i.total_mem >> 30)?;
                        if let Ok(c) = &compiler {
                            if c.nvrtc_version().0 > i.driver_version / 1000 {
                                outln!("           note: NVRTC {}.{} is newer than the driver's CUDA {driver}: its cubins may not load; install the driver's NVRTC (python3 -m pip install nvidia-cuda-nvrtc-cu{}) or update the driver", c.nvrtc_version().0, c.nvrtc_version().1, i.driver_version / 1000)?;
                            }
                        }
                    }
                    Err(e) => outln!("gpu {i}      cannot be opened: {e}")?,
                }
            }
        }
        Err(e) => outln!("gpu        NONE: {e}; fuzz, run and the gate need one, and everything else runs without")?,
    }
    match Sanitizer::locate() {
        Ok(s) => outln!("sanitizer  {} ({})", s.version, s.path.display())?,
        Err(e) => outln!("sanitizer  not found: {e}")?,
    }
    let dir = registry::kernels_dir();
    let (ok, bad) = registry::shipped().iter().fold((0, 0), |(ok, bad), m| if m.is_ok() { (ok + 1, bad) } else { (ok, bad + 1) });
    outln!(
        "kernels    {ok} shipped manifests in {}{}",
        dir.display(),
        if bad > 0 { format!(", {bad} that do not load (see `cudafuzz kernels`)") } else { String::new() }
    )?;
    let cache = compile::default_cache_dir();
    let u = compile::cache_usage(&cache).map_err(|e| fail(exit::SETUP, format!("{}: {e}", cache.display())))?;
    outln!("cache      {} ({} cubins, {}); `cudafuzz cache --clear` empties it", cache.display(), u.cubins, megabytes(u.bytes))?;
    Ok(if nvrtc_ok { exit::OK } else { exit::SETUP })
}

/// `cudafuzz cache [--clear]`.
pub(super) fn cache(a: CacheArgs) -> Result<i32> {
    let dir = compile::default_cache_dir();
    let io = |e: std::io::Error| fail(exit::SETUP, format!("{}: {e}", dir.display()));
    if a.clear {
        let gone = compile::clear_cache(&dir).map_err(io)?;
        outln!("cleared {}: {} cubins, {} removed", dir.display(), gone.cubins, megabytes(gone.bytes))?;
    } else {
        let u = compile::cache_usage(&dir).map_err(io)?;
        outln!("{}: {} cubins, {} (CUDAFUZZ_CACHE moves it; --clear empties it)", dir.display(), u.cubins, megabytes(u.bytes))?;
    }
    Ok(exit::OK)
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}
