//! The JUnit XML rendering of a [`RunReport`]: [`RunReport::to_junit`].
//!
//! It exists so that CI systems that read JUnit (GitLab, Jenkins, GitHub test-report actions)
//! show a gate run as tests: one per environment check, seed replay, sweep cell, fuzz campaign
//! and sanitizer pass. The report is first turned into `Suite`s of `TestCase`s, then written
//! with `quick-xml`, which does the escaping.

use std::fmt::Write as _;

use quick_xml::events::{BytesDecl, BytesText, Event};
use quick_xml::Writer;

use super::{plural, FindingEntry, KernelSection, Observed, RunReport, Step};

impl RunReport {
    /// JUnit XML: one test per environment check, seed replay, sweep cell, fuzz campaign and
    /// sanitizer pass; failures carry the finding text.
    pub fn to_junit(&self) -> String {
        let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
        self.write_junit(&mut w).expect("writing to memory cannot fail");
        let mut s = String::from_utf8(w.into_inner()).expect("the writer emits UTF-8");
        s.push('\n');
        s
    }

    /// The environment suite, then one suite per kernel.
    fn junit_suites(&self) -> Vec<Suite> {
        let mut suites = Vec::new();
        let env = Suite {
            name: "environment".into(),
            cases: self
                .environment
                .iter()
                .map(|e| TestCase {
                    class: "cudafuzz.environment".into(),
                    name: match e.shard {
                        Some(sh) => format!("{} [{sh}]", e.name),
                        None => e.name.clone(),
                    },
                    time: 0.0,
                    result: if e.ok {
                        TestResult::Pass
                    } else {
                        TestResult::Fail { message: e.detail.clone(), kind: "environment".into(), text: e.detail.clone() }
                    },
                    out: if e.ok { e.detail.clone() } else { String::new() },
                })
                .collect(),
        };
        suites.push(env);
        for k in &self.kernels {
            let mut cases = Vec::new();
            replay_cases(k, &mut cases);
            sweep_cases(k, &mut cases);
            run_cases(k, &mut cases);
            suites.push(Suite { name: format!("kernel {}", k.kernel), cases });
        }
        suites
    }

    fn write_junit(&self, w: &mut Writer<Vec<u8>>) -> std::io::Result<()> {
        let suites = self.junit_suites();
        let total = |f: &dyn Fn(&TestCase) -> bool| suites.iter().flat_map(|s| &s.cases).filter(|c| f(c)).count().to_string();
        w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
        w.create_element("testsuites")
            .with_attribute(("name", "cudafuzz"))
            .with_attribute(("tests", total(&|_| true).as_str()))
            .with_attribute(("failures", total(&|c| matches!(c.result, TestResult::Fail { .. })).as_str()))
            .with_attribute(("skipped", total(&|c| matches!(c.result, TestResult::Skipped { .. })).as_str()))
            .with_attribute(("time", seconds(self.duration_secs).as_str()))
            .write_inner_content(|w| {
                for suite in &suites {
                    self.write_junit_suite(w, suite)?;
                }
                Ok(())
            })?;
        Ok(())
    }

    /// One `<testsuite>`: its counts, the run's properties (environment suite only), its tests.
    fn write_junit_suite(&self, w: &mut Writer<Vec<u8>>, suite: &Suite) -> std::io::Result<()> {
        let count = |f: &dyn Fn(&TestCase) -> bool| suite.cases.iter().filter(|c| f(c)).count().to_string();
        w.create_element("testsuite")
            .with_attribute(("name", xml_text(&suite.name).as_str()))
            .with_attribute(("tests", count(&|_| true).as_str()))
            .with_attribute(("failures", count(&|c| matches!(c.result, TestResult::Fail { .. })).as_str()))
            .with_attribute(("errors", "0"))
            .with_attribute(("skipped", count(&|c| matches!(c.result, TestResult::Skipped { .. })).as_str()))
            .with_attribute(("timestamp", xml_text(&self.started).as_str()))
            .write_inner_content(|w| {
                if suite.name == "environment" {
                    self.write_junit_properties(w)?;
                }
                for case in &suite.cases {
                    write_testcase(w, case)?;
                }
                Ok(())
            })?;
        Ok(())
    }

    /// `<properties>`: the tool, the verdict, the GPU and the shard.
    fn write_junit_properties(&self, w: &mut Writer<Vec<u8>>) -> std::io::Result<()> {
        w.create_element("properties").write_inner_content(|w| {
            let mut props = vec![("tool", format!("{} {}", self.tool.name, self.tool.version)), ("verdict", self.headline())];
            if let Some(g) = &self.gpu {
                props.push(("gpu", format!("{} ({}), driver {}", g.name, g.arch, g.driver)));
            }
            if let Some(sh) = self.shard {
                props.push(("shard", sh.to_string()));
            }
            for (name, value) in props {
                w.create_element("property").with_attribute(("name", name)).with_attribute(("value", xml_text(&value).as_str())).write_empty()?;
            }
            Ok(())
        })?;
        Ok(())
    }
}

/// One test per replayed seed of `k`: skipped when it did not run, failed on a regression.
fn replay_cases(k: &KernelSection, cases: &mut Vec<TestCase>) {
    for r in &k.replays {
        let result = match (&r.observed, r.ok) {
            (Observed::NotRun { reason }, _) => TestResult::Skipped { message: reason.clone() },
            (_, true) => TestResult::Pass,
            (observed, false) => {
                let mut text = format!("expected: {}\nobserved: {}\n", r.expected, observed);
                for f in k.findings.iter().filter(|f| f.step == Step::Replay && f.seed.as_deref() == Some(r.seed.as_str())) {
                    let _ = writeln!(text, "{}", f.finding);
                }
                TestResult::Fail { message: format!("expected {}, observed {}", r.expected, observed), kind: "regression".into(), text }
            }
        };
        cases.push(TestCase { class: format!("cudafuzz.replay.{}", k.kernel), name: r.seed.clone(), time: 0.0, result, out: r.case.clone() });
    }
}

/// One test per sweep cell of `k` that this report holds.
fn sweep_cases(k: &KernelSection, cases: &mut Vec<TestCase>) {
    for row in &k.sweep {
        for class in &row.classes {
            let Some(cell) = row.cells.get(class) else { continue };
            let sigs: Vec<String> = cell.signatures.iter().map(|(s, n)| format!("{n} × {s}")).collect();
            let summary = format!("{} passed, {} failed, {} errors, {} skipped", cell.pass, cell.fail, cell.error, cell.skipped);
            let result =
                if row.cell_ok(class) { TestResult::Pass } else { TestResult::Fail { message: summary.clone(), kind: "sweep".into(), text: sigs.join("\n") } };
            let out = if sigs.is_empty() { summary } else { format!("{summary}\n{}", sigs.join("\n")) };
            cases.push(TestCase { class: format!("cudafuzz.sweep.{}", k.kernel), name: format!("{} × {class}", row.config), time: 0.0, result, out });
        }
    }
}

/// One test for the fuzz campaign of `k` and one per sanitizer pass: failed by new findings.
fn run_cases(k: &KernelSection, cases: &mut Vec<TestCase>) {
    let findings_text = |step: Step| -> Vec<&FindingEntry> { k.findings.iter().filter(|f| f.step == step && f.new).collect() };
    let runs = k.campaign.iter().map(|c| ("fuzz".to_string(), Step::Fuzz, c)).chain(k.sanitizer.iter().map(|r| (r.tools.clone(), Step::Sanitizer, &r.counts)));
    for (what, step, c) in runs {
        let new = findings_text(step);
        let summary = format!("{} cases: {} passed, {} failed, {} errors, {} skipped", c.cases, c.passed, c.failed, c.errors, c.skipped);
        let result = if new.is_empty() {
            TestResult::Pass
        } else {
            let mut text = String::new();
            for f in &new {
                let bug = f.bug.as_ref().map(|b| format!("\n  bug: {b}")).unwrap_or_default();
                let _ = writeln!(text, "{}{bug}\n  signature: {}\n  case: {}", f.finding, f.signature, f.case);
                if let Some(seed) = &f.seed {
                    let _ = writeln!(text, "  replay: cudafuzz repro {seed}");
                }
            }
            let mut bugs: Vec<&str> = new.iter().filter_map(|f| f.bug.as_ref().map(|b| b.as_str())).collect();
            bugs.sort_unstable();
            bugs.dedup();
            let message = format!("{} new finding{} ({} bug{})", new.len(), plural(new.len() as u64), bugs.len(), plural(bugs.len() as u64));
            TestResult::Fail { message, kind: "finding".into(), text }
        };
        cases.push(TestCase { class: format!("cudafuzz.{}", step.name()), name: format!("{} ({what})", k.kernel), time: c.elapsed_secs, result, out: summary });
    }
}

/// One `<testcase>` with its `<failure>` or `<skipped>` and its `<system-out>`.
fn write_testcase(w: &mut Writer<Vec<u8>>, case: &TestCase) -> std::io::Result<()> {
    let el = w
        .create_element("testcase")
        .with_attribute(("classname", xml_text(&case.class).as_str()))
        .with_attribute(("name", xml_text(&case.name).as_str()))
        .with_attribute(("time", seconds(case.time).as_str()));
    el.write_inner_content(|w| {
        match &case.result {
            TestResult::Pass => {}
            TestResult::Fail { message, kind, text } => {
                w.create_element("failure")
                    .with_attribute(("message", xml_text(message).as_str()))
                    .with_attribute(("type", xml_text(kind).as_str()))
                    .write_text_content(BytesText::new(&xml_text(text)))?;
            }
            TestResult::Skipped { message } => {
                w.create_element("skipped").with_attribute(("message", xml_text(message).as_str())).write_empty()?;
            }
        }
        if !case.out.is_empty() {
            w.create_element("system-out").write_text_content(BytesText::new(&xml_text(&case.out)))?;
        }
        Ok(())
    })?;
    Ok(())
}

/// A `<testsuite>`: the environment checks, or one kernel.
struct Suite {
    name: String,
    cases: Vec<TestCase>,
}

/// A `<testcase>`.
struct TestCase {
    class: String,
    name: String,
    time: f64,
    result: TestResult,
    out: String,
}

/// How a `<testcase>` ended.
enum TestResult {
    Pass,
    Fail { message: String, kind: String, text: String },
    Skipped { message: String },
}

/// Text XML 1.0 can carry: control characters other than tab and newline, and the
/// non-characters U+FFFE and U+FFFF, are not allowed even escaped (the writer escapes the rest).
fn xml_text(s: &str) -> String {
    s.chars().map(|c| if (c.is_control() && c != '\n' && c != '\t') || c == '\u{fffe}' || c == '\u{ffff}' { '\u{fffd}' } else { c }).collect()
}

/// A duration for a `time` attribute: JUnit readers parse a non-negative decimal, so NaN, an
/// infinity or a negative value (a clock that went wrong) is written as 0.
fn seconds(x: f64) -> String {
    format!("{:.3}", if x.is_finite() && x >= 0.0 { x } else { 0.0 })
}

#[cfg(test)]
mod tests {
    use crate::core::exit;
    use crate::tools::report::export::tests::sample;
    use crate::tools::report::export::{Expectation, Observed, RunReport, SeedReplay, CHECK_GPU};

    #[test]
    fn junit_parses_back_with_one_test_per_check_replay_cell_and_campaign() {
        let r = sample();
        let xml = r.to_junit();
        let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "testsuites");
        let cases: Vec<roxmltree::Node> = root.descendants().filter(|n| n.has_tag_name("testcase")).collect();
        // 2 checks + 2 replays + 2 cells + 1 campaign + 1 sanitizer pass.
        assert_eq!(cases.len(), 8, "{xml}");
        assert_eq!(root.attribute("tests"), Some("8"));
        let failed: Vec<String> = cases
            .iter()
            .filter(|c| c.children().any(|n| n.has_tag_name("failure")))
            .map(|c| format!("{}::{}", c.attribute("classname").unwrap(), c.attribute("name").unwrap()))
            .collect();
        assert_eq!(
            failed,
            vec![
                "cudafuzz.environment::compute-sanitizer",
                "cudafuzz.replay.oob_read_k::seeds/fixed/b.json",
                "cudafuzz.sweep.oob_read_k::oob_read_k[BLOCK_THREADS=128] × q+8",
                "cudafuzz.fuzz::oob_read_k (fuzz)",
            ]
        );
        assert_eq!(root.attribute("failures"), Some("4"));
        // The failure carries the finding text, escaped by the writer and read back intact.
        let fuzz = cases.iter().find(|c| c.attribute("classname") == Some("cudafuzz.fuzz")).unwrap();
        let failure = fuzz.children().find(|n| n.has_tag_name("failure")).unwrap();
        let text = failure.text().unwrap();
        assert!(text.contains("<past> k's end & \"more\"") && text.contains("cudafuzz repro out/seeds/"), "{text}");
        let env = cases.iter().find(|c| c.attribute("name") == Some("compute-sanitizer")).unwrap();
        let msg = env.children().find(|n| n.has_tag_name("failure")).unwrap().attribute("message").unwrap();
        assert!(msg.starts_with("not found <anywhere> &") && !msg.contains('\u{1b}'), "{msg}");
        let props: Vec<&str> = root.descendants().filter(|n| n.has_tag_name("property")).filter_map(|n| n.attribute("name")).collect();
        assert!(props.contains(&"gpu") && props.contains(&"shard"), "{props:?}");
    }

    #[test]
    fn junit_marks_replays_not_run_as_skipped() {
        let mut r = RunReport::new();
        r.check(CHECK_GPU, false, "no CUDA driver");
        r.kernel_mut("k").replays.push(SeedReplay {
            seed: "s.json".into(),
            case: "c".into(),
            expected: Expectation::Pass,
            observed: Observed::NotRun { reason: "no GPU".into() },
            ok: false,
        });
        r.recount();
        let xml = r.to_junit();
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let skipped = doc.descendants().filter(|n| n.has_tag_name("skipped")).count();
        assert_eq!(skipped, 1, "{xml}");
        assert_eq!(doc.root_element().attribute("skipped"), Some("1"));
        assert_eq!(r.exit_code(), exit::NO_GPU);
    }
}
