//! Exit codes, defined once for the whole workspace.
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success (a closed downstream pipe counts as success, as for any Unix filter) |
//! | 1 | the work failed: a source or API was unreachable or refused, a safety check stopped it |
//! | 2 | bad usage or bad input: an argument, a file, a field; nothing was done |
//!
//! clap already exits with 2 on a usage error, so the two agree.

use std::fmt::Display;
use std::io;
use std::process::ExitCode;

/// Why a tool stopped: decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything asked was done.
    Success,
    /// The work failed for a reason outside the input (network, remote API, safety check).
    Failure,
    /// The input or the arguments are wrong; nothing was done.
    Usage,
}

impl Exit {
    /// The numeric code the process exits with.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

/// An error a tool can report: how it exits, and whether it is only a closed pipe.
pub trait Report: Display {
    /// The exit this error maps to.
    fn exit(&self) -> Exit;
    /// The underlying I/O error, if any, so a closed stdout is recognised.
    fn io_error(&self) -> Option<&io::Error> {
        None
    }
}

/// Turns a tool's result into the process exit: prints the error once, on stderr, prefixed with
/// the tool's name; a closed downstream pipe (`tool | head`) exits 0 silently.
pub fn finish<E: Report>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => Exit::Success.into(),
        Err(err)
            if err
                .io_error()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) =>
        {
            Exit::Success.into()
        }
        Err(err) => {
            crate::log::error(format_args!("{err}"));
            err.exit().into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fake(Exit, Option<io::Error>);
    impl Display for Fake {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "fake")
        }
    }
    impl Report for Fake {
        fn exit(&self) -> Exit {
            self.0
        }
        fn io_error(&self) -> Option<&io::Error> {
            self.1.as_ref()
        }
    }

    #[test]
    fn codes_are_the_documented_ones() {
        assert_eq!(Exit::Success.code(), 0);
        assert_eq!(Exit::Failure.code(), 1);
        assert_eq!(Exit::Usage.code(), 2);
    }

    #[test]
    fn a_closed_pipe_is_success_and_other_errors_keep_their_code() {
        let pipe = Fake(
            Exit::Failure,
            Some(io::Error::from(io::ErrorKind::BrokenPipe)),
        );
        assert_eq!(finish(Err(pipe)), ExitCode::from(0));
        let other = Fake(
            Exit::Failure,
            Some(io::Error::from(io::ErrorKind::NotFound)),
        );
        assert_eq!(finish(Err(other)), ExitCode::from(1));
        assert_eq!(finish(Err(Fake(Exit::Usage, None))), ExitCode::from(2));
        assert_eq!(finish::<Fake>(Ok(())), ExitCode::from(0));
    }
}
