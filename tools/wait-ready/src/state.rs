//! What wait-ready decides, without the network: whether a node is Ready and why not, whether a
//! pod still blocks and why, which nodes to uncordon.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use pop_common::records::{Kind, RecordKind, Version};
use serde::Serialize;

/// A node as wait-ready sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub name: String,
    pub ready: bool,
    pub unschedulable: bool,
    /// Why it is not Ready: the Ready condition's status, reason and message.
    pub why: String,
}

pub fn node_view(node: &Node) -> NodeView {
    let name = node.metadata.name.clone().unwrap_or_default();
    let unschedulable = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let ready_condition = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    let (ready, why) = match ready_condition {
        Some(c) if c.status == "True" => (true, String::new()),
        Some(c) => (
            false,
            describe(
                &format!("Ready={}", c.status),
                c.reason.as_deref(),
                c.message.as_deref(),
            ),
        ),
        None => (
            false,
            "no Ready condition yet (kubelet not reporting)".to_owned(),
        ),
    };
    NodeView {
        name,
        ready,
        unschedulable,
        why,
    }
}

/// A pod as wait-ready sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub phase: String,
    /// The uid of the controller that owns it (a ReplicaSet, a DaemonSet...), if any.
    pub owner: Option<String>,
    /// Owned by a Job and finished (Succeeded or Failed): history, not something to wait for.
    pub finished_job: bool,
    /// Failed because the kubelet ended it on purpose: evicted (node pressure), or stopped by a
    /// graceful node shutdown, which Talos enables. Such a pod stays Failed until garbage
    /// collection; its controller has made a replacement, which is what to wait for.
    pub retired: bool,
    /// Its Ready condition is True: every container runs and passes its readiness probe (a
    /// container in CrashLoopBackOff leaves a pod Running but not Ready).
    pub ready: bool,
    /// Why it blocks: its phase, the conditions that are not True, the containers' waiting or
    /// terminated reasons.
    pub why: String,
}

/// The reasons the kubelet gives a pod it ends on purpose: `Evicted` (kubernetes
/// pkg/kubelet/eviction/eviction_manager.go), `Terminated` for a graceful node shutdown
/// (pkg/kubelet/nodeshutdown/nodeshutdown_manager.go; `Shutdown` before Kubernetes 1.26).
pub const RETIRED_REASONS: [&str; 3] = ["Evicted", "Terminated", "Shutdown"];

impl PodView {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Running and Ready: serving.
    pub fn serving(&self) -> bool {
        self.phase == "Running" && self.ready
    }

    /// Done with for good, and not worth waiting for: a finished Job's pod, a Succeeded pod, a
    /// retired one.
    fn history(&self) -> bool {
        self.finished_job || self.phase == "Succeeded" || (self.phase == "Failed" && self.retired)
    }

    /// A Failed pod whose owner serves again through another pod: replaced.
    fn replaced(&self, pods: &[PodView]) -> bool {
        self.phase == "Failed"
            && self.owner.as_ref().is_some_and(|owner| {
                pods.iter().any(|other| {
                    other.owner.as_ref() == Some(owner)
                        && other.key() != self.key()
                        && other.serving()
                })
            })
    }
}

/// The pods that still block, given every pod: whatever does not serve (Pending, Unknown,
/// Running but not Ready, Failed), except history (finished Job pods, Succeeded pods, evicted
/// or shut-down pods) and Failed pods whose owner has a replacement that serves.
pub fn blocking(pods: &[PodView]) -> Vec<&PodView> {
    pods.iter()
        .filter(|pod| !pod.serving() && !pod.history() && !pod.replaced(pods))
        .collect()
}

/// The pods that block nothing although they do not serve: Failed pods retired or replaced.
pub fn failed_but_done(pods: &[PodView]) -> usize {
    pods.iter()
        .filter(|pod| {
            pod.phase == "Failed" && !pod.finished_job && (pod.retired || pod.replaced(pods))
        })
        .count()
}

pub fn pod_view(pod: &Pod) -> PodView {
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Unknown".to_owned());
    let owners = pod.metadata.owner_references.iter().flatten();
    let owned_by_job = owners.clone().any(|r| r.kind == "Job");
    let owner = owners
        .clone()
        .find(|r| r.controller == Some(true))
        .or_else(|| owners.clone().next())
        .map(|r| r.uid.clone());
    let finished_job = owned_by_job && (phase == "Succeeded" || phase == "Failed");
    let status = pod.status.as_ref();
    let retired = status
        .and_then(|s| s.reason.as_deref())
        .is_some_and(|reason| RETIRED_REASONS.contains(&reason));
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let mut reasons = vec![format!("phase {phase}")];
    if let Some(status) = status {
        if let Some(reason) = status.reason.as_deref() {
            reasons.push(describe("reason", Some(reason), status.message.as_deref()));
        }
        for c in status.conditions.iter().flatten() {
            if c.status != "True" {
                reasons.push(describe(
                    &format!("{}={}", c.type_, c.status),
                    c.reason.as_deref(),
                    c.message.as_deref(),
                ));
            }
        }
        let containers = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten());
        for cs in containers {
            let state = cs.state.as_ref();
            if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
                reasons.push(describe(
                    &format!("container {} waiting", cs.name),
                    w.reason.as_deref(),
                    w.message.as_deref(),
                ));
            } else if let Some(t) = state.and_then(|s| s.terminated.as_ref())
                && t.exit_code != 0
            {
                reasons.push(describe(
                    &format!("container {} exited {}", cs.name, t.exit_code),
                    t.reason.as_deref(),
                    t.message.as_deref(),
                ));
            } else if state.is_some_and(|s| s.running.is_some()) && !cs.ready {
                reasons.push(format!("container {} running, not ready", cs.name));
            }
        }
    }
    PodView {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        phase,
        owner,
        finished_job,
        retired,
        ready,
        why: reasons.join("; "),
    }
}

fn describe(what: &str, reason: Option<&str>, message: Option<&str>) -> String {
    match (
        reason.filter(|r| !r.is_empty()),
        message.filter(|m| !m.is_empty()),
    ) {
        (Some(r), Some(m)) => format!("{what} {r}: {m}"),
        (Some(r), None) => format!("{what} {r}"),
        (None, Some(m)) => format!("{what}: {m}"),
        (None, None) => what.to_owned(),
    }
}

/// Which cordoned nodes to uncordon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    All,
    Named(BTreeSet<String>),
}

/// The cordoned nodes of the selection; `Err(name)` for a named node that does not exist.
pub fn to_uncordon(
    nodes: &BTreeMap<String, NodeView>,
    selection: &Selection,
) -> Result<Vec<String>, String> {
    match selection {
        Selection::All => Ok(nodes
            .values()
            .filter(|n| n.unschedulable)
            .map(|n| n.name.clone())
            .collect()),
        Selection::Named(names) => {
            if let Some(unknown) = names.iter().find(|n| !nodes.contains_key(*n)) {
                return Err(unknown.clone());
            }
            Ok(names
                .iter()
                .filter(|n| nodes.get(*n).is_some_and(|v| v.unschedulable))
                .cloned()
                .collect())
        }
    }
}

/// What stdout gets when the cluster is ready (kind WaitReadySummary, version 2).
#[derive(Debug, Serialize)]
pub struct Summary {
    pub kind: Kind<Summary>,
    pub version: Version<2>,
    pub nodes_ready: usize,
    pub uncordoned: Vec<String>,
    /// Nodes still cordoned that wait-ready was not asked to uncordon.
    pub still_cordoned: Vec<String>,
    /// Running and Ready.
    pub pods_running: usize,
    pub pods_succeeded: usize,
    pub finished_job_pods_ignored: usize,
    /// Failed pods that were evicted, stopped by a node shutdown, or replaced by a pod of the
    /// same owner that serves.
    pub failed_pods_ignored: usize,
    pub waited_seconds: u64,
}

impl RecordKind for Summary {
    const KIND: &'static str = "WaitReadySummary";
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn node(name: &str, ready: &str, unschedulable: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready, "reason": "KubeletNotReady",
                 "message": "container runtime network not ready: cni plugin not initialized"}
            ]}
        }))
        .unwrap()
    }

    #[test]
    fn a_node_is_ready_only_with_ready_true_and_says_why_not() {
        let v = node_view(&node("a", "True", false));
        assert!(v.ready);
        let v = node_view(&node("b", "False", true));
        assert!(!v.ready && v.unschedulable);
        assert_eq!(
            v.why,
            "Ready=False KubeletNotReady: container runtime network not ready: cni plugin not initialized"
        );
        let bare: Node = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
        assert!(!node_view(&bare).ready);
    }

    fn blocks(pod: &Pod) -> bool {
        !blocking(&[pod_view(pod)]).is_empty()
    }

    fn pod(phase: &str, owner: Option<&str>) -> Pod {
        let mut p = json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": phase, "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/4 nodes are available"}
            ], "containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                 "state": {"waiting": {"reason": "ImagePullBackOff", "message": "pull failed"}}}
            ]}
        });
        if let Some(kind) = owner {
            p["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "batch/v1", "kind": kind, "name": "j", "uid": "u"}]);
        }
        serde_json::from_value(p).unwrap()
    }

    /// A pod whose Ready condition is True.
    fn ready(mut pod: Pod) -> Pod {
        let status = pod.status.as_mut().unwrap();
        status.conditions = Some(vec![
            serde_json::from_value(json!({"type": "Ready", "status": "True"})).unwrap(),
        ]);
        status.container_statuses = None;
        pod
    }

    #[test]
    fn pods_block_unless_serving_finished_retired_or_replaced() {
        assert!(blocks(&pod("Pending", None)));
        assert!(!blocks(&ready(pod("Running", None))));
        // Running is not enough: a container in CrashLoopBackOff leaves the phase Running.
        assert!(blocks(&pod("Running", None)));
        assert!(!blocks(&pod("Succeeded", None)));
        assert!(blocks(&pod("Failed", None)));
        assert!(blocks(&pod("Failed", Some("ReplicaSet"))));
        let job = pod_view(&pod("Failed", Some("Job")));
        assert!(job.finished_job && blocking(std::slice::from_ref(&job)).is_empty());
        assert!(blocks(&pod("Pending", Some("Job"))));
        // Evicted, or stopped by a graceful node shutdown: history.
        for reason in ["Evicted", "Terminated"] {
            let mut gone = pod("Failed", Some("ReplicaSet"));
            gone.status.as_mut().unwrap().reason = Some(reason.into());
            assert!(!blocks(&gone), "{reason}");
        }
        // A Failed pod beside a serving pod of the same owner: replaced.
        let failed = pod_view(&pod("Failed", Some("ReplicaSet")));
        let mut replacement = pod_view(&ready(pod("Running", Some("ReplicaSet"))));
        replacement.name = "p-2".into();
        assert!(blocking(&[failed.clone(), replacement.clone()]).is_empty());
        assert_eq!(failed_but_done(&[failed.clone(), replacement.clone()]), 1);
        // Not while the replacement is not Ready, nor for another owner's pod.
        let mut starting = replacement.clone();
        starting.ready = false;
        assert_eq!(blocking(&[failed.clone(), starting]).len(), 2);
        let mut stranger = replacement;
        stranger.owner = Some("another".into());
        assert_eq!(blocking(&[failed, stranger]).len(), 1);
        let why = pod_view(&pod("Pending", None)).why;
        assert!(why.contains("phase Pending"), "{why}");
        assert!(
            why.contains("PodScheduled=False Unschedulable: 0/4 nodes are available"),
            "{why}"
        );
        assert!(
            why.contains("container app waiting ImagePullBackOff: pull failed"),
            "{why}"
        );
    }

    #[test]
    fn uncordon_only_what_was_asked_and_refuse_an_unknown_node() {
        let nodes: BTreeMap<String, NodeView> = [
            node("a", "True", true),
            node("b", "True", true),
            node("c", "True", false),
        ]
        .iter()
        .map(|n| {
            let v = node_view(n);
            (v.name.clone(), v)
        })
        .collect();
        assert_eq!(to_uncordon(&nodes, &Selection::All).unwrap(), ["a", "b"]);
        let named =
            |names: &[&str]| Selection::Named(names.iter().map(|s| s.to_string()).collect());
        assert_eq!(to_uncordon(&nodes, &named(&["b", "c"])).unwrap(), ["b"]);
        assert!(to_uncordon(&nodes, &named(&[])).unwrap().is_empty());
        assert_eq!(to_uncordon(&nodes, &named(&["z"])).unwrap_err(), "z");
    }
}
