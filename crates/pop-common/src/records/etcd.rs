//! The records of `talos-lifecycle`'s etcd work: the plan it prints (`--dry-run`), the snapshot
//! it took and the recovery it made.
//!
//! ```json
//! {"kind":"EtcdPlanStep","version":1,"n":1,"step":"check-snapshot","node":null,"endpoint":null,
//!  "says":"etcdutl snapshot status talos/_out/etcd/edge-par-20260619T170000Z.snapshot: ..."}
//! {"kind":"EtcdSnapshot","version":1,"cluster_name":"edge-par","node":"edge-par-cp-1",
//!  "path":"talos/_out/etcd/edge-par-20260619T170000Z.snapshot","taken_at":"2026-06-19T17:00:00Z",
//!  "bytes":20512,"status":{"hash":"784c5685","revision":3,"total_keys":2,"total_size":20480}}
//! ```
//!
//! A snapshot holds every object of the cluster, Secrets included: the records name its file,
//! never its content.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub const ETCD_PLAN_STEP_VERSION: u32 = 1;
pub const ETCD_SNAPSHOT_VERSION: u32 = 1;
pub const ETCD_RECOVERY_VERSION: u32 = 1;
pub const ETCD_MEMBER_REMOVAL_VERSION: u32 = 1;
pub const ETCD_BACKUP_VERSION: u32 = 1;

/// What a step of the plan does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EtcdStepKind {
    /// Reads a snapshot file's status (`etcdutl snapshot status`): the file is a whole snapshot.
    CheckSnapshot,
    /// Streams a snapshot of a control plane's etcd into a file (`talosctl etcd snapshot`).
    TakeSnapshot,
    /// Uploads a snapshot to a control plane and bootstraps etcd from it there
    /// (`talosctl bootstrap --recover-from`).
    Recover,
    /// Waits until a control plane's etcd member answers with a leader and no error.
    WaitHealthy,
    /// A control plane's member leaves etcd on its own, which empties its etcd folder
    /// (`talosctl etcd leave`).
    Leave,
    /// A member whose node does not answer is removed through a healthy control plane
    /// (`talosctl etcd remove-member`).
    RemoveMember,
    /// Waits until the remaining members no longer list the one removed.
    WaitRemoved,
    /// Wipes a control plane's EPHEMERAL partition, its etcd folder with it, and reboots it
    /// (`talosctl reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL`).
    ResetEphemeral,
    /// Waits until a control plane's etcd service is `Preparing`: back from its reboot, its etcd
    /// folder empty, waiting for a bootstrap or a cluster to join.
    WaitPreparing,
    /// Stops a control plane's kube-apiserver, which its kubelet starts again on the recovered
    /// etcd (`talosctl restart -k kube-system/kube-apiserver-<node>:kube-apiserver`).
    RestartApiserver,
}

crate::record! {
    /// One step of a plan, in the order the steps run (`n` from 1).
    pub struct EtcdPlanStep, version ETCD_PLAN_STEP_VERSION {
        pub n: usize,
        pub step: EtcdStepKind,
        /// The control plane the step acts on, by its inventory name.
        pub node: Option<String>,
        /// The Talos API endpoint the step goes through (`<address>:<port>`).
        pub endpoint: Option<String>,
        /// What the step does, for a person.
        pub says: String,
    }
}

/// What `etcdutl snapshot status` reads in a snapshot file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdSnapshotStatus {
    /// The hash of the key space, as etcdutl and talosctl print it (`%08x`).
    pub hash: String,
    /// The revision of the key space the snapshot holds.
    pub revision: u64,
    pub total_keys: u64,
    /// The size of the database, in bytes (without the sha256 trailer).
    pub total_size: u64,
}

crate::record! {
    /// A snapshot taken: where it is, from which node, and what it holds.
    pub struct EtcdSnapshot, version ETCD_SNAPSHOT_VERSION {
        pub cluster_name: String,
        /// The control plane whose etcd member streamed it.
        pub node: String,
        /// The file (mode 0600).
        pub path: PathBuf,
        /// When it was asked for, RFC 3339 UTC.
        pub taken_at: String,
        /// The file's size: the database and its 32-byte sha256 trailer.
        pub bytes: u64,
        pub status: EtcdSnapshotStatus,
    }
}

crate::record! {
    /// etcd recovered from a snapshot on one control plane, whose member answers again.
    pub struct EtcdRecovery, version ETCD_RECOVERY_VERSION {
        pub cluster_name: String,
        /// The control plane etcd was bootstrapped on.
        pub node: String,
        /// The snapshot file it was recovered from.
        pub snapshot: PathBuf,
        pub status: EtcdSnapshotStatus,
        /// The new member's id (hexadecimal, as talosctl prints it).
        pub member_id: String,
    }
}

/// How a member left etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemberRemovalHow {
    /// The node's own member left (`talosctl etcd leave`).
    Leave,
    /// Removed by id through another control plane (`talosctl etcd remove-member`).
    RemoveMember,
    /// No member of that name was listed any more: nothing was done.
    AlreadyGone,
}

crate::record! {
    /// A control plane's member out of etcd: the first step of replacing the control plane.
    pub struct EtcdMemberRemoval, version ETCD_MEMBER_REMOVAL_VERSION {
        pub cluster_name: String,
        /// The control plane whose member left.
        pub node: String,
        pub how: MemberRemovalHow,
        /// Its member id (hexadecimal, as talosctl prints it), when it was still listed.
        pub member_id: Option<String>,
        /// The members etcd lists afterwards, by name, sorted.
        pub members: Vec<String>,
        /// The snapshot taken before.
        pub snapshot: Option<PathBuf>,
    }
}

crate::record! {
    /// A snapshot taken in the cluster, encrypted with age and stored in Object Storage
    /// (`etcd-backup`, the scheduled backup).
    pub struct EtcdBackup, version ETCD_BACKUP_VERSION {
        pub cluster_name: String,
        pub bucket: String,
        /// The object's key: `<prefix>/<cluster>-<YYYYMMDDTHHMMSSZ>.snapshot.age`.
        pub key: String,
        /// When it was asked for, RFC 3339 UTC.
        pub taken_at: String,
        /// The snapshot's size (the database and its sha256 trailer), before encryption.
        pub snapshot_bytes: u64,
        /// The encrypted object's size.
        pub bytes: u64,
        pub status: EtcdSnapshotStatus,
        /// Older backups of the prefix deleted to keep the count asked for, oldest first.
        pub pruned: Vec<String>,
    }
}
