//! Helpers shared by the integration test files (each file is its own crate and uses a subset,
//! hence the `dead_code` allowance).
#![allow(dead_code)]

pub mod env;

use std::collections::BTreeSet;
use std::path::PathBuf;

use cudafuzz::core::case::{Case, Dtype, Scalar};
use cudafuzz::core::manifest::expr::Env;
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::plan::Plan;

/// Whether this machine lacks what a GPU test needs (a GPU; compute-sanitizer too when
/// `sanitizer`), recording the skip when it does ([`env::have`]). On a GPU host
/// `CUDAFUZZ_REQUIRE_GPU=1` makes a missing GPU or sanitizer a failure instead.
pub fn lacks_gpu(sanitizer: bool) -> bool {
    let needs: &[env::Need] = if sanitizer { &[env::Need::Gpu, env::Need::Sanitizer] } else { &[env::Need::Gpu] };
    !env::have_all(needs)
}

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

/// The cudafuzz binary run in `cwd` with `args` and `env`, with no kernel or kernels folder
/// forced through the environment (as a user's shell would have it).
pub fn cudafuzz_in(cwd: &std::path::Path, args: &[&str], env: &[(&str, &std::path::Path)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(exe());
    cmd.current_dir(cwd).args(args).env_remove("CUDAFUZZ_KERNEL").env_remove("CUDAFUZZ_KERNELS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// A command's stdout and stderr, one after the other.
pub fn output_text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A shipped kernel copied out of the repository, as a user's own: the `sources` beside the
/// manifest `kernels/<manifest>` copied into `dir` (created), and the manifest written there as
/// `name` with `edit` applied. Returns the new manifest's path.
pub fn copy_kernel(dir: &std::path::Path, manifest: &str, sources: &[&str], name: &str, edit: &dyn Fn(String) -> String) -> PathBuf {
    let from = root().join("kernels").join(manifest);
    let src = from.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    for f in sources {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let path = dir.join(name);
    std::fs::write(&path, edit(std::fs::read_to_string(&from).unwrap())).unwrap();
    path
}

/// [`copy_kernel`] of the shipped silu_and_mul (kernel and reference kernel).
pub fn copy_silu(dir: &std::path::Path, name: &str, edit: &dyn Fn(String) -> String) -> PathBuf {
    copy_kernel(dir, "activation/silu_and_mul.toml", &["silu_and_mul.cu", "silu_and_mul_ref.cu"], name, edit)
}

/// A manifest under the repository root, loaded (a test bug if it does not load).
pub fn manifest(rel: &str) -> Manifest {
    Manifest::load(&root().join(rel)).unwrap_or_else(|e| panic!("{e}"))
}

/// Every shipped manifest under `kernels/` that cudafuzz builds (NVRTC targets) and judges
/// without Python, loaded. The Python targets and references (`kernels/python/`) need their
/// interpreter and packages: python_targets.rs loads them, ci/gpu-check.sh runs them.
pub fn shipped() -> Vec<Manifest> {
    cudafuzz::core::manifest::find_manifests(&root().join("kernels"))
        .iter()
        .map(|p| Manifest::load(p).unwrap_or_else(|e| panic!("{e}")))
        .filter(|m| m.target.is_compiled_here() && m.python_calls().next().is_none())
        .collect()
}

/// The small attention case the attention-only model called its example, for a kernel whose
/// manifest declares the attention roster (dims batch, heads_q, heads_kv, seq_q, seq_k,
/// head_dim; scalars causal, scale): f16, batch 1, heads 2/1, seq 65 × 113, head_dim 64, not
/// causal, scale 0.125, data seed 1, every tensor dense at offset 0, default params, the kernel
/// named by its manifest's path.
pub fn attention_example(m: &Manifest) -> Case {
    let mut c = Case::new(&m.path.display().to_string(), Dtype::F16);
    c.params = m.default_params();
    for (d, v) in [("batch", 1), ("heads_q", 2), ("heads_kv", 1), ("seq_q", 65), ("seq_k", 113), ("head_dim", 64)] {
        assert!(m.dim(d).is_some(), "{} has no dim {d}: not an attention manifest", m.name);
        c.dims.insert(d.into(), v);
    }
    c.scalars.insert("causal".into(), Scalar::Bool(false));
    c.scalars.insert("scale".into(), Scalar::Float(0.125));
    c
}

/// [`attention_example`] of the shipped manifest `rel`, with its kernel named `kernel` as a
/// seed file would (a shipped name or a manifest path).
pub fn attention_example_named(rel: &str, kernel: &str) -> Case {
    Case { kernel: kernel.to_string(), ..attention_example(&manifest(rel)) }
}

/// `c` made cheap enough for host-side property tests and short GPU runs: every dim above
/// `limit(name)` folded into `range[0]..=limit` (values at or under the limit are kept, so the
/// small boundary values the decoder favours still come up), the manifest's relations repaired,
/// each scalar drawn from a choice re-evaluated for the new dims (`1 / sqrt(head_dim)` follows
/// head_dim), and all padding dropped when a tensor would still reach past 2³¹ elements (the
/// decoder's rare int32-overflow cases span gigabytes).
pub fn small(m: &Manifest, mut c: Case, limit: &dyn Fn(&str) -> u64) -> Case {
    let before = Plan::new(&c, m).ok();
    let picked: Vec<(usize, usize)> = match &before {
        Some(p) => m
            .scalars
            .iter()
            .enumerate()
            .filter_map(|(si, s)| s.choices.iter().position(|ch| m.choice_value(s, ch, &p.vars) == c.scalar(&s.name)).map(|ci| (si, ci)))
            .collect(),
        None => Vec::new(),
    };
    let held_before: Vec<bool> = relations(m).iter().map(|r| holds(m, &c, r)).collect();
    for d in &m.dims {
        let hi = limit(&d.name).max(d.range[0]);
        let v = c.dim(&d.name);
        if v <= hi {
            continue;
        }
        let lo = d.range[0].clamp(1, hi);
        let mut folded = lo + (v - lo) % (hi - lo + 1);
        if d.multiple > 1 && v.is_multiple_of(d.multiple) {
            // Keep a value that honoured the dim's multiple a multiple.
            folded -= folded % d.multiple;
            if folded < lo {
                folded += d.multiple;
            }
        }
        c.dims.insert(d.name.clone(), folded);
    }
    // `repair` moves every related dim to its smallest satisfying value, which would turn every
    // GQA case into MHA; only a relation the folding broke calls for it.
    if relations(m).iter().zip(held_before).any(|(r, held)| held && !holds(m, &c, r)) {
        cudafuzz::core::generate::relations::repair(&mut c, m, 0);
    }
    if let Ok(p) = Plan::new(&c, m) {
        for (si, ci) in picked {
            let s = &m.scalars[si];
            if let Some(v) = m.choice_value(s, &s.choices[ci], &p.vars) {
                c.scalars.insert(s.name.clone(), v);
            }
        }
    }
    // A case pushed past 2³¹ elements keeps its huge padding when folding its dims leaves the
    // stride just under 2³¹; brute-force checks would walk gigabytes of it.
    if Plan::new(&c, m).map_or(true, |p| p.reaches_past_int32() || p.tensors.iter().any(|t| t.span_bytes > 1 << 24)) {
        for l in c.tensors.values_mut() {
            l.pad.clear();
        }
    }
    c
}

/// The manifest's relations between dims: what makes a case well formed, then the contract's.
fn relations(m: &Manifest) -> Vec<&String> {
    m.requires.iter().chain(&m.contract.relations).collect()
}

/// Whether relation `rel` holds for the dims and params of `c`.
fn holds(m: &Manifest, c: &Case, rel: &str) -> bool {
    Env::new(&cudafuzz::core::generate::relations::dim_vars(c, m)).boolean(rel).unwrap_or(false)
}

/// `case` with the memory layout (order, padding, base offset) `other` gives each tensor, and
/// `case`'s own dims, values, broadcast dims and placement: the same logical inputs, laid out
/// differently (what layout metamorphism compares).
pub fn relayout(case: &Case, other: &Case) -> Case {
    let mut moved = case.clone();
    let names: BTreeSet<String> = case.tensors.keys().chain(other.tensors.keys()).cloned().collect();
    for name in names {
        let from = other.layout(&name);
        let l = moved.layout_mut(&name);
        l.order = from.order;
        l.pad = from.pad;
        l.offset_bytes = from.offset_bytes;
    }
    moved.normalize_layouts();
    moved
}

/// Bytes that look random enough for the decoder (splitmix64), `n` of them for `seed`.
pub fn decoder_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e3779b97f4a7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

/// `n` draws of cases of `m` from the generator seed `seed`, as data scheme v2 cases, each with
/// its draw's number (draws that decode to no case are left out).
pub fn v2_cases(m: &Manifest, seed: u64, n: usize) -> Vec<(usize, Case)> {
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    let ctx = cudafuzz::core::generate::DecodeContext::new(m);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .filter_map(|k| {
            let mut raw = [0u8; 256];
            rng.fill_bytes(&mut raw);
            let mut case = cudafuzz::core::generate::decode_case(&mut arbitrary::Unstructured::new(&raw), &ctx).ok()?;
            case.data = cudafuzz::core::case::DataScheme::V2;
            Some((k, case))
        })
        .collect()
}

/// NVRTC builds `kernels/harness/<file>` (entry `entry`) for sm_90 as the engine does, with
/// `--fmad=false`; skips with a printed reason where there is no NVRTC.
pub fn harness_compiles(file: &str, entry: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let Some(c) = env::compiler(tmp.path()) else { return };
    let req = cudafuzz::engine::compile::CompileRequest {
        source: root().join("kernels/harness").join(file),
        entry: entry.into(),
        defines: Default::default(),
        options: vec!["--fmad=false".into()],
        arch: cudafuzz::engine::compile::Arch::new(9, 0),
        build: Default::default(),
    };
    let out = c.compile(&req).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert!(!out.cubin.is_empty(), "{file}: an empty cubin");
}
