//! `PlatformInputs`: what the infra layer hands to the platform and edge layers.
//!
//! Written by the infra layer to `talos/_out/platform-inputs.json`; the hinge between layers, so
//! no later layer reads the infra layer's internals. Example (`config/platform-inputs.example.json`):
//!
//! ```json
//! {
//!   "kind": "PlatformInputs",
//!   "version": 3,
//!   "cluster_name": "edge-par",
//!   "cluster_endpoint": "https://api.example.com:6443",
//!   "dns_zone": "example.com",
//!   "edge_hostnames": ["edge.example.com", "www.example.com"],
//!   "edge_node_name": "edge-worker-1",
//!   "edge_public_ipv4": "203.0.113.10",
//!   "admin_cidrs": ["198.51.100.0/24"],
//!   "control_plane_addresses": ["203.0.113.11", "203.0.113.12", "203.0.113.13"],
//!   "worker_addresses": ["203.0.113.10", "2001:db8::10"]
//! }
//! ```

use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

use super::tag::{Kind, RecordKind, Version};

/// 2: the addresses the host firewall is rendered from (admin networks, nodes); 3: the edge's
/// hostnames, declared once in the infra config.
pub const PLATFORM_INPUTS_VERSION: u32 = 3;

/// The most names the edge serves: its HTTP listener's redirect route lists every one, and an
/// HTTPRoute's `spec.hostnames` holds at most 16 (Gateway API v1.4.0,
/// gateway.networking.k8s.io_httproutes.yaml, `maxItems: 16`). The infra layer refuses more,
/// before it makes their DNS records.
pub const MAX_EDGE_HOSTNAMES: usize = 16;

/// The GatewayClass of the edge's Gateway: the platform layer makes it istiod's default class
/// (istiod creates it too, and the two co-own it), the edge layer declares and uses it.
pub const EDGE_GATEWAY_CLASS: &str = "istio";

/// The facts the infra layer knows and the later layers need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformInputs {
    pub kind: Kind<PlatformInputs>,
    #[serde(deserialize_with = "version")]
    pub version: Version<PLATFORM_INPUTS_VERSION>,
    /// The cluster's name, also the tag that finds its Scaleway resources.
    pub cluster_name: String,
    /// The Kubernetes API URL (`https://api.<zone>:6443`).
    pub cluster_endpoint: String,
    /// The DNS zone every public hostname of the edge must belong to.
    pub dns_zone: String,
    /// The edge's public names, fully qualified (`www.example.com`): the infra config's
    /// `edge_hostnames` in `dns_zone`, the names the infra layer makes DNS records for. The edge
    /// layer routes and certifies exactly these.
    pub edge_hostnames: Vec<String>,
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

/// The `version` tag, refused as [`Version`] refuses it, saying what rewrites the file: only the
/// infra layer writes it, so an older file is one `make apply-infra` rewrites.
fn version<'de, D: Deserializer<'de>>(d: D) -> Result<Version<PLATFORM_INPUTS_VERSION>, D::Error> {
    let found = u32::deserialize(d)?;
    let why = match found.cmp(&PLATFORM_INPUTS_VERSION) {
        std::cmp::Ordering::Equal => return Ok(Version),
        std::cmp::Ordering::Less => {
            "an older edgepop wrote it, without the edge_hostnames it now carries: rerun \
             `make apply-infra`, which rewrites it"
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
        "kind": "PlatformInputs", "version": 3,
        "cluster_name": "edge-par", "cluster_endpoint": "https://api.example.com:6443",
        "dns_zone": "example.com", "edge_hostnames": ["www.example.com"],
        "edge_node_name": "edge-worker-1",
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
        let extra = EXAMPLE.replace("\"version\": 3,", "\"version\": 3, \"zone\": \"fr-par-1\",");
        assert!(serde_json::from_str::<PlatformInputs>(&extra).is_err());
        let missing = EXAMPLE.replace("\"dns_zone\": \"example.com\",", "");
        let err = serde_json::from_str::<PlatformInputs>(&missing).unwrap_err();
        assert!(err.to_string().contains("missing field `dns_zone`"));
        let missing = EXAMPLE.replace("\"edge_hostnames\": [\"www.example.com\"],", "");
        let err = serde_json::from_str::<PlatformInputs>(&missing).unwrap_err();
        assert!(err.to_string().contains("missing field `edge_hostnames`"));
    }

    #[test]
    fn a_file_of_another_version_is_refused_saying_what_rewrites_it() {
        // A version 2 file, as the infra layer wrote it before it carried the hostnames.
        let older = EXAMPLE
            .replace("\"version\": 3,", "\"version\": 2,")
            .replace("\"edge_hostnames\": [\"www.example.com\"],", "");
        let err = serde_json::from_str::<PlatformInputs>(&older)
            .unwrap_err()
            .to_string();
        for needle in [
            "unsupported version 2: this tool reads version 3",
            "rerun `make apply-infra`",
        ] {
            assert!(err.contains(needle), "`{needle}` not in {err}");
        }
        let newer = EXAMPLE.replace("\"version\": 3,", "\"version\": 4,");
        let err = serde_json::from_str::<PlatformInputs>(&newer)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unsupported version 4"), "{err}");
        assert!(!err.contains("apply-infra"), "{err}");
    }
}
