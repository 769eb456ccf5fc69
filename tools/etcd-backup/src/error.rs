use std::path::{Path, PathBuf};

use pop_common::exit::{Exit, Report};
use scaleway::CredentialsError;
use scaleway::s3::S3Error;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Credentials(CredentialsError),
    #[error(transparent)]
    Environment(#[from] pop_common::tool::NotUnicode),
    /// The control planes could not be read from the cluster.
    #[error("reading the control planes' addresses: {0}")]
    Kube(#[from] kube_rest::KubeError),
    /// The EndpointSlice is missing or lists no address.
    #[error("{0}")]
    NoControlPlane(String),
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    /// talosctl or age failed, or could not be run: what it said.
    #[error("{program}: {message}")]
    Program {
        program: &'static str,
        message: String,
    },
    /// No control plane gave a snapshot: each one's failure.
    #[error("no control plane gave a snapshot: {}", .0.join("; "))]
    NoSnapshot(Vec<String>),
    #[error("the snapshot {}: {message}", path.display())]
    Snapshot { path: PathBuf, message: String },
    #[error("uploading {bucket}/{key}: {source}")]
    Upload {
        bucket: String,
        key: String,
        source: Box<S3Error>,
    },
    /// The backup is stored; the pruning of older ones failed.
    #[error("the backup is stored, but the older ones were not pruned: {0}")]
    Prune(Box<S3Error>),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Error {
    pub(crate) fn file(path: &Path, error: &std::io::Error) -> Error {
        Error::File {
            path: path.to_path_buf(),
            message: error.to_string(),
        }
    }
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Usage(_) | Error::Credentials(_) | Error::Environment(_) => Exit::Usage,
            Error::Kube(error) if error.is_usage() => Exit::Usage,
            _ => Exit::Failure,
        }
    }
}
