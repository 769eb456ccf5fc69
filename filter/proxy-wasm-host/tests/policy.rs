//! The policy of ordered rules on the real module: each condition and action, the first rule
//! that matches deciding, the short form deciding the rest, the `refresh` tier, and the
//! decision the origin is told.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use crate::common::*;

const FROM: &str = "198.51.100.20:40000";
const TOR_EXIT: &str = "185.220.101.7:40000";

/// The test lists (tor, hosting) with these rules, mode `listed`.
fn with_rules(rules: &str) -> Vec<u8> {
    plugin_config("listed", &format!(r#""rules": {rules},"#))
}

/// The request with this header instead of the browser's.
fn replacing(mut request: Request, name: &str, value: &str) -> Request {
    request.headers.retain(|(n, _)| n != name);
    request.header(name, value)
}

fn accepting(request: Request, accept: &str) -> Request {
    replacing(request, "accept", accept)
}

/// What decided a request let through, as the origin is told.
fn decision_at_origin(o: &Outcome) -> String {
    let Outcome::Continue { headers } = o else {
        panic!("expected Continue: {o:?}")
    };
    header(headers, "pow-decision")
        .unwrap_or_else(|| panic!("no pow-decision: {headers:?}"))
        .to_owned()
}

const RULES: &str = r#"[
    {"name": "api", "host": ["api.example.org"], "method": ["GET"], "action": "allow"},
    {"name": "scrapers", "user_agent": ["python-requests", "Scrapy"], "action": "deny"},
    {"name": "xhr", "header": {"x-requested-with": "XMLHttpRequest"}, "action": "allow"},
    {"name": "login", "path": ["/login", "/account/"], "action": "challenge", "difficulty": 12},
    {"name": "feeds", "accept": ["application/rss+xml", "application/atom+xml"], "path": ["/feed"],
     "action": "challenge", "kind": "refresh"},
    {"name": "hosting", "lists": ["hosting"], "action": "challenge", "difficulty": 6},
    {"name": "static", "path": ["/static/"], "action": "allow"}
]"#;

/// A User-Agent substring of [`RULES`] (case-insensitive) denies; a header equal to a value
/// allows.
fn user_agent_and_header_decide(host: &mut Host) {
    // User-Agent substring, case-insensitive: denied, with the rule's name.
    let o = host
        .request(replacing(
            browser("/", FROM),
            "user-agent",
            "my SCRAPY/2.11 bot",
        ))
        .unwrap();
    let (status, headers, body) = local(&o);
    assert_eq!(status, 403);
    assert_eq!(header(&headers, "pow-mitigated"), Some("deny"));
    assert_eq!(
        header(&headers, "pow-decision"),
        Some("rule=scrapers; action=denied")
    );
    assert!(body.contains("scrapers"), "{body}");
    // A header equal to a value.
    let o = host
        .request(browser("/x", TOR_EXIT).header("x-requested-with", "XMLHttpRequest"))
        .unwrap();
    assert_eq!(decision_at_origin(&o), "rule=xhr; action=allowed");
}

/// The paths of [`RULES`]: an allow rule's only as a plain path (its query dropped), a deny or
/// challenge rule's also as lenient origins read it.
fn paths_decide(host: &mut Host) {
    // An allow rule's path: a plain path below it, without its query.
    let o = host
        .request(browser("/static/app.js?route=admin", TOR_EXIT))
        .unwrap();
    assert_eq!(decision_at_origin(&o), "rule=static; action=allowed");
    let Outcome::Continue { headers } = &o else {
        unreachable!()
    };
    assert_eq!(header(headers, ":path"), Some("/static/app.js"));
    // Not a plain path: not the allow rule's, so the short form challenges the listed address.
    for path in [
        "/static/../admin",
        "/static/%2e%2e/admin",
        "/static;x/app.js",
    ] {
        let o = host.request(browser(path, TOR_EXIT)).unwrap();
        assert_eq!(local(&o).0, 403, "{path} was allowed");
    }
    // A deny or challenge path also matches as lenient origins read it.
    for path in [
        "/%6Cogin",
        "/LOGIN",
        "/account;jsessionid=1/x",
        "/static/../login",
    ] {
        let o = host.request(browser(path, FROM)).unwrap();
        assert_eq!(challenge_of(&o).d, 12, "{path} escaped the login rule");
    }
}

#[test]
fn each_condition_and_action_decides_on_the_real_module() {
    let test = "each_condition_and_action_decides_on_the_real_module";
    let Some(mut host) = start_with(test, with_rules(RULES), secret_env()) else {
        return;
    };
    let at = |authority: &str, path: &str, from: &str| Request {
        authority: authority.to_owned(),
        ..browser(path, from)
    };
    // host + method: allowed, even from a listed address; the client's own pow-decision is
    // replaced by the filter's.
    let o = host
        .request(
            at("api.example.org", "/v1/items?page=2", TOR_EXIT)
                .header("pow-decision", "rule=api; action=cleared"),
        )
        .unwrap();
    assert_eq!(decision_at_origin(&o), "rule=api; action=allowed");
    let Outcome::Continue { headers } = &o else {
        unreachable!()
    };
    assert_eq!(
        header(headers, ":path"),
        Some("/v1/items?page=2"),
        "a host rule keeps the query"
    );
    assert_eq!(
        headers.iter().filter(|(n, _)| n == "pow-decision").count(),
        1
    );
    // POST to the API host is not the rule's: the short form decides (a listed address).
    let post = Request {
        method: "POST".into(),
        ..at("api.example.org", "/v1", TOR_EXIT)
    };
    assert_eq!(challenge_of(&host.request(post).unwrap()).d, 10);
    user_agent_and_header_decide(&mut host);
    // A path: challenged harder than the address's list would.
    let o = host.request(browser("/account/settings", FROM)).unwrap();
    let (_, headers, _) = local(&o);
    assert_eq!(
        header(&headers, "pow-decision"),
        Some("rule=login; action=challenged; difficulty=12; kind=pow")
    );
    assert_eq!(challenge_of(&o).d, 12);
    // Paid, it is cleared, and the origin is told.
    let cookie = clearance_for(&mut host, "/login", FROM);
    let o = host
        .request(browser("/login", FROM).header("cookie", &cookie))
        .unwrap();
    assert_eq!(decision_at_origin(&o), "rule=login; action=cleared");
    // Lists: the hosting network pays the rule's 6 bits.
    assert_eq!(
        challenge_of(&host.request(browser("/", "203.0.113.9:1")).unwrap()).d,
        6
    );
    paths_decide(&mut host);
    // The short form decides the rest: an unlisted address is let through by `default`, a
    // listed one challenged by its list.
    assert_eq!(
        decision_at_origin(&host.request(browser("/", FROM)).unwrap()),
        "rule=default; action=allowed"
    );
    let o = host.request(browser("/", TOR_EXIT)).unwrap();
    let (_, headers, _) = local(&o);
    assert_eq!(
        header(&headers, "pow-decision"),
        Some("rule=list.tor; action=challenged; difficulty=10; kind=pow")
    );
    for (name, count) in [
        ("rule=.=api;.;action=.=allowed;.;pow_decisions", 1),
        ("rule=.=scrapers;.;action=.=denied;.;pow_decisions", 1),
        ("rule=.=login;.;action=.=cleared;.;pow_decisions", 1),
        ("rule=.=list.tor;.;action=.=challenged;.;pow_decisions", 5),
        ("rule=.=default;.;action=.=allowed;.;pow_decisions", 1),
    ] {
        assert_eq!(metric(&host, name), count, "{name}");
    }
    assert_eq!(
        metric(
            &host,
            "rule=.=hosting;.;action=.=challenged;.;pow_decisions"
        ),
        1
    );
}

/// The first rule that matches decides, whatever comes after; the built-in ACME bypass comes
/// before every rule.
#[test]
fn the_first_rule_that_matches_decides_and_acme_comes_first() {
    let test = "the_first_rule_that_matches_decides_and_acme_comes_first";
    let rules = r#"[
        {"name": "deny-all", "action": "deny"},
        {"name": "never", "action": "allow"}
    ]"#;
    let Some(mut host) = start_with(test, with_rules(rules), secret_env()) else {
        return;
    };
    let (_, headers, _) = local(&host.request(browser("/", FROM)).unwrap());
    assert_eq!(
        header(&headers, "pow-decision"),
        Some("rule=deny-all; action=denied")
    );
    let o = host
        .request(browser("/.well-known/acme-challenge/tok", FROM))
        .unwrap();
    assert_eq!(decision_at_origin(&o), "rule=acme; action=allowed");
    assert_eq!(
        metric(&host, "rule=.=never;.;action=.=allowed;.;pow_decisions"),
        0
    );
}

/// A bad rule is refused at configure time, counted, and the module says which rule and field.
#[test]
fn a_bad_rule_is_refused_at_configure_time() {
    let test = "a_bad_rule_is_refused_at_configure_time";
    let Some(mut host) = start_with(test, with_rules("[]"), secret_env()) else {
        return;
    };
    let bad = with_rules(r#"[{"name": "a", "path": ["/x;y"], "action": "allow"}]"#);
    assert!(!host.reconfigure(bad).unwrap(), "a bad rule was accepted");
    let logs = format!("{:?}", host.logs());
    assert!(logs.contains("rules[0].path[0]"), "{logs}");
    assert_eq!(metric(&host, "pow_config_rejected"), 1);
}

/// The `refresh` tier: a page without script that goes on by itself after the delay; its
/// clearance satisfies a `refresh` rule, never a `pow` one.
#[test]
fn the_refresh_tier_clears_after_its_delay_and_only_for_refresh_rules() {
    let test = "the_refresh_tier_clears_after_its_delay_and_only_for_refresh_rules";
    let Some(mut host) = start_with(test, with_rules(RULES), secret_env()) else {
        return;
    };
    let feed = |path: &str| accepting(browser(path, FROM), "application/atom+xml, text/html;q=0.9");
    let o = host.request(feed("/feed")).unwrap();
    let (status, headers, body) = local(&o);
    assert_eq!(status, 403);
    assert_eq!(header(&headers, "pow-mitigated"), Some("challenge"));
    assert_eq!(
        header(&headers, "pow-decision"),
        Some("rule=feeds; action=challenged; difficulty=0; kind=refresh")
    );
    assert!(
        !body.contains("<script"),
        "the refresh page runs no script: {body}"
    );
    let csp = header(&headers, "content-security-policy").unwrap();
    assert!(!csp.contains("script-src"), "{csp}");
    let marker = "http-equiv=\"refresh\" content=\"5;url=";
    let start = body.find(marker).unwrap_or_else(|| panic!("{body}")) + marker.len();
    let url = body[start..body[start..].find('"').unwrap() + start].replace("&amp;", "&");
    assert!(url.starts_with("/.pow/verify?"), "{url}");
    // Too soon: refused, and the visitor starts again.
    let (status, headers, _) = local(&host.request(browser(&url, FROM)).unwrap());
    assert_eq!(
        (status, header(&headers, "pow-verify")),
        (403, Some("early"))
    );
    host.set_time_nanos((T0 + 5) * 1_000_000_000);
    let set = set_cookie(&host.request(browser(&url, FROM)).unwrap());
    let cookie = pair(&set).to_owned();
    let o = host
        .request(feed("/feed").header("cookie", &cookie))
        .unwrap();
    assert_eq!(decision_at_origin(&o), "rule=feeds; action=cleared");
    // The same clearance is no proof of work.
    let o = host
        .request(browser("/login", FROM).header("cookie", &cookie))
        .unwrap();
    assert_eq!(
        challenge_of(&o).d,
        12,
        "a refresh clearance passed a pow rule"
    );
    // Spent once.
    let (status, headers, _) = local(&host.request(browser(&url, FROM)).unwrap());
    assert_eq!(
        (status, header(&headers, "pow-verify")),
        (403, Some("replay"))
    );
    // Clients that take no HTML are told what they may do.
    let o = host
        .request(accepting(browser("/feed", FROM), "application/rss+xml"))
        .unwrap();
    let (_, headers, body) = local(&o);
    assert_eq!(header(&headers, "retry-after"), Some("5"));
    assert!(
        body.contains("after 5 seconds, GET /.pow/verify?"),
        "{body}"
    );
}

/// Verified crawlers from Bing's and Google's ranges as they publish them: `bingbot` from inside
/// Bing's ranges is let through; the same User-Agent from a hosting network is a spoofed
/// crawler, denied; a browser's User-Agent from Bing's ranges is neither.
#[test]
fn verified_crawlers_pass_and_spoofed_ones_are_denied_on_the_real_ranges() {
    let test = "verified_crawlers_pass_and_spoofed_ones_are_denied_on_the_real_ranges";
    let Some(shared) = testkit::workspace::shared_dir(test) else {
        return;
    };
    let ranges = shared.join("fixtures/bots/crawler-ip-ranges");
    let config = serde_json::json!({
        "mode": "all", "difficulty": 8,
        "rules": [
            {"name": "search", "crawler": ["bingbot", "googlebot"], "action": "allow"},
            {"name": "liars", "spoofed_crawler": true, "action": "deny"}
        ],
        "lists": {
            "version": "2026-11-29T17:17:00Z",
            "sets": {
                "bingbot": testkit::crawler_ranges::as_list(&ranges.join("bing/bingbot.json")),
                "googlebot": testkit::crawler_ranges::as_list(&ranges.join("google/googlebot.json")),
                "hosting": "203.0.113.0/24"
            },
            "tokens": {"bingbot": ["bingbot"], "googlebot": ["Googlebot"]}
        }
    });
    let Some(mut host) = start_with(test, config.to_string().into_bytes(), secret_env()) else {
        return;
    };
    let bing = "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)";
    let google = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
    let from = |ua: &str, address: &str| {
        let mut r = browser("/", address);
        r.headers.retain(|(n, _)| n != "user-agent");
        r.header("user-agent", ua)
    };
    // 157.55.39.0/24 is the first of Bing's published prefixes.
    let o = host.request(from(bing, "157.55.39.7:40000")).unwrap();
    assert_eq!(decision_at_origin(&o), "rule=search; action=allowed");
    // Googlebot claimed from Bing's ranges, bingbot from a hosting network: spoofed.
    for (ua, address) in [(google, "157.55.39.7:1"), (bing, "203.0.113.9:1")] {
        let (status, headers, _) = local(&host.request(from(ua, address)).unwrap());
        assert_eq!(
            (status, header(&headers, "pow-decision")),
            (403, Some("rule=liars; action=denied")),
            "{ua} from {address}"
        );
    }
    // A browser from Bing's ranges claims nothing: the mode decides.
    let o = host.request(browser("/", "157.55.39.7:1")).unwrap();
    assert_eq!(challenge_of(&o).d, 8);
}

/// The header fields of a `Name: value` file, names lowercased.
fn header_fields(path: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned()))
        .collect()
}

/// Web Bot Auth on the real module, with the draft's signed request (legacy `Signature-Agent`,
/// RFC 9421's Ed25519 test key): the valid signature lets the agent through a `signed_agent`
/// rule; one byte changed, another authority, an unknown key or an expired signature counts as
/// unsigned (the mode decides) and is counted by its reason.
#[test]
fn a_signed_agent_passes_and_a_broken_signature_counts_as_unsigned() {
    let test = "a_signed_agent_passes_and_a_broken_signature_counts_as_unsigned";
    let Some(shared) = testkit::workspace::shared_dir(test) else {
        return;
    };
    let bots = shared.join("fixtures/bots");
    let (_, key) = rfc9421_test_key(&bots);
    let config = serde_json::json!({
        "mode": "all", "difficulty": 8, "signature_max_age_secs": 3600,
        "agents": {"testbot": {"keys": {"keys": [key]}}},
        "rules": [{"name": "signed", "signed_agent": ["testbot"], "action": "allow"}],
    });
    let fields =
        header_fields(&bots.join(
            "web-bot-auth-drafts/arch05-ed25519-sig2-signature-agent-legacy-string.headers.txt",
        ));
    // Within the signature's window: created 1735689600, expires 1735693200.
    let Some(mut host) = start_at(test, config.to_string().into_bytes(), 1_735_690_000) else {
        return;
    };
    let signed = |authority: &str, change: &dyn Fn(&str, &str) -> String| {
        let mut r = Request {
            authority: authority.to_owned(),
            ..browser("/", FROM)
        };
        for (name, value) in &fields {
            r = r.header(name, &change(name, value));
        }
        r
    };
    let as_is = |_: &str, v: &str| v.to_owned();
    let o = host.request(signed("example.com", &as_is)).unwrap();
    assert_eq!(decision_at_origin(&o), "rule=signed; action=allowed");
    assert_eq!(metric(&host, "pow_signature_verified"), 1);
    let flip = |name: &str, v: &str| {
        if name == "signature" {
            v.replacen("jdq0", "jdq1", 1)
        } else {
            v.to_owned()
        }
    };
    let unknown = |name: &str, v: &str| {
        if name == "signature-input" {
            v.replacen("poqk", "Xoqk", 1)
        } else {
            v.to_owned()
        }
    };
    for (authority, change, reason, count) in [
        (
            "example.com",
            &flip as &dyn Fn(&str, &str) -> String,
            "bad_signature",
            1,
        ),
        ("other.example", &as_is, "bad_signature", 2),
        ("example.com", &unknown, "unknown_key", 1),
    ] {
        let o = host.request(signed(authority, change)).unwrap();
        assert_eq!(challenge_of(&o).d, 8, "{reason}: a broken signature passed");
        let counter = format!("reason=.={reason};.;pow_signature_unsigned");
        assert_eq!(metric(&host, &counter), count, "{counter}");
    }
    host.set_time_nanos(1_735_693_201 * 1_000_000_000);
    let o = host.request(signed("example.com", &as_is)).unwrap();
    assert_eq!(challenge_of(&o).d, 8);
    assert_eq!(
        metric(&host, "reason=.=expired;.;pow_signature_unsigned"),
        1
    );
}
