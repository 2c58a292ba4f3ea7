//! The Markdown rendering of a [`RunReport`]: [`RunReport::to_markdown`].
//!
//! It exists for `$GITHUB_STEP_SUMMARY` and pull-request comments: the verdict first, then one
//! table per part of the report (environment, findings, seed replays, sweep matrices, campaigns).
//! Each table has its own method so that the sections read, and change, one at a time.

use std::fmt::Write as _;

use super::{Campaign, FindingEntry, KernelSection, RunReport, SeedReplay};

impl RunReport {
    /// Markdown that fits `$GITHUB_STEP_SUMMARY`: the verdict first, then tables.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        self.md_headline(&mut s);
        self.md_environment(&mut s);
        self.md_bugs(&mut s);
        self.md_findings(&mut s);
        self.md_replays(&mut s);
        self.md_sweeps(&mut s);
        self.md_campaigns(&mut s);
        s
    }

    /// The verdict, the facts of the run (tool, GPU, shard, time) and the totals.
    fn md_headline(&self, s: &mut String) {
        let mark = if self.passed() { "✅" } else { "❌" };
        let _ = writeln!(s, "## {mark} cudafuzz: {}\n", md(&self.headline()));
        let mut facts = vec![format!("{} {}", self.tool.name, self.tool.version)];
        if let Some(g) = &self.gpu {
            facts.push(format!("GPU {} ({}), driver {}", g.name, g.arch, g.driver));
        }
        match (&self.shard, self.merged_from.is_empty()) {
            (Some(sh), _) => facts.push(format!("shard {sh}")),
            (None, false) => facts.push(format!("merged from {}", self.merged_from.join(", "))),
            _ => {}
        }
        facts.push(format!("{:.0} s", self.duration_secs));
        if let Some(b) = self.budget_secs {
            facts.push(format!("budget {b:.0} s"));
        }
        facts.push(format!("started {}", self.started));
        let _ = writeln!(s, "{}\n", md(&facts.join(" · ")));
        let c = &self.counts;
        let _ = writeln!(
            s,
            "{} cases: {} passed, {} failed, {} errors, {} skipped · {} bugs ({} new) · {} findings ({} new) · {} seed replays ({} regressions, {} not run) · {} sweep cells ({} failing)\n",
            c.cases, c.passed, c.failed, c.errors, c.skipped, c.bugs, c.new_bugs, c.findings, c.new_findings, c.replays, c.regressions, c.not_run, c.cells, c.cells_failed
        );
    }

    /// The environment checks table (always present).
    fn md_environment(&self, s: &mut String) {
        s.push_str("### Environment\n\n| check | result | detail |\n| --- | --- | --- |\n");
        for e in &self.environment {
            let name = match e.shard {
                Some(sh) => format!("{} [{sh}]", e.name),
                None => e.name.clone(),
            };
            let _ = writeln!(s, "| {} | {} | {} |", md(&name), ok_word(e.ok), md(&e.detail));
        }
    }

    /// The bugs table (one row per bug: id, kernel, what, site, findings, a seed), new bugs
    /// first; nothing when there are none.
    fn md_bugs(&self, s: &mut String) {
        let mut bugs = self.bugs();
        if bugs.is_empty() {
            return;
        }
        let is_new = |fs: &[(&KernelSection, &FindingEntry)]| fs.iter().all(|(_, f)| f.new);
        bugs.sort_by_key(|(_, fs)| !is_new(fs));
        s.push_str("\n### Bugs\n\n| | bug | kernel | what | site | findings | seed |\n| --- | --- | --- | --- | --- | --- | --- |\n");
        for (id, fs) in &bugs {
            // The bug's own finding: the sanitizer record that names its site, when there is one.
            let (k, own) = fs.iter().find(|(_, f)| f.finding.oracle.is_sanitizer()).unwrap_or(&fs[0]);
            let what = match &own.finding.tensor {
                Some(t) => format!("{} in {t}", own.finding.sanitizer_kind.as_ref().map(|x| x.to_string()).unwrap_or_else(|| own.finding.kind.to_string())),
                None => own.finding.kind.to_string(),
            };
            let site = own.finding.source.as_ref().map(|src| format!("{}:{}", src.file, src.line)).unwrap_or_else(|| "-".into());
            let seed = fs.iter().find_map(|(_, f)| f.seed.as_deref()).map(|p| format!("`{}`", md(p))).unwrap_or_default();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                if is_new(fs) { "**new**" } else { "known" },
                id,
                md(&k.kernel),
                md(&what),
                md(&site),
                fs.len(),
                seed
            );
        }
    }

    /// The findings table, new findings first; nothing when there are none.
    fn md_findings(&self, s: &mut String) {
        let mut findings: Vec<(&KernelSection, &FindingEntry)> = self.findings().collect();
        if !findings.is_empty() {
            findings.sort_by_key(|(_, f)| !f.new);
            s.push_str("\n### Findings\n\n| | bug | kernel | finding | source | step | seed |\n| --- | --- | --- | --- | --- | --- | --- |\n");
            for (k, f) in findings {
                let source = f.finding.source.as_ref().map(|src| src.to_string()).unwrap_or_default();
                let seed = f.seed.as_deref().map(|p| format!("`{}`", md(p))).unwrap_or_default();
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    if f.new { "**new**" } else { "expected" },
                    f.bug.as_ref().map(|b| b.to_string()).unwrap_or_default(),
                    md(&k.kernel),
                    md(&f.finding.to_string()),
                    md(&source),
                    f.step.name(),
                    seed
                );
            }
        }
    }

    /// The seed replays table; nothing when no seed was replayed.
    fn md_replays(&self, s: &mut String) {
        let replays: Vec<&SeedReplay> = self.kernels.iter().flat_map(|k| &k.replays).collect();
        if !replays.is_empty() {
            s.push_str("\n### Seed replays\n\n| seed | expected | observed | result |\n| --- | --- | --- | --- |\n");
            for r in replays {
                let _ = writeln!(s, "| `{}` | {} | {} | {} |", md(&r.seed), md(&r.expected.to_string()), md(&r.observed.to_string()), ok_word(r.ok));
            }
        }
    }

    /// One sweep matrix per kernel that has sweep rows.
    fn md_sweeps(&self, s: &mut String) {
        for k in self.kernels.iter().filter(|k| !k.sweep.is_empty()) {
            let _ = writeln!(s, "\n### Sweep matrix: {}\n", md(&k.kernel));
            let classes = k.sweep[0].classes.clone();
            let _ = writeln!(s, "| configuration | {} | alignment-dependent |", classes.iter().map(|c| md(c)).collect::<Vec<_>>().join(" | "));
            let _ = writeln!(s, "| --- |{} --- |", " ---: |".repeat(classes.len()));
            for row in &k.sweep {
                let cells: Vec<String> = classes
                    .iter()
                    .map(|class| match row.cells.get(class) {
                        None => "·".into(),
                        Some(cell) => {
                            let mark = if !row.cell_ok(class) {
                                " ❌"
                            } else if cell.to_cell().consistent() {
                                ""
                            } else {
                                " !"
                            };
                            format!("{}/{}{mark}", cell.pass, cell.fail + cell.error)
                        }
                    })
                    .collect();
                let label = if row.expect_pass { md(&row.config) } else { format!("{} (recorded)", md(&row.config)) };
                let _ = writeln!(s, "| {label} | {} | {} |", cells.join(" | "), if row.alignment_dependent() { "yes" } else { "no" });
            }
            s.push_str("\ncells: passed/failed repetitions; ! = not consistent across repetitions; · = another shard's cell\n");
        }
    }

    /// The fuzz campaigns and sanitizer passes table; nothing when there were none.
    fn md_campaigns(&self, s: &mut String) {
        let campaigns: Vec<(&KernelSection, String, &Campaign)> = self
            .kernels
            .iter()
            .flat_map(|k| k.campaign.iter().map(move |c| (k, "fuzz".to_string(), c)).chain(k.sanitizer.iter().map(move |r| (k, r.tools.clone(), &r.counts))))
            .collect();
        if !campaigns.is_empty() {
            s.push_str("\n### Campaigns\n\n| kernel | run | budget s | elapsed s | cases | passed | failed | errors | skipped | steered |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
            for (k, what, c) in campaigns {
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.0} | {:.1} | {} | {} | {} | {} | {} | {} |",
                    md(&k.kernel),
                    md(&what),
                    c.budget_secs,
                    c.elapsed_secs,
                    c.cases,
                    c.passed,
                    c.failed,
                    c.errors,
                    c.skipped,
                    c.steered
                );
            }
        }
    }
}

fn ok_word(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "**FAILED**"
    }
}

/// Text made safe for a Markdown table cell: `|` would end the cell and a newline the row.
fn md(s: &str) -> String {
    s.replace('|', "\\|").chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use crate::tools::report::export::tests::sample;
    use crate::tools::report::export::RunReport;

    #[test]
    fn markdown_leads_with_the_verdict_and_has_the_tables() {
        let r = sample();
        let md = r.to_markdown();
        let first = md.lines().next().unwrap();
        assert!(first.starts_with("## ❌ cudafuzz: FAILED: 1 new bug (1 finding);"), "{first}");
        for want in [
            "shard 2/4",
            "GPU NVIDIA H100 80GB HBM3 (sm_90), driver 13.0",
            "| compute-sanitizer | **FAILED** | not found <anywhere> &",
            "oob_read_k | sanitizer_memory (oracle memcheck)",
            "### Bugs",
            "| oob_read_k | invalid_global_read_out_of_bounds in k | simple_attn.cu:42 | 1 |",
            "simple_attn.cu:42",
            "\\| pipes",
            "| `seeds/fixed/b.json` | pass | fail with sig-b | **FAILED** |",
            "### Sweep matrix: oob_read_k",
            "| configuration | aligned | q+8 | alignment-dependent |",
            "| oob_read_k[BLOCK_THREADS=128] | 3/0 | 1/2 ❌ | yes |",
            "| oob_read_k | fuzz | 600 | 600.5 | 1000 | 990 | 10 | 0 | 50 |",
            "| oob_read_k | memcheck |",
        ] {
            assert!(md.contains(want), "missing {want:?} in:\n{md}");
        }
        // New findings come before expected ones.
        assert!(md.find("**new**").unwrap() < md.find("| expected |").unwrap(), "{md}");
        // Every table row has the same number of cells as its header.
        for table in md.split("\n\n").filter(|b| b.starts_with('|')) {
            let widths: Vec<usize> = table.lines().map(|l| l.matches('|').count() - l.matches("\\|").count()).collect();
            assert!(widths.iter().all(|&w| w == widths[0]), "ragged table:\n{table}");
        }
        let mut ok = RunReport::new();
        ok.check("gpu", true, "x");
        ok.recount();
        assert!(ok.to_markdown().starts_with("## ✅ cudafuzz: PASSED"), "{}", ok.to_markdown());
    }
}
