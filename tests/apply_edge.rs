//! `make apply-edge` end to end: render-edge, pipelines/apply-edge.sh and the real kubectl,
//! against the Kubernetes API stand-in `tests/stand-ins/kube_api.py` on loopback.
//!
//! Contract checked (the API server's, as kubectl speaks it): every write is a server-side apply
//! (PATCH, `application/apply-patch+yaml`) with the field manager `edgepop-edge`; the HMAC
//! Secret is applied from a 0600 file and its value never reaches the script's output; the
//! `policy-lists` ConfigMap is applied without data, so the refresh's keys are never reverted;
//! objects the layer stops rendering are pruned (ApplySet) and the rest is kept; the dry-run
//! twin writes nothing.

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
        let out = Command::new(testkit::workspace::bin("render-edge"))
            .arg("--inputs")
            .arg(workspace().join("config/platform-inputs.example.json"))
            .arg("--config")
            .arg(workspace().join("config").join(config))
            .output()
            .unwrap();
        assert!(out.status.success());
        let path = self.dir.path().join(format!("{config}.yaml"));
        std::fs::write(&path, out.stdout).unwrap();
        path
    }

    fn apply_edge(&self, mode: &str, objects: &Path) -> Output {
        let out = Command::new(workspace().join("pipelines/apply-edge.sh"))
            .arg(mode)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("OBJECTS", objects)
            .env("FIELD_MANAGER", "edgepop-edge")
            .env("OUT", self.out())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "apply-edge.sh {mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
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
    api.apply_edge("apply", &api.render("edge-pow.example.json"));
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
    let before = api.get(&["-n", "edge", "secret", "pow-hmac"]).unwrap();
    let old_key = decode(&before, "current");

    let out = Command::new(workspace().join("pipelines/rotate-pow-secret.sh"))
        .env("KUBECONFIG", &api.kubeconfig)
        .env("OUT", api.out())
        .env("FIELD_MANAGER", "edgepop-edge")
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");

    let after = api.get(&["-n", "edge", "secret", "pow-hmac"]).unwrap();
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
    for file in ["pow-hmac.current", "pow-hmac.previous"] {
        let mode = std::fs::metadata(api.out().join("secrets").join(file))
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
