//! What stops a control plane's programs when the test process ends, however it ends.

use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

/// A process that outlives nothing: it reads pids on its stdin, and when that pipe closes without
/// a `done` line (the test process ended, however it ended) it kills them (SIGKILL: a graceful
/// API server shutdown takes seconds and keeps nothing worth keeping) and removes the control
/// plane's folder. A shared control plane is a static, never dropped: this is what stops it.
#[derive(Debug)]
pub(super) struct Lifeline {
    pub(super) reaper: Child,
    pub(super) stdin: Option<ChildStdin>,
}

const REAPER: &str = r#"trap '' INT TERM HUP
dir=$1 pids=()
while read -r line; do
  if [[ $line == done ]]; then rm -rf -- "$dir"; exit 0; fi
  pids+=("$line")
done
((${#pids[@]})) && kill -KILL "${pids[@]}" 2>/dev/null
rm -rf -- "$dir"
"#;

impl Lifeline {
    #[allow(clippy::panic)] // a test helper: without its lifeline nothing would stop the programs
    pub(super) fn start(dir: &Path) -> Lifeline {
        // Its stdout and stderr are not the test's: cargo would wait for them to close.
        let mut reaper = match Command::new("bash")
            .args(["-c", REAPER, "control-plane-lifeline"])
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(reaper) => reaper,
            Err(err) => panic!("cannot start the control plane's lifeline: {err}"),
        };
        let stdin = reaper.stdin.take();
        Lifeline { reaper, stdin }
    }

    pub(super) fn watch(&mut self, pid: u32) {
        if let Some(stdin) = &mut self.stdin {
            let _ = writeln!(stdin, "{pid}");
        }
    }

    /// The programs are stopped already: the reaper only removes the folder and ends.
    pub(super) fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "done");
        }
        let _ = self.reaper.wait();
    }
}
