//! The second adversarial review's attacks on the real `pow_filter.wasm`: the failure page's
//! return path, cookie tossing, work that grows with header sizes, the client address behind
//! trusted proxies, addresses that embed IPv4, bypasses wider than needed, predictable salts,
//! replay after a restart or a rotation, and a peer address that is not one.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use proxy_wasm_host::HostError;

use crate::common::*;

const FROM: &str = "198.51.100.20:40000";
const PREVIOUS_SECRET: &str = "the-previous-secret-of-32-bytes-or-more";

fn both_keys() -> Vec<(String, Vec<u8>)> {
    vec![
        ("POW_HMAC_SECRET".into(), SECRET.into()),
        ("POW_HMAC_SECRET_PREVIOUS".into(), PREVIOUS_SECRET.into()),
    ]
}

/// A cookie value with its MAC's last digit changed: well formed, fresh, forged.
fn forge(value: &str) -> String {
    let mut fake = value.to_owned();
    let last = fake.pop().unwrap();
    fake.push(if last == '0' { '1' } else { '0' });
    fake
}

/// A cross-site page links to the verify endpoint with a return path of its choosing: the
/// failure page must not take the browser there (its refresh would be a same-site navigation,
/// carrying `SameSite=Strict` cookies that the cross-site link did not).
#[test]
fn the_failure_page_never_leads_to_an_unverified_path() {
    let test = "the_failure_page_never_leads_to_an_unverified_path";
    let Some(mut host) = start(test, "all") else {
        return;
    };
    let forged = format!(
        "/.pow/verify?c={}&i={T0}&e={}&d=1&s=0000000000000000&n=0000000000000000&r=%2Faccount%2Fdelete%3Fconfirm%3D1",
        "0".repeat(64),
        T0 + 60
    );
    let (status, headers, body) = local(&host.request(browser(&forged, FROM)).unwrap());
    assert_eq!(status, 403);
    assert_eq!(header(&headers, "pow-verify"), Some("mac"));
    assert!(!body.contains("account"), "{body}");
    assert!(
        body.contains("url=/\""),
        "the page starts again at /: {body}"
    );
    // A genuine challenge whose solution fails starts again at `/` too.
    let ch = challenge_of(
        &host
            .request(browser("/account/delete?confirm=1", FROM))
            .unwrap(),
    );
    let url = verify_url(&ch, bad_nonce(&ch), &ch.r);
    let (status, headers, body) = local(&host.request(browser(&url, FROM)).unwrap());
    assert_eq!(
        (status, header(&headers, "pow-verify")),
        (403, Some("work"))
    );
    assert!(!body.contains("account"), "{body}");
}

/// A sibling subdomain sets clearance cookies for the parent domain on longer paths, which
/// browsers send first: the clearance cookie set over https is `__Host-` prefixed (no sibling
/// can set one), and it is found behind any number of tossed ones.
#[test]
fn tossed_cookies_never_hide_the_clearance_cookie() {
    let test = "tossed_cookies_never_hide_the_clearance_cookie";
    let Some(mut host) = start(test, "all") else {
        return;
    };
    let (_, set) = verified(&mut host, "/", FROM);
    assert!(set.starts_with("__Host-pow_clearance="), "{set}");
    for attr in ["; Secure", "; Path=/;", "; HttpOnly", "; SameSite=Lax"] {
        assert!(set.contains(attr), "{set}");
    }
    assert!(!set.to_ascii_lowercase().contains("domain="), "{set}");
    let good = pair(&set);
    let value = good.split_once('=').unwrap().1;
    let tossed = format!("pow_clearance={}", forge(value));
    for count in [3, 675] {
        let junk = vec![tossed.as_str(); count].join("; ");
        let o = host
            .request(browser("/", FROM).header("cookie", &format!("{junk}; {good}")))
            .unwrap();
        assert!(is_continue(&o), "{count} tossed cookies hid it: {o:?}");
    }
    // The name without the prefix, as the previous version set it, still clears during the
    // transition.
    assert_passes_with(&mut host, FROM, &format!("pow_clearance={value}"));
    // Over plain http the cookie cannot be Secure (a browser would drop it), so no prefix.
    let (_, url) = solved(&mut host, "/", FROM);
    let plain = Request {
        scheme: "http".into(),
        ..browser(&url, FROM)
    };
    let set = set_cookie(&host.request(plain).unwrap());
    assert!(set.starts_with("pow_clearance="), "{set}");
    assert!(!set.contains("Secure"), "{set}");
}

/// The module with instruction counting on.
fn metered(test: &str, config: Vec<u8>, env: Vec<(String, Vec<u8>)>) -> Option<Host> {
    let wasm = module(test)?;
    let host = Host::load(
        &wasm,
        HostConfig {
            plugin_config: config,
            env,
            time_nanos: Some(T0 * 1_000_000_000),
            count_instructions: true,
            ..HostConfig::default()
        },
    )
    .unwrap();
    Some(host)
}

/// The instructions the module runs for one request.
fn cost(host: &mut Host, request: Request) -> u64 {
    let before = host.instructions().unwrap();
    host.request(request).unwrap();
    host.instructions().unwrap() - before
}

/// Headers of 58 KiB, in every header the filter reads, cost at most three challenges (the
/// worst: three forged cookies checked against two keys before a challenge): the work is
/// bounded whatever their sizes (counted in instructions, not timed).
#[test]
fn the_work_per_request_is_bounded_whatever_the_header_sizes() {
    let test = "the_work_per_request_is_bounded_whatever_the_header_sizes";
    let Some(mut host) = metered(test, plugin_config("all", ""), both_keys()) else {
        return;
    };
    // Warm the page's assets (built once per VM) before measuring.
    host.request(browser("/", FROM)).unwrap();
    let challenge = cost(&mut host, browser("/", FROM));
    let good = clearance_for(&mut host, "/", FROM);
    let (name, value) = good.split_once('=').unwrap();
    let forged = format!("{name}={}", forge(value));
    let three = [forged.as_str(); 3].join("; ");
    let big = 58 * 1024;
    let plain = |accept: &str, language: &str| {
        Request {
            authority: "edge.example.org".into(),
            scheme: "https".into(),
            ..Request::get("/")
        }
        .header("user-agent", UA)
        .header("accept", accept)
        .header("accept-language", language)
        .from_address(FROM)
    };
    let cases: Vec<(&str, Request)> = vec![
        (
            "58 KiB :authority, 3 forged cookies, 2 keys",
            Request {
                authority: format!("{}.example.org", "a".repeat(big)),
                ..browser("/", FROM)
            }
            .header("cookie", &three),
        ),
        (
            "58 KiB of commas in Accept-Language",
            plain(HTML, &",".repeat(big)),
        ),
        (
            "58 KiB of commas in Accept",
            plain(&format!("{}text/html", ",".repeat(big)), "en"),
        ),
        (
            "58 KiB X-Forwarded-For",
            browser("/", FROM).header("x-forwarded-for", &"192.0.2.1, ".repeat(big / 11)),
        ),
        (
            "58 KiB User-Agent",
            Request {
                authority: "edge.example.org".into(),
                ..Request::get("/")
            }
            .header("user-agent", &"M".repeat(big))
            .header("accept", HTML)
            .from_address(FROM),
        ),
        (
            "58 KiB path",
            browser(&format!("/{}", "a".repeat(big)), FROM),
        ),
        (
            "the longest return path the page carries (2 KiB)",
            browser(&format!("/{}", "a".repeat(2046)), FROM),
        ),
        (
            "58 KiB verify query",
            browser(&format!("/.pow/verify?{}", "c=0&".repeat(big / 4)), FROM),
        ),
        (
            "58 KiB header the filter ignores",
            browser("/", FROM).header("x-ignored", &"a".repeat(big)),
        ),
    ];
    for (label, request) in cases {
        let c = cost(&mut host, request);
        assert!(
            c <= 3 * challenge,
            "{label}: {c} instructions, {:.1}x a challenge ({challenge})",
            c as f64 / challenge as f64
        );
    }
}

/// When the mesh trusts proxies (Istio's `numTrustedProxies`), Envoy already puts the client it
/// derived from X-Forwarded-For in `source.address`: the filter must not walk XFF again.
#[test]
fn behind_trusted_proxies_the_client_address_is_read_once() {
    let test = "behind_trusted_proxies_the_client_address_is_read_once";
    let Some(wasm) = module(test) else {
        return;
    };
    let mesh = |plugin_config: Vec<u8>| HostConfig {
        plugin_config,
        env: secret_env(),
        xff_num_trusted_hops: 1,
        time_nanos: Some(T0 * 1_000_000_000),
        ..HostConfig::default()
    };
    // Counting the hops in the filter too is refused: there is one place to say it.
    match Host::load(
        &wasm,
        mesh(plugin_config("listed", r#""trusted_hops": 1,"#)),
    ) {
        Err(HostError::Rejected { .. }) => {}
        other => panic!("trusted_hops 1 accepted, the hops would count twice: {other:?}"),
    }
    let lb = "10.0.0.5:40000";
    let mut host = Host::load(&wasm, mesh(plugin_config("listed", ""))).unwrap();
    for xff in ["185.220.101.7", "8.8.8.8, 185.220.101.7"] {
        let o = host
            .request(browser("/", lb).header("x-forwarded-for", xff))
            .unwrap();
        assert_eq!(challenge_of(&o).d, 10, "a listed Tor exit passed: {xff}");
    }
    // One cookie clears no client of another /24 behind the same balancer.
    let mut host = Host::load(&wasm, mesh(plugin_config("all", ""))).unwrap();
    let via = |path: &str, client: &str| browser(path, lb).header("x-forwarded-for", client);
    let ch = challenge_of(&host.request(via("/", "198.51.100.20")).unwrap());
    let url = verify_url(&ch, solve(&ch), "/");
    let cookie = pair(&set_cookie(
        &host.request(via(&url, "198.51.100.20")).unwrap(),
    ))
    .to_owned();
    let o = host
        .request(via("/", "198.51.100.20").header("cookie", &cookie))
        .unwrap();
    assert!(is_continue(&o), "{o:?}");
    for i in 0..50 {
        let o = host
            .request(via("/", &format!("203.0.{i}.7")).header("cookie", &cookie))
            .unwrap();
        assert_eq!(local(&o).0, 403, "the cookie cleared 203.0.{i}.7");
    }
}

/// NAT64 (the well-known prefix and a configured one), 6to4, IPv4-compatible and IPv4-mapped
/// addresses are read as the IPv4 address they carry, for the lists and for the binding.
#[test]
fn addresses_that_embed_ipv4_are_read_as_ipv4() {
    let test = "addresses_that_embed_ipv4_are_read_as_ipv4";
    let nat64 = r#""nat64_prefixes": ["2001:db8:64::/96", "2001:db8:48::/48"],"#;
    let Some(mut host) = start_with(test, plugin_config("listed", nat64), secret_env()) else {
        return;
    };
    // 185.220.101.7, listed as tor (10 bits).
    for from in [
        "[64:ff9b::b9dc:6507]:40000",
        "[64:ff9b::185.220.101.7]:40000",
        "[2001:db8:64::b9dc:6507]:40000",
        "[2001:db8:48:b9dc:65:700::]:40000",
        "[2002:b9dc:6507::1]:40000",
        "[::185.220.101.7]:40000",
        "[::ffff:185.220.101.7]:40000",
    ] {
        let o = host.request(browser("/", from)).unwrap();
        assert!(!is_continue(&o), "{from} escaped the lists");
        assert_eq!(challenge_of(&o).d, 10, "{from}");
    }
    // IPv4 clients behind a NAT64 front do not share one /64: a cookie clears its own /24.
    let Some(mut host) = start(test, "all") else {
        return;
    };
    let cookie = clearance_for(&mut host, "/", "[64:ff9b::c633:6414]:1");
    assert_cookie_passes_from(
        &mut host,
        &cookie,
        &[
            ("[64:ff9b::c633:6499]:1", true),
            ("198.51.100.7:1", true),
            ("[64:ff9b::cb00:7109]:1", false),
            ("[64:ff9b::c633:6514]:1", false),
        ],
    );
}

/// ACME's token path, `/robots.txt` and `/favicon.ico` bypass exactly and only to read them;
/// `X-Original-URL` and `X-Rewrite-URL` (routing overrides in some origin frameworks) never
/// reach the origin.
#[test]
fn bypasses_are_exact_and_for_reading_only() {
    let test = "bypasses_are_exact_and_for_reading_only";
    let Some(mut host) = start(test, "all") else {
        return;
    };
    let with = |method: &str, path: &str| Request {
        method: method.into(),
        ..browser(path, FROM)
    };
    for path in [
        "/robots.txt/x",
        "/favicon.ico/a.php",
        "/.well-known/acme-challenge/a/b",
        "/.well-known/acme-challenge/",
        "/.well-known/acme-challenge",
    ] {
        let o = host.request(with("GET", path)).unwrap();
        assert_eq!(local(&o).0, 403, "{path} bypassed");
    }
    for path in ["/robots.txt", "/.well-known/acme-challenge/tok_EN-1"] {
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
            let o = host.request(with(method, path)).unwrap();
            assert_eq!(local(&o).0, 403, "{method} {path} bypassed");
        }
        for method in ["GET", "HEAD"] {
            assert!(is_continue(&host.request(with(method, path)).unwrap()));
        }
    }
    let overrides = |r: Request| {
        r.header("x-original-url", "/admin")
            .header("X-Rewrite-URL", "/admin")
    };
    let cookie = clearance_for(&mut host, "/", FROM);
    let Some(mut listed) = start(test, "listed") else {
        return;
    };
    let outcomes = [
        host.request(overrides(with("GET", "/robots.txt"))).unwrap(),
        host.request(overrides(browser("/", FROM).header("cookie", &cookie)))
            .unwrap(),
        listed
            .request(overrides(browser("/", "8.8.8.8:1")))
            .unwrap(),
    ];
    for o in outcomes {
        let Outcome::Continue { headers } = &o else {
            panic!("expected Continue: {o:?}")
        };
        for name in ["x-original-url", "x-rewrite-url"] {
            assert!(header(headers, name).is_none(), "{name} reached the origin");
        }
    }
}

/// The salt of a challenge depends on neither the clock nor how many challenges the VM made.
#[test]
fn challenge_salts_reveal_neither_the_clock_nor_the_count() {
    let test = "challenge_salts_reveal_neither_the_clock_nor_the_count";
    let salts = || -> Option<Vec<u64>> {
        let mut host = start(test, "all")?;
        Some(
            (0..3)
                .map(|_| {
                    let ch = challenge_of(&host.request(browser("/", FROM)).unwrap());
                    u64::from_str_radix(&ch.s, 16).unwrap()
                })
                .collect(),
        )
    };
    let (Some(a), Some(b)) = (salts(), salts()) else {
        return;
    };
    let nanos = T0 * 1_000_000_000;
    for (i, s) in a.iter().enumerate() {
        assert_ne!(
            *s,
            nanos.rotate_left(17) ^ (i as u64 + 1),
            "salt {i} is the clock"
        );
        assert_ne!(a[i], b[i], "two VMs at the same time made salt {i} alike");
    }
}

/// A solution spent before a restart (a new VM, an empty seen-set) or a key rotation is not
/// accepted again: the seen-set knows it started after the challenge was issued.
#[test]
fn a_restart_or_a_rotation_does_not_reopen_spent_solutions() {
    let test = "a_restart_or_a_rotation_does_not_reopen_spent_solutions";
    let Some(mut before) = start(test, "all") else {
        return;
    };
    let (url, _) = verified(&mut before, "/", FROM);
    let rotated = vec![
        (
            "POW_HMAC_SECRET".into(),
            b"the-next-secret-of-32-bytes-or-more-000".to_vec(),
        ),
        ("POW_HMAC_SECRET_PREVIOUS".into(), SECRET.into()),
    ];
    for (what, env) in [("restart", secret_env()), ("rotation", rotated)] {
        let mut after = load_at(
            &module(test).unwrap(),
            plugin_config("all", ""),
            env,
            T0 + 1,
        );
        let (status, headers, _) = local(&after.request(browser(&url, FROM)).unwrap());
        assert_eq!(
            (status, header(&headers, "pow-verify")),
            (403, Some("replay")),
            "spent before the {what}, accepted after it"
        );
        // A challenge issued after it verifies as usual.
        verified(&mut after, "/", FROM);
    }
}

/// A peer address that is not an address (a pipe, an internal listener, garbage) is challenged,
/// not let through; the visitor can still pay and pass.
#[test]
fn an_unusable_peer_address_is_challenged() {
    let test = "an_unusable_peer_address_is_challenged";
    for mode in ["all", "listed"] {
        let Some(mut host) = start(test, mode) else {
            return;
        };
        for source in [
            "",
            "pipe:/run/envoy.sock",
            "envoy://internal_client_address/",
            "junk",
        ] {
            let o = host.request(browser("/", source)).unwrap();
            assert_eq!(challenge_of(&o).d, 8, "{mode}: {source:?} was let through");
        }
        let cookie = clearance_for(&mut host, "/", "junk");
        assert_passes_with(&mut host, "junk", &cookie);
    }
}
