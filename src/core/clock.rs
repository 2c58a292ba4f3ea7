//! Deadlines from durations a user gave (`--time`, `--budget`, `--timeout-ms`, a manifest's
//! `timeout_ms`): `Instant + Duration` and `Duration * n` panic on overflow, and a user may well
//! ask for "forever" (`--time 18446744073709551615s`), so the arithmetic here saturates.

use std::time::{Duration, Instant};

/// About a century: what "no deadline" becomes when a requested one is past what the clock holds.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `from + d`, or as far ahead as the clock goes when that overflows.
pub fn deadline(from: Instant, d: Duration) -> Instant {
    from.checked_add(d).or_else(|| from.checked_add(FOREVER)).unwrap_or(from)
}

/// [`deadline`] from now.
pub fn deadline_in(d: Duration) -> Instant {
    deadline(Instant::now(), d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_past_the_clock_saturates() {
        let now = Instant::now();
        assert!(deadline(now, Duration::MAX) > now + Duration::from_secs(3600 * 24 * 365));
        assert_eq!(deadline(now, Duration::from_secs(5)), now + Duration::from_secs(5));
    }
}
