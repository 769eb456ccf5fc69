//! `make apply-edge` end to end: render-edge, pipelines/apply-edge.sh and the real kubectl,
//! against the Kubernetes API stand-in `kube_api.py` (testkit's stand-ins) on loopback.
//!
//! Contract checked (the API server's, as kubectl speaks it): every write is a server-side apply
//! (PATCH, `application/apply-patch+yaml`) with the field manager `edgepop-edge`; the HMAC
//! Secret is applied from a 0600 file and its value never reaches the script's output; the
//! `policy-lists` ConfigMap is applied without data, so the refresh's keys are never reverted;
//! objects the layer stops rendering are pruned (ApplySet) and the rest is kept; the dry-run
//! twin writes nothing.
//!
//! And istiod's side of the cluster, played here as istiod 1.30 does it (read in its source,
//! pilot/pkg/config/kube/gatewaycommon): it creates the GatewayClass `istio` with its own
//! description (gatewayclass.go, a plain create: field manager `pilot-discovery`, from its user
//! agent) and marks it Accepted; for each Gateway it server-side applies (field manager
//! `istio.io/gateway-controller`, force) a Deployment, Service and ServiceAccount named
//! `<gateway>-<class>`, labelled with `spec.infrastructure.labels`, or, when that is unset, with
//! a copy of the Gateway's own labels (deploymentcontroller.go, extractInfrastructureMetadata).
//! The stand-in enforces server-side apply's field ownership (conflicts between managers).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use testkit::skip_or_fail;

fn workspace() -> PathBuf {
    testkit::workspace::root()
}

struct StandIn {
    // Held for its drop, which kills the stand-in before `dir` is removed (fields drop in order).
    _kube_api: testkit::standin::StandIn,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl StandIn {
    fn start() -> StandIn {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let kube_api = testkit::standin::StandIn::start(
            testkit::standin::python("kube_api.py")
                .arg(&port_file)
                .arg(dir.path().join("requests.jsonl")),
            &port_file,
        );
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
                 clusters: [{{name: s, cluster: {{server: '{url}'}}}}]\n\
                 users: [{{name: u, user: {{token: stand-in}}}}]\n\
                 contexts: [{{name: c, context: {{cluster: s, user: u}}}}]\n",
                url = kube_api.url()
            ),
        )
        .unwrap();
        StandIn {
            _kube_api: kube_api,
            dir,
            kubeconfig,
        }
    }

    fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// The requests received so far, and forgets them.
    fn take_requests(&self) -> Vec<Value> {
        let path = self.dir.path().join("requests.jsonl");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        std::fs::write(&path, "").unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
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

    fn run_apply_edge(&self, mode: &str, objects: &Path, wait_seconds: &str) -> Output {
        Command::new(workspace().join("pipelines/apply-edge.sh"))
            .arg(mode)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("OBJECTS", objects)
            .env("NAMES", names_of(objects))
            .env("FIELD_MANAGER", "edgepop-edge")
            .env("OUT", self.out())
            .env("GATEWAY_CLASS_WAIT_SECONDS", wait_seconds)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn apply_edge(&self, mode: &str, objects: &Path) -> Output {
        let out = self.run_apply_edge(mode, objects, "0");
        assert!(
            out.status.success(),
            "apply-edge.sh {mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Runs destroy-edge.sh for what `objects` names; checks that it succeeded and returns its
    /// stderr.
    fn destroy_edge(&self, objects: &Path) -> String {
        let out = Command::new(workspace().join("pipelines/destroy-edge.sh"))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("NAMES", names_of(objects))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{said}");
        said
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn kubectl_ok(&self, args: &[&str]) {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
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
        self.kubectl_ok(&[
            "patch",
            "gatewayclass",
            "istio",
            "--subresource=status",
            "--type=merge",
            "--field-manager=pilot-discovery",
            "-p",
            r#"{"status":{"conditions":[{"type":"Accepted","status":"True","reason":"Accepted","message":"Handled by Istio controller","observedGeneration":1,"lastTransitionTime":"2026-11-30T00:00:00Z"}]}}"#,
        ]);
    }

    /// istiod's deployment controller for the Gateway `edge/edge-gateway`: what it generates,
    /// labelled as extractInfrastructureMetadata says.
    fn play_istiod_gateway(&self) {
        let gateway = self
            .get(&["-n", "edge", "gateway", "edge-gateway"])
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
        let owner = serde_json::json!([{
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "name": "edge-gateway", "uid": gateway["metadata"]["uid"],
        }]);
        let meta = serde_json::json!({
            "name": "edge-gateway-istio", "namespace": "edge",
            "labels": labels, "annotations": annotations, "ownerReferences": owner,
        });
        let objects = [
            serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
                "selector": {"matchLabels": {"gateway.networking.k8s.io/gateway-name": "edge-gateway"}},
                "template": {"metadata": {"labels": labels, "annotations": {}}, "spec": {
                    "serviceAccountName": "edge-gateway-istio",
                    "containers": [{"name": "istio-proxy", "image": "auto"}]}}}}),
            serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
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

    fn kubectl(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .unwrap()
    }

    fn get(&self, args: &[&str]) -> Option<Value> {
        let mut all = vec!["get", "-o", "json"];
        all.extend_from_slice(args);
        let out = self.kubectl(&all);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).unwrap())
    }
}

/// The names render-edge printed for the objects at `objects` (written by `render_file`).
fn names_of(objects: &Path) -> PathBuf {
    objects.with_extension("names.env")
}

fn writes(requests: &[Value]) -> Vec<&Value> {
    requests.iter().filter(|r| r["method"] != "GET").collect()
}

fn tools_present(test: &str) -> bool {
    for (program, args, what) in [
        ("kubectl", &["version", "--client"][..], "kubectl"),
        ("python3", &["-c", "import yaml"][..], "python3 with PyYAML"),
    ] {
        let ok = Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            skip_or_fail(test, what);
            return false;
        }
    }
    true
}

#[test]
fn apply_edge_converges_keeps_the_refreshed_lists_and_prunes_what_is_no_longer_rendered() {
    if !tools_present("apply_edge_converges") {
        return;
    }
    let api = StandIn::start();
    api.play_istiod_class();
    api.take_requests();
    let with_filter = api.render("edge-pow.example.json");

    // First apply: every write is a server-side apply by our field manager.
    let first = api.apply_edge("apply", &with_filter);
    let requests = api.take_requests();
    let ours: Vec<_> = writes(&requests)
        .into_iter()
        .filter(|r| r["query"]["fieldManager"] != "kubectl-applyset")
        .collect();
    assert!(ours.len() >= 17, "{} writes", ours.len());
    for write in &ours {
        assert_eq!(write["method"], "PATCH", "{write}");
        assert_eq!(write["content_type"], "application/apply-patch+yaml");
        assert_eq!(write["query"]["fieldManager"], "edgepop-edge", "{write}");
    }
    // The HMAC Secret: applied once, with a `current` key, from a 0600 file; never printed.
    let secret = ours
        .iter()
        .find(|w| w["path"] == "/api/v1/namespaces/edge/secrets/pow-hmac")
        .expect("the Secret is created at apply time");
    let key = secret["body"]["data"]["current"].as_str().unwrap();
    assert!(key.len() >= 40, "a real key, base64 of 48 bytes: {key}");
    let key_file = api.out().join("secrets/pow-hmac.current");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&first.stderr)
    );
    let raw_key = std::fs::read_to_string(&key_file).unwrap();
    assert!(
        !printed.contains(raw_key.trim()),
        "the key leaked into the output"
    );
    // The lists ConfigMap carries no data: the edge layer never claims the refresh's keys.
    let lists = ours
        .iter()
        .find(|w| w["path"] == "/api/v1/namespaces/edge/configmaps/policy-lists")
        .unwrap();
    assert!(lists["body"].get("data").is_none(), "{lists}");
    // The lists were empty, so a first refresh was started.
    assert!(ours.iter().any(|w| {
        w["path"]
            .as_str()
            .unwrap()
            .starts_with("/apis/batch/v1/namespaces/edge/jobs/lists-refresh-first-")
    }));

    // The refresh publishes the lists with its own field manager.
    let refreshed = api.dir.path().join("lists.yaml");
    std::fs::write(
        &refreshed,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: policy-lists, namespace: edge}\n\
         data: {tor.txt: \"185.220.101.1/32\\n\", version: \"2026-11-29T17:17:00Z\"}\n",
    )
    .unwrap();
    let published = api.kubectl(&[
        "apply",
        "--server-side",
        "--field-manager=edgepop-lists",
        "-f",
        refreshed.to_str().unwrap(),
    ]);
    assert!(published.status.success());
    api.take_requests();

    // A re-apply converges: same objects, the lists untouched, no second first-refresh, and
    // the existing Secret is left alone.
    api.apply_edge("apply", &with_filter);
    let requests = api.take_requests();
    let again = writes(&requests);
    assert!(
        !again
            .iter()
            .any(|w| w["path"].as_str().unwrap().contains("/jobs/"))
    );
    assert!(
        !again
            .iter()
            .any(|w| w["path"].as_str().unwrap().contains("/secrets/"))
    );
    let lists = api
        .get(&["-n", "edge", "configmap", "policy-lists"])
        .unwrap();
    assert_eq!(lists["data"]["tor.txt"], "185.220.101.1/32\n");

    // The dry-run twin sends everything with dryRun and changes nothing.
    let without_filter = api.render("edge.example.json");
    api.apply_edge("dry-run", &without_filter);
    let requests = api.take_requests();
    let dry = writes(&requests);
    assert!(
        dry.iter().any(|w| w["method"] == "DELETE"),
        "the dry run shows the prune"
    );
    for write in dry {
        // PATCH carries dryRun in the query, DELETE in its DeleteOptions body.
        let flagged = write["query"]["dryRun"] == "All" || write["body"]["dryRun"][0] == "All";
        assert!(flagged, "{write}");
    }
    assert!(
        api.get(&["-n", "edge", "wasmplugin", "pow-filter"])
            .is_some()
    );

    // Turning the filter off prunes what only the filter needed, and keeps the rest.
    api.apply_edge("apply", &without_filter);
    let requests = api.take_requests();
    let deleted: Vec<&str> = requests
        .iter()
        .filter(|r| r["method"] == "DELETE")
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    for gone in [
        "/apis/extensions.istio.io/v1alpha1/namespaces/edge/wasmplugins/pow-filter",
        "/apis/batch/v1/namespaces/edge/cronjobs/lists-refresh",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/edge/roles/lists-refresh",
    ] {
        assert!(deleted.contains(&gone), "{gone} not pruned: {deleted:?}");
    }
    assert!(
        api.get(&["-n", "edge", "wasmplugin", "pow-filter"])
            .is_none()
    );
    assert!(
        api.get(&["-n", "edge", "gateway", "edge-gateway"])
            .is_some()
    );
    assert!(api.get(&["gatewayclass", "istio"]).is_some());
    // The Secret was never part of the rendered set, so it is not pruned either.
    assert!(api.get(&["-n", "edge", "secret", "pow-hmac"]).is_some());
}

#[test]
fn rotating_the_hmac_key_keeps_the_old_one_as_previous_and_restarts_the_gateway() {
    if !tools_present("rotating_the_hmac_key") {
        return;
    }
    let api = StandIn::start();
    let objects = api.render("edge-pow.example.json");
    rotate(&api, &objects, "pow-hmac");
}

#[test]
fn rotating_works_with_a_custom_secret_name() {
    if !tools_present("rotating_works_with_a_custom_secret_name") {
        return;
    }
    let api = StandIn::start();
    let objects = api.render_with_secret_name("edge-filter-keys");
    rotate(&api, &objects, "edge-filter-keys");
    assert!(api.get(&["-n", "edge", "secret", "pow-hmac"]).is_none());
}

/// Applies `objects`, rotates the key of the Secret `secret`, and checks the rotation.
fn rotate(api: &StandIn, objects: &Path, secret: &str) {
    api.play_istiod_class();
    api.apply_edge("apply", objects);
    // The Deployment Istio generates for the Gateway (<gateway>-<class>).
    let gateway = api.dir.path().join("gateway-deployment.yaml");
    std::fs::write(
        &gateway,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: edge-gateway-istio, namespace: edge}\n\
         spec: {template: {metadata: {annotations: {}}}}\n",
    )
    .unwrap();
    let created = api.kubectl(&[
        "apply",
        "--server-side",
        "--field-manager=istio",
        "-f",
        gateway.to_str().unwrap(),
    ]);
    assert!(created.status.success());
    let decode = |secret: &Value, key: &str| {
        let text = secret["data"][key].as_str().unwrap().to_string();
        let out = Command::new("base64")
            .arg("-d")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(text.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let before = api.get(&["-n", "edge", "secret", secret]).unwrap();
    let old_key = decode(&before, "current");

    let out = Command::new(workspace().join("pipelines/rotate-pow-secret.sh"))
        .env("KUBECONFIG", &api.kubeconfig)
        .env("OUT", api.out())
        .env("NAMES", names_of(objects))
        .env("FIELD_MANAGER", "edgepop-edge")
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");

    let after = api.get(&["-n", "edge", "secret", secret]).unwrap();
    let new_key = decode(&after, "current");
    assert_eq!(
        decode(&after, "previous"),
        old_key,
        "the old key stays accepted"
    );
    assert_ne!(new_key, old_key);
    assert!(new_key.len() >= 40);
    assert!(!printed.contains(old_key.trim()) && !printed.contains(new_key.trim()));
    use std::os::unix::fs::PermissionsExt;
    for file in [format!("{secret}.current"), format!("{secret}.previous")] {
        let mode = std::fs::metadata(api.out().join("secrets").join(&file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
    let deployment = api
        .get(&["-n", "edge", "deployment", "edge-gateway-istio"])
        .unwrap();
    assert!(
        deployment["spec"]["template"]["metadata"]["annotations"]
            ["kubectl.kubernetes.io/restartedAt"]
            .is_string(),
        "the gateway pods restart to read the new key: {deployment}"
    );
}

fn deleted_paths(requests: &[Value]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r["method"] == "DELETE")
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn istiods_objects_survive_two_applies_and_the_gateway_class_is_co_owned() {
    if !tools_present("istiods_objects_survive") {
        return;
    }
    let api = StandIn::start();
    api.play_istiod_class();
    let objects = api.render("edge-pow.example.json");

    // First apply: the class istiod created is applied over without a conflict.
    api.apply_edge("apply", &objects);
    api.play_istiod_gateway();
    api.take_requests();

    // Second apply: the prune leaves alone what istiod generated for the Gateway.
    let second = api.apply_edge("apply", &objects);
    let requests = api.take_requests();
    let deleted = deleted_paths(&requests);
    assert!(deleted.is_empty(), "pruned: {deleted:?}");
    for kind in ["deployment", "service", "serviceaccount"] {
        let generated = api
            .get(&["-n", "edge", kind, "edge-gateway-istio"])
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
    let class = api
        .get(&["--show-managed-fields", "gatewayclass", "istio"])
        .unwrap();
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

#[test]
fn a_gateway_class_istiod_does_not_accept_stops_the_apply_and_says_where_to_look() {
    if !tools_present("a_gateway_class_istiod_does_not_accept") {
        return;
    }
    // No istiod: nobody sets the class's status.
    let api = StandIn::start();
    let out = api.run_apply_edge("apply", &api.render("edge.example.json"), "0");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("GatewayClass istio is not Accepted"),
        "{said}"
    );
    assert!(said.contains("istio-system"), "{said}");
    assert!(said.contains("PILOT_GATEWAY_API_CONTROLLER_NAME"), "{said}");
    // Everything was applied all the same: the check reports, it does not undo.
    assert!(
        api.get(&["-n", "edge", "gateway", "edge-gateway"])
            .is_some()
    );
}

#[test]
fn an_accepted_condition_for_an_older_spec_does_not_count() {
    if !tools_present("an_accepted_condition_for_an_older_spec") {
        return;
    }
    let api = StandIn::start();
    api.play_istiod_class();
    // Someone changes the class after istiod answered (generation 2), and istiod has not
    // answered again: its Accepted is for generation 1.
    api.kubectl_ok(&[
        "patch",
        "gatewayclass",
        "istio",
        "--type=merge",
        "--field-manager=someone",
        "-p",
        r#"{"spec":{"description":"changed"}}"#,
    ]);
    let out = api.run_apply_edge("apply", &api.render("edge.example.json"), "0");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("status 'True' for generation '1' of '2'"),
        "{said}"
    );
}

#[test]
fn the_stand_in_refuses_a_conflicting_apply_as_the_api_server_does() {
    // The contract the tests above rely on, checked on its own with the real kubectl: a field
    // another manager set with another value conflicts; the same value is co-owned; --force-conflicts
    // takes it over.
    if !tools_present("the_stand_in_refuses_a_conflicting_apply") {
        return;
    }
    let api = StandIn::start();
    api.play_istiod_class();
    let ours = api.write(
        "class.yaml",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: istio}\n\
         spec: {controllerName: istio.io/gateway-controller, description: ours}\n",
    );
    let apply = |force: bool| {
        let mut args = vec!["apply", "--server-side", "--field-manager=edgepop-edge"];
        if force {
            args.push("--force-conflicts");
        }
        args.extend(["-f", ours.to_str().unwrap()]);
        api.kubectl(&args)
    };
    let refused = apply(false);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        said.contains(r#"conflict with "pilot-discovery""#) && said.contains(".spec.description"),
        "{said}"
    );
    assert!(
        !said.contains(".spec.controllerName"),
        "the same value is no conflict: {said}"
    );
    let class = api.get(&["gatewayclass", "istio"]).unwrap();
    assert_eq!(
        class["spec"]["description"],
        "The default Istio GatewayClass"
    );

    assert!(apply(true).status.success());
    let class = api.get(&["gatewayclass", "istio"]).unwrap();
    assert_eq!(class["spec"]["description"], "ours");
    assert_eq!(class["status"]["conditions"][0]["type"], "Accepted");
}

#[test]
fn destroy_edge_deletes_every_member_of_the_applied_set_then_the_namespace() {
    if !tools_present("destroy_edge_deletes_every_member") {
        return;
    }
    let api = StandIn::start();
    api.play_istiod_class();
    let objects = api.render("edge-pow.example.json");
    api.apply_edge("apply", &objects);
    api.take_requests();
    api.destroy_edge(&objects);
    let deleted = deleted_paths(&api.take_requests());
    // Every rendered kind, cluster-scoped ones included, read from the ApplySet (not re-typed).
    for gone in [
        "/apis/gateway.networking.k8s.io/v1/gatewayclasses/istio",
        "/apis/cert-manager.io/v1/clusterissuers/letsencrypt-production",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/edgepop-lists-refresh-changes-only-lists",
        "/apis/extensions.istio.io/v1alpha1/namespaces/edge/wasmplugins/pow-filter",
        "/apis/gateway.networking.k8s.io/v1/namespaces/edge/gateways/edge-gateway",
        "/apis/batch/v1/namespaces/edge/cronjobs/lists-refresh",
        "/api/v1/namespaces/edge/serviceaccounts/lists-refresh",
        "/api/v1/namespaces/edge",
    ] {
        assert!(
            deleted.iter().any(|d| d == gone),
            "{gone} not deleted: {deleted:?}"
        );
    }
    assert_eq!(
        deleted.last().map(String::as_str),
        Some("/api/v1/namespaces/edge"),
        "the namespace goes last"
    );
    assert!(api.get(&["gatewayclass", "istio"]).is_none());
}

#[test]
fn destroy_edge_deletes_nothing_that_no_applyset_proves_ours() {
    if !tools_present("destroy_edge_deletes_nothing_unproven") {
        return;
    }
    let api = StandIn::start();
    // A namespace of the same name that the edge layer never applied (no ApplySet parent in it).
    let objects = api.render("edge.example.json");
    let namespace = api.write(
        "someone-else.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: edge\n",
    );
    api.kubectl_ok(&[
        "apply",
        "--server-side",
        "--field-manager=someone-else",
        "-f",
        namespace.to_str().unwrap(),
    ]);
    api.take_requests();
    let said = api.destroy_edge(&objects);
    assert!(said.contains("nothing deleted"), "{said}");
    assert_eq!(deleted_paths(&api.take_requests()), Vec::<String>::new());
    assert!(api.get(&["namespace", "edge"]).is_some());
}
