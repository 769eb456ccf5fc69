//! Where things are: the workspace root, the shared read-only material beside it, the binaries
//! cargo built, and the programs a test needs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The workspace root (this crate is `crates/testkit`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Cargo's target folder: `$CARGO_TARGET_DIR` when set, else the workspace's `target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => root().join("target"),
    }
}

/// The filter's release module where `make filter` builds it, or `None` after
/// [`crate::skip_or_fail`] when it is not built.
pub fn filter_module(test: &str) -> Option<PathBuf> {
    let wasm = target_dir().join("wasm32-wasip1/wasm-release/pow_filter.wasm");
    if wasm.is_file() {
        Some(wasm)
    } else {
        crate::skip_or_fail(test, &format!("{} (make filter)", wasm.display()));
        None
    }
}

/// A binary of the workspace, built for the running test's profile: tests in one crate run the
/// tools of another through it (`CARGO_BIN_EXE_*` only covers a crate's own binaries). It is
/// brought up to date with `cargo build --bin NAME` once per test process, so a test never runs
/// a stale binary, whether it was started by `cargo test --workspace` (where this is a no-op) or
/// by `cargo test -p edgepop-tests` alone.
#[allow(clippy::panic)] // a test helper: a binary that does not build fails the test, saying why
pub fn bin(name: &str) -> PathBuf {
    static BUILT: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    // The running test is <target>/<profile>/deps/<test>-<hash>.
    let Some(profile_dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
    else {
        panic!("cannot tell where this test runs from, to find {name}")
    };
    let mut built = BUILT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !built.contains(name) {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args(["build", "--quiet", "--bin", name])
            .current_dir(root());
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            build.arg("--release");
        }
        match build.status() {
            Ok(status) if status.success() => {}
            other => panic!("cargo build --bin {name} failed: {other:?}"),
        }
        built.insert(name.to_owned());
    }
    let path = profile_dir.join(name);
    if !path.is_file() {
        panic!("{name} is not at {} after cargo build", path.display());
    }
    path
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

/// `<shared>/fixtures/<rel>`, or `None` after [`crate::skip_or_fail`] when the shared material
/// is absent.
pub fn fixture(test: &str, rel: &str) -> Option<PathBuf> {
    shared_dir(test).map(|shared| shared.join("fixtures").join(rel))
}

/// The standard output of `<crate_dir>/tests/oracle.py`, the independent Python implementation
/// a crate's tests check its tool against, run with `args`; it must succeed. `crate_dir` is the
/// testing crate's `CARGO_MANIFEST_DIR`.
#[allow(clippy::panic)] // a test helper: an oracle that does not run fails the test
pub fn python_oracle<S: AsRef<std::ffi::OsStr>>(crate_dir: &str, args: &[S]) -> String {
    let out = Command::new("python3")
        .arg(Path::new(crate_dir).join("tests/oracle.py"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    crate::process::success_stdout(&out)
}

/// Whether `python3` imports `modules` (`"grpc, yaml"`); otherwise reports `missing` as the
/// skip (or the failure under CI).
pub fn python_imports(test: &str, modules: &str, missing: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        crate::skip_or_fail(test, missing);
    }
    ok
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
