//! What the control planes' etcd members said, and what it means: whether the cluster holds a
//! quorum, which member may stream a snapshot, which node a recovery goes to. Pure: the answers
//! are gathered by the caller ([`crate::talos::Talos`]).

use std::fmt;

/// A node (a control plane for the etcd work), and where its Talos API answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TalosNode {
    /// Its name in the inventory (its hostname: its etcd member's name).
    pub name: String,
    /// `<address>:<port>` of its Talos API (apid).
    pub endpoint: String,
    /// Its address, as `--nodes` names it.
    pub address: String,
}

/// What `EtcdStatus` answered for one member (the fields the gate reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// The member's id, hexadecimal as talosctl prints it.
    pub member_id: String,
    /// The leader this member follows; `0` or empty when it has none.
    pub leader: String,
    pub learner: bool,
    /// etcd's own errors ("etcdserver: no leader", alarms).
    pub errors: Vec<String>,
}

impl MemberStatus {
    /// A voting member that follows a leader and reports no error.
    pub fn healthy(&self) -> bool {
        !self.learner && self.errors.is_empty() && has_leader(&self.leader)
    }
}

fn has_leader(leader: &str) -> bool {
    !leader.trim_start_matches('0').is_empty()
}

/// Why a node's call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// Nothing answered the Talos API there (a machine down, or not booted yet).
    #[error("the Talos API does not answer: {0}")]
    Unreachable(String),
    /// Talos answered, with an error (its gRPC code and message).
    #[error("Talos answered {code}: {message}")]
    Answered { code: String, message: String },
    /// The client itself failed (talosctl missing, an output it cannot read).
    #[error("{0}")]
    Client(String),
}

impl NodeError {
    /// Whether the node's Talos API answered (even with an error): a node a recovery can go to.
    pub fn talos_answered(&self) -> bool {
        matches!(self, NodeError::Answered { .. })
    }
}

/// One control plane's answer to `EtcdStatus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub node: TalosNode,
    pub status: Result<MemberStatus, NodeError>,
}

impl Observed {
    /// Whether the node's Talos API answered the status read (even with an error).
    pub fn answered(&self) -> bool {
        match &self.status {
            Ok(_) => true,
            Err(error) => error.talos_answered(),
        }
    }
}

impl fmt::Display for Observed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.status {
            Ok(status) if status.healthy() => write!(
                f,
                "{}: member {} follows leader {}",
                self.node.name, status.member_id, status.leader
            ),
            Ok(status) if status.learner => {
                write!(
                    f,
                    "{}: member {} is a learner",
                    self.node.name, status.member_id
                )
            }
            Ok(status) if !status.errors.is_empty() => write!(
                f,
                "{}: member {} reports {}",
                self.node.name,
                status.member_id,
                status.errors.join(", ")
            ),
            Ok(status) => write!(
                f,
                "{}: member {} has no leader",
                self.node.name, status.member_id
            ),
            Err(error) => write!(f, "{}: {error}", self.node.name),
        }
    }
}

/// Whether etcd holds a quorum, as the members' answers show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quorum {
    /// A majority of `members` answer healthy, following the same leader: the cluster works,
    /// and a restore would throw away everything written since the snapshot.
    Healthy {
        leader: String,
        healthy: Vec<String>,
        members: usize,
    },
    /// No majority answers healthy.
    Lost { healthy: usize, members: usize },
}

/// The quorum the answers show, out of `members` voting members (the member list's count when a
/// member gave it, else the control planes of the inventory).
pub fn quorum(observed: &[Observed], members: usize) -> Quorum {
    let members = members.max(observed.len());
    let healthy: Vec<&Observed> = observed
        .iter()
        .filter(|o| o.status.as_ref().is_ok_and(MemberStatus::healthy))
        .collect();
    // The leader most healthy members follow; members that follow another one are not counted
    // with it (a split they should never show, but the count must not add them up).
    let mut best: Option<(String, Vec<String>)> = None;
    for candidate in &healthy {
        let Ok(status) = &candidate.status else {
            continue;
        };
        let followers: Vec<String> = healthy
            .iter()
            .filter(|o| o.status.as_ref().is_ok_and(|s| s.leader == status.leader))
            .map(|o| o.node.name.clone())
            .collect();
        if best.as_ref().is_none_or(|(_, f)| followers.len() > f.len()) {
            best = Some((status.leader.clone(), followers));
        }
    }
    match best {
        Some((leader, healthy)) if healthy.len() > members / 2 => Quorum::Healthy {
            leader,
            healthy,
            members,
        },
        Some((_, healthy)) => Quorum::Lost {
            healthy: healthy.len(),
            members,
        },
        None => Quorum::Lost {
            healthy: 0,
            members,
        },
    }
}

/// The control plane a snapshot is streamed from: the first, in the inventory's order, whose
/// member answers healthy.
pub fn snapshot_source(observed: &[Observed]) -> Option<&TalosNode> {
    observed
        .iter()
        .find(|o| o.status.as_ref().is_ok_and(MemberStatus::healthy))
        .map(|o| &o.node)
}

/// Why the member of `node` may not go now: each other member etcd lists (`members`, by name)
/// that does not answer healthy following the leader the others follow, or that is no control
/// plane of the inventory (its health unknown). Empty: it may go. With one member fewer, etcd
/// keeps its quorum only if all the others work; and a cluster of one member has none to hand
/// its data to.
pub fn others_unhealthy(observed: &[Observed], members: &[String], node: &str) -> Vec<String> {
    let others: Vec<&Observed> = observed
        .iter()
        .filter(|o| o.node.name != node && members.contains(&o.node.name))
        .collect();
    let mut blocking: Vec<String> = members
        .iter()
        .filter(|m| *m != node && !observed.iter().any(|o| &o.node.name == *m))
        .map(|m| {
            format!(
                "{m}: a member that is no control plane of the inventory: its health is unknown"
            )
        })
        .collect();
    if others.is_empty() && blocking.is_empty() {
        return vec![only_member(node)];
    }
    let leader = others.iter().find_map(|o| match &o.status {
        Ok(status) if status.healthy() => Some(status.leader.clone()),
        _ => None,
    });
    blocking.extend(
        others
            .into_iter()
            .filter(|o| {
                !o.status
                    .as_ref()
                    .is_ok_and(|s| s.healthy() && Some(&s.leader) == leader.as_ref())
            })
            .map(ToString::to_string),
    );
    blocking
}

/// Why the last member never goes.
pub fn only_member(node: &str) -> String {
    format!("{node} is etcd's only member: etcd would have no member left")
}
