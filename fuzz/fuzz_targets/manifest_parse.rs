//! Host target: any text read as a kernel manifest loads and validates with a clear error or a
//! usable manifest, never a panic; a manifest that loads gives an example case that plans, is
//! judged against the contract and resolves its launch (an error is fine, a panic is not), and
//! the format-1 converter takes the same text without panicking.
//!
//! A manifest names its `.cu` beside it, so each input is loaded as if it sat in every directory
//! of shipped manifests (the committed manifests under `kernels/` make a good starting corpus:
//! ci/test.sh copies them in).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use cudafuzz::core::generate::{decode_case, example, DecodeContext};
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::plan::{check_contract, Plan};
use libfuzzer_sys::fuzz_target;

/// The directories the shipped manifests live in (each input is tried in every one).
fn dirs() -> &'static [PathBuf] {
    static DIRS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    DIRS.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("kernels");
        let mut dirs: Vec<PathBuf> = cudafuzz::core::manifest::find_manifests(&root).iter().filter_map(|p| p.parent().map(PathBuf::from)).collect();
        dirs.sort();
        dirs.dedup();
        assert!(!dirs.is_empty(), "no shipped manifests under {}", root.display());
        dirs
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = cudafuzz::core::manifest::migrate::migrate(text);
    for dir in dirs() {
        let Ok(m) = Manifest::from_toml(&dir.join("fuzz-input.toml"), text) else { continue };
        let case = example(&m);
        if let Ok(plan) = Plan::new(&case, &m) {
            let _ = check_contract(&m, &case, &plan);
            let _ = m.resolve(&plan.vars);
        }
        let ctx = DecodeContext::new(&m);
        if let Ok(case) = decode_case(&mut arbitrary::Unstructured::new(data), &ctx) {
            if let Ok(plan) = Plan::new(&case, &m) {
                let _ = m.resolve(&plan.vars);
            }
        }
        break;
    }
});
