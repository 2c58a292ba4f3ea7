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
//!
//! The module is split by job: `record` holds the record model ([`Record`], [`RecordKind`],
//! [`Frame`], [`RaceAccess`]) and the queries on it; `parse` the parser ([`parse`],
//! [`parse_file`], [`Parsed`]), its salvage of a cut-off file, and [`XmlError`]; `finding` the
//! turning of one record into a [`Finding`] ([`to_finding`], [`FindingContext`]).
//!
//! [`parse`]: parse()
//! [`Finding`]: crate::core::finding::Finding
//! [`AllocationTable`]: crate::engine::arena::AllocationTable

mod finding;
mod parse;
mod record;

pub use finding::{framework_note, is_framework_record, to_finding, FindingContext};
pub use parse::{parse, parse_file, Parsed, XmlError, ROOT};
pub use record::{Frame, RaceAccess, Record, RecordKind};

/// The fixture files every submodule's tests read.
#[cfg(test)]
mod testing {
    use std::path::Path;

    use super::{parse, Parsed};

    pub(super) fn fixture(name: &str) -> String {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sanitizer")).join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    pub(super) fn parsed(name: &str) -> Parsed {
        let p = parse(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.truncated, None, "{name}");
        p
    }
}
