//! Findings: what an oracle saw, in a form that can be saved, compared and deduplicated.
//!
//! A [`Finding`] is born in an oracle (`oracle/`), in the launch classifier (`launch/`) or in the
//! supervisor (hangs, crashed workers). Its [`Signature`] is the dedupe key: two findings with the
//! same signature are the same bug, so a campaign keeps one seed per signature.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FindingKind {
    /// CUDA error 716: a load or store at an address not aligned to its size.
    MisalignedAddress,
    /// CUDA error 700: an access outside any allocation.
    IllegalAddress,
    /// CUDA error 719 or another sticky error raised while the kernel ran.
    LaunchFailure,
    /// The launch was refused before running (too many resources, too much shared memory, ...).
    LaunchRejected,
    /// Any other CUDA error returned by the launch or the synchronisation.
    CudaError,
    /// The kernel did not finish within the watchdog's time.
    Hang,
    /// The worker process died (signal or exit) outside a CUDA error.
    WorkerCrash,
    /// Output elements still hold the pre-filled sentinel.
    UnwrittenOutput,
    /// Bytes in a redzone or a stride gap changed: an out-of-bounds or gap write.
    CanaryDamage,
    /// The kernel changed its inputs.
    InputClobbered,
    /// NaN or infinity in outputs whose inputs and reference are finite: likely an out-of-bounds
    /// read of poisoned memory.
    NanLeak,
    /// Output further from the fp64 reference than the same-precision reference is, with margin.
    NumericalError,
    /// Two runs of the same case gave different bits.
    Nondeterminism,
    /// compute-sanitizer's memcheck saw an invalid access (out of bounds, misaligned, ...).
    SanitizerMemory,
    /// compute-sanitizer's racecheck saw a data race (a hazard between two accesses).
    Race,
    /// compute-sanitizer's initcheck saw a read of memory that was never written.
    UninitializedRead,
    /// compute-sanitizer's synccheck saw an invalid barrier or warp synchronisation.
    BarrierError,
    /// compute-sanitizer recorded a CUDA API call that returned an error.
    SanitizerApi,
}

impl FindingKind {
    /// Whether the kernel stopped with an error (as opposed to finishing with bad memory or
    /// values): the kinds whose cause may be an address's alignment.
    pub fn is_fault(self) -> bool {
        matches!(
            self,
            FindingKind::MisalignedAddress | FindingKind::IllegalAddress | FindingKind::LaunchFailure | FindingKind::CudaError | FindingKind::WorkerCrash
        )
    }

    /// Whether the kernel finished and only its values are wrong (numbers off the reference, two
    /// runs apart, a NaN from finite inputs): what a race shows, where no memory was damaged.
    pub fn is_wrong_value(self) -> bool {
        matches!(self, FindingKind::NumericalError | FindingKind::Nondeterminism | FindingKind::NanLeak)
    }

    /// The snake_case name used in JSON and signatures.
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::MisalignedAddress => "misaligned_address",
            FindingKind::IllegalAddress => "illegal_address",
            FindingKind::LaunchFailure => "launch_failure",
            FindingKind::LaunchRejected => "launch_rejected",
            FindingKind::CudaError => "cuda_error",
            FindingKind::Hang => "hang",
            FindingKind::WorkerCrash => "worker_crash",
            FindingKind::UnwrittenOutput => "unwritten_output",
            FindingKind::CanaryDamage => "canary_damage",
            FindingKind::InputClobbered => "input_clobbered",
            FindingKind::NanLeak => "nan_leak",
            FindingKind::NumericalError => "numerical_error",
            FindingKind::Nondeterminism => "nondeterminism",
            FindingKind::SanitizerMemory => "sanitizer_memory",
            FindingKind::Race => "race",
            FindingKind::UninitializedRead => "uninitialized_read",
            FindingKind::BarrierError => "barrier_error",
            FindingKind::SanitizerApi => "sanitizer_api",
        }
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which check produced a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Oracle {
    /// The CUDA status of the launch and the synchronisation.
    CudaStatus,
    /// The supervisor's timer.
    Watchdog,
    /// The supervisor noticing a dead worker.
    Worker,
    /// Output sentinel left in place.
    Sentinel,
    /// Redzone and gap canaries.
    Canary,
    /// Inputs compared before and after the launch.
    InputIntegrity,
    /// Non-finite outputs the inputs cannot explain.
    NanLeak,
    /// Comparison with the fp64 reference.
    Reference,
    /// Bitwise comparison of two runs.
    Determinism,
    /// compute-sanitizer's memcheck tool.
    Memcheck,
    /// compute-sanitizer's racecheck tool.
    Racecheck,
    /// compute-sanitizer's initcheck tool.
    Initcheck,
    /// compute-sanitizer's synccheck tool.
    Synccheck,
}

impl Oracle {
    /// The snake_case name used in JSON and signatures.
    pub fn name(self) -> &'static str {
        match self {
            Oracle::CudaStatus => "cuda_status",
            Oracle::Watchdog => "watchdog",
            Oracle::Worker => "worker",
            Oracle::Sentinel => "sentinel",
            Oracle::Canary => "canary",
            Oracle::InputIntegrity => "input_integrity",
            Oracle::NanLeak => "nan_leak",
            Oracle::Reference => "reference",
            Oracle::Determinism => "determinism",
            Oracle::Memcheck => "memcheck",
            Oracle::Racecheck => "racecheck",
            Oracle::Initcheck => "initcheck",
            Oracle::Synccheck => "synccheck",
        }
    }

    /// Whether this is one of compute-sanitizer's tools.
    pub fn is_sanitizer(self) -> bool {
        matches!(self, Oracle::Memcheck | Oracle::Racecheck | Oracle::Initcheck | Oracle::Synccheck)
    }
}

impl fmt::Display for Oracle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where in a tensor's allocation the first offending byte or element is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "region", rename_all = "snake_case")]
pub enum Location {
    /// A logical element.
    Element {
        /// Its index, one entry per dimension of the tensor's shape.
        index: Vec<u64>,
    },
    /// The redzone before the tensor's first byte.
    RedzoneBefore {
        /// How many bytes before the first byte.
        bytes_before: u64,
    },
    /// The redzone after the tensor's last byte.
    RedzoneAfter {
        /// How many bytes past the last byte (1 = the byte right after it).
        bytes_past_end: u64,
    },
    /// A stride gap inside the tensor's span.
    Gap {
        /// Byte offset from the tensor's base.
        byte: u64,
    },
}

impl Location {
    /// The region name used in signatures: `element`, `redzone_before`, `redzone_after`, `gap`.
    pub fn region(&self) -> &'static str {
        match self {
            Location::Element { .. } => "element",
            Location::RedzoneBefore { .. } => "redzone_before",
            Location::RedzoneAfter { .. } => "redzone_after",
            Location::Gap { .. } => "gap",
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Element { index } => write!(f, "element {index:?}"),
            Location::RedzoneBefore { bytes_before } => write!(f, "{bytes_before} bytes before the first byte"),
            Location::RedzoneAfter { bytes_past_end } => write!(f, "{bytes_past_end} bytes past the last byte"),
            Location::Gap { byte } => write!(f, "stride gap at byte {byte}"),
        }
    }
}

/// A place in the kernel's source code, as a sanitizer record names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceLocation {
    /// The file name without directories (`flash_fwd.cu`), so signatures do not depend on where
    /// the kernel was built.
    pub file: String,
    /// 1-based line number.
    pub line: u32,
    /// The function the line belongs to, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if let Some(func) = &self.function {
            write!(f, " in {func}")?;
        }
        Ok(())
    }
}

/// The class of a compute-sanitizer record, the first word of its [`SanitizerKind`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SanitizerClass {
    /// memcheck: an invalid access (`invalid_global_read_out_of_bounds`).
    Invalid,
    /// initcheck: a read of memory never written (`uninitialized_global_read`).
    Uninitialized,
    /// racecheck: a hazard between two accesses (`race_shared_write_read`).
    Race,
    /// synccheck: an invalid barrier (`barrier_invalid_arguments`).
    Barrier,
    /// A CUDA API call that failed (`api_cudaFree_cudaErrorInvalidValue`).
    Api,
    /// A record kind this build does not know, by its own first word (`leak`).
    Other(String),
}

impl SanitizerClass {
    fn word(&self) -> &str {
        match self {
            SanitizerClass::Invalid => "invalid",
            SanitizerClass::Uninitialized => "uninitialized",
            SanitizerClass::Race => "race",
            SanitizerClass::Barrier => "barrier",
            SanitizerClass::Api => "api",
            SanitizerClass::Other(w) => w,
        }
    }
}

/// A sanitizer record's stable kind: its class, then what the record says about the access
/// (memory space, direction, error), e.g. `invalid_global_read_misaligned`. Finer than
/// [`FindingKind`] and part of the signature; saved as that text, and equal to another kind
/// exactly when their texts are equal.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(into = "String", from = "String")]
pub struct SanitizerKind {
    /// The record's class.
    pub class: SanitizerClass,
    /// The words after the class, `_`-joined (`global_read_misaligned`); may be empty.
    pub detail: String,
}

impl SanitizerKind {
    /// A kind from its class and detail words (empty words are left out).
    pub fn new(class: SanitizerClass, words: &[Option<String>]) -> SanitizerKind {
        let detail: Vec<&str> = words.iter().flatten().map(String::as_str).filter(|w| !w.is_empty()).collect();
        SanitizerKind { class, detail: detail.join("_") }
    }

    /// Whether memcheck reported an access at an address not aligned to its size.
    pub fn is_misaligned(&self) -> bool {
        self.class == SanitizerClass::Invalid && (self.detail == "misaligned" || self.detail.ends_with("_misaligned"))
    }
}

impl fmt::Display for SanitizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.class.word())?;
        if !self.detail.is_empty() {
            write!(f, "_{}", self.detail)?;
        }
        Ok(())
    }
}

impl PartialEq for SanitizerKind {
    fn eq(&self, other: &SanitizerKind) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for SanitizerKind {}

impl std::hash::Hash for SanitizerKind {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.to_string().hash(h)
    }
}

impl From<SanitizerKind> for String {
    fn from(k: SanitizerKind) -> String {
        k.to_string()
    }
}

impl From<String> for SanitizerKind {
    /// A kind read back from its text (a seed or a report).
    fn from(text: String) -> SanitizerKind {
        let (head, detail) = text.split_once('_').unwrap_or((text.as_str(), ""));
        let class = match head {
            "invalid" => SanitizerClass::Invalid,
            "uninitialized" => SanitizerClass::Uninitialized,
            "race" => SanitizerClass::Race,
            "barrier" => SanitizerClass::Barrier,
            "api" => SanitizerClass::Api,
            other => SanitizerClass::Other(other.to_string()),
        };
        SanitizerKind { class, detail: detail.to_string() }
    }
}

impl From<&str> for SanitizerKind {
    fn from(text: &str) -> SanitizerKind {
        SanitizerKind::from(text.to_string())
    }
}

/// One observed failure of one case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// What went wrong.
    pub kind: FindingKind,
    /// Which check saw it.
    pub oracle: Oracle,
    /// The kernel (name, with its parameters as `NAME=VALUE` in brackets when it has any).
    pub kernel: String,
    /// The tensor concerned, by name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// The first offending location, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    /// How many elements or bytes are affected (1 when not counted).
    pub count: u64,
    /// The CUDA error name and code, for CUDA-status findings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_error: Option<String>,
    /// The source line of the offending access, for sanitizer findings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLocation>,
    /// For a race, the source line of its second access (racecheck's `<destination>`; `source`
    /// is the first): a race is one bug per line of its read, whichever access came first (see
    /// [`crate::core::triage::BugKey::of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_access: Option<SourceLocation>,
    /// Bytes per access of the offending load or store, when the tool reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_size: Option<u64>,
    /// The sanitizer record's stable kind (`invalid_global_read_out_of_bounds`,
    /// `race_shared_write_read`): finer than [`FindingKind`], part of the signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sanitizer_kind: Option<SanitizerKind>,
    /// Alignment (16, 8, 4, 2 or 1 bytes) of every tensor whose layout the case chose, in the
    /// manifest's roster order: part of a fault's signature, since an alignment bug depends on
    /// it. Saved as a JSON object; a seed of format 1 saved four numbers (q, k, v, o).
    #[serde(with = "alignment_serde")]
    pub alignment: Vec<(String, u64)>,
    /// Whether the case was inside the kernel's declared contract.
    pub inside_contract: bool,
    /// A human sentence with the numbers.
    pub detail: String,
}

/// The dedupe key of a finding: two findings with equal signatures are one bug.
///
/// Saved in seeds and reports as its text (`kind/oracle/kernel/tensor/...`), so a seed written
/// by an older build still compares equal to the same finding now.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Signature(String);

impl Signature {
    /// The signature's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for Signature {
    /// A signature read back from its text (a seed, a report, a command line).
    fn from(text: String) -> Signature {
        Signature(text)
    }
}

impl From<&str> for Signature {
    /// A signature read back from its text.
    fn from(text: &str) -> Signature {
        Signature(text.to_string())
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Finding {
    /// A finding of `kind` by `oracle` in `kernel` that says nothing more: no tensor, place,
    /// source or alignment, counted once, inside the contract. The builders of findings fill in
    /// what they know with struct update syntax.
    pub fn new(kind: FindingKind, oracle: Oracle, kernel: &str, detail: String) -> Finding {
        Finding {
            kind,
            oracle,
            kernel: kernel.to_string(),
            tensor: None,
            location: None,
            count: 1,
            cuda_error: None,
            source: None,
            other_access: None,
            access_size: None,
            sanitizer_kind: None,
            alignment: Vec::new(),
            inside_contract: true,
            detail,
        }
    }

    /// The alignment of tensor `t` in this case (16 when its layout was not the case's).
    pub fn alignment_of(&self, t: &str) -> u64 {
        self.alignment.iter().find(|(n, _)| n == t).map(|(_, a)| *a).unwrap_or(crate::core::plan::VECTOR_ALIGN)
    }

    /// The dedupe key: kind, oracle, kernel with parameters, tensor, region and, for faults
    /// (where a vector-load bug hides), which tensors are not 16-byte aligned: q at +8 and q at
    /// +4 are the same bug, q at +8 and k at +8 may not be. Memory-content findings (canaries,
    /// sentinel, NaN, numerics) already say where they are, so alignment would only split them.
    ///
    /// Sanitizer findings are keyed by tool, kind, sanitizer kind, kernel, tensor, source line,
    /// access size and alignment, but not by region: how far past the end one overrun lands
    /// depends on the case's shape, the line that does it does not.
    pub fn signature(&self) -> Signature {
        let tensor = self.tensor.as_deref().unwrap_or("-");
        if self.oracle.is_sanitizer() {
            let kind = self.sanitizer_kind.as_ref().map(|k| k.to_string()).unwrap_or_else(|| "-".into());
            let source = self.source.as_ref().map(|s| format!("{}:{}", s.file, s.line)).unwrap_or_else(|| "-".into());
            let size = self.access_size.map(|n| format!("{n}B")).unwrap_or_else(|| "-".into());
            return Signature(format!("{}/{}/{}/{}/{}/{}/{}/{}", self.kind, self.oracle, self.kernel, tensor, kind, source, size, self.alignment_class()));
        }
        let region = self.location.as_ref().map(|l| l.region()).unwrap_or("-");
        let mut sig = format!("{}/{}/{}/{}/{}", self.kind, self.oracle, self.kernel, tensor, region);
        if self.kind.is_fault() {
            sig.push('/');
            sig.push_str(&self.alignment_class());
        }
        Signature(sig)
    }

    /// `aligned`, or `unaligned:` and the tensors whose alignment is below
    /// [`crate::core::plan::VECTOR_ALIGN`] (`unaligned:q,k`).
    fn alignment_class(&self) -> String {
        let below: Vec<&str> = self.alignment.iter().filter(|(_, a)| *a < crate::core::plan::VECTOR_ALIGN).map(|(t, _)| t.as_str()).collect();
        if below.is_empty() {
            "aligned".to_string()
        } else {
            format!("unaligned:{}", below.join(","))
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (oracle {})", self.kind, self.oracle)?;
        if let Some(e) = &self.cuda_error {
            write!(f, " {e}")?;
        }
        if let Some(t) = &self.tensor {
            write!(f, " in {t}")?;
        }
        if let Some(l) = &self.location {
            write!(f, " at {l}")?;
        }
        if self.count > 1 {
            write!(f, " ({} affected)", self.count)?;
        }
        if !self.inside_contract {
            write!(f, " [outside contract]")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// The alignment list as a JSON object in roster order; a format-1 array of four numbers is
/// read as q, k, v, o.
mod alignment_serde {
    use serde::de::{self, MapAccess, SeqAccess, Visitor};
    use serde::ser::SerializeMap;
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(v: &[(String, u64)], s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(v.len()))?;
        for (k, a) in v {
            m.serialize_entry(k, a)?;
        }
        m.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, u64)>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vec<(String, u64)>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of tensor alignments, or four numbers (q, k, v, o)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, u64>()? {
                    out.push((k, v));
                }
                Ok(out)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                for name in ["q", "k", "v", "o"] {
                    let v: u64 = a.next_element()?.ok_or_else(|| de::Error::invalid_length(out.len(), &"four numbers"))?;
                    out.push((name.to_string(), v));
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

/// Misaligned-address faults that a sanitizer re-run has already traced to a tensor.
///
/// A fault's signature includes which tensors are unaligned, so one misaligned vector load of q
/// shows up as a new finding for every set of unaligned tensors that contains q. Re-running each
/// under memcheck costs tens of seconds when every thread faults (tens of thousands of
/// records), and would only name q again. A later misaligned fault of the same kernel
/// configuration in which an already-named tensor is again unaligned is taken as explained;
/// its seed is saved as usual, and `cudafuzz run --sanitize ...` re-runs it on demand.
#[derive(Debug, Default)]
pub struct ExplainedFaults {
    explained: Vec<Explanation>,
}

/// A misaligned fault a sanitizer traced to one tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    /// The kernel with its parameters, as in [`Finding::kernel`].
    pub kernel: String,
    /// The tensor whose misaligned access the sanitizer reported.
    pub tensor: String,
    /// The sanitizer's finding, as printed.
    pub named: String,
    /// The campaign's index of the case that was re-run.
    pub case_index: u64,
}

impl fmt::Display for Explanation {
    /// Why a fault is not re-run: `q is unaligned here too, and case #3 was named: ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is unaligned here too, and case #{} was named: {}", self.tensor, self.case_index, self.named)
    }
}

impl ExplainedFaults {
    /// The earlier explanation that covers `fault`, if any: same kernel configuration, and the
    /// tensor named then is below the vector alignment in this case too.
    pub fn covering(&self, fault: &Finding) -> Option<&Explanation> {
        if fault.kind != FindingKind::MisalignedAddress {
            return None;
        }
        self.explained.iter().find(|e| e.kernel == fault.kernel && fault.alignment_of(&e.tensor) < crate::core::plan::VECTOR_ALIGN)
    }

    /// Records what a re-run of the case behind `fault` (campaign index `case_index`) named:
    /// each misaligned access on a tensor that was unaligned in that case.
    pub fn record(&mut self, fault: &Finding, named: &[Finding], case_index: u64) {
        if fault.kind != FindingKind::MisalignedAddress {
            return;
        }
        for n in named {
            if let Some(t) = misaligned_tensor_of(n, fault) {
                if !self.explained.iter().any(|e| e.kernel == fault.kernel && e.tensor == t) {
                    self.explained.push(Explanation { kernel: fault.kernel.clone(), tensor: t.to_string(), named: n.to_string(), case_index });
                }
            }
        }
    }
}

/// The tensor of a sanitizer finding `named` that traces `fault`: a misaligned access on a
/// tensor the fault's case left below the vector alignment.
pub fn misaligned_tensor_of<'a>(named: &'a Finding, fault: &Finding) -> Option<&'a str> {
    let misaligned = named.sanitizer_kind.as_ref().is_some_and(SanitizerKind::is_misaligned);
    named.tensor.as_deref().filter(|t| misaligned && fault.alignment_of(t) < crate::core::plan::VECTOR_ALIGN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(kind: FindingKind, oracle: Oracle, tensor: Option<&str>, sanitizer_kind: Option<&str>, alignment: [u64; 4]) -> Finding {
        Finding {
            kind,
            oracle,
            kernel: "vec_load_q[BLOCK_THREADS=64]".into(),
            tensor: tensor.map(String::from),
            location: None,
            count: 1,
            cuda_error: None,
            source: None,
            other_access: None,
            access_size: Some(16),
            sanitizer_kind: sanitizer_kind.map(SanitizerKind::from),
            alignment: ["q", "k", "v", "o"].iter().map(|t| t.to_string()).zip(alignment).collect(),
            inside_contract: true,
            detail: String::new(),
        }
    }

    #[test]
    fn alignment_reads_format_1_arrays_and_keeps_roster_order() {
        let mut f = fault([8, 16, 2, 4]);
        f.kind = FindingKind::IllegalAddress;
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["alignment"], serde_json::json!({"q": 8, "k": 16, "v": 2, "o": 4}));
        let mut old = json.clone();
        old["alignment"] = serde_json::json!([8, 16, 2, 4]);
        old["location"] = serde_json::json!({"region": "element", "index": [0, 1, 2, 3]});
        let back: Finding = serde_json::from_value(old).unwrap();
        assert_eq!(back.alignment, f.alignment);
        assert!(back.signature().as_str().ends_with("/unaligned:q,v,o"), "{}", back.signature());
        assert_eq!(back.location, Some(Location::Element { index: vec![0, 1, 2, 3] }));
    }

    fn fault(alignment: [u64; 4]) -> Finding {
        finding(FindingKind::MisalignedAddress, Oracle::CudaStatus, None, None, alignment)
    }

    #[test]
    fn a_fault_is_explained_only_while_the_named_tensor_is_unaligned() {
        let named_q = finding(FindingKind::SanitizerMemory, Oracle::Memcheck, Some("q"), Some("invalid_global_read_misaligned"), [8, 2, 16, 16]);
        let mut explained = ExplainedFaults::default();
        let first = fault([8, 2, 16, 16]);
        assert_eq!(explained.covering(&first), None);
        explained.record(&first, &[named_q], 1);
        // q unaligned again, with a different set: explained by case #1.
        assert_eq!(explained.covering(&fault([4, 16, 2, 16])).map(|e| e.case_index), Some(1));
        let why = explained.covering(&fault([4, 16, 2, 16])).unwrap().to_string();
        assert!(why.starts_with("q is unaligned here too, and case #1 was named: sanitizer_memory (oracle memcheck)"), "{why}");
        // q aligned: k or v may fault for a reason of its own, so it is re-run.
        assert_eq!(explained.covering(&fault([16, 2, 2, 16])), None);
        // Another configuration of the kernel is another kernel.
        let mut other = fault([4, 16, 16, 16]);
        other.kernel = "vec_load_q[BLOCK_THREADS=128]".into();
        assert_eq!(explained.covering(&other), None);
        // Only misaligned faults: an illegal address with q unaligned is not covered.
        let mut illegal = fault([4, 16, 16, 16]);
        illegal.kind = FindingKind::IllegalAddress;
        assert_eq!(explained.covering(&illegal), None);
    }

    #[test]
    fn only_misaligned_accesses_on_unaligned_tensors_explain() {
        let mut explained = ExplainedFaults::default();
        let first = fault([8, 16, 16, 16]);
        let out_of_bounds = finding(FindingKind::SanitizerMemory, Oracle::Memcheck, Some("q"), Some("invalid_global_read_out_of_bounds"), [8, 16, 16, 16]);
        let misaligned_k = finding(FindingKind::SanitizerMemory, Oracle::Memcheck, Some("k"), Some("invalid_global_read_misaligned"), [8, 16, 16, 16]);
        explained.record(&first, &[out_of_bounds, misaligned_k], 3);
        assert_eq!(explained.covering(&fault([8, 16, 16, 16])), None);
    }
}
