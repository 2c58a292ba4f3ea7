//! [`Budget`]: how a gate's time is divided between its steps. It is kept apart from the run so
//! that the arithmetic (shares, the reserve for reports, time an earlier step left over) is
//! tested on its own, without a backend or a clock.

use std::time::Duration;

/// How a gate's time is divided. The sweep may take up to `sweep_share` of the total; the
/// sanitizer passes keep `sanitizer_share` (when there are any); the fuzz campaigns split the
/// rest by weight; a small reserve is kept for writing reports. Each step's time is computed
/// when the step starts, so time an earlier step did not use goes to the later ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// The whole budget.
    pub total: Duration,
    /// Most of the total the sweep may take.
    pub sweep_share: f64,
    /// Part of the total kept for sanitizer passes.
    pub sanitizer_share: f64,
}

impl Budget {
    /// Kept at the end for writing reports: 5% of the total, at most 10 s.
    pub fn reserve(&self) -> Duration {
        (self.total / 20).min(Duration::from_secs(10))
    }

    /// Time left after `elapsed`, less the reserve.
    pub fn remaining(&self, elapsed: Duration) -> Duration {
        self.total.saturating_sub(elapsed).saturating_sub(self.reserve())
    }

    /// The sweep's time when it starts after `elapsed`.
    pub fn sweep(&self, elapsed: Duration) -> Duration {
        self.total.mul_f64(self.sweep_share).min(self.remaining(elapsed))
    }

    /// Each fuzz campaign's time, by weight, when the campaigns start after `elapsed`;
    /// `sanitizer_passes` says whether time must be kept for sanitizer passes.
    pub fn fuzz(&self, elapsed: Duration, weights: &[f64], sanitizer_passes: bool) -> Vec<Duration> {
        let keep = if sanitizer_passes { self.total.mul_f64(self.sanitizer_share) } else { Duration::ZERO };
        split(self.remaining(elapsed).saturating_sub(keep), weights)
    }

    /// One sanitizer pass's time when `passes_left` passes (this one included) remain after
    /// `elapsed`: an equal part of what is left.
    pub fn sanitizer(&self, elapsed: Duration, passes_left: usize) -> Duration {
        self.remaining(elapsed) / u32::try_from(passes_left.max(1)).unwrap_or(u32::MAX)
    }
}

/// `total` divided in proportion to `weights` (non-positive weights get nothing); the parts
/// never add up to more than `total`.
pub fn split(total: Duration, weights: &[f64]) -> Vec<Duration> {
    let sum: f64 = weights.iter().filter(|w| **w > 0.0).sum();
    weights
        .iter()
        .map(|&w| if w > 0.0 && sum > 0.0 { Duration::from_nanos((total.as_nanos() as f64 * (w / sum)).floor() as u64) } else { Duration::ZERO })
        .collect()
}

/// A budget that is not a usable duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// Not a duration at all.
    #[error("`{text}` is not a duration ({reason}): write e.g. 20m, 90s or 1h 30m")]
    NotADuration {
        /// What was given.
        text: String,
        /// What the parser said.
        reason: String,
    },
    /// Under a second.
    #[error("`{0}` is less than a second: give the gate at least a few minutes")]
    TooShort(String),
}

/// Parses a budget such as `20m`, `90s`, `1h 30m`.
pub fn parse_budget(text: &str) -> Result<Duration, BudgetError> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| BudgetError::NotADuration { text: text.to_string(), reason: e.to_string() })?;
    if d < Duration::from_secs(1) {
        return Err(BudgetError::TooShort(text.to_string()));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_split() {
        assert_eq!(split(Duration::from_secs(100), &[3.0, 1.0]), vec![Duration::from_secs(75), Duration::from_secs(25)]);
        assert_eq!(split(Duration::from_secs(10), &[1.0, 0.0, -1.0]), vec![Duration::from_secs(10), Duration::ZERO, Duration::ZERO]);
        assert_eq!(split(Duration::from_secs(10), &[]), Vec::<Duration>::new());
        let parts = split(Duration::from_millis(1000), &[1.0, 1.0, 1.0]);
        assert!(parts.iter().sum::<Duration>() <= Duration::from_millis(1000));
        assert!(parts.iter().all(|p| *p >= Duration::from_millis(333)));

        let b = Budget { total: Duration::from_secs(1200), sweep_share: 0.15, sanitizer_share: 0.2 };
        assert_eq!(b.reserve(), Duration::from_secs(10));
        assert_eq!(b.sweep(Duration::from_secs(60)), Duration::from_secs(180));
        // After 300 s: 1200 - 300 - 10 reserve - 240 for sanitizers = 650, split 1:1.
        assert_eq!(b.fuzz(Duration::from_secs(300), &[1.0, 1.0], true), vec![Duration::from_secs(325); 2]);
        assert_eq!(b.fuzz(Duration::from_secs(300), &[1.0], false), vec![Duration::from_secs(890)]);
        assert_eq!(b.sanitizer(Duration::from_secs(950), 2), Duration::from_secs(120));
        // Over budget: nothing left, never a negative or a panic.
        assert_eq!(b.fuzz(Duration::from_secs(5000), &[1.0], true), vec![Duration::ZERO]);
        assert_eq!(b.sweep(Duration::from_secs(5000)), Duration::ZERO);
        let small = Budget { total: Duration::from_secs(60), ..b };
        assert_eq!(small.reserve(), Duration::from_secs(3));
        assert_eq!(parse_budget("20m").unwrap(), Duration::from_secs(1200));
        assert_eq!(parse_budget("1h 30m").unwrap(), Duration::from_secs(5400));
        assert!(parse_budget("20").unwrap_err().to_string().contains("20m"));
        assert!(parse_budget("0s").is_err());
    }
}
