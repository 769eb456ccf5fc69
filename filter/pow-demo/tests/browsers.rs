//! The demo edge end to end over loopback HTTP, with the real release `pow_filter.wasm`: the
//! challenge, the answer, the clearance cookie, the origin; and real browsers doing the same
//! through the page's own solver: headless Chromium (playwright-core) and headless Firefox ESR
//! (Debian's package, driven over WebDriver BiDi by puppeteer-core).

// Helpers outside #[test] fns may unwrap too: a failure there is a failed test.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pow_demo::{self as demo, Demo};
use testkit::skip_or_fail;

mod common;
use common::agent;

/// The demo on an ephemeral loopback port, or None (skipped) without the release module.
fn start_demo(test: &str, difficulty: u8) -> Option<Demo> {
    start_demo_with(test, difficulty, None)
}

/// The demo with this pluginConfig instead of the default `mode: all` one.
fn start_demo_configured(test: &str, plugin_config: serde_json::Value) -> Option<Demo> {
    start_demo_from(test, None, None, Some(plugin_config))
}

/// Every visitor on the refresh tier, waiting one second.
fn refresh_tier() -> serde_json::Value {
    serde_json::json!({
        "mode": "all", "secret_env": demo::SECRET_ENV, "refresh_delay_secs": 1,
        "rules": [{"name": "no-script", "action": "challenge", "kind": "refresh"}],
    })
}

/// The refresh script in this browser against a demo on the refresh tier, its result checked
/// with [`assert_the_refresh_tier_lets_through`] (nothing after a skip).
fn passes_the_refresh_tier(test: &str, browser: fn(&str) -> Option<Driver>) {
    let Some((driver, demo)) = driver_and_demo(test, browser, |test| {
        start_demo_configured(test, refresh_tier())
    }) else {
        return;
    };
    let result = driver.run("refresh.mjs", demo, &[]);
    assert_the_refresh_tier_lets_through(&result);
}

/// What a refresh run must show: a challenge page without script, then the origin, then the
/// origin again on the cookie alone.
fn assert_the_refresh_tier_lets_through(result: &serde_json::Value) {
    assert_eq!(result["challengeStatus"], 403, "{result}");
    assert_eq!(
        result["scripts"], 0,
        "the refresh page carries no script: {result}"
    );
    assert_eq!(result["origin"], "You reached the origin", "{result}");
    assert_eq!(result["secondStatus"], 200, "{result}");
}

/// [`start_demo`], serving https with this certificate and key when given.
fn start_demo_with(test: &str, difficulty: u8, tls: Option<(PathBuf, PathBuf)>) -> Option<Demo> {
    start_demo_from(test, Some(difficulty), tls, None)
}

/// The demo as `pow-demo` resolves these arguments, with this pluginConfig when given, or
/// `None` after a skip (a failure under CI) without the release module.
fn start_demo_from(
    test: &str,
    difficulty: Option<u8>,
    tls: Option<(PathBuf, PathBuf)>,
    plugin_config: Option<serde_json::Value>,
) -> Option<Demo> {
    let mut config = common::demo_config(test, difficulty, tls)?;
    if let Some(plugin_config) = plugin_config {
        config.plugin_config = plugin_config.to_string();
    }
    Some(Demo::start(&config).unwrap())
}

/// A browser and the directory of its npm driver scripts.
struct Driver {
    /// The variable the scripts read the browser's path from.
    variable: &'static str,
    browser: String,
    dir: PathBuf,
}

impl Driver {
    /// Runs one of the driver's scripts against the demo with these extra arguments (see
    /// [`run_solver`]).
    fn run(&self, script: &str, demo: Demo, args: &[&Path]) -> serde_json::Value {
        let mut command = Command::new("node");
        command
            .arg(self.dir.join(script))
            .arg(demo.url())
            .args(args)
            .env(self.variable, &self.browser);
        run_solver(command, demo)
    }
}

/// The browser's driver, then the demo `start` makes, or `None` after a skip (a failure under
/// CI) when either is missing; the driver first, so that no demo starts for a missing browser.
fn driver_and_demo(
    test: &str,
    browser: fn(&str) -> Option<Driver>,
    start: impl FnOnce(&str) -> Option<Demo>,
) -> Option<(Driver, Demo)> {
    let driver = browser(test)?;
    let demo = start(test)?;
    Some((driver, demo))
}

/// Debian's Chromium and the playwright-core driver, or `None` after a skip (a failure under
/// CI) when Chromium, node or the npm package is missing.
fn chromium_driver(test: &str) -> Option<Driver> {
    driver(
        test,
        "CHROMIUM",
        "/usr/bin/chromium",
        "chromium",
        "playwright-core",
    )
}

/// Debian's Firefox ESR and the puppeteer-core driver, likewise.
fn firefox_driver(test: &str) -> Option<Driver> {
    driver(
        test,
        "FIREFOX",
        "/usr/bin/firefox-esr",
        "firefox",
        "puppeteer-core",
    )
}

/// The browser (`$variable`, else `default`) and `filter/browsers/<dir>` with its npm `package`
/// installed, or `None` after a skip (a failure under CI) when one of them or node is missing.
fn driver(
    test: &str,
    variable: &'static str,
    default: &str,
    dir: &str,
    package: &str,
) -> Option<Driver> {
    let browser = std::env::var(variable).unwrap_or_else(|_| default.to_owned());
    if !Path::new(&browser).is_file() {
        skip_or_fail(test, &format!("{dir} ({browser})"));
        return None;
    }
    if Command::new("node").arg("--version").output().is_err() {
        skip_or_fail(test, "node");
        return None;
    }
    let browser_dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../browsers")
        .join(dir);
    if !browser_dir.join("node_modules").join(package).is_dir() {
        skip_or_fail(
            test,
            &format!("{package} (npm ci in filter/browsers/{dir})"),
        );
        return None;
    }
    Some(Driver {
        variable,
        browser,
        dir: browser_dir,
    })
}

/// Runs a browser driver script (it prints one JSON result), bounded in time, then stops the demo.
fn run_solver(mut command: Command, demo: Demo) -> serde_json::Value {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: a browser that hangs is killed, and the test fails.
    let deadline = Instant::now() + Duration::from_secs(180);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    demo.stop();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "solve.mjs failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap()
}

/// The browser got the challenge, solved it, reached the origin, and came back on its cookie.
fn assert_lands_on_the_origin(result: &serde_json::Value) {
    assert_eq!(result["challengeStatus"], 403, "{result}");
    assert_eq!(result["origin"], "You reached the origin", "{result}");
    assert_eq!(
        result["secondStatus"], 200,
        "the cookie alone passes the second time: {result}"
    );
    assert_eq!(result["secondOrigin"], 1, "{result}");
}

#[test]
fn a_client_pays_the_challenge_then_reaches_the_origin_with_its_cookie() {
    let Some(demo) = start_demo(
        "a_client_pays_the_challenge_then_reaches_the_origin_with_its_cookie",
        10,
    ) else {
        return;
    };
    let base = demo.url();
    let agent = agent();

    let mut first = agent
        .get(&format!("{base}hello?x=1"))
        .header("accept", "text/html")
        .call()
        .unwrap();
    assert_eq!(first.status().as_u16(), 403);
    let page = first.body_mut().read_to_string().unwrap();
    assert!(
        page.contains(r#"id="pow-data""#),
        "the challenge page: {page}"
    );

    let answer =
        demo::answer_challenge(&page, 1 << 24).expect("the page carries a solvable challenge");
    let verified = agent
        .get(&format!("{}{}", base.trim_end_matches('/'), answer))
        .call()
        .unwrap();
    assert!(
        verified.status().is_redirection(),
        "verify answers with a redirect: {}",
        verified.status()
    );
    assert_eq!(
        verified.headers()["location"].to_str().unwrap(),
        "/hello?x=1",
        "back where the visitor was going"
    );
    let set_cookie = verified.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    let cookie = set_cookie.split(';').next().unwrap().to_owned();

    let mut origin = agent
        .get(&format!("{base}hello?x=1"))
        .header("cookie", &cookie)
        .call()
        .unwrap();
    assert_eq!(origin.status().as_u16(), 200);
    let body = origin.body_mut().read_to_string().unwrap();
    assert!(body.contains("You reached the origin"), "{body}");
    assert!(
        body.contains("/hello?x=1"),
        "the origin saw the path: {body}"
    );

    // A forged cookie is a new challenge, not the origin.
    let forged = agent
        .get(&base)
        .header("cookie", &format!("{cookie}00"))
        .header("accept", "text/html")
        .call()
        .unwrap();
    assert_eq!(forged.status().as_u16(), 403);
    demo.stop();
}

#[test]
fn headless_chromium_solves_the_challenge_page_and_lands_on_the_origin() {
    // 18 bits: about 260k hashes, well under a second for the page's workers.
    let Some((driver, demo)) = driver_and_demo(
        "headless_chromium_solves_the_challenge_page_and_lands_on_the_origin",
        chromium_driver,
        |test| start_demo(test, 18),
    ) else {
        return;
    };
    let shots = testkit::workspace::target_dir().join("browser");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join("challenge.png");
    let _ = std::fs::remove_file(&shot);

    let result = driver.run("solve.mjs", demo, &[&shot]);
    assert_lands_on_the_origin(&result);
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 1000,
        "a screenshot of the challenge page at {}",
        shot.display()
    );
}

#[test]
fn headless_firefox_solves_the_challenge_page_and_lands_on_the_origin() {
    let Some((driver, demo)) = driver_and_demo(
        "headless_firefox_solves_the_challenge_page_and_lands_on_the_origin",
        firefox_driver,
        |test| start_demo(test, 18),
    ) else {
        return;
    };
    let result = driver.run("solve.mjs", demo, &[]);
    assert_lands_on_the_origin(&result);
    assert_eq!(
        result["errors"],
        serde_json::json!([]),
        "no script or CSP error: {result}"
    );
}

/// A cross-site link to the verify endpoint with a return path of the other site's choosing:
/// in headless Chromium, the failure page's own navigation (same-site, so carrying the origin's
/// `SameSite=Strict` cookie) never reaches that path.
#[test]
fn headless_chromium_never_carries_a_strict_cookie_to_a_return_path_from_another_site() {
    let Some((driver, demo)) = driver_and_demo(
        "headless_chromium_never_carries_a_strict_cookie_to_a_return_path_from_another_site",
        chromium_driver,
        |test| start_demo(test, 10),
    ) else {
        return;
    };
    let result = driver.run("samesite.mjs", demo, &[]);
    let requests = result["requests"].as_array().unwrap();
    let verify = requests
        .iter()
        .find(|r| r["path"] == "/.pow/verify")
        .unwrap_or_else(|| panic!("the link was not followed: {result}"));
    assert_eq!(
        verify["strict"], false,
        "the cross-site click carried the Strict cookie: {result}"
    );
    assert!(
        !requests
            .iter()
            .any(|r| r["path"] == "/account/delete" && r["strict"] == true),
        "the failure page took the Strict cookie to the other site's path: {result}"
    );
    assert_eq!(result["finalPath"], "/", "{result}");
}

/// The demo at difficulty 10 serving https as `*.example.test`, its certificate and key made in
/// `certs`, or `None` after a skip (a failure under CI).
fn start_https_demo(test: &str, certs: &Path) -> Option<Demo> {
    let tls = self_signed(test, certs)?;
    start_demo_with(test, 10, Some(tls))
}

/// The cookie names of the driver's second request, in the order the browser sent them.
fn sent_order(result: &serde_json::Value) -> Vec<&str> {
    result["sentOrder"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

/// A self-signed certificate for `*.example.test` made by openssl in `dir` (the key mode 0600).
fn self_signed(test: &str, dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let (cert, key) = (dir.join("edge.pem"), dir.join("edge-key.pem"));
    let openssl = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .status();
    if !openssl.is_ok_and(|status| status.success()) {
        skip_or_fail(test, "openssl (to make the test certificate)");
        return None;
    }
    testkit::openssl::request(
        dir,
        "edge-key.pem",
        "/CN=edge.example.test",
        "-x509",
        "edge.pem",
        &[
            "-days",
            "1",
            "-addext",
            "subjectAltName=DNS:edge.example.test,DNS:*.example.test",
        ],
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    Some((cert, key))
}

/// Cookie tossing in headless Chromium: a sibling subdomain's clearance cookies for the parent
/// domain, on a longer path, go first in the Cookie header; the edge's own `__Host-` cookie is
/// found behind them, and the visitor reaches the origin without a new challenge.
#[test]
fn headless_chromium_reaches_the_origin_past_tossed_cookies() {
    let certs = tempfile::tempdir().unwrap();
    let Some((driver, demo)) = driver_and_demo(
        "headless_chromium_reaches_the_origin_past_tossed_cookies",
        chromium_driver,
        |test| start_https_demo(test, certs.path()),
    ) else {
        return;
    };
    assert!(demo.url().starts_with("https://"), "{}", demo.url());
    let result = driver.run("toss.mjs", demo, &[]);
    assert_eq!(
        result["own"],
        serde_json::json!([{"name": "__Host-pow_clearance", "secure": true,
                            "domain": "edge.example.test", "path": "/"}]),
        "{result}"
    );
    let order = sent_order(&result);
    assert_eq!(
        order.last(),
        Some(&"__Host-pow_clearance"),
        "the tossed cookies go first: {result}"
    );
    assert_eq!(order.len(), 4, "{result}");
    assert_eq!(result["challenges"], 0, "{result}");
    assert_eq!(result["reachedOrigin"], true, "{result}");
}

/// What a lookalike run must show: the sibling's cookie was stored and is sent to the edge, and
/// the visitor reached the origin, then reached it again on another path without a challenge.
fn assert_the_lookalike_hides_nothing(result: &serde_json::Value) {
    assert_eq!(
        result["stored"], true,
        "the browser refused the lookalike: {result}"
    );
    assert_eq!(result["sentToEdge"], true, "{result}");
    assert_eq!(
        result["firstReached"], true,
        "the visitor never reached the origin (a challenge loop): {result}"
    );
    assert_eq!(result["reachedOrigin"], true, "{result}");
    assert_eq!(result["challenges"], 0, "{result}");
}

/// The lookalike script in this browser over https, its result checked with
/// [`assert_the_lookalike_hides_nothing`]; `None` after a skip (a failure under CI).
fn run_lookalike(test: &str, browser: fn(&str) -> Option<Driver>) -> Option<serde_json::Value> {
    let certs = tempfile::tempdir().unwrap();
    let (driver, demo) =
        driver_and_demo(test, browser, |test| start_https_demo(test, certs.path()))?;
    let result = driver.run("lookalike.mjs", demo, &[]);
    assert_the_lookalike_hides_nothing(&result);
    Some(result)
}

/// A sibling subdomain sets, with `document.cookie`, a cookie named U+2000 then
/// `__Host-pow_clearance` for the parent domain with `Path=/`: Chromium stores it as an ordinary
/// cookie and sends it before the edge's own on every path, its raw UTF-8 reaching the edge
/// (which passes such bytes to the filter as Envoy does). The visitor solves once and reaches
/// the origin, and again on another page: the lookalike is not taken for the clearance cookie.
#[test]
fn headless_chromium_is_not_locked_out_by_a_lookalike_cookie_name() {
    let Some(result) = run_lookalike(
        "headless_chromium_is_not_locked_out_by_a_lookalike_cookie_name",
        chromium_driver,
    ) else {
        return;
    };
    // Playwright reports the header's bytes as Latin-1: U+2000's UTF-8 (E2 80 80) shows as
    // "\u{e2}\u{20ac}\u{20ac}". It was sent first, raw.
    let order = sent_order(&result);
    assert_eq!(
        order,
        [
            "\u{e2}\u{20ac}\u{20ac}__Host-pow_clearance",
            "__Host-pow_clearance"
        ],
        "{result}"
    );
}

/// [`headless_chromium_is_not_locked_out_by_a_lookalike_cookie_name`] in headless Firefox ESR.
#[test]
fn headless_firefox_is_not_locked_out_by_a_lookalike_cookie_name() {
    let Some(result) = run_lookalike(
        "headless_firefox_is_not_locked_out_by_a_lookalike_cookie_name",
        firefox_driver,
    ) else {
        return;
    };
    assert_eq!(
        result["sentOrder"],
        serde_json::json!(["\u{2000}__Host-pow_clearance", "__Host-pow_clearance"]),
        "{result}"
    );
}

/// The refresh tier in headless Chromium with JavaScript turned off.
#[test]
fn headless_chromium_without_javascript_passes_the_refresh_tier() {
    passes_the_refresh_tier(
        "headless_chromium_without_javascript_passes_the_refresh_tier",
        chromium_driver,
    );
}

/// The refresh tier in headless Firefox ESR with JavaScript turned off.
#[test]
fn headless_firefox_without_javascript_passes_the_refresh_tier() {
    passes_the_refresh_tier(
        "headless_firefox_without_javascript_passes_the_refresh_tier",
        firefox_driver,
    );
}
