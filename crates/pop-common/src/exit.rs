//! Exit codes, defined once for the whole workspace.
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success (a closed downstream pipe counts as success, as for any Unix filter) |
//! | 1 | the work failed: a source or API was unreachable or refused, a safety check stopped it |
//! | 2 | bad usage or bad input: an argument, a file, a field; nothing was done |
//!
//! clap already exits with 2 on a usage error, so the two agree.

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

/// Writing the tool's data to its output (stdout, or the file it was told to write) failed.
///
/// Tools wrap their output's write errors in this type, and only this type is taken for a closed
/// downstream pipe: a broken pipe met anywhere else (an upload, a child's stdin, an SSH channel)
/// is a real failure and keeps its exit code.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct OutputError(#[from] pub io::Error);

impl OutputError {
    fn closed_pipe(&self) -> bool {
        self.0.kind() == io::ErrorKind::BrokenPipe
    }
}

/// `write(...).output()?`: marks an I/O result as the tool's output (see [`OutputError`]).
pub trait WritingOutput<T> {
    fn output(self) -> Result<T, OutputError>;
}

impl<T> WritingOutput<T> for io::Result<T> {
    fn output(self) -> Result<T, OutputError> {
        self.map_err(OutputError)
    }
}

/// An error a tool can report: how it exits. A closed pipe is found by walking the error's
/// `source()` chain for an [`OutputError`], so a tool has nothing else to say about it.
pub trait Report: std::error::Error + 'static {
    /// The exit this error maps to.
    fn exit(&self) -> Exit;
}

/// Whether `err`, or any error in its `source()` chain, is a write to the tool's output that met
/// a closed pipe (`tool | head`).
pub fn is_closed_pipe(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(err) = next {
        if err
            .downcast_ref::<OutputError>()
            .is_some_and(OutputError::closed_pipe)
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// `err` and each cause in its `source()` chain that its text does not already hold, joined by
/// `: `: a library's "client error (Connect)" then says "Connection refused" too.
pub fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Turns a tool's result into the process exit: prints the error once, on stderr, prefixed with
/// the tool's name; a closed downstream pipe (`tool | head`) exits 0 silently.
pub fn finish<E: Report>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => Exit::Success.into(),
        Err(err) if is_closed_pipe(&err) => Exit::Success.into(),
        Err(err) => {
            crate::log::error(format_args!("{err}"));
            err.exit().into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Fake {
        #[error("fake")]
        Plain(Exit),
        #[error("writing: {0}")]
        Output(#[source] OutputError),
        #[error("uploading: {0}")]
        Upload(#[source] io::Error),
        #[error("outer: {0}")]
        Outer(#[source] Box<Fake>),
    }
    impl Report for Fake {
        fn exit(&self) -> Exit {
            match self {
                Fake::Plain(exit) => *exit,
                _ => Exit::Failure,
            }
        }
    }

    fn pipe() -> io::Error {
        io::Error::from(io::ErrorKind::BrokenPipe)
    }

    #[test]
    fn codes_are_the_documented_ones() {
        assert_eq!(Exit::Success.code(), 0);
        assert_eq!(Exit::Failure.code(), 1);
        assert_eq!(Exit::Usage.code(), 2);
    }

    #[test]
    fn every_cause_is_said_once() {
        let inner = Fake::Upload(io::Error::other("connection refused"));
        assert_eq!(
            with_causes(&Fake::Outer(Box::new(inner))),
            "outer: uploading: connection refused"
        );
        // A cause the text does not already hold is added.
        #[derive(Debug, thiserror::Error)]
        #[error("client error (Connect)")]
        struct Terse(#[source] io::Error);
        assert_eq!(
            with_causes(&Terse(io::Error::other("connection refused"))),
            "client error (Connect): connection refused"
        );
    }

    #[test]
    fn a_closed_output_pipe_is_success_wherever_it_is_in_the_chain() {
        let output = || Fake::Output(Err::<(), _>(pipe()).output().unwrap_err());
        assert_eq!(finish(Err(output())), ExitCode::from(0));
        assert_eq!(
            finish(Err(Fake::Outer(Box::new(output())))),
            ExitCode::from(0)
        );
        let other = Fake::Output(OutputError(io::Error::from(io::ErrorKind::NotFound)));
        assert_eq!(finish(Err(other)), ExitCode::from(1));
    }

    #[test]
    fn a_broken_pipe_that_is_not_the_output_keeps_its_code() {
        // An upload or a child's stdin that breaks is a failure, not a reader gone away.
        assert_eq!(finish(Err(Fake::Upload(pipe()))), ExitCode::from(1));
        assert_eq!(
            finish(Err(Fake::Outer(Box::new(Fake::Upload(pipe()))))),
            ExitCode::from(1)
        );
    }

    #[test]
    fn other_errors_keep_their_code() {
        assert_eq!(finish(Err(Fake::Plain(Exit::Usage))), ExitCode::from(2));
        assert_eq!(finish::<Fake>(Ok(())), ExitCode::from(0));
    }
}
