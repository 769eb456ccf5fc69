//! `PlatformInputs`: what the infra layer hands to the platform and edge layers.
//!
//! Written by the infra layer to `talos/_out/platform-inputs.json`; the hinge between layers, so
//! no later layer reads the infra layer's internals. Example (`config/platform-inputs.example.json`):
//!
//! ```json
//! {
//!   "kind": "PlatformInputs",
//!   "version": 2,
//!   "cluster_name": "edge-par",
//!   "cluster_endpoint": "https://api.example.com:6443",
//!   "dns_zone": "example.com",
//!   "edge_node_name": "edge-worker-1",
//!   "edge_public_ipv4": "203.0.113.10",
//!   "admin_cidrs": ["198.51.100.0/24"],
//!   "control_plane_addresses": ["203.0.113.11", "203.0.113.12", "203.0.113.13"],
//!   "worker_addresses": ["203.0.113.10", "2001:db8::10"]
//! }
//! ```

use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::tag::{Kind, RecordKind, Version};

/// 2: the addresses the host firewall is rendered from (admin networks, nodes).
pub const PLATFORM_INPUTS_VERSION: u32 = 2;

/// The GatewayClass of the edge's Gateway: the platform layer makes it istiod's default class
/// (istiod creates it too, and the two co-own it), the edge layer declares and uses it.
pub const EDGE_GATEWAY_CLASS: &str = "istio";

/// The facts the infra layer knows and the later layers need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformInputs {
    pub kind: Kind<PlatformInputs>,
    pub version: Version<PLATFORM_INPUTS_VERSION>,
    /// The cluster's name, also the tag that finds its Scaleway resources.
    pub cluster_name: String,
    /// The Kubernetes API URL (`https://api.<zone>:6443`).
    pub cluster_endpoint: String,
    /// The DNS zone every public hostname of the edge must belong to.
    pub dns_zone: String,
    /// The Kubernetes node name of the Elastic Metal worker that receives public traffic.
    pub edge_node_name: String,
    /// The worker's public IPv4: where the edge hostnames' A records point.
    pub edge_public_ipv4: Ipv4Addr,
    /// Who may reach the Talos and Kubernetes APIs (the infra config's `admin_cidrs`).
    pub admin_cidrs: Vec<IpNet>,
    /// The control planes' public addresses: what the host firewall knows as control planes.
    pub control_plane_addresses: Vec<IpAddr>,
    /// The workers' public addresses (IPv4, and IPv6 when the server has one).
    pub worker_addresses: Vec<IpAddr>,
}

impl RecordKind for PlatformInputs {
    const KIND: &'static str = "PlatformInputs";
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{
        "kind": "PlatformInputs", "version": 2,
        "cluster_name": "edge-par", "cluster_endpoint": "https://api.example.com:6443",
        "dns_zone": "example.com", "edge_node_name": "edge-worker-1",
        "edge_public_ipv4": "203.0.113.10", "admin_cidrs": ["198.51.100.0/24"],
        "control_plane_addresses": ["203.0.113.11"],
        "worker_addresses": ["203.0.113.10", "2001:db8::10"]
    }"#;

    #[test]
    fn the_documented_example_reads_and_writes_back_the_same() {
        let inputs: PlatformInputs = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(inputs.edge_public_ipv4, Ipv4Addr::new(203, 0, 113, 10));
        let again: PlatformInputs =
            serde_json::from_str(&serde_json::to_string(&inputs).unwrap()).unwrap();
        assert_eq!(inputs, again);
    }

    #[test]
    fn unknown_fields_and_missing_fields_are_refused() {
        let extra = EXAMPLE.replace("\"version\": 2,", "\"version\": 2, \"zone\": \"fr-par-1\",");
        assert!(serde_json::from_str::<PlatformInputs>(&extra).is_err());
        let missing = EXAMPLE.replace("\"dns_zone\": \"example.com\",", "");
        let err = serde_json::from_str::<PlatformInputs>(&missing).unwrap_err();
        assert!(err.to_string().contains("missing field `dns_zone`"));
    }
}
