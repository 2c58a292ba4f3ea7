//! Host target: reading arbitrary bytes as a seed file returns a clear error or a valid case,
//! never a panic.
#![no_main]

use cudafuzz::generate::DecodeContext;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("cudafuzz-seed-parse-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("seed");
    std::fs::write(&path, data).expect("temp file");
    if let Ok((seed, _)) = cudafuzz::corpus::load(&path, &DecodeContext::default()) {
        seed.case.validate().expect("loaded seeds are valid");
    }
});
