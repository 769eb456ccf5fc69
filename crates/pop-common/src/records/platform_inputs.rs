//! `PlatformInputs`: what the infra layer hands to the platform and edge layers.
//!
//! Written by the infra layer to `talos/_out/platform-inputs.json`; the hinge between layers, so
//! no later layer reads the infra layer's internals. Example (`config/platform-inputs.example.json`):
//!
//! ```json
//! {
//!   "kind": "PlatformInputs",
//!   "version": 4,
//!   "cluster_name": "edge-par",
//!   "cluster_endpoint": "https://api.example.com:6443",
//!   "dns_zone": "example.com",
//!   "edge_hostnames": ["edge.example.com", "www.example.com"],
//!   "edge_nodes": [
//!     {"name": "edge-worker-1", "public_ipv4": "203.0.113.10"},
//!     {"name": "edge-worker-2", "public_ipv4": "203.0.113.20"}
//!   ],
//!   "admin_cidrs": ["198.51.100.0/24"],
//!   "control_plane_addresses": ["203.0.113.11", "203.0.113.12", "203.0.113.13"],
//!   "worker_addresses": ["203.0.113.10", "2001:db8::10", "203.0.113.20"]
//! }
//! ```

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

use super::tag::Version;

/// 2: the addresses the host firewall is rendered from (admin networks, nodes); 3: the edge's
/// hostnames, declared once in the infra config; 4: every worker as an edge node, where 3 had
/// one.
pub const PLATFORM_INPUTS_VERSION: u32 = 4;

/// The most names the edge serves: its HTTP listener's redirect route lists every one, and an
/// HTTPRoute's `spec.hostnames` holds at most 16 (Gateway API v1.4.0,
/// gateway.networking.k8s.io_httproutes.yaml, `maxItems: 16`). The infra layer refuses more,
/// before it makes their DNS records.
pub const MAX_EDGE_HOSTNAMES: usize = 16;

/// The GatewayClass of the edge's Gateway: the platform layer makes it istiod's default class
/// (istiod creates it too, and the two co-own it), the edge layer declares and uses it.
pub const EDGE_GATEWAY_CLASS: &str = "istio";

/// The node label, and its value, of every node that takes the edge's public traffic: the infra
/// layer sets it on each worker (`talos/patches/70-edge-worker.worker.yaml`, a test holds the
/// two equal) and the edge layer places its gateway by it, so a worker added to the infra config
/// gets a gateway with no edge config of its own. Under `node.kubernetes.io/`, a prefix the
/// NodeRestriction admission plugin lets a kubelet set on its own node.
pub const EDGE_NODE_LABEL: (&str, &str) = ("edge.node.kubernetes.io/public", "true");

crate::record! {
    /// The facts the infra layer knows and the later layers need.
    pub struct PlatformInputs,
        #[serde(deserialize_with = "version")]
        version PLATFORM_INPUTS_VERSION
    {
        /// The cluster's name, also the tag that finds its Scaleway resources.
        pub cluster_name: String,
        /// The Kubernetes API URL (`https://api.<zone>:6443`).
        pub cluster_endpoint: String,
        /// The DNS zone every public hostname of the edge must belong to.
        pub dns_zone: String,
        /// The edge's public names, fully qualified (`www.example.com`): the infra config's
        /// `edge_hostnames` in `dns_zone`, the names the infra layer makes DNS records for. The
        /// edge layer routes and certifies exactly these.
        pub edge_hostnames: Vec<String>,
        /// The Elastic Metal workers that receive the public traffic, in the inventory's order: at
        /// least one, each name once. The edge hostnames' A records hold every one's address.
        #[serde(deserialize_with = "edge_nodes")]
        pub edge_nodes: Vec<EdgeNode>,
        /// Who may reach the Talos and Kubernetes APIs (the infra config's `admin_cidrs`).
        pub admin_cidrs: Vec<IpNet>,
        /// The control planes' public addresses: what the host firewall knows as control planes.
        pub control_plane_addresses: Vec<IpAddr>,
        /// The workers' public addresses (IPv4, and IPv6 when the server has one).
        pub worker_addresses: Vec<IpAddr>,
    }
}

/// One node that receives the edge's public traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeNode {
    /// Its Kubernetes node name (the worker's name in the infra config, its Talos hostname).
    pub name: String,
    /// Its public IPv4: one of the addresses the edge hostnames' A records point at.
    pub public_ipv4: Ipv4Addr,
}

/// The edge nodes, refused when there is none (no gateway would run, every name would lead
/// nowhere) or when a name comes twice (two entries for one node).
fn edge_nodes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<EdgeNode>, D::Error> {
    let nodes = Vec::<EdgeNode>::deserialize(d)?;
    if nodes.is_empty() {
        return Err(de::Error::custom(
            "is empty: the edge needs at least one node to receive its traffic",
        ));
    }
    let mut seen = BTreeSet::new();
    for node in &nodes {
        if !seen.insert(node.name.as_str()) {
            return Err(de::Error::custom(format!(
                "names the node `{}` twice: each edge node is listed once",
                node.name
            )));
        }
    }
    Ok(nodes)
}

/// The `version` tag, refused as [`Version`] refuses it, saying what rewrites the file: only the
/// infra layer writes it, so an older file is one `make apply-infra` rewrites.
fn version<'de, D: Deserializer<'de>>(d: D) -> Result<Version<PLATFORM_INPUTS_VERSION>, D::Error> {
    let found = u32::deserialize(d)?;
    let why = match found.cmp(&PLATFORM_INPUTS_VERSION) {
        std::cmp::Ordering::Equal => return Ok(Version),
        std::cmp::Ordering::Less => {
            "an older edgepop wrote it, without the edge_nodes (every worker) it now carries: \
             rerun `make apply-infra`, which rewrites it"
        }
        std::cmp::Ordering::Greater => "a newer edgepop wrote it: update this checkout",
    };
    Err(de::Error::custom(format!(
        "unsupported version {found}: this tool reads version {PLATFORM_INPUTS_VERSION}; {why}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{
        "kind": "PlatformInputs", "version": 4,
        "cluster_name": "edge-par", "cluster_endpoint": "https://api.example.com:6443",
        "dns_zone": "example.com", "edge_hostnames": ["www.example.com"],
        "edge_nodes": [{"name": "edge-worker-1", "public_ipv4": "203.0.113.10"},
                       {"name": "edge-worker-2", "public_ipv4": "203.0.113.20"}],
        "admin_cidrs": ["198.51.100.0/24"],
        "control_plane_addresses": ["203.0.113.11"],
        "worker_addresses": ["203.0.113.10", "2001:db8::10", "203.0.113.20"]
    }"#;

    const NODES: &str = r#""edge_nodes": [{"name": "edge-worker-1", "public_ipv4": "203.0.113.10"},
                       {"name": "edge-worker-2", "public_ipv4": "203.0.113.20"}],"#;

    fn refusal(text: &str) -> String {
        crate::input::decode_json::<PlatformInputs>(
            std::path::Path::new("platform-inputs.json"),
            text.as_bytes(),
        )
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn the_documented_example_reads_and_writes_back_the_same() {
        let inputs: PlatformInputs = serde_json::from_str(EXAMPLE).unwrap();
        let nodes: Vec<(&str, Ipv4Addr)> = inputs
            .edge_nodes
            .iter()
            .map(|n| (n.name.as_str(), n.public_ipv4))
            .collect();
        assert_eq!(
            nodes,
            [
                ("edge-worker-1", Ipv4Addr::new(203, 0, 113, 10)),
                ("edge-worker-2", Ipv4Addr::new(203, 0, 113, 20)),
            ]
        );
        let again: PlatformInputs =
            serde_json::from_str(&serde_json::to_string(&inputs).unwrap()).unwrap();
        assert_eq!(inputs, again);
    }

    #[test]
    fn the_module_documentation_shows_the_record_as_it_is_read() {
        let doc: String = include_str!("platform_inputs.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let json = doc
            .split("```json")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .unwrap();
        let documented: PlatformInputs = serde_json::from_str(json).unwrap();
        assert_eq!(documented.edge_nodes.len(), 2);
    }

    #[test]
    fn unknown_fields_and_missing_fields_are_refused() {
        let extra = EXAMPLE.replace("\"version\": 4,", "\"version\": 4, \"zone\": \"fr-par-1\",");
        assert!(serde_json::from_str::<PlatformInputs>(&extra).is_err());
        let missing = EXAMPLE.replace("\"dns_zone\": \"example.com\",", "");
        let err = serde_json::from_str::<PlatformInputs>(&missing).unwrap_err();
        assert!(err.to_string().contains("missing field `dns_zone`"));
        let missing = EXAMPLE.replace("\"edge_hostnames\": [\"www.example.com\"],", "");
        let err = serde_json::from_str::<PlatformInputs>(&missing).unwrap_err();
        assert!(err.to_string().contains("missing field `edge_hostnames`"));
        let missing = EXAMPLE.replace(NODES, "");
        assert_ne!(missing, EXAMPLE);
        let err = serde_json::from_str::<PlatformInputs>(&missing).unwrap_err();
        assert!(err.to_string().contains("missing field `edge_nodes`"));
        let extra = EXAMPLE.replace(
            "\"public_ipv4\": \"203.0.113.20\"}",
            "\"public_ipv4\": \"203.0.113.20\", \"zone\": \"fr-par-2\"}",
        );
        let err = refusal(&extra);
        assert!(
            err.contains("edge_nodes[1]") && err.contains("zone"),
            "{err}"
        );
    }

    #[test]
    fn no_edge_node_or_one_named_twice_is_refused_naming_the_field() {
        let none = EXAMPLE.replace(NODES, "\"edge_nodes\": [],");
        let twice = EXAMPLE.replace("edge-worker-2", "edge-worker-1");
        let not_ipv4 = EXAMPLE.replace("203.0.113.20\"}", "2001:db8::20\"}");
        for (text, said) in [
            (none, "at least one node"),
            (twice, "names the node `edge-worker-1` twice"),
            (not_ipv4, "invalid IPv4 address syntax"),
        ] {
            assert_ne!(text, EXAMPLE);
            let err = refusal(&text);
            for needle in ["platform-inputs.json", "edge_nodes", said] {
                assert!(err.contains(needle), "`{needle}` not in {err}");
            }
        }
    }

    #[test]
    fn a_file_of_another_version_is_refused_saying_what_rewrites_it() {
        // A version 3 file, as the infra layer wrote it with its one edge node.
        let older = EXAMPLE
            .replace("\"version\": 4,", "\"version\": 3,")
            .replace(
                NODES,
                "\"edge_node_name\": \"edge-worker-1\", \"edge_public_ipv4\": \"203.0.113.10\",",
            );
        let err = serde_json::from_str::<PlatformInputs>(&older)
            .unwrap_err()
            .to_string();
        for needle in [
            "unsupported version 3: this tool reads version 4",
            "edge_nodes",
            "rerun `make apply-infra`",
        ] {
            assert!(err.contains(needle), "`{needle}` not in {err}");
        }
        let newer = EXAMPLE.replace("\"version\": 4,", "\"version\": 5,");
        let err = serde_json::from_str::<PlatformInputs>(&newer)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unsupported version 5"), "{err}");
        assert!(!err.contains("apply-infra"), "{err}");
    }
}
