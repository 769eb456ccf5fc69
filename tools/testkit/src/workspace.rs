//! Where things are: the workspace root, the shared read-only material beside it, the binaries
//! cargo built, and the programs a test needs.

use std::path::{Path, PathBuf};

/// The workspace root (this crate is `tools/testkit`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A binary of the workspace, as built by `cargo test --workspace` (which compiles every
/// member's binaries before it runs any test) in the profile of the running test: tests in one
/// crate run the tools of another through it. `CARGO_BIN_EXE_*` only covers a crate's own.
#[allow(clippy::panic)] // a test helper: a missing binary fails the test with the command to run
pub fn bin(name: &str) -> PathBuf {
    // The running test is <target>/<profile>/deps/<test>-<hash>.
    let path = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(|dir| dir.join(name)));
    match path {
        Some(path) if path.is_file() => path,
        _ => panic!(
            "the binary {name} is not built next to this test: run `cargo test --workspace` \
             (or `cargo build --bin {name}` first)"
        ),
    }
}

/// The shared read-only material (`<workspace root>/../shared`, or `$EDGEPOP_SHARED`), or
/// `None` after [`crate::skip_or_fail`] when it is absent.
pub fn shared_dir(test: &str) -> Option<std::path::PathBuf> {
    let dir = match std::env::var_os("EDGEPOP_SHARED") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => root().join("../shared"),
    };
    if dir.join("fixtures/PROVENANCE.md").is_file() {
        Some(dir)
    } else {
        crate::skip_or_fail(test, &format!("the shared fixtures ({})", dir.display()));
        None
    }
}

/// Whether `python3` runs; otherwise reports the skip (or the failure under CI).
pub fn python3(test: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        crate::skip_or_fail(test, "python3 (the independent oracle)");
    }
    ok
}
