//! The result of one case and the switches it ran under: what a worker reports
//! ([`Verdict`]: an [`Outcome`], the contract verdict, where the time went) and what it is
//! asked ([`RunOptions`]). Plain data, so supervisors, campaigns, reports and tests read them
//! without depending on the engine that produces them.

use serde::{Deserialize, Serialize};

use crate::core::case::Case;
use crate::core::coverage::Coverage;
use crate::core::finding::Finding;
use crate::core::layout::AllocationTable;
use crate::core::manifest::Manifest;
use crate::core::plan::ContractVerdict;
use crate::core::tool::Tool;

/// Which fp64 reference judges the output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReferenceChoice {
    /// The GPU reference kernel (`kernels/reference/attention_f64`), falling back to the CPU
    /// for cases outside its contract (the verdict says which one ran).
    #[default]
    Gpu,
    /// The CPU reference.
    Cpu,
}

/// Which reference judged a case's output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReferenceUsed {
    /// The GPU reference kernel.
    Gpu,
    /// The CPU reference.
    Cpu,
    /// None: the kernel failed (or the case could not run) before one was needed.
    #[default]
    None,
}

impl std::fmt::Display for ReferenceUsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReferenceUsed::Gpu => "gpu",
            ReferenceUsed::Cpu => "cpu",
            ReferenceUsed::None => "none",
        })
    }
}

/// Per-run switches.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunOptions {
    /// Run the kernel a second time and compare bits.
    pub determinism: bool,
    /// Which reference to use.
    pub reference: ReferenceChoice,
    /// The compute-sanitizer tool the worker runs under, if any: the worker then marks the
    /// start of the case for that tool and reports its allocations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sanitizer: Option<Tool>,
    /// Compile the kernel with its `CF_COVER(id)` points on and report the ones the (first)
    /// launch reached.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub coverage: bool,
    /// Report [`Verdict::output_digest`] (a hash over every judged output: the metamorphic
    /// properties compare it; campaigns have no use for it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub digest: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { determinism: true, reference: ReferenceChoice::Gpu, sanitizer: None, coverage: false, digest: false }
    }
}

/// How a case ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// Every oracle passed.
    Pass,
    /// At least one oracle failed.
    Fail {
        /// What the oracles saw, cheapest first.
        findings: Vec<Finding>,
    },
    /// The harness could not run the case (manifest, compile or driver problem): not a kernel
    /// finding, and never counted as a pass.
    Error {
        /// What went wrong and how to fix it.
        message: String,
    },
    /// A Python target refused the case with an exception of its own (a host-side check of its
    /// arguments): not a finding of the kernel's and not the harness's problem, but a
    /// precondition the manifest's contract does not state.
    Rejected {
        /// The exception's type (`builtins.ValueError`, `builtins.RuntimeError`).
        exception: String,
        /// Its message.
        message: String,
    },
}

/// Wall time spent in each stage, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StageTimes {
    /// Planning, input generation and image building.
    pub prepare_us: u64,
    /// Compiling or fetching from cache, and loading.
    pub compile_us: u64,
    /// Upload of all allocations.
    pub upload_us: u64,
    /// Reference (GPU kernel + download, or CPU).
    pub reference_us: u64,
    /// Kernel launch to synchronisation (both runs when checking determinism).
    pub kernel_us: u64,
    /// Download and oracles.
    pub judge_us: u64,
    /// The whole case inside the worker, its allocations' release included.
    #[serde(default)]
    pub case_us: u64,
    /// Waiting for a worker to be ready before the case was sent (a fresh or spare worker's
    /// start), as the supervisor saw it.
    #[serde(default)]
    pub start_us: u64,
    /// The whole case as the supervisor saw it: worker start, request, stages, reply.
    #[serde(default)]
    pub supervised_us: u64,
}

/// The result of one case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// How it ended.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Contract verdict of the case.
    pub contract: ContractVerdict,
    /// Which reference judged it (`none` when the kernel failed first).
    pub reference: ReferenceUsed,
    /// The CUDA context is unusable: the worker must exit after reporting.
    pub sticky: bool,
    /// Where the time went.
    pub times: StageTimes,
    /// The case's device allocations, reported under a sanitizer so its addresses can be
    /// mapped to tensors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocations: Option<AllocationTable>,
    /// The kernel paths the launch reached, for coverage runs whose kernel has `CF_COVER(id)`
    /// points and did not fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<Coverage>,
    /// SHA-256 (first 16 hex digits) of the (not order-dependent) outputs' element bits in logical `[b, h, s, d]`
    /// order, when the kernel ran to completion: equal digests mean bitwise-equal outputs
    /// whatever the layouts (what the metamorphic properties compare).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_digest: Option<String>,
    /// What the run recorded that is not a finding: a sanitizer record of a Python target's
    /// framework (its own kernel, outside the roster's memory), one sentence each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The kernel label used in findings: `name` or `name[P=V,...]`.
pub fn kernel_label(manifest: &Manifest, case: &Case) -> String {
    if case.params.is_empty() {
        manifest.name.clone()
    } else {
        let p: Vec<String> = case.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}[{}]", manifest.name, p.join(","))
    }
}
