//! The challenge page's hash rate in headless Chromium, against native SHA-256 and Anubis's
//! algorithm.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pow_demo::{self as demo, Cli, Demo};

use crate::{HASHRATE_SECONDS, module, table, target_dir};

/// `openssl speed -bytes 64 sha256 -seconds 3`, one core: SHA-256 of 64-byte inputs per second.
fn openssl_rate() -> Result<f64, String> {
    let output = Command::new("openssl")
        .args(["speed", "-bytes", "64", "-seconds", "3", "sha256"])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("openssl: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    // The result line: "sha256   123456.78k" (thousands of bytes per second).
    text.lines()
        .filter(|l| l.starts_with("sha256"))
        .filter_map(|l| l.split_whitespace().last())
        .filter_map(|v| v.strip_suffix('k'))
        .find_map(|v| v.parse::<f64>().ok())
        .map(|kbytes| kbytes * 1000.0 / 64.0)
        .ok_or_else(|| format!("cannot read openssl's output: {text}"))
}

/// The hash-rate table: the page and Anubis's algorithm in Chromium, against native SHA-256.
pub fn hash_rates() -> Result<String, String> {
    let browser_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../browsers/chromium");
    if !browser_dir.join("node_modules/playwright-core").is_dir() {
        return Err("playwright-core is missing: npm ci in filter/browsers/chromium".to_owned());
    }
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    if !Path::new(&chromium).is_file() {
        return Err(format!("chromium is missing ({chromium})"));
    }
    let native = openssl_rate()?;
    let result = page_rates(&browser_dir, &chromium)?;
    let rate = |key: &str| result[key]["rate"].as_f64().unwrap_or(0.0);
    let workers = |key: &str| result[key]["workers"].as_u64().unwrap_or(0);
    let (one, all, anubis) = (rate("pageOne"), rate("pageAll"), rate("anubis"));
    let mut out = table(
        &format!("## Solver hash rate in headless Chromium ({HASHRATE_SECONDS} s each, same run)"),
        "| solver | workers | hashes/s | share of native 1 core |",
        "| --- | ---: | ---: | ---: |",
    );
    let mut row = |label: &str, w: u64, r: f64| {
        let _ = writeln!(
            out,
            "| {label} | {w} | {:.2}M | {:.1} % |",
            r / 1e6,
            100.0 * r / native
        );
    };
    row("challenge page (its own workers)", workers("pageOne"), one);
    row(
        "challenge page (its own workers, default count)",
        workers("pageAll"),
        all,
    );
    row(
        "Anubis's algorithm, re-implemented (awaited subtle.digest per nonce)",
        workers("anubis"),
        anubis,
    );
    row("native: openssl speed -bytes 64 sha256, 1 core", 1, native);
    let _ = writeln!(
        out,
        "\nGoal: the page >= 50 % of native per core, and >= 5x Anubis's algorithm. Page / Anubis (1 worker each): {:.1}x.",
        one / anubis.max(1.0)
    );
    Ok(out)
}

/// The page's solver and Anubis's algorithm, timed by `hashrate.mjs` in Chromium against a demo
/// edge at a difficulty never reached in the window.
fn page_rates(browser_dir: &Path, chromium: &str) -> Result<serde_json::Value, String> {
    // 32 bits: about 4 billion attempts on average, never reached in the window (and an answer
    // is never followed).
    let cli = Cli {
        command: None,
        port: 0,
        metrics_port: 0,
        wasm: None,
        difficulty: Some(32),
        tls_cert: None,
        tls_key: None,
    };
    let config = demo::resolve_in(
        &cli,
        std::env::var("CARGO_TARGET_DIR").ok().as_deref(),
        &target_dir().join(".."),
    );
    let config = demo::DemoConfig {
        wasm: module("pow_filter.wasm")?,
        ..config
    };
    let running = Demo::start(&config).map_err(|e| e.to_string())?;
    let mut child = Command::new("node")
        .arg(browser_dir.join("hashrate.mjs"))
        .arg(running.url())
        .arg(HASHRATE_SECONDS.to_string())
        .env("CHROMIUM", chromium)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("node: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    running.stop();
    if !output.status.success() {
        return Err("hashrate.mjs failed (its error is above)".to_owned());
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("hashrate.mjs output: {e}"))
}
