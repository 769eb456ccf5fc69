//! The records of `talos-lifecycle upgrade` and `upgrade-k8s`: the plan they print (`--dry-run`)
//! and what they brought to the target: each node to a Talos version, the cluster to a
//! Kubernetes version.
//!
//! ```json
//! {"kind":"TalosUpgradeStep","version":1,"n":3,"step":"gate","node":"edge-par-cp-1",
//!  "role":"controlplane","endpoint":"203.0.113.11:50000",
//!  "says":"before edge-par-cp-1: every etcd member healthy under one leader, every node Ready"}
//! {"kind":"TalosUpgraded","version":1,"cluster_name":"edge-par","node":"edge-par-cp-1",
//!  "role":"controlplane","from":"v1.13.9","to":"v1.13.11",
//!  "installer":"factory.talos.dev/scaleway-installer/3765...:v1.13.11"}
//! ```

use serde::{Deserialize, Serialize};

use super::node_inventory::NodeRole;

pub const TALOS_UPGRADE_STEP_VERSION: u32 = 1;
pub const TALOS_UPGRADED_VERSION: u32 = 1;
pub const KUBERNETES_UPGRADED_VERSION: u32 = 1;

/// What a step of an upgrade's plan does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpgradeStepKind {
    /// What was checked before anything changes: every node's version and its path to the
    /// target, the client's minor, the installer of each kind of node.
    Preflight,
    /// Streams a snapshot of etcd from a healthy control plane into a 0600 file.
    TakeSnapshot,
    /// Reads the snapshot file back (`etcdutl snapshot status`).
    CheckSnapshot,
    /// A node that runs the target already: left as it is (a run cut short resumes after it).
    Skip,
    /// Checked right before a node's upgrade: every etcd member healthy under one leader, as
    /// many members as control planes, every node Ready; refused (nothing started) otherwise.
    Gate,
    /// `talosctl upgrade --image <installer>` on the node: installer pulled and run, the node
    /// drained, rebooted, uncordoned.
    Upgrade,
    /// Waits until the node answers with the target version, its etcd member healthy (a
    /// control plane) and its Kubernetes node Ready.
    WaitUpgraded,
}

crate::record! {
    /// One step of an upgrade's plan, in the order the steps run (`n` from 1).
    pub struct TalosUpgradeStep, version TALOS_UPGRADE_STEP_VERSION {
        pub n: usize,
        pub step: UpgradeStepKind,
        /// The node the step acts on, by its inventory name.
        pub node: Option<String>,
        pub role: Option<NodeRole>,
        /// The Talos API endpoint the step goes through (`<address>:<port>`).
        pub endpoint: Option<String>,
        /// What the step does, for a person.
        pub says: String,
    }
}

crate::record! {
    /// A node brought to the target version: it answers with it, healthy and Ready.
    pub struct TalosUpgraded, version TALOS_UPGRADED_VERSION {
        pub cluster_name: String,
        pub node: String,
        pub role: NodeRole,
        /// The version it answered with before.
        pub from: String,
        pub to: String,
        /// The installer image it was upgraded with.
        pub installer: String,
    }
}

crate::record! {
    /// The cluster brought to a Kubernetes version: every node's kubelet runs it, and is Ready.
    pub struct KubernetesUpgraded, version KUBERNETES_UPGRADED_VERSION {
        pub cluster_name: String,
        /// The lowest kubelet version found before.
        pub from: String,
        pub to: String,
        /// The nodes, by their Kubernetes names.
        pub nodes: Vec<String>,
    }
}
