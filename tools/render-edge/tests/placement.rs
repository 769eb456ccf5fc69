//! The gateway's placement on a real control plane of its own (kube-apiserver, kube-scheduler,
//! kube-controller-manager at the cluster's version; kwok's nodes run the pods without
//! containers): the Deployment istiod generates for the Gateway (its template,
//! `kube-gateway.yaml` at Istio 1.30.3, cut to what placement reads), with the rendered
//! `deployment` overlay merged into it as istiod merges it (a strategic merge patch typed by the
//! Deployment: kubectl's `patch --local` here), and the rendered PodDisruptionBudget.
//!
//! With two edge nodes and a node without the edge label: one pod on each edge node and none
//! elsewhere; a rollout completes; a drain of one edge node goes through and leaves the other's
//! pod, whose eviction the budget then refuses, and the evicted pod's replacement waits rather
//! than join it or go to the other node.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use testkit::control_plane::ControlPlane;
use testkit::process::text;

use crate::api_server::{kubectl, with_edge_nodes};
use crate::objects::{find, gateway_overlay};

const NAMESPACE: &str = "edge";
const DEPLOYMENT: &str = "edge-gateway-istio";
const EDGE_NODES: [&str; 2] = ["edge-worker-1", "edge-worker-2"];
/// A node the gateway must never use: a worker without the edge label.
const OTHER_NODE: &str = "plain-worker";

/// The Deployment istiod's template renders for `edge/edge-gateway` before any overlay:
/// `kube-gateway.yaml` 24-71 (no replicas, no strategy, no placement; the pods labelled with
/// the Gateway's name, the selector's label).
fn istiod_deployment() -> Value {
    let labels = json!({
        "gateway.networking.k8s.io/gateway-name": "edge-gateway",
        "gateway.networking.k8s.io/gateway-class-name": "istio",
        "gateway.istio.io/managed": "istio.io-gateway-controller",
    });
    let mut pod_labels = labels.clone();
    pod_labels["sidecar.istio.io/inject"] = json!("false");
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"gateway.networking.k8s.io/gateway-name": "edge-gateway"}},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"containers": [{
                    "name": "istio-proxy",
                    "image": "registry.example/proxyv2:1.30.3",
                }]},
            },
        },
    })
}

/// `kubectl <args>` that must succeed: its stdout.
fn ok(plane: &ControlPlane, args: &[&str], stdin: &str) -> String {
    let out = kubectl(plane, args, stdin);
    assert!(out.status.success(), "kubectl {args:?}: {}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// The gateway pods, `(node, phase)` each (an empty node for one not scheduled), sorted.
fn gateway_pods(plane: &ControlPlane) -> Vec<(String, String)> {
    let out = ok(
        plane,
        &[
            "--namespace",
            NAMESPACE,
            "get",
            "pods",
            "--selector=gateway.networking.k8s.io/gateway-name=edge-gateway",
            "--output=json",
        ],
        "",
    );
    let list: Value = serde_json::from_str(&out).unwrap();
    let mut pods: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
        .map(|p| {
            let node = p["spec"]["nodeName"].as_str().unwrap_or_default();
            (
                node.to_owned(),
                p["status"]["phase"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    pods.sort();
    pods
}

/// Waits (a minute at most) until the gateway pods are `want`.
fn wait_for_pods(plane: &ControlPlane, want: &[(&str, &str)]) {
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(n, p)| ((*n).to_owned(), (*p).to_owned()))
        .collect();
    let mut seen = Vec::new();
    for _ in 0..120 {
        seen = gateway_pods(plane);
        if seen == want {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("the gateway pods are {seen:?}, not {want:?}");
}

/// `kubectl rollout restart` of the gateway's Deployment, waited for until it completes.
fn restart(plane: &ControlPlane) {
    let deployment = format!("deployment/{DEPLOYMENT}");
    let ns = ["--namespace", NAMESPACE];
    ok(
        plane,
        &[&ns[..], &["rollout", "restart", &deployment]].concat(),
        "",
    );
    let status = ["rollout", "status", deployment.as_str(), "--timeout=120s"];
    ok(plane, &[&ns[..], &status[..]].concat(), "");
}

/// The cluster: the nodes (`edge_nodes` with the edge label, and one without), the edge
/// namespace, the budget and the merged Deployment, rolled out.
fn deploy(plane: &ControlPlane, objects: &[Value], edge_nodes: &[&str]) {
    for node in edge_nodes {
        plane.add_node(node, &[pop_common::records::EDGE_NODE_LABEL]);
    }
    plane.add_node(OTHER_NODE, &[]);
    let overlay = find(objects, "ConfigMap", "edge-gateway-options")["data"]["deployment"]
        .as_str()
        .unwrap()
        .to_owned();
    let merged = ok(
        plane,
        &[
            "patch",
            "--local",
            "--type=strategic",
            "--filename=-",
            "--patch",
            &overlay,
            "--output=json",
        ],
        &istiod_deployment().to_string(),
    );
    let namespace = find(objects, "Namespace", NAMESPACE);
    let budget = find(objects, "PodDisruptionBudget", "edge-gateway");
    let stream = format!("---\n{namespace}\n---\n{budget}\n---\n{merged}\n");
    ok(plane, &["create", "--filename=-"], &stream);
    let deployment = format!("deployment/{DEPLOYMENT}");
    let status = [
        "--namespace",
        NAMESPACE,
        "rollout",
        "status",
        deployment.as_str(),
    ];
    ok(plane, &[&status[..], &["--timeout=120s"]].concat(), "");
}

#[test]
fn one_gateway_pod_runs_on_each_edge_node_and_a_drain_leaves_the_other_serving() {
    let Some(plane) = ControlPlane::start("one_gateway_pod_runs_on_each_edge_node") else {
        return;
    };
    let objects = with_edge_nodes(&EDGE_NODES);
    assert_eq!(gateway_overlay(&objects)["spec"]["replicas"], 2);
    deploy(&plane, &objects, &EDGE_NODES);
    let running = [(EDGE_NODES[0], "Running"), (EDGE_NODES[1], "Running")];
    wait_for_pods(&plane, &running);

    // A rollout replaces the pods without a node to spare.
    restart(&plane);
    wait_for_pods(&plane, &running);
    let ns = ["--namespace", NAMESPACE];
    let budget = ["get", "poddisruptionbudget/edge-gateway"];
    let allowed = "--for=jsonpath={.status.disruptionsAllowed}=1";
    ok(
        &plane,
        &[&ns[..], &["wait", budget[1], allowed, "--timeout=60s"]].concat(),
        "",
    );

    // One edge node drained: its pod goes, and its replacement waits for a node of its own.
    let drain = |node: &str| {
        kubectl(
            &plane,
            &["drain", node, "--ignore-daemonsets", "--timeout=20s"],
            "",
        )
    };
    let first = drain(EDGE_NODES[0]);
    assert!(first.status.success(), "{}", text(&first));
    wait_for_pods(&plane, &[("", "Pending"), (EDGE_NODES[1], "Running")]);
    // The other edge node keeps its pod: the budget refuses its eviction.
    let second = drain(EDGE_NODES[1]);
    assert!(!second.status.success(), "{}", text(&second));
    assert!(
        text(&second).contains("disruption budget"),
        "{}",
        text(&second)
    );
    wait_for_pods(&plane, &[("", "Pending"), (EDGE_NODES[1], "Running")]);
    let get = ok(
        &plane,
        &[&ns[..], &budget[..], &["--output=json"]].concat(),
        "",
    );
    let stored: Value = serde_json::from_str(&get).unwrap();
    assert_eq!(stored["status"]["disruptionsAllowed"], 0, "{stored}");
}

#[test]
fn with_one_edge_node_a_rollout_starts_the_new_pod_beside_the_old_one() {
    let Some(plane) = ControlPlane::start("a_rollout_with_one_edge_node") else {
        return;
    };
    let objects = with_edge_nodes(&EDGE_NODES[..1]);
    deploy(&plane, &objects, &EDGE_NODES[..1]);
    wait_for_pods(&plane, &[(EDGE_NODES[0], "Running")]);
    restart(&plane);
    wait_for_pods(&plane, &[(EDGE_NODES[0], "Running")]);
    let (deployment, ns) = (
        format!("deployment/{DEPLOYMENT}"),
        ["--namespace", NAMESPACE],
    );
    // The old pod went only once the new one was ready: the Deployment never had none
    // available (maxUnavailable 0, the surge pod beside it on the one node).
    let got = ok(
        &plane,
        &[&ns[..], &["get", &deployment, "--output=json"]].concat(),
        "",
    );
    let stored: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(
        stored["spec"]["strategy"]["rollingUpdate"],
        json!({"maxSurge": 1, "maxUnavailable": 0}),
        "{stored}"
    );
}
