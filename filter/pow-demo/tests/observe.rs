//! The demo edge seen as an operator sees the real one: a real Prometheus (built at its pin)
//! scrapes the demo's `/stats/prometheus` while a scripted mix of visitors goes through the
//! real release module (browsers solving, forged cookies and solutions, a replay, listed and
//! unlisted addresses, a verified and a spoofed crawler); every query of the dashboard and every
//! alert's expression is then evaluated on that Prometheus. And the live page, in headless
//! Chromium, shows the numbers the metrics endpoint serves.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pow_demo::observe::samples;
use pow_demo::{self as demo, Demo};
use serde_json::{Value, json};
use testkit::process::Running;
use testkit::skip_or_fail;

mod common;
use common::{agent, workspace};

/// The policy of the mix: Tor and hosting networks challenged, Google's crawler let through
/// from its ranges and denied from elsewhere, everybody else let through.
fn plugin_config() -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let generated = pop_common::time::rfc3339(now - 600);
    json!({
        "mode": "listed", "secret_env": demo::SECRET_ENV, "difficulty": 4,
        "list_difficulty": {"tor": 6, "hosting": 4},
        "lists": {
            "version": generated, "generated_at": generated,
            "sets": {
                "tor": "185.220.101.0/24",
                "hosting": "203.0.113.0/24",
                "googlebot": "192.178.4.0/24",
            },
            "tokens": {"googlebot": ["Googlebot"]},
        },
        "rules": [
            {"name": "search-crawlers", "crawler": ["googlebot"], "action": "allow"},
            {"name": "spoofed-crawlers", "spoofed_crawler": true, "action": "deny"},
        ],
    })
}

/// The demo with the mix's policy, trusting one proxy (the test) to say each visitor's address
/// in `X-Forwarded-For`; `None` after a skip without the release module.
fn start_demo(test: &str) -> Option<Demo> {
    let mut config = common::demo_config(test, None, None)?;
    config.plugin_config = plugin_config().to_string();
    config.trusted_hops = 1;
    Some(Demo::start(&config).unwrap())
}

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) Chrome/140";
const GOOGLEBOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

/// One visit: its status, its `set-cookie`, its body.
fn visit(
    demo: &Demo,
    from: &str,
    ua: &str,
    path: &str,
    cookie: Option<&str>,
) -> (u16, String, String) {
    let url = format!("{}{}", demo.url().trim_end_matches('/'), path);
    let mut request = agent()
        .get(&url)
        .header("x-forwarded-for", from)
        .header("user-agent", ua)
        .header("accept", "text/html");
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let mut response = request.call().unwrap();
    let set_cookie = response
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let status = response.status().as_u16();
    (
        status,
        set_cookie,
        response.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// What the mix sent, by what it expects the filter to have counted.
#[derive(Debug, Default)]
struct Mix {
    solved: u64,
    forged_cookies: u64,
    forged_solutions: u64,
    replays: u64,
    crawlers: u64,
    spoofed: u64,
    unlisted: u64,
}

/// The visitors: browsers from Tor solving and coming back on their cookie, forged cookies and
/// solutions, a replayed solution, a script on a hosting network, Google's crawler from its
/// ranges and from elsewhere, and browsers at home.
fn run_mix(demo: &Demo) -> Mix {
    let mut mix = Mix::default();
    for i in 1..=3 {
        let from = format!("185.220.101.{i}");
        let (status, _, page) = visit(demo, &from, BROWSER, "/article", None);
        assert_eq!(status, 403);
        let answer = demo::answer_challenge(&page, 1 << 24).unwrap();
        let (status, cookie, _) = visit(demo, &from, BROWSER, &answer, None);
        assert_eq!(status, 303, "{answer}");
        mix.solved += 1;
        let pair = cookie.split(';').next().unwrap().to_owned();
        assert_eq!(visit(demo, &from, BROWSER, "/article", Some(&pair)).0, 200);
        if i == 1 {
            assert_eq!(visit(demo, &from, BROWSER, &answer, None).0, 403);
            mix.replays += 1;
        }
        let forged = answer.replace("&n=", "&n=f");
        assert_eq!(visit(demo, &from, BROWSER, &forged, None).0, 403);
        mix.forged_solutions += 1;
    }
    for i in 1..=2 {
        let cookie = format!("pow_clearance=9999999999.6.{}", "ab".repeat(16 + i));
        assert_eq!(
            visit(demo, "185.220.101.9", BROWSER, "/", Some(&cookie)).0,
            403
        );
        mix.forged_cookies += 1;
    }
    assert_eq!(
        visit(demo, "203.0.113.9", "python-requests/2.32", "/", None).0,
        403
    );
    for _ in 0..2 {
        assert_eq!(visit(demo, "192.178.4.7", GOOGLEBOT, "/", None).0, 200);
        mix.crawlers += 1;
    }
    assert_eq!(visit(demo, "198.18.0.9", GOOGLEBOT, "/", None).0, 403);
    mix.spoofed += 1;
    for i in 1..=4 {
        assert_eq!(
            visit(demo, &format!("198.51.100.{i}"), BROWSER, "/", None).0,
            200
        );
        mix.unlisted += 1;
    }
    mix
}

/// A Prometheus at its pin scraping `target` every second, or `None` after a skip.
struct Prometheus {
    _process: Running,
    _dir: tempfile::TempDir,
    url: String,
}

impl Prometheus {
    /// Scraping the demo as a PodMonitor would (its namespace and pod as target labels), and
    /// the `extra_jobs` (YAML list items of `scrape_configs`).
    fn start(test: &str, target: SocketAddr, rules: &Path, extra_jobs: &str) -> Option<Prometheus> {
        let binary = testkit::upstream::program(test, "prometheus")?;
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files: [{rules:?}]\n\
             scrape_configs:\n  - job_name: edge-gateway\n    metrics_path: {path}\n    \
             static_configs: [{{targets: ['{target}'], \
             labels: {{namespace: edge, pod: edge-gateway-demo}}}}]\n{extra_jobs}",
            rules = rules.display().to_string(),
            path = pow_core::filter::metric::METRICS_PATH,
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let listen = format!("127.0.0.1:{}", testkit::free_port());
        let mut process = Running::spawn(
            Command::new(binary)
                .arg(format!(
                    "--config.file={}",
                    dir.path().join("prometheus.yml").display()
                ))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address={listen}")),
        );
        process.wait_for_line("Server is ready to receive web requests");
        Some(Prometheus {
            _process: process,
            _dir: dir,
            url: format!("http://{listen}"),
        })
    }

    /// An instant query's result vector (the query must be valid).
    /// The rules of the one group the rule file holds, as Prometheus loaded them.
    fn rules(&self) -> Value {
        let mut response = agent()
            .get(&format!("{}/api/v1/rules", self.url))
            .call()
            .unwrap();
        let rules: Value =
            serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
        rules["data"]["groups"][0]["rules"].clone()
    }

    fn query(&self, promql: &str) -> Vec<Value> {
        let mut response = agent()
            .get(&format!("{}/api/v1/query", self.url))
            .query("query", promql)
            .call()
            .unwrap();
        let body: Value =
            serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
        assert_eq!(body["status"], "success", "{promql}: {body}");
        body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The one value of a query that returns one series.
    fn value(&self, promql: &str) -> f64 {
        let result = self.query(promql);
        assert_eq!(result.len(), 1, "{promql}: {result:?}");
        result[0]["value"][1].as_str().unwrap().parse().unwrap()
    }

    /// Waits (bounded) until the last scrape holds what the endpoint serves now, and a minute's
    /// rates have samples to work on.
    fn caught_up(&self, demo_metrics: &str) {
        let issued = current(demo_metrics, "pow_challenges_issued{}");
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let scraped = self.query("sum(pow_challenges_issued)");
            let samples = self.query("count_over_time(pow_challenges_issued[1m])");
            let got = scraped
                .first()
                .map(|s| s["value"][1].as_str().unwrap().parse::<f64>().unwrap());
            let enough = samples
                .first()
                .is_some_and(|s| s["value"][1].as_str().unwrap().parse::<f64>().unwrap() >= 3.0);
            if got == Some(issued) && enough {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus never scraped {issued} challenges"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// The metrics endpoint's text now.
fn metrics_text(demo: &Demo) -> String {
    agent()
        .get(&demo.metrics_url())
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}

/// One series' value in a text, by `name{labels}`.
fn current(text: &str, series: &str) -> f64 {
    samples(text)
        .into_iter()
        .find(|s| s.series() == series)
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
        .value
}

/// Every PromQL expression of the dashboard, with Grafana's `$__rate_interval` as one minute.
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace().join("k8s/observability/pow-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{}",
            panel["title"]
        );
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m");
            queries.push((panel["title"].as_str().unwrap().to_owned(), expr));
        }
    }
    queries
}

/// The labels of a result's series, for one label name.
fn label_values(result: &[Value], label: &str) -> Vec<String> {
    result
        .iter()
        .filter_map(|s| s["metric"][label].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn prometheus_scrapes_the_demo_and_every_panel_and_alert_reads_the_mix() {
    let test = "prometheus_scrapes_the_demo_and_every_panel_and_alert_reads_the_mix";
    let Some(demo) = start_demo(test) else { return };
    let rules = workspace().join("k8s/observability/pow-alerts.yaml");
    let target: SocketAddr = demo.metrics_url()["http://".len()..]
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let cert_manager = cert_manager_metrics();
    let cert_job = format!(
        "  - job_name: cert-manager\n    static_configs: [{{targets: ['{}'], \
         labels: {{namespace: cert-manager, pod: cert-manager-demo}}}}]\n",
        cert_manager.url.trim_start_matches("http://")
    );
    let Some(prometheus) = Prometheus::start(test, target, &rules, &cert_job) else {
        return;
    };
    let mix = run_mix(&demo);
    let text = metrics_text(&demo);
    prometheus.caught_up(&text);

    assert_the_mix_is_counted(&prometheus, &mix, &text);
    assert_every_panel_reads_the_mix(&prometheus);
    assert_every_alert_reads_the_mix(&prometheus);
    assert_the_certificate_alert_reads_cert_managers_series_as_scraped(&prometheus);
    demo.stop();
}

/// What the mix did, as Prometheus has it, and each value the endpoint serves.
fn assert_the_mix_is_counted(prometheus: &Prometheus, mix: &Mix, text: &str) {
    let at = |promql: &str| prometheus.value(promql);
    assert_eq!(at("sum(pow_challenges_solved)"), mix.solved as f64);
    assert_eq!(
        at("sum(pow_verify_failed{reason=\"replay\"})"),
        mix.replays as f64
    );
    assert_eq!(
        at("sum(pow_verify_failed{reason=~\"work|mac|malformed\"})"),
        mix.forged_solutions as f64
    );
    assert_eq!(at("sum(pow_cookie_invalid)"), mix.forged_cookies as f64);
    assert_eq!(
        at("sum(pow_crawlers_passed{list=\"googlebot\"})"),
        mix.crawlers as f64
    );
    assert_eq!(
        at("sum(pow_decisions{rule=\"spoofed-crawlers\",action=\"denied\"})"),
        mix.spoofed as f64
    );
    assert_eq!(
        at("sum(pow_decisions{rule=\"default\",action=\"allowed\"})"),
        mix.unlisted as f64
    );
    assert_eq!(
        at("sum(pow_decisions{rule=\"list.tor\",action=\"cleared\"})"),
        3.0
    );
    assert_eq!(at("sum(pow_solve_seconds_count)"), mix.solved as f64);
    assert_eq!(at("max(pow_list_prefixes{list=\"tor\"})"), 1.0);
    // Each value scraped is the endpoint's (the buckets aside: Prometheus 3 writes their `le`
    // as a float, `1.0` for Envoy's `1`; their count and sum are compared).
    for sample in samples(text) {
        let changing = sample.name.starts_with("pow_lists_age") || sample.name.ends_with("_bucket");
        if sample.name.starts_with("pow_") && !changing {
            let selector = if sample.labels.is_empty() {
                sample.name.clone()
            } else {
                sample.series()
            };
            assert_eq!(at(&format!("sum({selector})")), sample.value, "{selector}");
        }
    }
}

/// Every panel's queries return series, with the labels the mix produced.
fn assert_every_panel_reads_the_mix(prometheus: &Prometheus) {
    let mut by_query = BTreeMap::new();
    for (title, expr) in dashboard_queries() {
        let result = prometheus.query(&expr);
        assert!(!result.is_empty(), "panel {title}: {expr} returned nothing");
        by_query.insert(expr, result);
    }
    let actions = label_values(
        &by_query["sum by (action) (rate(pow_decisions[1m]))"],
        "action",
    );
    for action in ["allowed", "cleared", "denied", "challenged"] {
        assert!(
            actions.contains(&action.to_owned()),
            "{action} in {actions:?}"
        );
    }
    let reasons = label_values(
        &by_query["sum by (reason) (rate(pow_verify_failed[1m]))"],
        "reason",
    );
    assert!(reasons.contains(&"replay".to_owned()), "{reasons:?}");
    let lists = label_values(&by_query["max by (list) (pow_list_prefixes)"], "list");
    assert_eq!(lists.len(), 3, "{lists:?}");
}

/// Every alert, as the Prometheus that loaded the rule file has it: its expression is valid
/// here, each filter metric it reads has series, and a healthy mix fires none of them.
fn assert_every_alert_reads_the_mix(prometheus: &Prometheus) {
    let rules = prometheus.rules();
    let loaded = rules.as_array().unwrap();
    let alerts = std::fs::read_to_string(workspace().join("k8s/observability/pow-alerts.yaml"))
        .unwrap()
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert: "))
        .count();
    assert_eq!(loaded.len(), alerts, "{rules}");
    for rule in loaded {
        let expr = rule["query"].as_str().unwrap();
        let name = rule["name"].as_str().unwrap();
        assert_eq!(rule["health"], "ok", "{name}: {rule}");
        assert!(prometheus.query(expr).is_empty(), "{name} fires on the mix");
        for metric in metric_names(expr) {
            // The demo serves Envoy's server.live as the gateway's pod does: the alert that
            // reads it stays silent because the filter's metrics are there.
            if metric.starts_with("envoy_") {
                assert!(
                    !prometheus.query(&metric).is_empty(),
                    "{name}: no {metric} scraped"
                );
            }
            if metric.starts_with("pow_") {
                assert!(
                    pow_core::filter::metric::FAMILIES.contains(&metric.as_str()),
                    "{name} reads {metric}, which the filter does not define"
                );
                assert!(
                    !prometheus.query(&metric).is_empty(),
                    "{name}: no {metric} scraped"
                );
            }
        }
    }
}

/// cert-manager's controller as it exports a Certificate's expiry: named by the Certificate and
/// labelled with its namespace and issuer (cert-manager v1.21.2 `pkg/metrics/metrics.go` 19,
/// `pkg/metrics/certificates_test.go` 94), for two edge Certificates 20 and 60 days from expiry.
fn cert_manager_metrics() -> testkit::http::Server {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut text = String::from(
        "# HELP certmanager_certificate_expiration_timestamp_seconds The timestamp after which \
         the certificate expires, expressed in Unix Epoch Time.\n\
         # TYPE certmanager_certificate_expiration_timestamp_seconds gauge\n",
    );
    for (name, days) in [("edge-www", 20), ("edge-api", 60)] {
        text.push_str(&format!(
            "certmanager_certificate_expiration_timestamp_seconds{{issuer_group=\"cert-manager.io\",\
             issuer_kind=\"ClusterIssuer\",issuer_name=\"letsencrypt-staging\",name=\"{name}\",\
             namespace=\"edge\"}} {}\n",
            now + days * 86_400
        ));
    }
    let reply = testkit::http::Reply::Headers {
        status: 200,
        headers: vec![(
            "content-type".to_owned(),
            "text/plain; version=0.0.4; charset=utf-8".to_owned(),
        )],
        body: text.into_bytes(),
    };
    testkit::http::Server::routes(vec![("GET", "/metrics".to_owned(), reply)]).unwrap()
}

/// Scraped from cert-manager's own pod, the Certificate's namespace label is renamed
/// `exported_namespace` by Prometheus; the certificate alert reads it there: silent at 20 days
/// from expiry, and the same expression with a 30-day threshold finds exactly that certificate.
fn assert_the_certificate_alert_reads_cert_managers_series_as_scraped(prometheus: &Prometheus) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let selector = "certmanager_certificate_expiration_timestamp_seconds";
    while prometheus.query(selector).len() < 2 {
        assert!(Instant::now() < deadline, "cert-manager was never scraped");
        std::thread::sleep(Duration::from_millis(500));
    }
    let renamed = prometheus.query(&format!(
        "{selector}{{namespace=\"cert-manager\",exported_namespace=\"edge\"}}"
    ));
    assert_eq!(renamed.len(), 2, "{renamed:?}");
    let rules = prometheus.rules();
    let alert = rules
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "EdgeCertificateExpiringSoon")
        .unwrap();
    let expr = alert["query"].as_str().unwrap();
    assert!(prometheus.query(expr).is_empty(), "{expr}");
    let within_30_days = expr.replace("14 * 24 * 3600", "30 * 24 * 3600");
    assert_ne!(within_30_days, expr, "the threshold moved: {expr}");
    let found = prometheus.query(&within_30_days);
    assert_eq!(label_values(&found, "name"), ["edge-www"], "{found:?}");
}

/// The metric names an expression reads: the filter's (`pow_`), cert-manager's and the Gateway
/// state's identifiers that are not function calls.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_alphabetic() || bytes[i] == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &expr[start..i];
            let next = expr[i..].trim_start().chars().next();
            let is_call = next == Some('(');
            if (word.starts_with("pow_")
                || word.starts_with("envoy_")
                || word.contains("_seconds")
                || word.starts_with("gatewayapi_"))
                && !is_call
            {
                names.push(word.to_owned());
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Headless Chromium on `url`: its DOM once loaded (`--dump-dom`), or a screenshot into `png`.
fn chromium(browser: &str, url: &str, png: Option<&Path>) -> String {
    let mut command = Command::new(browser);
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
    ]);
    match png {
        Some(png) => command
            .arg(format!("--screenshot={}", png.display()))
            .arg("--window-size=900,1700"),
        None => command.arg("--dump-dom"),
    };
    let out = command.arg(url).output().unwrap();
    assert!(out.status.success(), "{}", testkit::process::text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_live_page_in_chromium_shows_the_numbers_the_metrics_endpoint_serves() {
    let test = "the_live_page_in_chromium_shows_the_numbers_the_metrics_endpoint_serves";
    let browser = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    if !Path::new(&browser).is_file() {
        skip_or_fail(test, &format!("chromium ({browser})"));
        return;
    }
    let Some(demo) = start_demo(test) else { return };
    run_mix(&demo);
    let dom = chromium(&browser, &demo.live_url(), None);
    let text = metrics_text(&demo);
    let shown: Vec<(String, f64)> = dom
        .split("data-series=\"")
        .skip(1)
        .map(|rest| {
            let (series, rest) = rest.split_once('"').unwrap();
            let value = rest[1..].split('<').next().unwrap();
            (series.replace("&quot;", "\""), value.parse().unwrap())
        })
        .collect();
    assert!(shown.len() >= 20, "{dom}");
    for (series, value) in &shown {
        assert_eq!(*value, current(&text, series), "{series}");
    }
    for series in [
        "pow_decisions{rule=\"list.tor\",action=\"challenged\"}",
        "pow_verify_failed{reason=\"replay\"}",
        "pow_crawlers_passed{list=\"googlebot\"}",
    ] {
        assert!(
            shown.iter().any(|(s, _)| s == series),
            "{series} not on the page"
        );
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map_or_else(|_| workspace().join("target"), PathBuf::from);
    let png = target.join("pow-demo-live-page.png");
    chromium(&browser, &demo.live_url(), Some(&png));
    assert!(std::fs::metadata(&png).unwrap().len() > 10_000);
    eprintln!("the live page: {}", png.display());
    demo.stop();
}
