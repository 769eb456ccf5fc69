use super::memo::Key;
use super::*;

fn policy(rules: &str, lists: &[&str]) -> CompiledPolicy {
    let config = PluginConfig::from_json(format!(r#"{{"rules": {rules}}}"#).as_bytes()).unwrap();
    let lists: Vec<String> = lists.iter().map(|s| (*s).to_owned()).collect();
    CompiledPolicy::compile(&config, &lists, &["chatgpt".to_owned()])
}

fn decide<'p, 'r>(
    p: &'p CompiledPolicy,
    f: Features<'r>,
    headers: &[(&str, &'r str)],
) -> Option<&'p str> {
    let lookup = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    p.decide(&f, &lookup)
        .and_then(|i| p.rules.get(i))
        .map(|r| r.name.as_str())
}

fn req<'a>(host: &'a str, path: &'a str, ua: &'a str) -> Features<'a> {
    Features {
        host,
        method: "GET",
        path,
        user_agent: ua,
        ..Features::default()
    }
}

#[test]
fn the_first_rule_that_matches_decides() {
    let p = policy(
        r#"[{"name": "login", "path": ["/login"], "action": "challenge", "difficulty": 20},
            {"name": "api", "host": ["api.example.org"], "action": "allow"},
            {"name": "subs", "host": ["*.example.net"], "method": ["POST"], "action": "deny"},
            {"name": "static", "path": ["/static/"], "action": "allow"},
            {"name": "bots", "user_agent": ["curl", "Wget"], "action": "deny"},
            {"name": "everything", "action": "challenge"}]"#,
        &[],
    );
    let ua = "Mozilla/5.0";
    for (method, host, path, user_agent, rule) in [
        ("GET", "api.example.org", "/login", ua, "login"),
        ("GET", "API.Example.org:443", "/x", ua, "api"),
        ("GET", "api.example.org.", "/x", ua, "api"),
        ("POST", "a.b.example.net", "/x", ua, "subs"),
        // `*.` is a proper suffix: not the apex, not a longer label.
        ("POST", "example.net", "/x", ua, "everything"),
        ("POST", "badexample.net", "/x", ua, "everything"),
        ("GET", "h", "/static/a.js", ua, "static"),
        ("GET", "h", "/static/", ua, "everything"),
        ("GET", "h", "/", "curl/8.5", "bots"),
        ("GET", "h", "/", "x WGET/1", "bots"),
        ("GET", "h", "/", ua, "everything"),
    ] {
        let features = Features {
            method,
            ..req(host, path, user_agent)
        };
        assert_eq!(
            decide(&p, features, &[]),
            Some(rule),
            "{method} {host}{path} {user_agent}"
        );
    }
}

#[test]
fn an_allow_path_matches_only_plain_paths_a_deny_path_also_lenient_ones() {
    let p = policy(
        r#"[{"name": "admin", "path": ["/admin/", "/wp-login.php"], "action": "deny"},
            {"name": "feed", "path": ["/feed"], "action": "allow"}]"#,
        &[],
    );
    for path in [
        "/admin/x",
        "/%61dmin/x",
        "/Admin/x",
        "/admin;jsessionid=1/x",
        "/static/../admin/x",
        "//admin/x",
        "/admin%2fx",
        "\\admin\\x",
        "/WP-LOGIN.PHP",
        "/wp-login.php;x",
    ] {
        assert_eq!(
            decide(&p, req("h", path, "UA"), &[]),
            Some("admin"),
            "{path}"
        );
    }
    assert_eq!(decide(&p, req("h", "/feed", "UA"), &[]), Some("feed"));
    for path in ["/feed;x", "/%66eed", "/x/../feed", "/Feed"] {
        assert_eq!(decide(&p, req("h", path, "UA"), &[]), None, "{path}");
    }
}

#[test]
fn headers_accept_lists_crawlers_and_agents() {
    let p = policy(
        r#"[{"name": "key", "header": {"x-api-key": "k1"}, "action": "allow"},
            {"name": "ajax", "header": {"x-requested-with": true, "accept-language": false}, "action": "deny"},
            {"name": "feeds", "accept": ["application/rss+xml", "application/atom+xml"], "action": "challenge", "kind": "refresh"},
            {"name": "tor", "lists": ["tor"], "action": "challenge", "difficulty": 20},
            {"name": "google", "crawler": ["googlebot"], "action": "allow"},
            {"name": "crawlers", "crawler": "any", "action": "allow"},
            {"name": "liars", "spoofed_crawler": true, "action": "deny"},
            {"name": "signed", "signed_agent": "any", "action": "allow"}]"#,
        &["tor", "googlebot", "bingbot"],
    );
    let f = req("h", "/", "UA");
    assert_eq!(decide(&p, f, &[("x-api-key", "k1")]), Some("key"));
    assert_eq!(decide(&p, f, &[("x-api-key", "k2")]), None);
    assert_eq!(decide(&p, f, &[("x-requested-with", "x")]), Some("ajax"));
    assert_eq!(
        decide(
            &p,
            f,
            &[("x-requested-with", "x"), ("accept-language", "en")]
        ),
        None
    );
    let feed = Features {
        accept: Some("application/atom+xml;q=0.9, text/html"),
        ..f
    };
    assert_eq!(decide(&p, feed, &[]), Some("feeds"));
    let browser = Features {
        accept: Some("text/html,*/*;q=0.8"),
        ..f
    };
    assert_eq!(decide(&p, browser, &[]), None);
    assert_eq!(decide(&p, Features { lists: 0b1, ..f }, &[]), Some("tor"));
    assert_eq!(decide(&p, Features { lists: 0b10, ..f }, &[]), None);
    assert_eq!(
        decide(
            &p,
            Features {
                crawlers: 0b10,
                ..f
            },
            &[]
        ),
        Some("google")
    );
    assert_eq!(
        decide(
            &p,
            Features {
                crawlers: 0b100,
                ..f
            },
            &[]
        ),
        Some("crawlers")
    );
    assert_eq!(
        decide(
            &p,
            Features {
                spoofed_crawler: true,
                ..f
            },
            &[]
        ),
        Some("liars")
    );
    assert_eq!(
        decide(
            &p,
            Features {
                signed_agent: Some(0),
                ..f
            },
            &[]
        ),
        Some("signed")
    );
}

#[test]
fn a_thousand_rules_index_like_one() {
    let rules: Vec<String> = (0..1000)
        .map(|i| format!(r#"{{"name": "r{i}", "user_agent": ["agent-{i}/"], "action": "deny"}}"#))
        .collect();
    let p = policy(&format!("[{}]", rules.join(",")), &[]);
    assert_eq!(
        decide(&p, req("h", "/", "x agent-999/1"), &[]),
        Some("r999")
    );
    assert_eq!(
        decide(&p, req("h", "/", "x agent-0/1 agent-500/"), &[]),
        Some("r0")
    );
    assert_eq!(decide(&p, req("h", "/", "Mozilla/5.0"), &[]), None);
}

#[test]
fn paths_and_hosts_are_matched_at_every_prefix_and_suffix() {
    let p = policy(
        r#"[{"name": "deep", "path": ["/a/b/c/"], "action": "allow"},
            {"name": "exact", "path": ["/a/b"], "action": "allow"},
            {"name": "area", "path": ["/Area/"], "action": "deny"},
            {"name": "sub", "host": ["*.b.example"], "action": "deny"},
            {"name": "top", "host": ["*.example"], "action": "challenge"}]"#,
        &[],
    );
    let ua = "UA";
    assert_eq!(decide(&p, req("h", "/a/b/c/d/e", ua), &[]), Some("deep"));
    assert_eq!(decide(&p, req("h", "/a/b", ua), &[]), Some("exact"));
    // Not plain: no `allow` path matches it, whatever its prefix.
    assert_eq!(decide(&p, req("h", "/a/b/c/../d", ua), &[]), None);
    assert_eq!(decide(&p, req("h", "/a/b/c//d", ua), &[]), None);
    assert_eq!(decide(&p, req("h", "/a/B", ua), &[]), None);
    // A `deny` entry with capitals matches as written and folded.
    assert_eq!(decide(&p, req("h", "/Area/x", ua), &[]), Some("area"));
    assert_eq!(decide(&p, req("h", "/area/x", ua), &[]), Some("area"));
    assert_eq!(decide(&p, req("h", "/AREA/x", ua), &[]), Some("area"));
    assert_eq!(
        decide(&p, req("x.y.B.Example:80", "/", ua), &[]),
        Some("sub")
    );
    assert_eq!(decide(&p, req("b.example", "/", ua), &[]), Some("top"));
    assert_eq!(decide(&p, req("example", "/", ua), &[]), None);
    assert_eq!(decide(&p, req("xexample", "/", ua), &[]), None);
}

#[test]
fn a_remembered_user_agent_decides_as_a_new_one() {
    let rules = r#"[{"name": "bots", "user_agent": ["curl", "bot"], "action": "deny"},
        {"name": "mobile", "user_agent": ["Mobile"], "path": ["/m/"], "action": "challenge"},
        {"name": "api", "user_agent": ["python"], "header": {"x-api-key": "k"}, "action": "allow"},
        {"name": "rest", "path": ["/m/"], "action": "allow"}]"#;
    let p = policy(rules, &[]);
    let uas: Vec<String> = (0..40)
        .map(|i| match i % 5 {
            0 => format!("curl/{i}"),
            1 => format!("Mozilla/5.0 Mobile {i}"),
            2 => format!("python-requests/{i}"),
            3 => format!("Mozilla/5.0 (X11) {i:04}"),
            _ => format!("GoogleBOT/{i}"),
        })
        .collect();
    let requests: [(&str, &[(&str, &str)]); 3] =
        [("/m/x", &[]), ("/", &[("x-api-key", "k")]), ("/", &[])];
    // Each User-Agent thrice in a row (a miss, then hits on other requests), then the next,
    // which in time pushes the oldest out: every decision as a policy that never saw one.
    for _ in 0..2 {
        for ua in &uas {
            for (path, headers) in requests {
                let f = req("h", path, ua);
                let fresh = policy(rules, &[]);
                assert_eq!(
                    decide(&p, f, headers),
                    decide(&fresh, f, headers),
                    "{ua} {path}"
                );
                assert!(
                    p.user_agent_memo
                        .borrow()
                        .get(Key::new(ua.as_bytes()))
                        .is_some()
                );
            }
        }
    }
    assert!(
        p.user_agent_memo
            .borrow()
            .get(Key::new(uas[0].as_bytes()))
            .is_none()
    );
}

#[test]
fn a_remembered_host_decides_as_a_new_one() {
    let rules = r#"[{"name": "api", "host": ["api.example.org"], "path": ["/v1/"], "action": "allow"},
        {"name": "subs", "host": ["*.example.net"], "user_agent": ["curl"], "action": "deny"},
        {"name": "apex", "host": ["example.net"], "action": "challenge"}]"#;
    let p = policy(rules, &[]);
    let hosts: Vec<String> = (0..40)
        .map(|i| match i % 5 {
            0 => "api.example.org".to_owned(),
            1 => format!("API.Example.org:{i}"),
            2 => format!("s{i}.example.net"),
            3 => format!("Example.NET.:{i}"),
            _ => format!("other-{i:02}.example.org"),
        })
        .collect();
    let requests = [
        ("/v1/x", "curl/8"),
        ("/", "curl/8"),
        ("/v1/", "Mozilla/5.0"),
    ];
    for _ in 0..2 {
        for host in &hosts {
            for (path, ua) in requests {
                let f = req(host, path, ua);
                let fresh = policy(rules, &[]);
                assert_eq!(decide(&p, f, &[]), decide(&fresh, f, &[]), "{host} {path}");
                assert!(
                    p.host_memo
                        .borrow()
                        .get(Key::new(host.as_bytes()))
                        .is_some()
                );
            }
        }
    }
}
