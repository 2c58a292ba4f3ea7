//! Splitting one sanitizer process's records among the cases it ran, at the markers.

use super::marker::is_marker;
use super::xml::Record;
use super::Tool;

/// The records of one process, per case.
#[derive(Debug, Default)]
pub struct Attribution {
    /// `per_case[j]`: the records after the j-th marker (the j-th case the process ran).
    pub per_case: Vec<Vec<Record>>,
    /// Records before the first marker (worker start-up: nothing of a case).
    pub before_first: Vec<Record>,
    /// Markers found; fewer than the cases sent means the process ended early.
    pub markers: usize,
}

/// Splits `records` (in file order) for `cases` cases at `tool`'s markers. Records after a
/// marker beyond the last case (should not happen) go to the last case.
pub fn split(records: Vec<Record>, tool: Tool, cases: usize) -> Attribution {
    let mut a = Attribution { per_case: vec![Vec::new(); cases], ..Attribution::default() };
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
    use crate::sanitizer::xml;

    fn fixture(name: &str) -> Vec<Record> {
        let path = format!("{}/tests/fixtures/sanitizer/{name}", env!("CARGO_MANIFEST_DIR"));
        xml::parse_file(std::path::Path::new(&path)).unwrap().records
    }

    #[test]
    fn memcheck_records_fall_between_api_error_markers() {
        // The probe marks: start, after a clean kernel, after the planted overrun, end. Its
        // runtime cudaFree(0x10) markers fail with cudaErrorInvalidValue, its driver cuMemFree
        // markers with CUDA_ERROR_INVALID_VALUE: only the latter count, as in the worker.
        let a = split(fixture("memcheck-oob.xml"), Tool::Memcheck, 4);
        assert_eq!(a.markers, 2, "after the overrun the context is poisoned: later frees fail with 719");
        assert!(a.per_case[0].iter().all(|r| r.is_api()), "the clean kernel has no findings");
        assert_eq!(a.per_case[1].iter().filter(|r| !r.is_api()).count(), 32, "the overrun's 32 reads");
        let clean = split(fixture("memcheck-clean.xml"), Tool::Memcheck, 4);
        assert_eq!(clean.markers, 4);
        assert!(clean.per_case.iter().flatten().all(|r| r.is_api()));
    }

    #[test]
    fn records_before_the_first_marker_belong_to_no_case() {
        let records = fixture("racecheck-race.xml");
        let a = split(records, Tool::Racecheck, 3);
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
        let a = split(stream, Tool::Racecheck, 3);
        assert_eq!(a.markers, 3);
        assert_eq!(a.per_case.iter().map(Vec::len).collect::<Vec<_>>(), vec![0, 2, 0]);
    }
}
