//! `lists-gen-tor`: the Tor exit address list.
//!
//! ```sh
//! lists-gen-tor https://check.torproject.org/torbulkexitlist
//! lists-gen-tor -o text 'https://onionoo.torproject.org/details?type=relay&running=true&flag=Exit&fields=or_addresses,exit_addresses,flags,exit_policy_v6_summary'
//! ```
//!
//! Input formats (detected, or given with `--format`), plain or gzip, from files or URLs:
//!
//! | format | what | addresses taken |
//! | --- | --- | --- |
//! | `bulk` | check.torproject.org/torbulkexitlist: one address per line (`#` comments allowed) | every line |
//! | `exit-addresses` | TorDNSEL exit list (check.torproject.org/exit-addresses), with or without the CollecTor header (`@type tordnsel 1.0`, `Downloaded`) | `ExitAddress` lines |
//! | `onionoo` | Onionoo `details` document | of relays with the `Exit` flag: `exit_addresses`, the IPv4 `or_addresses`, and the IPv6 `or_addresses` unless `exit_policy_v6_summary` is present and accepts nothing |
//!
//! Addresses are de-duplicated, validated (loopback, private, link-local, multicast,
//! documentation and unspecified addresses are bad rows), sorted, and written as /32 and /128
//! prefixes: a `PolicyList` record by default, one per line with `-o text`. Refusals are those of
//! `lists-gen-asn`: bad data beyond `--max-bad-rows`, an empty result, a shrink beyond
//! `--max-shrink-percent` of `--previous`.

use std::collections::BTreeSet;
use std::io::{BufRead, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use clap::Parser;
use ipnet::{Ipv4Net, Ipv6Net};
use lists_core::args::{Common, CommonArgs};
use lists_core::list::{self, ListMeta};
use lists_core::records::ListGenerator;
use lists_core::source::{self, BadRows, SourceName};
use pop_common::tool::Env;
use serde::Deserialize;

pub use lists_core::ListError;

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "lists-gen-tor", version, about = "The Tor exit address list")]
pub struct Cli {
    /// The source format; detected when absent.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    #[command(flatten)]
    pub common: CommonArgs,
}

pub use lists_core::formats::TorFormat as Format;

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub format: Option<Format>,
    pub common: Common,
}

/// Checks the arguments and builds the configuration.
pub fn resolve(cli: Cli, _env: &Env) -> Result<Config, ListError> {
    Ok(Config {
        format: cli.format,
        common: lists_core::args::resolve(&cli.common, "tor")?,
    })
}

/// The addresses found so far.
#[derive(Debug, Default)]
struct Exits {
    v4: BTreeSet<Ipv4Addr>,
    v6: BTreeSet<Ipv6Addr>,
}

impl Exits {
    /// Adds a public address; says why another one is refused.
    fn add(&mut self, addr: IpAddr) -> Result<(), &'static str> {
        if !public(addr) {
            return Err("not a public address");
        }
        match addr {
            IpAddr::V4(a) => self.v4.insert(a),
            IpAddr::V6(a) => self.v6.insert(a),
        };
        Ok(())
    }

    fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }
}

/// Whether a Tor exit can plausibly have this address.
fn public(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => {
            !(a.is_unspecified()
                || a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_documentation()
                || a.octets()[0] == 0)
        }
        IpAddr::V6(a) => {
            let first = a.segments()[0];
            !(a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link-local
                || (first == 0x2001 && a.segments()[1] == 0x0db8)) // documentation
        }
    }
}

/// Reads every source, checks, and writes the list.
pub fn run(config: &Config, mut stdin: impl Read, output: impl Write) -> Result<(), ListError> {
    let mut exits = Exits::default();
    let mut shown = Vec::new();
    for src in &config.common.sources {
        let before = exits.len();
        let (format, entries) = read_source(config, src, &mut stdin, &mut exits)?;
        pop_common::info!(
            "source {}: {}, {entries} {}, {} new addresses",
            src.shown,
            format.label(),
            if format == Format::Onionoo {
                "exit relays"
            } else {
                "rows"
            },
            exits.len() - before
        );
        shown.push(src.shown.clone());
    }
    let ipv4 = exits.v4.iter().map(|a| Ipv4Net::from(*a)).collect();
    let ipv6 = exits.v6.iter().map(|a| Ipv6Net::from(*a)).collect();
    let result = list::checked(
        &config.common,
        ListMeta::new(&config.common, ListGenerator::Tor, shown),
        ipv4,
        ipv6,
    )?;
    pop_common::info!(
        "list {}: {} IPv4 and {} IPv6 exit addresses",
        result.name,
        result.counts.ipv4,
        result.counts.ipv6
    );
    list::write(&result, config.common.output, output)
}

fn read_source(
    config: &Config,
    src: &SourceName,
    stdin: &mut dyn Read,
    exits: &mut Exits,
) -> Result<(Format, u64), ListError> {
    let mut reader = source::open(src, stdin)?;
    let format = match config.format {
        Some(format) => format,
        None => detect(src, &mut *reader)?,
    };
    let mut bad = BadRows::new(config.common.max_bad_rows);
    let entries = match format {
        Format::Onionoo => read_onionoo(src, reader, exits, &mut bad)?,
        Format::Bulk | Format::ExitAddresses => {
            read_lines(src, format, &mut *reader, exits, &mut bad)?
        }
    };
    bad.warn_if_any(src);
    Ok((format, entries))
}

fn format_error(src: &SourceName, message: String) -> ListError {
    src.format_error(message)
}

/// The format, from the first bytes that are not blank (consumed only up to there).
fn detect(src: &SourceName, reader: &mut dyn BufRead) -> Result<Format, ListError> {
    loop {
        let head = reader.fill_buf().map_err(|e| src.read_error(e))?;
        let Some(start) = head.iter().position(|b| !b.is_ascii_whitespace()) else {
            if head.is_empty() {
                return Err(format_error(src, "is empty".into()));
            }
            let n = head.len();
            reader.consume(n);
            continue;
        };
        reader.consume(start);
        let head = reader.fill_buf().map_err(|e| src.read_error(e))?;
        let line_end = head.iter().position(|b| *b == b'\n').unwrap_or(head.len());
        let line = String::from_utf8_lossy(&head[..line_end]);
        let line = line.trim();
        return if line.starts_with('{') {
            Ok(Format::Onionoo)
        } else if ["@type tordnsel", "Downloaded ", "ExitNode "]
            .iter()
            .any(|p| line.starts_with(p))
        {
            Ok(Format::ExitAddresses)
        } else if line.starts_with('#') || line.parse::<IpAddr>().is_ok() {
            Ok(Format::Bulk)
        } else {
            Err(format_error(
                src,
                format!(
                    "not a Tor exit list (bulk list, exit-addresses or Onionoo details): it starts with `{}`",
                    line.chars().take(80).collect::<String>().escape_debug()
                ),
            ))
        };
    }
}

/// The bulk list and the TorDNSEL format, line by line. Returns the entries read.
fn read_lines(
    src: &SourceName,
    format: Format,
    reader: &mut dyn BufRead,
    exits: &mut Exits,
    bad: &mut BadRows,
) -> Result<u64, ListError> {
    let mut entries = 0u64;
    source::each_line(src, reader, |number, line| {
        let text = match std::str::from_utf8(line) {
            Ok(text) => text.trim(),
            Err(_) => return bad.record(src, number, line, "not text"),
        };
        if text.is_empty() || text.starts_with('#') {
            return Ok(());
        }
        let outcome = match format {
            Format::Bulk => text
                .parse::<IpAddr>()
                .map_err(|_| "not an address")
                .and_then(|a| exits.add(a)),
            _ => exit_addresses_line(text, exits),
        };
        match outcome {
            Ok(()) => {
                entries += 1;
                Ok(())
            }
            Err(why) if entries == 0 && format == Format::Bulk => Err(format_error(
                src,
                format!(
                    "does not match the {} format: line {number}: {why}: `{}`",
                    format.label(),
                    text.chars().take(80).collect::<String>().escape_debug()
                ),
            )),
            Err(why) => bad.record(src, number, line, why),
        }
    })?;
    if entries == 0 {
        return Err(format_error(
            src,
            format!("holds no address ({})", format.label()),
        ));
    }
    Ok(entries)
}

/// One line of the TorDNSEL format; `Ok` also for the keywords that carry no address.
fn exit_addresses_line(text: &str, exits: &mut Exits) -> Result<(), &'static str> {
    let mut words = text.split_ascii_whitespace();
    match words.next() {
        Some("ExitAddress") => {
            let addr = words.next().ok_or("ExitAddress without an address")?;
            exits.add(addr.parse().map_err(|_| "ExitAddress not an address")?)
        }
        Some("ExitNode") => match words.next() {
            Some(fp) if fp.len() == 40 && fp.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(()),
            _ => Err("ExitNode without a fingerprint"),
        },
        Some("@type" | "Downloaded" | "Published" | "LastStatus") => Ok(()),
        _ => Err("not a TorDNSEL line"),
    }
}

/// What is read of an Onionoo `details` document (other fields are skipped while parsing).
#[derive(Debug, Deserialize)]
struct Details {
    relays: Option<Vec<Relay>>,
}

#[derive(Debug, Deserialize)]
struct Relay {
    #[serde(default)]
    or_addresses: Vec<String>,
    #[serde(default)]
    exit_addresses: Vec<String>,
    flags: Option<Vec<String>>,
    exit_policy_v6_summary: Option<PolicySummary>,
}

#[derive(Debug, Deserialize)]
struct PolicySummary {
    #[serde(default)]
    accept: Vec<String>,
}

/// Reads an Onionoo `details` document. Returns the number of exit relays.
fn read_onionoo(
    src: &SourceName,
    reader: Box<dyn BufRead + '_>,
    exits: &mut Exits,
    bad: &mut BadRows,
) -> Result<u64, ListError> {
    let details: Details = serde_json::from_reader(reader).map_err(|e| {
        if e.is_io() {
            src.read_error(e.into())
        } else if e.is_eof() {
            ListError::Truncated {
                name: src.shown.clone(),
                detail: e.to_string(),
            }
        } else {
            format_error(src, format!("not an Onionoo details document: {e}"))
        }
    })?;
    let relays = details
        .relays
        .ok_or_else(|| format_error(src, "not an Onionoo details document: no `relays`".into()))?;
    if !relays.is_empty() && relays.iter().all(|r| r.flags.is_none()) {
        return Err(format_error(
            src,
            "Onionoo details without `flags`: exits cannot be told apart; ask for fields=flags,or_addresses,exit_addresses,exit_policy_v6_summary (or all fields)".into(),
        ));
    }
    let mut exit_relays = 0u64;
    for (i, relay) in relays.iter().enumerate() {
        let is_exit = relay
            .flags
            .as_ref()
            .is_some_and(|f| f.iter().any(|x| x == "Exit"));
        if !is_exit {
            continue;
        }
        exit_relays += 1;
        let v6_exits = relay
            .exit_policy_v6_summary
            .as_ref()
            .is_none_or(|s| !s.accept.is_empty());
        let or_hosts = relay.or_addresses.iter().map(|a| or_host(a));
        for (text, from_or) in relay
            .exit_addresses
            .iter()
            .map(|a| (a.as_str(), false))
            .chain(or_hosts.map(|h| (h, true)))
        {
            let outcome = match text.parse::<IpAddr>() {
                Ok(IpAddr::V6(_)) if from_or && !v6_exits => Ok(()),
                Ok(addr) => exits.add(addr),
                Err(_) => Err("relay address invalid"),
            };
            if let Err(why) = outcome {
                bad.record(src, i as u64 + 1, text.as_bytes(), why)?;
            }
        }
    }
    if exit_relays == 0 {
        return Err(format_error(
            src,
            "holds no relay with the Exit flag".into(),
        ));
    }
    Ok(exit_relays)
}

/// The host of an `or_addresses` entry: `1.2.3.4:9001` or `[2001:db8::1]:9001`.
fn or_host(entry: &str) -> &str {
    match entry.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host),
        _ => entry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn or_addresses_give_their_host() {
        assert_eq!(or_host("204.8.96.141:444"), "204.8.96.141");
        assert_eq!(or_host("[2620:7:6003::141]:81"), "2620:7:6003::141");
        assert_eq!(or_host("garbage"), "garbage");
    }

    #[test]
    fn only_public_addresses_are_exits() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "2001:db8::1",
            "224.0.0.1",
        ] {
            assert!(!public(bad.parse().unwrap()), "{bad}");
        }
        for good in ["185.220.101.1", "2a0b:f4c2::1"] {
            assert!(public(good.parse().unwrap()), "{good}");
        }
    }

    #[test]
    fn tordnsel_lines_are_checked() {
        let mut exits = Exits::default();
        assert!(
            exit_addresses_line("ExitAddress 185.220.101.1 2024-03-12 08:10:51", &mut exits)
                .is_ok()
        );
        assert!(
            exit_addresses_line(
                "ExitNode FE39F07EBE7870DCE124AB30DF3ABD0700A43F75",
                &mut exits
            )
            .is_ok()
        );
        assert!(exit_addresses_line("Published 2024-03-11 13:07:19", &mut exits).is_ok());
        assert_eq!(
            exit_addresses_line("ExitNode zz", &mut exits),
            Err("ExitNode without a fingerprint")
        );
        assert_eq!(
            exit_addresses_line("ExitAddress x", &mut exits),
            Err("ExitAddress not an address")
        );
        assert_eq!(
            exit_addresses_line("<html>", &mut exits),
            Err("not a TorDNSEL line")
        );
        assert_eq!(exits.len(), 1);
    }

    #[test]
    fn arguments_resolve_with_the_tor_name() {
        let cli = Cli::try_parse_from(["lists-gen-tor", "--format", "onionoo", "/x.json"]).unwrap();
        let config = resolve(cli, &Env::default()).unwrap();
        assert_eq!(config.format, Some(Format::Onionoo));
        assert_eq!(config.common.list_name, "tor");
    }
}
