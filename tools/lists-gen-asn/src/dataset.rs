//! The IP-to-ASN datasets, row by row: which format a dataset is, and each row's range and ASN
//! (or why it does not parse). The reading loop, the selection and the output are in `lib.rs`.

use std::net::IpAddr;

use ipnet::IpNet;

pub use lists_core::formats::AsnFormat as Format;

/// An inclusive range of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Range {
    V4(std::net::Ipv4Addr, std::net::Ipv4Addr),
    V6(std::net::Ipv6Addr, std::net::Ipv6Addr),
}

/// The format of a dataset, from its first non-blank line.
pub(crate) fn detect(line: &[u8]) -> Option<Format> {
    if line.starts_with(b"network,") {
        return Some(Format::Geolite2);
    }
    [Format::Iptoasn, Format::IpLocationDb, Format::Geolite2]
        .into_iter()
        .find(|fmt| matches!(parse_row(*fmt, line), Ok(Some(_))))
}

/// One row: its range and ASN, `None` for a header, or why it does not parse.
pub(crate) fn parse_row(format: Format, line: &[u8]) -> Result<Option<(Range, u32)>, &'static str> {
    let sep = if format == Format::Iptoasn {
        b'\t'
    } else {
        b','
    };
    if format != Format::Geolite2
        && let Some(row) = parse_plain_v4_row(sep, line)
    {
        return Ok(Some(row));
    }
    parse_fields(format, sep, line)
}

/// [`parse_row`] field by field: any row, and why a bad one is bad.
fn parse_fields(
    format: Format,
    sep: u8,
    line: &[u8],
) -> Result<Option<(Range, u32)>, &'static str> {
    let mut fields = line.split(|b| *b == sep);
    let mut next = || fields.next().map(unquote).ok_or("too few fields");
    match format {
        Format::Iptoasn | Format::IpLocationDb => {
            let first = parse_ip(next()?).ok_or("first address invalid")?;
            let last = parse_ip(next()?).ok_or("last address invalid")?;
            let asn = parse_asn_field(next()?).ok_or("AS number invalid")?;
            let range = match (first, last) {
                (IpAddr::V4(a), IpAddr::V4(b)) if a <= b => Range::V4(a, b),
                (IpAddr::V6(a), IpAddr::V6(b)) if a <= b => Range::V6(a, b),
                (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                    return Err("range ends before it starts");
                }
                _ => return Err("range mixes IPv4 and IPv6"),
            };
            Ok(Some((range, asn)))
        }
        Format::Geolite2 => {
            let network = next()?;
            if network == b"network" {
                return Ok(None);
            }
            let net: IpNet = std::str::from_utf8(network)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or("network invalid")?;
            let asn = parse_asn_field(next()?).ok_or("AS number invalid")?;
            let range = match net.trunc() {
                IpNet::V4(n) => Range::V4(n.network(), n.broadcast()),
                IpNet::V6(n) => Range::V6(n.network(), n.broadcast()),
            };
            Ok(Some((range, asn)))
        }
    }
}

/// The hot path of a full dataset: a row that starts `first<sep>last<sep>asn` with two IPv4
/// addresses and a decimal ASN, none quoted or padded, read in one pass over its bytes.
/// `None` for any other row, which [`parse_row`] then reads field by field (and explains when
/// it is bad): every row this accepts is one the field-by-field reading accepts, with the same
/// result, so this only makes validation cheaper, it never skips it.
#[inline]
fn parse_plain_v4_row(sep: u8, line: &[u8]) -> Option<(Range, u32)> {
    let (first, at) = ipv4_at(line, 0)?;
    let (last, at) = ipv4_at(line, after_sep(line, at, sep)?)?;
    let (asn, at) = asn_at(line, after_sep(line, at, sep)?)?;
    if at != line.len() && line[at] != sep || first > last {
        return None;
    }
    Some((
        Range::V4(
            std::net::Ipv4Addr::from(first),
            std::net::Ipv4Addr::from(last),
        ),
        asn,
    ))
}

/// The position after `sep` when `line[at]` is `sep`.
#[inline]
fn after_sep(line: &[u8], at: usize, sep: u8) -> Option<usize> {
    (line.get(at) == Some(&sep)).then_some(at + 1)
}

/// A decimal digit at `at`.
#[inline]
fn digit_at(line: &[u8], at: usize) -> Option<u32> {
    line.get(at)
        .map(|b| b.wrapping_sub(b'0'))
        .filter(|d| *d <= 9)
        .map(u32::from)
}

/// The IPv4 address that starts at `at` (four decimal octets up to 255, no leading zero, as
/// std's parser wants them) and the position after it; what follows is the caller's to check.
#[inline]
fn ipv4_at(line: &[u8], mut at: usize) -> Option<(u32, usize)> {
    let mut address = 0u32;
    for octet in 0..4 {
        if octet > 0 {
            at = after_sep(line, at, b'.')?;
        }
        let mut value = digit_at(line, at)?;
        at += 1;
        if value != 0 {
            for _ in 0..2 {
                let Some(digit) = digit_at(line, at) else {
                    break;
                };
                value = value * 10 + digit;
                at += 1;
            }
            if value > 255 {
                return None;
            }
        }
        address = address << 8 | value;
    }
    Some((address, at))
}

/// The decimal ASN (1 to 10 digits, at most `u32::MAX`) that starts at `at`, and the position
/// after it.
#[inline]
fn asn_at(line: &[u8], start: usize) -> Option<(u32, usize)> {
    let mut at = start;
    let mut value: u64 = 0;
    while let Some(digit) = digit_at(line, at) {
        if at - start == 10 {
            return None;
        }
        value = value * 10 + u64::from(digit);
        at += 1;
    }
    if at == start {
        return None;
    }
    Some((u32::try_from(value).ok()?, at))
}

fn unquote(field: &[u8]) -> &[u8] {
    let field = field.trim_ascii();
    field
        .strip_prefix(b"\"")
        .and_then(|f| f.strip_suffix(b"\""))
        .unwrap_or(field)
}

/// An address; IPv4 (most rows of most datasets) by a byte parser, as strict as std's (four
/// decimal octets up to 255, no leading zero), which is the hot path of a full dataset.
fn parse_ip(field: &[u8]) -> Option<IpAddr> {
    if field.contains(&b':') {
        return std::str::from_utf8(field).ok()?.parse().ok();
    }
    let mut octets = [0u8; 4];
    let mut index = 0;
    let mut value: u32 = 0;
    let mut digits = 0;
    for &byte in field {
        match byte {
            b'.' if digits > 0 && index < 3 => {
                octets[index] = value as u8;
                index += 1;
                (value, digits) = (0, 0);
            }
            b'0'..=b'9' if !(digits > 0 && value == 0) => {
                value = value * 10 + u32::from(byte - b'0');
                digits += 1;
                if value > 255 {
                    return None;
                }
            }
            _ => return None,
        }
    }
    if index != 3 || digits == 0 {
        return None;
    }
    octets[3] = value as u8;
    Some(IpAddr::from(octets))
}

/// `16276`, or `AS16276`.
fn parse_asn_field(field: &[u8]) -> Option<u32> {
    let digits = field
        .strip_prefix(b"AS")
        .or_else(|| field.strip_prefix(b"as"))
        .unwrap_or(field);
    if digits.is_empty() || digits.len() > 10 {
        return None;
    }
    let mut value: u64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u64::from(byte - b'0');
    }
    u32::try_from(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_format_is_detected_from_its_first_row() {
        assert_eq!(
            detect(b"1.0.0.0\t1.0.0.255\t13335\tUS\tCLOUDFLARENET"),
            Some(Format::Iptoasn)
        );
        assert_eq!(
            detect(b"1.0.0.0,1.0.0.255,13335,\"Cloudflare, Inc.\""),
            Some(Format::IpLocationDb)
        );
        assert_eq!(
            detect(b"network,autonomous_system_number,autonomous_system_organization"),
            Some(Format::Geolite2)
        );
        assert_eq!(
            detect(b"2001:200::/37,2500,\"WIDE Project\""),
            Some(Format::Geolite2)
        );
        assert_eq!(detect(b"<!DOCTYPE html>"), None);
        assert_eq!(detect(b"1.0.0.0"), None);
    }

    /// Addresses valid and invalid, on every edge std's parser draws (leading zeros, ranges,
    /// dots, spaces).
    const IPV4_TEXTS: [&str; 16] = [
        "0.0.0.0",
        "1.2.3.4",
        "255.255.255.255",
        "256.1.1.1",
        "1.2.3",
        "1.2.3.4.5",
        "01.2.3.4",
        "1..2.3",
        ".1.2.3",
        "1.2.3.",
        "1.2.3.4 ",
        "a.b.c.d",
        "",
        "10.0.0.00",
        "1.2.3.04",
        "1.2.3.1000",
    ];

    #[test]
    fn the_ipv4_byte_parser_agrees_with_std() {
        for text in IPV4_TEXTS {
            let std = text.parse::<IpAddr>().ok();
            assert_eq!(parse_ip(text.as_bytes()), std, "{text:?}");
        }
        assert_eq!(parse_asn_field(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_asn_field(b"4294967296"), None);
        assert_eq!(parse_asn_field(b"AS13335"), Some(13335));
        assert_eq!(parse_asn_field(b""), None);
    }

    #[test]
    fn the_one_pass_row_reader_agrees_with_the_field_by_field_one() {
        let mut addresses = IPV4_TEXTS.to_vec();
        addresses.extend([" 1.2.3.4", "\"1.2.3.4\"", "::1", "100.200.30.9"]);
        let asns = [
            "0",
            "13335",
            "AS13335",
            "4294967295",
            "4294967296",
            "12345678901",
            "0013335",
            "",
            " 5",
            "5x",
            "\"5\"",
        ];
        let tails = ["", ",Org", ",\"Org, Inc.\"", "\tUS\tORG", "x"];
        let mut fast = 0;
        for &first in &addresses {
            for &last in &addresses {
                for asn in asns {
                    for tail in tails {
                        for (format, sep) in [(Format::IpLocationDb, ','), (Format::Iptoasn, '\t')]
                        {
                            let line = format!("{first}{sep}{last}{sep}{asn}{tail}");
                            let slow = parse_fields(format, sep as u8, line.as_bytes());
                            if let Some(row) = parse_plain_v4_row(sep as u8, line.as_bytes()) {
                                fast += 1;
                                assert_eq!(Ok(Some(row)), slow, "{line:?}");
                            }
                            assert_eq!(parse_row(format, line.as_bytes()), slow, "{line:?}");
                        }
                    }
                }
            }
        }
        assert!(fast > 100, "{fast}");
    }

    #[test]
    fn bad_rows_say_why() {
        for (format, row, why) in [
            (
                Format::IpLocationDb,
                &b"1.0.0.9,1.0.0.1,5,x"[..],
                "range ends before it starts",
            ),
            (
                Format::Iptoasn,
                b"1.0.0.0\t::1\t5",
                "range mixes IPv4 and IPv6",
            ),
            (Format::Iptoasn, b"1.0.0.0\t1.0.0.1", "too few fields"),
            (Format::Geolite2, b"1.0.0.0/8,AS", "AS number invalid"),
        ] {
            let text = String::from_utf8_lossy(row);
            assert_eq!(parse_row(format, row), Err(why), "{format:?} {text}");
        }
    }
}
