//! Integration tests of `cudafuzz::manifest` and `cudafuzz::compile`.
//!
//! Every test writes its own throwaway kernel and manifest into a temporary directory laid out
//! like the repository (`<tmp>/kernels/include/*.cuh`, `<tmp>/kernels/tiny/tiny.{cu,toml}`), so
//! nothing here depends on the shipped kernels. The NVRTC tests print `skipped: <reason>` and
//! return when no libnvrtc can be found; run them with e.g.
//! `LD_LIBRARY_PATH=$PWD/.cuda-wheels/nvidia/cu13/lib cargo test --test manifest_compile`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cudafuzz::case::{Case, Dim, Dtype, TensorId, TensorLayout};
use cudafuzz::compile::{build_all, request_for, Arch, CompileError, CompileRequest, Compiler};
use cudafuzz::manifest::{
    find_manifests, ArgSpec, BufferDtype, BufferInit, BufferRole, Manifest, ManifestError,
    ResolvedArg,
};
use cudafuzz::plan::{LayoutSupport, Plan};

const HEADER: &str = r#"// throwaway helper header for cudafuzz's own tests
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ inline float to_float(__half x) { return __half2float(x); }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(float x) { return x; }
template <typename T> __device__ inline T from_float(float x);
template <> __device__ inline __half from_float<__half>(float x) { return __float2half(x); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ inline float from_float<float>(float x) { return x; }
"#;

const KERNEL: &str = r#"// throwaway test kernel: o = q * scale, lse = 0
#include "tiny_common.cuh"
#if defined(CUDAFUZZ_DTYPE_F16)
typedef __half T;
#elif defined(CUDAFUZZ_DTYPE_BF16)
typedef __nv_bfloat16 T;
#elif defined(CUDAFUZZ_DTYPE_F32)
typedef float T;
#else
#error "no CUDAFUZZ_DTYPE_* define"
#endif
#ifndef BLOCK_N
#error "BLOCK_N not defined"
#endif
extern "C" __global__ void tiny_fwd(const T* q, const T* k, const T* v, T* o, float* lse,
                                    int seq_q, long long q_stride_s, float scale) {
    int row = blockIdx.x;
    if (row >= seq_q) return;
    for (int d = threadIdx.x; d < BLOCK_N; d += blockDim.x) {
        o[row * q_stride_s + d] = from_float<T>(to_float(q[row * q_stride_s + d]) * scale * TINY_FLAG);
    }
    if (threadIdx.x == 0) lse[row] = 0.0f;
}
"#;

const MANIFEST: &str = r#"
name = "tiny"
description = "throwaway test kernel"
source = "tiny.cu"
entry = "tiny_fwd"
options = ["--fmad=false"]

[defines]
TINY_FLAG = 1

[params]
BLOCK_N = [64, 128]

[contract]
dtypes = ["f16", "bf16", "f32"]
layouts = "strided"
head_dim = [1, 256]
head_dim_multiple = 1
seq_q = [1, 4096]
seq_k = [1, 4096]
min_align = 2
causal = true
gqa = true

[[buffers]]
name = "lse"
count = "batch * heads_q * seq_q"
dtype = "f32"
init = "neg_inf"
role = "lse"

[[buffers]]
name = "scratch"
count = "cdiv(seq_k, BLOCK_N) * 4"
dtype = "i32"
init = "const"
value = 7

[launch]
grid = ["seq_q", "heads_q", "batch"]
block = ["128", "1", "1"]
shared_bytes = "(seq_k + head_dim) * 4"
timeout_ms = 2000
args = [ { ptr = "q" }, { ptr = "k" }, { ptr = "v" }, { ptr = "o" }, { ptr = "lse" },
         { i32 = "seq_q" }, { i64 = "q.stride_s" }, { f32 = "scale" } ]
"#;

/// A repository-like tree in a temp dir; returns (guard, path of tiny.toml).
fn tree(manifest: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let include = tmp.path().join("kernels/include");
    let kdir = tmp.path().join("kernels/tiny");
    std::fs::create_dir_all(&include).unwrap();
    std::fs::create_dir_all(&kdir).unwrap();
    std::fs::write(include.join("tiny_common.cuh"), HEADER).unwrap();
    std::fs::write(kdir.join("tiny.cu"), KERNEL).unwrap();
    let path = kdir.join("tiny.toml");
    std::fs::write(&path, manifest).unwrap();
    (tmp, path)
}

/// Loads a variant of the base manifest (one `from` → `to` replacement that must apply).
fn load_variant(from: &str, to: &str) -> (tempfile::TempDir, PathBuf, Result<Manifest, ManifestError>) {
    assert!(MANIFEST.contains(from), "test bug: {from:?} not in the manifest");
    let (tmp, path) = tree(&MANIFEST.replacen(from, to, 1));
    let r = Manifest::load(&path);
    (tmp, path, r)
}

/// The error message of a variant that must fail, checked to name the file and the field.
fn error_of(from: &str, to: &str, field: &str) -> (ManifestError, String) {
    let (_tmp, path, r) = load_variant(from, to);
    let e = r.expect_err("the manifest should be rejected");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("{}: ", path.display())), "message does not start with the file: {msg}");
    assert!(msg.contains(&format!("field {field}")), "message does not name field {field}: {msg}");
    (e, msg)
}

// ---------------------------------------------------------------------------------------------
// Manifests

#[test]
fn valid_manifest_loads_with_every_field() {
    let (tmp, path) = tree(MANIFEST);
    let m = Manifest::load(&path).unwrap();
    assert_eq!(m.path, path);
    assert_eq!(m.name, "tiny");
    assert_eq!(m.description, "throwaway test kernel");
    assert_eq!(m.source, tmp.path().join("kernels/tiny/tiny.cu"));
    assert_eq!(m.entry, "tiny_fwd");
    assert!(m.fuzz);
    assert_eq!(m.options, vec!["--fmad=false".to_string()]);
    assert_eq!(m.defines, BTreeMap::from([("TINY_FLAG".to_string(), 1)]));
    assert_eq!(m.params, BTreeMap::from([("BLOCK_N".to_string(), vec![64, 128])]));
    assert_eq!(m.contract.dtypes, vec![Dtype::F16, Dtype::Bf16, Dtype::F32]);
    assert_eq!(m.contract.layouts, LayoutSupport::Strided);
    assert_eq!(m.contract.head_dim, [1, 256]);
    assert_eq!(m.contract.min_align, 2);
    assert_eq!(m.buffers.len(), 2);
    assert_eq!(m.buffers[0].name, "lse");
    assert_eq!(m.buffers[0].dtype, BufferDtype::F32);
    assert_eq!(m.buffers[0].init, BufferInit::NegInf);
    assert_eq!(m.buffers[0].role, Some(BufferRole::Lse));
    assert_eq!(m.buffers[1].init, BufferInit::Const(7.0));
    assert_eq!(m.buffers[1].role, None);
    assert_eq!(BufferDtype::I32.size(), 4);
    assert_eq!(BufferDtype::F64.size(), 8);
    assert_eq!(m.launch.grid, ["seq_q".to_string(), "heads_q".into(), "batch".into()]);
    assert_eq!(m.launch.shared_bytes, "(seq_k + head_dim) * 4");
    assert_eq!(m.launch.timeout_ms, Some(2000));
    assert_eq!(m.launch.args.len(), 8);
    assert_eq!(m.launch.args[0], ArgSpec::Ptr("q".into()));
    assert_eq!(m.launch.args[6], ArgSpec::I64("q.stride_s".into()));

    assert_eq!(m.default_params(), BTreeMap::from([("BLOCK_N".to_string(), 64)]));
    assert_eq!(m.param_combinations().len(), 2);
    let ctx = m.decode_context();
    assert_eq!(ctx.kernel, path.display().to_string());
    assert_eq!(ctx.params, vec![("BLOCK_N".to_string(), vec![64, 128])]);
    assert_eq!(ctx.dtypes, m.contract.dtypes);

    m.check_params(&BTreeMap::from([("BLOCK_N".to_string(), 128)])).unwrap();
    let e = m.check_params(&BTreeMap::from([("BLOCK_N".to_string(), 96)])).unwrap_err().to_string();
    assert!(e.contains("field params.BLOCK_N") && e.contains("96 is not one of [64, 128]"), "{e}");
    let e = m.check_params(&BTreeMap::new()).unwrap_err().to_string();
    assert!(e.contains("field params.BLOCK_N") && e.contains("does not set it"), "{e}");
    let e = m
        .check_params(&BTreeMap::from([("BLOCK_N".to_string(), 64), ("BLOCK_M".to_string(), 64)]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`BLOCK_M` is not a declared param"), "{e}");
}

#[test]
fn find_manifests_lists_only_kernel_manifests_sorted() {
    let (tmp, path) = tree(MANIFEST);
    let kernels = tmp.path().join("kernels");
    std::fs::create_dir_all(kernels.join("a/deeper")).unwrap();
    std::fs::write(kernels.join("a/deeper/other.toml"), "entry = \"x\"\nsource = \"x.cu\"\n").unwrap();
    std::fs::write(kernels.join("a/config.toml"), "[settings]\nentry = \"nested, not top level\"\n").unwrap();
    std::fs::write(kernels.join("a/broken.toml"), "entry = = \n").unwrap();
    std::fs::write(kernels.join("a/notes.txt"), "entry = \"x\"\nsource = \"y\"\n").unwrap();
    let found = find_manifests(&kernels);
    assert_eq!(found, vec![kernels.join("a/deeper/other.toml"), path]);
}

#[test]
fn unknown_keys_are_rejected_with_file_and_field() {
    let (_, msg) = error_of("description =", "colour = \"red\"\ndescription =", "colour");
    assert!(msg.contains("unknown key") && msg.contains("remove it"), "{msg}");
    let (_, msg) = error_of("timeout_ms = 2000", "timeout_ms = 2000\ngird = [\"1\"]", "launch");
    assert!(msg.contains("unknown field `gird`"), "{msg}");
    let (_, msg) = error_of("gqa = true", "gqa = true\nwarp_size = 32", "contract");
    assert!(msg.contains("unknown field `warp_size`"), "{msg}");
    let (_, msg) = error_of("role = \"lse\"", "role = \"lse\"\nsize = 4", "buffers[0]");
    assert!(msg.contains("unknown field `size`"), "{msg}");
    let (_, msg) = error_of("{ f32 = \"scale\" }", "{ u16 = \"scale\" }", "launch.args[7]");
    assert!(msg.contains("unknown variant `u16`"), "{msg}");
    let (_, msg) = error_of("init = \"neg_inf\"", "init = \"minus_inf\"", "buffers[0]");
    assert!(msg.contains("neg_inf"), "{msg}");
}

#[test]
fn bad_expressions_are_rejected_with_file_field_and_expression() {
    let (e, msg) = error_of("grid = [\"seq_q\"", "grid = [\"cdiv(seq, BLOCK_N)\"", "launch.grid[0]");
    assert!(matches!(e, ManifestError::Expr { .. }), "{e:?}");
    assert!(
        msg.contains("unknown variable `seq` in expression \"cdiv(seq, BLOCK_N)\" (")
            && msg.contains("known: batch, heads_q, heads_kv, seq_q")
            && msg.contains("BLOCK_N")
            && msg.contains("TINY_FLAG"),
        "{msg}"
    );
    let (_, msg) = error_of("block = [\"128\"", "block = [\"(128\"", "launch.block[0]");
    assert!(msg.contains("cannot parse") && msg.contains("\"(128\""), "{msg}");
    let (_, msg) = error_of("block = [\"128\"", "block = [\"seq_q / 2.0\"", "launch.block[0]");
    assert!(msg.contains("not an integer"), "{msg}");
    let (_, msg) = error_of("(seq_k + head_dim) * 4", "seq_q - 1000", "launch.shared_bytes");
    assert!(msg.contains("negative"), "{msg}");
    let (_, msg) = error_of("\"cdiv(seq_k, BLOCK_N) * 4\"", "\"floor(seq_k)\"", "buffers[1].count");
    assert!(msg.contains("unknown function `floor`") && msg.contains("cdiv, min, max"), "{msg}");
    let (_, msg) = error_of("{ i64 = \"q.stride_s\" }", "{ i64 = \"q.strid_s\" }", "launch.args[6]");
    assert!(msg.contains("did you mean `q.stride_s`?"), "{msg}");
    let (_, msg) = error_of("{ i64 = \"q.stride_s\" }", "{ i64 = \"q.stride_q\" }", "launch.args[6]");
    assert!(msg.contains("did you mean `q.stride_b` or `q.stride_h` or `q.stride_s` or `q.stride_d`?"), "{msg}");
    let (_, msg) = error_of("grid = [\"seq_q\"", "grid = [\"seq_q - seq_q\"", "launch.grid[0]");
    assert!(msg.contains("evaluates to 0"), "{msg}");
    let (_, msg) = error_of("[\"seq_q\", \"heads_q\", \"batch\"]", "[\"seq_q\", \"heads_q\"]", "launch.grid");
    assert!(msg.contains("give exactly 3"), "{msg}");
}

#[test]
fn unknown_pointer_argument_is_rejected() {
    let (_, msg) = error_of("{ ptr = \"lse\" }", "{ ptr = \"m\" }", "launch.args[4]");
    assert!(msg.contains("pointer `m`") && msg.contains("known: q, k, v, o, lse, scratch") && msg.contains("[[buffers]]"), "{msg}");
}

#[test]
fn missing_source_is_rejected() {
    let (_, msg) = error_of("source = \"tiny.cu\"", "source = \"nope.cu\"", "source");
    assert!(msg.contains("nope.cu does not exist") && msg.contains("relative to the manifest"), "{msg}");
    let (_, msg) = error_of("source = \"tiny.cu\"\n", "", "source");
    assert!(msg.contains("missing; add source = "), "{msg}");
}

#[test]
fn toml_syntax_errors_name_the_file() {
    let (_tmp, path, r) = load_variant("[launch]", "[launch");
    let msg = r.unwrap_err().to_string();
    assert!(msg.starts_with(&format!("{}: invalid toml", path.display())) && msg.contains("line"), "{msg}");
    let e = Manifest::load(Path::new("/nonexistent/dir/x.toml")).unwrap_err();
    assert!(e.to_string().starts_with("/nonexistent/dir/x.toml: cannot read manifest"), "{e}");
    assert!(std::error::Error::source(&e).is_some());
}

#[test]
fn contract_params_and_buffers_are_sanity_checked() {
    let (_, msg) = error_of("head_dim = [1, 256]", "head_dim = [256, 1]", "contract.head_dim");
    assert!(msg.contains("1 <= min <= max"), "{msg}");
    let (_, msg) = error_of("head_dim_multiple = 1", "head_dim_multiple = 300", "contract.head_dim_multiple");
    assert!(msg.contains("no multiple of 300"), "{msg}");
    let (_, msg) = error_of("min_align = 2", "min_align = 3", "contract.min_align");
    assert!(msg.contains("power of two"), "{msg}");
    let (_, msg) = error_of("dtypes = [\"f16\", \"bf16\", \"f32\"]", "dtypes = []", "contract.dtypes");
    assert!(msg.contains("at least one"), "{msg}");
    let (_, msg) = error_of("BLOCK_N = [64, 128]", "BLOCK_N = []", "params.BLOCK_N");
    assert!(msg.contains("at least one"), "{msg}");
    let (_, msg) = error_of("BLOCK_N = [64, 128]", "seq_q = [64]", "params.seq_q");
    assert!(msg.contains("reserved"), "{msg}");
    let (_, msg) = error_of("value = 7", "", "buffers[1].value");
    assert!(msg.contains("needs a value"), "{msg}");
    let (_, msg) = error_of("name = \"scratch\"", "name = \"lse\"", "buffers[1].name");
    assert!(msg.contains("declared twice"), "{msg}");
    let (_, msg) = error_of("options = [\"--fmad=false\"]", "options = [\"-arch=sm_80\"]", "options[0]");
    assert!(msg.contains("remove it"), "{msg}");
    // A sample case inside a narrow contract is used for the load-time evaluation.
    let (_tmp, _path, r) = load_variant("head_dim = [1, 256]", "head_dim = [128, 128]");
    assert_eq!(r.unwrap().sample_case().head_dim, 128);
    // fuzz = false marks helper kernels.
    let (_tmp, _path, r) = load_variant("options =", "fuzz = false\noptions =");
    assert!(!r.unwrap().fuzz);
}

fn strided_case() -> Case {
    let mut case = Case::example("tiny");
    case.batch = 2;
    case.heads_q = 4;
    case.heads_kv = 2;
    case.seq_q = 100;
    case.seq_k = 300;
    case.head_dim = 80;
    case.scale = 0.1;
    case.causal = true;
    case.params = BTreeMap::from([("BLOCK_N".to_string(), 128)]);
    // q: BSHD with the head dimension padded to 88, at byte offset 6.
    case.layouts.q = TensorLayout { order: [Dim::B, Dim::S, Dim::H, Dim::D], pad: [0, 0, 0, 8], offset_bytes: 6 };
    case.validate().unwrap();
    case
}

#[test]
fn resolve_gives_the_numbers_of_a_strided_case() {
    let (_tmp, path) = tree(&MANIFEST.replace(
        "{ f32 = \"scale\" } ]",
        "{ f32 = \"scale\" }, { i64 = \"q.stride_b\" }, { i64 = \"q.stride_h\" }, { i64 = \"q.stride_d\" },
         { i32 = \"q.offset_bytes\" }, { i32 = \"k.stride_s\" }, { i32 = \"elem_bytes * 10 + causal\" },
         { i32 = \"max(heads_q / heads_kv, 1)\" }, { i32 = \"min(BLOCK_N, head_dim)\" }, { ptr = \"scratch\" } ]",
    ));
    let m = Manifest::load(&path).unwrap();
    let case = strided_case();
    let plan = Plan::new(&case);
    let r = m.resolve(&case, &plan).unwrap();
    assert_eq!(r.grid, [100, 4, 2]);
    assert_eq!(r.block, [128, 1, 1]);
    assert_eq!(r.shared_bytes, (300 + 80) * 4);
    assert_eq!(r.timeout_ms, Some(2000));
    assert_eq!(r.buffers.len(), 2);
    assert_eq!((r.buffers[0].name.as_str(), r.buffers[0].count), ("lse", 2 * 4 * 100));
    assert_eq!(r.buffers[0].bytes(), 2 * 4 * 100 * 4);
    assert_eq!((r.buffers[1].name.as_str(), r.buffers[1].count), ("scratch", 3 * 4)); // cdiv(300, 128) * 4
    assert_eq!(r.buffers[1].init, BufferInit::Const(7.0));
    // q strides: d 1, h 88 (padded), s 88 * 4 = 352, b 352 * 100 = 35200.
    assert_eq!(plan.tensor(TensorId::Q).strides, [35200, 88, 352, 1]);
    assert_eq!(
        r.args,
        vec![
            ResolvedArg::Tensor(TensorId::Q),
            ResolvedArg::Tensor(TensorId::K),
            ResolvedArg::Tensor(TensorId::V),
            ResolvedArg::Tensor(TensorId::O),
            ResolvedArg::Buffer(0),
            ResolvedArg::I32(100),
            ResolvedArg::I64(352),
            ResolvedArg::F32(0.1),
            ResolvedArg::I64(35200),
            ResolvedArg::I64(88),
            ResolvedArg::I64(1),
            ResolvedArg::I32(6),
            ResolvedArg::I32(80), // k is dense bhsd
            ResolvedArg::I32(21), // f16: 2 bytes, causal
            ResolvedArg::I32(2),
            ResolvedArg::I32(80),
            ResolvedArg::Buffer(1),
        ]
    );
    // Unset params take their default; undeclared ones are refused.
    let mut c2 = case.clone();
    c2.params.clear();
    assert_eq!(m.resolve(&c2, &plan).unwrap().buffers[1].count, 5 * 4); // cdiv(300, 64) * 4
    c2.params.insert("BLOCK_M".into(), 64);
    let e = m.resolve(&c2, &plan).unwrap_err().to_string();
    assert!(e.contains("field params") && e.contains("`BLOCK_M`"), "{e}");
}

#[test]
fn i32_overflow_names_the_argument_expression_and_value() {
    // At load time: overflows already for the sample case.
    let (e, msg) = error_of("{ i32 = \"seq_q\" }", "{ i32 = \"seq_q * 100000000\" }", "launch.args[5]");
    match e {
        ManifestError::I32Overflow { index, ref expr, value, .. } => {
            assert_eq!((index, expr.as_str()), (5, "seq_q * 100000000"));
            assert_eq!(value, 65 * 100_000_000);
        }
        e => panic!("expected I32Overflow, got {e:?}"),
    }
    assert!(msg.contains("i32 argument 5 \"seq_q * 100000000\" evaluates to 6500000000") && msg.contains("i64"), "{msg}");

    // At resolve time: fine for small cases, overflows for a large one.
    let (_tmp, path) = tree(&MANIFEST.replace("{ i32 = \"seq_q\" }", "{ i32 = \"batch * heads_q * seq_q * head_dim\" }"));
    let m = Manifest::load(&path).unwrap();
    let mut case = Case::example("tiny");
    case.batch = 64;
    case.heads_q = 64;
    case.heads_kv = 64;
    case.seq_q = 4096;
    case.head_dim = 256;
    case.validate().unwrap();
    let e = m.resolve(&case, &Plan::new(&case)).unwrap_err();
    let msg = e.to_string();
    let expected: i64 = 64 * 64 * 4096 * 256;
    assert!(matches!(e, ManifestError::I32Overflow { index: 5, value, wrapped: 0, .. } if value == expected), "{e:?}");
    assert!(msg.contains(&format!("evaluates to {expected}")) && msg.contains("would see 0"), "{msg}");
    // The same expression as i64 is fine.
    let (_tmp2, path) = tree(&MANIFEST.replace("{ i32 = \"seq_q\" }", "{ i64 = \"batch * heads_q * seq_q * head_dim\" }"));
    let m = Manifest::load(&path).unwrap();
    assert_eq!(m.resolve(&case, &Plan::new(&case)).unwrap().args[5], ResolvedArg::I64(expected));
}

// ---------------------------------------------------------------------------------------------
// NVRTC

/// A compiler with its cache in `dir`, or `None` after printing why the test is skipped.
fn compiler(dir: &Path) -> Option<Compiler> {
    match Compiler::new(Some(dir.to_path_buf())) {
        Ok(c) => Some(c),
        Err(e @ CompileError::NvrtcMissing { .. }) => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("compiler setup failed: {e}"),
    }
}

#[test]
fn compiles_cubins_for_sm80_sm89_sm90() {
    let (tmp, path) = tree(MANIFEST);
    let Some(c) = compiler(&tmp.path().join("cache")) else { return };
    eprintln!("nvrtc {:?} from {:?}, cuda include {:?}", c.nvrtc_version(), c.nvrtc_path(), c.cuda_include());
    assert!(c.nvrtc_version().0 >= 12);
    let m = Manifest::load(&path).unwrap();
    let mut keys = Vec::new();
    for arch in ["sm_80", "sm_89", "sm_90"] {
        let arch: Arch = arch.parse().unwrap();
        for dtype in [Dtype::F16, Dtype::Bf16, Dtype::F32] {
            let req = request_for(&m, &m.default_params(), dtype, arch, &BTreeMap::new());
            let out = c.compile(&req).unwrap_or_else(|e| panic!("{e}"));
            assert!(out.cubin.starts_with(b"\x7fELF"), "{arch} {dtype}: not an ELF cubin");
            assert!(!out.from_cache);
            assert_eq!(out.key.len(), 64);
            keys.push(out.key);
        }
    }
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 9, "every arch x dtype has its own key");
}

#[test]
fn request_for_sets_the_documented_defines() {
    let (_tmp, path) = tree(MANIFEST);
    let m = Manifest::load(&path).unwrap();
    let extra = BTreeMap::from([("EXTRA".to_string(), "x".to_string()), ("TINY_FLAG".to_string(), "2".to_string())]);
    let req = request_for(&m, &BTreeMap::from([("BLOCK_N".to_string(), 128)]), Dtype::Bf16, Arch::new(9, 0), &extra);
    let expect: BTreeMap<String, String> = [("CUDAFUZZ", "1"), ("CUDAFUZZ_DTYPE_BF16", "1"), ("TINY_FLAG", "2"), ("BLOCK_N", "128"), ("EXTRA", "x")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(req.defines, expect);
    assert_eq!(req.source, m.source);
    assert_eq!(req.entry, "tiny_fwd");
    assert_eq!(req.options, m.options);
    assert_eq!(req.arch.to_string(), "sm_90");
}

#[test]
fn a_repeated_configuration_compiles_once() {
    let (tmp, path) = tree(MANIFEST);
    let Some(c) = compiler(&tmp.path().join("cache")) else { return };
    let m = Manifest::load(&path).unwrap();
    let req = request_for(&m, &m.default_params(), Dtype::F16, Arch::new(9, 0), &BTreeMap::new());
    let t = Instant::now();
    let first = c.compile(&req).unwrap();
    let t_first = t.elapsed();
    let t = Instant::now();
    let second = c.compile(&req).unwrap();
    let t_second = t.elapsed();
    eprintln!("first compile {t_first:?}, cached {t_second:?}");
    assert!(!first.from_cache && second.from_cache);
    assert_eq!(first.cubin, second.cubin);
    assert_eq!(first.key, second.key);
    assert_eq!(first.log, second.log);
    assert!(t_second * 5 < t_first, "cache hit ({t_second:?}) is not much faster than compiling ({t_first:?})");
    // A fresh compiler on the same directory (another process) hits too.
    let again = Compiler::new(Some(tmp.path().join("cache"))).unwrap().compile(&req).unwrap();
    assert!(again.from_cache);
    // Another param value is another configuration.
    let other = request_for(&m, &BTreeMap::from([("BLOCK_N".to_string(), 128)]), Dtype::F16, Arch::new(9, 0), &BTreeMap::new());
    assert!(!c.compile(&other).unwrap().from_cache);
    // Editing an included header from kernels/include invalidates the entry.
    let header = tmp.path().join("kernels/include/tiny_common.cuh");
    std::fs::write(&header, format!("{HEADER}\n// edited\n")).unwrap();
    let edited = c.compile(&req).unwrap();
    assert!(!edited.from_cache);
    assert_ne!(edited.key, first.key);
}

#[test]
fn a_compile_error_carries_the_nvrtc_log() {
    let (tmp, path) = tree(MANIFEST);
    let Some(c) = compiler(&tmp.path().join("cache")) else { return };
    std::fs::write(tmp.path().join("kernels/tiny/tiny.cu"), KERNEL.replace("int row = blockIdx.x;", "int row = blockIdx.x + undeclared_thing;")).unwrap();
    let m = Manifest::load(&path).unwrap();
    let req = request_for(&m, &m.default_params(), Dtype::F32, Arch::new(8, 0), &BTreeMap::new());
    let e = c.compile(&req).unwrap_err();
    let msg = e.to_string();
    match &e {
        CompileError::Kernel { source_path, arch, defines, log, .. } => {
            assert!(source_path.ends_with("kernels/tiny/tiny.cu"));
            assert_eq!(*arch, Arch::new(8, 0));
            assert_eq!(defines.get("BLOCK_N").map(String::as_str), Some("64"));
            assert!(log.contains("undeclared_thing") && log.contains("error"), "{log}");
        }
        e => panic!("expected a kernel error, got {e:?}"),
    }
    assert!(msg.contains("tiny.cu: nvrtc failed for sm_80 with") && msg.contains("-DBLOCK_N=64") && msg.contains("undeclared_thing"), "{msg}");
    // A missing define is reported through the kernel's own #error.
    let mut req2 = req.clone();
    req2.defines.remove("CUDAFUZZ_DTYPE_F32");
    std::fs::write(tmp.path().join("kernels/tiny/tiny.cu"), KERNEL).unwrap();
    let msg = c.compile(&req2).unwrap_err().to_string();
    assert!(msg.contains("no CUDAFUZZ_DTYPE_* define"), "{msg}");
}

#[test]
fn a_mangled_or_misspelt_entry_is_reported() {
    let (tmp, path) = tree(MANIFEST);
    let Some(c) = compiler(&tmp.path().join("cache")) else { return };
    let m = Manifest::load(&path).unwrap();
    let mut req = request_for(&m, &m.default_params(), Dtype::F32, Arch::new(9, 0), &BTreeMap::new());
    req.entry = "tiny_fw".into();
    let e = c.compile(&req).unwrap_err();
    assert!(matches!(e, CompileError::EntryMissing { .. }), "{e:?}");
    assert!(e.to_string().contains("entry `tiny_fw` is not in the cubin"), "{e}");
    std::fs::write(tmp.path().join("kernels/tiny/tiny.cu"), KERNEL.replace("extern \"C\" ", "")).unwrap();
    req.entry = "tiny_fwd".into();
    let e = c.compile(&req).unwrap_err();
    assert!(e.to_string().contains("extern \"C\" __global__"), "{e}");
}

#[test]
fn an_arch_nvrtc_does_not_support_is_a_clear_error() {
    let (tmp, _path) = tree(MANIFEST);
    let Some(c) = compiler(&tmp.path().join("cache")) else { return };
    let req = CompileRequest {
        source: tmp.path().join("kernels/tiny/tiny.cu"),
        entry: "tiny_fwd".into(),
        defines: BTreeMap::new(),
        options: vec![],
        arch: Arch::new(1, 0),
    };
    let e = c.compile(&req).unwrap_err();
    assert!(matches!(e, CompileError::UnsupportedArch { .. }), "{e:?}");
    assert!(e.to_string().contains("cannot compile for sm_10") && e.to_string().contains("sm_90"), "{e}");
}

#[test]
fn build_all_compiles_every_combination() {
    let (tmp, path) = tree(MANIFEST.replace("dtypes = [\"f16\", \"bf16\", \"f32\"]", "dtypes = [\"f16\", \"f32\"]").as_str());
    let Some(c) = compiler(&tmp.path().join("cache")) else { return };
    let m = Manifest::load(&path).unwrap();
    let archs = [Arch::new(8, 0), Arch::new(9, 0)];
    let out = build_all(std::slice::from_ref(&m), &archs, &c);
    // 2 BLOCK_N values x 2 dtypes x 2 archs.
    assert_eq!(out.len(), 8);
    for o in &out {
        assert_eq!(o.manifest, "tiny");
        let (bytes, cached) = o.result.as_ref().unwrap_or_else(|log| panic!("{log}"));
        assert!(*bytes > 0 && !cached);
    }
    let again = build_all(std::slice::from_ref(&m), &archs, &c);
    assert!(again.iter().all(|o| matches!(o.result, Ok((_, true)))));
    // A failing configuration is reported with its log, not fatal.
    std::fs::write(tmp.path().join("kernels/tiny/tiny.cu"), KERNEL.replace("#ifndef BLOCK_N", "#if BLOCK_N == 128\n#error \"BLOCK_N 128 broken\"\n#endif\n#ifndef BLOCK_N")).unwrap();
    let out = build_all(std::slice::from_ref(&m), &archs, &c);
    let failed: Vec<_> = out.iter().filter(|o| o.result.is_err()).collect();
    assert_eq!(failed.len(), 4);
    assert!(failed.iter().all(|o| o.params["BLOCK_N"] == 128 && cudafuzz::error::chain(o.result.as_ref().unwrap_err().as_ref()).contains("BLOCK_N 128 broken")));
}

#[test]
fn cubins_load_and_run_on_the_local_gpu() {
    use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
    let (tmp, path) = tree(MANIFEST);
    let Some(c) = compiler(&tmp.path().join("cache")) else { return };
    // SAFETY: only probes for the driver library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        eprintln!("skipped: no libcuda on this machine (no NVIDIA driver), so cubins cannot be loaded");
        return;
    }
    let ctx = match CudaContext::new(0) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("skipped: no usable GPU: {e}");
            return;
        }
    };
    let (major, minor) = ctx.compute_capability().unwrap();
    let arch = Arch::new(major as u32, minor as u32);
    eprintln!("gpu arch {arch}, nvrtc {:?}", c.nvrtc_version());
    let m = Manifest::load(&path).unwrap();
    // Every dtype's cubin loads and has the entry.
    for dtype in [Dtype::F16, Dtype::Bf16, Dtype::F32] {
        let out = c.compile(&request_for(&m, &m.default_params(), dtype, arch, &BTreeMap::new())).unwrap();
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(out.cubin)).unwrap_or_else(|e| panic!("{dtype}: {e}"));
        module.load_function("tiny_fwd").unwrap();
    }
    // The f32 one runs with the manifest's resolved launch and computes o = q * scale.
    let mut case = Case::example("tiny");
    case.dtype = Dtype::F32;
    case.heads_q = 1;
    case.heads_kv = 1;
    case.seq_q = 4;
    case.seq_k = 4;
    case.head_dim = 64;
    case.scale = 0.5;
    case.params = BTreeMap::from([("BLOCK_N".to_string(), 64)]);
    case.validate().unwrap();
    let r = m.resolve(&case, &Plan::new(&case)).unwrap();
    let (ResolvedArg::I32(seq_q), ResolvedArg::I64(stride), ResolvedArg::F32(scale)) = (r.args[5], r.args[6], r.args[7]) else {
        panic!("unexpected args {:?}", r.args)
    };
    let out = c.compile(&request_for(&m, &case.params, Dtype::F32, arch, &BTreeMap::new())).unwrap();
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(out.cubin)).unwrap();
    let f = module.load_function("tiny_fwd").unwrap();
    let stream = ctx.default_stream();
    let host: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let q = stream.clone_htod(&host).unwrap();
    let k = stream.alloc_zeros::<f32>(256).unwrap();
    let v = stream.alloc_zeros::<f32>(256).unwrap();
    let mut o = stream.alloc_zeros::<f32>(256).unwrap();
    let mut lse = stream.alloc_zeros::<f32>(r.buffers[0].count as usize).unwrap();
    let mut b = stream.launch_builder(&f);
    b.arg(&q).arg(&k).arg(&v).arg(&mut o).arg(&mut lse).arg(&seq_q).arg(&stride).arg(&scale);
    let cfg = LaunchConfig {
        grid_dim: (r.grid[0], r.grid[1], r.grid[2]),
        block_dim: (r.block[0], r.block[1], r.block[2]),
        shared_mem_bytes: r.shared_bytes,
    };
    // SAFETY: the argument list matches tiny_fwd's signature; buffers are large enough.
    unsafe { b.launch(cfg) }.unwrap();
    let got = stream.clone_dtoh(&o).unwrap();
    let want: Vec<f32> = host.iter().map(|x| x * 0.5).collect();
    assert_eq!(got, want);
}
