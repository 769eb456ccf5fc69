//! The attacks the first adversarial review made on the real `pow_filter.wasm`, each replayed
//! here against the release module; each of these tests failed before its fix.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use crate::common::*;

/// The `name=value` of a 303's Set-Cookie.
fn cookie_of(o: &Outcome) -> String {
    pair(&set_cookie(o)).to_owned()
}

/// Each path of `challenged` gets the challenge page, each of `bypassed` reaches the origin.
fn assert_bypasses(host: &mut Host, challenged: &[&str], bypassed: &[&str]) {
    for path in challenged {
        let o = host.request(browser(path, "192.0.2.7:40000")).unwrap();
        assert_eq!(local(&o).0, 403, "{path} bypassed the challenge");
    }
    for path in bypassed {
        let o = host.request(browser(path, "192.0.2.7:40000")).unwrap();
        assert!(is_continue(&o), "{path}: {o:?}");
    }
}

/// Item 1: `;` path parameters (`..;`), resolved by Tomcat, Spring and Jetty origins, and any
/// path an origin could normalise differently from the bypass check never bypass.
#[test]
fn path_parameters_and_odd_spellings_never_bypass() {
    let test = "path_parameters_and_odd_spellings_never_bypass";
    let Some(mut host) = start_with(
        test,
        plugin_config("all", r#""bypass_paths": ["/healthz"],"#),
        secret_env(),
    ) else {
        return;
    };
    assert_bypasses(
        &mut host,
        &[
            "/.well-known/..;/admin",
            "/.well-known/acme-challenge/..;/admin",
            "/.well-known/acme-challenge/tok;jsessionid=1",
            "/healthz/..;/admin",
            "/healthz;/../admin",
            "/healthz;x=1",
            "/healthz/%2e%2e/admin",
            "/healthz/%252e%252e/admin",
            "/healthz/%3b/admin",
            "/healthz/.%2e/admin",
            "/healthz/./../admin",
            "/.well-known/acme-challenge/../../admin",
            "/healthz//admin",
            "/healthz\\..\\admin",
        ],
        &[
            "/.well-known/acme-challenge/LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0",
            "/healthz",
        ],
    );
}

/// Item 2: the built-in bypass is ACME's HTTP-01 path only, and a configured bypass is that
/// path exactly, or the paths below it when it ends with `/`.
#[test]
fn only_acme_and_whole_segments_bypass() {
    let test = "only_acme_and_whole_segments_bypass";
    let Some(mut host) = start_with(
        test,
        plugin_config("all", r#""bypass_paths": ["/healthz", "/static/"],"#),
        secret_env(),
    ) else {
        return;
    };
    assert_bypasses(
        &mut host,
        &[
            "/.well-known/openid-configuration",
            "/.well-known/security.txt",
            "/.well-known/acme-challengex/a",
            "/healthz-admin",
            "/healthzadmin/x",
            "/healthz/",
            "/healthz/live",
            "/staticx",
            "/static",
            "/robots.txt",
        ],
        &["/healthz", "/static/app.js", "/static/js/app.js"],
    );
    // Without `bypass_paths`, the defaults name robots.txt and favicon.ico, exactly.
    let Some(mut host) = start(test, "all") else {
        return;
    };
    assert_bypasses(
        &mut host,
        &["/robots.txtx", "/favicon.icon", "/robots"],
        &["/robots.txt", "/favicon.ico"],
    );
}

/// Item 3: one client spending its own cheap solutions as fast as it can (more than the old
/// 4096-per-window cap, all in one expiry window) locks nobody out, and the filter's shared
/// data stays bounded.
#[test]
fn an_attacker_spending_its_solutions_locks_nobody_out() {
    let test = "an_attacker_spending_its_solutions_locks_nobody_out";
    let config = r#"{"mode": "all", "difficulty": 1}"#.as_bytes().to_vec();
    let Some(mut host) = start_with(test, config, secret_env()) else {
        return;
    };
    let attacker = "198.51.100.66:40000";
    let spends = 5_000;
    for i in 0..spends {
        let (_, url) = solved(&mut host, "/", attacker);
        let o = host.request(browser(&url, attacker)).unwrap();
        assert_eq!(local(&o).0, 303, "attacker's spend {i}");
    }
    // A visitor from elsewhere, and one from the attacker's own /24, still get through.
    for victim in ["192.0.2.7:40000", "198.51.100.7:40000"] {
        let (_, url) = solved(&mut host, "/", victim);
        let o = host.request(browser(&url, victim)).unwrap();
        assert_eq!(local(&o).0, 303, "{victim} was locked out: {o:?}");
    }
    assert_eq!(metric(&host, "pow_challenges_solved"), spends + 2);
    assert!(metric(&host, "pow_seen_evicted") > 0);
    // 64 shards of at most 256 entries of 24 bytes, and their keys.
    let bytes = host.shared_data_bytes();
    assert!(
        bytes <= 64 * (256 * 24 + 16),
        "shared data grew to {bytes} bytes"
    );
}

/// Item 4: a cookie records the difficulty paid; it clears nobody who now needs more.
#[test]
fn a_cheap_cookie_does_not_clear_a_harder_neighbour() {
    let test = "a_cheap_cookie_does_not_clear_a_harder_neighbour";
    let config = br#"{"mode": "all", "difficulty": 4, "list_difficulty": {"hard": 20},
        "lists": {"version": "v1", "sets": {"hard": "192.0.2.66/32"}}}"#
        .to_vec();
    let Some(mut host) = start_with(test, config, secret_env()) else {
        return;
    };
    let (ch, url) = solved(&mut host, "/", "192.0.2.10:40000");
    assert_eq!(ch.d, 4);
    // The neighbour (same /24, same browser) verifies the cheap solution...
    let cookie = cookie_of(&host.request(browser(&url, "192.0.2.66:40000")).unwrap());
    // ...but its cookie does not clear it: it is challenged at its own difficulty.
    let o = host
        .request(browser("/", "192.0.2.66:40000").header("cookie", &cookie))
        .unwrap();
    assert_eq!(
        challenge_of(&o).d,
        20,
        "the cheap cookie cleared a listed client"
    );
    // The address that paid 4 bits passes with it.
    assert_passes_with(&mut host, "192.0.2.10:40000", &cookie);
}

/// Item 5: a request carrying hundreds of fake clearance cookies costs a few MAC checks at
/// most: over http only the first few cookies of the filter's name are looked at, over https
/// the first few `__Host-` ones (a browser holds one) then the others.
#[test]
fn only_the_first_few_clearance_cookies_are_checked() {
    let test = "only_the_first_few_clearance_cookies_are_checked";
    let Some(mut host) = start(test, "all") else {
        return;
    };
    let from = "192.0.2.10:40000";
    let http = |path: &str| Request {
        scheme: "http".into(),
        ..browser(path, from)
    };
    let (_, url) = solved(&mut host, "/", from);
    let good = cookie_of(&host.request(http(&url)).unwrap());
    assert!(good.starts_with("pow_clearance="), "{good}");
    // A fake: the good one with its last hex digit changed (well formed, fresh, wrong MAC).
    let mut fake = good.clone();
    let last = fake.pop().unwrap();
    fake.push(if last == '0' { '1' } else { '0' });
    // 675 fakes in one 60 KiB header, the good one last: not looked at.
    let many = vec![fake.as_str(); 675].join("; ");
    assert!(many.len() > 60_000);
    let o = host
        .request(http("/").header("cookie", &format!("{many}; {good}")))
        .unwrap();
    assert_eq!(local(&o).0, 403, "the filter checked all 675 cookies");
    // Even four fakes in front hide it.
    let four = [fake.as_str(); 4].join("; ");
    let o = host
        .request(http("/").header("cookie", &format!("{four}; {good}")))
        .unwrap();
    assert_eq!(local(&o).0, 403);
    // The good one among the first few passes, wherever the fakes are.
    for cookie in [
        format!("{good}; {many}"),
        format!("{fake}; {fake}; {good}"),
        format!("a=b; {fake}; c=d; {good}"),
    ] {
        let o = host.request(http("/").header("cookie", &cookie)).unwrap();
        assert!(is_continue(&o), "{o:?}");
    }
    // Over https: the `__Host-` cookie behind 675 of the other name passes.
    let host_cookie = clearance_for(&mut host, "/", from);
    assert_passes_with(&mut host, from, &format!("{many}; {host_cookie}"));
    // Forged `__Host-` ones in front of it hide it only past the bound.
    let forged = format!("__Host-{fake}");
    assert_passes_with(&mut host, from, &format!("{forged}; {host_cookie}"));
    let three = [forged.as_str(); 3].join("; ");
    let o = host
        .request(browser("/", from).header("cookie", &format!("{three}; {host_cookie}")))
        .unwrap();
    assert_eq!(local(&o).0, 403);
}

/// Item 6: X-Forwarded-For is never believed from the client: with no proxy in front (the
/// rendered topology: NodePort, externalTrafficPolicy Local), Envoy's peer is the client, and
/// the filter reads only the address Envoy derived (see `hardening` for trusted proxies).
#[test]
fn a_forwarded_for_written_by_the_client_is_never_believed() {
    let test = "a_forwarded_for_written_by_the_client_is_never_believed";
    let Some(mut direct) = start(test, "listed") else {
        return;
    };
    for xff in ["8.8.8.8", "8.8.8.8, 185.220.101.7", "8.8.8.8, 8.8.4.4"] {
        let o = direct
            .request(browser("/", "185.220.101.7:40000").header("x-forwarded-for", xff))
            .unwrap();
        assert_eq!(local(&o).0, 403, "{xff}");
    }
}

/// Item 7: a secret that is not UTF-8 is a secret (bytes), not a missing variable.
#[test]
fn a_secret_that_is_not_utf8_arms_the_filter() {
    let test = "a_secret_that_is_not_utf8_arms_the_filter";
    let mut raw = SECRET.as_bytes().to_vec();
    raw.extend_from_slice(&[0xff, 0xfe, 0x80]);
    let env = vec![("POW_HMAC_SECRET".into(), raw)];
    let Some(mut host) = start_with(test, plugin_config("all", ""), env) else {
        return;
    };
    let o = host.request(browser("/", "192.0.2.7:40000")).unwrap();
    assert_eq!(local(&o).0, 403, "the filter is disarmed");
    assert_eq!(metric(&host, "pow_secret_missing"), 0);
    assert!(
        !host
            .logs()
            .iter()
            .any(|(_, m)| m.contains("NOT PROTECTING")),
        "{:?}",
        host.logs()
    );
    // A solution verifies under that key.
    let from = "192.0.2.7:40000";
    clearance_for(&mut host, "/", from);
}

/// Item 8: changing `challenge_ttl_secs` does not reopen the seen-set for solutions already
/// spent.
#[test]
fn a_ttl_change_does_not_reopen_spent_solutions() {
    let test = "a_ttl_change_does_not_reopen_spent_solutions";
    let Some(mut host) = start_with(
        test,
        plugin_config("all", r#""challenge_ttl_secs": 300,"#),
        secret_env(),
    ) else {
        return;
    };
    let from = "192.0.2.7:40000";
    let (_, url) = solved(&mut host, "/", from);
    cookie_of(&host.request(browser(&url, from)).unwrap());
    assert!(
        host.reconfigure(plugin_config("all", r#""challenge_ttl_secs": 600,"#))
            .unwrap()
    );
    let o = host.request(browser(&url, from)).unwrap();
    let (status, headers, _) = local(&o);
    assert_eq!(status, 403, "a spent solution verified again");
    assert_eq!(header(&headers, "pow-verify"), Some("replay"));
}
