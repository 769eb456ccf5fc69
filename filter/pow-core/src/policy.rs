//! The policy: ordered rules, the first that matches decides; the short form (`bypass_paths`,
//! the lists' difficulties, `mode`) decides what no rule matched.
//!
//! A rule matches on a conjunction of conditions, each optional; within one condition, any of
//! its values: the host (exact, or `*.` and a suffix), the method, the path (exact, or ending
//! with `/`, every path below it), the User-Agent (case-insensitive substrings), headers (present,
//! absent, or equal to a value), `Accept` naming a media type, the address in named lists, a
//! verified crawler (by name or any), a spoofed crawler, a verified Web Bot Auth agent. Actions:
//! `allow`, `deny` (403), `challenge` (a proof of work, or a `refresh` page for clients without
//! JavaScript).
//!
//! Rules are compiled at configure time into one index per condition ([`index`]): each gives,
//! for a request, the set of rules it lets through, as a bitset; the first rule of their
//! intersection decides. The work per request is a few lookups per condition and a bitset
//! operation per condition, whatever the number of rules.
//!
//! Paths are matched as origins read them. An `allow` rule's path matches only a plain path
//! (what every origin reads alike, as `bypass_paths` requires), and the request reaches the
//! origin without its query unless the rule keeps it: a query could only matter to a handler the
//! rule did not mean. A `deny` or `challenge` rule's path also matches the path as a lenient origin
//! may read it (percent-decoded, `;` parameters dropped, dot segments resolved, `\` as `/`,
//! case folded), so that `/%61dmin/` or `/Admin;x/` do not walk around `/admin/`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{
    ConfigError, MAX_DIFFICULTY, MIN_DIFFICULTY, PluginConfig, err as config_err, valid_list_name,
};

mod index;
mod path;

pub use index::{CompiledPolicy, CompiledRule, Facts, Features};

/// The most rules a policy may have (each is a bit of the indexes' sets).
pub const MAX_RULES: usize = 1024;
/// The most distinct header names the rules may test (each is one lookup per request).
pub const MAX_HEADER_NAMES: usize = 16;
/// The longest User-Agent substring, header value or host a rule may name.
pub const MAX_MATCH_LEN: usize = 256;
/// The most `/`-separated segments a rule's path may have: the index looks no deeper.
pub const MAX_PATH_SEGMENTS: usize = 32;

/// Names of the rules the short form stands for, reserved: `pow-decision` and the per-rule
/// counters say which decided. The lists' rules are `list.<name>`.
pub const ACME_RULE: &str = "acme";
pub const BYPASS_RULE: &str = "bypass";
pub const NO_ADDRESS_RULE: &str = "no-address";
pub const DEFAULT_RULE: &str = "default";
const RESERVED: [&str; 4] = [ACME_RULE, BYPASS_RULE, NO_ADDRESS_RULE, DEFAULT_RULE];

/// One rule of `rules`, as written in the pluginConfig.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Says which rule decided (`pow-decision`, counters): 1 to 32 of `[a-z0-9_-]`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub method: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user_agent: Vec<String>,
    /// Header name (lowercase) to `true` (present), `false` (absent) or a value (equal).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub header: BTreeMap<String, HeaderCondition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accept: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lists: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crawler: Option<Names>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spoofed_crawler: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_agent: Option<Names>,
    pub action: RuleAction,
    /// `challenge` with `kind` `pow`: the bits asked (the config's `difficulty` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub difficulty: Option<u8>,
    /// `challenge` only: `pow` (the default) or `refresh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ChallengeKind>,
    /// `allow` with a `path` only: let the query through to the origin.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_query: bool,
}

/// A header condition: present (`true`), absent (`false`), or equal to this value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HeaderCondition {
    Present(bool),
    Equals(String),
}

/// `"any"`, or some names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Names {
    /// Must be `"any"`.
    Any(String),
    Some(Vec<String>),
}

impl Names {
    /// The names, or `None` for any.
    pub fn names(&self) -> Option<&[String]> {
        match self {
            Names::Any(_) => None,
            Names::Some(names) => Some(names),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleAction {
    #[default]
    Allow,
    Deny,
    Challenge,
}

/// What a challenge asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChallengeKind {
    /// A proof of work solved by the page's script.
    #[default]
    Pow,
    /// A page without script that goes on to the verify endpoint after a delay: costs a bot
    /// the wait and a request, works in any browser.
    Refresh,
}

impl ChallengeKind {
    pub fn name(self) -> &'static str {
        match self {
            ChallengeKind::Pow => "pow",
            ChallengeKind::Refresh => "refresh",
        }
    }
}

/// What a rule (or the short form) decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allow,
    Deny,
    /// `difficulty` 0 is the refresh kind: a clearance paid at 0 bits satisfies no `pow` rule.
    Challenge {
        difficulty: u8,
        kind: ChallengeKind,
    },
}

impl Outcome {
    /// The challenge of this kind: a refresh clearance is recorded as 0 bits.
    pub fn challenge(kind: ChallengeKind, difficulty: u8) -> Outcome {
        match kind {
            ChallengeKind::Pow => Outcome::Challenge { difficulty, kind },
            ChallengeKind::Refresh => Outcome::Challenge {
                difficulty: 0,
                kind,
            },
        }
    }
}

/// What `pow-decision` and the counters say happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let through by an `allow` rule (or the short form's).
    Allowed,
    /// Let through on a clearance cookie paid for the challenge asked.
    Cleared,
    Denied,
    Challenged,
}

impl Verdict {
    pub const ALL: [Verdict; 4] = [
        Verdict::Allowed,
        Verdict::Cleared,
        Verdict::Denied,
        Verdict::Challenged,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Cleared => "cleared",
            Verdict::Denied => "denied",
            Verdict::Challenged => "challenged",
        }
    }

    /// The verdicts a rule with this outcome can give.
    pub fn of(outcome: Outcome) -> &'static [Verdict] {
        match outcome {
            Outcome::Allow => &[Verdict::Allowed],
            Outcome::Deny => &[Verdict::Denied],
            Outcome::Challenge { .. } => &[Verdict::Cleared, Verdict::Challenged],
        }
    }
}

/// The counter of a rule's verdict: `pow_decisions{rule, action}`.
pub fn rule_metric(verdict: Verdict, rule: &str) -> String {
    use crate::filter::metric;
    metric::tagged(
        metric::DECISIONS,
        &[(metric::RULE, rule), (metric::ACTION, verdict.name())],
    )
}

/// The short form's rule for a list.
pub fn list_rule(list: &str) -> String {
    format!("list.{list}")
}

/// The checks of `rules` serde cannot express; errors name `rules[i].<field>`.
pub fn check(config: &PluginConfig) -> Result<(), ConfigError> {
    let rules = &config.rules;
    if rules.len() > MAX_RULES {
        return Err(config_err("rules", format!("at most {MAX_RULES} rules")));
    }
    let mut header_names: Vec<&str> = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let field = |f: &str| format!("rules[{i}].{f}");
        check_name(rule, &rules[..i], &field)?;
        check_request_conditions(rule, &field)?;
        check_headers(rule, &field, &mut header_names)?;
        check_client_conditions(rule, &field)?;
        check_action(rule, &field)?;
    }
    if header_names.len() > MAX_HEADER_NAMES {
        return Err(config_err(
            "rules",
            format!(
                "the rules test {} header names, at most {MAX_HEADER_NAMES}",
                header_names.len()
            ),
        ));
    }
    Ok(())
}

/// A rule's name: valid, not one of the short form's, not an earlier rule's.
fn check_name(
    rule: &Rule,
    earlier: &[Rule],
    field: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if !valid_list_name(&rule.name) {
        return Err(config_err(
            field("name"),
            "1 to 32 of [a-z0-9_-] (it becomes part of a metric name)",
        ));
    }
    if RESERVED.contains(&rule.name.as_str()) {
        return Err(config_err(
            field("name"),
            format!("`{}` names a rule of the short form", rule.name),
        ));
    }
    if earlier.iter().any(|r| r.name == rule.name) {
        return Err(config_err(
            field("name"),
            format!("another rule is named `{}`", rule.name),
        ));
    }
    Ok(())
}

/// The conditions on the request line and the User-Agent: host, method, path, user_agent.
fn check_request_conditions(
    rule: &Rule,
    field: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    for (j, host) in rule.host.iter().enumerate() {
        let name = host.strip_prefix("*.").unwrap_or(host);
        if !is_lower_dns_name(name) {
            return Err(config_err(
                field(&format!("host[{j}]")),
                "a lowercase host name, or `*.` then one (no port, no trailing dot)",
            ));
        }
    }
    for (j, method) in rule.method.iter().enumerate() {
        if method.is_empty() || method.len() > 16 || !method.bytes().all(|b| b.is_ascii_uppercase())
        {
            return Err(config_err(
                field(&format!("method[{j}]")),
                "an uppercase method such as GET",
            ));
        }
    }
    for (j, p) in rule.path.iter().enumerate() {
        if !crate::bypass::is_plain(p) || p == "/" || p.split('/').count() > MAX_PATH_SEGMENTS {
            return Err(config_err(
                field(&format!("path[{j}]")),
                format!(
                    "a plain path other than `/`, of at most {MAX_PATH_SEGMENTS} segments: \
                     `/` then segments of letters, digits, `-`, `.`, `_`, `~`; ending with `/` \
                     it is every path below it"
                ),
            ));
        }
    }
    for (j, ua) in rule.user_agent.iter().enumerate() {
        if !is_visible_text(ua) {
            return Err(config_err(
                field(&format!("user_agent[{j}]")),
                format!("1 to {MAX_MATCH_LEN} printable ASCII characters"),
            ));
        }
    }
    Ok(())
}

/// The header conditions; each name tested is added to `header_names`.
fn check_headers<'r>(
    rule: &'r Rule,
    field: &dyn Fn(&str) -> String,
    header_names: &mut Vec<&'r str>,
) -> Result<(), ConfigError> {
    for (name, condition) in &rule.header {
        let f = field(&format!("header.{name}"));
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(config_err(f, "a lowercase header name"));
        }
        if matches!(name.as_str(), "cookie" | "host") {
            return Err(config_err(
                f,
                "the filter reads cookies for its own clearance only, and the host is \
                 matched by `host`",
            ));
        }
        if let HeaderCondition::Equals(v) = condition
            && !is_visible_text(v)
        {
            return Err(config_err(
                f,
                format!("`true`, `false`, or 1 to {MAX_MATCH_LEN} printable ASCII characters"),
            ));
        }
        if !header_names.contains(&name.as_str()) {
            header_names.push(name);
        }
    }
    Ok(())
}

/// The conditions on what the client is: `accept`, `lists`, `crawler`, `signed_agent`.
fn check_client_conditions(rule: &Rule, field: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    for (j, media) in rule.accept.iter().enumerate() {
        let ok = media
            .split_once('/')
            .is_some_and(|(t, s)| is_token(t) && is_token(s) && t != "*" && s != "*")
            && media.bytes().all(|b| !b.is_ascii_uppercase());
        if !ok {
            return Err(config_err(
                field(&format!("accept[{j}]")),
                "a lowercase media type such as application/rss+xml (no wildcard)",
            ));
        }
    }
    for (j, list) in rule.lists.iter().enumerate() {
        if !valid_list_name(list) {
            return Err(config_err(
                field(&format!("lists[{j}]")),
                crate::config::LIST_NAME_RULE,
            ));
        }
    }
    for (what, names) in [
        ("crawler", &rule.crawler),
        ("signed_agent", &rule.signed_agent),
    ] {
        match names {
            Some(Names::Any(word)) if word != "any" => {
                return Err(config_err(field(what), "`any`, or a list of names"));
            }
            Some(Names::Some(list)) => {
                if list.is_empty() {
                    return Err(config_err(field(what), "`any`, or a list of names"));
                }
                if let Some(j) = list.iter().position(|n| !valid_list_name(n)) {
                    return Err(config_err(
                        field(&format!("{what}[{j}]")),
                        crate::config::LIST_NAME_RULE,
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_action(rule: &Rule, field: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    match rule.action {
        RuleAction::Challenge => {
            if let Some(bits) = rule.difficulty {
                if rule.kind == Some(ChallengeKind::Refresh) {
                    return Err(config_err(
                        field("difficulty"),
                        "a refresh challenge asks no work: no difficulty",
                    ));
                }
                if !(MIN_DIFFICULTY..=MAX_DIFFICULTY).contains(&bits) {
                    return Err(config_err(
                        field("difficulty"),
                        format!("difficulty must be {MIN_DIFFICULTY} to {MAX_DIFFICULTY} bits"),
                    ));
                }
            }
        }
        RuleAction::Allow | RuleAction::Deny => {
            if rule.difficulty.is_some() {
                return Err(config_err(field("difficulty"), "only for `challenge`"));
            }
            if rule.kind.is_some() {
                return Err(config_err(field("kind"), "only for `challenge`"));
            }
        }
    }
    if rule.keep_query && (rule.action != RuleAction::Allow || rule.path.is_empty()) {
        return Err(config_err(
            field("keep_query"),
            "only for an `allow` rule with a `path`",
        ));
    }
    Ok(())
}

/// The outcome a rule gives, its defaults filled from the config.
pub fn outcome_of(rule: &Rule, config: &PluginConfig) -> Outcome {
    match rule.action {
        RuleAction::Allow => Outcome::Allow,
        RuleAction::Deny => Outcome::Deny,
        RuleAction::Challenge => Outcome::challenge(
            rule.kind.unwrap_or_default(),
            rule.difficulty.unwrap_or(config.difficulty),
        ),
    }
}

fn is_visible_text(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_MATCH_LEN && s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A lowercase DNS name: labels of `[a-z0-9-]` (and `_`, which some names carry), 1 to 63 each,
/// 253 in all.
fn is_lower_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rules: &str) -> Result<PluginConfig, ConfigError> {
        PluginConfig::from_json(format!(r#"{{"rules": {rules}}}"#).as_bytes())
    }

    #[test]
    fn rules_decode_with_their_defaults() {
        let c = config(
            r#"[{"name": "feeds", "accept": ["application/rss+xml"], "action": "challenge", "kind": "refresh"},
                {"name": "login", "path": ["/login"], "action": "challenge", "difficulty": 20},
                {"name": "ai", "user_agent": ["GPTBot"], "header": {"x-a": true, "x-b": "v"}, "action": "deny"},
                {"name": "crawlers", "crawler": "any", "action": "allow"},
                {"name": "api", "host": ["api.example.org", "*.example.net"], "method": ["GET"], "action": "allow"}]"#,
        )
        .unwrap();
        assert_eq!(c.rules.len(), 5);
        assert_eq!(
            outcome_of(&c.rules[0], &c),
            Outcome::Challenge {
                difficulty: 0,
                kind: ChallengeKind::Refresh
            }
        );
        assert_eq!(
            outcome_of(&c.rules[1], &c),
            Outcome::Challenge {
                difficulty: 20,
                kind: ChallengeKind::Pow
            }
        );
        assert_eq!(outcome_of(&c.rules[2], &c), Outcome::Deny);
        assert_eq!(c.rules[3].crawler, Some(Names::Any("any".into())));
    }

    #[test]
    fn a_bad_rule_is_refused_naming_the_rule_and_the_field() {
        for (rules, field) in [
            (r#"[{"name": "Bad", "action": "allow"}]"#, "rules[0].name"),
            (
                r#"[{"name": "a", "action": "allow"}, {"name": "a", "action": "deny"}]"#,
                "rules[1].name",
            ),
            (
                r#"[{"name": "default", "action": "allow"}]"#,
                "rules[0].name",
            ),
            (
                r#"[{"name": "a", "host": ["Example.org"], "action": "allow"}]"#,
                "rules[0].host[0]",
            ),
            (
                r#"[{"name": "a", "host": ["example.org:443"], "action": "allow"}]"#,
                "rules[0].host[0]",
            ),
            (
                r#"[{"name": "a", "method": ["get"], "action": "allow"}]"#,
                "rules[0].method[0]",
            ),
            (
                r#"[{"name": "a", "path": ["/a/../b"], "action": "allow"}]"#,
                "rules[0].path[0]",
            ),
            (
                r#"[{"name": "a", "path": ["/"], "action": "allow"}]"#,
                "rules[0].path[0]",
            ),
            (
                r#"[{"name": "a", "user_agent": [""], "action": "allow"}]"#,
                "rules[0].user_agent[0]",
            ),
            (
                r#"[{"name": "a", "header": {"Cookie": true}, "action": "allow"}]"#,
                "rules[0].header.Cookie",
            ),
            (
                r#"[{"name": "a", "header": {"cookie": true}, "action": "allow"}]"#,
                "rules[0].header.cookie",
            ),
            (
                r#"[{"name": "a", "accept": ["*/*"], "action": "allow"}]"#,
                "rules[0].accept[0]",
            ),
            (
                r#"[{"name": "a", "lists": ["Tor"], "action": "allow"}]"#,
                "rules[0].lists[0]",
            ),
            (
                r#"[{"name": "a", "crawler": "all", "action": "allow"}]"#,
                "rules[0].crawler",
            ),
            (
                r#"[{"name": "a", "crawler": [], "action": "allow"}]"#,
                "rules[0].crawler",
            ),
            (
                r#"[{"name": "a", "action": "allow", "difficulty": 3}]"#,
                "rules[0].difficulty",
            ),
            (
                r#"[{"name": "a", "action": "deny", "kind": "pow"}]"#,
                "rules[0].kind",
            ),
            (
                r#"[{"name": "a", "action": "challenge", "difficulty": 40}]"#,
                "rules[0].difficulty",
            ),
            (
                r#"[{"name": "a", "action": "challenge", "kind": "refresh", "difficulty": 4}]"#,
                "rules[0].difficulty",
            ),
            (
                r#"[{"name": "a", "action": "allow", "keep_query": true}]"#,
                "rules[0].keep_query",
            ),
            (r#"[{"name": "a", "action": "maybe"}]"#, "rules[0].action"),
            (
                r#"[{"name": "a", "action": "allow", "colour": 1}]"#,
                "rules[0]",
            ),
        ] {
            let e = config(rules).unwrap_err();
            assert!(e.field.starts_with(field), "{rules}: {e}");
        }
    }
}
