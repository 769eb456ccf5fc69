//! wait-ready against a Kubernetes API stand-in on loopback (in this file: a small HTTP/1.1
//! server on 127.0.0.1). The contract it enforces is the API server's for what wait-ready uses:
//! list (`GET /api/v1/nodes`, `/api/v1/pods`: a List whose items carry no kind, with the
//! list's resourceVersion), watch (`?watch=true&resourceVersion=<the list's>`: a stream of
//! `{"type","object"}` lines that stays open; a watch from an unknown version is refused),
//! `PATCH /api/v1/nodes/<name>` as a JSON merge patch (`application/merge-patch+json`, anything
//! else is 415), and events by field selector (`involvedObject.kind`, `involvedObject.name`).
//!
//! Every request is recorded: each test asserts the exact requests made, so a polling loop
//! (a second list, a watch too many) fails it. No assertion depends on time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use testkit::http::{Request, read_request};

/// `GET nodes`, `WATCH pods`, `PATCH nodes/n1`, `GET events`: what the tests compare.
fn short(request: &Request) -> String {
    let path = request.target.split('?').next().unwrap_or_default();
    let rest = path.trim_start_matches("/api/v1/");
    // namespaces/<ns>/<resource> → <resource>; nodes/<name> stays.
    let resource = match rest.strip_prefix("namespaces/") {
        Some(r) => r.rsplit('/').next().unwrap_or_default(),
        None => rest,
    };
    let verb = if request.target.contains("watch=true") {
        "WATCH"
    } else {
        request.method.as_str()
    };
    format!("{verb} {resource}")
}

#[derive(Default)]
struct Cluster {
    resource_version: u64,
    nodes: BTreeMap<String, Value>,
    pods: BTreeMap<String, Value>,
    events: Vec<Value>,
    /// Objects a watch of that kind delivers as MODIFIED, in order (then it stays open).
    node_changes: VecDeque<Value>,
    pod_changes: VecDeque<Value>,
    /// The next watch gets `410 Gone` (etcd compacted past its resourceVersion), once.
    expire_next_watch: bool,
    /// Every request is refused with 403 (RBAC), as for a kubeconfig of the wrong user.
    forbidden: bool,
}

impl Cluster {
    fn bump(&mut self, object: &mut Value) {
        self.resource_version += 1;
        object["metadata"]["resourceVersion"] = json!(self.resource_version.to_string());
    }

    fn add_node(&mut self, node: Value) {
        let mut node = node;
        self.bump(&mut node);
        self.nodes
            .insert(node["metadata"]["name"].as_str().unwrap().to_owned(), node);
    }

    fn add_pod(&mut self, pod: Value) {
        let mut pod = pod;
        self.bump(&mut pod);
        self.pods.insert(pod_key(&pod), pod);
    }
}

/// `<namespace>/<name>`, how the cluster keeps its pods.
fn pod_key(pod: &Value) -> String {
    format!(
        "{}/{}",
        pod["metadata"]["namespace"].as_str().unwrap(),
        pod["metadata"]["name"].as_str().unwrap()
    )
}

struct ApiStandIn {
    port: u16,
    cluster: Arc<Mutex<Cluster>>,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
}

impl ApiStandIn {
    fn start(cluster: Cluster) -> ApiStandIn {
        Self::start_on(TcpListener::bind("127.0.0.1:0").unwrap(), cluster)
    }

    fn start_on(listener: TcpListener, cluster: Cluster) -> ApiStandIn {
        let port = listener.local_addr().unwrap().port();
        let cluster = Arc::new(Mutex::new(cluster));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, r, s) = (cluster.clone(), requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break; // woken by Drop
                }
                let Ok(stream) = stream else { continue };
                let (c, r) = (c.clone(), r.clone());
                std::thread::spawn(move || serve(stream, &c, &r));
            }
        });
        ApiStandIn {
            port,
            cluster,
            requests,
            stop,
        }
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    fn shorts(&self) -> Vec<String> {
        self.requests().iter().map(short).collect()
    }

    /// The exact requests made, in order (a polling loop makes more); the tool's stderr says why.
    fn assert_requests(&self, out: &std::process::Output, expected: &[&str]) {
        assert_eq!(self.shorts(), expected, "{}", stderr(out));
    }
}

impl Drop for ApiStandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn respond(stream: &mut TcpStream, status: &str, body: &Value) {
    let body = body.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn query(target: &str) -> BTreeMap<String, String> {
    target
        .split_once('?')
        .map(|(_, q)| q)
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            (
                k.to_owned(),
                v.replace("%3D", "=")
                    .replace("%2C", ",")
                    .replace("%2F", "/"),
            )
        })
        .collect()
}

fn serve(mut stream: TcpStream, cluster: &Mutex<Cluster>, requests: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let Ok(Some(request)) = read_request(&mut reader) else {
        return;
    };
    requests.lock().unwrap().push(request.clone());
    if cluster.lock().unwrap().forbidden {
        respond(
            &mut stream,
            "403 Forbidden",
            &status(
                403,
                "Forbidden",
                "nodes is forbidden: User \"nobody\" cannot list resource \"nodes\" in API group \"\" at the cluster scope",
            ),
        );
        return;
    }
    let path = request.target.split('?').next().unwrap_or_default();
    let q = query(&request.target);
    let kind = match path {
        "/api/v1/nodes" => Some("Node"),
        "/api/v1/pods" => Some("Pod"),
        _ => None,
    };
    match (request.method.as_str(), kind) {
        ("GET", Some(kind)) if q.get("watch").map(String::as_str) == Some("true") => {
            watch(stream, cluster, kind, &q);
        }
        ("GET", Some(kind)) => list(&mut stream, cluster, kind),
        ("PATCH", None) if path.starts_with("/api/v1/nodes/") => {
            patch_node(&mut stream, cluster, &request, path);
        }
        ("GET", None) if path.starts_with("/api/v1/namespaces/") && path.ends_with("/events") => {
            events(&mut stream, cluster, path, &q);
        }
        _ => respond(
            &mut stream,
            "404 Not Found",
            &status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        ),
    }
}

/// A watch from the list's version: the queued changes as MODIFIED events, then the stream
/// stays open until the client goes away (the real one until timeoutSeconds).
fn watch(
    mut stream: TcpStream,
    cluster: &Mutex<Cluster>,
    kind: &str,
    q: &BTreeMap<String, String>,
) {
    let mut guard = cluster.lock().unwrap();
    let current = guard.resource_version.to_string();
    let expire = std::mem::take(&mut guard.expire_next_watch);
    if expire || q.get("resourceVersion") != Some(&current) {
        // The stand-in's history is one version deep: a watch from any other version
        // is what the API server answers once its window has moved on.
        let event =
            json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")});
        drop(guard);
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{event}\n"
        );
        return;
    }
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
    );
    let changes: Vec<Value> = if kind == "Node" {
        guard.node_changes.drain(..).collect()
    } else {
        guard.pod_changes.drain(..).collect()
    };
    for mut object in changes {
        guard.bump(&mut object);
        object["kind"] = json!(kind);
        object["apiVersion"] = json!("v1");
        if kind == "Node" {
            let name = object["metadata"]["name"].as_str().unwrap().to_owned();
            guard.nodes.insert(name, object.clone());
        } else {
            guard.pods.insert(pod_key(&object), object.clone());
        }
        let _ = writeln!(stream, "{}", json!({"type": "MODIFIED", "object": object}));
        let _ = stream.flush();
    }
    drop(guard);
    let mut sink = [0u8; 64];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

fn list(stream: &mut TcpStream, cluster: &Mutex<Cluster>, kind: &str) {
    let guard = cluster.lock().unwrap();
    let items: Vec<Value> = if kind == "Node" {
        guard.nodes.values().cloned().collect()
    } else {
        guard.pods.values().cloned().collect()
    };
    // List items carry no kind or apiVersion; the list does.
    let items: Vec<Value> = items
        .into_iter()
        .map(|mut o| {
            o.as_object_mut().unwrap().remove("kind");
            o.as_object_mut().unwrap().remove("apiVersion");
            o
        })
        .collect();
    let list = json!({"kind": format!("{kind}List"), "apiVersion": "v1",
                      "metadata": {"resourceVersion": guard.resource_version.to_string()}, "items": items});
    drop(guard);
    respond(stream, "200 OK", &list);
}

fn patch_node(stream: &mut TcpStream, cluster: &Mutex<Cluster>, request: &Request, path: &str) {
    if request.header("content-type") != Some("application/merge-patch+json") {
        respond(
            stream,
            "415 Unsupported Media Type",
            &status(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format",
            ),
        );
        return;
    }
    let name = path.trim_start_matches("/api/v1/nodes/").to_owned();
    let patch: Value = serde_json::from_slice(&request.body).unwrap();
    let mut guard = cluster.lock().unwrap();
    let Some(mut node) = guard.nodes.get(&name).cloned() else {
        drop(guard);
        respond(
            stream,
            "404 Not Found",
            &status(404, "NotFound", &format!("nodes \"{name}\" not found")),
        );
        return;
    };
    merge_patch(&mut node, &patch);
    guard.bump(&mut node);
    guard.nodes.insert(name, node.clone());
    drop(guard);
    node["kind"] = json!("Node");
    node["apiVersion"] = json!("v1");
    respond(stream, "200 OK", &node);
}

/// The field selectors the API server knows for events; any other is a 400.
const EVENT_FIELDS: [&str; 5] = [
    "involvedObject.kind",
    "involvedObject.name",
    "involvedObject.namespace",
    "reason",
    "type",
];

fn events(
    stream: &mut TcpStream,
    cluster: &Mutex<Cluster>,
    path: &str,
    q: &BTreeMap<String, String>,
) {
    let namespace = path
        .trim_start_matches("/api/v1/namespaces/")
        .trim_end_matches("/events");
    let mut wanted = BTreeMap::new();
    for term in q
        .get("fieldSelector")
        .map(String::as_str)
        .unwrap_or_default()
        .split(',')
        .filter(|t| !t.is_empty())
    {
        let (field, value) = term.split_once('=').unwrap();
        if !EVENT_FIELDS.contains(&field) {
            respond(
                stream,
                "400 Bad Request",
                &status(
                    400,
                    "BadRequest",
                    &format!("\"{field}\" is not a known field selector"),
                ),
            );
            return;
        }
        wanted.insert(
            field.trim_start_matches("involvedObject.").to_owned(),
            value.to_owned(),
        );
    }
    let guard = cluster.lock().unwrap();
    let items: Vec<Value> = guard
        .events
        .iter()
        .filter(|e| e["metadata"]["namespace"] == json!(namespace))
        .filter(|e| {
            wanted
                .iter()
                .all(|(k, v)| e["involvedObject"][k] == json!(v))
        })
        .cloned()
        .collect();
    let list = json!({"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": guard.resource_version.to_string()}, "items": items});
    drop(guard);
    respond(stream, "200 OK", &list);
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            for (k, v) in fields {
                if v.is_null() {
                    target.as_object_mut().unwrap().remove(k);
                } else {
                    merge_patch(
                        target
                            .as_object_mut()
                            .unwrap()
                            .entry(k.clone())
                            .or_insert(Value::Null),
                        v,
                    );
                }
            }
        }
        other => *target = other.clone(),
    }
}

// --- objects ---------------------------------------------------------------------------------

fn node(name: &str, ready: bool, cordoned: bool) -> Value {
    let condition = if ready {
        json!({"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"})
    } else {
        json!({"type": "Ready", "status": "False", "reason": "KubeletNotReady",
               "message": "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"})
    };
    json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": name},
           "spec": {"unschedulable": cordoned, "podCIDR": "10.244.0.0/24"},
           "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, condition]}})
}

/// A pod as the API server returns it. A Running pod carries the conditions its kubelet reports
/// (kubernetes pkg/kubelet/status/generate.go and kubelet_pods.go: PodReadyToStartContainers,
/// Initialized, Ready, ContainersReady, PodScheduled) and a running, ready container.
fn pod(namespace: &str, name: &str, phase: &str, owner: Option<&str>) -> Value {
    let mut p = json!({"kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
        "status": {"phase": phase}});
    if phase == "Pending" {
        p["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/4 nodes are available: 4 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."}]);
    }
    if phase == "Running" {
        p["status"]["conditions"] = json!(
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
            .map(|t| json!({"type": t, "status": "True"}))
        );
        p["status"]["containerStatuses"] = json!([{"name": "app", "ready": true, "started": true,
            "restartCount": 0, "image": "registry.example/app:1", "imageID": "",
            "state": {"running": {"startedAt": "2026-11-30T20:00:00Z"}}}]);
    }
    if let Some(kind) = owner {
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": kind, "name": "lists-refresh-29000000", "uid": "0b7c"}]);
    }
    p
}

/// The pod, owned by a controller of that kind, name and uid (as the controller sets it:
/// `controller: true`).
fn owned(mut pod: Value, kind: &str, name: &str, uid: &str) -> Value {
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind,
        "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
    pod
}

/// A Failed pod the kubelet ended with this reason and message (status.reason, status.message).
fn ended(mut pod: Value, reason: &str, message: &str) -> Value {
    pod["status"]["reason"] = json!(reason);
    pod["status"]["message"] = json!(message);
    pod
}

/// A Running pod whose container keeps crashing: the phase stays Running, the kubelet reports
/// Ready and ContainersReady False (reason ContainersNotReady) and the container waiting in
/// CrashLoopBackOff (kubernetes pkg/kubelet/status/generate.go, kuberuntime's back-off message).
fn crash_looping(namespace: &str, name: &str, container: &str) -> Value {
    let mut p = pod(namespace, name, "Running", None);
    let unready = format!("containers with unready status: [{container}]");
    p["status"]["conditions"] = json!([
        {"type": "PodReadyToStartContainers", "status": "True"},
        {"type": "Initialized", "status": "True"},
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": unready},
        {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady", "message": unready},
        {"type": "PodScheduled", "status": "True"}]);
    p["status"]["containerStatuses"] = json!([{"name": container, "ready": false, "started": false,
        "restartCount": 6, "image": "docker.io/istio/pilot:1.30.6", "imageID": "",
        "state": {"waiting": {"reason": "CrashLoopBackOff",
            "message": format!("back-off 5m0s restarting failed container={container} pod={name}_{namespace}(0d9c)")}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
            "startedAt": "2026-11-30T20:00:00Z", "finishedAt": "2026-11-30T20:00:02Z"}}}]);
    p
}

fn ready_cluster() -> Cluster {
    let mut c = Cluster::default();
    c.add_node(node("cp-1", true, false));
    c.add_node(node("edge-worker-1", true, false));
    c.add_pod(pod("kube-system", "cilium-x7k2p", "Running", None));
    c
}

/// The ready cluster with its worker not Ready yet, then Ready through the watch.
fn worker_becoming_ready() -> Cluster {
    let mut c = ready_cluster();
    c.add_node(node("edge-worker-1", false, false));
    c.node_changes.push_back(node("edge-worker-1", true, false));
    c
}

/// The ready cluster with its worker cordoned, and a second control plane, cordoned too.
fn cordoned_cluster() -> Cluster {
    let mut c = ready_cluster();
    c.add_node(node("edge-worker-1", true, true));
    c.add_node(node("cp-2", true, true));
    c
}

// --- running the tool ------------------------------------------------------------------------

fn kubeconfig(dir: &tempfile::TempDir, port: u16) -> PathBuf {
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             users:\n- name: nobody\n  user: {{}}\ncontexts:\n- name: standin\n  context:\n    cluster: standin\n    user: nobody\n\
             current-context: standin\n"
        ),
    )
    .unwrap();
    path
}

fn wait_ready(dir: &tempfile::TempDir, port: u16, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wait-ready"));
    cmd.arg("--kubeconfig")
        .arg(kubeconfig(dir, port))
        .args(args)
        .stdin(Stdio::null())
        .env_remove("KUBECONFIG");
    cmd
}

/// wait-ready's output against the stand-in on `port` (its kubeconfig in a temporary directory).
fn output(port: u16, args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    wait_ready(&dir, port, args).output().unwrap()
}

/// A successful run: its output and the summary it writes on stdout.
fn run(api: &ApiStandIn, args: &[&str]) -> (std::process::Output, Value) {
    let out = output(api.port, args);
    let stdout = testkit::process::success_stdout(&out);
    (out, serde_json::from_str(&stdout).unwrap())
}

/// wait-ready given `--timeout after` against the stand-in on `port`: it gives up (exit 1),
/// saying it timed out after `after`, and names each of `needles`.
fn timed_out(port: u16, after: &str, needles: &[&str]) -> std::process::Output {
    let out = output(port, &["--timeout", after]);
    let timed_out = format!("timed out after {after}");
    let mut expected = vec![timed_out.as_str()];
    expected.extend_from_slice(needles);
    testkit::process::assert_refused(&out, 1, &expected);
    out
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// --- scenarios -------------------------------------------------------------------------------

#[test]
fn nodes_not_ready_then_ready_are_waited_for_through_one_watch() {
    let api = ApiStandIn::start(worker_becoming_ready());
    let (out, summary) = run(&api, &[]);
    api.assert_requests(&out, &["GET nodes", "WATCH nodes", "GET pods"]);
    assert_eq!(summary["nodes_ready"], json!(2));
    assert!(
        stderr(&out).contains("waiting for every node to be Ready"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("waiting for every pod to be Running and Ready"));
}

#[test]
fn the_cordoned_node_it_is_told_about_is_uncordoned_by_a_merge_patch() {
    let api = ApiStandIn::start(cordoned_cluster());
    let (out, summary) = run(&api, &["--uncordon", "edge-worker-1"]);
    api.assert_requests(
        &out,
        &["GET nodes", "PATCH nodes/edge-worker-1", "GET pods"],
    );
    let patch = &api.requests()[1];
    assert_eq!(
        patch.header("content-type"),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&patch.body).unwrap(),
        json!({"spec": {"unschedulable": false}})
    );
    assert_eq!(
        api.cluster.lock().unwrap().nodes["edge-worker-1"]["spec"]["unschedulable"],
        json!(false)
    );
    assert_eq!(summary["uncordoned"], json!(["edge-worker-1"]));
    assert_eq!(summary["still_cordoned"], json!(["cp-2"]));
    assert!(stderr(&out).contains("uncordoning node edge-worker-1"));
}

#[test]
fn uncordon_all_patches_every_cordoned_node_and_only_those() {
    let api = ApiStandIn::start(cordoned_cluster());
    let (_, summary) = run(&api, &["--uncordon-all"]);
    assert_eq!(
        api.shorts(),
        [
            "GET nodes",
            "PATCH nodes/cp-2",
            "PATCH nodes/edge-worker-1",
            "GET pods"
        ]
    );
    assert_eq!(summary["uncordoned"], json!(["cp-2", "edge-worker-1"]));
    assert_eq!(summary["still_cordoned"], json!([]));
}

#[test]
fn a_node_that_does_not_exist_is_refused_before_any_patch() {
    let api = ApiStandIn::start(ready_cluster());
    let out = output(api.port, &["--uncordon", "edge-worker-9"]);
    testkit::process::assert_refused(&out, 2, &["edge-worker-9", "not a node"]);
    assert_eq!(api.shorts(), ["GET nodes"]);
}

#[test]
fn pods_pending_then_running_are_waited_for_through_one_watch() {
    let mut cluster = ready_cluster();
    cluster.add_pod(pod("edge", "origin-5d9c", "Pending", None));
    cluster
        .pod_changes
        .push_back(pod("edge", "origin-5d9c", "Running", None));
    let api = ApiStandIn::start(cluster);
    let (out, summary) = run(&api, &[]);
    api.assert_requests(&out, &["GET nodes", "GET pods", "WATCH pods"]);
    assert_eq!(summary["pods_running"], json!(2));
}

#[test]
fn finished_job_pods_are_ignored() {
    let mut cluster = ready_cluster();
    cluster.add_pod(pod(
        "edge",
        "lists-refresh-29000000-a",
        "Failed",
        Some("Job"),
    ));
    cluster.add_pod(pod(
        "edge",
        "lists-refresh-29000000-b",
        "Succeeded",
        Some("Job"),
    ));
    let api = ApiStandIn::start(cluster);
    let (_, summary) = run(&api, &[]);
    assert_eq!(api.shorts(), ["GET nodes", "GET pods"]);
    assert_eq!(summary["finished_job_pods_ignored"], json!(2));
    assert_eq!(summary["pods_running"], json!(1));
}

#[test]
fn a_failed_pod_beside_its_running_replacement_passes_and_so_do_evicted_pods() {
    // After a reboot: the pod the graceful node shutdown stopped stays Failed beside the one its
    // ReplicaSet made since, and an evicted pod of a DaemonSet lingers until garbage collection.
    let mut cluster = ready_cluster();
    let shutdown = "Pod was terminated in response to imminent node shutdown.";
    cluster.add_pod(owned(
        ended(
            pod("edge", "origin-5d9c-old", "Failed", None),
            "Terminated",
            shutdown,
        ),
        "ReplicaSet",
        "origin-5d9c",
        "rs-origin",
    ));
    cluster.add_pod(owned(
        pod("edge", "origin-5d9c-new", "Running", None),
        "ReplicaSet",
        "origin-5d9c",
        "rs-origin",
    ));
    cluster.add_pod(owned(
        ended(
            pod("kube-system", "cilium-envoy-8f2kq", "Failed", None),
            "Evicted",
            "The node was low on resource: ephemeral-storage.",
        ),
        "DaemonSet",
        "cilium-envoy",
        "ds-envoy",
    ));
    let api = ApiStandIn::start(cluster);
    // Bounded: a wait-ready that took them for stuck would wait its whole default 15 minutes.
    let (out, summary) = run(&api, &["--timeout", "20s"]);
    api.assert_requests(&out, &["GET nodes", "GET pods"]);
    assert_eq!(summary["failed_pods_ignored"], json!(2));
    assert_eq!(summary["pods_running"], json!(2));
}

#[test]
fn a_failed_pod_without_a_replacement_is_named_at_the_timeout() {
    let mut cluster = ready_cluster();
    cluster.add_pod(owned(
        ended(
            pod("edge", "origin-5d9c-old", "Failed", None),
            "Error",
            "exit 2",
        ),
        "ReplicaSet",
        "origin-5d9c",
        "rs-origin",
    ));
    // Another owner's pod serving is no replacement.
    cluster.add_pod(owned(
        pod("edge", "lists-web-1", "Running", None),
        "ReplicaSet",
        "lists-web",
        "rs-other",
    ));
    let api = ApiStandIn::start(cluster);
    let out = timed_out(
        api.port,
        "2s",
        &["pod edge/origin-5d9c-old (phase Failed; reason Error: exit 2"],
    );
    assert!(!stderr(&out).contains("lists-web"), "{}", stderr(&out));
}

#[test]
fn a_running_pod_that_is_not_ready_keeps_waiting_and_is_named_at_the_timeout() {
    let mut cluster = ready_cluster();
    cluster.add_pod(crash_looping("istio-system", "istiod-7c9d", "discovery"));
    let api = ApiStandIn::start(cluster);
    timed_out(
        api.port,
        "3s",
        &[
            "pod istio-system/istiod-7c9d (phase Running",
            "Ready=False ContainersNotReady: containers with unready status: [discovery]",
            "container discovery waiting CrashLoopBackOff: back-off 5m0s",
        ],
    );
    // It waited on the watch, not on a polling loop.
    assert_eq!(
        api.shorts(),
        ["GET nodes", "GET pods", "WATCH pods", "GET events"]
    );
}

#[test]
fn a_running_pod_that_becomes_ready_is_waited_for_through_one_watch() {
    let mut cluster = ready_cluster();
    cluster.add_pod(crash_looping("istio-system", "istiod-7c9d", "discovery"));
    cluster
        .pod_changes
        .push_back(pod("istio-system", "istiod-7c9d", "Running", None));
    let api = ApiStandIn::start(cluster);
    let (out, summary) = run(&api, &["--timeout", "20s"]);
    api.assert_requests(&out, &["GET nodes", "GET pods", "WATCH pods"]);
    assert_eq!(summary["pods_running"], json!(2));
}

#[test]
fn an_api_server_that_refuses_connections_at_first_is_waited_for() {
    // A port with nobody listening: connections are refused until the stand-in starts there.
    let port = testkit::free_port();
    let dir = tempfile::tempdir().unwrap();
    let mut running =
        testkit::process::Running::spawn(&mut wait_ready(&dir, port, &["--timeout", "5m"]));
    // Start the API server once the tool has said it met a refusal (it says so at its first
    // attempt).
    running.wait_for_line("does not answer yet");
    let api = ApiStandIn::start_on(
        TcpListener::bind(("127.0.0.1", port)).unwrap(),
        ready_cluster(),
    );
    let out = running.finish();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("Connection refused") || err.contains("connection refused"),
        "{err}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["nodes_ready"], json!(2));
    // Once it answers: one list each, nothing more.
    assert_eq!(api.shorts(), ["GET nodes", "GET pods"]);
}

#[test]
fn an_api_server_that_never_answers_is_reported_at_the_deadline() {
    timed_out(testkit::free_port(), "2s", &["never listed the nodes"]);
}

#[test]
fn a_timeout_names_the_stuck_pod_its_reason_and_its_last_event() {
    let mut cluster = ready_cluster();
    cluster.add_pod(pod("edge", "origin-5d9c", "Pending", None));
    cluster.add_pod(pod(
        "edge",
        "lists-refresh-29000000-b",
        "Succeeded",
        Some("Job"),
    ));
    for (time, reason, message) in [
        ("2026-11-30T20:00:00Z", "Scheduled", "an older event"),
        (
            "2026-11-30T20:05:00Z",
            "FailedScheduling",
            "0/4 nodes are available: 4 node(s) had untolerated taint",
        ),
        ("2026-11-30T20:01:00Z", "Pulled", "another older event"),
    ] {
        cluster.events.push(
            json!({"metadata": {"name": format!("origin-5d9c.{reason}"), "namespace": "edge"},
            "involvedObject": {"kind": "Pod", "name": "origin-5d9c", "namespace": "edge"},
            "reason": reason, "message": message, "lastTimestamp": time, "type": "Warning"}),
        );
    }
    cluster.events.push(
        json!({"metadata": {"name": "other.Killing", "namespace": "edge"},
        "involvedObject": {"kind": "Pod", "name": "other", "namespace": "edge"},
        "reason": "Killing", "message": "not this pod", "lastTimestamp": "2026-11-30T21:00:00Z"}),
    );
    let api = ApiStandIn::start(cluster);
    let out = timed_out(
        api.port,
        "3s",
        &[
            "pod edge/origin-5d9c",
            "PodScheduled=False Unschedulable",
            "last event: FailedScheduling: 0/4 nodes are available",
        ],
    );
    let err = stderr(&out);
    assert!(
        !err.contains("lists-refresh"),
        "a finished Job pod is not stuck: {err}"
    );
    assert!(!err.contains("not this pod"), "{err}");
    assert_eq!(
        api.shorts(),
        ["GET nodes", "GET pods", "WATCH pods", "GET events"]
    );
    let events = &api.requests()[3].target;
    assert!(
        events.starts_with("/api/v1/namespaces/edge/events?"),
        "{events}"
    );
}

#[test]
fn a_timeout_names_the_node_that_stays_not_ready_and_why() {
    let mut cluster = ready_cluster();
    cluster.add_node(node("edge-worker-1", false, false));
    let api = ApiStandIn::start(cluster);
    let out = output(api.port, &["--timeout", "2s"]);
    testkit::process::assert_refused(
        &out,
        1,
        &[
            "node edge-worker-1 not Ready",
            "KubeletNotReady",
            "cni plugin not initialized",
        ],
    );
    assert_eq!(api.shorts(), ["GET nodes", "WATCH nodes"]);
}

#[test]
fn a_watch_whose_version_expired_lists_again_then_watches() {
    let mut cluster = worker_becoming_ready();
    cluster.expire_next_watch = true;
    let api = ApiStandIn::start(cluster);
    let (out, summary) = run(&api, &[]);
    api.assert_requests(
        &out,
        &[
            "GET nodes",
            "WATCH nodes",
            "GET nodes",
            "WATCH nodes",
            "GET pods",
        ],
    );
    assert_eq!(summary["nodes_ready"], json!(2));
}

#[test]
fn a_forbidden_request_is_final_not_retried_until_the_deadline() {
    let mut cluster = ready_cluster();
    cluster.forbidden = true;
    let api = ApiStandIn::start(cluster);
    let out = output(api.port, &["--timeout", "10m"]);
    testkit::process::assert_refused(&out, 1, &["listing nodes", "forbidden"]);
    assert_eq!(api.shorts(), ["GET nodes"]);
}
