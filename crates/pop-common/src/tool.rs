//! The one shape every tool has, as uutils gives each utility a `uumain`:
//!
//! - `Cli`: the clap arguments;
//! - `resolve(Cli, &Env) -> Result<Config, E>`: the arguments checked and turned into what `run`
//!   needs. It may read the environment it is given (never the process's own, so no library code
//!   reads a hidden switch) and the local files the arguments name (a config, a key), and nothing
//!   else: no network, no change anywhere. A tool with nothing to resolve says
//!   `pub type Config = Cli;` and returns its `Cli`;
//! - `run(&Config, impl Read, impl Write) -> Result<(), E>`: the work, on stdin and stdout (or
//!   whatever a test hands it), where `E` is a [`Report`].
//!
//! `main.rs` is then one line, `pop_common::main!(the_tool);`, and the exit codes, the closed pipe
//! and the log prefix are handled here, once.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::exit::{Report, finish};

/// The process environment, as a value: `resolve` reads variables from here only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env {
    vars: BTreeMap<OsString, OsString>,
    /// The running program's path, when known (to find programs installed beside it).
    program: Option<PathBuf>,
}

impl Env {
    /// The environment this process was started with.
    pub fn from_process() -> Env {
        Env {
            vars: std::env::vars_os().collect(),
            program: std::env::current_exe().ok(),
        }
    }

    /// An environment made of the given pairs (tests, or a child's environment).
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Env
    where
        K: Into<OsString>,
        V: Into<OsString>,
    {
        Env {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            program: None,
        }
    }

    /// The same environment, as seen by the program at `path`.
    pub fn with_program(mut self, path: impl Into<PathBuf>) -> Env {
        self.program = Some(path.into());
        self
    }

    /// The directory of the running program.
    pub fn program_dir(&self) -> Option<&Path> {
        self.program.as_deref().and_then(Path::parent)
    }

    /// A variable as bytes of the OS, present even when it is not UTF-8.
    pub fn get_os(&self, name: &str) -> Option<&OsStr> {
        self.vars.get(OsStr::new(name)).map(OsString::as_os_str)
    }

    /// A variable as text: `Err` names it when it is set but not UTF-8, so a caller never takes a
    /// variable that is there for one that is missing.
    pub fn get(&self, name: &str) -> Result<Option<&str>, NotUnicode> {
        match self.get_os(name) {
            None => Ok(None),
            Some(value) => value.to_str().map(Some).ok_or_else(|| NotUnicode {
                name: name.to_owned(),
            }),
        }
    }

    /// A variable that is set, UTF-8 and not empty; `None` otherwise (for optional switches).
    pub fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).ok().flatten().filter(|v| !v.is_empty())
    }
}

/// A variable that is set but is not valid UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {name} is not valid UTF-8")]
pub struct NotUnicode {
    pub name: String,
}

/// What `main!` runs: logging named after the tool, the real environment, stdin and stdout
/// locked, and the result turned into the workspace's exit code.
pub fn main<E, F>(tool: &'static str, body: F) -> ExitCode
where
    E: Report,
    F: FnOnce(&Env, &mut dyn Read, &mut dyn Write) -> Result<(), E>,
{
    let env = Env::from_process();
    crate::log::init(tool, env.non_empty(crate::log::LEVEL_VAR));
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    finish(body(&env, &mut stdin.lock(), &mut stdout.lock()))
}

/// The whole `main.rs` of a tool whose library has `Cli`, `resolve` and `run` (module docs).
#[macro_export]
macro_rules! main {
    ($tool:ident) => {
        fn main() -> ::std::process::ExitCode {
            $crate::tool::main(env!("CARGO_BIN_NAME"), |env, input, output| {
                let cli = <$tool::Cli as $crate::tool::Parser>::parse();
                let config = $tool::resolve(cli, env)?;
                $tool::run(&config, input, output)
            })
        }
    };
}

/// Re-exported for [`main!`], so a tool's `main.rs` needs no `use`.
pub use clap::Parser;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_that_is_not_utf8_is_not_taken_for_a_missing_one() {
        use std::os::unix::ffi::OsStringExt;
        let env = Env::from_pairs([
            (OsString::from("BAD"), OsString::from_vec(vec![0xff, 0x00])),
            (OsString::from("GOOD"), OsString::from("yes")),
            (OsString::from("EMPTY"), OsString::new()),
        ]);
        assert_eq!(env.get("BAD"), Err(NotUnicode { name: "BAD".into() }));
        assert_eq!(env.get_os("BAD").map(|v| v.len()), Some(2));
        assert_eq!(env.get("GOOD"), Ok(Some("yes")));
        assert_eq!(env.get("ABSENT"), Ok(None));
        assert_eq!(env.non_empty("EMPTY"), None);
        assert_eq!(env.non_empty("GOOD"), Some("yes"));
    }
}
