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
//! render-platform --profile onprem --config clusters/demo/onprem.json --cluster demo --out-dir DIR
//! render-platform --profile onprem --config config/onprem.json --print-names  # make check
//! sops --decrypt --output-type json FILE | render-platform --secrets DIR/secrets.json
//! ```
//!
//! With `--out-dir` it writes `DIR/<component>.json` for each component that has a rendered
//! layer (a Helm release's values, the objects of an `objects` or `namespaces` component, the
//! [`secrets::SecretsTemplate`] of a `secrets` one), `DIR/status.env`, the names
//! `make cluster-status` shares with the render, then `DIR/components.tsv`, one line per
//! component in install order ([`profile::plan_text`]; the chart pins of `k8s/versions.env`,
//! compiled in). `--print-names` renders the same, writes nothing, and prints `status.env`. `--secrets` is the apply-time step: the decrypted SOPS document on stdin, the
//! Secrets on stdout.

mod cli;
mod edge;
mod error;
pub mod etcd_backup;
pub mod host_firewall;
pub mod onprem;
pub mod profile;
mod run;
pub mod secrets;
pub mod stale_rules;

use std::io;
use std::path::Path;

use clap::ValueEnum;
use pop_common::input::InputError;
use pop_common::pins::Pins;
use serde_json::{Value, json};

pub use cli::{Cli, Config, Target, resolve};
pub use edge::{
    CertManagerConfig, CiliumConfig, EDGE_COMPONENTS, HubbleConfig, PlatformConfig,
    WireGuardConfig, check, load, render,
};
pub use error::Error;
pub use host_firewall::addresses;
pub use run::{run, run_with};

use profile::{ChartCrds, Component, Kind, PlanLine};

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
        // Its operator registers them; no release holds them.
        crds_from: ChartCrds::Elsewhere,
        uninstalling: Some(
            "Cilium is the cluster's CNI: until another runs, no new pod gets a network and the \
             nodes go NotReady",
        ),
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
            // Templates, which values/cert-manager.yaml's crds.keep annotates to stay.
            crds_from: ChartCrds::Elsewhere,
            uninstalling: None,
        },
        depends_on,
    }
}

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

    /// The profile's components this config installs: the etcd backup only when configured.
    pub fn components(&self) -> Vec<Component> {
        self.profile()
            .components()
            .iter()
            .filter(|c| match self {
                ClusterConfig::Edge(platform) => {
                    c.name != etcd_backup::NAME || platform.etcd_backup.is_some()
                }
                ClusterConfig::Onprem(_) => true,
            })
            .copied()
            .collect()
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
        (Kind::Helm { .. }, ClusterConfig::Onprem(config)) => Some(
            onprem::values_with_secrets(config, config_path, component.name, pins)?
                .ok_or_else(missing)?,
        ),
        (Kind::Objects { .. } | Kind::Namespaces, ClusterConfig::Onprem(config)) => {
            let items = onprem::objects(config, component.name, pins)?.ok_or_else(missing)?;
            Some(json!({"apiVersion": "v1", "kind": "List", "items": items}))
        }
        (Kind::Secrets, ClusterConfig::Onprem(config)) => {
            let template = onprem::secrets_template(config, config_path);
            secrets::check_encrypted(&template.source, &template)
                .map_err(onprem::how_to_make_the_secrets_file)?;
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
                Kind::Objects {
                    from_environment, ..
                } => {
                    line.list = from_environment.iter().map(|r| (*r).to_owned()).collect();
                }
                Kind::Namespaces | Kind::Talos => {}
            }
            Ok(line)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    use clap::Parser;
    use pop_common::exit::{Exit, Report};
    use pop_common::tool::Env;
    use profile::PLAN_FILE;
    use std::path::PathBuf;

    fn example() -> PlatformConfig {
        load(&example_path()).unwrap()
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
            published: None,
            cluster: None,
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

    /// The plan the example renders: each component in install order with its pins.
    fn plan_rows() -> Vec<[&'static str; 7]> {
        let pin = |key: &str| PINS.get(key).unwrap();
        vec![
            [
                "cilium",
                "helm",
                "kube-system",
                "cilium",
                pin("CILIUM_CHART_REPO"),
                pin("CILIUM_VERSION"),
                "values/cilium.yaml",
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
                "-",
            ],
            [
                "cert-manager",
                "helm",
                "cert-manager",
                "cert-manager",
                pin("CERT_MANAGER_CHART_REPO"),
                pin("CERT_MANAGER_VERSION"),
                "values/cert-manager.yaml",
            ],
            [
                "istio-base",
                "helm",
                "istio-system",
                "base",
                pin("ISTIO_CHART_REPO"),
                pin("ISTIO_VERSION"),
                "values/istio-base.yaml",
            ],
            [
                "istiod",
                "helm",
                "istio-system",
                "istiod",
                pin("ISTIO_CHART_REPO"),
                pin("ISTIO_VERSION"),
                "values/istiod.yaml",
            ],
        ]
    }

    #[test]
    fn the_out_dir_holds_every_component_and_the_plan_in_install_order_with_the_pins() {
        let dir = tempfile::tempdir().unwrap();
        let out = render_example_into(dir.path());
        let list = std::fs::read_to_string(out.join(PLAN_FILE)).unwrap();
        let rows: Vec<Vec<&str>> = list
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split('\t').take(7).collect())
            .collect();
        assert_eq!(rows, plan_rows());
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
                STATUS_FILE,
                TALOS_FIREWALL_LIST,
                TALOS_FIREWALL_FILE,
            ],
            "no temporary file is left"
        );
    }

    /// `make cluster-status` finds the edge nodes by the label the Talos patch sets and the
    /// gateway's placement selects: status.env hands it on from its one declaration.
    #[test]
    fn the_edge_status_names_carry_the_edge_node_label_as_a_selector() {
        let dir = tempfile::tempdir().unwrap();
        let out = render_example_into(dir.path());
        let names = std::fs::read_to_string(out.join(STATUS_FILE)).unwrap();
        let (key, value) = pop_common::records::EDGE_NODE_LABEL;
        assert_eq!(names, format!("EDGE_NODE_LABEL={key}={value}\n"));
    }

    /// The edge example rendered with `--out-dir` into `dir/rendered`, which it returns.
    fn render_example_into(dir: &Path) -> PathBuf {
        let out = dir.join("rendered");
        run(
            &render_config(Target::Dir(out.clone())),
            std::io::empty(),
            Vec::new(),
        )
        .unwrap();
        out
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
                published: None,
                cluster: None,
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

    /// The onprem example config, its SOPS file the committed test-only fixture.
    fn onprem_config(dir: &Path, secrets: &Path) -> PathBuf {
        let example =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/onprem.example.json");
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
        config["secrets"] = json!(secrets);
        let path = dir.join("onprem.json");
        std::fs::write(&path, config.to_string()).unwrap();
        path
    }

    fn fixture_sops() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/sops/onprem.secrets.sops.yaml")
    }

    #[test]
    fn print_names_checks_every_component_and_prints_the_names_writing_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::Render {
            profile: Profile::Onprem,
            config: onprem_config(dir.path(), &fixture_sops()),
            target: Target::Names,
            inputs: None,
            published: None,
            cluster: None,
        };
        let mut out = Vec::new();
        run(&config, std::io::empty(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for want in [
            "CLUSTER_ENDPOINT=https://api.demo.k8s.exemple.fr:6443".to_owned(),
            format!("SECRETS_FILE={}", fixture_sops().display()),
            "SECRETS_RECIPIENTS=age1nuhnt27e8q0ssp9qweqsy9tzfwccccv0g5p64agdm9ulng729q7q5tnw97"
                .to_owned(),
        ] {
            assert!(lines.contains(&want.as_str()), "{want} not in:\n{text}");
        }
        assert_eq!(testkit::file_names(dir.path()), ["onprem.json"]);

        // The edge profile prints none: its names come with --out-dir, beside its host firewall.
        let cli = Cli::try_parse_from(["render-platform", "--config", "p.json", "--print-names"])
            .unwrap();
        let err = resolve(cli, &Env::default()).unwrap_err();
        assert!(matches!(err, Error::NoNames("edge")), "{err}");
        assert_eq!(err.exit(), Exit::Usage);
    }

    /// `make CLUSTER=<name>` renders clusters/<name>/onprem.json into a folder of that name:
    /// a config of another cluster is refused before anything is written.
    #[test]
    fn a_config_of_another_cluster_than_asked_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("rendered");
        let render = |cluster: &str| {
            let config = Config::Render {
                profile: Profile::Onprem,
                config: onprem_config(dir.path(), &fixture_sops()),
                target: Target::Dir(out.clone()),
                inputs: None,
                published: None,
                cluster: Some(cluster.to_owned()),
            };
            run(&config, std::io::empty(), Vec::new())
        };
        let err = render("prod").unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        let text = err.to_string();
        assert!(
            text.contains("onprem.json")
                && text.contains("cluster_name")
                && text.contains("`demo` is not `prod`"),
            "{text}"
        );
        assert!(!out.exists(), "something was written");
        render("demo").unwrap();
        assert!(out.join(PLAN_FILE).is_file());

        let cli = Cli::try_parse_from([
            "render-platform",
            "--config",
            "p.json",
            "--cluster",
            "demo",
            "cilium",
        ])
        .unwrap();
        let err = resolve(cli, &Env::default()).unwrap_err();
        assert!(matches!(err, Error::NoCluster), "{err}");
        assert_eq!(err.exit(), Exit::Usage);
    }

    #[test]
    fn a_missing_sops_file_points_at_the_shipped_example_and_the_sops_command() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("onprem.secrets.sops.yaml");
        let config = Config::Render {
            profile: Profile::Onprem,
            config: onprem_config(dir.path(), &missing),
            target: Target::Names,
            inputs: None,
            published: None,
            cluster: None,
        };
        let err = run(&config, std::io::empty(), Vec::new()).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        let text = err.to_string();
        testkit::process::assert_says_all(
            &text,
            &[
                missing.to_str().unwrap(),
                "cannot read",
                onprem::SECRETS_EXAMPLE,
                "sops --encrypt --age",
            ],
        );
        assert!(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(onprem::SECRETS_EXAMPLE)
                .is_file(),
            "the example the error names is shipped"
        );
    }
}
