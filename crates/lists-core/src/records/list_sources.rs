//! `ListSources`: which policy lists the `lists-refresh` CronJob regenerates, and from where,
//! and the Web Bot Auth agents whose keys it delivers with them (`agents`, see
//! [`AgentSource`](super::AgentSource)).
//!
//! Rendered by render-edge into the ConfigMap `lists-sources`, mounted by the CronJob at
//! `/etc/lists-refresh/sources.json`, read by `lists-refresh`. Example:
//!
//! ```json
//! {
//!   "kind": "ListSources",
//!   "version": 3,
//!   "max_shrink_percent": 50,
//!   "timeout_seconds": 120,
//!   "lists": [
//!     {"name": "tor", "generator": "tor",
//!      "sources": ["https://check.torproject.org/torbulkexitlist"]},
//!     {"name": "hosting", "generator": "asn",
//!      "sources": ["https://iptoasn.com/data/ip2asn-combined.tsv.gz"],
//!      "asns": [16276, 24940]},
//!     {"name": "googlebot", "generator": "crawlers",
//!      "sources": ["https://developers.google.com/static/crawling/ipranges/common-crawlers.json"],
//!      "tokens": ["Googlebot"]}
//!   ],
//!   "agents": [
//!     {"name": "examplebot",
//!      "directory": "https://bot.example.com/.well-known/http-message-signatures-directory"}
//!   ]
//! }
//! ```
//!
//! - `name` names the list everywhere: the ConfigMap key `<name>.txt` (or `<name>.packed`),
//!   the set name in the WasmPlugin's `pluginConfig.lists.packed`, the `--list-name` of the
//!   generator, a metric name in the filter. The filter's rule (pow-core's `valid_list_name`):
//!   1 to 32 of `[a-z0-9_-]`, unique, and at most 16 lists (`MAX_LISTS`): what the filter would
//!   refuse is refused here, before anything is published.
//! - `generator` is `asn` (runs `lists-gen-asn`), `tor` (runs `lists-gen-tor`) or `crawlers`
//!   (runs `lists-gen-crawlers`: a crawler operator's published ranges).
//! - `sources` are http(s) URLs or absolute file paths, at least one. Every source is read and
//!   the list is the union of what they give; if any source fails, the whole list keeps its
//!   previous version (a partial list would silently let visitors through).
//! - `format` (optional) forces the input format instead of detecting it: for `asn`
//!   `iptoasn`, `ip-location-db` or `geolite2`; for `tor` `bulk`, `exit-addresses` or `onionoo`;
//!   none for `crawlers`, which reads one format.
//! - `asns` is required (non-empty) for `asn` and forbidden for the others.
//! - `tokens` is required for `crawlers` and forbidden for the others: the User-Agent tokens the
//!   crawler's operator documents for those ranges (`Googlebot`), which the filter needs with
//!   the address to call a visitor that crawler. The filter's rule (pow-core's `token_problem`):
//!   1 to 16 tokens, each 1 to 64 bytes of visible ASCII without `;` or `,`, none twice.
//! - `max_shrink_percent` (default 50): a regenerated list that has lost more than this share of
//!   its entries compared with the published one is refused, and the old one is kept.
//! - `timeout_seconds` (default 120): the whole download of one source, connection included.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use pop_common::records::Problem;

use super::agent_source::{AgentSource, agent_problems};
use crate::formats::{self, AsnFormat, TorFormat};

/// 3: `agents`. 2: `tokens`, and the `crawlers` generator.
pub const LIST_SOURCES_VERSION: u32 = 3;

pop_common::record! {
    /// The lists the refresh job regenerates.
    pub struct ListSources, version LIST_SOURCES_VERSION {
        /// A list that shrinks by more than this percentage is refused (0 to 100).
        #[serde(default = "default_max_shrink_percent")]
        pub max_shrink_percent: u8,
        /// Time allowed to download one source, in seconds.
        #[serde(default = "default_timeout_seconds")]
        pub timeout_seconds: u32,
        pub lists: Vec<ListSource>,
        /// The Web Bot Auth agents whose keys are delivered with the lists.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub agents: Vec<AgentSource>,
    }
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
    /// The crawler's User-Agent tokens (`crawlers` lists only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<String>,
}

/// Which generator builds a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListGenerator {
    /// `lists-gen-asn`: the prefixes of a set of ASNs.
    Asn,
    /// `lists-gen-tor`: the Tor exit addresses.
    Tor,
    /// `lists-gen-crawlers`: a crawler operator's published address ranges.
    Crawlers,
}

impl ListGenerator {
    /// The command that generates this kind of list.
    pub fn command(self) -> &'static str {
        match self {
            ListGenerator::Asn => "lists-gen-asn",
            ListGenerator::Tor => "lists-gen-tor",
            ListGenerator::Crawlers => "lists-gen-crawlers",
        }
    }

    /// What the record and the errors call it (its serialised name).
    pub fn label(self) -> &'static str {
        match self {
            ListGenerator::Asn => "asn",
            ListGenerator::Tor => "tor",
            ListGenerator::Crawlers => "crawlers",
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
            problems.extend(list.problems(&at));
        }
        problems.extend(agent_problems(&self.agents));
        problems
    }
}

impl ListSource {
    /// The problems of one list besides its name (which needs the others), its fields named by
    /// `at` (`lists[1].asns`).
    fn problems(&self, at: &dyn Fn(&str) -> String) -> Vec<Problem> {
        let list = self;
        let mut problems = Vec::new();
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
            ListGenerator::Tor | ListGenerator::Crawlers if !list.asns.is_empty() => {
                problems.push(Problem::new(
                    at("asns"),
                    format!("a `{}` list takes no ASN", list.generator.label()),
                ));
            }
            _ => {}
        }
        problems.extend(token_problems(list.generator, &list.tokens, &at("tokens")));
        let refusal = list
            .format
            .as_deref()
            .and_then(|format| match list.generator {
                ListGenerator::Asn => formats::refusal::<AsnFormat>(format),
                ListGenerator::Tor => formats::refusal::<TorFormat>(format),
                ListGenerator::Crawlers => {
                    Some("a `crawlers` list takes no format: it reads one".to_owned())
                }
            });
        if let Some(why) = refusal {
            problems.push(Problem::new(
                at("format"),
                format!("{why} (what {} takes)", list.generator.command()),
            ));
        }
        problems
    }
}

/// Whether `name` can name a list: the filter's own rule (it also makes a valid ConfigMap key
/// once `.txt` is added).
pub use pow_core::config::{LIST_NAME_RULE, MAX_LISTS, valid_list_name};
/// The User-Agent token rule: the filter's own, as for list names.
pub use pow_core::config::{MAX_TOKENS, TOKEN_RULE, token_problem, valid_token};

/// The problems of a list's `tokens` (the field's path is `field`): required for a `crawlers`
/// list and checked by the filter's rule, forbidden for the others. Shared by both records.
pub(crate) fn token_problems(
    generator: ListGenerator,
    tokens: &[String],
    field: &str,
) -> Option<Problem> {
    if generator != ListGenerator::Crawlers {
        return (!tokens.is_empty()).then(|| {
            Problem::new(
                field,
                format!(
                    "`{}` lists take no token (only `crawlers` lists do)",
                    generator.label()
                ),
            )
        });
    }
    token_problem(tokens).map(|problem| match problem.index {
        Some(i) => Problem::new(format!("{field}[{i}]"), problem.message),
        None => Problem::new(
            field,
            if tokens.is_empty() {
                "a `crawlers` list needs at least one User-Agent token".to_owned()
            } else {
                problem.message
            },
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{
        "kind": "ListSources", "version": 3, "max_shrink_percent": 50, "timeout_seconds": 120,
        "lists": [
            {"name": "tor", "generator": "tor",
             "sources": ["https://check.torproject.org/torbulkexitlist"]},
            {"name": "hosting", "generator": "asn",
             "sources": ["https://iptoasn.com/data/ip2asn-combined.tsv.gz"],
             "asns": [16276, 24940]},
            {"name": "googlebot", "generator": "crawlers",
             "sources": ["https://developers.google.com/static/crawling/ipranges/common-crawlers.json"],
             "tokens": ["Googlebot"]}
        ]
    }"#;

    #[test]
    fn the_documented_example_reads_writes_back_and_has_no_problem() {
        let sources: ListSources = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(sources.lists[1].asns, vec![16276, 24940]);
        assert_eq!(sources.lists[0].generator.command(), "lists-gen-tor");
        assert_eq!(sources.lists[2].generator.command(), "lists-gen-crawlers");
        assert_eq!(sources.lists[2].tokens, ["Googlebot"]);
        assert!(sources.lists[0].tokens.is_empty());
        assert!(sources.problems().is_empty(), "{:?}", sources.problems());
        let again: ListSources =
            serde_json::from_str(&serde_json::to_string(&sources).unwrap()).unwrap();
        assert_eq!(sources, again);
    }

    #[test]
    fn the_knobs_have_defaults() {
        let short = r#"{"kind":"ListSources","version":3,"lists":[
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

    /// The problems of record `json`: exactly these fields, in this order, and each of
    /// `expected` somewhere in their message.
    fn assert_problems(json: &str, fields: &[&str], expected: &[&str]) {
        let sources: ListSources = serde_json::from_str(json).unwrap();
        let problems = pop_common::records::join_problems(&sources.problems());
        let found: Vec<String> = sources.problems().into_iter().map(|p| p.field).collect();
        assert_eq!(found, fields, "{problems}");
        for message in expected {
            assert!(problems.contains(message), "{message} not in:\n{problems}");
        }
    }

    #[test]
    fn broken_rules_are_each_named_with_their_field() {
        let bad = r#"{"kind":"ListSources","version":3,"max_shrink_percent":150,"lists":[
            {"name":"Tor","generator":"tor","sources":["exits.txt"],"asns":[1],"format":"Bulk"},
            {"name":"hosting","generator":"asn","sources":[],"format":"bulk"},
            {"name":"hosting","generator":"asn","sources":["/x"],"asns":[2],"format":"geolite2"}]}"#;
        assert_problems(
            bad,
            &[
                "max_shrink_percent",
                "lists[0].name",
                "lists[0].sources[0]",
                "lists[0].asns",
                "lists[0].format",
                "lists[1].sources",
                "lists[1].asns",
                "lists[1].format",
                "lists[2].name",
            ],
            &[
                "max_shrink_percent: 150",
                "lists[0].name: `Tor`",
                "lists[0].sources[0]: `exits.txt`",
                "lists[0].asns: a `tor` list takes no ASN",
                "lists[0].format: `Bulk` is not one of bulk, exit-addresses, onionoo (what lists-gen-tor takes)",
                "lists[1].format: `bulk` is not one of iptoasn, ip-location-db, geolite2",
                "lists[1].sources: at least one",
                "lists[1].asns: an `asn` list needs",
                "lists[2].name: `hosting` appears twice",
            ],
        );
    }

    #[test]
    fn a_generators_label_is_its_serialised_name() {
        for generator in [
            ListGenerator::Asn,
            ListGenerator::Tor,
            ListGenerator::Crawlers,
        ] {
            assert_eq!(
                serde_json::to_value(generator).unwrap(),
                generator.label(),
                "{generator:?}"
            );
        }
    }

    #[test]
    fn a_version_2_record_is_refused_naming_the_version() {
        let old = EXAMPLE.replace("\"version\": 3", "\"version\": 2");
        let err = serde_json::from_str::<ListSources>(&old).unwrap_err();
        assert!(err.to_string().contains("unsupported version 2"), "{err}");
    }

    #[test]
    fn crawler_lists_need_tokens_by_the_filters_rule_and_the_others_take_none() {
        let bad = r#"{"kind":"ListSources","version":3,"lists":[
            {"name":"googlebot","generator":"crawlers","sources":["/g.json"]},
            {"name":"bingbot","generator":"crawlers","sources":["/b.json"],
             "tokens":["bingbot","bing bot"]},
            {"name":"gptbot","generator":"crawlers","sources":["/o.json"],"format":"json",
             "asns":[8075],"tokens":["GPTBot","GPTBot"]},
            {"name":"tor","generator":"tor","sources":["/t"],"tokens":["Googlebot"]},
            {"name":"many","generator":"crawlers","sources":["/m.json"],
             "tokens":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]},
            {"name":"long","generator":"crawlers","sources":["/l.json"],
             "tokens":["ok","x;y"]}]}"#;
        assert_problems(
            bad,
            &[
                "lists[0].tokens",
                "lists[1].tokens[1]",
                "lists[2].asns",
                "lists[2].tokens[1]",
                "lists[2].format",
                "lists[3].tokens",
                "lists[4].tokens",
                "lists[5].tokens[1]",
            ],
            &[
                "lists[0].tokens: a `crawlers` list needs at least one User-Agent token",
                "lists[1].tokens[1]: `bing bot`: a User-Agent token is 1 to 64 bytes of visible ASCII",
                "lists[2].asns: a `crawlers` list takes no ASN",
                "lists[2].tokens[1]: `GPTBot` appears twice",
                "lists[2].format: a `crawlers` list takes no format",
                "lists[3].tokens: `tor` lists take no token (only `crawlers` lists do)",
                "lists[4].tokens: 17 tokens, at most 16",
                "lists[5].tokens[1]: `x;y`",
            ],
        );
    }

    /// `make lists` reads the committed example: it must be a record the refresh takes.
    #[test]
    fn the_committed_example_has_no_problem() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/lists-sources.example.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let sources: ListSources = serde_json::from_str(&text).unwrap();
        assert!(sources.problems().is_empty(), "{:?}", sources.problems());
        assert!(sources.lists.len() <= MAX_LISTS);
        let crawlers = sources
            .lists
            .iter()
            .filter(|l| l.generator == ListGenerator::Crawlers);
        assert!(crawlers.clone().count() > 0);
        assert!(crawlers.clone().all(|l| !l.tokens.is_empty()));
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
            r#"{{"kind":"ListSources","version":3,"lists":[{}]}}"#,
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
