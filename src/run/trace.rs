//! `CUDAFUZZ_TRACE=FILE`: a timeline of a campaign, one JSON line per event, appended to FILE,
//! for finding where its time goes. Every line carries `ms`, milliseconds since the campaign
//! started; case lines (`"case"`) come from the campaign as it files each result, and the
//! supervisors and the escalator add theirs (`"event"`: a worker ready, a re-run begun or
//! ended, a finding shown) from their own threads.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The open trace and the instant its clock counts from.
static TRACE: Mutex<Option<(Instant, std::io::BufWriter<std::fs::File>)>> = Mutex::new(None);
/// Whether [`TRACE`] is open: read for every case, so without the lock.
static ON: AtomicBool = AtomicBool::new(false);

/// Opens the trace `CUDAFUZZ_TRACE` names, its clock starting at `started`; without the
/// variable nothing is traced. A file that cannot be opened is said once, and the campaign runs
/// untraced.
pub fn start(started: Instant) {
    let Some(path) = std::env::var_os("CUDAFUZZ_TRACE") else { return };
    let opened = std::fs::OpenOptions::new().create(true).append(true).open(&path);
    let mut trace = TRACE.lock().unwrap_or_else(|e| e.into_inner());
    match opened {
        Ok(f) => {
            *trace = Some((started, std::io::BufWriter::new(f)));
            ON.store(true, Ordering::SeqCst);
        }
        Err(e) => {
            // A closed stderr must not panic a run over a diagnostic.
            let _ = writeln!(std::io::stderr(), "cudafuzz: CUDAFUZZ_TRACE={}: cannot open: {e}; the campaign is not traced", path.to_string_lossy());
        }
    }
}

/// Whether a trace is open (callers skip building lines otherwise).
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Milliseconds from the trace's start to `at` (0 before it).
pub fn ms(at: Instant) -> u64 {
    let trace = TRACE.lock().unwrap_or_else(|e| e.into_inner());
    trace.as_ref().map_or(0, |(started, _)| at.saturating_duration_since(*started).as_millis() as u64)
}

/// Appends `fields` (a JSON object) with `ms` set to now; nothing when no trace is open.
pub fn line(mut fields: serde_json::Value) {
    let mut trace = TRACE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((started, w)) = trace.as_mut() {
        if let Some(map) = fields.as_object_mut() {
            map.insert("ms".into(), (started.elapsed().as_millis() as u64).into());
        }
        let _ = writeln!(w, "{fields}");
    }
}

/// Flushes and closes the trace at the campaign's end.
pub fn stop() {
    let mut trace = TRACE.lock().unwrap_or_else(|e| e.into_inner());
    ON.store(false, Ordering::SeqCst);
    if let Some((_, mut w)) = trace.take() {
        let _ = w.flush();
    }
}
