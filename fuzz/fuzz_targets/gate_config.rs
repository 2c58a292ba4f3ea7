//! Host target: any text read as a gate configuration parses and validates with a clear error
//! or a usable configuration, never a panic; one that validates plans (kernels, seeds and the
//! planted case resolved from ci/, as `cudafuzz gate --config ci/...` would) and divides any
//! budget, from a second to the largest duration, between its steps without panicking.
//! ci/gate.toml makes a good starting corpus (ci/test.sh copies it in).
#![no_main]

use std::path::PathBuf;
use std::time::Duration;

use cudafuzz::tools::gate::{GateConfig, DEFAULT_BUDGET};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("ci").join("fuzz-input.toml");
    let Ok(cfg) = GateConfig::from_toml(&path, text) else { return };
    let configured = cfg.budget(&path).expect("a validated configuration's budget parses");
    let Ok(plan) = cfg.plan(&path) else { return };
    let weights: Vec<f64> = plan.kernels.iter().map(|k| k.share).collect();
    for total in [configured.unwrap_or(DEFAULT_BUDGET), Duration::from_secs(1), Duration::MAX] {
        let b = plan.settings.budget(total);
        let sweep = b.sweep(Duration::ZERO);
        let fuzz = b.fuzz(sweep, &weights, !plan.sanitizers.is_empty());
        assert!(fuzz.iter().sum::<Duration>() <= total, "the fuzz campaigns never get more than the budget");
        let _ = b.sanitizer(sweep, plan.sanitizers.len());
    }
});
