//! The real release `pow_filter.wasm` in the proxy-wasm host: bypass paths, policy, the whole
//! challenge -> solve -> verify -> cookie flow, every refusal (wrong nonce, binding, expiry,
//! replay, open redirect), fail-open on a hostcall fault, a new pluginConfig without a restart,
//! a missing secret, and the metrics.

// Helpers outside #[test] fns may unwrap too: a failure there is a failed test.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use crate::common::*;

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
    assert_eq!(metric(&host, "list=.=tor;.;pow_list_matches"), 2);
    assert_eq!(metric(&host, "list=.=hosting;.;pow_list_matches"), 1);
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

/// Verifications of `ch` (solved by `nonce`, asked from `from`) each refused for its reason:
/// the work, the MAC (another network, User-Agent or host), the return path.
fn bad_solutions(ch: &Challenge, nonce: u64, from: &str) -> Vec<(&'static str, Request)> {
    let good = verify_url(ch, nonce, "/x");
    vec![
        ("work", browser(&verify_url(ch, bad_nonce(ch), "/x"), from)),
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
            browser(&verify_url(ch, nonce, "//evil.example/"), from),
        ),
        (
            "redirect",
            browser(&verify_url(ch, nonce, "/\\evil.example"), from),
        ),
        (
            "redirect",
            browser(&verify_url(ch, nonce, "https://evil.example/"), from),
        ),
        (
            "redirect",
            browser(&verify_url(ch, nonce, "/%2F%2Fevil.example"), from),
        ),
    ]
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
    let cases = bad_solutions(&ch, nonce, from);
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
            metric(&host, &format!("reason=.={reason};.;pow_verify_failed")),
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
    // A list that does not decode is refused too (the module decodes the lists once, building
    // its table), in the words render-edge uses for it.
    let good = String::from_utf8(plugin_config("listed", "")).unwrap();
    for bad in [
        good.replace("203.0.113.0/24", "203.0.113.0/33"),
        good.replace(
            r#""hosting": "203.0.113.0/24""#,
            r#""hosting": "203.0.113.0/24"}, "packed": {"asn": "not base64!""#,
        ),
    ] {
        let expected = pow_core::PluginConfig::from_json(bad.as_bytes())
            .expect_err("a list that does not decode")
            .to_string();
        assert!(!host.reconfigure(bad.into_bytes()).unwrap(), "{expected}");
        assert!(
            host.logs().iter().any(|(_, l)| l.ends_with(&expected)),
            "{expected}: {:?}",
            host.logs()
        );
        assert_eq!(metric(&host, "pow_lists_prefixes"), 4);
    }
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
        vec![("POW_HMAC_SECRET".to_owned(), b"short".to_vec())],
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
