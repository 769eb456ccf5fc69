//! The `onprem` profile: the base of an existing Talos cluster on premises, behind a router that
//! forwards the public address to a load-balancer address announced on the local network.
//!
//! Cilium (LB IPAM and L2 announcements), ceph-csi-rbd with the snapshot controller, Traefik,
//! CrowdSec and its Traefik bouncer, cert-manager with an HTTP-01 ClusterIssuer through Traefik,
//! external-dns on OVH, and a small app whose Ingress proves the chain. Every address, name and
//! secret reference is declared once in the cluster's config and rendered into each place that
//! uses it: the pool and the Traefik Service's address, the Ceph cluster id in the CSI config,
//! the StorageClass and the VolumeSnapshotClass, the Secrets and the values that name them.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use pop_common::acme::{AcmeConfig, AcmeServer};
use pop_common::input::InputError;
use pop_common::pins::Pins;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::CLUSTER_ISSUER_CRD;
use crate::profile::{Component, Kind};
use crate::secrets::{SecretSpec, SecretsTemplate, Source};

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
            crds: &[MIDDLEWARE_CRD],
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
/// The bouncer's name in CrowdSec: the LAPI registers `BOUNCER_KEY_<name>` under `<name>`
/// (crowdsec docker/docker_start.sh, "Register bouncers via env").
pub const BOUNCER_NAME: &str = "traefik";
/// Where the Traefik chart mounts the key's Secret (its `volumes` entry: `/<mountPath>/<key>`).
const BOUNCER_KEY_DIR: &str = "/etc/traefik/crowdsec";
/// The Traefik plugin's name in `experimental.plugins` and the Middleware's `spec.plugin`.
const BOUNCER_PLUGIN: &str = "crowdsec-bouncer";
/// The Middleware on Traefik's entry points: `<namespace>-<name>@kubernetescrd`.
const BOUNCER_MIDDLEWARE: &str = "crowdsec";
/// The LAPI's Service in CrowdSec's chart (`<release>-service`) and its port (`lapiPort`).
const LAPI_SERVICE: &str = "crowdsec-service";
const LAPI_PORT: u16 = 8080;
/// The release names the chart-made objects derive from (Traefik's Service and IngressClass).
const TRAEFIK: &str = "traefik";

/// The cluster's config (`config/onprem.json`; example: `config/onprem.example.json`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnpremConfig {
    /// Names the pool, the L2 policy and external-dns's TXT ownership records.
    pub cluster_name: String,
    /// The cluster's Kubernetes API (`https://host:port`): make acts only on a kubeconfig whose
    /// current context points there (kubeconfig-guard).
    pub cluster_endpoint: String,
    /// The SOPS file of this cluster's secrets, relative to this config's folder.
    pub secrets: PathBuf,
    pub load_balancer: LoadBalancerConfig,
    pub ingress: IngressConfig,
    pub ceph: CephConfig,
    pub dns: DnsConfig,
    #[serde(default)]
    pub acme: AcmeConfig,
    pub smoke_test: SmokeTestConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadBalancerConfig {
    /// The first and last address Cilium may give to LoadBalancer Services, announced in ARP
    /// on the nodes' network.
    pub first: Ipv4Addr,
    pub last: Ipv4Addr,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngressConfig {
    /// Traefik's load-balancer address, inside the pool: where the router forwards 80 and 443.
    pub address: Ipv4Addr,
    /// The public address the router forwards from: what the Ingresses show, and so what
    /// external-dns publishes.
    pub public_address: Ipv4Addr,
    /// One Traefik per worker.
    pub replicas: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CephConfig {
    /// The Ceph cluster's fsid.
    pub cluster_id: String,
    /// `host:port` of each monitor.
    pub monitors: Vec<String>,
    pub pool: String,
    /// The Ceph user, without `client.` (its key is in the SOPS file, `ceph.user_key`).
    pub user: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsConfig {
    /// The zone (or subzone) external-dns may write in.
    pub domain: String,
    /// OVH's API endpoint (external-dns `--ovh-endpoint`).
    #[serde(default = "default_ovh_endpoint")]
    pub ovh_endpoint: String,
}

fn default_ovh_endpoint() -> String {
    "ovh-eu".to_owned()
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmokeTestConfig {
    /// The name, under `dns.domain`, the small app answers on in HTTPS.
    pub host: String,
}

/// Reads and checks the config; every refusal names the file and the field.
pub fn load(path: &Path) -> Result<OnpremConfig, InputError> {
    let config: OnpremConfig = pop_common::input::read_json(path)?;
    check(&config).map_err(|(field, why)| InputError::field(path, field, why))?;
    Ok(config)
}

/// The rules the types cannot say; `Err((field, why))`.
pub fn check(config: &OnpremConfig) -> Result<(), (&'static str, String)> {
    if !pop_common::records::is_dns_label(&config.cluster_name) {
        return Err((
            "cluster_name",
            format!("`{}` is not a lower-case DNS label", config.cluster_name),
        ));
    }
    let api_host = config
        .cluster_endpoint
        .strip_prefix("https://")
        .unwrap_or_default();
    if api_host.is_empty()
        || api_host.starts_with([':', '/'])
        || api_host.contains(char::is_whitespace)
    {
        return Err((
            "cluster_endpoint",
            format!(
                "`{}` is not an https:// URL with a host",
                config.cluster_endpoint
            ),
        ));
    }
    let lb = &config.load_balancer;
    if lb.first > lb.last {
        return Err((
            "load_balancer.last",
            format!("{} comes before load_balancer.first {}", lb.last, lb.first),
        ));
    }
    let ingress = &config.ingress;
    if ingress.address < lb.first || ingress.address > lb.last {
        return Err((
            "ingress.address",
            format!(
                "{} is outside the pool {}-{}: Cilium would never give it",
                ingress.address, lb.first, lb.last
            ),
        ));
    }
    let public = ingress.public_address;
    if public.is_private()
        || public.is_loopback()
        || public.is_link_local()
        || public.is_unspecified()
        || public.is_broadcast()
    {
        return Err((
            "ingress.public_address",
            format!(
                "{public} is not a public address: external-dns would publish names nobody \
                 outside can reach (give the router's public address)"
            ),
        ));
    }
    if ingress.replicas == 0 {
        return Err(("ingress.replicas", "must be at least 1".into()));
    }
    let ceph = &config.ceph;
    // The chart: "cannot be greater than 36 bytes in length" (an fsid is a 36-byte UUID).
    if ceph.cluster_id.is_empty() || ceph.cluster_id.len() > 36 {
        return Err((
            "ceph.cluster_id",
            "must be the Ceph cluster's fsid (1 to 36 bytes)".into(),
        ));
    }
    if ceph.monitors.is_empty() {
        return Err(("ceph.monitors", "needs at least one monitor".into()));
    }
    if let Some(bad) = ceph.monitors.iter().find(|m| !is_host_port(m)) {
        return Err(("ceph.monitors", format!("`{bad}` is not `host:port`")));
    }
    if ceph.pool.is_empty() {
        return Err(("ceph.pool", "must name the RBD pool".into()));
    }
    if ceph.user.is_empty() || ceph.user.starts_with("client.") {
        return Err((
            "ceph.user",
            "must be the user's name without `client.` (ceph-csi adds it)".into(),
        ));
    }
    if !pop_common::records::is_host_name(&config.dns.domain) {
        return Err((
            "dns.domain",
            format!("`{}` is not a DNS name", config.dns.domain),
        ));
    }
    let host = &config.smoke_test.host;
    if !pop_common::records::is_host_name(host)
        || !host.ends_with(&format!(".{}", config.dns.domain))
    {
        return Err((
            "smoke_test.host",
            format!(
                "`{host}` is not a name under dns.domain `{}`: external-dns publishes nothing \
                 outside it",
                config.dns.domain
            ),
        ));
    }
    let email = config
        .acme
        .email
        .as_deref()
        .filter(|e| !e.trim().is_empty());
    if config.acme.server == AcmeServer::Production && email.is_none() {
        return Err((
            "acme.email",
            "required with the production server (expiry and account notices)".into(),
        ));
    }
    Ok(())
}

fn is_host_port(text: &str) -> bool {
    text.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
}

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

/// Which value of the SOPS file goes into which Secret.
pub fn secrets_template(config: &OnpremConfig, config_path: &Path) -> SecretsTemplate {
    let sops = |path: &str| Source::Sops(path.to_owned());
    let bouncer = |namespace: &str| SecretSpec {
        namespace: namespace.to_owned(),
        name: BOUNCER_SECRET.to_owned(),
        data: [(BOUNCER_SECRET_KEY.to_owned(), sops("crowdsec.bouncer_key"))].into(),
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

/// A `secretKeyRef` environment variable.
fn env_from_secret(name: &str, secret: &str, key: &str) -> Value {
    json!({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
}

/// The cluster's values of a Helm component (merged by helm over the committed files).
pub fn values(
    config: &OnpremConfig,
    component: &str,
    pins: &Pins,
) -> Result<Option<Value>, InputError> {
    let values = match component {
        "cilium" => json!({
            // LB IPAM is on by default in 1.20; the announcements are not.
            "l2announcements": {"enabled": true},
            // The host firewall of values/cilium.yaml enforces the edge's declared flows, whose
            // host policies this profile does not have.
            "hostFirewall": {"enabled": false},
        }),
        "snapshot-controller" => json!({}),
        "ceph-csi-rbd" => {
            let ceph = &config.ceph;
            json!({
                "csiConfig": [{"clusterID": ceph.cluster_id, "monitors": ceph.monitors}],
                "storageClass": {
                    "create": true,
                    "name": STORAGE_CLASS,
                    "clusterID": ceph.cluster_id,
                    "pool": ceph.pool,
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                // The Secret comes from the SOPS file (component `secrets`), never through
                // helm, whose release history would keep the key.
                "secret": {"create": false, "name": CEPH_SECRET},
            })
        }
        "traefik" => {
            let middleware = format!("{TRAEFIK_NAMESPACE}-{BOUNCER_MIDDLEWARE}@kubernetescrd");
            json!({
                "deployment": {"replicas": config.ingress.replicas},
                "service": {
                    "annotations": {"lbipam.cilium.io/ips": config.ingress.address.to_string()},
                },
                // What the Ingresses' status shows, so what external-dns publishes: the
                // router's public address, not the Service's (the chart's own key, which
                // renders --providers.kubernetesingress.ingressendpoint.ip once).
                "providers": {"kubernetesIngress": {
                    "publishedService": {"enabled": false},
                    "ingressEndpoint": {"ip": config.ingress.public_address.to_string()},
                }},
                // The bouncer on both entry points: every Ingress is covered, none can forget it.
                "ports": {
                    "web": {"http": {"middlewares": [middleware]}},
                    "websecure": {"http": {"middlewares": [middleware]}},
                },
                "experimental": {"plugins": {BOUNCER_PLUGIN: {
                    "moduleName": "github.com/maxlerebourg/crowdsec-bouncer-traefik-plugin",
                    "version": pins.require("CROWDSEC_BOUNCER_PLUGIN_VERSION")?,
                }}},
                "volumes": [{"name": BOUNCER_SECRET, "mountPath": BOUNCER_KEY_DIR, "type": "secret"}],
            })
        }
        "crowdsec" => json!({
            // Traefik's access logs, from its pods' files on each node.
            "agent": {"acquisition": [{
                "namespace": TRAEFIK_NAMESPACE,
                "podName": format!("{TRAEFIK}-*"),
                "program": "traefik",
            }]},
            "lapi": {"env": [env_from_secret(
                &format!("BOUNCER_KEY_{BOUNCER_NAME}"),
                BOUNCER_SECRET,
                BOUNCER_SECRET_KEY,
            )]},
        }),
        "cert-manager" => json!({}),
        "external-dns" => json!({
            "domainFilters": [config.dns.domain],
            "txtOwnerId": config.cluster_name,
            "extraArgs": [format!("--ovh-endpoint={}", config.dns.ovh_endpoint)],
            "env": [
                env_from_secret("OVH_APPLICATION_KEY", OVH_SECRET, "application_key"),
                env_from_secret("OVH_APPLICATION_SECRET", OVH_SECRET, "application_secret"),
                env_from_secret("OVH_CONSUMER_KEY", OVH_SECRET, "consumer_key"),
            ],
        }),
        _ => return Ok(None),
    };
    Ok(Some(values))
}

/// The objects of an `objects` or `namespaces` component.
pub fn objects(
    config: &OnpremConfig,
    component: &str,
    pins: &Pins,
) -> Result<Option<Vec<Value>>, InputError> {
    let objects = match component {
        "namespaces" => namespaces(),
        "load-balancer" => vec![
            json!({
                "apiVersion": "cilium.io/v2",
                "kind": "CiliumLoadBalancerIPPool",
                "metadata": {"name": format!("{}-pool", config.cluster_name), "labels": labels(component)},
                "spec": {"blocks": [{
                    "start": config.load_balancer.first.to_string(),
                    "stop": config.load_balancer.last.to_string(),
                }]},
            }),
            json!({
                // v2alpha1 is the CRD's only version.
                "apiVersion": "cilium.io/v2alpha1",
                "kind": "CiliumL2AnnouncementPolicy",
                "metadata": {"name": format!("{}-l2", config.cluster_name), "labels": labels(component)},
                "spec": {"loadBalancerIPs": true},
            }),
        ],
        "backup-snapshots" => vec![json!({
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshotClass",
            "metadata": {
                "name": STORAGE_CLASS,
                "labels": merged(labels(component), json!({
                    // The class Velero's CSI support takes for this driver.
                    "velero.io/csi-volumesnapshot-class": "true",
                })),
            },
            "driver": CEPH_DRIVER,
            "deletionPolicy": "Delete",
            "parameters": {
                "clusterID": config.ceph.cluster_id,
                "csi.storage.k8s.io/snapshotter-secret-name": CEPH_SECRET,
                "csi.storage.k8s.io/snapshotter-secret-namespace": CEPH_NAMESPACE,
            },
        })],
        "crowdsec-bouncer" => vec![json!({
            "apiVersion": "traefik.io/v1alpha1",
            "kind": "Middleware",
            "metadata": {"name": BOUNCER_MIDDLEWARE, "namespace": TRAEFIK_NAMESPACE, "labels": labels(component)},
            "spec": {"plugin": {BOUNCER_PLUGIN: {
                "enabled": true,
                // Decisions pulled every minute and kept in Traefik: no LAPI call per request.
                "crowdsecMode": "stream",
                "crowdsecLapiScheme": "http",
                "crowdsecLapiHost": format!("{LAPI_SERVICE}.{CROWDSEC_NAMESPACE}.svc:{LAPI_PORT}"),
                "crowdsecLapiKeyFile": format!("{BOUNCER_KEY_DIR}/{BOUNCER_SECRET_KEY}"),
            }}},
        })],
        "letsencrypt" => {
            let server = config.acme.server.directory();
            let name = config.acme.server.issuer_name();
            let mut acme = json!({
                "server": server,
                "privateKeySecretRef": {"name": format!("{name}-account")},
                // HTTP-01, one certificate per name: the DNS credentials never write
                // validation records, and a leaked certificate is worth one name.
                "solvers": [{"http01": {"ingress": {"ingressClassName": TRAEFIK}}}],
            });
            if let Some(email) = config
                .acme
                .email
                .as_deref()
                .filter(|e| !e.trim().is_empty())
            {
                acme["email"] = json!(email);
            }
            vec![json!({
                "apiVersion": "cert-manager.io/v1",
                "kind": "ClusterIssuer",
                "metadata": {"name": name, "labels": labels(component)},
                "spec": {"acme": acme},
            })]
        }
        "smoke-test" => smoke_test(config, pins.require("SMOKE_TEST_IMAGE")?),
        _ => return Ok(None),
    };
    Ok(Some(objects))
}

fn merged(mut a: Value, b: Value) -> Value {
    if let (Value::Object(a), Value::Object(b)) = (&mut a, b) {
        a.extend(b);
    }
    a
}

/// Every namespace of the profile but kube-system, with the Pod Security level its pods need:
/// Talos enforces `baseline` by default, which refuses ceph-csi's privileged node plugin and
/// CrowdSec's agent (it reads the nodes' /var/log through a hostPath). The smoke test's own pod
/// keeps to `restricted`; the charts' others are left at Talos's `baseline`.
fn namespaces() -> Vec<Value> {
    [
        (CEPH_NAMESPACE, "privileged"),
        (TRAEFIK_NAMESPACE, "baseline"),
        (CROWDSEC_NAMESPACE, "privileged"),
        ("cert-manager", "baseline"),
        (EXTERNAL_DNS_NAMESPACE, "baseline"),
        (SMOKE_NAMESPACE, "restricted"),
    ]
    .into_iter()
    .map(|(name, level)| {
        json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": merged(labels("namespaces"), json!({
                    "pod-security.kubernetes.io/enforce": level,
                })),
            },
        })
    })
    .collect()
}

/// The seed's last test: a small app whose Ingress must answer in HTTPS on its name, which
/// needs DNS (external-dns), a certificate (cert-manager through Traefik), the router's
/// forwarding and the bouncer letting it through.
fn smoke_test(config: &OnpremConfig, image: &str) -> Vec<Value> {
    let name = "whoami";
    let selector = json!({"app.kubernetes.io/name": name});
    let pod_labels = merged(labels("smoke-test"), selector.clone());
    vec![
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": SMOKE_NAMESPACE, "labels": pod_labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "automountServiceAccountToken": false,
                        "securityContext": {
                            "runAsNonRoot": true,
                            "runAsUser": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [{
                            "name": name,
                            "image": image,
                            // An unprivileged port: the pod runs as a user.
                            "args": ["--port", "8080"],
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "securityContext": {
                                "allowPrivilegeEscalation": false,
                                "readOnlyRootFilesystem": true,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
                        }],
                    },
                },
            },
        }),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": SMOKE_NAMESPACE, "labels": labels("smoke-test")},
            "spec": {"selector": selector, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        }),
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {
                "name": name,
                "namespace": SMOKE_NAMESPACE,
                "labels": labels("smoke-test"),
                "annotations": {"cert-manager.io/cluster-issuer": config.acme.server.issuer_name()},
            },
            "spec": {
                "ingressClassName": TRAEFIK,
                "tls": [{"hosts": [config.smoke_test.host], "secretName": format!("{name}-tls")}],
                "rules": [{
                    "host": config.smoke_test.host,
                    "http": {"paths": [{
                        "path": "/",
                        "pathType": "Prefix",
                        "backend": {"service": {"name": name, "port": {"name": "http"}}},
                    }]},
                }],
            },
        }),
    ]
}

/// The names `make cluster-status PROFILE=onprem` shares with the render, one `KEY=value` a line.
pub fn status_names(config: &OnpremConfig) -> String {
    let pairs = [
        ("CLUSTER_NAME", config.cluster_name.clone()),
        ("CLUSTER_ENDPOINT", config.cluster_endpoint.clone()),
        ("STORAGE_CLASS", STORAGE_CLASS.to_owned()),
        ("CEPH_NAMESPACE", CEPH_NAMESPACE.to_owned()),
        ("TRAEFIK_NAMESPACE", TRAEFIK_NAMESPACE.to_owned()),
        ("TRAEFIK_SERVICE", TRAEFIK.to_owned()),
        ("INGRESS_ADDRESS", config.ingress.address.to_string()),
        ("PUBLIC_ADDRESS", config.ingress.public_address.to_string()),
        ("LB_POOL", format!("{}-pool", config.cluster_name)),
        ("CROWDSEC_NAMESPACE", CROWDSEC_NAMESPACE.to_owned()),
        ("LAPI_DEPLOYMENT", "crowdsec-lapi".to_owned()),
        ("BOUNCER_NAME", BOUNCER_NAME.to_owned()),
        ("SMOKE_NAMESPACE", SMOKE_NAMESPACE.to_owned()),
        ("SMOKE_HOST", config.smoke_test.host.clone()),
        ("ACME_SERVER", config.acme.server.word().to_owned()),
    ];
    pairs.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn example() -> OnpremConfig {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/onprem.example.json");
        load(&path).unwrap()
    }

    #[test]
    fn the_example_passes_and_inconsistent_values_are_refused_naming_the_field() {
        check(&example()).unwrap();
        type Mutation = fn(&mut OnpremConfig);
        let cases: Vec<(Mutation, &str, &str)> = vec![
            (
                |c| c.cluster_name = "Demo".into(),
                "cluster_name",
                "DNS label",
            ),
            (
                |c| c.cluster_endpoint = "http://api.demo.k8s.exemple.fr:6443".into(),
                "cluster_endpoint",
                "https://",
            ),
            (
                |c| c.cluster_endpoint = "https://:6443".into(),
                "cluster_endpoint",
                "with a host",
            ),
            (
                |c| c.load_balancer.last = "10.20.1.99".parse().unwrap(),
                "load_balancer.last",
                "comes before",
            ),
            (
                |c| c.ingress.address = "10.20.1.200".parse().unwrap(),
                "ingress.address",
                "outside the pool",
            ),
            (
                |c| c.ingress.public_address = "10.20.1.100".parse().unwrap(),
                "ingress.public_address",
                "not a public address",
            ),
            (|c| c.ingress.replicas = 0, "ingress.replicas", "at least 1"),
            (
                |c| c.ceph.cluster_id = "x".repeat(37),
                "ceph.cluster_id",
                "36 bytes",
            ),
            (|c| c.ceph.monitors.clear(), "ceph.monitors", "at least one"),
            (
                |c| c.ceph.monitors = vec!["172.16.0.11".into()],
                "ceph.monitors",
                "host:port",
            ),
            (
                |c| c.ceph.user = "client.k8s".into(),
                "ceph.user",
                "client.",
            ),
            (
                |c| c.dns.domain = "localhost".into(),
                "dns.domain",
                "DNS name",
            ),
            (
                |c| c.smoke_test.host = "whoami.example.org".into(),
                "smoke_test.host",
                "under dns.domain",
            ),
            (
                |c| {
                    c.acme.server = AcmeServer::Production;
                    c.acme.email = None;
                },
                "acme.email",
                "production",
            ),
        ];
        for (mutate, field, why) in cases {
            let mut config = example();
            mutate(&mut config);
            let (got, message) = check(&config).expect_err(field);
            assert_eq!(got, field);
            assert!(message.contains(why), "{field}: {message}");
        }
    }

    #[test]
    fn an_unknown_field_is_refused_naming_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("onprem.json");
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/onprem.example.json"),
        )
        .unwrap()
        .replace("\"public_address\"", "\"public_adress\"");
        std::fs::write(&path, text).unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(
            err.contains("onprem.json") && err.contains("public_adress"),
            "{err}"
        );
    }

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
        assert_eq!(dns["domainFilters"][0], "k8s.exemple.fr");
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
