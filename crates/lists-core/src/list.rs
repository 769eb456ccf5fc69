//! The generated list: the `PolicyList` record, its text form, and the shrink check against the
//! previous list.

use pop_common::exit::WritingOutput;
use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::path::Path;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use pop_common::records::{Kind, Version};

use crate::records::{ListCounts, ListGenerator, PolicyList};

use crate::error::ListError;

/// How the list is printed on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// The typed `PolicyList` record (one JSON line).
    Json,
    /// One CIDR per line, IPv4 first: the form of the ConfigMap keys and of the filter's sets.
    Text,
}

/// The list the sources gave, once it passed the checks every generator makes: not empty, and
/// not shrunk beyond `--max-shrink-percent` against `--previous` (unless `--force`).
pub fn checked(
    common: &crate::args::Common,
    meta: ListMeta,
    ipv4: Vec<Ipv4Net>,
    ipv6: Vec<Ipv6Net>,
) -> Result<PolicyList, ListError> {
    let previous = match &common.previous {
        Some(path) => Some(read_previous(path)?),
        None => None,
    };
    let list = policy_list(meta, ipv4, ipv6);
    check(
        &list,
        previous.as_ref(),
        common.max_shrink_percent,
        common.force,
    )?;
    Ok(list)
}

/// What describes a list besides its prefixes.
#[derive(Debug, Clone)]
pub struct ListMeta {
    pub name: String,
    pub generator: ListGenerator,
    pub sources: Vec<String>,
    pub asns: Vec<u32>,
    /// The crawler's User-Agent tokens (`crawlers` lists only).
    pub tokens: Vec<String>,
}

impl ListMeta {
    /// A list named by `--list-name`, made by `generator` from `sources`, with no ASNs and no
    /// tokens.
    pub fn new(
        common: &crate::args::Common,
        generator: ListGenerator,
        sources: Vec<String>,
    ) -> Self {
        ListMeta {
            name: common.list_name.clone(),
            generator,
            sources,
            asns: Vec::new(),
            tokens: Vec::new(),
        }
    }
}

/// Builds the record, stamped with the current time.
pub fn policy_list(meta: ListMeta, ipv4: Vec<Ipv4Net>, ipv6: Vec<Ipv6Net>) -> PolicyList {
    PolicyList {
        kind: Kind::new(),
        version: Version,
        name: meta.name,
        generator: meta.generator,
        sources: meta.sources,
        asns: meta.asns,
        tokens: meta.tokens,
        generated_at: crate::time::now_rfc3339(),
        counts: ListCounts {
            ipv4: ipv4.len(),
            ipv6: ipv6.len(),
        },
        ipv4,
        ipv6,
    }
}

/// The list as text: pop-common's [`PolicyList::to_text`], the one text form.
pub fn to_text(list: &PolicyList) -> String {
    list.to_text()
}

/// Writes the list on `output` in `format`.
pub fn write(list: &PolicyList, format: OutputFormat, output: impl Write) -> Result<(), ListError> {
    let mut out = BufWriter::with_capacity(64 * 1024, output);
    match format {
        OutputFormat::Json => {
            serde_json::to_writer(&mut out, list)
                .map_err(|e| ListError::Output(std::io::Error::from(e).into()))?;
            out.write_all(b"\n").output()?;
        }
        OutputFormat::Text => out.write_all(to_text(list).as_bytes()).output()?,
    }
    Ok(out.flush().output()?)
}

/// What a list covers, per family: prefixes and addresses (IPv6 addresses as a float, exact
/// enough for a percentage).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Coverage {
    pub v4_prefixes: u64,
    pub v4_addresses: u64,
    pub v6_prefixes: u64,
    pub v6_addresses: f64,
}

impl Coverage {
    pub fn of(nets: impl IntoIterator<Item = IpNet>) -> Self {
        let mut c = Coverage::default();
        for net in nets {
            match net {
                IpNet::V4(n) => {
                    c.v4_prefixes += 1;
                    c.v4_addresses += 1u64 << (32 - u32::from(n.prefix_len()));
                }
                IpNet::V6(n) => {
                    c.v6_prefixes += 1;
                    c.v6_addresses += 2f64.powi(128 - i32::from(n.prefix_len()));
                }
            }
        }
        c
    }

    pub fn of_list(list: &PolicyList) -> Self {
        Coverage::of(
            list.ipv4
                .iter()
                .map(|n| IpNet::V4(*n))
                .chain(list.ipv6.iter().map(|n| IpNet::V6(*n))),
        )
    }
}

/// The worst loss from `old` to `new`, if it exceeds `max_percent`: a description of it.
///
/// Each of the four measures (IPv4 prefixes, IPv4 addresses, IPv6 prefixes, IPv6 addresses)
/// that the old list had is compared on its own, so that a family that vanished, or an
/// aggregated list that lost most of its small prefixes but kept one large one, is caught.
pub fn shrink_beyond(old: &Coverage, new: &Coverage, max_percent: u8) -> Option<String> {
    let measures = [
        (
            "IPv4 prefixes",
            old.v4_prefixes as f64,
            new.v4_prefixes as f64,
        ),
        (
            "IPv4 addresses",
            old.v4_addresses as f64,
            new.v4_addresses as f64,
        ),
        (
            "IPv6 prefixes",
            old.v6_prefixes as f64,
            new.v6_prefixes as f64,
        ),
        ("IPv6 addresses", old.v6_addresses, new.v6_addresses),
    ];
    let worst = measures
        .iter()
        .filter(|(_, old, _)| *old > 0.0)
        .map(|(what, old, new)| (*what, *old, *new, (old - new) / old * 100.0))
        .reduce(|worst, m| if m.3 > worst.3 { m } else { worst })?;
    let (what, old, new, loss) = worst;
    (loss > f64::from(max_percent)).then(|| {
        format!(
            "{what} fell from {} to {} (-{loss:.1}%)",
            human(old),
            human(new)
        )
    })
}

fn human(x: f64) -> String {
    if x < 1e15 {
        format!("{x:.0}")
    } else {
        format!("2^{:.1}", x.log2())
    }
}

/// Reads the previous list: a `PolicyList` JSON record, or text with one CIDR or address per
/// line (`#` comments and blank lines allowed), as the ConfigMap keys hold.
pub fn read_previous(path: &Path) -> Result<Coverage, ListError> {
    let shown = path.display().to_string();
    let err = |message: String| ListError::Previous {
        path: shown.clone(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    previous_from_text(&text).map_err(err)
}

/// The coverage of a previous list given as text (see [`read_previous`]).
pub fn previous_from_text(text: &str) -> Result<Coverage, String> {
    if text.trim_start().starts_with('{') {
        let list: PolicyList =
            serde_json::from_str(text).map_err(|e| format!("not a PolicyList record: {e}"))?;
        return Ok(Coverage::of_list(&list));
    }
    let mut nets = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let net = match line.parse::<IpNet>() {
            Ok(net) => net,
            Err(_) => match line.parse::<IpAddr>() {
                Ok(addr) => IpNet::from(addr),
                Err(_) => {
                    return Err(format!(
                        "line {}: `{line}` is neither a CIDR nor an address",
                        i + 1
                    ));
                }
            },
        };
        nets.push(net);
    }
    Ok(Coverage::of(nets))
}

/// Refuses `list` when it shrank too much compared with `previous` (unless `force`), and an
/// empty list always.
pub fn check(
    list: &PolicyList,
    previous: Option<&Coverage>,
    max_percent: u8,
    force: bool,
) -> Result<(), ListError> {
    if list.ipv4.is_empty() && list.ipv6.is_empty() {
        return Err(ListError::Empty {
            list: list.name.clone(),
            why: "the sources hold no matching entry".to_string(),
        });
    }
    let Some(previous) = previous else {
        return Ok(());
    };
    let new = Coverage::of_list(list);
    match shrink_beyond(previous, &new, max_percent) {
        Some(detail) if force => {
            pop_common::warn!("list {}: {detail}; published anyway (--force)", list.name);
            Ok(())
        }
        Some(detail) => Err(ListError::Shrink {
            list: list.name.clone(),
            detail,
            max_percent,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v4: &[&str], v6: &[&str]) -> PolicyList {
        policy_list(
            ListMeta {
                name: "tor".into(),
                generator: ListGenerator::Tor,
                sources: vec!["/x".into()],
                asns: vec![],
                tokens: vec![],
            },
            v4.iter().map(|s| s.parse().unwrap()).collect(),
            v6.iter().map(|s| s.parse().unwrap()).collect(),
        )
    }

    #[test]
    fn text_is_one_cidr_per_line_ipv4_first() {
        let l = list(&["192.0.2.1/32", "198.51.100.0/24"], &["2001:db8::1/128"]);
        assert_eq!(
            to_text(&l),
            "192.0.2.1/32\n198.51.100.0/24\n2001:db8::1/128\n"
        );
        assert!(l.problems().is_empty());
    }

    #[test]
    fn previous_text_accepts_cidrs_addresses_and_comments() {
        let c = previous_from_text("# tor\n192.0.2.1\n198.51.100.0/24\n\n2001:db8::/64\n").unwrap();
        assert_eq!(c.v4_prefixes, 2);
        assert_eq!(c.v4_addresses, 257);
        assert_eq!(c.v6_prefixes, 1);
        assert_eq!(c.v6_addresses, 2f64.powi(64));
        let err = previous_from_text("192.0.2.1\nbanana\n").unwrap_err();
        assert_eq!(err, "line 2: `banana` is neither a CIDR nor an address");
    }

    #[test]
    fn a_shrink_beyond_the_threshold_is_refused_unless_forced() {
        let old = list(
            &[
                "192.0.2.1/32",
                "192.0.2.2/32",
                "192.0.2.3/32",
                "192.0.2.4/32",
            ],
            &[],
        );
        let old = previous_from_text(&to_text(&old)).unwrap();
        let half = list(&["192.0.2.1/32", "192.0.2.2/32"], &[]);
        assert!(check(&half, Some(&old), 50, false).is_ok());
        let quarter = list(&["192.0.2.1/32"], &[]);
        let err = check(&quarter, Some(&old), 50, false).unwrap_err();
        assert!(
            err.to_string()
                .contains("IPv4 prefixes fell from 4 to 1 (-75.0%)"),
            "{err}"
        );
        assert!(check(&quarter, Some(&old), 50, true).is_ok());
        assert!(check(&quarter, None, 50, false).is_ok());
    }

    #[test]
    fn a_vanished_family_or_lost_coverage_counts_as_a_shrink() {
        let old = Coverage::of_list(&list(
            &["192.0.2.1/32"],
            &["2001:db8::1/128", "2001:db8::2/128"],
        ));
        let new = Coverage::of_list(&list(&["192.0.2.1/32", "192.0.2.9/32"], &[]));
        assert!(
            shrink_beyond(&old, &new, 50)
                .unwrap()
                .starts_with("IPv6 prefixes fell from 2 to 0")
        );
        let old = Coverage::of_list(&list(&["10.0.0.0/8"], &[]));
        let new = Coverage::of_list(&list(&["10.0.0.0/16", "11.0.0.0/16"], &[]));
        assert!(
            shrink_beyond(&old, &new, 50)
                .unwrap()
                .starts_with("IPv4 addresses fell from 16777216 to 131072")
        );
    }

    #[test]
    fn an_empty_list_is_always_refused() {
        let err = check(&list(&[], &[]), None, 50, true).unwrap_err();
        assert!(err.to_string().starts_with("list tor: empty result"));
    }
}
