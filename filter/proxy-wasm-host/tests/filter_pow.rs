//! The real release `pow_filter.wasm` in the proxy-wasm host: bypass paths, policy, the whole
//! challenge -> solve -> verify -> cookie flow, every refusal (wrong nonce, binding, expiry,
//! replay, open redirect), fail-open on a hostcall fault, a new pluginConfig without a restart,
//! a missing secret, and the metrics.
//!
//! The solver here has its own SHA-256 (an oracle independent of the filter's `sha2`).

// Helpers outside #[test] fns may unwrap too: a failure there is a failed test.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::path::PathBuf;

use proxy_wasm_host::{Host, HostConfig, Outcome, Request};

const SECRET: &str = "a-demo-secret-that-is-at-least-32-bytes-long";
const T0: u64 = 1_800_000_000;
const UA: &str = "Mozilla/5.0 (X11; Linux x86_64) Chrome/140";
const HTML: &str = "text/html,application/xhtml+xml,*/*;q=0.8";

/// The release module, or `None` after a skip (a failure under CI).
fn module(test: &str) -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let path = target.join("wasm32-wasip1/wasm-release/pow_filter.wasm");
    if path.is_file() {
        Some(path)
    } else {
        testkit::skip_or_fail(test, &format!("{} (run `make filter`)", path.display()));
        None
    }
}

fn plugin_config(mode: &str, extra: &str) -> Vec<u8> {
    format!(
        r#"{{"mode": "{mode}", "difficulty": 8, "list_difficulty": {{"tor": 10}}, {extra}
            "lists": {{"version": "2026-11-29T17:17:00Z", "generated_at": "2026-11-29T17:17:00Z",
                      "sets": {{"tor": "185.220.101.0/24\n2a0b:f4c2::/40", "hosting": "203.0.113.0/24"}}}}}}"#
    )
    .into_bytes()
}

fn start(test: &str, mode: &str) -> Option<Host> {
    let wasm = module(test)?;
    let config = HostConfig {
        plugin_config: plugin_config(mode, ""),
        env: vec![("POW_HMAC_SECRET".into(), SECRET.into())],
        ..HostConfig::default()
    };
    let mut host = Host::load(&wasm, config).unwrap();
    host.set_time_nanos(T0 * 1_000_000_000);
    Some(host)
}

fn browser(path: &str, from: &str) -> Request {
    Request {
        authority: "edge.example.org".into(),
        scheme: "https".into(),
        ..Request::get(path)
    }
    .header("user-agent", UA)
    .header("accept", HTML)
    .from_address(from)
}

fn local(o: &Outcome) -> (u32, Vec<(String, String)>, String) {
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

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn is_continue(o: &Outcome) -> bool {
    matches!(o, Outcome::Continue { .. })
}

fn metric(host: &Host, name: &str) -> i64 {
    host.metrics().get(name).copied().unwrap_or(0)
}

/// The challenge page's data block.
#[derive(Debug, Clone)]
struct Challenge {
    c: String,
    s: String,
    e: u64,
    d: u32,
    r: String,
    v: String,
}

fn challenge_of(o: &Outcome) -> Challenge {
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
        e: v["e"].as_u64().unwrap(),
        d: v["d"].as_u64().unwrap() as u32,
        r: v["r"].as_str().unwrap().into(),
        v: v["v"].as_str().unwrap().into(),
    }
}

/// Finds a nonce as the page does: SHA-256(challenge ‖ nonce as 8 bytes big-endian) with `d`
/// leading zero bits.
fn solve(ch: &Challenge) -> u64 {
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

fn leading_zero_bits(d: &[u8; 32]) -> u32 {
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

fn bad_nonce(ch: &Challenge) -> u64 {
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

fn encode(s: &str) -> String {
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

fn verify_url(ch: &Challenge, nonce: u64, r: &str) -> String {
    format!(
        "{}?c={}&e={}&d={}&s={}&n={nonce:016x}&r={}",
        ch.v,
        ch.c,
        ch.e,
        ch.d,
        ch.s,
        encode(r)
    )
}

/// A small SHA-256 (FIPS 180-4), enough for the test's solver.
fn sha256(msg: &[u8]) -> [u8; 32] {
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

#[test]
fn the_oracle_sha256_is_right() {
    assert_eq!(
        sha256(b"abc")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn bypass_paths_always_pass() {
    let Some(mut host) = start("bypass_paths_always_pass", "all") else {
        return;
    };
    for path in [
        "/.well-known/acme-challenge/token-123",
        "/robots.txt",
        "/favicon.ico",
    ] {
        let o = host.request(browser(path, "185.220.101.7:40000")).unwrap();
        assert!(is_continue(&o), "{path}: {o:?}");
    }
    assert_eq!(metric(&host, "pow_bypassed"), 3);
    let o = host
        .request(browser("/.well-known/../admin", "185.220.101.7:40000"))
        .unwrap();
    assert_eq!(local(&o).0, 403);
}

#[test]
fn listed_addresses_are_challenged_and_others_pass() {
    let Some(mut host) = start("listed_addresses_are_challenged_and_others_pass", "listed") else {
        return;
    };
    let o = host.request(browser("/", "8.8.8.8:40000")).unwrap();
    assert!(is_continue(&o));
    let o = host.request(browser("/", "[2001:db8::1]:40000")).unwrap();
    assert!(is_continue(&o));
    let o = host
        .request(browser("/page", "185.220.101.7:40000"))
        .unwrap();
    let (status, headers, body) = local(&o);
    assert_eq!(status, 403);
    assert_eq!(header(&headers, "pow-mitigated"), Some("challenge"));
    assert_eq!(header(&headers, "cache-control"), Some("no-store"));
    assert!(body.contains("<noscript>"));
    assert_eq!(challenge_of(&o).d, 10, "tor's own difficulty");
    let o = host
        .request(browser("/", "[2a0b:f4c2:0:1::5]:40000"))
        .unwrap();
    assert_eq!(local(&o).0, 403);
    // A client that does not take HTML gets a short text.
    let curl = Request {
        authority: "edge.example.org".into(),
        ..Request::get("/")
    }
    .header("accept", "*/*")
    .from_address("203.0.113.9:1");
    let (status, headers, body) = local(&host.request(curl).unwrap());
    assert_eq!(status, 403);
    assert!(
        header(&headers, "content-type")
            .unwrap()
            .starts_with("text/plain")
    );
    assert!(body.len() < 300);
    assert_eq!(metric(&host, "pow_list_matches_tor"), 2);
    assert_eq!(metric(&host, "pow_list_matches_hosting"), 1);
    assert_eq!(metric(&host, "pow_challenges_issued"), 3);
    assert_eq!(metric(&host, "pow_passed_policy"), 2);
}

#[test]
fn solve_verify_and_pass_with_the_cookie() {
    let Some(mut host) = start("solve_verify_and_pass_with_the_cookie", "all") else {
        return;
    };
    let from = "198.51.100.20:40000";
    let ch = challenge_of(&host.request(browser("/docs/a?b=1", from)).unwrap());
    assert_eq!(ch.r, "/docs/a?b=1");
    let nonce = solve(&ch);
    let o = host
        .request(browser(
            &verify_url(&ch, nonce, &ch.r),
            "198.51.100.99:41000",
        ))
        .unwrap();
    let (status, headers, _) = local(&o);
    assert_eq!(status, 303, "{headers:?}");
    assert_eq!(header(&headers, "location"), Some("/docs/a?b=1"));
    let set = header(&headers, "set-cookie").unwrap();
    for attr in [
        "pow_clearance=",
        "HttpOnly",
        "SameSite=Lax",
        "Path=/",
        "Secure",
    ] {
        assert!(set.contains(attr), "{set}");
    }
    let cookie = set.split(';').next().unwrap().to_owned();
    let o = host
        .request(browser("/docs/a?b=1", from).header("cookie", &cookie))
        .unwrap();
    assert!(is_continue(&o), "{o:?}");
    assert_eq!(metric(&host, "pow_challenges_solved"), 1);
    assert_eq!(metric(&host, "pow_passed_cookie"), 1);
    // The cookie is bound: another /24 is challenged again.
    let o = host
        .request(browser("/", "198.51.101.20:40000").header("cookie", &cookie))
        .unwrap();
    assert_eq!(local(&o).0, 403);
}

#[test]
fn every_bad_solution_is_refused() {
    let Some(mut host) = start("every_bad_solution_is_refused", "all") else {
        return;
    };
    let from = "198.51.100.20:40000";
    let ch = challenge_of(&host.request(browser("/x", from)).unwrap());
    let nonce = solve(&ch);
    let good = verify_url(&ch, nonce, "/x");
    let cases: Vec<(&str, Request)> = vec![
        (
            "work",
            browser(&verify_url(&ch, bad_nonce(&ch), "/x"), from),
        ),
        ("mac", browser(&good, "198.51.101.20:40000")),
        ("mac", {
            let mut r = browser(&good, from);
            r.headers.retain(|(n, _)| n != "user-agent");
            r.header("user-agent", "curl/8.5.0")
        }),
        (
            "mac",
            Request {
                authority: "other.example.org".into(),
                ..browser(&good, from)
            },
        ),
        (
            "redirect",
            browser(&verify_url(&ch, nonce, "//evil.example/"), from),
        ),
        (
            "redirect",
            browser(&verify_url(&ch, nonce, "/\\evil.example"), from),
        ),
        (
            "redirect",
            browser(&verify_url(&ch, nonce, "https://evil.example/"), from),
        ),
        (
            "redirect",
            browser(&verify_url(&ch, nonce, "/%2F%2Fevil.example"), from),
        ),
    ];
    for (reason, req) in cases {
        let path = req.path.clone();
        let (status, headers, _) = local(&host.request(req).unwrap());
        assert_eq!(status, 403, "{path}");
        assert_eq!(header(&headers, "pow-verify"), Some(reason), "{path}");
        assert!(header(&headers, "set-cookie").is_none());
    }
    // The genuine one works once; the second time is a replay.
    let (status, _, _) = local(&host.request(browser(&good, from)).unwrap());
    assert_eq!(status, 303);
    let (status, headers, _) = local(&host.request(browser(&good, from)).unwrap());
    assert_eq!(
        (status, header(&headers, "pow-verify")),
        (403, Some("replay"))
    );
    // A challenge past its expiry.
    let ch2 = challenge_of(&host.request(browser("/y", from)).unwrap());
    let n2 = solve(&ch2);
    host.set_time_nanos((ch2.e + 1) * 1_000_000_000);
    let (status, headers, _) = local(
        &host
            .request(browser(&verify_url(&ch2, n2, "/y"), from))
            .unwrap(),
    );
    assert_eq!(
        (status, header(&headers, "pow-verify")),
        (403, Some("expired"))
    );
    for (reason, n) in [
        ("work", 1),
        ("mac", 3),
        ("redirect", 4),
        ("replay", 1),
        ("expired", 1),
    ] {
        assert_eq!(
            metric(&host, &format!("pow_verify_failed_{reason}")),
            n,
            "{reason}"
        );
    }
}

#[test]
fn a_hostcall_failure_fails_open_and_is_counted() {
    let Some(mut host) = start("a_hostcall_failure_fails_open_and_is_counted", "all") else {
        return;
    };
    for fault in [
        "proxy_get_header_map_pairs",
        "proxy_get_property",
        "proxy_send_local_response",
    ] {
        host.set_fault(Some(fault.into()));
        let o = host.request(browser("/", "198.51.100.20:40000")).unwrap();
        assert!(is_continue(&o), "{fault}: {o:?}");
    }
    host.set_fault(None);
    assert_eq!(metric(&host, "pow_fail_open"), 3);
    assert!(
        host.logs()
            .iter()
            .any(|(level, line)| *level >= 4 && line.contains("failing open")),
        "{:?}",
        host.logs()
    );
    // And the VM is still alive and challenging.
    let o = host.request(browser("/", "198.51.100.20:40000")).unwrap();
    assert_eq!(local(&o).0, 403);
}

#[test]
fn a_new_plugin_config_takes_effect_without_a_restart() {
    let Some(mut host) = start(
        "a_new_plugin_config_takes_effect_without_a_restart",
        "listed",
    ) else {
        return;
    };
    assert!(is_continue(
        &host.request(browser("/", "8.8.8.8:1")).unwrap()
    ));
    assert_eq!(metric(&host, "pow_lists_prefixes"), 3);
    let new = String::from_utf8(plugin_config("listed", ""))
        .unwrap()
        .replace("203.0.113.0/24", "203.0.113.0/24 8.8.8.0/24")
        .replace(
            "2026-11-29T17:17:00Z\", \"generated",
            "2026-11-29T18:17:00Z\", \"generated",
        );
    assert!(host.reconfigure(new.into_bytes()).unwrap());
    assert_eq!(
        local(&host.request(browser("/", "8.8.8.8:1")).unwrap()).0,
        403
    );
    assert_eq!(metric(&host, "pow_lists_prefixes"), 4);
    assert_eq!(metric(&host, "pow_lists_version"), 1_795_976_220);
    // A bad configuration is refused and the previous one stays in charge.
    assert!(
        !host
            .reconfigure(br#"{"mode": "sometimes"}"#.to_vec())
            .unwrap()
    );
    assert_eq!(
        local(&host.request(browser("/", "8.8.8.8:1")).unwrap()).0,
        403
    );
    assert!(host.logs().iter().any(|(_, l)| l.contains("`mode`")));
}

#[test]
fn lists_age_is_reported() {
    let Some(mut host) = start("lists_age_is_reported", "listed") else {
        return;
    };
    // generated_at is 2026-11-29T17:17:00Z = 1795972620.
    assert_eq!(
        metric(&host, "pow_lists_generated_at_seconds"),
        1_795_972_620
    );
    host.set_time_nanos(1_795_976_220 * 1_000_000_000);
    host.tick().unwrap();
    assert_eq!(metric(&host, "pow_lists_age_seconds"), 3600);
}

#[test]
fn without_a_secret_the_filter_says_so_and_lets_everything_through() {
    let Some(wasm) = module("without_a_secret_the_filter_says_so_and_lets_everything_through")
    else {
        return;
    };
    for env in [
        vec![],
        vec![("POW_HMAC_SECRET".to_owned(), "short".to_owned())],
    ] {
        let config = HostConfig {
            plugin_config: plugin_config("all", ""),
            env,
            ..HostConfig::default()
        };
        let mut host = Host::load(&wasm, config).unwrap();
        assert!(is_continue(
            &host.request(browser("/", "185.220.101.7:1")).unwrap()
        ));
        assert_eq!(metric(&host, "pow_unprotected"), 1);
        assert_eq!(metric(&host, "pow_secret_missing"), 1);
        assert!(
            host.logs()
                .iter()
                .any(|(level, line)| *level == 5 && line.contains("NOT PROTECTING"))
        );
    }
}

#[test]
fn rotation_and_the_demo_secret() {
    let Some(wasm) = module("rotation_and_the_demo_secret") else {
        return;
    };
    let from = "198.51.100.20:40000";
    // Issued under the demo secret...
    let mut demo = Host::load(
        &wasm,
        HostConfig {
            plugin_config: plugin_config("all", &format!(r#""demo_secret": "{SECRET}","#)),
            ..HostConfig::default()
        },
    )
    .unwrap();
    assert!(
        demo.logs()
            .iter()
            .any(|(l, m)| *l == 3 && m.contains("demo_secret"))
    );
    let ch = challenge_of(&demo.request(browser("/", from)).unwrap());
    let url = verify_url(&ch, solve(&ch), "/");
    // ...verified by a VM whose previous secret it is.
    let mut rotated = Host::load(
        &wasm,
        HostConfig {
            plugin_config: plugin_config("all", ""),
            env: vec![
                (
                    "POW_HMAC_SECRET".into(),
                    "another-secret-of-32-bytes-or-more-000".into(),
                ),
                ("POW_HMAC_SECRET_PREVIOUS".into(), SECRET.into()),
            ],
            ..HostConfig::default()
        },
    )
    .unwrap();
    assert_eq!(local(&rotated.request(browser(&url, from)).unwrap()).0, 303);
}
