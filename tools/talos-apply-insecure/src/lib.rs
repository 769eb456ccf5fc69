//! `talos-apply-insecure`: the first Talos machine config of each node, sent while the node is in
//! maintenance mode (its API then has a self-signed certificate and takes no client
//! certificate), as `talosctl apply-config --insecure` does, and only to a node that then proves
//! to be ours.
//!
//! Reads the `NodeInventory` on stdin, and for each node whose recorded `config_applied` digest is
//! not the digest of its config now:
//! 1. waits for its Talos API to answer at all (a bare-metal POST and a Talos boot take minutes),
//!    within `--boot-tries` checks `--boot-interval-seconds` apart, naming the node when the bound
//!    passes;
//! 2. in maintenance mode (a TLS handshake without a client certificate is accepted): the SPKI of
//!    the certificate this first probe saw (or one of `--cert-fingerprint`, as the node's console
//!    prints it) is the pin of everything after it. The node's config (from `--config-dir`:
//!    `controlplane.yaml` for a control plane, the worker's own `worker-<name>.yaml` for a
//!    worker) goes with `/machine.MachineService/ApplyConfiguration`,
//!    mode AUTO, over a connection that accepts that certificate only: another one fails the
//!    handshake before a byte of the config is sent. Then it waits (bounded) until the node
//!    answers mutual TLS with our talosconfig's client certificate and a certificate that chains
//!    to our machine CA, and only then records the config's digest; a node that presents anything
//!    else (neither the pinned certificate nor one of our CA) fails;
//! 3. already configured (its API asks for a client certificate): it is ours if it takes our
//!    talosconfig's client certificate and chains to our machine CA (reported, left to
//!    `talosctl`), else it fails: someone else's node.
//!
//! Writes the inventory back on stdout, with what it did, even when a node failed (then exits 1
//! after writing it, so a re-run skips the nodes that are done).

pub mod apply;
pub mod grpc;
pub mod node_api;
pub mod proto;
pub mod talosconfig;
pub mod tls;

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use pop_common::exit::{Exit, OutputError, Report};
use pop_common::input::InputError;
use pop_common::records::{NodeInventory, NodeRole};
use pop_common::tool::Env;
use pop_common::wait::{Poll, Sleeper, ThreadSleeper};

use crate::apply::config_file;
pub use crate::apply::{ApplyError, Configs, Outcome, apply_all, digest};
pub use crate::node_api::{Applied, CallError, NodeApi, Probe, Proof};
use crate::talosconfig::Trust;

/// Apply the first Talos machine config to the nodes still in maintenance mode.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "talos-apply-insecure", version)]
pub struct Cli {
    /// Where the configs step of the infra pipeline wrote controlplane.yaml (every control
    /// plane's) and worker-<name>.yaml (each worker's own).
    #[arg(long, default_value = "talos/_out")]
    pub config_dir: PathBuf,
    /// The talosconfig `talosctl gen config` wrote: its machine CA and client certificate prove
    /// a configured node ours.
    #[arg(long, default_value = "talos/_out/talosconfig")]
    pub talosconfig: PathBuf,
    /// Talos API port (apid).
    #[arg(long, default_value_t = 50000)]
    pub port: u16,
    /// Accept only a maintenance certificate with this SPKI fingerprint (base64 of its SHA-256,
    /// as the node's console prints it); repeatable. Without it, the certificate the first
    /// probe sees is trusted, and pinned for the rest of the run.
    #[arg(long = "cert-fingerprint", value_name = "BASE64")]
    pub cert_fingerprints: Vec<String>,
    /// How many times to check that a node's Talos API answers at all (it may still be booting).
    #[arg(long, default_value_t = 90)]
    pub boot_tries: u32,
    /// Seconds between two of those checks.
    #[arg(long, default_value_t = 10)]
    pub boot_interval_seconds: u64,
    /// How many times to check that a node has left maintenance mode, ours, after its config.
    #[arg(long, default_value_t = 60)]
    pub wait_tries: u32,
    /// Seconds between two of those checks.
    #[arg(long, default_value_t = 5)]
    pub wait_interval_seconds: u64,
    /// Seconds allowed for one connection and one call.
    #[arg(long, default_value_t = 10)]
    pub timeout_seconds: u64,
}

/// What `run` needs, resolved from the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub config_dir: PathBuf,
    pub trust: Trust,
    pub port: u16,
    pub pins: Vec<String>,
    pub boot: Poll,
    pub wait: Poll,
    pub timeout: Duration,
}

/// Why the tool stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Input(#[from] InputError),
    #[error("{}: cannot read the machine config: {source}", path.display())]
    MachineConfig { path: PathBuf, source: io::Error },
    #[error(
        "{}: no machine config for the worker {node}: the configs step of the infra pipeline (make apply-infra) writes worker-<name>.yaml for each worker of the infra config",
        path.display()
    )]
    NoWorkerConfig { path: PathBuf, node: String },
    #[error("--talosconfig {0}")]
    Talosconfig(#[from] talosconfig::TalosconfigError),
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Nodes(#[from] pop_common::records::NodeFailures),
    #[error("writing the inventory: {0}")]
    Output(#[from] OutputError),
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Usage(_)
            | Error::Input(_)
            | Error::MachineConfig { .. }
            | Error::NoWorkerConfig { .. }
            | Error::Talosconfig(_) => Exit::Usage,
            Error::Setup(_) | Error::Nodes(_) | Error::Output(_) => Exit::Failure,
        }
    }
}

/// Checks the arguments and reads the talosconfig; the environment is not read.
pub fn resolve(cli: Cli, _env: &Env) -> Result<Config, Error> {
    for pin in &cli.cert_fingerprints {
        let decoded = base64::engine::general_purpose::STANDARD.decode(pin);
        if decoded.map(|d| d.len()) != Ok(32) {
            return Err(Error::Usage(format!(
                "--cert-fingerprint `{pin}`: not the base64 of a SHA-256 (Talos prints it as 44 characters ending with `=`)"
            )));
        }
    }
    for (name, tries) in [
        ("--boot-tries", cli.boot_tries),
        ("--wait-tries", cli.wait_tries),
    ] {
        if tries == 0 {
            return Err(Error::Usage(format!("{name}: must be at least 1")));
        }
    }
    if cli.timeout_seconds == 0 {
        return Err(Error::Usage("--timeout-seconds: must be at least 1".into()));
    }
    Ok(Config {
        config_dir: cli.config_dir,
        trust: talosconfig::read(&cli.talosconfig)?,
        port: cli.port,
        pins: cli.cert_fingerprints,
        boot: Poll {
            tries: cli.boot_tries,
            interval: Duration::from_secs(cli.boot_interval_seconds),
        },
        wait: Poll {
            tries: cli.wait_tries,
            interval: Duration::from_secs(cli.wait_interval_seconds),
        },
        timeout: Duration::from_secs(cli.timeout_seconds),
    })
}

/// Reads the inventory on `input`, configures the nodes, writes the inventory on `output`.
pub fn run(config: &Config, input: impl Read, output: impl Write) -> Result<(), Error> {
    let api = grpc::GrpcApi::new(config.trust.clone(), config.timeout)
        .map_err(|e| Error::Setup(format!("cannot start the async runtime: {e}")))?;
    run_with(config, &api, &ThreadSleeper, input, output)
}

/// [`run`] over any node API and clock.
pub fn run_with(
    config: &Config,
    api: &dyn NodeApi,
    sleeper: &dyn Sleeper,
    input: impl Read,
    output: impl Write,
) -> Result<(), Error> {
    NodeInventory::pass_through(input, output, |inventory| {
        let configs = read_configs(&config.config_dir, inventory)?;
        let (outcome, failures) = apply_all(config, inventory, &configs, api, sleeper);
        pop_common::info!("{outcome}");
        Ok(failures)
    })
}

/// Every node's machine config from `dir`, all read before any node is called, each file once
/// (every control plane takes the same): one that cannot be read stops the run, naming its file.
fn read_configs(dir: &Path, inventory: &NodeInventory) -> Result<Configs, Error> {
    let mut configs = Configs::new();
    let mut files: std::collections::BTreeMap<PathBuf, Vec<u8>> = Default::default();
    for (i, node) in inventory.nodes.iter().enumerate() {
        let path = config_file(dir, node).map_err(|message| {
            InputError::field(Path::new("<stdin>"), format!("nodes[{i}].name"), message)
        })?;
        if let Some(bytes) = files.get(&path) {
            configs.insert(node.name.clone(), bytes.clone());
            continue;
        }
        let bytes = std::fs::read(&path).map_err(|source| match node.role {
            NodeRole::Worker if source.kind() == io::ErrorKind::NotFound => Error::NoWorkerConfig {
                path: path.clone(),
                node: node.name.clone(),
            },
            _ => Error::MachineConfig {
                path: path.clone(),
                source,
            },
        })?;
        configs.insert(node.name.clone(), bytes.clone());
        files.insert(path, bytes);
    }
    Ok(configs)
}

#[cfg(test)]
mod tests;
