//! The worker's public addresses port by port: what listens there and who may reach it while the
//! host firewall audits and once it enforces, made of the declared flows and of where each layer
//! holds a port. The table of docs/infrastructure.md is [`markdown_table`], checked by a test.
//!
//! Where a port is held, on the worker (no security group in front of it):
//!
//! - a node port (the gateway's, [`GATEWAY_NODE_PORTS`]) is served by Cilium's BPF program on the
//!   device, before Talos's nftables and before any host policy: only the gateway pods' own
//!   policy holds it, and while auditing that policy only logs;
//! - any other declared port has a Talos rule, which drops what comes from outside its networks
//!   even while Talos accepts by default (siderolabs/talos v1.13.9
//!   internal/app/machined/pkg/controllers/network/nftables_chain_config.go), then Cilium's host
//!   policy, which drops only once enforcing;
//! - ICMP echo has no Talos rule (Talos takes ports): accepted while auditing, held by the host
//!   policy once enforcing (and Talos, blocking, answers 5 a second);
//! - every other port: nothing listens (every host-network listener of the charts is a declared
//!   flow or bound to loopback, `tests/network_flows.rs`), and once enforcing both drop;
//! - IPv6: see [`EDGE_SERVES_IPV6`].

use crate::{
    EDGE_SERVES_IPV6, FLOWS, GATEWAY_NODE_PORTS, Peer, Ports, Role, Traffic, to as flows_to,
};

/// One row: a port of the worker's public addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicPort {
    /// `IPv4` or `IPv6`.
    pub family: &'static str,
    /// `None` for every port the other rows leave out.
    pub traffic: Option<Traffic>,
    pub listens: String,
    /// Who may reach it while auditing (`cilium.policy_audit_mode: true`, as shipped).
    pub audit: String,
    /// Who may reach it once enforcing.
    pub enforce: String,
}

/// Whether `traffic` is one of the gateway's node ports.
pub fn is_node_port(traffic: Traffic) -> bool {
    GATEWAY_NODE_PORTS
        .iter()
        .any(|(_, node_port)| traffic == Traffic::Tcp(Ports::one(*node_port)))
}

/// The peers of the flows to the worker carrying `traffic`, in declaration order.
pub fn worker_peers(traffic: Traffic) -> Vec<Peer> {
    let mut peers = Vec::new();
    for flow in flows_to(Role::Worker).filter(|f| f.traffic == traffic) {
        if !peers.contains(&flow.from) {
            peers.push(flow.from);
        }
    }
    peers
}

fn names(peers: &[Peer]) -> String {
    peers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" and ")
}

/// One row of a declared port.
fn declared_row(traffic: Traffic) -> PublicPort {
    let peers = worker_peers(traffic);
    let service = flows_to(Role::Worker)
        .find(|f| f.traffic == traffic)
        .map_or("", |f| f.service);
    let declared = names(&peers);
    let (listens, audit, enforce) = if is_node_port(traffic) {
        let audit = if peers == [Peer::Internet] {
            "internet".to_owned()
        } else {
            "internet (the gateway's policy only logs)".to_owned()
        };
        (
            format!("{service} (a node port: Cilium serves it before any host firewall)"),
            audit,
            format!("{declared} (the gateway's policy)"),
        )
    } else if traffic == Traffic::IcmpEcho {
        (
            "the kernel".to_owned(),
            "internet".to_owned(),
            format!("{declared} (Cilium's host policy; Talos answers 5 a second)"),
        )
    } else {
        (
            service.to_owned(),
            format!("{declared} (Talos's rule drops the rest on this port)"),
            format!("{declared} (Talos and Cilium's host policy)"),
        )
    };
    PublicPort {
        family: "IPv4",
        traffic: Some(traffic),
        listens,
        audit,
        enforce,
    }
}

/// Every row, declared ports first in the declaration's order, then the rest, then IPv6.
pub fn worker_public_ports() -> Vec<PublicPort> {
    let mut seen: Vec<Traffic> = Vec::new();
    for flow in FLOWS.iter().filter(|f| f.reaches(Role::Worker)) {
        if !seen.contains(&flow.traffic) {
            seen.push(flow.traffic);
        }
    }
    let mut rows: Vec<PublicPort> = seen.into_iter().map(declared_row).collect();
    rows.push(PublicPort {
        family: "IPv4",
        traffic: None,
        listens: "nothing (a host listener is a declared flow or on loopback)".to_owned(),
        audit: "internet; nothing answers".to_owned(),
        enforce: "nobody (Talos and Cilium drop it)".to_owned(),
    });
    let ipv6 = if EDGE_SERVES_IPV6 {
        PublicPort {
            family: "IPv6",
            traffic: None,
            listens: "as IPv4".to_owned(),
            audit: "as IPv4".to_owned(),
            enforce: "as IPv4".to_owned(),
        }
    } else {
        PublicPort {
            family: "IPv6",
            traffic: None,
            listens: "nothing: the edge serves IPv4 only, and its names have no AAAA record"
                .to_owned(),
            audit: "nobody (Cilium, IPv4 only, drops every IPv6 frame)".to_owned(),
            enforce: "nobody (Cilium, IPv4 only, drops every IPv6 frame)".to_owned(),
        }
    };
    rows.push(ipv6);
    rows
}

/// The table of [`worker_public_ports`] (GitHub Markdown).
pub fn markdown_table() -> String {
    let rows = worker_public_ports().into_iter().map(|row| {
        let port = match (row.traffic, row.family) {
            (Some(traffic), _) => traffic.to_string(),
            (None, "IPv6") => "every port".to_owned(),
            (None, _) => "any other port".to_owned(),
        };
        vec![
            row.family.to_owned(),
            port,
            row.listens,
            row.audit,
            row.enforce,
        ]
    });
    crate::markdown(
        &[
            "address",
            "port",
            "what listens",
            "audit mode (as shipped)",
            "enforce mode",
        ],
        rows,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_status_node_port_is_public_while_auditing_and_the_edge_ports_always() {
        let rows = worker_public_ports();
        let row = |port: u16| {
            rows.iter()
                .find(|r| r.traffic == Some(Traffic::Tcp(Ports::one(port))))
                .cloned()
        };
        let status = row(crate::GATEWAY_STATUS_NODE_PORT).unwrap();
        assert!(status.audit.starts_with("internet"), "{status:?}");
        assert!(status.enforce.starts_with("nodes"), "{status:?}");
        let https = row(crate::HTTPS).unwrap();
        assert_eq!(https.audit, "internet");
        assert!(https.enforce.starts_with("internet"));
        let kubelet = row(crate::KUBELET).unwrap();
        assert!(kubelet.audit.starts_with("nodes"), "{kubelet:?}");
        assert_eq!(rows.iter().filter(|r| r.family == "IPv6").count(), 1);
        assert_eq!(markdown_table().lines().count(), 2 + rows.len());
    }
}
