//! The challenge page works in Firefox too: headless Firefox ESR (Debian's package, driven over
//! WebDriver BiDi by puppeteer-core) gets the 403 page from the demo edge running the real
//! `pow_filter.wasm`, its workers solve the challenge, it lands on the origin, and the clearance
//! cookie alone lets the second visit through. (Chromium: tests/demo.rs.)

// Helpers outside #[test] fns may unwrap too: a failure there is a failed test.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pop_common::testing::skip_or_fail;
use proxy_wasm_host::demo::{self, Cli, Demo};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn start_demo(test: &str, difficulty: u8) -> Option<Demo> {
    let cli = Cli {
        port: 0,
        wasm: None,
        difficulty: Some(difficulty),
    };
    let config = demo::resolve(
        &cli,
        std::env::var("CARGO_TARGET_DIR").ok().as_deref(),
        &workspace(),
    );
    if !config.wasm.is_file() {
        skip_or_fail(
            test,
            &format!(
                "the release filter module {} (make filter)",
                config.wasm.display()
            ),
        );
        return None;
    }
    Some(Demo::start(&config).unwrap())
}

#[test]
fn headless_firefox_solves_the_challenge_page_and_lands_on_the_origin() {
    let test = "headless_firefox_solves_the_challenge_page_and_lands_on_the_origin";
    let firefox = std::env::var("FIREFOX").unwrap_or_else(|_| "/usr/bin/firefox-esr".to_owned());
    if !Path::new(&firefox).is_file() {
        return skip_or_fail(test, &format!("firefox ({firefox})"));
    }
    if Command::new("node").arg("--version").output().is_err() {
        return skip_or_fail(test, "node");
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("firefox");
    if !dir.join("node_modules/puppeteer-core").is_dir() {
        return skip_or_fail(
            test,
            "puppeteer-core (npm ci in tools/proxy-wasm-host/firefox)",
        );
    }
    let Some(demo) = start_demo(test, 18) else {
        return;
    };
    let mut child = Command::new("node")
        .arg(dir.join("solve.mjs"))
        .arg(demo.url())
        .env("FIREFOX", &firefox)
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
    let result: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(result["challengeStatus"], 403, "{result}");
    assert_eq!(result["origin"], "You reached the origin", "{result}");
    assert_eq!(
        result["secondStatus"], 200,
        "the cookie alone passes the second time: {result}"
    );
    assert_eq!(result["secondOrigin"], 1, "{result}");
    assert_eq!(
        result["errors"],
        serde_json::json!([]),
        "no script or CSP error: {result}"
    );
}
