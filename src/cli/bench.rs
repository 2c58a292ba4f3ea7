//! `cudafuzz bench`: engine throughput by case size ([`crate::tools::bench`]), printed as a table.

use anyhow::{Context, Result};

use super::{manifest_inputs, no_gpu, refuse_clobber, resolve_kernel, setup, BenchArgs};
use crate::core::exit;
use crate::core::verdict::{ReferenceChoice, RunOptions};
use crate::run::config::{EngineConfig, GpuSelection};
use crate::run::supervisor::Pool;
use crate::tools::bench;

pub(super) fn bench(b: BenchArgs) -> Result<i32> {
    let m = resolve_kernel(&b.kernel)?;
    if let Some(json) = &b.json {
        refuse_clobber(json, manifest_inputs(&m))?;
    }
    let sizes = b.sizes.clone();
    let cfg = b.engine.config()?;
    let gpu_engine = EngineConfig { reference: ReferenceChoice::Gpu, ..cfg.clone() };
    let mut gpu_one = Pool::new(vec![gpu_engine.supervisor().map_err(setup)?]);
    let gpu = gpu_one.slots[0].gpu().map_err(no_gpu)?;
    let cpu_engine = EngineConfig { reference: ReferenceChoice::Cpu, ..cfg.clone() };
    let mut cpu_one = Pool::new(vec![cpu_engine.supervisor().map_err(setup)?]);
    let plain = RunOptions { determinism: false, reference: ReferenceChoice::Gpu, sanitizer: None, coverage: false, digest: false };
    let configs = [
        ("gpu fp64 ref, no determinism run", plain.clone()),
        ("gpu fp64 ref + determinism run", RunOptions { determinism: true, ..plain.clone() }),
        ("cpu fp64 ref, no determinism run", RunOptions { reference: ReferenceChoice::Cpu, ..plain.clone() }),
    ];
    let mut rows = Vec::new();
    // Under a sanitizer only the first configuration: the sanitizer's cost is the question.
    let n_configs = if cfg.sanitize.is_some() { 1 } else { configs.len() };
    for &size in &sizes {
        for (label, opts) in configs.iter().take(n_configs) {
            let one = if opts.reference == ReferenceChoice::Gpu { &mut gpu_one } else { &mut cpu_one };
            // The CPU reference is O(seq^2) in f64 on one core: seconds per large case.
            let cases = match (opts.reference, size) {
                (ReferenceChoice::Cpu, bench::CaseSize::Large) => (b.cases / 100).clamp(1, 8),
                // A few suffice: each allocates and frees 4–8 GiB of GPU memory.
                (_, bench::CaseSize::PastInt32) => (b.cases / 100).clamp(1, 10),
                (ReferenceChoice::Cpu, _) => (b.cases / 4).max(1),
                _ => b.cases,
            };
            let label = match &b.engine.sanitize {
                Some(tools) => format!("{}, {label}, {tools}, at most {} cases/process", size.name(), cfg.sanitize_batch),
                None => format!("{}, {label}", size.name()),
            };
            rows.push(bench::measure_pool(one, &m, opts, size, cases, &label).map_err(no_gpu)?);
            // Progress while the next configuration runs: the row without the header.
            errln!("{}", bench::table(&rows[rows.len() - 1..]).lines().nth(1).unwrap_or_default());
        }
    }
    drop((gpu_one, cpu_one));
    if cfg.jobs > 1 || cfg.gpus != GpuSelection::One {
        let mut pool = gpu_engine.pool().map_err(setup)?;
        let gpus = pool.gpus();
        let label = format!("{}, gpu fp64 ref, {} workers on {} GPU(s)", sizes[0].name(), pool.slots.len(), gpus.len());
        let cases = b.cases * pool.slots.len() as u64;
        rows.push(bench::measure_pool(&mut pool, &m, &plain, sizes[0], cases, &label).map_err(no_gpu)?);
    }
    outln!(
        "cudafuzz bench: kernel {} on {} ({}), driver {}; sizes: small = batch*heads <= 8, seq <= 256; medium = seq 256..1024; large = seq 2048..4096, batch 1; past-int32 = small with one tensor's stride_b past 2^31 elements",
        m.name, gpu.name, gpu.arch, gpu.driver_version
    )?;
    out!("{}", bench::table(&rows))?;
    if let Some(path) = &b.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(exit::OK)
}
