//! `scw-rescue-flash`: Talos onto the Elastic Metal worker's disk, from Scaleway's rescue system
//! (Scaleway installs only the OS images of its catalogue on Elastic Metal, so the Talos image is
//! written from rescue).
//!
//! Reads the `NodeInventory` on stdin; for each Elastic Metal node whose recorded
//! `image_flashed` digest is not this image's:
//! 1. checks that the server carries our cluster's and the worker role's tags (else nothing is
//!    done to it), and that it does not run another image of ours already: a configured worker
//!    is never written over (a Talos upgrade is `talosctl upgrade`, said in the refusal), unless
//!    `--reflash` asks for it;
//! 2. boots it into rescue as a server with no installed OS allows: stop, then start with
//!    `boot_type: rescue` and the IAM keys the inventory names by id (`ssh_key_ids`, the only keys
//!    the rescue image of such a server gets); waits until the API says it is ready in rescue
//!    (each state change `--state-tries` times `--ssh-interval-seconds` apart, 720 x 10 s: the
//!    SDK's two hours), then until SSH answers (`--ssh-tries`, 60 x 10 s), then reads the rescue
//!    user and password again (the API fills them after the first `ready`);
//! 3. connects with the SSH key; the rescue host key is new at each rescue boot, so its
//!    fingerprint is logged and accepted for this session only (never written to known_hosts).
//!    The rescue user is not root: the disk commands run under `sudo -S`, the rescue password
//!    written to its standard input (never on a command line, never logged);
//! 4. reads `lsblk --json -b -p`, logs it, checks the target disk (the node's own
//!    `install_disk` in the inventory, else `--disk`; neither fails the node before anything is
//!    done to it): it exists, is a whole disk, large enough, nothing mounted; otherwise it
//!    refuses, naming the disks that would do;
//! 5. streams the image into `dd` on the rescue side, with a progress bar on stderr: compressed,
//!    for the rescue system's `zstd -dc` to expand, when it has zstd and the .zst saves at least
//!    a tenth of the bytes (a disk image is mostly free space, so a fraction of the raw bytes
//!    crosses the network and the SSH cipher), else decompressed here; or, with `--image-url`,
//!    the rescue system downloads the .zst (https only), whose sha256 must be the local copy's
//!    before the disk is touched; syncs; reads the disk back and compares the sha256 with the
//!    image's;
//! 6. tags the server `edgepop-image-written=sha256:<digest of the raw image>`, boots it
//!    normally (stop, start with `boot_type: normal`) and records `image_flashed: sha256:<digest
//!    of the raw image>` in the inventory (and forgets any `config_applied`: the node is in
//!    maintenance mode again). A server that already carries the written tag of this image (a
//!    run stopped after the write, before its inventory was kept) is not written again (unless
//!    `--reflash`): it is only booted normally if it is not, and recorded. Any older image tag goes before the disk
//!    is written, so no tag ever names an image the disk does not hold.
//!
//! A worker upgraded in place (`talosctl upgrade`, `make upgrade-talos`) carries
//! `edgepop-image-upgraded=<installer>` instead: when that installer is the one of the image to
//! flash (`--installer-image`), the node runs that image's Talos already, and it is recorded as
//! such (`image_flashed`), its config kept, nothing written. `--tag-upgraded <installer>` writes
//! that tag, and nothing else.
//!
//! `--tag-proven` does only the last part of the job, once `talos-apply-insecure` has proved the
//! node ours: it writes the image's digest in the server's tags (`edgepop-image-flashed=
//! sha256:...`, in place of the written tag), so that a re-run from a fresh inventory finds it
//! done, and a version bump finds what runs there. The read-back guards against faults, not against a lying rescue host:
//! the tag waits for the proof.
//!
//! Writes the inventory back on stdout, even when a node failed (then exits 1 after it).

pub mod cli;
pub mod disk;
pub mod flash;
mod flash_error;
pub mod image;
pub mod login;
pub mod progress;
pub mod read_ahead;
pub mod rescue;
pub mod tags;
pub mod write;

use std::io::{Read, Write};

use pop_common::exit::{Exit, OutputError, Report};
use pop_common::input::InputError;
use pop_common::records::{NodeInventory, NodeKind};
use pop_common::wait::{Sleeper, ThreadSleeper};
use scaleway::{Client, Transport, UreqTransport};

pub use crate::cli::{Cli, Config, DecompressOn, ImageUrl, Mode, resolve};
pub use crate::flash::{FlashError, flash_all};
pub use crate::image::{Image, ImageError};
pub use crate::tags::{tag_proven, tag_upgraded};
pub use crate::write::write_image;

/// The server tag that keeps the flashed image's digest: `edgepop-image-flashed=sha256:<hex>`.
pub const FLASHED_TAG: &str = "edgepop-image-flashed=";

/// The server tag that records an in-place upgrade: `edgepop-image-upgraded=<installer image>`,
/// written once the node answers with the installer's version (`make upgrade-talos`). The node
/// then runs what that installer's disk image would hold: a flash of that image (the one whose
/// installer `--installer-image` names) finds it done, neither refused nor written again.
pub const UPGRADED_TAG: &str = "edgepop-image-upgraded=";

/// The server tag that keeps the digest of the image written and read back on the disk while the
/// node is not yet proved ours: `edgepop-image-written=sha256:<hex>`. A run stopped after the
/// write leaves it, so that the next run does not write the disk again (the proof still decides,
/// and only the proof turns it into the flashed tag). A server carries one of the three image
/// tags at most.
pub const WRITTEN_TAG: &str = "edgepop-image-written=";

/// Why the tool stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Input(#[from] InputError),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Nodes(#[from] pop_common::records::NodeFailures),
    #[error("writing the inventory: {0}")]
    Output(#[from] OutputError),
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Usage(_) | Error::Input(_) | Error::Image(_) => Exit::Usage,
            Error::Nodes(_) | Error::Output(_) => Exit::Failure,
        }
    }
}

/// Reads the inventory on `input`, flashes (or tags) the nodes, writes the inventory on `output`.
pub fn run(config: &Config, input: impl Read, output: impl Write) -> Result<(), Error> {
    run_with(
        config,
        &UreqTransport::new(config.timeout),
        &ThreadSleeper,
        input,
        output,
    )
}

/// [`run`] over any transport and clock.
pub fn run_with(
    config: &Config,
    transport: &dyn Transport,
    sleeper: &dyn Sleeper,
    input: impl Read,
    output: impl Write,
) -> Result<(), Error> {
    let client = Client::for_credentials(transport, sleeper, &config.credentials);
    NodeInventory::pass_through(input, output, |inventory| {
        Ok(match &config.mode {
            Mode::TagProven => tag_proven(inventory, client.baremetal()),
            Mode::TagUpgraded(installer) => tag_upgraded(inventory, client.baremetal(), installer),
            Mode::Flash(path) => {
                if inventory
                    .nodes
                    .iter()
                    .any(|n| n.kind == NodeKind::ElasticMetal)
                {
                    let image = Image::measure(path)?;
                    pop_common::info!(
                        "image {}: {} bytes raw, {}",
                        path.display(),
                        image.size,
                        image.digest()
                    );
                    flash_all(config, inventory, &image, client.baremetal(), sleeper)
                } else {
                    Vec::new()
                }
            }
        })
    })
}
