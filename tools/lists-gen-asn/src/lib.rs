//! `lists-gen-asn`: the minimal aggregated CIDR list of a set of ASNs, from IP-to-ASN datasets.
//!
//! ```sh
//! lists-gen-asn --asn 16276 --asn 24940 https://iptoasn.com/data/ip2asn-combined.tsv.gz
//! lists-gen-asn --asn-file hosting.asns -o text asn-ipv4.csv.gz asn-ipv6.csv.gz
//! ```
//!
//! Input formats (detected from the first row, or given with `--format`), plain or gzip, read
//! as a stream (memory holds the selected ranges, never the dataset):
//!
//! | format | rows |
//! | --- | --- |
//! | `iptoasn` | iptoasn.com TSV (v4, v6 or combined): `first<TAB>last<TAB>asn<TAB>country<TAB>description` |
//! | `ip-location-db` | sapics/ip-location-db CSV: `first,last,asn,organisation` |
//! | `geolite2` | MaxMind GeoLite2-ASN blocks CSV: header `network,autonomous_system_number,...`, a CIDR per row |
//!
//! The output is exactly the prefix set Python's `ipaddress.collapse_addresses` gives over the
//! selected ranges (ranges that are not CIDR-aligned are split exactly): a `PolicyList` record
//! by default, or one CIDR per line with `-o text`. A dataset that does not parse (beyond
//! `--max-bad-rows` rows, each reported with its line), an empty result, or a list that lost
//! more than `--max-shrink-percent` of `--previous` is refused: one message on stderr, nothing
//! on stdout, a non-zero exit.

use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;
use ipnet::IpNet;
use lists_core::args::{Common, CommonArgs};
use lists_core::cidr::Ranges;
use lists_core::list::{self, ListMeta};
use lists_core::source::{self, BadRows, Lines, SourceName};
use pop_common::records::ListGenerator;

pub use lists_core::ListError;

/// Command line.
#[derive(Debug, Parser)]
#[command(
    name = "lists-gen-asn",
    version,
    about = "Aggregated CIDR list of ASNs from IP-to-ASN datasets"
)]
pub struct Cli {
    /// An ASN to select (`16276` or `AS16276`; repeat, or separate with commas).
    #[arg(long = "asn", value_name = "ASN")]
    pub asns: Vec<String>,
    /// A file of ASNs, one per line (`#` comments allowed).
    #[arg(long, value_name = "FILE")]
    pub asn_file: Option<PathBuf>,
    /// The dataset format; detected from the first row when absent.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// The IP-to-ASN dataset formats understood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Iptoasn,
    IpLocationDb,
    Geolite2,
}

impl Format {
    fn label(self) -> &'static str {
        match self {
            Format::Iptoasn => "iptoasn TSV",
            Format::IpLocationDb => "ip-location-db CSV",
            Format::Geolite2 => "GeoLite2-ASN CSV",
        }
    }
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Sorted, without duplicates, never empty.
    pub asns: Vec<u32>,
    pub format: Option<Format>,
    pub common: Common,
}

/// Checks the arguments and builds the configuration (reads `--asn-file`).
pub fn resolve(cli: &Cli) -> Result<Config, ListError> {
    let mut asns = Vec::new();
    for value in &cli.asns {
        for item in value.split(',').filter(|s| !s.trim().is_empty()) {
            asns.push(
                parse_asn(item)
                    .ok_or_else(|| ListError::Usage(format!("--asn `{item}`: not an AS number")))?,
            );
        }
    }
    if let Some(path) = &cli.asn_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ListError::Usage(format!("--asn-file {}: cannot read: {e}", path.display()))
        })?;
        asns.extend(
            parse_asn_file(&text)
                .map_err(|e| ListError::Usage(format!("--asn-file {}: {e}", path.display())))?,
        );
    }
    asns.sort_unstable();
    asns.dedup();
    if asns.is_empty() {
        return Err(ListError::Usage(
            "no ASN given: use --asn N (repeatable) or --asn-file FILE".into(),
        ));
    }
    Ok(Config {
        asns,
        format: cli.format,
        common: lists_core::args::resolve(&cli.common, "hosting")?,
    })
}

/// `16276` or `AS16276` (any case).
fn parse_asn(text: &str) -> Option<u32> {
    let text = text.trim();
    let digits = text
        .strip_prefix("AS")
        .or_else(|| text.strip_prefix("as"))
        .unwrap_or(text);
    digits.parse().ok()
}

/// One ASN per line; `#` starts a comment.
fn parse_asn_file(text: &str) -> Result<Vec<u32>, String> {
    let mut asns = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        asns.push(
            parse_asn(line)
                .ok_or_else(|| format!("line {}: `{line}` is not an AS number", i + 1))?,
        );
    }
    Ok(asns)
}

/// Reads every source, selects the configured ASNs, aggregates, checks, and writes the list.
pub fn run(config: &Config, mut stdin: impl Read, output: impl Write) -> Result<(), ListError> {
    let mut ranges = Ranges::new();
    let mut shown = Vec::new();
    for src in &config.common.sources {
        let stats = read_source(config, src, &mut stdin, &mut ranges)?;
        pop_common::info!(
            "source {}: {} rows ({}), {} selected",
            src.shown,
            stats.rows,
            stats.format.label(),
            stats.selected
        );
        shown.push(src.shown.clone());
    }
    let previous = match &config.common.previous {
        Some(path) => Some(list::read_previous(path)?),
        None => None,
    };
    let (ipv4, ipv6) = ranges.collapse();
    let result = list::policy_list(
        ListMeta {
            name: config.common.list_name.clone(),
            generator: ListGenerator::Asn,
            sources: shown,
            asns: config.asns.clone(),
        },
        ipv4,
        ipv6,
    );
    list::check(
        &result,
        previous.as_ref(),
        config.common.max_shrink_percent,
        config.common.force,
    )?;
    pop_common::info!(
        "list {}: {} IPv4 and {} IPv6 prefixes for {} ASN(s)",
        result.name,
        result.counts.ipv4,
        result.counts.ipv6,
        config.asns.len()
    );
    list::write(&result, config.common.output, output)
}

struct Stats {
    format: Format,
    rows: u64,
    selected: u64,
}

fn read_source(
    config: &Config,
    src: &SourceName,
    stdin: &mut dyn Read,
    ranges: &mut Ranges,
) -> Result<Stats, ListError> {
    let mut reader = source::open(src, stdin)?;
    let mut lines = Lines::new();
    let mut bad = BadRows::new(config.common.max_bad_rows);
    let mut format = config.format;
    let (mut rows, mut selected) = (0u64, 0u64);
    let format_error = |message: String| ListError::Format {
        name: src.shown.clone(),
        message,
    };
    while let Some((number, line)) = lines.next(&mut *reader).map_err(|e| src.read_error(e))? {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let fmt = match format {
            Some(fmt) => fmt,
            None => {
                let fmt = detect(line).ok_or_else(|| {
                    format_error(format!(
                        "not an IP-to-ASN dataset (iptoasn TSV, ip-location-db CSV, GeoLite2-ASN CSV): line {number} is `{}`",
                        excerpt(line)
                    ))
                })?;
                format = Some(fmt);
                fmt
            }
        };
        match parse_row(fmt, line) {
            Ok(None) => {}
            Ok(Some((range, asn))) => {
                rows += 1;
                if config.asns.binary_search(&asn).is_ok() {
                    selected += 1;
                    match range {
                        Range::V4(a, b) => ranges.add_v4(a, b),
                        Range::V6(a, b) => ranges.add_v6(a, b),
                    }
                }
            }
            Err(why) if rows == 0 => {
                return Err(format_error(format!(
                    "does not match the {} format: line {number}: {why}: `{}`",
                    fmt.label(),
                    excerpt(line)
                )));
            }
            Err(why) => bad.record(src, number, line, why)?,
        }
    }
    let Some(format) = format.filter(|_| rows > 0) else {
        return Err(format_error("holds no data row".into()));
    };
    bad.warn_if_any(src);
    Ok(Stats {
        format,
        rows,
        selected,
    })
}

fn excerpt(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    text.chars()
        .take(80)
        .collect::<String>()
        .escape_debug()
        .to_string()
}

/// An inclusive range of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Range {
    V4(std::net::Ipv4Addr, std::net::Ipv4Addr),
    V6(std::net::Ipv6Addr, std::net::Ipv6Addr),
}

/// The format of a dataset, from its first non-blank line.
fn detect(line: &[u8]) -> Option<Format> {
    if line.starts_with(b"network,") {
        return Some(Format::Geolite2);
    }
    [Format::Iptoasn, Format::IpLocationDb, Format::Geolite2]
        .into_iter()
        .find(|fmt| matches!(parse_row(*fmt, line), Ok(Some(_))))
}

/// One row: its range and ASN, `None` for a header, or why it does not parse.
fn parse_row(format: Format, line: &[u8]) -> Result<Option<(Range, u32)>, &'static str> {
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

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("lists-gen-asn").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn asns_come_from_flags_commas_and_a_file_sorted_and_unique() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("asns");
        std::fs::write(&file, "# hosting\nAS24940\n16276 # OVH\n\n").unwrap();
        let config = resolve(&cli(&[
            "--asn",
            "16276,as13335",
            "--asn",
            "8075",
            "--asn-file",
            file.to_str().unwrap(),
            "/data/x.csv",
        ]))
        .unwrap();
        assert_eq!(config.asns, vec![8075, 13335, 16276, 24940]);
        assert_eq!(config.common.list_name, "hosting");
        assert_eq!(config.format, None);
    }

    #[test]
    fn no_asn_or_a_bad_one_is_a_usage_error() {
        assert!(
            resolve(&cli(&["/x"]))
                .unwrap_err()
                .to_string()
                .contains("no ASN given")
        );
        let err = resolve(&cli(&["--asn", "AS1x"])).unwrap_err();
        assert_eq!(err.to_string(), "--asn `AS1x`: not an AS number");
        assert!(
            parse_asn_file("1\nbanana\n")
                .unwrap_err()
                .starts_with("line 2:")
        );
    }

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

    #[test]
    fn the_ipv4_byte_parser_agrees_with_std() {
        for text in [
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
        ] {
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
        let addresses = [
            "0.0.0.0",
            "1.2.3.4",
            "255.255.255.255",
            "256.1.1.1",
            "1.2.3",
            "1.2.3.4.5",
            "01.2.3.4",
            "1..2.3",
            "1.2.3.",
            "10.0.0.00",
            "1.2.3.04",
            " 1.2.3.4",
            "\"1.2.3.4\"",
            "1.2.3.4 ",
            "::1",
            "100.200.30.9",
            "1.2.3.1000",
            "",
        ];
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
        for first in addresses {
            for last in addresses {
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
        assert_eq!(
            parse_row(Format::IpLocationDb, b"1.0.0.9,1.0.0.1,5,x"),
            Err("range ends before it starts")
        );
        assert_eq!(
            parse_row(Format::Iptoasn, b"1.0.0.0\t::1\t5"),
            Err("range mixes IPv4 and IPv6")
        );
        assert_eq!(
            parse_row(Format::Iptoasn, b"1.0.0.0\t1.0.0.1"),
            Err("too few fields")
        );
        assert_eq!(
            parse_row(Format::Geolite2, b"1.0.0.0/8,AS"),
            Err("AS number invalid")
        );
    }
}
