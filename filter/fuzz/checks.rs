//! What each fuzz target checks, in one place: the cargo-fuzz targets (`fuzz_targets/*.rs`) call
//! these under libFuzzer, and pow-core's `tests/fuzz_corpus.rs` replays the committed corpus
//! through the same functions under plain `cargo test`. A check fails by panicking.

use pow_core::bypass;
use pow_core::crypto::{Binding, Keys, check_cookie, issue_cookie};
use pow_core::filter::{ClearancePairs, HOST_PREFIX, MAX_COOKIES_CHECKED, VERIFY_PATH};
use pow_core::net::{self, Nat64Prefix, binding_net};
use pow_core::packed;
use pow_core::page;
use pow_core::redirect::{check_target, percent_decode};
use pow_core::seen::MemoryStore;
use pow_core::web_bot_auth::{
    KeyDirectory, MAX_DIRECTORY_KEYS, SignedRequest, TrustedAgents, checked_base, thumbprint,
};
use pow_core::{Action, Filter, Metrics, Now, PluginConfig, Request};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

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
    ("rules", rules),
    ("signature_input", signature_input),
    ("key_directory", key_directory),
    ("packed_lists", packed_lists),
];

const SECRET: &[u8] = b"fuzzing-secret-of-at-least-32-bytes!";

/// Any cookie value: accepted only if it is exactly what the key issues for its expiry and
/// difficulty (no forgery, no alternative spelling).
pub fn cookie(data: &[u8]) {
    cookie_pairs(data);
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

/// The clearance pairs of a raw Cookie header are found, in the order they are checked and no
/// more than are checked, exactly as splitting the lossily decoded header finds them (names
/// compared exactly once spaces and tabs are stripped): over https the `__Host-<name>` ones,
/// then the `<name>` ones; over http the `<name>` ones; [`MAX_COOKIES_CHECKED`] at most.
fn cookie_pairs(data: &[u8]) {
    let whole = String::from_utf8_lossy(data);
    let ows = |s: &str| s.trim_matches([' ', '\t']).to_owned();
    for name in ["pow_clearance", "p"] {
        let prefixed = format!("{HOST_PREFIX}{name}");
        let (mut host_pairs, mut plain_pairs) = (Vec::new(), Vec::new());
        for pair in whole.split(';') {
            let Some((n, _)) = pair.split_once('=') else {
                continue;
            };
            if ows(n) == prefixed {
                host_pairs.push(ows(pair));
            } else if ows(n) == name {
                plain_pairs.push(ows(pair));
            }
        }
        let secure: Vec<String> = host_pairs
            .iter()
            .chain(&plain_pairs)
            .take(MAX_COOKIES_CHECKED)
            .cloned()
            .collect();
        let http: Vec<String> = plain_pairs
            .iter()
            .take(MAX_COOKIES_CHECKED)
            .cloned()
            .collect();
        for (is_secure, expected) in [(true, secure), (false, http)] {
            let found: Vec<String> = ClearancePairs::new(std::iter::once(data), name, is_secure)
                .take(MAX_COOKIES_CHECKED)
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
            assert_eq!(
                found, expected,
                "the pairs found differ from the whole header's (https: {is_secure})"
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
            cookies: Vec::new(),
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

/// Any pluginConfig: never a panic; what is accepted builds a filter and survives a round trip;
/// the module's way of taking it (the lists' prefixes left to the table build) accepts and
/// refuses alike, in the same words.
pub fn config(data: &[u8]) {
    let checked = PluginConfig::from_json(data);
    let built = PluginConfig::from_json_lists_unread(data)
        .map_err(|e| e.to_string())
        .and_then(|config| Filter::new(config, None, [0; 32]).map(|_| ()));
    assert_eq!(
        checked.as_ref().map(|_| ()).map_err(ToString::to_string),
        built
    );
    if let Ok(config) = checked {
        let json = serde_json::to_vec(&config).unwrap_or_default();
        let again = PluginConfig::from_json(&json);
        assert_eq!(again.as_ref(), Ok(&config));
        assert!(Filter::new(config, None, [0; 32]).is_ok());
    }
}

/// Any rules (the bytes as the JSON of `rules`): refused or accepted without a panic; accepted,
/// the compiled indexes decide as trying the rules one by one, in order, does, on a request made
/// to meet each rule and on one that meets none in particular.
pub fn rules(data: &[u8]) {
    use pow_core::policy::{CompiledPolicy, Features, Rule};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = PluginConfig::from_json(format!(r#"{{"rules": {text}}}"#).as_bytes()) else {
        return;
    };
    let lists = ["tor", "hosting", "googlebot"].map(String::from);
    let agents = ["signer".to_owned()];
    let policy = CompiledPolicy::compile(&config, &lists, &agents);
    let one_by_one: Vec<CompiledPolicy> = config
        .rules
        .iter()
        .map(|rule| {
            let mut alone = config.clone();
            alone.rules = vec![rule.clone()];
            CompiledPolicy::compile(&alone, &lists, &agents)
        })
        .collect();
    let meeting = |rule: &Rule| meeting(rule, &lists);
    let mut requests: Vec<_> = config.rules.iter().take(16).map(meeting).collect();
    requests.push(meeting(&Rule::default()));
    for (host, path, ua, accept, headers, features) in &requests {
        let method = config
            .rules
            .iter()
            .find_map(|r| r.method.first())
            .map_or("GET", String::as_str);
        let f = Features {
            host,
            method,
            path,
            user_agent: ua,
            accept: Some(accept),
            ..*features
        };
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let decided = policy.decide(&f, &header);
        let in_order = one_by_one
            .iter()
            .position(|p| p.decide(&f, &header).is_some());
        assert_eq!(decided, in_order, "{f:?}");
    }
}

/// What a request that meets `rule`'s first value of each condition sends: host, path,
/// User-Agent, Accept, headers, and the rest of its [`pow_core::policy::Features`].
type Meeting = (
    String,
    String,
    String,
    String,
    Vec<(String, String)>,
    pow_core::policy::Features<'static>,
);

/// A request that meets `rule`'s first value of each condition (`lists` name the table's lists).
fn meeting(rule: &pow_core::policy::Rule, lists: &[String]) -> Meeting {
    use pow_core::policy::{Features, Names};
    let bit = |names: &[String]| {
        names
            .iter()
            .filter_map(|n| lists.iter().position(|l| l == n))
            .fold(0u32, |acc, i| acc | 1 << i)
    };
    let host = rule.host.first().map_or("h.example".to_owned(), |h| {
        h.strip_prefix("*.").map_or(h.clone(), |s| format!("a.{s}"))
    });
    let path = rule.path.first().map_or("/".to_owned(), |p| {
        if p.ends_with('/') {
            format!("{p}x")
        } else {
            p.clone()
        }
    });
    let ua = rule
        .user_agent
        .first()
        .map_or("UA".to_owned(), |u| format!("x {u} y"));
    let accept = rule.accept.first().cloned().unwrap_or_default();
    let headers = rule
        .header
        .iter()
        .filter_map(|(n, c)| match c {
            pow_core::policy::HeaderCondition::Equals(v) => Some((n.clone(), v.clone())),
            pow_core::policy::HeaderCondition::Present(true) => Some((n.clone(), "1".into())),
            pow_core::policy::HeaderCondition::Present(false) => None,
        })
        .collect();
    let crawlers = match &rule.crawler {
        Some(Names::Some(names)) => bit(names),
        Some(Names::Any(_)) => 0b100,
        None => 0,
    };
    let features = Features {
        lists: bit(&rule.lists),
        crawlers,
        spoofed_crawler: rule.spoofed_crawler.unwrap_or(false),
        signed_agent: rule.signed_agent.as_ref().map(|_| 0),
        ..Features::default()
    };
    (host, path, ua, accept, headers, features)
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

/// RFC 9421 appendix B.1.4's test key (its seed `d` and public `x`), which signs the seeds.
const TEST_SEED: &str = "n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU";
const TEST_X: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";
/// Inside the windows of the Web Bot Auth draft's Ed25519 vectors (2025-01-01T00:06:40Z).
const SIGNED_AT: u64 = 1_735_690_000;

/// Any Signature-Input, Signature and Signature-Agent (lines 1 to 3; no third line, no
/// Signature-Agent): never a panic, and never a verified agent unless the signature is the
/// one the trusted key makes over the base that was checked, which names that key and covers
/// the authority. Ed25519 signing is deterministic, so any other accepted signature would be
/// a forgery.
pub fn signature_input(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\n');
    let mut headers: Vec<(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)> = vec![
        ("date".into(), "Tue, 20 Apr 2021 02:07:55 GMT".into()),
        ("content-type".into(), "application/json".into()),
        ("signature-input".into(), parts.next().unwrap_or("").into()),
        ("signature".into(), parts.next().unwrap_or("").into()),
    ];
    if let Some(agent) = parts.next() {
        headers.push(("signature-agent".into(), agent.into()));
    }
    let req = SignedRequest {
        method: "POST",
        scheme: "https",
        authority: "example.com",
        path: "/foo?param=Value&Pet=dog",
        headers: &headers,
    };
    let Ok(directory) = KeyDirectory::from_json(
        format!(r#"{{"keys": [{{"kty": "OKP", "crv": "Ed25519", "x": "{TEST_X}"}}]}}"#).as_bytes(),
    ) else {
        return;
    };
    let Ok(agents) = TrustedAgents::new([("testbot", &directory)], u64::MAX) else {
        return;
    };
    let Ok(bounded) = TrustedAgents::new([("testbot", &directory)], 300) else {
        return;
    };
    let unbounded = agents.verify(&req, SIGNED_AT);
    if bounded.verify(&req, SIGNED_AT).is_ok() {
        assert!(
            unbounded.is_ok(),
            "a bound let through what no bound refused"
        );
    }
    if unbounded.is_err() {
        return;
    }
    assert_eq!(unbounded, Ok("testbot"));
    let checked = checked_base(&req, SIGNED_AT, u64::MAX);
    assert!(
        checked.is_ok(),
        "verified, but the checks refuse it: {checked:?}"
    );
    let Ok((keyid, base, signature)) = checked else {
        return;
    };
    let Ok(seed) = URL_SAFE_NO_PAD.decode(TEST_SEED) else {
        return;
    };
    let Ok(seed) = <[u8; 32]>::try_from(seed) else {
        return;
    };
    let key = SigningKey::from_bytes(&seed);
    assert_eq!(
        keyid,
        thumbprint(&key.verifying_key()),
        "another keyid verified"
    );
    assert_eq!(
        key.sign(base.as_bytes()).to_bytes(),
        signature,
        "a signature the key did not make verified over {base:?}"
    );
    let last = base.lines().last().unwrap_or("");
    assert!(last.starts_with("\"@signature-params\": ("), "{base:?}");
    assert!(last.contains(r#";tag="web-bot-auth""#), "{base:?}");
    assert!(
        base.lines().any(|l| l == "\"@authority\": example.com"
            || l == "\"@target-uri\": https://example.com/foo?param=Value&Pet=dog"),
        "{base:?}"
    );
}

/// Any key directory: never a panic; the keys accepted are exactly its entries that are
/// Ed25519 signing JWKs (`kty` OKP, `crv` Ed25519, `use` absent or `sig`), in order, once
/// each, with the thumbprint of their `x`; the others are counted as skipped; and the directory
/// is refused only when it is too long or one of those entries' `x` is not a valid key.
pub fn key_directory(data: &[u8]) {
    let Ok(directory) = KeyDirectory::from_json(data) else {
        return;
    };
    // Which entries are kept is decided here again, from serde's reading of the JSON (a
    // generic serde_json::Value would refuse what a typed decoding skips unread: a number out
    // of f64 range, a string that is not UTF-8, in a member no JWK reader looks at).
    let entries = &directory.keys;
    let is_ed25519 = |e: &&pow_core::web_bot_auth::Jwk| {
        e.kty == "OKP"
            && e.crv.as_deref() == Some("Ed25519")
            && e.use_.as_deref().is_none_or(|u| u == "sig")
    };
    let valid_x = |x: &str| -> Option<VerifyingKey> {
        let bytes: [u8; 32] = URL_SAFE_NO_PAD.decode(x).ok()?.try_into().ok()?;
        let key = VerifyingKey::from_bytes(&bytes).ok()?;
        (URL_SAFE_NO_PAD.encode(key.to_edwards().compress().to_bytes()) == x && !key.is_weak())
            .then_some(key)
    };
    let ed25519: Vec<Option<VerifyingKey>> = entries
        .iter()
        .filter(|e| is_ed25519(e))
        .map(|e| e.x.as_deref().and_then(valid_x))
        .collect();
    match directory.ed25519_keys() {
        Ok((keys, skipped)) => {
            assert!(entries.len() <= MAX_DIRECTORY_KEYS);
            assert_eq!(skipped, entries.len() - ed25519.len());
            let mut expected: Vec<VerifyingKey> = Vec::new();
            for key in ed25519 {
                assert!(key.is_some(), "an invalid Ed25519 key was not refused");
                let Some(key) = key else {
                    continue;
                };
                if !expected.contains(&key) {
                    expected.push(key);
                }
            }
            assert_eq!(keys.len(), expected.len());
            for (got, want) in keys.iter().zip(&expected) {
                assert_eq!(&got.key, want);
                let x = URL_SAFE_NO_PAD.encode(want.as_bytes());
                let json = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
                let digest = pow_core::crypto::sha256(json.as_bytes());
                assert_eq!(got.thumbprint, URL_SAFE_NO_PAD.encode(digest));
            }
        }
        Err(_) => assert!(
            entries.len() > MAX_DIRECTORY_KEYS || ed25519.iter().any(Option::is_none),
            "a directory of valid keys refused"
        ),
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
