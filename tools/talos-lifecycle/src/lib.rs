//! `talos-lifecycle`: day-2 work on a Talos cluster (its etcd, its upgrades), in the order and behind the gates
//! Talos's own procedures ask for, through the real talosctl.
//!
//! ```text
//! talos-lifecycle snapshot --out-dir talos/_out/etcd < talos/_out/inventory.json
//! talos-lifecycle restore --snapshot FILE [--skip-hash-check] [--reset-ephemeral] [--dry-run] < talos/_out/inventory.json
//! talos-lifecycle remove-member --node NAME [--failed] [--dry-run] < talos/_out/inventory.json
//! talos-lifecycle upgrade --to vX.Y.Z --control-plane-installer IMAGE --worker-installer IMAGE \
//!     [--dry-run] < talos/_out/inventory.json
//! talos-lifecycle upgrade-k8s --to vX.Y.Z [--dry-run] < talos/_out/inventory.json
//! talos-lifecycle await-healthy [--wait-tries N] < talos/_out/inventory.json
//! ```
//!
//! Reads the `NodeInventory` on stdin and asks each control plane's etcd member for its status
//! (`talosctl etcd status`, one node at a time, through its own Talos API).
//!
//! - `snapshot` streams a snapshot from the first control plane whose member answers with a
//!   leader and no error (`talosctl etcd snapshot`, which writes the file 0600 and checks its
//!   sha256 trailer) into `<out-dir>/<cluster>-<YYYYMMDDTHHMMSSZ>.snapshot` (the folder made
//!   0700), reads it back with `etcdutl snapshot status`, and prints an `EtcdSnapshot` record.
//! - `restore` reads the snapshot with `etcdutl snapshot status` first (a file it refuses is bad
//!   input: exit 2, nothing done), then refuses (exit 1) when a majority of the members answer
//!   with the same leader, naming them: a cluster that holds its quorum is repaired by replacing
//!   its broken members, and a restore throws away everything written since the snapshot. The
//!   members are read three times, two seconds apart, so that an election under way is not
//!   taken for a lost quorum.
//!   Each control plane that answers is then asked for its etcd service (`talosctl service
//!   etcd`): one that is not `Preparing` still holds etcd data, which Talos would refuse to
//!   recover over, and the restore is refused (exit 1) naming them, unless `--reset-ephemeral`:
//!   each gets `talosctl reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL` and
//!   is waited for until `Preparing`, as Talos's disaster recovery does.
//!   Then it recovers on the first control plane whose Talos API answers
//!   (`talosctl bootstrap --recover-from`: Talos restores the snapshot as a one-member cluster,
//!   which the other control planes join), waits until that member answers with a leader, stops
//!   each answering control plane's kube-apiserver for its kubelet to start it again on the
//!   recovered etcd (`talosctl restart -k`: a running one keeps serving its cache), and prints
//!   an `EtcdRecovery` record.
//! - `remove-member` takes a control plane's member out of etcd, the first step of replacing it:
//!   refused (exit 1) unless every other member answers healthy following one leader, then a
//!   snapshot as above, then `talosctl etcd leave` on the node (Talos removes the member and
//!   empties its etcd folder), or, `--failed`, `talosctl etcd remove-member <id>` through another
//!   control plane for a node that is gone; it waits until the member list no longer names it and
//!   prints an `EtcdMemberRemoval` record.
//!
//! - `upgrade` brings every node to the Talos version `--to`. It reads talosctl's version (the
//!   target's minor) and each node's (`talosctl version`), and refuses (exit 2, nothing done) a
//!   node whose path to the target is not the same minor or the next, and an installer that is
//!   not the node kind's (`scaleway-installer` for the control planes, `metal-installer` for the
//!   workers) or not tagged with the target. Then, when a node is behind: an etcd snapshot as
//!   `snapshot` takes it; the control planes one at a time, then the workers, each behind the
//!   gate (every etcd member healthy under one leader, as many members as control planes, every
//!   Kubernetes node Ready; otherwise exit 1 before anything starts on it), upgraded with
//!   `talosctl upgrade --image` and waited for (its version, its member, Ready). It prints the
//!   `EtcdSnapshot` record and a `TalosUpgraded` record a node. A node that runs the target
//!   already is left alone, so a run cut short resumes at the first node not yet upgraded.
//!
//! - `upgrade-k8s` brings Kubernetes to `--to` through `talosctl upgrade-k8s` on a healthy
//!   control plane. It refuses (exit 2) a target the nodes' Talos does not support, and a path
//!   from a kubelet (`kubectl get nodes`) or a control plane component (its static pod's mirror
//!   in kube-system, where talosctl reads the version it upgrades from) that is not the same
//!   minor or the next. When one is behind: a snapshot, the gate, `talosctl upgrade-k8s --to`,
//!   then a wait until every kubelet runs the target, Ready; it prints the `EtcdSnapshot` record
//!   and a `KubernetesUpgraded` one. talosctl's upgrade is itself node by node and may be run
//!   again.
//!
//! - `await-healthy` looks, at most `--wait-tries` times, until the cluster passes that same gate,
//!   and exits 1 naming what is still wrong if it never does. It changes nothing and prints
//!   nothing on stdout: the last step of replacing a control plane, whose new machine boots,
//!   joins etcd as a learner, is promoted to a voter, and registers its node.
//!
//! `--dry-run` prints the plan, one `EtcdPlanStep` (`TalosUpgradeStep` for an upgrade) line a
//! step, after the same reads and gates,
//! and changes nothing. stdout carries the records only; talosctl's own words go to stderr. The
//! snapshot's content (every Secret of the cluster) is never read into a message.

mod plan;
pub mod quorum;
pub mod talos;
pub mod upgrade;
pub mod upgrade_k8s;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use pop_common::exit::WritingOutput;
use pop_common::input::InputError;
use pop_common::records::{NodeInventory, NodeRole};
use pop_common::tool::Env;
use pop_common::wait::{Poll, Sleeper, ThreadSleeper};

pub use crate::error::Error;
pub use crate::plan::snapshot_path;
use crate::quorum::{Observed, Quorum, TalosNode};
use crate::talos::{Programs, Talos};
use crate::upgrade::{Release, UpgradeNode};

mod error;
mod run;
mod run_upgrade;

#[derive(Debug, Parser)]
#[command(name = "talos-lifecycle", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub action: Action,
    /// The cluster's talosconfig (its admin key: read by talosctl only, never printed).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        default_value = "talos/_out/talosconfig"
    )]
    pub talosconfig: PathBuf,
    /// The port of the Talos API (apid) on every node.
    #[arg(long, global = true, value_name = "PORT", default_value_t = 50000)]
    pub talos_port: u16,
    /// The talosctl to run (of the cluster's minor).
    #[arg(
        long,
        global = true,
        value_name = "PROGRAM",
        default_value = "talosctl"
    )]
    pub talosctl: PathBuf,
    /// The etcdutl that reads the snapshot files (`snapshot status`).
    #[arg(long, global = true, value_name = "PROGRAM", default_value = "etcdutl")]
    pub etcdutl: PathBuf,
    /// The kubectl that reads the nodes' readiness (an upgrade's gate).
    #[arg(long, global = true, value_name = "PROGRAM", default_value = "kubectl")]
    pub kubectl: PathBuf,
    /// The cluster's kubeconfig (an upgrade's gate reads the nodes' readiness through it).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        default_value = "talos/_out/kubeconfig"
    )]
    pub kubeconfig: PathBuf,
    /// Print the plan (one JSON line a step) after the reads and the gates; change nothing.
    #[arg(long, global = true)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Action {
    /// Take a snapshot of etcd from a healthy control plane into a 0600 file, checked by etcdutl.
    Snapshot {
        /// The folder of the snapshots (made 0700 when missing).
        #[arg(long, value_name = "DIR", default_value = "talos/_out/etcd")]
        out_dir: PathBuf,
    },
    /// Recover etcd from a snapshot on one control plane; refused while etcd holds its quorum.
    Restore {
        /// The snapshot file (`talosctl etcd snapshot`, or make etcd-snapshot).
        #[arg(long, value_name = "FILE")]
        snapshot: PathBuf,
        /// For a copy of a member's data folder (`member/snap/db`), which has no sha256 trailer.
        #[arg(long)]
        skip_hash_check: bool,
        /// Wipe the EPHEMERAL partition (etcd's folder with it) of each answering control plane
        /// whose etcd still holds data, and wait until it is back, before the recovery.
        #[arg(long)]
        reset_ephemeral: bool,
        /// How many times to ask the recovered member for its status before giving up.
        #[arg(long, default_value_t = 60)]
        wait_tries: u32,
        #[arg(long, default_value_t = 5)]
        wait_interval_seconds: u64,
    },
    /// Take a control plane's etcd member out, after a snapshot, while every other member is
    /// healthy: it leaves on its own, or (--failed, its node gone) is removed through another
    /// control plane. The first step of replacing that control plane.
    RemoveMember {
        /// The control plane, by its inventory name.
        #[arg(long, value_name = "NAME")]
        node: String,
        /// Its node does not answer: remove its member through another control plane
        /// (`talosctl etcd remove-member`) instead of letting it leave.
        #[arg(long)]
        failed: bool,
        /// The folder of the snapshot taken first (made 0700 when missing).
        #[arg(long, value_name = "DIR", default_value = "talos/_out/etcd")]
        out_dir: PathBuf,
        /// How many times to read the member list before giving up on the removal.
        #[arg(long, default_value_t = 30)]
        wait_tries: u32,
        #[arg(long, default_value_t = 2)]
        wait_interval_seconds: u64,
    },
    /// Wait until every control plane's etcd member answers healthy (a voter following the one
    /// leader), etcd lists one member per control plane, and every node is Ready: the last step
    /// of replacing a control plane, whose new machine joins as a learner first.
    AwaitHealthy {
        /// How many times to look before giving up.
        #[arg(long, default_value_t = 120)]
        wait_tries: u32,
        #[arg(long, default_value_t = 5)]
        wait_interval_seconds: u64,
    },
    /// Upgrade Talos node by node to `--to`: snapshot first, control planes one at a time
    /// behind the etcd and readiness gate, then the workers; nodes at the target are skipped.
    Upgrade {
        /// The Talos version to bring every node to (TALOS_VERSION).
        #[arg(long, value_name = "VERSION")]
        to: String,
        /// The control planes' installer: `<factory>/scaleway-installer/<schematic>:<to>`.
        #[arg(long, value_name = "IMAGE")]
        control_plane_installer: String,
        /// The workers' installer: `<factory>/metal-installer/<schematic>:<to>`.
        #[arg(long, value_name = "IMAGE")]
        worker_installer: String,
        #[command(flatten)]
        run: UpgradeRun,
    },
    /// Upgrade Kubernetes to `--to` through `talosctl upgrade-k8s`: snapshot first, behind the
    /// etcd and readiness gate; nothing to do when every kubelet and static pod runs it.
    UpgradeK8s {
        /// The Kubernetes version to bring the cluster to (KUBERNETES_VERSION).
        #[arg(long, value_name = "VERSION")]
        to: String,
        #[command(flatten)]
        run: UpgradeRun,
    },
}

/// What both upgrades share: where the snapshot goes, how long the upgraded nodes are waited for.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct UpgradeRun {
    /// The folder of the snapshot taken first (made 0700 when missing).
    #[arg(long, value_name = "DIR", default_value = "talos/_out/etcd")]
    pub out_dir: PathBuf,
    /// How many times to ask an upgraded node (or, for Kubernetes, every node) for its versions,
    /// its etcd member and its readiness.
    #[arg(long, default_value_t = 120)]
    pub wait_tries: u32,
    #[arg(long, default_value_t = 5)]
    pub wait_interval_seconds: u64,
}

/// `tries` looks, `interval_seconds` apart: the wait arguments of every action.
fn poll(tries: u32, interval_seconds: u64) -> Poll {
    Poll {
        tries,
        interval: Duration::from_secs(interval_seconds),
    }
}

impl UpgradeRun {
    fn poll(&self) -> Poll {
        poll(self.wait_tries, self.wait_interval_seconds)
    }
}

/// The arguments, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub action: Action,
    pub programs: Programs,
    pub talos_port: u16,
    pub dry_run: bool,
}

/// Checks the files the arguments name (the talosconfig, the snapshot to restore, the
/// kubeconfig of an upgrade), and an upgrade's target and installers.
pub fn resolve(cli: Cli, _env: &Env) -> Result<Config, Error> {
    readable(&cli.talosconfig)?;
    match &cli.action {
        Action::Restore { snapshot, .. } => readable(snapshot)?,
        Action::Snapshot { out_dir } | Action::RemoveMember { out_dir, .. } => a_folder(out_dir)?,
        Action::AwaitHealthy { .. } => readable(&cli.kubeconfig)?,
        Action::UpgradeK8s { to, run } => {
            readable(&cli.kubeconfig)?;
            a_folder(&run.out_dir)?;
            target(to)?;
        }
        Action::Upgrade {
            to,
            control_plane_installer,
            worker_installer,
            run,
        } => {
            readable(&cli.kubeconfig)?;
            a_folder(&run.out_dir)?;
            let to = target(to)?;
            for (field, image, role) in [
                (
                    "--control-plane-installer",
                    control_plane_installer,
                    NodeRole::Controlplane,
                ),
                ("--worker-installer", worker_installer, NodeRole::Worker),
            ] {
                upgrade::check_installer(image, role, &to).map_err(|message| {
                    InputError::field(Path::new("<arguments>"), field, message)
                })?;
            }
        }
    }
    Ok(Config {
        action: cli.action,
        programs: Programs {
            talosctl: cli.talosctl,
            etcdutl: cli.etcdutl,
            talosconfig: cli.talosconfig,
            kubectl: cli.kubectl,
            kubeconfig: cli.kubeconfig,
        },
        talos_port: cli.talos_port,
        dry_run: cli.dry_run,
    })
}

/// `--to`: a release, `vMAJOR.MINOR.PATCH`.
fn target(to: &str) -> Result<Release, Error> {
    Release::parse(to).ok_or_else(|| {
        InputError::field(
            Path::new("<arguments>"),
            "--to",
            format!("`{to}` is not a release (vMAJOR.MINOR.PATCH)"),
        )
        .into()
    })
}

fn a_folder(dir: &Path) -> Result<(), Error> {
    if dir.exists() && !dir.is_dir() {
        return Err(Error::File {
            path: dir.to_path_buf(),
            message: "--out-dir is not a folder".into(),
        });
    }
    Ok(())
}

fn readable(path: &Path) -> Result<(), Error> {
    std::fs::File::open(path)
        .and_then(|f| f.metadata())
        .map_err(|err| err.to_string())
        .and_then(|m| {
            if m.is_file() {
                Ok(())
            } else {
                Err("not a file".into())
            }
        })
        .map_err(|message| Error::File {
            path: path.to_path_buf(),
            message,
        })
}

/// Reads the inventory on `input`, does the action, writes its records on `output`.
pub fn run(config: &Config, input: impl Read, output: impl Write) -> Result<(), Error> {
    let now = pop_common::time::now_secs();
    run_with(config, &config.programs, &ThreadSleeper, now, input, output)
}

/// [`run`] with the cluster's calls, the clock and the time (seconds since the epoch) given.
pub fn run_with(
    config: &Config,
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    now: u64,
    input: impl Read,
    mut output: impl Write,
) -> Result<(), Error> {
    let inventory: NodeInventory = pop_common::input::read_json_from(Path::new("<stdin>"), input)?;
    let cluster = inventory.cluster_name.as_str();
    if matches!(
        config.action,
        Action::Upgrade { .. } | Action::UpgradeK8s { .. } | Action::AwaitHealthy { .. }
    ) {
        return upgrades(config, talos, sleeper, &inventory, now, &mut output);
    }
    let nodes: Vec<TalosNode> = talos_nodes(&inventory, config.talos_port, |r| {
        r == NodeRole::Controlplane
    })?
    .into_iter()
    .map(|n| n.node)
    .collect();
    match &config.action {
        Action::Snapshot { out_dir } => {
            let path = plan::snapshot_path(out_dir, cluster, now);
            run::snapshot(config, talos, cluster, &nodes, &path, now, &mut output)
        }
        Action::Restore {
            snapshot,
            skip_hash_check,
            reset_ephemeral,
            wait_tries,
            wait_interval_seconds,
        } => {
            let wait = poll(*wait_tries, *wait_interval_seconds);
            let restore = run::Restore {
                snapshot,
                skip_hash_check: *skip_hash_check,
                reset_ephemeral: *reset_ephemeral,
                wait,
            };
            run::restore(
                config,
                talos,
                sleeper,
                cluster,
                &nodes,
                &restore,
                &mut output,
            )
        }
        Action::RemoveMember {
            node,
            failed,
            out_dir,
            wait_tries,
            wait_interval_seconds,
        } => {
            let path = plan::snapshot_path(out_dir, cluster, now);
            let removal = run::RemoveMember {
                node,
                failed: *failed,
                snapshot: &path,
                wait: poll(*wait_tries, *wait_interval_seconds),
            };
            run::remove_member(
                config,
                talos,
                sleeper,
                cluster,
                &nodes,
                &removal,
                now,
                &mut output,
            )
        }
        Action::Upgrade { .. } | Action::UpgradeK8s { .. } | Action::AwaitHealthy { .. } => Ok(()),
    }
}

/// The two upgrades, over every node of the inventory.
fn upgrades(
    config: &Config,
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    inventory: &NodeInventory,
    now: u64,
    output: &mut dyn Write,
) -> Result<(), Error> {
    let cluster = inventory.cluster_name.as_str();
    let nodes = talos_nodes(inventory, config.talos_port, |_| true)?;
    match &config.action {
        Action::Upgrade {
            to,
            control_plane_installer,
            worker_installer,
            run,
        } => {
            let asked = run_upgrade::Upgrade {
                to: &target(to)?,
                control_plane_installer,
                worker_installer,
                snapshot: plan::snapshot_path(&run.out_dir, cluster, now),
                wait: run.poll(),
            };
            run_upgrade::upgrade(config, talos, sleeper, cluster, nodes, &asked, now, output)
        }
        Action::UpgradeK8s { to, run } => {
            let asked = run_upgrade::UpgradeK8s {
                to: &target(to)?,
                snapshot: plan::snapshot_path(&run.out_dir, cluster, now),
                wait: run.poll(),
            };
            run_upgrade::upgrade_k8s(config, talos, sleeper, cluster, &nodes, &asked, now, output)
        }
        Action::AwaitHealthy {
            wait_tries,
            wait_interval_seconds,
        } => {
            let wait = poll(*wait_tries, *wait_interval_seconds);
            run_upgrade::await_healthy(talos, sleeper, cluster, &nodes, wait)
        }
        Action::Snapshot { .. } | Action::Restore { .. } | Action::RemoveMember { .. } => Ok(()),
    }
}

/// The inventory's nodes of the roles `wanted` keeps, in its order, each with its Talos API
/// endpoint; at least one control plane among them.
fn talos_nodes(
    inventory: &NodeInventory,
    port: u16,
    wanted: impl Fn(NodeRole) -> bool,
) -> Result<Vec<UpgradeNode>, Error> {
    let stdin = Path::new("<stdin>");
    let mut nodes = Vec::new();
    for (i, node) in inventory.nodes.iter().enumerate() {
        if !wanted(node.role) {
            continue;
        }
        let address = node.public_ipv4.ok_or_else(|| {
            InputError::field(
                stdin,
                format!("nodes[{i}].public_ipv4"),
                format!(
                    "{}: a node without an address: its Talos API cannot be reached",
                    node.name
                ),
            )
        })?;
        nodes.push(UpgradeNode {
            node: TalosNode {
                name: node.name.clone(),
                endpoint: format!("{address}:{port}"),
                address: address.to_string(),
            },
            role: node.role,
        });
    }
    let Some(first) = nodes.iter().find(|n| n.role == NodeRole::Controlplane) else {
        return Err(InputError::field(
            stdin,
            "nodes",
            "no control plane: etcd runs on control planes",
        )
        .into());
    };
    // A worker is reached through a control plane, whose apid forwards the calls naming it:
    // talosctl's drain fetches the kubeconfig from the endpoint itself, and only a control
    // plane serves one (a worker answers Unimplemented).
    let through = first.node.endpoint.clone();
    for node in nodes.iter_mut().filter(|n| n.role == NodeRole::Worker) {
        node.node.endpoint.clone_from(&through);
    }
    Ok(nodes)
}

/// Each control plane's answer to `EtcdStatus`, logged.
fn observe(talos: &dyn Talos, nodes: &[TalosNode]) -> Vec<Observed> {
    nodes
        .iter()
        .map(|node| {
            let observed = Observed {
                node: node.clone(),
                status: talos.etcd_status(node),
            };
            pop_common::info!("{observed}");
            observed
        })
        .collect()
}

/// The plan, one JSON line a step.
fn write_plan<T: serde::Serialize>(steps: &[T], mut output: impl Write) -> Result<(), Error> {
    steps
        .iter()
        .try_for_each(|step| write_line(step, &mut output))
}

/// One record as a JSON line, flushed.
fn write_line(record: &impl serde::Serialize, mut output: impl Write) -> Result<(), Error> {
    serde_json::to_writer(&mut output, record)
        .map_err(std::io::Error::from)
        .output()?;
    output.write_all(b"\n").output()?;
    output.flush().output()?;
    Ok(())
}

/// The quorum the members show, out of the members the first answering one lists.
fn read_quorum(talos: &dyn Talos, observed: &[Observed]) -> Quorum {
    let members = observed
        .iter()
        .filter(|o| o.status.is_ok())
        .find_map(|o| talos.etcd_members(&o.node).ok())
        .map_or(observed.len(), |m| m.len());
    quorum::quorum(observed, members)
}

#[cfg(test)]
mod tests;
