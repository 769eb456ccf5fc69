//! The `edge` profile: the Scaleway edge's platform layer (Cilium, the Gateway API CRDs,
//! cert-manager, Istio), whose config `config/platform.json` holds the day-2 switches.

use flows::Routing;
use pop_common::input::InputError;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::etcd_backup::EtcdBackupConfig;
use crate::profile::{ChartCrds, Component, Kind};
use crate::{CILIUM, cert_manager};

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
            from_environment: &[],
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
            crds_from: ChartCrds::Templates,
            uninstalling: None,
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
            crds_from: ChartCrds::Elsewhere,
            uninstalling: None,
        },
        depends_on: &["istio-base", "gateway-api"],
    },
    // The scheduled etcd backup, when the config sets `etcd_backup` (left out of the plan
    // otherwise). Its Talos ServiceAccount's CRD is Talos's own, served once the control planes'
    // Talos API access is on.
    Component {
        name: crate::etcd_backup::NAME,
        namespace: Some(crate::etcd_backup::NAMESPACE),
        kind: Kind::Objects {
            needs: &["serviceaccounts.talos.dev"],
            ready: None,
            from_environment: &[crate::etcd_backup::SECRET_REF],
        },
        depends_on: &["cilium"],
    },
];

/// `config/platform.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformConfig {
    pub cilium: CiliumConfig,
    pub cert_manager: CertManagerConfig,
    /// The scheduled etcd backup; none when absent.
    #[serde(default)]
    pub etcd_backup: Option<EtcdBackupConfig>,
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
    /// Drop plaintext pod traffic sent to `strict_mode_cidr` (strict egress).
    pub strict_mode: bool,
    /// Drop overlay (VXLAN) traffic that did not come through WireGuard (strict ingress). Absent:
    /// on whenever WireGuard is. Cilium takes a packet's identity from its VNI without checking
    /// the outer source, and the node addresses are public, so without it a forged VXLAN packet
    /// reaches any pod; with the host firewall on, every legitimate overlay packet is encrypted,
    /// so it drops nothing else.
    #[serde(default)]
    pub strict_ingress: Option<bool>,
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
    if wg.strict_ingress == Some(true) && !wg.enabled {
        return Err((
            "cilium.wireguard.strict_ingress",
            "needs cilium.wireguard.enabled (it drops what WireGuard did not decrypt)".into(),
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
    if let Some(backup) = &platform.etcd_backup {
        crate::etcd_backup::check(backup)?;
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

/// Strict ingress: on whenever WireGuard is (the routing is always the declared tunnel, where it
/// applies), unless the config switches it off.
fn strict_ingress(wg: &WireGuardConfig) -> bool {
    let Routing::Tunnel { .. } = flows::ROUTING;
    wg.enabled && wg.strict_ingress.unwrap_or(true)
}

fn cilium(cilium: &CiliumConfig) -> Value {
    let wg = &cilium.wireguard;
    let mut encryption = json!({
        "enabled": wg.enabled,
        "nodeEncryption": wg.node_encryption,
        // The 1.18+ form; `strictMode.enabled` was removed in 1.20.
        "strictMode": {
            "egress": {"enabled": wg.strict_mode},
            "ingress": {"enabled": strict_ingress(wg)},
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
        // The host policies select the nodes by their addresses too (a machine that is not a
        // Node yet can join while enforcing): CIDR selectors match node identities only so.
        "policyCIDRMatchMode": ["nodes"],
        // Template-only too (the agent's cluster-health-port).
        "clusterHealthPort": flows::CILIUM_HEALTH,
        "nodePort": {"range": flows::NODE_PORT_RANGE.cilium()},
        "encryption": encryption,
        // The chart turns on Envoy's and the operator's metrics, each listening on every address
        // of its node (cilium-envoy and the operator run on the host network, the worker
        // included): in no declared flow, so off. Nothing of the edge scrapes them.
        // IPv6 end to end or not at all, as declared (flows::EDGE_SERVES_IPV6).
        "ipv6": {"enabled": flows::EDGE_SERVES_IPV6},
        "envoy": {"prometheus": {"enabled": false}},
        "operator": {"prometheus": {"enabled": false}},
        "hubble": {
            "listenAddress": format!(":{}", flows::HUBBLE),
            "peerService": {"targetPort": flows::HUBBLE},
            "relay": {"enabled": cilium.hubble.relay},
            "ui": {"enabled": cilium.hubble.ui},
        },
    })
}

/// The names `make cluster-status` shares with the render (status.env): the label the workers
/// serving the edge carry, as a selector (`key=value`), from its one declaration, so the status
/// finds the edge nodes the Talos patch labels and the gateway's placement selects.
pub fn status_names() -> String {
    let (key, value) = pop_common::records::EDGE_NODE_LABEL;
    format!("EDGE_NODE_LABEL={key}={value}\n")
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
    fn the_example_renders_audit_mode_wireguard_strict_on_ingress_only_and_hubble() {
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
            json!(true)
        );
        assert!(
            values["encryption"]["strictMode"]["egress"]
                .get("cidr")
                .is_none()
        );
        assert_eq!(values["hubble"]["relay"]["enabled"], json!(true));
        assert_eq!(values["hubble"]["ui"]["enabled"], json!(true));
        assert_eq!(values["envoy"]["prometheus"]["enabled"], json!(false));
        assert_eq!(values["operator"]["prometheus"]["enabled"], json!(false));
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
    fn strict_ingress_is_on_whenever_wireguard_is_and_a_switch_of_its_own() {
        // Every legitimate overlay packet arrives through WireGuard (the tunnel with the host
        // firewall on), so dropping the rest stops a forged VXLAN packet and nothing else.
        let ingress = |platform: &PlatformConfig| {
            render(platform, "cilium").unwrap()["encryption"]["strictMode"]["ingress"]["enabled"]
                .clone()
        };
        let mut platform = example();
        assert!(!platform.cilium.wireguard.strict_mode);
        assert_eq!(ingress(&platform), json!(true), "the example: WireGuard on");
        let egress = &render(&platform, "cilium").unwrap()["encryption"]["strictMode"]["egress"];
        assert_eq!(
            egress["enabled"],
            json!(false),
            "egress keeps its own switch"
        );

        platform.cilium.wireguard.strict_ingress = Some(false);
        check(&platform).unwrap();
        assert_eq!(ingress(&platform), json!(false), "switched off");

        platform.cilium.wireguard.strict_ingress = None;
        platform.cilium.wireguard.enabled = false;
        platform.cilium.wireguard.node_encryption = false;
        check(&platform).unwrap();
        assert_eq!(ingress(&platform), json!(false), "nothing to decrypt");

        platform.cilium.wireguard.strict_ingress = Some(true);
        let (field, _) = check(&platform).unwrap_err();
        assert_eq!(field, "cilium.wireguard.strict_ingress");
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
}
