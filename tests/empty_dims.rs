//! Dims that may be 0 (issue 28 step 3): an empty batch or hidden size plans as empty tensors
//! that still sit in guarded allocations, the host's `skip` guard turns the launch into none,
//! and a host that forgets it makes the launch the driver refuses; the load rules around them
//! name the field and the fix. Host-only: the GPU runs are in `ci/gpu-check.sh`'s `modules` stage.

mod common;

use arbitrary::Unstructured;
use cudafuzz::core::generate::{decode_case, DecodeContext};
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::plan::{check_contract, Plan};
use cudafuzz::engine::arena::HostImage;
use cudafuzz::engine::data;

fn case_with(m: &Manifest, tokens: u64, d: u64) -> cudafuzz::core::case::Case {
    let mut c = m.bind(cudafuzz::core::generate::example(m));
    c.dims.insert("tokens".into(), tokens);
    c.dims.insert("d".into(), d);
    c
}

/// Empty cases plan inside the contract, with empty tensors in guarded allocations and no
/// values; the guarded launch (and the reference's, which shares the guard) launches nothing;
/// a case with both dims non-zero launches as silu_and_mul does.
#[test]
fn an_empty_case_plans_empty_tensors_and_its_guarded_launch_is_skipped() {
    let m = common::manifest("kernels/empty/silu_and_mul_empty.toml");
    for (tokens, d) in [(0, 5), (3, 0), (0, 0)] {
        let c = case_with(&m, tokens, d);
        let plan = Plan::new(&c, &m).unwrap_or_else(|e| panic!("{tokens}x{d}: {e}"));
        assert!(check_contract(&m, &c, &plan).is_inside(), "{}", c.summary());
        assert!(plan.tensors.iter().all(|t| t.numel == 0), "{tokens}x{d}");
        let inputs = data::generate(&c, &plan, &m);
        assert_eq!(inputs.get(m.tensor_index("x").unwrap()).map(<[f64]>::len), Some(0));
        let image = HostImage::build(&c, &plan, &inputs);
        for (i, a) in image.layout.allocs.iter().enumerate() {
            assert!(a.total_bytes() > 0 && a.span_bytes == 0, "tensor {i}: empty, still in its redzones: {a:?}");
        }
        let launch = m.resolve(&plan.vars).unwrap();
        assert!(launch.skip && launch.args.is_empty(), "{tokens}x{d}: {launch:?}");
        if let cudafuzz::core::manifest::ReferenceSpec::Kernel(k) = &m.reference {
            assert!(m.resolve_launch(&k.launch, &plan.vars, "reference").unwrap().skip);
        }
    }
    let c = case_with(&m, 2, 7);
    let plan = Plan::new(&c, &m).unwrap();
    let launch = m.resolve(&plan.vars).unwrap();
    assert!(!launch.skip && launch.grid == [2, 1, 1], "{launch:?}");
}

/// The mutant's guard forgets the batch: its empty batch resolves to a grid of 0 blocks, the
/// launch its host makes (and the driver refuses), not a load or plan error.
#[test]
fn a_host_without_the_guard_resolves_the_empty_launch_it_makes() {
    let m = common::manifest("kernels/mutants/silu_mul_empty_batch.toml");
    let c = case_with(&m, 0, 9);
    let plan = Plan::new(&c, &m).unwrap();
    let launch = m.resolve(&plan.vars).unwrap();
    assert!(!launch.skip && launch.grid[0] == 0, "{launch:?}");
    // The reference has nothing to compute: its empty launch is skipped, guard or not.
    if let cudafuzz::core::manifest::ReferenceSpec::Kernel(k) = &m.reference {
        assert!(m.resolve_launch(&k.launch, &plan.vars, "reference").unwrap().skip);
    }
    let skipped = m.resolve(&Plan::new(&case_with(&m, 4, 0), &m).unwrap().vars).unwrap();
    assert!(skipped.skip);
}

/// Drawn cases reach the empty boundaries (hint 0) often, and every one plans inside.
#[test]
fn decoded_cases_reach_empty_dims() {
    let m = common::manifest("kernels/empty/silu_and_mul_empty.toml");
    let ctx = DecodeContext::new(&m);
    let (mut tokens0, mut d0) = (0, 0);
    for seed in 0..200 {
        let raw = common::decoder_bytes(seed, 256);
        let case = decode_case(&mut Unstructured::new(&raw), &ctx).unwrap();
        let plan = Plan::new(&case, &m).unwrap_or_else(|e| panic!("{e}: {}", case.summary()));
        assert!(check_contract(&m, &case, &plan).is_inside(), "{}", case.summary());
        tokens0 += (case.dim("tokens") == 0) as u32;
        d0 += (case.dim("d") == 0) as u32;
    }
    assert!(tokens0 >= 8 && d0 >= 1, "empty batches {tokens0}, empty rows {d0} in 200 cases");
}

/// What load still refuses: a dim that is always 0, and a launch that can be empty with no
/// guard saying when the host launches nothing (the message names the guard to add).
#[test]
fn empty_dim_mistakes_name_the_field_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let srcs = ["../activation/silu_and_mul.cu", "../activation/silu_and_mul_ref.cu"];
    let cases: [(&str, &str, &str, &str); 2] = [
        ("tokens = { range = [0, 65535]", "tokens = { range = [0, 0]", "dims.tokens.range", "max >= 1"),
        ("skip = \"tokens == 0 || d == 0\"\n", "", "grid[0]", "[launch] skip = \"rows == 0\""),
    ];
    for (i, (from, to, field, want)) in cases.iter().enumerate() {
        // The sources sit beside the copy's folder, as in the repository.
        std::fs::create_dir_all(dir.path().join("activation")).unwrap();
        let path = common::copy_kernel(&dir.path().join("empty"), "empty/silu_and_mul_empty.toml", &srcs, &format!("e{i}.toml"), &|s| {
            assert!(s.contains(from), "test bug: {from}");
            s.replacen(from, to, 1)
        });
        let e = Manifest::load(&path).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(want), "{to}: {e}");
    }
}
