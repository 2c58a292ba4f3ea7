//! Host target: reading arbitrary bytes as a seed file (seed JSON of either format or a bare
//! case, from a `.json` name, and the same bytes as raw fuzzer bytes decoded for a kernel, from a
//! libFuzzer artifact name) returns a clear error or a valid case, never a panic, and a loaded
//! seed saved again loads as the same seed.
#![no_main]

use std::sync::OnceLock;

use cudafuzz::generate::DecodeContext;
use libfuzzer_sys::fuzz_target;

/// The context raw bytes decode with: the shipped correct attention kernel, as `cudafuzz repro
/// ARTIFACT --kernel simple_attn` would.
fn ctx() -> &'static DecodeContext {
    static CTX: OnceLock<DecodeContext> = OnceLock::new();
    CTX.get_or_init(|| DecodeContext::new(&cudafuzz::registry::resolve("simple_attn").unwrap_or_else(|e| panic!("{e}"))))
}

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("cudafuzz-seed-parse-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    for name in ["seed.json", "crash-0"] {
        let path = dir.join(name);
        std::fs::write(&path, data).expect("temp file");
        if let Ok((seed, _)) = cudafuzz::corpus::load(&path, Some(ctx())) {
            seed.case.validate().expect("loaded seeds are valid");
            let again = dir.join("again.json");
            std::fs::write(&again, seed.to_json()).expect("temp file");
            let (back, _) = cudafuzz::corpus::load(&again, None).unwrap_or_else(|e| panic!("a saved seed does not load: {e}"));
            assert_eq!(back, seed, "a saved seed loads as itself");
        }
    }
});
