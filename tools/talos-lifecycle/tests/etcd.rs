//! talos-lifecycle with the real talosctl, against Talos control planes played by testkit's node
//! stand-in (`talos_maintenance.py` with `talos_etcd.py`: Talos's own messages, mutual TLS with
//! the cluster's talosconfig, each on an address of its own in 127.0.0.0/8) over real etcd
//! members, etcdctl and etcdutl at their pins:
//!
//! - the round trip: a real control plane's objects, a snapshot streamed from its etcd through
//!   `talosctl etcd snapshot`, an object created after it, the restore refused while etcd holds
//!   its quorum, etcd lost, then recovered through `talosctl bootstrap --recover-from` (the real
//!   `etcdutl snapshot restore` with Talos's fields, a real etcd on the restored folder where the
//!   API server looks for it), the API server restarted: the objects of before are read back
//!   through it, the one of after is gone;
//! - the gate on three members: refused with one member down (two of three still hold the
//!   quorum), let through with two down, where the last member's node refuses a recovery over
//!   its data with Talos's own error;
//! - the upgrade's gate on three members: every node's version read through the real talosctl,
//!   the plan; then one member stopped while its node's Talos API answers: the snapshot is taken
//!   (two of three hold the quorum), and no control plane's upgrade starts;
//! - the real talosctl's upgrade with its drain and `--wait`, as the tool runs it, against the node
//!   stand-in's upgrade API (`talos_upgrade.py`, `talos_drain.py`) and a real API server with
//!   kwok's nodes: the installer pulled, the upgrade run from it, the kubeconfig fetched and the
//!   node's name read through COSI, the node cordoned and its Pod evicted through the API server,
//!   the reboot followed through Talos's events until the boot id changed, the node uncordoned;
//!   its etcd member is back among the three, the node answers with the installer's version, and
//!   the tool, reading every version through talosctl, skips it and resumes at the next node;
//! - a worker (the node stand-in as a worker: no etcd, no kubeconfig) upgraded by the tool after
//!   the three control planes, through the first control plane's apid, which forwards the calls
//!   naming the worker and serves the kubeconfig talosctl's drain fetches from its endpoint: the
//!   metal installer run there, the worker drained and uncordoned last, a rerun skipping all four;
//! - a Kubernetes upgrade's plan from the kubelets a real API server reports (kwok's nodes, one
//!   kubelet behind), and a target the nodes' Talos does not run refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use testkit::control_plane::ControlPlane;
use testkit::talos_node::{
    ControlPlaneNode, ControlPlaneSpec, Programs, has_leader, member_and_leader,
};

const CLUSTER: &str = "edge-par";
const CONTROL_PLANES: [&str; 3] = ["edge-par-cp-1", "edge-par-cp-2", "edge-par-cp-3"];

/// The tool at `talos_port`, with the programs and talosconfig of `dir`, the inventory on stdin.
fn tool(dir: &Path, programs: &Programs, port: u16, inventory: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_talos-lifecycle"));
    command
        .env_clear()
        // kubectl keeps its discovery cache under $HOME/.kube: the test's folder, not this one.
        .env("HOME", dir)
        .args(args)
        .arg("--talosconfig")
        .arg(dir.join("talosconfig"))
        .arg("--talosctl")
        .arg(&programs.talosctl)
        .arg("--etcdutl")
        .arg(&programs.etcdutl)
        .args(["--talos-port", &port.to_string()]);
    testkit::process::run_with_stdin(&mut command, inventory.as_bytes())
}

/// The tool's inputs: the programs, the folder of the cluster's talosconfig, the Talos API's
/// port on every node, the inventory.
struct Tool {
    programs: Programs,
    dir: tempfile::TempDir,
    port: u16,
    inventory: String,
}

impl Tool {
    /// The tool with these inputs, the inventory on stdin.
    fn run(&self, args: &[&str]) -> Output {
        tool(
            self.dir.path(),
            &self.programs,
            self.port,
            &self.inventory,
            args,
        )
    }
}

/// An inventory of `control_planes` (name, address) and a worker.
fn inventory(control_planes: &[(&str, &str)]) -> String {
    let mut nodes = vec![serde_json::json!({
        "name": "edge-par-worker-1", "role": "worker", "kind": "elastic-metal", "zone": "fr-par-1",
        "id": "22222222-2222-4222-8222-222222222222", "public_ipv4": "127.0.0.9",
        "public_ipv6": null, "private_ipv4": null, "steps": {}
    })];
    for (i, (name, address)) in control_planes.iter().enumerate() {
        nodes.push(serde_json::json!({
            "name": name, "role": "controlplane", "kind": "instance", "zone": "fr-par-1",
            "id": format!("11111111-1111-4111-8111-11111111111{i}"), "public_ipv4": address,
            "public_ipv6": null, "private_ipv4": null, "steps": {}
        }));
    }
    serde_json::json!({
        "kind": "NodeInventory", "version": 2, "cluster_name": CLUSTER,
        "cluster_endpoint": "https://api.example.com:6443", "ssh_key_ids": [], "nodes": nodes
    })
    .to_string()
}

fn setup(test: &str, addresses: &[&str]) -> Option<(Programs, tempfile::TempDir)> {
    let programs = Programs::find(test)?;
    let dir = tempfile::tempdir().unwrap();
    testkit::talos_node::cluster_trust(dir.path(), &programs.talosctl, CLUSTER, addresses);
    Some((programs, dir))
}

fn url_at(address: &str) -> String {
    format!("http://{address}:{}", testkit::free_port())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A ConfigMap in the test's namespace, through the API server.
fn create_config_map(plane: &ControlPlane, name: &str) {
    plane.kubectl_ok(
        &[
            "create",
            "configmap",
            name,
            "--namespace=round-trip",
            "--from-literal=made=yes",
        ],
        "",
    );
}

fn config_maps(plane: &ControlPlane) -> Vec<String> {
    let names = plane.kubectl_ok(
        &["get", "configmaps", "--namespace=round-trip", "-o", "name"],
        "",
    );
    let mut names: Vec<String> = names
        .lines()
        .map(|l| l.trim_start_matches("configmap/").to_owned())
        .filter(|n| n.starts_with("made-"))
        .collect();
    names.sort();
    names
}

/// The round trip's world: the control plane, its node, the tool's inputs.
struct RoundTrip {
    tool: Tool,
    plane: ControlPlane,
    node: ControlPlaneNode,
}

impl RoundTrip {
    fn start(test: &str) -> Option<RoundTrip> {
        // An address no other test of this binary uses: the node's etcd listens on its peer
        // port only once recovered, a minute after the port was picked, and another test's
        // member on the same address could take that port meanwhile.
        let address = "127.0.0.31";
        let (programs, dir) = setup(test, &[address])?;
        let plane = ControlPlane::start(test)?;
        // The control plane's node: its etcd is the one the API server uses, and the API server
        // is its static pod's (what `talosctl restart -k` stops there).
        let pid_file = dir.path().join("kube-apiserver.pid");
        plane.write_apiserver_pid(&pid_file);
        let port = testkit::free_port();
        let node = ControlPlaneNode::start(
            &programs,
            dir.path(),
            &ControlPlaneSpec {
                kube_apiserver_pid_file: Some(pid_file),
                ..ControlPlaneSpec::new(
                    "edge-par-cp-1",
                    address,
                    port,
                    plane.etcd_url().to_owned(),
                    url_at(address),
                )
            },
        );
        let inventory = inventory(&[("edge-par-cp-1", address)]);
        Some(RoundTrip {
            tool: Tool {
                programs,
                dir,
                port,
                inventory,
            },
            plane,
            node,
        })
    }

    /// A snapshot taken by the tool: its record, checked against the file.
    fn snapshot(&self) -> Value {
        let out_dir = self.tool.dir.path().join("out/etcd");
        let out = self
            .tool
            .run(&["snapshot", "--out-dir", out_dir.to_str().unwrap()]);
        let taken: Value = serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap();
        let path = PathBuf::from(taken["path"].as_str().unwrap());
        assert_eq!(taken["kind"], "EtcdSnapshot");
        assert_eq!(taken["node"], "edge-par-cp-1");
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(
            path.starts_with(&out_dir) && name.starts_with("edge-par-"),
            "{name}"
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&out_dir), 0o700);
        // A whole etcd snapshot (its sha256 trailer: size % 512 == 32), as etcdutl reads it on
        // its own; talosctl's words went to the log, never to the output.
        assert_eq!(taken["bytes"].as_u64().unwrap() % 512, 32);
        assert!(
            taken["status"]["total_keys"].as_u64().unwrap() > 100,
            "{taken}"
        );
        let said = stderr(&out);
        assert!(said.contains("talosctl: etcd snapshot saved to"), "{said}");
        assert_eq!(self.node.calls("EtcdSnapshot").len(), 1);
        taken
    }

    /// etcd lost, its node still up: the plan, then the recovery; the record.
    fn recover(&mut self, snapshot: &str) -> Value {
        self.plane.lose_etcd();
        let plan = self
            .tool
            .run(&["restore", "--snapshot", snapshot, "--dry-run"]);
        let steps: Vec<Value> =
            testkit::process::json_lines(&testkit::process::success_stdout(&plan));
        let kinds: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "check-snapshot",
                "recover",
                "wait-healthy",
                "restart-apiserver"
            ]
        );
        assert!(
            stderr(&plan).contains("context deadline exceeded"),
            "{}",
            stderr(&plan)
        );
        assert!(
            self.node.calls("Bootstrap").is_empty(),
            "the dry run recovered"
        );

        let args = [
            "restore",
            "--snapshot",
            snapshot,
            "--wait-interval-seconds",
            "1",
        ];
        let out = self.tool.run(&args);
        let recovered: Value =
            serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap();
        assert_eq!(recovered["kind"], "EtcdRecovery");
        assert_eq!(recovered["node"], "edge-par-cp-1");
        let bootstrap = self.node.calls("Bootstrap");
        assert_eq!(bootstrap.len(), 1);
        assert_eq!(bootstrap[0]["recover_etcd"], true);
        // Talos deletes the uploaded snapshot once restored.
        assert!(!self.node.var_lib.join("etcd.snapshot").exists());
        // Its API server stopped through Talos, for kubelet to start again.
        let restart = self.node.calls("Restart");
        assert_eq!(restart.len(), 1, "{restart:?}");
        assert_eq!(
            restart[0]["id"],
            "kube-system/kube-apiserver-edge-par-cp-1:kube-apiserver"
        );
        let said = stderr(&out);
        assert!(
            said.contains("edge-par-cp-1: kube-apiserver stopped; its kubelet starts it again"),
            "{said}"
        );
        recovered
    }
}

#[test]
fn a_snapshot_of_the_control_planes_objects_is_restored_and_read_back_through_the_api_server() {
    let Some(mut trip) = RoundTrip::start("a_snapshot_is_restored_and_read_back") else {
        return;
    };
    trip.plane
        .kubectl_ok(&["create", "namespace", "round-trip"], "");
    for name in ["made-before-1", "made-before-2"] {
        create_config_map(&trip.plane, name);
    }
    let taken = trip.snapshot();
    create_config_map(&trip.plane, "made-after");
    let before = config_maps(&trip.plane);
    assert_eq!(before, ["made-after", "made-before-1", "made-before-2"]);

    // While etcd answers with a leader, a restore is refused, naming the member, nothing done.
    let snapshot = taken["path"].as_str().unwrap();
    let refused = trip.tool.run(&["restore", "--snapshot", snapshot]);
    let why = [
        "holds its quorum",
        "1 of 1 members",
        "(edge-par-cp-1)",
        "refusing",
    ];
    testkit::process::assert_refused(&refused, 1, &why);
    assert!(trip.node.calls("EtcdRecover").is_empty() && trip.node.calls("Bootstrap").is_empty());

    let recovered = trip.recover(snapshot);
    assert_eq!(recovered["status"], taken["status"]);

    // The API server, stopped by the tool through Talos and started again as kubelet does (a
    // running one keeps serving its watch cache: without the restart, this one still listed
    // `made-after` two minutes later), reads the restored etcd: the objects made before the
    // snapshot are back, the one made after it is gone.
    trip.plane.start_apiserver_again_once_stopped();
    let after = testkit::eventually("the API server to serve the restored etcd", || {
        let names = config_maps(&trip.plane);
        (!names.contains(&"made-after".to_owned())).then_some(names)
    });
    assert_eq!(after, ["made-before-1", "made-before-2"]);
    eprintln!(
        "round trip: {} keys in the snapshot (revision {}); config maps before the restore: {}, \
         after: {}",
        taken["status"]["total_keys"],
        taken["status"]["revision"],
        before.len(),
        after.len()
    );
}

/// Three control planes whose etcd members elected a leader, with the tool's inventory of them.
struct Three {
    tool: Tool,
    nodes: Vec<Option<ControlPlaneNode>>,
    clients: Vec<String>,
}

impl Three {
    fn start(test: &str, addresses: [&str; 3]) -> Option<Three> {
        let (programs, dir) = setup(test, &addresses)?;
        let names = CONTROL_PLANES;
        let port = testkit::free_port();
        let (nodes, _, clients) =
            cluster_of_three(&programs, dir.path(), &names, &addresses, port, false);
        let nodes = nodes.into_iter().map(Some).collect();
        let inventory = inventory(&names.iter().copied().zip(addresses).collect::<Vec<_>>());
        let three = Three {
            tool: Tool {
                programs,
                dir,
                port,
                inventory,
            },
            nodes,
            clients,
        };
        testkit::eventually("the three members to elect a leader", || {
            three.settled(&[0, 1, 2]).then_some(())
        });
        Some(three)
    }

    /// Whether each of these members follows a leader.
    fn leaders(&self, members: &[usize]) -> bool {
        members
            .iter()
            .all(|&i| has_leader(&self.tool.programs.etcdctl, &self.clients[i]))
    }

    /// Whether these members all follow one leader that is one of them.
    fn settled(&self, members: &[usize]) -> bool {
        let urls: Vec<&str> = members.iter().map(|&i| self.clients[i].as_str()).collect();
        testkit::talos_node::settled(&self.tool.programs.etcdctl, &urls)
    }
}

#[test]
fn the_gate_holds_while_two_of_three_members_follow_a_leader_and_a_node_with_data_is_reset_only_when_asked()
 {
    let test = "the_gate_holds_while_two_of_three_members_follow_a_leader";
    let Some(mut three) = Three::start(test, ["127.0.0.2", "127.0.0.3", "127.0.0.4"]) else {
        return;
    };

    let out_dir = three.tool.dir.path().join("etcd");
    testkit::talos_node::etcdctl_ok(
        &three.tool.programs.etcdctl,
        &three.clients[0],
        &["put", "/edgepop/before", "1"],
    );
    let taken = three
        .tool
        .run(&["snapshot", "--out-dir", out_dir.to_str().unwrap()]);
    let taken: Value = serde_json::from_str(&testkit::process::success_stdout(&taken)).unwrap();
    let snapshot = taken["path"].as_str().unwrap().to_owned();
    testkit::talos_node::etcdctl_ok(
        &three.tool.programs.etcdctl,
        &three.clients[0],
        &["put", "/edgepop/after", "1"],
    );
    let restore = ["restore", "--snapshot", snapshot.as_str()];
    let out = three.tool.run(&restore);
    testkit::process::assert_refused(
        &out,
        1,
        &[
            "3 of 3 members",
            "edge-par-cp-1, edge-par-cp-2, edge-par-cp-3",
        ],
    );

    // One machine gone, its etcd with it: the other two still hold the quorum.
    three.nodes[0] = None;
    testkit::eventually("the two left to follow a leader", || {
        three.settled(&[1, 2]).then_some(())
    });
    let out = three.tool.run(&restore);
    testkit::process::assert_refused(
        &out,
        1,
        &["2 of 3 members", "(edge-par-cp-2, edge-par-cp-3)"],
    );
    assert!(
        stderr(&out).contains("edge-par-cp-1: the Talos API does not answer"),
        "{}",
        stderr(&out)
    );

    // Two gone: the last member has no leader, and its etcd folder still holds its data: Talos
    // would refuse the recovery there, so the restore stops before anything changes, and the
    // way out is said.
    three.nodes[1] = None;
    testkit::eventually("the last member to lose its leader", || {
        (!three.leaders(&[2])).then_some(())
    });
    let out = three.tool.run(&restore);
    testkit::process::assert_refused(
        &out,
        1,
        &[
            "edge-par-cp-3 (its etcd service is Running): etcd data is still there",
            "--reset-ephemeral",
        ],
    );
    let last = three.nodes[2].as_ref().unwrap();
    assert!(
        stderr(&out).contains("etcdserver: no leader"),
        "{}",
        stderr(&out)
    );
    assert!(last.calls("EtcdRecover").is_empty() && last.calls("Reset").is_empty());
    assert!(last.var_lib.join("etcd/member").is_dir());

    assert_reset_ephemeral_then_recovered(&three, &restore);
}

/// The last member of `three` (cp-3, holding data, without a leader) recovered from
/// `restore`'s snapshot with --reset-ephemeral: its EPHEMERAL partition is wiped and it reboots,
/// it is waited for until its etcd service is Preparing, then the snapshot is recovered there.
fn assert_reset_ephemeral_then_recovered(three: &Three, restore: &[&str]) {
    let last = three.nodes[2].as_ref().unwrap();
    let resetting = [
        restore,
        &["--reset-ephemeral", "--wait-interval-seconds", "1"],
    ]
    .concat();
    let out = three.tool.run(&resetting);
    let record: Value = serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap();
    assert_eq!(record["node"], "edge-par-cp-3");
    let reset = last.calls("Reset");
    assert_eq!(reset.len(), 1, "{reset:?}");
    assert_eq!(reset[0]["wipe"], serde_json::json!(["EPHEMERAL"]));
    assert_eq!(
        (reset[0]["graceful"].as_bool(), reset[0]["reboot"].as_bool()),
        (Some(false), Some(true))
    );
    let said = stderr(&out);
    assert!(
        said.contains(
            "edge-par-cp-1: its Talos API does not answer, so it is neither reset nor recovered"
        ),
        "{said}"
    );
    assert_eq!(last.calls("Bootstrap")[0]["recover_etcd"], true);
    // The member is the snapshot's: what was written before it is there, what came after is
    // gone, and it is a cluster of one under the node's name.
    let value = |key| {
        testkit::talos_node::etcdctl_ok(
            &three.tool.programs.etcdctl,
            &three.clients[2],
            &["get", key, "--print-value-only"],
        )
    };
    assert_eq!(value("/edgepop/before").trim(), "1");
    assert_eq!(value("/edgepop/after").trim(), "");
    assert_eq!(
        member_names(&three.tool.programs, &three.clients[2]),
        ["edge-par-cp-3"]
    );
    let service = talosctl(
        &three.tool.programs,
        three.tool.dir.path(),
        "127.0.0.4",
        three.tool.port,
        &["service", "etcd"],
    );
    // The real talosctl reads the stand-in's service list: etcd runs again.
    let service = testkit::process::success_stdout(&service);
    assert!(
        service
            .lines()
            .any(|l| l.split_whitespace().eq(["STATE", "Running"])),
        "{service}"
    );
}

/// The names etcd lists, asked of the member at `url`.
fn member_names(programs: &Programs, url: &str) -> Vec<String> {
    let mut names: Vec<String> = testkit::talos_node::members(&programs.etcdctl, url)
        .iter()
        .map(|m| m["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    names
}

/// `remove-member` with the snapshot folder of `three`'s test.
fn remove(three: &Three, args: &[&str]) -> Output {
    let out_dir = three.tool.dir.path().join("etcd");
    let mut all = vec!["remove-member", "--out-dir", out_dir.to_str().unwrap()];
    all.extend_from_slice(args);
    three.tool.run(&all)
}

#[test]
fn a_gone_member_is_removed_through_another_only_after_the_gate_and_when_asked() {
    let test = "a_gone_member_is_removed_through_another";
    let Some(mut three) = Three::start(test, ["127.0.0.5", "127.0.0.6", "127.0.0.7"]) else {
        return;
    };
    // cp-1's machine is gone, its etcd with it.
    three.nodes[0] = None;
    testkit::eventually("the two left to follow a leader", || {
        three.settled(&[1, 2]).then_some(())
    });
    // Another member cannot go while cp-1 is down: two would leave one.
    let out = remove(&three, &["--node", "edge-par-cp-2"]);
    testkit::process::assert_refused(
        &out,
        1,
        &[
            "edge-par-cp-2's etcd member stays",
            "edge-par-cp-1: the Talos API does not answer",
        ],
    );
    // cp-1 cannot leave on its own: its node is gone, and the way out is said.
    let out = remove(&three, &["--node", "edge-par-cp-1"]);
    testkit::process::assert_refused(&out, 1, &["FAILED=yes"]);
    assert!(
        !three.tool.dir.path().join("etcd").exists(),
        "no snapshot before a refusal"
    );

    // Removed through cp-2, after a snapshot.
    let out = remove(&three, &["--node", "edge-par-cp-1", "--failed"]);
    let stdout = testkit::process::success_stdout(&out);
    let records: Vec<Value> = testkit::process::json_lines(&stdout);
    assert_eq!(records[0]["kind"], "EtcdSnapshot", "{stdout}");
    assert_eq!(records[1]["kind"], "EtcdMemberRemoval", "{stdout}");
    assert_eq!(records[1]["how"], "remove-member");
    assert_eq!(
        records[1]["members"],
        serde_json::json!(["edge-par-cp-2", "edge-par-cp-3"])
    );
    let snapshot = records[0]["path"].as_str().unwrap();
    let mode = std::fs::metadata(snapshot).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(
        member_names(&three.tool.programs, &three.clients[1]),
        ["edge-par-cp-2", "edge-par-cp-3"]
    );
    let through = three.nodes[1].as_ref().unwrap();
    assert_eq!(through.calls("EtcdRemoveMemberByID").len(), 1);
    // Asked again, nothing is left to remove.
    std::thread::sleep(std::time::Duration::from_secs(1)); // another snapshot name
    let out = remove(&three, &["--node", "edge-par-cp-1", "--failed"]);
    let stdout = testkit::process::success_stdout(&out);
    assert!(stdout.contains("\"how\":\"already-gone\""), "{stdout}");
}

#[test]
fn a_live_member_leaves_on_its_own_and_talos_empties_its_etcd_folder() {
    let test = "a_live_member_leaves_on_its_own";
    let Some(three) = Three::start(test, ["127.0.0.21", "127.0.0.22", "127.0.0.23"]) else {
        return;
    };
    let out = remove(&three, &["--node", "edge-par-cp-3"]);
    let stdout = testkit::process::success_stdout(&out);
    let removal: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(removal["how"], "leave", "{stdout}");
    assert_eq!(
        removal["members"],
        serde_json::json!(["edge-par-cp-1", "edge-par-cp-2"])
    );
    let left = three.nodes[2].as_ref().unwrap();
    assert_eq!(left.calls("EtcdLeaveCluster").len(), 1);
    assert!(!left.var_lib.join("etcd").exists());
    testkit::eventually("the two left to follow a leader", || {
        three.settled(&[0, 1]).then_some(())
    });
    assert_eq!(
        member_names(&three.tool.programs, &three.clients[0]),
        ["edge-par-cp-1", "edge-par-cp-2"]
    );
}

/// An etcd member the test runs itself (not a node stand-in's), so that it can be stopped while
/// its node's Talos API goes on answering: killed when dropped.
struct Member(std::process::Child);

impl Member {
    fn start(
        programs: &Programs,
        dir: &Path,
        name: &str,
        client: &str,
        peer: &str,
        initial: &str,
    ) -> Member {
        let data = dir.join(format!("{name}.etcd"));
        let log = std::fs::File::create(dir.join(format!("{name}.etcd.log"))).unwrap();
        let child = Command::new(&programs.etcd)
            .arg(format!("--name={name}"))
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={initial}"))
            .arg("--initial-cluster-state=new")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Member(child)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Three control planes at `addresses`, one etcd cluster. Each node runs its member itself,
/// or, with `third_apart`, cp-3's node answers over a member the test runs (to stop it while
/// the node goes on answering). The nodes, that member, each member's client URL.
fn cluster_of_three(
    programs: &Programs,
    dir: &Path,
    names: &[&str; 3],
    addresses: &[&str; 3],
    port: u16,
    third_apart: bool,
) -> (Vec<ControlPlaneNode>, Option<Member>, Vec<String>) {
    let mut specs = testkit::talos_node::etcd_cluster(names, addresses, port);
    if third_apart {
        specs[2].initial_cluster = None;
    }
    let nodes: Vec<ControlPlaneNode> = specs
        .iter()
        .map(|spec| ControlPlaneNode::start(programs, dir, spec))
        .collect();
    let clients: Vec<String> = specs.iter().map(|s| s.etcd_client_url.clone()).collect();
    let peers: Vec<&str> = specs.iter().map(|s| s.etcd_peer_url.as_str()).collect();
    let initial = specs[0].initial_cluster.clone().unwrap_or_default();
    let third = third_apart
        .then(|| Member::start(programs, dir, names[2], &clients[2], peers[2], &initial));
    (nodes, third, clients)
}

/// `talos-lifecycle upgrade` to v1.13.10 (the node stand-ins run v1.13.9), with that patch's
/// installers, over the control planes at `addresses` and the worker at `worker` (`None`: left
/// out of the inventory, no node stand-in playing it); Kubernetes is `plane`'s, or none (kubectl
/// would fail).
fn upgrade_to_next_patch(
    dir: &Path,
    programs: &Programs,
    port: u16,
    (addresses, worker): (&[&str; 3], Option<&str>),
    dry_run: bool,
    plane: Option<&ControlPlane>,
) -> Output {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, "apiVersion: v1\nkind: Config\n").unwrap();
    let (kubeconfig, kubectl) = match plane {
        Some(plane) => (
            plane.kubeconfig().to_owned(),
            plane.kubectl().get_program().to_owned(),
        ),
        None => (kubeconfig, "false".into()),
    };
    let out_dir = dir.join("etcd");
    let mut args = vec![
        "upgrade",
        "--to",
        "v1.13.10",
        "--control-plane-installer",
        "factory.talos.dev/scaleway-installer/3765:v1.13.10",
        "--worker-installer",
        "factory.talos.dev/metal-installer/b4f8:v1.13.10",
        "--out-dir",
        out_dir.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--kubectl",
        kubectl.to_str().unwrap(),
    ];
    if dry_run {
        args.push("--dry-run");
    }
    let nodes: Vec<(&str, &str)> = CONTROL_PLANES.iter().copied().zip(*addresses).collect();
    let mut inventory: Value = serde_json::from_str(&inventory(&nodes)).unwrap();
    match worker {
        Some(address) => inventory["nodes"][0]["public_ipv4"] = address.into(),
        None => drop(inventory["nodes"].as_array_mut().unwrap().remove(0)),
    }
    tool(dir, programs, port, &inventory.to_string(), &args)
}

#[test]
fn no_control_plane_upgrade_starts_while_another_member_is_unhealthy() {
    let test = "no_control_plane_upgrade_starts_while_another_member_is_unhealthy";
    let addresses = ["127.0.0.12", "127.0.0.13", "127.0.0.14"];
    let Some((programs, dir)) = setup(test, &addresses) else {
        return;
    };
    let names = CONTROL_PLANES;
    let port = testkit::free_port();
    let (nodes, third, clients) =
        cluster_of_three(&programs, dir.path(), &names, &addresses, port, true);
    let leaders = |members: &[usize]| {
        members
            .iter()
            .all(|&i| has_leader(&programs.etcdctl, &clients[i]))
    };
    testkit::eventually("the three members to elect a leader", || {
        leaders(&[0, 1, 2]).then_some(())
    });
    let upgrade = |dry_run: bool| {
        upgrade_to_next_patch(
            dir.path(),
            &programs,
            port,
            (&addresses, None),
            dry_run,
            None,
        )
    };

    // Healthy: every version read through the real talosctl, the plan snapshots first and then
    // gates each control plane.
    let out = upgrade(true);
    let stdout = testkit::process::success_stdout(&out);
    let steps: Vec<Value> = testkit::process::json_lines(&stdout);
    let kinds: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[..4],
        ["preflight", "take-snapshot", "check-snapshot", "gate"]
    );
    assert_eq!(steps[3]["node"], "edge-par-cp-1");
    assert!(
        steps[0]["says"]
            .as_str()
            .unwrap()
            .contains("edge-par-cp-3 v1.13.9")
    );
    for node in &nodes {
        assert_eq!(node.calls("Version").len(), 1);
    }

    // cp-3's member stopped, its node still answering: the quorum holds (the snapshot is
    // taken), but no upgrade starts.
    let (third_id, _) = member_and_leader(&programs.etcdctl, &clients[2]).unwrap();
    drop(third);
    testkit::eventually("the two left to follow a leader", || {
        (leaders(&[0, 1]) && !has_leader(&programs.etcdctl, &clients[2])).then_some(())
    });
    let out = upgrade(false);
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    testkit::process::assert_says_all(
        &said,
        &[
            "before upgrading edge-par-cp-1, the cluster is not healthy: nothing was started on edge-par-cp-1",
            "edge-par-cp-3: Talos answered Unknown: failed to create etcd client",
        ],
    );
    assert!(!said.contains("talosctl upgrade --image"), "{said}");
    let taken: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(taken["kind"], "EtcdSnapshot");
    assert!(Path::new(taken["path"].as_str().unwrap()).is_file());

    // Its stale member is removed through cp-3's own node, whose etcd is down: Talos reaches
    // the other control planes' etcd for a removal, not its own.
    let out = talosctl(
        &programs,
        dir.path(),
        addresses[2],
        port,
        &["etcd", "remove-member", &format!("{third_id:x}")],
    );
    assert!(out.status.success(), "{}", testkit::process::text(&out));
    assert_eq!(nodes[2].calls("EtcdRemoveMemberByID").len(), 1);
    assert_eq!(
        member_names(&programs, &clients[0]),
        ["edge-par-cp-1", "edge-par-cp-2"]
    );
}

/// The real talosctl's upgrade as the tool runs it (the drain on by default, which forces the
/// wait; the wait bounded) against a node stand-in that answers Talos v1.13's upgrade API
/// (`talos_upgrade.py`) and what the drain asks of the node (`talos_drain.py`).
fn talosctl_upgrade(
    programs: &Programs,
    dir: &Path,
    address: &str,
    port: u16,
    image: &str,
) -> Output {
    let upgrade = ["upgrade", "--image", image, "--wait", "--timeout=3m"];
    talosctl(
        programs,
        dir,
        address,
        port,
        &[&upgrade[..], &["--progress", "plain"]].concat(),
    )
}

/// The real talosctl, with the test's talosconfig, against the node stand-in at `address`.
fn talosctl(programs: &Programs, dir: &Path, address: &str, port: u16, args: &[&str]) -> Output {
    Command::new(&programs.talosctl)
        .env_clear()
        .arg("--talosconfig")
        .arg(dir.join("talosconfig"))
        .args([
            "--endpoints",
            &format!("{address}:{port}"),
            "--nodes",
            address,
        ])
        .args(args)
        .output()
        .unwrap()
}

/// A Pod bound to `node` as the scheduler binds one (kwok runs it), for the drain to evict.
fn pod_on(plane: &ControlPlane, namespace: &str, name: &str, node: &str) {
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "example.com/app:1"}]},
    });
    plane.kubectl_ok(&["create", "-f", "-"], &pod.to_string());
}

#[test]
fn a_node_upgraded_through_the_real_talosctl_is_drained_rebooted_uncordoned_and_skipped() {
    let test = "a_node_upgraded_through_the_real_talosctl";
    let addresses = ["127.0.0.15", "127.0.0.16", "127.0.0.17"];
    let Some((programs, dir)) = setup(test, &addresses) else {
        return;
    };
    let Some(plane) = ControlPlane::start(test) else {
        return;
    };
    let port = testkit::free_port();
    let mut specs = testkit::talos_node::etcd_cluster(&CONTROL_PLANES, &addresses, port);
    // cp-1 serves the admin kubeconfig of the test's API server, as Talos serves the cluster's.
    specs[0].admin_kubeconfig = Some(plane.kubeconfig().to_owned());
    let nodes: Vec<ControlPlaneNode> = specs
        .iter()
        .map(|spec| ControlPlaneNode::start(&programs, dir.path(), spec))
        .collect();
    let clients: Vec<String> = specs.iter().map(|s| s.etcd_client_url.clone()).collect();
    for name in CONTROL_PLANES {
        plane.add_node(name, &[]);
    }
    plane.kubectl_ok(&["create", "namespace", "drained"], "");
    pod_on(&plane, "drained", "on-cp-1", CONTROL_PLANES[0]);
    let watch = plane.watch_nodes(CONTROL_PLANES.len(), dir.path());
    let installer = "factory.talos.dev/scaleway-installer/3765:v1.13.10";

    let out = talosctl_upgrade(&programs, dir.path(), addresses[0], port, installer);
    let said = testkit::process::text(&out);
    assert!(out.status.success(), "{said}");
    assert_upgraded_drained_and_rebooted(&nodes[0], installer, &said);
    assert!(nodes[1].calls("LifecycleService.Upgrade").is_empty());
    // Cordoned through the API server for the reboot, schedulable again after; its Pod evicted.
    let cordons = testkit::control_plane::cordons(&watch.changes());
    assert_eq!(cordons.len(), 1, "{cordons:?}");
    assert_eq!(cordons[0].name, CONTROL_PLANES[0]);
    assert!(cordons[0].until.is_some(), "{cordons:?}");
    let pods = plane.kubectl_ok(&["get", "pods", "-n", "drained", "-o", "name"], "");
    assert_eq!(pods.trim(), "", "{said}");

    // Its member kept through the reboot: the three follow one leader again. The tool reads
    // every version through the real talosctl: the upgraded node is skipped, a run resumes at
    // the next one.
    let urls: Vec<&str> = clients.iter().map(String::as_str).collect();
    testkit::eventually("the three members to follow one leader", || {
        testkit::talos_node::settled(&programs.etcdctl, &urls).then_some(())
    });
    assert_eq!(member_names(&programs, &clients[1]), CONTROL_PLANES);
    let plan = || {
        upgrade_to_next_patch(
            dir.path(),
            &programs,
            port,
            (&addresses, None),
            true,
            Some(&plane),
        )
    };

    // Left cordoned, as a run stopped between talosctl's drain and its uncordon leaves it (the
    // uncordon waits for the node to be Ready): skipping it would leave it unschedulable.
    plane.kubectl_ok(&["cordon", CONTROL_PLANES[0]], "");
    let out = plan();
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    testkit::process::assert_says_all(
        &said,
        &[
            "edge-par-cp-1 runs v1.13.10 already, but its Kubernetes node is cordoned",
            "kubectl uncordon edge-par-cp-1",
        ],
    );
    plane.kubectl_ok(&["uncordon", CONTROL_PLANES[0]], "");
    let out = plan();
    let steps: Vec<Value> = testkit::process::json_lines(&testkit::process::success_stdout(&out));
    let shape: Vec<(&str, &str)> = steps
        .iter()
        .filter(|s| !s["node"].is_null())
        .map(|s| (s["step"].as_str().unwrap(), s["node"].as_str().unwrap()))
        .take(2)
        .collect();
    assert_eq!(
        shape,
        [("skip", "edge-par-cp-1"), ("gate", "edge-par-cp-2")]
    );
}

#[test]
fn a_worker_is_upgraded_after_the_control_planes_through_one_of_them_and_drained() {
    let test = "a_worker_is_upgraded_after_the_control_planes";
    let (addresses, worker_address) = (["127.0.0.51", "127.0.0.52", "127.0.0.53"], "127.0.0.54");
    let Some((programs, dir)) = setup(test, &[&addresses[..], &[worker_address]].concat()) else {
        return;
    };
    let Some(plane) = ControlPlane::start(test) else {
        return;
    };
    let port = testkit::free_port();
    let mut specs = testkit::talos_node::etcd_cluster(&CONTROL_PLANES, &addresses, port);
    // Every control plane serves the cluster's admin kubeconfig, as Talos's do; a worker none.
    for spec in &mut specs {
        spec.admin_kubeconfig = Some(plane.kubeconfig().to_owned());
    }
    let nodes: Vec<ControlPlaneNode> = specs
        .iter()
        .map(|spec| ControlPlaneNode::start(&programs, dir.path(), spec))
        .collect();
    let worker_name = "edge-par-worker-1";
    let worker =
        ControlPlaneNode::start_worker(&programs, dir.path(), worker_name, worker_address, port);
    for name in CONTROL_PLANES.iter().chain([&worker_name]) {
        plane.add_node(name, &[]);
    }
    plane.kubectl_ok(&["create", "namespace", "drained"], "");
    pod_on(&plane, "drained", "on-the-worker", worker_name);
    let watch = plane.watch_nodes(CONTROL_PLANES.len() + 1, dir.path());
    let clients: Vec<&str> = specs.iter().map(|s| s.etcd_client_url.as_str()).collect();
    testkit::eventually("the three members to follow one leader", || {
        testkit::talos_node::settled(&programs.etcdctl, &clients).then_some(())
    });

    let upgrade = |dry_run| {
        let nodes = (&addresses, Some(worker_address));
        upgrade_to_next_patch(dir.path(), &programs, port, nodes, dry_run, Some(&plane))
    };
    let out = upgrade(false);
    let said = stderr(&out);
    let records: Vec<Value> = testkit::process::json_lines(&testkit::process::success_stdout(&out));
    let upgraded: Vec<(&str, &str)> = records
        .iter()
        .filter(|r| r["kind"] == "TalosUpgraded")
        .map(|r| {
            (
                r["node"].as_str().unwrap(),
                r["installer"].as_str().unwrap(),
            )
        })
        .collect();
    let (scaleway, metal) = (
        "factory.talos.dev/scaleway-installer/3765:v1.13.10",
        "factory.talos.dev/metal-installer/b4f8:v1.13.10",
    );
    assert_eq!(
        upgraded,
        [
            (CONTROL_PLANES[0], scaleway),
            (CONTROL_PLANES[1], scaleway),
            (CONTROL_PLANES[2], scaleway),
            (worker_name, metal)
        ],
        "{said}"
    );
    assert_worker_upgraded_through(&worker, &nodes[0], worker_address, metal, &said);
    // Cordoned for its reboot and schedulable again after, last; its Pod evicted.
    let cordons = testkit::control_plane::cordons(&watch.changes());
    let order: Vec<&str> = cordons.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(order.last(), Some(&worker_name), "{cordons:?}");
    assert!(cordons.iter().all(|c| c.until.is_some()), "{cordons:?}");
    let pods = plane.kubectl_ok(&["get", "pods", "-n", "drained", "-o", "name"], "");
    assert_eq!(pods.trim(), "", "{said}");
    // Every node on the target: a second run has nothing to do.
    let out = upgrade(true);
    let steps: Vec<Value> = testkit::process::json_lines(&testkit::process::success_stdout(&out));
    let skipped: Vec<&str> = steps
        .iter()
        .filter(|s| s["step"] == "skip")
        .map(|s| s["node"].as_str().unwrap())
        .collect();
    assert_eq!(skipped, [&CONTROL_PLANES[..], &[worker_name]].concat());
}

/// The worker's own calls: pulled, upgraded, its name read, rebooted. The kubeconfig of the
/// drain and the uncordon came from the control plane `through` (a worker serves none), whose
/// apid forwarded the upgrade to the worker's.
fn assert_worker_upgraded_through(
    worker: &ControlPlaneNode,
    through: &ControlPlaneNode,
    worker_address: &str,
    metal: &str,
    said: &str,
) {
    let rpcs: Vec<String> = worker
        .calls("")
        .iter()
        .filter_map(|c| c["rpc"].as_str().map(str::to_owned))
        .filter(|rpc| !["Version", "Events", "Read"].contains(&rpc.as_str()))
        .collect();
    assert_eq!(
        rpcs,
        [
            "ImageService.Pull",
            "LifecycleService.Upgrade",
            "COSI.Get",
            "Reboot"
        ],
        "{said}"
    );
    assert_eq!(worker.calls("ImageService.Pull")[0]["image_ref"], metal);
    let forwarded = through
        .calls("")
        .into_iter()
        .filter(|c| c["method"] == "/machine.LifecycleService/Upgrade")
        .filter(|c| c["node"] == worker_address || c["nodes"][0] == worker_address)
        .count();
    assert_eq!(forwarded, 1, "{said}");
}

/// What the node saw of `talosctl upgrade --wait` with its drain, in Talos's order: the version
/// checked, the installer pulled into the system namespace and run, the kubeconfig fetched and
/// the node's name read through COSI (the drain), the boot id read, the reboot, the boot id read
/// again until it changed, the kubeconfig again (the uncordon); then it answers with the
/// installer's version.
fn assert_upgraded_drained_and_rebooted(node: &ControlPlaneNode, installer: &str, said: &str) {
    let calls = node.calls("");
    let rpcs: Vec<&str> = calls
        .iter()
        .filter_map(|c| c["rpc"].as_str())
        .filter(|rpc| !["Version", "Events", "Read"].contains(rpc))
        .collect();
    assert_eq!(
        rpcs,
        [
            "ImageService.Pull",
            "LifecycleService.Upgrade",
            "Kubeconfig",
            "COSI.Get",
            "Reboot",
            "Kubeconfig"
        ],
        "{said}"
    );
    let pulled = &node.calls("ImageService.Pull")[0];
    assert_eq!(pulled["image_ref"], installer);
    // common.ContainerdNamespace NS_SYSTEM (common.proto), talosctl's `--namespace system`.
    assert_eq!(pulled["namespace"], 1);
    let got = &node.calls("COSI.Get")[0];
    assert_eq!(
        (&got["namespace"], &got["type"], &got["id"]),
        (
            &Value::from("k8s"),
            &Value::from("Nodenames.kubernetes.talos.dev"),
            &Value::from("nodename")
        )
    );
    // The boot id read before the reboot and after it, until the node came back with another.
    let at = |what: &str| {
        calls
            .iter()
            .position(|c| c["rpc"] == what || c["reboot"] == what)
    };
    let reads: Vec<usize> = (0..calls.len())
        .filter(|&i| calls[i]["rpc"] == "Read")
        .collect();
    let (reboot, up) = (at("Reboot").unwrap(), at("up").unwrap());
    assert!(reads.iter().any(|&i| i < reboot), "{calls:?}");
    assert!(reads.iter().any(|&i| i > up), "{calls:?}");
    assert!(
        calls
            .iter()
            .all(|c| c["path"].is_null() || c["path"] == "/proc/sys/kernel/random/boot_id")
    );
    assert_eq!(calls[up]["version"], "v1.13.10");
    assert!(said.contains("post check passed"), "{said}");
}

#[test]
fn a_kubernetes_upgrade_is_planned_from_the_kubelets_and_static_pods_the_api_server_reports() {
    let Some(world) = RoundTrip::start("a_kubernetes_upgrade_is_planned_from_the_kubelets") else {
        return;
    };
    // Nodes as kubelets register them (kwok stands in for the kubelets): one behind.
    for (name, version) in [
        ("edge-par-cp-1", "v1.36.3"),
        ("edge-par-worker-1", "v1.35.2"),
    ] {
        world.plane.add_node(name, &[]);
        world.plane.report_kubelet_version(name, version);
    }
    // The control plane's static pods, mirrored by its kubelet, run the target.
    world.plane.mirror_static_pods("edge-par-cp-1", "v1.36.3");
    let kubectl = world.plane.kubectl();
    let kubectl = kubectl.get_program().to_str().unwrap().to_owned();
    let kubeconfig = world.plane.kubeconfig().to_str().unwrap().to_owned();
    let out_dir = world.tool.dir.path().join("etcd");
    // The inventory's worker has no node stand-in here: the control plane alone (the worker's
    // kubelet is still read, through the API server).
    let mut inventory: Value = serde_json::from_str(&world.tool.inventory).unwrap();
    inventory["nodes"].as_array_mut().unwrap().remove(0);
    let inventory = inventory.to_string();
    let plan = |to: &str| {
        let args = [
            "upgrade-k8s",
            "--dry-run",
            "--to",
            to,
            "--out-dir",
            out_dir.to_str().unwrap(),
            "--kubeconfig",
            &kubeconfig,
            "--kubectl",
            &kubectl,
        ];
        tool(
            world.tool.dir.path(),
            &world.tool.programs,
            world.tool.port,
            &inventory,
            &args,
        )
    };
    let out = plan("v1.36.3");
    let steps: Vec<Value> = testkit::process::json_lines(&testkit::process::success_stdout(&out));
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
    let preflight = steps[0]["says"].as_str().unwrap();
    assert!(preflight.contains("from v1.35.2"), "{preflight}");
    assert!(
        preflight.contains("edge-par-worker-1 v1.35.2"),
        "{preflight}"
    );
    assert!(
        preflight.contains("kube-scheduler-edge-par-cp-1 v1.36.3"),
        "{preflight}"
    );
    assert!(!out_dir.exists());

    // Every kubelet at the target, the control plane's static pods behind (its configs a patch
    // behind): still an upgrade, from them.
    world
        .plane
        .report_kubelet_version("edge-par-worker-1", "v1.36.3");
    world.plane.mirror_static_pods("edge-par-cp-1", "v1.35.9");
    let steps: Vec<Value> =
        testkit::process::json_lines(&testkit::process::success_stdout(&plan("v1.36.3")));
    let preflight = steps[0]["says"].as_str().unwrap();
    assert!(preflight.contains("from v1.35.9"), "{preflight}");
    assert_eq!(steps.last().unwrap()["step"], "wait-upgraded");

    // Two minors past the worker's kubelet: refused before anything.
    let out = plan("v1.37.0");
    testkit::process::assert_refused(&out, 2, &["Talos v1.13 runs Kubernetes 1.31 to 1.36"]);
}

/// `await-healthy` against the kubeconfig and kubectl of `plane`, looking `tries` times a second
/// apart.
fn await_healthy(three: &Three, plane: &ControlPlane, tries: &str) -> Output {
    let kubectl = plane.kubectl();
    let kubectl = kubectl.get_program().to_str().unwrap().to_owned();
    three.tool.run(&[
        "await-healthy",
        "--wait-tries",
        tries,
        "--wait-interval-seconds",
        "1",
        "--kubeconfig",
        plane.kubeconfig().to_str().unwrap(),
        "--kubectl",
        &kubectl,
    ])
}

/// The id and learner flag of the member named `name`, as the member at `url` lists it.
fn member_of(programs: &Programs, url: &str, name: &str) -> Option<(u64, bool)> {
    testkit::talos_node::members(&programs.etcdctl, url)
        .iter()
        .find(|m| m["name"] == name)
        .map(|m| (m["ID"].as_u64().unwrap(), m["isLearner"] == true))
}

/// A control plane made again: its machine gone, its member removed through another, then a
/// new machine under the same name and address, whose etcd joins as Talos's does (a learner
/// first, promoted once caught up). `await-healthy` refuses while the machine does not answer,
/// waits while its member is a learner, and passes once it votes.
#[test]
fn a_control_plane_made_again_joins_as_a_learner_and_the_cluster_is_healthy_once_it_votes() {
    let test = "a_control_plane_made_again_joins_as_a_learner";
    let addresses = ["127.0.0.41", "127.0.0.42", "127.0.0.43"];
    let Some((mut three, plane, old_id)) = three_with_cp3_lost(test, addresses) else {
        return;
    };
    let programs = three.tool.programs.clone();

    // Its member is removed through another.
    testkit::process::success_stdout(&remove(&three, &["--node", "edge-par-cp-3", "--failed"]));
    let out = await_healthy(&three, &plane, "2");
    testkit::process::assert_refused(&out, 1, &["edge-par-cp-3: the Talos API does not answer"]);

    make_cp3_again(&mut three, &addresses);
    let out = await_healthy(&three, &plane, "90");
    let said = stderr(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("is a learner"),
        "the learner was not waited for: {said}"
    );
    assert!(
        said.contains("3 etcd members, each a healthy voter"),
        "{said}"
    );

    let (new_id, learner) = member_of(&programs, &three.clients[0], CONTROL_PLANES[2]).unwrap();
    assert!(new_id != old_id && !learner, "{new_id:x} {learner}");
    assert_eq!(member_names(&programs, &three.clients[0]), CONTROL_PLANES);
    // The node's own account: added as a learner, refused a promotion before it caught up,
    // promoted after.
    assert_joined(&three, &[]);
}

/// Three control planes at `addresses` and an API server whose Nodes (theirs and the worker's)
/// are Ready; then cp-3's machine lost, the two left following a leader. With the id cp-3's
/// member had.
fn three_with_cp3_lost(test: &str, addresses: [&str; 3]) -> Option<(Three, ControlPlane, u64)> {
    let mut three = Three::start(test, addresses)?;
    let plane = ControlPlane::start(test)?;
    for name in CONTROL_PLANES.iter().chain(&["edge-par-worker-1"]) {
        plane.add_node(name, &[]);
    }
    let programs = &three.tool.programs;
    let (old_id, _) = member_of(programs, &three.clients[0], CONTROL_PLANES[2]).unwrap();
    three.nodes[2] = None;
    testkit::eventually("the two left to follow a leader", || {
        three.settled(&[0, 1]).then_some(())
    });
    Some((three, plane, old_id))
}

/// cp-3's new machine: same name and address, an empty disk; its etcd joins the cluster.
fn make_cp3_again(three: &mut Three, addresses: &[&str; 3]) {
    let spec = ControlPlaneSpec {
        join_etcd: true,
        control_plane_etcd_endpoints: three.clients.clone(),
        ..ControlPlaneSpec::new(
            CONTROL_PLANES[2],
            addresses[2],
            three.tool.port,
            three.clients[2].clone(),
            url_at(addresses[2]),
        )
    };
    three.nodes[2] = Some(ControlPlaneNode::start(
        &three.tool.programs,
        three.tool.dir.path(),
        &spec,
    ));
}

/// cp-3's etcd joined as Talos's does: `first` (what it did before adding itself), then added
/// as a learner, a promotion refused until it caught up, then promoted.
fn assert_joined(three: &Three, first: &[&str]) {
    let steps: Vec<String> = three.nodes[2]
        .as_ref()
        .unwrap()
        .calls("")
        .iter()
        .filter_map(|c| c["etcd"].as_str().map(str::to_owned))
        .collect();
    let (before, joined) = steps.split_at(first.len().min(steps.len()));
    let refused = &joined[1.min(joined.len())..joined.len().saturating_sub(1).max(1)];
    assert!(
        before == first
            && joined.len() >= 3
            && joined[0] == "added as a learner"
            && joined.last().is_some_and(|s| s == "promoted")
            && refused.iter().all(|s| s == "promotion refused"),
        "{steps:?}"
    );
}

/// A control plane made again while etcd still lists its old member (its machine lost, no
/// `make etcd-remove-member` first): Talos's join takes the member of its own name out before
/// it adds itself, and the cluster is healthy again with three members.
#[test]
fn a_control_plane_made_again_while_its_old_member_is_listed_takes_that_members_place() {
    let test = "a_control_plane_made_again_while_its_old_member_is_listed";
    let addresses = ["127.0.0.44", "127.0.0.45", "127.0.0.46"];
    let Some((mut three, plane, old_id)) = three_with_cp3_lost(test, addresses) else {
        return;
    };
    let programs = three.tool.programs.clone();

    make_cp3_again(&mut three, &addresses);
    let out = await_healthy(&three, &plane, "90");
    assert!(out.status.success(), "{}", stderr(&out));
    let (new_id, learner) = member_of(&programs, &three.clients[0], CONTROL_PLANES[2]).unwrap();
    assert!(new_id != old_id && !learner, "{new_id:x} {learner}");
    assert_eq!(member_names(&programs, &three.clients[0]), CONTROL_PLANES);
    assert_joined(&three, &["removed the member of the same name"]);
}
