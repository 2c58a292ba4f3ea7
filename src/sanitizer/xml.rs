//! compute-sanitizer XML records: reading the file `--xml --save FILE` writes, and turning each
//! record into a [`Finding`].
//!
//! The format (compute-sanitizer 2025.3.1, see `tests/fixtures/sanitizer/`) is one
//! `<ComputeSanitizerOutput>` root holding `<record>` elements. A record has a `<kind>`
//! (`Precise` for memcheck, `Analysis` for racecheck, `Initcheck`, `Synccheck`, `Api` for a CUDA
//! call that returned an error), optionally `<level>`, `<who>` (thread and block index), `<what>`
//! (text, memory space, size, direction, error, address; API name, error and result; for races
//! `<source>` and `<destination>` with a hazard `<count>`; for synccheck a `<type>`), `<where>`
//! (function, path, line, pc), `<deviceStack>` and `<hostStack>`. Elements this module does not
//! know are ignored, so a newer tool's output still parses.
//!
//! The file is written when the target process exits; a process that is killed leaves it
//! truncated or absent. [`parse`] keeps every complete record before a cut and says where the cut
//! is ([`Parsed::truncated`]) rather than failing.
//!
//! The XML has no "nearest allocation" line (the text output has): [`to_finding`] maps addresses
//! to tensors with the arena's own [`AllocationTable`].

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::arena::{AllocationTable, Holder};
use crate::finding::{Finding, FindingKind, Location, Oracle, SourceLocation};

/// The root element of every compute-sanitizer XML file.
pub const ROOT: &str = "ComputeSanitizerOutput";

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
    /// Source file path as compiled (`/home/user/kernels/fa.cu`); absent without line info.
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

    /// Whether this is an `Api` record for `api`: the harness's markers are deliberate failing
    /// calls (`cudaFree`, `cuMemFree`) that split the record stream between cases. A driver
    /// call's versioned symbol matches its plain name: `cuMemFree` matches `cuMemFree_v2`.
    pub fn is_marker(&self, api: &str) -> bool {
        if !self.is_api() {
            return false;
        }
        let Some(name) = self.api.as_deref() else { return false };
        name == api
            || name
                .strip_prefix(api)
                .and_then(|rest| rest.strip_prefix("_v"))
                .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
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
            return self
                .source
                .as_ref()
                .and_then(|s| s.frame.as_ref())
                .or_else(|| self.destination.as_ref().and_then(|d| d.frame.as_ref()));
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
        self.text
            .split_whitespace()
            .map(|w| w.to_ascii_lowercase())
            .find(|w| matches!(w.as_str(), "read" | "write" | "atomic"))
    }

    /// A short stable kind for signatures: memcheck `invalid_global_read_out_of_bounds`,
    /// racecheck `race_shared_write_read`, initcheck `uninitialized_global_read`, synccheck
    /// `barrier_invalid_arguments`, API errors `api_cudaFree_cudaErrorInvalidValue`.
    pub fn tool_kind(&self) -> String {
        let join = |head: &str, parts: &[Option<String>]| {
            let mut s = head.to_string();
            for p in parts.iter().flatten().filter(|p| !p.is_empty()) {
                s.push('_');
                s.push_str(p);
            }
            s
        };
        match &self.kind {
            RecordKind::Precise => join(
                "invalid",
                &[self.memory_space(), self.access_direction(), self.error.as_deref().map(snake)],
            ),
            RecordKind::Initcheck => join("uninitialized", &[self.memory_space(), self.access_direction()]),
            RecordKind::Analysis => {
                let dir = |a: &Option<RaceAccess>| a.as_ref().and_then(|a| a.direction.as_deref()).map(snake);
                join(
                    "race",
                    &[Some(self.memory_space().unwrap_or_else(|| "shared".into())), dir(&self.source), dir(&self.destination)],
                )
            }
            RecordKind::Synccheck => join("barrier", &[self.barrier_type.as_deref().map(snake)]),
            RecordKind::Api => join("api", &[self.api.as_deref().map(ident), self.error.as_deref().map(ident)]),
            RecordKind::Other(k) => {
                let head = snake(k);
                join(
                    if head.is_empty() { "unknown" } else { &head },
                    &[self.memory_space(), self.access_direction(), self.error.as_deref().map(snake)],
                )
            }
        }
    }
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

/// The records of one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parsed {
    /// Every complete record, in file order.
    pub records: Vec<Record>,
    /// Set when the document was cut off (the process was killed while the tool wrote it): where
    /// the cut is and how many records were kept. `None` for a complete document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<String>,
}

impl Parsed {
    /// The records that are not `Api` records: what the tool found in kernels.
    pub fn findings(&self) -> impl Iterator<Item = &Record> {
        self.records.iter().filter(|r| !r.is_api())
    }
}

/// Why a sanitizer XML file cannot be read.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum XmlError {
    /// The text is empty (or only white space): not the same as a document with no records.
    #[error(
        "the compute-sanitizer XML is empty: the tool writes it when the target process exits, so the process was \
         probably killed first; let it exit normally"
    )]
    Empty,
    /// The text is not XML at all.
    #[error("not compute-sanitizer XML (expected <{ROOT}>): {message}")]
    NotXml {
        /// What the XML parser said.
        message: String,
    },
    /// The text is XML with another root element.
    #[error("the root element is <{found}>, not <{ROOT}>: not a compute-sanitizer --xml file")]
    WrongRoot {
        /// The root element's name.
        found: String,
    },
    /// The document has the right root but is not well-formed, and not because it was cut off.
    #[error("malformed compute-sanitizer XML: {message}")]
    Malformed {
        /// What is wrong and where.
        message: String,
    },
    /// The file does not exist.
    #[error(
        "{}: the XML file was not written: did compute-sanitizer run and exit? run it with --xml --save FILE \
         (the file appears when the target process exits; a killed process may leave none)",
        path.display()
    )]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The file exists but cannot be read.
    #[error("{}: cannot read the compute-sanitizer XML", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but its content is unusable.
    #[error("{}: {problem}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with its content.
        problem: Box<XmlError>,
    },
}

/// Reads a compute-sanitizer XML file: [`parse`] with errors that name the file.
pub fn parse_file(path: &Path) -> Result<Parsed, XmlError> {
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => XmlError::Missing { path: path.to_path_buf() },
        _ => XmlError::Io { path: path.to_path_buf(), source: e },
    })?;
    let text = String::from_utf8_lossy(&bytes);
    parse(&text).map_err(|e| XmlError::InFile { path: path.to_path_buf(), problem: Box::new(e) })
}

/// Parses compute-sanitizer XML. A document cut off after its root start tag (the process was
/// killed while the tool wrote it) is not an error: every complete `<record>` before the cut is
/// kept and [`Parsed::truncated`] says where the cut is. Empty text, text that is not XML,
/// another root element, and a complete but malformed document are errors.
pub fn parse(xml: &str) -> Result<Parsed, XmlError> {
    if xml.trim().is_empty() {
        return Err(XmlError::Empty);
    }
    match roxmltree::Document::parse(xml) {
        Ok(doc) => {
            let root = doc.root_element();
            if root.tag_name().name() != ROOT {
                return Err(XmlError::WrongRoot { found: root.tag_name().name().to_string() });
            }
            let records = root.children().filter(|n| n.has_tag_name("record")).map(record_from).collect();
            Ok(Parsed { records, truncated: None })
        }
        Err(e) => salvage(xml, &e),
    }
}

/// Where the root's content begins, or why there is none.
enum Header {
    /// Byte offset just after `<ComputeSanitizerOutput ...>`.
    Body(usize),
    /// The text ends inside the prolog or the root start tag.
    Cut,
    /// Another root element.
    Wrong(String),
    /// Not XML.
    NotXml,
}

fn skip_ws(xml: &str, i: usize) -> usize {
    i + (xml[i..].len() - xml[i..].trim_start().len())
}

fn header(xml: &str) -> Header {
    let mut i = skip_ws(xml, 0);
    loop {
        let rest = &xml[i..];
        let (open, close) = if rest.starts_with("<?") {
            ("<?", "?>")
        } else if rest.starts_with("<!--") {
            ("<!--", "-->")
        } else {
            break;
        };
        match rest[open.len()..].find(close) {
            Some(e) => i = skip_ws(xml, i + open.len() + e + close.len()),
            None => return Header::Cut,
        }
    }
    let rest = &xml[i..];
    let open = format!("<{ROOT}");
    if let Some(after) = rest.strip_prefix(open.as_str()) {
        return match after.chars().next() {
            None => Header::Cut,
            Some(c) if c == '>' || c == '/' || c.is_whitespace() => match after.find('>') {
                Some(e) => Header::Body(i + open.len() + e + 1),
                None => Header::Cut,
            },
            Some(_) => Header::Wrong(element_name(&rest[1..])),
        };
    }
    if open.starts_with(rest) {
        return Header::Cut;
    }
    match rest.strip_prefix('<').map(element_name) {
        Some(name) if !name.is_empty() => Header::Wrong(name),
        _ => Header::NotXml,
    }
}

fn element_name(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')).take(64).collect()
}

/// 1-based line of byte `pos`.
fn line_at(xml: &str, pos: usize) -> usize {
    xml.as_bytes()[..pos].iter().filter(|&&b| b == b'\n').count() + 1
}

/// Offset of the next `<record>` or `<record ...>` start tag at or after `from`.
fn next_record_start(xml: &str, from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(p) = xml[i..].find("<record") {
        let start = i + p;
        let after = &xml[start + "<record".len()..];
        match after.chars().next() {
            Some(c) if c == '>' || c.is_whitespace() => return Some(start),
            // Cut right after `<record`: a record start all the same.
            None => return Some(start),
            _ => i = start + "<record".len(),
        }
    }
    None
}

/// The full parse failed: a cut-off document keeps its complete records; anything else is an
/// error saying what the text is.
fn salvage(xml: &str, err: &roxmltree::Error) -> Result<Parsed, XmlError> {
    let body = match header(xml) {
        Header::Body(b) => b,
        Header::Cut => {
            return Ok(Parsed {
                records: Vec::new(),
                truncated: Some(format!(
                    "the file ends at line {} (byte {}) inside its header, before any record: compute-sanitizer \
                     was probably killed while writing it",
                    line_at(xml, xml.len()),
                    xml.len()
                )),
            })
        }
        Header::Wrong(found) => return Err(XmlError::WrongRoot { found }),
        Header::NotXml => return Err(XmlError::NotXml { message: err.to_string() }),
    };
    if xml[body..].contains(&format!("</{ROOT}>")) {
        // The document is complete, so it is not a cut: something inside is broken.
        return Err(XmlError::Malformed { message: err.to_string() });
    }
    let mut records = Vec::new();
    let mut pos = body;
    while let Some(start) = next_record_start(xml, pos) {
        check_gap(xml, pos, start)?;
        let Some(len) = xml[start..].find("</record>") else {
            let kept = records.len();
            return Ok(Parsed {
                truncated: Some(format!(
                    "the file ends at line {} (byte {}) inside record {}, which starts at line {}: compute-sanitizer \
                     was probably killed while writing it; the {kept} complete records before it were kept",
                    line_at(xml, xml.len()),
                    xml.len(),
                    kept + 1,
                    line_at(xml, start),
                )),
                records,
            });
        };
        let end = start + len + "</record>".len();
        match roxmltree::Document::parse(&xml[start..end]) {
            Ok(doc) => records.push(record_from(doc.root_element())),
            Err(e) => {
                return Err(XmlError::Malformed {
                    message: format!(
                        "record {} (from line {}) is not well-formed: {e} (counting from the record's first line)",
                        records.len() + 1,
                        line_at(xml, start)
                    ),
                })
            }
        }
        pos = end;
    }
    let kept = records.len();
    Ok(Parsed {
        truncated: Some(format!(
            "the file ends at line {} (byte {}) after record {kept}, without </{ROOT}>: compute-sanitizer was \
             probably killed while writing it; the {kept} complete records were kept",
            line_at(xml, xml.len()),
            xml.len(),
        )),
        records,
    })
}

/// The text between two records must be white space or complete elements (a newer tool's extra
/// elements); anything else means the document is damaged, not cut.
fn check_gap(xml: &str, from: usize, to: usize) -> Result<(), XmlError> {
    let gap = xml[from..to].trim();
    if gap.is_empty() || roxmltree::Document::parse(&format!("<gap>{gap}</gap>")).is_ok() {
        return Ok(());
    }
    Err(XmlError::Malformed {
        message: format!("unexpected text between records at line {}: {gap:.60}", line_at(xml, skip_ws(xml, from))),
    })
}

fn child<'a, 'i>(node: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    node.children().find(|n| n.has_tag_name(name))
}

fn text_of(node: roxmltree::Node<'_, '_>, name: &str) -> Option<String> {
    let t = child(node, name)?.text()?.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// `0x7f22bc800400` or `1024`.
fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn u64_of(node: roxmltree::Node<'_, '_>, name: &str) -> Option<u64> {
    parse_u64(&text_of(node, name)?)
}

fn dim3(node: Option<roxmltree::Node<'_, '_>>) -> Option<[u32; 3]> {
    let node = node?;
    let get = |n| u64_of(node, n).and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
    Some([get("x"), get("y"), get("z")])
}

fn frame_from(node: roxmltree::Node<'_, '_>) -> Frame {
    Frame {
        func: text_of(node, "func"),
        path: text_of(node, "path"),
        line: u64_of(node, "line").and_then(|v| u32::try_from(v).ok()),
        pc: u64_of(node, "pc"),
    }
}

fn access_from(node: roxmltree::Node<'_, '_>) -> RaceAccess {
    RaceAccess { direction: text_of(node, "direction"), frame: child(node, "where").map(frame_from) }
}

fn record_from(node: roxmltree::Node<'_, '_>) -> Record {
    let mut r = Record::new(RecordKind::from_xml(&text_of(node, "kind").unwrap_or_default()));
    r.level = text_of(node, "level");
    if let Some(who) = child(node, "who") {
        r.thread = dim3(child(who, "threadIdx"));
        r.block = dim3(child(who, "blockIdx"));
    }
    if let Some(what) = child(node, "what") {
        r.text = text_of(what, "text").unwrap_or_default();
        r.space = text_of(what, "space");
        r.size = u64_of(what, "size");
        r.direction = text_of(what, "direction");
        r.error = text_of(what, "error");
        r.address = u64_of(what, "address");
        r.api = text_of(what, "api");
        r.message = text_of(what, "message");
        r.result = text_of(what, "result").and_then(|s| s.trim().parse().ok());
        r.barrier_type = text_of(what, "type");
        let source = child(what, "source");
        let destination = child(what, "destination");
        r.source = source.map(access_from);
        r.destination = destination.map(access_from);
        // 2025.3 puts the hazard count in <destination>; accept it on either side or in <what>.
        r.hazards = [destination, source, Some(what)].into_iter().flatten().find_map(|n| u64_of(n, "count"));
    }
    r.at = child(node, "where").map(frame_from);
    if let Some(stack) = child(node, "deviceStack") {
        r.device_stack = stack.children().filter(|n| n.has_tag_name("frame")).map(frame_from).collect();
    }
    r
}

/// What [`to_finding`] needs to know about the run a record came from.
#[derive(Clone, Copy, Debug)]
pub struct FindingContext<'a> {
    /// Kernel label for findings (`name[BLOCK_M=64]`).
    pub kernel: &'a str,
    /// Alignment of q, k, v, o in the case (see [`crate::oracle::alignment_of`]).
    pub alignment: [u64; 4],
    /// Whether the case is inside the kernel's contract.
    pub inside_contract: bool,
    /// The case's allocations, to map addresses to tensors; `None` when unknown.
    pub table: Option<&'a AllocationTable>,
    /// The tool that ran: the oracle of records whose kind does not name one (`Api`, unknown
    /// kinds).
    pub tool: Oracle,
}

/// `4 bytes past its last byte`: a location relative to the holder just named.
fn location_phrase(l: &Location) -> String {
    match l {
        Location::Element { .. } => l.to_string(),
        Location::RedzoneBefore { bytes_before } => format!("{bytes_before} bytes before its first byte"),
        Location::RedzoneAfter { bytes_past_end } => format!("{bytes_past_end} bytes past its last byte"),
        Location::Gap { byte } => format!("a stride gap, byte {byte} from its first byte"),
    }
}

fn dim3_text(d: [u32; 3]) -> String {
    format!("({},{},{})", d[0], d[1], d[2])
}

/// Turns one record into a finding: kind and oracle from the record's kind (or the context's
/// tool), tensor and location from the address through the allocation table, source location
/// from [`Record::user_frame`], and a detail sentence with the numbers.
pub fn to_finding(record: &Record, ctx: &FindingContext<'_>) -> Finding {
    let oracle = record.oracle().unwrap_or(ctx.tool);
    let kind = match &record.kind {
        RecordKind::Precise => FindingKind::SanitizerMemory,
        RecordKind::Api => FindingKind::SanitizerApi,
        RecordKind::Analysis => FindingKind::Race,
        RecordKind::Initcheck => FindingKind::UninitializedRead,
        RecordKind::Synccheck => FindingKind::BarrierError,
        RecordKind::Other(_) => match oracle {
            Oracle::Racecheck => FindingKind::Race,
            Oracle::Initcheck => FindingKind::UninitializedRead,
            Oracle::Synccheck => FindingKind::BarrierError,
            _ => FindingKind::SanitizerMemory,
        },
    };
    // Only global addresses are device pointers into the case's allocations; shared and local
    // addresses are offsets in another space.
    let global = record.memory_space().is_none_or(|s| s.contains("global"));
    let located = record.address.filter(|_| global).and_then(|a| ctx.table.and_then(|t| t.locate(a)));
    let (tensor, location) = match &located {
        Some(l) => match l.holder {
            Holder::Tensor(t) => (Some(t), Some(l.location.clone())),
            Holder::Buffer(_) => (None, None),
        },
        None => (None, None),
    };
    let user = record.user_frame();

    let mut detail = match &record.kind {
        RecordKind::Precise => match (&record.space, &record.direction, record.size) {
            (Some(space), Some(dir), Some(size)) => {
                let mut s = format!("Invalid {space} {dir} of size {size} bytes");
                if let Some(e) = &record.error {
                    s.push_str(&format!(" ({e})"));
                }
                s
            }
            _ => record.text.clone(),
        },
        RecordKind::Analysis => {
            let mut s = if record.text.is_empty() { "Race condition".to_string() } else { record.text.clone() };
            let side = |a: &Option<RaceAccess>| {
                let a = a.as_ref()?;
                let dir = a.direction.as_deref().unwrap_or("access");
                Some(match &a.frame {
                    Some(f) => format!("{dir} at {f}"),
                    None => dir.to_string(),
                })
            };
            if let (Some(src), Some(dst)) = (side(&record.source), side(&record.destination)) {
                s.push_str(&format!(" between {src} and {dst}"));
            }
            if let Some(n) = record.hazards {
                s.push_str(&format!(" ({n} hazards)"));
            }
            s
        }
        RecordKind::Synccheck => {
            let mut s = if record.text.is_empty() { "Barrier error".to_string() } else { record.text.clone() };
            if let Some(t) = &record.barrier_type {
                s.push_str(&format!(" ({t})"));
            }
            s
        }
        _ => record.text.clone(),
    };
    if detail.is_empty() {
        detail = format!("{} record", record.kind);
    }
    match (&located, record.address) {
        (Some(l), _) => detail.push_str(&format!(" at {}: {}", l.holder.name(), location_phrase(&l.location))),
        (None, Some(a)) => detail.push_str(&format!(" at address {a:#x}")),
        (None, None) => {}
    }
    if record.kind != RecordKind::Analysis {
        if let Some(f) = user {
            detail.push_str(&format!(", {f}"));
            if let Some(at) = record.at.as_ref().filter(|at| *at != f) {
                detail.push_str(&format!(" (via {at})"));
            }
        }
    }
    if let Some(t) = record.thread {
        detail.push_str(&format!(", thread {}", dim3_text(t)));
    }
    if let Some(b) = record.block {
        detail.push_str(&format!(" block {}", dim3_text(b)));
    }

    let cuda_error = match (&record.kind, &record.error) {
        (RecordKind::Api, Some(e)) => Some(match record.result {
            Some(code) => format!("{e} ({code})"),
            None => e.clone(),
        }),
        _ => None,
    };
    Finding {
        kind,
        oracle,
        kernel: ctx.kernel.to_string(),
        tensor,
        location,
        count: record.hazards.unwrap_or(1).max(1),
        cuda_error,
        source: user.and_then(Frame::source_location),
        access_size: record.size,
        sanitizer_kind: Some(record.tool_kind()),
        alignment: ctx.alignment,
        inside_contract: ctx.inside_contract,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::ArenaLayout;
    use crate::case::{Case, TensorId};
    use crate::plan::Plan;

    fn fixture(name: &str) -> String {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sanitizer")).join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn parsed(name: &str) -> Parsed {
        let p = parse(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.truncated, None, "{name}");
        p
    }

    fn count(p: &Parsed, kind: RecordKind) -> usize {
        p.records.iter().filter(|r| r.kind == kind).count()
    }

    #[test]
    fn memcheck_oob_records_out_of_bounds_reads_and_markers() {
        let p = parsed("memcheck-oob.xml");
        assert_eq!(p.records.len(), 47);
        assert_eq!(count(&p, RecordKind::Precise), 32);
        assert_eq!(count(&p, RecordKind::Api), 15);
        for r in p.records.iter().filter(|r| r.kind == RecordKind::Precise) {
            assert_eq!(r.level.as_deref(), Some("Error"));
            assert_eq!(r.size, Some(4));
            assert_eq!(r.space.as_deref(), Some("__global__"));
            assert_eq!(r.direction.as_deref(), Some("read"));
            assert_eq!(r.error.as_deref(), Some("out of bounds"));
            assert!(r.address.is_some_and(|a| a > 0x7f00_0000_0000));
            let at = r.at.as_ref().unwrap();
            assert_eq!((at.func.as_deref(), at.line, at.file_name()), (Some("oob_read"), Some(17), Some("sanitizer_probe.cu")));
            assert_eq!(r.user_frame(), Some(at));
            assert_eq!(r.tool_kind(), "invalid_global_read_out_of_bounds");
            assert_eq!(r.block, Some([0, 0, 0]));
        }
        let first = p.records.iter().find(|r| r.kind == RecordKind::Precise).unwrap();
        assert_eq!(first.address, Some(0x7f22_bc80_0400));
        assert_eq!(first.at.as_ref().unwrap().pc, Some(0x80));
        assert_eq!(first.thread, Some([0, 0, 0]));
        let threads: std::collections::BTreeSet<u32> =
            p.findings().map(|r| r.thread.unwrap()[0]).collect();
        assert_eq!(threads.len(), 32);

        let free = p.records.iter().filter(|r| r.is_marker("cudaFree")).count();
        let mem_free = p.records.iter().filter(|r| r.is_marker("cuMemFree")).count();
        assert_eq!((free, mem_free), (4, 4));
        assert_eq!(p.records.iter().filter(|r| r.is_marker("cuMemFree_v2")).count(), 4);
        assert_eq!(p.records.iter().filter(|r| r.is_marker("cuMem")).count(), 0);
        let api = &p.records[0];
        assert_eq!(api.api.as_deref(), Some("cudaFree"));
        assert_eq!(api.error.as_deref(), Some("cudaErrorInvalidValue"));
        assert_eq!(api.message.as_deref(), Some("invalid argument"));
        assert_eq!(api.result, Some(1));
        assert_eq!(api.text, "Program hit cudaErrorInvalidValue (error 1) due to \"invalid argument\" on CUDA API call to cudaFree.");
        assert_eq!(api.tool_kind(), "api_cudaFree_cudaErrorInvalidValue");
        assert_eq!(api.user_frame(), None);
        assert!(!first.is_marker("cudaFree"));
        // The launch failure (719) after the overrun is also an Api record.
        assert!(p.records.iter().any(|r| r.is_marker("cudaDeviceSynchronize") && r.result == Some(719)));
    }

    #[test]
    fn memcheck_without_padding_and_clean_runs_have_only_api_records() {
        for name in ["memcheck-oob-nopad.xml", "memcheck-clean.xml"] {
            let p = parsed(name);
            assert_eq!(p.records.len(), 12, "{name}");
            assert_eq!(p.findings().count(), 0, "{name}");
        }
        for name in ["racecheck-clean.xml", "initcheck-clean.xml", "synccheck-clean.xml"] {
            let p = parsed(name);
            assert!(p.records.is_empty(), "{name}");
        }
    }

    #[test]
    fn memcheck_misaligned_vector_loads() {
        let p = parsed("memcheck-misaligned.xml");
        let precise: Vec<&Record> = p.findings().collect();
        assert_eq!(precise.len(), 32);
        for r in &precise {
            assert_eq!((r.size, r.error.as_deref()), (Some(16), Some("misaligned")));
            assert_eq!(r.address.unwrap() % 16, 4);
            assert_eq!(r.at.as_ref().unwrap().line, Some(44));
            assert_eq!(r.tool_kind(), "invalid_global_read_misaligned");
        }
    }

    #[test]
    fn racecheck_race_has_both_accesses_and_the_hazard_count() {
        let p = parsed("racecheck-race.xml");
        assert_eq!(p.records.len(), 1);
        let r = &p.records[0];
        assert_eq!(r.kind, RecordKind::Analysis);
        assert_eq!((r.level.as_deref(), r.text.as_str()), (Some("Error"), "Race condition"));
        let src = r.source.as_ref().unwrap();
        let dst = r.destination.as_ref().unwrap();
        assert_eq!(src.direction.as_deref(), Some("Write"));
        assert_eq!(dst.direction.as_deref(), Some("Read"));
        assert_eq!(src.frame.as_ref().unwrap().line, Some(22));
        assert_eq!(dst.frame.as_ref().unwrap().line, Some(24));
        assert_eq!(dst.frame.as_ref().unwrap().func.as_deref(), Some("shared_race"));
        assert_eq!(r.hazards, Some(256));
        assert_eq!((r.thread, r.address, r.at.as_ref()), (None, None, None));
        assert_eq!(r.user_frame().unwrap().line, Some(22));
        assert_eq!(r.tool_kind(), "race_shared_write_read");
        assert_eq!(r.oracle(), Some(Oracle::Racecheck));
    }

    #[test]
    fn initcheck_uninitialized_reads() {
        let p = parsed("initcheck-uninit.xml");
        assert_eq!(p.records.len(), 64);
        for r in &p.records {
            assert_eq!(r.kind, RecordKind::Initcheck);
            assert_eq!(r.size, Some(4));
            assert!(r.address.is_some());
            assert_eq!(r.space, None);
            assert_eq!(r.user_frame().unwrap().line, Some(28));
            assert_eq!(r.tool_kind(), "uninitialized_global_read");
        }
    }

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
            assert_eq!(r.tool_kind(), "barrier_invalid_arguments");
            assert!((16..32).contains(&(r.thread.unwrap()[0] % 32)));
        }
    }

    #[test]
    fn a_cut_document_keeps_complete_records_and_says_where() {
        let xml = fixture("memcheck-oob.xml");
        let full = parse(&xml).unwrap().records;
        // Cut in the middle of the 20th record.
        let starts: Vec<usize> = xml.match_indices("<record>").map(|(i, _)| i).collect();
        let cut = starts[19] + 200;
        let p = parse(&xml[..cut]).unwrap();
        assert_eq!(p.records.len(), 19);
        assert_eq!(p.records[..], full[..19]);
        let why = p.truncated.unwrap();
        assert!(why.contains("inside record 20"), "{why}");
        assert!(why.contains(&format!("byte {cut}")), "{why}");
        // Cut between records, inside the closing root tag, and right after `<record`.
        let after = xml.find("</record>").unwrap() + "</record>".len();
        assert_eq!(parse(&xml[..after + 1]).unwrap().records.len(), 1);
        let end = xml.rfind("</ComputeSanitizerOutput>").unwrap();
        let p = parse(&xml[..end + 5]).unwrap();
        assert_eq!((p.records.len(), p.truncated.is_some()), (47, true));
        let p = parse(&xml[..starts[1] + 7]).unwrap();
        assert_eq!(p.records.len(), 1);
        assert!(p.truncated.unwrap().contains("inside record 2"));
        // Cut in the header: no records, still not an error.
        for n in [5, 30, 50, 60] {
            let p = parse(&xml[..n]).unwrap();
            assert!(p.records.is_empty() && p.truncated.is_some(), "cut at {n}");
        }
    }

    #[test]
    fn garbage_empty_and_wrong_roots_are_clear_errors() {
        assert!(matches!(parse(""), Err(XmlError::Empty)));
        assert!(matches!(parse(" \n\t"), Err(XmlError::Empty)));
        assert!(parse("").unwrap_err().to_string().contains("empty"));
        let e = parse("ERROR: not xml at all").unwrap_err();
        assert!(matches!(e, XmlError::NotXml { .. }), "{e}");
        assert!(e.to_string().contains("not compute-sanitizer XML"), "{e}");
        let e = parse("<?xml version=\"1.0\"?>\n<html><body/></html>").unwrap_err();
        assert!(matches!(&e, XmlError::WrongRoot { found } if found == "html"), "{e}");
        let e = parse("<html><body>").unwrap_err();
        assert!(matches!(&e, XmlError::WrongRoot { found } if found == "html"), "{e}");
        let e = parse("<ComputeSanitizerOutputs/>").unwrap_err();
        assert!(matches!(&e, XmlError::WrongRoot { found } if found == "ComputeSanitizerOutputs"), "{e}");
        // Complete but broken is not a cut.
        let e = parse("<ComputeSanitizerOutput><record><kind>Api</what></record></ComputeSanitizerOutput>").unwrap_err();
        assert!(matches!(e, XmlError::Malformed { .. }), "{e}");
        // A cut document whose earlier record is broken is not silently accepted either.
        let e = parse("<ComputeSanitizerOutput><record><kind>Api</what></record><record><kind>").unwrap_err();
        assert!(matches!(e, XmlError::Malformed { .. }), "{e}");
        let e = parse("<ComputeSanitizerOutput><record><kind>Api</kind></record> </what> <record>").unwrap_err();
        assert!(matches!(e, XmlError::Malformed { .. }), "{e}");
    }

    #[test]
    fn unknown_elements_and_kinds_are_tolerated() {
        let xml = "<ComputeSanitizerOutput><version>9</version><record><kind>Leak</kind><level>Error</level>\
                   <what><text>Leaked 64 bytes</text><size>64</size><newThing><a/></newThing></what>\
                   <cluster><x>1</x></cluster></record></ComputeSanitizerOutput>";
        let p = parse(xml).unwrap();
        assert_eq!(p.records.len(), 1);
        let r = &p.records[0];
        assert_eq!(r.kind, RecordKind::Other("Leak".into()));
        assert_eq!((r.size, r.text.as_str()), (Some(64), "Leaked 64 bytes"));
        assert_eq!(r.tool_kind(), "leak");
        assert_eq!(r.oracle(), None);
        // Extra elements between records of a cut document are fine too.
        let p = parse("<ComputeSanitizerOutput><record><kind>Api</kind></record><x>1</x><record><kind>Pre").unwrap();
        assert_eq!(p.records.len(), 1);
    }

    #[test]
    fn parse_file_errors_name_the_file_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("race.xml");
        let e = parse_file(&missing).unwrap_err().to_string();
        assert!(e.contains("race.xml") && e.contains("--xml --save FILE") && e.contains("not written"), "{e}");
        std::fs::write(&missing, "").unwrap();
        let e = parse_file(&missing).unwrap_err().to_string();
        assert!(e.contains("race.xml") && e.contains("empty"), "{e}");
        let ok = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sanitizer/racecheck-race.xml"));
        assert_eq!(parse_file(ok).unwrap().records.len(), 1);
    }

    /// q, k, v, o of `Case::example` at well-separated device addresses, as the arena test does.
    fn table() -> AllocationTable {
        let case = Case::example("k");
        let plan = Plan::new(&case);
        let arena = ArenaLayout::new(&case, &plan, &[("lse".into(), 64)]);
        let mut base = 0x7f22_bc80_0000u64;
        let mut entries = Vec::new();
        for a in &arena.allocs {
            entries.push((base, a.clone()));
            base += a.total_bytes().next_multiple_of(512) + 512;
        }
        AllocationTable { entries, plans: plan.tensors.clone() }
    }

    fn ctx(table: Option<&AllocationTable>, tool: Oracle) -> FindingContext<'_> {
        FindingContext { kernel: "probe[BLOCK_M=64]", alignment: [16, 16, 16, 16], inside_contract: true, table, tool }
    }

    #[test]
    fn an_overrun_maps_to_the_tensor_it_ran_past() {
        let table = table();
        let (kbase, k) = &table.entries[TensorId::K.index()];
        let last_byte = kbase + k.data_offset + k.span_bytes - 1;
        let p = parsed("memcheck-oob.xml");
        let mut r = p.findings().next().unwrap().clone();
        r.address = Some(last_byte + 4);
        r.thread = Some([3, 0, 0]);
        let f = to_finding(&r, &ctx(Some(&table), Oracle::Memcheck));
        assert_eq!((f.kind, f.oracle), (FindingKind::SanitizerMemory, Oracle::Memcheck));
        assert_eq!(f.tensor, Some(TensorId::K));
        assert_eq!(f.location, Some(Location::RedzoneAfter { bytes_past_end: 4 }));
        assert_eq!(
            f.detail,
            "Invalid __global__ read of size 4 bytes (out of bounds) at k: 4 bytes past its last byte, \
             sanitizer_probe.cu:17 in oob_read, thread (3,0,0) block (0,0,0)"
        );
        let src = f.source.clone().unwrap();
        assert_eq!((src.file.as_str(), src.line, src.function.as_deref()), ("sanitizer_probe.cu", 17, Some("oob_read")));
        assert_eq!((f.access_size, f.sanitizer_kind.as_deref()), (Some(4), Some("invalid_global_read_out_of_bounds")));
        assert_eq!(f.count, 1);
        assert_eq!(
            f.signature().as_str(),
            "sanitizer_memory/memcheck/probe[BLOCK_M=64]/k/invalid_global_read_out_of_bounds/sanitizer_probe.cu:17/4B/aligned"
        );
        // Another thread further past the end is the same bug; a first element is located too.
        let mut r2 = r.clone();
        r2.address = Some(last_byte + 100);
        r2.thread = Some([27, 0, 0]);
        assert_eq!(to_finding(&r2, &ctx(Some(&table), Oracle::Memcheck)).signature(), f.signature());
        r2.address = Some(kbase + k.data_offset);
        assert_eq!(to_finding(&r2, &ctx(Some(&table), Oracle::Memcheck)).location, Some(Location::Element { index: [0; 4] }));
        // Alignment is part of the key, as for faults.
        let mut c = ctx(Some(&table), Oracle::Memcheck);
        c.alignment = [16, 4, 16, 16];
        assert!(to_finding(&r, &c).signature().as_str().ends_with("/unaligned:k"));
        // A manifest buffer is named in the detail but is no tensor.
        let (lbase, l) = &table.entries[4];
        r2.address = Some(lbase + l.data_offset + l.span_bytes);
        let fb = to_finding(&r2, &ctx(Some(&table), Oracle::Memcheck));
        assert_eq!((fb.tensor, fb.location.as_ref()), (None, None));
        assert!(fb.detail.contains("at lse: 1 bytes past its last byte"), "{}", fb.detail);
        // Without a table the address is reported as is.
        let fa = to_finding(&r, &ctx(None, Oracle::Memcheck));
        assert_eq!(fa.tensor, None);
        assert!(fa.detail.contains(&format!("at address {:#x}", last_byte + 4)), "{}", fa.detail);
    }

    #[test]
    fn races_barriers_uninit_and_api_records_become_findings() {
        let table = table();
        let race = &parsed("racecheck-race.xml").records[0];
        let f = to_finding(race, &ctx(Some(&table), Oracle::Racecheck));
        assert_eq!((f.kind, f.oracle, f.tensor, f.count), (FindingKind::Race, Oracle::Racecheck, None, 256));
        assert_eq!(f.source.as_ref().map(|s| s.line), Some(22));
        assert_eq!(
            f.detail,
            "Race condition between Write at sanitizer_probe.cu:22 in shared_race and Read at sanitizer_probe.cu:24 in shared_race (256 hazards)"
        );
        assert_eq!(f.signature().as_str(), "race/racecheck/probe[BLOCK_M=64]/-/race_shared_write_read/sanitizer_probe.cu:22/-/aligned");

        let sync = &parsed("synccheck-sync.xml").records[0];
        let f = to_finding(sync, &ctx(Some(&table), Oracle::Synccheck));
        assert_eq!((f.kind, f.tensor), (FindingKind::BarrierError, None));
        assert_eq!(f.source.as_ref().map(|s| (s.line, s.function.as_deref())), Some((33, Some("bad_syncwarp"))));
        assert!(f.detail.starts_with("Barrier error (Invalid arguments), sanitizer_probe.cu:33 in bad_syncwarp (via sm_30_intrinsics.hpp:110 in __syncwarp), thread ("), "{}", f.detail);

        let uninit = &parsed("initcheck-uninit.xml").records[0];
        let f = to_finding(uninit, &ctx(None, Oracle::Initcheck));
        assert_eq!((f.kind, f.oracle, f.access_size), (FindingKind::UninitializedRead, Oracle::Initcheck, Some(4)));
        assert!(f.signature().as_str().contains("/uninitialized_global_read/sanitizer_probe.cu:28/4B/"));

        let api = &parsed("memcheck-oob.xml").records[0];
        let f = to_finding(api, &ctx(None, Oracle::Memcheck));
        assert_eq!((f.kind, f.oracle), (FindingKind::SanitizerApi, Oracle::Memcheck));
        assert_eq!(f.cuda_error.as_deref(), Some("cudaErrorInvalidValue (1)"));
        assert_eq!(f.source, None);
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

    #[test]
    fn every_prefix_of_a_real_file_is_complete_or_truncated() {
        // Every cut of a real file is either complete or a truncation, never an error.
        let xml = fixture("racecheck-race.xml");
        for n in 1..xml.len() {
            if !xml.is_char_boundary(n) {
                continue;
            }
            match parse(&xml[..n]) {
                Ok(p) if p.truncated.is_none() => assert_eq!(p.records.len(), 1, "cut at {n}"),
                Ok(p) => assert!(p.records.len() <= 1, "cut at {n}"),
                Err(e) => panic!("cut at {n}: {e}"),
            }
        }
    }
}
