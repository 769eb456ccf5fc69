//! The host firewall, rendered from the declared flows (`crates/flows`) and the cluster's
//! addresses (the `PlatformInputs` record):
//!
//! - Cilium host policies: one `CiliumClusterwideNetworkPolicy` a node role, selecting the
//!   role's nodes by label (`nodeSelector`), allowing on each node exactly the flows declared to
//!   it. Cilium's `policyAuditMode` (the platform config's `cilium.policy_audit_mode`) decides
//!   whether it logs or drops what they do not allow.
//! - Talos's ingress firewall on the worker, the one node no Scaleway security group protects:
//!   `NetworkRuleConfig` documents (one a service and protocol, the union of its peers'
//!   networks) and the `NetworkDefaultActionConfig`. Talos applies them with nftables from the
//!   first moments of a boot, before the kubelet starts Cilium, and while Cilium is down.
//!
//! How each peer class is selected, by Cilium (an identity) and by Talos (addresses):
//!
//! | peer | Cilium | Talos |
//! | --- | --- | --- |
//! | internet | entity `world` | `0.0.0.0/0`, `::/0` |
//! | admin CIDRs | `fromCIDRSet` | the CIDRs |
//! | control planes | entity `kube-apiserver` (the nodes that serve the API: all control planes, nothing else), and their addresses | their addresses |
//! | nodes | entities `host`, `remote-node` and `health` (the agents' health endpoints), and every node's address | every node's address |
//! | pods | every endpoint with a pod namespace label | the pod CIDR (a pod's packets leave the tunnel with its address) |

use std::io;
use std::path::Path;

use flows::{Addresses, Peer, Ports, Role, Traffic};
use pop_common::input::InputError;
use pop_common::records::PlatformInputs;
use serde_json::{Value, json};

use crate::{Error, HOST_POLICIES_FILE, PlatformConfig, TALOS_FIREWALL_FILE, TALOS_FIREWALL_LIST};

/// The label every node of a role carries: control planes are labelled by Talos
/// (`node-role.kubernetes.io/control-plane`); a worker is every node without it. Cilium keeps
/// both forms among a host endpoint's labels (its default label filter drops only keys that start
/// with `kubernetes.io` or `k8s.io`, cilium pkg/labelsfilter/filter.go).
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// The Cilium entities that stand for the nodes (see the module's table).
pub const NODE_ENTITIES: [&str; 3] = ["host", "remote-node", "health"];

/// The label key every pod's endpoint carries (Cilium's `k8s:io.kubernetes.pod.namespace`) and
/// no node identity has.
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";

/// The name of a role's host policy.
pub fn policy_name(role: Role) -> String {
    format!("host-firewall-{}", role.name())
}

fn node_selector(role: Role) -> Value {
    match role {
        Role::ControlPlane => json!({"matchLabels": {CONTROL_PLANE_LABEL: ""}}),
        Role::Worker => json!({"matchExpressions": [
            {"key": CONTROL_PLANE_LABEL, "operator": "DoesNotExist"}
        ]}),
    }
}

fn cidr_set(peer: Peer, addresses: &Addresses) -> Value {
    json!({"fromCIDRSet": peer
        .networks(addresses)
        .iter()
        .map(|cidr| json!({"cidr": cidr.to_string()}))
        .collect::<Vec<_>>()})
}

/// Where a peer comes from, in Cilium ingress rules: one selector a rule (Cilium refuses an
/// entity and a CIDR set in one rule). The nodes and the control planes are selected by their
/// identity and by their declared addresses too: a machine that is not a Node yet (a
/// replacement control plane, a worker with a new address) has no node identity, and enforcing
/// would drop its join; with `policyCIDRMatchMode: nodes` the addresses also match the nodes'
/// identities once they are nodes.
fn cilium_peers(peer: Peer, addresses: &Addresses) -> Vec<Value> {
    match peer {
        Peer::Internet => vec![json!({"fromEntities": ["world"]})],
        Peer::Admin => vec![cidr_set(peer, addresses)],
        Peer::ControlPlanes => vec![
            json!({"fromEntities": ["kube-apiserver"]}),
            cidr_set(peer, addresses),
        ],
        Peer::Nodes => vec![
            json!({"fromEntities": NODE_ENTITIES}),
            cidr_set(peer, addresses),
        ],
        Peer::Pods => vec![json!({"fromEndpoints": [
            {"matchExpressions": [{"key": POD_NAMESPACE_LABEL, "operator": "Exists"}]}
        ]})],
    }
}

fn cilium_port(protocol: &str, ports: Ports) -> Value {
    let mut port = json!({"port": ports.first.to_string(), "protocol": protocol});
    if ports.last != ports.first {
        port["endPort"] = json!(ports.last);
    }
    port
}

/// One role's host policy: one ingress rule a peer (and one for its ICMP, which Cilium keeps
/// apart from ports).
pub fn cilium_policy(role: Role, addresses: &Addresses, labels: &Value) -> Value {
    let mut ingress = Vec::new();
    for (peer, traffic) in flows::by_peer(role) {
        let ports: Vec<Value> = traffic
            .iter()
            .filter_map(|t| match t {
                Traffic::Tcp(ports) => Some(cilium_port("TCP", *ports)),
                Traffic::Udp(ports) => Some(cilium_port("UDP", *ports)),
                Traffic::IcmpEcho => None,
            })
            .collect();
        for selector in cilium_peers(peer, addresses) {
            if !ports.is_empty() {
                let mut rule = selector.clone();
                rule["toPorts"] = json!([{"ports": ports}]);
                ingress.push(rule);
            }
            if traffic.contains(&Traffic::IcmpEcho) {
                let mut rule = selector;
                rule["icmps"] = json!([{"fields": [
                    {"type": 8, "family": "IPv4"},
                    {"type": 128, "family": "IPv6"},
                ]}]);
                ingress.push(rule);
            }
        }
    }
    json!({
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumClusterwideNetworkPolicy",
        "metadata": {"name": policy_name(role), "labels": labels},
        "spec": {
            "description": format!(
                "What may reach the {role}'s host (rendered from the declared flows): everything \
                 else is logged while policyAuditMode is on, dropped once it is off"
            ),
            "nodeSelector": node_selector(role),
            "ingress": ingress,
        },
    })
}

/// The host policies of every role.
pub fn cilium_policies(addresses: &Addresses, labels: &Value) -> Vec<Value> {
    Role::ALL
        .iter()
        .map(|role| cilium_policy(*role, addresses, labels))
        .collect()
}

/// Talos's ingress firewall for the worker: the default action (`accept` while auditing, when
/// Talos drops only what a rule's port receives from outside its networks; `block` once
/// enforcing, when it drops everything no rule accepts), then one rule a service and protocol.
/// ICMP has no rule: Talos takes no ports for it and, blocking, still accepts ICMP at 5 packets a
/// second (siderolabs/talos v1.13.0 internal/app/machined/pkg/controllers/network/
/// nftables_chain_config.go), which is what Cilium's health checks need.
pub fn talos_documents(addresses: &Addresses, audit: bool) -> Vec<Value> {
    let mut documents = vec![json!({
        "apiVersion": "v1alpha1",
        "kind": "NetworkDefaultActionConfig",
        "ingress": if audit { "accept" } else { "block" },
    })];
    for rule in flows::by_service(Role::Worker) {
        if rule.ports.is_empty() {
            continue;
        }
        let mut networks = Vec::new();
        for peer in &rule.peers {
            for net in peer.networks(addresses) {
                if !networks.contains(&net) {
                    networks.push(net);
                }
            }
        }
        let ports: Vec<Value> = rule
            .ports
            .iter()
            .map(|p| {
                if p.first == p.last {
                    json!(p.first)
                } else {
                    json!(p.to_string())
                }
            })
            .collect();
        documents.push(json!({
            "apiVersion": "v1alpha1",
            "kind": "NetworkRuleConfig",
            "name": crate::stale_rules::rule_name(rule.service, rule.protocol),
            "portSelector": {"ports": ports, "protocol": rule.protocol},
            "ingress": networks
                .iter()
                .map(|net| json!({"subnet": net.to_string()}))
                .collect::<Vec<_>>(),
        }));
    }
    documents
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
pub(crate) fn firewall_files(
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
    let labels = json!({
        "app.kubernetes.io/part-of": "edgepop",
        "app.kubernetes.io/managed-by": "render-platform",
        "app.kubernetes.io/component": "host-firewall",
    });
    let policies = json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": cilium_policies(&addresses, &labels),
    });
    let mut policies =
        serde_json::to_string_pretty(&policies).map_err(|e| encode(e.to_string()))?;
    policies.push('\n');
    let mut talos = String::new();
    for document in talos_documents(&addresses, platform.cilium.policy_audit_mode) {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn addresses() -> Addresses {
        Addresses {
            admin: vec!["198.51.100.0/24".parse().unwrap()],
            control_planes: vec!["203.0.113.11".parse().unwrap()],
            workers: vec!["203.0.113.10".parse().unwrap()],
        }
    }

    #[test]
    fn the_worker_policy_opens_80_and_443_to_the_world_and_the_talos_api_to_the_admins() {
        let policy = cilium_policy(Role::Worker, &addresses(), &json!({}));
        let ingress = policy["spec"]["ingress"].as_array().unwrap();
        assert_eq!(
            ingress[0],
            json!({"fromEntities": ["world"], "toPorts": [{"ports": [
                {"port": "80", "protocol": "TCP"}, {"port": "443", "protocol": "TCP"}
            ]}]})
        );
        let admin = ingress
            .iter()
            .find(|r| r["fromCIDRSet"][0]["cidr"] == "198.51.100.0/24");
        assert_eq!(
            admin.unwrap(),
            &json!({"fromCIDRSet": [{"cidr": "198.51.100.0/24"}], "toPorts": [{"ports": [
                {"port": "50000", "protocol": "TCP"}
            ]}]})
        );
        assert_eq!(
            policy["spec"]["nodeSelector"]["matchExpressions"][0]["operator"],
            "DoesNotExist"
        );
    }

    #[test]
    fn etcd_is_a_range_for_the_control_planes_only() {
        let policy = cilium_policy(Role::ControlPlane, &addresses(), &json!({}));
        let etcd = testkit::json::element(
            &policy["spec"]["ingress"],
            "/fromEntities",
            json!(["kube-apiserver"]),
        );
        assert_eq!(
            etcd["toPorts"][0]["ports"],
            json!([{"port": "2379", "endPort": 2380, "protocol": "TCP"}])
        );
    }

    #[test]
    fn talos_blocks_only_when_enforcing_and_names_each_rule_once() {
        let audit = talos_documents(&addresses(), true);
        assert_eq!(audit[0]["ingress"], "accept");
        let enforce = talos_documents(&addresses(), false);
        assert_eq!(enforce[0]["ingress"], "block");
        assert_eq!(audit[1..], enforce[1..]);
        let mut names: Vec<&str> = audit[1..]
            .iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        let count = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), count, "{names:?}");
        let vxlan = audit
            .iter()
            .find(|d| d["name"] == "edgepop-cilium-vxlan-udp")
            .unwrap();
        assert_eq!(
            vxlan["ingress"],
            json!([{"subnet": "203.0.113.11/32"}, {"subnet": "203.0.113.10/32"}])
        );
    }
}
