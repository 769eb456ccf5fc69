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
//!   pin and validated, one snapshot, then each control plane in turn, cp-1, cp-2, cp-3, then the
//!   worker (its metal installer, its calls through cp-1's apid, which serves the kubeconfig the
//!   drain fetches: a worker serves none), each behind the gate, through the real `talosctl upgrade --image <pinned Scaleway installer> --wait`:
//!   the installer pulled and run, the kubeconfig fetched and the node's name read through the
//!   Talos API (COSI), the Kubernetes node cordoned and drained through the API server, the
//!   reboot (the node away for seconds, its etcd member stopped and back on its data, a new
//!   boot id) followed through Talos's events, the node uncordoned; the next one starts only
//!   once the last answers with the pin, its member healthy and its node Ready. The worker's
//!   upgrade is recorded on its server (the Scaleway stand-in's tags: `edgepop-image-upgraded=`
//!   its installer). Afterwards every node answers with the pin, the three members hold the data (the ConfigMaps read
//!   back), a second run has nothing to do, and one with a node left cordoned (as a run stopped
//!   between talosctl's drain and its uncordon leaves it) is refused, naming it;
//! - `make dry-run-upgrade-k8s` with one control plane (its kubelet, kwok's node, and its static
//!   pods' mirrors) a patch behind the pin: the plan from what the API server reports; `make
//!   upgrade-k8s`: a snapshot, the gate, `talosctl upgrade-k8s` through a control plane
//!   (testkit's stand-in for that one command, `talosctl_upgrade_k8s.py`, which reads the
//!   cluster as talosctl does and leaves the static pods and kubelets as its upgrade does), the
//!   wait for the kubelets, the record, the machine configs made again at the pin; run again,
//!   nothing to upgrade and no snapshot;
//! - `make replace-control-plane NODE=edge-par-cp-3 FAILED=yes` once cp-3's machine is lost
//!   (its node and member stopped): a snapshot, its member removed through the others, its Node
//!   deleted, the Instance's destroy plan shown then carried out, the configs, apply's node
//!   steps, where the new Instance boots from its user data (a node stand-in at the same address
//!   whose etcd joins as a learner and is promoted, as Talos's etcd service does, and whose
//!   kubelet registers the Node again), the bootstrap step finding etcd running, the outputs,
//!   and the wait until the new member votes and every node is Ready: nothing bootstrapped, the
//!   objects still read. scw-infra's calls to Scaleway (the destroy, the apply) and the worker's
//!   node tools are recorded there: scw-infra's own tests run the Instance's destroy (from its
//!   plan file, as this target does) and its making again at the same address against the
//!   Scaleway stand-in;
//! - `make etcd-restore`: refused while the three members hold the quorum; two machines lost
//!   (their node and member stopped), refused on the last one, whose etcd still holds data;
//!   then with RESET_EPHEMERAL=yes that node reset, the snapshot recovered there, its API server
//!   restarted through Talos (and started again as its kubelet would): the ConfigMap made before
//!   the snapshot is read back through the API server, the one made after is gone.
//!
//! The cluster is not made by `make apply` here: the rehearsal (`rehearsal.rs`) proves apply,
//! against the Scaleway stand-in's addresses (203.0.113.N) where no node stand-in answers. This
//! test starts from what apply leaves in OUT for the day-2 targets, written as apply writes it:
//! the inventory (the control planes and the worker at loopback addresses, the worker's server
//! in the Scaleway stand-in as apply left it), the cluster's secrets and talosconfig made by the real talosctl, the
//! admin kubeconfig (its server the API server's loopback address instead of the cluster's
//! endpoint), and a Scaleway profile in HOME (made-up keys, the Scaleway stand-in's URL). It
//! takes 4 to 6 minutes, most of it the restore's waits on the lost nodes and the replaced
//! member's promotion; the Talos upgrade's four reboots about 35 s.
//!
//! Not run here, and why:
//! - the installer itself: the node stand-in stages the upgrade (`talos_upgrade.py`);
//! - the real talosctl's `upgrade-k8s`: it reads COSI resources and patches the configs on the
//!   nodes, which the node stand-ins do not serve (its stand-in says what it leaves out);
//! - scw-infra's destroy and apply in `make replace-control-plane` against the Scaleway stand-in:
//!   that needs the stand-in to hold the whole cluster as apply left it (its image, network,
//!   addresses) with the control planes at loopback addresses, and the apply's worker steps (its
//!   flash, its first config) to run in that world;
//! - `make add-worker`, `make remove-worker`: `rehearsal.rs` runs them.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use testkit::control_plane::ControlPlane;
use testkit::process::text;
use testkit::talos_node::{ControlPlaneNode, ControlPlaneSpec, Programs};

use crate::etcd_day2::{inventory, make_in, make_ok_in, make_refused_in, operator_folder};
use crate::infra_pipeline::mode;

const NAMES: [&str; 3] = ["edge-par-cp-1", "edge-par-cp-2", "edge-par-cp-3"];
/// Addresses no other test of this binary uses: a member's peer port is picked before it
/// listens, and another test's member on the same address could take it meanwhile.
const ADDRESSES: [&str; 3] = ["127.0.10.1", "127.0.10.2", "127.0.10.3"];
const NAMESPACE: &str = "day-two";
/// The example infra config's worker, played by the node stand-in as a worker (no etcd), at an
/// address of its own; its Elastic Metal server held by the Scaleway stand-in.
const WORKER: &str = "edge-worker-1";
const WORKER_ADDRESS: &str = "127.0.10.4";
/// Every node, in the inventory's order: the control planes, then the worker.
const NODES: [&str; 4] = [NAMES[0], NAMES[1], NAMES[2], WORKER];
/// Their machines' addresses, in the same order.
const NODE_ADDRESSES: [&str; 4] = [ADDRESSES[0], ADDRESSES[1], ADDRESSES[2], WORKER_ADDRESS];
/// The Scaleway profile's keys and project, which the Scaleway stand-in takes.
const SECRET: &str = "00000000-0000-4000-8000-000000000000";
const PROJECT: &str = "00000000-0000-4000-8000-000000000001";

/// The operator's folder, the control planes (a lost one is `None`), the API server.
struct Stage {
    programs: Programs,
    dir: tempfile::TempDir,
    port: u16,
    nodes: Vec<Option<ControlPlaneNode>>,
    /// What each control plane was started as (a machine made again starts as it, joining).
    specs: Vec<ControlPlaneSpec>,
    worker: ControlPlaneNode,
    clients: Vec<String>,
    plane: ControlPlane,
    /// The Scaleway API stand-in, holding the worker's server as apply left it.
    scaleway: testkit::standin::StandIn,
    worker_server: String,
}

impl Stage {
    fn start(test: &str) -> Option<Stage> {
        let programs = Programs::find(test)?;
        let dir = tempfile::tempdir().unwrap();
        let shared = testkit::workspace::shared_dir(test)?;
        testkit::talos_node::cluster_trust(
            dir.path(),
            &programs.talosctl,
            "edge-par",
            &NODE_ADDRESSES,
        );
        // Every control plane runs its static pod's API server: the one the test runs.
        let pid_file = dir.path().join("kube-apiserver.pid");
        let port = testkit::free_port();
        let mut specs = testkit::talos_node::etcd_cluster(&NAMES, &ADDRESSES, port);
        // ... and serves the cluster's admin kubeconfig (written once the API server runs).
        let admin = dir.path().join("admin.kubeconfig");
        for spec in &mut specs {
            spec.kube_apiserver_pid_file = Some(pid_file.clone());
            spec.admin_kubeconfig = Some(admin.clone());
        }
        let nodes: Vec<Option<ControlPlaneNode>> = specs
            .iter()
            .map(|spec| Some(ControlPlaneNode::start(&programs, dir.path(), spec)))
            .collect();
        let worker =
            ControlPlaneNode::start_worker(&programs, dir.path(), WORKER, WORKER_ADDRESS, port);
        let clients: Vec<String> = specs.iter().map(|s| s.etcd_client_url.clone()).collect();
        let urls: Vec<&str> = clients.iter().map(String::as_str).collect();
        testkit::eventually("the three members to elect a leader", || {
            testkit::talos_node::settled(&programs.etcdctl, &urls).then_some(())
        });
        let plane = ControlPlane::start_over_etcd(test, &clients.join(","))?;
        plane.write_apiserver_pid(&pid_file);
        fs::copy(plane.kubeconfig(), &admin).unwrap();
        let scaleway = testkit::standin::scaleway(&shared, dir.path(), SECRET, PROJECT, None);
        let worker_server = seed_worker(&scaleway.url());
        let control_planes: Vec<(&str, &str)> = NAMES.into_iter().zip(ADDRESSES).collect();
        let mut inventory = inventory(&control_planes, &[(WORKER, WORKER_ADDRESS)]);
        inventory["nodes"][3]["id"] = worker_server.as_str().into();
        let kubectl = PathBuf::from(plane.kubectl().get_program());
        operator_folder(dir.path(), &programs, &inventory, &[("kubectl", &kubectl)]);
        talosctl_with_upgrade_k8s(dir.path(), &programs.talosctl);
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
        scaleway_profile(dir.path(), &scaleway.url());
        Some(Stage {
            programs,
            dir,
            port,
            nodes,
            specs,
            worker,
            clients,
            plane,
            scaleway,
            worker_server,
        })
    }

    fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join("out").join(name)
    }

    fn node(&self, i: usize) -> &ControlPlaneNode {
        self.nodes[i].as_ref().unwrap()
    }

    /// The node `i` of [`NODES`]: a control plane, or (3) the worker.
    fn any_node(&self, i: usize) -> &ControlPlaneNode {
        if i == NAMES.len() {
            &self.worker
        } else {
            self.node(i)
        }
    }

    /// The worker's server as the Scaleway stand-in holds it now.
    fn worker_tags(&self) -> Vec<String> {
        let state = testkit::scaleway::control(&self.scaleway.url(), "state", None);
        let servers = state["bm_servers"].as_array().unwrap();
        let server = servers
            .iter()
            .find(|s| s["id"] == self.worker_server.as_str());
        serde_json::from_value(server.unwrap()["tags"].clone()).unwrap()
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
    replace_step(&mut stage);
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
    let expected: Vec<(&str, &str)> = NODES
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
    // The worker's with its metal installer, stated as the edge's downtime.
    let worker = steps.iter().rfind(|s| s["step"] == "upgrade").unwrap();
    let says = worker["says"].as_str().unwrap();
    assert!(
        says.contains("--image factory.talos.dev/metal-installer/")
            && says.contains("EDGE DOWNTIME"),
        "{worker}"
    );
    for (i, name) in NODES.iter().enumerate() {
        assert_eq!(stage.any_node(i).calls("Version").len(), 1, "{name}");
        assert!(
            stage
                .any_node(i)
                .calls("LifecycleService.Upgrade")
                .is_empty()
        );
    }
    assert_eq!(fs::read_dir(stage.out("etcd")).unwrap().count(), snapshots);
}

/// Each node's Kubernetes node, registered as its kubelet does (kwok stands in for the
/// kubelets) and Ready, its kubelet reporting the pinned Kubernetes, or `behind` for cp-3's; each
/// control plane's static pods mirrored at the same version.
fn kubelets(stage: &Stage, behind: Option<&str>) {
    let pin = testkit::pin("KUBERNETES_VERSION");
    let registered = stage.plane.kubectl_ok(&["get", "nodes", "-o", "name"], "");
    for name in NODES {
        if !registered.lines().any(|l| l == format!("node/{name}")) {
            register(stage, name);
        }
        let version = match behind {
            Some(version) if name == NAMES[2] => version,
            _ => pin.as_str(),
        };
        stage.plane.report_kubelet_version(name, version);
        if NAMES.contains(&name) {
            stage.plane.mirror_static_pods(name, version);
        }
    }
}

/// The node `name` registered as its kubelet registers it on Talos: a control plane labelled
/// so (Talos's NodeLabelSpec), its machine's address its InternalIP.
fn register(stage: &Stage, name: &str) {
    let control_plane = NAMES.contains(&name);
    let label = [("node-role.kubernetes.io/control-plane", "")];
    stage
        .plane
        .add_node(name, if control_plane { &label[..] } else { &[] });
    let at = NODES.iter().position(|n| *n == name).unwrap();
    stage.plane.report_address(name, NODE_ADDRESSES[at]);
}

fn snapshots(stage: &Stage) -> usize {
    fs::read_dir(stage.out("etcd")).unwrap().count()
}

/// `make upgrade-talos` with CONFIRM=yes: the configs made again for the pin, one snapshot,
/// then cp-1, cp-2, cp-3 each upgraded through the real talosctl (drained, rebooted, uncordoned)
/// and waited for before the next starts; afterwards the pin everywhere, the data kept, and a
/// second run that has nothing to do.
fn upgrade_talos_step(stage: &Stage) {
    let before = snapshots(stage);
    let inventory = fs::read_to_string(stage.out("inventory.json")).unwrap();
    let watch = stage.plane.watch_nodes(NODES.len(), stage.dir.path());
    let said = stage.make_ok(&["upgrade-talos", "CONFIRM=yes"]);
    let cordons = testkit::control_plane::cordons(&watch.changes());
    // The plan first (as the dry run shows it), then what was done.
    let (plan, records): (Vec<Value>, Vec<Value>) = testkit::process::json_lines::<Value>(&said)
        .into_iter()
        .partition(|r| r["kind"] == "TalosUpgradeStep");
    assert_eq!(plan.len(), 15, "{said}");
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "EtcdSnapshot",
            "TalosUpgraded",
            "TalosUpgraded",
            "TalosUpgraded",
            "TalosUpgraded"
        ],
        "{said}"
    );
    let pin = testkit::pin("TALOS_VERSION");
    for (record, name) in records[1..].iter().zip(NODES) {
        assert_eq!(
            (record["node"].as_str(), record["from"].as_str()),
            (Some(name), Some("v1.13.9"))
        );
        assert_eq!(record["to"], pin.as_str());
    }
    for record in &records[1..4] {
        assert_eq!(record["installer"], installer());
    }
    assert_eq!(snapshots(stage), before + 1);
    worker_upgrade_recorded(stage, &records[4]);
    // The upgrades are recorded in the run's output (above) and on the worker's server, not in
    // the inventory: a node's entry does not say what it runs.
    assert_eq!(
        fs::read_to_string(stage.out("inventory.json")).unwrap(),
        inventory
    );
    one_at_a_time(stage, &cordons);
    for (i, name) in NODES.iter().enumerate() {
        assert_eq!(talos_version(stage, i), pin, "{name}");
    }
    // The members kept their data through the reboots: one leader of three, the objects read.
    let urls: Vec<&str> = stage.clients.iter().map(String::as_str).collect();
    testkit::eventually("the three members to follow one leader", || {
        testkit::talos_node::settled(&stage.programs.etcdctl, &urls).then_some(())
    });
    assert_eq!(stage.config_maps(), ["made-after", "made-before"]);

    // Run again: every node on the pin, nothing to do, nothing taken.
    nothing_to_do(stage, "upgrade-talos", &pin, before + 1);
    for i in 0..NODES.len() {
        assert_eq!(stage.any_node(i).calls("LifecycleService.Upgrade").len(), 1);
    }
    left_cordoned(stage);
}

/// The worker upgraded with its metal installer of the pin, through the first control plane's
/// API (a worker serves no kubeconfig for the drain), and the upgrade recorded on its server:
/// its image tag replaced by `edgepop-image-upgraded=<installer>`, so that apply-infra takes it
/// as running the pin (scw-rescue-flash's own tests prove that reading).
fn worker_upgrade_recorded(stage: &Stage, record: &Value) {
    let installer = record["installer"].as_str().unwrap();
    let pin = testkit::pin("TALOS_VERSION");
    assert!(
        installer.starts_with("factory.talos.dev/metal-installer/")
            && installer.ends_with(&format!(":{pin}")),
        "{record}"
    );
    assert_eq!(
        stage.worker.calls("ImageService.Pull")[0]["image_ref"],
        installer
    );
    assert!(stage.worker.calls("Kubeconfig").is_empty());
    let through = stage.node(0).routed("LifecycleService/Upgrade");
    assert!(
        through
            .iter()
            .any(|c| c["node"] == WORKER_ADDRESS || c["nodes"][0] == WORKER_ADDRESS),
        "{through:?}"
    );
    let tags = stage.worker_tags();
    assert!(
        tags.contains(&format!("edgepop-image-upgraded={installer}")),
        "{tags:?}"
    );
    assert!(
        !tags.iter().any(|t| t.starts_with("edgepop-image-flashed=")),
        "{tags:?}"
    );
}

/// A node on the target left cordoned, as a run stopped between talosctl's drain and its
/// uncordon leaves it: a run names it instead of skipping it, and does nothing.
fn left_cordoned(stage: &Stage) {
    let (name, before) = (NAMES[1], snapshots(stage));
    stage.plane.kubectl_ok(&["cordon", name], "");
    stage.make_refused(
        &["upgrade-talos", "CONFIRM=yes"],
        &[
            &format!(
                "{name} runs {} already, but its Kubernetes node is cordoned",
                testkit::pin("TALOS_VERSION")
            ),
            &format!("kubectl uncordon {name}"),
        ],
    );
    stage.plane.kubectl_ok(&["uncordon", name], "");
    assert_eq!(snapshots(stage), before);
}

/// The pinned control-plane installer, as `scw-infra names` computes it.
fn installer() -> String {
    format!(
        "factory.talos.dev/scaleway-installer/{}:{}",
        testkit::pin("TALOS_CONTROL_PLANE_SCHEMATIC"),
        testkit::pin("TALOS_VERSION")
    )
}

/// The nodes were upgraded one at a time, in the inventory's order: each Kubernetes node
/// cordoned once and made schedulable again before the next one's cordon, and each control
/// plane's upgrade started only after the one before came back from its reboot.
fn one_at_a_time(stage: &Stage, cordons: &[testkit::control_plane::Cordon]) {
    let names: Vec<&str> = cordons.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, NODES, "{cordons:?}");
    for pair in cordons.windows(2) {
        assert!(
            pair[0].until.is_some_and(|u| u < pair[1].from),
            "{cordons:?}"
        );
    }
    assert!(cordons[3].until.is_some(), "{cordons:?}");
    let at = |i: usize, what: &str| -> f64 {
        let calls = stage.any_node(i).calls("");
        let found = calls
            .iter()
            .find(|c| c["rpc"] == what || c["reboot"] == what);
        found.and_then(|c| c["at"].as_f64()).unwrap_or(f64::NAN)
    };
    for i in 0..NODES.len() - 1 {
        let (back, next) = (at(i, "up"), at(i + 1, "LifecycleService.Upgrade"));
        assert!(
            back < next,
            "{}: back at {back}, {}'s upgrade at {next}",
            NODES[i],
            NODES[i + 1]
        );
    }
    let first = stage.node(0);
    assert_eq!(
        first.calls("ImageService.Pull")[0]["image_ref"],
        installer()
    );
}

/// The Talos version the node `i` of [`NODES`] answers with, read through the real talosctl
/// (the worker through the first control plane).
fn talos_version(stage: &Stage, i: usize) -> String {
    let (endpoint, node) = match ADDRESSES.get(i) {
        Some(address) => (*address, *address),
        None => (ADDRESSES[0], WORKER_ADDRESS),
    };
    let out = Command::new(&stage.programs.talosctl)
        .arg("--talosconfig")
        .arg(stage.dir.path().join("talosconfig"))
        .args(["--endpoints", &format!("{endpoint}:{}", stage.port)])
        .args(["--nodes", node, "version"])
        .output()
        .unwrap();
    let said = testkit::process::success_stdout(&out);
    // The client's block first, then the node's: the last tag is the node's.
    let tag = said
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Tag:"))
        .next_back();
    tag.unwrap().trim().to_owned()
}

/// `make dry-run-upgrade-k8s` with cp-3's kubelet and static pods a patch behind the pin: the
/// plan from what the API server reports; then `make upgrade-k8s`: a snapshot, the gate,
/// `talosctl upgrade-k8s` through cp-1 (testkit's stand-in brings cp-3's static pods and
/// kubelet to the pin, as talosctl's upgrade leaves them), the wait until every kubelet runs
/// the pin, the `KubernetesUpgraded` record, the machine configs made for the pin (what a new
/// node gets); run again, nothing to do.
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
    for says in [
        format!("from {behind}"),
        format!("edge-par-cp-3 {behind}"),
        format!("kube-apiserver-edge-par-cp-3 {behind}"),
    ] {
        assert!(preflight.contains(&says), "{preflight}");
    }
    assert_eq!(snapshots(stage), before);

    fs::remove_file(stage.out("controlplane.yaml")).unwrap();
    let out = stage.make(&["upgrade-k8s", "CONFIRM=yes"]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    let records: Vec<Value> = testkit::process::json_lines(&String::from_utf8_lossy(&out.stdout));
    let done = records.iter().find(|r| r["kind"] == "KubernetesUpgraded");
    let done = done.unwrap_or_else(|| panic!("{said}"));
    assert_eq!(
        (&done["from"], &done["to"]),
        (&behind.clone().into(), &to.clone().into())
    );
    assert!(
        said.contains("discovered controlplane nodes [\"127.0.10.1\""),
        "{said}"
    );
    assert_eq!(snapshots(stage), before + 1);
    let pods = stage.plane.kubectl_ok(
        &[
            "get",
            "pods",
            "--namespace",
            "kube-system",
            "-o",
            "jsonpath={.items[*].spec.containers[0].image}",
        ],
        "",
    );
    assert!(!pods.contains(&behind) && pods.contains(&to), "{pods}");
    let config = fs::read_to_string(stage.out("controlplane.yaml")).unwrap();
    assert!(config.contains(&format!("kube-apiserver:{to}")), "{said}");
    assert_eq!(mode(&stage.out("controlplane.yaml")), 0o600);

    // Run again: every kubelet and static pod runs the pin; no snapshot.
    nothing_to_do(stage, "upgrade-k8s", &to, before + 1);
}

/// `make <target> CONFIRM=yes` once everything runs `version`: it succeeds saying there is
/// nothing to do, and the snapshots are still `snapshots_now`.
fn nothing_to_do(stage: &Stage, target: &str, version: &str, snapshots_now: usize) {
    let out = stage.make(&[target, "CONFIRM=yes"]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!("runs {version} already: nothing to do")),
        "{said}"
    );
    assert_eq!(snapshots(stage), snapshots_now);
}

/// `make replace-control-plane NODE=edge-par-cp-3 FAILED=yes` once cp-3's machine is lost, with
/// scw-infra's calls to Scaleway and the worker's node tools recorded (scw-infra's own tests run
/// the Instance's destroy from its plan file and its making again against the Scaleway
/// stand-in): a snapshot, the
/// stale member removed through the others, the Node deleted, the destroy plan shown then carried
/// out, the configs, apply's node steps (the new Instance boots from its user data: a node
/// stand-in that joins etcd as Talos's etcd service does, its kubelet registering the Node
/// again), the bootstrap step finding etcd running, the outputs, then the wait until the new
/// member votes and every node is Ready.
fn replace_step(stage: &mut Stage) {
    let name = NAMES[2];
    let before = snapshots(stage);
    let old_member = member_of(stage, name);
    stage.nodes[2] = None;
    let (bin, log, made_again) = replace_tools(stage);
    let digests = digests_and_worker_image(stage);
    let mut spec = stage.specs[2].clone();
    (spec.initial_cluster, spec.join_etcd) = (None, true);
    let (out, node) = std::thread::scope(|scope| {
        // Scaleway boots the new Instance: Talos reads its user data, joins etcd, and its kubelet
        // registers the Node again.
        let booted = scope.spawn(|| {
            testkit::eventually("apply to make the Instance again", || {
                made_again.exists().then_some(())
            });
            let node = ControlPlaneNode::start(&stage.programs, stage.dir.path(), &spec);
            register(stage, name);
            let pin = testkit::pin("KUBERNETES_VERSION");
            stage.plane.report_kubelet_version(name, &pin);
            stage.plane.mirror_static_pods(name, &pin);
            node
        });
        let out = stage.make(&[
            "replace-control-plane",
            &format!("NODE={name}"),
            "FAILED=yes",
            "CONFIRM=yes",
            &format!("BIN={}", bin.display()),
            &format!("TALOS_DIGESTS={}", digests.display()),
        ]);
        (out, booted.join().unwrap())
    });
    stage.nodes[2] = Some(node);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains(&format!("{name} replaced")), "{said}");
    assert!(
        said.contains("etcd runs on 127.0.10.1: the cluster is bootstrapped"),
        "{said}"
    );
    assert_eq!(snapshots(stage), before + 1);
    let calls = scaleway_and_node_tool_calls(&log);
    // The destroy planned, then carried out; then apply's node pipe, whose tools start together.
    assert_eq!(
        calls[..2],
        ["scw-infra destroy", "scw-infra destroy"],
        "{said}"
    );
    let mut pipe = calls[2..].to_vec();
    pipe.sort();
    assert_eq!(
        pipe,
        [
            "scw-infra apply",
            "scw-infra clear-user-data",
            "scw-rescue-flash --image",
            "scw-rescue-flash --tag-proven",
            "talos-apply-insecure --config-dir"
        ],
        "{said}"
    );
    // Its old member gone, a new one of its name voting; the Node back and Ready; nothing
    // bootstrapped; the objects still read.
    let new_member = member_of(stage, name);
    assert_ne!(new_member, old_member);
    assert!(
        stage
            .nodes
            .iter()
            .flatten()
            .all(|n| n.calls("Bootstrap").is_empty())
    );
    let joined = stage.node(2).calls("");
    assert!(
        joined.iter().any(|c| c["etcd"] == "added as a learner"),
        "{joined:?}"
    );
    assert_eq!(stage.config_maps(), ["made-after", "made-before"]);
}

/// The calls to Scaleway and the node tools the replacement's tools logged, in order, each as
/// the tool and its first argument (scw-infra's local reads left out).
fn scaleway_and_node_tool_calls(log: &std::path::Path) -> Vec<String> {
    fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            let first = fields[2].split(' ').next().unwrap_or_default();
            let to_scaleway = ["destroy", "apply", "clear-user-data"].contains(&first);
            (fields[0] != "scw-infra" || to_scaleway).then(|| format!("{} {first}", fields[0]))
        })
        .collect()
}

/// The id of `name`'s etcd member, read by etcdctl from cp-1's member, which must list it as a
/// voter.
fn member_of(stage: &Stage, name: &str) -> String {
    let members = testkit::talos_node::members(&stage.programs.etcdctl, &stage.clients[0]);
    let member = members
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no member {name} in {members:?}"));
    assert!(member["isLearner"] != true, "{member}");
    member["ID"].to_string()
}

/// The replacement's tools: the real talos-lifecycle; scw-infra recording its calls to Scaleway
/// (`destroy --plan-out FILE` writes FILE; `apply` hands on the inventory with cp-3's new
/// Instance id, and marks the Instance made; the commands reading local files only are the
/// real scw-infra's); the worker's node tools recording and handing their input on. The
/// folder, the log, the mark.
fn replace_tools(stage: &Stage) -> (PathBuf, PathBuf, PathBuf) {
    let dir = stage.dir.path();
    let (bin, log, made_again) = (
        dir.join("replace-bin"),
        dir.join("replace-tools.log"),
        dir.join("made-again"),
    );
    fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(
        testkit::workspace::bin("talos-lifecycle"),
        bin.join("talos-lifecycle"),
    )
    .unwrap();
    let mut inventory: Value =
        serde_json::from_str(&fs::read_to_string(stage.out("inventory.json")).unwrap()).unwrap();
    inventory["nodes"][2]["id"] = "11111111-1111-4111-8111-111111111199".into();
    let applied = dir.join("applied-inventory.json");
    fs::write(&applied, inventory.to_string()).unwrap();
    let scw_infra = format!(
        "case $1 in\n  apply) cat {applied}; : > {made_again} ;;\n  clear-user-data) cat ;;\n  \
         destroy)\n    prev=; for a; do [[ $prev == --plan-out ]] && : > \"$a\"; prev=$a; done ;;\n  \
         *) exec {real} \"$@\" ;;\nesac",
        applied = applied.display(),
        made_again = made_again.display(),
        real = testkit::workspace::bin("scw-infra").display()
    );
    crate::infra_pipeline::record_tool(&bin, "scw-infra", &log, &scw_infra);
    for tool in ["scw-rescue-flash", "talos-apply-insecure"] {
        crate::infra_pipeline::record_tool(&bin, tool, &log, "cat");
    }
    (bin, log, made_again)
}

/// The Talos images' digests as `make talos-image-digests` records them, and the worker's image
/// where apply keeps it once downloaded (its sha256 the recorded one: nothing is downloaded).
fn digests_and_worker_image(stage: &Stage) -> PathBuf {
    use sha2::{Digest as _, Sha256};
    let version = testkit::pin("TALOS_VERSION");
    let worker = crate::rehearsal::WORKER_SCHEMATIC;
    let image = b"the worker's image".to_vec();
    fs::write(
        stage.out(&format!(
            "talos-{version}-{}-metal-amd64.raw.zst",
            &worker[..12]
        )),
        &image,
    )
    .unwrap();
    let digests = stage.dir.path().join("talos-image-digests.env");
    let text = format!(
        "{version}/{}/scaleway-amd64.raw.zst={}\n{version}/{worker}/metal-amd64.raw.zst={:x}\n",
        testkit::pin("TALOS_CONTROL_PLANE_SCHEMATIC"),
        "c".repeat(64),
        Sha256::digest(&image)
    );
    fs::write(&digests, text).unwrap();
    digests
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

/// The operator's Scaleway profile (`$HOME/.config/scw/config.yaml`, HOME the test's folder),
/// which `make upgrade-talos` needs to record the worker's upgrade on its server: this
/// inventory has no worker, so nothing is asked of the API (its URL a loopback port where
/// nothing answers, the keys made up).
/// The operator's talosctl: the real one, but for `upgrade-k8s`, which testkit's stand-in
/// plays against the API server (`talosctl_upgrade_k8s.py`: talosctl's upgrade patches the
/// nodes' configs through COSI, which the node stand-ins do not serve).
fn talosctl_with_upgrade_k8s(dir: &std::path::Path, real: &std::path::Path) {
    let path = dir.join("bin/talosctl");
    fs::remove_file(&path).unwrap();
    let script = format!(
        "#!/bin/sh\nTALOSCTL_REAL='{}' exec python3 '{}' \"$@\"\n",
        real.display(),
        testkit::standin::path("talosctl_upgrade_k8s.py").display()
    );
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

fn scaleway_profile(home: &std::path::Path, api_url: &str) {
    let folder = home.join(".config/scw");
    fs::create_dir_all(&folder).unwrap();
    let profile = format!(
        "access_key: SCWXXXXXXXXXXXXXXXXX\nsecret_key: {SECRET}\n\
         default_project_id: {PROJECT}\napi_url: {api_url}\n"
    );
    fs::write(folder.join("config.yaml"), profile).unwrap();
    fs::set_permissions(
        folder.join("config.yaml"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
}

/// The worker's Elastic Metal server as apply leaves it: this cluster's tags, its image's
/// flashed tag; its id.
fn seed_worker(api_url: &str) -> String {
    let body = serde_json::json!({
        "kind": "baremetal_server", "name": WORKER, "address": WORKER_ADDRESS,
        "tags": ["edgepop-cluster=edge-par", "edgepop-role=worker",
                 format!("edgepop-node={WORKER}"),
                 format!("edgepop-image-flashed=sha256:{}", "ab".repeat(32))]});
    let seeded = testkit::scaleway::control(api_url, "seed", Some(&body));
    seeded["id"].as_str().unwrap().to_owned()
}

impl Stage {
    /// etcdctl against the last control plane's member: its stdout, the call having succeeded.
    fn etcdctl_at_last(&self, args: &[&str]) -> String {
        testkit::talos_node::etcdctl_ok(&self.programs.etcdctl, &self.clients[2], args)
    }
}
