//! [`to_finding`]: one [`Record`] to a cudafuzz [`Finding`], with [`FindingContext`] saying
//! which run it came from. It exists because the XML has no "nearest allocation" line: the
//! address is mapped to a tensor (and a place in or around it) with the arena's own
//! [`AllocationTable`], so a sanitizer finding names a tensor and a [`Location`] the way the
//! crate's own oracles do.

use crate::core::finding::{Finding, FindingKind, Location, Oracle};
use crate::engine::arena::{AllocationTable, Located};

use super::record::{Frame, RaceAccess, Record, RecordKind};

/// What [`to_finding`] needs to know about the run a record came from.
#[derive(Clone, Copy, Debug)]
pub struct FindingContext<'a> {
    /// Kernel label for findings (`name[BLOCK_M=64]`).
    pub kernel: &'a str,
    /// Alignment of the tensors the case laid out (see [`crate::core::plan::Plan::alignments`]).
    pub alignment: &'a [(String, u64)],
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
    let kind = finding_kind(&record.kind, oracle);
    // Only global addresses are device pointers into the case's allocations; shared and local
    // addresses are offsets in another space.
    let global = record.memory_space().is_none_or(|s| s.contains("global"));
    let located = record.address.filter(|_| global).and_then(|a| ctx.table.and_then(|t| t.locate(a)));
    let (tensor, location) = match &located {
        Some(l) => (Some(l.holder.clone()), Some(l.location.clone())),
        None => (None, None),
    };
    let user = record.user_frame();
    let detail = detail(record, located.as_ref(), user);

    let cuda_error = match (&record.kind, &record.error) {
        (RecordKind::Api, Some(e)) => Some(match record.result {
            Some(code) => format!("{e} ({code})"),
            None => e.clone(),
        }),
        _ => None,
    };
    Finding {
        tensor,
        location,
        count: record.hazards.unwrap_or(1).max(1),
        cuda_error,
        source: user.and_then(Frame::source_location),
        other_access: other_access(record),
        access_size: record.size,
        sanitizer_kind: Some(record.tool_kind()),
        alignment: ctx.alignment.to_vec(),
        inside_contract: ctx.inside_contract,
        ..Finding::new(kind, oracle, ctx.kernel, detail)
    }
}

/// A race's second access (`<destination>`), when both of its accesses have a line: with the
/// first (the finding's `source`) it is the pair of lines a race is keyed by.
fn other_access(record: &Record) -> Option<crate::core::finding::SourceLocation> {
    if record.kind != RecordKind::Analysis {
        return None;
    }
    let frame = |a: &Option<RaceAccess>| a.as_ref().and_then(|a| a.frame.as_ref()).and_then(Frame::source_location);
    frame(&record.source).and(frame(&record.destination))
}

/// Functions of the frameworks a Python target calls into: PyTorch's ATen and c10 kernels (as
/// compute-sanitizer names them, demangled or not), the attention kernels PyTorch ships (its
/// FlashAttention copy, its memory-efficient CUTLASS kernels) and calls in cuDNN (SDPA's cuDNN
/// backend), and the kernels CuPy generates.
const FRAMEWORK_FUNCTIONS: [&str; 9] = ["at::", "c10::", "_ZN2at", "_ZN3c10", "pytorch_flash::", "_ZN13pytorch_flash", "fmha_cutlass", "cudnn_", "cupy_"];

/// Whether `record` comes from a Python target's framework rather than the code under test: a
/// function of it is PyTorch's, cuDNN's or CuPy's (`FRAMEWORK_FUNCTIONS`), no frame of it lies under `user_code` (the
/// manifest's folder, where the target's module, extension sources and Triton kernels live), and
/// its address, if any, is outside every allocation of the case (`table`). Without a table
/// nothing can be said: `false`. A kernel of the user's that is not under the manifest's folder
/// keeps its records as findings: only what is known to be the framework's becomes a note.
pub fn is_framework_record(record: &Record, table: Option<&AllocationTable>, user_code: &std::path::Path) -> bool {
    let Some(table) = table else { return false };
    let inside_roster = record.address.is_some_and(|a| table.entries.iter().any(|(base, l)| a >= *base && a < base + l.total_bytes()));
    let global = record.memory_space().is_none_or(|s| s.contains("global"));
    if inside_roster && global {
        return false;
    }
    // A manifest in the working directory has an empty folder, which every path starts with.
    let user_code = if user_code.as_os_str().is_empty() { std::path::Path::new(".") } else { user_code };
    let user = std::fs::canonicalize(user_code).unwrap_or_else(|_| user_code.to_path_buf());
    let race = [&record.source, &record.destination].into_iter().flatten().filter_map(|a| a.frame.as_ref());
    let frames: Vec<&Frame> = record.at.iter().chain(record.device_stack.iter()).chain(race).collect();
    let under_user = |p: &str| std::path::Path::new(p).starts_with(&user);
    // A demangled kernel name starts with its return type (`void at::native::...`).
    let framework = |f: &str| FRAMEWORK_FUNCTIONS.iter().any(|prefix| f.strip_prefix("void ").unwrap_or(f).starts_with(prefix));
    frames.iter().any(|f| f.func.as_deref().is_some_and(framework)) && !frames.iter().any(|f| f.path.as_deref().is_some_and(under_user))
}

/// A framework record as a note: what happened and in which function.
pub fn framework_note(record: &Record) -> String {
    let what = headline(record);
    let what = if what.is_empty() { format!("{} record", record.kind) } else { what };
    let func = record.user_frame().and_then(|f| f.func.as_deref()).unwrap_or("a function without line info");
    format!("a sanitizer record from the framework's own code, outside the case's tensors (not a finding): {what} in {func}")
}

/// The finding kind of a record's kind; a kind this version does not know takes the one of the
/// tool that wrote it (`oracle`).
fn finding_kind(kind: &RecordKind, oracle: Oracle) -> FindingKind {
    match kind {
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
    }
}

/// The finding's detail sentence: what happened ([`headline`]), where in memory (`located`, or
/// the bare address), where in the code (`user`, and `<where>` when that differs), and which
/// thread and block.
fn detail(record: &Record, located: Option<&Located>, user: Option<&Frame>) -> String {
    let mut detail = headline(record);
    if detail.is_empty() {
        detail = format!("{} record", record.kind);
    }
    match (located, record.address) {
        (Some(l), _) => detail.push_str(&format!(" at {}: {}", l.holder, location_phrase(&l.location))),
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
    detail
}

/// What happened, by kind: memcheck's access (`Invalid __global__ read of size 4 bytes (out of
/// bounds)`), racecheck's two accesses and hazard count, synccheck's barrier type; otherwise the
/// tool's text. Empty when the record has no text to go on.
fn headline(record: &Record) -> String {
    match &record.kind {
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
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::parsed;
    use super::*;
    use crate::core::plan::Plan;
    use crate::engine::arena::ArenaLayout;
    use crate::testing;

    /// q, k, v, o of the attention example at well-separated device addresses, as the arena test
    /// does.
    fn table() -> AllocationTable {
        let case = testing::example();
        let plan = Plan::new(&case, &testing::attention()).unwrap();
        let arena = ArenaLayout::new(&case, &plan);
        let mut base = 0x7f22_bc80_0000u64;
        let mut entries = Vec::new();
        for a in &arena.allocs {
            entries.push((base, a.clone()));
            base += a.total_bytes().next_multiple_of(512) + 512;
        }
        AllocationTable { entries, plans: plan.tensors.clone() }
    }

    fn ctx<'a>(table: Option<&'a AllocationTable>, alignment: &'a [(String, u64)], tool: Oracle) -> FindingContext<'a> {
        FindingContext { kernel: "probe[BLOCK_M=64]", alignment, inside_contract: true, table, tool }
    }

    #[test]
    fn an_overrun_maps_to_the_tensor_it_ran_past() {
        let table = table();
        let al = testing::alignment([16; 4]);
        let (kbase, k) = &table.entries[1];
        let last_byte = kbase + k.data_offset + k.span_bytes - 1;
        let p = parsed("memcheck-oob.xml");
        let mut r = p.findings().next().unwrap().clone();
        r.address = Some(last_byte + 4);
        r.thread = Some([3, 0, 0]);
        let f = to_finding(&r, &ctx(Some(&table), &al, Oracle::Memcheck));
        assert_eq!((f.kind, f.oracle), (FindingKind::SanitizerMemory, Oracle::Memcheck));
        assert_eq!(f.tensor, Some("k".into()));
        assert_eq!(f.location, Some(Location::RedzoneAfter { bytes_past_end: 4 }));
        assert_eq!(
            f.detail,
            "Invalid __global__ read of size 4 bytes (out of bounds) at k: 4 bytes past its last byte, \
             sanitizer_probe.cu:17 in oob_read, thread (3,0,0) block (0,0,0)"
        );
        let src = f.source.clone().unwrap();
        assert_eq!((src.file.as_str(), src.line, src.function.as_deref()), ("sanitizer_probe.cu", 17, Some("oob_read")));
        assert_eq!((f.access_size, f.sanitizer_kind.as_ref().map(|k| k.to_string())), (Some(4), Some("invalid_global_read_out_of_bounds".to_string())));
        assert_eq!(f.count, 1);
        assert_eq!(f.signature().as_str(), "sanitizer_memory/memcheck/probe[BLOCK_M=64]/k/invalid_global_read_out_of_bounds/sanitizer_probe.cu:17/4B/aligned");
        // Another thread further past the end is the same bug; a first element is located too.
        let mut r2 = r.clone();
        r2.address = Some(last_byte + 100);
        r2.thread = Some([27, 0, 0]);
        assert_eq!(to_finding(&r2, &ctx(Some(&table), &al, Oracle::Memcheck)).signature(), f.signature());
        r2.address = Some(kbase + k.data_offset);
        assert_eq!(to_finding(&r2, &ctx(Some(&table), &al, Oracle::Memcheck)).location, Some(Location::Element { index: vec![0; 4] }));
        // Alignment is part of the key, as for faults.
        let mut c = ctx(Some(&table), &al, Oracle::Memcheck);
        let unaligned_k = testing::alignment([16, 4, 16, 16]);
        c.alignment = &unaligned_k;
        assert!(to_finding(&r, &c).signature().as_str().ends_with("/unaligned:k"));
        // Every allocation is a named tensor: one byte past o is o's.
        let (obase, o) = &table.entries[3];
        r2.address = Some(obase + o.data_offset + o.span_bytes);
        let fo = to_finding(&r2, &ctx(Some(&table), &al, Oracle::Memcheck));
        assert_eq!((fo.tensor.as_deref(), fo.location.as_ref()), (Some("o"), Some(&Location::RedzoneAfter { bytes_past_end: 1 })));
        assert!(fo.detail.contains("at o: 1 bytes past its last byte"), "{}", fo.detail);
        // Without a table the address is reported as is.
        let fa = to_finding(&r, &ctx(None, &al, Oracle::Memcheck));
        assert_eq!(fa.tensor, None);
        assert!(fa.detail.contains(&format!("at address {:#x}", last_byte + 4)), "{}", fa.detail);
    }

    #[test]
    fn a_frameworks_record_outside_the_roster_is_a_note_and_user_code_or_roster_memory_is_not() {
        let table = table();
        let p = parsed("memcheck-oob.xml");
        let mut r = p.findings().next().unwrap().clone();
        let (kbase, k) = &table.entries[1];
        let far = table.entries.iter().map(|(b, l)| b + l.total_bytes()).max().unwrap() + (1 << 20);
        let frame_dir = std::path::Path::new(r.at.as_ref().unwrap().path.as_deref().unwrap()).parent().unwrap().to_path_buf();
        let elsewhere = std::path::Path::new("/nonexistent/user/kernels");
        // A kernel of the user's outside the manifest's folder, past every allocation: a finding
        // (only what is known to be the framework's is a note).
        r.address = Some(far);
        assert!(!is_framework_record(&r, Some(&table), elsewhere));
        // PyTorch's own kernel, outside every allocation: a note.
        r.at.as_mut().unwrap().func = Some("void at::native::vectorized_elementwise_kernel<4>(int)".into());
        assert!(is_framework_record(&r, Some(&table), elsewhere));
        assert!(framework_note(&r).contains("not a finding") && framework_note(&r).contains("at::native"), "{}", framework_note(&r));
        // SDPA's cuDNN and FlashAttention kernels (seen under memcheck on an H200, torch 2.11).
        for func in [
            "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x256_1x4x1_cga1x1x1_kernel0_0",
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<256, 128, 64, 8, false, false, cutlass::half_t>>(pytorch_flash::Flash_fwd_params)",
        ] {
            r.at.as_mut().unwrap().func = Some(func.into());
            assert!(is_framework_record(&r, Some(&table), elsewhere), "{func}");
        }
        // The same access from a kernel under the manifest's folder (a Triton kernel writing past
        // a tensor it allocated): a finding.
        assert!(!is_framework_record(&r, Some(&table), &frame_dir));
        // Inside the roster's memory, whoever made it: a finding.
        r.address = Some(kbase + k.data_offset);
        assert!(!is_framework_record(&r, Some(&table), elsewhere));
        // Without the case's allocations nothing can be said: a finding.
        r.address = Some(far);
        assert!(!is_framework_record(&r, None, elsewhere));
    }

    #[test]
    fn races_barriers_uninit_and_api_records_become_findings() {
        let table = table();
        let al = testing::alignment([16; 4]);
        let race = &parsed("racecheck-race.xml").records[0];
        let f = to_finding(race, &ctx(Some(&table), &al, Oracle::Racecheck));
        assert_eq!((f.kind, f.oracle, f.tensor.clone(), f.count), (FindingKind::Race, Oracle::Racecheck, None, 256));
        assert_eq!(f.source.as_ref().map(|s| s.line), Some(22));
        assert_eq!(f.other_access.as_ref().map(|s| (s.file.as_str(), s.line)), Some(("sanitizer_probe.cu", 24)));
        assert_eq!(
            f.detail,
            "Race condition between Write at sanitizer_probe.cu:22 in shared_race and Read at sanitizer_probe.cu:24 in shared_race (256 hazards)"
        );
        assert_eq!(f.signature().as_str(), "race/racecheck/probe[BLOCK_M=64]/-/race_shared_write_read/sanitizer_probe.cu:22/-/aligned");

        let sync = &parsed("synccheck-sync.xml").records[0];
        let f = to_finding(sync, &ctx(Some(&table), &al, Oracle::Synccheck));
        assert_eq!((f.kind, f.tensor.clone()), (FindingKind::BarrierError, None));
        assert_eq!(f.source.as_ref().map(|s| (s.line, s.function.as_deref())), Some((33, Some("bad_syncwarp"))));
        assert!(
            f.detail
                .starts_with("Barrier error (Invalid arguments), sanitizer_probe.cu:33 in bad_syncwarp (via sm_30_intrinsics.hpp:110 in __syncwarp), thread ("),
            "{}",
            f.detail
        );

        let uninit = &parsed("initcheck-uninit.xml").records[0];
        let f = to_finding(uninit, &ctx(None, &al, Oracle::Initcheck));
        assert_eq!((f.kind, f.oracle, f.access_size), (FindingKind::UninitializedRead, Oracle::Initcheck, Some(4)));
        assert!(f.signature().as_str().contains("/uninitialized_global_read/sanitizer_probe.cu:28/4B/"));

        let api = &parsed("memcheck-oob.xml").records[0];
        let f = to_finding(api, &ctx(None, &al, Oracle::Memcheck));
        assert_eq!((f.kind, f.oracle), (FindingKind::SanitizerApi, Oracle::Memcheck));
        assert_eq!(f.cuda_error.as_deref(), Some("cudaErrorInvalidValue (1)"));
        assert_eq!(f.source, None);
    }
}
