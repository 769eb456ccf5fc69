//! Checks of what a tool did: its exit code, stdout and stderr.

/// Checks a tool's refusal: the exit code, nothing on stdout, and every needle in the message.
#[allow(clippy::panic)] // an assertion helper for tests: failing is its job
pub fn assert_refused(out: &std::process::Output, code: i32, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    for needle in needles {
        assert!(stderr.contains(needle), "`{needle}` not in: {stderr}");
    }
}

/// A tool's stdout, after checking it exited 0 (its stderr is shown when it did not).
#[allow(clippy::panic)] // an assertion helper for tests: failing is its job
pub fn success_stdout(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
