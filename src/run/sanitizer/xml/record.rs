//! [`Record`]: one compute-sanitizer `<record>` as plain data ([`RecordKind`], [`Frame`],
//! [`RaceAccess`]), with the queries the rest of the crate asks of it (the user's frame, the
//! memory space, a stable kind for signatures). It exists apart from the parser so that the
//! marker checks, the attribution of records to cases and [`to_finding`] work on plain data, and
//! records can be built by hand ([`Record::new`]) without any XML.
//!
//! [`to_finding`]: super::to_finding

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::core::finding::{Oracle, SanitizerClass, SanitizerKind, SourceLocation};

/// What kind of record it is, as its `<kind>` says.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// memcheck: an invalid access the tool attributes to one thread and instruction.
    Precise,
    /// A CUDA API call that returned an error (any tool records these).
    Api,
    /// racecheck: a hazard between two accesses (`<source>` and `<destination>`).
    Analysis,
    /// initcheck: a read of memory that was never written.
    Initcheck,
    /// synccheck: an invalid barrier or warp synchronisation.
    Synccheck,
    /// A kind this version does not know, as written.
    Other(String),
}

impl RecordKind {
    /// The kind for a `<kind>` text.
    pub fn from_xml(text: &str) -> RecordKind {
        match text.trim() {
            "Precise" => RecordKind::Precise,
            "Api" => RecordKind::Api,
            "Analysis" => RecordKind::Analysis,
            "Initcheck" => RecordKind::Initcheck,
            "Synccheck" => RecordKind::Synccheck,
            other => RecordKind::Other(other.to_string()),
        }
    }

    /// The `<kind>` text (`Precise`).
    pub fn as_str(&self) -> &str {
        match self {
            RecordKind::Precise => "Precise",
            RecordKind::Api => "Api",
            RecordKind::Analysis => "Analysis",
            RecordKind::Initcheck => "Initcheck",
            RecordKind::Synccheck => "Synccheck",
            RecordKind::Other(k) => k,
        }
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One code location: a `<where>` element or a device-stack `<frame>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// Function name (`oob_read`, `__syncwarp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub func: Option<String>,
    /// Source file path as compiled (absolute, the build machine's); absent without line info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// 1-based source line; absent without line info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Offset of the instruction in the function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pc: Option<u64>,
}

impl Frame {
    /// The file name without directories (`fa.cu`).
    pub fn file_name(&self) -> Option<&str> {
        let path = self.path.as_deref()?;
        Some(path.rsplit(['/', '\\']).next().unwrap_or(path))
    }

    /// Whether the frame is in a CUDA header rather than the user's code: its path contains
    /// `/include/` or `targets/` (`/usr/local/cuda/targets/x86_64-linux/include/...`).
    pub fn is_cuda_header(&self) -> bool {
        self.path.as_deref().is_some_and(|p| p.contains("/include/") || p.contains("targets/"))
    }

    /// The source location (file name, line, function) when the frame has a path and a line.
    pub fn source_location(&self) -> Option<SourceLocation> {
        Some(SourceLocation { file: self.file_name()?.to_string(), line: self.line?, function: self.func.clone() })
    }
}

impl fmt::Display for Frame {
    /// `fa.cu:17 in oob_read`, or `oob_read+0x80` without line info.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.file_name(), self.line) {
            (Some(file), Some(line)) => {
                write!(f, "{file}:{line}")?;
                if let Some(func) = &self.func {
                    write!(f, " in {func}")?;
                }
                Ok(())
            }
            _ => {
                f.write_str(self.func.as_deref().unwrap_or("?"))?;
                if let Some(pc) = self.pc {
                    write!(f, "+{pc:#x}")?;
                }
                Ok(())
            }
        }
    }
}

/// One side of a racecheck hazard: `<source>` or `<destination>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaceAccess {
    /// `Write`, `Read` or `Atomic`, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    /// Where the access is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame: Option<Frame>,
}

/// One `<record>`: plain data, every field optional except the kind, as the tools fill different
/// subsets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// `<kind>`.
    pub kind: RecordKind,
    /// `<level>` (`Error`, `Warning`); memcheck and racecheck write it, the others do not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// `<what><text>`: the tool's one-line description.
    #[serde(default)]
    pub text: String,
    /// `<who><threadIdx>` as `[x, y, z]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<[u32; 3]>,
    /// `<who><blockIdx>` as `[x, y, z]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<[u32; 3]>,
    /// `<what><space>` (`__global__`, `__shared__`, `__local__`); initcheck leaves it out (its
    /// text names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// `<what><size>`: bytes per access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// `<what><direction>` (`read`, `write`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    /// `<what><error>`: for memory errors the class (`out of bounds`, `misaligned`); for `Api`
    /// records the CUDA error name (`cudaErrorInvalidValue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `<what><address>`: the device address accessed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<u64>,
    /// `<what><api>`: the API call of an `Api` record (`cudaFree`, `cuMemFree_v2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// `<what><message>`: the CUDA error's description (`invalid argument`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `<what><result>`: the numeric CUDA error code of an `Api` record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<i64>,
    /// `<what><type>`: synccheck's error type (`Invalid arguments`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier_type: Option<String>,
    /// `<where>`: the instruction that failed. For synccheck it is the intrinsic, often in a
    /// CUDA header; see [`Record::user_frame`].
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub at: Option<Frame>,
    /// `<deviceStack>` frames, innermost caller first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_stack: Vec<Frame>,
    /// racecheck: the first access of the hazard (`<what><source>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<RaceAccess>,
    /// racecheck: the second access of the hazard (`<what><destination>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<RaceAccess>,
    /// racecheck: how many hazards the record stands for (`<count>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hazards: Option<u64>,
}

impl Record {
    /// An empty record of `kind`, for building records by hand.
    pub fn new(kind: RecordKind) -> Record {
        Record {
            kind,
            level: None,
            text: String::new(),
            thread: None,
            block: None,
            space: None,
            size: None,
            direction: None,
            error: None,
            address: None,
            api: None,
            message: None,
            result: None,
            barrier_type: None,
            at: None,
            device_stack: Vec::new(),
            source: None,
            destination: None,
            hazards: None,
        }
    }

    /// Whether this is an `Api` record.
    pub fn is_api(&self) -> bool {
        self.kind == RecordKind::Api
    }

    /// Whether this is the tool's notice about itself rather than a record of an access: it
    /// names no address, size, thread, block, instruction, stack, race side or API call (racecheck's
    /// "Maximum number of hazards reached", a print-limit warning), or its `<kind>` is a
    /// sentence, not a word. A notice is shown once as a note and never becomes a finding: a
    /// finding's kind is never built from free text.
    pub fn is_notice(&self) -> bool {
        let locates = self.address.is_some()
            || self.size.is_some()
            || self.thread.is_some()
            || self.block.is_some()
            || self.at.is_some()
            || !self.device_stack.is_empty()
            || self.source.is_some()
            || self.destination.is_some()
            || self.api.is_some();
        let sentence = matches!(&self.kind, RecordKind::Other(k) if !is_word(k));
        (!locates && !self.is_api()) || sentence
    }

    /// A notice as a note: the tool's words, once.
    pub fn notice_note(&self) -> String {
        let words = if self.text.trim().is_empty() { self.kind.as_str().trim() } else { self.text.trim() };
        let level = self.level.as_deref().map(|l| format!("{l}: ")).unwrap_or_default();
        format!("a compute-sanitizer notice (not a finding): {level}{words}")
    }

    /// Whether this is an `Api` record for `api`: the harness's markers are deliberate failing
    /// calls (`cudaFree`, `cuMemFree`) that split the record stream between cases. A driver
    /// call's versioned symbol matches its plain name: `cuMemFree` matches `cuMemFree_v2`.
    pub fn is_marker(&self, api: &str) -> bool {
        if !self.is_api() {
            return false;
        }
        let Some(name) = self.api.as_deref() else { return false };
        name == api || name.strip_prefix(api).and_then(|rest| rest.strip_prefix("_v")).is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
    }

    /// The tool that writes records of this kind, or `None` for `Api` records (every tool
    /// writes them) and unknown kinds.
    pub fn oracle(&self) -> Option<Oracle> {
        match self.kind {
            RecordKind::Precise => Some(Oracle::Memcheck),
            RecordKind::Analysis => Some(Oracle::Racecheck),
            RecordKind::Initcheck => Some(Oracle::Initcheck),
            RecordKind::Synccheck => Some(Oracle::Synccheck),
            RecordKind::Api | RecordKind::Other(_) => None,
        }
    }

    /// The frame in the user's code: for races the source access; otherwise `<where>`, unless
    /// it is in a CUDA header (synccheck's `__syncwarp`), in which case the first device-stack
    /// frame that is not. Falls back to `<where>` when every frame is in a header.
    pub fn user_frame(&self) -> Option<&Frame> {
        if self.kind == RecordKind::Analysis {
            return self.source.as_ref().and_then(|s| s.frame.as_ref()).or_else(|| self.destination.as_ref().and_then(|d| d.frame.as_ref()));
        }
        match &self.at {
            Some(at) if !at.is_cuda_header() => Some(at),
            at => self.device_stack.iter().find(|f| !f.is_cuda_header()).or(at.as_ref()).or(self.device_stack.first()),
        }
    }

    /// The memory space without underscores (`global`), from `<space>` or, where the tool
    /// leaves it out (initcheck), from the text (`Uninitialized __global__ memory read`).
    pub fn memory_space(&self) -> Option<String> {
        let raw = match &self.space {
            Some(s) => s.as_str(),
            None => self.text.split_whitespace().find(|w| w.len() > 4 && w.starts_with("__") && w.ends_with("__"))?,
        };
        let s = snake(raw);
        (!s.is_empty()).then_some(s)
    }

    /// The access direction in lower case (`read`), from `<direction>` or from the text.
    pub fn access_direction(&self) -> Option<String> {
        if let Some(d) = &self.direction {
            let d = snake(d);
            return (!d.is_empty()).then_some(d);
        }
        self.text.split_whitespace().map(|w| w.to_ascii_lowercase()).find(|w| matches!(w.as_str(), "read" | "write" | "atomic"))
    }

    /// A short stable kind for signatures: memcheck `invalid_global_read_out_of_bounds`,
    /// racecheck `race_shared_write_read`, initcheck `uninitialized_global_read`, synccheck
    /// `barrier_invalid_arguments`, API errors `api_cudaFree_cudaErrorInvalidValue`.
    pub fn tool_kind(&self) -> SanitizerKind {
        let kind = SanitizerKind::new;
        match &self.kind {
            RecordKind::Precise => kind(SanitizerClass::Invalid, &[self.memory_space(), self.access_direction(), self.error.as_deref().map(snake)]),
            RecordKind::Initcheck => kind(SanitizerClass::Uninitialized, &[self.memory_space(), self.access_direction()]),
            RecordKind::Analysis => {
                let dir = |a: &Option<RaceAccess>| a.as_ref().and_then(|a| a.direction.as_deref()).map(snake);
                kind(SanitizerClass::Race, &[Some(self.memory_space().unwrap_or_else(|| "shared".into())), dir(&self.source), dir(&self.destination)])
            }
            RecordKind::Synccheck => kind(SanitizerClass::Barrier, &[self.barrier_type.as_deref().map(snake)]),
            RecordKind::Api => kind(SanitizerClass::Api, &[self.api.as_deref().map(ident), self.error.as_deref().map(ident)]),
            RecordKind::Other(k) => {
                // A kind is a word of the tool's (`Leak`), never a sentence made into one.
                let head = if is_word(k) { snake(k) } else { String::new() };
                let class = SanitizerClass::Other(if head.is_empty() { "unknown".into() } else { head });
                kind(class, &[self.memory_space(), self.access_direction(), self.error.as_deref().map(snake)])
            }
        }
    }
}

/// Whether a `<kind>` text is a word (`Leak`, `Precise`), not a sentence: at most 32
/// characters, no white space inside.
fn is_word(k: &str) -> bool {
    let k = k.trim();
    !k.is_empty() && k.len() <= 32 && !k.contains(char::is_whitespace)
}

/// `Out of Bounds` → `out_of_bounds`, `__global__` → `global`: ASCII letters and digits in lower
/// case, every other run of characters one underscore, none at the ends.
fn snake(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

/// An identifier kept as written, with anything but ASCII letters, digits and `_` dropped.
fn ident(s: &str) -> String {
    s.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::parsed;
    use super::*;
    use crate::core::finding::Finding;

    #[test]
    fn synccheck_user_frame_is_the_kernel_line_not_the_header() {
        let p = parsed("synccheck-sync.xml");
        assert_eq!(p.records.len(), 32);
        for r in &p.records {
            assert_eq!(r.kind, RecordKind::Synccheck);
            assert_eq!(r.barrier_type.as_deref(), Some("Invalid arguments"));
            let at = r.at.as_ref().unwrap();
            assert_eq!(at.func.as_deref(), Some("__syncwarp"));
            assert!(at.is_cuda_header());
            let user = r.user_frame().unwrap();
            assert_eq!((user.func.as_deref(), user.line, user.file_name()), (Some("bad_syncwarp"), Some(33), Some("sanitizer_probe.cu")));
            assert_eq!(r.tool_kind().to_string(), "barrier_invalid_arguments");
            assert!((16..32).contains(&(r.thread.unwrap()[0] % 32)));
        }
    }

    #[test]
    fn records_and_findings_serialize_and_old_findings_still_load() {
        let r = &parsed("racecheck-race.xml").records[0];
        let json = serde_json::to_value(r).unwrap();
        assert_eq!(json["kind"], "analysis");
        assert_eq!(json["destination"]["frame"]["line"], 24);
        assert!(json.get("where").is_none());
        let s = &parsed("synccheck-sync.xml").records[0];
        assert_eq!(serde_json::to_value(s).unwrap()["where"]["func"], "__syncwarp");
        let back: Record = serde_json::from_value(serde_json::to_value(s).unwrap()).unwrap();
        assert_eq!(&back, s);
        // A finding saved before the sanitizer fields existed loads, and saves the same fields.
        let old = r#"{"kind":"canary_damage","oracle":"canary","kernel":"k","tensor":"o","count":3,
            "alignment":[16,16,16,16],"inside_contract":true,"detail":"d"}"#;
        let f: Finding = serde_json::from_str(old).unwrap();
        assert_eq!((f.source.as_ref(), f.access_size, f.sanitizer_kind.as_ref()), (None, None, None));
        let again = serde_json::to_value(&f).unwrap();
        let keys: Vec<&String> = again.as_object().unwrap().keys().collect();
        assert!(!keys.iter().any(|k| ["source", "access_size", "sanitizer_kind"].contains(&k.as_str())), "{keys:?}");
        assert_eq!(f.signature().as_str(), "canary_damage/canary/k/o/-");
    }
}
