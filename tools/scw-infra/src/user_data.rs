//! `clear-user-data`: the control planes boot configured from their user data (`cloud-init`,
//! the whole `controlplane.yaml`: every cluster CA key), which the Instance API serves to anyone
//! who may read the server, and the instance's metadata service to any root process on it.
//! Talos reads the config on its disk first and the platform's only when the disk holds none
//! (siderolabs/talos internal/app/machined/pkg/controllers/config/acquire.go), so once a control
//! plane proved ours (talos-apply-insecure's `proved_ours`: mutual TLS with our talosconfig), the
//! copy has no use left and goes.

use pop_common::records::{NodeInventory, NodeKind, NodeRole, steps};

use crate::apply::instances::TALOS_USER_DATA_KEY;
use crate::cluster::Cluster;
use crate::error::{InfraError, R};
use crate::tags::Role;

/// Deletes the `cloud-init` user data of each control plane of `inventory` recorded as proved
/// ours, when it still holds it, after checking the server is this cluster's;
/// with `dry_run`, only says which.
pub fn clear(cluster: &Cluster<'_>, inventory: &NodeInventory, dry_run: bool) -> R<()> {
    let api = cluster.api.instance();
    let ours = cluster.names().tags(Role::Controlplane);
    for node in inventory.nodes.iter().filter(|n| {
        n.role == NodeRole::Controlplane
            && n.kind == NodeKind::Instance
            && n.step(steps::PROVED_OURS).is_some()
    }) {
        let Some(server) = api.server(&node.zone, &node.id)? else {
            pop_common::warn!(
                "{}: the Instance {} is gone: nothing to clear",
                node.name,
                node.id
            );
            continue;
        };
        // The client already refuses a server of another project (Client::mine).
        if !ours.iter().all(|t| server.tags.contains(t)) {
            return Err(InfraError::NotOurs {
                what: "Instance",
                name: node.name.clone(),
                id: node.id.clone(),
            });
        }
        let keys = api.user_data_keys(&node.zone, &node.id)?;
        if !keys.iter().any(|k| k == TALOS_USER_DATA_KEY) {
            continue;
        }
        if dry_run {
            pop_common::info!(
                "{}: proved ours, its machine config would leave its user data `{TALOS_USER_DATA_KEY}`",
                node.name
            );
            continue;
        }
        api.delete_user_data(&node.zone, &node.id, TALOS_USER_DATA_KEY)?;
        pop_common::info!(
            "{}: proved ours, its config is on its disk: the copy in its user data `{TALOS_USER_DATA_KEY}` is deleted",
            node.name
        );
    }
    Ok(())
}
