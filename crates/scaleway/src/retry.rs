//! Retries: how hard ([`RetryPolicy`]), and the one loop that sends again what may be sent again
//! ([`retrying`]), for the API client and Object Storage alike.

use std::fmt;
use std::time::Duration;

use pop_common::wait::Sleeper;

use crate::http::{HttpResponse, TransportError};

/// How hard to retry a 429, a 5xx or a cut connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (the first included).
    pub attempts: u32,
    /// The first backoff; doubled at each retry.
    pub base: Duration,
    /// No single wait is longer, `Retry-After` included.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 6,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0 for the first): full jitter over the upper half of
    /// the exponential step, never less than `Retry-After`, never more than the cap.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, random: u64) -> Duration {
        let step = self
            .base
            .saturating_mul(1u32.checked_shl(retry.min(20)).unwrap_or(u32::MAX))
            .min(self.cap);
        let half = step / 2;
        let spread = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
        let jitter = Duration::from_millis(if spread == 0 {
            0
        } else {
            random % (spread + 1)
        });
        let backoff = half + jitter;
        retry_after
            .map_or(backoff, |ra| ra.max(backoff))
            .min(self.cap)
    }
}

/// Sends with `send` (given the retry's number, 0 for the first attempt) until an outcome is
/// final, and returns it with the number of attempts: a 429 or an answer `transient` describes
/// (refusals: nothing was done), and, when the call is `repeatable` (idempotent), a 5xx or a cut
/// connection, is sent again after a backoff that honours `Retry-After`, at most
/// `policy.attempts` times in all, each wait said on stderr under `label`. The one retry loop of
/// the API client and of Object Storage.
pub(crate) fn retrying(
    policy: &RetryPolicy,
    sleeper: &dyn Sleeper,
    label: &dyn fmt::Display,
    repeatable: bool,
    transient: impl Fn(&HttpResponse) -> Option<String>,
    mut send: impl FnMut(u32) -> Result<HttpResponse, TransportError>,
) -> (Result<HttpResponse, TransportError>, u32) {
    let mut retry = 0;
    loop {
        let outcome = send(retry);
        let again = match &outcome {
            Ok(response) if response.status < 300 => None,
            Ok(response) if response.status == 429 || (repeatable && response.status >= 500) => {
                let retry_after = response
                    .header("retry-after")
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                Some((format!("HTTP {}", response.status), retry_after))
            }
            Ok(response) => transient(response).map(|why| (why, None)),
            // A name that does not resolve is not retried: nothing was sent, and a wrong name or
            // a machine without DNS stays so for longer than the backoff.
            Err(error) if repeatable && error.retryable() => Some((error.to_string(), None)),
            Err(_) => None,
        };
        match again {
            Some((why, retry_after)) if retry + 1 < policy.attempts => {
                let wait = policy.delay(retry, retry_after, random());
                pop_common::warn!("{label}: {why}; retrying in {} ms", wait.as_millis());
                sleeper.sleep(wait);
                retry += 1;
            }
            _ => return (outcome, retry + 1),
        }
    }
}

pub(crate) fn random() -> u64 {
    getrandom::u64().unwrap_or(0)
}
