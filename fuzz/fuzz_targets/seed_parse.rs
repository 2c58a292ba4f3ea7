//! Host target: reading arbitrary bytes as a seed file (seed JSON of either format or a bare
//! case, from a `.json` name, and the same bytes as raw fuzzer bytes decoded for a kernel, from a
//! libFuzzer artifact name) returns a clear error or a valid case, never a panic, and a loaded
//! seed saved again loads as the same seed.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cudafuzz::core::generate::DecodeContext;
use libfuzzer_sys::fuzz_target;

/// The context raw bytes decode with: the shipped correct attention kernel, as `cudafuzz repro
/// ARTIFACT --kernel simple_attn` would.
fn ctx() -> &'static DecodeContext {
    static CTX: OnceLock<DecodeContext> = OnceLock::new();
    CTX.get_or_init(|| DecodeContext::new(&cudafuzz::core::registry::resolve("simple_attn").unwrap_or_else(|e| panic!("{e}"))))
}

/// The folder every input is written into, made once and removed when libFuzzer ends the run
/// (it leaves through `exit`, so statics are never dropped: an `atexit` hook removes it).
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn remove() {
        if let Some(dir) = DIR.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new().prefix("cudafuzz-seed-parse-").tempdir().expect("temp dir").keep();
        // SAFETY: registering a plain extern "C" fn with no captured state.
        unsafe { libc::atexit(remove) };
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = scratch();
    for name in ["seed.json", "crash-0"] {
        let path = dir.join(name);
        std::fs::write(&path, data).expect("temp file");
        if let Ok((seed, _)) = cudafuzz::core::corpus::load(&path, Some(ctx())) {
            seed.case.validate().expect("loaded seeds are valid");
            let again = dir.join("again.json");
            std::fs::write(&again, seed.to_json()).expect("temp file");
            let (back, _) = cudafuzz::core::corpus::load(&again, None).unwrap_or_else(|e| panic!("a saved seed does not load: {e}"));
            assert_eq!(back, seed, "a saved seed loads as itself");
        }
    }
});
