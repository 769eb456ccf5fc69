//! `render-platform`: the platform layer of a cluster profile. A profile is a declared, ordered
//! list of components ([`profile`]); this tool checks its order, renders each component's
//! cluster-specific layer from the profile's config, and writes the plan that
//! `pipelines/platform.sh` installs, diffs and uninstalls, whatever the profile.
//!
//! Two profiles: `edge` (the default), the Scaleway edge (Cilium, the Gateway API CRDs,
//! cert-manager, Istio), whose config `config/platform.json` holds the day-2 switches (policy
//! audit or enforce, WireGuard and its strict mode, Hubble, the NodePort range, cert-manager's
//! Gateway API support, Istio's default GatewayClass); and `onprem` ([`onprem`]), the base of an
//! existing Talos cluster on premises, whose config is `config/onprem.json`.
//!
//! The committed `values/<chart>.yaml` hold what never changes (what Talos imposes); helm reads
//! this tool's output after them (`-f values/cilium.yaml -f <rendered>`), so a day-2 change is an
//! edit of the cluster's config, never of a values file. The output is JSON (which Helm reads as
//! YAML), keys sorted, so the same config always gives the same bytes.
//!
//! ```text
//! render-platform --config config/platform.json cilium                     # one component, on stdout
//! render-platform --config config/platform.json --out-dir DIR              # every component, and the plan
//! render-platform --profile onprem --config config/onprem.json --out-dir DIR
//! sops --decrypt --output-type json FILE | render-platform --secrets DIR/secrets.json
//! ```
//!
//! With `--out-dir` it writes `DIR/<component>.json` for each component that has a rendered
//! layer (a Helm release's values, the objects of an `objects` or `namespaces` component, the
//! [`secrets::SecretsTemplate`] of a `secrets` one), `DIR/status.env` for profiles whose
//! `make cluster-status` needs names of the render, then `DIR/components.tsv`, one line per
//! component in install order ([`profile::plan_text`]; the chart pins of `k8s/versions.env`,
//! compiled in). `--secrets` is the apply-time step: the decrypted SOPS document on stdin, the
//! Secrets on stdout.

pub mod host_firewall;
pub mod onprem;
pub mod profile;
pub mod secrets;

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

use profile::{Component, Kind, PLAN_FILE, PlanLine};

/// `k8s/versions.env` as it was when this binary was built.
pub const PINS: Pins<'static> = Pins::new(include_str!("../../../k8s/versions.env"));

/// The files of `--out-dir` that hold the edge's host firewall: the Cilium host policies (the
/// `host-firewall` component's objects), Talos's ingress firewall documents for the worker and
/// where to apply them (the `talos-firewall` component).
pub const HOST_POLICIES_FILE: &str = "host-firewall.json";
pub const TALOS_FIREWALL_FILE: &str = "talos-firewall.worker.yaml";
pub const TALOS_FIREWALL_LIST: &str = "talos-firewall.tsv";

/// The file of `--out-dir` with the names `make cluster-status` shares with the render.
pub const STATUS_FILE: &str = "status.env";

/// The cluster profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Profile {
    /// The Scaleway edge: Cilium, the Gateway API CRDs, cert-manager, Istio.
    #[default]
    Edge,
    /// An existing Talos cluster on premises: Cilium LB IPAM and L2, ceph-csi-rbd and snapshots,
    /// Traefik, CrowdSec, cert-manager, external-dns on OVH, secrets from SOPS.
    Onprem,
}

impl Profile {
    pub const ALL: [Profile; 2] = [Profile::Edge, Profile::Onprem];

    pub fn name(self) -> &'static str {
        match self {
            Profile::Edge => "edge",
            Profile::Onprem => "onprem",
        }
    }

    /// The profile's components, in install order.
    pub fn components(self) -> &'static [Component] {
        match self {
            Profile::Edge => EDGE_COMPONENTS,
            Profile::Onprem => onprem::COMPONENTS,
        }
    }
}

/// Cilium, the CNI of every profile (nothing schedules before it): the Talos values, then the
/// profile's cluster layer. Its operator registers the CRDs its features use as it starts.
pub const CILIUM: Component = Component {
    name: "cilium",
    namespace: Some("kube-system"),
    kind: Kind::Helm {
        chart: "cilium",
        repo_pin: "CILIUM_CHART_REPO",
        version_pin: "CILIUM_VERSION",
        values: &["values/cilium.yaml"],
        crds: &[
            "ciliumclusterwidenetworkpolicies.cilium.io",
            "ciliumloadbalancerippools.cilium.io",
            "ciliuml2announcementpolicies.cilium.io",
        ],
    },
    depends_on: &[],
};

/// The ClusterIssuer CRD cert-manager's chart installs, which the issuers wait for.
pub const CLUSTER_ISSUER_CRD: &str = "clusterissuers.cert-manager.io";

/// cert-manager, the certificates of every profile, after what `depends_on` names (the edge's
/// Gateway API CRDs, which it watches).
pub const fn cert_manager(depends_on: &'static [&'static str]) -> Component {
    Component {
        name: "cert-manager",
        namespace: Some("cert-manager"),
        kind: Kind::Helm {
            chart: "cert-manager",
            repo_pin: "CERT_MANAGER_CHART_REPO",
            version_pin: "CERT_MANAGER_VERSION",
            values: &["values/cert-manager.yaml"],
            // Its ACME CRDs (orders, challenges) are of a group of their own.
            crds: &[CLUSTER_ISSUER_CRD, "orders.acme.cert-manager.io"],
        },
        depends_on,
    }
}

/// The edge profile, in install order: the CNI first (nothing schedules before it) and the host
/// firewall it enforces, the Gateway API CRDs that cert-manager and istiod watch, cert-manager,
/// then Istio's CRDs and istiod.
pub const EDGE_COMPONENTS: &[Component] = &[
    CILIUM,
    // The host firewall, from the declared flows and the cluster's addresses: Cilium's host
    // policies, then Talos's ingress firewall on the worker (no reboot).
    Component {
        name: "host-firewall",
        namespace: None,
        kind: Kind::Objects {
            needs: &["ciliumclusterwidenetworkpolicies.cilium.io"],
            ready: None,
        },
        depends_on: &["cilium"],
    },
    Component {
        name: "talos-firewall",
        namespace: None,
        kind: Kind::Talos,
        depends_on: &["host-firewall"],
    },
    Component {
        name: "gateway-api",
        namespace: None,
        kind: Kind::Crds {
            pins_prefix: "VENDOR_GATEWAY_API_",
            version_pin: "GATEWAY_API_VERSION",
            crds: &[
                "gatewayclasses.gateway.networking.k8s.io",
                "gateways.gateway.networking.k8s.io",
                "httproutes.gateway.networking.k8s.io",
            ],
        },
        depends_on: &[],
    },
    cert_manager(&["cilium", "gateway-api"]),
    Component {
        name: "istio-base",
        namespace: Some("istio-system"),
        kind: Kind::Helm {
            chart: "base",
            repo_pin: "ISTIO_CHART_REPO",
            version_pin: "ISTIO_VERSION",
            values: &["values/istio-base.yaml"],
            // One of each of the chart's API groups (Istio 1.30's CRDs).
            crds: &[
                "wasmplugins.extensions.istio.io",
                "virtualservices.networking.istio.io",
                "authorizationpolicies.security.istio.io",
                "telemetries.telemetry.istio.io",
            ],
        },
        depends_on: &["cilium"],
    },
    Component {
        name: "istiod",
        namespace: Some("istio-system"),
        kind: Kind::Helm {
            chart: "istiod",
            repo_pin: "ISTIO_CHART_REPO",
            version_pin: "ISTIO_VERSION",
            values: &["values/istiod.yaml"],
            crds: &[],
        },
        depends_on: &["istio-base", "gateway-api"],
    },
];

/// A profile's config, loaded and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterConfig {
    Edge(PlatformConfig),
    Onprem(Box<onprem::OnpremConfig>),
}

impl ClusterConfig {
    /// Reads the config of `profile` from `path`: every refusal names the file and the field.
    pub fn load(profile: Profile, path: &Path) -> Result<ClusterConfig, InputError> {
        Ok(match profile {
            Profile::Edge => ClusterConfig::Edge(load(path)?),
            Profile::Onprem => ClusterConfig::Onprem(Box::new(onprem::load(path)?)),
        })
    }

    pub fn profile(&self) -> Profile {
        match self {
            ClusterConfig::Edge(_) => Profile::Edge,
            ClusterConfig::Onprem(_) => Profile::Onprem,
        }
    }
}

/// The rendered layer of one component: a Helm release's values, the objects of an `objects` or
/// `namespaces` component (a `v1` `List`), the template of a `secrets` one; `None` for vendored
/// CRDs. `config_path` is the config's own path (files it names are relative to its folder).
pub fn rendered(
    cluster: &ClusterConfig,
    config_path: &Path,
    component: &Component,
    pins: &Pins,
) -> Result<Option<Value>, Error> {
    let missing = || Error::NoRender(component.name);
    Ok(match (&component.kind, cluster) {
        (Kind::Crds { .. }, _) => None,
        (Kind::Helm { .. }, ClusterConfig::Edge(platform)) => {
            Some(render(platform, component.name).ok_or_else(missing)?)
        }
        (Kind::Helm { .. }, ClusterConfig::Onprem(config)) => {
            Some(onprem::values(config, component.name, pins)?.ok_or_else(missing)?)
        }
        (Kind::Objects { .. } | Kind::Namespaces, ClusterConfig::Onprem(config)) => {
            let items = onprem::objects(config, component.name, pins)?.ok_or_else(missing)?;
            Some(json!({"apiVersion": "v1", "kind": "List", "items": items}))
        }
        (Kind::Secrets, ClusterConfig::Onprem(config)) => {
            let template = onprem::secrets_template(config, config_path);
            secrets::check_encrypted(&template.source, &template)?;
            Some(
                serde_json::to_value(&template)
                    .map_err(|e| Error::Write(io::Error::other(e).into()))?,
            )
        }
        // The host firewall's files come from the cluster's addresses ([`firewall_files`]).
        (Kind::Objects { .. } | Kind::Talos, ClusterConfig::Edge(_)) => None,
        (Kind::Talos, ClusterConfig::Onprem(_))
        | (Kind::Namespaces | Kind::Secrets, ClusterConfig::Edge(_)) => {
            return Err(missing());
        }
    })
}

/// The plan's line of each component, with its pins resolved; the first missing pin is an error.
pub fn plan(
    components: &[Component],
    pins: &Pins,
    rendered_secrets: &[(&str, &secrets::SecretsTemplate)],
) -> Result<Vec<PlanLine>, InputError> {
    components
        .iter()
        .map(|component| {
            let mut line = PlanLine {
                component: *component,
                source: String::new(),
                repository: String::new(),
                version: String::new(),
                list: Vec::new(),
            };
            match component.kind {
                Kind::Helm {
                    chart,
                    repo_pin,
                    version_pin,
                    values,
                    ..
                } => {
                    line.source = chart.to_owned();
                    line.repository = pins.require(repo_pin)?.to_owned();
                    line.version = pins.require(version_pin)?.to_owned();
                    line.list = values.iter().map(|v| (*v).to_owned()).collect();
                }
                Kind::Crds {
                    pins_prefix,
                    version_pin,
                    ..
                } => {
                    line.source = pins_prefix.to_owned();
                    line.version = pins.require(version_pin)?.to_owned();
                }
                Kind::Secrets => {
                    if let Some((_, template)) =
                        rendered_secrets.iter().find(|(n, _)| *n == component.name)
                    {
                        line.source = template.source.display().to_string();
                        line.list = template.names();
                    }
                }
                Kind::Namespaces | Kind::Objects { .. } | Kind::Talos => {}
            }
            Ok(line)
        })
        .collect()
}

#[derive(Debug, Parser)]
#[command(name = "render-platform", version, about)]
pub struct Cli {
    /// The cluster profile.
    #[arg(long, value_enum, default_value_t = Profile::Edge)]
    pub profile: Profile,
    /// The profile's config (edge: config/platform.json; onprem: config/onprem.json; examples
    /// beside them, *.example.json).
    #[arg(long, required_unless_present = "secrets")]
    pub config: Option<PathBuf>,
    /// The component whose rendered layer to print.
    pub component: Option<String>,
    /// Write every component's rendered layer into DIR/<component>.json, then DIR/components.tsv.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// The infra layer's output (talos/_out/platform-inputs.json): the addresses the edge's host
    /// firewall is rendered from. Needed with --out-dir for the edge profile.
    #[arg(long, value_name = "FILE")]
    pub inputs: Option<PathBuf>,
    /// Apply time: read the decrypted SOPS document (JSON) on stdin and print the Secrets of this
    /// template (DIR/<component>.json of a `secrets` component).
    #[arg(long, value_name = "TEMPLATE", conflicts_with_all = ["config", "component", "out_dir", "inputs"])]
    pub secrets: Option<PathBuf>,
}

/// What to do: the files named are read by `run` (they are input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Config {
    Render {
        profile: Profile,
        config: PathBuf,
        target: Target,
        /// The platform inputs (the edge's host firewall).
        inputs: Option<PathBuf>,
    },
    FillSecrets {
        template: PathBuf,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One component's rendered layer on stdout.
    Stdout(String),
    /// Every component's rendered layer and the plan into this directory.
    Dir(PathBuf),
}

/// `config/platform.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformConfig {
    pub cilium: CiliumConfig,
    pub cert_manager: CertManagerConfig,
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

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Order(#[from] profile::OrderError),
    #[error(transparent)]
    Secrets(#[from] secrets::FillError),
    #[error("writing the values: {0}")]
    Write(#[from] OutputError),
    #[error("name one component, or give --out-dir for all of them")]
    Target,
    #[error(
        "the edge profile's --out-dir needs --inputs (talos/_out/platform-inputs.json): its host firewall is made of the cluster's addresses"
    )]
    Inputs,
    #[error(
        "profile `{profile}` has no component `{name}` with a rendered layer (it has: {known})"
    )]
    UnknownComponent {
        profile: &'static str,
        name: String,
        known: String,
    },
    #[error("component `{0}`: this profile renders nothing for it")]
    NoRender(&'static str),
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
            Error::Input(_) | Error::Target | Error::Inputs | Error::UnknownComponent { .. } => {
                Exit::Usage
            }
            Error::Secrets(secrets::FillError::Write(_)) => Exit::Failure,
            Error::Secrets(_) => Exit::Usage,
            Error::Order(_) | Error::NoRender(_) | Error::Write(_) | Error::WriteFile { .. } => {
                Exit::Failure
            }
        }
    }
}

/// The arguments into what to do; the environment plays no part.
pub fn resolve(cli: Cli, _env: &Env) -> Result<Config, Error> {
    if let Some(template) = cli.secrets {
        return Ok(Config::FillSecrets { template });
    }
    let target = match (cli.component, cli.out_dir) {
        (Some(component), None) => Target::Stdout(component),
        (None, Some(dir)) => Target::Dir(dir),
        _ => return Err(Error::Target),
    };
    if cli.profile == Profile::Edge && matches!(target, Target::Dir(_)) && cli.inputs.is_none() {
        return Err(Error::Inputs);
    }
    Ok(Config::Render {
        profile: cli.profile,
        // clap requires --config without --secrets.
        config: cli.config.ok_or(Error::Target)?,
        target,
        inputs: cli.inputs,
    })
}

/// Prints one component's rendered layer, writes every one and the plan into `--out-dir`, or
/// (`--secrets`) turns the decrypted SOPS document on `input` into Secrets on `output`.
pub fn run(config: &Config, input: impl Read, output: impl Write) -> Result<(), Error> {
    run_with(config, &PINS, input, output)
}

/// [`run`] with the given pins. Everything is checked and rendered before the first write.
pub fn run_with(
    config: &Config,
    pins: &Pins,
    input: impl Read,
    mut output: impl Write,
) -> Result<(), Error> {
    let (profile, config_path, target, inputs_path) = match config {
        Config::FillSecrets { template } => {
            let template: secrets::SecretsTemplate = pop_common::input::read_json(template)?;
            return Ok(secrets::fill(&template, input, output)?);
        }
        Config::Render {
            profile,
            config,
            target,
            inputs,
        } => (*profile, config, target, inputs),
    };
    let components = profile.components();
    profile::check(profile.name(), components)?;
    let cluster = ClusterConfig::load(profile, config_path)?;
    match target {
        Target::Dir(dir) => {
            let mut files = Vec::new();
            let mut templates = Vec::new();
            for component in components {
                let Some(value) = rendered(&cluster, config_path, component, pins)? else {
                    continue;
                };
                if let Kind::Secrets = component.kind {
                    let template: secrets::SecretsTemplate = serde_json::from_value(value.clone())
                        .map_err(|e| Error::Write(io::Error::other(e).into()))?;
                    templates.push((component.name, template));
                }
                files.push((format!("{}.json", component.name), json_text(&value)?));
            }
            let template_refs: Vec<(&str, &secrets::SecretsTemplate)> =
                templates.iter().map(|(n, t)| (*n, t)).collect();
            let plan = profile::plan_text(&plan(components, pins, &template_refs)?);
            match &cluster {
                ClusterConfig::Onprem(onprem) => {
                    files.push((STATUS_FILE.to_owned(), onprem::status_names(onprem)));
                }
                ClusterConfig::Edge(platform) => {
                    let path = inputs_path.as_ref().ok_or(Error::Inputs)?;
                    let inputs: PlatformInputs = pop_common::input::read_json(path)?;
                    for (name, text) in firewall_files(platform, &inputs, path)? {
                        files.push((name.to_owned(), text));
                    }
                }
            }
            std::fs::create_dir_all(dir).map_err(|source| Error::WriteFile {
                path: dir.clone(),
                source,
            })?;
            for (name, text) in files {
                write_file(dir, &name, &text)?;
            }
            // Last: its date says that every file beside it is as fresh.
            write_file(dir, PLAN_FILE, &plan)
        }
        Target::Stdout(name) => {
            let unknown = || Error::UnknownComponent {
                profile: profile.name(),
                name: name.clone(),
                known: components
                    .iter()
                    .filter(|c| matches!(rendered(&cluster, config_path, c, pins), Ok(Some(_))))
                    .map(|c| c.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            let component = components
                .iter()
                .find(|c| c.name == name)
                .ok_or_else(unknown)?;
            let value = rendered(&cluster, config_path, component, pins)?.ok_or_else(unknown)?;
            output.write_all(json_text(&value)?.as_bytes()).output()?;
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

/// A rendered layer as pretty JSON, ending with a newline.
fn json_text(value: &Value) -> Result<String, Error> {
    let mut text = serde_json::to_string_pretty(value)
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
    Ok(())
}

/// The edge profile's values of one Helm component for a checked config (pure).
pub fn render(platform: &PlatformConfig, component: &str) -> Option<Value> {
    Some(match component {
        "cilium" => cilium(&platform.cilium),
        "cert-manager" => json!({
            "config": {
                // cert-manager renders `config` as its ControllerConfiguration only with these
                // two set; `gatewayAPI.enabled` is the v1.21 form (enableGatewayAPI is deprecated).
                "apiVersion": "controller.config.cert-manager.io/v1alpha1",
                "kind": "ControllerConfiguration",
                "gatewayAPI": {"enabled": platform.cert_manager.gateway_api},
            }
        }),
        // Nothing of the platform config concerns the CRD chart.
        "istio-base" => json!({}),
        "istiod" => json!({
            "env": {
                "PILOT_GATEWAY_API_DEFAULT_GATEWAYCLASS_NAME": pop_common::records::EDGE_GATEWAY_CLASS,
            }
        }),
        _ => return None,
    })
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
        let values = render(&example(), "cilium").unwrap();
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
        let values = render(&platform, "cilium").unwrap();
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
        let cm = render(&platform, "cert-manager").unwrap();
        assert_eq!(cm["config"]["gatewayAPI"]["enabled"], json!(true));
        assert_eq!(cm["config"]["kind"], json!("ControllerConfiguration"));
        assert!(cm["config"].get("enableGatewayAPI").is_none());
        let istiod = render(&platform, "istiod").unwrap();
        assert_eq!(
            istiod["env"]["PILOT_GATEWAY_API_DEFAULT_GATEWAYCLASS_NAME"],
            json!("istio")
        );
        assert_eq!(render(&platform, "istio-base").unwrap(), json!({}));
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

    fn render_config(target: Target) -> Config {
        Config::Render {
            profile: Profile::Edge,
            config: example_path(),
            target,
            inputs: Some(inputs_path()),
        }
    }

    #[test]
    fn run_writes_json_that_ends_with_a_newline() {
        let config = render_config(Target::Stdout("cilium".into()));
        let mut out = Vec::new();
        run(&config, std::io::empty(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with("}\n"));
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, render(&example(), "cilium").unwrap());
    }

    #[test]
    fn every_profile_keeps_its_order() {
        for profile in Profile::ALL {
            profile::check(profile.name(), profile.components()).unwrap();
        }
    }

    #[test]
    fn the_out_dir_holds_every_component_and_the_plan_in_install_order_with_the_pins() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("rendered");
        run(
            &render_config(Target::Dir(out.clone())),
            std::io::empty(),
            Vec::new(),
        )
        .unwrap();
        let list = std::fs::read_to_string(out.join(PLAN_FILE)).unwrap();
        let rows: Vec<Vec<&str>> = list
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split('\t').take(7).collect())
            .collect();
        let pin = |key: &str| PINS.get(key).unwrap();
        assert_eq!(
            rows,
            [
                [
                    "cilium",
                    "helm",
                    "kube-system",
                    "cilium",
                    pin("CILIUM_CHART_REPO"),
                    pin("CILIUM_VERSION"),
                    "values/cilium.yaml"
                ],
                ["host-firewall", "objects", "-", "-", "-", "-", "-"],
                ["talos-firewall", "talos", "-", "-", "-", "-", "-"],
                [
                    "gateway-api",
                    "crds",
                    "-",
                    "VENDOR_GATEWAY_API_",
                    "-",
                    pin("GATEWAY_API_VERSION"),
                    "-"
                ],
                [
                    "cert-manager",
                    "helm",
                    "cert-manager",
                    "cert-manager",
                    pin("CERT_MANAGER_CHART_REPO"),
                    pin("CERT_MANAGER_VERSION"),
                    "values/cert-manager.yaml"
                ],
                [
                    "istio-base",
                    "helm",
                    "istio-system",
                    "base",
                    pin("ISTIO_CHART_REPO"),
                    pin("ISTIO_VERSION"),
                    "values/istio-base.yaml"
                ],
                [
                    "istiod",
                    "helm",
                    "istio-system",
                    "istiod",
                    pin("ISTIO_CHART_REPO"),
                    pin("ISTIO_VERSION"),
                    "values/istiod.yaml"
                ],
            ]
        );
        for name in ["cilium", "cert-manager", "istio-base", "istiod"] {
            let text = std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap();
            let values: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(values, render(&example(), name).unwrap(), "{name}");
        }
        assert_eq!(
            testkit::file_names(&out),
            [
                "cert-manager.json",
                "cilium.json",
                PLAN_FILE,
                HOST_POLICIES_FILE,
                "istio-base.json",
                "istiod.json",
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
        let pins = Pins::new("CILIUM_CHART_REPO=https://helm.cilium.io\nCILIUM_VERSION=1.20.3\n");
        let err = run_with(
            &render_config(Target::Dir(out.clone())),
            &pins,
            std::io::empty(),
            Vec::new(),
        )
        .unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        assert!(
            err.to_string()
                .starts_with("k8s/versions.env: field `GATEWAY_API_VERSION`: not pinned"),
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
            let config = Config::Render {
                profile: Profile::Edge,
                config: example_path(),
                target: Target::Dir(out.clone()),
                inputs: Some(path),
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
    fn a_component_or_the_out_dir_is_named_not_both_nor_neither() {
        let cli = |args: &[&str]| {
            Cli::try_parse_from(["render-platform", "--config", "p.json"].iter().chain(args))
                .unwrap()
        };
        let env = Env::default();
        let target = |config| match config {
            Config::Render { target, .. } => target,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            target(resolve(cli(&["istiod"]), &env).unwrap()),
            Target::Stdout("istiod".into())
        );
        assert_eq!(
            target(resolve(cli(&["--out-dir", "d", "--inputs", "i.json"]), &env).unwrap()),
            Target::Dir(PathBuf::from("d"))
        );
        // The edge's host firewall is made of the cluster's addresses.
        let err = resolve(cli(&["--out-dir", "d"]), &env).unwrap_err();
        assert!(matches!(err, Error::Inputs), "{err}");
        for args in [&[][..], &["cilium", "--out-dir", "d"]] {
            let err = resolve(cli(args), &env).unwrap_err();
            assert!(matches!(err, Error::Target), "{err}");
            assert_eq!(err.exit(), Exit::Usage);
        }
        // --secrets takes no config: it only reads its template and stdin.
        let fill = Cli::try_parse_from(["render-platform", "--secrets", "t.json"]).unwrap();
        assert_eq!(
            resolve(fill, &env).unwrap(),
            Config::FillSecrets {
                template: PathBuf::from("t.json")
            }
        );
        assert!(
            Cli::try_parse_from(["render-platform", "--secrets", "t.json", "--config", "c"])
                .is_err()
        );
        assert!(Cli::try_parse_from(["render-platform", "cilium"]).is_err());
    }

    #[test]
    fn an_unknown_component_is_refused_naming_the_profiles_components() {
        let err = run(
            &render_config(Target::Stdout("traefik".into())),
            std::io::empty(),
            Vec::new(),
        )
        .unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        let text = err.to_string();
        assert!(
            text.contains("profile `edge` has no component `traefik`")
                && text.contains("cilium, cert-manager, istio-base, istiod"),
            "{text}"
        );
    }
}
