//! RFC 3339 timestamps in UTC, without a date-time dependency.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in seconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Now, as `2026-06-19T17:00:00Z`.
pub fn now_rfc3339() -> String {
    rfc3339(now_secs())
}

/// `secs` since the Unix epoch as the UTC civil `(year, month, day, hour, minute, second)`
/// (days to civil date after Howard Hinnant's `civil_from_days`), for every format of a time
/// (RFC 3339 here, SigV4's `YYYYMMDDTHHMMSSZ` in scw-infra).
pub fn civil(secs: u64) -> (i64, u32, u32, u32, u32, u32) {
    // u64 seconds / 86 400 always fits an i64.
    let days = (secs / 86_400) as i64;
    let rem = (secs % 86_400) as u32;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // Both lie in 1..=31 and 1..=12 by construction.
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rem / 3600, rem / 60 % 60, rem % 60)
}

/// `secs` since the Unix epoch as an RFC 3339 UTC timestamp.
pub fn rfc3339(secs: u64) -> String {
    let (year, month, day, hour, minute, second) = civil(secs);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

/// `secs` since the Unix epoch in ISO 8601's basic form, `20260619T170000Z`: SigV4's date, and
/// the stamp of file and object names, which sort as the times do.
pub fn basic(secs: u64) -> String {
    let (year, month, day, hour, minute, second) = civil(secs);
    format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}{second:02}Z")
}

/// Whether `text` is an RFC 3339 UTC time in the form this module writes
/// (`2026-06-19T17:00:00Z`), with each number in its range.
pub fn is_rfc3339_utc(text: &str) -> bool {
    let b = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = b.get(range)?;
        digits.iter().try_fold(0u32, |n, d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    let separators = [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'Z'),
    ];
    b.len() == 20
        && separators.iter().all(|&(at, c)| b[at] == c)
        && number(0..4).is_some()
        && number(5..7).is_some_and(|m| (1..=12).contains(&m))
        && number(8..10).is_some_and(|d| (1..=31).contains(&d))
        && number(11..13).is_some_and(|h| h < 24)
        && number(14..16).is_some_and(|m| m < 60)
        && number(17..19).is_some_and(|s| s <= 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_written_form_is_taken_as_an_rfc3339_utc_time() {
        assert!(is_rfc3339_utc(&rfc3339(1_781_888_400)));
        assert!(is_rfc3339_utc("2026-11-30T23:59:60Z"));
        for bad in [
            "",
            "2026-11-30",
            "2026-11-30T20:00:00",
            "2026-11-30T20:00:00+01:00",
            "2026-13-30T20:00:00Z",
            "2026-11-00T20:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30 20:00:00Z",
            "v7",
        ] {
            assert!(!is_rfc3339_utc(bad), "{bad:?}");
        }
    }

    #[test]
    fn known_instants_format_as_python_does() {
        // python3 -c "import datetime as d; print(d.datetime.fromtimestamp(N, d.UTC).isoformat())"
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_781_888_400), "2026-06-19T17:00:00Z");
        assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
    }

    #[test]
    fn civil_fields_of_known_instants() {
        assert_eq!(civil(0), (1970, 1, 1, 0, 0, 0));
        // The last second of a leap day, and the first of the next month.
        assert_eq!(civil(951_868_799), (2000, 2, 29, 23, 59, 59));
        assert_eq!(civil(951_868_800), (2000, 3, 1, 0, 0, 0));
        assert_eq!(civil(1_440_938_160), (2015, 8, 30, 12, 36, 0));
        // 2100 is not a leap year: 28 February is followed by 1 March.
        assert_eq!(civil(4_107_542_400), (2100, 3, 1, 0, 0, 0));
    }
}
