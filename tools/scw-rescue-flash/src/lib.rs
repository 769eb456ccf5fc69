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
//!    the rescue image of such a server gets); waits until the API says it is ready in rescue,
//!    then until SSH answers (`--ssh-tries` times `--ssh-interval-seconds` apart, 60 x 10 s), then
//!    reads the rescue user and password again (the API fills them after the first `ready`);
//! 3. connects with the SSH key; the rescue host key is new at each rescue boot, so its
//!    fingerprint is logged and accepted for this session only (never written to known_hosts).
//!    The rescue user is not root: the disk commands run under `sudo -S`, the rescue password
//!    written to its standard input (never on a command line, never logged);
//! 4. reads `lsblk --json -b -p`, logs it, checks the target disk (exists, whole disk, large
//!    enough, nothing mounted) and otherwise refuses, naming the disks that would do;
//! 5. streams the image into `dd` on the rescue side, with a progress bar on stderr: compressed,
//!    for the rescue system's `zstd -dc` to expand, when it has zstd and the .zst saves at least
//!    a tenth of the bytes (a disk image is mostly free space, so a fraction of the raw bytes
//!    crosses the network and the SSH cipher), else decompressed here; or, with `--image-url`,
//!    the rescue system downloads the .zst (https only), whose sha256 must be the local copy's
//!    before the disk is touched; syncs; reads the disk back and compares the sha256 with the
//!    image's;
//! 6. boots it normally (stop, start with `boot_type: normal`) and records
//!    `image_flashed: sha256:<digest of the raw image>` in the inventory (and forgets any
//!    `config_applied`: the node is in maintenance mode again).
//!
//! `--tag-proven` does only the last part of the job, once `talos-apply-insecure` has proved the
//! node ours: it writes the image's digest in the server's tags (`edgepop-image-flashed=
//! sha256:...`), so that a re-run from a fresh inventory finds it done, and a version bump
//! finds what runs there. The read-back guards against faults, not against a lying rescue host:
//! the tag waits for the proof.
//!
//! Writes the inventory back on stdout, even when a node failed (then exits 1 after it).

pub mod disk;
pub mod progress;
pub mod read_ahead;
pub mod rescue;

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::InputError;
use pop_common::records::{
    Node, NodeFailure, NodeInventory, NodeKind, NodeRole, server_tags, steps,
};
use pop_common::tool::Env;
use pop_common::wait::{Poll, Sleeper, ThreadSleeper};
use scaleway::baremetal::{Baremetal, BootType, Reboot, RescuePassword, Server, ServerStatus};
use scaleway::http::UrlRefusal;
use scaleway::{ApiError, Client, Credentials, Transport, UreqTransport};
use sha2::{Digest, Sha256};

use crate::disk::Refusal;
use crate::progress::Progress;
use crate::rescue::{Rescue, SshError};

/// The server tag that keeps the flashed image's digest: `edgepop-image-flashed=sha256:<hex>`.
pub const FLASHED_TAG: &str = "edgepop-image-flashed=";

/// Write the Talos image onto the Elastic Metal nodes from rescue mode.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "scw-rescue-flash", version)]
pub struct Cli {
    /// The Talos disk image, zstd-compressed (metal-amd64.raw.zst from the Image Factory).
    #[arg(long, required_unless_present = "tag_proven")]
    pub image: Option<PathBuf>,
    /// The disk to write (the worker's install_disk; Scaleway may present NVMe).
    #[arg(long, default_value = "/dev/sda")]
    pub disk: String,
    /// The SSH private key whose public half scw-infra registered [default: ~/.ssh/id_ed25519].
    #[arg(long)]
    pub ssh_key: Option<PathBuf>,
    /// SSH user in rescue [default: the server's rescue_server.user].
    #[arg(long)]
    pub ssh_user: Option<String>,
    #[arg(long, default_value_t = 22)]
    pub ssh_port: u16,
    /// How many times to check for a state change, the rescue system's SSH, its credentials.
    #[arg(long, default_value_t = 60)]
    pub ssh_tries: u32,
    /// Seconds between two checks.
    #[arg(long, default_value_t = 10)]
    pub ssh_interval_seconds: u64,
    /// More Scaleway SSH key ids for the rescue system, besides the inventory's.
    #[arg(long = "ssh-key-id")]
    pub ssh_key_ids: Vec<String>,
    /// Let the rescue system download the image itself from this https URL (the same file as
    /// --image, whose sha256 the download must have before the disk is touched).
    #[arg(long, value_name = "URL")]
    pub image_url: Option<String>,
    /// Where the image is decompressed: `rescue` sends the .zst as it is and runs `zstd -dc`
    /// there, `local` sends the raw image, `auto` is `rescue` when the rescue system has zstd
    /// and the .zst is at most nine tenths of the raw image.
    #[arg(long, value_enum, default_value_t = DecompressOn::Auto)]
    pub decompress_on: DecompressOn,
    /// Run the disk commands without sudo (when the rescue user is root).
    #[arg(long)]
    pub no_sudo: bool,
    /// Seconds allowed for one API call, one SSH connection or one stalled SSH read/write.
    #[arg(long, default_value_t = 60)]
    pub timeout_seconds: u64,
    /// Write over a worker that runs another image of ours (a version bump): this wipes the
    /// node, which then needs its config again. Without it, such a worker is refused with the
    /// `talosctl upgrade` command that updates it in place.
    #[arg(long)]
    pub reflash: bool,
    /// The installer of the new image, for the `talosctl upgrade` command a refusal gives.
    #[arg(long, value_name = "IMAGE")]
    pub installer_image: Option<String>,
    /// The talosconfig, for the `talosctl upgrade` command a refusal gives.
    #[arg(long, value_name = "FILE", default_value = "talos/_out/talosconfig")]
    pub talosconfig: PathBuf,
    /// Only write the flashed tag on the servers whose image is recorded and whose config
    /// talos-apply-insecure recorded (proved ours); flash nothing.
    #[arg(long, conflicts_with_all = ["image", "image_url", "reflash"])]
    pub tag_proven: bool,
}

/// What `run` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Flash this image.
    Flash(PathBuf),
    /// Tag the servers proved ours.
    TagProven,
}

/// What `run` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub mode: Mode,
    pub disk: String,
    pub ssh_key: PathBuf,
    pub ssh_user: Option<String>,
    pub ssh_port: u16,
    pub ssh_tries: u32,
    pub ssh_interval: Duration,
    pub ssh_key_ids: Vec<String>,
    pub image_url: Option<ImageUrl>,
    pub decompress_on: DecompressOn,
    pub sudo: bool,
    pub timeout: Duration,
    pub reflash: bool,
    pub installer_image: Option<String>,
    pub talosconfig: PathBuf,
    /// Resolved as Scaleway's own tools resolve them; the secret never printed.
    pub credentials: Credentials,
}

/// Where the image is decompressed on its way to the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DecompressOn {
    /// On the rescue system when it has zstd and the .zst saves a tenth of the bytes, else here.
    Auto,
    /// On the rescue system: the compressed image crosses the network.
    Rescue,
    /// Here: the raw image crosses the network.
    Local,
}

/// An image URL the rescue system may fetch: https (http only to a loopback host, for tests),
/// no character a shell, a curl config line or curl's globbing would read. Shown without its
/// query string (a presigned URL's signature).
#[derive(Clone, PartialEq, Eq)]
pub struct ImageUrl {
    url: String,
    loopback: bool,
}

impl ImageUrl {
    pub fn parse(url: &str) -> Result<ImageUrl, String> {
        let plain = url
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~:/?&=%+,;@".contains(&b));
        if !plain {
            return Err(format!(
                "--image-url `{}`: only letters, digits and -._~:/?&=%+,;@ are taken (no quotes, spaces, shell or glob characters)",
                ImageUrl::shown_of(url)
            ));
        }
        let refused = |why: &str| format!("--image-url `{}`: {why}", ImageUrl::shown_of(url));
        let uri = scaleway::http::check_url(url).map_err(|why| {
            refused(match why {
                UrlRefusal::NotAUrl | UrlRefusal::NoHost => "no host",
                // An image URL never needs them: a presigned URL signs in its query string.
                UrlRefusal::Credentials => "no user or password before the host (`user:secret@`)",
                UrlRefusal::PlainHttp | UrlRefusal::NotHttp => {
                    "https only (a download over http could be anything)"
                }
            })
        })?;
        let loopback = uri.scheme_str() == Some("http");
        Ok(ImageUrl {
            url: url.to_owned(),
            loopback,
        })
    }

    fn shown_of(url: &str) -> &str {
        url.split_once('?').map_or(url, |(path, _)| path)
    }

    /// The URL without its query string: what the logs show.
    pub fn shown(&self) -> &str {
        ImageUrl::shown_of(&self.url)
    }

    /// What `curl -K -` reads: the URL never goes on the rescue system's command line.
    fn curl_config(&self) -> String {
        format!("url = \"{}\"\n", self.url)
    }
}

impl std::fmt::Debug for ImageUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.shown())
    }
}

/// The image file cannot be read as a zstd disk image.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ImageError {
    pub path: PathBuf,
    pub message: String,
}

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

/// Checks the arguments and reads the Scaleway credentials from the environment.
pub fn resolve(cli: Cli, env: &Env) -> Result<Config, Error> {
    pop_common::records::check_install_disk(&cli.disk)
        .map_err(|e| Error::Usage(format!("--disk {e}")))?;
    if cli.ssh_tries == 0 {
        return Err(Error::Usage("--ssh-tries: must be at least 1".into()));
    }
    let image_url = cli
        .image_url
        .as_deref()
        .map(ImageUrl::parse)
        .transpose()
        .map_err(Error::Usage)?;
    let credentials = scaleway::creds::load(env).map_err(|e| Error::Usage(e.to_string()))?;
    let ssh_key = match &cli.ssh_key {
        Some(path) => path.clone(),
        None => {
            let home = env
                .non_empty("HOME")
                .ok_or_else(|| Error::Usage("--ssh-key is not given and HOME is not set".into()))?;
            Path::new(home).join(".ssh/id_ed25519")
        }
    };
    if image_url.is_some() && cli.decompress_on == DecompressOn::Local {
        return Err(Error::Usage(
            "--decompress-on local cannot go with --image-url: the rescue system decompresses what it downloads".into(),
        ));
    }
    if let Some(user) = &cli.ssh_user
        && user.is_empty()
    {
        return Err(Error::Usage("--ssh-user: empty".into()));
    }
    let mode = match (cli.tag_proven, cli.image) {
        (true, _) => Mode::TagProven,
        (false, Some(image)) => Mode::Flash(image),
        (false, None) => return Err(Error::Usage("--image: required".into())),
    };
    Ok(Config {
        mode,
        disk: cli.disk,
        ssh_key,
        ssh_user: cli.ssh_user,
        ssh_port: cli.ssh_port,
        ssh_tries: cli.ssh_tries,
        ssh_interval: Duration::from_secs(cli.ssh_interval_seconds),
        ssh_key_ids: cli.ssh_key_ids,
        image_url,
        decompress_on: cli.decompress_on,
        sudo: !cli.no_sudo,
        timeout: Duration::from_secs(cli.timeout_seconds.max(1)),
        reflash: cli.reflash,
        installer_image: cli.installer_image,
        talosconfig: cli.talosconfig,
        credentials,
    })
}

/// A reader that hashes what it reads.
struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
}

/// The raw image behind the `.zst` file: its size and digest, found by decompressing it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub path: PathBuf,
    /// Bytes of the raw image.
    pub size: u64,
    /// Bytes of the .zst file.
    pub compressed: u64,
    /// sha256 of the raw (decompressed) image, lower-case hex.
    pub sha256: String,
    /// sha256 of the .zst file itself: what a download of it must have.
    pub compressed_sha256: String,
}

impl Image {
    pub fn measure(path: &Path) -> Result<Image, ImageError> {
        let file = Image::open_file(path)?;
        // The size of the file that is read, not of whatever the path names by then.
        let compressed = file
            .metadata()
            .map_err(|e| ImageError {
                path: path.to_path_buf(),
                message: format!("cannot read its size: {e}"),
            })?
            .len();
        // One read of the file: the .zst's digest is taken from the bytes the decoder reads,
        // beneath its buffer, and from whatever follows the last frame.
        let mut file = HashingReader {
            inner: file,
            hasher: Sha256::new(),
        };
        let mut reader = Image::decoder(path, &mut file)?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = reader.read(&mut buffer).map_err(|e| ImageError {
                path: path.to_path_buf(),
                message: format!("not a readable zstd image: {e}"),
            })?;
            if n == 0 {
                break;
            }
            hasher.update(buffer.get(..n).unwrap_or_default());
            size += n as u64;
        }
        drop(reader);
        std::io::copy(&mut file, &mut std::io::sink()).map_err(|e| ImageError {
            path: path.to_path_buf(),
            message: format!("cannot read: {e}"),
        })?;
        let compressed_sha256 = pop_common::hex::encode(&file.hasher.finalize());
        if size == 0 {
            return Err(ImageError {
                path: path.to_path_buf(),
                message: "the image is empty".into(),
            });
        }
        Ok(Image {
            path: path.to_path_buf(),
            size,
            compressed,
            sha256: pop_common::hex::encode(&hasher.finalize()),
            compressed_sha256,
        })
    }

    /// The .zst file, opened.
    fn open_file(path: &Path) -> Result<File, ImageError> {
        File::open(path).map_err(|e| ImageError {
            path: path.to_path_buf(),
            message: format!("cannot open: {e}"),
        })
    }

    /// `file` (the .zst at `path`), decompressed as it is read.
    fn decoder<R: Read>(path: &Path, file: R) -> Result<impl Read + use<R>, ImageError> {
        zstd::stream::read::Decoder::with_buffer(BufReader::with_capacity(1 << 20, file)).map_err(
            |e| ImageError {
                path: path.to_path_buf(),
                message: format!("not a zstd image: {e}"),
            },
        )
    }

    fn open_at(path: &Path) -> Result<impl Read + use<>, ImageError> {
        Image::decoder(path, Image::open_file(path)?)
    }

    /// Whether sending the .zst saves enough to be worth decompressing on the far side: at least
    /// a tenth of the raw bytes. A disk image, mostly free space, saves far more; an
    /// incompressible one saves nothing and would only add a `zstd` stage there.
    pub fn worth_sending_compressed(&self) -> bool {
        u128::from(self.compressed) * 10 < u128::from(self.size) * 9
    }

    /// The digest recorded in the inventory.
    pub fn digest(&self) -> String {
        format!("sha256:{}", self.sha256)
    }
}

/// Why one node was not flashed (or tagged).
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    #[error("no public IPv4 in the inventory")]
    NoAddress,
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
        "runs {running} (configured), not {wanted}: writing the new image would wipe it. Upgrade it in place: talosctl --talosconfig {talosconfig} --nodes {ip} --endpoints {ip} upgrade --image {installer}; or write over it with --reflash (REFLASH=yes make apply-infra), which wipes the node; nothing was done"
    )]
    RunsAnotherImage {
        running: String,
        wanted: String,
        ip: String,
        installer: String,
        talosconfig: String,
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

/// What a node's flash came to.
enum Flashed {
    Now,
    AlreadyTagged,
}

/// How the disk commands get root on the rescue system.
enum Root {
    /// The SSH user is root (`--no-sudo`).
    Already,
    /// `sudo` without a password (the rescue image's sudoers may allow it).
    NoPassword,
    /// `sudo -S`, the rescue password on its standard input.
    Password(RescuePassword),
}

impl Root {
    /// What goes before a command that needs root. `-k` makes sudo ask even with cached
    /// credentials, so the password line is always read by sudo, never by the command.
    fn prefix(&self) -> &'static str {
        match self {
            Root::Already => "",
            Root::NoPassword => "sudo -n ",
            Root::Password(_) => "sudo -S -k -p '' ",
        }
    }

    /// What comes first on such a command's standard input.
    fn input(&self) -> Vec<u8> {
        match self {
            Root::Password(password) => format!("{}\n", password.expose()).into_bytes(),
            _ => Vec::new(),
        }
    }
}

/// What every node's flash shares.
struct Job<'a> {
    config: &'a Config,
    cluster_name: &'a str,
    /// The IAM key ids the rescue image gets: the inventory's, then `--ssh-key-id`.
    key_ids: Vec<String>,
    image: &'a Image,
    api: Baremetal<'a>,
    sleeper: &'a dyn Sleeper,
}

/// Flashes every Elastic Metal node of `inventory` whose recorded image is not this one,
/// recording what it did there; returns the nodes that failed, and why.
pub fn flash_all(
    config: &Config,
    inventory: &mut NodeInventory,
    image: &Image,
    api: Baremetal<'_>,
    sleeper: &dyn Sleeper,
) -> Vec<NodeFailure> {
    let mut key_ids = inventory.ssh_key_ids.clone();
    for id in &config.ssh_key_ids {
        if !key_ids.contains(id) {
            key_ids.push(id.clone());
        }
    }
    let cluster_name = inventory.cluster_name.clone();
    let job = Job {
        config,
        cluster_name: &cluster_name,
        key_ids,
        image,
        api,
        sleeper,
    };
    let mut failures = Vec::new();
    let mut flashed = Vec::new();
    let digest = image.digest();
    let nodes = inventory.for_step(steps::IMAGE_FLASHED, |n| {
        (n.kind == NodeKind::ElasticMetal).then(|| digest.clone())
    });
    for name in &nodes.done {
        pop_common::info!("{name}: already flashed with {digest}, skipped");
    }
    let mut skipped = nodes.done;
    for mut todo in nodes.todo {
        let node = &*todo.node;
        match job.flash_one(node) {
            Ok(Flashed::AlreadyTagged) => {
                pop_common::info!(
                    "{}: the server's tags say it already runs {digest}, skipped",
                    node.name
                );
                skipped.push(node.name.clone());
                todo.record();
            }
            Ok(Flashed::Now) => {
                flashed.push(node.name.clone());
                todo.record();
                // A new disk: the node is in maintenance mode, waiting for its config.
                todo.node.steps.remove(steps::CONFIG_APPLIED);
            }
            Err(error) => {
                let failure = NodeFailure::new(&node.name, error);
                pop_common::warn!("{failure}");
                failures.push(failure);
            }
        }
    }
    let list = |names: &[String]| {
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    };
    pop_common::info!(
        "flashed: {}; skipped (already this image): {}; failed: {}",
        list(&flashed),
        list(&skipped),
        failures.len()
    );
    failures
}

/// The server `node` names, checked to be this cluster's worker.
fn our_server(api: Baremetal<'_>, cluster_name: &str, node: &Node) -> Result<Server, FlashError> {
    let server = api
        .server(&node.zone, &node.id)?
        .ok_or_else(|| FlashError::NoServer {
            id: node.id.clone(),
            zone: node.zone.clone(),
        })?;
    let missing = server_tags::missing(&server.tags, cluster_name, NodeRole::Worker);
    if !missing.is_empty() {
        return Err(FlashError::NotOurs {
            id: node.id.clone(),
            missing: missing.join(", "),
        });
    }
    Ok(server)
}

/// The flashed tag's digest, if the server carries one.
fn flashed_tag(server: &Server) -> Option<&str> {
    server.tags.iter().find_map(|t| t.strip_prefix(FLASHED_TAG))
}

/// The server's tags with `tag` as its only flashed tag (none with `None`).
fn with_flashed_tag(server: &Server, tag: Option<String>) -> Vec<String> {
    server
        .tags
        .iter()
        .filter(|t| !t.starts_with(FLASHED_TAG))
        .cloned()
        .chain(tag)
        .collect()
}

impl Job<'_> {
    fn poll(&self) -> Poll {
        Poll {
            tries: self.config.ssh_tries,
            interval: self.config.ssh_interval,
        }
    }

    /// Looks at the server until `pick` finds what it wants in it (within the poll's bound), and
    /// returns that; names `what` when it never does.
    fn wait_for<T>(
        &self,
        node: &Node,
        what: &'static str,
        pick: impl Fn(&Server) -> Option<T>,
    ) -> Result<T, FlashError> {
        let mut last = String::from("no answer");
        let found = self.poll().until(self.sleeper, |_| {
            let now =
                self.api
                    .server(&node.zone, &node.id)?
                    .ok_or_else(|| FlashError::NoServer {
                        id: node.id.clone(),
                        zone: node.zone.clone(),
                    })?;
            if let Some(found) = pick(&now) {
                return Ok(Some(found));
            }
            last = format!("{}, {} boot", now.status, now.boot_type);
            pop_common::debug!("{}: {last}, waiting until {what}", node.name);
            Ok::<_, FlashError>(None)
        })?;
        found.ok_or_else(|| FlashError::Never {
            name: node.name.clone(),
            what,
            last,
            id: node.id.clone(),
            zone: node.zone.clone(),
            tries: self.config.ssh_tries,
            interval: self.config.ssh_interval.as_secs(),
        })
    }

    /// Boots the server into `boot_type` as a server with no installed OS allows (it answers no
    /// reboot): stop it (once it is settled), then start it into `boot_type`.
    fn boot_into(
        &self,
        node: &Node,
        boot_type: BootType,
        key_ids: &[String],
    ) -> Result<(), FlashError> {
        let (zone, id, name) = (node.zone.as_str(), node.id.as_str(), &node.name);
        let ready = self.wait_for(node, "ready or stopped", |s| match s.status {
            ServerStatus::Ready => Some(true),
            ServerStatus::Stopped => Some(false),
            _ => None,
        })?;
        if ready {
            pop_common::info!("{name}: stopping, to start it into {boot_type} boot");
            self.api.stop(zone, id)?;
            self.wait_for(node, "stopped", |s| {
                (s.status == ServerStatus::Stopped).then_some(())
            })?;
        }
        pop_common::info!(
            "{name}: starting into {boot_type} boot{}",
            if key_ids.is_empty() {
                String::new()
            } else {
                format!(" with the SSH keys {}", key_ids.join(", "))
            }
        );
        self.api.start_into(
            zone,
            id,
            &Reboot {
                boot_type: boot_type.clone(),
                ssh_key_ids: key_ids.to_vec(),
            },
        )?;
        self.wait_for(node, "ready in that boot", |s| {
            (s.status == ServerStatus::Ready && s.boot_type == boot_type).then_some(())
        })
    }

    fn flash_one(&self, node: &Node) -> Result<Flashed, FlashError> {
        let (config, image, api) = (self.config, self.image, self.api);
        let name = &node.name;
        let ip = node
            .public_ipv4
            .map(IpAddr::V4)
            .ok_or(FlashError::NoAddress)?;
        let address = SocketAddr::new(ip, config.ssh_port);
        let (zone, id) = (node.zone.as_str(), node.id.as_str());
        let before = our_server(api, self.cluster_name, node)?;
        let wanted = image.digest();
        if flashed_tag(&before) == Some(wanted.as_str()) {
            return Ok(Flashed::AlreadyTagged);
        }
        // Checked before anything changes: without a key, the rescue system would lock us out.
        if self.key_ids.is_empty() {
            return Err(FlashError::NoKeys);
        }
        // A worker that runs an image of ours (its tag, written once it proved ours; or a config
        // applied over the image recorded) is a live node: a new image would wipe it.
        let running = flashed_tag(&before).map(str::to_owned).or_else(|| {
            node.step(steps::CONFIG_APPLIED)
                .and(node.step(steps::IMAGE_FLASHED))
                .map(str::to_owned)
        });
        if let Some(running) = running {
            if !config.reflash {
                return Err(FlashError::RunsAnotherImage {
                    running,
                    wanted,
                    ip: ip.to_string(),
                    installer: config
                        .installer_image
                        .clone()
                        .unwrap_or_else(|| "<the new image's installer>".into()),
                    talosconfig: config.talosconfig.display().to_string(),
                });
            }
            pop_common::warn!(
                "{name}: runs {running}; --reflash: writing {wanted} over it (the node is wiped)"
            );
            // The tag would claim an image the disk no longer holds: gone before the disk is.
            if flashed_tag(&before).is_some() {
                api.set_tags(zone, id, &with_flashed_tag(&before, None))?;
            }
        }
        self.boot_into(node, BootType::Rescue, &self.key_ids)?;
        let answered = self.poll().until(self.sleeper, |attempt| {
            if rescue::answers(address, config.timeout.min(Duration::from_secs(10))) {
                return Ok::<_, FlashError>(Some(()));
            }
            pop_common::debug!(
                "{name}: no SSH on {address} yet ({attempt}/{})",
                config.ssh_tries
            );
            Ok(None)
        })?;
        if answered.is_none() {
            return Err(FlashError::NoSsh {
                name: name.clone(),
                address,
                id: id.to_owned(),
                zone: zone.to_owned(),
                tries: config.ssh_tries,
                interval: config.ssh_interval.as_secs(),
            });
        }
        // The rescue credentials, read again now: the API may fill them after its first `ready`.
        let credentials = self.wait_for(node, "showing its rescue credentials", |s| {
            s.rescue_server.clone().filter(|r| !r.user.is_empty())
        })?;
        let user = config.ssh_user.clone().unwrap_or(credentials.user);
        let session = Rescue::connect(address, &user, &config.ssh_key, config.timeout)?;
        pop_common::info!(
            "{name}: rescue host key {} accepted for this session only (not written to known_hosts); cipher {}",
            session.host_key_fingerprint,
            session.cipher()
        );
        let root = if !config.sudo {
            Root::Already
        } else if session.run("sudo -n true")?.status == 0 {
            Root::NoPassword
        } else {
            pop_common::info!(
                "{name}: {user} needs the rescue password for sudo: given on its standard input"
            );
            Root::Password(credentials.password)
        };

        let lsblk = session.run("lsblk --json -b -p")?;
        if lsblk.status != 0 {
            return Err(FlashError::Command {
                what: "lsblk",
                status: lsblk.status,
                stderr: lsblk.stderr.trim().to_owned(),
            });
        }
        let compact: String = lsblk
            .stdout
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        pop_common::info!("{name}: lsblk: {compact}");
        let disk_size = disk::check(&lsblk.stdout, &config.disk, image.size)?;
        pop_common::info!(
            "{name}: writing {} ({} bytes raw) onto {} ({disk_size} bytes)",
            image.path.display(),
            image.size,
            config.disk
        );

        let write = format!("dd of={} bs=4M conv=fsync status=none", config.disk);
        match &config.image_url {
            None => {
                let on_rescue = match config.decompress_on {
                    DecompressOn::Local => false,
                    DecompressOn::Auto if !image.worth_sending_compressed() => {
                        pop_common::info!(
                            "{name}: the .zst is {} % of the raw image, too little saved to send it compressed",
                            image.compressed * 100 / image.size
                        );
                        false
                    }
                    DecompressOn::Auto => {
                        let found = has_zstd(&session)?;
                        if !found {
                            pop_common::info!("{name}: the rescue system has no zstd");
                        }
                        found
                    }
                    DecompressOn::Rescue if has_zstd(&session)? => true,
                    DecompressOn::Rescue => return Err(FlashError::NoZstd),
                };
                send_image(&session, image, &root, &write, on_rescue, name)?;
            }
            Some(url) => download_and_write(&session, image, &root, &write, url, name)?,
        }
        let flush = session.run_with_input(
            &format!(
                "{}sh -c 'sync && if [ -b {disk} ]; then blockdev --flushbufs {disk}; fi'",
                root.prefix(),
                disk = config.disk
            ),
            &root.input(),
        )?;
        if flush.status != 0 {
            return Err(FlashError::Command {
                what: "sync",
                status: flush.status,
                stderr: flush.stderr.trim().to_owned(),
            });
        }
        let read_back = session.run_with_input(
            &format!(
                "{}sh -c 'head -c {} {} | sha256sum'",
                root.prefix(),
                image.size,
                config.disk
            ),
            &root.input(),
        )?;
        let on_disk = read_back
            .stdout
            .split_whitespace()
            .next()
            .unwrap_or_default();
        if read_back.status != 0 || on_disk != image.sha256 {
            return Err(FlashError::ReadBack {
                disk: config.disk.clone(),
                found: on_disk.to_owned(),
                want: image.sha256.clone(),
                stderr: read_back.stderr.trim().to_owned(),
            });
        }
        pop_common::info!(
            "{name}: {} verified (sha256 {on_disk}); booting it normally",
            config.disk
        );
        drop(session);
        self.boot_into(node, BootType::Normal, &[])?;
        Ok(Flashed::Now)
    }
}

/// `pipeline` as one command for the rescue shell, failing when any of its stages fails.
fn pipefail(pipeline: &str) -> String {
    format!("bash -c 'set -o pipefail; {pipeline}'")
}

/// Whether the rescue system can decompress the image itself.
fn has_zstd(session: &Rescue) -> Result<bool, SshError> {
    Ok(session.run("zstd --version")?.status == 0)
}

/// The rescue system downloads the .zst into its RAM (https only, no globbing, the URL given to
/// curl on its standard input, not its command line), checks its sha256 against the local copy's
/// before anything touches the disk, then expands it onto the disk as root.
fn download_and_write(
    session: &Rescue,
    image: &Image,
    root: &Root,
    write: &str,
    url: &ImageUrl,
    name: &str,
) -> Result<(), FlashError> {
    pop_common::info!("{name}: the rescue system downloads {}", url.shown());
    let temp = session.run("mktemp /tmp/edgepop-talos.XXXXXX")?;
    let file = temp.stdout.trim().to_owned();
    if temp.status != 0
        || !file.starts_with("/tmp/edgepop-talos.")
        || !file
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b))
    {
        return Err(FlashError::Command {
            what: "mktemp on the rescue system",
            status: temp.status,
            stderr: temp.stderr.trim().to_owned(),
        });
    }
    let protocols = if url.loopback {
        "=http,https"
    } else {
        "=https"
    };
    let fetched = session.run_with_input(
        &format!(
            "curl -fsS --globoff --proto {protocols} --retry 3 -K - -o {file} && sha256sum {file}"
        ),
        url.curl_config().as_bytes(),
    )?;
    let found = fetched
        .stdout
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    if fetched.status != 0 {
        session.run(&format!("rm -f {file}"))?;
        return Err(FlashError::Command {
            what: "the download on the rescue system",
            status: fetched.status,
            stderr: fetched.stderr.trim().replace(&url.url, url.shown()),
        });
    }
    if found != image.compressed_sha256 {
        session.run(&format!("rm -f {file}"))?;
        return Err(FlashError::Download {
            url: url.shown().to_owned(),
            found,
            want: image.compressed_sha256.clone(),
        });
    }
    let ran = session.run_with_input(
        &format!(
            "{}{}",
            root.prefix(),
            pipefail(&format!("zstd -dc {file} | {write}"))
        ),
        &root.input(),
    )?;
    session.run(&format!("rm -f {file}"))?;
    if ran.status != 0 {
        return Err(FlashError::Command {
            what: "the write of the download on the rescue system",
            status: ran.status,
            stderr: ran.stderr.trim().to_owned(),
        });
    }
    Ok(())
}

/// Streams `image` into `write` (the `dd` on the rescue side, run as `root` says). With
/// `on_rescue`, the .zst goes as it is, into `zstd -dc | write` there: only the compressed bytes
/// cross the network and the SSH cipher, the part of the write that costs the most. Otherwise it
/// is decompressed here, in its own thread, so that the decompression overlaps the encryption
/// and sending.
fn send_image(
    session: &Rescue,
    image: &Image,
    root: &Root,
    write: &str,
    on_rescue: bool,
    name: &str,
) -> Result<(), FlashError> {
    write_image(
        session,
        image,
        root.prefix(),
        &root.input(),
        write,
        on_rescue,
        name,
    )
}

/// [`send_image`] with the root prefix and the line before the image given as they are (the
/// bench writes as the SSH user, with neither).
pub fn write_image(
    session: &Rescue,
    image: &Image,
    prefix: &str,
    input: &[u8],
    write: &str,
    on_rescue: bool,
    name: &str,
) -> Result<(), FlashError> {
    let (command, size, sent) = if on_rescue {
        let file = Image::open_file(&image.path)?;
        let size = image.compressed;
        pop_common::info!(
            "{name}: sending the compressed image ({size} bytes for {} raw); the rescue system decompresses it",
            image.size
        );
        let command = format!("{prefix}{}", pipefail(&format!("zstd -dc | {write}")));
        let mut progress = Progress::new(&format!("{name} (compressed)"), size);
        let sent = session.stream(
            &command,
            input,
            read_ahead::ReadAhead::new(file),
            &mut progress,
        )?;
        (command, size, sent)
    } else {
        pop_common::info!(
            "{name}: decompressing here, sending the raw image ({} bytes)",
            image.size
        );
        let command = format!("{prefix}{write}");
        let reader = read_ahead::ReadAhead::new(Image::open_at(&image.path)?);
        let mut progress = Progress::new(name, image.size);
        let sent = session.stream(&command, input, reader, &mut progress)?;
        (command, image.size, sent)
    };
    if sent != size {
        return Err(FlashError::Changed {
            sent,
            command,
            size,
        });
    }
    Ok(())
}

/// Writes the flashed tag on each Elastic Metal server whose image the inventory records and
/// whose config talos-apply-insecure recorded (which it does only once the node proved ours by
/// mutual TLS); returns the servers that failed.
pub fn tag_proven(inventory: &NodeInventory, api: Baremetal<'_>) -> Vec<NodeFailure> {
    let mut failures = Vec::new();
    for node in inventory
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::ElasticMetal)
    {
        let (Some(image), Some(_)) = (
            node.step(steps::IMAGE_FLASHED),
            node.step(steps::CONFIG_APPLIED),
        ) else {
            pop_common::info!("{}: not proved ours yet, not tagged", node.name);
            continue;
        };
        let tagged = our_server(api, &inventory.cluster_name, node).and_then(|server| {
            if flashed_tag(&server) == Some(image) {
                return Ok(false);
            }
            let tags = with_flashed_tag(&server, Some(format!("{FLASHED_TAG}{image}")));
            api.set_tags(&node.zone, &node.id, &tags)?;
            Ok(true)
        });
        match tagged {
            Ok(true) => pop_common::info!("{}: proved ours, running {image}: tagged", node.name),
            Ok(false) => {}
            Err(error) => {
                let failure = NodeFailure::new(&node.name, error);
                pop_common::warn!("{failure}");
                failures.push(failure);
            }
        }
    }
    failures
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
    mut output: impl Write,
) -> Result<(), Error> {
    let mut inventory: NodeInventory =
        pop_common::input::read_json_from(Path::new("<stdin>"), input)?;
    let client = Client::for_credentials(transport, sleeper, &config.credentials);
    let failures = match &config.mode {
        Mode::TagProven => tag_proven(&inventory, client.baremetal()),
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
                flash_all(config, &mut inventory, &image, client.baremetal(), sleeper)
            } else {
                Vec::new()
            }
        }
    };
    inventory.write_to(&mut output).output()?;
    Ok(pop_common::records::NodeFailures::check(failures)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    fn env() -> Env {
        Env::from_pairs([
            ("SCW_ACCESS_KEY", "SCWXXXXXXXXXXXXXXXXX"),
            ("SCW_SECRET_KEY", "11111111-1111-4111-8111-111111111111"),
            (
                "SCW_DEFAULT_PROJECT_ID",
                "22222222-2222-4222-8222-222222222222",
            ),
            // No config file: the environment alone.
            ("SCW_CONFIG_PATH", "/nonexistent/scw/config.yaml"),
            ("HOME", "/home/op"),
        ])
    }

    #[test]
    fn defaults_come_from_the_environment_and_the_secret_is_never_printed() {
        let cli = Cli::parse_from(["t", "--image", "talos.raw.zst"]);
        let config = resolve(cli, &env()).unwrap();
        assert_eq!(config.mode, Mode::Flash(PathBuf::from("talos.raw.zst")));
        assert!(!config.reflash);
        let tag = Cli::parse_from(["t", "--tag-proven"]);
        assert_eq!(resolve(tag, &env()).unwrap().mode, Mode::TagProven);
        assert!(
            Cli::try_parse_from(["t"]).is_err(),
            "--image or --tag-proven"
        );
        assert_eq!(config.ssh_key, PathBuf::from("/home/op/.ssh/id_ed25519"));
        assert_eq!(config.credentials.api_url, "https://api.scaleway.com");
        assert_eq!(
            (config.ssh_tries, config.ssh_interval),
            (60, Duration::from_secs(10))
        );
        assert_eq!(config.disk, "/dev/sda");
        assert_eq!(config.decompress_on, DecompressOn::Auto);
        assert!(config.sudo);
        assert!(
            !format!("{config:?}").contains("11111111-1111"),
            "{config:?}"
        );
    }

    #[test]
    fn bad_arguments_and_missing_credentials_are_usage_errors() {
        for disk in ["/dev/sda; rm -rf /", "/dev/sda|e reboot", "sda"] {
            let unsafe_disk = Cli::parse_from(["t", "--image", "i", "--disk", disk]);
            let err = resolve(unsafe_disk, &env()).unwrap_err();
            assert_eq!(err.exit(), Exit::Usage);
            assert!(
                err.to_string().contains("--disk") && err.to_string().contains("device path"),
                "{err}"
            );
        }
        let cli = Cli::parse_from(["t", "--image", "i"]);
        let no_credentials = Env::from_pairs([
            ("HOME", "/h"),
            ("SCW_CONFIG_PATH", "/nonexistent/scw/config.yaml"),
        ]);
        let err = resolve(cli, &no_credentials).unwrap_err();
        assert!(err.to_string().contains("SCW_ACCESS_KEY"), "{err}");
        let zero = Cli::parse_from(["t", "--image", "i", "--ssh-tries", "0"]);
        assert!(resolve(zero, &env()).is_err());
        for (url, needle) in [
            ("ftp://x/i.zst", "https only"),
            ("http://factory.example/i.zst", "https only"),
            ("https://x/$(reboot)", "no quotes"),
            ("https://x/\"i", "no quotes"),
            ("https://x/a b", "no quotes"),
            ("https://x/img[1-9].zst", "glob"),
            ("https://x/{a,b}.zst", "glob"),
            // A loopback host only by its prefix: the host is after the `@`.
            ("http://127.0.0.1:x@evil.example/i.zst", "user or password"),
            ("http://localhost:80@evil.example/i.zst", "user or password"),
            ("https://user:secret@b.example/i.zst", "user or password"),
            ("http://127.0.0.1.evil.example/i.zst", "https only"),
            ("https:///i.zst", "no host"),
        ] {
            let cli = Cli::parse_from(["t", "--image", "i", "--image-url", url]);
            let err = resolve(cli, &env()).unwrap_err().to_string();
            assert!(
                err.contains("--image-url") && err.contains(needle),
                "{url}: {err}"
            );
        }
        // A presigned URL is shown without its query string, even when refused.
        let presigned = "http://bucket.example/i.zst?X-Amz-Signature=0123secret";
        let cli = Cli::parse_from(["t", "--image", "i", "--image-url", presigned]);
        let err = resolve(cli, &env()).unwrap_err().to_string();
        assert!(!err.contains("0123secret"), "{err}");
        let url = ImageUrl::parse("https://b.example/i.zst?X-Amz-Signature=0123secret").unwrap();
        assert_eq!(format!("{url:?}"), "https://b.example/i.zst");
        let download_raw = Cli::parse_from([
            "t",
            "--image",
            "i",
            "--image-url",
            "https://x/i.zst",
            "--decompress-on",
            "local",
        ]);
        let err = resolve(download_raw, &env()).unwrap_err().to_string();
        assert!(
            err.contains("--decompress-on local") && err.contains("--image-url"),
            "{err}"
        );
        let good = Cli::parse_from([
            "t",
            "--image",
            "i",
            "--image-url",
            "https://factory.talos.dev/image/3765/v1.13.11/metal-amd64.raw.zst",
        ]);
        assert!(resolve(good, &env()).is_ok());
    }

    #[test]
    fn the_image_is_measured_raw_and_a_non_zstd_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let raw = vec![7u8; 3 << 20];
        let path = dir.path().join("talos.raw.zst");
        std::fs::write(&path, zstd::encode_all(raw.as_slice(), 3).unwrap()).unwrap();
        let image = Image::measure(&path).unwrap();
        assert_eq!(image.size, raw.len() as u64);
        assert_eq!(image.sha256, pop_common::hex::encode(&Sha256::digest(&raw)));
        assert_eq!(
            image.compressed_sha256,
            pop_common::hex::encode(&Sha256::digest(std::fs::read(&path).unwrap()))
        );
        assert!(image.compressed < 1 << 20 && image.worth_sending_compressed());
        let noise = dir.path().join("noise.raw.zst");
        let random = testkit::incompressible_bytes(1 << 20, 7);
        std::fs::write(&noise, zstd::encode_all(random.as_slice(), 3).unwrap()).unwrap();
        let noise = Image::measure(&noise).unwrap();
        assert!(noise.compressed >= noise.size && !noise.worth_sending_compressed());
        let plain = dir.path().join("plain.raw");
        std::fs::write(&plain, &raw).unwrap();
        let err = Image::measure(&plain).unwrap_err().to_string();
        assert!(err.contains("plain.raw") && err.contains("zstd"), "{err}");
    }
}
