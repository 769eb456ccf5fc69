//! Waiting on something outside the process (a server changing state, an SSH daemon booting, a
//! node leaving maintenance mode): the clock is the one outside dependency every tool shares, so
//! it is a narrow trait ([`Sleeper`]) handed in as `&dyn Sleeper`, as every other outside
//! dependency of the tools is (a transport, an API): tests hand in one that only counts.
//!
//! [`Poll`] is the one bounded loop: at most `tries` looks, `interval` apart.

use std::time::Duration;

/// Waits between two looks; tests inject one that does not sleep.
pub trait Sleeper: std::fmt::Debug {
    fn sleep(&self, duration: Duration);
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadSleeper;

impl Sleeper for ThreadSleeper {
    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// How many looks, and how far apart. Bounded by the count of looks, not by a clock, so that a
/// sleeper that does not sleep still stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Poll {
    /// Looks in all (at least one is always made).
    pub tries: u32,
    pub interval: Duration,
}

/// No wait is counted in more looks than this, however small the interval.
const MAX_TRIES: u32 = 100_000;

impl Poll {
    /// Looks every `interval` for as long as `limit`: one look now, then one after each interval
    /// that fits in it (an interval of zero counts as a millisecond).
    pub fn within(limit: Duration, interval: Duration) -> Poll {
        let step = interval.max(Duration::from_millis(1)).as_millis();
        let fits = (limit.as_millis() / step).min(u128::from(MAX_TRIES));
        Poll {
            tries: u32::try_from(fits).unwrap_or(MAX_TRIES).saturating_add(1),
            interval,
        }
    }

    /// The whole bound, for messages: `tries - 1` intervals.
    pub fn span(&self) -> Duration {
        self.interval.saturating_mul(self.tries.saturating_sub(1))
    }

    /// Calls `look` with the attempt's number (from 1) until it gives a value, sleeping
    /// `interval` between two looks (never after the last); `Ok(None)` once every try is spent.
    /// An error from `look` ends the wait at once.
    pub fn until<T, E>(
        &self,
        sleeper: &dyn Sleeper,
        mut look: impl FnMut(u32) -> Result<Option<T>, E>,
    ) -> Result<Option<T>, E> {
        let tries = self.tries.max(1);
        for attempt in 1..=tries {
            if let Some(found) = look(attempt)? {
                return Ok(Some(found));
            }
            if attempt < tries {
                sleeper.sleep(self.interval);
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::cell::RefCell;

    #[derive(Debug, Default)]
    struct Counted(RefCell<Vec<Duration>>);
    impl Sleeper for Counted {
        fn sleep(&self, duration: Duration) {
            self.0.borrow_mut().push(duration);
        }
    }

    #[test]
    fn a_value_ends_the_wait_and_no_sleep_follows_the_last_look() {
        let sleeps = Counted::default();
        let poll = Poll {
            tries: 5,
            interval: Duration::from_secs(2),
        };
        let found: Result<Option<u32>, ()> = poll.until(&sleeps, |n| Ok((n == 3).then_some(n)));
        assert_eq!(found, Ok(Some(3)));
        assert_eq!(sleeps.0.borrow().len(), 2);
        let never: Result<Option<u32>, ()> = poll.until(&sleeps, |_| Ok(None));
        assert_eq!(never, Ok(None));
        assert_eq!(sleeps.0.borrow().len(), 2 + 4, "4 sleeps between 5 looks");
        let failed: Result<Option<u32>, &str> = poll.until(&sleeps, |_| Err("gone"));
        assert_eq!(failed, Err("gone"));
    }

    #[test]
    fn within_counts_the_intervals_that_fit_and_is_bounded() {
        let p = Poll::within(Duration::from_secs(60), Duration::from_secs(10));
        assert_eq!(p.tries, 7);
        assert_eq!(p.span(), Duration::from_secs(60));
        assert_eq!(
            Poll::within(Duration::ZERO, Duration::from_secs(10)).tries,
            1
        );
        let zero = Poll::within(Duration::from_secs(3600), Duration::ZERO);
        assert_eq!(zero.tries, MAX_TRIES + 1);
    }
}
