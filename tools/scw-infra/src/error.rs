//! Why `scw-infra` stopped: one variant per cause, each with its exit code. A cause found while
//! planning stops the run before any change; the others come from executing a plan.

use pop_common::exit::Exit;
use scaleway::ApiError;
use scaleway::s3::S3Error;

use crate::apply::image_file::ImageError;

/// What a step of a plan, or the planning, gives.
pub(crate) type R<T> = Result<T, InfraError>;

#[derive(Debug, thiserror::Error)]
pub enum InfraError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    S3(#[from] S3Error),
    #[error(transparent)]
    ImageFile(#[from] ImageError),
    /// Several resources carry the tags that name one.
    #[error("{count} {kind} carry the tags {tags}: keep one")]
    Ambiguous {
        count: usize,
        kind: &'static str,
        tags: String,
    },
    #[error(
        "the security group {name} ({id}) tagged for this cluster accepts inbound traffic by default; \
         set its inbound default policy to drop, or delete it"
    )]
    GroupAcceptsInbound { name: String, id: String },
    #[error("the flexible IP {ip} tagged for {node} is attached to another server")]
    IpAttachedElsewhere { ip: String, node: String },
    #[error(
        "no available x86_64 Instance image of this project tagged {} in {zone}, and no pinned \
         image to import (--talos-image-url and --talos-image-sha256). Import scaleway-amd64 of \
         Talos {version} by hand (scw block snapshot import-from-object-storage, then scw instance \
         image create ... {}) or pass the pins, and run again",
        tags.join(" and "),
        tags.iter().enumerate().map(|(i, t)| format!("tags.{i}={t}")).collect::<Vec<_>>().join(" ")
    )]
    NoTalosImage {
        tags: Vec<String>,
        zone: String,
        version: String,
    },
    #[error("no Elastic Metal offer named {offer} in {zone} (a worker's field offer)")]
    NoOffer { offer: String, zone: String },
    #[error("the offer {offer} is out of stock in {zone}")]
    OutOfStock { offer: String, zone: String },
    #[error(
        "the IAM SSH key {name} ({id}) holds another public key than {path}: delete or rename it"
    )]
    ForeignSshKey {
        name: String,
        id: String,
        path: String,
    },
    #[error(
        "the DNS record {name}.{dns_zone} {record_type} {data} is not ours (no comment {comment}): \
         remove it or change the fields api_hostname/edge_hostnames"
    )]
    ForeignDnsRecord {
        name: String,
        dns_zone: String,
        record_type: String,
        data: String,
        comment: String,
    },
    #[error(
        "no Elastic Metal server of this cluster carries the tag {tag}: no worker {node} to remove"
    )]
    NoSuchWorker { node: String, tag: String },
    #[error("no server carries the tag {tag}: run apply first")]
    NothingToPower { tag: String },
    #[error("the {what} {name} is {state}: it cannot be powered on or off from there")]
    CannotPower {
        what: &'static str,
        name: String,
        state: String,
    },
    #[error(
        "the server {name} runs without a public IPv4: Talos's API cannot be reached there to shut it down"
    )]
    NoPublicIpv4 { name: String },
    #[error(
        "the Instance {name} is {state}: neither terminate nor delete is possible now; run destroy again later"
    )]
    InstanceBusy { name: String, state: String },
    #[error(
        "the Instance {server} has the local volume {volume}, which scw-infra did not make: its \
         termination would delete it; detach it (or power the Instance off), then run destroy again"
    )]
    ForeignLocalVolume { server: String, volume: String },
    /// A resource reached a state it does not leave by itself.
    #[error("the {what} {name} ({id}) is {state}")]
    Failed {
        what: &'static str,
        name: String,
        id: String,
        state: String,
    },
    #[error("the {what} {name} ({id}) vanished")]
    Vanished {
        what: &'static str,
        name: String,
        id: String,
    },
    #[error(
        "the registry namespace name {name} is taken by another project (names are globally \
         unique across Scaleway): choose another registry_namespace in the infra config; \
         nothing billed was made"
    )]
    RegistryNameTaken { name: String },
    #[error(
        "the {what} {name} ({id}) the inventory names does not carry this cluster's tags: left alone"
    )]
    NotOurs {
        what: &'static str,
        name: String,
        id: String,
    },
    #[error("timed out after {seconds} s waiting for {what}")]
    Timeout { what: String, seconds: u64 },
    #[error("cannot make a work directory for the Talos image: {0}")]
    WorkDir(#[source] std::io::Error),
    /// A step names a resource that no earlier step created: a plan built out of order.
    #[error("step {step} refers to a resource no earlier step created")]
    Unresolved { step: usize },
}

impl InfraError {
    /// Bad input (nothing was done) or a failure.
    pub fn exit(&self) -> Exit {
        match self {
            // A config field or a missing argument: the plan stopped before any change.
            InfraError::NoOffer { .. }
            | InfraError::NoTalosImage { .. }
            | InfraError::NoSuchWorker { .. } => Exit::Usage,
            InfraError::Api(_)
            | InfraError::S3(_)
            | InfraError::ImageFile(_)
            | InfraError::Ambiguous { .. }
            | InfraError::GroupAcceptsInbound { .. }
            | InfraError::IpAttachedElsewhere { .. }
            | InfraError::OutOfStock { .. }
            | InfraError::ForeignSshKey { .. }
            | InfraError::RegistryNameTaken { .. }
            | InfraError::NotOurs { .. }
            | InfraError::ForeignDnsRecord { .. }
            | InfraError::NothingToPower { .. }
            | InfraError::CannotPower { .. }
            | InfraError::NoPublicIpv4 { .. }
            | InfraError::InstanceBusy { .. }
            | InfraError::ForeignLocalVolume { .. }
            | InfraError::Failed { .. }
            | InfraError::Vanished { .. }
            | InfraError::Timeout { .. }
            | InfraError::WorkDir(_)
            | InfraError::Unresolved { .. } => Exit::Failure,
        }
    }
}
