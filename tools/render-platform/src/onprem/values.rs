//! The cluster's values of each Helm component of the profile.

use pop_common::input::InputError;
use pop_common::pins::Pins;
use serde_json::{Value, json};

use super::*;

/// The annotation by which helm leaves a resource of the release in place on uninstall.
const HELM_RESOURCE_POLICY: &str = "helm.sh/resource-policy";

/// A `secretKeyRef` environment variable.
pub(super) fn env_from_secret(name: &str, secret: &str, key: &str) -> Value {
    json!({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
}

/// The cluster's values of a Helm component (merged by helm over the committed files).
pub fn values(
    config: &OnpremConfig,
    component: &str,
    pins: &Pins,
) -> Result<Option<Value>, InputError> {
    let values = match component {
        "cilium" => {
            check_cilium_floor(pins)?;
            json!({
            // LB IPAM is on by default in 1.20; the announcements are not.
            "l2announcements": {"enabled": true},
            // The host firewall of values/cilium.yaml enforces the edge's declared flows, whose
            // host policies this profile does not have.
            "hostFirewall": {"enabled": false},
            })
        }
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
                "provisioner": {"replicaCount": ceph_provisioners(config.workers)},
            })
        }
        "traefik" => traefik(config, pins)?,
        "crowdsec" => json!({
            // Traefik's access logs, from its pods' files on each node.
            "agent": {"acquisition": [{
                "namespace": TRAEFIK_NAMESPACE,
                "podName": format!("{TRAEFIK}-*"),
                "program": "traefik",
            }]},
            // The LAPI's database and config (bouncers, machines, local decisions) outlive the
            // release, as its namespace does: helm uninstall keeps what is annotated so (helm
            // v3.22.0 pkg/action/resource_policy.go, lines 26-46), and the next install adopts
            // the claims the chart names again (pkg/action/validate.go, lines 65-92).
            "lapi": {"persistentVolume": {
                "data": {"annotations": {HELM_RESOURCE_POLICY: "keep"}},
                "config": {"annotations": {HELM_RESOURCE_POLICY: "keep"}},
            }},
            // The bouncer's registration depends on its key: values_with_secrets.
        }),
        // An Ingress that asks for TLS (`kubernetes.io/tls-acme: "true"`) gets its certificate
        // from the profile's issuer without naming it.
        "cert-manager" => json!({"ingressShim": {
            "defaultIssuerName": CLUSTER_ISSUER,
            "defaultIssuerKind": "ClusterIssuer",
        }}),
        "external-dns" => external_dns(config),
        _ => return Ok(None),
    };
    Ok(Some(values))
}

/// The chart's own number of provisioners (values.yaml, `provisioner.replicaCount`): one leads,
/// the others wait to take over.
const CEPH_PROVISIONERS_DEFAULT: u32 = 3;

/// How many ceph-csi provisioners the workers can hold: with more than one, the chart requires
/// each on a node of its own (ceph-csi-rbd 3.17.1, templates/provisioner-deployment.yaml, lines
/// 44-58: a required pod anti-affinity on `kubernetes.io/hostname`), and one more than the
/// workers stays Pending for ever, which helm's wait lets pass (the chart's maxUnavailable 50%).
fn ceph_provisioners(workers: u32) -> u32 {
    workers.min(CEPH_PROVISIONERS_DEFAULT)
}

/// The pattern of names external-dns may write when `domain` lives in the parent zone `zone`:
/// the zone's own name (the OVH provider keeps a zone only if the filter matches its name), and
/// `domain` with every name under it. The zone's apex matches too (a filter cannot tell a zone
/// from its apex record); the TXT ownership records and `upsert-only` keep external-dns off any
/// record it did not create (plan/plan.go at v0.21.0, lines 229-234 and 254-268).
fn zone_and_domain_pattern(zone: &str, domain: &str) -> String {
    let quoted = |name: &str| name.replace('.', "\\.");
    format!("^({}|(.+\\.)?{})$", quoted(zone), quoted(domain))
}

/// external-dns on OVH: the names under the platform's domain, in the zone that holds it.
/// external-dns v0.21.0's OVH provider keeps only the zones its domain filter matches
/// (provider/ovh/ovh.go, lines 390-406), and a plain filter matches a name equal to or under
/// it (endpoint/domain_filter.go, lines 135-156): `--domain-filter=k8s.exemple.fr` drops the
/// zone `exemple.fr` and publishes nothing. A regular expression matches the zone and the
/// domain's names, and nothing else of the zone.
fn external_dns(config: &OnpremConfig) -> Value {
    let dns = &config.dns;
    let zone = dns.zone.as_deref().unwrap_or(&dns.domain);
    let mut args = vec![format!("--ovh-endpoint={}", dns.ovh_endpoint)];
    let mut values = json!({
            "txtOwnerId": config.cluster_name,
            "env": [
                env_from_secret("OVH_APPLICATION_KEY", OVH_SECRET, "application_key"),
                env_from_secret("OVH_APPLICATION_SECRET", OVH_SECRET, "application_secret"),
                env_from_secret("OVH_CONSUMER_KEY", OVH_SECRET, "consumer_key"),
            ],
    });
    if zone == dns.domain {
        values["domainFilters"] = json!([dns.domain]);
    } else {
        args.push(format!(
            "--regex-domain-filter={}",
            zone_and_domain_pattern(zone, &dns.domain)
        ));
    }
    values["extraArgs"] = json!(args);
    values
}

/// The Cilium pin is at least `CILIUM_L2_LOCAL_MIN_VERSION`: below it, L2 announcements ignore
/// Traefik's `externalTrafficPolicy: Local` (values/traefik.yaml) and may announce its address
/// from a node without Traefik, which drops the traffic (k8s/versions.env says where it comes
/// from).
fn check_cilium_floor(pins: &Pins) -> Result<(), InputError> {
    let pinned = pins.require("CILIUM_VERSION")?;
    let floor = pins.require("CILIUM_L2_LOCAL_MIN_VERSION")?;
    let numbers = |version: &str| -> Vec<u32> {
        version
            .trim_start_matches('v')
            .split('.')
            .map(|n| n.parse().unwrap_or(0))
            .collect()
    };
    if numbers(pinned) < numbers(floor) {
        return Err(InputError::field(
            std::path::Path::new(pop_common::pins::FILE),
            "CILIUM_VERSION",
            format!(
                "{pinned} is older than {floor} (CILIUM_L2_LOCAL_MIN_VERSION): its L2 \
                 announcements ignore Traefik's externalTrafficPolicy Local, and the address \
                 would be announced from nodes that drop its traffic"
            ),
        ));
    }
    Ok(())
}

/// Traefik: its address in the pool, the public one in the Ingresses' status, the bouncer.
fn traefik(config: &OnpremConfig, pins: &Pins) -> Result<Value, InputError> {
    let middleware = format!("{TRAEFIK_NAMESPACE}-{BOUNCER_MIDDLEWARE}@kubernetescrd");
    Ok(json!({
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
        "experimental": {
            // Traefik fetches the plugin at every start. One that fails to load stops the new
            // Traefik (--experimental.abortonpluginfailure): the rolling update (the chart's
            // maxUnavailable 0) keeps the running pods, helm --wait fails and --atomic rolls
            // back. Left false, Traefik would start without the plugin, pass its readiness probe
            // and answer 404 on every route behind the entry points' Middleware.
            "abortOnPluginFailure": true,
            "plugins": {BOUNCER_PLUGIN: {
                "moduleName": "github.com/maxlerebourg/crowdsec-bouncer-traefik-plugin",
                "version": pins.require("CROWDSEC_BOUNCER_PLUGIN_VERSION")?,
            }},
        },
        "volumes": [{"name": BOUNCER_SECRET, "mountPath": BOUNCER_KEY_DIR, "type": "secret"}],
    }))
}
