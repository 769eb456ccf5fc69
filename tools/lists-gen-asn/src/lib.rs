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
use std::path::PathBuf;

use clap::Parser;
use lists_core::args::{Common, CommonArgs};
use lists_core::cidr::Ranges;
use lists_core::list::{self, ListMeta};
use lists_core::records::ListGenerator;
use lists_core::source::{self, BadRows, SourceName};
use pop_common::tool::Env;

pub use dataset::Format;
pub use lists_core::ListError;

mod dataset;

use dataset::{Range, detect, parse_row};

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

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Sorted, without duplicates, never empty.
    pub asns: Vec<u32>,
    pub format: Option<Format>,
    pub common: Common,
}

/// Checks the arguments and builds the configuration (reads `--asn-file`).
pub fn resolve(cli: Cli, _env: &Env) -> Result<Config, ListError> {
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
    let (ipv4, ipv6) = ranges.collapse();
    let result = list::checked(
        &config.common,
        ListMeta {
            asns: config.asns.clone(),
            ..ListMeta::new(&config.common, ListGenerator::Asn, shown)
        },
        ipv4,
        ipv6,
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
    let mut bad = BadRows::new(config.common.max_bad_rows);
    let mut format = config.format;
    let (mut rows, mut selected) = (0u64, 0u64);
    let format_error = |message: String| src.format_error(message);
    source::each_line(src, &mut *reader, |number, line| {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
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
        Ok(())
    })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_cli(cli: Cli) -> Result<Config, ListError> {
        resolve(cli, &Env::default())
    }

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("lists-gen-asn").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn asns_come_from_flags_commas_and_a_file_sorted_and_unique() {
        let (_dir, file) = testkit::temp_file("asns", "# hosting\nAS24940\n16276 # OVH\n\n");
        let config = resolve_cli(cli(&[
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
            resolve_cli(cli(&["/x"]))
                .unwrap_err()
                .to_string()
                .contains("no ASN given")
        );
        let err = resolve_cli(cli(&["--asn", "AS1x"])).unwrap_err();
        assert_eq!(err.to_string(), "--asn `AS1x`: not an AS number");
        assert!(
            parse_asn_file("1\nbanana\n")
                .unwrap_err()
                .starts_with("line 2:")
        );
    }
}
