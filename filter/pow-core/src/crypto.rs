//! Keys, the challenge's HMAC, the clearance cookie and the proof-of-work check.
//!
//! - Each secret gives two keys, one per purpose: `HMAC-SHA256(secret, "pow-challenge-v3")` for
//!   challenges and `HMAC-SHA256(secret, "pow-clearance-v3")` for cookies, derived once when the
//!   keys are made. A challenge can never be taken for a cookie, and no message carries a label.
//! - A challenge is `HMAC-SHA256(challenge key, binding ‖ issued ‖ expiry ‖ difficulty ‖ salt)`:
//!   32 bytes, so that `challenge ‖ nonce` (40 bytes) fits in one SHA-256 block and the page's
//!   solver needs one compression per attempt. It carries when it was issued as well as when it
//!   expires, so the seen-set's "issued before I started" never depends on the TTL in force.
//! - A solution is an 8-byte nonce (big-endian) such that `SHA-256(challenge ‖ nonce)` starts
//!   with `difficulty` zero bits.
//! - A clearance cookie is `<expiry>.<difficulty>.<hex HMAC-SHA256(cookie key, binding ‖ expiry ‖
//!   difficulty)>`: it records the difficulty paid, so that it clears only where no more is
//!   asked. Its message is 50 bytes: one compression inside the HMAC and one outside, the least
//!   an HMAC-SHA256 costs.
//! - The binding is the client's /24 or /64 ([`crate::net::binding_net`], 9 bytes) and the
//!   client digest: `SHA-256(host length ‖ host ‖ User-Agent)`, the host lowercased and the
//!   User-Agent cut at [`MAX_USER_AGENT`] bytes. A host longer than any DNS name
//!   ([`MAX_HOST_LEN`]) is bound to nothing: no site has it, and the work per request never
//!   grows with the `:authority` header. Browsers send the same User-Agent on every request to the same few
//!   hosts, so the digest is mostly found in [`ClientDigests`].
//!
//! Both the current and the previous key are accepted, so a rotation logs nobody out. Every
//! comparison of a MAC is constant-time (`hmac`'s `verify_slice`).

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::config::MIN_SECRET_LEN;
use crate::net::Net;

/// The longest host (`:authority`, port included) that can be bound: a DNS name has at most 253
/// characters, a port 6 more. A longer one is no site's, and nothing is bound to it.
pub const MAX_HOST_LEN: usize = 260;
/// The bytes of the User-Agent the binding hashes: real ones are far shorter, and a longer
/// header then costs no more.
pub const MAX_USER_AGENT: usize = 1024;

type HmacSha256 = Hmac<Sha256>;

/// The HMAC keys of the current and the previous secret, held as keyed HMAC instances: the
/// derivation and the key schedule (the two compressions of the padded key) are done once here,
/// and each MAC starts from a clone. Debug never prints them.
#[derive(Clone)]
pub struct Keys {
    current: PurposeKeys,
    previous: Option<PurposeKeys>,
}

/// The two keys one secret gives.
#[derive(Clone)]
struct PurposeKeys {
    challenge: HmacSha256,
    clearance: HmacSha256,
}

/// The labels the per-purpose keys are derived with; a new label is a new format, and every
/// challenge and cookie made under the old one stops being accepted.
const CHALLENGE_LABEL: &[u8] = b"pow-challenge-v3";
const CLEARANCE_LABEL: &[u8] = b"pow-clearance-v3";

impl PurposeKeys {
    fn derive(secret: &[u8]) -> Option<PurposeKeys> {
        let base = mac_with(secret)?;
        let derive = |label: &[u8]| {
            let mut mac = base.clone();
            mac.update(label);
            mac_with(&mac.finalize().into_bytes())
        };
        Some(PurposeKeys {
            challenge: derive(CHALLENGE_LABEL)?,
            clearance: derive(CLEARANCE_LABEL)?,
        })
    }
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("current", &"<redacted>")
            .field("previous", &self.previous.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Why there are no usable keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    Missing,
    TooShort(usize),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Missing => write!(f, "the HMAC secret is missing"),
            KeyError::TooShort(n) => write!(
                f,
                "the HMAC secret is {n} bytes long, shorter than {MIN_SECRET_LEN}"
            ),
        }
    }
}

impl Keys {
    /// The current secret is required and at least [`MIN_SECRET_LEN`] bytes; a previous secret
    /// that is missing or too short is ignored (the second value says why, for a warning).
    pub fn new(
        current: Option<&[u8]>,
        previous: Option<&[u8]>,
    ) -> Result<(Keys, Option<KeyError>), KeyError> {
        let current = match current {
            None | Some([]) => return Err(KeyError::Missing),
            Some(c) if c.len() < MIN_SECRET_LEN => return Err(KeyError::TooShort(c.len())),
            Some(c) => PurposeKeys::derive(c).ok_or(KeyError::Missing)?,
        };
        let (previous, warning) = match previous {
            None | Some([]) => (None, None),
            Some(p) if p.len() < MIN_SECRET_LEN => (None, Some(KeyError::TooShort(p.len()))),
            Some(p) => match PurposeKeys::derive(p) {
                Some(m) => (Some(m), None),
                None => (None, Some(KeyError::Missing)),
            },
        };
        Ok((Keys { current, previous }, warning))
    }

    fn all(&self) -> impl Iterator<Item = &PurposeKeys> {
        std::iter::once(&self.current).chain(self.previous.as_ref())
    }
}

/// What a challenge and a cookie are bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// [`crate::net::binding_net`] of the client.
    pub net: Net,
    /// [`client_digest`] of the host and the User-Agent.
    pub client: [u8; 32],
}

/// What the binding hashes of a User-Agent: its first [`MAX_USER_AGENT`] bytes.
pub fn bound_user_agent(user_agent: &str) -> &[u8] {
    let ua = user_agent.as_bytes();
    &ua[..ua.len().min(MAX_USER_AGENT)]
}

/// The host as the binding takes it, before lowercasing: `None` when longer than
/// [`MAX_HOST_LEN`].
fn bound_host(host: &str) -> Option<&[u8]> {
    (host.len() <= MAX_HOST_LEN).then_some(host.as_bytes())
}

/// `SHA-256(host length as 8 bytes big-endian ‖ lowercased host ‖ User-Agent)`, of the bound
/// parts ([`bound_host`], [`bound_user_agent`]); `None` for a host longer than [`MAX_HOST_LEN`].
/// The length comes first so that no two (host, User-Agent) pairs feed the same bytes.
pub fn client_digest(host: &str, user_agent: &str) -> Option<[u8; 32]> {
    let host = bound_host(host)?;
    let mut lower = [0u8; MAX_HOST_LEN];
    let lower = lower.get_mut(..host.len())?;
    lower.copy_from_slice(host);
    lower.make_ascii_lowercase();
    Some(digest_of_bound(lower, bound_user_agent(user_agent)))
}

/// [`client_digest`] of a bound host already lowercased and a bound User-Agent.
fn digest_of_bound(lower_host: &[u8], user_agent: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((lower_host.len() as u64).to_be_bytes());
    h.update(lower_host);
    h.update(user_agent);
    h.finalize().into()
}

impl Binding {
    /// `None` for a host longer than [`MAX_HOST_LEN`].
    pub fn new(net: Net, user_agent: &str, host: &str) -> Option<Binding> {
        Some(Binding {
            net,
            client: client_digest(host, user_agent)?,
        })
    }

    fn feed(&self, mac: &mut HmacSha256) {
        mac.update(&self.net);
        mac.update(&self.client);
    }
}

fn mac_with(key: &[u8]) -> Option<HmacSha256> {
    <HmacSha256 as Mac>::new_from_slice(key).ok()
}

/// The fields of a challenge besides its binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChallengeParams {
    /// Unix seconds when it was issued: what the seen-set compares with the time it started,
    /// whatever the challenge TTL in force when it is spent.
    pub issued: u64,
    /// Unix seconds after which it can no longer be solved.
    pub expiry: u64,
    /// Leading zero bits asked.
    pub difficulty: u8,
    /// Makes every challenge unique, so that a solved one can be remembered as spent.
    pub salt: u64,
}

fn challenge_mac(keys: &PurposeKeys, b: &Binding, p: &ChallengeParams) -> HmacSha256 {
    let mut mac = keys.challenge.clone();
    b.feed(&mut mac);
    mac.update(&p.issued.to_be_bytes());
    mac.update(&p.expiry.to_be_bytes());
    mac.update(&[p.difficulty]);
    mac.update(&p.salt.to_be_bytes());
    mac
}

/// The 32-byte challenge, made with the current key.
pub fn issue_challenge(keys: &Keys, b: &Binding, p: &ChallengeParams) -> [u8; 32] {
    challenge_mac(&keys.current, b, p)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `challenge` was issued by one of the keys for this binding and these parameters.
pub fn check_challenge(keys: &Keys, b: &Binding, p: &ChallengeParams, challenge: &[u8]) -> bool {
    keys.all()
        .any(|k| challenge_mac(k, b, p).verify_slice(challenge).is_ok())
}

/// Leading zero bits of `SHA-256(challenge ‖ nonce as 8 bytes big-endian)`.
pub fn work_bits(challenge: &[u8; 32], nonce: u64) -> u32 {
    let mut h = Sha256::new();
    h.update(challenge);
    h.update(nonce.to_be_bytes());
    let digest = h.finalize();
    let mut bits = 0;
    for byte in digest {
        if byte == 0 {
            bits += 8;
        } else {
            bits += byte.leading_zeros();
            break;
        }
    }
    bits
}

/// Whether `nonce` solves `challenge` at `difficulty` bits.
pub fn check_work(challenge: &[u8; 32], nonce: u64, difficulty: u8) -> bool {
    work_bits(challenge, nonce) >= u32::from(difficulty)
}

fn cookie_tag(keys: &PurposeKeys, b: &Binding, expiry: u64, difficulty: u8) -> HmacSha256 {
    let mut mac = keys.clearance.clone();
    b.feed(&mut mac);
    mac.update(&expiry.to_be_bytes());
    mac.update(&[difficulty]);
    mac
}

/// The clearance cookie's value: `<expiry>.<difficulty>.<64 hex digits>`.
pub fn issue_cookie(keys: &Keys, b: &Binding, expiry: u64, difficulty: u8) -> String {
    let tag: [u8; 32] = cookie_tag(&keys.current, b, expiry, difficulty)
        .finalize()
        .into_bytes()
        .into();
    format!("{expiry}.{difficulty}.{}", hex(&tag))
}

/// Why a cookie was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieError {
    Malformed,
    Expired,
    BadMac,
}

/// A cookie's fields, once its form is checked.
struct CookieFields {
    expiry: u64,
    difficulty: u8,
    tag: [u8; 32],
}

fn parse_cookie(value: &str) -> Result<CookieFields, CookieError> {
    let (exp, rest) = value.split_once('.').ok_or(CookieError::Malformed)?;
    let (bits, tag) = rest.split_once('.').ok_or(CookieError::Malformed)?;
    let expiry = parse_decimal(exp).ok_or(CookieError::Malformed)?;
    let difficulty = parse_decimal(bits)
        .and_then(|d| u8::try_from(d).ok())
        // One spelling only: no leading zero.
        .filter(|_| bits.len() == 1 || !bits.starts_with('0'))
        .ok_or(CookieError::Malformed)?;
    let tag = unhex32(tag).ok_or(CookieError::Malformed)?;
    Ok(CookieFields {
        expiry,
        difficulty,
        tag,
    })
}

/// Checks a clearance cookie: well-formed, `now <= expiry <= now + max_ttl`, MAC of one of the
/// keys. Returns the difficulty it was paid at.
pub fn check_cookie(
    keys: &Keys,
    b: &Binding,
    value: &str,
    now: u64,
    max_ttl: u64,
) -> Result<u8, CookieError> {
    let fields = parse_cookie(value)?;
    if fields.expiry < now || fields.expiry > now.saturating_add(max_ttl) {
        return Err(CookieError::Expired);
    }
    if keys.all().any(|k| {
        cookie_tag(k, b, fields.expiry, fields.difficulty)
            .verify_slice(&fields.tag)
            .is_ok()
    }) {
        Ok(fields.difficulty)
    } else {
        Err(CookieError::BadMac)
    }
}

/// The client digests ([`client_digest`]) of the last few (host, User-Agent) pairs seen:
/// browsers send the same User-Agent on every request, most send one of a handful, and a
/// gateway serves a few hosts. A pure memo: the digest is the same either way.
#[derive(Debug, Default)]
pub struct ClientDigests {
    entries: std::cell::RefCell<Vec<ClientDigest>>,
    next: std::cell::Cell<usize>,
}

#[derive(Debug)]
struct ClientDigest {
    /// The bound host, lowercased.
    host: Vec<u8>,
    /// The bound User-Agent.
    user_agent: Vec<u8>,
    digest: [u8; 32],
}

impl ClientDigests {
    /// How many (host, User-Agent) pairs are remembered.
    pub const SIZE: usize = 16;

    /// [`client_digest`] of `host` and `user_agent`.
    pub fn digest(&self, host: &str, user_agent: &str) -> Option<[u8; 32]> {
        let bound = bound_host(host)?;
        let ua = bound_user_agent(user_agent);
        let mut entries = self.entries.borrow_mut();
        if let Some(known) = entries
            .iter()
            .find(|e| e.user_agent == ua && e.host.eq_ignore_ascii_case(bound))
        {
            return Some(known.digest);
        }
        // The slot the pair goes to: a new one while there is room, else the next in turn,
        // its buffers reused.
        let slot = if entries.len() < Self::SIZE {
            entries.push(ClientDigest {
                host: Vec::new(),
                user_agent: Vec::new(),
                digest: [0; 32],
            });
            entries.last_mut()
        } else {
            let at = self.next.get() % Self::SIZE;
            self.next.set(self.next.get().wrapping_add(1));
            entries.get_mut(at)
        };
        let Some(slot) = slot else {
            return client_digest(host, user_agent);
        };
        slot.host.clear();
        slot.host.extend_from_slice(bound);
        slot.host.make_ascii_lowercase();
        slot.user_agent.clear();
        slot.user_agent.extend_from_slice(ua);
        slot.digest = digest_of_bound(&slot.host, ua);
        Some(slot.digest)
    }
}

/// Unpredictable challenge salts: the first 8 bytes of SHA-256(seed ‖ counter), the seed drawn
/// from the VM's random source at start. A salt reveals neither the clock nor how many
/// challenges the VM issued, and no two challenges share one.
#[derive(Clone)]
pub struct Salts {
    seed: [u8; 32],
    counter: std::cell::Cell<u64>,
}

impl fmt::Debug for Salts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Salts").finish_non_exhaustive()
    }
}

impl Salts {
    pub fn new(seed: [u8; 32]) -> Salts {
        Salts {
            seed,
            counter: std::cell::Cell::new(0),
        }
    }

    pub fn next(&self) -> u64 {
        let n = self.counter.get().wrapping_add(1);
        self.counter.set(n);
        let mut h = Sha256::new();
        h.update(self.seed);
        h.update(n.to_be_bytes());
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    }
}

/// A decimal u64 with 1 to 20 digits, no sign, no leading `+`.
pub fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// Exactly `2 * N` lowercase hex digits.
pub fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(b[2 * i])? << 4 | digit(b[2 * i + 1])?;
    }
    Some(out)
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    unhex::<32>(s)
}

/// SHA-256, for callers that should not depend on `sha2` themselves.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

#[cfg(test)]
mod tests;
