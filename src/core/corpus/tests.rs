use std::fs;
use std::path::PathBuf;

use super::*;
use crate::core::error::CaseError;
use crate::core::plan::Plan;
use crate::testing;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ctx() -> DecodeContext {
    DecodeContext::new(&testing::attention())
}

#[test]
fn seed_round_trips_and_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let seed = Seed::new(testing::example_for("kernels/testing/simple_attn.toml"));
    let first = save(dir.path(), &seed).unwrap();
    assert!(!first.already);
    assert!(first.path.file_name().unwrap().to_str().unwrap().starts_with("simple_attn-case-"));
    let again = save(dir.path(), &seed).unwrap();
    assert_eq!(again, SavedSeed { path: first.path.clone(), already: true });
    // A different file squatting on the name is kept; the seed goes beside it.
    let squatted = fs::read_to_string(&first.path).unwrap();
    fs::write(&first.path, "{\"mine\": 1}").unwrap();
    let beside = save(dir.path(), &seed).unwrap();
    assert_ne!(beside.path, first.path);
    assert_eq!(fs::read_to_string(&first.path).unwrap(), "{\"mine\": 1}");
    assert_eq!(fs::read_to_string(&beside.path).unwrap(), squatted);
    let (loaded, enc) = load(&beside.path, None).unwrap();
    assert_eq!(enc, SeedEncoding::Seed);
    assert_eq!(loaded, seed);
    assert!(save_as(&first.path, &seed).is_err(), "save_as must not replace a file");
}

#[test]
fn bare_case_and_raw_bytes_load() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("case.json");
    fs::write(&p, serde_json::to_string(&testing::example()).unwrap()).unwrap();
    assert_eq!(load(&p, None).unwrap().1, SeedEncoding::Case);
    let raw = dir.path().join("crash-123");
    fs::write(&raw, [7u8, 200, 3, 99, 0, 1, 2, 250, 17]).unwrap();
    let (seed, enc) = load(&raw, Some(&ctx())).unwrap();
    assert_eq!(enc, SeedEncoding::Raw);
    assert_eq!(seed.case.kernel, testing::attention().path.display().to_string());
    let e = load(&raw, None).unwrap_err();
    assert!(e.to_string().contains("crash-123") && e.to_string().contains("--kernel"), "{e}");
}

/// Only libFuzzer's artifact names (or an explicit [`RawInput::Always`]) are read as raw bytes:
/// anything else that is not a JSON seed or case is an error naming the file, never some
/// unrelated decoded case.
#[test]
fn raw_bytes_only_by_name_or_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let not_seeds: [(&str, &[u8]); 7] = [
        ("empty.json", b""),
        ("bom.json", b"\xEF\xBB\xBF{}"),
        ("array.json", b"[1,2,3]"),
        ("null.json", b"null"),
        ("planted.toml", b"[self_check]\nkernel = \"x\"\n"),
        ("bytes.bin", &[7, 200, 3, 99, 0, 1, 2, 250, 17]),
        ("crash-1.json", &[7, 200, 3, 99, 0, 1, 2, 250, 17]),
    ];
    for (name, bytes) in not_seeds {
        let p = dir.path().join(name);
        fs::write(&p, bytes).unwrap();
        let e = load(&p, Some(&ctx())).unwrap_err();
        assert!(matches!(e, SeedError::NotASeed { .. }) && e.to_string().contains(name), "{name}: {e}");
        if !name.ends_with(".json") {
            assert!(load_as(&p, Some(&ctx()), RawInput::Always).is_ok(), "{name} with --raw");
        }
    }
    for name in ["crash-da39a3ee", "timeout-1", "oom-1", "leak-1", "slow-unit-1"] {
        assert!(is_libfuzzer_artifact(std::path::Path::new(name)), "{name}");
    }
    assert!(!is_libfuzzer_artifact(std::path::Path::new("crashed-1")));
}

#[test]
fn errors_name_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.json");
    let mut v = serde_json::to_value(Seed::new(testing::example())).unwrap();
    v["case"]["tensors"] = serde_json::json!({"q": {"order": [0, 0, 1, 2]}});
    fs::write(&p, v.to_string()).unwrap();
    let e = load(&p, None).unwrap_err();
    assert!(e.to_string().contains("bad.json"), "{e}");
    match e {
        SeedError::Case { source: CaseError::Invalid { field, .. }, .. } => assert_eq!(field, "tensors.q.order"),
        e => panic!("{e:?}"),
    }
    v["version"] = 9.into();
    fs::write(&p, v.to_string()).unwrap();
    assert!(matches!(load(&p, None).unwrap_err(), SeedError::UnknownFormat { ref version, .. } if version == "9"));
    fs::write(&p, "{\"format\": \"cudafuzz-seed\", \"version\": 2, \"case\": {\"dtype\": \"f17\"}}").unwrap();
    let e = load(&p, None).unwrap_err();
    assert!(matches!(e, SeedError::Json { .. }) && e.to_string().contains("f17"), "{e}");
    fs::write(&p, "{ not json").unwrap();
    assert!(matches!(load(&p, None).unwrap_err(), SeedError::Json { line: 1, .. }));
}

/// The format-1 seeds this repository shipped (kept under tests/fixtures/seeds-v1) load,
/// migrate to the format-2 seeds committed in their place, keep their finding and signature,
/// and plan under their (converted) manifests.
#[test]
fn format_1_seeds_migrate_to_the_committed_format_2_seeds() {
    let fixtures = root().join("tests/fixtures/seeds-v1");
    let converted_dirs = ["seeds/expected", "kernels/mutants/seeds", "ci/planted"].map(|d| root().join(d));
    let mut n = 0;
    for entry in fs::read_dir(&fixtures).unwrap() {
        let old_path = entry.unwrap().path();
        let old_text = fs::read_to_string(&old_path).unwrap();
        assert!(old_text.contains("\"version\": 1"), "{} is a format-1 seed", old_path.display());
        let (old, _) = load(&old_path, None).unwrap_or_else(|e| panic!("{e}"));
        let name = old_path.file_name().unwrap();
        let new_path = converted_dirs.iter().map(|d| d.join(name)).find(|p| p.exists()).unwrap_or_else(|| panic!("no converted {name:?}"));
        let (new, _) = load(&new_path, None).unwrap();
        // The migrated seed is of this build's version; the committed one stays format 2.
        assert_eq!(Seed { version: new.version, ..old.clone() }, new, "{}", old_path.display());
        let raw: serde_json::Value = serde_json::from_str(&old_text).unwrap();
        if let Some(sig) = raw.get("signature").and_then(|s| s.as_str()) {
            assert_eq!(new.signature.as_ref().map(|s| s.as_str()), Some(sig), "the saved signature is kept");
            assert_eq!(
                new.finding.as_ref().map(|f| f.signature().as_str().to_string()).as_deref(),
                Some(sig),
                "and recomputes the same from the migrated finding"
            );
        }
        let m = crate::core::registry::resolve_relative(&root(), &new.case.kernel).unwrap_or_else(|e| panic!("{e}"));
        let case = m.bind(new.case.clone());
        Plan::new(&case, &m).unwrap_or_else(|e| panic!("{}: {e}", new_path.display()));
        n += 1;
    }
    assert!(n >= 12, "{n} fixtures");
}

/// A format-1 case migrates field by field: dims, flags, one distribution as per-tensor value
/// classes, rank-4 layouts with their order and padding.
#[test]
fn a_format_1_case_maps_onto_the_attention_roster() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("v1.json");
    fs::write(
        &p,
        r#"{"version": 1, "kernel": "simple_attn", "dtype": "bf16", "batch": 2, "heads_q": 4, "heads_kv": 2, "seq_q": 65, "seq_k": 7,
            "head_dim": 40, "causal": true, "scale": 0.5, "data": {"seed": 9, "dist": "large_logits"},
            "layouts": {"q": {"order": ["B", "S", "H", "D"], "pad": [0, 1, 0, 3], "offset_bytes": 6},
                        "k": {"order": ["B", "H", "S", "D"], "pad": [0, 0, 0, 0], "offset_bytes": 0},
                        "v": {"order": ["B", "H", "S", "D"], "pad": [0, 0, 0, 0], "offset_bytes": 0},
                        "o": {"order": ["B", "H", "S", "D"], "pad": [0, 0, 0, 0], "offset_bytes": 2}},
            "placement": "exact"}"#,
    )
    .unwrap();
    let (seed, enc) = load(&p, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(enc, SeedEncoding::Case);
    let c = seed.case;
    let dims: Vec<u64> = ["batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim"].iter().map(|d| c.dim(d)).collect();
    assert_eq!(dims, [2, 4, 2, 65, 7, 40]);
    assert_eq!((c.scalar("causal").map(|s| s.is_true()), c.scalar("scale").map(|s| s.as_f64()), c.seed), (Some(true), Some(0.5), 9));
    assert_eq!(c.layout("q").order, [0, 2, 1, 3]);
    assert_eq!(c.layout("q").offset_bytes, 6);
    assert_eq!(c.layout("o").offset_bytes, 2);
    use crate::core::case::ValueClass;
    assert_eq!((c.layout("q").values.clone(), c.layout("v").values.clone()), (vec![ValueClass::Large], vec![ValueClass::Normal]));
    let m = testing::attention();
    let plan = Plan::new(&m.bind(c), &m).unwrap();
    // q's pad [0, 1, 0, 3] is per position of its order B, S, H, D, as in format 1: rows of
    // 40 + 3 elements, one per head, 4 heads per seq position, and 65 + 1 positions per batch.
    let q = plan.tensor("q").unwrap();
    assert_eq!(q.strides, [66 * 172, 43, 172, 1]);
}
