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
#[track_caller] // the failure points at the test's line
pub fn success_stdout(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `command` with `stdin` written to its standard input, and collects its exit status,
/// stdout and stderr. Fails the test when it cannot start.
#[allow(clippy::panic)] // a test helper: a tool that cannot start fails the test
#[track_caller]
pub fn run_with_stdin(command: &mut std::process::Command, stdin: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = match command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(err) => panic!("cannot start {command:?}: {err}"),
    };
    // Written whole, then closed (the tool reads to the end before it acts): the inputs are small.
    if let Some(mut input) = child.stdin.take()
        && let Err(err) = input.write_all(stdin)
    {
        panic!("cannot write the stdin of {command:?}: {err}");
    }
    match child.wait_with_output() {
        Ok(out) => out,
        Err(err) => panic!("cannot wait for {command:?}: {err}"),
    }
}

/// Where `program` is on the PATH, as a shell would find it (`None` when it is not there).
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}
