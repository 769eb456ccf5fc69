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
//!    prints it) is the pin of everything after it. The config (`controlplane.yaml` or
//!    `worker.yaml` from `--config-dir`) goes with `/machine.MachineService/ApplyConfiguration`,
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

pub mod grpc;
pub mod proto;
pub mod talosconfig;
pub mod tls;

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::InputError;
use pop_common::records::{Node, NodeFailure, NodeInventory, NodeRole, steps};
use pop_common::tool::Env;
use pop_common::wait::{Poll, Sleeper, ThreadSleeper};

use crate::talosconfig::Trust;

/// Apply the first Talos machine config to the nodes still in maintenance mode.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "talos-apply-insecure", version)]
pub struct Cli {
    /// Where `talosctl gen config` wrote controlplane.yaml and worker.yaml.
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

/// What a probe without a client certificate found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Maintenance mode: a client without a certificate was served. `fingerprint` is the SPKI
    /// fingerprint of the node's certificate.
    Maintenance { fingerprint: String },
    /// The node requires a client certificate: it is configured.
    Configured,
    /// The node's certificate is not one of the pinned ones.
    PinMismatch { fingerprint: String },
    /// No answer (refused, timed out, rebooting).
    Unreachable(String),
}

/// What mutual TLS with our talosconfig found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// The node took our client certificate and its own chains to our machine CA.
    Ours,
    /// It still presents the maintenance certificate pinned before.
    Maintenance,
    /// Its certificate is not one of our CA, or it refused our client certificate.
    Foreign {
        fingerprint: Option<String>,
        why: String,
    },
    /// No answer (refused, timed out, rebooting).
    Unreachable(String),
}

/// What a node said when it took a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The mode the node chose (`NO_REBOOT`, `REBOOT`, ...).
    pub mode: String,
    pub details: String,
    pub warnings: Vec<String>,
}

/// Why a call to a node failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("certificate SPKI fingerprint {0} is not the pinned one")]
    NotPinned(String),
    /// The node answered, with an error in the answer's metadata.
    #[error("the node refused the config: {0}")]
    Refused(String),
    #[error("ApplyConfiguration failed: {code:?}: {message}")]
    Failed { code: tonic::Code, message: String },
}

/// The calls this tool makes to a node (the real one is [`grpc::GrpcApi`]), handed in as
/// `&dyn NodeApi`, as every outside dependency of the tools is.
pub trait NodeApi {
    /// A connection without a client certificate, as `talosctl --insecure`, accepting only a
    /// certificate of `pins` when there are some.
    fn probe(&self, address: SocketAddr, pins: &[String]) -> Probe;
    /// `ApplyConfiguration`, over a connection that accepts only the certificate of `pin`.
    fn apply(&self, address: SocketAddr, pin: &str, config: &[u8]) -> Result<Applied, CallError>;
    /// A call over mutual TLS with our talosconfig; `maintenance_pin` is the maintenance
    /// certificate the node had (told apart from a foreign one).
    fn prove(&self, address: SocketAddr, maintenance_pin: Option<&str>) -> Proof;
}

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
        "{address}: its Talos API did not answer after {tries} checks {interval}s apart (still booting? its console, or the Elastic Metal BMC, shows where it is); nothing sent: {reason}"
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

fn config_file(dir: &Path, role: NodeRole) -> PathBuf {
    dir.join(match role {
        NodeRole::Controlplane => "controlplane.yaml",
        NodeRole::Worker => "worker.yaml",
    })
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

/// Does the work on every node of `inventory` whose recorded config is not its config now
/// (recording what it did there) through `api`; `sleeper` waits between two checks. Returns the
/// nodes that failed, and why.
pub fn apply_all(
    config: &Config,
    inventory: &mut NodeInventory,
    configs: &[(NodeRole, Vec<u8>)],
    api: &dyn NodeApi,
    sleeper: &dyn Sleeper,
) -> (Outcome, Vec<NodeFailure>) {
    let config_of = |role: NodeRole| {
        configs
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, bytes)| bytes.as_slice())
    };
    let nodes = inventory.for_step(steps::CONFIG_APPLIED, |node| {
        config_of(node.role).map(digest)
    });
    let mut outcome = Outcome::default();
    for name in &nodes.done {
        pop_common::info!("{name}: its config is already applied, skipped");
    }
    outcome.skipped = nodes.done;
    let mut failures = Vec::new();
    for mut todo in nodes.todo {
        let node = &*todo.node;
        let Some(bytes) = config_of(node.role) else {
            continue;
        };
        match apply_one(config, node, bytes, &todo.wanted, api, sleeper) {
            Ok(NodeResult::Configured) => {
                outcome.configured.push(node.name.clone());
                todo.record();
            }
            Ok(NodeResult::AlreadyOurs) => outcome.already_configured.push(node.name.clone()),
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
    // A node may still be in its POST or booting: wait, within the bound, for any answer.
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
    let pin = match first {
        // The look above never stops on an unreachable node: it only runs out of tries.
        None | Some(Probe::Unreachable(_)) => {
            return Err(ApplyError::NeverAnswered {
                address,
                tries: config.boot.tries,
                interval: config.boot.interval.as_secs(),
                reason: last,
            });
        }
        Some(Probe::PinMismatch { fingerprint }) => {
            return Err(ApplyError::PinMismatch {
                address,
                fingerprint,
            });
        }
        Some(Probe::Configured) => return configured(config, node, address, wanted, api),
        Some(Probe::Maintenance { fingerprint }) => fingerprint,
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
    // The node goes on serving maintenance mode a moment after it took the config: the first
    // check comes one interval later.
    sleeper.sleep(config.wait.interval);
    let mut last = String::from("no check made");
    let proven = config.wait.until(sleeper, |attempt| {
        let tries = config.wait.tries;
        match api.prove(address, Some(&pin)) {
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
                    pinned: pin.clone(),
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
    mut output: impl Write,
) -> Result<(), Error> {
    let mut inventory: NodeInventory =
        pop_common::input::read_json_from(Path::new("<stdin>"), input)?;
    let mut configs = Vec::new();
    for role in [NodeRole::Controlplane, NodeRole::Worker] {
        if !inventory.nodes.iter().any(|n| n.role == role) {
            continue;
        }
        let path = config_file(&config.config_dir, role);
        let bytes = std::fs::read(&path).map_err(|source| Error::MachineConfig { path, source })?;
        configs.push((role, bytes));
    }
    let (outcome, failures) = apply_all(config, &mut inventory, &configs, api, sleeper);
    pop_common::info!("{outcome}");
    inventory.write_to(&mut output).output()?;
    Ok(pop_common::records::NodeFailures::check(failures)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::cell::RefCell;
    use std::collections::VecDeque;

    /// A clock that counts its sleeps.
    #[derive(Debug, Default)]
    struct Counted(RefCell<u32>);
    impl Sleeper for Counted {
        fn sleep(&self, _: Duration) {
            *self.0.borrow_mut() += 1;
        }
    }

    /// A scripted node: what it answers to each probe and proof, in order, and what it took.
    #[derive(Default)]
    struct Scripted {
        probes: RefCell<VecDeque<Probe>>,
        proofs: RefCell<VecDeque<Proof>>,
        /// The pins each probe, proof and apply was made with.
        pins: RefCell<Vec<String>>,
        applied: RefCell<Vec<(SocketAddr, Vec<u8>)>>,
        refuse: Option<String>,
    }

    impl Scripted {
        fn new(probes: Vec<Probe>, proofs: Vec<Proof>) -> Self {
            Scripted {
                probes: RefCell::new(probes.into()),
                proofs: RefCell::new(proofs.into()),
                ..Scripted::default()
            }
        }
    }

    impl NodeApi for Scripted {
        fn probe(&self, _: SocketAddr, pins: &[String]) -> Probe {
            self.pins.borrow_mut().push(format!("probe {pins:?}"));
            self.probes
                .borrow_mut()
                .pop_front()
                .expect("probed more often than scripted")
        }
        fn apply(
            &self,
            address: SocketAddr,
            pin: &str,
            config: &[u8],
        ) -> Result<Applied, CallError> {
            self.pins.borrow_mut().push(format!("apply {pin}"));
            if let Some(refusal) = &self.refuse {
                return Err(CallError::Failed {
                    code: tonic::Code::InvalidArgument,
                    message: refusal.clone(),
                });
            }
            self.applied.borrow_mut().push((address, config.to_vec()));
            Ok(Applied {
                mode: "NO_REBOOT".into(),
                details: "Applied configuration without a reboot".into(),
                warnings: vec![],
            })
        }
        fn prove(&self, _: SocketAddr, maintenance_pin: Option<&str>) -> Proof {
            self.pins
                .borrow_mut()
                .push(format!("prove {maintenance_pin:?}"));
            self.proofs
                .borrow_mut()
                .pop_front()
                .expect("proved more often than scripted")
        }
    }

    fn config() -> Config {
        Config {
            config_dir: PathBuf::from("unused"),
            trust: Trust {
                context: "edge-par".into(),
                ca: vec![],
                chain: vec![],
                key: std::sync::Arc::new(rustls::pki_types::PrivateKeyDer::Pkcs8(vec![0u8].into())),
            },
            port: 50000,
            pins: vec![],
            boot: Poll {
                tries: 4,
                interval: Duration::from_secs(10),
            },
            wait: Poll {
                tries: 3,
                interval: Duration::from_secs(5),
            },
            timeout: Duration::from_secs(1),
        }
    }

    fn inventory(steps: &str) -> NodeInventory {
        serde_json::from_str(&format!(
            r#"{{"kind":"NodeInventory","version":2,"cluster_name":"c","cluster_endpoint":"https://api.example.com:6443",
            "ssh_key_ids":[],
            "nodes":[{{"name":"w1","role":"worker","kind":"elastic-metal","zone":"fr-par-1","id":"22222222-2222-4222-8222-222222222222",
            "public_ipv4":"192.0.2.7","public_ipv6":null,"private_ipv4":null,"steps":{steps}}}]}}"#
        ))
        .unwrap()
    }

    fn maintenance() -> Probe {
        Probe::Maintenance {
            fingerprint: "fp".into(),
        }
    }

    fn unreachable() -> Probe {
        Probe::Unreachable("connection refused".into())
    }

    /// `apply_all` of one worker config with the default options, sleeping not at all.
    fn apply_worker(
        api: &Scripted,
        inventory: &mut NodeInventory,
        worker_config: &[u8],
    ) -> (Outcome, Vec<NodeFailure>) {
        apply_all(
            &config(),
            inventory,
            &[(NodeRole::Worker, worker_config.to_vec())],
            api,
            &Counted::default(),
        )
    }

    #[test]
    fn a_booting_node_is_waited_for_then_the_first_certificate_pins_apply_and_the_proof() {
        let api = Scripted::new(
            vec![unreachable(), unreachable(), maintenance()],
            vec![
                Proof::Maintenance,
                Proof::Unreachable("rebooting".into()),
                Proof::Ours,
            ],
        );
        let mut inventory = inventory("{}");
        let configs = [
            (NodeRole::Worker, b"worker".to_vec()),
            (NodeRole::Controlplane, b"cp".to_vec()),
        ];
        let sleeps = Counted::default();
        let (outcome, failures) = apply_all(&config(), &mut inventory, &configs, &api, &sleeps);
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!(outcome.configured, ["w1"]);
        // Two sleeps waiting for the boot, one before the first proof, two between proofs.
        assert_eq!(*sleeps.0.borrow(), 5);
        assert_eq!(
            api.applied.borrow().as_slice(),
            [("192.0.2.7:50000".parse().unwrap(), b"worker".to_vec())]
        );
        // Unpinned probes until the node answered; then its certificate is the pin.
        assert_eq!(
            api.pins.borrow().as_slice(),
            [
                "probe []",
                "probe []",
                "probe []",
                "apply fp",
                "prove Some(\"fp\")",
                "prove Some(\"fp\")",
                "prove Some(\"fp\")"
            ]
        );
        assert_eq!(
            inventory.nodes[0].step(steps::CONFIG_APPLIED),
            Some(digest(b"worker").as_str())
        );
    }

    #[test]
    fn a_node_that_never_answers_fails_naming_the_bound() {
        let api = Scripted::new(vec![unreachable(); 4], vec![]);
        let mut inventory = inventory("{}");
        let (outcome, failures) = apply_worker(&api, &mut inventory, b"w");
        assert_eq!(outcome.failed, ["w1"]);
        let message = failures[0].to_string();
        assert!(
            message.contains(
                "w1: 192.0.2.7:50000: its Talos API did not answer after 4 checks 10s apart"
            ) && message.contains("connection refused"),
            "{message}"
        );
        assert!(api.applied.borrow().is_empty());
    }

    #[test]
    fn a_matching_digest_is_skipped_without_a_call() {
        let api = Scripted::new(vec![], vec![]);
        let mut inventory = inventory(&format!(r#"{{"config_applied":"{}"}}"#, digest(b"worker")));
        let (outcome, failures) = apply_worker(&api, &mut inventory, b"worker");
        assert!(failures.is_empty());
        assert_eq!(outcome.skipped, ["w1"]);
        assert!(api.pins.borrow().is_empty());
    }

    #[test]
    fn a_configured_node_is_left_alone_if_ours_and_fails_if_not() {
        let api = Scripted::new(vec![Probe::Configured], vec![Proof::Ours]);
        let mut recorded = inventory(r#"{"config_applied":"sha256:old"}"#);
        let (outcome, failures) = apply_worker(&api, &mut recorded, b"new");
        assert!(failures.is_empty());
        assert_eq!(outcome.already_configured, ["w1"]);
        assert!(api.applied.borrow().is_empty());
        assert_eq!(
            recorded.nodes[0].step(steps::CONFIG_APPLIED),
            Some("sha256:old")
        );
        assert!(
            outcome
                .to_string()
                .contains("configured earlier and ours (use talosctl): w1")
        );

        let foreign = Scripted::new(
            vec![Probe::Configured],
            vec![Proof::Foreign {
                fingerprint: Some("other".into()),
                why: "its certificate is not one of our machine CA's: UnknownIssuer".into(),
            }],
        );
        let mut fresh = inventory("{}");
        let (outcome, failures) = apply_worker(&foreign, &mut fresh, b"new");
        assert_eq!(outcome.failed, ["w1"]);
        let message = failures[0].to_string();
        assert!(
            message.contains("configured, but not as a node of this cluster")
                && message.contains("edge-par")
                && message.contains("UnknownIssuer"),
            "{message}"
        );
        assert!(foreign.applied.borrow().is_empty());
    }

    #[test]
    fn a_certificate_neither_pinned_nor_ours_after_the_config_fails_unrecorded() {
        let api = Scripted::new(
            vec![maintenance()],
            vec![
                Proof::Maintenance,
                Proof::Foreign {
                    fingerprint: Some("mitm".into()),
                    why: "UnknownIssuer".into(),
                },
            ],
        );
        let mut inventory = inventory("{}");
        let (outcome, failures) = apply_worker(&api, &mut inventory, b"w");
        assert_eq!(outcome.failed, ["w1"]);
        assert!(
            failures[0]
                .to_string()
                .contains("presented a certificate (SPKI mitm) that is neither the pinned maintenance one (fp)"),
            "{failures:?}"
        );
        assert_eq!(inventory.nodes[0].step(steps::CONFIG_APPLIED), None);
    }

    #[test]
    fn a_node_that_never_proves_ours_fails_unrecorded_and_is_named() {
        let api = Scripted::new(vec![maintenance()], vec![Proof::Maintenance; 3]);
        let mut inventory = inventory("{}");
        let (outcome, failures) = apply_worker(&api, &mut inventory, b"w");
        assert_eq!(outcome.failed, ["w1"]);
        assert!(failures[0].to_string().contains("w1: 192.0.2.7:50000: took the config but did not prove ours (mutual TLS with the talosconfig) after 3 checks 5s apart: still in maintenance mode"), "{failures:?}");
        assert_eq!(inventory.nodes[0].step(steps::CONFIG_APPLIED), None);
    }

    #[test]
    fn pin_mismatch_and_a_refusal_send_nothing_more() {
        for (probe, refuse, needle) in [
            (
                Probe::PinMismatch {
                    fingerprint: "AAA=".into(),
                },
                None,
                "AAA= is not one of the pinned ones",
            ),
            (
                maintenance(),
                Some("bad YAML".to_owned()),
                "ApplyConfiguration failed: InvalidArgument: bad YAML",
            ),
        ] {
            let mut api = Scripted::new(vec![probe], vec![]);
            api.refuse = refuse;
            let mut inventory = inventory("{}");
            let (_, failures) = apply_worker(&api, &mut inventory, b"w");
            assert!(
                failures.len() == 1 && failures[0].to_string().contains(needle),
                "{failures:?}"
            );
            assert!(api.applied.borrow().is_empty());
            assert_eq!(inventory.nodes[0].step(steps::CONFIG_APPLIED), None);
        }
    }

    #[test]
    fn pins_must_be_base64_sha256_and_the_talosconfig_must_read() {
        use clap::Parser;
        let env = Env::default();
        let bad = Cli::parse_from(["t", "--cert-fingerprint", "abc"]);
        let err = resolve(bad, &env).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        assert!(err.to_string().contains("--cert-fingerprint `abc`"));
        let missing = Cli::parse_from(["t", "--talosconfig", "/nonexistent/talosconfig"]);
        let err = resolve(missing, &env).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        assert!(
            err.to_string()
                .starts_with("--talosconfig /nonexistent/talosconfig: cannot read"),
            "{err}"
        );
    }
}
