//! Splitting one sanitizer process's records among the cases it ran, at the markers.

use super::xml::Record;
use super::Tool;
use crate::engine::marker::MARKER_KERNEL_PREFIX;

/// Whether `record` is one of the harness's markers for `tool`.
pub fn is_marker(record: &Record, tool: Tool) -> bool {
    match tool {
        Tool::Memcheck => record.is_marker("cuMemFree") && record.error.as_deref() == Some("CUDA_ERROR_INVALID_VALUE"),
        _ => record_functions(record).any(|f| f.starts_with(MARKER_KERNEL_PREFIX)),
    }
}

/// Every function name a record mentions (where, device stack, race source and destination).
pub fn record_functions(record: &Record) -> impl Iterator<Item = &str> {
    let race = [&record.source, &record.destination].into_iter().flatten().filter_map(|a| a.frame.as_ref());
    record.at.iter().chain(record.device_stack.iter()).chain(race).filter_map(|f| f.func.as_deref())
}

/// The records of one process, per case.
#[derive(Debug, Default)]
pub struct Attribution {
    /// `per_case[j]`: the records after the j-th marker (the j-th case the process ran).
    pub per_case: Vec<Vec<Record>>,
    /// Records before the first marker (worker start-up: nothing of a case).
    pub before_first: Vec<Record>,
    /// Markers found (cases whose records are known); fewer than the cases sent means the
    /// process ended early.
    pub markers: usize,
    /// Why the records could not be attributed, when they could not.
    pub unattributable: Option<String>,
}

/// Splits `records` (in file order) for `cases` cases at `tool`'s markers. Records after a
/// marker beyond the last case (should not happen) go to the last case.
///
/// synccheck has no markers: its errors abort the kernel, so when the process ended with a fault
/// (`ended_by_fault`) its records are the last case's; records of a process that ended normally
/// cannot be attributed.
pub fn split(records: Vec<Record>, tool: Tool, cases: usize, ended_by_fault: bool) -> Attribution {
    let mut a = Attribution { per_case: vec![Vec::new(); cases], ..Attribution::default() };
    if cases == 1 {
        // A process of one case: every record but the markers is that case's.
        a.markers = 1;
        a.per_case[0] = records.into_iter().filter(|r| !is_marker(r, tool)).collect();
        return a;
    }
    if tool == Tool::Synccheck {
        a.markers = cases;
        let records: Vec<Record> = records.into_iter().filter(|r| !r.is_api()).collect();
        if records.is_empty() || cases == 0 {
            return a;
        }
        if ended_by_fault {
            a.per_case[cases - 1] = records;
        } else {
            a.markers = 0;
            a.unattributable = Some(format!(
                "synccheck reported {} record(s) in a process that did not end with a fault, so they cannot be tied to one of its {cases} cases; rerun with --sanitize-batch 1",
                records.len()
            ));
        }
        return a;
    }
    for r in records {
        if is_marker(&r, tool) {
            a.markers += 1;
            continue;
        }
        match a.markers.checked_sub(1) {
            None => a.before_first.push(r),
            Some(j) if cases > 0 => a.per_case[j.min(cases - 1)].push(r),
            Some(_) => a.before_first.push(r),
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::sanitizer::xml;

    fn fixture(name: &str) -> Vec<Record> {
        let path = format!("{}/tests/fixtures/sanitizer/{name}", env!("CARGO_MANIFEST_DIR"));
        xml::parse_file(std::path::Path::new(&path)).unwrap().records
    }

    #[test]
    fn memcheck_records_fall_between_api_error_markers() {
        // The probe marks: start, after a clean kernel, after the planted overrun, end. Its
        // runtime cudaFree(0x10) markers fail with cudaErrorInvalidValue, its driver cuMemFree
        // markers with CUDA_ERROR_INVALID_VALUE: only the latter count, as in the worker.
        let a = split(fixture("memcheck-oob.xml"), Tool::Memcheck, 4, true);
        assert_eq!(a.markers, 2, "after the overrun the context is poisoned: later frees fail with 719");
        assert!(a.per_case[0].iter().all(|r| r.is_api()), "the clean kernel has no findings");
        assert_eq!(a.per_case[1].iter().filter(|r| !r.is_api()).count(), 32, "the overrun's 32 reads");
        let clean = split(fixture("memcheck-clean.xml"), Tool::Memcheck, 4, false);
        assert_eq!(clean.markers, 4);
        assert!(clean.per_case.iter().flatten().all(|r| r.is_api()));
    }

    #[test]
    fn a_single_case_owns_every_record_marker_or_not() {
        let a = split(fixture("racecheck-race.xml"), Tool::Racecheck, 1, false);
        assert_eq!((a.markers, a.per_case[0].len()), (1, 1));
    }

    #[test]
    fn records_before_the_first_marker_belong_to_no_case() {
        let records = fixture("racecheck-race.xml");
        let a = split(records, Tool::Racecheck, 3, false);
        assert_eq!((a.markers, a.before_first.len()), (0, 1));
        assert!(a.per_case.iter().all(Vec::is_empty));
    }

    #[test]
    fn kernel_markers_split_races_per_case() {
        let race = fixture("racecheck-race.xml").remove(0);
        let mut marker = race.clone();
        for access in [&mut marker.source, &mut marker.destination].into_iter().flatten() {
            if let Some(f) = access.frame.as_mut() {
                f.func = Some("cudafuzz_marker_racecheck".into());
            }
        }
        // marker, case 0 clean; marker, case 1 races twice; marker, case 2 clean.
        let stream = vec![marker.clone(), marker.clone(), race.clone(), race.clone(), marker.clone()];
        let a = split(stream, Tool::Racecheck, 3, false);
        assert_eq!(a.markers, 3);
        assert_eq!(a.per_case.iter().map(Vec::len).collect::<Vec<_>>(), vec![0, 2, 0]);
    }

    #[test]
    fn synccheck_records_belong_to_the_case_that_ended_the_process() {
        let a = split(fixture("synccheck-sync.xml"), Tool::Synccheck, 5, true);
        assert_eq!((a.markers, a.per_case[4].len()), (5, 32));
        assert!(a.per_case[..4].iter().all(Vec::is_empty));
        let b = split(fixture("synccheck-sync.xml"), Tool::Synccheck, 5, false);
        assert_eq!(b.markers, 0);
        assert!(b.unattributable.unwrap().contains("--sanitize-batch 1"));
        let clean = split(fixture("synccheck-clean.xml"), Tool::Synccheck, 5, false);
        assert_eq!((clean.markers, clean.unattributable), (5, None));
    }
}
