//! Kernel-path coverage builds (`kernels/include/cf_coverage.cuh`): with
//! `-DCUDAFUZZ_COVERAGE=1` the shipped flash_fwd kernel carries the two device arrays the harness
//! reads; without it, none (shipped kernels pay nothing). NVRTC only: prints `skipped: <reason>`
//! where no libnvrtc is found. Reading the counters on a GPU is tested in tests/gpu_engine.rs.

use std::collections::BTreeMap;

use cudafuzz::case::Dtype;
use cudafuzz::compile::{request_for, Arch, CompileError, Compiler};
use cudafuzz::coverage::{COVERAGE_DEFINE, HITS_SYMBOL, LINES_SYMBOL};
use cudafuzz::registry;

fn has_symbol(cubin: &[u8], name: &str) -> bool {
    cubin.windows(name.len() + 2).any(|w| w[0] == 0 && &w[1..=name.len()] == name.as_bytes() && w[name.len() + 1] == 0)
}

#[test]
fn coverage_define_adds_the_counter_arrays_and_only_then() {
    let tmp = tempfile::tempdir().unwrap();
    let compiler = match Compiler::new(Some(tmp.path().to_path_buf())) {
        Ok(c) => c,
        Err(e @ CompileError::NvrtcMissing { .. }) => return eprintln!("skipped: {e}"),
        Err(e) => panic!("compiler setup failed: {e}"),
    };
    let m = registry::resolve("flash_fwd").expect("flash_fwd is shipped");
    let arch: Arch = "sm_90".parse().unwrap();
    let on: BTreeMap<String, String> = [(COVERAGE_DEFINE.to_string(), "1".to_string())].into();
    let with = compiler.compile(&request_for(&m, &m.default_params(), Dtype::F16, arch, &on)).expect("coverage build compiles");
    let without = compiler.compile(&request_for(&m, &m.default_params(), Dtype::F16, arch, &BTreeMap::new())).expect("plain build compiles");
    for sym in [HITS_SYMBOL, LINES_SYMBOL] {
        assert!(has_symbol(&with.cubin, sym), "{sym} missing from the coverage build");
        assert!(!has_symbol(&without.cubin, sym), "{sym} present in the plain build");
    }
    assert_ne!(with.key, without.key, "coverage builds have their own cache entry");
}
