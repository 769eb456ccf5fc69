//! The Scaleway tags that say which cluster a server belongs to and what it is there: `scw-infra`
//! puts them on every server it makes or adopts (the whole tag scheme is documented in its
//! `tags` module), and a node tool checks them on the server an inventory names before it acts
//! on it, so that a wrong or forged inventory cannot point it at someone else's machine.

use super::NodeRole;

/// `edgepop-cluster=<cluster_name>`.
pub const CLUSTER: &str = "edgepop-cluster";
/// `edgepop-role=<role>`.
pub const ROLE: &str = "edgepop-role";

/// `edgepop-cluster=<name>`.
pub fn cluster(name: &str) -> String {
    format!("{CLUSTER}={name}")
}

/// `edgepop-role=controlplane` or `edgepop-role=worker`.
pub fn role(role: NodeRole) -> String {
    let value = match role {
        NodeRole::Controlplane => "controlplane",
        NodeRole::Worker => "worker",
    };
    format!("{ROLE}={value}")
}

/// The tags of `expected` that `tags` lacks: what a server must carry to be the node an
/// inventory says it is (empty when it carries them all).
pub fn missing(tags: &[String], cluster_name: &str, node_role: NodeRole) -> Vec<String> {
    [cluster(cluster_name), role(node_role)]
        .into_iter()
        .filter(|t| !tags.contains(t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_must_carry_both_the_cluster_and_the_role() {
        let tags: Vec<String> = ["edgepop-cluster=edge-par", "edgepop-role=worker", "other"]
            .map(String::from)
            .into();
        assert!(missing(&tags, "edge-par", NodeRole::Worker).is_empty());
        assert_eq!(
            missing(&tags, "edge-ams", NodeRole::Worker),
            ["edgepop-cluster=edge-ams"]
        );
        assert_eq!(
            missing(&tags, "edge-par", NodeRole::Controlplane),
            ["edgepop-role=controlplane"]
        );
        assert_eq!(missing(&[], "c", NodeRole::Worker).len(), 2);
    }
}
