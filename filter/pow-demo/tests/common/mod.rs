//! What the demo's test binaries share: the workspace, the demo's config as `pow-demo`
//! resolves its arguments, and an HTTP client.

// Each test binary uses its own subset of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use pow_demo::{self as demo, Cli, DemoConfig};
use testkit::skip_or_fail;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The demo's config on ephemeral loopback ports for this difficulty and https certificate and
/// key, as `pow-demo` resolves them; `None` after a skip (a failure under CI) without the
/// release module.
pub fn demo_config(
    test: &str,
    difficulty: Option<u8>,
    tls: Option<(PathBuf, PathBuf)>,
) -> Option<DemoConfig> {
    let (tls_cert, tls_key) = tls.unzip();
    let cli = Cli {
        command: None,
        port: 0,
        metrics_port: 0,
        wasm: None,
        difficulty,
        tls_cert,
        tls_key,
    };
    let config = demo::resolve_in(
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
    Some(config)
}

/// An HTTP client that shows every answer as it comes: no redirect followed, no status taken
/// as an error.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}
