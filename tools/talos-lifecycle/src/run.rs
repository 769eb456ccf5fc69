//! The actions: the reads and gates, the plan, then (unless `--dry-run`) its steps.

use std::io::Write;
use std::path::Path;

use pop_common::records::{
    EtcdMemberRemoval, EtcdRecovery, EtcdSnapshot, EtcdStepKind, Kind, MemberRemovalHow, Version,
};
use pop_common::wait::{Poll, Sleeper};

use crate::quorum::{self, NodeError, Quorum, TalosNode};
use crate::talos::{Member, Talos};
use crate::{Config, Error, observe, plan, read_quorum, write_line, write_plan};

/// What a restore is asked for.
#[derive(Debug)]
pub struct Restore<'a> {
    pub snapshot: &'a Path,
    pub skip_hash_check: bool,
    /// The control planes whose etcd folder holds data have their EPHEMERAL partition wiped
    /// first; without it, such a control plane refuses the restore before anything changes.
    pub reset_ephemeral: bool,
    pub wait: Poll,
}

pub fn snapshot(
    config: &Config,
    talos: &dyn Talos,
    cluster: &str,
    nodes: &[TalosNode],
    path: &Path,
    now: u64,
    output: &mut dyn Write,
) -> Result<(), Error> {
    let observed = observe(talos, nodes);
    let source = quorum::snapshot_source(&observed).ok_or_else(|| Error::NoNode {
        cluster: cluster.to_owned(),
        wanted: "has an etcd member that answers with a leader and no error",
        answers: observed.iter().map(ToString::to_string).collect(),
    })?;
    let steps = plan::snapshot(source, path);
    if config.dry_run {
        return write_plan(&steps, output);
    }
    let taken = take_snapshot(talos, cluster, source, path, now)?;
    write_line(&taken, output)
}

/// Streams a snapshot from `source` into `path` (never over a file), reads it back with
/// etcdutl and checks its mode: what it holds.
pub fn take_snapshot(
    talos: &dyn Talos,
    cluster: &str,
    source: &TalosNode,
    path: &Path,
    now: u64,
) -> Result<EtcdSnapshot, Error> {
    if path.exists() {
        return Err(Error::File {
            path: path.to_path_buf(),
            message: "exists already: a snapshot is never written over".into(),
        });
    }
    private_dir(path.parent().unwrap_or(Path::new(".")))?;
    pop_common::info!(
        "talosctl etcd snapshot {} from {}'s member",
        path.display(),
        source.name
    );
    talos
        .snapshot(source, path)
        .map_err(|error| Error::node(&source.name, "etcd snapshot", error))?;
    let status = talos
        .snapshot_status(path)
        .map_err(|message| Error::Snapshot {
            path: path.to_path_buf(),
            message,
        })?;
    let bytes = private_file(path)?;
    pop_common::info!(
        "{}: hash {}, revision {}, {} keys",
        path.display(),
        status.hash,
        status.revision,
        status.total_keys
    );
    Ok(EtcdSnapshot {
        kind: Kind::new(),
        version: Version,
        cluster_name: cluster.to_owned(),
        node: source.name.clone(),
        path: path.to_path_buf(),
        taken_at: pop_common::time::rfc3339(now),
        bytes,
        status,
    })
}

/// The folder of the snapshots, made 0700 when missing (they hold every Secret of the cluster).
fn private_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt as _;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|err| Error::File {
            path: dir.to_path_buf(),
            message: format!("cannot make the folder: {err}"),
        })
}

/// The snapshot's size, once its mode is checked to be 0600 (talosctl creates it so).
fn private_file(path: &Path) -> Result<u64, Error> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(path).map_err(|err| Error::File {
        path: path.to_path_buf(),
        message: err.to_string(),
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode != 0o600 {
        return Err(Error::File {
            path: path.to_path_buf(),
            message: format!("mode {mode:o}, not 600: others may read every Secret in it"),
        });
    }
    Ok(meta.len())
}

pub fn restore(
    config: &Config,
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    cluster: &str,
    nodes: &[TalosNode],
    restore: &Restore<'_>,
    output: &mut dyn Write,
) -> Result<(), Error> {
    let status = talos
        .snapshot_status(restore.snapshot)
        .map_err(|message| Error::Snapshot {
            path: restore.snapshot.to_path_buf(),
            message,
        })?;
    let observed = quorum_lost_for_good(talos, sleeper, cluster, nodes)?;
    // The control planes whose Talos API answers, in the inventory's order (their etcd may be
    // down: that is the case a recovery is for); the recovery goes to the first.
    let answering: Vec<&TalosNode> = observed
        .iter()
        .filter(|o| o.answered())
        .map(|o| &o.node)
        .collect();
    let target = *answering.first().ok_or_else(|| Error::NoNode {
        cluster: cluster.to_owned(),
        wanted: "answers on its Talos API",
        answers: observed.iter().map(ToString::to_string).collect(),
    })?;
    let resets = holding_etcd_data(talos, &answering)?;
    if !resets.is_empty() && !restore.reset_ephemeral {
        return Err(Error::HoldsData {
            nodes: resets
                .iter()
                .map(|(node, state)| format!("{} (its etcd service is {state})", node.name))
                .collect(),
        });
    }
    for silent in observed.iter().filter(|o| !o.answered()) {
        pop_common::warn!(
            "{}: its Talos API does not answer, so it is neither reset nor recovered: reset its \
             EPHEMERAL partition or replace it (make replace-control-plane) before its old etcd \
             member can come back",
            silent.node.name
        );
    }
    let steps = plan::restore(
        target,
        &resets,
        &answering,
        restore.snapshot,
        &status,
        restore.skip_hash_check,
    );
    if config.dry_run {
        return write_plan(&steps, output);
    }
    for (node, _) in &resets {
        pop_common::info!(
            "{}: its EPHEMERAL partition is wiped, then it reboots",
            node.name
        );
        talos
            .reset_ephemeral(node)
            .map_err(|error| Error::node(&node.name, "reset EPHEMERAL", error))?;
    }
    for (node, _) in &resets {
        wait_preparing(talos, sleeper, node, restore.wait)?;
    }
    if let Some(recover) = steps.iter().find(|s| s.step == EtcdStepKind::Recover) {
        pop_common::info!("{}", recover.says);
    }
    talos
        .recover(target, restore.snapshot, restore.skip_hash_check)
        .map_err(|error| Error::node(&target.name, "bootstrap --recover-from", error))?;
    let member_id = wait_healthy(talos, sleeper, target, restore.wait)?;
    pop_common::info!("{}: etcd recovered, member {member_id}", target.name);
    restart_apiservers(talos, &answering);
    write_line(
        &EtcdRecovery {
            kind: Kind::new(),
            version: Version,
            cluster_name: cluster.to_owned(),
            node: target.name.clone(),
            snapshot: restore.snapshot.to_path_buf(),
            status,
            member_id,
        },
        output,
    )
}

/// How many times, and how far apart, the members are asked before a restore: an election
/// (etcd's default election timeout is one second) leaves a working cluster without a leader for
/// a moment, and a restore must never go ahead on such a moment.
pub const QUORUM_LOSS_READS: Poll = Poll {
    tries: 3,
    interval: std::time::Duration::from_secs(2),
};

/// The members' answers once a lost quorum has been seen at every one of
/// [`QUORUM_LOSS_READS`]; refused as soon as one read shows it held.
fn quorum_lost_for_good(
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    cluster: &str,
    nodes: &[TalosNode],
) -> Result<Vec<quorum::Observed>, Error> {
    let mut last = Vec::new();
    QUORUM_LOSS_READS.until(sleeper, |_| {
        let observed = observe(talos, nodes);
        if let Quorum::Healthy {
            leader,
            healthy,
            members,
        } = read_quorum(talos, &observed)
        {
            return Err(Error::QuorumHealthy {
                cluster: cluster.to_owned(),
                leader,
                healthy,
                members,
            });
        }
        last = observed;
        Ok::<Option<()>, Error>(None)
    })?;
    Ok(last)
}

/// Asks `node`'s member until it answers healthy: its member id.
pub fn wait_healthy(
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    node: &TalosNode,
    wait: Poll,
) -> Result<String, Error> {
    let mut last = String::from("no answer yet");
    let found = wait.until(sleeper, |_| {
        let status = talos.etcd_status(node);
        let observed = quorum::Observed {
            node: node.clone(),
            status: status.clone(),
        };
        last = observed.to_string();
        Ok::<_, Error>(status.ok().filter(|s| s.healthy()).map(|s| s.member_id))
    })?;
    found.ok_or(Error::NotBack {
        node: node.name.clone(),
        tries: wait.tries,
        interval: wait.interval,
        last,
    })
}

/// etcd went back to the snapshot's revision without a bump (Talos restores with etcdutl's
/// defaults), so a running API server never learns: its watch cache keeps what it held, objects
/// made after the snapshot included. Each control plane's is stopped in turn, and its kubelet
/// starts it again on the recovered etcd; one that cannot be is named, to be rebooted.
fn restart_apiservers(talos: &dyn Talos, nodes: &[&TalosNode]) {
    let mut left = Vec::new();
    for node in nodes {
        match talos.restart_apiserver(node) {
            Ok(()) => pop_common::info!(
                "{}: kube-apiserver stopped; its kubelet starts it again on the recovered etcd",
                node.name
            ),
            Err(NodeError::Answered { message, .. }) if message.contains("not found") => {
                pop_common::info!("{}: no kube-apiserver runs there yet", node.name);
            }
            Err(error) => {
                pop_common::warn!("{}: restart -k kube-apiserver: {error}", node.name);
                left.push(node.name.as_str());
            }
        }
    }
    if !left.is_empty() {
        pop_common::warn!(
            "reboot {} one at a time (talosctl --nodes <address> reboot): a running API server \
             keeps serving what its cache held before the restore, objects made after the \
             snapshot included",
            left.join(", ")
        );
    }
}

/// The control planes of `answering` whose etcd service is not `Preparing`: their etcd folder
/// holds data (a member running without its quorum, or a broken one). Talos recovers a snapshot
/// only on a node whose folder is empty ("etcd data directory is not empty"), and a node that
/// keeps its data keeps its old member instead of joining the recovered one.
fn holding_etcd_data<'a>(
    talos: &dyn Talos,
    answering: &[&'a TalosNode],
) -> Result<Vec<(&'a TalosNode, String)>, Error> {
    let mut holding = Vec::new();
    for &node in answering {
        let state = talos
            .etcd_service_state(node)
            .map_err(|error| Error::node(&node.name, "service etcd", error))?;
        if state != "Preparing" {
            holding.push((node, state));
        }
    }
    Ok(holding)
}

/// Waits until the node, rebooting after its reset, answers with its etcd service `Preparing`;
/// a node that does not answer yet is still rebooting.
fn wait_preparing(
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    node: &TalosNode,
    wait: Poll,
) -> Result<(), Error> {
    let mut last = String::from("no answer yet");
    let back = wait.until(sleeper, |_| {
        let state = talos.etcd_service_state(node);
        last = match &state {
            Ok(state) => format!("its etcd service is {state}"),
            Err(error) => error.to_string(),
        };
        Ok::<_, Error>(state.ok().filter(|s| s == "Preparing").map(|_| ()))
    })?;
    back.ok_or(Error::NotPreparing {
        node: node.name.clone(),
        tries: wait.tries,
        interval: wait.interval,
        last,
    })
}

/// What a member removal is asked for.
#[derive(Debug)]
pub struct RemoveMember<'a> {
    /// The control plane whose member goes.
    pub node: &'a str,
    /// Its node does not answer: the member is removed through another control plane.
    pub failed: bool,
    /// Where the snapshot taken first goes.
    pub snapshot: &'a Path,
    pub wait: Poll,
}

#[allow(clippy::too_many_arguments)] // the run's inputs, each one of a kind
pub fn remove_member(
    config: &Config,
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    cluster: &str,
    nodes: &[TalosNode],
    removal: &RemoveMember<'_>,
    now: u64,
    output: &mut dyn Write,
) -> Result<(), Error> {
    let gated = removal_gate(talos, cluster, nodes, removal)?;
    let (target, through) = (gated.target, gated.through);
    let Some(member) = gated.members.iter().find(|m| m.hostname == target.name) else {
        pop_common::info!(
            "{}: {} is not a member of etcd: nothing to remove",
            through.name,
            target.name
        );
        if config.dry_run {
            return Ok(());
        }
        let record = removal_record(
            cluster,
            target,
            MemberRemovalHow::AlreadyGone,
            None,
            &gated.members,
            None,
        );
        return write_line(&record, output);
    };
    // The snapshot comes from where `snapshot` takes it: the first healthy member.
    let source = quorum::snapshot_source(&gated.observed).unwrap_or(through);
    let steps = plan::remove_member(
        source,
        removal.snapshot,
        target,
        through,
        &member.id,
        removal.failed,
    );
    if config.dry_run {
        return write_plan(&steps, output);
    }
    snapshot(config, talos, cluster, nodes, removal.snapshot, now, output)?;
    pop_common::info!("{}", steps[2].says);
    let (how, members) = take_out(talos, sleeper, &gated, member, removal)?;
    pop_common::info!("{}: its member {} left etcd", target.name, member.id);
    let record = removal_record(
        cluster,
        target,
        how,
        Some(&member.id),
        &members,
        Some(removal.snapshot),
    );
    write_line(&record, output)
}

/// What the gate read: the node, the healthy member that speaks for the others, every answer,
/// and the members etcd lists.
struct Gated<'n> {
    target: &'n TalosNode,
    through: &'n TalosNode,
    observed: Vec<quorum::Observed>,
    members: Vec<Member>,
}

/// The node found, every member asked, and the removal refused unless every other member etcd
/// lists answers healthy following one leader, and the node's state fits the way asked (a node
/// that does not answer cannot leave; a healthy member is not removed behind its back).
fn removal_gate<'n>(
    talos: &dyn Talos,
    cluster: &str,
    nodes: &'n [TalosNode],
    removal: &RemoveMember<'_>,
) -> Result<Gated<'n>, Error> {
    let target = nodes
        .iter()
        .find(|n| n.name == removal.node)
        .ok_or_else(|| Error::UnknownNode {
            node: removal.node.to_owned(),
            known: nodes.iter().map(|n| n.name.clone()).collect(),
        })?;
    let observed = observe(talos, nodes);
    let refused = |answers: Vec<String>| Error::OthersUnhealthy {
        cluster: cluster.to_owned(),
        node: target.name.clone(),
        answers,
    };
    // The first other member that answers healthy lists the members and, for a failed node,
    // removes its member.
    let Some(through) = nodes.iter().zip(&observed).find_map(|(node, o)| {
        (node.name != target.name && o.status.as_ref().is_ok_and(|s| s.healthy())).then_some(node)
    }) else {
        let others: Vec<String> = observed
            .iter()
            .filter(|o| o.node.name != target.name)
            .map(ToString::to_string)
            .collect();
        return Err(refused(if others.is_empty() {
            vec![quorum::only_member(&target.name)]
        } else {
            others
        }));
    };
    let members = member_list(talos, through)?;
    let names: Vec<String> = members.iter().map(|m| m.hostname.clone()).collect();
    let blocking = quorum::others_unhealthy(&observed, &names, &target.name);
    if !blocking.is_empty() {
        return Err(refused(blocking));
    }
    let own = observed
        .iter()
        .find(|o| o.node.name == target.name)
        .map(|o| &o.status);
    match (removal.failed, own) {
        (false, Some(Err(error @ NodeError::Unreachable(_)))) => Err(Error::node(
            &target.name,
            "etcd leave (its member leaves on its own)",
            NodeError::Unreachable(format!(
                "{error}; for a node that is gone, remove its member through another control \
                 plane: FAILED=yes (--failed)"
            )),
        )),
        (true, Some(Ok(status))) if status.healthy() => Err(Error::StillMember {
            node: target.name.clone(),
            member_id: status.member_id.clone(),
        }),
        _ => Ok(Gated {
            target,
            through,
            observed,
            members,
        }),
    }
}

/// The member taken out, its way, then the member list read until it no longer names the
/// node: how, and the members left.
fn take_out(
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    gated: &Gated<'_>,
    member: &Member,
    removal: &RemoveMember<'_>,
) -> Result<(MemberRemovalHow, Vec<Member>), Error> {
    let (target, through) = (gated.target, gated.through);
    let (how, asked, doing, done) = if removal.failed {
        (
            MemberRemovalHow::RemoveMember,
            through,
            "etcd remove-member",
            talos.etcd_remove_member(through, &member.id),
        )
    } else {
        (
            MemberRemovalHow::Leave,
            target,
            "etcd leave",
            talos.etcd_leave(target),
        )
    };
    done.map_err(|error| Error::node(&asked.name, doing, error))?;
    let mut last = Vec::new();
    let gone = removal.wait.until(sleeper, |_| {
        last = member_list(talos, through)?;
        Ok::<_, Error>((!last.iter().any(|m| m.hostname == target.name)).then_some(()))
    })?;
    match gone {
        Some(()) => Ok((how, last)),
        None => Err(Error::NotRemoved {
            node: target.name.clone(),
            through: through.name.clone(),
            tries: removal.wait.tries,
            interval: removal.wait.interval,
        }),
    }
}

fn member_list(talos: &dyn Talos, through: &TalosNode) -> Result<Vec<Member>, Error> {
    talos
        .etcd_member_list(through)
        .map_err(|error| Error::node(&through.name, "etcd members", error))
}

fn removal_record(
    cluster: &str,
    node: &TalosNode,
    how: MemberRemovalHow,
    member_id: Option<&str>,
    members: &[Member],
    snapshot: Option<&Path>,
) -> EtcdMemberRemoval {
    EtcdMemberRemoval {
        kind: Kind::new(),
        version: Version,
        cluster_name: cluster.to_owned(),
        node: node.name.clone(),
        how,
        member_id: member_id.map(str::to_owned),
        members: {
            let mut names: Vec<String> = members.iter().map(|m| m.hostname.clone()).collect();
            names.sort();
            names
        },
        snapshot: snapshot.map(Path::to_path_buf),
    }
}
