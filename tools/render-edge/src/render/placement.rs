//! Where the gateway's pods run: one on each edge node. Every edge name's DNS A set holds every
//! worker's address, and the gateway's Service keeps the client's address
//! (`externalTrafficPolicy: Local`), so a worker without a gateway pod drops the traffic DNS
//! sends it.
//!
//! How istiod turns this into its Deployment, read in istio/istio 1.30.3 (the 1.30 tag whose
//! gateway controller the tests follow, `ISTIO_CONTRACT_VERSION`; the source mirror read holds
//! no 1.30.6 tag, `ISTIO_VERSION`):
//!
//! - `pilot/pkg/config/kube/gatewaycommon/deploymentcontroller.go` 611-628: the overlays are the
//!   class defaults (a ConfigMap of istio-system), then the Gateway's `parametersRef` ConfigMap's
//!   data; 655-662: every object the template renders goes through `applyOverlay`, which merges
//!   the key of its kind (`deployment` for the Deployment, 694-696) as a strategic merge patch
//!   typed by `appsv1.Deployment` (723, `strategicMergePatchYAML` 977-997). So `spec.replicas`,
//!   `spec.strategy` and the pod template's `nodeSelector` and `affinity` set here are kept.
//! - `manifests/charts/istio-control/istio-discovery/files/kube-gateway.yaml` 24-71: the
//!   Deployment sets neither `replicas` nor `strategy` nor any placement, and its pods carry
//!   `gateway.networking.k8s.io/gateway-name: <gateway>` (68), its selector (45-47). istiod
//!   writes no replica count of its own: its HorizontalPodAutoscaler (361-385) and
//!   PodDisruptionBudget (387-409) are rendered only when the ConfigMap has a
//!   `horizontalPodAutoscaler` or `podDisruptionBudget` key (`requiredOverlays` 675-678,
//!   730-732), and this one has neither: the count is ours, and the budget is rendered here,
//!   with the edge's other objects.
//! - It server-side applies the result with `force` as `istio.io/gateway-controller` (136-146),
//!   so what a former overlay set and this one drops (the former `kubernetes.io/hostname`
//!   selector) goes.

use serde_json::{Value, json};

use super::{GATEWAY, GATEWAY_NAME_LABEL, meta};
use crate::config::Plan;
use pop_common::records::EDGE_NODE_LABEL;

/// The node label whose values are node names: the spread's topology, one gateway pod per node.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The `spec` of the `deployment` overlay: the placement, and the pod template's `containers`
/// (merged into istiod's by name).
pub fn deployment_spec(plan: &Plan, containers: &[Value]) -> Value {
    json!({
        // One pod per edge node (the spread below puts one on each).
        "replicas": plan.edge_nodes.len(),
        // A rollout starts the new pod before it stops an old one: with one worker, the new pod
        // runs beside the old on the same node (the spread allows one more there), so a restart
        // (a key rotation, an Istio upgrade) never leaves the edge without a gateway.
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        },
        "template": {"spec": {
            // The workers the infra layer labels as the edge: a worker added there is placed
            // here with no edge config of its own.
            "nodeSelector": {EDGE_NODE_LABEL.0: EDGE_NODE_LABEL.1},
            // No edge node more than one pod ahead of another, counting the pods of one
            // revision only (`pod-template-hash`): with as many pods as nodes, each revision's
            // pods land one on each node, and a rollout's new pod may stand beside an old one.
            // (Counting every revision, a rollout that stops old pods in another order than it
            // placed new ones can end with two on one node and none on another: the spread is
            // only checked when a pod is placed.) A cordoned node still counts (taints
            // ignored), so a drained worker's pod waits Pending for it to come back, rather
            // than doubling up elsewhere and leaving it without one once it is uncordoned.
            // Required: a worker DNS points at must not be left without one.
            "topologySpreadConstraints": [{
                "maxSkew": 1,
                "topologyKey": HOSTNAME_LABEL,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": gateway_pods()},
                "matchLabelKeys": ["pod-template-hash"],
                "nodeAffinityPolicy": "Honor",
                "nodeTaintsPolicy": "Ignore",
            }],
            "containers": containers,
        }},
    })
}

/// The labels that select the gateway's pods, as istiod's template labels them.
fn gateway_pods() -> Value {
    json!({GATEWAY_NAME_LABEL: GATEWAY})
}

/// The gateway pods' PodDisruptionBudget: a drain evicts one at a time, and none while another
/// is not ready, so draining one worker leaves the others serving (with one edge node its one
/// pod may go: the drain is never blocked there). While a worker is down, the drain of another
/// waits: `kubectl drain --disable-eviction` is the operator's way past it.
pub fn disruption_budget() -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta(GATEWAY, "gateway"),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": gateway_pods()},
            // A pod that is not ready serves nothing: evicting it costs nothing, and it must not
            // hold its own node's drain.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    })
}
