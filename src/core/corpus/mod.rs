//! Seed files: saved cases that replay a run exactly.
//!
//! A [`Seed`] is JSON with a format tag and version, the [`Case`], and optionally the finding it
//! reproduces and its signature. Reading also accepts a bare case (as a human might write one)
//! and raw libFuzzer bytes, which decode through the same decoder the fuzz target uses (and so
//! need the kernel's [`DecodeContext`]); raw bytes are read only from files libFuzzer named, or
//! when the caller says so ([`RawInput`]): garbage never decodes into an unrelated case. Seeds and cases of format 1 (the attention-only model)
//! are migrated on read ([`crate::core::case::legacy`]) and keep their saved signatures. Writing is
//! atomic (a temporary file in the same directory, then a rename that refuses to replace
//! anything), so a crash mid-write never leaves half a seed and nothing a user saved is ever
//! overwritten.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use arbitrary::Unstructured;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::core::case::{legacy, Case};
use crate::core::error::SeedError;
use crate::core::finding::{Finding, Signature};
use crate::core::generate::{decode_case, DecodeContext};
use crate::core::manifest::Manifest;
use crate::core::registry::{self, KernelOrigin, SeedKernel, SeedKernelError};

/// Format tag of seed files.
pub const SEED_FORMAT: &str = "cudafuzz-seed";
/// Seed format version this build writes (3: a shipped kernel named by its name, another by its
/// manifest's path relative to the seed with its name and hash); versions 2 (kernels named by the
/// path they were loaded by) and 1 (the attention-only case, migrated) are read.
pub const SEED_VERSION: u32 = 3;

/// A saved case, with the finding it reproduces when it was saved for one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seed {
    /// Always [`SEED_FORMAT`].
    pub format: String,
    /// Always [`SEED_VERSION`] when written by this build.
    pub version: u32,
    /// The case.
    pub case: Case,
    /// The finding this case produced when saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding: Option<Finding>,
    /// The finding's signature, for grouping without recomputing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
    /// Free text: where the seed came from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// For a kernel that is not shipped: its name and its manifest's hash when the seed was
    /// saved (the case's `kernel` then holds the manifest's path relative to the seed's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<KernelOrigin>,
}

/// A seed as format 1 wrote it: the attention-only case, migrated on read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedV1 {
    format: String,
    #[allow(dead_code)]
    version: u32,
    case: legacy::CaseV1,
    #[serde(default)]
    finding: Option<Finding>,
    #[serde(default)]
    signature: Option<Signature>,
    #[serde(default)]
    note: String,
}

/// How a seed file was encoded on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedEncoding {
    /// A [`Seed`] JSON document.
    Seed,
    /// A bare [`Case`] JSON document.
    Case,
    /// Raw fuzzer bytes decoded with `arbitrary`.
    Raw,
}

impl Seed {
    /// A seed for a case with no finding.
    pub fn new(case: Case) -> Seed {
        Seed { format: SEED_FORMAT.into(), version: SEED_VERSION, case, finding: None, signature: None, note: String::new(), manifest: None }
    }

    /// A seed for a case and the finding it reproduces.
    pub fn with_finding(case: Case, finding: Finding) -> Seed {
        let signature = Some(finding.signature());
        Seed { finding: Some(finding), signature, ..Seed::new(case) }
    }

    /// This seed with its case naming `m` the way a seed saved in `dir` does, so that it
    /// replays from any working directory ([`registry::seed_reference`]): a shipped kernel by
    /// name, any other by its manifest's path relative to `dir` plus its name and hash.
    pub fn naming_kernel(mut self, m: &Manifest, dir: &Path) -> Seed {
        let (kernel, origin) = registry::seed_reference(m, dir);
        self.case.kernel = kernel;
        self.manifest = origin;
        self
    }

    /// The kernel this seed, read from `path`, replays with: `forced` (`--kernel`) when given,
    /// else the one it names ([`registry::resolve_for_seed`]).
    pub fn kernel(&self, path: &Path, forced: Option<&Manifest>) -> Result<SeedKernel, SeedKernelError> {
        let found = registry::resolve_for_seed(path, &self.case.kernel, self.manifest.as_ref(), forced)?;
        // A seed holds one kernel's finding: a finding of another kernel is an edit gone wrong
        // (with --kernel the seed is replayed on another kernel on purpose).
        if let (None, Some(f)) = (forced, &self.finding) {
            let named = f.kernel.split('[').next().unwrap_or(&f.kernel);
            if named != found.manifest.name {
                return Err(SeedKernelError::OtherKernel { seed: path.into(), finding: named.to_string(), kernel: found.manifest.name.clone() });
            }
        }
        Ok(found)
    }

    /// Makes a hand-edited seed consistent: a saved signature that is empty or disagrees with
    /// the saved finding is recomputed from the finding. Returns what was fixed, for the command
    /// to say; the file is not changed.
    pub fn reconcile(&mut self) -> Option<String> {
        let finding = self.finding.as_ref()?;
        let computed = finding.signature();
        if self.signature.as_ref() == Some(&computed) {
            return None;
        }
        let was = self.signature.replace(computed.clone()).map_or_else(|| "none".to_string(), |s| format!("`{}`", s.as_str()));
        Some(format!("its saved signature ({was}) does not match its finding; using the finding's, `{}`", computed.as_str()))
    }

    /// Pretty JSON, newline-terminated.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("seeds always serialize");
        s.push('\n');
        s
    }
}

/// Whether a seed file may hold raw libFuzzer bytes rather than JSON.
///
/// The format is never guessed from the content (garbage must not decode into some unrelated
/// case): raw bytes are read from files named as libFuzzer names its artifacts
/// ([`is_libfuzzer_artifact`]), or from any file when the user says so (`--raw`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RawInput {
    /// Raw bytes only for libFuzzer artifact names; everything else must be a JSON seed or case.
    #[default]
    ByName,
    /// The file is raw fuzzer bytes, whatever its name.
    Always,
}

/// The prefixes libFuzzer gives the inputs it saves (`-artifact_prefix` keeps them).
pub const LIBFUZZER_ARTIFACT_PREFIXES: [&str; 5] = ["crash-", "timeout-", "oom-", "leak-", "slow-unit-"];

/// Whether `path` is named as libFuzzer names a saved input (`crash-<sha1>`, `timeout-…`,
/// `oom-…`, `leak-…`, `slow-unit-…`). A `.json` file is a seed, whatever its name.
pub fn is_libfuzzer_artifact(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return false };
    LIBFUZZER_ARTIFACT_PREFIXES.iter().any(|p| name.starts_with(p)) && path.extension().is_none_or(|e| e != "json")
}

/// Reads a seed or a bare case (JSON), or raw fuzzer bytes from a libFuzzer artifact (decoded
/// with `ctx`, the kernel's context), from `path`, and validates the case.
pub fn load(path: &Path, ctx: Option<&DecodeContext>) -> Result<(Seed, SeedEncoding), SeedError> {
    load_as(path, ctx, RawInput::ByName)
}

/// [`load`], with the caller saying when the file is raw fuzzer bytes.
pub fn load_as(path: &Path, ctx: Option<&DecodeContext>, raw: RawInput) -> Result<(Seed, SeedEncoding), SeedError> {
    let bytes = crate::core::userfile::read(path).map_err(crate::core::error::FileError::at(path, "read"))?;
    let raw = raw == RawInput::Always || is_libfuzzer_artifact(path);
    let (seed, encoding) = if raw { (Seed::new(decode_raw(path, &bytes, ctx)?), SeedEncoding::Raw) } else { parse_json(path, &bytes)? };
    seed.case.validate().map_err(|source| SeedError::Case { path: path.into(), source })?;
    Ok((seed, encoding))
}

fn decode_raw(path: &Path, bytes: &[u8], ctx: Option<&DecodeContext>) -> Result<Case, SeedError> {
    let Some(ctx) = ctx else {
        return Err(SeedError::Decode { path: path.into(), message: "raw fuzzer bytes decode for one kernel: pass --kernel (or set CUDAFUZZ_KERNEL)".into() });
    };
    decode_case(&mut Unstructured::new(bytes), ctx).map_err(|e| SeedError::Decode { path: path.into(), message: e.to_string() })
}

/// The hint every "this is not a seed" error ends with.
const NOT_A_SEED_HINT: &str = "a seed is a JSON object (`cudafuzz case example` prints one); raw libFuzzer bytes are read only from files named crash-*, timeout-*, oom-*, leak-* or slow-unit-*, or with --raw";

/// A seed document or a bare case, as JSON. Anything else is an error naming the file.
fn parse_json(path: &Path, bytes: &[u8]) -> Result<(Seed, SeedEncoding), SeedError> {
    let not_a_seed = |what: String| SeedError::NotASeed { path: path.into(), problem: format!("{what}; {NOT_A_SEED_HINT}") };
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err(not_a_seed("starts with a UTF-8 byte-order mark: save it without one".into()));
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Err(not_a_seed("not UTF-8 text".into()));
    };
    if text.trim().is_empty() {
        return Err(not_a_seed("the file is empty".into()));
    }
    let json_err = |e: serde_json::Error| SeedError::Json { path: path.into(), line: e.line(), column: e.column(), message: e.to_string() };
    // A document that does not even open an object is not a seed with a typo in it.
    let opens_object = text.trim_start().starts_with('{');
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| if opens_object { json_err(e) } else { not_a_seed("not a JSON object".into()) })?;
    let kind = match &value {
        serde_json::Value::Object(_) => None,
        serde_json::Value::Null => Some("null"),
        serde_json::Value::Bool(_) => Some("a boolean"),
        serde_json::Value::Number(_) => Some("a number"),
        serde_json::Value::String(_) => Some("a string"),
        serde_json::Value::Array(_) => Some("an array"),
    };
    if let Some(kind) = kind {
        return Err(not_a_seed(format!("the JSON document is {kind}, not an object")));
    }
    if let Some(key) = strict::repeated_key(text) {
        return Err(SeedError::RepeatedKey { path: path.into(), key });
    }
    if let Some(format) = value.get("format") {
        let format = format.as_str().unwrap_or("?").to_string();
        let number = value.get("version").and_then(|v| v.as_u64()).map(|v| u32::try_from(v).unwrap_or(u32::MAX));
        let version = number.unwrap_or(0);
        if format != SEED_FORMAT || !(1..=SEED_VERSION).contains(&version) {
            let found = version_as_held(&value);
            return Err(SeedError::UnknownFormat { path: path.into(), format, version: found, expected: SEED_FORMAT, supported: SEED_VERSION });
        }
        if version == 1 {
            let old: SeedV1 = serde_json::from_str(text).map_err(json_err)?;
            let seed = Seed {
                format: old.format,
                version: SEED_VERSION,
                case: legacy::migrate(old.case),
                finding: old.finding,
                signature: old.signature,
                note: old.note,
                manifest: None,
            };
            return Ok((seed, SeedEncoding::Seed));
        }
        let seed: Seed = serde_json::from_str(text).map_err(json_err)?;
        return Ok((seed, SeedEncoding::Seed));
    }
    match value.get("version").and_then(|v| v.as_u64()) {
        Some(1) => {
            let old: legacy::CaseV1 = serde_json::from_str(text).map_err(json_err)?;
            Ok((Seed::new(legacy::migrate(old)), SeedEncoding::Case))
        }
        Some(v) if v != crate::core::case::CASE_VERSION as u64 => Err(SeedError::Case {
            path: path.into(),
            source: crate::core::error::CaseError::UnknownVersion { found: u32::try_from(v).unwrap_or(u32::MAX), supported: crate::core::case::CASE_VERSION },
        }),
        _ => {
            let case: Case = serde_json::from_str(text).map_err(json_err)?;
            Ok((Seed::new(case), SeedEncoding::Case))
        }
    }
}

/// Short content hash of a seed's case, used in file names.
pub fn case_hash(case: &Case) -> String {
    let json = serde_json::to_vec(case).expect("cases always serialize");
    let digest = Sha256::digest(&json);
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// Saves a seed under `dir` with a name derived from its kernel, finding kind and case hash.
///
/// The write is atomic and never replaces an existing file: if a file of that name already
/// holds the same bytes, its path is returned (`already == true`); if it holds something else, a
/// numbered sibling name is used.
pub fn save(dir: &Path, seed: &Seed) -> Result<SavedSeed, SeedError> {
    let io = |action, source| SeedError::Io(crate::core::error::FileError { path: dir.into(), action, source });
    fs::create_dir_all(dir).map_err(|e| io("create directory", e))?;
    let kernel = Path::new(&seed.case.kernel).file_stem().and_then(|s| s.to_str()).filter(|s| !s.is_empty()).unwrap_or("case").to_string();
    let kind = seed.finding.as_ref().map(|f| f.kind.name()).unwrap_or("case");
    let stem = format!("{kernel}-{kind}-{}", case_hash(&seed.case));
    let text = seed.to_json();
    for n in 1.. {
        let name = if n == 1 { format!("{stem}.json") } else { format!("{stem}-{n}.json") };
        let path = dir.join(name);
        if let Ok(existing) = fs::read(&path) {
            if existing == text.as_bytes() {
                return Ok(SavedSeed { path, already: true });
            }
            continue;
        }
        let mut tmp = crate::core::userfile::temp_in(dir).map_err(|e| io("write", e))?;
        tmp.write_all(text.as_bytes()).map_err(|e| io("write", e))?;
        tmp.as_file().sync_all().map_err(|e| io("write", e))?;
        match tmp.persist_noclobber(&path) {
            Ok(_) => return Ok(SavedSeed { path, already: false }),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(SeedError::Io(crate::core::error::FileError { path, action: "write", source: e.error })),
        }
    }
    unreachable!("the loop above returns")
}

/// Writes `seed` to exactly `path`, atomically, refusing to replace an existing file.
pub fn save_as(path: &Path, seed: &Seed) -> Result<(), SeedError> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let io = |action, source| SeedError::Io(crate::core::error::FileError { path: path.into(), action, source });
    let mut tmp = crate::core::userfile::temp_in(dir).map_err(|e| io("write", e))?;
    tmp.write_all(seed.to_json().as_bytes()).map_err(|e| io("write", e))?;
    tmp.persist_noclobber(path).map_err(|e| io("write", e.error))?;
    Ok(())
}

/// Where [`save`] put a seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedSeed {
    /// The file.
    pub path: PathBuf,
    /// Whether an identical seed was already there.
    pub already: bool,
}

mod strict;
/// A file's `version` as the file holds it (`9`, `"2" (not a number)`, `(none)`), for errors:
/// never a number it does not hold.
pub fn version_as_held(value: &serde_json::Value) -> String {
    match value.get("version") {
        Some(v) if v.as_u64().is_some() => v.to_string(),
        None => "(none)".to_string(),
        Some(other) => format!("{other} (not a number)"),
    }
}

#[cfg(test)]
mod tests;
