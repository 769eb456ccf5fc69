#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::components::talos_extra_args;
use super::*;

#[test]
fn kubectl_version_shows_the_pinned_client_and_server() {
    let Some(plane) = ControlPlane::shared("kubectl_version_shows_the_pinned") else {
        return;
    };
    let out = plane.kubectl_ok(&["version", "--output=json"], "");
    let version: serde_json::Value = serde_json::from_str(&out).unwrap();
    let pin = crate::pin("KUBERNETES_VERSION");
    assert_eq!(
        version["clientVersion"]["gitVersion"],
        pin.as_str(),
        "{out}"
    );
    assert_eq!(
        version["serverVersion"]["gitVersion"],
        pin.as_str(),
        "{out}"
    );
}

#[test]
fn the_api_server_takes_the_patches_extra_args() {
    let Some(plane) = ControlPlane::shared("the_api_server_takes_the_patches") else {
        return;
    };
    // talos/patches/40-nodeport-range.controlplane.yaml: the declared range (crates/flows),
    // the gateway's node ports and no host port.
    let range = flows::NODE_PORT_RANGE;
    assert!(
        talos_extra_args("apiServer").contains(&format!("--service-node-port-range={range}")),
        "{:?}",
        talos_extra_args("apiServer")
    );
    let service = |port: u16| {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": format!("nodeport-{port}"), "namespace": "default"},
            "spec": {"type": "NodePort", "selector": {"app": "none"},
                     "ports": [{"port": 80, "nodePort": port}]},
        })
        .to_string()
    };
    // Created for real: a server-side dry run does not allocate the port, so checks no range.
    for port in [range.first, range.last] {
        plane.kubectl_ok(&["create", "-f", "-"], &service(port));
    }
    // Just outside, and the kubelet's port, which the old range 80-32767 held.
    let refused: Vec<_> = [range.first - 1, range.last + 1, 10250]
        .into_iter()
        .map(|port| {
            crate::process::run_with_stdin(
                plane.kubectl().args(["create", "-f", "-"]),
                service(port).as_bytes(),
            )
        })
        .collect();
    for port in [range.first, range.last] {
        plane.kubectl_ok(
            &[
                "delete",
                "service",
                &format!("nodeport-{port}"),
                "--namespace=default",
            ],
            "",
        );
    }
    for out in refused {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a port outside {range} accepted");
        assert!(
            stderr.contains("provided port is not in the valid range"),
            "{stderr}"
        );
    }
}

#[test]
fn a_deleted_namespace_goes_away_with_what_it_held() {
    let Some(plane) = ControlPlane::shared("a_deleted_namespace_goes_away") else {
        return;
    };
    let ns = "cp-namespace-deletion";
    plane.kubectl_ok(&["create", "namespace", ns], "");
    plane.kubectl_ok(
        &[
            "create",
            "configmap",
            "held",
            "--namespace",
            ns,
            "--from-literal=a=b",
        ],
        "",
    );
    // The namespace stays Terminating until the namespace controller has emptied it.
    plane.kubectl_ok(&["delete", "namespace", ns, "--wait=false"], "");
    plane.kubectl_ok(
        &[
            "wait",
            "--for=delete",
            &format!("namespace/{ns}"),
            "--timeout=120s",
        ],
        "",
    );
    let gone = plane
        .kubectl()
        .args(["get", "namespace", ns])
        .output()
        .unwrap();
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"));
}

#[test]
fn only_a_node_kwok_manages_becomes_ready() {
    let Some(plane) = ControlPlane::shared("only_a_node_kwok_manages") else {
        return;
    };
    // Cordoned, so that no other test's pod lands on it.
    let unmanaged = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "cp-unmanaged"},
        "spec": {"unschedulable": true},
    });
    plane.kubectl_ok(&["create", "-f", "-"], &unmanaged.to_string());
    plane.add_node("cp-managed", &[("edge.node.kubernetes.io/public", "true")]);
    let ready = |node: &str| {
        plane.kubectl_ok(
            &[
                "get",
                "node",
                node,
                "--output=jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            "",
        )
    };
    assert_eq!(ready("cp-managed"), "True");
    assert_ne!(ready("cp-unmanaged"), "True");
    plane.kubectl_ok(&["delete", "node", "cp-unmanaged"], "");
}

#[test]
fn a_deployment_gets_running_pods_that_go_with_it() {
    let Some(plane) = ControlPlane::shared("a_deployment_gets_running_pods") else {
        return;
    };
    let (ns, node) = ("cp-deployment", "cp-deployment-node");
    plane.add_node(node, &[]);
    plane.kubectl_ok(&["create", "namespace", ns], "");
    let deployment = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    });
    plane.kubectl_ok(&["create", "-f", "-"], &deployment.to_string());
    plane.kubectl_ok(
        &[
            "rollout",
            "status",
            "deployment/web",
            "--namespace",
            ns,
            "--timeout=120s",
        ],
        "",
    );
    let pods = plane.kubectl_ok(
        &[
            "get",
            "pods",
            "--namespace",
            ns,
            "--selector=app=web",
            "--output=json",
        ],
        "",
    );
    let pods: serde_json::Value = serde_json::from_str(&pods).unwrap();
    let pods = pods["items"].as_array().unwrap();
    assert_eq!(pods.len(), 2);
    for pod in pods {
        assert_eq!(pod["status"]["phase"], "Running", "{pod}");
        assert_eq!(pod["spec"]["nodeName"], node, "{pod}");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
    }
    // Garbage collection: the Deployment's ReplicaSet, then its pods, which kwok lets go.
    plane.kubectl_ok(&["delete", "deployment", "web", "--namespace", ns], "");
    let mut left = String::from("?");
    for _ in 0..120 {
        left = plane.kubectl_ok(
            &[
                "get",
                "pods,replicasets",
                "--namespace",
                ns,
                "--output=name",
            ],
            "",
        );
        if left.trim().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert_eq!(left.trim(), "", "left after the Deployment was deleted");
    plane.kubectl_ok(&["delete", "namespace", ns, "--wait=false"], "");
}

#[test]
fn a_dropped_control_plane_leaves_no_process_and_no_folder() {
    let Some(plane) = ControlPlane::start("a_dropped_control_plane_leaves") else {
        return;
    };
    let pids: Vec<u32> = plane.components.iter().map(|c| c.child.id()).collect();
    assert_eq!(pids.len(), 5);
    let dir = plane.dir.clone();
    assert!(dir.join("etcd").is_dir());
    drop(plane);
    assert!(!dir.exists(), "{}", dir.display());
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} runs on"
        );
    }
}

#[test]
fn the_lifeline_stops_what_it_watches_when_its_pipe_closes() {
    let dir = tempfile::tempdir().unwrap().keep();
    fs::write(dir.join("data"), "x").unwrap();
    let mut lifeline = Lifeline::start(&dir);
    let mut watched = Command::new("sleep").arg("600").spawn().unwrap();
    lifeline.watch(watched.id());
    // What the end of the test process does: the pipe closes without `done`.
    drop(lifeline.stdin.take());
    assert!(lifeline.reaper.wait().unwrap().success());
    let status = watched.wait().unwrap();
    assert!(!status.success(), "{status}");
    assert!(!dir.exists());
}
