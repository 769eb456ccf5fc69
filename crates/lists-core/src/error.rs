//! The one error type of the list generators: every message names the source or the list.

use pop_common::exit::{Exit, OutputError, Report};

/// Why a generator stopped. Nothing is written on stdout when it does.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// A bad argument or argument file.
    #[error("{0}")]
    Usage(String),
    /// A local source file cannot be opened or read.
    #[error("source {name}: cannot read: {detail}")]
    Unreadable { name: String, detail: String },
    /// A remote source did not answer (DNS, connection refused, TLS, reset, ...).
    #[error("source {name}: unreachable: {detail}")]
    Unreachable { name: String, detail: String },
    /// A remote source did not deliver the whole dataset in time.
    #[error("source {name}: timed out after {seconds} s")]
    Timeout { name: String, seconds: u64 },
    /// A remote source answered with an HTTP error status.
    #[error("source {name}: HTTP status {status}")]
    Http { name: String, status: u16 },
    /// The data stops before its end: a cut download or a truncated/corrupt gzip stream.
    #[error("source {name}: ends early, the download or its gzip stream is truncated ({detail})")]
    Truncated { name: String, detail: String },
    /// The data is not in the expected (or any known) format. From a remote source (a captive
    /// portal's HTML, a mirror that changed its format) the source failed: exit 1, as for any
    /// source that is down; from a local file the input is wrong: exit 2.
    #[error("source {name}: {message}")]
    Format {
        name: String,
        message: String,
        remote: bool,
    },
    /// More rows than tolerated fail to parse.
    #[error(
        "source {name}: {count} rows fail to parse (at most {tolerated} tolerated); {examples}"
    )]
    BadRows {
        name: String,
        count: u64,
        tolerated: u64,
        examples: String,
        remote: bool,
    },
    /// The sources gave nothing for this list.
    #[error("list {list}: empty result ({why}); nothing written")]
    Empty { list: String, why: String },
    /// The new list lost too much compared with the previous one.
    #[error(
        "list {list}: refused, {detail}, more than the {max_percent}% allowed; the previous list stays (--force publishes anyway)"
    )]
    Shrink {
        list: String,
        detail: String,
        max_percent: u8,
    },
    /// The previous list given with `--previous` cannot be read.
    #[error("previous list {path}: {message}")]
    Previous { path: String, message: String },
    /// Writing the result failed (a closed stdout is not an error: see `io_error`).
    #[error("cannot write the list: {0}")]
    Output(#[from] OutputError),
}

impl Report for ListError {
    fn exit(&self) -> Exit {
        match self {
            ListError::Format { remote: true, .. } | ListError::BadRows { remote: true, .. } => {
                Exit::Failure
            }
            ListError::Usage(_)
            | ListError::Unreadable { .. }
            | ListError::Format { .. }
            | ListError::BadRows { .. }
            | ListError::Previous { .. } => Exit::Usage,
            ListError::Unreachable { .. }
            | ListError::Timeout { .. }
            | ListError::Http { .. }
            | ListError::Truncated { .. }
            | ListError::Empty { .. }
            | ListError::Shrink { .. }
            | ListError::Output(_) => Exit::Failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_and_safety_errors_are_failures_and_bad_data_is_usage() {
        let name = || "https://x/y".to_string();
        assert_eq!(
            ListError::Http {
                name: name(),
                status: 500
            }
            .exit(),
            Exit::Failure
        );
        let format = |remote| ListError::Format {
            name: name(),
            message: "garbage".into(),
            remote,
        };
        // A remote source that served HTML failed; a local file in the wrong format is bad input.
        assert_eq!(format(true).exit(), Exit::Failure);
        assert_eq!(format(false).exit(), Exit::Usage);
        let shrink = ListError::Shrink {
            list: "tor".into(),
            detail: "IPv4 addresses fell from 100 to 10 (-90%)".into(),
            max_percent: 50,
        };
        assert_eq!(shrink.exit(), Exit::Failure);
        assert!(shrink.to_string().starts_with("list tor: refused, IPv4"));
        let pipe = ListError::Output(std::io::Error::from(std::io::ErrorKind::BrokenPipe).into());
        assert!(pop_common::exit::is_closed_pipe(&pipe));
    }
}
