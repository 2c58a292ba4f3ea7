//! Fixtures the gate's tests share: a configuration directory with the planted case
//! ([`config_dir`]), seeds with and without saved findings ([`seed_dir`]) and the findings they
//! carry ([`finding`]). They live in one place because configuration, planning and run tests all
//! start from the same directory.

use std::path::{Path, PathBuf};

use crate::core::corpus::Seed;
use crate::core::finding::{Finding, FindingKind, Location, Oracle};
use crate::testing::{alignment, example_for};

use super::{GateConfig, GateError, GatePlan};

pub(super) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A configuration directory with the planted case and the given TOML body after the
/// `[self_check]` table.
pub(super) fn config_dir(body: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mut case = example_for("kernels/testing/oob_read_k.toml");
    case.dims.insert("head_dim".into(), 40);
    std::fs::write(dir.path().join("planted.json"), serde_json::to_string_pretty(&case).unwrap()).unwrap();
    let oob = root().join("kernels/testing/oob_read_k.toml");
    let text = format!("[self_check]\nkernel = {:?}\ncase = \"planted.json\"\n\n{body}", oob.display().to_string());
    let path = dir.path().join("gate.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

pub(super) fn load(body: &str) -> Result<(tempfile::TempDir, GatePlan), GateError> {
    let (dir, path) = config_dir(body);
    let cfg = GateConfig::load(&path)?;
    let plan = cfg.plan(&path)?;
    Ok((dir, plan))
}

pub(super) fn err(body: &str) -> String {
    match load(body) {
        Ok(_) => panic!("accepted:\n{body}"),
        Err(e) => {
            let s = e.to_string();
            assert!(s.contains("gate.toml"), "names the file: {s}");
            s
        }
    }
}

pub(super) fn finding(kind: FindingKind, oracle: Oracle, kernel: &str) -> Finding {
    Finding {
        tensor: Some("q".into()),
        location: Some(Location::Element { index: vec![0, 0, 0, 0] }),
        source: oracle.is_sanitizer().then(|| crate::core::finding::SourceLocation { file: "simple_attn.cu".into(), line: 7, function: None }),
        alignment: alignment([8, 16, 16, 16]),
        ..Finding::new(kind, oracle, kernel, "d".into())
    }
}

/// Seeds in a temporary directory: an expected failure, a fixed one, a plain case.
pub(super) fn seed_dir(dir: &Path) -> (Finding, Finding) {
    let expected = finding(FindingKind::MisalignedAddress, Oracle::CudaStatus, "simple_attn");
    let fixed = finding(FindingKind::CanaryDamage, Oracle::Canary, "simple_attn");
    std::fs::create_dir_all(dir.join("fixed")).unwrap();
    let mut a = example_for("kernels/testing/simple_attn.toml");
    a.seed = 11;
    std::fs::write(dir.join("a.json"), Seed::with_finding(a, expected.clone()).to_json()).unwrap();
    let mut b = example_for("kernels/testing/simple_attn.toml");
    b.seed = 22;
    std::fs::write(dir.join("fixed/b.json"), Seed::with_finding(b, fixed.clone()).to_json()).unwrap();
    let mut c = example_for("kernels/testing/simple_attn.toml");
    c.seed = 33;
    std::fs::write(dir.join("c.json"), Seed::new(c).to_json()).unwrap();
    std::fs::write(dir.join("README.md"), "not a seed").unwrap();
    (expected, fixed)
}
