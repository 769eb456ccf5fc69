//! `PolicyList`: one generated policy list (Tor exits, the prefixes of hosting ASNs, a
//! crawler's published ranges).
//!
//! Written on stdout by `lists-gen-asn`, `lists-gen-tor` and `lists-gen-crawlers`, read by
//! `lists-refresh` (which publishes it) and by the generators themselves as `--previous`.
//! Example:
//!
//! ```json
//! {
//!   "kind": "PolicyList",
//!   "version": 2,
//!   "name": "hosting",
//!   "generator": "asn",
//!   "sources": ["https://iptoasn.com/data/ip2asn-combined.tsv.gz"],
//!   "asns": [24940],
//!   "generated_at": "2026-06-19T17:00:00Z",
//!   "counts": {"ipv4": 2, "ipv6": 1},
//!   "ipv4": ["5.9.0.0/16", "23.88.0.0/17"],
//!   "ipv6": ["2a01:4f8::/32"]
//! }
//! ```
//!
//! Each family's prefixes are canonical (no host bit set), sorted by address and never overlap:
//! an `asn` or `crawlers` list is the minimal aggregated set; a `tor` list has one /32 or /128
//! per address. A `crawlers` list carries `tokens`, the User-Agent tokens its operator documents
//! (`["Googlebot"]`), by the filter's rule; the other lists carry none.
//! `sources` never carries credentials: user info and query strings of URLs are redacted.

use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

use super::list_sources::{ListGenerator, token_problems, valid_list_name};
use pop_common::records::Problem;

/// 2: `tokens`, and the `crawlers` generator.
pub const POLICY_LIST_VERSION: u32 = 2;

pop_common::record! {
    /// One generated list of prefixes.
    pub struct PolicyList, version POLICY_LIST_VERSION {
        /// The list's name (see [`crate::records::ListSources`]).
        pub name: String,
        /// What built it.
        pub generator: ListGenerator,
        /// Where the data came from (URLs redacted of credentials, or file paths).
        pub sources: Vec<String>,
        /// The ASNs selected (`asn` lists only).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub asns: Vec<u32>,
        /// The crawler's User-Agent tokens (`crawlers` lists only).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub tokens: Vec<String>,
        /// When it was generated, RFC 3339 in UTC (`2026-06-19T17:00:00Z`).
        pub generated_at: String,
        /// How many prefixes per family (equal to the lengths of `ipv4` and `ipv6`).
        pub counts: ListCounts,
        pub ipv4: Vec<Ipv4Net>,
        pub ipv6: Vec<Ipv6Net>,
    }
}

/// Prefix counts per address family.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListCounts {
    pub ipv4: usize,
    pub ipv6: usize,
}

impl PolicyList {
    /// The text form of the list, the one every tool writes (the `<name>.txt` keys of the
    /// `policy-lists` ConfigMap, the filter's `pluginConfig.lists.sets`, `-o text`):
    /// one CIDR per line, IPv4 then IPv6, each line ending with `\n`.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut text = String::with_capacity((self.ipv4.len() + self.ipv6.len()) * 18);
        for net in &self.ipv4 {
            push_ipv4_net(&mut text, net);
            text.push('\n');
        }
        for net in &self.ipv6 {
            // Writing to a String cannot fail.
            let _ = writeln!(text, "{net}");
        }
        text
    }

    /// The rules serde cannot express; one message per problem, empty when the record is sound.
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if !valid_list_name(&self.name) {
            problems.push(Problem::new(
                "name",
                format!("`{}` is not a valid list name", self.name),
            ));
        }
        problems.extend(token_problems(self.generator, &self.tokens, "tokens"));
        for (field, counted, actual) in [
            ("ipv4", self.counts.ipv4, self.ipv4.len()),
            ("ipv6", self.counts.ipv6, self.ipv6.len()),
        ] {
            if counted != actual {
                problems.push(Problem::new(
                    format!("counts.{field}"),
                    format!("{counted} but {field} has {actual} prefixes"),
                ));
            }
        }
        if let Some(p) = first_disorder(&self.ipv4, |n| {
            (
                u32::from(n.network()).into(),
                u32::from(n.broadcast()).into(),
            )
        }) {
            problems.push(Problem::new(format!("ipv4[{p}]"), DISORDER));
        }
        if let Some(p) = first_disorder(&self.ipv6, |n| {
            (u128::from(n.network()), u128::from(n.broadcast()))
        }) {
            problems.push(Problem::new(format!("ipv6[{p}]"), DISORDER));
        }
        if let Some(p) = self.ipv4.iter().position(|n| n.trunc() != *n) {
            problems.push(Problem::new(
                format!("ipv4[{p}]"),
                format!("{} has host bits set", self.ipv4[p]),
            ));
        }
        if let Some(p) = self.ipv6.iter().position(|n| n.trunc() != *n) {
            problems.push(Problem::new(
                format!("ipv6[{p}]"),
                format!("{} has host bits set", self.ipv6[p]),
            ));
        }
        problems
    }
}

const DISORDER: &str = "not sorted after, or overlapping, the prefix before it";

/// The index of the first prefix that does not start strictly after the previous one ends.
fn first_disorder<N>(nets: &[N], bounds: impl Fn(&N) -> (u128, u128)) -> Option<usize> {
    nets.windows(2)
        .position(|w| bounds(&w[1]).0 <= bounds(&w[0]).1)
        .map(|i| i + 1)
}

/// Appends `net` as its `Display` writes it (`192.0.2.0/24`), without the formatting machinery:
/// a list holds tens of thousands of IPv4 prefixes, and `to_string` was most of the time spent
/// writing them.
fn push_ipv4_net(text: &mut String, net: &Ipv4Net) {
    let [a, b, c, d] = net.addr().octets();
    for (byte, before) in [(a, None), (b, Some('.')), (c, Some('.')), (d, Some('.'))] {
        text.extend(before);
        push_decimal(text, byte);
    }
    text.push('/');
    push_decimal(text, net.prefix_len());
}

fn push_decimal(text: &mut String, value: u8) {
    if value >= 100 {
        text.push(char::from(b'0' + value / 100));
    }
    if value >= 10 {
        text.push(char::from(b'0' + value / 10 % 10));
    }
    text.push(char::from(b'0' + value % 10));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_prefixes_are_written_as_their_display_writes_them() {
        let mut text = String::new();
        let mut expected = String::new();
        for len in 0..=32u8 {
            for octets in [
                [0, 0, 0, 0],
                [255, 255, 255, 255],
                [9, 10, 99, 100],
                [1, 200, 31, 250],
            ] {
                let net = Ipv4Net::new(std::net::Ipv4Addr::from(octets), len).unwrap();
                push_ipv4_net(&mut text, &net);
                text.push('\n');
                expected.push_str(&format!("{net}\n"));
            }
        }
        assert_eq!(text, expected);
        assert!(text.contains("\n9.10.99.100/7\n1.200.31.250/7\n"), "{text}");
        assert!(text.ends_with("\n255.255.255.255/32\n9.10.99.100/32\n1.200.31.250/32\n"));
    }

    const EXAMPLE: &str = r#"{
        "kind": "PolicyList", "version": 2, "name": "hosting", "generator": "asn",
        "sources": ["https://iptoasn.com/data/ip2asn-combined.tsv.gz"], "asns": [24940],
        "generated_at": "2026-06-19T17:00:00Z", "counts": {"ipv4": 2, "ipv6": 1},
        "ipv4": ["5.9.0.0/16", "23.88.0.0/17"], "ipv6": ["2a01:4f8::/32"]
    }"#;

    #[test]
    fn the_documented_example_reads_writes_back_and_is_sound() {
        let list: PolicyList = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(list.ipv6[0].prefix_len(), 32);
        assert!(list.problems().is_empty(), "{:?}", list.problems());
        let text = serde_json::to_string(&list).unwrap();
        assert!(
            text.contains(r#""ipv4":["5.9.0.0/16","23.88.0.0/17"]"#),
            "{text}"
        );
        assert_eq!(list, serde_json::from_str::<PolicyList>(&text).unwrap());
    }

    #[test]
    fn a_tor_list_has_no_asns_field_and_unknown_fields_are_refused() {
        let tor = EXAMPLE
            .replace("\"asn\"", "\"tor\"")
            .replace("\"asns\": [24940],", "");
        let list: PolicyList = serde_json::from_str(&tor).unwrap();
        assert!(!serde_json::to_string(&list).unwrap().contains("asns"));
        let extra = EXAMPLE.replace("\"asns\"", "\"asn\": 1, \"asns\"");
        assert!(serde_json::from_str::<PolicyList>(&extra).is_err());
        let bad_prefix = EXAMPLE.replace("5.9.0.0/16", "5.9.0.0/33");
        assert!(serde_json::from_str::<PolicyList>(&bad_prefix).is_err());
    }

    #[test]
    fn a_crawlers_list_carries_its_tokens_by_the_filters_rule() {
        let crawlers = EXAMPLE
            .replace("\"asn\"", "\"crawlers\"")
            .replace("\"asns\": [24940]", "\"tokens\": [\"Googlebot\"]");
        let list: PolicyList = serde_json::from_str(&crawlers).unwrap();
        assert!(list.problems().is_empty(), "{:?}", list.problems());
        let text = serde_json::to_string(&list).unwrap();
        assert!(text.contains(r#""tokens":["Googlebot"]"#), "{text}");
        let problems = |json: &str| {
            let list: PolicyList = serde_json::from_str(json).unwrap();
            pop_common::records::join_problems(&list.problems())
        };
        assert_eq!(
            problems(&crawlers.replace("\"tokens\": [\"Googlebot\"],", "")),
            "tokens: a `crawlers` list needs at least one User-Agent token"
        );
        assert!(
            problems(&crawlers.replace("[\"Googlebot\"]", "[\"Googlebot\", \"Google bot\"]"))
                .starts_with("tokens[1]: `Google bot`: a User-Agent token is")
        );
        assert_eq!(
            problems(&EXAMPLE.replace("\"asns\"", "\"tokens\": [\"Googlebot\"], \"asns\"")),
            "tokens: `asn` lists take no token (only `crawlers` lists do)"
        );
    }

    #[test]
    fn the_text_form_is_one_cidr_per_line_ipv4_first_and_the_filter_reads_it_back() {
        let list: PolicyList = serde_json::from_str(EXAMPLE).unwrap();
        let text = list.to_text();
        assert_eq!(text, "5.9.0.0/16\n23.88.0.0/17\n2a01:4f8::/32\n");
        assert_eq!(pow_core::lists::parse_set(&text).map(|_| ()), Ok(()));
    }

    #[test]
    fn wrong_counts_disorder_overlap_and_host_bits_are_problems() {
        let bad = EXAMPLE
            .replace("\"ipv4\": 2", "\"ipv4\": 3")
            .replace(
                r#"["5.9.0.0/16", "23.88.0.0/17"]"#,
                r#"["23.88.0.0/17", "5.9.0.0/16", "5.9.1.0/24"]"#,
            )
            .replace("2a01:4f8::/32", "2a01:4f8::1/32");
        let list: PolicyList = serde_json::from_str(&bad).unwrap();
        let problems = pop_common::records::join_problems(&list.problems());
        assert!(problems.contains("ipv4[1]: not sorted"), "{problems}");
        assert!(problems.contains("ipv6[0]: 2a01:4f8::1/32 has host bits set"));
        let fixed_counts = bad.replace("\"ipv4\": 3", "\"ipv4\": 2");
        let list: PolicyList = serde_json::from_str(&fixed_counts).unwrap();
        assert!(
            pop_common::records::join_problems(&list.problems()).contains("counts.ipv4: 2 but")
        );
    }
}
