//! [`parse`] and [`parse_file`]: compute-sanitizer XML text to [`Parsed`] records, or an
//! [`XmlError`] that says what the text is. It exists because the file is written only when the
//! target process exits: a killed process leaves it cut off, and the salvage here keeps every
//! complete record before the cut (and says where it is) instead of losing them all.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::record::{Frame, RaceAccess, Record, RecordKind};

/// The root element of every compute-sanitizer XML file.
pub const ROOT: &str = "ComputeSanitizerOutput";

/// The records of one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parsed {
    /// Every complete record, in file order.
    pub records: Vec<Record>,
    /// Set when the document was cut off (the process was killed while the tool wrote it): where
    /// the cut is and how many records were kept. `None` for a complete document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<String>,
    /// Records that are complete XML but cannot be what the tool writes (no `<kind>`, a number
    /// that does not parse or is out of range), one description each: never findings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub malformed: Vec<String>,
}

impl Parsed {
    /// Sorts each record read into the good ones and the malformed ones (numbered from 1 in
    /// file order).
    fn new(read: Vec<Result<Record, String>>, truncated: Option<String>) -> Parsed {
        let mut records = Vec::new();
        let mut malformed = Vec::new();
        for (i, r) in read.into_iter().enumerate() {
            match r {
                Ok(r) => records.push(r),
                Err(why) => malformed.push(format!("record {}: {why}", i + 1)),
            }
        }
        Parsed { records, truncated, malformed }
    }

    /// The records that are neither `Api` records nor notices: what the tool found in kernels.
    pub fn findings(&self) -> impl Iterator<Item = &Record> {
        self.records.iter().filter(|r| !r.is_api() && !r.is_notice())
    }

    /// The tool's notices about itself ([`Record::is_notice`]).
    pub fn notices(&self) -> impl Iterator<Item = &Record> {
        self.records.iter().filter(|r| r.is_notice())
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
    #[error(transparent)]
    Io(#[from] crate::core::error::FileError),
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
    let bytes =
        crate::core::userfile::read_limited(path, crate::core::userfile::MAX_SANITIZER_XML_BYTES, "compute-sanitizer XML").map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => XmlError::Missing { path: path.to_path_buf() },
            _ => XmlError::Io(crate::core::error::FileError { path: path.into(), action: "read the compute-sanitizer XML", source: e }),
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
            let read = root.children().filter(|n| n.has_tag_name("record")).map(record_from).collect();
            Ok(Parsed::new(read, None))
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
            let why = format!(
                "the file ends at line {} (byte {}) inside its header, before any record: compute-sanitizer \
                 was probably killed while writing it",
                line_at(xml, xml.len()),
                xml.len()
            );
            return Ok(Parsed::new(Vec::new(), Some(why)));
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
            let why = format!(
                "the file ends at line {} (byte {}) inside record {}, which starts at line {}: compute-sanitizer \
                 was probably killed while writing it; the {kept} complete records before it were kept",
                line_at(xml, xml.len()),
                xml.len(),
                kept + 1,
                line_at(xml, start),
            );
            return Ok(Parsed::new(records, Some(why)));
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
    let why = format!(
        "the file ends at line {} (byte {}) after record {kept}, without </{ROOT}>: compute-sanitizer was \
         probably killed while writing it; the {kept} complete records were kept",
        line_at(xml, xml.len()),
        xml.len(),
    );
    Ok(Parsed::new(records, Some(why)))
}

/// The text between two records must be white space or complete elements (a newer tool's extra
/// elements); anything else means the document is damaged, not cut.
fn check_gap(xml: &str, from: usize, to: usize) -> Result<(), XmlError> {
    let gap = xml[from..to].trim();
    if gap.is_empty() || roxmltree::Document::parse(&format!("<gap>{gap}</gap>")).is_ok() {
        return Ok(());
    }
    Err(XmlError::Malformed { message: format!("unexpected text between records at line {}: {gap:.60}", line_at(xml, skip_ws(xml, from))) })
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

/// A number the tool wrote, if the element is there; one that does not parse, or does not fit
/// `T`, is an error naming the element.
fn number<T: TryFrom<u64>>(node: roxmltree::Node<'_, '_>, name: &str) -> Result<Option<T>, String> {
    match text_of(node, name) {
        None => Ok(None),
        Some(t) => parse_u64(&t).and_then(|v| T::try_from(v).ok()).map(Some).ok_or_else(|| format!("<{name}> {:?} is not a number in range", clip(&t))),
    }
}

/// At most 40 characters of a value quoted in a message.
fn clip(t: &str) -> String {
    match t.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &t[..i]),
        None => t.to_string(),
    }
}

fn dim3(node: Option<roxmltree::Node<'_, '_>>) -> Result<Option<[u32; 3]>, String> {
    let Some(node) = node else { return Ok(None) };
    let get = |n| number::<u32>(node, n).map(|v| v.unwrap_or(0));
    Ok(Some([get("x")?, get("y")?, get("z")?]))
}

fn frame_from(node: roxmltree::Node<'_, '_>) -> Result<Frame, String> {
    Ok(Frame { func: text_of(node, "func"), path: text_of(node, "path"), line: number(node, "line")?, pc: number(node, "pc")? })
}

fn access_from(node: roxmltree::Node<'_, '_>) -> Result<RaceAccess, String> {
    Ok(RaceAccess { direction: text_of(node, "direction"), frame: child(node, "where").map(frame_from).transpose()? })
}

/// One `<record>`, or why it cannot be one the tool wrote (no `<kind>`, a number out of range).
fn record_from(node: roxmltree::Node<'_, '_>) -> Result<Record, String> {
    let kind = text_of(node, "kind").ok_or("no <kind>")?;
    let mut r = Record::new(RecordKind::from_xml(&kind));
    r.level = text_of(node, "level");
    if let Some(who) = child(node, "who") {
        r.thread = dim3(child(who, "threadIdx"))?;
        r.block = dim3(child(who, "blockIdx"))?;
    }
    if let Some(what) = child(node, "what") {
        r.text = text_of(what, "text").unwrap_or_default();
        r.space = text_of(what, "space");
        r.size = number(what, "size")?;
        r.direction = text_of(what, "direction");
        r.error = text_of(what, "error");
        r.address = number(what, "address")?;
        r.api = text_of(what, "api");
        r.message = text_of(what, "message");
        r.result = match text_of(what, "result") {
            Some(t) => Some(t.trim().parse().map_err(|_| format!("<result> {:?} is not a number in range", clip(&t)))?),
            None => None,
        };
        r.barrier_type = text_of(what, "type");
        let source = child(what, "source");
        let destination = child(what, "destination");
        r.source = source.map(access_from).transpose()?;
        r.destination = destination.map(access_from).transpose()?;
        // 2025.3 puts the hazard count in <destination>; accept it on either side or in <what>.
        for n in [destination, source, Some(what)].into_iter().flatten() {
            if let Some(c) = number(n, "count")? {
                r.hazards = Some(c);
                break;
            }
        }
    }
    r.at = child(node, "where").map(frame_from).transpose()?;
    if let Some(stack) = child(node, "deviceStack") {
        r.device_stack = stack.children().filter(|n| n.has_tag_name("frame")).map(frame_from).collect::<Result<_, _>>()?;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{fixture, parsed};
    use super::*;
    use crate::core::finding::Oracle;

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
            assert_eq!(r.tool_kind().to_string(), "invalid_global_read_out_of_bounds");
            assert_eq!(r.block, Some([0, 0, 0]));
        }
        let first = p.records.iter().find(|r| r.kind == RecordKind::Precise).unwrap();
        assert_eq!(first.address, Some(0x7f22_bc80_0400));
        assert_eq!(first.at.as_ref().unwrap().pc, Some(0x80));
        assert_eq!(first.thread, Some([0, 0, 0]));
        let threads: std::collections::BTreeSet<u32> = p.findings().map(|r| r.thread.unwrap()[0]).collect();
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
        assert_eq!(api.tool_kind().to_string(), "api_cudaFree_cudaErrorInvalidValue");
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
            assert_eq!(r.tool_kind().to_string(), "invalid_global_read_misaligned");
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
        assert_eq!(r.tool_kind().to_string(), "race_shared_write_read");
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
            assert_eq!(r.tool_kind().to_string(), "uninitialized_global_read");
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
    fn the_tools_notices_are_notes_never_findings_and_no_kind_is_a_sentence() {
        // racecheck's hazard limit, as a record that locates nothing, and as a record whose
        // `<kind>` is the sentence itself; then a real race.
        let limit = "Maximum number of hazards reached. Environment variable NV_COMPUTE_SANITIZER_MAX_RACECHECK_HAZARDS can be used to increase this count.";
        let race = include_str!("../../../../tests/fixtures/sanitizer/racecheck-race.xml");
        let race = &race[race.find("<record>").unwrap()..race.rfind("</record>").unwrap() + "</record>".len()];
        let xml = format!(
            "<ComputeSanitizerOutput><record><kind>Analysis</kind><level>Warning</level><what><text>{limit}</text></what></record>\
             <record><kind>Warning: {limit}</kind></record>{race}</ComputeSanitizerOutput>"
        );
        let p = parse(&xml).unwrap();
        assert_eq!(p.records.len(), 3);
        assert_eq!((p.notices().count(), p.findings().count()), (2, 1));
        let notes: Vec<String> = p.notices().map(Record::notice_note).collect();
        assert!(notes[0].starts_with("a compute-sanitizer notice (not a finding): Warning: Maximum number of hazards"), "{}", notes[0]);
        assert!(notes[1].contains("Maximum number of hazards"), "{}", notes[1]);
        assert_eq!(p.findings().next().unwrap().tool_kind().to_string(), "race_shared_write_read");
        // Were a sentence ever made a kind, it would not become the kind's text.
        let k = p.records[1].tool_kind().to_string();
        assert!(k.len() < 20 && !k.contains("maximum"), "{k}");
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
        assert_eq!(r.tool_kind().to_string(), "leak");
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
