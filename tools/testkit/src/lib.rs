//! What the workspace's tests share; a dev-dependency only, so no shipped library exports test
//! helpers.
//!
//! - [`http`]: a scripted HTTP/1.1 server on loopback that records every request.
//! - [`process`]: checks of a tool's exit code, stdout and stderr.
//! - [`standin`]: the Python stand-ins of `tests/stand-ins/`, started on loopback and killed on
//!   drop.
//! - [`workspace`]: the workspace root, `../shared`, the binaries cargo built, `python3`.
//!
//! Tests that need something a user's machine may lack (chromium, sshd, the upstream schemas)
//! call [`skip_or_fail`] when it is missing: on a user's machine the test is skipped with a
//! message; under CI (`EDGEPOP_REQUIRE_ALL=1`, set by `.ci/run`) it fails, so a missing install
//! step can never pass as green.

pub mod http;
pub mod process;
pub mod standin;
pub mod workspace;

/// The variable that turns every skip into a failure.
pub const REQUIRE_ALL_VAR: &str = "EDGEPOP_REQUIRE_ALL";

/// Whether skips are forbidden (CI).
pub fn require_all() -> bool {
    std::env::var(REQUIRE_ALL_VAR).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Reports that a test cannot run because `missing` is absent. Panics (fails the test) when
/// skips are forbidden; otherwise prints the reason on stderr. The caller returns right after.
#[allow(clippy::panic)] // failing the test is the point under CI
pub fn skip_or_fail(test: &str, missing: &str) {
    if require_all() {
        panic!(
            "{test}: {missing} is missing and {REQUIRE_ALL_VAR} is set: a skip is a failure here"
        );
    }
    eprintln!("SKIPPED {test}: {missing} is missing (set {REQUIRE_ALL_VAR}=1 to make this fail)");
}
