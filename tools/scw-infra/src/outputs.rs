//! What the infra pipeline (`pipelines/infra.sh`) needs from the config and the inventory, made
//! here so that no script reads or builds a record: `names` prints the values the script uses as
//! `KEY=value` lines, `platform-inputs` writes the `PlatformInputs` record the next layers read.

use std::path::{Path, PathBuf};

use pop_common::input::InputError;
use pop_common::records::{NodeInventory, NodeRole, PlatformInputs, Version};

use crate::config::InfraConfig;
use crate::talos;

/// An inventory read from a file, with the file's name for errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryFile {
    pub path: PathBuf,
    pub inventory: NodeInventory,
}

impl InventoryFile {
    pub fn read(path: &Path) -> Result<InventoryFile, InputError> {
        Ok(InventoryFile {
            path: path.to_path_buf(),
            inventory: pop_common::input::read_json(path)?,
        })
    }
}

/// The `KEY=value` pairs of `scw-infra names`, in order: the cluster's name and endpoint, the
/// endpoint's host, the worker's install disk and name (its Kubernetes node name), the Image
/// Factory schematic its offer needs (checked against the pin) and its installer, the SSH
/// private key; with an inventory, the public IPv4 of the first control plane (where etcd is
/// bootstrapped) and of every control plane (space-separated: where etcd is looked for).
pub fn names(
    config: &InfraConfig,
    config_path: &Path,
    inventory: Option<&InventoryFile>,
) -> Result<Vec<(&'static str, String)>, InputError> {
    let schematic = talos::worker_schematic(config, config_path, &talos::PINS)?;
    let mut pairs = vec![
        ("CLUSTER_NAME", config.cluster_name.clone()),
        ("CLUSTER_ENDPOINT", config.cluster_endpoint.clone()),
        (
            "API_HOST",
            format!("{}.{}", config.api_hostname, config.dns_zone),
        ),
        ("INSTALL_DISK", config.worker.install_disk.clone()),
        ("WORKER_NAME", config.worker.name.clone()),
        (
            "WORKER_INSTALLER_IMAGE",
            talos::metal_installer(&talos::PINS, &schematic)?,
        ),
        ("WORKER_SCHEMATIC", schematic),
        ("SSH_PRIVATE_KEY", config.ssh_private_key_path.clone()),
    ];
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
        let all: Vec<String> = file
            .inventory
            .nodes
            .iter()
            .filter(|n| n.role == NodeRole::Controlplane)
            .filter_map(|n| n.public_ipv4.map(|ip| ip.to_string()))
            .collect();
        pairs.push(("CONTROL_PLANES", all.join(" ")));
    }
    Ok(pairs)
}

/// The record the platform and edge layers read: the cluster from the inventory, the DNS zone
/// from the config, the edge node from the inventory's Elastic Metal worker.
pub fn platform_inputs(
    config: &InfraConfig,
    file: &InventoryFile,
) -> Result<PlatformInputs, InputError> {
    let inventory = &file.inventory;
    let (worker, ipv4) = inventory
        .edge_worker()
        .and_then(|w| Some((w, w.public_ipv4?)))
        .ok_or_else(|| {
            InputError::field(
                &file.path,
                "nodes",
                "no Elastic Metal worker with a public_ipv4",
            )
        })?;
    Ok(PlatformInputs {
        kind: Default::default(),
        version: Version,
        cluster_name: inventory.cluster_name.clone(),
        cluster_endpoint: inventory.cluster_endpoint.clone(),
        dns_zone: config.dns_zone.clone(),
        edge_node_name: worker.name.clone(),
        edge_public_ipv4: ipv4,
    })
}
