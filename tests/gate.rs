//! `cudafuzz gate` as CI meets it on a host: configuration errors exit 2 naming the file, the key
//! and the fix; `--check` plans the shipped configuration; without a GPU the gate exits 3 and
//! still writes every report, saying which environment check failed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cudafuzz::core::exit;
use cudafuzz::tools::report::export::RunReport;

mod common;
use common::{exe, root};

fn cudafuzz(args: &[&str]) -> Output {
    Command::new(exe()).current_dir(root()).args(args).env_remove("CUDAFUZZ_SHARD").env_remove("SLURM_ARRAY_TASK_ID").output().expect("the binary runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A configuration in `dir` with the shipped planted case and `body` after `[self_check]`.
fn config(dir: &Path, body: &str) -> PathBuf {
    let planted = root().join("ci/planted/oob_read_k.json");
    let path = dir.join("gate.toml");
    std::fs::write(&path, format!("[self_check]\nkernel = \"oob_read_k\"\ncase = {:?}\n\n{body}", planted.display().to_string())).unwrap();
    path
}

fn no_gpu_here() -> bool {
    common::env::have(common::env::Need::NoGpu)
}

#[test]
fn gate_check_plans_the_shipped_configuration() {
    let o = cudafuzz(&["gate", "--check", "--shard", "2/3"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(exit::OK), "{out}");
    for want in ["shard 2/3", "self check: oob_read_k", "under memcheck must give sanitizer_memory", "fuzz: flash_fwd", "sweep: ", "sanitizer: simple_attn"] {
        assert!(out.contains(want), "missing {want:?}:\n{out}");
    }
}

#[test]
fn configuration_errors_exit_2_naming_file_key_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[[kernels]]\nkernal = \"flash_fwd\"\n", &["gate.toml", "kernal"][..]),
        ("[[kernels]]\nkernel = \"flash_fwd\"\nshare = -1\n", &["gate.toml", "kernels[0].share", "positive weight"][..]),
        ("[[sweeps]]\nkernel = \"fa_s512\"\nclasses = [\"q+3\"]\n", &["gate.toml", "sweeps[0].classes", "q+3", "q+8"][..]),
        ("[[seeds]]\ndir = \"nowhere\"\n", &["gate.toml", "seeds[0].dir", "create it"][..]),
        ("[gate]\nbudget = \"tomorrow\"\n", &["gate.toml", "gate.budget", "20m"][..]),
        ("[[kernels]]\nkernel = \"no_such_kernel\"\n", &["gate.toml", "kernels[0].kernel", "cudafuzz kernels"][..]),
    ];
    for (body, wants) in cases {
        let path = config(dir.path(), body);
        let o = cudafuzz(&["gate", "--config", path.to_str().unwrap(), "--out", dir.path().join("out").to_str().unwrap()]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(exit::USAGE), "{body}\n{out}");
        for w in wants {
            assert!(out.contains(w), "{body}: missing {w:?} in:\n{out}");
        }
        assert!(!dir.path().join("out/report.json").exists(), "a bad configuration runs nothing");
    }
    let o = cudafuzz(&["gate", "--config", "/nonexistent/gate.toml"]);
    assert_eq!(o.status.code(), Some(exit::USAGE));
    assert!(text(&o).contains("/nonexistent/gate.toml"), "{}", text(&o));
    let o = cudafuzz(&["gate", "--check", "--shard", "5/4"]);
    assert_eq!(o.status.code(), Some(exit::USAGE));
    assert!(text(&o).contains("--shard `5/4`"), "{}", text(&o));
    let o = cudafuzz(&["gate", "--check", "--budget", "20"]);
    assert_eq!(o.status.code(), Some(exit::USAGE));
    assert!(text(&o).contains("--budget"), "{}", text(&o));
    let o = Command::new(exe()).current_dir(root()).args(["gate", "--check"]).env("CUDAFUZZ_SHARD", "0/2").output().unwrap();
    assert_eq!(o.status.code(), Some(exit::USAGE));
    assert!(text(&o).contains("CUDAFUZZ_SHARD") && text(&o).contains("1-based"), "{}", text(&o));
}

#[test]
fn without_a_gpu_the_gate_exits_3_and_writes_the_report() {
    if !no_gpu_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // A seed to replay, so the report lists what went unchecked.
    let seeds = dir.path().join("seeds");
    std::fs::create_dir_all(&seeds).unwrap();
    let o = cudafuzz(&["case", "example", "--kernel", "simple_attn"]);
    std::fs::write(seeds.join("clean.json"), &o.stdout).unwrap();
    let path = config(dir.path(), "[[seeds]]\ndir = \"seeds\"\n\n[[kernels]]\nkernel = \"simple_attn\"\n");
    let o = cudafuzz(&["gate", "--config", path.to_str().unwrap(), "--budget", "1m", "--out", out.to_str().unwrap(), "--shard", "1/1"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(exit::NO_GPU), "{stdout}{stderr}");
    assert!(stderr.contains("NO GPU") && stderr.contains("checked nothing"), "one clear line: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    for name in ["report.json", "report.md", "junit.xml", "results.sarif"] {
        assert!(out.join(name).is_file(), "{name} missing");
    }
    let r = RunReport::load(&out.join("report.json")).unwrap();
    let gpu = r.environment.iter().find(|e| e.name == "gpu").unwrap();
    assert!(!gpu.ok && gpu.detail.contains("no GPU"), "{gpu:?}");
    let planted = r.environment.iter().find(|e| e.name == "planted bug").unwrap();
    assert!(!planted.ok && planted.detail.contains("not run"), "{planted:?}");
    assert_eq!(r.exit_code(), exit::NO_GPU);
    assert_eq!(r.counts.replays, 1);
    assert_eq!(r.counts.cases, 0, "nothing ran");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.starts_with("## ❌ cudafuzz: FAILED: no GPU"), "{md}");
    let xml = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let failed: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase") && n.children().any(|c| c.has_tag_name("failure")))
        .filter_map(|n| n.attribute("name"))
        .collect();
    assert!(failed.contains(&"gpu") && failed.contains(&"planted bug"), "{failed:?}");
    assert_eq!(doc.descendants().filter(|n| n.has_tag_name("skipped")).count(), 1, "the seed is reported as not run");
    let sarif: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.sarif")).unwrap()).unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    assert_eq!(sarif["runs"][0]["results"].as_array().unwrap().len(), 0);
}

#[test]
fn a_missing_sanitizer_is_named_even_without_a_gpu() {
    if !no_gpu_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), "");
    let out = dir.path().join("out");
    let o = Command::new(exe())
        .current_dir(root())
        .args(["gate", "--config", path.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .env("CUDAFUZZ_SANITIZER", "/nonexistent/compute-sanitizer")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(exit::NO_GPU), "{}", text(&o));
    let r = RunReport::load(&out.join("report.json")).unwrap();
    let s = r.environment.iter().find(|e| e.name == "compute-sanitizer").unwrap();
    assert!(!s.ok && s.detail.contains("CUDAFUZZ_SANITIZER") && s.detail.contains("the gate fails without it"), "{s:?}");
}
