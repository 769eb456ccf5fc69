//! The rules compiled into one index per condition. Each index answers, for a request, the set
//! of rules the condition lets through: the rules without that condition, and those whose
//! condition the request meets. The first rule in every set decides.

use std::cell::RefCell;
use std::collections::HashMap;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use super::{HeaderCondition, MAX_RULES, Names, Outcome, Rule, RuleAction, outcome_of};
use crate::config::PluginConfig;
use crate::fnv::FnvBuild;

mod decide;
mod keyed;
mod memo;

pub use decide::{Facts, Features};
pub(super) use keyed::KeyHash;
use keyed::Keyed;
use memo::Memo;

const WORDS: usize = MAX_RULES / 64;

/// The rules by key of one condition's values.
type Map<K> = HashMap<K, Bits, FnvBuild>;

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
    by: Map<K>,
}

impl<K: std::hash::Hash + Eq> Field<K> {
    fn new(all: Bits) -> Self {
        Field {
            wild: all,
            by: Map::default(),
        }
    }

    /// Rule `i` has this condition, met by `keys`.
    fn add(&mut self, i: usize, keys: impl IntoIterator<Item = K>) {
        unset(&mut self.wild, i);
        for key in keys {
            self.by.entry(key).or_insert(Bits::EMPTY).set(i);
        }
    }
}

/// Takes rule `i` out of the rules without a condition.
fn unset(wild: &mut Bits, i: usize) {
    if let Some(word) = wild.0.get_mut(i / 64) {
        *word &= !(1 << (i % 64));
    }
}

/// Where `name` stands in `names`, [`UNKNOWN`] when nowhere.
fn position(names: &[String], name: &str) -> usize {
    names.iter().position(|n| n == name).unwrap_or(UNKNOWN)
}

/// Rule `i`'s condition on a named client (a crawler, a signed agent): `any` of them (the rule
/// goes in `any_bits`), or the named ones, as indexes of `known`.
fn add_names(
    field: &mut Field<usize>,
    any_bits: &mut Bits,
    i: usize,
    names: &Names,
    known: &[String],
) {
    match names.names() {
        None => {
            field.add(i, []);
            any_bits.set(i);
        }
        Some(names) => field.add(i, names.iter().map(|name| position(known, name))),
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
    /// The rules without a host.
    host_wild: Bits,
    /// Hosts, hashed eight bytes a step ([`KeyHash::of_folded_words`]).
    host_exact: Keyed,
    /// Keyed by the suffix after `*.`, hashed from its end ([`KeyHash::of_reversed`]) as a
    /// request's host is read when there is any, so that each of its suffixes is hashed on
    /// the way.
    host_suffix: Keyed,
    /// What the host condition lets through for the last `:authority` values seen.
    host_memo: RefCell<Memo>,
    method: Field<String>,
    /// The rules without a path.
    path_wild: Bits,
    /// Paths of `allow` rules (plain paths only), hashed from their start as a request's path
    /// is walked, so that each of its prefixes is hashed on the way.
    allow_path_exact: Keyed,
    allow_path_prefix: Keyed,
    /// Paths of `deny` and `challenge` rules: the path as lenient origins read it, too.
    other_path_exact: Keyed,
    other_path_prefix: Keyed,
    user_agent: Field<usize>,
    patterns: Option<AhoCorasick>,
    /// What `user_agent` lets through for the last User-Agents seen.
    user_agent_memo: RefCell<Memo>,
    /// Per tested header name: present, absent, equal to a value.
    headers: Vec<HeaderField>,
    accept: Field<String>,
    lists: Field<usize>,
    crawler: Field<usize>,
    crawler_any: Bits,
    spoofed: Field<bool>,
    agent: Field<usize>,
    agent_any: Bits,
    /// Some rule tests a signed agent.
    tests_signed_agents: bool,
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
        let mut p = CompiledPolicy {
            rules: Vec::with_capacity(rules.len()),
            words,
            all,
            host_wild: all,
            host_exact: Keyed::default(),
            host_suffix: Keyed::default(),
            method: Field::new(all),
            path_wild: all,
            allow_path_exact: Keyed::default(),
            allow_path_prefix: Keyed::default(),
            other_path_exact: Keyed::default(),
            other_path_prefix: Keyed::default(),
            user_agent: Field::new(all),
            patterns: None,
            user_agent_memo: RefCell::default(),
            host_memo: RefCell::default(),
            headers: Vec::new(),
            accept: Field::new(all),
            lists: Field::new(all),
            crawler: Field::new(all),
            crawler_any: Bits::EMPTY,
            spoofed: Field::new(all),
            agent: Field::new(all),
            agent_any: Bits::EMPTY,
            tests_signed_agents: false,
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
            p.add_user_agent(i, rule, &mut patterns);
            p.add_headers(i, rule);
            if !rule.accept.is_empty() {
                p.accept.add(i, rule.accept.iter().cloned());
            }
            p.add_client(i, rule, lists, agents);
        }
        if !patterns.is_empty() {
            p.patterns = AhoCorasickBuilder::new()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::Standard)
                .build(&patterns)
                .ok();
        }
        p.tests_signed_agents = p.agent.wild != p.all;
        p
    }

    /// Rule `i`'s User-Agent substrings, each a pattern of the one automaton (lowercased, the
    /// automaton folds case; a substring two rules name is one pattern).
    fn add_user_agent(&mut self, i: usize, rule: &Rule, patterns: &mut Vec<String>) {
        if rule.user_agent.is_empty() {
            return;
        }
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
        self.user_agent.add(i, ids);
    }

    /// Rule `i`'s conditions on who the client is: lists, crawlers, spoofed crawler, signed
    /// agent (names as indexes of `lists` and `agents`).
    fn add_client(&mut self, i: usize, rule: &Rule, lists: &[String], agents: &[String]) {
        if !rule.lists.is_empty() {
            self.lists
                .add(i, rule.lists.iter().map(|name| position(lists, name)));
        }
        if let Some(names) = &rule.crawler {
            add_names(&mut self.crawler, &mut self.crawler_any, i, names, lists);
        }
        if let Some(spoofed) = rule.spoofed_crawler {
            self.spoofed.add(i, [spoofed]);
        }
        if let Some(names) = &rule.signed_agent {
            add_names(&mut self.agent, &mut self.agent_any, i, names, agents);
        }
    }

    fn add_host(&mut self, i: usize, rule: &Rule) {
        if rule.host.is_empty() {
            return;
        }
        unset(&mut self.host_wild, i);
        for host in &rule.host {
            match host.strip_prefix("*.") {
                Some(suffix) => {
                    let suffix = suffix.as_bytes();
                    self.host_suffix
                        .add(KeyHash::of_reversed(suffix), suffix, i);
                }
                None => {
                    let name = host.as_bytes();
                    self.host_exact.add(KeyHash::of_folded_words(name), name, i);
                }
            }
        }
    }

    fn add_path(&mut self, i: usize, rule: &Rule) {
        if rule.path.is_empty() {
            return;
        }
        unset(&mut self.path_wild, i);
        let allow = rule.action == RuleAction::Allow;
        for path in &rule.path {
            let prefix = path.ends_with('/');
            let table = match (allow, prefix) {
                (true, false) => &mut self.allow_path_exact,
                (true, true) => &mut self.allow_path_prefix,
                (false, false) => &mut self.other_path_exact,
                (false, true) => &mut self.other_path_prefix,
            };
            table.add(KeyHash::of(path.as_bytes()), path.as_bytes(), i);
            if !allow {
                // Lenient origins fold case: the entry, folded, matches a folded path too.
                let folded = path.to_ascii_lowercase();
                if folded != *path {
                    table.add(KeyHash::of(folded.as_bytes()), folded.as_bytes(), i);
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
        self.tests_signed_agents
    }

    /// Whether there is any rule to decide.
    pub fn has_rules(&self) -> bool {
        !self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests;
