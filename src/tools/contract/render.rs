//! The probe plan, the probe table and the preconditions as text, for the CLI.

use std::fmt::Write as _;

use super::{Inference, Probe, ProbePlan};

fn list(values: impl IntoIterator<Item = impl ToString>) -> String {
    values.into_iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}

/// The probe plan in words: how many probes, which families and values.
pub fn render_plan(plan: &ProbePlan) -> String {
    let families = plan.families();
    let mut s = format!(
        "probe plan for {}: {} probes in {} families, {} base cases, {} cases in all\nbase case: {}\n",
        plan.kernel,
        plan.probes.len(),
        families.len(),
        plan.base_cases.len(),
        plan.total_cases(),
        plan.base.summary()
    );
    for family in families {
        let probes: Vec<&Probe> = plan.probes.iter().filter(|p| &p.family == family).collect();
        let inside = probes.iter().filter(|p| p.declared_inside).count();
        let values = list(probes.iter().map(|p| family.describe(&p.value)));
        let _ = writeln!(s, "  {:<36} {values}  ({inside} of {} inside the declared contract)", family.to_string(), probes.len());
    }
    s
}

/// One line per probe: family, value, declared side, result over the replicas, first signature.
pub fn render_table(inference: &Inference) -> String {
    let mut s = format!("{:<36} {:<14} {:<8} {:<10} first signature\n", "probe", "value", "declared", "result");
    for r in &inference.rows {
        let result = match r.verdict() {
            "pass" => "pass".to_string(),
            v => format!("{v} {}/{}", r.fail + r.error, r.pass + r.fail + r.error),
        };
        let first = r.signatures.keys().next().map(String::as_str).unwrap_or("");
        let declared = if r.declared_inside { "inside" } else { "outside" };
        let _ = writeln!(s, "{:<36} {:<14} {:<8} {:<10} {first}", r.family, r.value, declared, result);
    }
    s.push_str("result: pass, or FAIL/mixed with failed/run replicas; declared: the probe's side of the manifest's contract\n");
    s
}

/// The preconditions, one per line with evidence, example and seed; then the relaxations.
pub fn render_preconditions(inference: &Inference) -> String {
    if let Some(why) = &inference.base_failure {
        return format!(
            "{}: the base case fails inside the declared contract ({why}): {}\nno precondition can be inferred from a failing base; fuzz or minimise that case first\n",
            inference.kernel, inference.base
        );
    }
    let mut s = format!(
        "{}: {} preconditions from {} probes ({} cases), {} not declared by the manifest's contract\n",
        inference.kernel,
        inference.preconditions.len(),
        inference.probes,
        inference.cases,
        inference.undeclared()
    );
    for p in &inference.preconditions {
        let mark = if p.declared { "declared" } else { "NOT DECLARED: the contract allows these cases" };
        let _ = writeln!(s, "  - {}  [{mark}]\n      {}", p.sentence, p.evidence);
        if let Some(e) = &p.example {
            let _ = writeln!(s, "      minimal failing case: {}", e.case.summary());
        }
        if let Some(path) = &p.seed {
            let _ = writeln!(s, "      seed: {}", path.display());
        }
    }
    if !inference.relaxations.is_empty() {
        s.push_str("passing cases the declared contract excludes:\n");
        for r in &inference.relaxations {
            let _ = writeln!(s, "  - {r}");
        }
    }
    s
}
