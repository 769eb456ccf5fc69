//! Keys, the challenge's HMAC, the clearance cookie and the proof-of-work check.
//!
//! - A challenge is `HMAC-SHA256(key, "pow-challenge-v1" ‖ binding ‖ expiry ‖ difficulty ‖ salt)`:
//!   32 bytes, so that `challenge ‖ nonce` (40 bytes) fits in one SHA-256 block and the page's
//!   solver needs one compression per attempt.
//! - A solution is an 8-byte nonce (big-endian) such that `SHA-256(challenge ‖ nonce)` starts
//!   with `difficulty` zero bits.
//! - A clearance cookie is `<expiry>.<difficulty>.<hex HMAC-SHA256(key, "pow-clearance-v2" ‖
//!   binding ‖ expiry ‖ difficulty)>`: it records the difficulty paid, so that it clears only
//!   where no more is asked.
//! - The binding is the client's /24 or /64, SHA-256 of the User-Agent (its first
//!   [`MAX_USER_AGENT`] bytes) and the host; the domain labels keep a challenge from ever being
//!   taken for a cookie. A host longer than any real one ([`MAX_HOST_LEN`]) is bound as one
//!   overlong host, so the work per request never grows with the `:authority` header.
//! - Checking several cookies feeds the binding once per key: the MAC state after the label and
//!   the binding is kept and cloned for each cookie's expiry and difficulty.
//!
//! Both the current and the previous key are accepted, so a rotation logs nobody out. Every
//! comparison of a MAC is constant-time (`hmac`'s `verify_slice`).

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::config::MIN_SECRET_LEN;

/// The longest host (`:authority`, port included) bound as it is: a DNS name has at most 253
/// characters, a port 6 more. A longer one is no site's: it is bound as [`OVERLONG_HOST`].
pub const MAX_HOST_LEN: usize = 260;
/// What every host longer than [`MAX_HOST_LEN`] is bound as (no host name has parentheses).
pub const OVERLONG_HOST: &str = "(overlong)";
/// The bytes of the User-Agent the binding hashes: real ones are far shorter, and a longer
/// header then costs no more.
pub const MAX_USER_AGENT: usize = 1024;

type HmacSha256 = Hmac<Sha256>;

/// The HMAC keys, held as keyed HMAC instances: the key schedule (the two compressions of
/// the padded key) is done once here, and each MAC starts from a clone. Debug never prints them.
#[derive(Clone)]
pub struct Keys {
    current: HmacSha256,
    previous: Option<HmacSha256>,
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
            Some(c) => mac_with(c).ok_or(KeyError::Missing)?,
        };
        let (previous, warning) = match previous {
            None | Some([]) => (None, None),
            Some(p) if p.len() < MIN_SECRET_LEN => (None, Some(KeyError::TooShort(p.len()))),
            Some(p) => match mac_with(p) {
                Some(m) => (Some(m), None),
                None => (None, Some(KeyError::Missing)),
            },
        };
        Ok((Keys { current, previous }, warning))
    }

    fn all(&self) -> impl Iterator<Item = &HmacSha256> {
        std::iter::once(&self.current).chain(self.previous.as_ref())
    }
}

/// What a challenge and a cookie are bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// [`crate::net::binding_net`] of the client.
    pub net: [u8; 17],
    /// SHA-256 of the User-Agent (of the empty string when there is none).
    pub ua_hash: [u8; 32],
    /// The `:authority`, lowercased.
    pub host: String,
}

/// What the binding hashes of a User-Agent: its first [`MAX_USER_AGENT`] bytes.
pub fn bound_user_agent(user_agent: &str) -> &[u8] {
    let ua = user_agent.as_bytes();
    &ua[..ua.len().min(MAX_USER_AGENT)]
}

impl Binding {
    pub fn new(net: [u8; 17], user_agent: &str, host: &str) -> Binding {
        Binding::with_ua_hash(net, sha256(bound_user_agent(user_agent)), host)
    }

    /// The binding, the User-Agent's hash being known already (see [`UaHashes`]).
    pub fn with_ua_hash(net: [u8; 17], ua_hash: [u8; 32], host: &str) -> Binding {
        let host = if host.len() > MAX_HOST_LEN {
            OVERLONG_HOST.to_owned()
        } else {
            host.to_ascii_lowercase()
        };
        Binding { net, ua_hash, host }
    }

    fn feed(&self, mac: &mut HmacSha256) {
        mac.update(&self.net);
        mac.update(&self.ua_hash);
        // The host is variable length: its length first, so that no two bindings feed the same
        // bytes.
        mac.update(&(self.host.len() as u64).to_be_bytes());
        mac.update(self.host.as_bytes());
    }
}

fn mac_with(key: &[u8]) -> Option<HmacSha256> {
    <HmacSha256 as Mac>::new_from_slice(key).ok()
}

/// The fields of a challenge besides its binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChallengeParams {
    /// Unix seconds after which it can no longer be solved.
    pub expiry: u64,
    /// Leading zero bits asked.
    pub difficulty: u8,
    /// Makes every challenge unique, so that a solved one can be remembered as spent.
    pub salt: u64,
}

fn challenge_mac(key: &HmacSha256, b: &Binding, p: &ChallengeParams) -> HmacSha256 {
    let mut mac = key.clone();
    mac.update(b"pow-challenge-v1\0");
    b.feed(&mut mac);
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

/// The MAC state of a cookie for one key once the label and the binding are fed: every cookie
/// checked against that key starts from a clone of it.
fn cookie_prefix(key: &HmacSha256, b: &Binding) -> HmacSha256 {
    let mut mac = key.clone();
    mac.update(b"pow-clearance-v2\0");
    b.feed(&mut mac);
    mac
}

fn cookie_tag(prefix: &HmacSha256, expiry: u64, difficulty: u8) -> HmacSha256 {
    let mut mac = prefix.clone();
    mac.update(&expiry.to_be_bytes());
    mac.update(&[difficulty]);
    mac
}

/// The clearance cookie's value: `<expiry>.<difficulty>.<64 hex digits>`.
pub fn issue_cookie(keys: &Keys, b: &Binding, expiry: u64, difficulty: u8) -> String {
    let tag: [u8; 32] = cookie_tag(&cookie_prefix(&keys.current, b), expiry, difficulty)
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

/// Checks clearance cookies for one binding, feeding the binding into each key's MAC once (the
/// previous key's only when a cookie gets that far).
pub struct CookieChecker<'a> {
    keys: &'a Keys,
    binding: &'a Binding,
    prefixes: [Option<HmacSha256>; 2],
}

impl fmt::Debug for CookieChecker<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CookieChecker")
            .field("binding", self.binding)
            .finish_non_exhaustive()
    }
}

impl<'a> CookieChecker<'a> {
    pub fn new(keys: &'a Keys, binding: &'a Binding) -> CookieChecker<'a> {
        CookieChecker {
            keys,
            binding,
            prefixes: [None, None],
        }
    }

    /// Checks one cookie: well-formed, `now <= expiry <= now + max_ttl`, MAC of one of the
    /// keys. Returns the difficulty it was paid at.
    pub fn check(&mut self, value: &str, now: u64, max_ttl: u64) -> Result<u8, CookieError> {
        let fields = parse_cookie(value)?;
        if fields.expiry < now || fields.expiry > now.saturating_add(max_ttl) {
            return Err(CookieError::Expired);
        }
        for (i, key) in self.keys.all().enumerate() {
            let Some(slot) = self.prefixes.get_mut(i) else {
                break;
            };
            let prefix = slot.get_or_insert_with(|| cookie_prefix(key, self.binding));
            if cookie_tag(prefix, fields.expiry, fields.difficulty)
                .verify_slice(&fields.tag)
                .is_ok()
            {
                return Ok(fields.difficulty);
            }
        }
        Err(CookieError::BadMac)
    }
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
    CookieChecker::new(keys, b).check(value, now, max_ttl)
}

/// The hashes of the last few User-Agents seen: browsers send the same one on every request
/// (and most send one of a handful), so the binding's SHA-256 of it is mostly found here. A
/// pure memo: the hash is the same either way.
#[derive(Debug, Default)]
pub struct UaHashes {
    entries: std::cell::RefCell<Vec<(Vec<u8>, [u8; 32])>>,
    next: std::cell::Cell<usize>,
}

impl UaHashes {
    /// How many User-Agents are remembered.
    pub const SIZE: usize = 8;

    /// SHA-256 of the bound part of `user_agent` ([`bound_user_agent`]).
    pub fn hash(&self, user_agent: &str) -> [u8; 32] {
        let ua = bound_user_agent(user_agent);
        let mut entries = self.entries.borrow_mut();
        if let Some((_, hash)) = entries.iter().find(|(known, _)| known.as_slice() == ua) {
            return *hash;
        }
        let hash = sha256(ua);
        if entries.len() < Self::SIZE {
            entries.push((ua.to_vec(), hash));
        } else if let Some(slot) = entries.get_mut(self.next.get() % Self::SIZE) {
            *slot = (ua.to_vec(), hash);
            self.next.set(self.next.get().wrapping_add(1));
        }
        hash
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
mod tests {
    use super::*;
    use crate::net::binding_net;

    fn keys(c: &[u8], p: Option<&[u8]>) -> Keys {
        Keys::new(Some(c), p).unwrap().0
    }

    fn binding(ip: &str, ua: &str, host: &str) -> Binding {
        Binding::new(binding_net(ip.parse().unwrap()), ua, host)
    }

    const K1: &[u8] = b"0123456789abcdef0123456789abcdef";
    const K2: &[u8] = b"fedcba9876543210fedcba9876543210";

    #[test]
    fn secrets_missing_short_or_fine() {
        assert_eq!(Keys::new(None, None).unwrap_err(), KeyError::Missing);
        assert_eq!(Keys::new(Some(b""), None).unwrap_err(), KeyError::Missing);
        assert_eq!(
            Keys::new(Some(&K1[..31]), None).unwrap_err(),
            KeyError::TooShort(31)
        );
        let (_, warn) = Keys::new(Some(K1), Some(b"short")).unwrap();
        assert_eq!(warn, Some(KeyError::TooShort(5)));
        let (k, warn) = Keys::new(Some(K1), Some(K2)).unwrap();
        assert_eq!(warn, None);
        assert!(!format!("{k:?}").contains("0123"));
    }

    #[test]
    fn challenge_binding() {
        let k = keys(K1, None);
        let b = binding("192.0.2.10", "Mozilla/5.0", "Example.org");
        let p = ChallengeParams {
            expiry: 1000,
            difficulty: 8,
            salt: 7,
        };
        let c = issue_challenge(&k, &b, &p);
        assert!(check_challenge(&k, &b, &p, &c));
        // Same /24, host case-insensitive.
        assert!(check_challenge(
            &k,
            &binding("192.0.2.99", "Mozilla/5.0", "example.org"),
            &p,
            &c
        ));
        for other in [
            binding("192.0.3.10", "Mozilla/5.0", "example.org"),
            binding("192.0.2.10", "curl/8", "example.org"),
            binding("192.0.2.10", "Mozilla/5.0", "example.net"),
            binding("2001:db8::1", "Mozilla/5.0", "example.org"),
        ] {
            assert!(!check_challenge(&k, &other, &p, &c), "{other:?}");
        }
        for q in [
            ChallengeParams { expiry: 1001, ..p },
            ChallengeParams { difficulty: 7, ..p },
            ChallengeParams { salt: 8, ..p },
        ] {
            assert!(!check_challenge(&k, &b, &q, &c));
        }
        assert!(!check_challenge(&keys(K2, None), &b, &p, &c));
        assert!(!check_challenge(&k, &b, &p, &c[..31]));
    }

    #[test]
    fn rotation_accepts_current_and_previous() {
        let b = binding("192.0.2.10", "UA", "h");
        let p = ChallengeParams {
            expiry: 1000,
            difficulty: 8,
            salt: 1,
        };
        let old = keys(K1, None);
        let c = issue_challenge(&old, &b, &p);
        let cookie = issue_cookie(&old, &b, 5000, 8);
        let rotated = keys(K2, Some(K1));
        assert!(check_challenge(&rotated, &b, &p, &c));
        assert_eq!(check_cookie(&rotated, &b, &cookie, 100, 86_400), Ok(8));
        // Once the old key is dropped, its cookies stop working.
        let dropped = keys(K2, None);
        assert!(!check_challenge(&dropped, &b, &p, &c));
        assert_eq!(
            check_cookie(&dropped, &b, &cookie, 100, 86_400),
            Err(CookieError::BadMac)
        );
    }

    #[test]
    fn cookie_checks() {
        let k = keys(K1, None);
        let b = binding("2001:db8:0:1::1", "UA", "h");
        let v = issue_cookie(&k, &b, 5000, 12);
        assert_eq!(check_cookie(&k, &b, &v, 4000, 86_400), Ok(12));
        assert_eq!(check_cookie(&k, &b, &v, 5000, 86_400), Ok(12));
        assert_eq!(
            check_cookie(&k, &b, &v, 5001, 86_400),
            Err(CookieError::Expired)
        );
        // Expiry further than the configured lifetime (a shortened TTL takes effect).
        assert_eq!(
            check_cookie(&k, &b, &v, 100, 600),
            Err(CookieError::Expired)
        );
        let other_64 = binding("2001:db8:0:2::1", "UA", "h");
        assert_eq!(
            check_cookie(&k, &other_64, &v, 4000, 86_400),
            Err(CookieError::BadMac)
        );
        let same_64 = binding("2001:db8:0:1:ffff::1", "UA", "h");
        assert_eq!(check_cookie(&k, &same_64, &v, 4000, 86_400), Ok(12));
        // A forged expiry or difficulty with the old tag.
        let tag = v.rsplit_once('.').unwrap().1;
        for forged in [format!("6000.12.{tag}"), format!("5000.20.{tag}")] {
            assert_eq!(
                check_cookie(&k, &b, &forged, 4000, 86_400),
                Err(CookieError::BadMac)
            );
        }
        for bad in [
            "",
            ".",
            "5000",
            "5000.",
            "x.y",
            "+5000.00",
            &format!("5000.{tag}"),
            &format!("5000.012.{tag}"),
            &format!("5000.256.{tag}"),
            &format!("5000.-1.{tag}"),
            &v.to_uppercase(),
            &format!("{v}0"),
            &format!(" {v}"),
        ] {
            assert_eq!(
                check_cookie(&k, &b, bad, 4000, 86_400),
                Err(CookieError::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_user_agent_memo_gives_the_hash() {
        let memo = UaHashes::default();
        for round in 0..3 {
            for i in 0..(UaHashes::SIZE + 3) {
                let ua = format!("Mozilla/5.0 agent {i} {}", "x".repeat(MAX_USER_AGENT));
                let direct = Binding::new([4; 17], &ua, "h");
                assert_eq!(memo.hash(&ua), direct.ua_hash, "{round} {i}");
            }
        }
        assert_eq!(memo.entries.borrow().len(), UaHashes::SIZE);
    }

    #[test]
    fn work() {
        let c = [7u8; 32];
        // Find a nonce with at least 8 bits by brute force (bounded), then check both ways.
        let nonce = (0..100_000u64).find(|&n| work_bits(&c, n) >= 8).unwrap();
        assert!(check_work(&c, nonce, 8));
        let bits = work_bits(&c, nonce);
        assert!(!check_work(&c, nonce, (bits + 1) as u8));
        // Known vectors, shared with the page's solver test (computed with Python's hashlib).
        let c: [u8; 32] = core::array::from_fn(|i| i as u8);
        let mut block = c.to_vec();
        block.extend_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        assert_eq!(
            hex(&sha256(&block)),
            "9e6cef1d125d09ba0c8e74e4983c5562ef87c342caba99d8f2ee456bb7948e73"
        );
        assert_eq!(work_bits(&c, 0x1_0000_09eb), 13);
        assert!(check_work(&c, 0x1_0000_09eb, 12));
    }

    #[test]
    fn hex_roundtrip() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        assert_eq!(unhex::<3>("000fff"), Some([0, 15, 255]));
        assert_eq!(unhex::<3>("000FFF"), None);
        assert_eq!(unhex::<3>("000ff"), None);
        assert_eq!(parse_decimal("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_decimal("18446744073709551616"), None);
        assert_eq!(parse_decimal("-1"), None);
    }
}
