//! wait-ready against the real control plane (`testkit::control_plane`): the real API server's
//! lists and watches, the scheduler, the controllers, and kwok for the kubelets, so nodes go
//! Ready and pods run as a cluster waking up does. What a kubelet reports that kwok does not
//! (a pod ended by a node shutdown, a container in CrashLoopBackOff) is written here through the
//! pod's status, as the kubelet writes it (each with its source).
//!
//! wait-ready looks at every node and pod of the cluster: the tests of this binary share one
//! control plane, one at a time, and each removes what it made.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use serde_json::{Value, json};
use testkit::control_plane::ControlPlane;
use testkit::process::Running;

/// One test at a time on the shared control plane, with what it made, removed when it ends
/// (whether it passes or not).
struct Scene {
    plane: &'static ControlPlane,
    namespaces: Vec<String>,
    nodes: Vec<String>,
    _turn: MutexGuard<'static, ()>,
}

fn scene(test: &str) -> Option<Scene> {
    static TURN: Mutex<()> = Mutex::new(());
    let plane = ControlPlane::shared(test)?;
    let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let nodes = plane.kubectl_ok(&["get", "nodes", "--output=name"], "");
    assert_eq!(nodes.trim(), "", "a node left by another test");
    Some(Scene {
        plane,
        namespaces: Vec::new(),
        nodes: Vec::new(),
        _turn: turn,
    })
}

/// A scene with `nodes` joined and `namespace` made: where a test of workloads starts.
fn scene_with(test: &str, nodes: &[&str], namespace: &str) -> Option<Scene> {
    let mut scene = scene(test)?;
    for node in nodes {
        scene.node(node);
    }
    scene.namespace(namespace);
    Some(scene)
}

impl Drop for Scene {
    fn drop(&mut self) {
        // Best effort: what is left fails the next scene's check for leftover nodes.
        let delete = |args: &[&str]| {
            let _ = self.plane.kubectl().arg("delete").args(args).output();
        };
        // The namespaces first: kwok lets their pods go while their nodes are still there.
        for namespace in &self.namespaces {
            delete(&["namespace", namespace, "--timeout=120s"]);
        }
        for node in &self.nodes {
            delete(&["node", node, "--timeout=60s"]);
            delete(&[
                "lease",
                node,
                "--namespace=kube-node-lease",
                "--ignore-not-found",
            ]);
        }
    }
}

impl Scene {
    fn node(&mut self, name: &str) {
        self.nodes.push(name.to_owned());
        self.plane.add_node(name, &[]);
    }

    fn namespace(&mut self, name: &str) {
        self.namespaces.push(name.to_owned());
        self.plane.kubectl_ok(&["create", "namespace", name], "");
    }

    fn kubectl(&self, args: &[&str]) -> String {
        self.plane.kubectl_ok(args, "")
    }

    /// A Deployment of `replicas` pods pinned to `node`; returns once they run when `rolled`.
    fn deployment(&self, namespace: &str, name: &str, node: &str, replicas: u32, rolled: bool) {
        let deployment = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                    },
                },
            },
        });
        self.plane
            .kubectl_ok(&["create", "-f", "-"], &deployment.to_string());
        if rolled {
            self.rolled(namespace, name);
        }
    }

    fn rolled(&self, namespace: &str, name: &str) {
        self.kubectl(&[
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--namespace",
            namespace,
            "--timeout=120s",
        ]);
    }

    fn pods(&self, namespace: &str, app: &str) -> Vec<Value> {
        let out = self.kubectl(&[
            "get",
            "pods",
            "--namespace",
            namespace,
            &format!("--selector=app={app}"),
            "--output=json",
        ]);
        let list: Value = serde_json::from_str(&out).unwrap();
        list["items"].as_array().unwrap().clone()
    }

    /// Writes the pod's status as its kubelet would (`kubectl patch --subresource=status`).
    fn report(&self, namespace: &str, pod: &str, status: &Value) {
        let patch = json!({"status": status}).to_string();
        self.kubectl(&[
            "patch",
            "pod",
            pod,
            "--namespace",
            namespace,
            "--subresource=status",
            "--type=merge",
            "--patch",
            &patch,
        ]);
    }

    fn wait_ready(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_wait-ready"));
        command
            .arg("--kubeconfig")
            .arg(self.plane.kubeconfig())
            .args(args)
            .stdin(Stdio::null())
            .env_remove("KUBECONFIG");
        command
    }

    /// wait-ready, which must succeed: its summary.
    fn ready(&self, args: &[&str]) -> Value {
        let out = self.wait_ready(args).output().unwrap();
        serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap()
    }

    /// wait-ready started in the background (log at debug), once it has listed `what` and
    /// watches it for the change it waits for: proof that it is waiting.
    fn waiting(&self, what: &str) -> Running {
        let mut running = Running::spawn(
            self.wait_ready(&["--timeout", "180s"])
                .env("EDGEPOP_LOG", "debug"),
        );
        running.wait_for_line(&format!("{what}: watching from resourceVersion"));
        running
    }
}

/// A Lease time (RFC 3339 with microseconds), now.
fn now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.%6NZ"])
        .output()
        .unwrap();
    testkit::process::success_stdout(&out).trim().to_owned()
}

#[test]
fn a_node_not_ready_yet_is_waited_for_until_it_is() {
    let Some(mut scene) = scene("a_node_not_ready_yet_is_waited_for") else {
        return;
    };
    let node = "wr-late";
    // The node's Lease, held by its kubelet, which has not come back (an hour's lease): kwok,
    // the kubelet that will, waits for it.
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 3600, "renewTime": now()},
    });
    scene
        .plane
        .kubectl_ok(&["create", "-f", "-"], &lease.to_string());
    scene.nodes.push(node.to_owned());
    scene.plane.create_node(node, &[]);

    let mut waiting = scene.waiting("nodes");
    let ready = scene.kubectl(&[
        "get",
        "node",
        node,
        "--output=jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ]);
    assert_ne!(ready, "True");
    assert!(waiting.running(), "wait-ready ended with a node not Ready");

    // The kubelet's lease lapses: kwok takes the node over and reports it Ready.
    scene.kubectl(&[
        "patch",
        "lease",
        node,
        "--namespace=kube-node-lease",
        "--type=merge",
        "--patch={\"spec\":{\"holderIdentity\":null}}",
    ]);
    let out = waiting.finish();
    let summary: Value = serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap();
    assert_eq!(summary["nodes_ready"], 1, "{summary}");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("1 nodes Ready"), "{log}");
}

#[test]
fn cordoned_nodes_are_uncordoned_as_asked_and_their_pods_then_run() {
    let (first, second, namespace) = ("wr-cordoned-a", "wr-cordoned-b", "wr-cordoned");
    let Some(scene) = scene_with("cordoned_nodes_are_uncordoned", &[first, second], namespace)
    else {
        return;
    };
    for node in [first, second] {
        scene.kubectl(&["cordon", node]);
    }
    // A pod that may only run on the first: the scheduler leaves it Pending while cordoned.
    scene.deployment(namespace, "web", first, 1, false);
    let unschedulable = |scene: &Scene| {
        scene.pods(namespace, "web").iter().all(|p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["reason"] == "Unschedulable"))
        })
    };
    testkit::eventually("the pod to be Unschedulable", || {
        (!scene.pods(namespace, "web").is_empty() && unschedulable(&scene)).then_some(())
    });

    let summary = scene.ready(&["--timeout", "180s", "--uncordon", first]);
    assert_eq!(summary["uncordoned"], json!([first]), "{summary}");
    assert_eq!(summary["still_cordoned"], json!([second]), "{summary}");
    assert_eq!(summary["pods_running"], 1, "{summary}");
    let cordoned = |node: &str| {
        scene.kubectl(&[
            "get",
            "node",
            node,
            "--output=jsonpath={.spec.unschedulable}",
        ])
    };
    assert_eq!(cordoned(first), "");
    assert_eq!(cordoned(second), "true");
    let pods = scene.pods(namespace, "web");
    assert_eq!(pods[0]["status"]["phase"], "Running");
    assert_eq!(pods[0]["spec"]["nodeName"], first);

    let summary = scene.ready(&["--timeout", "180s", "--uncordon-all"]);
    assert_eq!(summary["uncordoned"], json!([second]), "{summary}");
    assert_eq!(summary["still_cordoned"], json!([]), "{summary}");
    assert_eq!(cordoned(second), "");
}

/// What the kubelet writes on a pod it stops for a graceful node shutdown (Kubernetes v1.36.3
/// pkg/kubelet/nodeshutdown/nodeshutdown_manager.go, `nodeShutdownReason`,
/// `nodeShutdownMessage`, the DisruptionTarget condition with `TerminationByKubelet`).
fn shut_down() -> Value {
    let message = "Pod was terminated in response to imminent node shutdown.";
    json!({
        "phase": "Failed",
        "reason": "Terminated",
        "message": message,
        "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
             "message": message},
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "PodFailed"},
            {"type": "ContainersReady", "status": "False", "reason": "PodFailed"},
        ],
    })
}

/// What the kubelet writes on a pod it refuses to admit when it comes back
/// (pkg/kubelet/lifecycle/predicate.go, `UnexpectedAdmissionError`).
fn not_admitted() -> Value {
    json!({
        "phase": "Failed",
        "reason": "UnexpectedAdmissionError",
        "message": "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/gpu, which is unexpected",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "PodFailed"},
        ],
    })
}

#[test]
fn failed_pods_beside_their_running_replacements_pass() {
    let (node, namespace) = ("wr-rebooted", "wr-replaced");
    let Some(scene) = scene_with(
        "failed_pods_beside_their_running_replacements",
        &[node],
        namespace,
    ) else {
        return;
    };
    for (app, status) in [("shut-down", shut_down()), ("refused", not_admitted())] {
        scene.deployment(namespace, app, node, 1, true);
        let pod = scene.pods(namespace, app)[0]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        scene.report(namespace, &pod, &status);
        // The ReplicaSet counts a Failed pod out and makes a replacement, which kwok runs.
        let phases = || {
            let mut phases: Vec<String> = scene
                .pods(namespace, app)
                .iter()
                .map(|p| p["status"]["phase"].as_str().unwrap_or_default().to_owned())
                .collect();
            phases.sort();
            phases
        };
        testkit::eventually(&format!("{app}: a Running replacement"), || {
            (phases() == ["Failed", "Running"]).then_some(())
        });
    }
    let summary = scene.ready(&["--timeout", "60s"]);
    assert_eq!(summary["pods_running"], 2, "{summary}");
    assert_eq!(summary["failed_pods_ignored"], 2, "{summary}");
}

#[test]
fn a_running_pod_that_is_not_ready_is_waited_for_and_named() {
    let (node, namespace) = ("wr-crashing", "wr-crashing");
    let Some(scene) = scene_with("a_running_pod_that_is_not_ready", &[node], namespace) else {
        return;
    };
    scene.deployment(namespace, "web", node, 1, true);
    let pod = scene.pods(namespace, "web")[0].clone();
    let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
    // The kubelet's status of a container that keeps exiting: the pod stays Running, not Ready
    // (pkg/kubelet/status/generate.go `ContainersNotReady`; kuberuntime_manager.go's back-off
    // message; sync_result.go `CrashLoopBackOff`).
    let unready = "containers with unready status: [app]";
    let crashing = json!({
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": unready},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
             "message": unready},
        ],
        "containerStatuses": [{
            "name": "app", "image": "registry.k8s.io/pause:3.10", "imageID": "", "ready": false,
            "restartCount": 7, "started": false,
            "state": {"waiting": {"reason": "CrashLoopBackOff",
                "message": format!("back-off 5m0s restarting failed container=app pod={name}_{namespace}")}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                "startedAt": "2026-11-30T20:00:00Z", "finishedAt": "2026-11-30T20:00:01Z"}},
        }],
    });
    scene.report(namespace, &name, &crashing);

    let out = scene.wait_ready(&["--timeout", "5s"]).output().unwrap();
    testkit::process::assert_refused(
        &out,
        1,
        &[
            "timed out after 5s",
            &format!("pod {namespace}/{name}"),
            "Ready=False ContainersNotReady",
            "container app waiting CrashLoopBackOff",
        ],
    );

    // It comes back: the kubelet reports the container running and ready.
    let mut waiting = scene.waiting("pods");
    assert!(waiting.running(), "wait-ready ended with a pod not Ready");
    let running = json!({
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True"},
            {"type": "ContainersReady", "status": "True"},
        ],
        "containerStatuses": [{
            "name": "app", "image": "registry.k8s.io/pause:3.10", "imageID": "", "ready": true,
            "restartCount": 8, "started": true,
            "state": {"running": {"startedAt": "2026-11-30T20:05:00Z"}},
        }],
    });
    scene.report(namespace, &name, &running);
    let out = waiting.finish();
    let summary: Value = serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap();
    assert_eq!(summary["pods_running"], 1, "{summary}");
}

/// An operator behind an HTTPS proxy (`HTTPS_PROXY` in the shell, as kubectl honours it): the
/// kubeconfig names the cluster's endpoint, which only the proxy reaches. wait-ready goes
/// through it as kubectl does, and still checks the server's certificate against that name.
#[test]
fn the_cluster_is_reached_through_the_https_proxy_of_the_environment() {
    let Some(mut scene) = scene("the_cluster_is_reached_through_the_https_proxy") else {
        return;
    };
    scene.node("wr-proxied");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    scene.plane.example_endpoint_kubeconfig(&kubeconfig);
    let proxy = testkit::tunnel::Tunnel::start(
        &ControlPlane::example_endpoint_authority(),
        scene.plane.address(),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_wait-ready"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--timeout", "60s"])
        .stdin(Stdio::null())
        .env_remove("KUBECONFIG")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env("HTTPS_PROXY", proxy.url())
        .output()
        .unwrap();
    let summary: Value = serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap();
    assert_eq!(summary["nodes_ready"], 1, "{summary}");
    assert!(
        proxy.opened() > 0,
        "wait-ready did not go through the proxy"
    );
    assert_eq!(proxy.refused(), Vec::<String>::new());
}
