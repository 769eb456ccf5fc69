use super::*;
use crate::net::binding_net;

fn keys(c: &[u8], p: Option<&[u8]>) -> Keys {
    Keys::new(Some(c), p).unwrap().0
}

fn binding(ip: &str, ua: &str, host: &str) -> Binding {
    Binding::new(binding_net(ip.parse().unwrap()), ua, host).unwrap()
}

/// A challenge issued at 700, expiring at 1000, of 8 bits, with `salt`.
fn params(salt: u64) -> ChallengeParams {
    ChallengeParams {
        issued: 700,
        expiry: 1000,
        difficulty: 8,
        salt,
    }
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
    let p = params(7);
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
        ChallengeParams { issued: 701, ..p },
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
    let p = params(1);
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
fn the_client_memo_gives_the_digest() {
    let memo = ClientDigests::default();
    let long_host = "h".repeat(MAX_HOST_LEN + 1);
    for round in 0..3 {
        for i in 0..(ClientDigests::SIZE + 3) {
            let ua = format!("Mozilla/5.0 agent {i} {}", "x".repeat(MAX_USER_AGENT));
            for host in ["Example.org", "example.org", "example.net", &long_host] {
                let direct = Binding::new([4; 9], &ua, host).map(|b| b.client);
                assert_eq!(memo.digest(host, &ua), direct, "{round} {i} {host}");
            }
        }
    }
    assert_eq!(memo.entries.borrow().len(), ClientDigests::SIZE);
}

#[test]
fn the_client_digest_binds_host_and_user_agent_apart() {
    // The host's length comes first: moving bytes between host and User-Agent changes it.
    assert_ne!(client_digest("ab", "c"), client_digest("a", "bc"));
    assert_eq!(
        client_digest("EXAMPLE.org", "UA"),
        client_digest("example.org", "UA")
    );
    assert_ne!(
        client_digest("example.org", "UA"),
        client_digest("example.org", "ua")
    );
    // A host longer than a DNS name binds nothing; the User-Agent counts up to its bound.
    assert!(client_digest(&"a".repeat(MAX_HOST_LEN), "UA").is_some());
    assert_eq!(client_digest(&"a".repeat(MAX_HOST_LEN + 1), "UA"), None);
    let ua = "x".repeat(MAX_USER_AGENT);
    assert_eq!(
        client_digest("h", &ua),
        client_digest("h", &format!("{ua}y"))
    );
    assert_ne!(client_digest("h", &ua[1..]), client_digest("h", &ua));
}

#[test]
fn the_purposes_have_keys_of_their_own() {
    // The cookie's message under the challenge key is not the cookie's tag: what the
    // challenge key signs can never pass as a cookie, whatever the bytes.
    let k = keys(K1, None);
    let b = binding("192.0.2.10", "UA", "h");
    let mut under_challenge_key = k.current.challenge.clone();
    b.feed(&mut under_challenge_key);
    under_challenge_key.update(&5000u64.to_be_bytes());
    under_challenge_key.update(&[8]);
    let forged = format!(
        "5000.8.{}",
        hex(&under_challenge_key.finalize().into_bytes())
    );
    assert_eq!(
        check_cookie(&k, &b, &forged, 4000, 86_400),
        Err(CookieError::BadMac)
    );
    assert_eq!(
        check_cookie(&k, &b, &issue_cookie(&k, &b, 5000, 8), 4000, 86_400),
        Ok(8)
    );
    // Neither key is the secret itself.
    let plain = mac_with(K1).unwrap();
    let mut under_secret = plain.clone();
    b.feed(&mut under_secret);
    under_secret.update(&5000u64.to_be_bytes());
    under_secret.update(&[8]);
    let forged = format!("5000.8.{}", hex(&under_secret.finalize().into_bytes()));
    assert_eq!(
        check_cookie(&k, &b, &forged, 4000, 86_400),
        Err(CookieError::BadMac)
    );
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
