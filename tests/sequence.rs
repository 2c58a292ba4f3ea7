//! Launch sequences (issue 28 step 5): `[[launch]]` loads as the kernel's launch plus later
//! steps, each resolved per case; the mistakes are named; the standalone repros refuse a
//! sequence plainly. The GPU run is `ci/gpu-check.sh`'s `varlen` stage.

mod common;

use cudafuzz::core::manifest::{Manifest, ResolvedArg};
use cudafuzz::core::plan::Plan;

#[test]
fn a_launch_sequence_loads_and_resolves_each_launch_for_the_case() {
    let m = common::manifest("kernels/sequence/row_sum_two_pass.toml");
    assert_eq!(m.entry, "row_sum_partial", "the first launch names the manifest's entry");
    assert_eq!(m.steps.len(), 1);
    assert_eq!(m.steps[0].entry, "row_sum_finalize");
    let mut c = m.bind(cudafuzz::core::generate::example(&m));
    c.dims.insert("rows".into(), 5);
    c.dims.insert("n".into(), 1000);
    c.params.insert("CHUNK".into(), 256);
    let plan = Plan::new(&c, &m).unwrap_or_else(|e| panic!("{e}"));
    let first = m.resolve(&plan.vars).unwrap();
    assert_eq!(first.grid, [4, 5, 1]);
    let steps = m.resolve_steps(&plan.vars).unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].grid, [1, 1, 1]);
    let partial = m.tensor_index("partial").unwrap();
    assert_eq!(steps[0].args[1], ResolvedArg::Tensor(partial));
    assert_eq!(steps[0].args[3], ResolvedArg::I32(1000));
}

#[test]
fn launch_sequence_mistakes_name_the_field_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, &str, &str); 4] = [
        ("entry = \"row_sum_finalize\"\n", "", "launch[1].entry", "each later launch of a sequence names its kernel"),
        ("entry = \"row_sum_finalize\"", "entry = \"ns::finalize<1>\"", "launch[1].entry", "not an extern \"C\" name"),
        ("source = \"row_sum_two_pass.cu\"", "source = \"row_sum_two_pass.cu\"\ncompiler = \"nvcc\"", "launch", "built by NVRTC"),
        ("description =", "entry = \"row_sum_finalize\"\ndescription =", "launch[0].entry", "differs from the manifest's entry"),
    ];
    for (i, (from, to, field, want)) in cases.iter().enumerate() {
        let path = common::copy_kernel(dir.path(), "sequence/row_sum_two_pass.toml", &["row_sum_two_pass.cu", "row_sum_ref.cu"], &format!("s{i}.toml"), &|s| {
            assert!(s.contains(from), "test bug: {from}");
            s.replacen(from, to, 1)
        });
        let e = Manifest::load(&path).unwrap_err().to_string();
        assert!(e.contains(&format!("field {field}:")) && e.contains(want), "{to}: {e}");
    }
    // A single [launch] naming an entry is refused: only a sequence's launches name theirs.
    let path = common::copy_kernel(dir.path(), "activation/silu_and_mul.toml", &["silu_and_mul.cu", "silu_and_mul_ref.cu"], "one.toml", &|s| {
        s.replacen("[launch]\n", "[launch]\nentry = \"silu_and_mul\"\n", 1)
    });
    let e = Manifest::load(&path).unwrap_err().to_string();
    assert!(e.contains("launch.entry") && e.contains("only the launches of a sequence"), "{e}");
}

/// The standalone repros launch a sequence as the worker does: the kernel, then each later
/// entry of the same module on the kernel's allocations, with their arguments, and again for
/// the determinism run. (Run on a GPU by `ci/gpu-check.sh`'s `modules` stage.)
#[test]
fn standalone_repros_launch_every_kernel_of_a_sequence() {
    let m = common::manifest("kernels/sequence/row_sum_two_pass.toml");
    let mut case = m.bind(cudafuzz::core::generate::example(&m));
    case.dims.insert("rows".into(), 3);
    case.dims.insert("n".into(), 700);
    let seed = cudafuzz::tools::emit::SeedInfo::default();
    let cu = cudafuzz::tools::emit::emit(cudafuzz::tools::emit::EmitKind::Cu, &case, &m, &seed).unwrap().text;
    assert!(cu.contains("#define CFR_N_STEPS 1") && cu.contains("(const void*)cfr_kernel::row_sum_finalize, nullptr"), "step entries");
    assert!(cu.contains("\"launch 1: row_sum_finalize\", {1u, 1u, 1u}") && cu.contains("// row_sum_finalize launch 1:"), "step launch and args");
    assert!(cu.matches("cfr_start_kernel()").count() >= 3, "launched for the case and for the determinism run");
    let py = cudafuzz::tools::emit::emit(cudafuzz::tools::emit::EmitKind::Python, &case, &m, &seed).unwrap().text;
    assert!(py.contains("dict(what=\"launch row_sum_finalize\", entry=\"row_sum_finalize\", grid=[1, 1, 1]"), "STEPS");
    assert!(py.contains("(3, \"ptr\","), "the step's arguments are launch 3 (after the kernel and two reference runs)");
}

/// `build` (no GPU) checks that every kernel of a sequence is in the module it compiled, and
/// names the one that is not.
#[test]
fn build_names_a_sequence_kernel_missing_from_the_module() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(c) = common::env::compiler(tmp.path()) else { return };
    let arch = cudafuzz::engine::compile::Arch::new(9, 0);
    let m = common::manifest("kernels/sequence/row_sum_two_pass.toml");
    let (out, _) = cudafuzz::engine::compile::build_all(std::slice::from_ref(&m), &[arch], &c);
    assert!(out.iter().all(|o| o.result.is_ok()), "the shipped sequence builds");
    let mut bad = m.clone();
    bad.steps[0].entry = "row_sum_finalise".into();
    let (out, _) = cudafuzz::engine::compile::build_all(&[bad], &[arch], &c);
    let e = out.iter().find_map(|o| o.result.as_ref().err()).expect("a missing kernel fails the build").to_string();
    assert!(e.contains("row_sum_finalise") && e.contains("not in the cubin"), "{e}");
}
