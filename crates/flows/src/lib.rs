//! The cluster's network, declared once: which peers reach which nodes, on which port and
//! protocol, and the ports the layers must agree on.
//!
//! Every layer that opens or closes a port is rendered from this crate, never typed again:
//!
//! - the control planes' Scaleway security group (`scw-infra`);
//! - Cilium's routing mode, tunnel, health and Hubble ports and its NodePort range, and the host
//!   firewall: Cilium host policies on every node, Talos's ingress firewall on the worker
//!   (`render-platform`);
//! - the API server's NodePort range (`talos/patches/40-nodeport-range.controlplane.yaml`,
//!   checked against [`NODE_PORT_RANGE`] by a test);
//! - the gateway Service's node ports and the gateway pods' policy (`render-edge`);
//! - the ports table of docs/infrastructure.md ([`markdown_table`], checked by a test), and the
//!   table of the worker's public ports in each mode ([`worker_ports`], likewise).
//!
//! `tests/network_flows.rs` renders each layer and reads it back against [`FLOWS`]: for every
//! peer class and port, each layer allows exactly what is declared here.
//!
//! Only traffic that ends on a node (its host network: Talos, the kubelet, etcd, Cilium's agent,
//! a node port) is declared. Pod-to-pod traffic between nodes (the API server calling a webhook,
//! the gateway reaching istiod) travels inside the tunnel flows ([`VXLAN`], [`WIREGUARD`]), and
//! what a pod receives is a matter for that pod's own policy.

pub mod worker_ports;

use std::fmt;
use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net};

/// An inclusive range of ports (a single port when `first == last`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ports {
    pub first: u16,
    pub last: u16,
}

impl Ports {
    pub const fn one(port: u16) -> Ports {
        Ports {
            first: port,
            last: port,
        }
    }

    pub const fn range(first: u16, last: u16) -> Ports {
        Ports { first, last }
    }

    pub const fn contains(self, port: u16) -> bool {
        self.first <= port && port <= self.last
    }

    /// Whether the two ranges share a port.
    pub const fn overlaps(self, other: Ports) -> bool {
        self.first <= other.last && other.first <= self.last
    }

    /// Cilium's spelling (`nodePort.range`, agent flag `node-port-range`): `first,last`.
    pub fn cilium(self) -> String {
        format!("{},{}", self.first, self.last)
    }
}

impl fmt::Display for Ports {
    /// `80` or `2379-2380`: the API server's `--service-node-port-range` spelling, Talos's and
    /// the documentation's.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// What crosses the wire: a transport and its destination ports, or ICMP echo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Traffic {
    Tcp(Ports),
    Udp(Ports),
    /// ICMP echo request (IPv4 type 8, IPv6 type 128): Cilium's health probes.
    IcmpEcho,
}

impl Traffic {
    /// The protocol's name in lower case (`tcp`, `udp`, `icmp`), as Talos spells it.
    pub fn protocol(self) -> &'static str {
        match self {
            Traffic::Tcp(_) => "tcp",
            Traffic::Udp(_) => "udp",
            Traffic::IcmpEcho => "icmp",
        }
    }

    pub fn ports(self) -> Option<Ports> {
        match self {
            Traffic::Tcp(ports) | Traffic::Udp(ports) => Some(ports),
            Traffic::IcmpEcho => None,
        }
    }
}

impl fmt::Display for Traffic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Traffic::Tcp(ports) => write!(f, "TCP {ports}"),
            Traffic::Udp(ports) => write!(f, "UDP {ports}"),
            Traffic::IcmpEcho => f.write_str("ICMP echo"),
        }
    }
}

/// Who opens the connection, as a class of addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Peer {
    /// Any address.
    Internet,
    /// The infra config's `admin_cidrs`: where the operator runs talosctl, kubectl and helm.
    Admin,
    /// The control planes' addresses.
    ControlPlanes,
    /// Every node's address (control planes and worker).
    Nodes,
    /// Pods, anywhere in the cluster ([`POD_CIDR`]). Between nodes their packets travel inside
    /// the tunnel, so a filter in front of the node (the security group) only sees the tunnel.
    Pods,
}

impl Peer {
    pub const ALL: [Peer; 5] = [
        Peer::Internet,
        Peer::Admin,
        Peer::ControlPlanes,
        Peer::Nodes,
        Peer::Pods,
    ];

    /// Whether its packets reach a node as they are, or only inside the tunnel (pods on another
    /// node): a filter outside the node sees the first kind only.
    pub fn outside_the_tunnel(self) -> bool {
        self != Peer::Pods
    }

    /// The networks this class stands for, given the cluster's addresses.
    pub fn networks(self, addresses: &Addresses) -> Vec<IpNet> {
        let hosts = |list: &[IpAddr]| list.iter().copied().map(IpNet::from).collect();
        match self {
            Peer::Internet => vec![
                IpNet::V4(Ipv4Net::default()),
                IpNet::V6(ipnet::Ipv6Net::default()),
            ],
            Peer::Admin => addresses.admin.clone(),
            Peer::ControlPlanes => hosts(&addresses.control_planes),
            Peer::Nodes => {
                let mut all: Vec<IpNet> = hosts(&addresses.control_planes);
                all.extend(hosts(&addresses.workers));
                all
            }
            Peer::Pods => vec![IpNet::V4(POD_CIDR)],
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Peer::Internet => "internet",
            Peer::Admin => "admin CIDRs",
            Peer::ControlPlanes => "control planes",
            Peer::Nodes => "nodes",
            Peer::Pods => "pods",
        })
    }
}

/// The addresses the peer classes stand for in one cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Addresses {
    pub admin: Vec<IpNet>,
    pub control_planes: Vec<IpAddr>,
    pub workers: Vec<IpAddr>,
}

/// The nodes a flow ends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    ControlPlane,
    Worker,
}

impl Role {
    pub const ALL: [Role; 2] = [Role::ControlPlane, Role::Worker];

    pub fn name(self) -> &'static str {
        match self {
            Role::ControlPlane => "controlplane",
            Role::Worker => "worker",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::ControlPlane => "control planes",
            Role::Worker => "worker",
        })
    }
}

/// One permitted flow: `from` may open `traffic` to the nodes of `to`, where `service` listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// What listens, as a short name (also the name of the Talos rule that opens it).
    pub service: &'static str,
    pub from: Peer,
    pub to: &'static [Role],
    pub traffic: Traffic,
    /// Why the flow exists, for the documentation.
    pub why: &'static str,
}

impl Flow {
    pub fn reaches(&self, role: Role) -> bool {
        self.to.contains(&role)
    }
}

const BOTH: &[Role] = &[Role::ControlPlane, Role::Worker];
const CONTROL_PLANES: &[Role] = &[Role::ControlPlane];
const WORKER: &[Role] = &[Role::Worker];

// The ports. Talos's come from siderolabs/talos v1.13.0 pkg/machinery/constants/constants.go;
// Cilium's from the chart's values.yaml and its agent defaults (cilium 1.20).

/// The gateway's listeners (the Gateway's HTTP and HTTPS ports, served on the worker's address).
pub const HTTP: u16 = 80;
pub const HTTPS: u16 = 443;
/// Talos's apid (`ApidPort`).
pub const TALOS_API: u16 = 50000;
/// Talos's trustd (`TrustdPort`).
pub const TRUSTD: u16 = 50001;
/// The API server (`DefaultControlPlanePort`).
pub const KUBERNETES_API: u16 = 6443;
/// etcd's client and peer ports (`EtcdClientPort`, `EtcdPeerPort`).
pub const ETCD: Ports = Ports::range(2379, 2380);
/// The kubelet's API (`KubeletPort`).
pub const KUBELET: u16 = 10250;
/// Cilium's VXLAN port (the chart's `tunnelPort` default for VXLAN).
pub const VXLAN: u16 = 8472;
/// Cilium's WireGuard port (fixed by Cilium, not configurable).
pub const WIREGUARD: u16 = 51871;
/// Cilium's node-to-node health checks (`clusterHealthPort`, agent default 4240).
pub const CILIUM_HEALTH: u16 = 4240;
/// Hubble's server on each node, read by Hubble Relay (`hubble.listenAddress`).
pub const HUBBLE: u16 = 4244;
/// Talos's host DNS (`HostDNSAddress` 169.254.116.108), where CoreDNS forwards
/// (`forwardKubeDNSToHost`, on by default since Talos 1.8's version contract).
pub const HOST_DNS: u16 = 53;

/// Istio's status port on every gateway: its deployment controller always puts it first in the
/// gateway Service (istio 1.30.3 pilot/pkg/config/kube/gatewaycommon/deploymentcontroller.go,
/// `extractServicePorts`: `status-port`, 15021).
pub const GATEWAY_STATUS_PORT: u16 = 15021;
/// The node port the status port gets: pinned inside [`NODE_PORT_RANGE`] (a Service of type
/// NodePort gives every port one), open to the nodes only.
pub const GATEWAY_STATUS_NODE_PORT: u16 = 442;

/// The range of node ports, for both the API server (`--service-node-port-range`) and Cilium
/// (`nodePort.range`): the gateway's two public ports and what lies between, none of which a
/// host process listens on ([`HOST_PORTS`]). A Service of type NodePort without a pinned node
/// port gets one from here and is reachable on the worker's public address: the gateway is the
/// only one.
pub const NODE_PORT_RANGE: Ports = Ports::range(HTTP, HTTPS);

/// The gateway Service's ports and the node port pinned for each: `(port, node port)`.
pub const GATEWAY_NODE_PORTS: [(u16, u16); 3] = [
    (HTTP, HTTP),
    (HTTPS, HTTPS),
    (GATEWAY_STATUS_PORT, GATEWAY_STATUS_NODE_PORT),
];

/// Whether the edge serves IPv6 end to end. Not yet: Cilium runs IPv4 only, and its host firewall
/// then drops every frame that is not IPv4 (cilium v1.20 `bpf/bpf_host.c`, `do_netdev`: the
/// default case returns `DROP_UNKNOWN_L3`), the pod and service subnets are Talos's IPv4
/// defaults ([`POD_CIDR`]), and the gateway Service is single-stack. So the edge's names get no
/// AAAA record: an IPv6-first client would stall on an address that never answers, and Let's
/// Encrypt, which tries IPv6 first and falls back to IPv4 only after a timeout
/// (letsencrypt.org/docs/ipv6-support), would wait one out on every HTTP-01 validation.
///
/// Every layer reads it: scw-infra's DNS records, Cilium's `ipv6.enabled`, the gateway Service's
/// IP families ([`edge_ip_families`]) and the worker's ports table; `tests/network_flows.rs`
/// holds each to it, and holds it to dual-stack pod and service subnets in `talos/patches`,
/// which turning it on needs first.
pub const EDGE_SERVES_IPV6: bool = false;

/// The gateway Service's IP families (`spec.ipFamilies`, Kubernetes's spelling).
pub const fn edge_ip_families() -> &'static [&'static str] {
    if EDGE_SERVES_IPV6 {
        &["IPv4", "IPv6"]
    } else {
        &["IPv4"]
    }
}

/// Talos's default pod subnet (`cluster.network.podSubnets`, which no patch of ours changes).
pub const POD_CIDR: Ipv4Net = Ipv4Net::new_assert(std::net::Ipv4Addr::new(10, 244, 0, 0), 16);

/// How pods on different nodes reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// Encapsulated between node addresses (Cilium `routingMode: tunnel`).
    Tunnel { protocol: TunnelProtocol, port: u16 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelProtocol {
    Vxlan,
}

impl TunnelProtocol {
    /// Cilium's `tunnelProtocol` value.
    pub fn cilium(self) -> &'static str {
        match self {
            TunnelProtocol::Vxlan => "vxlan",
        }
    }
}

/// A tunnel, not native routing: the nodes share no network but the internet (Instances in one
/// zone and an Elastic Metal server, whose private networks exist only in fr-par-2), so nothing
/// between them can route the pod CIDRs. The tunnel's port is open between node addresses only.
pub const ROUTING: Routing = Routing::Tunnel {
    protocol: TunnelProtocol::Vxlan,
    port: VXLAN,
};

/// Every port a host process of a node listens on, reachable or not (`(protocol, port)`): the
/// node-port range must hold none, or a node port would shadow it on every node. Talos v1.13.0
/// constants: apid, trustd, the API server, KubePrism (7445), etcd and its metrics (2381), the
/// kubelet and its health (10248), the controller manager (10257), the scheduler (10259), host
/// DNS (53). Cilium 1.20: health (4240), Hubble (4244), the agent's health API (`healthPort`
/// 9879), Envoy's health (`envoy.healthPort` 9878), the operator's API (9234), the agent's and
/// the operator's gops (9890, 9891), VXLAN and WireGuard. Every port the Cilium chart's
/// host-network workloads open is here (`tests/network_flows.rs` reads them out of the values);
/// the metrics ports of the agent, Envoy and the operator (9962-9965) are not, because the edge
/// turns them off: they would listen on every address, in no declared flow.
pub const HOST_PORTS: &[Traffic] = &[
    Traffic::Tcp(Ports::one(HOST_DNS)),
    Traffic::Udp(Ports::one(HOST_DNS)),
    Traffic::Tcp(ETCD),
    Traffic::Tcp(Ports::one(2381)),
    Traffic::Tcp(Ports::one(CILIUM_HEALTH)),
    Traffic::Tcp(Ports::one(HUBBLE)),
    Traffic::Tcp(Ports::one(KUBERNETES_API)),
    Traffic::Tcp(Ports::one(7445)),
    Traffic::Udp(Ports::one(VXLAN)),
    Traffic::Tcp(Ports::one(9234)),
    Traffic::Tcp(Ports::one(9878)),
    Traffic::Tcp(Ports::one(9879)),
    Traffic::Tcp(Ports::one(9890)),
    Traffic::Tcp(Ports::one(9891)),
    Traffic::Tcp(Ports::one(10248)),
    Traffic::Tcp(Ports::one(KUBELET)),
    Traffic::Tcp(Ports::one(10257)),
    Traffic::Tcp(Ports::one(10259)),
    Traffic::Tcp(Ports::one(TALOS_API)),
    Traffic::Tcp(Ports::one(TRUSTD)),
    Traffic::Udp(Ports::one(WIREGUARD)),
];

/// The flows, in the documented table's order: the public edge, the operator, then the cluster itself.
pub const FLOWS: &[Flow] = &[
    Flow {
        service: "gateway",
        from: Peer::Internet,
        to: WORKER,
        traffic: Traffic::Tcp(Ports::one(HTTP)),
        why: "the edge's HTTP listener: ACME HTTP-01 challenges, the redirect to HTTPS",
    },
    Flow {
        service: "gateway",
        from: Peer::Internet,
        to: WORKER,
        traffic: Traffic::Tcp(Ports::one(HTTPS)),
        why: "the edge",
    },
    Flow {
        service: "gateway-status",
        from: Peer::Nodes,
        to: WORKER,
        traffic: Traffic::Tcp(Ports::one(GATEWAY_STATUS_NODE_PORT)),
        why: "the gateway's readiness (Istio's status port 15021, on a pinned node port)",
    },
    Flow {
        service: "apid",
        from: Peer::Admin,
        to: BOTH,
        traffic: Traffic::Tcp(Ports::one(TALOS_API)),
        why: "talosctl",
    },
    Flow {
        service: "kube-apiserver",
        from: Peer::Admin,
        to: CONTROL_PLANES,
        traffic: Traffic::Tcp(Ports::one(KUBERNETES_API)),
        why: "kubectl and helm",
    },
    Flow {
        service: "apid",
        from: Peer::Nodes,
        to: BOTH,
        traffic: Traffic::Tcp(Ports::one(TALOS_API)),
        why: "apid forwards talosctl's calls to the node they name",
    },
    Flow {
        service: "apid",
        from: Peer::Pods,
        to: CONTROL_PLANES,
        traffic: Traffic::Tcp(Ports::one(TALOS_API)),
        why: "the etcd backup job, through the talos Service (Talos API access from Kubernetes)",
    },
    Flow {
        service: "trustd",
        from: Peer::Nodes,
        to: CONTROL_PLANES,
        traffic: Traffic::Tcp(Ports::one(TRUSTD)),
        why: "nodes fetch their certificates",
    },
    Flow {
        service: "kube-apiserver",
        from: Peer::Nodes,
        to: CONTROL_PLANES,
        traffic: Traffic::Tcp(Ports::one(KUBERNETES_API)),
        why: "kubelets and KubePrism",
    },
    Flow {
        service: "kube-apiserver",
        from: Peer::Pods,
        to: CONTROL_PLANES,
        traffic: Traffic::Tcp(Ports::one(KUBERNETES_API)),
        why: "in-cluster clients, through the kubernetes Service",
    },
    Flow {
        service: "etcd",
        from: Peer::ControlPlanes,
        to: CONTROL_PLANES,
        traffic: Traffic::Tcp(ETCD),
        why: "etcd members",
    },
    Flow {
        service: "kubelet",
        from: Peer::Nodes,
        to: BOTH,
        traffic: Traffic::Tcp(Ports::one(KUBELET)),
        why: "the API server's logs, exec and port-forward",
    },
    Flow {
        service: "cilium-vxlan",
        from: Peer::Nodes,
        to: BOTH,
        traffic: Traffic::Udp(Ports::one(VXLAN)),
        why: "pod traffic between nodes (Cilium's tunnel)",
    },
    Flow {
        service: "cilium-wireguard",
        from: Peer::Nodes,
        to: BOTH,
        traffic: Traffic::Udp(Ports::one(WIREGUARD)),
        why: "encrypted traffic between nodes",
    },
    Flow {
        service: "cilium-health",
        from: Peer::Nodes,
        to: BOTH,
        traffic: Traffic::Tcp(Ports::one(CILIUM_HEALTH)),
        why: "Cilium's health checks",
    },
    Flow {
        service: "cilium-health",
        from: Peer::Nodes,
        to: BOTH,
        traffic: Traffic::IcmpEcho,
        why: "Cilium's health checks",
    },
    Flow {
        service: "hubble",
        from: Peer::Pods,
        to: BOTH,
        traffic: Traffic::Tcp(Ports::one(HUBBLE)),
        why: "Hubble Relay reads each node's flows",
    },
    Flow {
        service: "host-dns",
        from: Peer::Pods,
        to: BOTH,
        traffic: Traffic::Udp(Ports::one(HOST_DNS)),
        why: "CoreDNS forwards to Talos's host DNS",
    },
    Flow {
        service: "host-dns",
        from: Peer::Pods,
        to: BOTH,
        traffic: Traffic::Tcp(Ports::one(HOST_DNS)),
        why: "CoreDNS forwards to Talos's host DNS",
    },
];

/// The flows that end on `role`'s nodes.
pub fn to(role: Role) -> impl Iterator<Item = &'static Flow> {
    FLOWS.iter().filter(move |flow| flow.reaches(role))
}

/// A filter rule for a filter that keeps one list of sources for a set of ports (as Talos does):
/// one service and protocol, its ports, and every peer allowed on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRule {
    pub service: &'static str,
    /// `tcp`, `udp` or `icmp` ([`Traffic::protocol`]).
    pub protocol: &'static str,
    /// Empty for ICMP.
    pub ports: Vec<Ports>,
    pub peers: Vec<Peer>,
}

/// The flows to `role` grouped by service and protocol, in declaration order. Every port of a
/// group has the same peers (a test holds the declaration to it), so a group is exact.
pub fn by_service(role: Role) -> Vec<ServiceRule> {
    let mut out: Vec<ServiceRule> = Vec::new();
    for flow in to(role) {
        let protocol = flow.traffic.protocol();
        let index = match out
            .iter()
            .position(|r| r.service == flow.service && r.protocol == protocol)
        {
            Some(index) => index,
            None => {
                out.push(ServiceRule {
                    service: flow.service,
                    protocol,
                    ports: Vec::new(),
                    peers: Vec::new(),
                });
                out.len() - 1
            }
        };
        let rule = &mut out[index];
        if let Some(ports) = flow.traffic.ports()
            && !rule.ports.contains(&ports)
        {
            rule.ports.push(ports);
        }
        if !rule.peers.contains(&flow.from) {
            rule.peers.push(flow.from);
        }
    }
    out
}

/// The flows to `role` grouped by peer, each with what it may send, in declaration order.
pub fn by_peer(role: Role) -> Vec<(Peer, Vec<Traffic>)> {
    let mut out: Vec<(Peer, Vec<Traffic>)> = Vec::new();
    for flow in to(role) {
        match out.iter_mut().find(|(peer, _)| *peer == flow.from) {
            Some((_, traffic)) => {
                if !traffic.contains(&flow.traffic) {
                    traffic.push(flow.traffic);
                }
            }
            None => out.push((flow.from, vec![flow.traffic])),
        }
    }
    out
}

/// A GitHub Markdown table: the header's cells, then one row of cells each.
pub fn markdown(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
    let header: Vec<String> = header.iter().map(|c| (*c).to_owned()).collect();
    let mut text = line(&header);
    text.push_str(&line(&vec!["---".to_owned(); header.len()]));
    for row in rows {
        text.push_str(&line(&row));
    }
    text
}

/// The documented table of the flows (docs/infrastructure.md), one row each (GitHub Markdown).
pub fn markdown_table() -> String {
    let rows = FLOWS.iter().map(|flow| {
        let to = match flow.to {
            [one] => one.to_string(),
            _ => "every node".to_owned(),
        };
        vec![
            flow.from.to_string(),
            to,
            flow.traffic.to_string(),
            flow.service.to_owned(),
            flow.why.to_owned(),
        ]
    });
    markdown(&["from", "to", "port", "what listens", "why"], rows)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_node_port_range_holds_no_host_port_and_every_gateway_node_port() {
        for host in HOST_PORTS {
            let ports = host.ports().unwrap();
            assert!(
                !NODE_PORT_RANGE.overlaps(ports),
                "{host} is inside the node-port range {NODE_PORT_RANGE}"
            );
        }
        for (port, node_port) in GATEWAY_NODE_PORTS {
            assert!(NODE_PORT_RANGE.contains(node_port), "{port} -> {node_port}");
        }
        assert_eq!(NODE_PORT_RANGE.to_string(), "80-443");
        assert_eq!(NODE_PORT_RANGE.cilium(), "80,443");
    }

    #[test]
    fn every_gateway_node_port_is_a_declared_flow_to_the_worker() {
        for (_, node_port) in GATEWAY_NODE_PORTS {
            assert!(
                to(Role::Worker).any(|f| f.traffic == Traffic::Tcp(Ports::one(node_port))),
                "node port {node_port} is not declared"
            );
        }
    }

    #[test]
    fn a_service_rule_is_exact_and_no_two_share_a_port() {
        for role in Role::ALL {
            let rules = by_service(role);
            for rule in &rules {
                // Every port of the rule is declared for every peer of the rule.
                for ports in &rule.ports {
                    for peer in &rule.peers {
                        assert!(
                            to(role).any(|f| f.service == rule.service
                                && f.from == *peer
                                && f.traffic.ports() == Some(*ports)
                                && f.traffic.protocol() == rule.protocol),
                            "{role}: {} {ports} from {peer} is not declared",
                            rule.service
                        );
                    }
                }
            }
            for (i, a) in rules.iter().enumerate() {
                for b in &rules[i + 1..] {
                    let shared = a.protocol == b.protocol
                        && a.ports
                            .iter()
                            .any(|x| b.ports.iter().any(|y| x.overlaps(*y)));
                    assert!(
                        !shared,
                        "{role}: {} and {} share a port",
                        a.service, b.service
                    );
                }
            }
            let grouped: usize = rules
                .iter()
                .map(|r| r.peers.len() * r.ports.len().max(1))
                .sum();
            assert_eq!(grouped, to(role).count(), "{role}");
            let count: usize = by_peer(role).iter().map(|(_, t)| t.len()).sum();
            assert_eq!(count, to(role).count(), "{role}");
        }
    }

    #[test]
    fn peers_stand_for_their_networks() {
        let addresses = Addresses {
            admin: vec!["198.51.100.0/24".parse().unwrap()],
            control_planes: vec!["203.0.113.11".parse().unwrap()],
            workers: vec![
                "203.0.113.10".parse().unwrap(),
                "2001:db8::10".parse().unwrap(),
            ],
        };
        let nets = |peer: Peer| -> Vec<String> {
            peer.networks(&addresses)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(nets(Peer::Internet), ["0.0.0.0/0", "::/0"]);
        assert_eq!(nets(Peer::Admin), ["198.51.100.0/24"]);
        assert_eq!(nets(Peer::ControlPlanes), ["203.0.113.11/32"]);
        assert_eq!(
            nets(Peer::Nodes),
            ["203.0.113.11/32", "203.0.113.10/32", "2001:db8::10/128"]
        );
        assert_eq!(nets(Peer::Pods), ["10.244.0.0/16"]);
    }

    #[test]
    fn the_table_has_a_row_a_flow() {
        let table = markdown_table();
        assert_eq!(table.lines().count(), 2 + FLOWS.len());
        assert!(table.contains("| nodes | every node | UDP 8472 | cilium-vxlan |"));
        assert!(table.contains("| admin CIDRs | control planes | TCP 6443 | kube-apiserver |"));
    }
}
