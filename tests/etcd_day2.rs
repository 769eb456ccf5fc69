//! `make etcd-snapshot`, `make dry-run-etcd-restore`, `make etcd-restore`, `make
//! etcd-remove-member` and `make replace-control-plane` (up to their gate), `make
//! dry-run-upgrade-talos`, `make upgrade-talos` (up to its question) and `make dry-run-upgrade-k8s`
//! (up to its kubectl) as an operator runs them, OUT pointing into a temporary folder (its
//! inventory and talosconfig), the real talos-lifecycle, talosctl and etcdutl on the recipes'
//! PATH, against a control plane played by testkit's node stand-in over a real etcd member
//! (`talos_maintenance.py`, `talos_etcd.py`).
//! The rehearsal's control planes live at the Scaleway stand-in's addresses, where no node
//! stand-in can answer: these targets get a test of their own. The round trip through a real
//! API server is talos-lifecycle's own test (`tools/talos-lifecycle/tests/etcd.rs`).

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use testkit::process::text;
use testkit::talos_node::{ControlPlaneNode, ControlPlaneSpec, Programs};

const ADDRESS: &str = "127.0.0.5";

/// The operator's folder: `out/` (inventory, talosconfig), `bin/` (talosctl, etcdutl).
struct Stage {
    programs: Programs,
    dir: tempfile::TempDir,
    port: u16,
    etcd_client_url: String,
}

impl Stage {
    fn start(test: &str) -> Option<Stage> {
        let programs = Programs::find(test)?;
        let dir = tempfile::tempdir().unwrap();
        testkit::talos_node::cluster_trust(dir.path(), &programs.talosctl, "edge-par", &[ADDRESS]);
        let inventory = inventory(&[("edge-par-cp-1", ADDRESS)], &[]);
        operator_folder(dir.path(), &programs, &inventory, &[]);
        Some(Stage {
            programs,
            dir,
            port: testkit::free_port(),
            etcd_client_url: format!("http://{ADDRESS}:{}", testkit::free_port()),
        })
    }

    /// The stage with its control plane's etcd running and holding `key`, written once the
    /// member has elected itself.
    fn with_member_holding(test: &str, key: &str) -> Option<(Stage, ControlPlaneNode)> {
        let stage = Stage::start(test)?;
        let node = stage.node(true);
        stage.etcdctl_once_elected(&["put", key, "1"]);
        Some((stage, node))
    }

    /// The control plane: its etcd running from the start (`running`), or a new machine whose
    /// etcd waits to be bootstrapped.
    fn node(&self, running: bool) -> ControlPlaneNode {
        let peer = format!("http://{ADDRESS}:{}", testkit::free_port());
        ControlPlaneNode::start(
            &self.programs,
            self.dir.path(),
            &ControlPlaneSpec {
                initial_cluster: running.then(|| format!("edge-par-cp-1={peer}")),
                ..ControlPlaneSpec::new(
                    "edge-par-cp-1",
                    ADDRESS,
                    self.port,
                    self.etcd_client_url.clone(),
                    peer.clone(),
                )
            },
        )
    }

    fn make(&self, args: &[&str]) -> Output {
        make_in(self.dir.path(), self.port, args)
    }

    /// `make <args>`, which must succeed.
    fn make_ok(&self, args: &[&str]) -> Output {
        make_ok_in(self.dir.path(), self.port, args)
    }

    /// `make <args>`, which must fail saying `needle`; what it said.
    fn make_refused(&self, args: &[&str], needle: &str) -> String {
        make_refused_in(self.dir.path(), self.port, args, &[needle])
    }

    /// `make <args>` lacking a variable it needs: exit 2, saying `needle`.
    fn make_usage_error(&self, args: &[&str], needle: &str) {
        let out = self.make(args);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(2), "{said}");
        assert!(said.contains(needle), "`{needle}` not in: {said}");
    }

    /// `TALOS_DIGESTS=<file>` recording both Talos images of the pins, which a replacement's
    /// apply checks first (the values stand for `make talos-image-digests`'s).
    fn recorded_digests(&self) -> String {
        let names = Command::new(testkit::workspace::bin("scw-infra"))
            .args(["names", "--config"])
            .arg(testkit::workspace::root().join("config/infra.example.json"))
            .output()
            .unwrap();
        assert!(names.status.success(), "{}", text(&names));
        let names = String::from_utf8(names.stdout).unwrap();
        let worker = names
            .lines()
            .find_map(|l| l.strip_prefix("WORKER_SCHEMATIC="))
            .unwrap();
        let version = testkit::pin("TALOS_VERSION");
        let control_plane = testkit::pin("TALOS_CONTROL_PLANE_SCHEMATIC");
        let path = self.dir.path().join("talos-image-digests.env");
        fs::write(
            &path,
            format!(
                "{version}/{control_plane}/scaleway-amd64.raw.zst={}\n\
                 {version}/{worker}/metal-amd64.raw.zst={}\n",
                "a".repeat(64),
                "b".repeat(64)
            ),
        )
        .unwrap();
        format!("TALOS_DIGESTS={}", path.display())
    }

    fn etcdctl_once_elected(&self, args: &[&str]) {
        testkit::talos_node::etcdctl_once_elected(
            &self.programs.etcdctl,
            &self.etcd_client_url,
            args,
        );
    }

    fn etcdctl(&self, args: &[&str]) -> String {
        testkit::talos_node::etcdctl_ok(&self.programs.etcdctl, &self.etcd_client_url, args)
    }
}

/// The operator's folder in `dir` (where [`testkit::talos_node::cluster_trust`] made the
/// cluster's trust) as `make apply` leaves it for the day-2 targets: `out/` with the cluster's
/// talosconfig and `inventory`, `bin/` with the real talosctl and etcdutl and the `extra`
/// programs (name, path), first on the recipes' PATH.
pub(crate) fn operator_folder(
    dir: &Path,
    programs: &Programs,
    inventory: &Value,
    extra: &[(&str, &Path)],
) {
    for sub in ["out", "bin"] {
        fs::create_dir(dir.join(sub)).unwrap();
    }
    fs::copy(dir.join("talosconfig"), dir.join("out/talosconfig")).unwrap();
    let tools = [
        ("talosctl", programs.talosctl.as_path()),
        ("etcdutl", programs.etcdutl.as_path()),
    ];
    for (name, path) in tools.iter().chain(extra) {
        std::os::unix::fs::symlink(path, dir.join("bin").join(name)).unwrap();
    }
    fs::write(dir.join("out/inventory.json"), inventory.to_string()).unwrap();
}

/// An inventory as scw-infra writes it, of `control_planes` and `workers` (name, address).
pub(crate) fn inventory(control_planes: &[(&str, &str)], workers: &[(&str, &str)]) -> Value {
    let node = |(i, (name, address)): (usize, &(&str, &str)), role: &str, kind: &str| {
        let id = match role {
            "worker" => "22222222-2222-4222-8222-22222222222",
            _ => "11111111-1111-4111-8111-11111111111",
        };
        serde_json::json!({"name": name, "role": role, "kind": kind, "zone": "fr-par-1",
            "id": format!("{id}{}", i + 1), "public_ipv4": address, "public_ipv6": null,
            "private_ipv4": null, "steps": {}})
    };
    let nodes: Vec<Value> = control_planes
        .iter()
        .enumerate()
        .map(|n| node(n, "controlplane", "instance"))
        .chain(
            workers
                .iter()
                .enumerate()
                .map(|n| node(n, "worker", "elastic-metal")),
        )
        .collect();
    serde_json::json!({
        "kind": "NodeInventory", "version": 2, "cluster_name": "edge-par",
        "cluster_endpoint": "https://api.example.com:6443", "ssh_key_ids": [], "nodes": nodes
    })
}

/// `make <args>` as an operator runs it from the workspace, with the operator's folder `dir`
/// ([`operator_folder`]): OUT in it, its `bin/` first on PATH, the example infra config, the
/// Talos API at `port` on every node.
pub(crate) fn make_in(dir: &Path, port: u16, args: &[&str]) -> Output {
    let bin = testkit::workspace::bin("talos-lifecycle");
    for tool in ["scw-infra", "scw-rescue-flash", "talos-apply-insecure"] {
        testkit::workspace::bin(tool);
    }
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    Command::new("make")
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir)
        .args(["--no-print-directory", "-C"])
        .arg(testkit::workspace::root())
        .arg("TOOLS_DIR=")
        .arg("RUST_SOURCES=")
        .arg(format!("OUT={}", dir.join("out").display()))
        .arg(format!("BIN={}", bin.parent().unwrap().display()))
        .arg(format!(
            "INFRA_CONFIG={}",
            testkit::workspace::root()
                .join("config/infra.example.json")
                .display()
        ))
        .arg(format!("TALOS_API_PORT={port}"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// [`make_in`], which must succeed.
pub(crate) fn make_ok_in(dir: &Path, port: u16, args: &[&str]) -> Output {
    let out = make_in(dir, port, args);
    assert!(out.status.success(), "{}", text(&out));
    out
}

/// [`make_in`], which must fail saying each of `needles`: all it said.
pub(crate) fn make_refused_in(dir: &Path, port: u16, args: &[&str], needles: &[&str]) -> String {
    let out = make_in(dir, port, args);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    testkit::process::assert_says_all(&said, needles);
    said
}

#[test]
fn make_etcd_snapshot_then_etcd_restore_refused_while_quorum_holds_then_asked_then_done() {
    let Some((stage, first)) = Stage::with_member_holding(
        "make_etcd_snapshot_then_etcd_restore",
        "/registry/made-before",
    ) else {
        return;
    };

    let out = stage.make_ok(&["etcd-snapshot"]);
    let taken: Value = serde_json::from_slice(&out.stdout).unwrap();
    let snapshot = taken["path"].as_str().unwrap().to_owned();
    assert!(snapshot.starts_with(&stage.dir.path().join("out/etcd").display().to_string()));
    assert_eq!(taken["status"]["total_keys"], 1);
    stage.etcdctl(&["put", "/registry/made-after", "1"]);

    stage.make_usage_error(&["dry-run-etcd-restore"], "name the snapshot to restore");
    let named = format!("SNAPSHOT={snapshot}");
    stage.make_refused(
        &["etcd-restore", &named, "CONFIRM=yes"],
        "holds its quorum: 1 of 1 members",
    );
    assert!(first.calls("Bootstrap").is_empty());

    // The machine is lost and made again on a disk that kept etcd's folder: its etcd does not
    // run, and Talos would refuse a recovery there.
    drop(first);
    let second = stage.node(false);
    let leftover = second.var_lib.join("etcd/member");
    fs::create_dir_all(&leftover).unwrap();
    fs::write(leftover.join("wal"), "left over").unwrap();
    stage.make_refused(
        &["etcd-restore", &named, "CONFIRM=yes"],
        "edge-par-cp-1 (its etcd service is Failed): etcd data is still there",
    );
    let reset = "RESET_EPHEMERAL=yes";
    let said = stage.make_refused(&["etcd-restore", &named, reset], "\"step\":\"recover\"");
    assert!(
        said.contains("refusing to destroy the etcd state of the cluster edge-par")
            && said.contains("\"step\":\"reset-ephemeral\""),
        "{said}"
    );
    assert!(second.calls("EtcdRecover").is_empty() && second.calls("Reset").is_empty());

    let done = stage.make_ok(&["etcd-restore", &named, reset, "CONFIRM=yes"]);
    assert_eq!(second.calls("Reset").len(), 1);
    let records: Vec<Value> = String::from_utf8_lossy(&done.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        records.last().unwrap()["kind"],
        "EtcdRecovery",
        "{records:?}"
    );
    assert_eq!(second.calls("Bootstrap").len(), 1);
    let keys = stage.etcdctl(&["get", "--prefix", "/registry/", "--keys-only"]);
    assert_eq!(
        keys.split_whitespace().collect::<Vec<_>>(),
        ["/registry/made-before"]
    );
}

#[test]
fn make_etcd_remove_member_needs_a_node_and_never_takes_the_last_member() {
    let Some(stage) = Stage::start("make_etcd_remove_member") else {
        return;
    };
    let node = stage.node(true);
    stage.etcdctl_once_elected(&["endpoint", "health"]);
    stage.make_usage_error(&["dry-run-etcd-remove-member"], "name the control plane");
    // The only member: refused before the question, nothing taken or changed.
    stage.make_refused(
        &["etcd-remove-member", "NODE=edge-par-cp-1", "CONFIRM=yes"],
        "edge-par-cp-1 is etcd's only member",
    );
    assert!(node.calls("EtcdLeaveCluster").is_empty());
    assert!(node.calls("EtcdSnapshot").is_empty());
    assert!(!stage.dir.path().join("out/etcd").exists());

    // The whole replacement: NODE named first, then the same gate refuses before any plan of
    // the Instance is made or anything is asked.
    stage.make_usage_error(
        &["dry-run-replace-control-plane"],
        "make dry-run-replace-control-plane NODE=",
    );
    let digests = stage.recorded_digests();
    for target in ["dry-run-replace-control-plane", "replace-control-plane"] {
        let said = stage.make_refused(
            &[target, "NODE=edge-par-cp-1", "CONFIRM=yes", &digests],
            "edge-par-cp-1 is etcd's only member",
        );
        assert!(!said.contains("Instance and the root volume"), "{said}");
    }
    assert!(node.calls("EtcdLeaveCluster").is_empty());
    assert!(node.calls("EtcdSnapshot").is_empty());
    assert!(!stage.dir.path().join("out/etcd").exists());
    assert!(
        !stage
            .dir
            .path()
            .join("out/replace-edge-par-cp-1.destroy-plan.json")
            .exists()
    );
}

#[test]
fn make_dry_run_upgrade_talos_prints_the_plan_and_upgrade_talos_asks_before_anything_changes() {
    let Some((stage, node)) =
        Stage::with_member_holding("make_dry_run_upgrade_talos", "/registry/before-the-upgrade")
    else {
        return;
    };
    fs::write(stage.dir.path().join("out/kubeconfig"), "apiVersion: v1\n").unwrap();

    // The node runs v1.13.9 (the stand-in's Version), the pin is v1.13.11: the installers are
    // the ones scw-infra computes from the pins, the control plane's the Scaleway one.
    let out = stage.make_ok(&["dry-run-upgrade-talos"]);
    let steps: Vec<Value> = testkit::process::json_lines(&String::from_utf8_lossy(&out.stdout));
    let kinds: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "preflight",
            "take-snapshot",
            "check-snapshot",
            "gate",
            "upgrade",
            "wait-upgraded"
        ]
    );
    let to = testkit::pin("TALOS_VERSION");
    let installer = format!(
        "factory.talos.dev/scaleway-installer/{}:{to}",
        testkit::pin("TALOS_CONTROL_PLANE_SCHEMATIC")
    );
    assert!(
        steps[4]["says"]
            .as_str()
            .unwrap()
            .contains(&format!("--image {installer}")),
        "{}",
        steps[4]
    );
    assert!(text(&out).contains("edgepop-image-upgraded=factory.talos.dev/metal-installer/"));
    assert_eq!(node.calls("Version").len(), 1);

    // The real target shows the same plan, then asks: without a terminal it stops there.
    let said = stage.make_refused(&["upgrade-talos"], "\"step\":\"upgrade\"");
    assert!(
        said.contains(
            "refusing to destroy the running Talos of every node of the cluster edge-par"
        ),
        "{said}"
    );
    assert!(!stage.dir.path().join("out/etcd").exists(), "{said}");
    assert!(node.calls("EtcdSnapshot").is_empty());

    // Kubernetes' twin reads the nodes' Talos, then the kubelets through the kubeconfig, which
    // names no API server here: it stops there, nothing done.
    let versions = node.calls("Version").len();
    stage.make_refused(&["dry-run-upgrade-k8s"], "kubectl: get nodes");
    assert!(node.calls("Version").len() > versions);
    assert!(node.calls("EtcdSnapshot").is_empty());
}
