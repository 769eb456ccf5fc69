//! `scw-rescue-flash`: Talos onto the Elastic Metal worker's disk, from Scaleway's rescue system
//! (Scaleway installs only the OS images of its catalogue on Elastic Metal, so the Talos image is
//! written from rescue).
//!
//! Reads the `NodeInventory` on stdin; for each Elastic Metal node whose recorded
//! `image_flashed` digest is not this image's:
//! 1. reboots it into rescue (Elastic Metal API), waits until the API says it is ready in rescue,
//!    then until SSH answers (`--ssh-tries` times `--ssh-interval-seconds` apart, 60 x 10 s);
//! 2. connects with the SSH key; the rescue host key is new at each rescue boot, so its
//!    fingerprint is logged and accepted for this session only (never written to known_hosts);
//! 3. reads `lsblk --json -b -p`, logs it, checks the target disk (exists, whole disk, large
//!    enough, nothing mounted) and otherwise refuses, naming the disks that would do;
//! 4. streams the image into `dd` on the rescue side, with a progress bar on stderr: compressed,
//!    for the rescue system's `zstd -dc` to expand, when it has zstd and the .zst saves at least
//!    a tenth of the bytes (a disk image is mostly free space, so a fraction of the raw bytes
//!    crosses the network and the SSH cipher), else decompressed here; syncs; reads the disk
//!    back and compares the sha256 with the image's;
//! 5. reboots it normally and records `image_flashed: sha256:<digest of the raw image>`, in the
//!    inventory and in the server's tags (`edgepop-image-flashed=sha256:...`), so that a re-run
//!    from a fresh inventory finds it done too.
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
use pop_common::records::{Node, NodeFailure, NodeInventory, NodeKind, steps};
use pop_common::tool::Env;
use pop_common::wait::{Poll, Sleeper, ThreadSleeper};
use scaleway::baremetal::{Baremetal, BootType, Reboot, ServerStatus};
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
    #[arg(long)]
    pub image: PathBuf,
    /// The disk to write (the worker's install_disk; Scaleway may present NVMe).
    #[arg(long, default_value = "/dev/sda")]
    pub disk: String,
    /// The SSH private key whose public half is registered at Scaleway [default: ~/.ssh/id_ed25519].
    #[arg(long)]
    pub ssh_key: Option<PathBuf>,
    /// SSH user in rescue [default: the server's rescue_server.user, else `rescue`].
    #[arg(long)]
    pub ssh_user: Option<String>,
    #[arg(long, default_value_t = 22)]
    pub ssh_port: u16,
    /// How many times to check for the rescue system (API, then SSH).
    #[arg(long, default_value_t = 60)]
    pub ssh_tries: u32,
    /// Seconds between two checks.
    #[arg(long, default_value_t = 10)]
    pub ssh_interval_seconds: u64,
    /// Scaleway SSH key ids to add to the rescue system (`ssh_key_ids` of the reboot).
    #[arg(long = "ssh-key-id")]
    pub ssh_key_ids: Vec<String>,
    /// Let the rescue system download the image itself from this URL (the same file as --image,
    /// which still gives the size and the digest the read-back is checked against).
    #[arg(long, value_name = "URL")]
    pub image_url: Option<String>,
    /// Where the image is decompressed: `rescue` sends the .zst as it is and runs `zstd -dc`
    /// there, `local` sends the raw image, `auto` is `rescue` when the rescue system has zstd
    /// and the .zst is at most nine tenths of the raw image.
    #[arg(long, value_enum, default_value_t = DecompressOn::Auto)]
    pub decompress_on: DecompressOn,
    /// Run the disk commands without `sudo -n` (when the rescue user is root).
    #[arg(long)]
    pub no_sudo: bool,
    /// Seconds allowed for one API call, one SSH connection or one stalled SSH read/write.
    #[arg(long, default_value_t = 60)]
    pub timeout_seconds: u64,
}

/// What `run` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub image: PathBuf,
    pub disk: String,
    pub ssh_key: PathBuf,
    pub ssh_user: Option<String>,
    pub ssh_port: u16,
    pub ssh_tries: u32,
    pub ssh_interval: Duration,
    pub ssh_key_ids: Vec<String>,
    pub image_url: Option<String>,
    pub decompress_on: DecompressOn,
    pub sudo: bool,
    pub timeout: Duration,
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

/// A disk path that is safe to put in a shell command line as is.
fn plain_path(path: &str) -> bool {
    path.starts_with('/')
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b))
}

/// A URL that can sit inside double quotes in a shell command line as is.
fn plain_url(url: &str) -> bool {
    (url.starts_with("https://") || url.starts_with("http://"))
        && url
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~:/?#[]@!&()*+,;=%".contains(&b))
}

/// Checks the arguments and reads the Scaleway credentials from the environment.
pub fn resolve(cli: Cli, env: &Env) -> Result<Config, Error> {
    if !plain_path(&cli.disk) {
        return Err(Error::Usage(format!(
            "--disk `{}`: an absolute device path such as /dev/sda or /dev/nvme0n1",
            cli.disk
        )));
    }
    if cli.ssh_tries == 0 {
        return Err(Error::Usage("--ssh-tries: must be at least 1".into()));
    }
    if let Some(url) = &cli.image_url
        && !plain_url(url)
    {
        return Err(Error::Usage(format!(
            "--image-url `{url}`: an http(s) URL without quotes, spaces or shell characters"
        )));
    }
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
    if cli.image_url.is_some() && cli.decompress_on == DecompressOn::Local {
        return Err(Error::Usage(
            "--decompress-on local cannot go with --image-url: the rescue system decompresses what it downloads".into(),
        ));
    }
    if let Some(user) = &cli.ssh_user
        && user.is_empty()
    {
        return Err(Error::Usage("--ssh-user: empty".into()));
    }
    Ok(Config {
        image: cli.image,
        disk: cli.disk,
        ssh_key,
        ssh_user: cli.ssh_user,
        ssh_port: cli.ssh_port,
        ssh_tries: cli.ssh_tries,
        ssh_interval: Duration::from_secs(cli.ssh_interval_seconds),
        ssh_key_ids: cli.ssh_key_ids,
        image_url: cli.image_url,
        decompress_on: cli.decompress_on,
        sudo: !cli.no_sudo,
        timeout: Duration::from_secs(cli.timeout_seconds.max(1)),
        credentials,
    })
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
        let mut reader = Image::decoder(path, file)?;
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
    fn decoder(path: &Path, file: File) -> Result<impl Read + use<>, ImageError> {
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

/// Why one node was not flashed.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    #[error("no public IPv4 in the inventory")]
    NoAddress,
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("server {id} does not exist in {zone} (scw baremetal server get {id} zone={zone})")]
    NoServer { id: String, zone: String },
    #[error(
        "server {name} never became ready in rescue after {tries} checks {interval}s apart (scw baremetal server get {id} zone={zone})"
    )]
    NeverInRescue {
        name: String,
        id: String,
        zone: String,
        tries: u32,
        interval: u64,
    },
    #[error(
        "server {name}: the rescue system never answered SSH on {address} after {tries} tries {interval}s apart; check that it booted into rescue and that the SSH key is the one registered at Scaleway, then retry (by hand: scw baremetal server reboot {id} boot-type=rescue zone={zone})"
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

/// Flashes every Elastic Metal node of `inventory` whose recorded image is not this one,
/// recording what it did there; returns the nodes that failed, and why.
pub fn flash_all(
    config: &Config,
    inventory: &mut NodeInventory,
    image: &Image,
    api: Baremetal<'_>,
    sleeper: &dyn Sleeper,
) -> Vec<NodeFailure> {
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
        match flash_one(config, node, image, api, sleeper) {
            Ok(Flashed::AlreadyTagged) => {
                pop_common::info!(
                    "{}: the server's tags say it already has {digest}, skipped",
                    node.name
                );
                skipped.push(node.name.clone());
                todo.record();
            }
            Ok(Flashed::Now) => {
                flashed.push(node.name.clone());
                todo.record();
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

fn sudo(config: &Config) -> &'static str {
    if config.sudo { "sudo -n " } else { "" }
}

fn flash_one(
    config: &Config,
    node: &Node,
    image: &Image,
    api: Baremetal<'_>,
    sleeper: &dyn Sleeper,
) -> Result<Flashed, FlashError> {
    let name = &node.name;
    let ip = node
        .public_ipv4
        .map(IpAddr::V4)
        .ok_or(FlashError::NoAddress)?;
    let address = SocketAddr::new(ip, config.ssh_port);
    let (zone, id) = (node.zone.as_str(), node.id.as_str());
    let no_server = || FlashError::NoServer {
        id: id.to_owned(),
        zone: zone.to_owned(),
    };
    let tag = format!("{FLASHED_TAG}{}", image.digest());
    let before = api.server(zone, id)?.ok_or_else(no_server)?;
    if before.tags.contains(&tag) {
        return Ok(Flashed::AlreadyTagged);
    }

    pop_common::info!("{name}: rebooting into rescue");
    api.reboot(
        zone,
        id,
        &Reboot {
            boot_type: BootType::Rescue,
            ssh_key_ids: config.ssh_key_ids.clone(),
        },
    )?;
    let poll = Poll {
        tries: config.ssh_tries,
        interval: config.ssh_interval,
    };
    let server = poll
        .until(sleeper, |_| {
            let now = api.server(zone, id)?.ok_or_else(no_server)?;
            if now.status == ServerStatus::Ready && now.boot_type == BootType::Rescue {
                return Ok(Some(now));
            }
            pop_common::debug!("{name}: {} ({} boot), waiting", now.status, now.boot_type);
            Ok::<_, FlashError>(None)
        })?
        .ok_or_else(|| FlashError::NeverInRescue {
            name: name.clone(),
            id: id.to_owned(),
            zone: zone.to_owned(),
            tries: config.ssh_tries,
            interval: config.ssh_interval.as_secs(),
        })?;
    let answered = poll.until(sleeper, |attempt| {
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
    let user = config
        .ssh_user
        .clone()
        .or(server.rescue_server.map(|r| r.user))
        .unwrap_or_else(|| "rescue".to_owned());
    let session = Rescue::connect(address, &user, &config.ssh_key, config.timeout)?;
    pop_common::info!(
        "{name}: rescue host key {} accepted for this session only (not written to known_hosts); cipher {}",
        session.host_key_fingerprint,
        session.cipher()
    );

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

    let write = format!(
        "{}dd of={} bs=4M conv=fsync status=none",
        sudo(config),
        config.disk
    );
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
            send_image(&session, image, &write, on_rescue, name)?;
        }
        Some(url) => {
            // The rescue host fetches the same pinned file itself (its uplink is the data
            // centre's); the read-back below checks it against the local copy's digest.
            pop_common::info!("{name}: the rescue system downloads {url} and writes it");
            let ran = session.run(&pipefail(&format!(
                "curl -fsSL --retry 3 \"{url}\" | zstd -dc | {write}"
            )))?;
            if ran.status != 0 {
                return Err(FlashError::Command {
                    what: "the download and write on the rescue system",
                    status: ran.status,
                    stderr: ran.stderr.trim().to_owned(),
                });
            }
        }
    }
    let flush = format!(
        "{}sh -c 'sync && if [ -b {disk} ]; then blockdev --flushbufs {disk}; fi'",
        sudo(config),
        disk = config.disk
    );
    let synced = session.run(&flush)?;
    if synced.status != 0 {
        return Err(FlashError::Command {
            what: "sync",
            status: synced.status,
            stderr: synced.stderr.trim().to_owned(),
        });
    }
    let read_back = session.run(&format!(
        "{}head -c {} {} | sha256sum",
        sudo(config),
        image.size,
        config.disk
    ))?;
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
        "{name}: {} verified (sha256 {on_disk}); rebooting normally",
        config.disk
    );
    api.reboot(
        zone,
        id,
        &Reboot {
            boot_type: BootType::Normal,
            ssh_key_ids: Vec::new(),
        },
    )?;
    let mut tags: Vec<String> = before
        .tags
        .into_iter()
        .filter(|t| !t.starts_with(FLASHED_TAG))
        .collect();
    tags.push(tag);
    api.set_tags(zone, id, &tags)?;
    Ok(Flashed::Now)
}

/// `pipeline` as one command for the rescue shell, failing when any of its stages fails.
fn pipefail(pipeline: &str) -> String {
    format!("bash -c 'set -o pipefail; {pipeline}'")
}

/// Whether the rescue system can decompress the image itself.
fn has_zstd(session: &Rescue) -> Result<bool, SshError> {
    Ok(session.run("zstd --version")?.status == 0)
}

/// Streams `image` into `write` (the `dd` on the rescue side). With `on_rescue`, the .zst goes
/// as it is, into `zstd -dc | write` there: only the compressed bytes cross the network and the
/// SSH cipher, the part of the write that costs the most. Otherwise it is decompressed here, in
/// its own thread, so that the decompression overlaps the encryption and sending.
pub fn send_image(
    session: &Rescue,
    image: &Image,
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
        let command = pipefail(&format!("zstd -dc | {write}"));
        let mut progress = Progress::new(&format!("{name} (compressed)"), size);
        let sent = session.stream(&command, read_ahead::ReadAhead::new(file), &mut progress)?;
        (command, size, sent)
    } else {
        pop_common::info!(
            "{name}: decompressing here, sending the raw image ({} bytes)",
            image.size
        );
        let reader = read_ahead::ReadAhead::new(Image::open_at(&image.path)?);
        let mut progress = Progress::new(name, image.size);
        let sent = session.stream(write, reader, &mut progress)?;
        (write.to_owned(), image.size, sent)
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

/// Reads the inventory on `input`, flashes the nodes, writes the inventory on `output`.
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
    mut input: impl Read,
    mut output: impl Write,
) -> Result<(), Error> {
    let stdin = Path::new("<stdin>");
    let mut bytes = Vec::new();
    input
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Read {
            path: stdin.to_path_buf(),
            source,
        })?;
    let mut inventory: NodeInventory = pop_common::input::decode_json(stdin, &bytes)?;
    let needs_work = inventory
        .nodes
        .iter()
        .any(|n| n.kind == NodeKind::ElasticMetal);
    let failures = if needs_work {
        let image = Image::measure(&config.image)?;
        pop_common::info!(
            "image {}: {} bytes raw, {}",
            config.image.display(),
            image.size,
            image.digest()
        );
        let client = Client::new(
            transport,
            sleeper,
            &config.credentials.api_url,
            config.credentials.secret_key.clone(),
            &config.credentials.project_id,
        );
        flash_all(config, &mut inventory, &image, client.baremetal(), sleeper)
    } else {
        Vec::new()
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
        let unsafe_disk = Cli::parse_from(["t", "--image", "i", "--disk", "/dev/sda; rm -rf /"]);
        let err = resolve(unsafe_disk, &env()).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        assert!(err.to_string().contains("--disk"));
        let cli = Cli::parse_from(["t", "--image", "i"]);
        let no_credentials = Env::from_pairs([
            ("HOME", "/h"),
            ("SCW_CONFIG_PATH", "/nonexistent/scw/config.yaml"),
        ]);
        let err = resolve(cli, &no_credentials).unwrap_err();
        assert!(err.to_string().contains("SCW_ACCESS_KEY"), "{err}");
        let zero = Cli::parse_from(["t", "--image", "i", "--ssh-tries", "0"]);
        assert!(resolve(zero, &env()).is_err());
        for url in [
            "ftp://x/i.zst",
            "https://x/$(reboot)",
            "https://x/\"i",
            "https://x/a b",
        ] {
            let cli = Cli::parse_from(["t", "--image", "i", "--image-url", url]);
            let err = resolve(cli, &env()).unwrap_err();
            assert!(err.to_string().contains("--image-url"), "{url}: {err}");
        }
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
