//! Which rule decides a request: the configured rules first ([`crate::policy`]), then the short
//! form, as rules of its own: `bypass` (`bypass_paths`), `no-address`, `list.<name>` (the
//! hardest list the address is in) and `default` (the mode: `all` challenges, `listed` and
//! `off` allow).

use std::net::IpAddr;
use std::sync::Arc;

use crate::config::Mode;
use crate::crawlers::Crawl;
use crate::policy::{
    self, BYPASS_RULE, CompiledRule, DEFAULT_RULE, Facts, NO_ADDRESS_RULE, Outcome, Verdict,
};

use super::{Bound, Filter, Metrics, Request, metric};
use crate::web_bot_auth::SignedRequest;

/// What a rule is called in `pow-decision` and its counters, computed once per configuration.
#[derive(Debug, Clone)]
pub struct Labels {
    pub name: String,
    /// `pow_decisions` tagged with the rule and the verdict, by [`Verdict`] in
    /// [`Verdict::ALL`]'s order: built once, so that counting a request builds no name.
    pub metrics: [String; 4],
    /// `rule=<name>; action=<verdict>`, likewise: shared, so that a request let through takes
    /// its `pow-decision` without copying it.
    pub decisions: [Arc<str>; 4],
}

impl Labels {
    pub fn new(name: &str) -> Labels {
        let by = |f: &dyn Fn(Verdict) -> String| Verdict::ALL.map(f);
        Labels {
            name: name.to_owned(),
            metrics: by(&|v| policy::rule_metric(v, name)),
            decisions: Verdict::ALL.map(|v| Arc::from(format!("rule={name}; action={}", v.name()))),
        }
    }

    pub fn metric(&self, verdict: Verdict) -> &str {
        &self.metrics[verdict_index(verdict)]
    }

    pub fn decision(&self, verdict: Verdict) -> &Arc<str> {
        &self.decisions[verdict_index(verdict)]
    }
}

fn verdict_index(verdict: Verdict) -> usize {
    match verdict {
        Verdict::Allowed => 0,
        Verdict::Cleared => 1,
        Verdict::Denied => 2,
        Verdict::Challenged => 3,
    }
}

/// The labels of the short form's rules, and of the configured ones by index.
#[derive(Debug, Clone)]
pub struct RuleLabels {
    pub acme: Labels,
    pub bypass: Labels,
    pub no_address: Labels,
    pub default: Labels,
    /// `list.<name>`, by list index.
    pub lists: Vec<Labels>,
    pub rules: Vec<Labels>,
}

impl RuleLabels {
    pub fn new(list_names: &[String], rules: &[CompiledRule]) -> RuleLabels {
        RuleLabels {
            acme: Labels::new(policy::ACME_RULE),
            bypass: Labels::new(BYPASS_RULE),
            no_address: Labels::new(NO_ADDRESS_RULE),
            default: Labels::new(DEFAULT_RULE),
            lists: list_names
                .iter()
                .map(|n| Labels::new(&policy::list_rule(n)))
                .collect(),
            rules: rules.iter().map(|r| Labels::new(&r.name)).collect(),
        }
    }

    /// Every counter these rules can increment, with the verdicts each can give.
    pub fn metric_names(&self, rules: &[CompiledRule]) -> Vec<String> {
        let mut names = Vec::new();
        let mut add = |labels: &Labels, verdicts: &[Verdict]| {
            names.extend(verdicts.iter().map(|v| labels.metric(*v).to_owned()));
        };
        add(&self.acme, &[Verdict::Allowed]);
        add(&self.bypass, &[Verdict::Allowed]);
        add(&self.no_address, &[Verdict::Cleared, Verdict::Challenged]);
        add(&self.default, &Verdict::ALL);
        for list in &self.lists {
            add(list, &[Verdict::Cleared, Verdict::Challenged]);
        }
        for (labels, rule) in self.rules.iter().zip(rules) {
            add(labels, Verdict::of(rule.outcome));
        }
        names
    }
}

/// What decided a request.
#[derive(Debug, Clone, Copy)]
pub struct Decision<'f> {
    pub labels: &'f Labels,
    pub outcome: Outcome,
    /// The request reaches the origin without its query (a path-matched allow).
    pub strips_query: bool,
    /// The lists the address is in (bit `i` for list `i`).
    pub lists: u32,
    /// The crawler lists whose verified crawler the request is, when a rule asked.
    pub crawlers: u32,
    /// The request carried a trusted agent's verified signature, when a rule asked.
    pub signed: bool,
}

/// A request as the policy reads it ([`Facts`]): each header looked up when a rule asks for it,
/// the crawler check once at most, the signature checked (and counted) only when a rule still
/// in the running tests signed agents.
struct RequestFacts<'f, 'r, 'm> {
    filter: &'f Filter,
    req: &'f Request<'r>,
    bound: &'f Bound<'r>,
    method: &'f str,
    path: &'f str,
    lists: u32,
    crawl: Option<Crawl>,
    signed: bool,
    now: u64,
    metrics: &'m mut dyn Metrics,
}

impl RequestFacts<'_, '_, '_> {
    fn crawl(&mut self) -> Crawl {
        if let Some(crawl) = self.crawl {
            return crawl;
        }
        let crawl = self
            .filter
            .crawlers
            .as_ref()
            .map(|c| c.crawl(self.bound.user_agent(), self.lists))
            .unwrap_or_default();
        self.crawl = Some(crawl);
        crawl
    }
}

impl Facts for RequestFacts<'_, '_, '_> {
    fn host(&self) -> &str {
        self.bound.host()
    }
    fn method(&self) -> &str {
        self.method
    }
    fn path(&self) -> &str {
        self.path
    }
    fn user_agent(&self) -> &str {
        self.bound.user_agent()
    }
    fn accept(&self) -> Option<&str> {
        self.req.header("accept")
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.req.header(name)
    }
    fn lists(&self) -> u32 {
        self.lists
    }
    fn crawlers(&mut self) -> u32 {
        self.crawl().verified
    }
    fn spoofed_crawler(&mut self) -> bool {
        self.crawl().spoofed
    }
    fn signed_agent(&mut self) -> Option<usize> {
        let agent = self.filter.signed_agent(self.req, self.now, self.metrics);
        self.signed |= agent.is_some();
        agent
    }
}

impl Filter {
    /// The rule that decides `req` (not the built-in ACME bypass nor the verify endpoint, which
    /// come first) and its outcome.
    pub(super) fn decide<'f>(
        &'f self,
        bound: &Bound<'_>,
        method: &str,
        path: &str,
        ip: Option<IpAddr>,
        now: u64,
        metrics: &mut dyn Metrics,
    ) -> Decision<'f> {
        let lists = ip.map_or(0, |ip| self.lists.lookup(ip));
        if self.policy.has_rules() {
            let mut facts = RequestFacts {
                filter: self,
                req: bound.req,
                bound,
                method,
                path,
                lists,
                crawl: None,
                signed: false,
                now,
                metrics,
            };
            if let Some(at) = self.policy.decide_facts(&mut facts)
                && let (Some(rule), Some(labels)) =
                    (self.policy.rules.get(at), self.labels.rules.get(at))
            {
                return Decision {
                    labels,
                    outcome: rule.outcome,
                    strips_query: rule.strips_query,
                    lists,
                    crawlers: facts.crawl.map_or(0, |c| c.verified),
                    signed: facts.signed,
                };
            }
        }
        self.short_form(method, path, ip, lists)
    }

    /// The index of the trusted agent whose Web Bot Auth signature the request carries, asked by
    /// the policy only while a rule still in the running tests signed agents: at most one
    /// signature is checked; one that does not verify counts as none, and is counted by its
    /// reason.
    fn signed_agent(
        &self,
        req: &Request<'_>,
        now: u64,
        metrics: &mut dyn Metrics,
    ) -> Option<usize> {
        if !self.policy.tests_signed_agents() || req.header("signature-input").is_none() {
            return None;
        }
        match self.agents.verify(&SignedRequest::from_request(req), now) {
            Ok(name) => {
                metrics.increment(metric::SIGNATURE_VERIFIED);
                self.agents.names().iter().position(|n| n == name)
            }
            Err(reason) => {
                metrics.increment(&metric::tagged(
                    metric::SIGNATURE_UNSIGNED,
                    &[(metric::REASON, reason.name())],
                ));
                None
            }
        }
    }

    /// `bypass_paths`, then the mode with the lists' difficulties.
    fn short_form(&self, method: &str, path: &str, ip: Option<IpAddr>, lists: u32) -> Decision<'_> {
        let decision = |labels, outcome| Decision {
            labels,
            outcome,
            strips_query: false,
            lists,
            crawlers: 0,
            signed: false,
        };
        if crate::bypass::bypasses_configured(method, path, &self.config.bypass_paths) {
            return Decision {
                strips_query: true,
                ..decision(&self.labels.bypass, Outcome::Allow)
            };
        }
        let pow = |difficulty| Outcome::Challenge {
            difficulty,
            kind: policy::ChallengeKind::Pow,
        };
        if self.config.mode == Mode::Off {
            return decision(&self.labels.default, Outcome::Allow);
        }
        if ip.is_none() {
            return decision(&self.labels.no_address, pow(self.config.difficulty));
        }
        // The hardest list the address is in. A crawler's list names who a request may be,
        // not whom to challenge: only rules use it.
        let crawler_lists = self.crawlers.as_ref().map_or(0, |c| c.lists);
        let mut hardest: Option<(usize, u8)> = None;
        for (i, name) in self.lists.names().iter().enumerate().take(32) {
            if lists & !crawler_lists & (1 << i) != 0 {
                let d = self.config.difficulty_for(name);
                if hardest.is_none_or(|(_, h)| d > h) {
                    hardest = Some((i, d));
                }
            }
        }
        let listed = hardest.and_then(|(i, d)| Some((self.labels.lists.get(i)?, d)));
        match (self.config.mode, listed) {
            (Mode::All, Some((labels, d))) if d >= self.config.difficulty => {
                decision(labels, pow(d))
            }
            (Mode::All, _) => decision(&self.labels.default, pow(self.config.difficulty)),
            (_, Some((labels, d))) => decision(labels, pow(d)),
            (_, None) => decision(&self.labels.default, Outcome::Allow),
        }
    }
}
