//! The objects of the profile's `objects` and `namespaces` components.

use std::net::Ipv4Addr;

use pop_common::input::InputError;
use pop_common::pins::Pins;
use serde_json::{Value, json};

use super::*;

/// The objects of an `objects` or `namespaces` component.
pub fn objects(
    config: &OnpremConfig,
    component: &str,
    pins: &Pins,
) -> Result<Option<Vec<Value>>, InputError> {
    let objects = match component {
        "namespaces" => namespaces(),
        "load-balancer" => load_balancer(config),
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
                // Fails open: when the LAPI cannot be reached, requests go on with the decisions
                // already pulled, rather than a 403 for every visitor of every site (Let's
                // Encrypt's HTTP-01 requests included). The plugin's default, 0, blocks
                // everything from the first failed pull (bouncer.go, handleStreamTicker and the
                // stream branch of ServeHTTP, at v1.7.1); -1 never does.
                "updateMaxFailure": BOUNCER_UPDATE_MAX_FAILURE,
            }}},
        })],
        "letsencrypt" => vec![cluster_issuer(config)],
        "smoke-test" => smoke_test(config, pins.require("SMOKE_TEST_IMAGE")?),
        _ => return Ok(None),
    };
    Ok(Some(objects))
}

/// The pools Cilium gives LoadBalancer addresses from, and their announcement on the local
/// network. Traefik's address is a pool of its own, for its Service alone (the pool's
/// `serviceSelector` on the Service's namespace and name, which Cilium's LB IPAM matches as if
/// they were labels: Documentation/network/lb-ipam.rst, "Service Selectors"), and the rest of
/// the range another pool: in a single pool, a LoadBalancer Service made before Traefik's could
/// take its address, and Traefik's Service would wait for ever. Pools must not overlap (Cilium
/// disables the newer of two that do), so the rest of the range leaves the address out.
fn load_balancer(config: &OnpremConfig) -> Vec<Value> {
    let lb = &config.load_balancer;
    let address = u32::from(config.ingress.address);
    let block = |start: u32, stop: u32| json!({"start": Ipv4Addr::from(start).to_string(), "stop": Ipv4Addr::from(stop).to_string()});
    let mut rest = Vec::new();
    if u32::from(lb.first) < address {
        rest.push(block(u32::from(lb.first), address - 1));
    }
    if address < u32::from(lb.last) {
        rest.push(block(address + 1, u32::from(lb.last)));
    }
    let pool = |name: String, spec: Value| {
        json!({
            "apiVersion": "cilium.io/v2",
            "kind": "CiliumLoadBalancerIPPool",
            "metadata": {"name": name, "labels": labels("load-balancer")},
            "spec": spec,
        })
    };
    let mut objects = Vec::new();
    if !rest.is_empty() {
        objects.push(pool(pool_name(config), json!({"blocks": rest})));
    }
    objects.push(pool(
        ingress_pool_name(config),
        json!({
            "blocks": [block(address, address)],
            "serviceSelector": {"matchLabels": {
                "io.kubernetes.service.namespace": TRAEFIK_NAMESPACE,
                "io.kubernetes.service.name": TRAEFIK,
            }},
        }),
    ));
    let mut policy = json!({"loadBalancerIPs": true});
    if let Some(interfaces) = &lb.interfaces {
        policy["interfaces"] = json!(interfaces);
    }
    objects.push(json!({
        // v2alpha1 is the CRD's only version.
        "apiVersion": "cilium.io/v2alpha1",
        "kind": "CiliumL2AnnouncementPolicy",
        "metadata": {"name": format!("{}-l2", config.cluster_name), "labels": labels("load-balancer")},
        "spec": policy,
    }));
    objects
}

/// The pool of the range but Traefik's address.
fn pool_name(config: &OnpremConfig) -> String {
    format!("{}-pool", config.cluster_name)
}

/// Traefik's address, a pool of its own.
pub(super) fn ingress_pool_name(config: &OnpremConfig) -> String {
    format!("{}-ingress", config.cluster_name)
}

/// The ACME ClusterIssuer, answering HTTP-01 through Traefik.
fn cluster_issuer(config: &OnpremConfig) -> Value {
    let email = config
        .acme
        .email
        .as_deref()
        .filter(|e| !e.trim().is_empty());
    // HTTP-01, one certificate per name: the DNS credentials never write validation records,
    // and a leaked certificate is worth one name.
    config.acme.server.cluster_issuer_named(
        CLUSTER_ISSUER,
        json!({"http01": {"ingress": {"ingressClassName": TRAEFIK}}}),
        email,
        labels("letsencrypt"),
    )
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
                "annotations": {"cert-manager.io/cluster-issuer": CLUSTER_ISSUER},
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
