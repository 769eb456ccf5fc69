//! The flash of each Elastic Metal node: checked ours and not live, booted into rescue, its
//! disk checked, written, read back, booted normally; and the flashed tag, once proved ours.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use pop_common::records::{
    Node, NodeFailure, NodeInventory, NodeKind, NodeRole, server_tags, steps,
};
use pop_common::wait::{Poll, Sleeper};
use scaleway::baremetal::{Baremetal, BootType, Reboot, Server, ServerStatus};

use crate::WRITTEN_TAG;
use crate::cli::{Config, DecompressOn};
use crate::disk;
use crate::image::Image;
use crate::login::Login;
use crate::rescue::{self, Rescue};
use crate::tags::{flashed_tag, upgraded_tag, with_image_tag, written_tag};
use crate::write::{Root, download_and_write, has_zstd, send_image};

pub use crate::flash_error::FlashError;

/// What a node's flash came to.
enum Flashed {
    Now,
    AlreadyTagged,
    /// Written and read back by an earlier run (its written tag), not written again.
    WrittenBefore,
    /// Upgraded in place with this image's installer (its upgraded tag), not written.
    Upgraded,
}

/// What the server's tags say of its disk, against the image to flash.
enum Disk<'d> {
    /// It runs this image, proved ours.
    Proven,
    /// It was upgraded in place with this image's installer: it runs this image's Talos.
    Upgraded,
    /// This image was written and read back, not yet proved ours.
    Written,
    /// The image is to be written, onto this disk.
    ToWrite(&'d str),
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
    /// The first control plane's address: a worker's Talos API is reached through a control
    /// plane's, which alone serves the kubeconfig talosctl's drain fetches from its endpoint.
    control_plane: Option<String>,
}

/// The IAM key ids the rescue image gets: the inventory's, then `--ssh-key-id`.
fn key_ids(config: &Config, inventory: &NodeInventory) -> Vec<String> {
    let mut key_ids = inventory.ssh_key_ids.clone();
    for id in &config.ssh_key_ids {
        if !key_ids.contains(id) {
            key_ids.push(id.clone());
        }
    }
    key_ids
}

/// The first control plane's address in the inventory.
fn first_control_plane(inventory: &NodeInventory) -> Option<String> {
    inventory
        .nodes
        .iter()
        .filter(|n| n.role == NodeRole::Controlplane)
        .find_map(|n| n.public_ipv4)
        .map(|ip| ip.to_string())
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
    let cluster_name = inventory.cluster_name.clone();
    let job = Job {
        config,
        cluster_name: &cluster_name,
        key_ids: key_ids(config, inventory),
        image,
        api,
        sleeper,
        control_plane: first_control_plane(inventory),
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
            Ok(Flashed::WrittenBefore) => {
                skipped.push(node.name.clone());
                todo.record();
            }
            Ok(Flashed::Upgraded) => {
                pop_common::info!(
                    "{}: the server's tags say it was upgraded in place with {}, the installer of {digest}: not written, recorded as running it",
                    node.name,
                    config.installer_image.as_deref().unwrap_or_default()
                );
                skipped.push(node.name.clone());
                todo.record();
            }
            Ok(Flashed::Now) => {
                flashed.push(node.name.clone());
                todo.record();
                // A new disk: the node is in maintenance mode, waiting for its config.
                todo.node.steps.remove(steps::CONFIG_APPLIED);
                todo.node.steps.remove(steps::PROVED_OURS);
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
pub(crate) fn our_server(
    api: Baremetal<'_>,
    cluster_name: &str,
    node: &Node,
) -> Result<Server, FlashError> {
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
        let poll = Poll {
            tries: self.config.state_tries,
            interval: self.config.ssh_interval,
        };
        let found = poll.until(self.sleeper, |_| {
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
            tries: poll.tries,
            interval: self.config.ssh_interval.as_secs(),
        })
    }

    /// Waits until the server settles, ready (`true`) or stopped (`false`).
    fn ready_or_stopped(&self, node: &Node) -> Result<bool, FlashError> {
        self.wait_for(node, "ready or stopped", |s| match s.status {
            ServerStatus::Ready => Some(true),
            ServerStatus::Stopped => Some(false),
            _ => None,
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
        let ready = self.ready_or_stopped(node)?;
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
        let ip = node
            .public_ipv4
            .map(IpAddr::V4)
            .ok_or(FlashError::NoAddress)?;
        // Its own disk (workers may differ), else --disk.
        let disk = node.install_disk.as_deref().or(self.config.disk.as_deref());
        let disk = match self.disk(node, ip, disk)? {
            Disk::Proven => return Ok(Flashed::AlreadyTagged),
            Disk::Upgraded => return Ok(Flashed::Upgraded),
            Disk::Written => {
                pop_common::info!(
                    "{}: the server's tags say an earlier run wrote and read back {}, not yet proved ours: not written again",
                    node.name,
                    self.image.digest()
                );
                self.boot_normally(node)?;
                return Ok(Flashed::WrittenBefore);
            }
            Disk::ToWrite(disk) => disk,
        };
        // Before the rescue boot, which a login that cannot work would waste.
        let login = Login::resolve(
            &self.config.ssh_key,
            std::env::var_os("SSH_AUTH_SOCK").as_deref(),
        )?;
        if let Login::Agent { .. } = login {
            pop_common::info!(
                "{}: logging into the rescue system with the ssh-agent's identity for {}",
                node.name,
                self.config.ssh_key.display()
            );
        }
        let address = SocketAddr::new(ip, self.config.ssh_port);
        let (session, root) = match self.rescue_left_by_a_cut_run(node, address, &login)? {
            Some(opened) => opened,
            None => {
                self.boot_into(node, BootType::Rescue, &self.key_ids)?;
                self.open_rescue(node, address, &login)?
            }
        };
        self.check_disk(&session, &node.name, disk)?;
        self.write(&session, &root, &node.name, disk)?;
        self.verify(&session, &root, &node.name, disk)?;
        drop(session);
        // Before the normal boot: a run stopped from here on finds the disk written.
        let server = our_server(self.api, self.cluster_name, node)?;
        let written = format!("{WRITTEN_TAG}{}", self.image.digest());
        self.api.set_tags(
            &node.zone,
            &node.id,
            &with_image_tag(&server, Some(written)),
        )?;
        self.boot_into(node, BootType::Normal, &[])?;
        Ok(Flashed::Now)
    }

    /// Ready in normal boot: left as it is when it is (or gets there by itself), else stopped
    /// if need be and started normally (a run stopped between the write and the normal boot
    /// leaves it in rescue, or stopped).
    fn boot_normally(&self, node: &Node) -> Result<(), FlashError> {
        let now = our_server(self.api, self.cluster_name, node)?;
        if now.boot_type == BootType::Normal {
            let ready = self.ready_or_stopped(node)?;
            if ready {
                return Ok(());
            }
        }
        self.boot_into(node, BootType::Normal, &[])
    }

    /// The session to a rescue system an earlier run booted and left (it stopped after the boot:
    /// a refused disk, a cut connection), when the server is ready in rescue now and takes our
    /// login: a second stop and rescue boot would only cost minutes. `None` when it is not in
    /// rescue, or refuses the login (the API does not say which keys that boot got): then it is
    /// booted into rescue again.
    fn rescue_left_by_a_cut_run(
        &self,
        node: &Node,
        address: SocketAddr,
        login: &Login,
    ) -> Result<Option<(Rescue, Root)>, FlashError> {
        let now = self.api.server(&node.zone, &node.id)?;
        let in_rescue = now.is_some_and(|s| {
            s.status == ServerStatus::Ready
                && s.boot_type == BootType::Rescue
                && s.rescue_server.is_some_and(|r| !r.user.is_empty())
        });
        if !in_rescue || !rescue::answers(address, self.config.timeout.min(Duration::from_secs(10)))
        {
            return Ok(None);
        }
        match self.open_rescue(node, address, login) {
            Ok(opened) => {
                pop_common::info!(
                    "{}: already in rescue (an earlier run booted it): its rescue system is used",
                    node.name
                );
                Ok(Some(opened))
            }
            Err(error) => {
                pop_common::info!(
                    "{}: in rescue, but its rescue system cannot be used ({error}): booting it into rescue again",
                    node.name
                );
                Ok(None)
            }
        }
    }

    /// Whether the node's disk is to be written (not when its tags say it runs this image, or
    /// holds it written), checked before anything changes: the server is this cluster's worker,
    /// there is a key for the rescue system and a disk to write, and it runs no other image of ours unless
    /// `--reflash` says to wipe it. An image tag it carries goes before the disk is written.
    fn disk<'d>(
        &self,
        node: &Node,
        ip: IpAddr,
        disk: Option<&'d str>,
    ) -> Result<Disk<'d>, FlashError> {
        let api = self.api;
        let before = our_server(api, self.cluster_name, node)?;
        let wanted = self.image.digest();
        if flashed_tag(&before) == Some(wanted.as_str()) {
            return Ok(Disk::Proven);
        }
        if upgraded_tag(&before).is_some()
            && upgraded_tag(&before) == self.config.installer_image.as_deref()
        {
            return Ok(Disk::Upgraded);
        }
        // Unproven: `--reflash` writes it again (a node someone else configured first).
        if written_tag(&before) == Some(wanted.as_str()) && !self.config.reflash {
            return Ok(Disk::Written);
        }
        // Without a key, the rescue system would lock us out.
        if self.key_ids.is_empty() {
            return Err(FlashError::NoKeys);
        }
        let disk = disk.ok_or(FlashError::NoDisk)?;
        // A worker that runs an image of ours (its tag, written once it proved ours or once it
        // was upgraded in place; or the image recorded, with a config applied over it or a
        // proof made while it ran it) is a live node: a new image would wipe it.
        let running = flashed_tag(&before)
            .map(str::to_owned)
            .or_else(|| upgraded_tag(&before).map(|i| format!("the Talos of {i}")))
            .or_else(|| node.proved_image().map(str::to_owned));
        if let Some(running) = running {
            self.may_wipe(node, ip, running)?;
        }
        // A tag would claim an image the disk no longer holds: gone before the disk is.
        if flashed_tag(&before).is_some()
            || written_tag(&before).is_some()
            || upgraded_tag(&before).is_some()
        {
            api.set_tags(&node.zone, &node.id, &with_image_tag(&before, None))?;
        }
        Ok(Disk::ToWrite(disk))
    }

    /// Refuses to write over a node that runs `running`, unless `--reflash` says to wipe it.
    fn may_wipe(&self, node: &Node, ip: IpAddr, running: String) -> Result<(), FlashError> {
        let (config, name, wanted) = (self.config, &node.name, self.image.digest());
        if !config.reflash {
            let installer = config
                .installer_image
                .clone()
                .unwrap_or_else(|| "<the new image's installer>".into());
            let endpoint = self
                .control_plane
                .as_deref()
                .unwrap_or("<a control plane's address>");
            let by_hand = format!(
                "talosctl --talosconfig {} --endpoints {endpoint} --nodes {ip} upgrade --image {installer}",
                config.talosconfig.display()
            );
            return Err(FlashError::RunsAnotherImage {
                running,
                wanted,
                by_hand,
                installer,
            });
        }
        pop_common::warn!(
            "{name}: runs {running}; --reflash: writing {wanted} over it (the node is wiped)"
        );
        Ok(())
    }

    /// Once the server is in rescue: waits for its SSH, reads its rescue credentials again (the
    /// API may fill them after its first `ready`), connects, and finds how to be root there.
    fn open_rescue(
        &self,
        node: &Node,
        address: SocketAddr,
        login: &Login,
    ) -> Result<(Rescue, Root), FlashError> {
        let (config, name) = (self.config, &node.name);
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
                id: node.id.clone(),
                zone: node.zone.clone(),
                tries: config.ssh_tries,
                interval: config.ssh_interval.as_secs(),
            });
        }
        let credentials = self.wait_for(node, "showing its rescue credentials", |s| {
            s.rescue_server.clone().filter(|r| !r.user.is_empty())
        })?;
        let user = config.ssh_user.clone().unwrap_or(credentials.user);
        let session = Rescue::connect(address, &user, login, config.timeout)?;
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
        Ok((session, root))
    }

    /// The target disk, as `lsblk` shows it: there, whole, large enough, nothing mounted.
    fn check_disk(&self, session: &Rescue, name: &str, disk: &str) -> Result<(), FlashError> {
        let image = self.image;
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
        let disk_size = disk::check(&lsblk.stdout, disk, image.size)?;
        pop_common::info!(
            "{name}: writing {} ({} bytes raw) onto {disk} ({disk_size} bytes)",
            image.path.display(),
            image.size,
        );
        Ok(())
    }

    /// The image onto the disk: downloaded by the rescue system with `--image-url`, else sent
    /// compressed or raw, as `--decompress-on` and what the rescue system has decide.
    fn write(
        &self,
        session: &Rescue,
        root: &Root,
        name: &str,
        disk: &str,
    ) -> Result<(), FlashError> {
        let (config, image) = (self.config, self.image);
        let write = format!("dd of={disk} bs=4M conv=fsync status=none");
        if let Some(url) = &config.image_url {
            return download_and_write(session, image, root, &write, url, name);
        }
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
                let found = has_zstd(session)?;
                if !found {
                    pop_common::info!("{name}: the rescue system has no zstd");
                }
                found
            }
            DecompressOn::Rescue if has_zstd(session)? => true,
            DecompressOn::Rescue => return Err(FlashError::NoZstd),
        };
        send_image(session, image, root, &write, on_rescue, name)
    }

    /// Syncs, then reads the disk back and compares its sha256 with the image's.
    fn verify(
        &self,
        session: &Rescue,
        root: &Root,
        name: &str,
        disk: &str,
    ) -> Result<(), FlashError> {
        let image = self.image;
        let flush = session.run_with_input(
            &format!(
                "{}sh -c 'sync && if [ -b {disk} ]; then blockdev --flushbufs {disk}; fi'",
                root.prefix(),
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
                "{}sh -c 'head -c {} {disk} | sha256sum'",
                root.prefix(),
                image.size,
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
                disk: disk.to_owned(),
                found: on_disk.to_owned(),
                want: image.sha256.clone(),
                stderr: read_back.stderr.trim().to_owned(),
            });
        }
        pop_common::info!("{name}: {disk} verified (sha256 {on_disk}); booting it normally");
        Ok(())
    }
}
