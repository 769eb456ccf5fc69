//! The cluster's day 2, as an operator drives it through the Makefile with CONFIRM=yes, against
//! three control planes played by testkit's node stand-in (`talos_maintenance.py` with
//! `talos_etcd.py`: Talos's own messages, mutual TLS with the cluster's talosconfig), each at an
//! address of its own on loopback (127.0.10.N) over a real etcd member, the three members one
//! cluster, and the real kube-apiserver storing in those members (testkit::control_plane), as a
//! cluster's API servers do. The real talos-lifecycle, talosctl, etcdutl and kubectl run; the
//! objects are written and read back through the API server:
//!
//! - `make etcd-snapshot`: a 0600 snapshot in a 0700 folder under OUT, read by etcdutl on its
//!   own, taken from one control plane; a ConfigMap made before it, another after;
//! - `make dry-run-upgrade-talos`: every control plane's Talos read through talosctl, the plan
//!   snapshots first and gates each control plane, one at a time, in the inventory's order;
//! - `make upgrade-talos` (the nodes run v1.13.9, the pin is later): the configs made for the
//!   pin and validated, a snapshot, the gate passed on cp-1, its installer (the pinned Scaleway
//!   one) pulled and run through the real talosctl; the run stops at cp-1's drain (below), no
//!   other node started;
//! - `make dry-run-upgrade-k8s` with one kubelet (kwok's node) a patch behind the pin: the plan
//!   from what the API server reports; `make upgrade-k8s` once every kubelet runs the pin:
//!   nothing to upgrade, no snapshot, the machine configs made again at the pin;
//! - `make etcd-restore`: refused while the three members hold the quorum; two machines lost
//!   (their node and member stopped), refused on the last one, whose etcd still holds data;
//!   then with RESET_EPHEMERAL=yes that node reset, the snapshot recovered there, its API server
//!   restarted through Talos (and started again as its kubelet would): the ConfigMap made before
//!   the snapshot is read back through the API server, the one made after is gone.
//!
//! The cluster is not made by `make apply` here: the rehearsal (`rehearsal.rs`) proves apply,
//! against the Scaleway stand-in's addresses (203.0.113.N) where no node stand-in answers. This
//! test starts from what apply leaves in OUT for the day-2 targets, written as apply writes it:
//! the inventory (the control planes at loopback addresses; the worker, which no node stand-in
//! plays here, left out), the cluster's secrets and talosconfig made by the real talosctl, the
//! admin kubeconfig (its server the API server's loopback address instead of the cluster's
//! endpoint). It takes about 3 minutes, most of it the restore's waits on the lost nodes.
//!
//! Not run here, and why:
//! - `make upgrade-talos` past cp-1's installer: the tool runs `talosctl upgrade --image ...
//!   --wait`, whose drain (on by default, and forcing the wait: siderolabs/talos v1.13.9
//!   cmd/talosctl/cmd/talos/upgrade.go:66-72) fetches the kubeconfig through the Talos API and
//!   resolves the node's name through the COSI `State` service (drain.go:34-103,
//!   nodedrain/nodedrain.go:52-62), and whose wait follows the `Events` stream and the boot id
//!   (action/tracker.go:38-72): the node stand-in serves none of these (COSI's protos are not
//!   among ../shared's), so it answers Unimplemented, as Talos answers a call it does not serve;
//!   talos-lifecycle's own test runs the real talosctl's upgrade to the reboot with
//!   `--drain=false --wait=false`. Past the control planes, the worker's upgrade is recorded on
//!   its server through Scaleway, which this test does not stand up;
//! - `make upgrade-k8s` with a kubelet behind: `talosctl upgrade-k8s` reads COSI resources and
//!   patches the configs on the nodes, which the node stand-in does not model;
//! - `make replace-control-plane`, `make add-worker`, `make remove-worker`: they destroy and make
//!   machines through scw-infra and Scaleway, whose stand-in hands out addresses no node stand-in
//!   answers at, and the new control plane would join etcd as a new machine, which the node
//!   stand-in does not model; `etcd_day2.rs` runs the replacement up to its gate,
//!   `infra_pipeline/workers.rs` the workers' targets with a recorded scw-infra.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use testkit::control_plane::ControlPlane;
use testkit::process::text;
use testkit::talos_node::{ControlPlaneNode, Programs};

use crate::etcd_day2::{inventory, make_in, make_ok_in, make_refused_in, operator_folder};
use crate::infra_pipeline::mode;

const NAMES: [&str; 3] = ["edge-par-cp-1", "edge-par-cp-2", "edge-par-cp-3"];
/// Addresses no other test of this binary uses: a member's peer port is picked before it
/// listens, and another test's member on the same address could take it meanwhile.
const ADDRESSES: [&str; 3] = ["127.0.10.1", "127.0.10.2", "127.0.10.3"];
const NAMESPACE: &str = "day-two";

/// The operator's folder, the control planes (a lost one is `None`), the API server.
struct Stage {
    programs: Programs,
    dir: tempfile::TempDir,
    port: u16,
    nodes: Vec<Option<ControlPlaneNode>>,
    clients: Vec<String>,
    plane: ControlPlane,
}

impl Stage {
    fn start(test: &str) -> Option<Stage> {
        let programs = Programs::find(test)?;
        let dir = tempfile::tempdir().unwrap();
        testkit::talos_node::cluster_trust(dir.path(), &programs.talosctl, "edge-par", &ADDRESSES);
        // Every control plane runs its static pod's API server: the one the test runs.
        let pid_file = dir.path().join("kube-apiserver.pid");
        let port = testkit::free_port();
        let mut specs = testkit::talos_node::etcd_cluster(&NAMES, &ADDRESSES, port);
        for spec in &mut specs {
            spec.kube_apiserver_pid_file = Some(pid_file.clone());
        }
        let nodes: Vec<Option<ControlPlaneNode>> = specs
            .iter()
            .map(|spec| Some(ControlPlaneNode::start(&programs, dir.path(), spec)))
            .collect();
        let clients: Vec<String> = specs.iter().map(|s| s.etcd_client_url.clone()).collect();
        let urls: Vec<&str> = clients.iter().map(String::as_str).collect();
        testkit::eventually("the three members to elect a leader", || {
            testkit::talos_node::settled(&programs.etcdctl, &urls).then_some(())
        });
        let plane = ControlPlane::start_over_etcd(test, &clients.join(","))?;
        plane.write_apiserver_pid(&pid_file);
        let control_planes: Vec<(&str, &str)> = NAMES.into_iter().zip(ADDRESSES).collect();
        let kubectl = PathBuf::from(plane.kubectl().get_program());
        operator_folder(
            dir.path(),
            &programs,
            &inventory(&control_planes, &[]),
            &[("kubectl", &kubectl)],
        );
        // The cluster's secrets as apply keeps them: the machine configs made again from them.
        fs::copy(
            dir.path().join("secrets.yaml"),
            dir.path().join("out/secrets.yaml"),
        )
        .unwrap();
        fs::set_permissions(
            dir.path().join("out/secrets.yaml"),
            fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        fs::copy(plane.kubeconfig(), dir.path().join("out/kubeconfig")).unwrap();
        Some(Stage {
            programs,
            dir,
            port,
            nodes,
            clients,
            plane,
        })
    }

    fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join("out").join(name)
    }

    fn node(&self, i: usize) -> &ControlPlaneNode {
        self.nodes[i].as_ref().unwrap()
    }

    fn make(&self, args: &[&str]) -> Output {
        make_in(self.dir.path(), self.port, args)
    }

    /// `make <args>`, which must succeed: its stdout.
    fn make_ok(&self, args: &[&str]) -> String {
        String::from_utf8(make_ok_in(self.dir.path(), self.port, args).stdout).unwrap()
    }

    /// `make <args>`, which must fail saying each of `needles`: all it said.
    fn make_refused(&self, args: &[&str], needles: &[&str]) -> String {
        make_refused_in(self.dir.path(), self.port, args, needles)
    }

    /// The ConfigMaps of the test's namespace, read through the API server.
    fn config_maps(&self) -> Vec<String> {
        let names = self.plane.kubectl_ok(
            &["get", "configmaps", "--namespace", NAMESPACE, "-o", "name"],
            "",
        );
        let mut names: Vec<String> = names
            .lines()
            .filter_map(|l| l.strip_prefix("configmap/"))
            .filter(|n| n.starts_with("made-"))
            .map(str::to_owned)
            .collect();
        names.sort();
        names
    }

    fn create_config_map(&self, name: &str) {
        self.plane
            .kubectl_ok(&["create", "configmap", name, "--namespace", NAMESPACE], "");
    }
}

#[test]
fn the_cluster_is_snapshotted_upgraded_and_restored_through_make() {
    let Some(mut stage) = Stage::start("rehearsal_day2") else {
        return;
    };
    stage
        .plane
        .kubectl_ok(&["create", "namespace", NAMESPACE], "");
    kubelets(&stage, None);
    stage.create_config_map("made-before");
    let snapshot = snapshot_step(&stage);
    stage.create_config_map("made-after");
    assert_eq!(stage.config_maps(), ["made-after", "made-before"]);
    upgrade_plan_step(&stage);
    upgrade_talos_step(&stage);
    kubernetes_upgrade_step(&stage);
    restore_step(&mut stage, &snapshot);
}

/// `make etcd-snapshot`: the file, its folder, what etcdutl reads in it; the path.
fn snapshot_step(stage: &Stage) -> String {
    let taken: Value = serde_json::from_str(&stage.make_ok(&["etcd-snapshot"])).unwrap();
    assert_eq!(taken["kind"], "EtcdSnapshot");
    let path = PathBuf::from(taken["path"].as_str().unwrap());
    let folder = stage.out("etcd");
    assert_eq!(path.parent(), Some(folder.as_path()));
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("edge-par-") && name.ends_with(".snapshot"),
        "{name}"
    );
    assert_eq!((mode(&path), mode(&folder)), (0o600, 0o700));
    // etcdutl, on its own, reads the whole snapshot (its hash checked) as the tool reported it.
    let status = Command::new(&stage.programs.etcdutl)
        .args(["snapshot", "status", "-w", "json"])
        .arg(&path)
        .output()
        .unwrap();
    let status: Value = serde_json::from_str(&testkit::process::success_stdout(&status)).unwrap();
    assert_eq!(
        status["totalKey"], taken["status"]["total_keys"],
        "{status}"
    );
    assert_eq!(status["revision"], taken["status"]["revision"], "{status}");
    assert!(status["totalKey"].as_u64().unwrap() > 100, "{status}");
    // One control plane streamed it; nothing else was asked of any node but reads.
    let streamed: usize = (0..3)
        .map(|i| stage.node(i).calls("EtcdSnapshot").len())
        .sum();
    assert_eq!(streamed, 1);
    path.to_str().unwrap().to_owned()
}

/// `make dry-run-upgrade-talos`: every control plane's version read through the real talosctl,
/// the snapshot first, then each control plane behind its gate, in the inventory's order, with
/// the pinned installer; nothing taken or changed.
fn upgrade_plan_step(stage: &Stage) {
    let snapshots = fs::read_dir(stage.out("etcd")).unwrap().count();
    let steps: Vec<Value> =
        testkit::process::json_lines(&stage.make_ok(&["dry-run-upgrade-talos"]));
    let by_node: Vec<(&str, &str)> = steps
        .iter()
        .filter(|s| !s["node"].is_null())
        .map(|s| (s["step"].as_str().unwrap(), s["node"].as_str().unwrap()))
        .collect();
    let expected: Vec<(&str, &str)> = NAMES
        .iter()
        .flat_map(|&n| [("gate", n), ("upgrade", n), ("wait-upgraded", n)])
        .collect();
    assert_eq!(by_node, expected, "{steps:?}");
    let preflight = steps[0]["says"].as_str().unwrap();
    for name in NAMES {
        assert!(
            preflight.contains(&format!("{name} v1.13.9")),
            "{preflight}"
        );
    }
    let installer = format!(
        "--image factory.talos.dev/scaleway-installer/{}:{}",
        testkit::pin("TALOS_CONTROL_PLANE_SCHEMATIC"),
        testkit::pin("TALOS_VERSION")
    );
    let upgrade = steps.iter().find(|s| s["step"] == "upgrade").unwrap();
    assert!(
        upgrade["says"].as_str().unwrap().contains(&installer),
        "{upgrade}"
    );
    for i in 0..3 {
        assert_eq!(stage.node(i).calls("Version").len(), 1);
        assert!(stage.node(i).calls("LifecycleService.Upgrade").is_empty());
    }
    assert_eq!(fs::read_dir(stage.out("etcd")).unwrap().count(), snapshots);
}

/// Each control plane's Kubernetes node, registered as its kubelet does (kwok stands in for the
/// kubelets) and Ready, its kubelet reporting the pinned Kubernetes, or `behind` for cp-3's.
fn kubelets(stage: &Stage, behind: Option<&str>) {
    let pin = testkit::pin("KUBERNETES_VERSION");
    let registered = stage.plane.kubectl_ok(&["get", "nodes", "-o", "name"], "");
    for name in NAMES {
        if !registered.lines().any(|l| l == format!("node/{name}")) {
            stage.plane.add_node(name, &[]);
        }
        let version = match behind {
            Some(version) if name == NAMES[2] => version,
            _ => pin.as_str(),
        };
        stage.plane.report_kubelet_version(name, version);
    }
}

fn snapshots(stage: &Stage) -> usize {
    fs::read_dir(stage.out("etcd")).unwrap().count()
}

/// `make upgrade-talos` with CONFIRM=yes: the plan, the configs made again for the pin, a
/// snapshot before any node changes, the gate passed on cp-1, its installer pulled and run
/// through the real talosctl. There the run stops: talosctl's drain (forced on with the wait,
/// upgrade.go:66-72) first fetches the kubeconfig through the Talos API (drain.go:34-103),
/// which the node stand-in does not serve; the tool stops at that node, none other started.
fn upgrade_talos_step(stage: &Stage) {
    let before = snapshots(stage);
    let out = stage.make(&["upgrade-talos", "CONFIRM=yes"]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    testkit::process::assert_says_all(
        &said,
        &[
            "\"step\":\"wait-upgraded\",\"node\":\"edge-par-cp-3\"",
            "is valid for cloud mode",
            "upgrade completed",
            "error fetching kubeconfig from Talos API",
            "edge-par-cp-1: talosctl upgrade: Talos answered Unimplemented",
        ],
    );
    assert_eq!(snapshots(stage), before + 1);
    let installer = format!(
        "factory.talos.dev/scaleway-installer/{}:{}",
        testkit::pin("TALOS_CONTROL_PLANE_SCHEMATIC"),
        testkit::pin("TALOS_VERSION")
    );
    let first = stage.node(0);
    let rpcs: Vec<String> = first
        .calls("")
        .iter()
        .map(|c| c["rpc"].as_str().unwrap().to_owned())
        .collect();
    let staged = &rpcs[rpcs.len() - 3..];
    assert_eq!(
        staged,
        ["Version", "ImageService.Pull", "LifecycleService.Upgrade"]
    );
    assert_eq!(first.calls("ImageService.Pull")[0]["image_ref"], installer);
    assert!(first.calls("Reboot").is_empty());
    for i in 1..3 {
        assert!(stage.node(i).calls("ImageService.Pull").is_empty());
    }
}

/// `make dry-run-upgrade-k8s` with cp-3's kubelet a patch behind the pin: the plan from what
/// the API server reports; then `make upgrade-k8s` once every kubelet runs the pin: nothing to
/// upgrade, no snapshot, the machine configs made for the pin (what a new node gets).
fn kubernetes_upgrade_step(stage: &Stage) {
    let to = testkit::pin("KUBERNETES_VERSION");
    let (minor, patch) = to.rsplit_once('.').unwrap();
    let behind = format!("{minor}.{}", patch.parse::<u32>().unwrap() - 1);
    kubelets(stage, Some(&behind));
    let before = snapshots(stage);
    let steps: Vec<Value> = testkit::process::json_lines(&stage.make_ok(&["dry-run-upgrade-k8s"]));
    let kinds: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
    let plan = [
        "preflight",
        "take-snapshot",
        "check-snapshot",
        "gate",
        "upgrade",
        "wait-upgraded",
    ];
    assert_eq!(kinds, plan);
    let preflight = steps[0]["says"].as_str().unwrap();
    assert!(preflight.contains(&format!("from {behind}")), "{preflight}");
    assert!(
        preflight.contains(&format!("edge-par-cp-3 {behind}")),
        "{preflight}"
    );

    kubelets(stage, None);
    fs::remove_file(stage.out("controlplane.yaml")).unwrap();
    let out = stage.make(&["upgrade-k8s", "CONFIRM=yes"]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!("runs {to} already: nothing to do")),
        "{said}"
    );
    assert_eq!(snapshots(stage), before);
    let config = fs::read_to_string(stage.out("controlplane.yaml")).unwrap();
    assert!(config.contains(&format!("kube-apiserver:{to}")), "{said}");
    assert_eq!(mode(&stage.out("controlplane.yaml")), 0o600);
}

/// `make etcd-restore`: refused while the quorum holds and over a member's data, then done
/// with RESET_EPHEMERAL=yes; the objects read back through the API server.
fn restore_step(stage: &mut Stage, snapshot: &str) {
    let named = format!("SNAPSHOT={snapshot}");
    let restore = ["etcd-restore", named.as_str(), "CONFIRM=yes"];
    stage.make_refused(
        &restore,
        &[
            "holds its quorum",
            "3 of 3 members",
            "edge-par-cp-1, edge-par-cp-2, edge-par-cp-3",
        ],
    );

    // Two machines lost, their members with them: the last member has no leader, and its
    // folder still holds its data, where Talos would refuse a recovery.
    stage.nodes[0] = None;
    stage.nodes[1] = None;
    testkit::eventually("the last member to lose its leader", || {
        let last = &stage.clients[2];
        (!testkit::talos_node::has_leader(&stage.programs.etcdctl, last)).then_some(())
    });
    stage.make_refused(
        &restore,
        &["edge-par-cp-3 (its etcd service is Running): etcd data is still there"],
    );
    let last = stage.node(2);
    assert!(last.calls("Reset").is_empty() && last.calls("Bootstrap").is_empty());

    let records: Vec<Value> = testkit::process::json_lines(
        &stage.make_ok(&[&restore[..], &["RESET_EPHEMERAL=yes"]].concat()),
    );
    let recovered = records.last().unwrap();
    assert_eq!(recovered["kind"], "EtcdRecovery", "{records:?}");
    assert_eq!(recovered["node"], "edge-par-cp-3");
    let last = stage.node(2);
    assert_eq!(
        last.calls("Reset")[0]["wipe"],
        serde_json::json!(["EPHEMERAL"])
    );
    assert_eq!(last.calls("Bootstrap")[0]["recover_etcd"], true);
    assert_eq!(
        last.calls("Restart")[0]["id"],
        "kube-system/kube-apiserver-edge-par-cp-3:kube-apiserver"
    );
    let members = stage.etcdctl_at_last(&["member", "list", "-w", "json"]);
    let members: Value = serde_json::from_str(&members).unwrap();
    assert_eq!(members["members"][0]["name"], "edge-par-cp-3", "{members}");
    assert_eq!(members["members"].as_array().unwrap().len(), 1, "{members}");

    // The API server, stopped through Talos, started again as its kubelet does, reads the
    // restored member: what was made before the snapshot is back, what came after is gone.
    stage.plane.start_apiserver_again_once_stopped();
    let after = testkit::eventually("the API server to serve the restored etcd", || {
        let names = stage.config_maps();
        (!names.contains(&"made-after".to_owned())).then_some(names)
    });
    assert_eq!(after, ["made-before"]);
}

impl Stage {
    /// etcdctl against the last control plane's member: its stdout, the call having succeeded.
    fn etcdctl_at_last(&self, args: &[&str]) -> String {
        let out = Command::new(&self.programs.etcdctl)
            .args(["--endpoints", &self.clients[2], "--dial-timeout=2s"])
            .args(args)
            .output()
            .unwrap();
        testkit::process::success_stdout(&out)
    }
}
