//! What talos-lifecycle refuses or fails on, each with its exit code and the way out it names.

use std::path::PathBuf;
use std::time::Duration;

use pop_common::exit::{Exit, OutputError, Report};
use pop_common::input::InputError;

use crate::quorum::NodeError;
use crate::upgrade::{self, Release};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Input(#[from] InputError),
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("{}: refused by etcdutl snapshot status: {message}; nothing was done", path.display())]
    Snapshot { path: PathBuf, message: String },
    #[error(
        "etcd of {cluster} holds its quorum: {} of {members} members follow leader {leader} \
         ({}); a restore would throw away everything written since the snapshot: refusing \
         (replace the broken members instead; a restore is for a cluster that lost its quorum)",
        healthy.len(), healthy.join(", ")
    )]
    QuorumHealthy {
        cluster: String,
        leader: String,
        healthy: Vec<String>,
        members: usize,
    },
    #[error("no control plane of {cluster} {wanted}:\n{}", answers.join("\n"))]
    NoNode {
        cluster: String,
        wanted: &'static str,
        answers: Vec<String>,
    },
    #[error("{node}: {doing}: {error}{}", hint(error))]
    Node {
        node: String,
        doing: &'static str,
        error: NodeError,
    },
    #[error(
        "{node}: its etcd member did not answer healthy within {tries} looks, {interval:?} apart \
         (last: {last}); `talosctl service etcd` on it says why"
    )]
    NotBack {
        node: String,
        tries: u32,
        interval: Duration,
        last: String,
    },
    #[error(
        "{}: etcd data is still there; Talos recovers a snapshot only on a control plane whose \
         etcd folder is empty, and the others join the recovered member only once theirs is. \
         Run again with --reset-ephemeral (make etcd-restore ... RESET_EPHEMERAL=yes): each \
         gets `talosctl reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL`, \
         as Talos's disaster recovery does, which also wipes the rest of its /var; nothing was \
         done",
        nodes.join(", ")
    )]
    HoldsData { nodes: Vec<String> },
    #[error(
        "{node}: not back with its etcd service Preparing within {tries} looks, {interval:?} \
         apart (last: {last}); `talosctl --nodes <address> dmesg` and `service etcd` on it say \
         why; run this again once it is"
    )]
    NotPreparing {
        node: String,
        tries: u32,
        interval: Duration,
        last: String,
    },
    #[error("--node {node}: not a control plane of the inventory (its control planes: {})", known.join(", "))]
    UnknownNode { node: String, known: Vec<String> },
    #[error(
        "{node}'s etcd member stays: every other member must answer healthy, following one \
         leader, before one of {cluster}'s members goes (else etcd may lose its quorum):\n{}",
        answers.join("\n")
    )]
    OthersUnhealthy {
        cluster: String,
        node: String,
        answers: Vec<String>,
    },
    #[error(
        "{node}: its member {member_id} answers healthy: let it leave (without FAILED=yes / \
         --failed), which also empties its etcd folder"
    )]
    StillMember { node: String, member_id: String },
    #[error(
        "{node}: {through}'s etcd still lists it after {tries} looks, {interval:?} apart \
         (`talosctl etcd members` on {through})"
    )]
    NotRemoved {
        node: String,
        through: String,
        tries: u32,
        interval: Duration,
    },
    #[error("{node}: {message}; nothing was done")]
    Unsupported { node: String, message: String },
    #[error("{node}: {refusal}; nothing was done")]
    Path {
        node: String,
        refusal: upgrade::PathRefusal,
    },
    #[error(
        "{node} runs {to} already, but its Kubernetes node is cordoned (unschedulable): the \
         drain of a stopped upgrade, which talosctl undoes only once the node is Ready again, \
         and a run skips a node on the target; once it is healthy, `kubectl uncordon {node}`, \
         then run this again; nothing was done"
    )]
    Cordoned { node: String, to: String },
    #[error(
        "talosctl is {client}, of another minor than the target {to}: use a talosctl of {} \
         (make tools, after the pin bump); nothing was done",
        to.minor_line()
    )]
    ClientMinor { client: String, to: Release },
    #[error(
        "before upgrading {node}, the cluster is not healthy: nothing was started on {node}{}:\n  {}",
        if done.is_empty() { String::new() } else { format!(" ({} run the target already; run this again once healthy: it resumes at {node})", done.join(", ")) },
        wrong.join("\n  ")
    )]
    Unhealthy {
        node: String,
        done: Vec<String>,
        wrong: Vec<String>,
    },
    #[error(
        "{node}: not back on {to} within {tries} looks, {interval:?} apart (last: {last}); \
         `talosctl --nodes <address> dmesg` and `service` on it say why; run this again once it \
         is: it resumes at the first node not yet on {to}"
    )]
    NotUpgraded {
        node: String,
        to: String,
        tries: u32,
        interval: Duration,
        last: String,
    },
    #[error(
        "{cluster} is not healthy after {tries} looks, {interval:?} apart:\n  {}\n\
         `talosctl etcd members` and `kubectl get nodes` say more; run this again to wait longer",
        last.join("\n  ")
    )]
    NotHealthy {
        cluster: String,
        tries: u32,
        interval: Duration,
        last: Vec<String>,
    },
    #[error("cannot write the output: {0}")]
    Output(#[from] OutputError),
}

impl Error {
    /// [`Error::Node`]: `node` (a node's name, or the program asked) failed at `doing`.
    pub(crate) fn node(node: &str, doing: &'static str, error: NodeError) -> Error {
        Error::Node {
            node: node.to_owned(),
            doing,
            error,
        }
    }
}

/// What to do about a refusal Talos's procedures name.
fn hint(error: &NodeError) -> String {
    match error {
        NodeError::Answered { code, .. } if code == "AlreadyExists" => {
            " (its etcd folder still holds data: run this again with --reset-ephemeral \
             (RESET_EPHEMERAL=yes), which runs `talosctl reset --graceful=false --reboot \
             --system-labels-to-wipe=EPHEMERAL` on that node, as Talos's disaster recovery does, \
             and waits until its etcd service is Preparing)"
                .to_owned()
        }
        _ => String::new(),
    }
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Input(_)
            | Error::File { .. }
            | Error::Snapshot { .. }
            | Error::UnknownNode { .. }
            | Error::Path { .. }
            | Error::Cordoned { .. }
            | Error::Unsupported { .. }
            | Error::ClientMinor { .. } => Exit::Usage,
            _ => Exit::Failure,
        }
    }
}
