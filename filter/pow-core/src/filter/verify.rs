//! The verify endpoint (`GET /.pow/verify?c=&i=&e=&d=&s=&n=&r=`): parses the solution, checks it
//! (method, return target, difficulty, expiry window, MAC, work, seen-set: the first failure
//! denies) and answers with the clearance cookie or the reason it was refused.

use super::{
    Action, Filter, MITIGATED_HEADER, Metrics, Now, REASON_HEADER, Request, VERIFY_PATH, metric,
};
use crate::crypto::{self, Binding, ChallengeParams, Keys};
use crate::decision_log::{DecisionEvent, Event};
use crate::net::Net;
use crate::page;
use crate::redirect;
use crate::seen::{self, SharedStore, Spent};

impl Filter {
    #[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
    pub(super) fn verify(
        &self,
        keys: &Keys,
        req: &Request<'_>,
        raw_path: &str,
        net: Net,
        now: Now,
        store: &mut dyn SharedStore,
        metrics: &mut dyn Metrics,
    ) -> Action {
        let lang = page::negotiate(req.header("accept-language"));
        let query = raw_path.split_once('?').map_or("", |(_, q)| q);
        let parsed = VerifyQuery::parse(query);
        match self.check_solution(keys, req, net, now, parsed, store) {
            Ok(Solved {
                binding,
                target,
                difficulty,
                spent,
                issued,
            }) => {
                match spent {
                    Spent::Recorded => {}
                    Spent::Evicted(n) => {
                        for _ in 0..n {
                            metrics.increment(metric::SEEN_EVICTED);
                        }
                    }
                    Spent::Unrecorded => metrics.increment(metric::SEEN_UNRECORDED),
                }
                metrics.increment(metric::CHALLENGES_SOLVED);
                metrics.record(metric::SOLVE_SECONDS, now.secs.saturating_sub(issued));
                let expiry = now.secs.saturating_add(self.config.clearance_ttl_secs);
                let value = crypto::issue_cookie(keys, &binding, expiry, difficulty);
                let secure = req.is_secure();
                let cookie = format!(
                    "{}={value}; Max-Age={}; Path=/; HttpOnly; SameSite=Lax{}",
                    self.cookie_name(secure),
                    self.config.clearance_ttl_secs,
                    if secure { "; Secure" } else { "" },
                );
                Action::Respond {
                    status: 303,
                    headers: vec![
                        ("location".to_owned(), target),
                        ("set-cookie".to_owned(), cookie),
                        ("cache-control".to_owned(), "no-store".to_owned()),
                    ],
                    body: Vec::new(),
                }
            }
            Err(reason) => self.refused(reason, req, net, lang, metrics),
        }
    }

    /// A refused solution: counted by its reason, logged, and answered with the failure page.
    fn refused(
        &self,
        reason: VerifyFailure,
        req: &Request<'_>,
        net: Net,
        lang: page::Lang,
        metrics: &mut dyn Metrics,
    ) -> Action {
        metrics.increment(&metric::tagged(
            metric::VERIFY_FAILED,
            &[(metric::REASON, reason.name())],
        ));
        metrics.decision(&|| DecisionEvent {
            event: Event::VerifyFailed,
            rule: None,
            action: "refused",
            lists: self.lists_named(net_lists(self, req)),
            host: super::Bound::new(req).host(),
            network: net,
            reason: Some(reason.name()),
            difficulty: None,
        });
        let html = page::wants_html(req.header("accept"));
        let (ctype, body, csp) = if html {
            (
                "text/html; charset=utf-8",
                page::render_failure(lang).into_bytes(),
                page::CSP_NO_SCRIPT,
            )
        } else {
            (
                "text/plain; charset=utf-8",
                format!("proof of work refused: {}\n", reason.name()).into_bytes(),
                page::CSP_NO_SCRIPT,
            )
        };
        Action::Respond {
            status: 403,
            headers: vec![
                (MITIGATED_HEADER.to_owned(), "challenge".to_owned()),
                (REASON_HEADER.to_owned(), reason.name().to_owned()),
                ("cache-control".to_owned(), "no-store".to_owned()),
                ("content-type".to_owned(), ctype.to_owned()),
                ("content-security-policy".to_owned(), csp.to_owned()),
                ("x-content-type-options".to_owned(), "nosniff".to_owned()),
            ],
            body,
        }
    }

    /// Every check of a solution; the first failure denies.
    fn check_solution(
        &self,
        keys: &Keys,
        req: &Request<'_>,
        net: Net,
        now: Now,
        parsed: Result<VerifyQuery, VerifyFailure>,
        store: &mut dyn SharedStore,
    ) -> Result<Solved, VerifyFailure> {
        let method = req.header(":method").unwrap_or("");
        if method != "GET" {
            return Err(VerifyFailure::Method);
        }
        let q = parsed?;
        let target = redirect::check_target(&q.return_to, VERIFY_PATH)
            .map_err(|_| VerifyFailure::Redirect)?
            .to_owned();
        // 0 bits: a refresh challenge, whose answer is the wait. It came from the filter (the
        // MAC covers the difficulty) and is accepted only once the delay has passed.
        let refresh = q.difficulty == 0;
        if !refresh
            && !(crate::config::MIN_DIFFICULTY..=crate::config::MAX_DIFFICULTY)
                .contains(&q.difficulty)
        {
            return Err(VerifyFailure::Malformed);
        }
        // Issued no later than now, not expired, and living no longer than the challenge TTL
        // in force now allows (a lowered TTL shortens the challenges already out).
        if q.issued > now.secs || q.expiry < now.secs || q.expiry < q.issued {
            return Err(VerifyFailure::Expired);
        }
        if q.expiry - q.issued > self.config.challenge_ttl_secs {
            return Err(VerifyFailure::Expired);
        }
        let bound = super::Bound::new(req);
        let binding = self
            .binding(bound.host(), bound.user_agent(), net)
            .ok_or(VerifyFailure::Malformed)?;
        let params = ChallengeParams {
            issued: q.issued,
            expiry: q.expiry,
            difficulty: q.difficulty,
            salt: q.salt,
        };
        if !crypto::check_challenge(keys, &binding, &params, &q.challenge) {
            return Err(VerifyFailure::Mac);
        }
        if !crypto::check_work(&q.challenge, q.nonce, q.difficulty) {
            return Err(VerifyFailure::Work);
        }
        if refresh && now.secs < q.issued.saturating_add(self.config.refresh_delay_secs) {
            return Err(VerifyFailure::Early);
        }
        // When it was issued, as the MAC vouches: not derived from a TTL that may have changed
        // (a restart that lowered it would otherwise date a spent challenge after the set began).
        let spent = seen::spend(
            store,
            &binding.net,
            &q.challenge,
            q.issued,
            q.expiry,
            now.secs,
        )
        .map_err(|seen::Replay| VerifyFailure::Replay)?;
        Ok(Solved {
            binding,
            target,
            difficulty: q.difficulty,
            spent,
            issued: q.issued,
        })
    }
}

/// An accepted solution: what the cookie is bound to and paid, where the visitor goes back to,
/// what became of its record in the seen-set, and when its challenge was issued.
struct Solved {
    binding: Binding,
    target: String,
    difficulty: u8,
    spent: Spent,
    issued: u64,
}

/// The lists the request's address is in (none without a usable address).
fn net_lists(filter: &Filter, req: &Request<'_>) -> u32 {
    crate::net::client_ip(req.source_address.as_deref(), &filter.nat64)
        .map_or(0, |ip| filter.lists.lookup(ip))
}

/// Why a verification was refused (each counted in `pow_verify_failed{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyFailure {
    /// Not a GET.
    Method,
    /// A parameter missing, repeated, unknown or malformed.
    Malformed,
    /// The return target is not a same-origin path.
    Redirect,
    /// Past its expiry, issued later than now, or living longer than the challenge TTL.
    Expired,
    /// Not issued by us for this client (/24 or /64, User-Agent, host) and these parameters.
    Mac,
    /// The nonce does not have the bits.
    Work,
    /// Already spent, or issued before the seen-set started (it cannot know).
    Replay,
    /// A refresh challenge answered before its delay.
    Early,
}

impl VerifyFailure {
    pub const ALL: [VerifyFailure; 8] = [
        VerifyFailure::Method,
        VerifyFailure::Malformed,
        VerifyFailure::Redirect,
        VerifyFailure::Expired,
        VerifyFailure::Mac,
        VerifyFailure::Work,
        VerifyFailure::Replay,
        VerifyFailure::Early,
    ];

    pub fn name(self) -> &'static str {
        match self {
            VerifyFailure::Method => "method",
            VerifyFailure::Malformed => "malformed",
            VerifyFailure::Redirect => "redirect",
            VerifyFailure::Expired => "expired",
            VerifyFailure::Mac => "mac",
            VerifyFailure::Work => "work",
            VerifyFailure::Replay => "replay",
            VerifyFailure::Early => "early",
        }
    }
}

/// The verify request's query: `c` (64 hex), `i` (issued), `e` (expiry), `d` (bits), `s` (16
/// hex), `n` (16 hex), `r` (the return path, percent-encoded). Each exactly once; nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyQuery {
    pub challenge: [u8; 32],
    pub issued: u64,
    pub expiry: u64,
    pub difficulty: u8,
    pub salt: u64,
    pub nonce: u64,
    pub return_to: String,
}

impl VerifyQuery {
    pub fn parse(query: &str) -> Result<VerifyQuery, VerifyFailure> {
        if query.len() > 4096 {
            return Err(VerifyFailure::Malformed);
        }
        let mut fields: [Option<&str>; 7] = [None; 7];
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').ok_or(VerifyFailure::Malformed)?;
            let slot = match k {
                "c" => 0,
                "e" => 1,
                "d" => 2,
                "s" => 3,
                "n" => 4,
                "r" => 5,
                "i" => 6,
                _ => return Err(VerifyFailure::Malformed),
            };
            if fields[slot].replace(v).is_some() {
                return Err(VerifyFailure::Malformed);
            }
        }
        let [
            Some(c),
            Some(e),
            Some(d),
            Some(s),
            Some(n),
            Some(r),
            Some(i),
        ] = fields
        else {
            return Err(VerifyFailure::Malformed);
        };
        let bad = VerifyFailure::Malformed;
        let return_to = String::from_utf8(redirect::percent_decode(r.as_bytes()))
            .map_err(|_| VerifyFailure::Redirect)?;
        Ok(VerifyQuery {
            challenge: crypto::unhex::<32>(c).ok_or(bad)?,
            issued: crypto::parse_decimal(i).ok_or(bad)?,
            expiry: crypto::parse_decimal(e).ok_or(bad)?,
            difficulty: u8::try_from(crypto::parse_decimal(d).ok_or(bad)?).map_err(|_| bad)?,
            salt: u64::from_be_bytes(crypto::unhex::<8>(s).ok_or(bad)?),
            nonce: u64::from_be_bytes(crypto::unhex::<8>(n).ok_or(bad)?),
            return_to,
        })
    }

    /// The query string for these values (what the page builds).
    pub fn to_query(&self) -> String {
        format!(
            "c={}&i={}&e={}&d={}&s={:016x}&n={:016x}&r={}",
            crypto::hex(&self.challenge),
            self.issued,
            self.expiry,
            self.difficulty,
            self.salt,
            self.nonce,
            percent_encode_component(&self.return_to)
        )
    }
}

/// Percent-encodes like JavaScript's `encodeURIComponent`.
pub fn percent_encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
