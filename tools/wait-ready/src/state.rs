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
    /// Owned by a Job and finished (Succeeded or Failed): history, not something to wait for.
    pub finished_job: bool,
    /// Why it blocks: its phase, the conditions that are not True, the containers' waiting or
    /// terminated reasons.
    pub why: String,
}

impl PodView {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Still outside Running and Succeeded (a finished Job's pods never block).
    pub fn blocks(&self) -> bool {
        !self.finished_job && self.phase != "Running" && self.phase != "Succeeded"
    }
}

pub fn pod_view(pod: &Pod) -> PodView {
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Unknown".to_owned());
    let owned_by_job = pod
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|refs| refs.iter().any(|r| r.kind == "Job"));
    let finished_job = owned_by_job && (phase == "Succeeded" || phase == "Failed");
    let mut reasons = vec![format!("phase {phase}")];
    if let Some(status) = &pod.status {
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
            }
        }
    }
    PodView {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        phase,
        finished_job,
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

/// What stdout gets when the cluster is ready (kind WaitReadySummary, version 1).
#[derive(Debug, Serialize)]
pub struct Summary {
    pub kind: Kind<Summary>,
    pub version: Version<1>,
    pub nodes_ready: usize,
    pub uncordoned: Vec<String>,
    /// Nodes still cordoned that wait-ready was not asked to uncordon.
    pub still_cordoned: Vec<String>,
    pub pods_running: usize,
    pub pods_succeeded: usize,
    pub finished_job_pods_ignored: usize,
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

    #[test]
    fn pods_block_outside_running_and_succeeded_except_finished_jobs() {
        assert!(pod_view(&pod("Pending", None)).blocks());
        assert!(!pod_view(&pod("Running", None)).blocks());
        assert!(!pod_view(&pod("Succeeded", None)).blocks());
        assert!(pod_view(&pod("Failed", None)).blocks());
        assert!(pod_view(&pod("Failed", Some("ReplicaSet"))).blocks());
        let job = pod_view(&pod("Failed", Some("Job")));
        assert!(job.finished_job && !job.blocks());
        assert!(pod_view(&pod("Pending", Some("Job"))).blocks());
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
