//! The server tags that record what a worker's disk holds: the written tag from the read-back
//! until the proof, then the flashed tag ([`crate::WRITTEN_TAG`], [`crate::FLASHED_TAG`]).

use pop_common::records::{NodeFailure, NodeInventory, NodeKind};
use scaleway::baremetal::{Baremetal, Server};

use crate::flash::our_server;
use crate::{FLASHED_TAG, WRITTEN_TAG};

/// The flashed tag's digest, if the server carries one.
pub(crate) fn flashed_tag(server: &Server) -> Option<&str> {
    server.tags.iter().find_map(|t| t.strip_prefix(FLASHED_TAG))
}

/// The written tag's digest, if the server carries one.
pub(crate) fn written_tag(server: &Server) -> Option<&str> {
    server.tags.iter().find_map(|t| t.strip_prefix(WRITTEN_TAG))
}

/// The server's tags with `tag` as its only image tag, flashed or written (none with `None`).
pub(crate) fn with_image_tag(server: &Server, tag: Option<String>) -> Vec<String> {
    server
        .tags
        .iter()
        .filter(|t| !t.starts_with(FLASHED_TAG) && !t.starts_with(WRITTEN_TAG))
        .cloned()
        .chain(tag)
        .collect()
}

/// Writes the flashed tag on each Elastic Metal server whose image the inventory records as
/// proved ours by talos-apply-insecure (a config it applied, recorded only once the node answered
/// mutual TLS, or a proof on a node it found configured); returns the servers that failed.
pub fn tag_proven(inventory: &NodeInventory, api: Baremetal<'_>) -> Vec<NodeFailure> {
    let mut failures = Vec::new();
    for node in inventory
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::ElasticMetal)
    {
        let Some(image) = node.proved_image() else {
            pop_common::info!("{}: not proved ours yet, not tagged", node.name);
            continue;
        };
        let tagged = our_server(api, &inventory.cluster_name, node).and_then(|server| {
            if flashed_tag(&server) == Some(image) {
                return Ok(false);
            }
            let tags = with_image_tag(&server, Some(format!("{FLASHED_TAG}{image}")));
            api.set_tags(&node.zone, &node.id, &tags)?;
            Ok(true)
        });
        match tagged {
            Ok(true) => pop_common::info!("{}: proved ours, running {image}: tagged", node.name),
            Ok(false) => {}
            Err(error) => {
                let failure = NodeFailure::new(&node.name, error);
                pop_common::warn!("{failure}");
                failures.push(failure);
            }
        }
    }
    failures
}
