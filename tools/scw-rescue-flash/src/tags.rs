//! The server tags that record what a worker's disk holds: the written tag from the read-back
//! until the proof, then the flashed tag ([`crate::WRITTEN_TAG`], [`crate::FLASHED_TAG`]); the
//! upgraded tag once it was upgraded in place ([`crate::UPGRADED_TAG`]).

use pop_common::records::{Node, NodeFailure, NodeInventory, NodeKind};
use scaleway::baremetal::{Baremetal, Server};

use crate::flash::{FlashError, our_server};
use crate::{FLASHED_TAG, UPGRADED_TAG, WRITTEN_TAG};

/// The flashed tag's digest, if the server carries one.
pub(crate) fn flashed_tag(server: &Server) -> Option<&str> {
    server.tags.iter().find_map(|t| t.strip_prefix(FLASHED_TAG))
}

/// The written tag's digest, if the server carries one.
pub(crate) fn written_tag(server: &Server) -> Option<&str> {
    server.tags.iter().find_map(|t| t.strip_prefix(WRITTEN_TAG))
}

/// The upgraded tag's installer, if the server carries one.
pub(crate) fn upgraded_tag(server: &Server) -> Option<&str> {
    server
        .tags
        .iter()
        .find_map(|t| t.strip_prefix(UPGRADED_TAG))
}

/// The server's tags with `tag` as its only image tag, flashed, written or upgraded (none with
/// `None`).
pub(crate) fn with_image_tag(server: &Server, tag: Option<String>) -> Vec<String> {
    server
        .tags
        .iter()
        .filter(|t| {
            ![FLASHED_TAG, WRITTEN_TAG, UPGRADED_TAG]
                .iter()
                .any(|prefix| t.starts_with(prefix))
        })
        .cloned()
        .chain(tag)
        .collect()
}

/// Makes `tag` the only image tag of the server `node` names (checked to be our worker);
/// whether it had to be written.
fn set_image_tag(
    api: Baremetal<'_>,
    cluster_name: &str,
    node: &Node,
    tag: String,
) -> Result<bool, FlashError> {
    let server = our_server(api, cluster_name, node)?;
    let tags = with_image_tag(&server, Some(tag));
    if tags == server.tags {
        return Ok(false);
    }
    api.set_tags(&node.zone, &node.id, &tags)?;
    Ok(true)
}

/// Logs a server that failed, and adds it to `failures`.
fn failed(failures: &mut Vec<NodeFailure>, node: &Node, error: FlashError) {
    let failure = NodeFailure::new(&node.name, error);
    pop_common::warn!("{failure}");
    failures.push(failure);
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
        match set_image_tag(
            api,
            &inventory.cluster_name,
            node,
            format!("{FLASHED_TAG}{image}"),
        ) {
            Ok(true) => pop_common::info!("{}: proved ours, running {image}: tagged", node.name),
            Ok(false) => {}
            Err(error) => failed(&mut failures, node, error),
        }
    }
    failures
}

/// Writes the upgraded tag of `installer` on every Elastic Metal server of the inventory, in
/// place of its image tag (the node no longer runs the image it was flashed with); returns the
/// servers that failed. Run once the upgrade brought the node to the installer's version.
pub fn tag_upgraded(
    inventory: &NodeInventory,
    api: Baremetal<'_>,
    installer: &str,
) -> Vec<NodeFailure> {
    let mut failures = Vec::new();
    for node in inventory
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::ElasticMetal)
    {
        let tag = format!("{UPGRADED_TAG}{installer}");
        match set_image_tag(api, &inventory.cluster_name, node, tag) {
            Ok(true) => {
                pop_common::info!("{}: upgraded in place to {installer}: tagged", node.name)
            }
            Ok(false) => {
                pop_common::info!("{}: tagged as upgraded to {installer} already", node.name)
            }
            Err(error) => failed(&mut failures, node, error),
        }
    }
    failures
}
