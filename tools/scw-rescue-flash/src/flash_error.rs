//! Why one node was not flashed (or tagged): every failure, with what to do about it.

use std::net::SocketAddr;

use scaleway::ApiError;

use crate::disk::Refusal;
use crate::image::ImageError;
use crate::login::LoginError;
use crate::rescue::SshError;

/// Why one node was not flashed (or tagged).
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    #[error("no public IPv4 in the inventory")]
    NoAddress,
    #[error(
        "no disk to write: the inventory records no install_disk for it (scw-infra apply records each worker's, from the infra config), and no --disk was given; nothing was done"
    )]
    NoDisk,
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("server {id} does not exist in {zone} (scw baremetal server get {id} zone={zone})")]
    NoServer { id: String, zone: String },
    #[error(
        "server {id} lacks the tags {missing}: it is not this cluster's worker (a wrong or altered inventory?); nothing was done to it"
    )]
    NotOurs { id: String, missing: String },
    #[error(
        "no SSH key id for the rescue system: a server ordered without an OS has no key of its own, its rescue image takes only the keys its start names (scw-infra puts the id of the key it registers in the inventory; or --ssh-key-id); nothing was done"
    )]
    NoKeys,
    #[error(
        "runs {running} (configured), not {wanted}: writing the new image would wipe it. Upgrade it in place with make upgrade-talos, which records the upgrade on the server so that this step takes it (by hand, through a control plane, whose kubeconfig the drain uses: {by_hand}, then scw-rescue-flash --tag-upgraded {installer}); or write over it with --reflash (REFLASH=yes make apply-infra), which wipes the node; nothing was done"
    )]
    RunsAnotherImage {
        running: String,
        wanted: String,
        /// The talosctl command that upgrades it in place.
        by_hand: String,
        installer: String,
    },
    #[error(
        "server {name} was not {what} after {tries} checks {interval}s apart (last: {last}) (scw baremetal server get {id} zone={zone})"
    )]
    Never {
        name: String,
        what: &'static str,
        last: String,
        id: String,
        zone: String,
        tries: u32,
        interval: u64,
    },
    #[error(
        "server {name}: the rescue system never answered SSH on {address} after {tries} tries {interval}s apart; check that it booted into rescue, then retry (by hand: scw baremetal server stop {id} zone={zone}, then scw baremetal server start {id} boot-type=rescue ssh-key-ids.0=<key id> zone={zone})"
    )]
    NoSsh {
        name: String,
        address: SocketAddr,
        id: String,
        zone: String,
        tries: u32,
        interval: u64,
    },
    #[error(transparent)]
    Ssh(#[from] SshError),
    #[error(transparent)]
    Login(#[from] LoginError),
    #[error("refused: {0}; nothing was written")]
    Disk(#[from] Refusal),
    /// A command on the rescue system exited with an error.
    #[error("{what} failed ({status}): {stderr}")]
    Command {
        what: &'static str,
        status: i32,
        stderr: String,
    },
    #[error(
        "--decompress-on rescue: the rescue system has no zstd (`zstd --version` failed there); nothing was written"
    )]
    NoZstd,
    #[error(
        "the download of {url} has sha256 {found}, not the pinned image's {want}: refused before the disk was touched"
    )]
    Download {
        url: String,
        found: String,
        want: String,
    },
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(
        "the image changed while it was written ({sent} bytes sent into `{command}`, {size} measured)"
    )]
    Changed {
        sent: u64,
        command: String,
        size: u64,
    },
    #[error("read back from {disk}: sha256 {found:?} is not the image's {want} ({stderr})")]
    ReadBack {
        disk: String,
        found: String,
        want: String,
        stderr: String,
    },
}
