//! `render-platform`: the platform layer's Helm values and host firewall. The values carry the
//! day-2 switches of `config/platform.json` (policy audit or enforce, WireGuard and its strict
//! mode, Hubble, cert-manager's Gateway API support, Istio's default GatewayClass) and the ports
//! of the declared flows (`crates/flows`: Cilium's routing mode, tunnel, health and Hubble ports,
//! the NodePort range); the host firewall is rendered from the same flows and the cluster's
//! addresses (the `PlatformInputs` record), see [`host_firewall`].
//!
//! The committed `values/<release>.yaml` hold what never changes (what Talos imposes); helm reads
//! this tool's output after them (`-f values/cilium.yaml -f <rendered>`), so a day-2 change is an
//! edit of the platform config, never of a values file. The output is JSON (which Helm reads as
//! YAML), keys sorted, so the same config always gives the same bytes.
//!
//! ```text
//! render-platform --config config/platform.json cilium              # one release, on stdout
//! render-platform --config config/platform.json --inputs talos/_out/platform-inputs.json \
//!     --out-dir DIR                                                 # everything, and the lists
//! ```
//!
//! This tool owns the list of releases: with `--out-dir` it writes `DIR/<release>.json` for each,
//! the host firewall (`DIR/host-firewall.json`, a `List` of Cilium host policies;
//! `DIR/talos-firewall.worker.yaml`, Talos's ingress firewall documents for the worker, and
//! `DIR/talos-firewall.tsv`, where to apply them: endpoint, node, file), then
//! `DIR/releases.tsv`, one line per release in install order: name, namespace, chart, repository
//! and version (tab-separated; the last two are the pins of `k8s/versions.env`, compiled in).
//! `pipelines/platform.sh` installs, diffs and uninstalls what those files list.

pub mod host_firewall;

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use clap::{Parser, ValueEnum};
use flows::{Addresses, Routing};
use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::InputError;
use pop_common::pins::Pins;
use pop_common::records::PlatformInputs;
use pop_common::tool::Env;
use serde::Deserialize;
use serde_json::{Value, json};

/// `k8s/versions.env` as it was when this binary was built.
pub const PINS: Pins<'static> = Pins::new(include_str!("../../../k8s/versions.env"));

/// The file of `--out-dir` that lists the releases.
pub const RELEASES_FILE: &str = "releases.tsv";
/// The files of `--out-dir` that hold the host firewall.
pub const HOST_POLICIES_FILE: &str = "host-firewall.json";
pub const TALOS_FIREWALL_FILE: &str = "talos-firewall.worker.yaml";
pub const TALOS_FIREWALL_LIST: &str = "talos-firewall.tsv";

/// The Helm releases of the platform layer, in install order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Release {
    Cilium,
    CertManager,
    IstioBase,
    Istiod,
}

impl Release {
    /// Install order: the CNI first (nothing schedules before it), cert-manager (after the
    /// Gateway API CRDs, which platform.sh applies before it), then Istio's CRDs and istiod.
    pub const ALL: [Release; 4] = [
        Release::Cilium,
        Release::CertManager,
        Release::IstioBase,
        Release::Istiod,
    ];

    /// The name used for the release, its values file and the rendered file.
    pub fn name(self) -> &'static str {
        match self {
            Release::Cilium => "cilium",
            Release::CertManager => "cert-manager",
            Release::IstioBase => "istio-base",
            Release::Istiod => "istiod",
        }
    }

    /// The namespace the release is installed in (the charts' documented ones).
    pub fn namespace(self) -> &'static str {
        match self {
            Release::Cilium => "kube-system",
            Release::CertManager => "cert-manager",
            Release::IstioBase | Release::Istiod => "istio-system",
        }
    }

    /// The chart, in its repository.
    pub fn chart(self) -> &'static str {
        match self {
            Release::Cilium => "cilium",
            Release::CertManager => "cert-manager",
            Release::IstioBase => "base",
            Release::Istiod => "istiod",
        }
    }

    /// The keys of the chart's repository and version in `k8s/versions.env`.
    pub fn pin_keys(self) -> (&'static str, &'static str) {
        match self {
            Release::Cilium => ("CILIUM_CHART_REPO", "CILIUM_VERSION"),
            Release::CertManager => ("CERT_MANAGER_CHART_REPO", "CERT_MANAGER_VERSION"),
            Release::IstioBase | Release::Istiod => ("ISTIO_CHART_REPO", "ISTIO_VERSION"),
        }
    }
}

/// The lines of `releases.tsv` for the given pins: every release in install order, or the first
/// missing pin.
pub fn releases_tsv(pins: &Pins) -> Result<String, InputError> {
    let mut text =
        String::from("# release\tnamespace\tchart\trepository\tversion, in install order\n");
    for release in Release::ALL {
        let (repo, version) = release.pin_keys();
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\n",
            release.name(),
            release.namespace(),
            release.chart(),
            pins.require(repo)?,
            pins.require(version)?
        ));
    }
    Ok(text)
}

#[derive(Debug, Parser)]
#[command(name = "render-platform", version, about)]
pub struct Cli {
    /// The platform config (config/platform.json; example: config/platform.example.json).
    #[arg(long)]
    pub config: PathBuf,
    /// The release whose values to print.
    #[arg(value_enum)]
    pub release: Option<Release>,
    /// Write every release's values into DIR/<release>.json, the host firewall, then
    /// DIR/releases.tsv.
    #[arg(long, value_name = "DIR", requires = "inputs")]
    pub out_dir: Option<PathBuf>,
    /// The infra layer's output (talos/_out/platform-inputs.json): the addresses the host
    /// firewall is rendered from. Needed with --out-dir.
    #[arg(long, value_name = "FILE")]
    pub inputs: Option<PathBuf>,
}

/// What to render, and where: the config file itself is read by `run` (it is input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub config: PathBuf,
    pub target: Target,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One release's values on stdout.
    Stdout(Release),
    /// Every release's values, the host firewall and `releases.tsv` into `dir`, with the
    /// addresses read from `inputs`.
    Dir { dir: PathBuf, inputs: PathBuf },
}

/// `config/platform.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformConfig {
    pub cilium: CiliumConfig,
    pub cert_manager: CertManagerConfig,
    pub istio: IstioConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CiliumConfig {
    /// true: policies, the host firewall's included, are logged, not enforced (verdict AUDIT),
    /// and Talos's ingress firewall on the worker accepts by default; false: both enforce.
    pub policy_audit_mode: bool,
    pub wireguard: WireGuardConfig,
    pub hubble: HubbleConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireGuardConfig {
    pub enabled: bool,
    /// Node-to-node and pod-to-node traffic too (beta upstream).
    pub node_encryption: bool,
    /// Drop plaintext pod traffic inside `strict_mode_cidr` (egress and ingress).
    pub strict_mode: bool,
    /// The pod CIDR whose plaintext traffic strict mode drops (Talos's default pod subnet is
    /// 10.244.0.0/16). Required when `strict_mode` is true.
    #[serde(default)]
    pub strict_mode_cidr: Option<ipnet::IpNet>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HubbleConfig {
    pub relay: bool,
    pub ui: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertManagerConfig {
    /// cert-manager's Gateway API support (HTTP-01 through HTTPRoutes, Certificates from
    /// annotated Gateways).
    pub gateway_api: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IstioConfig {
    /// The GatewayClass istiod creates and serves by default.
    pub gateway_class: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("writing the values: {0}")]
    Write(#[from] OutputError),
    #[error("name one release, or give --out-dir for all of them")]
    Target,
    #[error("cannot write {}: {source}", path.display())]
    WriteFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Input(_) | Error::Target => Exit::Usage,
            Error::Write(_) | Error::WriteFile { .. } => Exit::Failure,
        }
    }
}

/// The arguments into a target; the environment plays no part.
pub fn resolve(cli: Cli, _env: &Env) -> Result<Config, Error> {
    let target = match (cli.release, cli.out_dir, cli.inputs) {
        (Some(release), None, _) => Target::Stdout(release),
        (None, Some(dir), Some(inputs)) => Target::Dir { dir, inputs },
        _ => return Err(Error::Target),
    };
    Ok(Config {
        config: cli.config,
        target,
    })
}

/// Prints one release's values, or writes every release's and the list into `--out-dir`.
pub fn run(config: &Config, _input: impl Read, output: impl Write) -> Result<(), Error> {
    run_with(config, &PINS, output)
}

/// [`run`] with the given pins. Everything is checked and rendered before the first write.
pub fn run_with(config: &Config, pins: &Pins, mut output: impl Write) -> Result<(), Error> {
    let platform = load(&config.config)?;
    match &config.target {
        Target::Dir { dir, inputs } => {
            let inputs_path = inputs;
            let inputs: PlatformInputs = pop_common::input::read_json(inputs_path)?;
            let releases = releases_tsv(pins)?;
            let values = Release::ALL
                .iter()
                .map(|&release| Ok((release, values_text(&platform, release)?)))
                .collect::<Result<Vec<_>, Error>>()?;
            let firewall = firewall_files(&platform, &inputs, inputs_path)?;
            std::fs::create_dir_all(dir).map_err(|source| Error::WriteFile {
                path: dir.clone(),
                source,
            })?;
            for (release, text) in values {
                write_file(dir, &format!("{}.json", release.name()), &text)?;
            }
            for (name, text) in firewall {
                write_file(dir, name, &text)?;
            }
            // Last: its date says that every values file beside it is as fresh.
            write_file(dir, RELEASES_FILE, &releases)
        }
        Target::Stdout(release) => {
            output
                .write_all(values_text(&platform, *release)?.as_bytes())
                .output()?;
            Ok(output.flush().output()?)
        }
    }
}

/// The cluster's addresses, as the host firewall knows them.
pub fn addresses(inputs: &PlatformInputs) -> Addresses {
    Addresses {
        admin: inputs.admin_cidrs.clone(),
        control_planes: inputs.control_plane_addresses.clone(),
        workers: inputs.worker_addresses.clone(),
    }
}

/// The host firewall's files, `(name, text)`: the Cilium host policies as a JSON `List`, Talos's
/// documents for the worker as a YAML stream, and where to apply them: through the first
/// control plane's apid (reachable from the admin networks as long as the security group is
/// right, whatever the worker's own rules say) to each worker's IPv4 address.
fn firewall_files(
    platform: &PlatformConfig,
    inputs: &PlatformInputs,
    inputs_path: &Path,
) -> Result<Vec<(&'static str, String)>, Error> {
    // An empty list would not mean "nobody" to every layer (an empty CIDR set in a Cilium rule
    // selects nothing to narrow; Talos with no subnet drops a port for everyone): refused.
    let refuse = |field: &str, why: &str| Error::Input(InputError::field(inputs_path, field, why));
    if inputs.admin_cidrs.is_empty() {
        return Err(refuse(
            "admin_cidrs",
            "is empty: nobody could reach the Talos and Kubernetes APIs",
        ));
    }
    if !inputs.worker_addresses.iter().any(|a| a.is_ipv4()) {
        return Err(refuse(
            "worker_addresses",
            "holds no IPv4 address: no worker to patch",
        ));
    }
    let endpoint = inputs
        .control_plane_addresses
        .iter()
        .find(|a| a.is_ipv4())
        .ok_or_else(|| {
            refuse(
                "control_plane_addresses",
                "holds no IPv4 address: no control plane to reach the worker through",
            )
        })?;
    let addresses = addresses(inputs);
    let encode = |e: String| Error::Write(io::Error::other(e).into());
    let labels = serde_json::json!({
        "app.kubernetes.io/part-of": "edgepop",
        "app.kubernetes.io/managed-by": "render-platform",
        "app.kubernetes.io/component": "host-firewall",
    });
    let policies = json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": host_firewall::cilium_policies(&addresses, &labels),
    });
    let mut policies =
        serde_json::to_string_pretty(&policies).map_err(|e| encode(e.to_string()))?;
    policies.push('\n');
    let mut talos = String::new();
    for document in host_firewall::talos_documents(&addresses, platform.cilium.policy_audit_mode) {
        talos.push_str("---\n");
        talos.push_str(&serde_norway::to_string(&document).map_err(|e| encode(e.to_string()))?);
    }
    let mut targets = String::from(
        "# endpoint\tnode\tpatch: talosctl --endpoints <endpoint> --nodes <node> patch machineconfig --patch @<patch>\n",
    );
    for worker in inputs.worker_addresses.iter().filter(|a| a.is_ipv4()) {
        targets.push_str(&format!("{endpoint}\t{worker}\t{TALOS_FIREWALL_FILE}\n"));
    }
    Ok(vec![
        (HOST_POLICIES_FILE, policies),
        (TALOS_FIREWALL_FILE, talos),
        (TALOS_FIREWALL_LIST, targets),
    ])
}

/// The values of one release as pretty JSON, ending with a newline.
fn values_text(platform: &PlatformConfig, release: Release) -> Result<String, Error> {
    let mut text = serde_json::to_string_pretty(&render(platform, release))
        .map_err(|err| Error::Write(io::Error::other(err).into()))?;
    text.push('\n');
    Ok(text)
}

/// Writes `dir/name` through a temporary file renamed into place.
fn write_file(dir: &Path, name: &str, text: &str) -> Result<(), Error> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|source| Error::WriteFile { path, source })
}

/// Reads and checks the platform config: every refusal names the file and the field.
pub fn load(path: &std::path::Path) -> Result<PlatformConfig, InputError> {
    let platform: PlatformConfig = pop_common::input::read_json(path)?;
    check(&platform).map_err(|(field, message)| InputError::field(path, field, message))?;
    Ok(platform)
}

/// The rules the types cannot say; `Err((field, why))`.
pub fn check(platform: &PlatformConfig) -> Result<(), (&'static str, String)> {
    let cilium = &platform.cilium;
    let wg = &cilium.wireguard;
    if wg.node_encryption && !wg.enabled {
        return Err((
            "cilium.wireguard.node_encryption",
            "needs cilium.wireguard.enabled".into(),
        ));
    }
    if wg.strict_mode && !wg.enabled {
        return Err((
            "cilium.wireguard.strict_mode",
            "needs cilium.wireguard.enabled".into(),
        ));
    }
    if wg.strict_mode && wg.strict_mode_cidr.is_none() {
        return Err((
            "cilium.wireguard.strict_mode_cidr",
            "required when strict_mode is true (the pod CIDR, 10.244.0.0/16 on a default Talos)"
                .into(),
        ));
    }
    if let Some(ipnet::IpNet::V6(_)) = wg.strict_mode_cidr {
        // Cilium's strict-mode CIDR is IPv4 only.
        return Err((
            "cilium.wireguard.strict_mode_cidr",
            "must be an IPv4 CIDR".into(),
        ));
    }
    if cilium.hubble.ui && !cilium.hubble.relay {
        // The chart's validate.yaml refuses the UI without the relay.
        return Err(("cilium.hubble.ui", "needs cilium.hubble.relay".into()));
    }
    let class = &platform.istio.gateway_class;
    if !is_dns_label(class) {
        return Err((
            "istio.gateway_class",
            format!("`{class}` is not a Kubernetes object name (lower-case DNS label)"),
        ));
    }
    Ok(())
}

fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// The values of one release for a checked config (pure).
pub fn render(platform: &PlatformConfig, release: Release) -> Value {
    match release {
        Release::Cilium => cilium(&platform.cilium),
        Release::CertManager => json!({
            "config": {
                // cert-manager renders `config` as its ControllerConfiguration only with these
                // two set; `gatewayAPI.enabled` is the v1.21 form (enableGatewayAPI is deprecated).
                "apiVersion": "controller.config.cert-manager.io/v1alpha1",
                "kind": "ControllerConfiguration",
                "gatewayAPI": {"enabled": platform.cert_manager.gateway_api},
            }
        }),
        // Nothing of the platform config concerns the CRD chart.
        Release::IstioBase => json!({}),
        Release::Istiod => json!({
            "env": {
                "PILOT_GATEWAY_API_DEFAULT_GATEWAYCLASS_NAME": platform.istio.gateway_class,
            }
        }),
    }
}

fn cilium(cilium: &CiliumConfig) -> Value {
    let wg = &cilium.wireguard;
    let mut encryption = json!({
        "enabled": wg.enabled,
        "nodeEncryption": wg.node_encryption,
        // The 1.18+ form; `strictMode.enabled` was removed in 1.20.
        "strictMode": {
            "egress": {"enabled": wg.strict_mode},
            "ingress": {"enabled": wg.strict_mode},
        },
    });
    if wg.enabled {
        encryption["type"] = json!("wireguard");
    }
    if let (true, Some(cidr)) = (wg.strict_mode, wg.strict_mode_cidr) {
        encryption["strictMode"]["egress"]["cidr"] = json!(cidr.to_string());
        // The chart's default routing is a tunnel, where node identities must stay allowed.
        encryption["strictMode"]["egress"]["allowRemoteNodeIdentities"] = json!(true);
    }
    let Routing::Tunnel { protocol, port } = flows::ROUTING;
    json!({
        // Comment-only in values.yaml, read by the templates (template-only-keys.txt).
        "policyAuditMode": cilium.policy_audit_mode,
        // The declared flows' ports (crates/flows): the routing mode and the tunnel, chosen
        // there and opened between nodes only; the health checks; Hubble's server, which the
        // peer service must target; the node-port range the API server shares.
        "routingMode": "tunnel",
        "tunnelProtocol": protocol.cilium(),
        "tunnelPort": port,
        // Template-only too (the agent's cluster-health-port).
        "clusterHealthPort": flows::CILIUM_HEALTH,
        "nodePort": {"range": flows::NODE_PORT_RANGE.cilium()},
        "encryption": encryption,
        "hubble": {
            "listenAddress": format!(":{}", flows::HUBBLE),
            "peerService": {"targetPort": flows::HUBBLE},
            "relay": {"enabled": cilium.hubble.relay},
            "ui": {"enabled": cilium.hubble.ui},
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn example() -> PlatformConfig {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../config/platform.example.json");
        load(&path).unwrap()
    }

    #[test]
    fn the_example_renders_audit_mode_wireguard_not_strict_and_hubble() {
        let values = render(&example(), Release::Cilium);
        assert_eq!(values["policyAuditMode"], json!(true));
        assert_eq!(values["nodePort"]["range"], json!("80,443"));
        assert_eq!(values["routingMode"], json!("tunnel"));
        assert_eq!(values["tunnelProtocol"], json!("vxlan"));
        assert_eq!(values["tunnelPort"], json!(8472));
        assert_eq!(values["clusterHealthPort"], json!(4240));
        assert_eq!(values["hubble"]["listenAddress"], json!(":4244"));
        assert_eq!(values["hubble"]["peerService"]["targetPort"], json!(4244));
        assert_eq!(values["encryption"]["enabled"], json!(true));
        assert_eq!(values["encryption"]["type"], json!("wireguard"));
        assert_eq!(values["encryption"]["nodeEncryption"], json!(true));
        assert_eq!(
            values["encryption"]["strictMode"]["egress"]["enabled"],
            json!(false)
        );
        assert_eq!(
            values["encryption"]["strictMode"]["ingress"]["enabled"],
            json!(false)
        );
        assert!(
            values["encryption"]["strictMode"]["egress"]
                .get("cidr")
                .is_none()
        );
        assert_eq!(values["hubble"]["relay"]["enabled"], json!(true));
        assert_eq!(values["hubble"]["ui"]["enabled"], json!(true));
    }

    #[test]
    fn day_two_enforce_and_strict_wireguard_come_from_the_config() {
        let mut platform = example();
        platform.cilium.policy_audit_mode = false;
        platform.cilium.wireguard.strict_mode = true;
        platform.cilium.wireguard.strict_mode_cidr = Some("10.244.0.0/16".parse().unwrap());
        check(&platform).unwrap();
        let values = render(&platform, Release::Cilium);
        assert_eq!(values["policyAuditMode"], json!(false));
        let egress = &values["encryption"]["strictMode"]["egress"];
        assert_eq!(egress["enabled"], json!(true));
        assert_eq!(egress["cidr"], json!("10.244.0.0/16"));
        assert_eq!(egress["allowRemoteNodeIdentities"], json!(true));
        assert_eq!(
            values["encryption"]["strictMode"]["ingress"]["enabled"],
            json!(true)
        );
    }

    #[test]
    fn cert_manager_gets_the_v1_21_gateway_api_switch_and_istiod_the_class() {
        let platform = example();
        let cm = render(&platform, Release::CertManager);
        assert_eq!(cm["config"]["gatewayAPI"]["enabled"], json!(true));
        assert_eq!(cm["config"]["kind"], json!("ControllerConfiguration"));
        assert!(cm["config"].get("enableGatewayAPI").is_none());
        let istiod = render(&platform, Release::Istiod);
        assert_eq!(
            istiod["env"]["PILOT_GATEWAY_API_DEFAULT_GATEWAYCLASS_NAME"],
            json!("istio")
        );
        assert_eq!(render(&platform, Release::IstioBase), json!({}));
    }

    #[test]
    fn inconsistent_switches_are_refused_naming_the_field() {
        type Mutation = fn(&mut PlatformConfig);
        let cases: Vec<(Mutation, &str)> = vec![
            (
                |p| {
                    p.cilium.wireguard.enabled = false;
                    p.cilium.wireguard.node_encryption = false;
                    p.cilium.wireguard.strict_mode = true;
                },
                "cilium.wireguard.strict_mode",
            ),
            (
                |p| p.cilium.wireguard.enabled = false,
                "cilium.wireguard.node_encryption",
            ),
            (
                |p| {
                    p.cilium.wireguard.strict_mode = true;
                    p.cilium.wireguard.strict_mode_cidr = None;
                },
                "cilium.wireguard.strict_mode_cidr",
            ),
            (
                |p| {
                    p.cilium.wireguard.strict_mode = true;
                    p.cilium.wireguard.strict_mode_cidr = Some("fd00::/64".parse().unwrap());
                },
                "cilium.wireguard.strict_mode_cidr",
            ),
            (|p| p.cilium.hubble.relay = false, "cilium.hubble.ui"),
            (
                |p| p.istio.gateway_class = "Istio".into(),
                "istio.gateway_class",
            ),
        ];
        for (mutate, field) in cases {
            let mut platform = example();
            mutate(&mut platform);
            let (got, _) = check(&platform).expect_err(field);
            assert_eq!(got, field);
        }
    }

    #[test]
    fn an_unknown_field_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("platform.json");
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../config/platform.example.json"),
        )
        .unwrap()
        .replace("\"policy_audit_mode\"", "\"policy_audit\"");
        std::fs::write(&path, text).unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("platform.json"), "{err}");
        assert!(err.contains("policy_audit"), "{err}");
    }

    fn example_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/platform.example.json")
    }

    fn inputs_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/platform-inputs.example.json")
    }

    #[test]
    fn run_writes_json_that_ends_with_a_newline() {
        let config = Config {
            config: example_path(),
            target: Target::Stdout(Release::Cilium),
        };
        let mut out = Vec::new();
        run(&config, std::io::empty(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with("}\n"));
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, render(&example(), Release::Cilium));
    }

    #[test]
    fn the_out_dir_holds_every_release_and_the_list_in_install_order_with_the_pins() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("rendered");
        let config = Config {
            config: example_path(),
            target: Target::Dir {
                dir: out.clone(),
                inputs: inputs_path(),
            },
        };
        run(&config, std::io::empty(), Vec::new()).unwrap();
        let list = std::fs::read_to_string(out.join(RELEASES_FILE)).unwrap();
        let rows: Vec<Vec<&str>> = list
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split('\t').collect())
            .collect();
        let pin = |key: &str| PINS.get(key).unwrap();
        assert_eq!(
            rows,
            [
                [
                    "cilium",
                    "kube-system",
                    "cilium",
                    pin("CILIUM_CHART_REPO"),
                    pin("CILIUM_VERSION")
                ],
                [
                    "cert-manager",
                    "cert-manager",
                    "cert-manager",
                    pin("CERT_MANAGER_CHART_REPO"),
                    pin("CERT_MANAGER_VERSION")
                ],
                [
                    "istio-base",
                    "istio-system",
                    "base",
                    pin("ISTIO_CHART_REPO"),
                    pin("ISTIO_VERSION")
                ],
                [
                    "istiod",
                    "istio-system",
                    "istiod",
                    pin("ISTIO_CHART_REPO"),
                    pin("ISTIO_VERSION")
                ],
            ]
        );
        for release in Release::ALL {
            let text =
                std::fs::read_to_string(out.join(format!("{}.json", release.name()))).unwrap();
            let values: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(values, render(&example(), release), "{}", release.name());
        }
        assert_eq!(
            testkit::file_names(&out),
            [
                "cert-manager.json",
                "cilium.json",
                HOST_POLICIES_FILE,
                "istio-base.json",
                "istiod.json",
                RELEASES_FILE,
                TALOS_FIREWALL_LIST,
                TALOS_FIREWALL_FILE,
            ],
            "no temporary file is left"
        );
    }

    #[test]
    fn a_missing_chart_pin_is_refused_naming_it_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("rendered");
        let config = Config {
            config: example_path(),
            target: Target::Dir {
                dir: out.clone(),
                inputs: inputs_path(),
            },
        };
        let pins = Pins::new("CILIUM_CHART_REPO=https://helm.cilium.io\nCILIUM_VERSION=1.20.3\n");
        let err = run_with(&config, &pins, Vec::new()).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        assert!(
            err.to_string()
                .starts_with("k8s/versions.env: field `CERT_MANAGER_CHART_REPO`: not pinned"),
            "{err}"
        );
        assert!(!out.exists());
    }

    #[test]
    fn inputs_without_admins_or_nodes_are_refused_naming_the_field_and_nothing_is_written() {
        let example: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(inputs_path()).unwrap()).unwrap();
        for (field, value) in [
            ("admin_cidrs", json!([])),
            ("worker_addresses", json!(["2001:db8::10"])),
            ("control_plane_addresses", json!([])),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut inputs = example.clone();
            inputs[field] = value;
            let path = dir.path().join("platform-inputs.json");
            std::fs::write(&path, inputs.to_string()).unwrap();
            let out = dir.path().join("rendered");
            let config = Config {
                config: example_path(),
                target: Target::Dir {
                    dir: out.clone(),
                    inputs: path,
                },
            };
            let err = run(&config, std::io::empty(), Vec::new()).unwrap_err();
            assert_eq!(err.exit(), Exit::Usage);
            let text = err.to_string();
            assert!(
                text.contains("platform-inputs.json") && text.contains(field),
                "{text}"
            );
            assert!(!out.exists(), "{field}: something was written");
        }
    }

    #[test]
    fn a_release_or_the_out_dir_is_named_not_both_nor_neither() {
        let cli = |args: &[&str]| {
            Cli::try_parse_from(["render-platform", "--config", "p.json"].iter().chain(args))
                .unwrap()
        };
        let env = Env::default();
        assert_eq!(
            resolve(cli(&["istiod"]), &env).unwrap().target,
            Target::Stdout(Release::Istiod)
        );
        assert_eq!(
            resolve(cli(&["--out-dir", "d", "--inputs", "i.json"]), &env)
                .unwrap()
                .target,
            Target::Dir {
                dir: PathBuf::from("d"),
                inputs: PathBuf::from("i.json")
            }
        );
        // The host firewall needs the cluster's addresses.
        assert!(
            Cli::try_parse_from(["render-platform", "--config", "p.json", "--out-dir", "d"])
                .is_err()
        );
        for args in [&[][..], &["cilium", "--out-dir", "d", "--inputs", "i.json"]] {
            let err = resolve(cli(args), &env).unwrap_err();
            assert!(matches!(err, Error::Target), "{err}");
            assert_eq!(err.exit(), Exit::Usage);
        }
    }
}
