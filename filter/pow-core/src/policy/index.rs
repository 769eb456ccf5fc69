//! The rules compiled into one index per condition. Each index answers, for a request, the set
//! of rules the condition lets through: the rules without that condition, and those whose
//! condition the request meets. The first rule in every set decides.

use std::collections::HashMap;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use super::path::{lenient_forms, segment_prefixes};
use super::{HeaderCondition, MAX_RULES, Outcome, Rule, RuleAction, outcome_of};
use crate::config::PluginConfig;

const WORDS: usize = MAX_RULES / 64;

/// A set of rules, by index: one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bits([u64; WORDS]);

impl Bits {
    const EMPTY: Bits = Bits([0; WORDS]);

    fn with(mut self, rule: usize) -> Bits {
        if let Some(word) = self.0.get_mut(rule / 64) {
            *word |= 1 << (rule % 64);
        }
        self
    }

    fn set(&mut self, rule: usize) {
        *self = self.with(rule);
    }

    fn or(&mut self, other: &Bits, words: usize) {
        for (a, b) in self.0.iter_mut().zip(&other.0).take(words) {
            *a |= b;
        }
    }

    /// `self & other`, and whether anything is left.
    fn and(&mut self, other: &Bits, words: usize) -> bool {
        let mut any = 0;
        for (a, b) in self.0.iter_mut().zip(&other.0).take(words) {
            *a &= b;
            any |= *a;
        }
        any != 0
    }

    fn first(&self, words: usize) -> Option<usize> {
        self.0
            .iter()
            .take(words)
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
    }
}

/// One condition's index over the rules: `wild` holds the rules without it.
#[derive(Debug, Clone)]
struct Field<K> {
    wild: Bits,
    by: HashMap<K, Bits>,
}

impl<K: std::hash::Hash + Eq> Field<K> {
    fn new(all: Bits) -> Self {
        Field {
            wild: all,
            by: HashMap::new(),
        }
    }

    /// Rule `i` has this condition, met by `keys`.
    fn add(&mut self, i: usize, keys: impl IntoIterator<Item = K>) {
        if let Some(word) = self.wild.0.get_mut(i / 64) {
            *word &= !(1 << (i % 64));
        }
        for key in keys {
            self.by.entry(key).or_insert(Bits::EMPTY).set(i);
        }
    }
}

/// The rules whose condition `key` meets, added to `out`.
fn meet<K, Q>(field: &Field<K>, key: &Q, out: &mut Bits, words: usize)
where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: std::hash::Hash + Eq + ?Sized,
{
    if let Some(bits) = field.by.get(key) {
        out.or(bits, words);
    }
}

/// What the policy needs of a request, gathered once by the filter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Features<'r> {
    /// `:authority`, as sent.
    pub host: &'r str,
    pub method: &'r str,
    /// The path without its query.
    pub path: &'r str,
    pub user_agent: &'r str,
    pub accept: Option<&'r str>,
    /// Bit `i` for list `i` of the table.
    pub lists: u32,
    /// Bit `i` for list `i` when the request is that list's verified crawler.
    pub crawlers: u32,
    /// The User-Agent names a crawler whose ranges do not hold the address.
    pub spoofed_crawler: bool,
    /// The index of the trusted agent whose signature verified.
    pub signed_agent: Option<usize>,
}

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct CompiledRule {
    pub name: String,
    pub outcome: Outcome,
    /// An `allow` rule matched by its path, whose query does not reach the origin.
    pub strips_query: bool,
}

/// The rules, compiled. Lists, crawlers and agents are named by their index in the tables the
/// filter builds ([`CompiledPolicy::compile`] takes their names in order).
#[derive(Debug)]
pub struct CompiledPolicy {
    pub rules: Vec<CompiledRule>,
    words: usize,
    all: Bits,
    host_exact: Field<String>,
    /// Keyed by the suffix after `*.`; shares `wild` with `host_exact` through `host_wild`.
    host_suffix: HashMap<String, Bits>,
    method: Field<String>,
    /// Paths of `allow` rules: plain paths only.
    allow_path_exact: Field<String>,
    allow_path_prefix: HashMap<String, Bits>,
    /// Paths of `deny` and `challenge` rules: the path as lenient origins read it, too.
    other_path_exact: HashMap<String, Bits>,
    other_path_prefix: HashMap<String, Bits>,
    user_agent: Field<usize>,
    patterns: Option<AhoCorasick>,
    /// Per tested header name: present, absent, equal to a value.
    headers: Vec<HeaderField>,
    accept: Field<String>,
    lists: Field<usize>,
    crawler: Field<usize>,
    crawler_any: Bits,
    spoofed: Field<bool>,
    agent: Field<usize>,
    agent_any: Bits,
}

#[derive(Debug)]
struct HeaderField {
    name: String,
    field: Field<String>,
    present: Bits,
    absent: Bits,
}

/// The crawler index a `crawler` name stands for: `usize::MAX` for a name no list carries
/// (the rule then never matches).
const UNKNOWN: usize = usize::MAX;

impl CompiledPolicy {
    /// Compiles `config.rules`; `lists` are the table's list names in order (a rule's `lists`
    /// and `crawler` refer to them), `agents` the trusted agents' names in order.
    pub fn compile(config: &PluginConfig, lists: &[String], agents: &[String]) -> CompiledPolicy {
        let rules = &config.rules;
        let words = rules.len().div_ceil(64).clamp(1, WORDS);
        let all = (0..rules.len()).fold(Bits::EMPTY, Bits::with);
        let position =
            |names: &[String], name: &str| names.iter().position(|n| n == name).unwrap_or(UNKNOWN);
        let mut p = CompiledPolicy {
            rules: Vec::with_capacity(rules.len()),
            words,
            all,
            host_exact: Field::new(all),
            host_suffix: HashMap::new(),
            method: Field::new(all),
            allow_path_exact: Field::new(all),
            allow_path_prefix: HashMap::new(),
            other_path_exact: HashMap::new(),
            other_path_prefix: HashMap::new(),
            user_agent: Field::new(all),
            patterns: None,
            headers: Vec::new(),
            accept: Field::new(all),
            lists: Field::new(all),
            crawler: Field::new(all),
            crawler_any: Bits::EMPTY,
            spoofed: Field::new(all),
            agent: Field::new(all),
            agent_any: Bits::EMPTY,
        };
        let mut patterns: Vec<String> = Vec::new();
        for (i, rule) in rules.iter().enumerate().take(MAX_RULES) {
            p.rules.push(CompiledRule {
                name: rule.name.clone(),
                outcome: outcome_of(rule, config),
                strips_query: rule.action == RuleAction::Allow
                    && !rule.path.is_empty()
                    && !rule.keep_query,
            });
            p.add_host(i, rule);
            if !rule.method.is_empty() {
                p.method.add(i, rule.method.iter().cloned());
            }
            p.add_path(i, rule);
            if !rule.user_agent.is_empty() {
                let ids: Vec<usize> = rule
                    .user_agent
                    .iter()
                    .map(|ua| {
                        let lower = ua.to_ascii_lowercase();
                        match patterns.iter().position(|known| *known == lower) {
                            Some(id) => id,
                            None => {
                                patterns.push(lower);
                                patterns.len() - 1
                            }
                        }
                    })
                    .collect();
                p.user_agent.add(i, ids);
            }
            p.add_headers(i, rule);
            if !rule.accept.is_empty() {
                p.accept.add(i, rule.accept.iter().cloned());
            }
            if !rule.lists.is_empty() {
                p.lists
                    .add(i, rule.lists.iter().map(|name| position(lists, name)));
            }
            if let Some(names) = &rule.crawler {
                match names.names() {
                    None => {
                        p.crawler.add(i, []);
                        p.crawler_any.set(i);
                    }
                    Some(names) => p
                        .crawler
                        .add(i, names.iter().map(|name| position(lists, name))),
                }
            }
            if let Some(spoofed) = rule.spoofed_crawler {
                p.spoofed.add(i, [spoofed]);
            }
            if let Some(names) = &rule.signed_agent {
                match names.names() {
                    None => {
                        p.agent.add(i, []);
                        p.agent_any.set(i);
                    }
                    Some(names) => p
                        .agent
                        .add(i, names.iter().map(|name| position(agents, name))),
                }
            }
        }
        if !patterns.is_empty() {
            p.patterns = AhoCorasickBuilder::new()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::Standard)
                .build(&patterns)
                .ok();
        }
        p
    }

    fn add_host(&mut self, i: usize, rule: &Rule) {
        if rule.host.is_empty() {
            return;
        }
        let exact = rule
            .host
            .iter()
            .filter(|h| !h.starts_with("*."))
            .cloned()
            .collect::<Vec<_>>();
        self.host_exact.add(i, exact);
        for suffix in rule.host.iter().filter_map(|h| h.strip_prefix("*.")) {
            self.host_suffix
                .entry(suffix.to_owned())
                .or_insert(Bits::EMPTY)
                .set(i);
        }
    }

    fn add_path(&mut self, i: usize, rule: &Rule) {
        if rule.path.is_empty() {
            return;
        }
        // One field for both kinds of rules: `wild` loses the rule either way.
        self.allow_path_exact.add(i, []);
        let allow = rule.action == RuleAction::Allow;
        for path in &rule.path {
            let (exact, prefix) = if allow {
                (&mut self.allow_path_exact.by, &mut self.allow_path_prefix)
            } else {
                (&mut self.other_path_exact, &mut self.other_path_prefix)
            };
            let table = if path.ends_with('/') { prefix } else { exact };
            table.entry(path.clone()).or_insert(Bits::EMPTY).set(i);
            if !allow {
                // Lenient origins fold case: the entry, folded, matches a folded path too.
                let folded = path.to_ascii_lowercase();
                if folded != *path {
                    let table = if path.ends_with('/') {
                        &mut self.other_path_prefix
                    } else {
                        &mut self.other_path_exact
                    };
                    table.entry(folded).or_insert(Bits::EMPTY).set(i);
                }
            }
        }
    }

    fn add_headers(&mut self, i: usize, rule: &Rule) {
        for (name, condition) in &rule.header {
            let at = match self.headers.iter().position(|h| h.name == *name) {
                Some(at) => at,
                None => {
                    self.headers.push(HeaderField {
                        name: name.clone(),
                        field: Field::new(self.all),
                        present: Bits::EMPTY,
                        absent: Bits::EMPTY,
                    });
                    self.headers.len() - 1
                }
            };
            let Some(h) = self.headers.get_mut(at) else {
                continue;
            };
            match condition {
                HeaderCondition::Present(true) => {
                    h.field.add(i, []);
                    h.present.set(i);
                }
                HeaderCondition::Present(false) => {
                    h.field.add(i, []);
                    h.absent.set(i);
                }
                HeaderCondition::Equals(value) => h.field.add(i, [value.clone()]),
            }
        }
    }

    /// The header names the rules test: the glue passes these headers to the filter.
    pub fn header_names(&self) -> impl Iterator<Item = &str> {
        self.headers.iter().map(|h| h.name.as_str())
    }

    /// Whether a rule tests a signed agent (so a signature is worth verifying).
    pub fn tests_signed_agents(&self) -> bool {
        self.agent.wild != self.all
    }

    /// Whether there is any rule to decide.
    pub fn has_rules(&self) -> bool {
        !self.rules.is_empty()
    }

    /// The index of the first rule every condition of which the request meets.
    pub fn decide<'r>(
        &self,
        f: &Features<'r>,
        header: &dyn Fn(&str) -> Option<&'r str>,
    ) -> Option<usize> {
        if self.rules.is_empty() {
            return None;
        }
        let words = self.words;
        let mut acc = self.all;
        let narrow = |acc: &mut Bits, found: Bits| acc.and(&found, words);
        // A field whose `wild` is every rule has no rule testing it: nothing to narrow.
        let tested = |wild: &Bits| *wild != self.all;
        if tested(&self.host_exact.wild) && !narrow(&mut acc, self.hosts(f.host)) {
            return None;
        }
        if tested(&self.method.wild) {
            let mut found = self.method.wild;
            meet(&self.method, f.method, &mut found, words);
            if !narrow(&mut acc, found) {
                return None;
            }
        }
        if tested(&self.allow_path_exact.wild) && !narrow(&mut acc, self.paths(f.path)) {
            return None;
        }
        if tested(&self.user_agent.wild) {
            let mut found = self.user_agent.wild;
            if let Some(ac) = &self.patterns {
                let ua = crate::crypto::bound_user_agent(f.user_agent);
                for m in ac.find_overlapping_iter(ua) {
                    meet(&self.user_agent, &m.pattern().as_usize(), &mut found, words);
                }
            }
            if !narrow(&mut acc, found) {
                return None;
            }
        }
        for h in &self.headers {
            let mut found = h.field.wild;
            match header(&h.name) {
                Some(value) => {
                    found.or(&h.present, words);
                    meet(&h.field, value.trim_matches([' ', '\t']), &mut found, words);
                }
                None => found.or(&h.absent, words),
            }
            if !narrow(&mut acc, found) {
                return None;
            }
        }
        if tested(&self.accept.wild) {
            let mut found = self.accept.wild;
            for media in accepted_media_types(f.accept) {
                meet(&self.accept, media.as_str(), &mut found, words);
            }
            if !narrow(&mut acc, found) {
                return None;
            }
        }
        if tested(&self.lists.wild) && !narrow(&mut acc, self.indexed(&self.lists, f.lists, None)) {
            return None;
        }
        if tested(&self.crawler.wild)
            && !narrow(
                &mut acc,
                self.indexed(&self.crawler, f.crawlers, Some(&self.crawler_any)),
            )
        {
            return None;
        }
        if tested(&self.spoofed.wild) {
            let mut found = self.spoofed.wild;
            meet(&self.spoofed, &f.spoofed_crawler, &mut found, words);
            if !narrow(&mut acc, found) {
                return None;
            }
        }
        if tested(&self.agent.wild) {
            let mut found = self.agent.wild;
            if let Some(agent) = f.signed_agent {
                found.or(&self.agent_any, words);
                meet(&self.agent, &agent, &mut found, words);
            }
            if !narrow(&mut acc, found) {
                return None;
            }
        }
        acc.first(words).filter(|i| *i < self.rules.len())
    }

    /// The rules the host lets through: exact names, then each `*.` suffix (a proper suffix at a
    /// label boundary), the port and one trailing dot aside, case folded.
    fn hosts(&self, authority: &str) -> Bits {
        let words = self.words;
        let mut found = self.host_exact.wild;
        let host = strip_port(authority);
        let host = host.strip_suffix('.').unwrap_or(host);
        if host.len() > crate::crypto::MAX_HOST_LEN {
            return found;
        }
        // Lowercased on the stack: no allocation per request.
        let mut buffer = [0u8; crate::crypto::MAX_HOST_LEN];
        let Some(lower) = buffer.get_mut(..host.len()) else {
            return found;
        };
        lower.copy_from_slice(host.as_bytes());
        lower.make_ascii_lowercase();
        let Ok(lower) = std::str::from_utf8(lower) else {
            return found;
        };
        meet(&self.host_exact, lower, &mut found, words);
        if !self.host_suffix.is_empty() {
            for (at, _) in lower.match_indices('.') {
                if let Some(bits) = lower.get(at + 1..).and_then(|s| self.host_suffix.get(s)) {
                    found.or(bits, words);
                }
            }
        }
        found
    }

    /// The rules the path lets through: `allow` rules on a plain path only; the others on the
    /// path and on the forms lenient origins read it as.
    fn paths(&self, path: &str) -> Bits {
        let words = self.words;
        let mut found = self.allow_path_exact.wild;
        let plain = path.len() <= crate::bypass::MAX_BYPASS_PATH && crate::bypass::is_plain(path);
        let lookup = |found: &mut Bits,
                      path: &str,
                      exact: &HashMap<String, Bits>,
                      prefix: &HashMap<String, Bits>| {
            if let Some(bits) = exact.get(path) {
                found.or(bits, words);
            }
            if !prefix.is_empty() {
                for p in segment_prefixes(path) {
                    if let Some(bits) = prefix.get(p) {
                        found.or(bits, words);
                    }
                }
            }
        };
        if plain {
            lookup(
                &mut found,
                path,
                &self.allow_path_exact.by,
                &self.allow_path_prefix,
            );
        }
        if !(self.other_path_exact.is_empty() && self.other_path_prefix.is_empty()) {
            for form in lenient_forms(path) {
                lookup(
                    &mut found,
                    &form,
                    &self.other_path_exact,
                    &self.other_path_prefix,
                );
            }
        }
        found
    }

    /// The rules an indexed condition lets through for the set bits of `present`.
    fn indexed(&self, field: &Field<usize>, present: u32, any: Option<&Bits>) -> Bits {
        let mut found = field.wild;
        if present != 0 {
            if let Some(any) = any {
                found.or(any, self.words);
            }
            for i in 0..32usize {
                if present & (1 << i) != 0 {
                    meet(field, &i, &mut found, self.words);
                }
            }
        }
        found
    }
}

/// The host of an `:authority`, without its port (`[v6]:port` keeps its brackets).
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .and_then(|end| authority.get(..=end))
            .unwrap_or(authority);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// The media types an `Accept` header names (parameters dropped, lowercased), its first 16
/// items of its first 1 KiB, as the page's negotiation reads it.
fn accepted_media_types(accept: Option<&str>) -> impl Iterator<Item = String> + '_ {
    let text = accept.unwrap_or("");
    let text = text
        .get(..text.len().min(crate::page::MAX_NEGOTIATED))
        .unwrap_or("");
    text.split(',').take(16).filter_map(|item| {
        let media = item.split(';').next()?.trim_matches([' ', '\t']);
        (!media.is_empty()).then(|| media.to_ascii_lowercase())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(rules: &str, lists: &[&str]) -> CompiledPolicy {
        let config =
            PluginConfig::from_json(format!(r#"{{"rules": {rules}}}"#).as_bytes()).unwrap();
        let lists: Vec<String> = lists.iter().map(|s| (*s).to_owned()).collect();
        CompiledPolicy::compile(&config, &lists, &["chatgpt".to_owned()])
    }

    fn decide<'p, 'r>(
        p: &'p CompiledPolicy,
        f: Features<'r>,
        headers: &[(&str, &'r str)],
    ) -> Option<&'p str> {
        let lookup = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        p.decide(&f, &lookup)
            .and_then(|i| p.rules.get(i))
            .map(|r| r.name.as_str())
    }

    fn req<'a>(host: &'a str, path: &'a str, ua: &'a str) -> Features<'a> {
        Features {
            host,
            method: "GET",
            path,
            user_agent: ua,
            ..Features::default()
        }
    }

    #[test]
    fn the_first_rule_that_matches_decides() {
        let p = policy(
            r#"[{"name": "login", "path": ["/login"], "action": "challenge", "difficulty": 20},
                {"name": "api", "host": ["api.example.org"], "action": "allow"},
                {"name": "subs", "host": ["*.example.net"], "method": ["POST"], "action": "deny"},
                {"name": "static", "path": ["/static/"], "action": "allow"},
                {"name": "bots", "user_agent": ["curl", "Wget"], "action": "deny"},
                {"name": "everything", "action": "challenge"}]"#,
            &[],
        );
        let ua = "Mozilla/5.0";
        assert_eq!(
            decide(&p, req("api.example.org", "/login", ua), &[]),
            Some("login")
        );
        assert_eq!(
            decide(&p, req("API.Example.org:443", "/x", ua), &[]),
            Some("api")
        );
        assert_eq!(
            decide(&p, req("api.example.org.", "/x", ua), &[]),
            Some("api")
        );
        let post = Features {
            method: "POST",
            ..req("a.b.example.net", "/x", ua)
        };
        assert_eq!(decide(&p, post, &[]), Some("subs"));
        // `*.` is a proper suffix: not the apex, not a longer label.
        let apex = Features {
            method: "POST",
            ..req("example.net", "/x", ua)
        };
        assert_eq!(decide(&p, apex, &[]), Some("everything"));
        let other = Features {
            method: "POST",
            ..req("badexample.net", "/x", ua)
        };
        assert_eq!(decide(&p, other, &[]), Some("everything"));
        assert_eq!(
            decide(&p, req("h", "/static/a.js", ua), &[]),
            Some("static")
        );
        assert_eq!(
            decide(&p, req("h", "/static/", ua), &[]),
            Some("everything")
        );
        assert_eq!(decide(&p, req("h", "/", "curl/8.5"), &[]), Some("bots"));
        assert_eq!(decide(&p, req("h", "/", "x WGET/1"), &[]), Some("bots"));
        assert_eq!(decide(&p, req("h", "/", ua), &[]), Some("everything"));
    }

    #[test]
    fn an_allow_path_matches_only_plain_paths_a_deny_path_also_lenient_ones() {
        let p = policy(
            r#"[{"name": "admin", "path": ["/admin/", "/wp-login.php"], "action": "deny"},
                {"name": "feed", "path": ["/feed"], "action": "allow"}]"#,
            &[],
        );
        for path in [
            "/admin/x",
            "/%61dmin/x",
            "/Admin/x",
            "/admin;jsessionid=1/x",
            "/static/../admin/x",
            "//admin/x",
            "/admin%2fx",
            "\\admin\\x",
            "/WP-LOGIN.PHP",
            "/wp-login.php;x",
        ] {
            assert_eq!(
                decide(&p, req("h", path, "UA"), &[]),
                Some("admin"),
                "{path}"
            );
        }
        assert_eq!(decide(&p, req("h", "/feed", "UA"), &[]), Some("feed"));
        for path in ["/feed;x", "/%66eed", "/x/../feed", "/Feed"] {
            assert_eq!(decide(&p, req("h", path, "UA"), &[]), None, "{path}");
        }
    }

    #[test]
    fn headers_accept_lists_crawlers_and_agents() {
        let p = policy(
            r#"[{"name": "key", "header": {"x-api-key": "k1"}, "action": "allow"},
                {"name": "ajax", "header": {"x-requested-with": true, "accept-language": false}, "action": "deny"},
                {"name": "feeds", "accept": ["application/rss+xml", "application/atom+xml"], "action": "challenge", "kind": "refresh"},
                {"name": "tor", "lists": ["tor"], "action": "challenge", "difficulty": 20},
                {"name": "google", "crawler": ["googlebot"], "action": "allow"},
                {"name": "crawlers", "crawler": "any", "action": "allow"},
                {"name": "liars", "spoofed_crawler": true, "action": "deny"},
                {"name": "signed", "signed_agent": "any", "action": "allow"}]"#,
            &["tor", "googlebot", "bingbot"],
        );
        let f = req("h", "/", "UA");
        assert_eq!(decide(&p, f, &[("x-api-key", "k1")]), Some("key"));
        assert_eq!(decide(&p, f, &[("x-api-key", "k2")]), None);
        assert_eq!(decide(&p, f, &[("x-requested-with", "x")]), Some("ajax"));
        assert_eq!(
            decide(
                &p,
                f,
                &[("x-requested-with", "x"), ("accept-language", "en")]
            ),
            None
        );
        let feed = Features {
            accept: Some("application/atom+xml;q=0.9, text/html"),
            ..f
        };
        assert_eq!(decide(&p, feed, &[]), Some("feeds"));
        let browser = Features {
            accept: Some("text/html,*/*;q=0.8"),
            ..f
        };
        assert_eq!(decide(&p, browser, &[]), None);
        assert_eq!(decide(&p, Features { lists: 0b1, ..f }, &[]), Some("tor"));
        assert_eq!(decide(&p, Features { lists: 0b10, ..f }, &[]), None);
        assert_eq!(
            decide(
                &p,
                Features {
                    crawlers: 0b10,
                    ..f
                },
                &[]
            ),
            Some("google")
        );
        assert_eq!(
            decide(
                &p,
                Features {
                    crawlers: 0b100,
                    ..f
                },
                &[]
            ),
            Some("crawlers")
        );
        assert_eq!(
            decide(
                &p,
                Features {
                    spoofed_crawler: true,
                    ..f
                },
                &[]
            ),
            Some("liars")
        );
        assert_eq!(
            decide(
                &p,
                Features {
                    signed_agent: Some(0),
                    ..f
                },
                &[]
            ),
            Some("signed")
        );
    }

    #[test]
    fn a_thousand_rules_index_like_one() {
        let rules: Vec<String> = (0..1000)
            .map(|i| {
                format!(r#"{{"name": "r{i}", "user_agent": ["agent-{i}/"], "action": "deny"}}"#)
            })
            .collect();
        let p = policy(&format!("[{}]", rules.join(",")), &[]);
        assert_eq!(
            decide(&p, req("h", "/", "x agent-999/1"), &[]),
            Some("r999")
        );
        assert_eq!(
            decide(&p, req("h", "/", "x agent-0/1 agent-500/"), &[]),
            Some("r0")
        );
        assert_eq!(decide(&p, req("h", "/", "Mozilla/5.0"), &[]), None);
    }
}
