//! The plans, made from what was read only: the steps `--dry-run` prints and a run carries out,
//! in that order.

use std::path::{Path, PathBuf};

use pop_common::records::{EtcdPlanStep, EtcdSnapshotStatus, EtcdStepKind, Kind, Version};

use crate::quorum::TalosNode;

fn step(n: usize, kind: EtcdStepKind, node: Option<&TalosNode>, says: String) -> EtcdPlanStep {
    EtcdPlanStep {
        kind: Kind::new(),
        version: Version,
        n,
        step: kind,
        node: node.map(|n| n.name.clone()),
        endpoint: node.map(|n| n.endpoint.clone()),
        says,
    }
}

/// `<dir>/<cluster>-<YYYYMMDDTHHMMSSZ>.snapshot`: the snapshot asked for at `secs` (UTC).
pub fn snapshot_path(dir: &Path, cluster: &str, secs: u64) -> PathBuf {
    dir.join(format!(
        "{cluster}-{}.snapshot",
        pop_common::time::basic(secs)
    ))
}

/// A snapshot streamed from `source` into `path`, then read back by etcdutl.
pub fn snapshot(source: &TalosNode, path: &Path) -> Vec<EtcdPlanStep> {
    vec![
        step(
            1,
            EtcdStepKind::TakeSnapshot,
            Some(source),
            format!(
                "talosctl etcd snapshot {} from {}'s member (written 0600, its sha256 trailer checked)",
                path.display(),
                source.name
            ),
        ),
        step(
            2,
            EtcdStepKind::CheckSnapshot,
            None,
            format!("etcdutl snapshot status {}", path.display()),
        ),
    ]
}

/// etcd recovered on `target` from `snapshot`, whose status was read already; first, the
/// control planes in `resets` (each with its etcd service's state) have their EPHEMERAL
/// partition wiped, and are waited for until their etcd folder is empty; last, the API server
/// of each control plane in `answering` is restarted.
pub fn restore(
    target: &TalosNode,
    resets: &[(&TalosNode, String)],
    answering: &[&TalosNode],
    snapshot: &Path,
    status: &EtcdSnapshotStatus,
    skip_hash_check: bool,
) -> Vec<EtcdPlanStep> {
    let check = if skip_hash_check {
        ", its hash check skipped (a copy of a data folder has no sha256 trailer)"
    } else {
        ""
    };
    let mut says: Vec<(EtcdStepKind, Option<&TalosNode>, String)> = vec![(
        EtcdStepKind::CheckSnapshot,
        None,
        format!(
            "etcdutl snapshot status {}: hash {}, revision {}, {} keys, {} bytes",
            snapshot.display(),
            status.hash,
            status.revision,
            status.total_keys,
            status.total_size
        ),
    )];
    for (node, state) in resets {
        says.push((
            EtcdStepKind::ResetEphemeral,
            Some(*node),
            format!(
                "talosctl reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL on \
                 {} (its etcd service is {state}): its EPHEMERAL partition is wiped, etcd's \
                 data and everything else under /var with it, and it reboots",
                node.name
            ),
        ));
    }
    for (node, _) in resets {
        says.push((
            EtcdStepKind::WaitPreparing,
            Some(*node),
            format!(
                "wait until {} is back with its etcd service Preparing (its etcd folder empty)",
                node.name
            ),
        ));
    }
    says.push((
        EtcdStepKind::Recover,
        Some(target),
        format!(
            "talosctl bootstrap --recover-from {} on {}: the snapshot is uploaded, etcd is \
             restored from it as a one-member cluster{check}; everything written since \
             revision {} is lost, and the other control planes join it",
            snapshot.display(),
            target.name,
            status.revision
        ),
    ));
    says.push((
        EtcdStepKind::WaitHealthy,
        Some(target),
        format!(
            "wait until {}'s etcd member answers with a leader and no error",
            target.name
        ),
    ));
    for node in answering {
        says.push((
            EtcdStepKind::RestartApiserver,
            Some(*node),
            format!(
                "talosctl restart -k {} on {}: its kubelet starts it again on the recovered \
                 etcd (a running API server would keep serving its cache of the lost state)",
                crate::talos::apiserver_container(node),
                node.name
            ),
        ));
    }
    says.into_iter()
        .enumerate()
        .map(|(i, (kind, node, says))| step(i + 1, kind, node, says))
        .collect()
}

/// `node`'s member out of etcd after a snapshot: it leaves on its own, or (`member_id` given: its
/// node does not answer) is removed through `through`, whose member list is then watched.
pub fn remove_member(
    source: &TalosNode,
    path: &Path,
    node: &TalosNode,
    through: &TalosNode,
    member_id: &str,
    failed: bool,
) -> Vec<EtcdPlanStep> {
    let mut steps = snapshot(source, path);
    let n = steps.len();
    steps.push(if failed {
        step(
            n + 1,
            EtcdStepKind::RemoveMember,
            Some(through),
            format!(
                "talosctl etcd remove-member {member_id} through {}: {}'s member goes, its \
                 node is not asked",
                through.name, node.name
            ),
        )
    } else {
        step(
            n + 1,
            EtcdStepKind::Leave,
            Some(node),
            format!(
                "talosctl etcd leave on {}: its member {member_id} leaves etcd, and Talos \
                 empties its etcd folder",
                node.name
            ),
        )
    });
    steps.push(step(
        n + 2,
        EtcdStepKind::WaitRemoved,
        Some(through),
        format!(
            "wait until {}'s etcd no longer lists {}",
            through.name, node.name
        ),
    ));
    steps
}
