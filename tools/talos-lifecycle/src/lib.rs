//! `talos-lifecycle`: day-2 work on a Talos cluster's etcd, in the order and behind the gates
//! Talos's own procedures ask for, through the real talosctl.
//!
//! ```text
//! talos-lifecycle snapshot --out-dir talos/_out/etcd < talos/_out/inventory.json
//! talos-lifecycle restore --snapshot FILE [--skip-hash-check] [--dry-run] < talos/_out/inventory.json
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
//!   input: exit 2, nothing done), then refuses (exit 1) while a majority of the members answer
//!   with the same leader, naming them: a cluster that holds its quorum is repaired by replacing
//!   its broken members, and a restore throws away everything written since the snapshot.
//!   Otherwise it recovers on the first control plane whose Talos API answers
//!   (`talosctl bootstrap --recover-from`: Talos restores the snapshot as a one-member cluster,
//!   which the other control planes join), waits until that member answers with a leader, and
//!   prints an `EtcdRecovery` record. A node whose etcd folder still holds data refuses
//!   ("etcd data directory is not empty"); the error says how Talos's disaster-recovery
//!   procedure empties it.
//!
//! `--dry-run` prints the plan, one `EtcdPlanStep` line a step, after the same reads and gates,
//! and changes nothing. stdout carries the records only; talosctl's own words go to stderr. The
//! snapshot's content (every Secret of the cluster) is never read into a message.

mod plan;
pub mod quorum;
pub mod talos;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::InputError;
use pop_common::records::{EtcdPlanStep, NodeInventory, NodeRole};
use pop_common::tool::Env;
use pop_common::wait::{Poll, Sleeper, ThreadSleeper};

pub use crate::plan::snapshot_path;
use crate::quorum::{ControlPlane, NodeError, Observed, Quorum};
use crate::talos::{Programs, Talos};

mod run;

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
        /// How many times to ask the recovered member for its status before giving up.
        #[arg(long, default_value_t = 60)]
        wait_tries: u32,
        #[arg(long, default_value_t = 5)]
        wait_interval_seconds: u64,
    },
}

/// The arguments, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub action: Action,
    pub programs: Programs,
    pub talos_port: u16,
    pub dry_run: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Input(#[from] InputError),
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("{}: refused by etcdutl snapshot status: {message}; nothing was done", path.display())]
    Snapshot { path: PathBuf, message: String },
    #[error(
        "etcd of {cluster} holds its quorum: {} of {members} members follow leader {leader} \
         ({}); a restore would throw away everything written since the snapshot: refusing \
         (replace the broken members instead; a restore is for a cluster that lost its quorum)",
        healthy.len(), healthy.join(", ")
    )]
    QuorumHealthy {
        cluster: String,
        leader: String,
        healthy: Vec<String>,
        members: usize,
    },
    #[error("no control plane of {cluster} {wanted}:\n{}", answers.join("\n"))]
    NoNode {
        cluster: String,
        wanted: &'static str,
        answers: Vec<String>,
    },
    #[error("{node}: {doing}: {error}{}", hint(error))]
    Node {
        node: String,
        doing: &'static str,
        error: NodeError,
    },
    #[error(
        "{node}: its etcd member did not answer healthy within {tries} looks, {interval:?} apart \
         (last: {last}); `talosctl service etcd` on it says why"
    )]
    NotBack {
        node: String,
        tries: u32,
        interval: Duration,
        last: String,
    },
    #[error("cannot write the output: {0}")]
    Output(#[from] OutputError),
}

/// What to do about a refusal Talos's procedures name.
fn hint(error: &NodeError) -> String {
    match error {
        NodeError::Answered { code, .. } if code == "AlreadyExists" => {
            " (its etcd folder still holds data: empty it with `talosctl reset --graceful=false \
             --reboot --system-labels-to-wipe=EPHEMERAL` on that node, as Talos's disaster \
             recovery does, wait until its etcd service is Preparing, then run this again)"
                .to_owned()
        }
        _ => String::new(),
    }
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Input(_) | Error::File { .. } | Error::Snapshot { .. } => Exit::Usage,
            _ => Exit::Failure,
        }
    }
}

/// Checks the files the arguments name: the talosconfig, the snapshot to restore.
pub fn resolve(cli: Cli, _env: &Env) -> Result<Config, Error> {
    readable(&cli.talosconfig)?;
    if let Action::Restore { snapshot, .. } = &cli.action {
        readable(snapshot)?;
    }
    if let Action::Snapshot { out_dir } = &cli.action
        && out_dir.exists()
        && !out_dir.is_dir()
    {
        return Err(Error::File {
            path: out_dir.clone(),
            message: "--out-dir is not a folder".into(),
        });
    }
    Ok(Config {
        action: cli.action,
        programs: Programs {
            talosctl: cli.talosctl,
            etcdutl: cli.etcdutl,
            talosconfig: cli.talosconfig,
        },
        talos_port: cli.talos_port,
        dry_run: cli.dry_run,
    })
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
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
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
    let nodes = control_planes(&inventory, config.talos_port)?;
    let cluster = inventory.cluster_name.as_str();
    match &config.action {
        Action::Snapshot { out_dir } => {
            let path = plan::snapshot_path(out_dir, cluster, now);
            run::snapshot(config, talos, cluster, &nodes, &path, now, &mut output)
        }
        Action::Restore {
            snapshot,
            skip_hash_check,
            wait_tries,
            wait_interval_seconds,
        } => {
            let wait = Poll {
                tries: *wait_tries,
                interval: Duration::from_secs(*wait_interval_seconds),
            };
            let restore = run::Restore {
                snapshot,
                skip_hash_check: *skip_hash_check,
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
    }
}

/// The inventory's control planes, in its order, each with its Talos API endpoint.
fn control_planes(inventory: &NodeInventory, port: u16) -> Result<Vec<ControlPlane>, Error> {
    let stdin = Path::new("<stdin>");
    let mut nodes = Vec::new();
    for (i, node) in inventory.nodes.iter().enumerate() {
        if node.role != NodeRole::Controlplane {
            continue;
        }
        let address = node.public_ipv4.ok_or_else(|| {
            InputError::field(
                stdin,
                format!("nodes[{i}].public_ipv4"),
                format!(
                    "{}: a control plane without an address: its Talos API cannot be reached",
                    node.name
                ),
            )
        })?;
        nodes.push(ControlPlane {
            name: node.name.clone(),
            endpoint: format!("{address}:{port}"),
            address: address.to_string(),
        });
    }
    if nodes.is_empty() {
        return Err(InputError::field(
            stdin,
            "nodes",
            "no control plane: etcd runs on control planes",
        )
        .into());
    }
    Ok(nodes)
}

/// Each control plane's answer to `EtcdStatus`, logged.
fn observe(talos: &dyn Talos, nodes: &[ControlPlane]) -> Vec<Observed> {
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
fn write_plan(steps: &[EtcdPlanStep], mut output: impl Write) -> Result<(), Error> {
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
