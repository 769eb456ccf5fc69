//! `pipelines/platform.sh` (make apply-platform, diff-platform, destroy-platform) with recording
//! stand-ins of helm, kubectl and talosctl on PATH (testkit's stand-ins/recording): what the real
//! tools would be asked, in which order, with which pins, flags, values files and host firewall.
//! The real helm runs only against a real cluster. talosctl's calls are then answered by its node
//! stand-in (testkit's stand-ins/talosctl, with the real talosctl): the worker holds the config
//! the infra layer makes, and takes the host firewall's patch as a node would, or refuses it.
//!
//! The Gateway API pins are replaced by a versions file of the test's own (same keys, files of
//! its own with their sha256), so the test needs no download.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

fn repo() -> PathBuf {
    testkit::workspace::root()
}

/// The real pins (k8s/versions.env).
fn pins() -> BTreeMap<String, String> {
    fs::read_to_string(repo().join("k8s/versions.env"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// The worker of the example platform inputs: the node the host firewall is patched into.
const WORKER: &str = "203.0.113.10";

struct World {
    dir: tempfile::TempDir,
    crd_files: Vec<PathBuf>,
    /// The real talosctl, behind the node stand-in ([`World::with_worker`]).
    talosctl: Option<PathBuf>,
}

impl World {
    /// A versions file whose Gateway API pins name two files of the test, a vendor folder with
    /// them, and what the real render-platform writes for the example config (each release's
    /// values and the list of releases).
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let version = &pins()["GATEWAY_API_VERSION"];
        let crd_dir = dir.path().join(format!("vendor/gateway-api-{version}"));
        fs::create_dir_all(&crd_dir).unwrap();
        let mut versions: String = fs::read_to_string(repo().join("k8s/versions.env"))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("VENDOR_GATEWAY_API_"))
            .map(|l| format!("{l}\n"))
            .collect();
        let mut crd_files = Vec::new();
        for (key, name) in [
            ("GATEWAYS", "gateways.yaml"),
            ("HTTPROUTES", "httproutes.yaml"),
        ] {
            let path = crd_dir.join(name);
            fs::write(&path, format!("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n# {name}\n")).unwrap();
            versions.push_str(&format!(
                "VENDOR_GATEWAY_API_{key}={name}:{}\n",
                sha256(&path)
            ));
            crd_files.push(path);
        }
        fs::write(dir.path().join("versions.env"), versions).unwrap();
        let out = Command::new(testkit::workspace::bin("render-platform"))
            .arg("--config")
            .arg(repo().join("config/platform.example.json"))
            .arg("--inputs")
            .arg(repo().join("config/platform-inputs.example.json"))
            .arg("--out-dir")
            .arg(dir.path().join("rendered"))
            .output()
            .unwrap();
        testkit::process::success_stdout(&out);
        fs::write(dir.path().join("calls.log"), "").unwrap();
        fs::write(
            dir.path().join("kubeconfig"),
            "# never read: helm and kubectl are stand-ins\n",
        )
        .unwrap();
        // What make acts on: the cluster's own outputs (talos/_out), as apply-infra leaves them.
        let out = dir.path().join("out");
        fs::create_dir_all(&out).unwrap();
        fs::copy(
            repo().join("config/platform-inputs.example.json"),
            out.join("platform-inputs.json"),
        )
        .unwrap();
        fs::write(
            out.join("kubeconfig"),
            kubeconfig("admin@edge-par", "https://api.example.com:6443"),
        )
        .unwrap();
        fs::write(
            out.join("talosconfig"),
            "# never read: talosctl is a stand-in\n",
        )
        .unwrap();
        // Another cluster's, as a shell may point at it.
        fs::write(
            dir.path().join("prod-kubeconfig"),
            kubeconfig("prod", "https://prod.example.net:6443"),
        )
        .unwrap();
        World {
            dir,
            crd_files,
            talosctl: None,
        }
    }

    /// [`World::new`] whose worker holds its machine config, as the infra layer leaves it, for
    /// the runs that patch it; `None` (after a skip) when the real talosctl is not built.
    fn with_worker(test: &str) -> Option<World> {
        static WORKER_CONFIG: OnceLock<Vec<u8>> = OnceLock::new();
        if !testkit::workspace::python3(test) {
            return None;
        }
        let talosctl = testkit::upstream::program(test, "talosctl")?;
        let config =
            WORKER_CONFIG.get_or_init(|| crate::talos_patches::example_worker_config(&talosctl));
        let mut world = World::new();
        testkit::standin::write_talos_node_config(&world.talos_state(), WORKER, config);
        world.talosctl = Some(talosctl);
        Some(world)
    }

    /// The talosctl node stand-in's state: the nodes' configs.
    fn talos_state(&self) -> PathBuf {
        self.dir.path().join("talos-state")
    }

    /// The worker's machine config now, document by document.
    fn worker_config(&self) -> Vec<serde_json::Value> {
        let path = testkit::standin::talos_node_config(&self.talos_state(), WORKER);
        crate::talos_schema::documents(&fs::read_to_string(path).unwrap())
    }

    /// The lines of the log `name` the stand-ins write in the test's folder; `None` when none
    /// was written.
    fn log(&self, name: &str) -> Option<Vec<String>> {
        let text = fs::read_to_string(self.dir.path().join(name)).ok()?;
        Some(text.lines().map(str::to_owned).collect())
    }

    /// The KUBECONFIG each helm and kubectl call was given.
    fn kubeconfigs(&self) -> Vec<String> {
        self.log("kubeconfigs.log").unwrap_or_default()
    }

    fn command(&self, program: &str) -> Command {
        let path = format!(
            "{}:{}",
            testkit::standin::path("recording").display(),
            std::env::var("PATH").unwrap()
        );
        let mut cmd = Command::new(program);
        cmd.env("PATH", path)
            .env("STANDIN_LOG", self.dir.path().join("calls.log"))
            // The recording clients on PATH, never those of a `make tools` folder.
            .env("TOOLS_DIR", "")
            .env("VERSIONS_FILE", self.dir.path().join("versions.env"))
            .env("VENDOR_DIR", self.dir.path().join("vendor"))
            .env("RENDERED_DIR", self.dir.path().join("rendered"))
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("TALOSCONFIG", self.dir.path().join("out/talosconfig"))
            .env(
                "STANDIN_KUBECONFIG_LOG",
                self.dir.path().join("kubeconfigs.log"),
            )
            .env("TALOSCTL_LOG", self.dir.path().join("talosctl.jsonl"))
            .env("TALOSCTL_STATE", self.talos_state())
            .env(
                "RENDER_PLATFORM",
                testkit::workspace::bin("render-platform"),
            )
            .env_remove("TALOSCTL_REAL")
            .env_remove("TALOSCTL_SILENT_CALLS")
            .env_remove("DELETE_CRDS")
            .env_remove("STANDIN_HELM_VERSION")
            .env_remove("STANDIN_HELM_FAIL")
            .stdin(Stdio::null());
        if let Some(talosctl) = &self.talosctl {
            cmd.env("TALOSCTL_REAL", talosctl);
        }
        cmd
    }

    fn platform(&self, mode: &str, env: &[(&str, &str)]) -> Output {
        let mut cmd = self.command("bash");
        cmd.arg(repo().join("pipelines/platform.sh")).arg(mode);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    /// platform.sh `apply` again: it succeeds, and Talos skips the worker's config as unchanged.
    fn assert_a_second_apply_changes_nothing(&self) {
        let out = self.platform("apply", &[]);
        assert!(
            out.status.success()
                && stderr(&out).contains("Apply was skipped: no changes detected."),
            "{}",
            stderr(&out)
        );
    }

    /// Runs platform.sh `mode`, checks that it succeeded, and returns what it asked of helm and
    /// kubectl, and its stderr.
    fn succeeds(&self, mode: &str, env: &[(&str, &str)]) -> (Vec<String>, String) {
        let out = self.platform(mode, env);
        assert!(out.status.success(), "{}", stderr(&out));
        (self.calls(), stderr(&out))
    }

    /// Runs platform.sh `mode` and checks that it failed (exit 1) saying every one of `what`.
    fn fails_saying(&self, mode: &str, env: &[(&str, &str)], what: &[&str]) {
        let out = self.platform(mode, env);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        testkit::process::assert_says_all(&err, what);
    }

    fn calls(&self) -> Vec<String> {
        self.log("calls.log").expect("no calls.log was written")
    }

    fn rendered(&self, release: &str) -> String {
        self.dir
            .path()
            .join(format!("rendered/{release}.json"))
            .display()
            .to_string()
    }
}

/// A kubeconfig as talosctl writes one (key material left out: never read here), whose current
/// context points at `server`.
fn kubeconfig(context: &str, server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
         contexts:\n- name: {context}\n  context:\n    cluster: c\n    user: u\n\
         current-context: {context}\nusers:\n- name: u\n  user: {{}}\n"
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The calls that change or would change something (not the `helm version` probes, not a
/// talosctl `--dry-run`).
fn mutating(calls: &[String]) -> Vec<&String> {
    calls
        .iter()
        .filter(|c| {
            c.starts_with("helm upgrade")
                || c.starts_with("kubectl apply")
                || c.starts_with("helm uninstall")
                || c.starts_with("kubectl delete")
                || (c.starts_with("talosctl")
                    && !c.contains("--dry-run")
                    && !c.contains(" get machineconfig "))
        })
        .collect()
}

/// The calls made, less the probes of the tools' versions.
fn work(calls: &[String]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| !c.starts_with("helm version"))
        .cloned()
        .collect()
}

/// The calls that start with `prefix` (`helm upgrade`, `kubectl diff`...), in order.
fn starting_with<'a>(calls: &'a [String], prefix: &str) -> Vec<&'a String> {
    calls.iter().filter(|c| c.starts_with(prefix)).collect()
}

/// The releases uninstalled, in order.
fn uninstalled(calls: &[String]) -> Vec<&str> {
    starting_with(calls, "helm uninstall")
        .into_iter()
        .map(|c| words(c)[2])
        .collect()
}

fn words(call: &str) -> Vec<&str> {
    call.split(' ').collect()
}

/// `flag value` appears as a pair in the call.
fn has_pair(call: &str, flag: &str, value: &str) -> bool {
    words(call)
        .windows(2)
        .any(|w| w[0] == flag && w[1] == value)
}

#[test]
fn apply_installs_in_order_with_the_pins_flags_and_values_files() {
    let Some(world) = World::with_worker("apply_installs_in_order") else {
        return;
    };
    let (calls, _) = world.succeeds("apply", &[]);
    let calls = work(&calls);
    // The first two words of each call, and the third for kubectl and helm.
    let steps: Vec<String> = calls
        .iter()
        .map(|c| match words(c)[0] {
            "talosctl" => "talosctl".to_owned(),
            _ => words(c)[..3].join(" "),
        })
        .collect();
    assert_eq!(
        steps,
        [
            "helm upgrade --install",
            "kubectl wait --for=create",
            "kubectl apply --server-side",
            "talosctl",
            "talosctl",
            "kubectl apply --server-side",
            "kubectl wait --for=condition=Established",
            "helm upgrade --install",
            "helm upgrade --install",
            "helm upgrade --install",
        ],
        "{calls:#?}"
    );
    assert_each_release_is_pinned_with_its_values(&world, &calls);
    let apply = &calls[5];
    assert!(
        apply.contains("--field-manager=edgepop-platform"),
        "{apply}"
    );
    for file in &world.crd_files {
        assert!(
            has_pair(apply, "-f", &file.display().to_string()),
            "{apply}"
        );
    }
    // A second run asks for exactly the same (upgrade --install, server-side apply and Talos's
    // strategic merge of documents by name converge).
    fs::write(world.dir.path().join("calls.log"), "").unwrap();
    assert!(world.platform("apply", &[]).status.success());
    assert_eq!(work(&world.calls()), calls);
}

/// Each helm release of the edge in order: its chart, repository, version and namespace from
/// the pins, helm's safety flags, and the committed values before the rendered ones.
fn assert_each_release_is_pinned_with_its_values(world: &World, calls: &[String]) {
    let pins = pins();
    let helm: Vec<&String> = starting_with(calls, "helm upgrade");
    let expected = [
        (
            "cilium",
            "cilium",
            "kube-system",
            "CILIUM_CHART_REPO",
            "CILIUM_VERSION",
        ),
        (
            "cert-manager",
            "cert-manager",
            "cert-manager",
            "CERT_MANAGER_CHART_REPO",
            "CERT_MANAGER_VERSION",
        ),
        (
            "istio-base",
            "base",
            "istio-system",
            "ISTIO_CHART_REPO",
            "ISTIO_VERSION",
        ),
        (
            "istiod",
            "istiod",
            "istio-system",
            "ISTIO_CHART_REPO",
            "ISTIO_VERSION",
        ),
    ];
    for (call, (release, chart, namespace, repo_key, version_key)) in helm.iter().zip(expected) {
        let w = words(call);
        assert_eq!(&w[3..5], [release, chart], "{call}");
        assert!(has_pair(call, "--repo", &pins[repo_key]), "{call}");
        assert!(has_pair(call, "--version", &pins[version_key]), "{call}");
        assert!(has_pair(call, "--namespace", namespace), "{call}");
        for flag in ["--wait", "--atomic", "--create-namespace"] {
            assert!(w.contains(&flag), "{flag} missing: {call}");
        }
        // The committed values first, then the rendered switches (helm merges the last over).
        let values = format!("values/{release}.yaml");
        let rendered = world.rendered(release);
        let at = w
            .windows(4)
            .position(|x| x == ["-f", values.as_str(), "-f", rendered.as_str()]);
        assert!(at.is_some(), "values files not in order: {call}");
    }
}

#[test]
fn the_host_firewall_follows_cilium_through_a_control_plane_to_the_worker_without_reboot() {
    let Some(world) = World::with_worker("the_host_firewall_follows_cilium") else {
        return;
    };
    let (calls, _) = world.succeeds("apply", &[]);
    let calls = work(&calls);
    let policies = world.dir.path().join("rendered/host-firewall.json");
    assert_eq!(
        calls[1],
        "kubectl wait --for=create --for=condition=Established --timeout=120s \
         crd/ciliumclusterwidenetworkpolicies.cilium.io"
    );
    // Applied as every rendered object: a field edited by hand is taken back.
    assert!(
        calls[2].starts_with(
            "kubectl apply --server-side --force-conflicts --field-manager=edgepop-platform"
        ) && has_pair(&calls[2], "-f", &policies.display().to_string()),
        "{}",
        calls[2]
    );
    // The example inputs: the first control plane's apid forwards to the worker's.
    let patch = world.dir.path().join("rendered/talos-firewall.worker.yaml");
    // The worker's rules read first, through the same control plane (which rules to delete).
    assert!(
        has_pair(&calls[3], "--endpoints", "203.0.113.11")
            && has_pair(&calls[3], "--nodes", "203.0.113.10")
            && calls[3].contains("get machineconfig v1alpha1 -o json"),
        "{}",
        calls[3]
    );
    let talos = &calls[4];
    assert!(
        has_pair(talos, "--endpoints", "203.0.113.11")
            && has_pair(talos, "--nodes", "203.0.113.10")
            && talos.contains("patch machineconfig")
            && has_pair(talos, "--patch", &format!("@{}", patch.display()))
            && talos.contains("--mode=no-reboot"),
        "{talos}"
    );
    // The worker took it without a reboot: its config holds each rule, by name, beside the
    // documents it had (the hostname's).
    let rules: Vec<serde_json::Value> =
        crate::talos_schema::documents(&fs::read_to_string(&patch).unwrap());
    let config = world.worker_config();
    assert!(rules.len() > 2, "{rules:#?}");
    for rule in &rules {
        assert!(config.contains(rule), "{rule} not in the worker's config");
    }
    crate::talos_schema::document(&config, "HostnameConfig");
    // A second run finds the worker's config as the patch makes it: nothing to apply.
    world.assert_a_second_apply_changes_nothing();
    assert!(
        world.worker_config() == config,
        "the worker's config changed"
    );

    // An unreachable worker (its apid refuses connections) stops the layer before cert-manager.
    let Some(world) = World::with_worker("the_host_firewall_follows_cilium") else {
        return;
    };
    world.fails_saying(
        "apply",
        &[("TALOSCTL_SILENT_CALLS", "1")],
        &[
            "talos-firewall: 203.0.113.10 was not patched",
            "code = Unavailable",
        ],
    );
    let calls = world.calls();
    assert_eq!(starting_with(&calls, "helm upgrade").len(), 1, "{calls:#?}");

    // Without the rendered host firewall nothing is changed.
    let world = World::new();
    fs::remove_file(world.dir.path().join("rendered/host-firewall.json")).unwrap();
    world.fails_saying(
        "apply",
        &[],
        &["host-firewall.json is missing", "render-platform"],
    );
    assert!(mutating(&world.calls()).is_empty(), "{:#?}", world.calls());
}

#[test]
fn rules_the_render_no_longer_has_leave_the_worker_and_the_operator_s_own_stay() {
    let Some(world) = World::with_worker("rules_the_render_no_longer_has") else {
        return;
    };
    // Beside its config, the worker holds rules an earlier render wrote for a flow since dropped
    // (under the render's prefix, and in the form without it) and one its operator added.
    let path = testkit::standin::talos_node_config(&world.talos_state(), WORKER);
    let mut config = fs::read_to_string(&path).unwrap();
    let stale = ["edgepop-retired-udp", "kubelet-tcp"];
    for name in stale.iter().chain(&["operator-syslog"]) {
        config.push_str(&format!(
            "\n---\napiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: {name}\n\
             portSelector:\n  ports: [5514]\n  protocol: udp\n\
             ingress:\n  - subnet: 198.51.100.0/24\n"
        ));
    }
    fs::write(&path, config).unwrap();
    let names = |config: &[serde_json::Value]| -> Vec<String> {
        config
            .iter()
            .filter(|d| d["kind"] == "NetworkRuleConfig")
            .map(|d| d["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let before = world.worker_config();

    // The dry run shows each deletion, and changes nothing.
    let (_, err) = world.succeeds("diff", &[]);
    for name in stale {
        assert!(
            err.contains(&format!("-name: {name}"))
                && err.contains(&format!("the node's rule {name} is no longer rendered")),
            "{err}"
        );
    }
    assert!(!err.contains("operator-syslog is no longer"), "{err}");
    assert!(
        world.worker_config() == before,
        "the dry run changed the worker's config"
    );

    // The apply deletes them, in the same call that writes the rendered rules.
    world.succeeds("apply", &[]);
    let after = names(&world.worker_config());
    let rendered: Vec<serde_json::Value> = crate::talos_schema::documents(
        &fs::read_to_string(world.dir.path().join("rendered/talos-firewall.worker.yaml")).unwrap(),
    );
    let mut expected = names(&rendered);
    expected.push("operator-syslog".to_owned());
    expected.sort();
    let mut kept = after.clone();
    kept.sort();
    assert_eq!(kept, expected);
    assert!(
        expected
            .iter()
            .all(|n| n == "operator-syslog" || n.starts_with("edgepop-")),
        "{expected:?}"
    );

    // Nothing left to delete: the next run changes nothing.
    world.assert_a_second_apply_changes_nothing();
}

#[test]
fn a_host_firewall_patch_the_worker_refuses_stops_the_layer_and_leaves_its_config() {
    let test = "a_host_firewall_patch_the_worker_refuses";
    let cases: [(&str, &str, &[&str]); 3] = [
        (
            // The node's validation refuses a rule without a port.
            "a rule without a port",
            "apiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: gateway-tcp\n\
             portSelector:\n  ports: []\n  protocol: tcp\ningress:\n  - subnet: 0.0.0.0/0\n",
            &["code = InvalidArgument", "portSelector.ports is required"],
        ),
        (
            // talosctl applies no JSON patch to a config of several documents, as the worker's
            // is (its hostname's document), whatever its path.
            "a JSON patch",
            "- op: add\n  path: /machine/network/hostname\n  value: edge\n",
            &["JSON6902 patches are not supported for multi-document machine configuration"],
        ),
        (
            // A running node takes a change of the machine's environment only with a reboot.
            "a change that needs a reboot",
            "machine:\n  env:\n    HTTPS_PROXY: http://proxy.example:3128\n",
            &[
                "code = InvalidArgument",
                "can't be applied in immediate mode",
            ],
        ),
    ];
    for (what, patch, said) in cases {
        let Some(world) = World::with_worker(test) else {
            return;
        };
        let config = world.worker_config();
        fs::write(
            world.dir.path().join("rendered/talos-firewall.worker.yaml"),
            patch,
        )
        .unwrap();
        let mut needles = vec!["talos-firewall: 203.0.113.10 was not patched"];
        needles.extend(said);
        world.fails_saying("apply", &[], &needles);
        // (compared, not printed: a machine config holds the cluster's secrets)
        assert!(
            world.worker_config() == config,
            "{what}: the config changed"
        );
        let calls = world.calls();
        assert_eq!(
            starting_with(&calls, "helm upgrade").len(),
            1,
            "{what}: {calls:#?}"
        );
    }

    // A worker that holds no config (which no node out of maintenance mode does) fails too.
    let Some(world) = World::with_worker(test) else {
        return;
    };
    fs::remove_file(testkit::standin::talos_node_config(
        &world.talos_state(),
        WORKER,
    ))
    .unwrap();
    world.fails_saying(
        "apply",
        &[],
        &[
            "holds no machine config for the node 203.0.113.10",
            "talos-firewall: 203.0.113.10 was not patched",
        ],
    );
}

#[test]
fn talosctl_runs_without_the_scaleway_secret_the_makefile_s_environment_holds() {
    // make exports the operator's environment, Scaleway credentials included, to every recipe.
    let secret = [("SCW_SECRET_KEY", "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0")];
    let Some(world) = World::with_worker("talosctl_runs_without_the_scaleway_secret") else {
        return;
    };
    // The worker's config read, then patched.
    let (calls, _) = world.succeeds("apply", &secret);
    assert_eq!(starting_with(&calls, "talosctl").len(), 2, "{calls:#?}");
    let Some(world) = World::with_worker("talosctl_runs_without_the_scaleway_secret") else {
        return;
    };
    let out = world.platform("diff", &secret);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(starting_with(&world.calls(), "talosctl").len(), 2);
}

#[test]
fn helm_4_is_refused_before_any_change() {
    let world = World::new();
    for mode in ["apply", "diff", "destroy"] {
        world.fails_saying(
            mode,
            &[("STANDIN_HELM_VERSION", "v4.0.1+g3a12c9e")],
            &["helm v4.0.1+g3a12c9e is not Helm 3"],
        );
    }
    assert!(mutating(&world.calls()).is_empty(), "{:#?}", world.calls());
}

#[test]
fn a_crd_file_that_does_not_match_its_pin_stops_everything_before_any_change() {
    let world = World::new();
    fs::write(&world.crd_files[1], "kind: Tampered\n").unwrap();
    world.fails_saying("apply", &[], &["httproutes.yaml", "does not match the pin"]);
    assert!(work(&world.calls()).is_empty(), "{:#?}", world.calls());
    // The dry-run twin refuses it the same way.
    world.fails_saying("diff", &[], &[]);
    assert!(mutating(&world.calls()).is_empty());
}

#[test]
fn a_missing_vendored_file_or_rendered_values_file_stops_before_any_change() {
    let world = World::new();
    fs::remove_file(&world.crd_files[0]).unwrap();
    world.fails_saying("apply", &[], &["make vendor"]);
    assert!(work(&world.calls()).is_empty());

    let world = World::new();
    fs::remove_file(world.rendered("istiod")).unwrap();
    world.fails_saying("apply", &[], &["istiod.json is missing"]);
    assert!(work(&world.calls()).is_empty(), "{:#?}", world.calls());

    // Without render-platform's list there is nothing to install, diff or uninstall.
    let world = World::new();
    fs::remove_file(world.dir.path().join("rendered/components.tsv")).unwrap();
    for mode in ["apply", "diff", "destroy"] {
        world.fails_saying(mode, &[], &["components.tsv is missing", "render-platform"]);
    }
    assert!(work(&world.calls()).is_empty(), "{:#?}", world.calls());
}

#[test]
fn a_failing_release_stops_the_ones_after_it() {
    let Some(world) = World::with_worker("a_failing_release_stops_the_ones_after_it") else {
        return;
    };
    world.fails_saying(
        "apply",
        &[("STANDIN_HELM_FAIL", "cert-manager")],
        &["cert-manager did not install"],
    );
    let calls = world.calls();
    let releases: Vec<&str> = starting_with(&calls, "helm upgrade")
        .into_iter()
        .map(|c| words(c)[3])
        .collect();
    assert_eq!(releases, ["cilium", "cert-manager"], "{calls:#?}");
}

#[test]
fn diff_without_the_plugin_pipes_helm_template_into_kubectl_diff_and_changes_nothing() {
    let Some(world) = World::with_worker("diff_without_the_plugin") else {
        return;
    };
    let config = world.worker_config();
    let (calls, err) = world.succeeds("diff", &[]);
    assert!(mutating(&calls).is_empty(), "{calls:#?}");
    // The worker answers what the host firewall's patch would change, and keeps its config.
    assert!(
        err.contains("Dry run summary:") && err.contains("+kind: NetworkRuleConfig"),
        "{err}"
    );
    assert!(
        world.worker_config() == config,
        "the worker's config changed"
    );
    let templates: Vec<&String> = starting_with(&calls, "helm template");
    assert_eq!(templates.len(), 4, "{calls:#?}");
    for (call, key) in templates.iter().zip([
        "CILIUM_VERSION",
        "CERT_MANAGER_VERSION",
        "ISTIO_VERSION",
        "ISTIO_VERSION",
    ]) {
        assert!(has_pair(call, "--version", &pins()[key]), "{call}");
        // A chart's `lookup` of what it made before reads the cluster, as upgrade does: without
        // it, helm template renders a chart's generated credentials anew (CrowdSec's LAPI
        // secrets) and the dry run shows a change the upgrade would not make.
        assert!(words(call).contains(&"--dry-run=server"), "{call}");
    }
    let diffs: Vec<&String> = starting_with(&calls, "kubectl diff");
    // One per release, fed what helm template printed, the host policies' after Cilium's and
    // the CRDs' before cert-manager, in the apply order.
    assert_eq!(diffs.len(), 6, "{calls:#?}");
    assert!(diffs[1].contains("host-firewall.json"), "{}", diffs[1]);
    let talos = starting_with(&calls, "talosctl");
    assert_eq!(talos.len(), 2, "{calls:#?}");
    assert!(talos[0].contains("get machineconfig"), "{}", talos[0]);
    assert!(talos[1].contains("--dry-run"), "{}", talos[1]);
    let crds = diffs[2];
    assert!(
        crds.contains("--server-side") && crds.contains(&world.crd_files[0].display().to_string()),
        "{crds}"
    );
    for diff in diffs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1 && *i != 2)
        .map(|(_, d)| d)
    {
        assert!(
            diff.contains("<stdin:") && !diff.contains("<stdin:0 bytes>"),
            "{diff}"
        );
    }
    // kubectl diff exits 1 for "differences found", more for an error.
    world.fails_saying("diff", &[("STANDIN_KUBECTL_DIFF_RC", "2")], &[]);
    // A chart that does not render fails the diff, although kubectl diff said 1.
    world.fails_saying(
        "diff",
        &[("STANDIN_HELM_FAIL", "istiod")],
        &["helm template failed on istiod"],
    );
}

#[test]
fn diff_with_the_plugin_uses_helm_diff() {
    let Some(world) = World::with_worker("diff_with_the_plugin") else {
        return;
    };
    let (calls, _) = world.succeeds("diff", &[("STANDIN_HELM_DIFF", "yes")]);
    assert!(mutating(&calls).is_empty(), "{calls:#?}");
    let diffs: Vec<&String> = starting_with(&calls, "helm diff upgrade");
    assert_eq!(diffs.len(), 4, "{calls:#?}");
    assert!(
        diffs
            .iter()
            .all(|c| c.contains("--allow-unreleased") && c.contains("--version"))
    );
    assert!(!calls.iter().any(|c| c.starts_with("helm template")));
}

#[test]
fn destroy_uninstalls_in_reverse_and_keeps_the_crds_unless_asked() {
    let world = World::new();
    let installed = [(
        "STANDIN_HELM_INSTALLED",
        "cilium cert-manager istio-base istiod",
    )];
    let (calls, _) = world.succeeds("destroy", &installed);
    let uninstalls = uninstalled(&calls);
    assert_eq!(
        uninstalls,
        ["istiod", "cert-manager", "cilium"],
        "{calls:#?}"
    );
    // istio-base stays, and with it its validating webhook to istiod (istiod-default-validator,
    // failurePolicy Fail once istiod patched it): with istiod gone, every write of an Istio
    // object would be refused. Deleted, by the labels the base chart gives it, once istiod is.
    // The host policies go just before Cilium. No CRD is deleted.
    let webhook = "kubectl delete validatingwebhookconfiguration -l app=istiod\\,release=istio-base --ignore-not-found";
    let deletes = starting_with(&calls, "kubectl delete");
    assert_eq!(deletes.len(), 2, "{calls:#?}");
    assert_eq!(deletes[0], webhook, "{calls:#?}");
    assert!(deletes[1].contains("host-firewall.json"), "{}", deletes[1]);
    let at = |call: &str| calls.iter().position(|c| c.starts_with(call)).unwrap();
    assert!(at("helm uninstall istiod") < at(webhook), "{calls:#?}");
    assert!(at(deletes[1]) < at("helm uninstall cilium"), "{calls:#?}");

    let world = World::new();
    let crds = "customresourcedefinition.apiextensions.k8s.io/gateways.gateway.networking.k8s.io \
                customresourcedefinition.apiextensions.k8s.io/certificates.cert-manager.io \
                customresourcedefinition.apiextensions.k8s.io/wasmplugins.extensions.istio.io \
                customresourcedefinition.apiextensions.k8s.io/ciliumnodes.cilium.io \
                customresourcedefinition.apiextensions.k8s.io/orders.acme.cert-manager.io \
                customresourcedefinition.apiextensions.k8s.io/gateways.networking.istio.io \
                customresourcedefinition.apiextensions.k8s.io/middlewares.traefik.io \
                customresourcedefinition.apiextensions.k8s.io/volumesnapshots.snapshot.storage.k8s.io \
                customresourcedefinition.apiextensions.k8s.io/widgets.example.com";
    let (calls, _) = world.succeeds(
        "destroy",
        &[
            installed[0],
            ("DELETE_CRDS", "yes"),
            ("STANDIN_KUBECTL_CRDS", crds),
        ],
    );
    let uninstalls = uninstalled(&calls);
    assert_eq!(
        uninstalls,
        ["istiod", "istio-base", "cert-manager", "cilium"],
        "{calls:#?}"
    );
    let delete = calls
        .iter()
        .find(|c| c.starts_with("kubectl delete --wait"))
        .expect("no CRD deleted");
    for ours in [
        "gateways.gateway.networking.k8s.io",
        "certificates.cert-manager.io",
        "orders.acme.cert-manager.io",
        "wasmplugins.extensions.istio.io",
        "gateways.networking.istio.io",
        "ciliumnodes.cilium.io",
    ] {
        assert!(delete.contains(ours), "{ours}: {delete}");
    }
    // Another team's, and the CRDs of another profile's components (onprem's Traefik and
    // snapshots), which this profile never installs.
    for theirs in [
        "widgets.example.com",
        "middlewares.traefik.io",
        "volumesnapshots.snapshot.storage.k8s.io",
    ] {
        assert!(!delete.contains(theirs), "not ours: {theirs}: {delete}");
    }
}

#[test]
fn destroy_skips_what_is_not_installed() {
    let world = World::new();
    let (calls, err) = world.succeeds("destroy", &[("STANDIN_HELM_INSTALLED", "cilium")]);
    assert_eq!(uninstalled(&calls), ["cilium"], "{calls:#?}");
    assert!(err.contains("istiod: not installed"), "{err}");
}

/// `make VARIABLE=...` for the world: its rendered releases, its cluster outputs, and the tools
/// this test built (make must neither render again nor rebuild them in release mode).
fn make_args(world: &World) -> Vec<String> {
    let bin = testkit::workspace::bin("render-platform");
    testkit::workspace::bin("kubeconfig-guard");
    vec![
        format!(
            "PLATFORM_VALUES={}",
            world.dir.path().join("rendered").display()
        ),
        "PLATFORM_CONFIG=config/platform.example.json".to_owned(),
        format!("OUT={}", world.dir.path().join("out").display()),
        format!("BIN={}", bin.parent().unwrap().display()),
        "RUST_SOURCES=".to_owned(),
    ]
}

/// `make <targets>` of the repository in the world, with its folders and tools.
fn make(world: &World, targets: &[&str]) -> Command {
    let mut make = world.command("make");
    make.args(["--no-print-directory", "-C"])
        .arg(repo())
        .args(targets)
        .args(make_args(world));
    make
}

/// `make destroy-platform CONFIRM=yes` in the world, with `env` and `args` added.
fn make_destroy_platform(world: &World, env: &[(&str, &Path)], args: &[String]) -> Output {
    let mut make = make(world, &["destroy-platform", "CONFIRM=yes"]);
    make.args(args).env("STANDIN_HELM_INSTALLED", "cilium");
    for (k, v) in env {
        make.env(k, v);
    }
    make.output().unwrap()
}

#[test]
fn make_acts_on_the_cluster_s_own_kubeconfig_never_on_the_shell_s() {
    let world = World::new();
    let prod = world.dir.path().join("prod-kubeconfig");
    let own = world.dir.path().join("out/kubeconfig");

    // The shell points at another cluster: make acts on its own kubeconfig, and says so.
    let out = make_destroy_platform(&world, &[("KUBECONFIG", &prod)], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("KUBECONFIG from the environment")
            && stderr(&out).contains("is ignored"),
        "{}",
        stderr(&out)
    );
    assert_eq!(uninstalled(&world.calls()), ["cilium"]);
    let seen = world.kubeconfigs();
    assert!(!seen.is_empty());
    for line in &seen {
        assert!(line.ends_with(&*own.to_string_lossy()), "{line}");
    }
    assert!(
        stderr(&out).contains("of the cluster edge-par") || stderr(&out).contains("edge-par"),
        "{}",
        stderr(&out)
    );

    // Without the cluster's own kubeconfig, the shell's is still not used: refused, nothing done.
    let world = World::new();
    fs::remove_file(world.dir.path().join("out/kubeconfig")).unwrap();
    let out = make_destroy_platform(&world, &[("KUBECONFIG", &prod)], &[]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    assert!(world.calls().is_empty(), "{:#?}", world.calls());
    assert!(world.kubeconfigs().is_empty());
}

#[test]
fn a_kubeconfig_whose_current_context_is_another_cluster_is_refused_before_any_write() {
    // Named on make's command line: taken, then checked against platform-inputs.json.
    let world = World::new();
    let prod = world.dir.path().join("prod-kubeconfig");
    let out = make_destroy_platform(&world, &[], &[format!("KUBECONFIG={}", prod.display())]);
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("https://prod.example.net:6443")
            && err.contains("https://api.example.com:6443"),
        "{err}"
    );
    assert!(world.calls().is_empty(), "{:#?}", world.calls());

    // The cluster's own file, switched to another context: refused too.
    let world = World::new();
    fs::write(
        world.dir.path().join("out/kubeconfig"),
        kubeconfig("prod", "https://prod.example.net:6443"),
    )
    .unwrap();
    let out = make_destroy_platform(&world, &[], &[]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("`prod`"), "{}", stderr(&out));
    assert!(world.calls().is_empty(), "{:#?}", world.calls());
}

#[test]
fn make_destroy_platform_asks_first_and_does_nothing_without_a_terminal() {
    let world = World::new();
    let out = make(&world, &["destroy-platform"])
        .env_remove("CONFIRM")
        .env("STANDIN_HELM_INSTALLED", "cilium")
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("refusing to destroy")
            && stderr(&out).contains("of the cluster edge-par"),
        "{}",
        stderr(&out)
    );
    // What goes was read and shown before the question; nothing was changed.
    assert!(stderr(&out).contains("destroy-platform does, in this order"));
    assert!(mutating(&world.calls()).is_empty(), "{:#?}", world.calls());

    let out = make_destroy_platform(&world, &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        world
            .calls()
            .iter()
            .any(|c| c.starts_with("helm uninstall cilium")),
        "{:#?}",
        world.calls()
    );
}

#[test]
fn make_acts_on_another_profile_only_through_a_kubeconfig_named_on_its_command_line() {
    let world = World::new();
    // KUBECONFIG comes from the environment (World::command): never taken for another profile,
    // whose cluster this Makefile did not make.
    let out = make(&world, &["apply-platform", "PROFILE=onprem"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("PROFILE=onprem acts on an existing cluster: name its kubeconfig"),
        "{}",
        stderr(&out)
    );
    assert!(world.calls().is_empty(), "{:#?}", world.calls());
}

#[test]
fn the_backup_s_key_comes_from_the_environment_or_the_cluster_and_never_from_an_argument() {
    let Some(world) = World::with_worker("the_backup_s_key") else {
        return;
    };
    // The example config with a backup, rendered in place of the example's own render.
    crate::etcd_backup_objects::render_with_backup(world.dir.path());
    let crds = ("STANDIN_KUBECTL_CRDS", "serviceaccounts.talos.dev");
    // Neither in the environment nor in the cluster: refused before any change.
    world.fails_saying(
        "apply",
        &[crds],
        &[
            "etcd-backup needs the Secret etcd-backup/etcd-backup-object-storage",
            "nothing installed",
        ],
    );
    assert!(mutating(&world.calls()).is_empty(), "{:?}", world.calls());

    // Half a key: refused naming what is missing, nothing changed.
    let half = ("EDGEPOP_BACKUP_ACCESS_KEY", "SCWBACKUPXXXXXXXXXXX");
    world.fails_saying("apply", &[crds, half], &["EDGEPOP_BACKUP_SECRET_KEY"]);
    assert!(mutating(&world.calls()).is_empty());

    // The whole key. The dry-run twin says what the apply would do, and changes nothing.
    let secret = "33333333-3333-4333-8333-333333333333";
    let project = "22222222-2222-4222-8222-222222222222";
    let key = [
        crds,
        half,
        ("EDGEPOP_BACKUP_SECRET_KEY", secret),
        ("EDGEPOP_BACKUP_PROJECT_ID", project),
    ];
    let before = world.calls().len();
    let (calls, said) = world.succeeds("diff", &key);
    assert!(mutating(&calls[before..]).is_empty(), "{calls:?}");
    let would = "the Secret etcd-backup/etcd-backup-object-storage would be applied from the \
                 environment (values not shown)";
    assert!(said.contains(would) && !said.contains(secret), "{said}");
    // The apply: the Secret goes after the component's objects, through stdin.
    let (calls, said) = world.succeeds("apply", &key);
    assert!(!calls.iter().any(|c| c.contains(secret)), "{calls:?}");
    let objects = world.rendered("etcd-backup");
    let applied = starting_with(&calls, "kubectl apply");
    let at = applied
        .iter()
        .position(|c| c.contains(&objects))
        .unwrap_or_else(|| panic!("{applied:?}"));
    assert!(applied[at + 1].contains("-f - <stdin:"), "{applied:?}");
    assert!(
        said.contains("the Secret etcd-backup/etcd-backup-object-storage, from the environment"),
        "{said}"
    );

    // Already in the cluster, no variable set: kept as it is.
    let (_, said) = world.succeeds(
        "apply",
        &[
            crds,
            (
                "STANDIN_KUBECTL_SECRETS",
                "etcd-backup/etcd-backup-object-storage",
            ),
        ],
    );
    assert!(said.contains("stays as it is in the cluster"), "{said}");
}
