//! What the infra pipeline (`pipelines/infra.sh`) needs from the config and the inventory, made
//! here so that no script reads or builds a record: `names` prints the values the script uses as
//! `KEY=value` lines, `platform-inputs` writes the `PlatformInputs` record the next layers read.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use pop_common::input::InputError;
use pop_common::records::{EdgeNode, NodeInventory, NodeRole, PlatformInputs, Version};

use crate::config::InfraConfig;
use crate::talos;

/// An inventory read from a file, with the file's name for errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryFile {
    pub path: PathBuf,
    pub inventory: NodeInventory,
}

impl InventoryFile {
    /// Reads the inventory at `path` and checks that it is the cluster of `config` (read from
    /// `config_path`): an inventory that another cluster left in the same output folder would
    /// otherwise lend its nodes to this cluster's commands (the bootstrap, the platform inputs).
    pub fn read_for(
        path: &Path,
        config: &InfraConfig,
        config_path: &Path,
    ) -> Result<InventoryFile, InputError> {
        let inventory: NodeInventory = pop_common::input::read_json(path)?;
        for (field, theirs, ours) in [
            (
                "cluster_name",
                &inventory.cluster_name,
                &config.cluster_name,
            ),
            (
                "cluster_endpoint",
                &inventory.cluster_endpoint,
                &config.cluster_endpoint,
            ),
        ] {
            if theirs != ours {
                return Err(InputError::field(
                    path,
                    field,
                    format!(
                        "`{theirs}`, where {} says `{ours}`: the inventory of another cluster (each cluster has its own output folder)",
                        config_path.display()
                    ),
                ));
            }
        }
        Ok(InventoryFile {
            path: path.to_path_buf(),
            inventory,
        })
    }
}

/// The `KEY=value` pairs of `scw-infra names`, in order: the cluster's name and endpoint, the
/// endpoint's host (for the certificate SANs), the workers' names (comma separated: each gets
/// its own machine config; each one's install disk goes into its config and the inventory), the
/// Image Factory schematic their offers need (checked against the pin) and its installer, the
/// control planes' installer, the SSH private key, the DNS records' TTL;
/// with an inventory, the public IPv4 of the first control plane (where etcd is bootstrapped)
/// and of every control plane (comma separated: where etcd is looked for).
pub fn names(
    config: &InfraConfig,
    config_path: &Path,
    inventory: Option<&InventoryFile>,
) -> Result<Vec<(&'static str, String)>, InputError> {
    let schematic = talos::worker_schematic(config, config_path, &talos::PINS)?;
    let mut pairs = vec![
        ("CLUSTER_NAME", config.cluster_name.clone()),
        ("CLUSTER_ENDPOINT", config.cluster_endpoint.clone()),
        ("API_HOST", config.api_host()),
        // Host names (checked in the config): no comma in them.
        (
            "WORKER_NAMES",
            config.worker_names().collect::<Vec<_>>().join(","),
        ),
        (
            "WORKER_INSTALLER_IMAGE",
            talos::metal_installer(&talos::PINS, &schematic)?,
        ),
        ("WORKER_SCHEMATIC", schematic),
        (
            "CONTROL_PLANE_INSTALLER_IMAGE",
            talos::scaleway_installer(&talos::PINS)?,
        ),
        ("SSH_PRIVATE_KEY", config.ssh_private_key_path.clone()),
    ];
    // How long resolvers may keep a record (`make remove-worker` waits that long before the
    // drain).
    pairs.push(("DNS_TTL", crate::apply::dns::TTL.to_string()));
    // One pair a line: a value with a line break would read as another pair.
    for (key, value) in &pairs {
        if value.contains(['\n', '\r']) {
            return Err(InputError::field(
                config_path,
                key.to_ascii_lowercase(),
                "holds a line break",
            ));
        }
    }
    if let Some(file) = inventory {
        let first = file
            .inventory
            .first_control_plane()
            .and_then(|n| n.public_ipv4)
            .ok_or_else(|| {
                InputError::field(&file.path, "nodes", "no control plane with a public_ipv4")
            })?;
        pairs.push(("FIRST_CONTROL_PLANE", first.to_string()));
        let control_planes: Vec<String> = file
            .inventory
            .nodes
            .iter()
            .filter(|n| n.role == NodeRole::Controlplane)
            .filter_map(|n| n.public_ipv4.map(|a| a.to_string()))
            .collect();
        pairs.push(("CONTROL_PLANE_ADDRESSES", control_planes.join(",")));
    }
    Ok(pairs)
}

/// The record the platform and edge layers read: the cluster from the inventory, the DNS zone,
/// the edge's names (fully qualified, as the DNS step makes their records) and the admin
/// networks from the config, the edge nodes from the inventory's Elastic Metal workers (every
/// one: the edge names point at all of them), and every node's public addresses (what the host
/// firewall knows as nodes).
pub fn platform_inputs(
    config: &InfraConfig,
    file: &InventoryFile,
) -> Result<PlatformInputs, InputError> {
    let inventory = &file.inventory;
    let edge_nodes = inventory
        .edge_workers()
        .map(|worker| match worker.public_ipv4 {
            Some(public_ipv4) => Ok(EdgeNode {
                name: worker.name.clone(),
                public_ipv4,
            }),
            None => Err(InputError::field(
                &file.path,
                "nodes",
                format!(
                    "the Elastic Metal worker `{}` has no public_ipv4: the edge names point at it",
                    worker.name
                ),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if edge_nodes.is_empty() {
        return Err(InputError::field(
            &file.path,
            "nodes",
            "no Elastic Metal worker: the edge needs at least one",
        ));
    }
    Ok(PlatformInputs {
        kind: Default::default(),
        version: Version,
        cluster_name: inventory.cluster_name.clone(),
        cluster_endpoint: inventory.cluster_endpoint.clone(),
        dns_zone: config.dns_zone.clone(),
        edge_hostnames: config.edge_fqdns(),
        edge_nodes,
        admin_cidrs: config.admin_cidrs.clone(),
        control_plane_addresses: public_addresses(inventory, NodeRole::Controlplane),
        worker_addresses: public_addresses(inventory, NodeRole::Worker),
    })
}

/// The public addresses of the nodes of one role, IPv4 then IPv6, in inventory order.
fn public_addresses(inventory: &NodeInventory, role: NodeRole) -> Vec<IpAddr> {
    inventory
        .nodes
        .iter()
        .filter(|node| node.role == role)
        .flat_map(|node| {
            let v4 = node.public_ipv4.map(IpAddr::V4);
            let v6 = node.public_ipv6.map(IpAddr::V6);
            v4.into_iter().chain(v6)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn the_platform_inputs_carry_the_edge_hostnames_fully_qualified() {
        let dir = tempfile::tempdir().unwrap();
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/infra.example.json");
        let mut config = InfraConfig::load(&example, Some("/home/me")).unwrap();
        config.edge_hostnames = vec!["www".into(), "@".into()];
        let path = dir.path().join("inventory.json");
        let inventory = serde_json::json!({
            "kind": "NodeInventory", "version": 2, "cluster_name": config.cluster_name,
            "cluster_endpoint": config.cluster_endpoint, "ssh_key_ids": [],
            "nodes": [{"name": "edge-worker-1", "role": "worker", "kind": "elastic-metal",
                       "zone": "fr-par-1", "id": "22222222-2222-4222-8222-222222222222",
                       "public_ipv4": "203.0.113.10", "public_ipv6": null,
                       "private_ipv4": null, "steps": {}}]
        });
        std::fs::write(&path, inventory.to_string()).unwrap();
        let file = InventoryFile::read_for(&path, &config, &example).unwrap();
        let inputs = platform_inputs(&config, &file).unwrap();
        assert_eq!(inputs.edge_hostnames, ["www.example.com", "example.com"]);
    }

    /// An inventory of `config`'s cluster holding `nodes`, written in `dir`.
    fn inventory_of(
        dir: &Path,
        config: &InfraConfig,
        config_path: &Path,
        nodes: serde_json::Value,
    ) -> InventoryFile {
        let path = dir.join("inventory.json");
        let inventory = serde_json::json!({
            "kind": "NodeInventory", "version": 2, "cluster_name": config.cluster_name,
            "cluster_endpoint": config.cluster_endpoint, "ssh_key_ids": [], "nodes": nodes,
        });
        std::fs::write(&path, inventory.to_string()).unwrap();
        InventoryFile::read_for(&path, config, config_path).unwrap()
    }

    fn node(name: &str, role: &str, kind: &str, ipv4: Option<&str>, id: u8) -> serde_json::Value {
        serde_json::json!({"name": name, "role": role, "kind": kind, "zone": "fr-par-1",
            "id": format!("22222222-2222-4222-8222-{id:012}"), "public_ipv4": ipv4,
            "public_ipv6": null, "private_ipv4": null, "steps": {}})
    }

    #[test]
    fn every_elastic_metal_worker_is_an_edge_node_in_inventory_order() {
        let dir = tempfile::tempdir().unwrap();
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/infra.example.json");
        let config = InfraConfig::load(&example, Some("/home/me")).unwrap();
        let nodes = serde_json::json!([
            node(
                "edge-par-cp-1",
                "controlplane",
                "instance",
                Some("203.0.113.11"),
                1
            ),
            node(
                "edge-worker-2",
                "worker",
                "elastic-metal",
                Some("203.0.113.20"),
                2
            ),
            node(
                "edge-worker-1",
                "worker",
                "elastic-metal",
                Some("203.0.113.10"),
                3
            ),
        ]);
        let file = inventory_of(dir.path(), &config, &example, nodes);
        let inputs = platform_inputs(&config, &file).unwrap();
        let edge: Vec<(&str, String)> = inputs
            .edge_nodes
            .iter()
            .map(|n| (n.name.as_str(), n.public_ipv4.to_string()))
            .collect();
        assert_eq!(
            edge,
            [
                ("edge-worker-2", "203.0.113.20".to_owned()),
                ("edge-worker-1", "203.0.113.10".to_owned())
            ]
        );
        let workers: Vec<String> = inputs
            .worker_addresses
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(workers, ["203.0.113.20", "203.0.113.10"]);
        // What is written reads back as the next layers read it.
        let text = serde_json::to_string(&inputs).unwrap();
        let again: PlatformInputs = serde_json::from_str(&text).unwrap();
        assert_eq!(again, inputs);
    }

    #[test]
    fn no_worker_or_a_worker_without_an_ipv4_is_refused_naming_the_inventory() {
        let dir = tempfile::tempdir().unwrap();
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/infra.example.json");
        let config = InfraConfig::load(&example, Some("/home/me")).unwrap();
        let control_plane = node(
            "edge-par-cp-1",
            "controlplane",
            "instance",
            Some("203.0.113.11"),
            1,
        );
        for (nodes, said) in [
            (
                serde_json::json!([control_plane.clone()]),
                "no Elastic Metal worker",
            ),
            (
                serde_json::json!([
                    control_plane,
                    node(
                        "edge-worker-1",
                        "worker",
                        "elastic-metal",
                        Some("203.0.113.10"),
                        2
                    ),
                    node("edge-worker-2", "worker", "elastic-metal", None, 3),
                ]),
                "`edge-worker-2` has no public_ipv4",
            ),
        ] {
            let file = inventory_of(dir.path(), &config, &example, nodes);
            let err = platform_inputs(&config, &file).unwrap_err().to_string();
            testkit::process::assert_says_all(
                &err,
                &[file.path.display().to_string(), "nodes".into(), said.into()],
            );
        }
    }

    #[test]
    fn an_inventory_of_another_cluster_is_refused_naming_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/infra.example.json");
        let config = InfraConfig::load(&example, Some("/home/me")).unwrap();
        let inventory = |name: &str, endpoint: &str| {
            let path = dir.path().join(format!("{name}.json"));
            let text = serde_json::json!({
                "kind": "NodeInventory", "version": 2, "cluster_name": name,
                "cluster_endpoint": endpoint, "ssh_key_ids": [], "nodes": []
            });
            std::fs::write(&path, text.to_string()).unwrap();
            path
        };
        let ours = inventory(&config.cluster_name, &config.cluster_endpoint);
        let file = InventoryFile::read_for(&ours, &config, &example).unwrap();
        assert_eq!(file.inventory.cluster_name, config.cluster_name);
        for (path, field) in [
            (inventory("other", &config.cluster_endpoint), "cluster_name"),
            (
                inventory(&config.cluster_name, "https://api.other.example:6443"),
                "cluster_endpoint",
            ),
        ] {
            let err = InventoryFile::read_for(&path, &config, &example)
                .unwrap_err()
                .to_string();
            testkit::process::assert_says_all(
                &err,
                &[
                    path.display().to_string(),
                    example.display().to_string(),
                    format!("field `{field}`"),
                ],
            );
        }
    }
}
