//! What can go wrong, and the exit code of each.

use std::io;
use std::path::PathBuf;

use pop_common::exit::{Exit, OutputError, Report};
use pop_common::input::InputError;

use crate::{profile, secrets};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Order(#[from] profile::OrderError),
    #[error(transparent)]
    Secrets(#[from] secrets::FillError),
    #[error("writing the values: {0}")]
    Write(#[from] OutputError),
    #[error("name one component, or give --out-dir for all of them, or --print-names")]
    Target,
    #[error(
        "the edge profile's --out-dir needs --inputs (talos/_out/platform-inputs.json): its host firewall is made of the cluster's addresses"
    )]
    Inputs,
    #[error(
        "the config sets etcd_backup: give --published-images (talos/_out/published-images.json, which make publish-images writes), the record that pins the backup's image"
    )]
    PublishedImages,
    #[error("--environment-secret: {0}")]
    EnvironmentSecret(String),
    #[error(
        "profile `{profile}` has no component `{name}` with a rendered layer (it has: {known})"
    )]
    UnknownComponent {
        profile: &'static str,
        name: String,
        known: String,
    },
    #[error("component `{0}`: this profile renders nothing for it")]
    NoRender(&'static str),
    #[error(
        "profile `{0}`: --print-names is for the onprem profile (--out-dir writes the names, status.env)"
    )]
    NoNames(&'static str),
    #[error(
        "--cluster names a cluster of clusters/ (make CLUSTER=NAME), which is for the onprem profile"
    )]
    NoCluster,
    #[error("cannot write {}: {source}", path.display())]
    WriteFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Input(_)
            | Error::Target
            | Error::Inputs
            | Error::PublishedImages
            | Error::EnvironmentSecret(_)
            | Error::NoNames(_)
            | Error::NoCluster
            | Error::UnknownComponent { .. } => Exit::Usage,
            Error::Secrets(secrets::FillError::Write(_)) => Exit::Failure,
            Error::Secrets(_) => Exit::Usage,
            Error::Order(_) | Error::NoRender(_) | Error::Write(_) | Error::WriteFile { .. } => {
                Exit::Failure
            }
        }
    }
}
