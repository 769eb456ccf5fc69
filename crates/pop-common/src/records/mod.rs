//! The records that cross pipes between tools.
//!
//! Every record is a JSON object whose first two fields are `kind` (a fixed string naming the
//! record) and `version` (an integer). A reader refuses any other kind, any other version and any
//! unknown field: a pipe that silently drops or guesses data is worse than one that stops.
//! Adding a field is a new version. [`record!`](crate::record) declares such a type: its tags,
//! its derives and its kind, the type's own name.

mod etcd;
mod node_fields;
mod node_inventory;
mod platform_inputs;
mod problem;
mod published_images;
mod scaleway_names;
pub mod server_tags;
mod tag;
mod talos_upgrade;

pub use etcd::{
    ETCD_BACKUP_VERSION, ETCD_MEMBER_REMOVAL_VERSION, ETCD_PLAN_STEP_VERSION,
    ETCD_RECOVERY_VERSION, ETCD_SNAPSHOT_VERSION, EtcdBackup, EtcdMemberRemoval, EtcdPlanStep,
    EtcdRecovery, EtcdSnapshot, EtcdSnapshotStatus, EtcdStepKind, MemberRemovalHow,
};
pub use node_fields::{
    InvalidValue, check_cluster_name, check_host_name, check_install_disk, is_dns_label,
    is_host_name,
};
pub use node_inventory::{
    NODE_INVENTORY_VERSION, Node, NodeFailure, NodeFailures, NodeInventory, NodeKind, NodeRole,
    StepNodes, StepTodo, steps,
};
pub use platform_inputs::{
    EDGE_GATEWAY_CLASS, EDGE_NODE_LABEL, EdgeNode, MAX_EDGE_HOSTNAMES, PLATFORM_INPUTS_VERSION,
    PlatformInputs,
};
pub use problem::{Problem, join as join_problems};
pub use published_images::{Digest, PUBLISHED_IMAGES_VERSION, PublishedImage, PublishedImages};
pub use scaleway_names::{check_id, check_zone};
pub use tag::{Kind, RecordKind, Version};
pub use talos_upgrade::{
    KUBERNETES_UPGRADED_VERSION, KubernetesUpgraded, TALOS_UPGRADE_STEP_VERSION,
    TALOS_UPGRADED_VERSION, TalosUpgradeStep, TalosUpgraded, UpgradeStepKind,
};

/// What a checker of values says: each of `good` passes, each of `bad` is refused with a message
/// that holds `refusal`.
#[cfg(test)]
fn assert_verdicts<E: std::fmt::Display>(
    check: impl Fn(&str) -> Result<(), E>,
    good: &[&str],
    bad: &[&str],
    refusal: &str,
) {
    for value in good {
        if let Err(err) = check(value) {
            panic!("{value}: refused: {err}");
        }
    }
    for value in bad {
        match check(value) {
            Ok(()) => panic!("{value}: passed"),
            Err(err) => assert!(err.to_string().contains(refusal), "{value}: {err}"),
        }
    }
}
