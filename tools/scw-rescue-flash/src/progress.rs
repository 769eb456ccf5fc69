//! The write's progress on stderr: a bar redrawn in place on a terminal, a line at every quarter
//! otherwise (logs stay readable).

use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Progress of one image write.
#[derive(Debug)]
pub struct Progress {
    label: String,
    total: u64,
    done: u64,
    started: Instant,
    terminal: bool,
    /// The last percentage drawn (terminal) or the last quarter logged (otherwise).
    shown: u64,
}

impl Progress {
    pub fn new(label: &str, total: u64) -> Self {
        Progress {
            label: label.to_owned(),
            total: total.max(1),
            done: 0,
            started: Instant::now(),
            terminal: std::io::stderr().is_terminal(),
            shown: 0,
        }
    }

    pub fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        let percent = self.done.min(self.total) * 100 / self.total;
        if self.terminal {
            if percent != self.shown {
                self.shown = percent;
                let mut stderr = std::io::stderr().lock();
                let _ = write!(stderr, "\r{}", self.line());
                let _ = stderr.flush();
            }
        } else if percent / 25 > self.shown / 25 {
            self.shown = percent;
            pop_common::info!("{}", self.line());
        }
    }

    pub fn finish(&mut self) {
        if self.terminal {
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "\r{}", self.line());
        }
    }

    /// `label [=========>          ] 45% 1.2/2.6 GB 110 MB/s`
    pub fn line(&self) -> String {
        const WIDTH: u64 = 30;
        let percent = self.done.min(self.total) * 100 / self.total;
        let filled = (percent * WIDTH / 100) as usize;
        let bar = format!(
            "{}{}",
            "=".repeat(filled),
            " ".repeat(WIDTH as usize - filled)
        );
        let seconds = self.started.elapsed().as_secs_f64().max(1e-3);
        format!(
            "{} [{bar}] {percent:>3}% {:.0}/{:.0} MB {:.0} MB/s",
            self.label,
            self.done as f64 / 1e6,
            self.total as f64 / 1e6,
            self.done as f64 / 1e6 / seconds
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_the_share_done() {
        let mut progress = Progress::new("w1", 4_000_000_000);
        progress.terminal = false;
        progress.advance(1_000_000_000);
        let line = progress.line();
        assert!(line.starts_with("w1 [======="), "{line}");
        assert!(line.contains(" 25% 1000/4000 MB"), "{line}");
    }
}
