//! The filter's decisions end to end, natively: policy, bypass, challenge, solving, verify,
//! cookie, binding, expiry, rotation, redirects, replay, fail-open.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test helper is a test failure

use crate::common::*;

#[test]
fn built_in_and_configured_paths_always_pass() {
    let mut w = World::new(&LISTED.replace("\"listed\"", "\"all\""));
    for (path, forwarded, rule) in [
        ("/.well-known/acme-challenge/abc", None, "acme"),
        ("/healthz", None, "bypass"),
        // A bypassed path reaches the origin without its query.
        ("/healthz?x=1", Some("/healthz"), "bypass"),
    ] {
        assert_eq!(
            w.send(&req(path, "185.220.101.7:4000")),
            Action::Continue(pow_core::filter::Forward {
                path: forwarded.map(str::to_owned),
                decision: Some(format!("rule={rule}; action=allowed").into()),
            }),
            "{path}"
        );
    }
    assert_eq!(w.metrics.get(metric::BYPASSED), 3);
    // Dot segments, path parameters and encoded tricks never bypass; only ACME is built in,
    // and the configured paths replace the default robots.txt and favicon.ico.
    for path in [
        "/.well-known/security.txt",
        "/robots.txt",
        "/favicon.ico",
        "/healthz-admin",
        "/healthz/live?x=1",
        "/healthz;x=1",
        "/healthz/..;/admin",
        "/.well-known/acme-challenge/..;/admin",
        "/.well-known/../admin",
        "/.well-known/%2e%2e/admin",
        "/.well-known/..%2fadmin",
        "//.well-known/x",
        "/robots.txt.php",
        "/favicon.ico/../x",
    ] {
        assert_eq!(
            w.send(&req(path, "185.220.101.7:4000")).status(),
            Some(403),
            "{path}"
        );
    }
}

#[test]
fn listed_mode_challenges_listed_addresses_only() {
    let mut w = World::new(LISTED);
    for src in ["8.8.8.8:1234", "[2001:db8::1]:443", "185.220.100.255:1"] {
        assert!(w.send(&req("/", src)).is_continue(), "{src}");
    }
    assert_eq!(w.metrics.get(metric::PASSED_POLICY), 3);
    let a = w.send(&req("/some/page?q=1", "185.220.101.7:4000"));
    assert_eq!(a.status(), Some(403));
    assert_eq!(a.header("pow-mitigated"), Some("challenge"));
    assert_eq!(a.header("cache-control"), Some("no-store"));
    assert!(a.header("content-type").unwrap().starts_with("text/html"));
    assert!(
        a.header("content-security-policy")
            .unwrap()
            .contains("worker-src blob:")
    );
    let data = page_data(&a);
    assert_eq!(data["d"], 9, "tor difficulty");
    assert_eq!(data["r"], "/some/page?q=1");
    assert_eq!(w.metrics.get("list=.=tor;.;pow_list_matches"), 1);
    // In both lists: the hardest difficulty; IPv6 too.
    assert_eq!(page_data(&w.send(&req("/", "203.0.113.5:1")))["d"], 9);
    assert_eq!(page_data(&w.send(&req("/", "203.0.113.6:1")))["d"], 7);
    assert_eq!(
        page_data(&w.send(&req("/", "[2a0b:f4c2:1::9]:443")))["d"],
        9
    );
    assert_eq!(w.metrics.get("list=.=hosting;.;pow_list_matches"), 2);
    assert_eq!(w.metrics.get(metric::CHALLENGES_ISSUED), 4);
}

#[test]
fn non_browsers_get_a_short_text_and_french_is_spoken() {
    let mut w = World::new(LISTED);
    let curl = with_header(req("/", "185.220.101.7:1"), "accept", "*/*");
    let a = w.send(&curl);
    assert_eq!(a.status(), Some(403));
    assert!(a.header("content-type").unwrap().starts_with("text/plain"));
    assert!(body(&a).len() < 300 && body(&a).contains("Proof of work"));
    let fr = with_header(
        req("/", "185.220.101.7:1"),
        "accept-language",
        "fr-FR,fr;q=0.9,en;q=0.5",
    );
    let a = w.send(&fr);
    assert!(body(&a).contains("<html lang=\"fr\">"));
    assert_eq!(a.header("content-language"), Some("fr"));
}

#[test]
fn off_and_all_modes() {
    let mut off = World::new(&LISTED.replace("\"listed\"", "\"off\""));
    assert!(off.send(&req("/", "185.220.101.7:1")).is_continue());
    let mut all = World::new(&LISTED.replace("\"listed\"", "\"all\""));
    assert_eq!(page_data(&all.send(&req("/", "8.8.8.8:1")))["d"], 6);
    assert_eq!(page_data(&all.send(&req("/", "185.220.101.7:1")))["d"], 9);
}

#[test]
fn solve_verify_cookie_then_pass() {
    let mut w = World::new(LISTED);
    let src = "185.220.101.7:4000";
    let page = w.send(&req("/private/doc?id=7", src));
    let q = solve(&page_data(&page));
    let v = w.send(&req(&verify_path(&q), "185.220.101.200:5000")); // same /24, new port
    assert_eq!(v.status(), Some(303), "{:?}", v.header("pow-verify"));
    assert_eq!(v.header("location"), Some("/private/doc?id=7"));
    let set = v.header("set-cookie").unwrap();
    assert!(set.starts_with("__Host-pow_clearance="), "{set}");
    for attr in [
        "; Secure",
        "; HttpOnly",
        "; SameSite=Lax",
        "; Path=/",
        "; Max-Age=86400",
    ] {
        assert!(set.contains(attr), "{set} lacks {attr}");
    }
    assert_eq!(w.metrics.get(metric::CHALLENGES_SOLVED), 1);

    let cookie = cookie_of(&v);
    let with_cookie = with_header(
        req("/private/doc?id=7", src),
        "cookie",
        &format!("a=b; {cookie}; c=d"),
    );
    assert!(w.send(&with_cookie).is_continue());
    assert_eq!(w.metrics.get(metric::PASSED_COOKIE), 1);

    // Bound like the challenge: another /24, another UA, another host are challenged again.
    let other_net = with_header(req("/", "203.0.113.9:1"), "cookie", &cookie); // listed too
    let other_ua = with_header(with_cookie.clone(), "user-agent", "curl/8.0");
    let other_host = with_header(with_cookie.clone(), ":authority", "other.example.org");
    for r in [other_net, other_ua, other_host] {
        let a = w.send(&r);
        assert_eq!(a.status(), Some(403));
    }
    assert_eq!(w.metrics.get(metric::COOKIE_INVALID), 3);

    // The cookie expires.
    w.now += 86_401;
    assert_eq!(w.send(&with_cookie).status(), Some(403));
}

/// Verifications of `q` (a solution from `src`) each refused for its reason: the work, the MAC
/// (another network, User-Agent, host, difficulty or salt), the expiry, the return path, the
/// form, the method.
fn bad_verifications(q: &VerifyQuery, src: &str) -> Vec<(&'static str, Request<'static>)> {
    let changed = |change: &dyn Fn(&mut VerifyQuery)| {
        let mut v = q.clone();
        change(&mut v);
        req(&verify_path(&v), src)
    };
    let genuine = || req(&verify_path(q), src);
    let mut cases = vec![
        ("work", changed(&|v| v.nonce ^= 0xdead_beef_0000)),
        ("mac", req(&verify_path(q), "185.220.102.7:1")),
        (
            "mac",
            with_header(genuine(), "user-agent", "python-requests/2"),
        ),
        ("mac", with_header(genuine(), ":authority", "evil.example")),
        ("mac", changed(&|v| v.difficulty -= 1)),
        ("mac", changed(&|v| v.salt += 1)),
        ("expired", changed(&|v| v.expiry += 3600)),
    ];
    for target in [
        "//evil.example/",
        "https://evil.example/",
        "/\\evil.example",
        "/%2F%2Fevil.example",
        "/%0d%0aSet-Cookie:x=1",
    ] {
        cases.push(("redirect", changed(&|v| v.return_to = target.into())));
    }
    cases.extend([
        ("malformed", req(VERIFY_PATH, src)),
        ("malformed", req(&format!("{}&e=1", verify_path(q)), src)),
        ("malformed", req(&format!("{}&x=1", verify_path(q)), src)),
        (
            "malformed",
            req(&verify_path(q).replace("&d=", "&d=+"), src),
        ),
        ("method", with_header(genuine(), ":method", "POST")),
    ]);
    cases
}

#[test]
fn a_challenge_a_denial_and_a_refused_solution_are_each_one_decision_line() {
    let mut w = World::new(
        r#"{"mode": "listed", "difficulty": 6, "list_difficulty": {"tor": 9},
            "rules": [{"name": "scrapers", "user_agent": ["python-requests"], "action": "deny"}],
            "lists": {"version": "2026-11-29T17:17:00Z", "generated_at": "2026-11-29T17:17:00Z",
                      "sets": {"tor": "185.220.101.0/24", "hosting": "203.0.113.0/24"}}}"#,
    );
    // Let through: no line.
    assert!(w.send(&req("/", "198.51.100.7:1")).is_continue());
    assert!(w.metrics.1.is_empty(), "{:?}", w.metrics.1);

    let challenged = w.send(&req("/a", "185.220.101.7:4000"));
    let denied = w.send(&with_header(
        req("/b", "203.0.113.9:1"),
        "user-agent",
        "python-requests/2.32",
    ));
    assert_eq!(denied.status(), Some(403));
    let q = solve(&page_data(&challenged));
    let forged = verify_path(&q).replace("&n=", "&n=1");
    assert_eq!(
        w.send(&req(&forged, "[2001:db8:1:2:3:4:5:6]:443")).status(),
        Some(403)
    );
    let lines = &w.metrics.1;
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(
        lines[0],
        serde_json::json!({"msg": "pow-filter decision", "event": "challenge",
            "rule": "list.tor", "action": "challenged", "lists": ["tor"],
            "host": "edge.example.org", "network": "185.220.101.0/24", "difficulty": 9})
    );
    assert_eq!(
        lines[1],
        serde_json::json!({"msg": "pow-filter decision", "event": "deny", "rule": "scrapers",
            "action": "denied", "lists": ["hosting"], "host": "edge.example.org",
            "network": "203.0.113.0/24"})
    );
    assert_eq!(lines[2]["event"], "verify_failed");
    assert_eq!(lines[2]["action"], "refused");
    assert_eq!(lines[2]["network"], "2001:db8:1:2::/64");
    assert!(lines[2].get("rule").is_none(), "{}", lines[2]);
    assert!(lines[2]["reason"].is_string(), "{}", lines[2]);
    // Never the address, the query or a token.
    let text = serde_json::to_string(lines).unwrap();
    for secret in ["185.220.101.7", "203.0.113.9", "5:6", "n=1", "c="] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}

#[test]
fn every_bad_verification_is_refused_with_its_reason() {
    let mut w = World::new(LISTED);
    let src = "185.220.101.7:4000";
    let q = solve(&page_data(&w.send(&req("/x", src))));

    let cases = bad_verifications(&q, src);
    for (reason, r) in cases {
        let a = w.send(&r);
        assert_eq!(a.status(), Some(403), "{reason}: {:?}", r.header(":path"));
        assert_eq!(
            a.header("pow-verify"),
            Some(reason),
            "{:?}",
            r.header(":path")
        );
        assert!(a.header("set-cookie").is_none());
        assert!(a.header("location").is_none());
    }
    assert_eq!(w.metrics.get("reason=.=mac;.;pow_verify_failed"), 5);
    assert_eq!(w.metrics.get("reason=.=redirect;.;pow_verify_failed"), 5);
    // The raw `r` parameter, encoded in every way a browser or an attacker might.
    for raw in [
        "%2F%2Fevil.example",
        "%2F%5Cevil.example",
        "https%3A%2F%2Fevil.example",
        "%2F%252F%252Fevil",
        "%2F%09%2Fevil",
    ] {
        let path = verify_path(&q).split("&r=").next().unwrap().to_owned() + "&r=" + raw;
        assert_eq!(
            w.send(&req(&path, src)).header("pow-verify"),
            Some("redirect"),
            "{raw}"
        );
    }
    // After all that, the genuine solution still works once, then is a replay.
    w.now += 5;
    let ok = w.send(&req(&verify_path(&q), src));
    assert_eq!(ok.status(), Some(303));
    assert_eq!(ok.header("location"), Some("/x"));
    let again = w.send(&req(&verify_path(&q), "185.220.101.99:1"));
    assert_eq!(again.header("pow-verify"), Some("replay"));
    assert_eq!(w.metrics.get("reason=.=replay;.;pow_verify_failed"), 1);
    // And once the challenge's time is over, it is expired.
    w.now = q.expiry + 1;
    assert_eq!(
        w.send(&req(&verify_path(&q), src)).header("pow-verify"),
        Some("expired")
    );
}

#[test]
fn a_failed_verification_sends_a_browser_back_to_start_again() {
    let mut w = World::new(LISTED);
    let q = solve(&page_data(
        &w.send(&req("/back?x=\"1\"", "185.220.101.7:1")),
    ));
    let wrong = (0..)
        .find(|&n| !crypto::check_work(&q.challenge, n, q.difficulty))
        .unwrap();
    let a = w.send(&req(
        &verify_path(&VerifyQuery {
            nonce: wrong,
            ..q.clone()
        }),
        "185.220.101.7:1",
    ));
    assert_eq!(a.header("pow-verify"), Some("work"));
    let html = body(&a);
    // Back to the root, never to the return path (a URL anybody can write).
    assert!(html.contains("url=/\""), "{html}");
    assert!(!html.contains("back"), "{html}");
    let plain = w.send(&with_header(
        req(
            &verify_path(&VerifyQuery { expiry: 1, ..q }),
            "185.220.101.7:1",
        ),
        "accept",
        "*/*",
    ));
    assert!(body(&plain).starts_with("proof of work refused: expired"));
}

#[test]
fn key_rotation_logs_nobody_out() {
    let src = "185.220.101.7:4000";
    let mut old = World::new(LISTED);
    let q = solve(&page_data(&old.send(&req("/", src))));
    // A cookie issued with the old key.
    let mut w0 = World::new(LISTED);
    let q0 = solve(&page_data(&w0.send(&req("/", src))));
    let cookie = cookie_of(&w0.send(&req(&verify_path(&q0), src)));

    let mut rotated = World::with_keys(LISTED, Some(keys(KEY_B, Some(KEY_A))));
    assert_eq!(
        rotated.send(&req(&verify_path(&q), src)).status(),
        Some(303)
    );
    assert!(
        rotated
            .send(&with_header(req("/", src), "cookie", &cookie))
            .is_continue()
    );

    let mut dropped = World::with_keys(LISTED, Some(keys(KEY_B, None)));
    assert_eq!(
        dropped
            .send(&with_header(req("/", src), "cookie", &cookie))
            .status(),
        Some(403)
    );
    let q2 = solve(&page_data(&old.send(&req("/", src))));
    assert_eq!(
        dropped
            .send(&req(&verify_path(&q2), src))
            .header("pow-verify"),
        Some("mac")
    );
}

#[test]
fn without_a_secret_nothing_is_challenged_and_it_is_counted() {
    let mut w = World::with_keys(&LISTED.replace("\"listed\"", "\"all\""), None);
    assert!(!w.filter.is_armed());
    assert!(w.send(&req("/", "185.220.101.7:1")).is_continue());
    assert_eq!(w.metrics.get(metric::UNPROTECTED), 1);
    assert!(Keys::new(Some(b"too short"), None).is_err());
}

#[test]
fn forwarded_for_is_never_read() {
    let xff = |r: Request<'static>| with_header(r, "x-forwarded-for", "185.220.101.7, 10.0.0.2");
    let mut direct = World::new(LISTED);
    // The peer (a load balancer, or a client writing XFF) is what counts: Envoy put the client
    // it derived in source.address.
    assert!(direct.send(&xff(req("/", "10.0.0.3:1"))).is_continue());
    assert!(
        PluginConfig::from_json(br#"{"trusted_hops": 1}"#)
            .unwrap_err()
            .message
            .contains("numTrustedProxies")
    );
}

#[test]
fn an_unusable_client_address_is_challenged_and_counted() {
    let mut w = World::new(LISTED);
    let mut r = req("/", "x");
    r.source_address = None;
    assert_eq!(page_data(&w.send(&r))["d"], 6);
    r.source_address = Some("garbage".into());
    assert_eq!(page_data(&w.send(&r))["d"], 6);
    assert_eq!(w.metrics.get(metric::ADDRESS_UNUSABLE), 2);
    assert_eq!(w.metrics.get(metric::FAIL_OPEN), 0);
    // Mode off challenges nobody, address or not.
    let mut off = World::new(&LISTED.replace("\"listed\"", "\"off\""));
    assert!(off.send(&r).is_continue());
}

#[test]
fn secure_only_over_https() {
    let mut w = World::new(LISTED);
    let src = "185.220.101.7:1";
    let http = |p: &str| with_header(req(p, src), ":scheme", "http");
    let q = solve(&page_data(&w.send(&http("/"))));
    let set = w
        .send(&http(&verify_path(&q)))
        .header("set-cookie")
        .unwrap()
        .to_owned();
    assert!(!set.contains("Secure"), "{set}");
    assert!(set.contains("HttpOnly"));
}

#[test]
fn the_return_path_of_a_strange_request_is_the_root() {
    let mut w = World::new(LISTED);
    let a = w.send(&req("//evil.example/x", "185.220.101.7:1"));
    assert_eq!(page_data(&a)["r"], "/");
    assert_eq!(
        percent_encode_component("/a b?c=d&e"),
        "%2Fa%20b%3Fc%3Dd%26e"
    );
}

#[test]
fn a_new_configuration_swaps_the_lists() {
    let mut w = World::new(LISTED);
    assert!(w.send(&req("/", "8.8.8.8:1")).is_continue());
    w.filter = Filter::new(
        config(&LISTED.replace("198.51.100.0/24", "8.8.8.0/24")),
        Some(keys(KEY_A, None)),
        SEED,
    )
    .unwrap();
    assert_eq!(w.send(&req("/", "8.8.8.8:1")).status(), Some(403));
}

#[test]
fn the_host_prefixed_cookie_is_checked_first_across_cookie_headers() {
    let mut w = World::new(&LISTED.replace("\"listed\"", "\"all\""));
    let src = "198.51.100.20:4000";
    let q = solve(&page_data(&w.send(&req("/", src))));
    let v = w.send(&req(&verify_path(&q), src));
    let set = v.header("set-cookie").unwrap();
    let good = set.split(';').next().unwrap().to_owned();
    assert!(good.starts_with("__Host-pow_clearance="), "{good}");
    let value = good.split_once('=').unwrap().1;
    let tossed = format!("pow_clearance={}0", &value[..value.len() - 1]);
    let three = [tossed.as_str(); 3].join("; ");
    // One header, the tossed ones first; or HTTP/2's split headers, the tossed ones in the first.
    let one = with_header(req("/", src), "cookie", &format!("{three}; {good}"));
    assert!(w.send(&one).is_continue());
    let mut split = with_header(req("/", src), "cookie", &three);
    split.headers.push(("cookie".into(), good.clone().into()));
    assert!(w.send(&split).is_continue());
    // Without the prefixed one, three forged ones are checked and the visitor is challenged.
    let forged = with_header(
        req("/", src),
        "cookie",
        &format!("{three}; pow_clearance={value}"),
    );
    assert_eq!(w.send(&forged).status(), Some(403));
}

#[test]
fn over_http_later_cookie_headers_count_within_the_bound() {
    let mut w = World::new(&LISTED.replace("\"listed\"", "\"all\""));
    let src = "198.51.100.20:4000";
    let http = |p: &str| with_header(req(p, src), ":scheme", "http");
    let q = solve(&page_data(&w.send(&http("/"))));
    let v = w.send(&http(&verify_path(&q)));
    let good = v
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert!(good.starts_with("pow_clearance="), "{good}");
    let value = good.split_once('=').unwrap().1;
    let forged = format!("pow_clearance={}0", &value[..value.len() - 1]);
    let split = |first: &str, second: &str| {
        let mut r = with_header(http("/"), "cookie", first);
        r.headers.push(("cookie".into(), second.to_owned().into()));
        r
    };
    // The valid cookie in the second header passes after one or two forged ones in the first...
    for forged_before in 1..pow_core::filter::MAX_COOKIES_CHECKED {
        let first = vec![forged.as_str(); forged_before].join("; ");
        assert!(
            w.send(&split(&first, &good)).is_continue(),
            "{forged_before}"
        );
    }
    // ...and is never reached once as many forged ones as are checked came first.
    let first = [forged.as_str(); pow_core::filter::MAX_COOKIES_CHECKED].join("; ");
    assert_eq!(w.send(&split(&first, &good)).status(), Some(403));
    assert!(w.send(&split("other=1", &good)).is_continue());
}

#[test]
fn the_edges_rendered_config_challenges_the_acme_path_on_its_https_listener() {
    // The edge runs the filter on its HTTPS listener only, and HTTP-01 arrives on port 80, where
    // cert-manager's solver answers: on 443 the ACME path would only be an unchallenged way to
    // the origin. The pluginConfig render-edge writes (its golden file, which its tests hold to
    // the render) turns the built-in bypass off.
    let rendered: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tools/render-edge/tests/fixtures/edge-pow.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let plugin = testkit::json::element(&rendered["items"], "/kind", "WasmPlugin");
    assert_eq!(plugin["spec"]["match"][0]["ports"][0]["number"], 443);
    let mut config = plugin["spec"]["pluginConfig"].clone();
    // The lists the hourly job publishes, the client among them.
    config["lists"] = serde_json::json!({
        "version": "2026-11-29T17:17:00Z", "generated_at": "2026-11-29T17:17:00Z",
        "sets": {"tor": "185.220.101.0/24"}});
    let mut w = World::new(&config.to_string());
    let a = w.send(&req(
        "/.well-known/acme-challenge/abc",
        "185.220.101.7:4000",
    ));
    assert_eq!(a.status(), Some(403));
    assert_eq!(a.header("pow-mitigated"), Some("challenge"));
    assert_eq!(w.metrics.get(metric::BYPASSED), 0);
}
