//! The tag scheme: how `scw-infra` finds a cluster's resources again, with no state file.
//!
//! | tag | on | meaning |
//! | --- | --- | --- |
//! | `edgepop-cluster=<cluster_name>` | every taggable resource | it belongs to this cluster |
//! | `edgepop-role=controlplane` | Instances, their flexible IPs | a control plane |
//! | `edgepop-role=controlplane-firewall` | the security group | the control planes' group |
//! | `edgepop-role=worker` | the Elastic Metal servers | a worker |
//! | `edgepop-node=<node name>` | Instances, flexible IPs, Elastic Metal | pairs an IP with its server |
//! | `edgepop-talos=<version>` | the Instance image, its snapshot | the Talos image to boot |
//! | `edgepop-talos-sha256=<hex>` | the Instance image, its snapshot | the pinned digest it was imported from |
//!
//! Every lookup is also scoped to the credentials' project (the client's), and the Talos image is
//! looked up with the cluster's tag too: an image another cluster imported is never booted
//! (its `destroy` would delete it from under this one).
//!
//! What cannot carry tags is matched as exactly as the API allows: DNS records by their
//! `comment` (`edgepop-cluster=<name>`), the IAM SSH key by its name (`edgepop-<cluster>`) and
//! its public key, the registry namespace by its name (never destroyed: it holds the images, and
//! it has no tags to prove it is ours), the image bucket by its name
//! (`edgepop-<cluster>-<project id prefix>`).

use pop_common::records::NodeRole;
use pop_common::records::server_tags;

use crate::config::InfraConfig;

/// Shared with the node tools, which check them before they act on a server.
pub const TAG_CLUSTER: &str = server_tags::CLUSTER;
pub const TAG_ROLE: &str = server_tags::ROLE;
pub const TAG_NODE: &str = "edgepop-node";
pub const TAG_TALOS: &str = "edgepop-talos";
pub const TAG_TALOS_SHA256: &str = "edgepop-talos-sha256";

/// `key=value`.
pub fn tag(key: &str, value: &str) -> String {
    format!("{key}={value}")
}

/// What a resource is to the cluster (`edgepop-role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Controlplane,
    ControlplaneFirewall,
    Worker,
}

impl Role {
    /// `edgepop-role=<role>`: a node's is the one the node tools check
    /// ([`server_tags::role`]), so both sides read it from one place.
    fn tag(self) -> String {
        match self {
            Role::Controlplane => server_tags::role(NodeRole::Controlplane),
            Role::Worker => server_tags::role(NodeRole::Worker),
            Role::ControlplaneFirewall => tag(TAG_ROLE, "controlplane-firewall"),
        }
    }
}

/// The names and tags of one cluster's resources, all derived from the config and the project.
#[derive(Debug, Clone, Copy)]
pub struct Names<'a> {
    pub config: &'a InfraConfig,
    pub project: &'a str,
}

impl Names<'_> {
    /// `edgepop-cluster=<cluster_name>`: on every taggable resource, and the comment of the DNS
    /// records.
    pub fn cluster_tag(&self) -> String {
        server_tags::cluster(&self.config.cluster_name)
    }

    /// The cluster's tag and a role.
    pub fn tags(&self, role: Role) -> Vec<String> {
        vec![self.cluster_tag(), role.tag()]
    }

    /// The cluster's tag, a role and the node.
    pub fn node_tags(&self, role: Role, node: &str) -> Vec<String> {
        let mut tags = self.tags(role);
        tags.push(tag(TAG_NODE, node));
        tags
    }

    /// `<cluster>-cp-1` ... `<cluster>-cp-<count>`.
    pub fn control_planes(&self) -> Vec<String> {
        self.config.control_plane_names()
    }

    pub fn security_group(&self) -> String {
        format!("{}-controlplane", self.config.cluster_name)
    }

    /// The IAM SSH key of the workers.
    pub fn ssh_key(&self) -> String {
        format!("edgepop-{}", self.config.cluster_name)
    }

    /// The bucket the Talos image is uploaded to: bucket names are global, so the project's
    /// prefix keeps two projects' clusters of the same name apart.
    pub fn bucket(&self) -> String {
        let prefix: String = self.project.chars().take(8).collect();
        format!("edgepop-{}-{prefix}", self.config.cluster_name).to_ascii_lowercase()
    }

    /// The tags an imported Talos image carries, and that find it again: the cluster's, its
    /// version, the pinned digest when there is one.
    pub fn talos_image_tags(&self, version: &str, sha256: Option<&str>) -> Vec<String> {
        let mut tags = vec![self.cluster_tag(), tag(TAG_TALOS, version)];
        tags.extend(sha256.map(|d| tag(TAG_TALOS_SHA256, d)));
        tags
    }
}
