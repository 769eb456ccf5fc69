//! The work on each node: first contact (waited for while it boots), the config sent under
//! the pinned certificate, and the proof that it is ours before its digest is recorded.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use pop_common::records::{Node, NodeFailure, NodeInventory, NodeRole, steps};
use pop_common::wait::Sleeper;

use crate::Config;
use crate::node_api::{CallError, NodeApi, Probe, Proof};

/// Why one node was not configured.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("has no public address in the inventory")]
    NoAddress,
    #[error(
        "{address}: certificate SPKI fingerprint {fingerprint} is not one of the pinned ones (--cert-fingerprint); nothing sent"
    )]
    PinMismatch {
        address: SocketAddr,
        fingerprint: String,
    },
    #[error(
        "{address}: its Talos API did not answer after {tries} checks {interval}s apart (still booting? its console, or the Elastic Metal BMC, shows where it is; or, for a control plane, this machine's address is not in admin_cidrs of the infra config, the only sources its security group lets reach port 50000); nothing sent: {reason}"
    )]
    NeverAnswered {
        address: SocketAddr,
        tries: u32,
        interval: u64,
        reason: String,
    },
    #[error(
        "{address}: configured, but not as a node of this cluster (it must take the client certificate of {talosconfig_context} and chain to its machine CA): {why}"
    )]
    Foreign {
        address: SocketAddr,
        talosconfig_context: String,
        why: String,
    },
    #[error(
        "{address}: after taking the config it presented a certificate (SPKI {fingerprint}) that is neither the pinned maintenance one ({pinned}) nor one of our machine CA's: {why}"
    )]
    Swapped {
        address: SocketAddr,
        fingerprint: String,
        pinned: String,
        why: String,
    },
    #[error("{address}: {source}")]
    Call {
        address: SocketAddr,
        source: CallError,
    },
    #[error(
        "{address}: took the config but did not prove ours (mutual TLS with the talosconfig) after {tries} checks {interval}s apart: {last}"
    )]
    NotProven {
        address: SocketAddr,
        tries: u32,
        interval: u64,
        last: String,
    },
}

/// `sha256:<hex>` of a machine config, as recorded in the inventory.
pub fn digest(config: &[u8]) -> String {
    pop_common::records::Digest::sha256(config).into()
}

/// Each node's machine config, by node name.
pub type Configs = BTreeMap<String, Vec<u8>>;

/// The file of `node`'s machine config in `dir`: `controlplane.yaml`, the one every control
/// plane takes, or the worker's own `worker-<name>.yaml` (its hostname and disk are its own).
/// The name must be a host name, as the infra config checks a worker's: it becomes a file name.
pub(crate) fn config_file(dir: &Path, node: &Node) -> Result<PathBuf, String> {
    match node.role {
        NodeRole::Controlplane => Ok(dir.join("controlplane.yaml")),
        NodeRole::Worker if pop_common::records::is_dns_label(&node.name) => {
            Ok(dir.join(format!("worker-{}.yaml", node.name)))
        }
        NodeRole::Worker => Err(format!(
            "`{}` is not a host name (a worker's name in the infra config is one): it cannot name its machine config file",
            node.name
        )),
    }
}

fn address(node: &Node, port: u16) -> Option<SocketAddr> {
    let ip = node
        .public_ipv4
        .map(IpAddr::V4)
        .or(node.public_ipv6.map(IpAddr::V6))?;
    Some(SocketAddr::new(ip, port))
}

/// What happened to each node, for the closing report.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub configured: Vec<String>,
    pub skipped: Vec<String>,
    pub already_configured: Vec<String>,
    pub failed: Vec<String>,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |names: &[String]| {
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        };
        write!(
            f,
            "config applied: {}; skipped (same config already applied): {}; configured earlier and ours (use talosctl): {}; failed: {}",
            list(&self.configured),
            list(&self.skipped),
            list(&self.already_configured),
            list(&self.failed)
        )
    }
}

/// Does the work on every node of `inventory` whose recorded config is not its config now (its
/// own in `configs`; a node without one is left alone), recording what it did there, through
/// `api`; `sleeper` waits between two checks. Returns the
/// nodes that failed, and why.
pub fn apply_all(
    config: &Config,
    inventory: &mut NodeInventory,
    configs: &Configs,
    api: &dyn NodeApi,
    sleeper: &dyn Sleeper,
) -> (Outcome, Vec<NodeFailure>) {
    let config_of = |node: &Node| configs.get(&node.name).map(Vec::as_slice);
    let nodes = inventory.for_step(steps::CONFIG_APPLIED, |node| config_of(node).map(digest));
    let mut outcome = Outcome::default();
    for name in &nodes.done {
        pop_common::info!("{name}: its config is already applied, skipped");
    }
    outcome.skipped = nodes.done;
    let mut failures = Vec::new();
    for mut todo in nodes.todo {
        let node = &*todo.node;
        let Some(bytes) = config_of(node) else {
            continue;
        };
        match apply_one(config, node, bytes, &todo.wanted, api, sleeper) {
            Ok(NodeResult::Configured) => {
                outcome.configured.push(node.name.clone());
                todo.record();
                todo.node.record_proved_ours();
            }
            Ok(NodeResult::AlreadyOurs) => {
                outcome.already_configured.push(node.name.clone());
                todo.node.record_proved_ours();
            }
            Err(error) => {
                let failure = NodeFailure::new(&node.name, error);
                pop_common::warn!("{failure}");
                failures.push(failure);
                outcome.failed.push(todo.node.name.clone());
            }
        }
    }
    (outcome, failures)
}

enum NodeResult {
    Configured,
    AlreadyOurs,
}

fn apply_one(
    config: &Config,
    node: &Node,
    bytes: &[u8],
    wanted: &str,
    api: &dyn NodeApi,
    sleeper: &dyn Sleeper,
) -> Result<NodeResult, ApplyError> {
    let name = &node.name;
    let address = address(node, config.port).ok_or(ApplyError::NoAddress)?;
    let pin = match first_contact(config, name, address, api, sleeper)? {
        Probe::PinMismatch { fingerprint } => {
            return Err(ApplyError::PinMismatch {
                address,
                fingerprint,
            });
        }
        Probe::Configured => return configured(config, node, address, wanted, api),
        Probe::Maintenance { fingerprint } => fingerprint,
        Probe::Unreachable(reason) => {
            return Err(ApplyError::NeverAnswered {
                address,
                tries: config.boot.tries,
                interval: config.boot.interval.as_secs(),
                reason,
            });
        }
    };
    let trust = if config.pins.is_empty() {
        "seen by the first probe, pinned for the rest of the run"
    } else {
        "pinned by --cert-fingerprint"
    };
    pop_common::info!(
        "{name} ({address}): maintenance mode, certificate SPKI {pin} ({trust}); applying {wanted}"
    );
    let applied = api
        .apply(address, &pin, bytes)
        .map_err(|source| ApplyError::Call { address, source })?;
    pop_common::info!(
        "{name}: node took the config, mode {}: {}",
        applied.mode,
        applied.details
    );
    for warning in &applied.warnings {
        pop_common::warn!("{name}: config warning: {warning}");
    }
    prove_ours(config, name, address, &pin, api, sleeper)
}

/// The first answer of a node that may still be in its POST or booting: probed, within the
/// boot bound, until it answers at all; `Unreachable` with the last reason when it never does.
fn first_contact(
    config: &Config,
    name: &str,
    address: SocketAddr,
    api: &dyn NodeApi,
    sleeper: &dyn Sleeper,
) -> Result<Probe, ApplyError> {
    let mut last = String::new();
    let first = config
        .boot
        .until(sleeper, |attempt| match api.probe(address, &config.pins) {
            Probe::Unreachable(reason) => {
                pop_common::debug!(
                    "{name} ({address}): no answer yet ({attempt}/{}): {reason}",
                    config.boot.tries
                );
                last = reason;
                Ok::<_, ApplyError>(None)
            }
            answered => Ok(Some(answered)),
        })?;
    Ok(first.unwrap_or(Probe::Unreachable(last)))
}

/// After the node took its config: waits (bounded) until it answers mutual TLS with our
/// talosconfig; a certificate that is neither the pinned one nor one of our CA's fails.
fn prove_ours(
    config: &Config,
    name: &str,
    address: SocketAddr,
    pin: &str,
    api: &dyn NodeApi,
    sleeper: &dyn Sleeper,
) -> Result<NodeResult, ApplyError> {
    // The node goes on serving maintenance mode a moment after it took the config: the first
    // check comes one interval later.
    sleeper.sleep(config.wait.interval);
    let mut last = String::from("no check made");
    let proven = config.wait.until(sleeper, |attempt| {
        let tries = config.wait.tries;
        match api.prove(address, Some(pin)) {
            Proof::Ours => return Ok(Some(())),
            Proof::Maintenance => {
                pop_common::debug!("{name}: still in maintenance mode ({attempt}/{tries})");
                last = "still in maintenance mode".into();
            }
            Proof::Unreachable(error) => {
                pop_common::debug!("{name}: not answering ({attempt}/{tries}): {error}");
                last = format!("not answering: {error}");
            }
            Proof::Foreign { fingerprint, why } => {
                return Err(ApplyError::Swapped {
                    address,
                    fingerprint: fingerprint.unwrap_or_else(|| "unknown".into()),
                    pinned: pin.to_owned(),
                    why,
                });
            }
        }
        Ok(None)
    })?;
    match proven {
        Some(()) => {
            pop_common::info!(
                "{name}: left maintenance mode, and is ours (mutual TLS with our talosconfig, a certificate of our machine CA)"
            );
            Ok(NodeResult::Configured)
        }
        None => Err(ApplyError::NotProven {
            address,
            tries: config.wait.tries,
            interval: config.wait.interval.as_secs(),
            last,
        }),
    }
}

/// A node that asked for a client certificate at first contact: ours only if mutual TLS with
/// our talosconfig succeeds; nothing is sent to it either way.
fn configured(
    config: &Config,
    node: &Node,
    address: SocketAddr,
    wanted: &str,
    api: &dyn NodeApi,
) -> Result<NodeResult, ApplyError> {
    let name = &node.name;
    let foreign = |why: String| ApplyError::Foreign {
        address,
        talosconfig_context: config.trust.context.clone(),
        why,
    };
    match api.prove(address, None) {
        Proof::Ours => {
            match node.step(steps::CONFIG_APPLIED) {
                Some(recorded) => pop_common::warn!(
                    "{name} ({address}): configured with {recorded} and ours; its config is now {wanted}: this tool only configures nodes in maintenance mode; apply the change with `talosctl apply-config --talosconfig talos/_out/talosconfig -n {}`",
                    address.ip()
                ),
                None => pop_common::info!(
                    "{name} ({address}): already configured, and ours (mutual TLS with our talosconfig): managed with talosctl"
                ),
            }
            Ok(NodeResult::AlreadyOurs)
        }
        Proof::Foreign { why, .. } => Err(foreign(why)),
        Proof::Unreachable(why) => Err(foreign(format!(
            "it asked for a client certificate, then: {why}"
        ))),
        Proof::Maintenance => Err(foreign(
            "it presented a maintenance certificate to mutual TLS".into(),
        )),
    }
}
