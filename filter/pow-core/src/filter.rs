//! The per-request decision, with no proxy-wasm in sight: the glue gathers the request's
//! headers and `source.address`, calls [`Filter::on_request`], and carries out the [`Action`].
//!
//! Order: the bypass paths ([`crate::bypass`]); the verify endpoint (module `verify`); the policy
//! (`off`, `listed`, `all`) gives the difficulty required now, or lets the request through; a
//! valid clearance cookie paid at that difficulty or more passes; else a challenge. A refused check
//! on the verify path denies (a seen-set that cannot record does not); an internal error anywhere
//! else lets the request through and is counted (`pow_fail_open`).
//!
//! The work per request is bounded whatever the header sizes: each header is read up to a limit
//! ([`read_limit`]), the Cookie header is scanned for a few clearance pairs, no further than the
//! first valid one ([`ClearancePairs`]), the host is bound at most [`crypto::MAX_HOST_LEN`] long, and Accept and
//! Accept-Language are read for their first items only.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::sync::Arc;

use crate::bypass;
use crate::config::PluginConfig;
use crate::crawlers::CrawlerTokens;
use crate::crypto::{self, Binding, ClientDigests, Keys, Salts};
use crate::decision_log::{DecisionEvent, Event};
use crate::lists::ListTable;
use crate::net;
use crate::page;
use crate::policy::{CompiledPolicy, Outcome, Verdict};
use crate::redirect;
use crate::seen::SharedStore;
use crate::web_bot_auth::{TrustedAgents, Unsigned};

mod challenge;
mod cookies;
mod decide;
mod verify;

use challenge::{denied, overlong_host};
use cookies::trim_ows_str;
use decide::{Labels, RuleLabels};

pub use cookies::{ClearancePairs, utf8_lossy};
pub use verify::{VerifyFailure, VerifyQuery, percent_encode_component};

/// The reserved path that checks a solution and sets the clearance cookie.
pub const VERIFY_PATH: &str = "/.pow/verify";
/// The response header that marks a challenge (like Cloudflare's `cf-mitigated: challenge`).
pub const MITIGATED_HEADER: &str = "pow-mitigated";
/// At most this many clearance cookies of a request are checked (one MAC each per key).
pub const MAX_COOKIES_CHECKED: usize = 3;
/// The prefix of the clearance cookie's name when it is set Secure: browsers accept a
/// `__Host-` cookie only from the host itself, Secure, with `Path=/` and no `Domain`, so no
/// sibling subdomain can set or shadow it (RFC 6265bis, section 4.1.3.2).
pub const HOST_PREFIX: &str = "__Host-";
/// On a failed verification, says why (`malformed`, `expired`, `mac`, `work`, `replay`, ...).
pub const REASON_HEADER: &str = "pow-verify";
/// Says which rule decided and how: on every request let through to the origin
/// (`rule=<name>; action=<allowed|cleared>`), and on the filter's own answers (`denied`,
/// `challenged` with the difficulty and the kind).
pub const DECISION_HEADER: &str = "pow-decision";

pub mod metric;

/// Where the glue sends counter increments, histogram samples and decision log lines.
pub trait Metrics {
    fn increment(&mut self, name: &str);
    /// A sample of a histogram ([`metric::SOLVE_SECONDS`]).
    fn record(&mut self, _name: &str, _value: u64) {}
    /// A request challenged, denied or whose solution was refused; the glue writes it as one
    /// JSON line ([`crate::decision_log`]) at a bounded rate, and calls `event` only for a line
    /// it writes: a flood of challenges or forged solutions builds no line it drops.
    fn decision<'e>(&mut self, _event: &dyn Fn() -> crate::decision_log::DecisionEvent<'e>) {}
}

/// The most header lines the glue passes for the fields a signature covers
/// ([`Filter::covered_fields`]): a field of more lines than RFC 9110 combines is malformed
/// anyway.
pub const MAX_COVERED_LINES: usize = 32;

/// The longest `:path` read: longer than any bypass path, return target or verify query, so a
/// longer path is challenged like any other.
pub const MAX_PATH: usize = 4200;

/// How many bytes of a header [`Filter::on_request`] reads: `Some(limit)` for the headers it
/// reads besides `cookie`, `None` for the others (`cookie` is passed whole, undecoded):
/// the glue copies no other header out of the proxy, and no more of these. Names as Envoy
/// passes them, lowercase; one `match`, as the glue asks it of every header of every request.
pub fn read_limit(name: &[u8]) -> Option<usize> {
    let limit = match name {
        b":path" => MAX_PATH,
        b":method" | b":scheme" | b"x-forwarded-proto" => 16,
        b":authority" | b"host" => crypto::MAX_HOST_LEN + 1,
        b"user-agent" => crypto::MAX_USER_AGENT,
        b"accept" | b"accept-language" => page::MAX_NEGOTIATED,
        _ => return None,
    };
    Some(limit)
}

/// Headers that some origin frameworks route by instead of the path (IIS URL Rewrite, Symfony
/// and Laminas in some setups) or read as the site instead of the host: removed from every
/// request the filter lets through, so a bypassed or cleared request cannot reach another
/// route or another site.
pub const STRIPPED_HEADERS: &[&str] = &[
    "x-original-url",
    "x-rewrite-url",
    // The site, as origins that trust a proxy read it instead of Host (Django's
    // USE_X_FORWARDED_HOST, Rails, Express and Symfony trusted proxies, WordPress multisite):
    // a cookie paid for one host would serve another. Envoy passes them through untouched and
    // no proxy in front of the gateway writes them.
    "x-forwarded-host",
    "forwarded",
    "x-host",
    "x-forwarded-server",
    // Ours: the origin trusts the filter's, never a client's.
    "pow-decision",
];

/// A request as the filter sees it. Names and values may borrow from the buffer the glue got
/// from the proxy: a request then costs no allocation per header.
#[derive(Debug, Default, Clone)]
pub struct Request<'a> {
    /// All request headers, pseudo-headers (`:path`, `:authority`, ...) included, names lowercase.
    /// The glue passes only the headers [`read_limit`] names (each up to its limit), and the
    /// Cookie headers in [`Request::cookies`].
    pub headers: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// The Cookie headers as the proxy holds them, undecoded: only the clearance pairs checked
    /// are ever looked at ([`ClearancePairs`]). Cookie headers in `headers` count too.
    pub cookies: Vec<&'a [u8]>,
    /// The `source.address` property.
    pub source_address: Option<Cow<'a, str>>,
}

impl Request<'_> {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }

    /// Whether the visitor's connection is https: `:scheme`, or `X-Forwarded-Proto`, which
    /// Envoy sets from the connection unless the mesh trusts a proxy in front that says so
    /// (Envoy's x-forwarded-proto documentation). A client that lies only makes its own cookie
    /// unusable.
    pub fn is_secure(&self) -> bool {
        let https = |name: &str| {
            self.header(name)
                .is_some_and(|s| s.trim().eq_ignore_ascii_case("https"))
        };
        https(":scheme") || https("x-forwarded-proto")
    }

    /// The Cookie headers' bytes: [`Request::cookies`], then those in `headers`.
    pub fn cookie_headers(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.cookies
            .iter()
            .copied()
            .chain(self.header_all("cookie").map(str::as_bytes))
    }

    /// Every value of a header.
    pub fn header_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }
}

/// The headers a clearance is bound to besides the address, the host and the User-Agent, each
/// looked up when first read: the rules and the binding both read them, a request without
/// rules or without a binding reads only what it needs.
pub(crate) struct Bound<'q> {
    req: &'q Request<'q>,
    host: OnceCell<&'q str>,
    user_agent: OnceCell<&'q str>,
}

impl<'q> Bound<'q> {
    pub(crate) fn new(req: &'q Request<'q>) -> Bound<'q> {
        Bound {
            req,
            host: OnceCell::new(),
            user_agent: OnceCell::new(),
        }
    }

    /// `:authority`, or `Host`.
    pub(crate) fn host(&self) -> &'q str {
        self.host.get_or_init(|| {
            self.req
                .header(":authority")
                .or_else(|| self.req.header("host"))
                .unwrap_or("")
        })
    }

    pub(crate) fn user_agent(&self) -> &'q str {
        self.user_agent
            .get_or_init(|| self.req.header("user-agent").unwrap_or(""))
    }
}

/// The path of a `:path` (before `?` or `#`), looked for in its first bytes only: a path longer
/// than any bypass path is returned cut there (it still bypasses nothing and is not the verify
/// endpoint), so a long path costs no more than a short one.
fn path_part(raw_path: &str) -> &str {
    let limit = raw_path.len().min(bypass::MAX_BYPASS_PATH + 1);
    let end = raw_path.as_bytes()[..limit]
        .iter()
        .position(|b| matches!(b, b'?' | b'#'))
        .unwrap_or(limit);
    raw_path.get(..end).unwrap_or(raw_path)
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Let it through to the origin, changed as [`Forward`] says.
    Continue(Forward),
    /// Answer from the filter.
    Respond {
        status: u32,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
}

/// How a request let through reaches the origin, besides losing the [`STRIPPED_HEADERS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forward {
    /// The `:path` the origin gets instead of the request's: a bypassed path without its query
    /// (see [`Filter::on_request`]).
    pub path: Option<String>,
    /// The [`DECISION_HEADER`] the origin gets (the client's own copy never reaches it).
    pub decision: Option<Arc<str>>,
}

impl Action {
    /// Let it through unchanged.
    pub const CONTINUE: Action = Action::Continue(Forward {
        path: None,
        decision: None,
    });

    pub fn is_continue(&self) -> bool {
        matches!(self, Action::Continue(_))
    }

    pub fn status(&self) -> Option<u32> {
        match self {
            Action::Continue(_) => None,
            Action::Respond { status, .. } => Some(*status),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        match self {
            Action::Continue(_) => None,
            Action::Respond { headers, .. } => headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str()),
        }
    }
}

/// The clock for one request.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// Unix seconds.
    pub secs: u64,
}

/// The filter for one configuration.
#[derive(Debug)]
pub struct Filter {
    pub config: PluginConfig,
    pub lists: ListTable,
    keys: Option<Keys>,
    list_metrics: Vec<String>,
    /// `pow_crawlers_passed{list}`, by list index.
    crawler_metrics: Vec<String>,
    nat64: Vec<net::Nat64Prefix>,
    salts: Salts,
    client_digests: ClientDigests,
    policy: CompiledPolicy,
    labels: RuleLabels,
    crawlers: Option<CrawlerTokens>,
    agents: TrustedAgents,
}

impl Filter {
    /// Builds a filter. `keys` is `None` when the secret is missing or short: the filter then
    /// challenges nobody (and the glue says so loudly). `salt_seed` comes from the VM's random
    /// source: challenge salts are derived from it.
    pub fn new(
        config: PluginConfig,
        keys: Option<Keys>,
        salt_seed: [u8; 32],
    ) -> Result<Filter, String> {
        let nat64 = config
            .nat64_prefixes
            .iter()
            .map(|p| net::Nat64Prefix::parse(p))
            .collect::<Result<Vec<_>, _>>()?;
        let lists = ListTable::build(config.lists.as_ref(), &nat64)?;
        let list_metrics = lists
            .names()
            .iter()
            .map(|n| metric::tagged(metric::LIST_MATCHES, &[(metric::LIST, n)]))
            .collect();
        let crawler_metrics = lists
            .names()
            .iter()
            .map(|n| metric::tagged(metric::CRAWLERS_PASSED, &[(metric::LIST, n)]))
            .collect();
        let agents = TrustedAgents::from_config(&config).map_err(|e| e.to_string())?;
        let policy = CompiledPolicy::compile(&config, lists.names(), agents.names());
        let labels = RuleLabels::new(lists.names(), &policy.rules);
        let crawlers = config
            .lists
            .as_ref()
            .and_then(|l| CrawlerTokens::build(lists.names(), &l.tokens));
        Ok(Filter {
            config,
            lists,
            keys,
            list_metrics,
            crawler_metrics,
            nat64,
            salts: Salts::new(salt_seed),
            client_digests: ClientDigests::default(),
            policy,
            labels,
            crawlers,
            agents,
        })
    }

    /// [`read_limit`], and the headers this configuration's rules test (their first bytes, as
    /// many as a rule's value can hold).
    pub fn read_limit(&self, name: &[u8]) -> Option<usize> {
        read_limit(name)
            .or_else(|| {
                self.policy
                    .header_names()
                    .any(|h| h.as_bytes() == name)
                    .then_some(crate::policy::MAX_MATCH_LEN + 1)
            })
            .or_else(|| {
                // A Web Bot Auth signature's own fields, when a rule tests signed agents.
                (self.policy.tests_signed_agents()
                    && matches!(name, b"signature-input" | b"signature" | b"signature-agent"))
                .then_some(crate::web_bot_auth::MAX_FIELD_LEN + 1)
            })
    }

    /// The header fields the request's Web Bot Auth signature covers that [`Filter::read_limit`]
    /// does not name, when a rule tests signed agents: the glue passes them too, each up to
    /// [`crate::web_bot_auth::MAX_FIELD_LEN`] + 1 bytes (a longer one makes the signature
    /// malformed) and at most [`MAX_COVERED_LINES`] lines in all. The Cookie header is never
    /// passed as a field (the filter reads only its clearance pairs): a signature covering it is
    /// malformed.
    pub fn covered_fields(&self, req: &Request<'_>) -> Vec<String> {
        if !self.policy.tests_signed_agents() {
            return Vec::new();
        }
        let signed = crate::web_bot_auth::SignedRequest::from_request(req);
        let Ok(Some(input)) = crate::web_bot_auth::field_value(&signed, "signature-input") else {
            return Vec::new();
        };
        crate::web_bot_auth::covered_fields(&input)
            .into_iter()
            .filter(|name| name != "cookie" && self.read_limit(name.as_bytes()).is_none())
            .collect()
    }

    /// Whether the filter has usable keys.
    pub fn is_armed(&self) -> bool {
        self.keys.is_some()
    }

    /// Every counter name this configuration can increment (so the glue can define them all
    /// at configure time and they show as 0).
    pub fn metric_names(&self) -> Vec<String> {
        let mut names: Vec<String> = [
            metric::CHALLENGES_ISSUED,
            metric::CHALLENGES_SOLVED,
            metric::PASSED_COOKIE,
            metric::PASSED_POLICY,
            metric::COOKIE_INVALID,
            metric::BYPASSED,
            metric::FAIL_OPEN,
            metric::ADDRESS_UNUSABLE,
            metric::HOST_OVERLONG,
            metric::UNPROTECTED,
            metric::SEEN_EVICTED,
            metric::SEEN_UNRECORDED,
            metric::CONFIG_REJECTED,
            metric::SIGNED_AGENTS_PASSED,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for r in VerifyFailure::ALL {
            names.push(metric::tagged(
                metric::VERIFY_FAILED,
                &[(metric::REASON, r.name())],
            ));
        }
        names.extend(self.list_metrics.iter().cloned());
        if let Some(crawlers) = &self.crawlers {
            for (i, m) in self.crawler_metrics.iter().enumerate().take(32) {
                if crawlers.lists & (1 << i) != 0 {
                    names.push(m.clone());
                }
            }
        }
        names.extend(self.labels.metric_names(&self.policy.rules));
        if self.policy.tests_signed_agents() {
            names.push(metric::SIGNATURE_VERIFIED.to_owned());
            for reason in Unsigned::ALL {
                if reason != Unsigned::NoSignature {
                    names.push(metric::tagged(
                        metric::SIGNATURE_UNSIGNED,
                        &[(metric::REASON, reason.name())],
                    ));
                }
            }
        }
        names
    }

    /// Decides what to do with one request.
    pub fn on_request(
        &self,
        req: &Request<'_>,
        now: Now,
        store: &mut dyn SharedStore,
        metrics: &mut dyn Metrics,
    ) -> Action {
        let raw_path = req.header(":path").unwrap_or("/");
        let path = path_part(raw_path);
        let method = req.header(":method").unwrap_or("");
        if self.config.acme_bypass && bypass::bypasses_acme(method, path) {
            metrics.increment(metric::BYPASSED);
            return self.allowed(
                &self.labels.acme,
                Verdict::Allowed,
                raw_path,
                path,
                true,
                metrics,
            );
        }
        let Some(keys) = &self.keys else {
            metrics.increment(metric::UNPROTECTED);
            return Action::CONTINUE;
        };
        let ip = net::client_ip(req.source_address.as_deref(), &self.nat64);
        if ip.is_none() {
            metrics.increment(metric::ADDRESS_UNUSABLE);
        }
        let net = ip.map_or(net::NO_ADDRESS, net::binding_net);
        if path == VERIFY_PATH {
            return self.verify(keys, req, raw_path, net, now, store, metrics);
        }
        let bound = Bound::new(req);
        let decision = self.decide(&bound, method, path, ip, now.secs, metrics);
        let labels = decision.labels;
        let (difficulty, kind) = match decision.outcome {
            Outcome::Allow => return self.passed(&decision, raw_path, path, metrics),
            Outcome::Deny => {
                metrics.increment(labels.metric(Verdict::Denied));
                self.log_decision(Event::Deny, &decision, bound.host(), net, None, metrics);
                return denied(labels);
            }
            Outcome::Challenge { difficulty, kind } => (difficulty, kind),
        };
        let Some(binding) = self.binding(bound.host(), bound.user_agent(), net) else {
            metrics.increment(metric::HOST_OVERLONG);
            return overlong_host();
        };
        if self.has_valid_cookie(keys, req, &binding, difficulty, now.secs, metrics) {
            metrics.increment(metric::PASSED_COOKIE);
            return self.allowed(labels, Verdict::Cleared, raw_path, path, false, metrics);
        }
        self.count_list_matches(decision.lists, metrics);
        metrics.increment(metric::CHALLENGES_ISSUED);
        metrics.increment(labels.metric(Verdict::Challenged));
        let host = bound.host();
        self.log_decision(
            Event::Challenge,
            &decision,
            host,
            net,
            Some(difficulty),
            metrics,
        );
        let return_to = redirect::check_target(raw_path, VERIFY_PATH).unwrap_or("/");
        let mut action = self.challenge(keys, req, &binding, difficulty, kind, return_to, now);
        if let Action::Respond { headers, .. } = &mut action {
            headers.push((
                DECISION_HEADER.to_owned(),
                format!(
                    "{}; difficulty={difficulty}; kind={}",
                    labels.decision(Verdict::Challenged),
                    kind.name()
                ),
            ));
        }
        action
    }

    /// A request let through by `labels`' rule: counted, marked for the origin, and without its
    /// query when the rule matched it by a path that the query could lead elsewhere.
    fn allowed(
        &self,
        labels: &Labels,
        verdict: Verdict,
        raw_path: &str,
        path: &str,
        strips_query: bool,
        metrics: &mut dyn Metrics,
    ) -> Action {
        metrics.increment(labels.metric(verdict));
        let path = (strips_query && path.len() < raw_path.len()).then(|| path.to_owned());
        Action::Continue(Forward {
            path,
            decision: Some(Arc::clone(labels.decision(verdict))),
        })
    }

    /// What a challenge or a cookie of this request is bound to; `None` when the host is longer
    /// than any DNS name ([`crypto::MAX_HOST_LEN`]): no site has it, and binding it apart
    /// would cost work that grows with the header.
    fn binding(&self, host: &str, user_agent: &str, net: net::Net) -> Option<Binding> {
        Some(Binding {
            net,
            client: self.client_digests.digest(host, user_agent)?,
        })
    }

    /// The clearance cookie's name as it is set: `__Host-` prefixed when Secure.
    fn cookie_name(&self, secure: bool) -> String {
        if secure {
            format!("{HOST_PREFIX}{}", self.config.cookie_name)
        } else {
            self.config.cookie_name.clone()
        }
    }

    /// Whether one of the clearance cookies checked ([`ClearancePairs`]: `__Host-` ones first,
    /// at most [`MAX_COOKIES_CHECKED`]) is valid and was paid at `difficulty` bits or more.
    /// Looking at no more bounds what a request stuffed with fake cookies costs (one MAC each
    /// per key); a browser sends one, or a few when the name is also set on a parent domain.
    fn has_valid_cookie(
        &self,
        keys: &Keys,
        req: &Request<'_>,
        binding: &Binding,
        difficulty: u8,
        now: u64,
        metrics: &mut dyn Metrics,
    ) -> bool {
        let pairs = ClearancePairs::new(
            req.cookie_headers(),
            &self.config.cookie_name,
            req.is_secure(),
        );
        let mut checked = 0;
        for pair in pairs.take(MAX_COOKIES_CHECKED) {
            checked += 1;
            let value = pair
                .iter()
                .position(|b| *b == b'=')
                .and_then(|eq| pair.get(eq + 1..))
                .and_then(|v| std::str::from_utf8(v).ok())
                .map(|v| trim_ows_str(v).trim_matches('"'));
            let valid = value.is_some_and(|value| {
                crypto::check_cookie(keys, binding, value, now, self.config.clearance_ttl_secs)
                    .is_ok_and(|paid| paid >= difficulty)
            });
            if valid {
                return true;
            }
        }
        if checked > 0 {
            metrics.increment(metric::COOKIE_INVALID);
        }
        false
    }

    /// A request a rule allows: counted (as a crawler or a signed agent too), and let through.
    fn passed(
        &self,
        decision: &decide::Decision<'_>,
        raw_path: &str,
        path: &str,
        metrics: &mut dyn Metrics,
    ) -> Action {
        let labels = decision.labels;
        let counter = if std::ptr::eq(labels, &self.labels.bypass) {
            metric::BYPASSED
        } else {
            metric::PASSED_POLICY
        };
        metrics.increment(counter);
        self.count_agents_passed(decision, metrics);
        self.allowed(
            labels,
            Verdict::Allowed,
            raw_path,
            path,
            decision.strips_query,
            metrics,
        )
    }

    /// Hands the glue the decision line of a request the filter answers itself.
    fn log_decision(
        &self,
        event: Event,
        decision: &decide::Decision<'_>,
        host: &str,
        network: net::Net,
        difficulty: Option<u8>,
        metrics: &mut dyn Metrics,
    ) {
        let verdict = match event {
            Event::Deny => Verdict::Denied,
            _ => Verdict::Challenged,
        };
        metrics.decision(&|| DecisionEvent {
            event,
            rule: Some(&decision.labels.name),
            action: verdict.name(),
            lists: self.lists_named(decision.lists),
            host,
            network,
            reason: None,
            difficulty,
        });
    }

    /// The names of the lists of these bits, in the table's order.
    fn lists_named(&self, bits: u32) -> Vec<&str> {
        if bits == 0 {
            return Vec::new();
        }
        self.lists
            .names()
            .iter()
            .enumerate()
            .take(32)
            .filter(|(i, _)| bits & (1 << i) != 0)
            .map(|(_, n)| n.as_str())
            .collect()
    }

    /// A verified crawler or a signed agent let through by a rule, counted as such.
    fn count_agents_passed(&self, decision: &decide::Decision<'_>, metrics: &mut dyn Metrics) {
        if decision.crawlers != 0 {
            for (i, m) in self.crawler_metrics.iter().enumerate().take(32) {
                if decision.crawlers & (1 << i) != 0 {
                    metrics.increment(m);
                }
            }
        }
        if decision.signed {
            metrics.increment(metric::SIGNED_AGENTS_PASSED);
        }
    }

    fn count_list_matches(&self, bits: u32, metrics: &mut dyn Metrics) {
        for (i, m) in self.list_metrics.iter().enumerate().take(32) {
            if bits & (1 << i) != 0 {
                metrics.increment(m);
            }
        }
    }
}
