//! What each fuzz target checks, in one place: the cargo-fuzz targets (`fuzz_targets/*.rs`) call
//! these under libFuzzer, and pow-core's `tests/fuzz_corpus.rs` replays the committed corpus
//! through the same functions under plain `cargo test`. A check fails by panicking.

use pow_core::bypass;
use pow_core::crypto::{Binding, Keys, check_cookie, issue_cookie};
use pow_core::filter::{HOST_PREFIX, MAX_COOKIES_CHECKED, VERIFY_PATH};
use pow_core::net::{self, Nat64Prefix, binding_net};
use pow_core::packed;
use pow_core::page;
use pow_core::redirect::{check_target, percent_decode};
use pow_core::seen::MemoryStore;
use pow_core::{Action, Filter, Metrics, Now, PluginConfig, Request};

/// One target's check: panics on a violation.
pub type Check = fn(&[u8]);

/// The fuzz targets, by name (the corpus directories' names).
pub const TARGETS: &[(&str, Check)] = &[
    ("cookie", cookie),
    ("verify_request", verify_request),
    ("redirect_target", redirect_target),
    ("config", config),
    ("bypass", bypass_path),
    ("client_address", client_address),
    ("negotiation", negotiation),
    ("packed_lists", packed_lists),
];

const SECRET: &[u8] = b"fuzzing-secret-of-at-least-32-bytes!";

/// Any cookie value: accepted only if it is exactly what the key issues for its expiry and
/// difficulty (no forgery, no alternative spelling).
pub fn cookie(data: &[u8]) {
    cookie_reduction(data);
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let Ok((keys, _)) = Keys::new(Some(SECRET), None) else {
        return;
    };
    let Some(binding) = Binding::new(binding_net([192, 0, 2, 1].into()), "UA", "example.org")
    else {
        return;
    };
    let now = 1_800_000_000;
    if let Ok(difficulty) = check_cookie(&keys, &binding, value, now, 86_400) {
        let expiry: u64 = value.split('.').next().unwrap_or("").parse().unwrap_or(0);
        assert_eq!(
            value,
            issue_cookie(&keys, &binding, expiry, difficulty),
            "accepted a non-canonical cookie"
        );
    }
}

/// The glue's reduction of a raw Cookie header keeps exactly the clearance pairs that splitting
/// the lossily decoded header finds (names compared exactly once spaces and tabs are stripped),
/// in header order, and no more than can be checked: over https the first `__Host-<name>`
/// ones and the first `<name>` ones, up to the last `__Host-` one that can be checked; over
/// http the first `<name>` ones.
fn cookie_reduction(data: &[u8]) {
    let whole = String::from_utf8_lossy(data);
    let ows = |s: &str| s.trim_matches([' ', '\t']).to_owned();
    for name in ["pow_clearance", "p"] {
        let prefixed = format!("{HOST_PREFIX}{name}");
        let (mut secure, mut http) = (Vec::new(), Vec::new());
        let (mut prefixed_kept, mut plain_kept, mut http_kept) = (0, 0, 0);
        for pair in whole.split(';') {
            let Some((n, _)) = pair.split_once('=') else {
                continue;
            };
            let n = ows(n);
            if n == name && http_kept < MAX_COOKIES_CHECKED {
                http_kept += 1;
                http.push(ows(pair));
            }
            if prefixed_kept == MAX_COOKIES_CHECKED {
                continue;
            }
            if n == prefixed {
                prefixed_kept += 1;
                secure.push(ows(pair));
            } else if n == name && plain_kept < MAX_COOKIES_CHECKED {
                plain_kept += 1;
                secure.push(ows(pair));
            }
        }
        for (is_secure, expected) in [(true, secure), (false, http)] {
            assert_eq!(
                pow_core::filter::clearance_pairs(data, name, is_secure),
                expected.join("; "),
                "the reduction differs from the whole header (https: {is_secure})"
            );
        }
    }
}

struct Nothing;

impl Metrics for Nothing {
    fn increment(&mut self, _: &str) {}
}

/// Any request to the verify endpoint or elsewhere (path and query, User-Agent, source,
/// cookie): never a panic, never a 5xx, and never a clearance (303) for what nobody solved.
pub fn verify_request(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(4, '\n');
    let query = parts.next().unwrap_or("");
    let ua = parts.next().unwrap_or("");
    let source = parts.next().unwrap_or("");
    let cookie = parts.next().unwrap_or("");
    let Ok((keys, _)) = Keys::new(Some(SECRET), None) else {
        return;
    };
    let Ok(config) = PluginConfig::from_json(br#"{"mode": "all", "difficulty": 1}"#) else {
        return;
    };
    let Ok(filter) = Filter::new(config, Some(keys), [7; 32]) else {
        return;
    };
    for path in [format!("{VERIFY_PATH}?{query}"), format!("/{query}")] {
        let req = Request {
            headers: vec![
                (":method".into(), "GET".into()),
                (":path".into(), path.into()),
                (":authority".into(), "example.org".into()),
                ("user-agent".into(), ua.into()),
                ("cookie".into(), cookie.into()),
                ("accept".into(), "text/html".into()),
            ],
            source_address: Some(source.into()),
        };
        let now = Now {
            secs: 1_800_000_000,
        };
        let action = filter.on_request(&req, now, &mut MemoryStore::default(), &mut Nothing);
        if let Action::Respond { status, .. } = action {
            assert!(status == 403, "status {status} for {:?}", req.headers);
        }
    }
}

/// Any return target: what is accepted is a same-origin path, raw and decoded.
pub fn redirect_target(data: &[u8]) {
    let Ok(target) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ok) = check_target(target, VERIFY_PATH) {
        assert_eq!(ok, target);
        let mut layer = ok.as_bytes().to_vec();
        for _ in 0..6 {
            assert!(layer.first() == Some(&b'/'), "{target:?}");
            assert!(!matches!(layer.get(1), Some(b'/' | b'\\')), "{target:?}");
            assert!(
                !layer.iter().any(|&c| c < 0x20 || c == 0x7f || c == b'\\'),
                "{target:?}"
            );
            layer = percent_decode(&layer);
        }
        assert!(ok.bytes().all(|c| (0x21..0x7f).contains(&c)), "{target:?}");
    }
}

/// Any pluginConfig: never a panic; what is accepted builds a filter and survives a round trip.
pub fn config(data: &[u8]) {
    if let Ok(config) = PluginConfig::from_json(data) {
        let json = serde_json::to_vec(&config).unwrap_or_default();
        let again = PluginConfig::from_json(&json);
        assert_eq!(again.as_ref(), Ok(&config));
        assert!(Filter::new(config, None, [0; 32]).is_ok());
    }
}

/// Any path: one that bypasses means the same to every origin. Percent-decoding it, dropping
/// `;` parameters, turning `\` into `/`, merging slashes or resolving dot segments (what
/// Tomcat, Spring, Jetty, IIS or nginx may do before routing) leaves it unchanged.
pub fn bypass_path(data: &[u8]) {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    let configured = ["/healthz".to_owned(), "/static/".to_owned()];
    if !bypass::bypasses("GET", path, &configured) {
        return;
    }
    assert!(
        !bypass::bypasses("POST", path, &configured),
        "{path:?} for POST"
    );
    let decoded = percent_decode(path.as_bytes());
    assert_eq!(decoded, path.as_bytes(), "{path:?} changes when decoded");
    let unparameterised: String = path
        .split('/')
        .map(|s| s.split(';').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("/");
    assert_eq!(unparameterised, path, "{path:?} has parameters");
    assert!(!path.contains('\\') && !path.contains("//"), "{path:?}");
    assert!(
        path.split('/').all(|s| s != "." && s != ".."),
        "{path:?} has dot segments"
    );
    assert!(
        bypass::is_acme(path) || configured.iter().any(|p| bypass::matches(path, p)),
        "{path:?}"
    );
}

/// Any `source.address` and NAT64 prefix text: never a panic; an address read is canonical (an
/// IPv6 address carrying IPv4 never stays IPv6), its binding is that of its canonical form, and
/// a prefix accepted round-trips through its own text.
pub fn client_address(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (source, prefix) = text.split_once('\n').unwrap_or((&text, ""));
    let prefixes: Vec<Nat64Prefix> = Nat64Prefix::parse(prefix).into_iter().collect();
    let Some(ip) = net::client_ip(Some(source), &prefixes) else {
        return;
    };
    assert_eq!(
        net::canonical(ip, &prefixes),
        ip,
        "{source:?} is not canonical"
    );
    if let std::net::IpAddr::V6(v6) = ip {
        assert!(v6.to_ipv4_mapped().is_none(), "{source:?}");
        assert!(
            u128::from(v6) >> 32 != 0 || u128::from(v6) <= 1,
            "{source:?}"
        );
        assert!(v6.octets()[..2] != [0x20, 0x02], "6to4 {source:?}");
        assert!(
            v6.octets()[..12] != [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0],
            "{source:?}"
        );
    }
    let net = binding_net(ip);
    assert!(net[0] == 4 || net[0] == 6);
}

/// Any Accept and Accept-Language: never a panic, and only the first items of the first bytes
/// decide (what follows them changes nothing).
pub fn negotiation(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lang = page::negotiate(Some(&text));
    let html = page::wants_html(Some(&text));
    let longer = format!("{text}{}", ", fr, text/html".repeat(200));
    if text.len() >= page::MAX_NEGOTIATED || text.split(',').count() > page::MAX_ITEMS {
        assert_eq!(page::negotiate(Some(&longer)), lang, "{text:?}");
        assert_eq!(page::wants_html(Some(&longer)), html, "{text:?}");
    }
}

/// Any bytes as a packed list, three ways: as the base64 text, as the bytes under it (format
/// byte and zlib), and as the body itself (deflated here, so the fuzzer reaches the body's
/// parser without having to forge a zlib stream). Never a panic, never more prefixes than the
/// caller allows; what decodes re-encodes to the same set, and a body that decodes is the one
/// the encoder writes for that set (one encoding per set: sorted, no duplicates, shortest
/// varints). What the decoder allocates is bounded by the fuzz target (`fuzz_targets/`).
pub fn packed_lists(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut body_form = vec![packed::FORMAT];
    body_form.extend(miniz_oxide::deflate::compress_to_vec_zlib(data, 1));
    for max in [packed::MAX_PREFIXES, 3] {
        for (form, decoded) in [
            ("text", packed::decode(&text, max)),
            ("bytes", packed::decode_bytes(data, max)),
            ("body", packed::decode_bytes(&body_form, max)),
        ] {
            let Ok(nets) = decoded else {
                continue;
            };
            assert!(
                nets.len() <= max,
                "{form}: {} prefixes over {max}",
                nets.len()
            );
            let again = packed::encode_bytes(&nets);
            assert!(
                again.is_ok(),
                "{form}: decoded but does not encode: {again:?}"
            );
            let Ok(again) = again else {
                return;
            };
            assert_eq!(
                packed::decode_bytes(&again, max).as_ref(),
                Ok(&nets),
                "{form}: the set changed through a round trip"
            );
            let body = again
                .get(1..)
                .and_then(|z| miniz_oxide::inflate::decompress_to_vec_zlib(z).ok());
            if form == "body" {
                assert_eq!(body.as_deref(), Some(data), "a second encoding of one set");
            }
        }
    }
}
