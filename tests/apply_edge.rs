//! `make apply-edge` end to end: render-edge, pipelines/apply-edge.sh (and rotate-pow-secret.sh,
//! destroy-edge.sh) and the pinned kubectl, at the cluster's version, against the real API server
//! of testkit's control plane with the platform's CRDs: real server-side apply and field
//! ownership, the ApplySet's prune, the controllers' garbage collection and namespace
//! finalisation.
//!
//! What is checked: every write of the scripts is a server-side apply by the field manager
//! `edgepop-edge` (each object's managedFields); the HMAC Secret is applied from a 0600 file and
//! its value never reaches the scripts' output; the `policy-lists` ConfigMap is applied without
//! data, so the refresh's keys are never reverted; objects the layer stops rendering are pruned
//! and the rest is kept; the dry-run twin changes nothing; destroy deletes what the ApplySet
//! proves ours, then the namespace, and nothing without that proof.
//!
//! And istiod's side of the cluster (istiod does not build here: k8s/versions.env), played as
//! istiod 1.30 does it (read in its source, pilot/pkg/config/kube/gatewaycommon): it creates the
//! GatewayClass `istio` with its own description (gatewayclass.go, a plain create: field manager
//! `pilot-discovery`, from its user agent) and marks it Accepted; for each Gateway it server-side
//! applies (field manager `istio.io/gateway-controller`, force) a Deployment, Service and
//! ServiceAccount named `<gateway>-<class>`, labelled with `spec.infrastructure.labels`, or, when
//! that is unset, with a copy of the Gateway's own labels (deploymentcontroller.go,
//! extractInfrastructureMetadata).
//!
//! The edge's names are fixed (the namespace `edge`, the class `istio`): these tests take the
//! shared control plane one at a time, and each leaves it as it found it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

use serde_json::{Value, json};
use testkit::control_plane::ControlPlane;
use testkit::istiod::{self, Istiod};
use testkit::process::text;

const NAMESPACE: &str = "edge";

fn workspace() -> PathBuf {
    testkit::workspace::root()
}

/// The shared control plane, this test's turn on it, and a folder for the test's files.
struct Cluster {
    plane: &'static ControlPlane,
    dir: tempfile::TempDir,
    /// The PATH of the scripts: the pinned kubectl first.
    path: OsString,
    _turn: MutexGuard<'static, ()>,
}

/// [`cluster`] with the GatewayClass istiod makes and accepts (see
/// [`Cluster::play_istiod_class`]), as a cluster running Istio has it.
fn cluster_with_istiod_class(test: &str) -> Option<Cluster> {
    let cluster = cluster(test)?;
    cluster.play_istiod_class();
    Some(cluster)
}

fn cluster(test: &str) -> Option<Cluster> {
    static TURN: Mutex<()> = Mutex::new(());
    let kubectl = testkit::upstream::program(test, "kubectl")?;
    let crds = testkit::crds::platform(test)?;
    let plane = ControlPlane::shared(test)?;
    plane.install_crds(&crds);
    let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut path = vec![kubectl.parent().unwrap().to_path_buf()];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let cluster = Cluster {
        plane,
        dir: tempfile::tempdir().unwrap(),
        path: std::env::join_paths(path).unwrap(),
        _turn: turn,
    };
    // A test that failed may have left its edge behind.
    cluster.remove_edge();
    Some(cluster)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.remove_edge();
    }
}

impl Cluster {
    /// Deletes whatever of an edge is there: the namespace (which takes everything in it) and
    /// the cluster-scoped objects, whether they are ours or istiod's.
    fn remove_edge(&self) {
        let _ = self
            .kubectl(&[
                "delete",
                "namespace",
                NAMESPACE,
                "--ignore-not-found",
                "--timeout=120s",
            ])
            .status;
        let _ = self
            .kubectl(&["delete", "gatewayclass", "istio", "--ignore-not-found"])
            .status;
        let _ = self
            .kubectl(&[
                "delete",
                "clusterissuers,validatingadmissionpolicies,validatingadmissionpolicybindings",
                "--selector=app.kubernetes.io/part-of=edgepop",
                "--ignore-not-found",
            ])
            .status;
    }

    fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    fn render(&self, config: &str) -> PathBuf {
        self.render_file(&workspace().join("config").join(config))
    }

    /// Renders the objects of `config` into `<config>.yaml`, and its names (`--names`, what
    /// the scripts read) beside them: see [`names_of`].
    fn render_file(&self, config: &Path) -> PathBuf {
        let render = |extra: &[&str]| {
            let out = Command::new(testkit::workspace::bin("render-edge"))
                .arg("--inputs")
                .arg(workspace().join("config/platform-inputs.example.json"))
                .arg("--config")
                .arg(config)
                .args(extra)
                .output()
                .unwrap();
            testkit::process::success_stdout(&out);
            out.stdout
        };
        let name = config.file_name().unwrap().to_str().unwrap();
        let path = self.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, render(&[])).unwrap();
        std::fs::write(path.with_extension("list.json"), render(&["--output=json"])).unwrap();
        std::fs::write(names_of(&path), render(&["--names"])).unwrap();
        path
    }

    /// The filter's example config with the HMAC Secret renamed.
    fn render_with_secret_name(&self, secret_name: &str) -> PathBuf {
        let text =
            std::fs::read_to_string(workspace().join("config/edge-pow.example.json")).unwrap();
        let mut config: Value = serde_json::from_str(&text).unwrap();
        config["pow"]["secret_name"] = Value::from(secret_name);
        // The copy lives elsewhere: the published-images record it names, relative to the
        // config's folder, is given by its absolute path.
        let published = config["images"]["published"].as_str().unwrap().to_owned();
        config["images"]["published"] =
            Value::from(workspace().join("config").join(published).to_str().unwrap());
        let path = self.write("edge-custom-secret.json", &config.to_string());
        self.render_file(&path)
    }

    /// A pipeline script, with this cluster's kubeconfig and the pinned kubectl.
    fn script(&self, name: &str) -> Command {
        let mut command = Command::new(workspace().join("pipelines").join(name));
        command
            .env("KUBECONFIG", self.plane.kubeconfig())
            .env("PATH", &self.path)
            .env("OUT", self.out())
            .env("FIELD_MANAGER", "edgepop-edge")
            .stdin(Stdio::null());
        command
    }

    /// Runs apply-edge.sh while istiod's status controller is played (when `answer` is given):
    /// once the Gateway exists, its Accepted condition is set to `answer` for the generation
    /// seen, as istiod does for each generation of a Gateway of its class.
    fn run_apply_edge_answered(
        &self,
        mode: &str,
        objects: &Path,
        wait_seconds: &str,
        answer: Option<istiod::Answer>,
    ) -> Output {
        let stdout = self.dir.path().join("apply-edge.stdout");
        let stderr = self.dir.path().join("apply-edge.stderr");
        let mut child = self
            .script("apply-edge.sh")
            .arg(mode)
            .env("OBJECTS", objects)
            .env("NAMES", names_of(objects))
            .env("GATEWAY_WAIT_SECONDS", wait_seconds)
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut istiod = Istiod::new(|| self.plane.kubectl());
        // Bounded (60 s): the script's own waits are shorter than this. A look every 250 ms (two
        // kubectl lists, classes and Gateways): the script itself looks once a second.
        let mut status = None;
        for _ in 0..240 {
            if let Some(exit) = child.try_wait().unwrap() {
                status = Some(exit);
                break;
            }
            if let Some(answer) = answer {
                istiod.look(answer);
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        let Some(status) = status else {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("apply-edge.sh {mode} did not stop within 60 s");
        };
        Output {
            status,
            stdout: std::fs::read(&stdout).unwrap(),
            stderr: std::fs::read(&stderr).unwrap(),
        }
    }

    fn run_apply_edge(&self, mode: &str, objects: &Path, wait_seconds: &str) -> Output {
        self.run_apply_edge_answered(mode, objects, wait_seconds, None)
    }

    /// apply-edge.sh, with istiod accepting the Gateway; checks that it succeeded.
    fn apply_edge(&self, mode: &str, objects: &Path) -> Output {
        let out = self.run_apply_edge_answered(mode, objects, "30", Some(istiod::ACCEPTED));
        assert!(
            out.status.success(),
            "apply-edge.sh {mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Runs destroy-edge.sh for what `objects` names; checks that it succeeded and returns its
    /// output (stdout, then stderr).
    fn destroy_edge(&self, objects: &Path) -> (String, String) {
        let out = self
            .script("destroy-edge.sh")
            .env("NAMES", names_of(objects))
            .env("CLUSTER", "edge-par")
            .env("CONFIRM", "yes")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{said}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), said)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        self.plane.kubectl().args(args).output().unwrap()
    }

    #[track_caller]
    fn kubectl_ok(&self, args: &[&str]) {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The object, with its managedFields; `None` when it does not exist.
    fn get(&self, args: &[&str]) -> Option<Value> {
        let mut all = vec!["get", "--output=json", "--show-managed-fields"];
        all.extend_from_slice(args);
        let out = self.kubectl(&all);
        if out.status.success() {
            return Some(serde_json::from_slice(&out.stdout).unwrap());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("NotFound"), "kubectl {all:?}: {stderr}");
        None
    }

    /// istiod's GatewayClass controller: creates `istio` (a create, not an apply) with its own
    /// description, then its status controller marks it Accepted.
    fn play_istiod_class(&self) {
        let class = self.write(
            "istiod-class.yaml",
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n\
             metadata: {name: istio}\n\
             spec: {controllerName: istio.io/gateway-controller, \
             description: The default Istio GatewayClass}\n",
        );
        self.kubectl_ok(&[
            "create",
            "--field-manager=pilot-discovery",
            "-f",
            class.to_str().unwrap(),
        ]);
        Istiod::new(|| self.plane.kubectl()).look(istiod::ACCEPTED);
    }

    /// istiod's deployment controller for the Gateway `edge/edge-gateway`: what it generates,
    /// labelled as extractInfrastructureMetadata says.
    fn play_istiod_gateway(&self) {
        let gateway = self
            .get(&["-n", NAMESPACE, "gateway", "edge-gateway"])
            .expect("the Gateway is applied");
        let infra = |which: &str| -> serde_json::Map<String, Value> {
            match gateway["spec"]["infrastructure"][which].as_object() {
                // Set: used as is, less the gateway.networking.k8s.io/ prefix (translateInfraMeta).
                Some(set) => set
                    .iter()
                    .filter(|(k, _)| !k.starts_with("gateway.networking.k8s.io/"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                // Unset: a copy of the Gateway's own (PILOT_ENABLE_GATEWAY_API_COPY_LABELS_ANNOTATIONS,
                // on by default).
                None => gateway["metadata"][which]
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            }
        };
        let mut labels = infra("labels");
        labels.insert(
            "gateway.networking.k8s.io/gateway-name".into(),
            "edge-gateway".into(),
        );
        labels.insert(
            "gateway.networking.k8s.io/gateway-class-name".into(),
            "istio".into(),
        );
        let annotations = infra("annotations");
        let owner = json!([{
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "name": "edge-gateway", "uid": gateway["metadata"]["uid"],
        }]);
        let meta = json!({
            "name": "edge-gateway-istio", "namespace": NAMESPACE,
            "labels": labels, "annotations": annotations, "ownerReferences": owner,
        });
        let objects = [
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
                "selector": {"matchLabels": {"gateway.networking.k8s.io/gateway-name": "edge-gateway"}},
                "template": {"metadata": {"labels": labels, "annotations": {}}, "spec": {
                    "serviceAccountName": "edge-gateway-istio",
                    "containers": [{"name": "istio-proxy", "image": "auto"}]}}}}),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
                "type": "NodePort",
                "selector": {"gateway.networking.k8s.io/gateway-name": "edge-gateway"},
                "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}}),
        ];
        // A YAML stream of JSON documents (a v1 List is not a resource kubectl can validate).
        let stream: Vec<String> = objects.iter().map(|o| format!("---\n{o}\n")).collect();
        let file = self.write("istiod-generated.yaml", &stream.concat());
        self.kubectl_ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=istio.io/gateway-controller",
            "-f",
            file.to_str().unwrap(),
        ]);
    }

    /// The objects rendered into `objects`, as kubectl names them (`kind.group/name`), each with
    /// its namespace (empty for a cluster-scoped one).
    fn rendered(&self, objects: &Path) -> Vec<(String, String)> {
        let list = std::fs::read_to_string(objects.with_extension("list.json")).unwrap();
        let list: Value = serde_json::from_str(&list).unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let kind = o["kind"].as_str().unwrap().to_lowercase();
                let name = o["metadata"]["name"].as_str().unwrap();
                let what = match o["apiVersion"].as_str().unwrap().split_once('/') {
                    Some((group, _)) => format!("{kind}.{group}/{name}"),
                    None => format!("{kind}/{name}"),
                };
                let ns = o["metadata"]["namespace"].as_str().unwrap_or_default();
                (what, ns.to_owned())
            })
            .collect()
    }

    /// `what` (`kind/name`, or a kind for all of its objects) in `namespace` (none when empty).
    fn get_in(&self, namespace: &str, what: &str) -> Option<Value> {
        if namespace.is_empty() {
            self.get(&[what])
        } else {
            self.get(&["--namespace", namespace, what])
        }
    }

    /// The first refreshes apply-edge.sh started (the CronJob makes Jobs of its own at minute 17,
    /// which a test may well meet).
    fn first_refreshes(&self) -> Vec<Value> {
        let jobs = self.get_in(NAMESPACE, "jobs").unwrap();
        jobs["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["metadata"]["name"] == "lists-refresh-first")
            .cloned()
            .collect()
    }

    /// Every object of the edge the server holds, as we wrote it: what the rendered objects name,
    /// the ApplySet's parent, the Secret and the first refreshes, without what the controllers
    /// write (status, and the resourceVersion their writes move).
    fn snapshot(&self, objects: &Path) -> BTreeMap<String, Value> {
        let mut found = BTreeMap::new();
        let mut names = self.rendered(objects);
        names.push(("configmap/edge-applyset".to_owned(), NAMESPACE.to_owned()));
        names.push(("secrets".to_owned(), NAMESPACE.to_owned()));
        let mut items = Vec::new();
        for (name, namespace) in names {
            if let Some(object) = self.get_in(&namespace, &name) {
                items.extend(object["items"].as_array().cloned().unwrap_or(vec![object]));
            }
        }
        items.extend(self.first_refreshes());
        for mut item in items {
            let key = format!(
                "{}/{}",
                item["kind"].as_str().unwrap_or("?"),
                item["metadata"]["name"].as_str().unwrap()
            );
            item.as_object_mut().unwrap().remove("status");
            let meta = item["metadata"].as_object_mut().unwrap();
            meta.remove("resourceVersion");
            if let Some(Value::Array(fields)) = meta.get_mut("managedFields") {
                fields.retain(|m| m.get("subresource").is_none());
            }
            found.insert(key, item);
        }
        found
    }
}

/// The names render-edge printed for the objects at `objects` (written by `render_file`).
fn names_of(objects: &Path) -> PathBuf {
    objects.with_extension("names.env")
}

/// Who wrote `object` other than through a subresource (the controllers' status writes), and
/// how: `manager operation` each.
fn writers(object: &Value) -> Vec<String> {
    object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.get("subresource").is_none())
        .map(|m| {
            format!(
                "{} {}",
                m["manager"].as_str().unwrap(),
                m["operation"].as_str().unwrap()
            )
        })
        .collect()
}

fn base64_bytes(text: &str) -> Vec<u8> {
    let out =
        testkit::process::run_with_stdin(Command::new("base64").arg("--decode"), text.as_bytes());
    testkit::process::success_stdout(&out);
    out.stdout
}

/// A Secret's value: the key file's text (the key in base64).
fn base64_decode(text: &str) -> String {
    String::from_utf8(base64_bytes(text)).unwrap()
}

#[test]
fn apply_edge_converges_keeps_the_refreshed_lists_and_prunes_what_is_no_longer_rendered() {
    let Some(cluster) = cluster_with_istiod_class("apply_edge_converges") else {
        return;
    };
    let with_filter = cluster.render("edge-pow.example.json");

    assert_the_twins_and_a_bad_wait_change_nothing(&cluster, &with_filter);
    let (first, job) = first_apply_starts_one_refresh(&cluster, &with_filter);
    assert_written_by_server_side_apply_only(&cluster, &with_filter, &job);
    let secret = assert_the_hmac_key_is_kept_private(&cluster, &first);
    assert_a_reapply_converges_and_keeps_the_refreshed_lists(&cluster, &with_filter, &secret);
    assert_turning_the_filter_off_prunes_only_its_objects(&cluster, &with_filter, &job);
}

/// Before the first apply, the dry run and the diff say what would be created, and create
/// nothing; a wait that is not a whole number of seconds stops the apply before any change.
fn assert_the_twins_and_a_bad_wait_change_nothing(cluster: &Cluster, with_filter: &Path) {
    for mode in ["dry-run", "diff"] {
        let out = cluster.apply_edge(mode, with_filter);
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            shown.contains("wasmplugin.extensions.istio.io/pow-filter created (dry run)"),
            "{mode}: {shown}"
        );
    }
    let out = cluster.run_apply_edge("apply", with_filter, "2m");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("GATEWAY_WAIT_SECONDS='2m'"),
        "{}",
        text(&out)
    );
    assert!(cluster.get(&["namespace", NAMESPACE]).is_none());
}

/// The first apply; the lists were empty, so a first refresh was started, a Job of the
/// CronJob's, and only once however often it is applied: the apply's output and the Job's name.
fn first_apply_starts_one_refresh(cluster: &Cluster, with_filter: &Path) -> (Output, String) {
    let first = cluster.apply_edge("apply", with_filter);
    // The lists were empty, so a first refresh was started: a Job of the CronJob's.
    let jobs = cluster.first_refreshes();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    // Applied again while the lists are still empty: the first refresh is not started twice.
    let again = cluster.apply_edge("apply", with_filter);
    assert!(
        text(&again).contains("has started already"),
        "{}",
        text(&again)
    );
    let uids = |jobs: &[Value]| -> Vec<Value> {
        jobs.iter().map(|j| j["metadata"]["uid"].clone()).collect()
    };
    assert_eq!(uids(&cluster.first_refreshes()), uids(&jobs));
    let job = jobs[0]["metadata"]["name"].as_str().unwrap().to_owned();
    assert_eq!(jobs[0]["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    (first, job)
}

/// Every object the script wrote, it wrote by server-side apply as edgepop-edge, and nothing
/// else of ours wrote it (the controllers write status through its subresource).
fn assert_written_by_server_side_apply_only(cluster: &Cluster, with_filter: &Path, job: &str) {
    let mut written = cluster.rendered(with_filter);
    written.extend([
        ("secret/pow-hmac".to_owned(), NAMESPACE.to_owned()),
        (format!("job/{job}"), NAMESPACE.to_owned()),
    ]);
    for (name, namespace) in &written {
        let object = cluster.get_in(namespace, name).unwrap();
        for item in object["items"].as_array().cloned().unwrap_or(vec![object]) {
            let mut by = writers(&item);
            if name == "gatewayclass.gateway.networking.k8s.io/istio" {
                // istiod created it; we co-own it.
                by.retain(|w| w != "pilot-discovery Update");
            }
            assert_eq!(by, ["edgepop-edge Apply"], "{name}: {item}");
        }
    }
}

/// The HMAC Secret: a `current` key of 48 random bytes, from a 0600 file; never printed in the
/// first apply's output. Returns the Secret.
fn assert_the_hmac_key_is_kept_private(cluster: &Cluster, first: &Output) -> Value {
    let secret = cluster
        .get(&["-n", NAMESPACE, "secret", "pow-hmac"])
        .unwrap();
    let key = base64_decode(secret["data"]["current"].as_str().unwrap());
    assert_eq!(base64_bytes(&key).len(), 48, "{key}");
    let key_file = cluster.out().join("secrets/pow-hmac.current");
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), key);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        !printed.contains(key.trim()),
        "the key leaked into the output"
    );
    secret
}

/// The lists ConfigMap carries no data, and the edge layer claims none of it; once the refresh
/// published them, a re-apply converges: the lists untouched, no second first-refresh, the
/// Secret left alone, and no difference shown.
fn assert_a_reapply_converges_and_keeps_the_refreshed_lists(
    cluster: &Cluster,
    with_filter: &Path,
    secret: &Value,
) {
    let lists = cluster
        .get(&["-n", NAMESPACE, "configmap", "policy-lists"])
        .unwrap();
    assert!(lists.get("data").is_none(), "{lists}");

    // The refresh publishes the lists with its own field manager.
    let refreshed = cluster.write(
        "lists.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: policy-lists, namespace: edge}\n\
         data: {tor.txt: \"185.220.101.1/32\\n\", version: \"2026-11-29T17:17:00Z\"}\n",
    );
    cluster.kubectl_ok(&[
        "apply",
        "--server-side",
        "--field-manager=edgepop-lists",
        "-f",
        refreshed.to_str().unwrap(),
    ]);

    // A re-apply converges: the lists untouched, no second first-refresh, the Secret left alone.
    cluster.apply_edge("apply", with_filter);
    assert_eq!(cluster.first_refreshes().len(), 1);
    let again = cluster
        .get(&["-n", NAMESPACE, "secret", "pow-hmac"])
        .unwrap();
    assert_eq!(
        again["metadata"]["resourceVersion"],
        secret["metadata"]["resourceVersion"]
    );
    let lists = cluster
        .get(&["-n", NAMESPACE, "configmap", "policy-lists"])
        .unwrap();
    assert_eq!(lists["data"]["tor.txt"], "185.220.101.1/32\n");

    // What is applied shows no difference: no change, nothing to prune.
    let diff = cluster.apply_edge("diff", with_filter);
    assert_eq!(String::from_utf8_lossy(&diff.stdout), "", "{}", text(&diff));
}

/// The dry-run twin and the diff show the prune, and change nothing; turning the filter off
/// prunes what only the filter needed, and keeps the rest.
fn assert_turning_the_filter_off_prunes_only_its_objects(
    cluster: &Cluster,
    with_filter: &Path,
    job: &str,
) {
    let without_filter = cluster.render("edge.example.json");
    let before = cluster.snapshot(with_filter);
    for mode in ["dry-run", "diff"] {
        let out = cluster.apply_edge(mode, &without_filter);
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            shown.contains("wasmplugin.extensions.istio.io/pow-filter pruned (server dry run)"),
            "{mode}: {shown}"
        );
    }
    assert_eq!(cluster.snapshot(with_filter), before);

    // Turning the filter off prunes what only the filter needed, and keeps the rest; the first
    // refresh's Job goes with its CronJob (garbage collection).
    cluster.apply_edge("apply", &without_filter);
    for gone in [
        "wasmplugin/pow-filter",
        "cronjob/lists-refresh",
        "role/lists-refresh",
        "configmap/policy-lists",
    ] {
        assert!(
            cluster.get(&["-n", NAMESPACE, gone]).is_none(),
            "{gone} not pruned"
        );
    }
    assert!(
        cluster
            .get(&[
                "validatingadmissionpolicy",
                "edgepop-lists-refresh-changes-only-lists"
            ])
            .is_none()
    );
    cluster.kubectl_ok(&[
        "wait",
        "--for=delete",
        &format!("job/{job}"),
        "--namespace",
        NAMESPACE,
        "--timeout=120s",
    ]);
    for kept in [
        "gateway/edge-gateway",
        "deployment/origin",
        "secret/pow-hmac",
    ] {
        assert!(cluster.get(&["-n", NAMESPACE, kept]).is_some(), "{kept}");
    }
    // The Secret was never part of the rendered set, so it is not pruned either.
    assert!(cluster.get(&["gatewayclass", "istio"]).is_some());
}

#[test]
fn rotating_the_hmac_key_keeps_the_old_one_as_previous_and_restarts_the_gateway() {
    let Some(cluster) = cluster("rotating_the_hmac_key") else {
        return;
    };
    let objects = cluster.render("edge-pow.example.json");
    rotate(&cluster, &objects, "pow-hmac");
}

#[test]
fn rotating_works_with_a_custom_secret_name() {
    let Some(cluster) = cluster("rotating_works_with_a_custom_secret_name") else {
        return;
    };
    let objects = cluster.render_with_secret_name("edge-filter-keys");
    rotate(&cluster, &objects, "edge-filter-keys");
    assert!(
        cluster
            .get(&["-n", NAMESPACE, "secret", "pow-hmac"])
            .is_none()
    );
}

/// Applies `objects`, rotates the key of the Secret `secret`, and checks the rotation.
fn rotate(cluster: &Cluster, objects: &Path, secret: &str) {
    cluster.play_istiod_class();
    cluster.apply_edge("apply", objects);
    cluster.play_istiod_gateway();
    let key = |object: &Value, key: &str| base64_decode(object["data"][key].as_str().unwrap());
    let before = cluster.get(&["-n", NAMESPACE, "secret", secret]).unwrap();
    let old_key = key(&before, "current");

    let out = cluster
        .script("rotate-pow-secret.sh")
        .env("NAMES", names_of(objects))
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");

    let after = cluster.get(&["-n", NAMESPACE, "secret", secret]).unwrap();
    let new_key = key(&after, "current");
    assert_eq!(
        key(&after, "previous"),
        old_key,
        "the old key stays accepted"
    );
    assert_ne!(new_key, old_key);
    assert_eq!(base64_bytes(&new_key).len(), 48);
    assert!(!printed.contains(old_key.trim()) && !printed.contains(new_key.trim()));
    use std::os::unix::fs::PermissionsExt;
    for file in [format!("{secret}.current"), format!("{secret}.previous")] {
        let mode = std::fs::metadata(cluster.out().join("secrets").join(&file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
    let deployment = cluster
        .get(&["-n", NAMESPACE, "deployment", "edge-gateway-istio"])
        .unwrap();
    assert!(
        deployment["spec"]["template"]["metadata"]["annotations"]
            ["kubectl.kubernetes.io/restartedAt"]
            .is_string(),
        "the gateway pods restart to read the new key: {deployment}"
    );
}

#[test]
fn istiods_objects_survive_two_applies_and_the_gateway_class_is_co_owned() {
    let Some(cluster) = cluster_with_istiod_class("istiods_objects_survive") else {
        return;
    };
    let objects = cluster.render("edge-pow.example.json");

    // First apply: the class istiod created is applied over without a conflict.
    cluster.apply_edge("apply", &objects);
    cluster.play_istiod_gateway();

    // Second apply: the prune leaves alone what istiod generated for the Gateway.
    let second = cluster.apply_edge("apply", &objects);
    // The apply's progress is on stderr; stdout carries nothing.
    assert_eq!(String::from_utf8_lossy(&second.stdout), "");
    let applied = String::from_utf8_lossy(&second.stderr);
    assert!(applied.contains("serverside-applied"), "{applied}");
    assert!(!applied.contains("pruned"), "{applied}");
    for kind in ["deployment", "service", "serviceaccount"] {
        let generated = cluster
            .get(&["-n", NAMESPACE, kind, "edge-gateway-istio"])
            .unwrap_or_else(|| panic!("istiod's {kind} was deleted"));
        let labels = generated["metadata"]["labels"].as_object().unwrap();
        assert!(
            labels
                .keys()
                .all(|k| !k.starts_with("applyset.kubernetes.io/")),
            "{kind}: {labels:?}"
        );
    }
    // The class: istiod's description kept, controllerName co-owned by both managers, Accepted.
    let class = cluster.get(&["gatewayclass", "istio"]).unwrap();
    assert_eq!(
        class["spec"]["description"],
        "The default Istio GatewayClass"
    );
    let owners: Vec<&str> = class["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["fieldsV1"]["f:spec"].get("f:controllerName").is_some())
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert!(
        owners.contains(&"pilot-discovery") && owners.contains(&"edgepop-edge"),
        "{owners:?}"
    );
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(said.contains("GatewayClass istio is Accepted"), "{said}");
}

/// apply-edge failed (exit 1), its stderr saying every needle.
fn assert_failed_saying(out: &Output, needles: &[&str]) {
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    testkit::process::assert_says_all(&said, needles);
}

#[test]
fn a_gateway_class_istiod_does_not_accept_stops_the_apply_and_says_where_to_look() {
    let Some(cluster) = cluster("a_gateway_class_istiod_does_not_accept") else {
        return;
    };
    // No istiod: the class keeps the status its CRD gives it by default.
    let out = cluster.run_apply_edge("apply", &cluster.render("edge.example.json"), "0");
    assert_failed_saying(
        &out,
        &[
            "GatewayClass istio is not Accepted",
            // The Gateway API CRD's default: Unknown, Pending, "Waiting for controller".
            "status 'Unknown'",
            "reason 'Pending', message 'Waiting for controller'",
            "no controller has answered",
            "istio-system",
            "PILOT_GATEWAY_API_CONTROLLER_NAME",
        ],
    );
    // Everything was applied all the same: the check reports, it does not undo.
    assert!(
        cluster
            .get(&["-n", NAMESPACE, "gateway", "edge-gateway"])
            .is_some()
    );
}

#[test]
fn a_gateway_istiod_does_not_accept_stops_the_apply_naming_its_reason() {
    let Some(cluster) = cluster_with_istiod_class("a_gateway_istiod_does_not_accept") else {
        return;
    };
    // A refusal as the Gateway API defines one (apis/v1/gateway_types.go: Accepted False with
    // reason InvalidParameters), with the kind of message istiod gives.
    let refused = istiod::Answer {
        status: "False",
        reason: "InvalidParameters",
        message: "invalid parameters: a deprecated field is set",
    };
    let objects = cluster.render("edge.example.json");
    let out = cluster.run_apply_edge_answered("apply", &objects, "3", Some(refused));
    assert_failed_saying(
        &out,
        &[
            "GatewayClass istio is Accepted",
            "Gateway edge/edge-gateway is not Accepted after 3s",
            "status 'False' for generation '1' of '1'",
            "reason 'InvalidParameters', message 'invalid parameters: a deprecated field is set'",
            "kubectl get --namespace=edge gateways.gateway.networking.k8s.io edge-gateway -o yaml",
        ],
    );
}

#[test]
fn an_accepted_condition_for_an_older_spec_does_not_count() {
    let Some(cluster) = cluster_with_istiod_class("an_accepted_condition_for_an_older_spec") else {
        return;
    };
    // Someone changes the class after istiod answered (generation 2), and istiod has not
    // answered again: its Accepted is for generation 1.
    cluster.kubectl_ok(&[
        "patch",
        "gatewayclass",
        "istio",
        "--type=merge",
        "--field-manager=someone",
        "-p",
        r#"{"spec":{"description":"changed"}}"#,
    ]);
    let out = cluster.run_apply_edge("apply", &cluster.render("edge.example.json"), "0");
    assert_failed_saying(&out, &["status 'True' for generation '1' of '2'"]);
}

#[test]
fn the_operators_objects_on_a_cluster_without_its_api_stop_the_apply_before_anything() {
    let Some(cluster) = cluster("the_operators_objects_on_a_cluster_without_its_api") else {
        return;
    };
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace().join("config/edge.example.json")).unwrap(),
    )
    .unwrap();
    config["monitoring"] = "prometheus-operator".into();
    let config = cluster.write("edge-operator.json", &config.to_string());
    let objects = cluster.render_file(&config);
    for mode in ["apply", "dry-run", "diff"] {
        let out = cluster.run_apply_edge(mode, &objects, "0");
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{mode}: {said}");
        assert!(
            said.contains("the cluster serves no monitoring.coreos.com/v1"),
            "{mode}: {said}"
        );
        assert!(said.contains("\"monitoring\": \"annotations\""), "{said}");
    }
    // Nothing of the edge was applied.
    assert!(cluster.get(&["namespace", NAMESPACE]).is_none());
}

#[test]
fn destroy_edge_deletes_every_member_of_the_applied_set_then_the_namespace() {
    let Some(cluster) = cluster_with_istiod_class("destroy_edge_deletes_every_member") else {
        return;
    };
    let objects = cluster.render("edge-pow.example.json");
    cluster.apply_edge("apply", &objects);
    let rendered = cluster.rendered(&objects);
    let cluster_scoped = rendered.iter().filter(|(_, ns)| ns.is_empty()).count();
    assert!(cluster_scoped >= 5, "{rendered:?}");
    // What goes is shown first (before make's question), and nothing goes with it.
    let listed = cluster
        .script("destroy-edge.sh")
        .arg("list")
        .env("NAMES", names_of(&objects))
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", text(&listed));
    let shown = String::from_utf8_lossy(&listed.stderr);
    for member in [
        "configmap/lists-sources",
        "gateway.gateway.networking.k8s.io/edge-gateway",
        "then the namespace edge",
    ] {
        assert!(shown.contains(member), "{member}: {shown}");
    }
    for (name, namespace) in &rendered {
        assert!(cluster.get_in(namespace, name).is_some(), "{name} went");
    }
    // A member held by a finalizer that no controller removes: the deletion gives up after
    // its bound, saying what is still there, instead of waiting a week.
    let held = ["-n", NAMESPACE, "configmap", "lists-sources"];
    let finalizer = |op: &str| {
        let patch = format!(r#"{{"metadata":{{"finalizers":{op}}}}}"#);
        let mut args = vec!["patch"];
        args.extend(held);
        args.extend(["--type=merge", "-p", &patch]);
        cluster.kubectl_ok(&args);
    };
    finalizer(r#"["example.com/held"]"#);
    let out = cluster
        .script("destroy-edge.sh")
        .env("NAMES", names_of(&objects))
        .env("CLUSTER", "edge-par")
        .env("CONFIRM", "yes")
        .env("DELETE_TIMEOUT", "2s")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("still there after 2s") && text(&out).contains("get "),
        "{}",
        text(&out)
    );
    finalizer("null");
    let (deleted, said) = cluster.destroy_edge(&objects);
    // Every rendered object, cluster-scoped ones included, read from the ApplySet (not re-typed).
    for (name, namespace) in &rendered {
        assert!(
            cluster.get_in(namespace, name).is_none(),
            "{name} is still there: {said}"
        );
    }
    // The namespace goes last, and with it what the set does not hold (the Secret, the Job):
    // finalised by the namespace controller before destroy-edge returns.
    assert_eq!(
        deleted.lines().last(),
        Some(format!("namespace \"{NAMESPACE}\" deleted").as_str()),
        "{deleted}"
    );
    assert!(cluster.get(&["namespace", NAMESPACE]).is_none());
}

#[test]
fn destroy_edge_deletes_nothing_that_no_applyset_proves_ours() {
    let Some(cluster) = cluster_with_istiod_class("destroy_edge_deletes_nothing_unproven") else {
        return;
    };
    let objects = cluster.render("edge.example.json");
    // A namespace of the same name that the edge layer never applied (no ApplySet parent in
    // it), holding someone's ConfigMap.
    cluster.kubectl_ok(&["create", "namespace", NAMESPACE]);
    cluster.kubectl_ok(&[
        "create",
        "configmap",
        "theirs",
        "--namespace",
        NAMESPACE,
        "--from-literal=a=b",
    ]);
    let (deleted, said) = cluster.destroy_edge(&objects);
    assert!(said.contains("nothing deleted"), "{said}");
    assert_eq!(deleted, "");
    assert!(
        cluster
            .get(&["-n", NAMESPACE, "configmap", "theirs"])
            .is_some()
    );
    assert!(cluster.get(&["gatewayclass", "istio"]).is_some());
}
