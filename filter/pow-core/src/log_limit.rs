//! The log rate limiter: repeated failures on the request path (failing open, no secret) would
//! otherwise write a line per request. At most one line per interval passes; the next line that
//! passes tells how many were suppressed in between.

/// At most one line per this many seconds, by default.
pub const DEFAULT_INTERVAL_SECS: u64 = 10;

/// One limiter per VM (the glue keeps it in a thread-local).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimiter {
    interval_secs: u64,
    /// When the last line passed (Unix seconds); `None` before the first one.
    last: Option<u64>,
    suppressed: u64,
}

impl Default for LogLimiter {
    fn default() -> LogLimiter {
        LogLimiter::new(DEFAULT_INTERVAL_SECS)
    }
}

impl LogLimiter {
    pub const fn new(interval_secs: u64) -> LogLimiter {
        LogLimiter {
            interval_secs,
            last: None,
            suppressed: 0,
        }
    }

    /// Whether a line may be written at `now_secs`: `Some(line)`, with the count of lines
    /// suppressed since the last one appended, or `None` (counted as suppressed). A clock that
    /// goes backwards never unblocks early nor blocks forever: a line passes once `now` is an
    /// interval past the last line, or earlier than the last line.
    pub fn admit(&mut self, now_secs: u64, message: &str) -> Option<String> {
        let suppressed = self.admit_count(now_secs)?;
        Some(if suppressed > 0 {
            format!("{message} ({suppressed} similar lines suppressed)")
        } else {
            message.to_owned()
        })
    }

    /// [`LogLimiter::admit`] for a line the caller makes only when it passes (a structured
    /// one carries the count itself): `Some(lines suppressed since the last one)`, or `None`.
    pub fn admit_count(&mut self, now_secs: u64) -> Option<u64> {
        if let Some(at) = self.last
            && now_secs >= at
            && now_secs < at.saturating_add(self.interval_secs)
        {
            self.suppressed = self.suppressed.saturating_add(1);
            return None;
        }
        let suppressed = self.suppressed;
        self.last = Some(now_secs);
        self.suppressed = 0;
        Some(suppressed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_then_the_count_of_the_suppressed() {
        let mut l = LogLimiter::new(10);
        assert_eq!(l.admit(100, "a").as_deref(), Some("a"));
        assert_eq!(l.admit(100, "a"), None);
        assert_eq!(l.admit(109, "a"), None);
        assert_eq!(
            l.admit(110, "b").as_deref(),
            Some("b (2 similar lines suppressed)")
        );
        assert_eq!(l.admit(111, "c"), None);
        assert_eq!(
            l.admit(500, "d").as_deref(),
            Some("d (1 similar lines suppressed)")
        );
        assert_eq!(l.admit(600, "e").as_deref(), Some("e"));
    }

    #[test]
    fn the_first_line_passes_even_at_time_zero() {
        // A host whose clock failed reports 0: the first failure must still be said.
        let mut l = LogLimiter::default();
        assert_eq!(l.admit(0, "x").as_deref(), Some("x"));
        assert_eq!(l.admit(0, "x"), None);
        assert_eq!(
            l.admit(DEFAULT_INTERVAL_SECS, "x").as_deref(),
            Some("x (1 similar lines suppressed)")
        );
    }

    #[test]
    fn a_clock_going_backwards_does_not_silence_forever() {
        let mut l = LogLimiter::new(10);
        assert!(l.admit(1_000, "x").is_some());
        assert!(l.admit(5, "x").is_some());
        assert!(l.admit(6, "x").is_none());
    }

    #[test]
    fn saturates_at_the_end_of_time() {
        // No overflow: the interval past the last line saturates at the last second.
        let mut l = LogLimiter::new(10);
        assert!(l.admit(u64::MAX - 5, "x").is_some());
        assert!(l.admit(u64::MAX - 1, "x").is_none());
        assert!(l.admit(u64::MAX, "x").is_some());
    }
}
