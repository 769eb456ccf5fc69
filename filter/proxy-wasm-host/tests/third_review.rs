//! The third adversarial review's findings, replayed on the real `pow_filter.wasm`: cookie names
//! that only look like the clearance cookie's, a valid cookie behind a stale `__Host-` one,
//! bypassed paths that keep their query, headers that name another site, hosts longer than a DNS
//! name, a restart that lowers the challenge TTL, Teredo clients, and list entries written in an
//! IPv6 form of IPv4.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use crate::common::*;

const FROM: &str = "198.51.100.20:40000";
/// Listed as `tor` (10 bits) by [`plugin_config`].
const TOR_EXIT: &str = "185.220.101.7:40000";

/// Every Unicode White_Space code point outside ASCII: `str::trim` strips them all, browsers
/// keep them in a cookie's name.
const UNICODE_SPACES: [char; 19] = [
    '\u{85}', '\u{a0}', '\u{1680}', '\u{2000}', '\u{2001}', '\u{2002}', '\u{2003}', '\u{2004}',
    '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}', '\u{200a}', '\u{2028}', '\u{2029}',
    '\u{202f}', '\u{205f}', '\u{3000}',
];

/// A clearance cookie for [`FROM`] in the browser of [`browser`], over https: its `name=value`.
fn clearance(host: &mut Host) -> String {
    clearance_for(host, "/", FROM)
}

/// The value of a `name=value` pair with its MAC's last digit changed: well formed, fresh,
/// forged.
fn forged(pair: &str) -> String {
    let value = pair.split_once('=').unwrap().1;
    let last = value.chars().last().unwrap();
    format!(
        "{}{}",
        &value[..value.len() - 1],
        if last == '0' { '1' } else { '0' }
    )
}

/// A sibling subdomain sets a cookie whose name is `__Host-pow_clearance` behind (or followed
/// by) Unicode whitespace: to a browser an ordinary cookie, which may carry `Domain=` and which
/// it sends first. It must never be taken for ours, nor hide ours.
#[test]
fn lookalike_cookie_names_never_hide_the_clearance_cookie() {
    let test = "lookalike_cookie_names_never_hide_the_clearance_cookie";
    let Some(mut host) = start(test, "all") else {
        return;
    };
    let good = clearance(&mut host);
    let fake = forged(&good);
    let passes = |host: &mut Host, cookie: &str| {
        is_continue(
            &host
                .request(browser("/", FROM).header("cookie", cookie))
                .unwrap(),
        )
    };
    for space in UNICODE_SPACES {
        for lookalike in [
            format!("{space}__Host-pow_clearance"),
            format!("__Host-pow_clearance{space}"),
        ] {
            let header = format!("{lookalike}={fake}; {good}");
            assert!(passes(&mut host, &header), "{header:?} hid the cookie");
            // And a lookalike holding a valid value is not ours either.
            let valid = good.split_once('=').unwrap().1;
            let header = format!("{lookalike}={valid}");
            assert!(!passes(&mut host, &header), "{header:?} was taken for ours");
        }
    }
    // The header Chromium and Firefox sent, as the review captured it: a U+2000 lookalike
    // set by evil.example.test for the parent domain, then the edge's own cookie.
    let captured = format!(
        "\u{2000}__Host-pow_clearance=4102444800.32.{}; {good}",
        "0".repeat(64)
    );
    assert!(passes(&mut host, &captured));
    // More than one `__Host-` pair (several Cookie headers, a browser's bug): the first few are
    // checked, not only the first.
    let two = format!("__Host-pow_clearance={fake}; {good}");
    assert!(
        passes(&mut host, &two),
        "a stale __Host- pair hid a valid one"
    );
}

/// Over https a valid cookie under the name without the prefix (set over plain http, or by the
/// previous version) still clears when a stale `__Host-` one stands after it, as filter/README.md
/// says.
#[test]
fn a_valid_plain_cookie_before_a_stale_host_cookie_clears() {
    let test = "a_valid_plain_cookie_before_a_stale_host_cookie_clears";
    let Some(mut host) = start(test, "all") else {
        return;
    };
    let good = clearance(&mut host);
    let value = good.split_once('=').unwrap().1;
    let header = format!(
        "pow_clearance={value}; __Host-pow_clearance={}",
        forged(&good)
    );
    assert_passes_with(&mut host, FROM, &header);
}

/// A bypassed path never takes its query to the origin: front controllers route by it
/// (OpenCart `?route=`, Joomla `?option=`, Drupal 7 `?q=`, `try_files $uri /index.php?$args`),
/// so an unpaid client would reach any page through `/robots.txt?q=node/1`.
#[test]
fn bypassed_paths_reach_the_origin_without_their_query() {
    let test = "bypassed_paths_reach_the_origin_without_their_query";
    let Some(mut host) = start(test, "all") else {
        return;
    };
    for (path, bare) in [
        (
            "/.well-known/acme-challenge/x?route=product/product&product_id=42",
            "/.well-known/acme-challenge/x",
        ),
        (
            "/.well-known/acme-challenge/x?option=com_content&view=article&id=1",
            "/.well-known/acme-challenge/x",
        ),
        ("/robots.txt?q=node/1", "/robots.txt"),
        ("/favicon.ico?page_id=2", "/favicon.ico"),
        ("/robots.txt?", "/robots.txt"),
        ("/robots.txt#frag", "/robots.txt"),
        ("/robots.txt", "/robots.txt"),
    ] {
        for method in ["GET", "HEAD"] {
            let request = Request {
                method: method.into(),
                ..browser(path, TOR_EXIT)
            };
            let o = host.request(request).unwrap();
            let Outcome::Continue { headers } = &o else {
                panic!("{method} {path} was not bypassed: {o:?}");
            };
            assert_eq!(header(headers, ":path"), Some(bare), "{method} {path}");
        }
    }
    // A path that is not bypassed keeps its query once paid for.
    let cookie = clearance(&mut host);
    let o = host
        .request(browser("/search?q=x", FROM).header("cookie", &cookie))
        .unwrap();
    let Outcome::Continue { headers } = &o else {
        panic!("{o:?}");
    };
    assert_eq!(header(headers, ":path"), Some("/search?q=x"));
}

/// The headers by which an origin behind a trusted proxy picks the site (Django's
/// `USE_X_FORWARDED_HOST`, Rails, Express, Symfony and Laravel trusted proxies) never reach it:
/// a cookie paid for one host would otherwise serve another, every host going to one origin.
#[test]
fn headers_that_name_another_site_never_reach_the_origin() {
    let test = "headers_that_name_another_site_never_reach_the_origin";
    let Some(mut host) = start(test, "all") else {
        return;
    };
    let Some(mut listed) = start(test, "listed") else {
        return;
    };
    let cookie = clearance(&mut host);
    let crossing = |r: Request| {
        r.header("x-forwarded-host", "site-b.example")
            .header("forwarded", "host=site-b.example;proto=https")
            .header("x-host", "site-b.example")
            .header("x-forwarded-server", "site-b.example")
    };
    let outcomes = [
        (
            "cleared",
            host.request(crossing(browser("/", FROM).header("cookie", &cookie)))
                .unwrap(),
        ),
        (
            "bypassed",
            host.request(crossing(browser("/robots.txt", FROM)))
                .unwrap(),
        ),
        (
            "not listed",
            listed.request(crossing(browser("/", "8.8.8.8:1"))).unwrap(),
        ),
    ];
    for (what, o) in outcomes {
        let Outcome::Continue { headers } = &o else {
            panic!("{what}: expected Continue: {o:?}")
        };
        for name in [
            "x-forwarded-host",
            "forwarded",
            "x-host",
            "x-forwarded-server",
        ] {
            assert!(
                header(headers, name).is_none(),
                "{what}: {name} reached the origin"
            );
        }
    }
}

/// No DNS name is longer than 253 bytes: a longer `:authority` is no site's, so nothing is
/// bound to it. A cookie paid at one overlong host used to clear every other (they were all one
/// "overlong" host).
#[test]
fn a_host_longer_than_a_dns_name_is_never_cleared() {
    let test = "a_host_longer_than_a_dns_name_is_never_cleared";
    let Some(mut host) = start(test, "all") else {
        return;
    };
    let label = |c: &str| c.repeat(63);
    let site_a = format!(
        "{}.{}.{}.{}.site-a.example",
        label("a"),
        label("a"),
        label("a"),
        label("a")
    );
    let site_b = format!(
        "{}.{}.{}.{}.site-b.example",
        label("b"),
        label("c"),
        label("d"),
        label("e")
    );
    let at = |authority: &str, path: &str| Request {
        authority: authority.to_owned(),
        ..browser(path, FROM)
    };
    // Whatever the module answers at site A, nothing it hands out clears site B or the literal
    // host the overlong ones were once bound as.
    let first = host.request(at(&site_a, "/")).unwrap();
    if let Outcome::Local { status: 403, .. } = first {
        let ch = challenge_of(&first);
        let url = verify_url(&ch, solve(&ch), &ch.r);
        let answer = host.request(at(&site_a, &url)).unwrap();
        if let Outcome::Local { status: 303, .. } = answer {
            let cookie = pair(&set_cookie(&answer)).to_owned();
            for other in [site_b.as_str(), "(overlong)", site_a.as_str()] {
                let o = host
                    .request(at(other, "/").header("cookie", &cookie))
                    .unwrap();
                assert!(
                    !is_continue(&o),
                    "the cookie of {site_a:.20}… cleared {other:.20}"
                );
            }
        }
    }
    // It is told plainly, and its verify requests are refused as malformed.
    for authority in [&site_a, &site_b] {
        let (status, _, body) = local(&host.request(at(authority, "/")).unwrap());
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("longer than a DNS name"), "{body}");
    }
    let ch = challenge_of(&host.request(browser("/", FROM)).unwrap());
    let url = verify_url(&ch, solve(&ch), &ch.r);
    let (status, headers, _) = local(&host.request(at(&site_a, &url)).unwrap());
    assert_eq!(
        (status, header(&headers, "pow-verify")),
        (403, Some("malformed"))
    );
    assert_eq!(metric(&host, "pow_host_overlong"), 3);
    // The longest host a DNS name and a port make is bound as usual.
    let longest = format!(
        "{}.{}.{}.{}:65535",
        label("a"),
        label("b"),
        label("c"),
        "d".repeat(61)
    );
    assert_eq!(longest.len(), 259);
    let ch = challenge_of(&host.request(at(&longest, "/")).unwrap());
    let url = verify_url(&ch, solve(&ch), &ch.r);
    set_cookie(&host.request(at(&longest, &url)).unwrap());
}

/// A solution spent before a restart stays spent when the restart also lowers the challenge
/// TTL: the seen-set's "issued before I started" reads the issue time the challenge carries,
/// not one derived from the TTL now in force.
#[test]
fn a_restart_that_lowers_the_challenge_ttl_does_not_reopen_spent_solutions() {
    let test = "a_restart_that_lowers_the_challenge_ttl_does_not_reopen_spent_solutions";
    let Some(wasm) = module(test) else {
        return;
    };
    let at = |secs: u64, ttl: u64| {
        load_at(
            &wasm,
            plugin_config("all", &format!(r#""challenge_ttl_secs": {ttl},"#)),
            secret_env(),
            secs,
        )
    };
    let mut before = at(T0, 300);
    let (url, _) = verified(&mut before, "/", FROM);
    let mut after = at(T0 + 200, 60);
    after.set_time_nanos((T0 + 245) * 1_000_000_000);
    let (status, headers, _) = local(&after.request(browser(&url, FROM)).unwrap());
    let reason = header(&headers, "pow-verify");
    assert_eq!(status, 403, "spent before the restart, accepted after it");
    assert!(matches!(reason, Some("replay" | "expired")), "{reason:?}");
    // A challenge issued after the restart verifies as usual under the new TTL.
    verified(&mut after, "/", FROM);
}

/// Teredo (`2001::/32`, RFC 4380) carries the client's IPv4 address, inverted, in its last 32
/// bits: read as that address, a listed client cannot escape the lists through a Teredo relay,
/// and the clients of one Teredo server do not share one cookie.
#[test]
fn teredo_clients_are_read_as_their_ipv4_address() {
    let test = "teredo_clients_are_read_as_their_ipv4_address";
    let Some(mut listed) = start(test, "listed") else {
        return;
    };
    // 185.220.101.7 (listed as tor), behind the Teredo server 65.54.227.120.
    let o = listed
        .request(browser("/", "[2001:0:4136:e378:8000:63bf:4623:9af8]:40000"))
        .unwrap();
    assert!(!is_continue(&o), "a listed Teredo client escaped the lists");
    assert_eq!(challenge_of(&o).d, 10);
    let Some(mut host) = start(test, "all") else {
        return;
    };
    // 192.0.2.45, through the same server.
    let from = "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:40000";
    let cookie = clearance_for(&mut host, "/", from);
    assert_cookie_passes_from(
        &mut host,
        &cookie,
        &[
            // 192.0.2.200: the same /24.
            ("[2001:0:4136:e378:8000:63bf:3fff:fd37]:1", true),
            ("192.0.2.9:1", true),
            // 203.0.115.14, another client of the same server.
            ("[2001:0:4136:e378:8000:63bf:34ff:8cf1]:1", false),
        ],
    );
}

/// List entries written in an IPv6 form of IPv4 (mapped, 6to4, NAT64, Teredo) match the
/// addresses they denote, as the filter reads addresses; a whole embedding range names no IPv4
/// client and lists none.
#[test]
fn list_entries_in_an_ipv6_form_of_ipv4_match_what_they_denote() {
    let test = "list_entries_in_an_ipv6_form_of_ipv4_match_what_they_denote";
    let config = br#"{"mode": "listed", "difficulty": 8,
        "lists": {"version": "v", "sets": {
            "bad": "::ffff:198.51.100.0/120 2002:cb00:7100::/40 64:ff9b::c000:200/120\n2001:0:4136:e378:8000:63bf:b3ff:fe00/120",
            "tunnels": "2002::/16 2001::/32"}}}"#;
    let Some(mut host) = start_with(test, config.to_vec(), secret_env()) else {
        return;
    };
    for from in [
        "198.51.100.7:1",
        "[::ffff:198.51.100.7]:1",
        "[2002:cb00:7105::1]:1",
        "203.0.113.5:1",
        "[64:ff9b::c000:207]:1",
        "192.0.2.7:1",
        // 76.0.1.9, as Teredo carries it, and as it is.
        "[2001:0:4136:e378:8000:63bf:b3ff:fef6]:1",
        "76.0.1.9:1",
    ] {
        let o = host.request(browser("/", from)).unwrap();
        assert!(!is_continue(&o), "{from} is listed and passed");
    }
    // `2002::/16` and `2001::/32` are not every IPv4 address.
    for from in ["8.8.8.8:1", "[2a00:1450::1]:1"] {
        let o = host.request(browser("/", from)).unwrap();
        assert!(is_continue(&o), "{from} is listed by nothing: {o:?}");
    }
}
