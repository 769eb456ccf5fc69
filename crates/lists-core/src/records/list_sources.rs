//! `ListSources`: which policy lists the `lists-refresh` CronJob regenerates, and from where.
//!
//! Rendered by render-edge into the ConfigMap `lists-sources`, mounted by the CronJob at
//! `/etc/lists-refresh/sources.json`, read by `lists-refresh`. Example:
//!
//! ```json
//! {
//!   "kind": "ListSources",
//!   "version": 1,
//!   "max_shrink_percent": 50,
//!   "timeout_seconds": 120,
//!   "lists": [
//!     {"name": "tor", "generator": "tor",
//!      "sources": ["https://check.torproject.org/torbulkexitlist"]},
//!     {"name": "hosting", "generator": "asn",
//!      "sources": ["https://iptoasn.com/data/ip2asn-combined.tsv.gz"],
//!      "asns": [16276, 24940]}
//!   ]
//! }
//! ```
//!
//! - `name` names the list everywhere: the ConfigMap key `<name>.txt` (or `<name>.packed`),
//!   the set name in the WasmPlugin's `pluginConfig.lists.packed`, the `--list-name` of the
//!   generator, a metric name in the filter. The filter's rule (pow-core's `valid_list_name`):
//!   1 to 32 of `[a-z0-9_-]`, unique, and at most 16 lists (`MAX_LISTS`): what the filter would
//!   refuse is refused here, before anything is published.
//! - `generator` is `asn` (runs `lists-gen-asn`) or `tor` (runs `lists-gen-tor`).
//! - `sources` are http(s) URLs or absolute file paths, at least one. Every source is read and
//!   the list is the union of what they give; if any source fails, the whole list keeps its
//!   previous version (a partial list would silently let visitors through).
//! - `format` (optional) forces the input format instead of detecting it: for `asn`
//!   `iptoasn`, `ip-location-db` or `geolite2`; for `tor` `bulk`, `exit-addresses` or `onionoo`.
//! - `asns` is required (non-empty) for `asn` and forbidden for `tor`.
//! - `max_shrink_percent` (default 50): a regenerated list that has lost more than this share of
//!   its entries compared with the published one is refused, and the old one is kept.
//! - `timeout_seconds` (default 120): the whole download of one source, connection included.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use pop_common::records::{Kind, Problem, RecordKind, Version};

use crate::formats::{self, AsnFormat, TorFormat};

pub const LIST_SOURCES_VERSION: u32 = 1;

/// The lists the refresh job regenerates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListSources {
    pub kind: Kind<ListSources>,
    pub version: Version<LIST_SOURCES_VERSION>,
    /// A list that shrinks by more than this percentage is refused (0 to 100).
    #[serde(default = "default_max_shrink_percent")]
    pub max_shrink_percent: u8,
    /// Time allowed to download one source, in seconds.
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: u32,
    pub lists: Vec<ListSource>,
}

/// One policy list and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListSource {
    pub name: String,
    pub generator: ListGenerator,
    pub sources: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asns: Vec<u32>,
}

/// Which generator builds a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListGenerator {
    /// `lists-gen-asn`: the prefixes of a set of ASNs.
    Asn,
    /// `lists-gen-tor`: the Tor exit addresses.
    Tor,
}

impl ListGenerator {
    /// The command that generates this kind of list.
    pub fn command(self) -> &'static str {
        match self {
            ListGenerator::Asn => "lists-gen-asn",
            ListGenerator::Tor => "lists-gen-tor",
        }
    }
}

/// The default `max_shrink_percent`.
pub const DEFAULT_MAX_SHRINK_PERCENT: u8 = 50;
/// The default `timeout_seconds`.
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 120;

fn default_max_shrink_percent() -> u8 {
    DEFAULT_MAX_SHRINK_PERCENT
}

fn default_timeout_seconds() -> u32 {
    DEFAULT_TIMEOUT_SECONDS
}

impl RecordKind for ListSources {
    const KIND: &'static str = "ListSources";
}

impl ListSources {
    /// The rules serde cannot express, one [`Problem`] each, naming its field
    /// (`lists[1].asns`); empty when the record is usable.
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if self.max_shrink_percent > 100 {
            problems.push(Problem::new(
                "max_shrink_percent",
                format!("{} is not a percentage (0 to 100)", self.max_shrink_percent),
            ));
        }
        if self.timeout_seconds == 0 {
            problems.push(Problem::new("timeout_seconds", "must be at least 1"));
        }
        if self.lists.is_empty() {
            problems.push(Problem::new("lists", "at least one list is needed"));
        }
        if self.lists.len() > MAX_LISTS {
            problems.push(Problem::new(
                "lists",
                format!(
                    "{} lists, the filter takes at most {MAX_LISTS}",
                    self.lists.len()
                ),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, list) in self.lists.iter().enumerate() {
            let at = |field: &str| format!("lists[{i}].{field}");
            if !valid_list_name(&list.name) {
                problems.push(Problem::new(
                    at("name"),
                    format!("`{}`: {LIST_NAME_RULE}", list.name),
                ));
            } else if !seen.insert(list.name.as_str()) {
                problems.push(Problem::new(
                    at("name"),
                    format!("`{}` appears twice", list.name),
                ));
            }
            if list.sources.is_empty() {
                problems.push(Problem::new(at("sources"), "at least one source is needed"));
            }
            for (j, source) in list.sources.iter().enumerate() {
                let remote = source.starts_with("https://") || source.starts_with("http://");
                if !remote && !source.starts_with('/') {
                    problems.push(Problem::new(
                        at(&format!("sources[{j}]")),
                        format!("`{source}` is neither an http(s) URL nor an absolute path"),
                    ));
                }
            }
            match list.generator {
                ListGenerator::Asn if list.asns.is_empty() => {
                    problems.push(Problem::new(
                        at("asns"),
                        "an `asn` list needs at least one ASN",
                    ));
                }
                ListGenerator::Tor if !list.asns.is_empty() => {
                    problems.push(Problem::new(at("asns"), "a `tor` list takes no ASN"));
                }
                _ => {}
            }
            let refusal = list
                .format
                .as_deref()
                .and_then(|format| match list.generator {
                    ListGenerator::Asn => formats::refusal::<AsnFormat>(format),
                    ListGenerator::Tor => formats::refusal::<TorFormat>(format),
                });
            if let Some(why) = refusal {
                problems.push(Problem::new(
                    at("format"),
                    format!("{why} (what {} takes)", list.generator.command()),
                ));
            }
        }
        problems
    }
}

/// Whether `name` can name a list: the filter's own rule (it also makes a valid ConfigMap key
/// once `.txt` is added).
pub use pow_core::config::{LIST_NAME_RULE, MAX_LISTS, valid_list_name};

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{
        "kind": "ListSources", "version": 1, "max_shrink_percent": 50, "timeout_seconds": 120,
        "lists": [
            {"name": "tor", "generator": "tor",
             "sources": ["https://check.torproject.org/torbulkexitlist"]},
            {"name": "hosting", "generator": "asn",
             "sources": ["https://iptoasn.com/data/ip2asn-combined.tsv.gz"],
             "asns": [16276, 24940]}
        ]
    }"#;

    #[test]
    fn the_documented_example_reads_writes_back_and_has_no_problem() {
        let sources: ListSources = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(sources.lists[1].asns, vec![16276, 24940]);
        assert_eq!(sources.lists[0].generator.command(), "lists-gen-tor");
        assert!(sources.problems().is_empty(), "{:?}", sources.problems());
        let again: ListSources =
            serde_json::from_str(&serde_json::to_string(&sources).unwrap()).unwrap();
        assert_eq!(sources, again);
    }

    #[test]
    fn the_knobs_have_defaults() {
        let short = r#"{"kind":"ListSources","version":1,"lists":[
            {"name":"tor","generator":"tor","sources":["/data/exits.txt"]}]}"#;
        let sources: ListSources = serde_json::from_str(short).unwrap();
        assert_eq!(sources.max_shrink_percent, 50);
        assert_eq!(sources.timeout_seconds, 120);
        assert!(sources.problems().is_empty());
    }

    #[test]
    fn unknown_fields_and_generators_are_refused() {
        let extra = EXAMPLE.replace("\"asns\"", "\"asn_list\"");
        assert!(serde_json::from_str::<ListSources>(&extra).is_err());
        let other = EXAMPLE.replace("\"generator\": \"tor\"", "\"generator\": \"bgp\"");
        assert!(serde_json::from_str::<ListSources>(&other).is_err());
    }

    #[test]
    fn broken_rules_are_each_named_with_their_field() {
        let bad = r#"{"kind":"ListSources","version":1,"max_shrink_percent":150,"lists":[
            {"name":"Tor","generator":"tor","sources":["exits.txt"],"asns":[1],"format":"Bulk"},
            {"name":"hosting","generator":"asn","sources":[],"format":"bulk"},
            {"name":"hosting","generator":"asn","sources":["/x"],"asns":[2],"format":"geolite2"}]}"#;
        let sources: ListSources = serde_json::from_str(bad).unwrap();
        let problems = pop_common::records::join_problems(&sources.problems());
        let fields: Vec<String> = sources.problems().into_iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                "max_shrink_percent",
                "lists[0].name",
                "lists[0].sources[0]",
                "lists[0].asns",
                "lists[0].format",
                "lists[1].sources",
                "lists[1].asns",
                "lists[1].format",
                "lists[2].name"
            ]
        );
        for expected in [
            "max_shrink_percent: 150",
            "lists[0].name: `Tor`",
            "lists[0].sources[0]: `exits.txt`",
            "lists[0].asns: a `tor` list takes no ASN",
            "lists[0].format: `Bulk` is not one of bulk, exit-addresses, onionoo (what lists-gen-tor takes)",
            "lists[1].format: `bulk` is not one of iptoasn, ip-location-db, geolite2",
            "lists[1].sources: at least one",
            "lists[1].asns: an `asn` list needs",
            "lists[2].name: `hosting` appears twice",
        ] {
            assert!(
                problems.contains(expected),
                "{expected} not in:\n{problems}"
            );
        }
    }

    #[test]
    fn list_names_follow_the_filters_rule() {
        assert!(valid_list_name("hosting-eu"));
        assert!(valid_list_name("tor_exits"));
        assert!(valid_list_name(&"a".repeat(32)));
        assert!(!valid_list_name(""));
        assert!(!valid_list_name("Tor"));
        assert!(!valid_list_name("tor.txt"));
        // 33 characters: one more than the filter takes; accepted here, every update that
        // carried it would be refused by the filter.
        assert!(!valid_list_name(&"a".repeat(33)));
        // The same rule as the filter's decoder, not a copy of it.
        for name in ["tor", "a-b_c", "Tor", &"a".repeat(33), ""] {
            let config = format!(r#"{{"lists": {{"sets": {{"{name}": "192.0.2.0/24"}}}}}}"#);
            assert_eq!(
                pow_core::PluginConfig::from_json(config.as_bytes()).is_ok(),
                valid_list_name(name),
                "{name}"
            );
        }
    }

    #[test]
    fn more_lists_than_the_filter_takes_are_a_problem() {
        let lists: Vec<String> = (0..=MAX_LISTS)
            .map(|i| format!(r#"{{"name":"l{i}","generator":"tor","sources":["/x"]}}"#))
            .collect();
        let text = format!(
            r#"{{"kind":"ListSources","version":1,"lists":[{}]}}"#,
            lists.join(",")
        );
        let sources: ListSources = serde_json::from_str(&text).unwrap();
        let problems = pop_common::records::join_problems(&sources.problems());
        assert!(
            problems.contains("lists: 17 lists, the filter takes at most 16"),
            "{problems}"
        );
    }
}
