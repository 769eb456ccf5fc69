//! Web Bot Auth: whether a request carries an HTTP Message Signature (RFC 9421) made with the
//! Ed25519 key of an agent the configuration trusts, as draft-meunier-web-bot-auth-architecture-05
//! and draft-meunier-http-message-signatures-directory-05 use them.
//!
//! At most one signature is checked per request: the first member of `Signature-Input` whose
//! `tag` is `web-bot-auth`. It is valid when (the draft sections are arch-05's):
//! - its `alg`, if present, is `ed25519` (RFC 9421 section 3.3.6);
//! - `created` and `expires` are present ("Generating HTTP Message Signature": MUST), `created`
//!   is at most [`CLOCK_SKEW_SECS`] ahead of now, now is not past `expires`, and
//!   `expires - created` is at most the configured bound (the draft RECOMMENDS no more than
//!   24 hours; we allow less by default, see [`DEFAULT_MAX_AGE_SECS`]);
//! - its `keyid` is the RFC 7638 thumbprint of a trusted key ("Generating HTTP Message
//!   Signature": keyid MUST be the JWK SHA-256 thumbprint, RFC 8037 appendix A.3 for Ed25519);
//! - it covers `@authority` or `@target-uri` ("Generating HTTP Message Signature": at least one
//!   of them MUST be included), and, when the request carries `Signature-Agent`, that field or
//!   one of its members ("Signature-Agent": if the header is sent, one of its members MUST be
//!   signed);
//! - the Ed25519 signature (RFC 8032, `verify_strict`) of the signature base (RFC 9421 section
//!   2.5) verifies.
//!
//! The work is bounded whatever the request: each field read is at most [`MAX_FIELD_LEN`]
//! bytes, a dictionary at most [`sf::MAX_MEMBERS`] members, a signature at most
//! [`sf::MAX_ITEMS`] components, the base at most [`MAX_BASE_LEN`] bytes; one SHA-512
//! and one double scalar multiplication at most. Nothing here panics on any input.

mod base;
mod keys;
pub mod sf;

use std::borrow::Cow;

use ed25519_dalek::{Signature, VerifyingKey};

use crate::config::{ConfigError, PluginConfig};
use crate::filter::Request;

pub use base::{MAX_BASE_LEN, field_value, signature_base};
pub use keys::{Ed25519Key, Jwk, KeyDirectory, KeyError, MAX_DIRECTORY_KEYS, decode_x, thumbprint};

/// The longest `Signature-Input`, `Signature`, `Signature-Agent` or covered field read (all its
/// lines together): one signature with its nonce is a few hundred bytes, and a `data:` URI
/// directory with a certificate chain, the longest the drafts show, under 1.5 KiB.
pub const MAX_FIELD_LEN: usize = 4096;
/// How far in the future `created` may be: the agent's clock and ours disagree a little.
pub const CLOCK_SKEW_SECS: u64 = 60;
/// The default of `signature_max_age_secs`, the longest `expires - created` accepted. The
/// filter keeps no nonces, so a signature is a bearer credential for the authority it covers
/// until it expires (arch-05, "Anti-replay"): five minutes, like the challenge's lifetime, is
/// enough for an agent that signs each request as it sends it, and short for anyone who saw
/// one. The draft's own test vectors sign for an hour; an operator whose agents do can raise
/// it up to the draft's ceiling, [`MAX_MAX_AGE_SECS`].
pub const DEFAULT_MAX_AGE_SECS: u64 = 300;
/// The highest `signature_max_age_secs`: arch-05 RECOMMENDS an expiry of no more than 24 hours.
pub const MAX_MAX_AGE_SECS: u64 = 86_400;
/// The most agents a configuration can trust.
pub const MAX_AGENTS: usize = 32;
/// The tag of a Web Bot Auth request signature (arch-05, "Generating HTTP Message Signature").
pub const TAG: &str = "web-bot-auth";

/// Why a request is not a verified signed agent's: one counter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsigned {
    /// Neither `Signature-Input` nor `Signature`.
    NoSignature,
    /// A field that does not parse, is too long or has too many members; no `Signature` for the
    /// label; `created`, `expires` or `keyid` missing or of the wrong type; a covered component
    /// the request lacks or that repeats.
    Malformed,
    /// No `Signature-Input` member is tagged `web-bot-auth` (tag missing or another).
    NotWebBotAuth,
    /// An `alg` other than `ed25519`, or a component or component parameter not supported.
    Unsupported,
    /// A derived component (`@...`) that RFC 9421 section 2.2 does not define.
    UnknownComponent,
    /// Now is past `expires`.
    Expired,
    /// `created` is more than [`CLOCK_SKEW_SECS`] ahead of now.
    NotYetValid,
    /// `expires - created` is longer than the bound, or negative.
    TooLong,
    /// Neither `@authority` nor `@target-uri` is covered, or `Signature-Agent` is sent but not
    /// covered.
    NotCovered,
    /// `keyid` is not the thumbprint of a trusted key.
    UnknownKey,
    /// The signature does not verify.
    BadSignature,
}

impl Unsigned {
    pub const ALL: [Unsigned; 11] = [
        Unsigned::NoSignature,
        Unsigned::Malformed,
        Unsigned::NotWebBotAuth,
        Unsigned::Unsupported,
        Unsigned::UnknownComponent,
        Unsigned::Expired,
        Unsigned::NotYetValid,
        Unsigned::TooLong,
        Unsigned::NotCovered,
        Unsigned::UnknownKey,
        Unsigned::BadSignature,
    ];

    /// The reason as it appears in a metric name.
    pub fn name(self) -> &'static str {
        match self {
            Unsigned::NoSignature => "no_signature",
            Unsigned::Malformed => "malformed",
            Unsigned::NotWebBotAuth => "not_web_bot_auth",
            Unsigned::Unsupported => "unsupported",
            Unsigned::UnknownComponent => "unknown_component",
            Unsigned::Expired => "expired",
            Unsigned::NotYetValid => "not_yet_valid",
            Unsigned::TooLong => "too_long",
            Unsigned::NotCovered => "not_covered",
            Unsigned::UnknownKey => "unknown_key",
            Unsigned::BadSignature => "bad_signature",
        }
    }
}

/// What a signature is checked against: the request's derived components and its header fields
/// (names in any case; every line of a field is read, RFC 9421 section 2.1).
#[derive(Debug, Clone, Copy)]
pub struct SignedRequest<'a> {
    pub method: &'a str,
    /// `https` or `http`.
    pub scheme: &'a str,
    /// The host and port, as `:authority` (or `Host`) has them; normalized here.
    pub authority: &'a str,
    /// The path with its query, as `:path` has it.
    pub path: &'a str,
    pub headers: &'a [(Cow<'a, str>, Cow<'a, str>)],
}

impl<'a> SignedRequest<'a> {
    /// The filter's view of a request: `:method`, `:authority` (else `Host`), `:path`, the
    /// scheme as [`Request::is_secure`] decides it, and every header the glue passed. The glue
    /// must pass `signature-input`, `signature`, `signature-agent` and the fields a signature
    /// covers; one it did not pass is missing, and the signature malformed.
    pub fn from_request(req: &'a Request<'a>) -> SignedRequest<'a> {
        SignedRequest {
            method: req.header(":method").unwrap_or(""),
            scheme: if req.is_secure() { "https" } else { "http" },
            authority: req
                .header(":authority")
                .or_else(|| req.header("host"))
                .unwrap_or(""),
            path: req.header(":path").unwrap_or(""),
            headers: &req.headers,
        }
    }
}

/// The agents the configuration trusts, each with its Ed25519 keys, looked up by thumbprint.
#[derive(Debug, Clone, Default)]
pub struct TrustedAgents {
    names: Vec<String>,
    /// (thumbprint, index in `names`, key), sorted by thumbprint.
    keys: Vec<(String, usize, VerifyingKey)>,
    max_age_secs: u64,
    skipped: usize,
}

impl TrustedAgents {
    /// Builds the table from each agent's key directory. Errors name the field (paths under
    /// `agents.<name>.keys`): an Ed25519 JWK whose `x` is no key, an agent left with no Ed25519
    /// key, or one key trusted under two names (which would name the agent at random).
    pub fn new<'c>(
        agents: impl IntoIterator<Item = (&'c str, &'c KeyDirectory)>,
        max_age_secs: u64,
    ) -> Result<TrustedAgents, ConfigError> {
        let mut table = TrustedAgents {
            max_age_secs,
            ..TrustedAgents::default()
        };
        for (index, (name, directory)) in agents.into_iter().enumerate() {
            let field = format!("agents.{name}.keys");
            if index == MAX_AGENTS {
                return Err(ConfigError {
                    field: "agents".to_owned(),
                    message: format!("at most {MAX_AGENTS} agents"),
                });
            }
            let (keys, skipped) = directory.ed25519_keys().map_err(|e| ConfigError {
                field: format!("{field}.{}", e.member),
                message: e.message.to_owned(),
            })?;
            if keys.is_empty() {
                return Err(ConfigError {
                    field,
                    message: format!(
                        "no Ed25519 key (kty OKP, crv Ed25519) in the directory; {skipped} other \
                         key(s) skipped"
                    ),
                });
            }
            table.skipped = table.skipped.saturating_add(skipped);
            for key in keys {
                if let Some((_, other, _)) = table.keys.iter().find(|k| k.0 == key.thumbprint) {
                    let other = table.names.get(*other).map_or("", String::as_str);
                    return Err(ConfigError {
                        field,
                        message: format!(
                            "key {} is already agent `{other}`'s: a key names one agent",
                            key.thumbprint
                        ),
                    });
                }
                table.keys.push((key.thumbprint, index, key.key));
            }
            table.names.push(name.to_owned());
        }
        table.keys.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(table)
    }

    /// The table of a configuration's `agents` and `signature_max_age_secs`.
    pub fn from_config(config: &PluginConfig) -> Result<TrustedAgents, ConfigError> {
        TrustedAgents::new(
            config
                .agents
                .iter()
                .map(|(name, agent)| (name.as_str(), &agent.keys)),
            config.signature_max_age_secs,
        )
    }

    /// Whether no agent is trusted (then no request needs looking at).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The agents' names, in configuration order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// How many directory entries were skipped as not Ed25519 signing keys, for the log.
    pub fn skipped_keys(&self) -> usize {
        self.skipped
    }

    fn key(&self, keyid: &str) -> Option<(&str, &VerifyingKey)> {
        let at = self
            .keys
            .binary_search_by(|(thumbprint, _, _)| thumbprint.as_str().cmp(keyid))
            .ok()?;
        let (_, index, key) = self.keys.get(at)?;
        Some((self.names.get(*index)?.as_str(), key))
    }

    /// The name of the trusted agent whose Web Bot Auth signature `req` carries, or why there is
    /// none. `now` is Unix seconds.
    pub fn verify(&self, req: &SignedRequest<'_>, now: u64) -> Result<&str, Unsigned> {
        with_signature(req, now, self.max_age_secs, |signed, signature| {
            let (name, key) = self.key(signed.keyid).ok_or(Unsigned::UnknownKey)?;
            let base = signature_base(req, signed.components, signed.params)?;
            key.verify_strict(base.as_bytes(), &Signature::from_bytes(&signature))
                .map_err(|_| Unsigned::BadSignature)?;
            Ok(name)
        })
    }
}

/// The chosen signature, as the checks after the parse need it.
struct Signed<'p, 'a> {
    components: &'p [sf::Item<'a>],
    params: &'p sf::Params<'a>,
    keyid: &'p str,
}

/// A string parameter: `None` when absent, malformed when not a string.
fn string_param<'p>(params: &'p sf::Params<'_>, key: &str) -> Option<Result<&'p str, Unsigned>> {
    sf::param(params, key).map(|v| match v {
        sf::Bare::String(s) => Ok(s.as_ref()),
        _ => Err(Unsigned::Malformed),
    })
}

/// Every check but the key and the signature, cheapest first: the fields parsed, the first
/// `web-bot-auth` member chosen, its `alg`, times and coverage checked; then `f` gets the
/// chosen member and its 64 signature bytes (the parse borrows from fields joined here).
fn with_signature<T>(
    req: &SignedRequest<'_>,
    now: u64,
    max_age_secs: u64,
    f: impl FnOnce(Signed<'_, '_>, [u8; 64]) -> Result<T, Unsigned>,
) -> Result<T, Unsigned> {
    let input = base::field_value(req, "signature-input")?;
    let signature = base::field_value(req, "signature")?;
    let (input, signature) = match (input, signature) {
        (None, None) => return Err(Unsigned::NoSignature),
        (Some(input), Some(signature)) => (input, signature),
        _ => return Err(Unsigned::Malformed),
    };
    let inputs = sf::parse_dictionary(&input).map_err(|_| Unsigned::Malformed)?;
    let signatures = sf::parse_dictionary(&signature).map_err(|_| Unsigned::Malformed)?;
    let (label, member) = first_tagged(&inputs).ok_or(Unsigned::NotWebBotAuth)?;
    let sf::Member::InnerList(components, params) = member else {
        return Err(Unsigned::Malformed);
    };
    let bytes: [u8; 64] = match sf::member(&signatures, label) {
        Some(sf::Member::Item(sf::Item {
            bare: sf::Bare::Bytes(b),
            ..
        })) => b.as_slice().try_into().map_err(|_| Unsigned::Malformed)?,
        _ => return Err(Unsigned::Malformed),
    };
    if let Some(alg) = string_param(params, "alg")
        && alg? != "ed25519"
    {
        return Err(Unsigned::Unsupported);
    }
    let keyid = string_param(params, "keyid").ok_or(Unsigned::Malformed)??;
    check_times(params, now, max_age_secs)?;
    let covers = |name: &str| {
        components
            .iter()
            .any(|c| matches!(&c.bare, sf::Bare::String(s) if s == name))
    };
    if !(covers("@authority") || covers("@target-uri")) {
        return Err(Unsigned::NotCovered);
    }
    if let Some(agent) = base::field_value(req, "signature-agent")? {
        check_signature_agent(&agent)?;
        if !covers("signature-agent") {
            return Err(Unsigned::NotCovered);
        }
    }
    f(
        Signed {
            components,
            params,
            keyid,
        },
        bytes,
    )
}

/// The first member of `Signature-Input` tagged `web-bot-auth`: one signature checked, whatever
/// else is sent.
fn first_tagged<'d, 'a>(inputs: &'d sf::Dictionary<'a>) -> Option<&'d (&'a str, sf::Member<'a>)> {
    inputs.iter().find(|(_, member)| {
        let params = match member {
            sf::Member::InnerList(_, params) | sf::Member::Item(sf::Item { params, .. }) => params,
        };
        matches!(string_param(params, "tag"), Some(Ok(TAG)))
    })
}

/// The header fields the signature [`TrustedAgents::verify`] would check covers, by name
/// (lowercase, as RFC 9421 section 2.1 names them), from the request's `Signature-Input`: what
/// the glue must pass besides the fields it reads anyway. Derived components (`@...`) are not
/// fields; a name that is no field name is left out (the signature is malformed whatever is
/// passed). At most [`sf::MAX_ITEMS`] names; none when the field does not parse.
pub fn covered_fields(signature_input: &str) -> Vec<String> {
    let Ok(inputs) = sf::parse_dictionary(signature_input) else {
        return Vec::new();
    };
    let Some((_, sf::Member::InnerList(components, _))) = first_tagged(&inputs) else {
        return Vec::new();
    };
    components
        .iter()
        .filter_map(|c| match &c.bare {
            sf::Bare::String(name) if base::is_field_name(name) => Some(name.to_string()),
            _ => None,
        })
        .take(sf::MAX_ITEMS)
        .collect()
}

/// `created` and `expires`: both there, now between them (`created` up to [`CLOCK_SKEW_SECS`]
/// ahead), at most `max_age_secs` apart.
fn check_times(params: &sf::Params<'_>, now: u64, max_age_secs: u64) -> Result<(), Unsigned> {
    let integer = |key: &str| match sf::param(params, key) {
        Some(sf::Bare::Integer(i)) => u64::try_from(*i).map_err(|_| Unsigned::Malformed),
        _ => Err(Unsigned::Malformed),
    };
    let created = integer("created")?;
    let expires = integer("expires")?;
    if now > expires {
        return Err(Unsigned::Expired);
    }
    if created > now.saturating_add(CLOCK_SKEW_SECS) {
        return Err(Unsigned::NotYetValid);
    }
    match expires.checked_sub(created) {
        Some(age) if age <= max_age_secs => Ok(()),
        _ => Err(Unsigned::TooLong),
    }
}

/// `Signature-Agent` is a dictionary of strings (directory-05, "Header Field Definition"), or,
/// in the legacy form arch-05's test vectors still send, one string; anything else is
/// malformed. Its URIs are not followed: the keys are the configuration's.
fn check_signature_agent(value: &str) -> Result<(), Unsigned> {
    let is_string = |item: &sf::Item<'_>| matches!(item.bare, sf::Bare::String(_));
    let ok = if value.starts_with('"') {
        sf::parse_item(value).is_ok_and(|item| is_string(&item))
    } else {
        sf::parse_dictionary(value).is_ok_and(|dict| {
            !dict.is_empty()
                && dict
                    .iter()
                    .all(|(_, m)| matches!(m, sf::Member::Item(item) if is_string(item)))
        })
    };
    if ok { Ok(()) } else { Err(Unsigned::Malformed) }
}

/// For the fuzz target and the tests: what [`TrustedAgents::verify`] checks before it looks
/// the key up, then the keyid, the signature base and the signature bytes it would verify.
pub fn checked_base(
    req: &SignedRequest<'_>,
    now: u64,
    max_age_secs: u64,
) -> Result<(String, String, [u8; 64]), Unsigned> {
    with_signature(req, now, max_age_secs, |signed, bytes| {
        let base = signature_base(req, signed.components, signed.params)?;
        Ok((signed.keyid.to_owned(), base, bytes))
    })
}
