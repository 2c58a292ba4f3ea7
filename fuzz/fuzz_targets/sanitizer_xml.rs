//! Host target: reading arbitrary text as compute-sanitizer XML returns records or a clear error,
//! never a panic, and every record it returns can be turned into a finding.
#![no_main]

use cudafuzz::core::finding::Oracle;
use cudafuzz::run::sanitizer::xml::{parse, to_finding, FindingContext};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match parse(text) {
        Ok(parsed) => {
            let alignment: Vec<(String, u64)> = ["q", "k", "v", "o"].iter().map(|t| (t.to_string(), 16)).collect();
            let ctx = FindingContext { kernel: "fuzz", alignment: &alignment, inside_contract: true, table: None, tool: Oracle::Memcheck };
            for record in &parsed.records {
                let _ = record.user_frame();
                let finding = to_finding(record, &ctx);
                let _ = finding.signature();
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
