//! The per-request decision, with no proxy-wasm in sight: the glue gathers the request's
//! headers and `source.address`, calls [`Filter::on_request`], and carries out the [`Action`].
//!
//! Order: the bypass paths ([`crate::bypass`]); the verify endpoint (module `verify`); the policy
//! (`off`, `listed`, `all`) gives the difficulty required now, or lets the request through; a
//! valid clearance cookie paid at that difficulty or more passes; else a challenge. A refused check
//! on the verify path denies (a seen-set that cannot record does not); an internal error anywhere
//! else lets the request through and is counted (`pow_fail_open`).

use std::net::IpAddr;

use crate::bypass;
use crate::config::{Mode, PluginConfig};
use crate::crypto::{self, Binding, ChallengeParams, Keys};
use crate::lists::ListTable;
use crate::net;
use crate::page::{self, PageData};
use crate::redirect;
use crate::seen::SharedStore;

mod verify;

pub use verify::{VerifyFailure, VerifyQuery, percent_encode_component};

/// The reserved path that checks a solution and sets the clearance cookie.
pub const VERIFY_PATH: &str = "/.pow/verify";
/// The response header that marks a challenge (like Cloudflare's `cf-mitigated: challenge`).
pub const MITIGATED_HEADER: &str = "pow-mitigated";
/// At most this many clearance cookies of a request are checked (one MAC each).
pub const MAX_COOKIES_CHECKED: usize = 3;
/// On a failed verification, says why (`malformed`, `expired`, `mac`, `work`, `replay`, ...).
pub const REASON_HEADER: &str = "pow-verify";

/// Metric names (counters unless noted). Per-list and per-reason names are built from these
/// prefixes: `pow_list_matches_<list>`, `pow_verify_failed_<reason>`.
pub mod metric {
    pub const CHALLENGES_ISSUED: &str = "pow_challenges_issued";
    pub const CHALLENGES_SOLVED: &str = "pow_challenges_solved";
    pub const VERIFY_FAILED_PREFIX: &str = "pow_verify_failed_";
    pub const PASSED_COOKIE: &str = "pow_passed_cookie";
    pub const PASSED_POLICY: &str = "pow_passed_policy";
    pub const COOKIE_INVALID: &str = "pow_cookie_invalid";
    pub const BYPASSED: &str = "pow_bypassed";
    pub const LIST_MATCHES_PREFIX: &str = "pow_list_matches_";
    pub const FAIL_OPEN: &str = "pow_fail_open";
    /// Requests passed unchallenged because the secret is missing or too short.
    pub const UNPROTECTED: &str = "pow_unprotected";
    pub const CONFIG_REJECTED: &str = "pow_config_rejected";
    /// Unexpired spent challenges dropped from a full seen-set shard to record a new one.
    pub const SEEN_EVICTED: &str = "pow_seen_evicted";
    /// Solutions let through without being recorded as spent (the shared data failed or
    /// stayed busy).
    pub const SEEN_UNRECORDED: &str = "pow_seen_unrecorded";
    /// Gauges.
    pub const SECRET_MISSING: &str = "pow_secret_missing";
    pub const LISTS_VERSION: &str = "pow_lists_version";
    pub const LISTS_GENERATED_AT: &str = "pow_lists_generated_at_seconds";
    pub const LISTS_AGE: &str = "pow_lists_age_seconds";
    pub const LISTS_PREFIXES: &str = "pow_lists_prefixes";
}

/// Where the glue sends counter increments.
pub trait Metrics {
    fn increment(&mut self, name: &str);
}

/// Every header [`Filter::on_request`] reads (names lowercase): the glue need not copy the
/// others out of the host.
pub const HEADERS_USED: &[&str] = &[
    ":path",
    ":method",
    ":scheme",
    ":authority",
    "host",
    "user-agent",
    "cookie",
    "accept",
    "accept-language",
    "x-forwarded-for",
    "x-forwarded-proto",
];

/// A request as the filter sees it.
#[derive(Debug, Default, Clone)]
pub struct Request {
    /// All request headers, pseudo-headers (`:path`, `:authority`, ...) included, names lowercase.
    /// The glue passes only [`HEADERS_USED`], and each Cookie header reduced by
    /// [`clearance_pairs`] (which decides alike).
    pub headers: Vec<(String, String)>,
    /// The `source.address` property.
    pub source_address: Option<String>,
}

impl Request {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a header.
    pub fn header_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The value of one `name=value` pair of a Cookie header when its name is `name` (names and
/// pairs trimmed, as browsers write `a=1; b=2`).
fn cookie_value<'a>(pair: &'a str, name: &str) -> Option<&'a str> {
    let (n, value) = pair.trim().split_once('=')?;
    (n.trim() == name).then_some(value)
}

/// Reduces a raw Cookie header to its first [`MAX_COOKIES_CHECKED`] pairs named `name`, trimmed,
/// joined by `"; "`: all that [`Filter::on_request`] reads of it. The glue calls this instead
/// of copying the whole header out of the host's buffer, so a request stuffed with 60 KiB of
/// cookies costs a scan for the pairs' boundaries (stopping once the last pair that can matter
/// is found), not a UTF-8 validation and a copy of every byte. Only the kept pairs, and names
/// that could match, are decoded (bytes that are not UTF-8 replaced): this gives what splitting
/// the lossily decoded header would, as `;` and `=` are ASCII and never fall inside a
/// multi-byte character.
pub fn clearance_pairs(header: &[u8], name: &str) -> String {
    let mut kept = String::new();
    let mut count = 0;
    let mut rest = header;
    while !rest.is_empty() {
        let (pair, next) = match find_byte(rest, b';') {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &[][..]),
        };
        rest = next;
        if !may_be_named(pair, name.as_bytes()) {
            continue;
        }
        let Some(eq) = pair.iter().position(|b| *b == b'=') else {
            continue;
        };
        if String::from_utf8_lossy(&pair[..eq]).trim() != name {
            continue;
        }
        if count > 0 {
            kept.push_str("; ");
        }
        kept.push_str(String::from_utf8_lossy(pair).trim());
        count += 1;
        if count == MAX_COOKIES_CHECKED {
            break;
        }
    }
    kept
}

/// A cheap test that lets most pairs of a big Cookie header be skipped undecoded: `false` only
/// when the pair's trimmed name cannot be `name`, i.e. its first byte after ASCII whitespace is
/// ASCII (so not part of Unicode whitespace) and the bytes from there do not start with `name`.
fn may_be_named(pair: &[u8], name: &[u8]) -> bool {
    // The ASCII characters `char::is_whitespace` (what `str::trim` removes) accepts.
    let start = pair
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r'));
    match start {
        None => false,
        Some(at) => pair[at] >= 0x80 || pair[at..].starts_with(name),
    }
}

/// The index of the first `needle` in `haystack`, eight bytes at a time: the filter runs as
/// wasm32 without SIMD, where a byte-at-a-time loop over a 60 KiB header costs several times
/// more. A word has a byte equal to `needle` exactly when `x = word ^ needle*0x01..01` has a
/// zero byte, which `(x - 0x01..01) & !x & 0x80..80` tells.
fn find_byte(haystack: &[u8], needle: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let pattern = LO * u64::from(needle);
    let mut at = 0;
    for chunk in haystack.chunks_exact(8) {
        let Ok(bytes) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let x = u64::from_le_bytes(bytes) ^ pattern;
        if x.wrapping_sub(LO) & !x & HI != 0 {
            break;
        }
        at += 8;
    }
    haystack[at..]
        .iter()
        .position(|b| *b == needle)
        .map(|i| at + i)
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Let it through to the origin.
    Continue,
    /// Answer from the filter.
    Respond {
        status: u32,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
}

impl Action {
    pub fn status(&self) -> Option<u32> {
        match self {
            Action::Continue => None,
            Action::Respond { status, .. } => Some(*status),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        match self {
            Action::Continue => None,
            Action::Respond { headers, .. } => headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str()),
        }
    }
}

/// Clock readings for one request.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub secs: u64,
    /// Used to make challenge salts unique.
    pub nanos: u64,
}

/// The filter for one configuration.
#[derive(Debug)]
pub struct Filter {
    pub config: PluginConfig,
    pub lists: ListTable,
    keys: Option<Keys>,
    list_metrics: Vec<String>,
    salt_counter: std::cell::Cell<u64>,
}

impl Filter {
    /// Builds a filter. `keys` is `None` when the secret is missing or short: the filter then
    /// challenges nobody (and the glue says so loudly).
    pub fn new(config: PluginConfig, keys: Option<Keys>) -> Result<Filter, String> {
        let lists = ListTable::build(config.lists.as_ref())?;
        let list_metrics = lists
            .names()
            .iter()
            .map(|n| format!("{}{n}", metric::LIST_MATCHES_PREFIX))
            .collect();
        Ok(Filter {
            config,
            lists,
            keys,
            list_metrics,
            salt_counter: std::cell::Cell::new(0),
        })
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
            metric::UNPROTECTED,
            metric::SEEN_EVICTED,
            metric::SEEN_UNRECORDED,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for r in VerifyFailure::ALL {
            names.push(format!("{}{}", metric::VERIFY_FAILED_PREFIX, r.name()));
        }
        names.extend(self.list_metrics.iter().cloned());
        names
    }

    /// Decides what to do with one request.
    pub fn on_request(
        &self,
        req: &Request,
        now: Now,
        store: &mut dyn SharedStore,
        metrics: &mut dyn Metrics,
    ) -> Action {
        let raw_path = req.header(":path").unwrap_or("/");
        let path = raw_path.split(['?', '#']).next().unwrap_or("");
        if self.is_bypass(path) {
            metrics.increment(metric::BYPASSED);
            return Action::Continue;
        }
        let Some(keys) = &self.keys else {
            metrics.increment(metric::UNPROTECTED);
            return Action::Continue;
        };
        let ip = net::client_ip(
            req.source_address.as_deref(),
            self.forwarded_for(req).as_deref(),
            self.config.trusted_hops,
        );
        if path == VERIFY_PATH {
            return self.verify(keys, req, raw_path, ip, now, store, metrics);
        }
        let Some(ip) = ip else {
            // No usable client address: an internal error, not the visitor's fault.
            metrics.increment(metric::FAIL_OPEN);
            return Action::Continue;
        };
        let (required, lists) = self.policy(ip);
        let Some(difficulty) = required else {
            metrics.increment(metric::PASSED_POLICY);
            return Action::Continue;
        };
        let binding = self.binding(req, ip);
        if self.has_valid_cookie(keys, req, &binding, difficulty, now.secs, metrics) {
            metrics.increment(metric::PASSED_COOKIE);
            return Action::Continue;
        }
        self.count_list_matches(lists, metrics);
        metrics.increment(metric::CHALLENGES_ISSUED);
        let return_to = redirect::check_target(raw_path, VERIFY_PATH).unwrap_or("/");
        self.challenge(keys, req, &binding, difficulty, return_to, now)
    }

    fn is_bypass(&self, path: &str) -> bool {
        bypass::bypasses(path, &self.config.bypass_paths)
    }

    /// All X-Forwarded-For values joined, only when hops are trusted.
    fn forwarded_for(&self, req: &Request) -> Option<String> {
        if self.config.trusted_hops == 0 {
            return None;
        }
        let all: Vec<&str> = req.header_all("x-forwarded-for").collect();
        if all.is_empty() {
            None
        } else {
            Some(all.join(","))
        }
    }

    fn binding(&self, req: &Request, ip: IpAddr) -> Binding {
        let host = req
            .header(":authority")
            .or_else(|| req.header("host"))
            .unwrap_or("");
        Binding::new(
            net::binding_net(ip),
            req.header("user-agent").unwrap_or(""),
            host,
        )
    }

    /// Whether one of the first [`MAX_COOKIES_CHECKED`] clearance cookies is valid and was paid
    /// at `difficulty` bits or more. Looking at no more bounds what a request stuffed with fake
    /// cookies costs (one MAC each); a browser sends one, or a few when the name is also set on
    /// a parent domain or path.
    fn has_valid_cookie(
        &self,
        keys: &Keys,
        req: &Request,
        binding: &Binding,
        difficulty: u8,
        now: u64,
        metrics: &mut dyn Metrics,
    ) -> bool {
        let name = self.config.cookie_name.as_str();
        let candidates = req
            .header_all("cookie")
            .flat_map(|header| header.split(';'))
            .filter_map(|pair| cookie_value(pair, name))
            .take(MAX_COOKIES_CHECKED);
        let mut seen_one = false;
        for value in candidates {
            seen_one = true;
            let value = value.trim().trim_matches('"');
            if crypto::check_cookie(keys, binding, value, now, self.config.clearance_ttl_secs)
                .is_ok_and(|paid| paid >= difficulty)
            {
                return true;
            }
        }
        if seen_one {
            metrics.increment(metric::COOKIE_INVALID);
        }
        false
    }

    /// The difficulty this client must pay now (`None`: it passes), and the lists it is in
    /// (bit `i` for list `i`).
    fn policy(&self, ip: IpAddr) -> (Option<u8>, u32) {
        if self.config.mode == Mode::Off {
            return (None, 0);
        }
        let bits = self.lists.lookup(ip);
        let mut listed: Option<u8> = None;
        for (i, name) in self.lists.names().iter().enumerate().take(32) {
            if bits & (1 << i) != 0 {
                let d = self.config.difficulty_for(name);
                listed = Some(listed.map_or(d, |l| l.max(d)));
            }
        }
        let required = match self.config.mode {
            Mode::Off => None,
            Mode::Listed => listed,
            Mode::All => {
                Some(listed.map_or(self.config.difficulty, |l| l.max(self.config.difficulty)))
            }
        };
        (required, bits)
    }

    fn count_list_matches(&self, bits: u32, metrics: &mut dyn Metrics) {
        for (i, m) in self.list_metrics.iter().enumerate().take(32) {
            if bits & (1 << i) != 0 {
                metrics.increment(m);
            }
        }
    }

    fn secure(&self, req: &Request) -> bool {
        req.header(":scheme")
            .is_some_and(|s| s.eq_ignore_ascii_case("https"))
            || (self.config.trusted_hops > 0
                && req
                    .header("x-forwarded-proto")
                    .is_some_and(|s| s.trim().eq_ignore_ascii_case("https")))
    }

    fn challenge(
        &self,
        keys: &Keys,
        req: &Request,
        binding: &Binding,
        difficulty: u8,
        return_to: &str,
        now: Now,
    ) -> Action {
        let counter = self.salt_counter.get().wrapping_add(1);
        self.salt_counter.set(counter);
        let params = ChallengeParams {
            expiry: now.secs.saturating_add(self.config.challenge_ttl_secs),
            difficulty,
            salt: now.nanos.rotate_left(17) ^ counter,
        };
        let challenge = crypto::issue_challenge(keys, binding, &params);
        let lang = page::negotiate(req.header("accept-language"));
        let mut headers = vec![
            (MITIGATED_HEADER.to_owned(), "challenge".to_owned()),
            ("cache-control".to_owned(), "no-store".to_owned()),
            ("x-content-type-options".to_owned(), "nosniff".to_owned()),
            ("referrer-policy".to_owned(), "same-origin".to_owned()),
            ("content-language".to_owned(), lang.tag().to_owned()),
        ];
        let body = if page::wants_html(req.header("accept")) {
            headers.push((
                "content-type".to_owned(),
                "text/html; charset=utf-8".to_owned(),
            ));
            headers.push(("content-security-policy".to_owned(), page::csp().to_owned()));
            page::render_html(
                lang,
                &PageData {
                    challenge_hex: &crypto::hex(&challenge),
                    salt_hex: &format!("{:016x}", params.salt),
                    expiry: params.expiry,
                    difficulty,
                    return_to,
                    verify_path: VERIFY_PATH,
                },
            )
            .into_bytes()
        } else {
            headers.push((
                "content-type".to_owned(),
                "text/plain; charset=utf-8".to_owned(),
            ));
            page::render_plain(lang).as_bytes().to_vec()
        };
        Action::Respond {
            status: 403,
            headers,
            body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_byte_agrees_with_a_byte_loop() {
        let text: Vec<u8> = (0..200u32).map(|i| (i * 37 % 251) as u8).collect();
        for start in 0..text.len() {
            for needle in [b';', 0, 0x80, 0xff, 59 ^ 0x80] {
                let hay = &text[start..];
                assert_eq!(
                    find_byte(hay, needle),
                    hay.iter().position(|b| *b == needle),
                    "{start} {needle}"
                );
            }
        }
        assert_eq!(find_byte(b"", b';'), None);
        assert_eq!(find_byte(b"aaaaaaaaaaaaaaa;", b';'), Some(15));
    }

    #[test]
    fn may_be_named_rejects_only_what_cannot_match() {
        for (pair, expected) in [
            (&b"pow=1"[..], true),
            (b" \t\x0bpow=1", true),
            (b"\xc2\xa0pow=1", true),
            (b"\xffx=1", true),
            (b"po=1", false),
            (b" other=pow", false),
            (b"  ", false),
        ] {
            assert_eq!(may_be_named(pair, b"pow"), expected, "{pair:?}");
        }
    }
}
