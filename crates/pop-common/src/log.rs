//! Logging to stderr, prefixed with the tool's name (`render-edge: warning: ...`).
//!
//! stdout carries data only, so everything a person should read goes here. The level is set by
//! `EDGEPOP_LOG` (`error`, `warn`, `info`, `debug`; default `info`).

use std::fmt::Arguments;
use std::io::Write;
use std::sync::OnceLock;

static TOOL: OnceLock<&'static str> = OnceLock::new();
static LEVEL: OnceLock<Level> = OnceLock::new();

/// How much to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    fn parse(text: &str) -> Option<Level> {
        match text.trim().to_ascii_lowercase().as_str() {
            "error" => Some(Level::Error),
            "warn" | "warning" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" => Some(Level::Debug),
            _ => None,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warning",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

/// The variable that sets the level.
pub const LEVEL_VAR: &str = "EDGEPOP_LOG";

/// Names the tool in every message and sets the level from `level` (the value of
/// [`LEVEL_VAR`]; `info` when absent or not a level). Called once, by [`crate::tool::main`].
pub fn init(tool: &'static str, level: Option<&str>) {
    let _ = TOOL.set(tool);
    let level = level.and_then(Level::parse).unwrap_or(Level::Info);
    let _ = LEVEL.set(level);
}

/// Whether messages at `level` are printed.
pub fn enabled(level: Level) -> bool {
    level <= *LEVEL.get().unwrap_or(&Level::Info)
}

/// Writes one message at `level` to stderr.
pub fn write(level: Level, args: Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let tool = TOOL.get().copied().unwrap_or("edgepop");
    // One write per message: stderr is unbuffered, so `writeln!` would make a write of every
    // piece, and the lines of tools sharing one stderr (lists-refresh's generators, a pipeline
    // under make -j) could mix mid-line. A failed write has nowhere to be reported: ignored
    // rather than a panic.
    let _ = std::io::stderr()
        .lock()
        .write_all(line(tool, level, args).as_bytes());
}

/// `<tool>: <level>: <message>` and a newline.
fn line(tool: &str, level: Level, args: Arguments<'_>) -> String {
    format!("{tool}: {}: {args}\n", level.label())
}

pub fn error(args: Arguments<'_>) {
    write(Level::Error, args)
}

/// `warn!("...")`: a problem that did not stop the tool.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Warn, format_args!($($arg)*)) };
}

/// `info!("...")`: progress a person may want to follow.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Info, format_args!($($arg)*)) };
}

/// `debug!("...")`: detail for whoever debugs the tool.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Debug, format_args!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_one_line() {
        assert_eq!(
            line("lists-gen-asn", Level::Warn, format_args!("{} rows", 3)),
            "lists-gen-asn: warning: 3 rows\n"
        );
    }

    #[test]
    fn levels_parse_and_order() {
        assert_eq!(Level::parse("WARN"), Some(Level::Warn));
        assert_eq!(Level::parse("warning"), Some(Level::Warn));
        assert_eq!(Level::parse("loud"), None);
        assert!(Level::Error < Level::Debug);
    }
}
