//! `destroy --node` for a worker the config no longer lists (`make remove-worker`).

use std::net::IpAddr;

use scaleway::baremetal;

use super::{DestroyPlan, R, Removal, plan_dns_records};
use crate::cluster::Cluster;
use crate::error::InfraError;
use crate::tags::Role;

/// A worker that left the config: the records of ours that still hold one of its addresses, then
/// its server. Refused when no server of the cluster is that worker.
pub(super) fn plan_former_worker(cluster: &Cluster<'_>, name: &str) -> R<DestroyPlan> {
    let names = cluster.names();
    let tags = names.node_tags(Role::Worker, name);
    let servers = cluster.api.baremetal().servers(cluster.zone(), &tags)?;
    if servers.is_empty() {
        return Err(InfraError::NoSuchWorker {
            node: name.to_owned(),
            tag: tags.join(","),
        });
    }
    let addresses: Vec<IpAddr> = servers
        .iter()
        .flat_map(baremetal::Server::public_addresses)
        .collect();
    // An address compared as an address: a record may write an IPv6 otherwise than Rust does.
    let mut removals = Vec::new();
    plan_dns_records(cluster, &mut removals, |data| {
        data.parse().is_ok_and(|a: IpAddr| addresses.contains(&a))
    })?;
    removals.extend(servers.into_iter().map(|s| Removal::ElasticMetalServer {
        id: s.id,
        name: s.name,
    }));
    Ok(DestroyPlan { removals })
}
