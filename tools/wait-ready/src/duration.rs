//! `--timeout 15m`: a whole number of seconds, minutes or hours (`90`, `90s`, `15m`, `1h`).

use std::time::Duration;

/// The longest timeout taken: a week.
const MAX_SECONDS: u64 = 7 * 24 * 3600;

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("`{text}` is not a duration such as 90s, 15m or 1h");
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        _ => None,
    }
    .ok_or_else(bad)?;
    if seconds == 0 {
        return Err(format!("`{text}`: the timeout must be more than zero"));
    }
    // A deadline is the start plus the timeout: it must be a time the clock can hold.
    if seconds > MAX_SECONDS {
        return Err(format!(
            "`{text}`: the timeout must be at most 168h (a week)"
        ));
    }
    Ok(Duration::from_secs(seconds))
}

/// `95s` → `1m35s`, for messages.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 60, s % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn units_and_refusals() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(
            parse_duration("168h").unwrap(),
            Duration::from_secs(604_800)
        );
        for bad in [
            "",
            "m",
            "15 m",
            "1.5m",
            "3d",
            "-1s",
            "0s",
            "169h",
            "18446744073709551615",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(human(Duration::from_secs(95)), "1m35s");
        assert_eq!(human(Duration::from_secs(2)), "2s");
        assert_eq!(human(Duration::from_secs(120)), "2m");
    }
}
