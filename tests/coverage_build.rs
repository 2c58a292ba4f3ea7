//! Kernel-path coverage builds (`kernels/include/cf_coverage.cuh`): with
//! `-DCUDAFUZZ_COVERAGE=1` the shipped flash_fwd kernel carries the two device arrays the harness
//! reads; without it, none (shipped kernels pay nothing). NVRTC only: prints `SKIP <test>: <reason>`
//! where no libnvrtc is found. Reading the counters on a GPU is tested in tests/gpu_engine.rs.

use std::collections::BTreeMap;

use cudafuzz::core::case::Dtype;
use cudafuzz::core::coverage::{COVERAGE_DEFINE, HITS_SYMBOL, LINES_SYMBOL};
use cudafuzz::core::registry;
use cudafuzz::engine::compile::{request_for, Arch};

mod common;

fn has_symbol(cubin: &[u8], name: &str) -> bool {
    cubin.windows(name.len() + 2).any(|w| w[0] == 0 && &w[1..=name.len()] == name.as_bytes() && w[name.len() + 1] == 0)
}

#[test]
fn coverage_define_adds_the_counter_arrays_and_only_then() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(compiler) = common::env::compiler(tmp.path()) else { return };
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

/// Every `CF_COVER(id)` in a kernel source is code, not text after a `//` on its line (where it
/// would never count), and each id is used once per source file: a point that never fires, or two
/// that share a slot, would misreport which paths a case reached.
#[test]
fn coverage_points_are_code_with_unique_ids() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if matches!(p.extension().and_then(|x| x.to_str()), Some("cu" | "cuh")) && !p.starts_with(root.join("include")) {
                files.push(p);
            }
        }
    }
    let mut points = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut ids = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            let in_code = code.matches("CF_COVER(").count();
            assert_eq!(in_code, line.matches("CF_COVER(").count(), "{}:{}: CF_COVER inside a comment never runs: {line}", path.display(), n + 1);
            for part in code.split("CF_COVER(").skip(1) {
                let id: u32 =
                    part.split(')').next().unwrap().trim().parse().unwrap_or_else(|_| panic!("{}:{}: CF_COVER takes a literal id", path.display(), n + 1));
                if let Some(first) = ids.insert(id, n + 1) {
                    panic!("{}:{}: CF_COVER({id}) already used at line {first}", path.display(), n + 1);
                }
                points += 1;
            }
        }
    }
    assert!(points >= 26, "flash_fwd carries 26 coverage points; found {points} in all");
}
