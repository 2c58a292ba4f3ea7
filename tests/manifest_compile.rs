//! Integration tests of `cudafuzz::core::manifest` and `cudafuzz::engine::compile`.
//!
//! Most tests write their own throwaway kernel and manifest into a temporary directory laid out
//! like the repository (`<tmp>/kernels/include/*.cuh`, `<tmp>/kernels/tiny/tiny.{cu,toml}`): a
//! generic tensor kernel over named dims `rows` and `cols` (no attention conventions), so that
//! the schema is exercised on its own terms. The rest check the shipped manifests (every one
//! loads and compiles) and the format-1 converter. The NVRTC tests print `skipped: <reason>`
//! and return when no libnvrtc can be found; run them with e.g.
//! `source ci/env.sh && cargo test --test manifest_compile`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use cudafuzz::core::case::{Case, Dtype, Scalar, TensorLayout, ValueClass, MAX_DIM};
use cudafuzz::core::generate::DecodeContext;
use cudafuzz::core::manifest::{
    find_manifests, ArgSpec, DimSpec, DtypeSpec, Hint, Init, LayoutFreedom, Manifest, ManifestError, ReferenceSpec, ResolvedArg, Role, ScalarChoice, ScalarType,
};
use cudafuzz::core::plan::Plan;
use cudafuzz::engine::compile::{build_all, request_for, Arch, CompileError, CompileRequest, Compiler};

mod common;

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

const KERNEL: &str = r#"// throwaway test kernel: y = x * alpha + bias (row by row), rowsum = 0
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
extern "C" __global__ void tiny_fwd(const T* x, const CF_T_bias* bias, T* y, CF_T_rowsum* rowsum, CF_T_scratch* scratch,
                                    int rows, long long x_stride_r, float alpha) {
    int row = blockIdx.x;
    if (row >= rows) return;
    for (int c = threadIdx.x; c < BLOCK_N; c += blockDim.x) {
        y[row * x_stride_r + c] = from_float<T>(to_float(x[row * x_stride_r + c]) * alpha * TINY_FLAG + bias[c]);
    }
    if (threadIdx.x == 0) rowsum[row] = 0.0f;
}
"#;

const MANIFEST: &str = r#"
format = 2
name = "tiny"
description = "throwaway test kernel"
source = "tiny.cu"
entry = "tiny_fwd"
options = ["--fmad=false"]
dtypes = ["f16", "bf16", "f32"]
requires = ["cols % 2 == 0"]

[defines]
TINY_FLAG = 1

[params]
BLOCK_N = [64, 128]

[dims]
rows = { range = [1, 4096], cap = 300, hints = [1, 63, 64, 65, "BLOCK_N"] }
cols = { range = [2, 512], multiple = 2, max = 65536 }

[scalars]
alpha = { type = "f32", choices = ["1 / sqrt(cols)", 0.5], weights = [3, 1] }
accumulate = { type = "bool" }
eps = { type = "f32", range = [1e-6, 1e-2] }
steps = { type = "int", range = [1, 4] }

[contract]
relations = ["cols <= 4 * BLOCK_N"]
max_element_offset = 2147483647

[[tensors]]
name = "x"
role = "input"
shape = ["rows", "cols"]
layout = "strided"
align = 2
values = ["normal", "uniform"]

[[tensors]]
name = "bias"
role = "input"
shape = ["cols"]
dtype = "f32"
layout = "dense"

[[tensors]]
name = "y"
role = "output"
shape = ["rows", "cols"]

[[tensors]]
name = "rowsum"
role = "output"
shape = ["rows"]
dtype = "f32"
layout = "fixed"
init = "neg_inf"

[[tensors]]
name = "scratch"
role = "scratch"
shape = ["cdiv(cols, BLOCK_N) * 4"]
dtype = "i32"
layout = "fixed"
init = { const = 7 }

[reference]
op = "none"

[launch]
grid = ["rows", "1", "1"]
block = ["128", "1", "1"]
shared_bytes = "(cols + rows) * 4"
timeout_ms = 2000
args = [ { ptr = "x" }, { ptr = "bias" }, { ptr = "y" }, { ptr = "rowsum" }, { ptr = "scratch" },
         { i32 = "rows" }, { i64 = "x.stride(0)" }, { f32 = "alpha" } ]
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
    assert!(msg.contains(&format!("field {field}:")), "message does not name field {field}: {msg}");
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
    assert_eq!(m.dtypes, vec![Dtype::F16, Dtype::Bf16, Dtype::F32]);
    assert_eq!(m.defines, BTreeMap::from([("TINY_FLAG".to_string(), 1)]));
    assert_eq!(m.params, BTreeMap::from([("BLOCK_N".to_string(), vec![64, 128])]));
    assert_eq!(m.requires, vec!["cols % 2 == 0".to_string()]);

    // Dims, in declaration order.
    let hints = [1, 63, 64, 65].map(Hint::Value).into_iter().chain([Hint::Param("BLOCK_N".into())]).collect();
    assert_eq!(
        m.dims,
        vec![
            DimSpec { name: "rows".into(), range: [1, 4096], multiple: 1, max: MAX_DIM, cap: 300, hints },
            DimSpec { name: "cols".into(), range: [2, 512], multiple: 2, max: 65536, cap: 1024, hints: vec![] },
        ]
    );
    assert_eq!(m.hint_values(&m.dims[0]), vec![1, 63, 64, 65, 64, 128], "a param hint stands for each of its values");

    // Scalars: a weighted float choice that depends on a dim, and a free flag.
    let alpha = m.scalar("alpha").unwrap();
    assert_eq!((alpha.ty, alpha.weights.clone(), alpha.range), (ScalarType::F32, vec![3, 1], None));
    assert_eq!(alpha.choices, vec![ScalarChoice::Expr("1 / sqrt(cols)".into()), ScalarChoice::Value(Scalar::Float(0.5))]);
    let accumulate = m.scalar("accumulate").unwrap();
    assert_eq!((accumulate.ty, accumulate.choices.len()), (ScalarType::Bool, 0));
    // A float range is held as the kernel receives it: its ends rounded to f32.
    assert_eq!(m.scalar("eps").unwrap().range, Some([1e-6f32 as f64, 1e-2f32 as f64]));
    assert_eq!(m.scalar("steps").unwrap().range, Some([1.0, 4.0]));
    assert_eq!(m.contract.relations, vec!["cols <= 4 * BLOCK_N".to_string()]);
    assert_eq!(m.contract.max_element_offset, Some(2147483647));

    // The roster: roles, types, layout kinds, alignment, values and initial contents, with the
    // defaults each role and type gets.
    let names: Vec<&str> = m.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["x", "bias", "y", "rowsum", "scratch"]);
    assert_eq!(m.tensor_index("rowsum"), Some(3));
    let x = m.tensor("x").unwrap();
    assert_eq!((x.role, x.dtype, x.layout, x.broadcast, x.align), (Role::Input, DtypeSpec::Case, LayoutFreedom::Strided, false, 2));
    assert_eq!(
        (x.shape.clone(), x.values.clone(), x.init),
        (vec!["rows".to_string(), "cols".into()], vec![ValueClass::Normal, ValueClass::Uniform], Init::Drawn)
    );
    assert_eq!((x.dim_name(0), x.dim_name(1), x.rank()), (Some("rows"), Some("cols"), 2));
    let bias = m.tensor("bias").unwrap();
    assert_eq!((bias.dtype, bias.layout, bias.align), (DtypeSpec::Fixed(Dtype::F32), LayoutFreedom::Dense, 4), "alignment defaults to the element size");
    assert!(bias.values.contains(&ValueClass::Large) && !bias.values.iter().any(|c| c.is_special()), "every finite class by default: {:?}", bias.values);
    let y = m.tensor("y").unwrap();
    assert_eq!((y.role, y.dtype, y.layout, y.init), (Role::Output, DtypeSpec::Case, LayoutFreedom::Strided, Init::Sentinel));
    let rowsum = m.tensor("rowsum").unwrap();
    assert_eq!((rowsum.dtype, rowsum.layout, rowsum.init), (DtypeSpec::Fixed(Dtype::F32), LayoutFreedom::Fixed, Init::NegInf));
    assert!(!rowsum.layout_is_drawn() && x.layout_is_drawn());
    let scratch = m.tensor("scratch").unwrap();
    assert_eq!((scratch.role, scratch.dtype, scratch.init), (Role::Scratch, DtypeSpec::Fixed(Dtype::I32), Init::Const(7.0)));
    assert_eq!((scratch.dim_name(0), scratch.values.clone()), (None, vec![ValueClass::Uniform]), "integers draw uniformly by default");
    assert_eq!(m.reference, ReferenceSpec::None);

    assert_eq!(m.launch.grid, ["rows".to_string(), "1".into(), "1".into()]);
    assert_eq!(m.launch.shared_bytes, "(cols + rows) * 4");
    assert_eq!(m.launch.timeout_ms, Some(2000));
    assert_eq!(m.launch.args.len(), 8);
    assert_eq!(m.launch.args[0], ArgSpec::Ptr("x".into()));
    assert_eq!(m.launch.args[6], ArgSpec::I64("x.stride(0)".into()));

    assert_eq!(m.default_params(), BTreeMap::from([("BLOCK_N".to_string(), 64)]));
    assert_eq!(m.param_combinations().len(), 2);
    let ctx = DecodeContext::new(&m);
    assert_eq!(ctx.kernel, path.display().to_string());
    assert!(ctx.constrained);

    m.check_params(&BTreeMap::from([("BLOCK_N".to_string(), 128)])).unwrap();
    let e = m.check_params(&BTreeMap::from([("BLOCK_N".to_string(), 96)])).unwrap_err().to_string();
    assert!(e.contains("field params.BLOCK_N") && e.contains("96 is not one of [64, 128]"), "{e}");
    let e = m.check_params(&BTreeMap::new()).unwrap_err().to_string();
    assert!(e.contains("field params.BLOCK_N") && e.contains("does not set it"), "{e}");
    let e = m.check_params(&BTreeMap::from([("BLOCK_N".to_string(), 64), ("BLOCK_M".to_string(), 64)])).unwrap_err().to_string();
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
    let (_, msg) = error_of("timeout_ms = 2000", "timeout_ms = 2000\ngird = [\"1\"]", "launch.gird");
    assert!(msg.contains("unknown field `gird`"), "{msg}");
    let (_, msg) = error_of("max_element_offset = 2147483647", "max_element_offset = 2147483647\nwarp_size = 32", "contract.warp_size");
    assert!(msg.contains("unknown field `warp_size`"), "{msg}");
    let (_, msg) = error_of("init = \"neg_inf\"", "init = \"neg_inf\"\nsize = 4", "tensors.rowsum.size");
    assert!(msg.contains("unknown field `size`"), "{msg}");
    let (_, msg) = error_of("cap = 300, hints", "cap = 300, hint = [1], hints", "dims.rows.hint");
    assert!(msg.contains("unknown field `hint`"), "{msg}");
    let (_, msg) = error_of("{ f32 = \"alpha\" }", "{ u16 = \"alpha\" }", "launch.args[7]");
    assert!(msg.contains("write one of") && msg.contains("{ f32 = \"scale\" }"), "{msg}");
    let (_, msg) = error_of("init = \"neg_inf\"", "init = \"minus_inf\"", "tensors.rowsum.init");
    assert!(msg.contains("neg_inf"), "{msg}");
    // Only a written tensor's bits can depend on the order of the writes.
    let (_, msg) = error_of("layout = \"dense\"", "layout = \"dense\"\norder_dependent = true", "tensors.bias.order_dependent");
    assert!(msg.contains("`bias` is input") && msg.contains("output or in-out"), "{msg}");
    let (_, _, ok) = load_variant("init = \"neg_inf\"", "init = \"neg_inf\"\norder_dependent = true");
    assert!(ok.unwrap().tensor("rowsum").unwrap().order_dependent);
    // The shared-memory opt-in: on unless the host never does it.
    let (_, _, ok) = load_variant("timeout_ms = 2000", "timeout_ms = 2000\nshared_opt_in = false");
    assert!(!ok.unwrap().launch.shared_opt_in);
    assert!(load_variant("timeout_ms = 2000", "timeout_ms = 2000").2.unwrap().launch.shared_opt_in);
    let (_, msg) = error_of("timeout_ms = 2000", "timeout_ms = 2000\nshared_opt_in = \"no\"", "launch.shared_opt_in");
    assert!(msg.contains("expected a boolean"), "{msg}");
    // Base alignment apart from stride alignment: at least `align`, a power of two.
    let (_, _, ok) = load_variant("layout = \"dense\"", "layout = \"dense\"\nbase_align = 16");
    let bias = ok.unwrap().tensor("bias").unwrap().clone();
    assert_eq!((bias.align, bias.base_align, bias.base_alignment()), (4, 16, 16));
    let (_, msg) = error_of("layout = \"dense\"", "layout = \"dense\"\nbase_align = 2", "tensors.bias.base_align");
    assert!(msg.contains("less than align = 4"), "{msg}");
    let (_, msg) = error_of("layout = \"dense\"", "layout = \"dense\"\nbase_align = 24", "tensors.bias.base_align");
    assert!(msg.contains("not a power of two"), "{msg}");
    let (_, msg) = error_of("role = \"scratch\"", "role = \"temp\"", "tensors.scratch.role");
    assert!(msg.contains("unknown variant `temp`"), "{msg}");
    let (_, msg) = error_of("alpha = { type = \"f32\"", "alpha = { type = \"float\"", "scalars.alpha.type");
    assert!(msg.contains("unknown variant `float`"), "{msg}");
    // A watchdog override belongs to the launch; at the top level it would do nothing.
    let (_, msg) = error_of("description =", "timeout_ms = 500\ndescription =", "timeout_ms");
    assert!(msg.contains("[launch]"), "{msg}");
}

#[test]
fn bad_expressions_are_rejected_with_file_field_and_expression() {
    let (e, msg) = error_of("grid = [\"rows\"", "grid = [\"cdiv(seq, BLOCK_N)\"", "launch.grid[0]");
    assert!(matches!(e, ManifestError::Expr { .. }), "{e:?}");
    assert!(
        msg.contains("unknown variable `seq` in expression \"cdiv(seq, BLOCK_N)\" (")
            && msg.contains("known: cols, rows, accumulate, alpha")
            && msg.contains("BLOCK_N")
            && msg.contains("TINY_FLAG")
            && msg.contains("x.stride_rows"),
        "{msg}"
    );
    let (_, msg) = error_of("block = [\"128\"", "block = [\"(128\"", "launch.block[0]");
    assert!(msg.contains("cannot parse") && msg.contains("\"(128\""), "{msg}");
    let (_, msg) = error_of("block = [\"128\"", "block = [\"rows / 2.0\"", "launch.block[0]");
    assert!(msg.contains("not an integer"), "{msg}");
    let (_, msg) = error_of("(cols + rows) * 4", "rows - 1000", "launch.shared_bytes");
    assert!(msg.contains("negative"), "{msg}");
    let (_, msg) = error_of("\"cdiv(cols, BLOCK_N) * 4\"", "\"floor(cols)\"", "tensors.scratch.shape[0]");
    assert!(msg.contains("unknown function `floor`") && msg.contains("cdiv, min, max"), "{msg}");
    let (_, msg) = error_of("{ i64 = \"x.stride(0)\" }", "{ i64 = \"x.strid_rows\" }", "launch.args[6]");
    assert!(msg.contains("did you mean `x.stride_rows`?"), "{msg}");
    let (_, msg) = error_of("{ i64 = \"x.stride(0)\" }", "{ i64 = \"z.stride_rows\" }", "launch.args[6]");
    assert!(msg.contains("did you mean `x.stride_rows` or `y.stride_rows`?"), "{msg}");
    let (_, msg) = error_of("{ i64 = \"x.stride(0)\" }", "{ i64 = \"x.stride(2)\" }", "launch.args[6]");
    assert!(msg.contains("x.stride(2): the tensor has 2 dimensions"), "{msg}");
    let (_, msg) = error_of("grid = [\"rows\"", "grid = [\"rows - rows\"", "launch.grid[0]");
    assert!(msg.contains("evaluates to 0"), "{msg}");
    let (_, msg) = error_of("[\"rows\", \"1\", \"1\"]", "[\"rows\", \"1\"]", "launch.grid");
    assert!(msg.contains("give exactly three"), "{msg}");
    // Shapes, relations and scalar choices name only what exists, and a relation names a dim.
    let (_, msg) = error_of("shape = [\"rows\", \"cols\"]", "shape = [\"rows\", \"colz\"]", "tensors.x.shape[1]");
    assert!(msg.contains("unknown variable `colz`") && msg.contains("did you mean `cols`?"), "{msg}");
    let (_, msg) = error_of("requires = [\"cols % 2 == 0\"]", "requires = [\"colz % 2 == 0\"]", "requires[0]");
    assert!(msg.contains("unknown variable `colz`"), "{msg}");
    let (_, msg) = error_of("relations = [\"cols <= 4 * BLOCK_N\"]", "relations = [\"BLOCK_N > 0\"]", "contract.relations[0]");
    assert!(msg.contains("names no dim"), "{msg}");
    let (_, msg) = error_of("relations = [\"cols <= 4 * BLOCK_N\"]", "relations = [\"cols + 4\"]", "contract.relations[0]");
    assert!(msg.contains("not true or false"), "{msg}");
    let (_, msg) = error_of("\"1 / sqrt(cols)\"", "\"1 / sqrt(x.numel)\"", "scalars.alpha.choices[0]");
    assert!(msg.contains("unknown variable `x.numel`"), "a scalar choice depends on dims only: {msg}");
}

#[test]
fn unknown_pointer_argument_is_rejected() {
    let (_, msg) = error_of("{ ptr = \"rowsum\" }", "{ ptr = \"m\" }", "launch.args[3]");
    assert!(msg.contains("pointer `m`") && msg.contains("tensors: x, bias, y, rowsum, scratch") && msg.contains("[[tensors]]"), "{msg}");
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
fn dims_scalars_params_and_tensors_are_sanity_checked() {
    let (_, msg) = error_of("range = [2, 512]", "range = [512, 2]", "dims.cols.range");
    assert!(msg.contains("0 <= min <= max"), "{msg}");
    let (_, msg) = error_of("multiple = 2", "multiple = 600", "dims.cols.multiple");
    assert!(msg.contains("no multiple of 600"), "{msg}");
    let (_, msg) = error_of("hints = [1, 63", "hints = [\"BLOCK_Q\", 63", "dims.rows.hints[0]");
    assert!(msg.contains("param or define"), "{msg}");
    let (_, msg) = error_of("align = 2", "align = 3", "tensors.x.align");
    assert!(msg.contains("power of two"), "{msg}");
    let (_, msg) = error_of("dtypes = [\"f16\", \"bf16\", \"f32\"]", "dtypes = []", "dtypes");
    assert!(msg.contains("at least one"), "{msg}");
    let (_, msg) = error_of("dtypes = [\"f16\", \"bf16\", \"f32\"]", "dtypes = [\"f16\", \"i32\"]", "dtypes[1]");
    assert!(msg.contains("not a floating element type"), "{msg}");
    let (_, msg) = error_of("BLOCK_N = [64, 128]", "BLOCK_N = []", "params.BLOCK_N");
    assert!(msg.contains("at least one"), "{msg}");
    let (_, msg) = error_of("BLOCK_N = [64, 128]", "BLOCK_N = [64, 128]\ncdiv = [1]", "params.cdiv");
    assert!(msg.contains("reserved"), "{msg}");
    let (_, msg) = error_of("BLOCK_N = [64, 128]", "BLOCK_N = [64, 128]\nrows = [64]", "dims.rows");
    assert!(msg.contains("also a define or param"), "{msg}");
    let (_, msg) = error_of("weights = [3, 1]", "weights = [3]", "scalars.alpha.weights");
    assert!(msg.contains("one per choice"), "{msg}");
    let (_, msg) = error_of("range = [1, 4]", "range = [0.5, 4]", "scalars.steps.range");
    assert!(msg.contains("integer ends"), "{msg}");
    let (_, msg) = error_of("range = [1e-6, 1e-2]", "range = [1e-2, 1e-6]", "scalars.eps.range");
    assert!(msg.contains("not a range"), "{msg}");
    let (_, msg) = error_of("init = { const = 7 }", "init = { konst = 7 }", "tensors.scratch.init");
    assert!(msg.contains("const = 1.5"), "{msg}");
    let (_, msg) = error_of("name = \"scratch\"", "name = \"rowsum\"", "tensors.rowsum.name");
    assert!(msg.contains("already a tensor, dim, scalar or lengths name"), "{msg}");
    let (_, msg) = error_of("name = \"scratch\"", "name = \"cols\"", "tensors.cols.name");
    assert!(msg.contains("already a tensor, dim, scalar or lengths name"), "{msg}");
    let (_, msg) = error_of("shape = [\"rows\"]", "shape = [\"rows\"]\nbroadcast = true", "tensors.rowsum.broadcast");
    assert!(msg.contains("only inputs"), "{msg}");
    // A floating tensor takes a value range (uniform spans it), with number or expression ends.
    let (_, msg) = error_of("layout = \"dense\"", "layout = \"dense\"\nrange = [0, true]", "tensors.bias.range[1]");
    assert!(msg.contains("neither a finite number nor an expression"), "{msg}");
    let (_, msg) = error_of("values = [\"normal\", \"uniform\"]", "values = [\"normal\", \"uniform\"]\ninit = \"zero\"", "tensors.x.init");
    assert!(msg.contains("remove init"), "{msg}");
    let (_, msg) = error_of("op = \"none\"", "op = \"attention_fwd\"", "reference.bind.q");
    assert!(msg.contains("no tensor `q`") && msg.contains("[reference.bind]"), "{msg}");
    let (_, msg) = error_of("options = [\"--fmad=false\"]", "options = [\"-arch=sm_80\"]", "options[0]");
    assert!(msg.contains("sets the architecture") && msg.contains("remove it"), "{msg}");
    let (_, msg) = error_of("options = [\"--fmad=false\"]", "options = [\"--fmad=false\", \" \"]", "options[1]");
    assert!(msg.contains("empty option"), "{msg}");
    // A sample case inside a narrow range is what the load-time evaluation uses.
    let (_tmp, _path, r) = load_variant("range = [2, 512]", "range = [128, 128]");
    assert_eq!(r.unwrap().sample_vars().dims["cols"], 128);
    // fuzz = false marks helper kernels.
    let (_tmp, _path, r) = load_variant("options =", "fuzz = false\noptions =");
    assert!(!r.unwrap().fuzz);
}

/// A case of the tiny kernel whose numbers every argument below can be checked against: 100
/// rows of 80 columns in f16, alpha 0.1, accumulating, BLOCK_N 128; x's rows padded from 80 to
/// 88 elements at byte offset 6, y stored column by column.
fn strided_case() -> Case {
    let mut case = Case::new("tiny", Dtype::F16);
    case.dims = BTreeMap::from([("rows".to_string(), 100), ("cols".to_string(), 80)]);
    case.scalars = BTreeMap::from([("alpha".to_string(), Scalar::Float(0.1f32 as f64)), ("accumulate".to_string(), Scalar::Bool(true))]);
    case.params = BTreeMap::from([("BLOCK_N".to_string(), 128)]);
    *case.layout_mut("x") = TensorLayout { pad: vec![0, 8], offset_bytes: 6, ..TensorLayout::dense() };
    *case.layout_mut("y") = TensorLayout { order: vec![1, 0], ..TensorLayout::dense() };
    case.validate().unwrap();
    case
}

#[test]
fn resolve_gives_the_numbers_of_a_strided_case() {
    let (_tmp, path) = tree(&MANIFEST.replace(
        "{ f32 = \"alpha\" } ]",
        "{ f32 = \"alpha\" }, { i64 = \"x.stride_rows\" }, { i64 = \"x.stride_cols\" }, { i32 = \"x.offset_bytes\" },
         { i64 = \"y.stride(1)\" }, { i32 = \"y.stride_rows\" }, { i32 = \"elem_bytes * 10 + accumulate\" },
         { i32 = \"max(rows / cols, 1)\" }, { i32 = \"min(BLOCK_N, cols)\" }, { ptr = \"scratch\" }, { i64 = \"scratch.numel\" },
         { i32 = \"bias.elem_bytes\" }, { i32 = \"x.size(1)\" }, { i32 = \"x.rank\" }, { u32 = \"cols\" }, { u64 = \"x.numel\" },
         { f64 = \"alpha * 2\" } ]",
    ));
    let m = Manifest::load(&path).unwrap();
    let case = strided_case();
    let plan = Plan::new(&case, &m).unwrap();
    // x strides: cols 1, rows 88 (padded); y column-major: rows 1, cols 100.
    assert_eq!(plan.tensor("x").unwrap().strides, [88, 1]);
    assert_eq!(plan.tensor("y").unwrap().strides, [1, 100]);
    assert_eq!(plan.tensor("scratch").unwrap().shape, [4], "cdiv(80, 128) * 4");
    let r = m.resolve(&plan.vars).unwrap();
    assert_eq!(r.grid, [100, 1, 1]);
    assert_eq!(r.block, [128, 1, 1]);
    assert_eq!(r.shared_bytes, (80 + 100) * 4);
    assert_eq!(r.timeout_ms, Some(2000));
    assert_eq!(
        r.args,
        vec![
            ResolvedArg::Tensor(0),
            ResolvedArg::Tensor(1),
            ResolvedArg::Tensor(2),
            ResolvedArg::Tensor(3),
            ResolvedArg::Tensor(4),
            ResolvedArg::I32(100),
            ResolvedArg::I64(88),
            ResolvedArg::F32(0.1),
            ResolvedArg::I64(88),
            ResolvedArg::I64(1),
            ResolvedArg::I32(6),
            ResolvedArg::I64(100),
            ResolvedArg::I32(1),
            ResolvedArg::I32(21), // f16: 2 bytes, accumulate
            ResolvedArg::I32(1),
            ResolvedArg::I32(80),
            ResolvedArg::Tensor(4),
            ResolvedArg::I64(4),
            ResolvedArg::I32(4),
            ResolvedArg::I32(80),
            ResolvedArg::I32(2),
            ResolvedArg::U32(80),
            ResolvedArg::U64(8000),
            ResolvedArg::F64(0.1f32 as f64 * 2.0),
        ]
    );
    // Unset params take their default (BLOCK_N 64: scratch holds cdiv(80, 64) * 4); undeclared
    // ones are refused by the check the engine runs first.
    let mut c2 = case.clone();
    c2.params.clear();
    let plan2 = Plan::new(&c2, &m).unwrap();
    assert_eq!(plan2.tensor("scratch").unwrap().numel, 2 * 4);
    assert_eq!(m.resolve(&plan2.vars).unwrap().args[15], ResolvedArg::I32(64));
    c2.params.insert("BLOCK_M".into(), 64);
    let e = m.check_params(&m.bind(c2).params).unwrap_err().to_string();
    assert!(e.contains("field params") && e.contains("`BLOCK_M`"), "{e}");
}

/// The constrained decoder keeps every contract term of a kernel that is not attention-shaped:
/// the multiple and the relation over a param, value classes, alignment, and number scalars
/// drawn from ranges (their ends included, as the kernel receives them).
#[test]
fn decoded_cases_of_a_generic_kernel_stay_inside_its_contract() {
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    let (_tmp, path) = tree(MANIFEST);
    let m = Manifest::load(&path).unwrap();
    let ctx = DecodeContext::new(&m);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let mut at_ends = 0;
    for _ in 0..2000 {
        let mut bytes = [0u8; 128];
        rng.fill_bytes(&mut bytes);
        let case = cudafuzz::core::generate::decode_case(&mut arbitrary::Unstructured::new(&bytes), &ctx).unwrap();
        let plan = Plan::new(&case, &m).unwrap_or_else(|e| panic!("{}: {e}", case.summary()));
        let verdict = cudafuzz::core::plan::check_contract(&m, &case, &plan);
        assert!(verdict.is_inside(), "{}: {verdict:?}", case.summary());
        let eps = case.scalar("eps").unwrap().as_f64();
        at_ends += m.scalar("eps").unwrap().range.is_some_and(|[lo, hi]| eps == lo || eps == hi) as u32;
    }
    assert!(at_ends > 100, "the range ends are drawn ({at_ends} of 2000)");
}

#[test]
fn a_case_that_does_not_fit_the_manifest_is_refused_naming_the_field() {
    let (_tmp, path) = tree(MANIFEST);
    let m = Manifest::load(&path).unwrap();
    let plan_err = |c: &Case| Plan::new(c, &m).unwrap_err().to_string();
    let mut c = strided_case();
    c.dims.remove("cols");
    assert!(plan_err(&c).contains("dims.cols") && plan_err(&c).contains("does not set it"), "{}", plan_err(&c));
    let mut c = strided_case();
    c.dims.insert("cols".into(), 81);
    assert!(plan_err(&c).contains("`cols % 2 == 0` does not hold"), "{}", plan_err(&c));
    let mut c = strided_case();
    c.dims.insert("depth".into(), 2);
    assert!(plan_err(&c).contains("dims.depth") && plan_err(&c).contains("rows, cols"), "{}", plan_err(&c));
    let mut c = strided_case();
    c.layout_mut("x").order = vec![0, 1, 2];
    assert!(plan_err(&c).contains("tensors.x.order"), "{}", plan_err(&c));
    let mut c = strided_case();
    c.layout_mut("y").broadcast = vec![0];
    assert!(plan_err(&c).contains("tensors.y.broadcast") && plan_err(&c).contains("only inputs"), "{}", plan_err(&c));
}

#[test]
fn i32_overflow_names_the_argument_expression_and_value() {
    // At load time: overflows already for the sample case (rows = 1).
    let (e, msg) = error_of("{ i32 = \"rows\" }", "{ i32 = \"rows * 10000000000\" }", "launch.args[5]");
    match e {
        ManifestError::I32Overflow { index, ref expr, value, .. } => {
            assert_eq!((index, expr.as_str()), (5, "rows * 10000000000"));
            assert_eq!(value, 10_000_000_000);
        }
        e => panic!("expected I32Overflow, got {e:?}"),
    }
    assert!(msg.contains("i32 argument 5 \"rows * 10000000000\" evaluates to 10000000000") && msg.contains("i64"), "{msg}");

    // At resolve time: fine for small cases, overflows for a large one (outside the contract,
    // but a valid case: its tensors are planned, never allocated here).
    let (_tmp, path) = tree(&MANIFEST.replace("{ i32 = \"rows\" }", "{ i32 = \"rows * cols * 2\" }"));
    let m = Manifest::load(&path).unwrap();
    let mut case = strided_case();
    case.dims = BTreeMap::from([("rows".to_string(), 65536), ("cols".to_string(), 32768)]);
    let plan = Plan::new(&case, &m).unwrap();
    let e = m.resolve(&plan.vars).unwrap_err();
    let msg = e.to_string();
    let expected: i64 = 65536 * 32768 * 2;
    assert!(matches!(e, ManifestError::I32Overflow { index: 5, value, wrapped: 0, .. } if value == expected), "{e:?}");
    assert!(msg.contains(&format!("evaluates to {expected}")) && msg.contains("would see 0"), "{msg}");
    // The same expression as i64 is fine.
    let (_tmp2, path) = tree(&MANIFEST.replace("{ i32 = \"rows\" }", "{ i64 = \"rows * cols * 2\" }"));
    let m = Manifest::load(&path).unwrap();
    assert_eq!(m.resolve(&plan.vars).unwrap().args[5], ResolvedArg::I64(expected));
}

// ---------------------------------------------------------------------------------------------
// Shipped manifests and format 1

/// Every shipped manifest loads, and (NVRTC permitting) compiles for sm_80 with its default
/// params in each element type it accepts; `cudafuzz build` covers every param combination and
/// architecture in CI.
#[test]
fn every_shipped_manifest_loads_and_compiles() {
    let shipped = common::shipped();
    assert!(shipped.len() >= 20, "{} shipped manifests", shipped.len());
    let tmp = tempfile::tempdir().unwrap();
    let Some(c) = compiler(tmp.path()) else { return };
    let t = Instant::now();
    for m in &shipped {
        if m.build == cudafuzz::engine::compile::Build::Nvcc && !common::env::have(common::env::Need::Nvcc) {
            continue; // `have` printed the skip and its reason
        }
        for &dtype in &m.dtypes {
            let req = request_for(m, &m.default_params(), dtype, Arch::new(8, 0), &BTreeMap::new());
            let out = c.compile(&req).unwrap_or_else(|e| panic!("{}: {}", m.name, cudafuzz::core::error::chain(&e)));
            assert!(out.cubin.starts_with(b"\x7fELF"), "{} {dtype}", m.name);
        }
    }
    eprintln!("{} shipped manifests compiled in {:?}", shipped.len(), t.elapsed());
}

/// The attention-only manifest simple_attn shipped before format 2.
fn format_1_fixture() -> PathBuf {
    common::root().join("tests/fixtures/manifests-v1/simple_attn.toml")
}

#[test]
fn a_format_1_manifest_is_refused_with_the_command_that_converts_it() {
    let old = format_1_fixture();
    let e = Manifest::load(&old).unwrap_err();
    assert!(matches!(e, ManifestError::OldFormat { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("{}: ", old.display())) && msg.contains(&format!("cudafuzz manifest migrate {}", old.display())), "{msg}");
    // Without a `format` key, only a manifest that looks like format 2 is told to add it.
    let (_, msg) = error_of("format = 2\n", "", "format");
    assert!(msg.contains("add format = 2"), "{msg}");
    let (_, msg) = error_of("format = 2", "format = 3", "format");
    assert!(msg.contains("write format = 2"), "{msg}");
}

/// `cudafuzz manifest migrate` turns the format-1 simple_attn into the format-2 manifest shipped
/// in its place (the same dims, scalars, roster, contract, reference and launch), writes it
/// beside the old one by default, and never overwrites a file.
#[test]
fn manifest_migrate_converts_a_format_1_manifest_into_the_shipped_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kernels/testing");
    std::fs::create_dir_all(&dir).unwrap();
    let old = dir.join("simple_attn.toml");
    std::fs::copy(format_1_fixture(), &old).unwrap();
    // The converted manifest is loaded before it is written: its source must exist beside it.
    std::fs::copy(common::root().join("kernels/testing/simple_attn.cu"), dir.join("simple_attn.cu")).unwrap();
    let migrate = |args: &[&str]| Command::new(common::exe()).args(["manifest", "migrate"]).args(args).output().unwrap();
    let o = migrate(&[old.to_str().unwrap()]);
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(cudafuzz::core::exit::OK), "{text}");
    let new = dir.join("simple_attn.v2.toml");
    assert!(text.contains(&new.display().to_string()), "{text}");
    let converted = Manifest::load(&new).unwrap_or_else(|e| panic!("{e}"));
    let shipped = common::manifest("kernels/testing/simple_attn.toml");
    assert_eq!(converted, Manifest { path: new.clone(), source: dir.join("simple_attn.cu"), ..shipped });
    let written = std::fs::read_to_string(&new).unwrap();
    let o = migrate(&[old.to_str().unwrap(), "-o", new.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(cudafuzz::core::exit::USAGE));
    assert!(String::from_utf8_lossy(&o.stderr).contains("exists"), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&new).unwrap(), written, "the existing file is left alone");
    // A format-2 manifest is not converted again.
    let o = migrate(&[new.to_str().unwrap(), "-o", "-"]);
    assert_eq!(o.status.code(), Some(cudafuzz::core::exit::USAGE));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a format-1 manifest"), "{}", String::from_utf8_lossy(&o.stderr));
    // Every conversion says what it guessed.
    assert!(text.contains("guess: seq_q and seq_k are drawn independently"), "{text}");
    // A key format 1 never had is not dropped silently: refused, or with --force a warning.
    let odd = dir.join("odd.toml");
    std::fs::write(&odd, format!("accumulate = true\n{}", std::fs::read_to_string(&old).unwrap())).unwrap();
    let o = migrate(&[odd.to_str().unwrap(), "-o", "-"]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(cudafuzz::core::exit::USAGE), "{err}");
    assert!(err.contains("odd.toml") && err.contains("`accumulate`") && err.contains("--force"), "{err}");
    let o = migrate(&[odd.to_str().unwrap(), "-o", "-", "--force"]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(cudafuzz::core::exit::OK), "{err}");
    assert!(err.contains("warning: `accumulate` is not a format-1 key"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// NVRTC

/// A compiler with its cache in `dir`, or `None` after recording why the test is skipped.
fn compiler(dir: &Path) -> Option<Compiler> {
    common::env::compiler(dir)
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
    // Besides the dtype, defines and params: each tensor's C element type, for kernels that
    // declare their pointers per tensor (`const CF_T_bias* bias`).
    let expect: BTreeMap<String, String> = [
        ("CUDAFUZZ", "1"),
        ("CUDAFUZZ_DTYPE_BF16", "1"),
        ("TINY_FLAG", "2"),
        ("BLOCK_N", "128"),
        ("EXTRA", "x"),
        ("CF_T_x", "__nv_bfloat16"),
        ("CF_T_bias", "float"),
        ("CF_T_y", "__nv_bfloat16"),
        ("CF_T_rowsum", "float"),
        ("CF_T_scratch", "int"),
    ]
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
        build: Default::default(),
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
    let (out, skipped) = build_all(std::slice::from_ref(&m), &archs, &c);
    assert!(skipped.is_empty());
    // 2 BLOCK_N values x 2 dtypes x 2 archs.
    assert_eq!(out.len(), 8);
    for o in &out {
        assert_eq!(o.manifest, "tiny");
        let (bytes, cached) = o.result.as_ref().unwrap_or_else(|log| panic!("{log}"));
        assert!(*bytes > 0 && !cached);
    }
    let (again, _) = build_all(std::slice::from_ref(&m), &archs, &c);
    assert!(again.iter().all(|o| matches!(o.result, Ok((_, true)))));
    // A failing configuration is reported with its log, not fatal.
    std::fs::write(
        tmp.path().join("kernels/tiny/tiny.cu"),
        KERNEL.replace("#ifndef BLOCK_N", "#if BLOCK_N == 128\n#error \"BLOCK_N 128 broken\"\n#endif\n#ifndef BLOCK_N"),
    )
    .unwrap();
    let (out, _) = build_all(std::slice::from_ref(&m), &archs, &c);
    let failed: Vec<_> = out.iter().filter(|o| o.result.is_err()).collect();
    assert_eq!(failed.len(), 4);
    assert!(failed
        .iter()
        .all(|o| o.params["BLOCK_N"] == 128 && cudafuzz::core::error::chain(o.result.as_ref().unwrap_err().as_ref()).contains("BLOCK_N 128 broken")));
}

#[test]
fn cubins_load_and_run_on_the_local_gpu() {
    use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
    let (tmp, path) = tree(MANIFEST);
    let Some(c) = compiler(&tmp.path().join("cache")) else { return };
    if !common::env::have(common::env::Need::Gpu) {
        return;
    }
    let ctx = CudaContext::new(0).expect("a GPU is present (device_count > 0) but its context does not open");
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
    // The f32 one runs with the manifest's resolved launch and computes y = x * alpha (+ a zero
    // bias).
    let mut case = Case::new("tiny", Dtype::F32);
    case.dims = BTreeMap::from([("rows".to_string(), 4), ("cols".to_string(), 64)]);
    case.scalars.insert("alpha".into(), Scalar::Float(0.5));
    case.params = BTreeMap::from([("BLOCK_N".to_string(), 64)]);
    let plan = Plan::new(&case, &m).unwrap();
    let r = m.resolve(&plan.vars).unwrap();
    let (ResolvedArg::I32(rows), ResolvedArg::I64(stride), ResolvedArg::F32(alpha)) = (r.args[5], r.args[6], r.args[7]) else {
        panic!("unexpected args {:?}", r.args)
    };
    let out = c.compile(&request_for(&m, &case.params, Dtype::F32, arch, &BTreeMap::new())).unwrap();
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(out.cubin)).unwrap();
    let f = module.load_function("tiny_fwd").unwrap();
    let stream = ctx.default_stream();
    let host: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let x = stream.clone_htod(&host).unwrap();
    let bias = stream.alloc_zeros::<f32>(64).unwrap();
    let mut y = stream.alloc_zeros::<f32>(256).unwrap();
    let mut rowsum = stream.alloc_zeros::<f32>(plan.tensor("rowsum").unwrap().numel as usize).unwrap();
    let mut scratch = stream.alloc_zeros::<i32>(plan.tensor("scratch").unwrap().numel as usize).unwrap();
    let mut b = stream.launch_builder(&f);
    b.arg(&x).arg(&bias).arg(&mut y).arg(&mut rowsum).arg(&mut scratch).arg(&rows).arg(&stride).arg(&alpha);
    let cfg = LaunchConfig { grid_dim: (r.grid[0], r.grid[1], r.grid[2]), block_dim: (r.block[0], r.block[1], r.block[2]), shared_mem_bytes: r.shared_bytes };
    // SAFETY: the argument list matches tiny_fwd's signature; buffers are large enough.
    unsafe { b.launch(cfg) }.unwrap();
    let got = stream.clone_dtoh(&y).unwrap();
    let want: Vec<f32> = host.iter().map(|v| v * 0.5).collect();
    assert_eq!(got, want);
}
