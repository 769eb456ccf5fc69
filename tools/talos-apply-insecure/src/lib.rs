//! `talos-apply-insecure`: the first Talos machine config of each node, sent while the node is in
//! maintenance mode (its API then has a self-signed certificate and takes no client
//! certificate), as `talosctl apply-config --insecure` does.
//!
//! Reads the `NodeInventory` on stdin, and for each node:
//! - whose recorded `config_applied` digest is the digest of its config now: skipped;
//! - in maintenance mode (a TLS handshake without a client certificate is accepted and a gRPC
//!   call is answered): sends its config (`controlplane.yaml` or `worker.yaml` from
//!   `--config-dir`) with `/machine.MachineService/ApplyConfiguration`, mode AUTO, then waits
//!   (bounded) until the node has left maintenance mode, and records the config's digest;
//! - already configured (its API requires a client certificate): reported, left alone; from then
//!   on it is managed with `talosctl` and the talosconfig.
//!
//! Writes the inventory back on stdout, with what it did, even when a node failed (then exits 1
//! after writing it, so a re-run skips the nodes that are done).

pub mod grpc;
pub mod proto;
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

/// Apply the first Talos machine config to the nodes still in maintenance mode.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "talos-apply-insecure", version)]
pub struct Cli {
    /// Where `talosctl gen config` wrote controlplane.yaml and worker.yaml.
    #[arg(long, default_value = "talos/_out")]
    pub config_dir: PathBuf,
    /// Talos API port (apid).
    #[arg(long, default_value_t = 50000)]
    pub port: u16,
    /// Accept only a certificate with this SPKI fingerprint (base64 of its SHA-256, as the node's
    /// console prints it); repeatable. Without it, the certificate is trusted on first use.
    #[arg(long = "cert-fingerprint", value_name = "BASE64")]
    pub cert_fingerprints: Vec<String>,
    /// How many times to check that a node has left maintenance mode after its config.
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
    pub port: u16,
    pub pins: Vec<String>,
    pub wait_tries: u32,
    pub wait_interval: Duration,
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
            Error::Usage(_) | Error::Input(_) | Error::MachineConfig { .. } => Exit::Usage,
            Error::Setup(_) | Error::Nodes(_) | Error::Output(_) => Exit::Failure,
        }
    }
}

/// Checks the arguments; the environment is not read.
pub fn resolve(cli: Cli, _env: &Env) -> Result<Config, Error> {
    for pin in &cli.cert_fingerprints {
        let decoded = base64::engine::general_purpose::STANDARD.decode(pin);
        if decoded.map(|d| d.len()) != Ok(32) {
            return Err(Error::Usage(format!(
                "--cert-fingerprint `{pin}`: not the base64 of a SHA-256 (Talos prints it as 44 characters ending with `=`)"
            )));
        }
    }
    if cli.wait_tries == 0 {
        return Err(Error::Usage("--wait-tries: must be at least 1".into()));
    }
    if cli.timeout_seconds == 0 {
        return Err(Error::Usage("--timeout-seconds: must be at least 1".into()));
    }
    Ok(Config {
        config_dir: cli.config_dir,
        port: cli.port,
        pins: cli.cert_fingerprints,
        wait_tries: cli.wait_tries,
        wait_interval: Duration::from_secs(cli.wait_interval_seconds),
        timeout: Duration::from_secs(cli.timeout_seconds),
    })
}

/// What a probe of a node's Talos API found.
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
    #[error("certificate SPKI fingerprint {0} is not pinned")]
    NotPinned(String),
    /// The node answered, with an error in the answer's metadata.
    #[error("the node refused the config: {0}")]
    Refused(String),
    #[error("ApplyConfiguration failed: {code:?}: {message}")]
    Failed { code: tonic::Code, message: String },
}

/// The two calls this tool makes to a node (the real one is [`grpc::GrpcApi`]), handed in as
/// `&dyn MaintenanceApi`, as every outside dependency of the tools is.
pub trait MaintenanceApi {
    fn probe(&self, address: SocketAddr) -> Probe;
    fn apply(&self, address: SocketAddr, config: &[u8]) -> Result<Applied, CallError>;
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
    #[error("{address}: Talos API unreachable: {reason}")]
    Unreachable { address: SocketAddr, reason: String },
    #[error("{address}: {source}")]
    Call {
        address: SocketAddr,
        source: CallError,
    },
    #[error(
        "{address}: took the config but was still in maintenance mode after {tries} checks {interval}s apart"
    )]
    StillInMaintenance {
        address: SocketAddr,
        tries: u32,
        interval: u64,
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
            "config applied: {}; skipped (same config already applied): {}; configured outside this run (use talosctl): {}; failed: {}",
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
    api: &dyn MaintenanceApi,
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
            Ok(NodeResult::AlreadyConfigured) => outcome.already_configured.push(node.name.clone()),
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
    AlreadyConfigured,
}

fn apply_one(
    config: &Config,
    node: &Node,
    bytes: &[u8],
    wanted: &str,
    api: &dyn MaintenanceApi,
    sleeper: &dyn Sleeper,
) -> Result<NodeResult, ApplyError> {
    let name = &node.name;
    let address = address(node, config.port).ok_or(ApplyError::NoAddress)?;
    match api.probe(address) {
        Probe::Maintenance { fingerprint } => {
            let trust = if config.pins.is_empty() {
                "trusted on first use"
            } else {
                "pinned"
            };
            pop_common::info!(
                "{name} ({address}): maintenance mode, certificate SPKI {fingerprint} ({trust}); applying {wanted}"
            );
        }
        Probe::Configured => {
            match node.step(steps::CONFIG_APPLIED) {
                Some(recorded) => pop_common::warn!(
                    "{name} ({address}): already configured with {recorded}, and the config is now {wanted}: this tool only configures nodes in maintenance mode; apply the change with `talosctl apply-config --talosconfig talos/_out/talosconfig -n {}`",
                    address.ip()
                ),
                None => pop_common::warn!(
                    "{name} ({address}): already configured (its API requires a client certificate), not by this tool: managed with talosctl and the talosconfig; left alone"
                ),
            }
            return Ok(NodeResult::AlreadyConfigured);
        }
        Probe::PinMismatch { fingerprint } => {
            return Err(ApplyError::PinMismatch {
                address,
                fingerprint,
            });
        }
        Probe::Unreachable(reason) => {
            return Err(ApplyError::Unreachable { address, reason });
        }
    }
    let applied = api
        .apply(address, bytes)
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
    sleeper.sleep(config.wait_interval);
    let poll = Poll {
        tries: config.wait_tries,
        interval: config.wait_interval,
    };
    let left = poll.until(sleeper, |attempt| {
        let tries = config.wait_tries;
        match api.probe(address) {
            Probe::Configured => return Ok::<_, ApplyError>(Some(())),
            Probe::Maintenance { .. } => {
                pop_common::debug!("{name}: still in maintenance mode ({attempt}/{tries})")
            }
            Probe::Unreachable(error) => {
                pop_common::debug!("{name}: not answering ({attempt}/{tries}): {error}")
            }
            Probe::PinMismatch { fingerprint } => {
                pop_common::debug!("{name}: now presents {fingerprint} ({attempt}/{tries})")
            }
        }
        Ok(None)
    })?;
    match left {
        Some(()) => {
            pop_common::info!("{name}: left maintenance mode (its API now requires mutual TLS)");
            Ok(NodeResult::Configured)
        }
        None => Err(ApplyError::StillInMaintenance {
            address,
            tries: config.wait_tries,
            interval: config.wait_interval.as_secs(),
        }),
    }
}

/// Reads the inventory on `input`, configures the nodes, writes the inventory on `output`.
pub fn run(config: &Config, input: impl Read, output: impl Write) -> Result<(), Error> {
    let api = grpc::GrpcApi::new(config.pins.clone(), config.timeout)
        .map_err(|e| Error::Setup(format!("cannot start the async runtime: {e}")))?;
    run_with(config, &api, &ThreadSleeper, input, output)
}

/// [`run`] over any node API and clock.
pub fn run_with(
    config: &Config,
    api: &dyn MaintenanceApi,
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

    /// A scripted node: the probes it answers, in order, and the configs it took.
    struct Scripted {
        probes: RefCell<VecDeque<Probe>>,
        applied: RefCell<Vec<(SocketAddr, Vec<u8>)>>,
        refuse: Option<String>,
    }

    impl Scripted {
        fn new(probes: Vec<Probe>) -> Self {
            Scripted {
                probes: RefCell::new(probes.into()),
                applied: RefCell::new(Vec::new()),
                refuse: None,
            }
        }
    }

    impl MaintenanceApi for Scripted {
        fn probe(&self, _: SocketAddr) -> Probe {
            self.probes
                .borrow_mut()
                .pop_front()
                .expect("probed more often than scripted")
        }
        fn apply(&self, address: SocketAddr, config: &[u8]) -> Result<Applied, CallError> {
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
    }

    fn config() -> Config {
        Config {
            config_dir: PathBuf::from("unused"),
            port: 50000,
            pins: vec![],
            wait_tries: 3,
            wait_interval: Duration::from_secs(5),
            timeout: Duration::from_secs(1),
        }
    }

    fn inventory(steps: &str) -> NodeInventory {
        serde_json::from_str(&format!(
            r#"{{"kind":"NodeInventory","version":1,"cluster_name":"c","cluster_endpoint":"https://api.example.com:6443",
            "nodes":[{{"name":"w1","role":"worker","kind":"elastic-metal","zone":"fr-par-1","id":"22222222-2222-4222-8222-222222222222",
            "public_ipv4":"192.0.2.7","public_ipv6":null,"private_ipv4":null,"steps":{steps}}}]}}"#
        ))
        .unwrap()
    }

    const MAINTENANCE: fn() -> Probe = || Probe::Maintenance {
        fingerprint: "fp".into(),
    };

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
    fn a_node_in_maintenance_gets_its_role_config_and_the_digest_once_it_left() {
        let api = Scripted::new(vec![
            MAINTENANCE(),
            MAINTENANCE(),
            Probe::Unreachable("rebooting".into()),
            Probe::Configured,
        ]);
        let mut inventory = inventory("{}");
        let configs = [
            (NodeRole::Worker, b"worker".to_vec()),
            (NodeRole::Controlplane, b"cp".to_vec()),
        ];
        let sleeps = Counted::default();
        let (outcome, failures) = apply_all(&config(), &mut inventory, &configs, &api, &sleeps);
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!(outcome.configured, ["w1"]);
        assert_eq!(*sleeps.0.borrow(), 3);
        assert_eq!(
            api.applied.borrow().as_slice(),
            [("192.0.2.7:50000".parse().unwrap(), b"worker".to_vec())]
        );
        assert_eq!(
            inventory.nodes[0].step(steps::CONFIG_APPLIED),
            Some(digest(b"worker").as_str())
        );
    }

    #[test]
    fn a_matching_digest_is_skipped_without_a_call() {
        let api = Scripted::new(vec![]);
        let mut inventory = inventory(&format!(r#"{{"config_applied":"{}"}}"#, digest(b"worker")));
        let (outcome, failures) = apply_worker(&api, &mut inventory, b"worker");
        assert!(failures.is_empty());
        assert_eq!(outcome.skipped, ["w1"]);
        assert!(api.applied.borrow().is_empty());
    }

    #[test]
    fn a_configured_node_is_reported_and_left_alone_with_its_record() {
        let api = Scripted::new(vec![Probe::Configured]);
        let mut inventory = inventory(r#"{"config_applied":"sha256:old"}"#);
        let (outcome, failures) = apply_worker(&api, &mut inventory, b"new");
        assert!(failures.is_empty());
        assert_eq!(outcome.already_configured, ["w1"]);
        assert!(api.applied.borrow().is_empty());
        assert_eq!(
            inventory.nodes[0].step(steps::CONFIG_APPLIED),
            Some("sha256:old")
        );
        assert!(
            outcome
                .to_string()
                .contains("configured outside this run (use talosctl): w1")
        );
    }

    #[test]
    fn a_node_that_never_leaves_maintenance_fails_unrecorded_and_is_named() {
        let api = Scripted::new(vec![MAINTENANCE(); 4]);
        let mut inventory = inventory("{}");
        let (outcome, failures) = apply_worker(&api, &mut inventory, b"w");
        assert_eq!(outcome.failed, ["w1"]);
        assert!(failures[0].to_string().contains("w1: 192.0.2.7:50000: took the config but was still in maintenance mode after 3 checks"), "{failures:?}");
        assert_eq!(inventory.nodes[0].step(steps::CONFIG_APPLIED), None);
    }

    #[test]
    fn pin_mismatch_refusal_and_unreachable_send_nothing_more() {
        for (probe, refuse, needle) in [
            (
                Probe::PinMismatch {
                    fingerprint: "AAA=".into(),
                },
                None,
                "AAA= is not one of the pinned ones",
            ),
            (
                Probe::Unreachable("connection refused".into()),
                None,
                "unreachable: connection refused",
            ),
            (
                MAINTENANCE(),
                Some("bad YAML".to_owned()),
                "ApplyConfiguration failed: InvalidArgument: bad YAML",
            ),
        ] {
            let mut api = Scripted::new(vec![probe]);
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
    fn pins_must_be_base64_sha256() {
        use clap::Parser;
        let env = Env::default();
        let good = Cli::parse_from([
            "t",
            "--cert-fingerprint",
            &base64::engine::general_purpose::STANDARD.encode([7u8; 32]),
        ]);
        assert_eq!(resolve(good, &env).unwrap().pins.len(), 1);
        let bad = Cli::parse_from(["t", "--cert-fingerprint", "abc"]);
        let err = resolve(bad, &env).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        assert!(err.to_string().contains("--cert-fingerprint `abc`"));
    }
}
