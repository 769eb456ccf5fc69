//! The `onprem` profile: the base of an existing Talos cluster on premises, behind a router that
//! forwards the public address to a load-balancer address announced on the local network.
//!
//! Cilium (LB IPAM and L2 announcements), ceph-csi-rbd with the snapshot controller, Traefik,
//! CrowdSec and its Traefik bouncer, cert-manager with an HTTP-01 ClusterIssuer through Traefik,
//! external-dns on OVH, and a small app whose Ingress proves the chain. Every address, name and
//! secret reference is declared once in the cluster's config and rendered into each place that
//! uses it: the pool and the Traefik Service's address, the Ceph cluster id in the CSI config,
//! the StorageClass and the VolumeSnapshotClass, the Secrets and the values that name them.

mod config;
mod objects;
mod values;

use std::path::{Path, PathBuf};

use pop_common::input::InputError;
use serde_json::{Value, json};

use crate::CLUSTER_ISSUER_CRD;
use crate::profile::{ChartCrds, Component, Kind};
use crate::secrets::{self, SecretSpec, SecretsTemplate, Source};

pub use config::{
    CephConfig, DnsConfig, IngressConfig, LoadBalancerConfig, OnpremConfig, SmokeTestConfig, check,
    check_is_cluster, load,
};
pub use objects::objects;
pub use values::values;

/// The profile's components, in install order: no storage before the network, no certificate
/// before the ingress.
pub const COMPONENTS: &[Component] = &[
    Component {
        name: "namespaces",
        namespace: None,
        kind: Kind::Namespaces,
        depends_on: &[],
    },
    Component {
        name: "secrets",
        namespace: None,
        kind: Kind::Secrets,
        depends_on: &["namespaces"],
    },
    crate::CILIUM,
    Component {
        name: "load-balancer",
        namespace: None,
        kind: Kind::Objects {
            needs: &[POOL_CRD, L2_CRD],
            ready: None,
            from_environment: &[],
        },
        depends_on: &["cilium"],
    },
    Component {
        name: "snapshot-controller",
        namespace: Some("kube-system"),
        kind: Kind::Helm {
            chart: "snapshot-controller",
            repo_pin: "SNAPSHOT_CONTROLLER_CHART_REPO",
            version_pin: "SNAPSHOT_CONTROLLER_VERSION",
            values: &["values/snapshot-controller.yaml"],
            crds: &[
                SNAPSHOT_CLASS_CRD,
                "volumesnapshots.snapshot.storage.k8s.io",
                "volumesnapshotcontents.snapshot.storage.k8s.io",
                // external-snapshotter v8.6.0's group snapshots, a group of their own.
                "volumegroupsnapshots.groupsnapshot.storage.k8s.io",
            ],
            crds_from: ChartCrds::Templates,
            uninstalling: None,
        },
        depends_on: &["cilium"],
    },
    Component {
        name: "ceph-csi-rbd",
        namespace: Some(CEPH_NAMESPACE),
        kind: Kind::Helm {
            chart: "ceph-csi-rbd",
            repo_pin: "CEPH_CSI_CHART_REPO",
            version_pin: "CEPH_CSI_RBD_VERSION",
            values: &["values/ceph-csi-rbd.yaml"],
            crds: &[],
            crds_from: ChartCrds::Elsewhere,
            uninstalling: Some(
                "its StorageClass ceph-rbd and its CSI driver: no volume of ceph-rbd, whoever's, \
                 is made, attached or detached until it is back",
            ),
        },
        // Its csi-snapshotter sidecar watches the snapshot CRDs.
        depends_on: &["cilium", "secrets", "snapshot-controller"],
    },
    Component {
        name: "backup-snapshots",
        namespace: None,
        kind: Kind::Objects {
            needs: &[SNAPSHOT_CLASS_CRD],
            ready: None,
            from_environment: &[],
        },
        depends_on: &["snapshot-controller", "ceph-csi-rbd"],
    },
    Component {
        name: "traefik",
        namespace: Some(TRAEFIK_NAMESPACE),
        kind: Kind::Helm {
            chart: "traefik",
            repo_pin: "TRAEFIK_CHART_REPO",
            version_pin: "TRAEFIK_VERSION",
            values: &["values/traefik.yaml"],
            // Its crds/ folder holds Traefik's own and Traefik Hub's, two groups.
            crds: &[MIDDLEWARE_CRD, "apis.hub.traefik.io"],
            crds_from: ChartCrds::Folder,
            uninstalling: None,
        },
        // Its Service takes its address from the pool; its pods mount the bouncer's key.
        depends_on: &["load-balancer", "secrets"],
    },
    Component {
        name: "crowdsec",
        namespace: Some(CROWDSEC_NAMESPACE),
        kind: Kind::Helm {
            chart: "crowdsec",
            repo_pin: "CROWDSEC_CHART_REPO",
            version_pin: "CROWDSEC_VERSION",
            values: &["values/crowdsec.yaml"],
            crds: &[],
            crds_from: ChartCrds::Elsewhere,
            uninstalling: None,
        },
        // The LAPI's database and config are volume claims on the default StorageClass; the
        // agent reads Traefik's access logs.
        depends_on: &["ceph-csi-rbd", "secrets", "traefik"],
    },
    Component {
        name: "crowdsec-bouncer",
        namespace: Some(TRAEFIK_NAMESPACE),
        kind: Kind::Objects {
            needs: &[MIDDLEWARE_CRD],
            ready: None,
            from_environment: &[],
        },
        depends_on: &["traefik", "crowdsec"],
    },
    crate::cert_manager(&["cilium"]),
    Component {
        name: "letsencrypt",
        namespace: None,
        kind: Kind::Objects {
            needs: &[CLUSTER_ISSUER_CRD],
            ready: None,
            from_environment: &[],
        },
        // HTTP-01 is answered through Traefik.
        depends_on: &["cert-manager", "traefik"],
    },
    Component {
        name: "external-dns",
        namespace: Some(EXTERNAL_DNS_NAMESPACE),
        kind: Kind::Helm {
            chart: "external-dns",
            repo_pin: "EXTERNAL_DNS_CHART_REPO",
            version_pin: "EXTERNAL_DNS_VERSION",
            values: &["values/external-dns.yaml"],
            crds: &[],
            crds_from: ChartCrds::Elsewhere,
            uninstalling: None,
        },
        // It publishes the address Traefik writes into the Ingresses' status.
        depends_on: &["traefik", "secrets"],
    },
    Component {
        name: "smoke-test",
        namespace: Some(SMOKE_NAMESPACE),
        kind: Kind::Objects {
            needs: &[],
            ready: Some("deployment/whoami"),
            from_environment: &[],
        },
        depends_on: &["letsencrypt", "external-dns", "crowdsec-bouncer"],
    },
];

const POOL_CRD: &str = "ciliumloadbalancerippools.cilium.io";
const L2_CRD: &str = "ciliuml2announcementpolicies.cilium.io";
const SNAPSHOT_CLASS_CRD: &str = "volumesnapshotclasses.snapshot.storage.k8s.io";
const MIDDLEWARE_CRD: &str = "middlewares.traefik.io";

const CEPH_NAMESPACE: &str = "ceph-csi-rbd";
const TRAEFIK_NAMESPACE: &str = "traefik";
const CROWDSEC_NAMESPACE: &str = "crowdsec";
const EXTERNAL_DNS_NAMESPACE: &str = "external-dns";
const SMOKE_NAMESPACE: &str = "smoke-test";

/// The StorageClass ceph-csi-rbd creates, the cluster's default.
pub const STORAGE_CLASS: &str = "ceph-rbd";
/// The Secret ceph-csi reads the Ceph user from (the chart's `secret.name`, which its
/// StorageClass and our VolumeSnapshotClass name).
const CEPH_SECRET: &str = "csi-rbd-secret";
/// ceph-csi-rbd's CSI driver (the chart's `driverName`).
const CEPH_DRIVER: &str = "rbd.csi.ceph.com";
/// The Secret holding OVH's API credentials, in external-dns's namespace.
const OVH_SECRET: &str = "ovh-credentials";
/// The bouncer's LAPI key, one Secret in CrowdSec's namespace (the LAPI registers it) and one in
/// Traefik's (the plugin reads it from a file).
const BOUNCER_SECRET: &str = "crowdsec-bouncer-key";
const BOUNCER_SECRET_KEY: &str = "api-key";
/// The prefix of the bouncer's name in CrowdSec: the LAPI registers `BOUNCER_KEY_<name>` under
/// `<name>` (crowdsec docker/docker_start.sh, "Register bouncers via env").
pub const BOUNCER_PREFIX: &str = "traefik";
/// Where the Traefik chart mounts the key's Secret (its `volumes` entry: `/<mountPath>/<key>`).
const BOUNCER_KEY_DIR: &str = "/etc/traefik/crowdsec";
/// The Traefik plugin's name in `experimental.plugins` and the Middleware's `spec.plugin`.
const BOUNCER_PLUGIN: &str = "crowdsec-bouncer";
/// How many failed pulls of decisions the bouncer tolerates before refusing every request: -1,
/// never (it fails open; docs/onprem.md says why).
const BOUNCER_UPDATE_MAX_FAILURE: i64 = -1;
/// The Middleware on Traefik's entry points: `<namespace>-<name>@kubernetescrd`.
const BOUNCER_MIDDLEWARE: &str = "crowdsec";
/// The LAPI's Service in CrowdSec's chart (`<release>-service`) and its port (`lapiPort`).
const LAPI_SERVICE: &str = "crowdsec-service";
const LAPI_PORT: u16 = 8080;
/// The ACME ClusterIssuer, named as the seed names it whatever `acme.server` says: switching
/// from staging to production changes its server, not the name Ingresses give.
const CLUSTER_ISSUER: &str = "letsencrypt";
/// The release names the chart-made objects derive from (Traefik's Service and IngressClass).
const TRAEFIK: &str = "traefik";

/// The bouncer's name in CrowdSec, `traefik_<digest of its encrypted key>`, and so a new name for
/// a new key. The chart's LAPI registers `BOUNCER_KEY_<name>` only when no bouncer has that name
/// yet, in a database kept on a volume (crowdsecurity/helm-charts crowdsec-0.24.0,
/// charts/crowdsec/files/docker-start-custom.sh, lines 94-103 and 308-314): under a fixed name a
/// rotated key never reached it. The digest is of the committed ciphertext, readable at render
/// time without the age key; SOPS writes every value with a fresh IV, so a new key always changes
/// it (re-encrypting the file may change it too: the same key under a new name, harmless).
pub fn bouncer_name(config: &OnpremConfig, config_path: &Path) -> Result<String, InputError> {
    use sha2::{Digest as _, Sha256};
    let file = secrets_file(config, config_path);
    let encrypted = secrets::encrypted_value(&file, BOUNCER_KEY_SOPS)?;
    let digest = Sha256::digest(encrypted.as_bytes());
    let short: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{BOUNCER_PREFIX}_{short}"))
}

/// The path of the bouncer's key in the SOPS file.
const BOUNCER_KEY_SOPS: &str = "crowdsec.bouncer_key";

/// A Helm component's values ([`values`]) with what depends on the SOPS file: the LAPI registers
/// the bouncer under [`bouncer_name`] (a new name rolls the LAPI), and Traefik's pods carry it
/// (a new key rolls Traefik, which reads the key's file once, when it builds the Middleware).
pub fn values_with_secrets(
    config: &OnpremConfig,
    config_path: &Path,
    component: &str,
    pins: &pop_common::pins::Pins,
) -> Result<Option<Value>, InputError> {
    let Some(mut values) = values(config, component, pins)? else {
        return Ok(None);
    };
    match component {
        "crowdsec" => {
            values["lapi"]["env"] = json!([values::env_from_secret(
                &format!("BOUNCER_KEY_{}", bouncer_name(config, config_path)?),
                BOUNCER_SECRET,
                BOUNCER_SECRET_KEY,
            )]);
        }
        "traefik" => {
            values["deployment"]["podAnnotations"] =
                json!({BOUNCER_ANNOTATION: bouncer_name(config, config_path)?});
        }
        _ => {}
    }
    Ok(Some(values))
}

/// The annotation of Traefik's pods naming the bouncer whose key they read.
const BOUNCER_ANNOTATION: &str = "edgepop.io/crowdsec-bouncer";

/// The labels on every object this profile renders.
pub fn labels(component: &str) -> Value {
    json!({
        "app.kubernetes.io/part-of": "edgepop",
        "app.kubernetes.io/managed-by": "render-platform",
        "app.kubernetes.io/component": component,
    })
}

/// The SOPS file, relative to the config's folder.
pub fn secrets_file(config: &OnpremConfig, config_path: &Path) -> PathBuf {
    let dir = config_path.parent().unwrap_or(Path::new(""));
    dir.join(&config.secrets)
}

/// The shipped example of the SOPS file's clear shape (fake values).
pub const SECRETS_EXAMPLE: &str = "config/onprem.secrets.example.yaml";

/// A SOPS file that cannot be read, its error told where its shape is and how to encrypt it.
pub fn how_to_make_the_secrets_file(err: InputError) -> InputError {
    match err {
        InputError::Read { path, source } => {
            let how = format!(
                "{source}; write the cluster's values in the shape of {SECRETS_EXAMPLE}, then \
                 encrypt them to the cluster's age key: sops --encrypt --age <its public key> \
                 --output {} <that file> (and remove the clear file)",
                path.display()
            );
            InputError::Read {
                source: std::io::Error::new(source.kind(), how),
                path,
            }
        }
        other => other,
    }
}

/// Which value of the SOPS file goes into which Secret.
pub fn secrets_template(config: &OnpremConfig, config_path: &Path) -> SecretsTemplate {
    let sops = |path: &str| Source::Sops(path.to_owned());
    let bouncer = |namespace: &str| SecretSpec {
        namespace: namespace.to_owned(),
        name: BOUNCER_SECRET.to_owned(),
        data: [(BOUNCER_SECRET_KEY.to_owned(), sops(BOUNCER_KEY_SOPS))].into(),
    };
    SecretsTemplate::new(
        secrets_file(config, config_path),
        vec![
            SecretSpec {
                namespace: CEPH_NAMESPACE.to_owned(),
                name: CEPH_SECRET.to_owned(),
                // The keys ceph-csi reads (the chart's `secret.userID`, `secret.userKey`).
                data: [
                    ("userID".to_owned(), Source::Value(config.ceph.user.clone())),
                    ("userKey".to_owned(), sops("ceph.user_key")),
                ]
                .into(),
            },
            SecretSpec {
                namespace: EXTERNAL_DNS_NAMESPACE.to_owned(),
                name: OVH_SECRET.to_owned(),
                data: [
                    ("application_key".to_owned(), sops("ovh.application_key")),
                    (
                        "application_secret".to_owned(),
                        sops("ovh.application_secret"),
                    ),
                    ("consumer_key".to_owned(), sops("ovh.consumer_key")),
                ]
                .into(),
            },
            bouncer(CROWDSEC_NAMESPACE),
            bouncer(TRAEFIK_NAMESPACE),
        ],
    )
}

/// The names `make check` and `make cluster-status PROFILE=onprem` share with the render, one
/// `KEY=value` a line (read, never sourced: the SOPS file's path may hold any character but a
/// newline). `SECRETS_RECIPIENTS`: the age recipients the SOPS file is encrypted to,
/// comma-separated.
pub fn status_names(config: &OnpremConfig, config_path: &Path) -> Result<String, InputError> {
    let secrets_file = secrets_file(config, config_path);
    let recipients = secrets::age_recipients(&secrets_file)?;
    let pairs = [
        ("CLUSTER_NAME", config.cluster_name.clone()),
        ("CLUSTER_ENDPOINT", config.cluster_endpoint.clone()),
        ("SECRETS_FILE", secrets_file.display().to_string()),
        ("SECRETS_RECIPIENTS", recipients.join(",")),
        ("STORAGE_CLASS", STORAGE_CLASS.to_owned()),
        ("CEPH_NAMESPACE", CEPH_NAMESPACE.to_owned()),
        ("TRAEFIK_NAMESPACE", TRAEFIK_NAMESPACE.to_owned()),
        ("TRAEFIK_SERVICE", TRAEFIK.to_owned()),
        ("INGRESS_ADDRESS", config.ingress.address.to_string()),
        ("PUBLIC_ADDRESS", config.ingress.public_address.to_string()),
        ("LB_POOL", objects::ingress_pool_name(config)),
        ("CROWDSEC_NAMESPACE", CROWDSEC_NAMESPACE.to_owned()),
        ("LAPI_DEPLOYMENT", "crowdsec-lapi".to_owned()),
        ("BOUNCER_NAME", bouncer_name(config, config_path)?),
        ("BOUNCER_PREFIX", BOUNCER_PREFIX.to_owned()),
        ("SMOKE_NAMESPACE", SMOKE_NAMESPACE.to_owned()),
        ("SMOKE_HOST", config.smoke_test.host.clone()),
        ("ACME_SERVER", config.acme.server.word().to_owned()),
    ];
    Ok(pairs.iter().map(|(k, v)| format!("{k}={v}\n")).collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use config::example;
    use pop_common::acme::AcmeServer;
    use pop_common::pins::Pins;

    #[test]
    fn the_seeds_lessons_are_in_the_rendered_values() {
        let config = example();
        let pins = crate::PINS;
        let traefik = values(&config, "traefik", &pins).unwrap().unwrap();
        assert_eq!(
            traefik["providers"]["kubernetesIngress"]["ingressEndpoint"]["ip"],
            "203.0.113.47"
        );
        assert_eq!(
            traefik["providers"]["kubernetesIngress"]["publishedService"]["enabled"],
            false
        );
        let entry_points = &traefik["ports"];
        for port in ["web", "websecure"] {
            assert_eq!(
                entry_points[port]["http"]["middlewares"][0],
                "traefik-crowdsec@kubernetescrd"
            );
        }
        let dns = values(&config, "external-dns", &pins).unwrap().unwrap();
        assert_eq!(dns["txtOwnerId"], "demo");
        assert_eq!(
            dns["extraArgs"][1],
            r"--regex-domain-filter=^(exemple\.fr|(.+\.)?k8s\.exemple\.fr)$"
        );
        let issuer = &objects(&config, "letsencrypt", &pins).unwrap().unwrap()[0];
        assert_eq!(
            issuer["spec"]["acme"]["server"],
            "https://acme-staging-v02.api.letsencrypt.org/directory"
        );
        assert_eq!(
            issuer["spec"]["acme"]["solvers"][0]["http01"]["ingress"]["ingressClassName"],
            "traefik"
        );
        // The bouncer's Middleware reads its key from the file Traefik mounts.
        let bouncer = &objects(&config, "crowdsec-bouncer", &pins)
            .unwrap()
            .unwrap()[0];
        let plugin = &bouncer["spec"]["plugin"][BOUNCER_PLUGIN];
        assert_eq!(
            plugin["crowdsecLapiKeyFile"],
            format!(
                "{}/{}",
                traefik["volumes"][0]["mountPath"].as_str().unwrap(),
                BOUNCER_SECRET_KEY
            )
        );
        assert!(
            plugin.get("crowdsecLapiKey").is_none(),
            "never the key itself"
        );
    }

    /// A filter of the sub-domain alone drops its parent zone at OVH: the zone is filtered in by
    /// name, the domain's names with it; a domain that is its own zone keeps the plain filter.
    #[test]
    fn external_dns_keeps_the_zone_that_holds_the_domain() {
        let pins = crate::PINS;
        let dns = values(&example(), "external-dns", &pins).unwrap().unwrap();
        assert!(dns.get("domainFilters").is_none(), "{dns}");
        assert_eq!(
            dns["extraArgs"],
            json!([
                "--ovh-endpoint=ovh-eu",
                r"--regex-domain-filter=^(exemple\.fr|(.+\.)?k8s\.exemple\.fr)$"
            ])
        );
        let mut delegated = example();
        delegated.dns.zone = Some(delegated.dns.domain.clone());
        let dns = values(&delegated, "external-dns", &pins).unwrap().unwrap();
        assert_eq!(dns["domainFilters"], json!(["k8s.exemple.fr"]));
        assert_eq!(dns["extraArgs"], json!(["--ovh-endpoint=ovh-eu"]));
    }

    /// A plugin that fails to load (plugins.traefik.io down, no egress, an archive that fails
    /// its check) must stop the new Traefik, so that helm --atomic keeps the running ones: left
    /// to the chart's default, Traefik starts without it, passes its readiness probe, and every
    /// router using the entry points' Middleware answers 404.
    #[test]
    fn a_bouncer_plugin_that_does_not_load_fails_the_rollout() {
        let traefik = values(&example(), "traefik", &crate::PINS)
            .unwrap()
            .unwrap();
        let experimental = &traefik["experimental"];
        assert_eq!(experimental["abortOnPluginFailure"], true, "{experimental}");
        assert_eq!(
            experimental["plugins"][BOUNCER_PLUGIN]["version"],
            crate::PINS.get("CROWDSEC_BOUNCER_PLUGIN_VERSION").unwrap()
        );
    }

    /// The seed's ClusterIssuer is `letsencrypt`, whatever the server: Ingresses written against
    /// it (and the smoke test's) keep their certificate when staging becomes production, and an
    /// Ingress that only asks for TLS (`kubernetes.io/tls-acme`) gets it from that issuer.
    #[test]
    fn the_issuer_is_the_seeds_letsencrypt_for_either_server() {
        for server in [AcmeServer::Staging, AcmeServer::Production] {
            let mut config = example();
            config.acme.server = server;
            let issuer = &objects(&config, "letsencrypt", &crate::PINS)
                .unwrap()
                .unwrap()[0];
            assert_eq!(issuer["metadata"]["name"], "letsencrypt");
            assert_eq!(
                issuer["spec"]["acme"]["privateKeySecretRef"]["name"],
                "letsencrypt-account"
            );
            assert_eq!(issuer["spec"]["acme"]["server"], server.directory());
            let smoke = objects(&config, "smoke-test", &crate::PINS)
                .unwrap()
                .unwrap();
            let ingress = smoke.iter().find(|o| o["kind"] == "Ingress").unwrap();
            assert_eq!(
                ingress["metadata"]["annotations"]["cert-manager.io/cluster-issuer"],
                "letsencrypt"
            );
            let cert_manager = values(&config, "cert-manager", &crate::PINS)
                .unwrap()
                .unwrap();
            assert_eq!(
                cert_manager["ingressShim"],
                json!({"defaultIssuerName": "letsencrypt", "defaultIssuerKind": "ClusterIssuer"})
            );
        }
    }

    /// Traefik's Service keeps `externalTrafficPolicy: Local` behind an L2-announced address:
    /// Cilium before its fix (cilium/cilium#46399) announces it from any node, most likely one
    /// without Traefik, where the traffic is dropped. A Cilium pin below the floor is refused.
    #[test]
    fn a_cilium_pin_below_the_l2_local_policy_floor_is_refused_naming_it() {
        let floor = crate::PINS.get("CILIUM_L2_LOCAL_MIN_VERSION").unwrap();
        let pins_with = |version: &str| {
            format!("CILIUM_VERSION={version}\nCILIUM_L2_LOCAL_MIN_VERSION={floor}\n")
        };
        for old in ["1.20.1", "1.19.9", "1.9.30"] {
            let text = pins_with(old);
            let err = values(&example(), "cilium", &Pins::new(&text))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("CILIUM_VERSION") && err.contains(floor) && err.contains(old),
                "{err}"
            );
        }
        for new in [floor, "1.20.3", "1.21.0", "2.0.0"] {
            let text = pins_with(new);
            values(&example(), "cilium", &Pins::new(&text)).unwrap();
        }
        values(&example(), "cilium", &crate::PINS).unwrap();
    }

    /// Traefik's address is a pool of its own, for its Service alone; the rest of the range
    /// another, leaving it out (pools must not overlap); the announcement on the interfaces
    /// named, or all.
    #[test]
    fn traefik_s_address_is_a_pool_of_its_own_and_the_rest_of_the_range_another() {
        let blocks = |objects: &[Value], name: &str| {
            let pool = objects
                .iter()
                .find(|o| o["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("no {name}"));
            pool["spec"]["blocks"].clone()
        };
        let mut config = example();
        config.ingress.address = "10.20.1.120".parse().unwrap();
        let rendered = objects(&config, "load-balancer", &crate::PINS)
            .unwrap()
            .unwrap();
        assert_eq!(
            blocks(&rendered, "demo-pool"),
            json!([
                {"start": "10.20.1.100", "stop": "10.20.1.119"},
                {"start": "10.20.1.121", "stop": "10.20.1.150"},
            ])
        );
        let ingress = rendered
            .iter()
            .find(|o| o["metadata"]["name"] == "demo-ingress")
            .unwrap();
        assert_eq!(
            ingress["spec"],
            json!({
                "blocks": [{"start": "10.20.1.120", "stop": "10.20.1.120"}],
                "serviceSelector": {"matchLabels": {
                    "io.kubernetes.service.namespace": "traefik",
                    "io.kubernetes.service.name": "traefik",
                }},
            })
        );
        let policy = rendered.last().unwrap();
        assert!(policy["spec"].get("interfaces").is_none(), "{policy}");

        // The address at an end of the range, or the whole range.
        config.ingress.address = "10.20.1.100".parse().unwrap();
        config.load_balancer.interfaces = Some(vec!["^eth0$".into()]);
        let rendered = objects(&config, "load-balancer", &crate::PINS)
            .unwrap()
            .unwrap();
        assert_eq!(
            blocks(&rendered, "demo-pool"),
            json!([{"start": "10.20.1.101", "stop": "10.20.1.150"}])
        );
        assert_eq!(
            rendered.last().unwrap()["spec"]["interfaces"],
            json!(["^eth0$"])
        );
        config.load_balancer.last = "10.20.1.100".parse().unwrap();
        let rendered = objects(&config, "load-balancer", &crate::PINS)
            .unwrap()
            .unwrap();
        let pools: Vec<&Value> = rendered.iter().map(|o| &o["metadata"]["name"]).collect();
        assert_eq!(pools, ["demo-ingress", "demo-l2"]);
    }

    /// Each ceph-csi provisioner needs a worker of its own: never more than the workers, never
    /// more than the chart's three.
    #[test]
    fn there_are_no_more_ceph_provisioners_than_workers() {
        for (workers, provisioners) in [(1, 1), (2, 2), (3, 3), (5, 3)] {
            let mut config = example();
            config.workers = workers;
            let ceph = values(&config, "ceph-csi-rbd", &crate::PINS)
                .unwrap()
                .unwrap();
            assert_eq!(
                ceph["provisioner"]["replicaCount"], provisioners,
                "{workers} workers"
            );
        }
    }

    /// The LAPI's volume claims stay when its release goes (make destroy-platform keeps the
    /// namespaces for them), and with them the bouncers it registered.
    #[test]
    fn the_lapi_s_volume_claims_outlive_its_release() {
        let crowdsec = values(&example(), "crowdsec", &crate::PINS)
            .unwrap()
            .unwrap();
        for volume in ["data", "config"] {
            assert_eq!(
                crowdsec["lapi"]["persistentVolume"][volume]["annotations"],
                json!({"helm.sh/resource-policy": "keep"}),
                "{volume}"
            );
        }
    }

    #[test]
    fn a_missing_pin_is_refused_naming_it() {
        let pins = Pins::new("CILIUM_VERSION=1.20.3\n");
        let err = values(&example(), "traefik", &pins)
            .unwrap_err()
            .to_string();
        assert!(err.contains("CROWDSEC_BOUNCER_PLUGIN_VERSION"), "{err}");
        let err = objects(&example(), "smoke-test", &pins)
            .unwrap_err()
            .to_string();
        assert!(err.contains("SMOKE_TEST_IMAGE"), "{err}");
    }
}
