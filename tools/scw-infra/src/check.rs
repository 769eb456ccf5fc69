//! `check-config`: the config read as `apply` reads it, before anything exists. With
//! `--platform-inputs`, the `PlatformInputs` record this config would give the next layers, so
//! that `make check` can render the edge config against the operator's own zone and names before
//! the first apply: documentation addresses (RFC 5737's 192.0.2.0/24, RFC 3849's 2001:db8::/32)
//! and made-up server ids stand for what Scaleway assigns.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

use pop_common::input::InputError;
use pop_common::records::{Node, NodeInventory, NodeKind, NodeRole, PlatformInputs, Version};

use crate::config::InfraConfig;
use crate::outputs::{self, InventoryFile};
use crate::tags::Names;

/// The record `platform-inputs` would write once the servers of `config` exist.
pub fn placeholder_platform_inputs(
    config: &InfraConfig,
    config_path: &Path,
) -> Result<PlatformInputs, InputError> {
    let names = Names {
        config,
        project: "",
    };
    let node = |i: u8, name: String, role, kind| Node {
        name,
        role,
        kind,
        zone: config.zone.clone(),
        id: format!("00000000-0000-4000-8000-{i:012}"),
        public_ipv4: Some(Ipv4Addr::new(192, 0, 2, i)),
        public_ipv6: (role == NodeRole::Worker)
            .then(|| Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(i))),
        private_ipv4: None,
        install_disk: None,
        steps: BTreeMap::new(),
    };
    let mut nodes: Vec<Node> = (1u8..)
        .zip(names.control_planes())
        .map(|(i, name)| node(i, name, NodeRole::Controlplane, NodeKind::Instance))
        .collect();
    nodes.extend(
        (100u8..)
            .zip(config.worker_names())
            .map(|(i, name)| node(i, name.to_owned(), NodeRole::Worker, NodeKind::ElasticMetal)),
    );
    let file = InventoryFile {
        path: config_path.to_path_buf(),
        inventory: NodeInventory {
            kind: Default::default(),
            version: Version,
            cluster_name: config.cluster_name.clone(),
            cluster_endpoint: config.cluster_endpoint.clone(),
            ssh_key_ids: Vec::new(),
            nodes,
        },
    };
    outputs::platform_inputs(config, &file)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_placeholder_record_carries_the_config_and_documentation_addresses_only() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let path = root.join("config/infra.example.json");
        let mut config = InfraConfig::load(&path, Some("/nonexistent")).unwrap();
        let mut second = config.workers[0].clone();
        second.name = "edge-worker-2".into();
        config.workers.push(second);
        let record = placeholder_platform_inputs(&config, &path).unwrap();
        assert_eq!(record.cluster_name, config.cluster_name);
        assert_eq!(record.dns_zone, config.dns_zone);
        // Every worker of the config is an edge node, in the config's order.
        let edge: Vec<&str> = record.edge_nodes.iter().map(|n| n.name.as_str()).collect();
        let workers: Vec<&str> = config.worker_names().collect();
        assert_eq!(edge, workers);
        assert_eq!(edge.len(), 2);
        assert_eq!(
            record.control_plane_addresses.len(),
            config.control_plane.count as usize
        );
        let documentation = |a: &std::net::IpAddr| match a {
            std::net::IpAddr::V4(v4) => v4.octets()[..3] == [192, 0, 2],
            std::net::IpAddr::V6(v6) => v6.segments()[..2] == [0x2001, 0xdb8],
        };
        assert!(record.control_plane_addresses.iter().all(documentation));
        assert!(record.worker_addresses.iter().all(documentation));
        assert!(
            record
                .edge_nodes
                .iter()
                .all(|n| documentation(&std::net::IpAddr::V4(n.public_ipv4)))
        );
    }
}
