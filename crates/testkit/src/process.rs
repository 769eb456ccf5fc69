//! Checks of what a tool did: its exit code, stdout and stderr.

/// Checks a tool's refusal: the exit code, nothing on stdout, and every needle in the message.
#[allow(clippy::panic)] // an assertion helper for tests: failing is its job
#[track_caller]
pub fn assert_refused(out: &std::process::Output, code: i32, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_says_all(&stderr, needles);
}

/// Checks that every needle is in `text` (a message, a log); fails the test naming the first
/// one missing, with the whole text.
#[allow(clippy::panic)] // an assertion helper for tests: failing is its job
#[track_caller]
pub fn assert_says_all(text: &str, needles: &[impl AsRef<str>]) {
    for needle in needles {
        let needle = needle.as_ref();
        assert!(text.contains(needle), "`{needle}` not in: {text}");
    }
}

/// A program's exit code, stdout and stderr, for a failed assertion's message.
pub fn text(out: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Checks that a program exited 0; when it did not, fails the test with its exit code and
/// stderr.
#[track_caller] // the failure points at the test's line
pub fn assert_success(out: &std::process::Output) {
    assert_success_of(out, "");
}

/// [`assert_success`], its failure message starting with `what`.
#[track_caller]
fn assert_success_of(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A tool's stdout, after checking it exited 0 (its stderr is shown when it did not).
#[track_caller]
pub fn success_stdout(out: &std::process::Output) -> String {
    assert_success(out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Each line of `text` (a tool's JSON-lines output) decoded; fails the test naming the line.
#[allow(clippy::panic)] // an assertion helper for tests: failing is its job
#[track_caller]
pub fn json_lines<T: serde::de::DeserializeOwned>(text: &str) -> Vec<T> {
    text.lines()
        .map(|line| match serde_json::from_str(line) {
            Ok(value) => value,
            Err(err) => panic!("not a JSON record ({err}): {line}"),
        })
        .collect()
}

/// Runs `command` to its end and returns its stdout, after checking it exited 0 (the command
/// and its stderr are shown when it did not). Fails the test when it cannot start.
#[allow(clippy::panic)] // an assertion helper for tests: failing is its job
#[track_caller]
pub fn stdout_of(command: &mut std::process::Command) -> String {
    let out = match command.output() {
        Ok(out) => out,
        Err(err) => panic!("cannot start {command:?}: {err}"),
    };
    assert_success_of(&out, &format!("{command:?}: "));
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

/// Runs `command` at a terminal whose operator types `answer` and Enter: util-linux `script`
/// (the program at `script`) gives it a pseudo-terminal, so that a question asked only of a
/// terminal is asked. The command's program, arguments, working directory and the environment
/// it sets are kept, and nothing else of this process's environment (give `command` an
/// `env_clear`, as a test of a tool does). The output's stdout is what the terminal showed,
/// standard output and error mixed as a terminal shows them.
pub fn at_a_terminal(
    script: &std::path::Path,
    command: &std::process::Command,
    answer: &str,
) -> std::process::Output {
    let mut line = vec![command.get_program().to_string_lossy().into_owned()];
    line.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    // Quoted for script's `sh -c`: the arguments of the tests hold no single quote.
    let line: Vec<String> = line.iter().map(|a| format!("'{a}'")).collect();
    let mut terminal = std::process::Command::new(script);
    terminal
        .env_clear()
        .args([
            "-q",
            "-e",
            "-E",
            "never",
            "-c",
            &line.join(" "),
            "/dev/null",
        ])
        .env("SHELL", "/bin/sh");
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            terminal.env(key, value);
        }
    }
    if let Some(dir) = command.get_current_dir() {
        terminal.current_dir(dir);
    }
    run_with_stdin(&mut terminal, format!("{answer}\n").as_bytes())
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

/// Where `program` is on the PATH, or `None` after [`crate::skip_or_fail`] naming it as
/// `missing` says (the program and what the test needs it for).
pub fn which_or_skip(test: &str, program: &str, missing: &str) -> Option<std::path::PathBuf> {
    let found = which(program);
    if found.is_none() {
        crate::skip_or_fail(test, missing);
    }
    found
}

/// A program running in the background whose stderr is read as it comes: a test waits for the
/// line that says the program reached a point, acts on what it waits for, then collects its
/// output. Killed when dropped.
#[derive(Debug)]
pub struct Running {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Everything it said on stderr, once it has closed it.
    said: Option<std::thread::JoinHandle<String>>,
}

impl Running {
    /// Starts `command` with stdout and stderr piped (stdin is the caller's to set).
    #[allow(clippy::panic)] // a test helper: a program that cannot start fails the test
    #[track_caller]
    pub fn spawn(command: &mut std::process::Command) -> Running {
        use std::io::BufRead as _;
        use std::process::Stdio;
        let mut child = match command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(err) => panic!("cannot start {command:?}: {err}"),
        };
        let (tx, lines) = std::sync::mpsc::channel();
        let stderr = child.stderr.take();
        let said = std::thread::spawn(move || {
            let mut all = String::new();
            for line in stderr
                .map(std::io::BufReader::new)
                .into_iter()
                .flat_map(|reader| reader.lines())
                .map_while(Result::ok)
            {
                all.push_str(&line);
                all.push('\n');
                let _ = tx.send(line);
            }
            all
        });
        Running {
            child,
            lines,
            said: Some(said),
        }
    }

    /// Returns once a line of its stderr holds `needle`; fails the test, with everything the
    /// program said, when it ends first or two minutes pass.
    #[allow(clippy::panic)] // a test helper: failing is its job
    #[track_caller]
    pub fn wait_for_line(&mut self, needle: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(_) => {
                    let _ = self.child.kill();
                    let status = self.child.wait();
                    let said = self.said.take().and_then(|s| s.join().ok());
                    panic!(
                        "never said `{needle}` ({status:?}):\n{}",
                        said.unwrap_or_default()
                    );
                }
            }
        }
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for its end: its exit status, stdout and everything it said on stderr.
    #[allow(clippy::panic)] // a test helper
    pub fn finish(mut self) -> std::process::Output {
        use std::io::Read as _;
        let mut stdout = Vec::new();
        if let Some(mut out) = self.child.stdout.take()
            && let Err(err) = out.read_to_end(&mut stdout)
        {
            panic!("cannot read the stdout of a background program: {err}");
        }
        let status = match self.child.wait() {
            Ok(status) => status,
            Err(err) => panic!("cannot wait for a background program: {err}"),
        };
        let stderr = self
            .said
            .take()
            .and_then(|s| s.join().ok())
            .unwrap_or_default()
            .into_bytes();
        std::process::Output {
            status,
            stdout,
            stderr,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
