//! What each fuzz target checks, in one place: the cargo-fuzz targets (`fuzz_targets/*.rs`) call
//! these under libFuzzer, and pow-core's `tests/fuzz_corpus.rs` replays the committed corpus
//! through the same functions under plain `cargo test`. A check fails by panicking.

use pow_core::bypass;
use pow_core::crypto::{Binding, Keys, check_cookie, issue_cookie};
use pow_core::filter::VERIFY_PATH;
use pow_core::net::binding_net;
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
    let binding = Binding::new(binding_net([192, 0, 2, 1].into()), "UA", "example.org");
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

/// The glue's reduction of a raw Cookie header keeps exactly the first clearance pairs that
/// splitting the lossily decoded header finds (what the core reads of the whole header).
fn cookie_reduction(data: &[u8]) {
    let whole = String::from_utf8_lossy(data);
    for name in ["pow_clearance", "p"] {
        let expected: Vec<&str> = whole
            .split(';')
            .filter(|pair| {
                pair.trim()
                    .split_once('=')
                    .is_some_and(|(n, _)| n.trim() == name)
            })
            .map(str::trim)
            .take(pow_core::filter::MAX_COOKIES_CHECKED)
            .collect();
        assert_eq!(
            pow_core::filter::clearance_pairs(data, name),
            expected.join("; "),
            "the reduction differs from the whole header"
        );
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
    let Ok(filter) = Filter::new(config, Some(keys)) else {
        return;
    };
    for path in [format!("{VERIFY_PATH}?{query}"), format!("/{query}")] {
        let req = Request {
            headers: vec![
                (":method".into(), "GET".into()),
                (":path".into(), path),
                (":authority".into(), "example.org".into()),
                ("user-agent".into(), ua.into()),
                ("cookie".into(), cookie.into()),
                ("accept".into(), "text/html".into()),
            ],
            source_address: Some(source.into()),
        };
        let now = Now {
            secs: 1_800_000_000,
            nanos: 1,
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
        assert!(Filter::new(config, None).is_ok());
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
    if !bypass::bypasses(path, &configured) {
        return;
    }
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
        path.starts_with(bypass::ACME_PREFIX)
            || configured.iter().any(|p| bypass::is_under(path, p)),
        "{path:?}"
    );
}
