//! What the tests of the real module share: loading it, a browser-like request, reading the
//! challenge page, solving it (with a SHA-256 of their own, an oracle independent of the
//! filter's `sha2`), and building the verify URL.

// Each test file uses its own subset of these.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::path::Path;

pub use proxy_wasm_host::{Host, HostConfig, Outcome, Request};

pub const SECRET: &str = "a-demo-secret-that-is-at-least-32-bytes-long";
pub const T0: u64 = 1_800_000_000;
pub const UA: &str = "Mozilla/5.0 (X11; Linux x86_64) Chrome/140";
pub const HTML: &str = "text/html,application/xhtml+xml,*/*;q=0.8";

/// The release module, or `None` after a skip (a failure under CI).
pub use testkit::workspace::filter_module as module;

/// RFC 9421's Ed25519 test key, from the shared fixtures' `bots` folder: the signing key, and its
/// JWK without the private `d` (what an agent's directory publishes).
pub fn rfc9421_test_key(bots: &Path) -> (ed25519_dalek::SigningKey, serde_json::Value) {
    use base64::Engine as _;
    let path = bots.join("rfc9421/test-key-ed25519.jwk.json");
    let mut jwk: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let d = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(jwk["d"].as_str().unwrap())
        .unwrap();
    jwk.as_object_mut().unwrap().remove("d");
    let key = ed25519_dalek::SigningKey::from_bytes(&d.try_into().unwrap());
    (key, jwk)
}

/// The VM environment with the test secret.
pub fn secret_env() -> Vec<(String, Vec<u8>)> {
    vec![("POW_HMAC_SECRET".into(), SECRET.into())]
}

/// A challenge for `from` through `path`, solved: the challenge and its verify URL.
pub fn solved(host: &mut Host, path: &str, from: &str) -> (Challenge, String) {
    let ch = challenge_of(&host.request(browser(path, from)).unwrap());
    let url = verify_url(&ch, solve(&ch), &ch.r);
    (ch, url)
}

/// Solves the challenge a visitor at `from` meets at `path` and verifies the solution, which
/// must succeed: the verify URL (now spent) and the whole Set-Cookie given for it.
pub fn verified(host: &mut Host, path: &str, from: &str) -> (String, String) {
    let (_, url) = solved(host, path, from);
    let set = set_cookie(&host.request(browser(&url, from)).unwrap());
    (url, set)
}

/// The clearance cookie (`name=value`) a visitor at `from` is given for solving the challenge
/// met at `path`.
pub fn clearance_for(host: &mut Host, path: &str, from: &str) -> String {
    pair(&verified(host, path, from).1).to_owned()
}

/// Asserts that a request for `/` from `from` carrying `cookie` reaches the origin.
#[track_caller]
pub fn assert_passes_with(host: &mut Host, from: &str, cookie: &str) {
    let o = host
        .request(browser("/", from).header("cookie", cookie))
        .unwrap();
    assert!(is_continue(&o), "{o:?}");
}

/// Checks, for each address, whether a request from it carrying `cookie` reaches the origin.
pub fn assert_cookie_passes_from(host: &mut Host, cookie: &str, cases: &[(&str, bool)]) {
    for &(from, passes) in cases {
        let o = host
            .request(browser("/", from).header("cookie", cookie))
            .unwrap();
        assert_eq!(is_continue(&o), passes, "{from}: {o:?}");
    }
}

/// The whole Set-Cookie of a successful verification (a 303).
pub fn set_cookie(o: &Outcome) -> String {
    let (status, headers, body) = local(o);
    assert_eq!(status, 303, "{headers:?} {body}");
    header(&headers, "set-cookie").unwrap().to_owned()
}

/// The `name=value` of a Set-Cookie.
pub fn pair(set: &str) -> &str {
    set.split(';').next().unwrap()
}

pub fn plugin_config(mode: &str, extra: &str) -> Vec<u8> {
    format!(
        r#"{{"mode": "{mode}", "difficulty": 8, "list_difficulty": {{"tor": 10}}, {extra}
            "lists": {{"version": "2026-11-29T17:17:00Z", "generated_at": "2026-11-29T17:17:00Z",
                      "sets": {{"tor": "185.220.101.0/24\n2a0b:f4c2::/40", "hosting": "203.0.113.0/24"}}}}}}"#
    )
    .into_bytes()
}

pub fn start(test: &str, mode: &str) -> Option<Host> {
    start_with(test, plugin_config(mode, ""), secret_env())
}

/// The module with this pluginConfig and VM environment, at [`T0`].
pub fn start_with(test: &str, plugin_config: Vec<u8>, env: Vec<(String, Vec<u8>)>) -> Option<Host> {
    Some(load_at(&module(test)?, plugin_config, env, T0))
}

/// The module with this pluginConfig and the test secret, its clock at `unix_secs`.
pub fn start_at(test: &str, plugin_config: Vec<u8>, unix_secs: u64) -> Option<Host> {
    Some(load_at(
        &module(test)?,
        plugin_config,
        secret_env(),
        unix_secs,
    ))
}

/// The module at `wasm` with this pluginConfig and VM environment, its clock at `unix_secs`.
pub fn load_at(
    wasm: &Path,
    plugin_config: Vec<u8>,
    env: Vec<(String, Vec<u8>)>,
    unix_secs: u64,
) -> Host {
    let config = HostConfig {
        plugin_config,
        env,
        time_nanos: Some(unix_secs * 1_000_000_000),
        ..HostConfig::default()
    };
    Host::load(wasm, config).unwrap()
}

pub fn browser(path: &str, from: &str) -> Request {
    Request {
        authority: "edge.example.org".into(),
        scheme: "https".into(),
        ..Request::get(path)
    }
    .header("user-agent", UA)
    .header("accept", HTML)
    .from_address(from)
}

pub fn local(o: &Outcome) -> (u32, Vec<(String, String)>, String) {
    match o {
        Outcome::Local {
            status,
            headers,
            body,
        } => (
            *status,
            headers.clone(),
            String::from_utf8_lossy(body).into_owned(),
        ),
        Outcome::Continue { .. } => panic!("expected a local response, got {o:?}"),
    }
}

pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

pub fn is_continue(o: &Outcome) -> bool {
    matches!(o, Outcome::Continue { .. })
}

pub fn metric(host: &Host, name: &str) -> i64 {
    host.metrics().get(name).copied().unwrap_or(0)
}

/// The challenge page's data block.
#[derive(Debug, Clone)]
pub struct Challenge {
    pub c: String,
    pub s: String,
    /// When it was issued (`None` from a module that does not say).
    pub i: Option<u64>,
    pub e: u64,
    pub d: u32,
    pub r: String,
    pub v: String,
}

pub fn challenge_of(o: &Outcome) -> Challenge {
    let (status, headers, body) = local(o);
    assert_eq!(status, 403);
    assert_eq!(header(&headers, "pow-mitigated"), Some("challenge"));
    let start = body
        .find(r#"<script id="pow-data" type="application/json">"#)
        .unwrap();
    let rest = &body[start..];
    let json = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    Challenge {
        c: v["c"].as_str().unwrap().into(),
        s: v["s"].as_str().unwrap().into(),
        i: v["i"].as_u64(),
        e: v["e"].as_u64().unwrap(),
        d: v["d"].as_u64().unwrap() as u32,
        r: v["r"].as_str().unwrap().into(),
        v: v["v"].as_str().unwrap().into(),
    }
}

/// Finds a nonce as the page does: SHA-256(challenge ‖ nonce as 8 bytes big-endian) with `d`
/// leading zero bits.
pub fn solve(ch: &Challenge) -> u64 {
    let c: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&ch.c[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    (0..1u64 << 26)
        .find(|n| {
            let mut m = c.clone();
            m.extend_from_slice(&n.to_be_bytes());
            leading_zero_bits(&sha256(&m)) >= ch.d
        })
        .unwrap()
}

pub fn leading_zero_bits(d: &[u8; 32]) -> u32 {
    let mut bits = 0;
    for b in d {
        if *b == 0 {
            bits += 8;
        } else {
            return bits + b.leading_zeros();
        }
    }
    bits
}

pub fn bad_nonce(ch: &Challenge) -> u64 {
    let c: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&ch.c[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    (0u64..)
        .find(|n| {
            let mut m = c.clone();
            m.extend_from_slice(&n.to_be_bytes());
            leading_zero_bits(&sha256(&m)) < ch.d
        })
        .unwrap()
}

pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub fn verify_url(ch: &Challenge, nonce: u64, r: &str) -> String {
    let issued = ch.i.map(|i| format!("&i={i}")).unwrap_or_default();
    format!(
        "{}?c={}{issued}&e={}&d={}&s={}&n={nonce:016x}&r={}",
        ch.v,
        ch.c,
        ch.e,
        ch.d,
        ch.s,
        encode(r)
    )
}

/// A small SHA-256 (FIPS 180-4), enough for the test's solver.
pub fn sha256(msg: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut data = msg.to_vec();
    data.push(0x80);
    while data.len() % 64 != 56 {
        data.push(0);
    }
    data.extend_from_slice(&((msg.len() as u64) * 8).to_be_bytes());
    for block in data.chunks(64) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes(block[4 * i..4 * i + 4].try_into().unwrap());
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let mut v = h;
        for i in 0..64 {
            let s1 = v[4].rotate_right(6) ^ v[4].rotate_right(11) ^ v[4].rotate_right(25);
            let ch = (v[4] & v[5]) ^ (!v[4] & v[6]);
            let t1 = v[7]
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = v[0].rotate_right(2) ^ v[0].rotate_right(13) ^ v[0].rotate_right(22);
            let maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
            let t2 = s0.wrapping_add(maj);
            v = [
                t1.wrapping_add(t2),
                v[0],
                v[1],
                v[2],
                v[3].wrapping_add(t1),
                v[4],
                v[5],
                v[6],
            ];
        }
        for (a, b) in h.iter_mut().zip(v) {
            *a = a.wrapping_add(b);
        }
    }
    let mut out = [0u8; 32];
    for (i, word) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&word.to_be_bytes());
    }
    out
}
