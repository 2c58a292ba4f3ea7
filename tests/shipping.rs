//! CUDA as it ships (issue 28 step 1): C++ template entries lowered per build, params derived
//! from the case, nvcc builds and prebuilt modules, CUB under NVRTC, and the manifest errors
//! that guard them. Compiling needs NVRTC (and nvcc for its test); each skips with its reason.

mod common;

use std::collections::BTreeMap;

use common::env::{have, Need};
use cudafuzz::core::case::Dtype;
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::plan::Plan;
use cudafuzz::engine::compile::{request_for, Arch, CompileError};

fn rms_norm_vec() -> Manifest {
    common::manifest("kernels/templates/rms_norm_vec.toml")
}

/// The example case of `m` with row length `n`.
fn case_with_n(m: &Manifest, n: u64) -> cudafuzz::core::case::Case {
    let mut c = m.bind(cudafuzz::core::generate::example(m));
    c.dims.insert("n".into(), n);
    c
}

#[test]
fn a_derived_param_follows_the_case_and_is_never_stored() {
    let m = rms_norm_vec();
    assert_eq!(m.derived_params.get("VEC").map(String::as_str), Some("gcd(16 / elem_bytes, n)"));
    for (dtype, n, vec) in [(Dtype::F16, 12, 4), (Dtype::F16, 64, 8), (Dtype::F32, 64, 4), (Dtype::Bf16, 7, 1), (Dtype::F32, 6, 2)] {
        let mut c = case_with_n(&m, n);
        c.dtype = dtype;
        assert!(!c.params.contains_key("VEC"), "a case stores only the params it chooses: {:?}", c.params);
        let plan = Plan::new(&c, &m).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.vars.params["VEC"], vec, "{dtype} n={n}");
        assert_eq!(m.case_params(&c).unwrap()["VEC"], vec);
        let req = request_for(&m, &plan.vars.params, dtype, Arch::new(9, 0), &BTreeMap::new());
        assert_eq!(req.defines["VEC"], vec.to_string());
        assert_eq!(req.entry, format!("cfx::rms_norm<{vec}, {}, {}>", dtype.c_type(), plan.vars.params["BLOCK"]));
    }
    // Naming a derived param in a case is refused with the expression that sets it.
    let mut c = case_with_n(&m, 12);
    c.params.insert("VEC".into(), 4);
    let e = Plan::new(&c, &m).unwrap_err().to_string();
    assert!(e.contains("params.VEC") && e.contains("gcd(16 / elem_bytes, n)") && e.contains("leave it out"), "{e}");
}

#[test]
fn a_derived_value_the_manifest_does_not_declare_is_refused_with_the_value_to_add() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::copy_kernel(dir.path(), "templates/rms_norm_vec.toml", &["rms_norm_vec.cu"], "narrow.toml", &|s| {
        s.replace("values = [1, 2, 4, 8]", "values = [1, 2, 4]").replace("name = \"rms_norm_vec\"", "name = \"narrow\"")
    });
    let m = Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let e = Plan::new(&case_with_n(&m, 64), &m).unwrap_err().to_string();
    assert!(e.contains("params.VEC") && e.contains("is 8 for this case") && e.contains("add 8 to params.VEC.values"), "{e}");
    assert!(Plan::new(&case_with_n(&m, 12), &m).is_ok());
}

#[test]
fn manifest_mistakes_about_entries_and_builds_name_the_field_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    type Edit<'a> = &'a dyn Fn(String) -> String;
    let cases: [(&str, Edit, &str, &str); 6] = [
        ("placeholder", &|s| s.replace("{BLOCK}>", "{BLOCKS}>"), "entry", "{BLOCKS}"),
        ("spelling", &|s| s.replace("entry = \"cfx::rms_norm<{VEC}, {T}, {BLOCK}>\"", "entry = \"cfx::rms_norm<{VEC}>; x\""), "entry", "name expression"),
        ("both", &|s| s.replace("dtypes =", "compiler = \"nvcc\"\nmodule = \"k.cubin\"\ndtypes ="), "module", "remove `compiler`"),
        ("compiler", &|s| s.replace("dtypes =", "compiler = \"clang\"\ndtypes ="), "compiler", "\"nvcc\""),
        ("std", &|s| s.replace("dtypes =", "std = \"c++98\"\ndtypes ="), "std", "c++17"),
        ("derived", &|s| s.replace("gcd(16 / elem_bytes, n)", "gcd(16, width)"), "params.VEC.from", "width"),
    ];
    for (name, edit, field, fix) in cases {
        let path = common::copy_kernel(&dir.path().join(name), "templates/rms_norm_vec.toml", &["rms_norm_vec.cu"], "k.toml", edit);
        let e = Manifest::load(&path).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(fix), "{name}: {e}");
    }
}

#[test]
fn a_template_entry_is_instantiated_and_lowered_for_each_build() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(c) = common::env::compiler(tmp.path()) else { return };
    let m = rms_norm_vec();
    let mut symbols = Vec::new();
    for (vec, dtype) in [(1, Dtype::F16), (8, Dtype::F16), (4, Dtype::F32)] {
        let params = BTreeMap::from([("VEC".to_string(), vec), ("BLOCK".to_string(), 256)]);
        let req = request_for(&m, &params, dtype, Arch::new(9, 0), &BTreeMap::new());
        let out = c.compile(&req).unwrap_or_else(|e| panic!("{}", cudafuzz::core::error::chain(&e)));
        assert!(out.symbol.starts_with("_ZN3cfx8rms_norm"), "{}", out.symbol);
        // The cache keeps the symbol: a second compile is a hit with the same one.
        let again = c.compile(&req).unwrap();
        assert!(again.from_cache && again.symbol == out.symbol && again.has_line_info());
        symbols.push(out.symbol);
    }
    symbols.dedup();
    assert_eq!(symbols.len(), 3, "one instantiation per build: {symbols:?}");
    // A name expression naming nothing is the entry error, with the way to name a C++ kernel.
    let mut wrong = m.clone();
    wrong.entry = "cfx::rms_norm_missing<{VEC}, {T}, {BLOCK}>".into();
    let req = request_for(&wrong, &m.default_params(), Dtype::F16, Arch::new(9, 0), &BTreeMap::new());
    let e = c.compile(&req).unwrap_err();
    assert!(matches!(e, CompileError::Kernel { .. }), "{e:?}");
    assert!(e.to_string().contains("rms_norm_missing"), "{e}");
}

#[test]
fn cub_block_primitives_compile_under_nvrtc() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(c) = common::env::compiler(tmp.path()) else { return };
    assert!(c.cccl_include().is_some(), "the CUDA include folder {:?} has no cccl/cub", c.cuda_include());
    let m = common::manifest("kernels/norm/rmsnorm_cub.toml");
    let req = request_for(&m, &m.default_params(), Dtype::Bf16, Arch::new(8, 0), &BTreeMap::new());
    let out = c.compile(&req).unwrap_or_else(|e| panic!("{}", cudafuzz::core::error::chain(&e)));
    assert_eq!(out.symbol, "rmsnorm_cub");
}

#[test]
fn a_prebuilt_module_serves_every_instantiation_and_says_which_file_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(c) = common::env::compiler(tmp.path()) else { return };
    let m = common::manifest("kernels/templates/rms_norm_vec_prebuilt.toml");
    let mut keys = Vec::new();
    for (arch, vec, dtype) in [(Arch::new(9, 0), 8, Dtype::F16), (Arch::new(9, 0), 2, Dtype::F32), (Arch::new(8, 9), 4, Dtype::Bf16)] {
        let params = BTreeMap::from([("VEC".to_string(), vec), ("BLOCK".to_string(), 128)]);
        let out = c.compile(&request_for(&m, &params, dtype, arch, &BTreeMap::new())).unwrap_or_else(|e| panic!("{e}"));
        assert!(out.cubin.starts_with(b"\x7fELF") && out.symbol.starts_with("_ZN3cfx8rms_norm") && out.has_line_info());
        keys.push(out.key);
    }
    assert!(keys[0] != keys[1], "each instantiation is its own loaded module: {keys:?}");
    assert!(keys[2].contains("sm_80"), "sm_89 falls back to the sm_80 cubin: {}", keys[2]);
    let Err(e) = c.compile(&request_for(&m, &m.default_params(), Dtype::F16, Arch::new(10, 0), &BTreeMap::new())) else {
        panic!("an sm_100 GPU has no cubin here")
    };
    let e = e.to_string();
    assert!(e.contains("rms_norm_vec.sm_100.cubin") && e.contains("-arch=sm_100"), "{e}");
}

#[test]
fn nvcc_builds_a_template_entry_with_line_information() {
    let tmp = tempfile::tempdir().unwrap();
    if !have(Need::Nvcc) {
        return;
    }
    let Some(c) = common::env::compiler(tmp.path()) else { return };
    let m = common::manifest("kernels/templates/rms_norm_vec_nvcc.toml");
    let params = BTreeMap::from([("VEC".to_string(), 4), ("BLOCK".to_string(), 128)]);
    let out =
        c.compile(&request_for(&m, &params, Dtype::F16, Arch::new(9, 0), &BTreeMap::new())).unwrap_or_else(|e| panic!("{}", cudafuzz::core::error::chain(&e)));
    assert!(out.symbol.starts_with("_ZN3cfx8rms_norm") && out.has_line_info(), "{}", out.symbol);
    assert!(c.compile(&request_for(&m, &params, Dtype::F16, Arch::new(9, 0), &BTreeMap::new())).unwrap().from_cache);
}

#[test]
fn repros_of_a_prebuilt_module_load_the_module_and_a_cu_repro_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = tmp.path().join("seed.json");
    let o = common::cudafuzz_in(&common::root(), &["case", "example", "--kernel", "rms_norm_vec_prebuilt"], &[]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    std::fs::write(&seed, &o.stdout).unwrap();
    let py = tmp.path().join("repro.py");
    let o = common::cudafuzz_in(&common::root(), &["repro", seed.to_str().unwrap(), "--emit", "python", "-o", py.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    let text = std::fs::read_to_string(&py).unwrap();
    assert!(text.contains("module=[\"kernels/templates/prebuilt/rms_norm_vec.{arch}.cubin\"], symbol=\"_ZN3cfx8rms_norm"), "{}", &text[..2000.min(text.len())]);
    let cu = tmp.path().join("repro.cu");
    let o = common::cudafuzz_in(&common::root(), &["repro", seed.to_str().unwrap(), "--emit", "cu", "-o", cu.to_str().unwrap()], &[]);
    assert!(!o.status.success() && common::output_text(&o).contains("--emit python"), "{}", common::output_text(&o));
    assert!(!cu.exists());
    let Some(python) = common::env::python3() else { return };
    let run = std::process::Command::new(python).current_dir(common::root()).arg(&py).args(["--compile-only", "--arch", "sm_90"]).output().unwrap();
    let out = common::output_text(&run);
    assert!(run.status.success() && out.contains("prebuilt module kernels/templates/prebuilt/rms_norm_vec.sm_90.cubin"), "{out}");
}

#[test]
fn a_distinct_index_tensor_draws_no_duplicates_and_a_range_too_small_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::copy_kernel(dir.path(), "rotary/rotary.toml", &["rotary.cu"], "distinct.toml", &|s| {
        s.replace("range = [0, \"max_pos - 1\"]", "range = [0, \"max_pos - 1\"]\ndistinct = true").replace("name = \"rotary\"", "name = \"rotary_distinct\"")
    });
    let m = Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(m.tensor("positions").unwrap().distinct);
    let index = m.tensor_index("positions").unwrap();
    for (tokens, max_pos, seed) in [(64, 64, 1), (50, 4096, 2), (7, 9, 3)] {
        let mut c = m.bind(cudafuzz::core::generate::example(&m));
        c.dims.insert("tokens".into(), tokens);
        c.dims.insert("max_pos".into(), max_pos);
        c.seed = seed;
        let plan = Plan::new(&c, &m).unwrap_or_else(|e| panic!("{e}"));
        let inputs = cudafuzz::engine::data::generate(&c, &plan, &m);
        let mut v: Vec<i64> = inputs.get(index).unwrap().iter().map(|&x| x as i64).collect();
        assert!(v.iter().all(|&p| (0..max_pos as i64).contains(&p)), "{v:?}");
        v.sort_unstable();
        v.dedup();
        assert_eq!(v.len() as u64, tokens, "tokens {tokens}, max_pos {max_pos}: no duplicates");
    }
    let mut c = m.bind(cudafuzz::core::generate::example(&m));
    c.dims.insert("tokens".into(), 10);
    c.dims.insert("max_pos".into(), 9);
    let e = Plan::new(&c, &m).unwrap_err().to_string();
    assert!(e.contains("tensors.positions") && e.contains("10 distinct values do not fit"), "{e}");
    // A float tensor cannot be distinct.
    let bad = common::copy_kernel(&dir.path().join("bad"), "rotary/rotary.toml", &["rotary.cu"], "k.toml", &|s| {
        s.replacen("role = \"input\"", "role = \"input\"\ndistinct = true", 1)
    });
    let e = Manifest::load(&bad).unwrap_err().to_string();
    assert!(e.contains("distinct") && e.contains("integer"), "{e}");
}

#[test]
fn a_malformed_param_says_both_forms_a_param_takes() {
    let dir = tempfile::tempdir().unwrap();
    for (name, edit) in [("string", "VEC = \"gcd(8, n)\""), ("typo", "VEC = { form = \"gcd(8, n)\", values = [1, 2] }")] {
        let path = common::copy_kernel(&dir.path().join(name), "templates/rms_norm_vec.toml", &["rms_norm_vec.cu"], "k.toml", &|s| {
            s.replace("VEC = { from = \"gcd(16 / elem_bytes, n)\", values = [1, 2, 4, 8] }", edit)
        });
        let e = Manifest::load(&path).unwrap_err().to_string();
        assert!(e.contains("params.VEC") && e.contains("from =") && e.contains("[128, 256]"), "{name}: {e}");
    }
}

#[test]
fn a_prebuilt_module_without_line_information_is_noted() {
    let shipped = common::manifest("kernels/templates/rms_norm_vec_prebuilt.toml");
    assert_eq!(cudafuzz::engine::compile::module::line_info_note(&shipped, Arch::new(9, 0)), None, "the shipped cubins carry -lineinfo");
    let dir = tempfile::tempdir().unwrap();
    let path = common::copy_kernel(dir.path(), "templates/rms_norm_vec_prebuilt.toml", &["rms_norm_vec.cu"], "k.toml", &|s| {
        s.replace("prebuilt/rms_norm_vec.{arch}.cubin", "bare.{arch}.cubin")
    });
    std::fs::write(dir.path().join("bare.sm_90.cubin"), b"\x7fELF\0_ZN3cfx8rms_normILj1E6__halfLi256EEEvPT0_PKS2_S5_ifxx\0").unwrap();
    let m = Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let note = cudafuzz::engine::compile::module::line_info_note(&m, Arch::new(9, 0)).expect("a note");
    assert!(note.contains("bare.sm_90.cubin") && note.contains("-lineinfo"), "{note}");
    assert_eq!(cudafuzz::engine::compile::module::line_info_note(&m, Arch::new(8, 0)), None, "no module for sm_80: the build error says so, not this note");
}

/// An fp64-only kernel needs no `dtypes`: its cases carry f64 for reports, its reference's
/// default floor is an f64 one (2⁻³² relative, not the collapsed 2⁻⁵³), and a kernel with a
/// tensor of the case's type still must list them.
#[test]
fn an_fp64_only_kernel_loads_without_dtypes_and_keeps_a_working_tolerance() {
    let m = common::manifest("kernels/fp64/row_dot_f64.toml");
    assert_eq!(m.dtypes, [Dtype::F64]);
    let plan = Plan::new(&m.bind(cudafuzz::core::generate::example(&m)), &m).unwrap_or_else(|e| panic!("{e}"));
    assert!(plan.tensors.iter().all(|t| t.dtype == Dtype::F64));
    let gold = [3.0, -8.0];
    let floor = cudafuzz::engine::reference::default_floor(Dtype::F64, &gold);
    assert_eq!(floor, 4.0 * 8.0 * 2f64.powi(-32));
    // The floor scales with the output's magnitude, below 1 too.
    assert_eq!(cudafuzz::engine::reference::default_floor(Dtype::F32, &[1e-3]), 4.0 * 2f64.powi(-24) * 1e-3);
    let dir = tempfile::tempdir().unwrap();
    let path = common::copy_kernel(dir.path(), "fp64/row_dot_f64.toml", &["row_dot_f64.cu", "row_dot_f64_ref.cu"], "case_typed.toml", &|s| {
        s.replacen("dtype = \"f64\"\n", "", 1)
    });
    let e = Manifest::load(&path).unwrap_err().to_string();
    assert!(e.contains("dtypes") && e.contains("tensor `a` has the case's type"), "{e}");
}

/// `capacity` is an expression over dims, only on tensors whose span it can hold (`dense`,
/// `fixed`); the shipped filter's tail is the rest of its last tile.
#[test]
fn a_capacity_is_planned_as_a_tail_and_refused_on_drawn_layouts() {
    let m = common::manifest("kernels/capacity/box3_tiles.toml");
    let mut c = m.bind(cudafuzz::core::generate::example(&m));
    c.dims.insert("h".into(), 3);
    c.dims.insert("w".into(), 5);
    let plan = Plan::new(&c, &m).unwrap_or_else(|e| panic!("{e}"));
    let out = plan.tensor("out").unwrap();
    let tile = plan.vars.params["TILE"] as u64;
    assert_eq!(out.tail_bytes, (tile - 15) * out.elem_bytes as u64);
    assert_eq!(plan.tensor("img").unwrap().tail_bytes, 0);
    let dir = tempfile::tempdir().unwrap();
    let path = common::copy_kernel(dir.path(), "capacity/box3_tiles.toml", &["box3_tiles.cu", "box3_ref.cu"], "strided.toml", &|s| {
        s.replace("layout = \"dense\"\ncapacity", "layout = \"inner\"\ncapacity")
    });
    let e = Manifest::load(&path).unwrap_err().to_string();
    assert!(e.contains("capacity") && e.contains("dense") && e.contains("inner"), "{e}");
}
