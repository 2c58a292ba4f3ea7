//! `cudafuzz report merge` and `report render` through the binary: shard reports become one
//! report in four formats, seeds are gathered without overwriting anything, and the exit status
//! is the merged verdict (a missing shard fails the merge).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cudafuzz::core::exit;
use cudafuzz::core::finding::{Finding, FindingKind, Location, Oracle, SourceLocation};
use cudafuzz::core::shard::Shard;
use cudafuzz::tools::report::export::{Campaign, Expectation, FindingEntry, GpuSummary, Observed, RunReport, SeedReplay, Step};

mod common;
use common::{exe, root};

fn cudafuzz(args: &[&str]) -> Output {
    Command::new(exe()).current_dir(root()).args(args).output().expect("the binary runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn finding(kind: FindingKind, oracle: Oracle, line: Option<u32>) -> Finding {
    Finding {
        tensor: Some("q".into()),
        location: Some(Location::RedzoneAfter { bytes_past_end: 2 }),
        source: line.map(|line| SourceLocation { file: "flash_fwd_kernel.cuh".into(), line, function: None }),
        other_access: None,
        access_size: Some(16),
        sanitizer_kind: oracle.is_sanitizer().then(|| "invalid_global_read_out_of_bounds".into()),
        alignment: ["q", "k", "v", "o"].map(|t| (t.to_string(), 16)).to_vec(),
        ..Finding::new(kind, oracle, "flash_fwd[BLOCK_M=64,BLOCK_N=64]", "a 16-byte read 2 bytes past q's end".into())
    }
}

/// Shard `number` of `of`: a clean environment, one replay and a campaign; `found` adds a new
/// finding whose seed is `seed`.
fn shard(number: u64, of: u64, found: Option<(&Finding, &Path)>) -> RunReport {
    let mut r = RunReport::new();
    r.shard = Shard::new(number - 1, of);
    r.gpu = Some(GpuSummary { name: "NVIDIA H100 80GB HBM3 (gpu 0)".into(), arch: "sm_90".into(), driver: "13.0".into() });
    for check in ["gpu", "driver", "compute-sanitizer", "planted bug"] {
        r.check(check, true, "ok");
    }
    let k = r.kernel_mut("flash_fwd");
    k.source = Some("kernels/attention/flash_fwd.cu".into());
    k.replays.push(SeedReplay {
        seed: format!("seeds/expected/s{number}.json"),
        case: "f16 b1".into(),
        expected: Expectation::Pass,
        observed: Observed::Pass,
        ok: true,
    });
    k.campaign = Some(Campaign { budget_secs: 100.0, elapsed_secs: 100.0, seed: 0, cases: 500, passed: 500, ..Campaign::default() });
    if let Some((f, seed)) = found {
        k.findings.push(FindingEntry {
            signature: f.signature(),
            finding: f.clone(),
            seed: Some(seed.display().to_string()),
            case: "f16 b1 h1/1 q65 k113 d64".into(),
            step: Step::Fuzz,
            new: true,
            source_path: Some("kernels/attention/flash_fwd_kernel.cuh".into()),
            bug: None,
        });
        k.campaign.as_mut().unwrap().passed -= 1;
        k.campaign.as_mut().unwrap().failed += 1;
    }
    r.recount();
    r
}

fn write(dir: &Path, name: &str, r: &RunReport) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, r.to_json()).unwrap();
    p
}

#[test]
fn merging_shards_sums_counts_dedupes_findings_and_gathers_seeds() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (s1, s2) = (d.join("shard1/seeds"), d.join("shard2/seeds"));
    std::fs::create_dir_all(&s1).unwrap();
    std::fs::create_dir_all(&s2).unwrap();
    // Both shards found the same bug (same signature, same seed file), shard 2 another one
    // whose seed name collides with a different file of shard 1.
    let oob = finding(FindingKind::SanitizerMemory, Oracle::Memcheck, Some(211));
    let nan = finding(FindingKind::NanLeak, Oracle::NanLeak, None);
    std::fs::write(s1.join("oob.json"), "{\"seed\": \"oob\"}").unwrap();
    std::fs::write(s2.join("oob.json"), "{\"seed\": \"oob\"}").unwrap();
    std::fs::write(s1.join("nan.json"), "{\"seed\": \"shard 1's other\"}").unwrap();
    std::fs::write(s2.join("nan.json"), "{\"seed\": \"nan\"}").unwrap();
    let mut a = shard(1, 2, Some((&oob, &s1.join("oob.json"))));
    a.kernels[0].findings[0].seed = Some(s1.join("oob.json").display().to_string());
    let mut b = shard(2, 2, Some((&oob, &s2.join("oob.json"))));
    b.kernels[0].findings.push(FindingEntry {
        signature: nan.signature(),
        finding: nan.clone(),
        seed: Some(s2.join("nan.json").display().to_string()),
        case: "bf16 b2".into(),
        step: Step::Fuzz,
        new: true,
        source_path: None,
        bug: None,
    });
    b.recount();
    let (ra, rb) = (write(d, "a.json", &a), write(d, "b.json", &b));
    let out = d.join("merged");
    // Something already in the merged seed directory stays as it is.
    std::fs::create_dir_all(out.join("seeds")).unwrap();
    std::fs::write(out.join("seeds/oob.json"), "{\"seed\": \"kept\"}").unwrap();

    let o = cudafuzz(&[
        "report",
        "merge",
        "--out",
        out.to_str().unwrap(),
        ra.to_str().unwrap(),
        rb.to_str().unwrap(),
        "--seeds",
        s1.to_str().unwrap(),
        s2.to_str().unwrap(),
    ]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(exit::FINDINGS), "{log}");
    assert!(log.contains("merged 2 report(s) (1/2, 2/2)") && log.contains("2 new bugs (2 findings)"), "{log}");

    let m = RunReport::load(&out.join("report.json")).unwrap();
    assert_eq!(m.merged_from, ["1/2", "2/2"]);
    assert_eq!(m.counts.cases, a.counts.cases + b.counts.cases);
    assert_eq!(m.counts.replays, 2);
    assert_eq!(m.counts.findings, 2, "oob once, nan once");
    assert_eq!((m.counts.bugs, m.counts.new_bugs), (2, 2), "oob and nan are two bugs");
    assert!(m.new_findings);
    assert_eq!(m.kernels.len(), 1);
    assert_eq!(m.kernels[0].campaign.as_ref().unwrap().cases, 1000);
    let shards = m.environment.iter().find(|e| e.name == "shards").unwrap();
    assert!(shards.ok, "{shards:?}");
    assert_eq!(m.environment.iter().filter(|e| e.name == "gpu").count(), 2, "each shard's checks are kept");

    // Seeds: nothing overwritten, same content skipped, a taken name gets a new one.
    let mut names: Vec<String> = std::fs::read_dir(out.join("seeds")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["nan-2.json", "nan.json", "oob-2.json", "oob.json"]);
    assert_eq!(std::fs::read_to_string(out.join("seeds/oob.json")).unwrap(), "{\"seed\": \"kept\"}");
    assert_eq!(std::fs::read_to_string(out.join("seeds/oob-2.json")).unwrap(), "{\"seed\": \"oob\"}");
    assert_eq!(std::fs::read_to_string(out.join("seeds/nan-2.json")).unwrap(), "{\"seed\": \"nan\"}");
    // The merged report points at the merged copies.
    let seed_of = |sig: &cudafuzz::core::finding::Signature| m.kernels[0].findings.iter().find(|f| &f.signature == sig).unwrap().seed.clone().unwrap();
    assert!(seed_of(&oob.signature()).ends_with("merged/seeds/oob-2.json"), "{}", seed_of(&oob.signature()));
    assert!(seed_of(&nan.signature()).ends_with("merged/seeds/nan-2.json"), "{}", seed_of(&nan.signature()));
    // Merging again copies nothing new.
    let o = cudafuzz(&[
        "report",
        "merge",
        "--out",
        out.to_str().unwrap(),
        ra.to_str().unwrap(),
        rb.to_str().unwrap(),
        "--seeds",
        s1.to_str().unwrap(),
        s2.to_str().unwrap(),
    ]);
    assert!(text(&o).contains("0 copied, 0 renamed"), "{}", text(&o));

    // The other three formats, parsed back.
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.starts_with("## ❌ cudafuzz: FAILED: 2 new bugs (2 findings)"), "{md}");
    assert!(md.contains("merged from 1/2, 2/2") && md.contains("| shards | ok | all 2 shards merged |"), "{md}");
    let xml = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let cases: Vec<_> = doc.descendants().filter(|n| n.has_tag_name("testcase")).collect();
    // 2 × 4 checks + shards check + 2 replays + 1 merged campaign.
    assert_eq!(cases.len(), 12, "{xml}");
    let fuzz = cases.iter().find(|c| c.attribute("classname") == Some("cudafuzz.fuzz")).unwrap();
    let failure = fuzz.children().find(|n| n.has_tag_name("failure")).expect("the campaign failed");
    assert_eq!(failure.attribute("message"), Some("2 new findings (2 bugs)"));
    assert!(failure.text().unwrap().contains("a 16-byte read 2 bytes past q's end"));
    let sarif: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.sarif")).unwrap()).unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    assert!(sarif["$schema"].as_str().unwrap().contains("sarif-2.1.0"));
    assert_eq!(sarif["runs"][0]["tool"]["driver"]["name"], "cudafuzz");
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let uris: Vec<&str> = results.iter().map(|r| r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].as_str().unwrap()).collect();
    assert_eq!(uris, ["kernels/attention/flash_fwd_kernel.cuh", "kernels/attention/flash_fwd.cu"]);
    assert_eq!(results[0]["locations"][0]["physicalLocation"]["region"]["startLine"], 211);
}

#[test]
fn a_clean_complete_merge_passes_and_a_missing_shard_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let reports: Vec<PathBuf> = (1..=3).map(|i| write(d, &format!("r{i}.json"), &shard(i, 3, None))).collect();
    let arg = |p: &PathBuf| p.to_str().unwrap().to_string();
    let out = d.join("all");
    let o = cudafuzz(&["report", "merge", "--out", out.to_str().unwrap(), &arg(&reports[0]), &arg(&reports[1]), &arg(&reports[2])]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    assert!(RunReport::load(&out.join("report.json")).unwrap().passed());
    let out = d.join("some");
    let o = cudafuzz(&["report", "merge", "--out", out.to_str().unwrap(), &arg(&reports[0]), &arg(&reports[2])]);
    assert_eq!(o.status.code(), Some(exit::SETUP), "{}", text(&o));
    assert!(text(&o).contains("missing 2/3"), "{}", text(&o));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| shards | **FAILED** | missing 2/3"), "{md}");
}

#[test]
fn render_prints_each_format_and_bad_reports_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let oob = finding(FindingKind::SanitizerMemory, Oracle::Memcheck, Some(9));
    let r = write(tmp.path(), "r.json", &shard(1, 1, Some((&oob, Path::new("out/seeds/x.json")))));
    let p = r.to_str().unwrap();
    let o = cudafuzz(&["report", "render", "--format", "junit", p]);
    assert_eq!(o.status.code(), Some(exit::OK));
    roxmltree::Document::parse(&String::from_utf8(o.stdout).unwrap()).unwrap();
    let o = cudafuzz(&["report", "render", "--format", "sarif", p]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["runs"][0]["results"][0]["ruleId"], "invalid_global_read_out_of_bounds");
    let o = cudafuzz(&["report", "render", "--format", "json", p]);
    assert_eq!(RunReport::from_json(Path::new("stdout"), &String::from_utf8(o.stdout).unwrap()).unwrap().counts.findings, 1);
    let o = cudafuzz(&["report", "render", p]);
    assert!(String::from_utf8(o.stdout).unwrap().starts_with("## ❌ cudafuzz: FAILED: 1 new bug (1 finding)"));

    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, "{\"format\": \"something-else\", \"version\": 1}").unwrap();
    let o = cudafuzz(&["report", "render", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::USAGE));
    assert!(text(&o).contains("bad.json") && text(&o).contains("something-else"), "{}", text(&o));
    let o = cudafuzz(&["report", "merge", "--out", tmp.path().join("m").to_str().unwrap(), p, "/nonexistent/report.json"]);
    assert_eq!(o.status.code(), Some(exit::USAGE));
    assert!(text(&o).contains("/nonexistent/report.json"), "{}", text(&o));
    let o = cudafuzz(&["report", "merge", "--out", tmp.path().join("m").to_str().unwrap(), p, "--seeds", "/nonexistent/seeds"]);
    assert_eq!(o.status.code(), Some(exit::USAGE));
    assert!(text(&o).contains("/nonexistent/seeds"), "{}", text(&o));
}

#[test]
fn gate_shards_without_a_gpu_merge_into_a_no_gpu_report() {
    if !common::env::have(common::env::Need::NoGpu) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut reports = Vec::new();
    for i in 1..=2 {
        let out = tmp.path().join(format!("shard{i}"));
        let o = Command::new(exe())
            .current_dir(root())
            .args(["gate", "--budget", "1m", "--out", out.to_str().unwrap()])
            .env("CUDAFUZZ_SHARD", format!("{i}/2"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(exit::NO_GPU), "{}", text(&o));
        let r = RunReport::load(&out.join("report.json")).unwrap();
        assert_eq!(r.shard, Shard::new(i - 1, 2), "the shard comes from CUDAFUZZ_SHARD");
        reports.push(out.join("report.json").display().to_string());
    }
    let out = tmp.path().join("merged");
    let o = cudafuzz(&["report", "merge", "--out", out.to_str().unwrap(), &reports[0], &reports[1]]);
    assert_eq!(o.status.code(), Some(exit::NO_GPU), "{}", text(&o));
    let m = RunReport::load(&out.join("report.json")).unwrap();
    assert!(m.environment.iter().any(|e| e.name == "shards" && e.ok));
    assert_eq!(m.environment.iter().filter(|e| e.name == "gpu" && !e.ok).count(), 2);
}
