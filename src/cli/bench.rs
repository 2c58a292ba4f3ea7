//! `cudafuzz bench`: engine throughput by case size ([`crate::tools::bench`]), printed as a table.

use anyhow::{Context, Result};

use super::{fail, manifest_inputs, no_gpu, refuse_clobber, resolve_kernel, setup, BenchArgs};
use crate::core::exit;
use crate::core::generate::DecodeContext;
use crate::core::manifest::Manifest;
use crate::core::verdict::{ReferenceChoice, RunOptions};
use crate::run::config::{EngineConfig, GpuSelection};
use crate::run::supervisor::Pool;
use crate::tools::bench;

pub(super) fn bench(b: BenchArgs) -> Result<i32> {
    if b.floor {
        return floor(&b);
    }
    let m = resolve_kernel(&b.kernel)?;
    let ctx = DecodeContext::new(&m);
    let against = b.against.as_deref().map(resolve_kernel).transpose()?;
    if let Some(other) = &against {
        // The same cases run both ways: the other manifest must take them.
        let case = bench::small_case(&m, &ctx, 1, 0);
        if let Err(e) = crate::core::plan::Plan::new(&case, other) {
            return Err(fail(
                exit::USAGE,
                format!(
                    "bench --against {}: it cannot run the cases of {} ({}); give the same kernel called another way, with the same tensors, dims and scalars",
                    other.path.display(),
                    m.path.display(),
                    crate::core::error::chain(&e)
                ),
            ));
        }
    }
    let alignment = b.align.map_or(bench::Alignment::Any, bench::Alignment::Aligned);
    if let Some(json) = &b.json {
        refuse_clobber(json, manifest_inputs(&m))?;
        super::refuse_directory("--json", json)?;
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
    let mut rows: Vec<bench::BenchRow> = Vec::new();
    // Progress while the next configuration runs: the row without the header.
    let progress = |row: &bench::BenchRow| errln!("{}", bench::table(std::slice::from_ref(row)).lines().nth(1).unwrap_or_default());
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
            let work = bench::Workload { run: &m, drawn: &m, size, alignment };
            let row = bench::measure_pool(one, work, opts, cases, &label).map_err(no_gpu)?;
            progress(&row);
            rows.push(row);
        }
    }
    // The same cases another way (the first row ran them through `m`: the first size, no
    // determinism run), and (with --align) the cases that fault, each way.
    let per_case_us = |row: &bench::BenchRow| 1e6 / row.cases_per_sec.max(1e-9);
    let mut cost = None;
    let ways: Vec<&Manifest> = std::iter::once(&m).chain(against.as_ref()).collect();
    if against.is_some() || b.align.is_some() {
        let size = sizes[0];
        if let Some(other) = &against {
            let work = bench::Workload { run: other, drawn: &m, size, alignment };
            let label = format!("{}, {}, gpu fp64 ref, no determinism run", size.name(), other.name);
            let row = bench::measure_pool(&mut gpu_one, work, &plain, b.cases, &label).map_err(no_gpu)?;
            progress(&row);
            cost = Some((per_case_us(&rows[0]), other.name.clone(), per_case_us(&row)));
            rows.push(row);
        }
        let misaligned = b.align.filter(|&bytes| {
            let probe = bench::sized_case(&m, &ctx, size, bench::Alignment::Misaligned(bytes), 1, 0);
            let found = bench::Alignment::Misaligned(bytes).keeps(&m, &probe);
            if !found {
                errln!("bench: no case of {} inside its contract has a tensor misaligned to {bytes} bytes: no fault row", m.name);
            }
            found
        });
        if let Some(bytes) = misaligned {
            for run in &ways {
                let work = bench::Workload { run, drawn: &m, size, alignment: bench::Alignment::Misaligned(bytes) };
                let label = format!("{}, {}, misaligned: fault + restart", size.name(), run.name);
                // Each case ends its worker: a few show the restart's cost.
                let row = bench::measure_pool(&mut gpu_one, work, &plain, (b.cases / 20).clamp(1, 50), &label).map_err(no_gpu)?;
                progress(&row);
                rows.push(row);
            }
        }
    }
    drop((gpu_one, cpu_one));
    if cfg.jobs > 1 || cfg.gpus != GpuSelection::One {
        let mut pool = gpu_engine.pool().map_err(setup)?;
        let gpus = pool.gpus();
        let mps = if pool.slots.iter().any(|s| s.shares_gpu()) { ", MPS" } else { "" };
        let label = format!("{}, gpu fp64 ref, {} workers on {} GPU(s){mps}", sizes[0].name(), pool.slots.len(), gpus.len());
        let cases = b.cases * pool.slots.len() as u64;
        let work = bench::Workload { run: &m, drawn: &m, size: sizes[0], alignment };
        rows.push(bench::measure_pool(&mut pool, work, &plain, cases, &label).map_err(no_gpu)?);
    }
    outln!(
        "cudafuzz bench: kernel {} on {} ({}), driver {}; sizes: small = batch*heads <= 8, seq <= 256; medium = seq 256..1024; large = seq 2048..4096, batch 1; past-int32 = small with one tensor's stride_b past 2^31 elements",
        m.name, gpu.name, gpu.arch, gpu.driver_version
    )?;
    out!("{}", bench::table(&rows))?;
    if let Some((a_us, other, b_us)) = cost {
        outln!("cost of the same case: {a_us:.0} us through {}, {b_us:.0} us through {other}: {} costs {:.2}x {other}", m.name, m.name, a_us / b_us)?;
    }
    write_json(b.json.as_deref(), &rows)?;
    Ok(exit::OK)
}

/// Writes `rows` as JSON to `path`, when given (`--json`).
fn write_json<T: serde::Serialize>(path: Option<&std::path::Path>, rows: &T) -> Result<()> {
    if let Some(path) = path {
        std::fs::write(path, serde_json::to_string_pretty(rows)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// `bench --floor`: each configuration in one process, then in `--jobs` processes at once, for
/// 5 s each ([`crate::tools::floor`]).
fn floor(b: &BenchArgs) -> Result<i32> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let jobs = b.engine.jobs;
    let mut rows = Vec::new();
    for spec in crate::tools::floor::specs(b.floor_bytes) {
        for processes in [1, jobs].into_iter().collect::<std::collections::BTreeSet<_>>() {
            let row = crate::tools::floor::measure(&exe, b.engine.gpu, spec, processes, std::time::Duration::from_secs(5))
                .map_err(|e| fail(exit::NO_GPU, format!("NO GPU: {e}")))?;
            errln!("{}", crate::tools::floor::table(std::slice::from_ref(&row)).lines().nth(1).unwrap_or_default());
            rows.push(row);
        }
    }
    write_json(b.json.as_deref(), &rows)?;
    outln!("{}", crate::tools::floor::table(&rows).trim_end())?;
    Ok(exit::OK)
}

/// One process of `bench --floor`: its count as one JSON line; exit 3 without a GPU.
pub(super) fn floor_process(gpu: usize, spec: crate::engine::floor::FloorSpec, millis: u64) -> Result<i32> {
    match crate::engine::floor::measure(gpu, spec, std::time::Duration::from_millis(millis)) {
        Ok(count) => {
            outln!("{}", serde_json::to_string(&count)?)?;
            Ok(exit::OK)
        }
        Err(e) => Err(fail(exit::NO_GPU, crate::core::error::chain(&e))),
    }
}
