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
//!   its data with Talos's own error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use testkit::control_plane::ControlPlane;
use testkit::talos_node::{ControlPlaneNode, ControlPlaneSpec, Programs};

const CLUSTER: &str = "edge-par";

/// The tool at `talos_port`, with the programs and talosconfig of `dir`, the inventory on stdin.
fn tool(dir: &Path, programs: &Programs, port: u16, inventory: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_talos-lifecycle"));
    command
        .env_clear()
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
    programs: Programs,
    dir: tempfile::TempDir,
    plane: ControlPlane,
    node: ControlPlaneNode,
    port: u16,
    inventory: String,
}

impl RoundTrip {
    fn start(test: &str) -> Option<RoundTrip> {
        let address = "127.0.0.2";
        let (programs, dir) = setup(test, &[address])?;
        let plane = ControlPlane::start(test)?;
        // The control plane's node: its etcd is the one the API server uses.
        let port = testkit::free_port();
        let node = ControlPlaneNode::start(
            &programs,
            dir.path(),
            &ControlPlaneSpec {
                hostname: "edge-par-cp-1".into(),
                address: address.into(),
                port,
                etcd_client_url: plane.etcd_url().to_owned(),
                etcd_peer_url: url_at(address),
                initial_cluster: None,
            },
        );
        let inventory = inventory(&[("edge-par-cp-1", address)]);
        Some(RoundTrip {
            programs,
            dir,
            plane,
            node,
            port,
            inventory,
        })
    }

    fn tool(&self, args: &[&str]) -> Output {
        tool(
            self.dir.path(),
            &self.programs,
            self.port,
            &self.inventory,
            args,
        )
    }

    /// A snapshot taken by the tool: its record, checked against the file.
    fn snapshot(&self) -> Value {
        let out_dir = self.dir.path().join("out/etcd");
        let out = self.tool(&["snapshot", "--out-dir", out_dir.to_str().unwrap()]);
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
        let plan = self.tool(&["restore", "--snapshot", snapshot, "--dry-run"]);
        let steps: Vec<Value> = testkit::process::success_stdout(&plan)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let kinds: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["check-snapshot", "recover", "wait-healthy"]);
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
        let out = self.tool(&args);
        let recovered: Value =
            serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap();
        assert_eq!(recovered["kind"], "EtcdRecovery");
        assert_eq!(recovered["node"], "edge-par-cp-1");
        let bootstrap = self.node.calls("Bootstrap");
        assert_eq!(bootstrap.len(), 1);
        assert_eq!(bootstrap[0]["recover_etcd"], true);
        // Talos deletes the uploaded snapshot once restored.
        assert!(!self.node.var_lib.join("etcd.snapshot").exists());
        let said = stderr(&out);
        assert!(
            said.contains("restart the kube-apiserver of every control plane"),
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
    let refused = trip.tool(&["restore", "--snapshot", snapshot]);
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

    // The API server, restarted as the tool's last words ask (a running one keeps serving its
    // watch cache: without the restart, this one still listed `made-after` two minutes later),
    // reads the restored etcd: the objects made before the snapshot are back, the one made
    // after it is gone.
    trip.plane.restart_apiserver();
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

/// Whether the member at `url` answers with a leader (etcdctl, independent of the tool).
fn has_leader(programs: &Programs, url: &str) -> bool {
    let out = Command::new(&programs.etcdctl)
        .args([
            "--endpoints",
            url,
            "--dial-timeout=2s",
            "endpoint",
            "status",
            "-w",
            "json",
        ])
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    status[0]["Status"]["leader"].as_u64().unwrap_or(0) != 0
        && status[0]["Status"]["errors"].is_null()
}

/// Three control planes at `addresses`, their etcd members one cluster from the start; each
/// member's client URL.
fn three_members(
    programs: &Programs,
    dir: &Path,
    names: &[&str; 3],
    addresses: &[&str; 3],
    port: u16,
) -> (Vec<Option<ControlPlaneNode>>, Vec<String>) {
    let peers: Vec<String> = addresses.iter().map(|a| url_at(a)).collect();
    let clients: Vec<String> = addresses.iter().map(|a| url_at(a)).collect();
    let initial: Vec<String> = names
        .iter()
        .zip(&peers)
        .map(|(n, p)| format!("{n}={p}"))
        .collect();
    let nodes = (0..3)
        .map(|i| {
            Some(ControlPlaneNode::start(
                programs,
                dir,
                &ControlPlaneSpec {
                    hostname: names[i].into(),
                    address: addresses[i].into(),
                    port,
                    etcd_client_url: clients[i].clone(),
                    etcd_peer_url: peers[i].clone(),
                    initial_cluster: Some(initial.join(",")),
                },
            ))
        })
        .collect();
    (nodes, clients)
}

#[test]
fn the_gate_holds_while_two_of_three_members_follow_a_leader_and_a_node_with_data_refuses() {
    let test = "the_gate_holds_while_two_of_three_members_follow_a_leader";
    let addresses = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let Some((programs, dir)) = setup(test, &addresses) else {
        return;
    };
    let names = ["edge-par-cp-1", "edge-par-cp-2", "edge-par-cp-3"];
    let port = testkit::free_port();
    let (mut nodes, clients) = three_members(&programs, dir.path(), &names, &addresses, port);
    let inventory = inventory(&names.iter().copied().zip(addresses).collect::<Vec<_>>());
    let run = |args: &[&str]| tool(dir.path(), &programs, port, &inventory, args);
    let leaders = |members: &[usize]| members.iter().all(|&i| has_leader(&programs, &clients[i]));
    testkit::eventually("the three members to elect a leader", || {
        leaders(&[0, 1, 2]).then_some(())
    });

    let out_dir = dir.path().join("etcd");
    let taken = run(&["snapshot", "--out-dir", out_dir.to_str().unwrap()]);
    let taken: Value = serde_json::from_str(&testkit::process::success_stdout(&taken)).unwrap();
    let snapshot = taken["path"].as_str().unwrap().to_owned();
    let restore = ["restore", "--snapshot", snapshot.as_str()];
    let out = run(&restore);
    testkit::process::assert_refused(
        &out,
        1,
        &[
            "3 of 3 members",
            "edge-par-cp-1, edge-par-cp-2, edge-par-cp-3",
        ],
    );

    // One machine gone, its etcd with it: the other two still hold the quorum.
    nodes[0] = None;
    testkit::eventually("the two left to follow a leader", || {
        leaders(&[1, 2]).then_some(())
    });
    let out = run(&restore);
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

    // Two gone: the last member has no leader; a recovery goes to it, whose etcd folder still
    // holds its data: Talos refuses, and the way out is said.
    nodes[1] = None;
    testkit::eventually("the last member to lose its leader", || {
        (!leaders(&[2])).then_some(())
    });
    let out = run(&restore);
    testkit::process::assert_refused(
        &out,
        1,
        &[
            "edge-par-cp-3: bootstrap --recover-from: Talos answered AlreadyExists: etcd data directory is not empty",
            "--system-labels-to-wipe=EPHEMERAL",
        ],
    );
    let last = nodes[2].as_ref().unwrap();
    assert!(
        stderr(&out).contains("etcdserver: no leader"),
        "{}",
        stderr(&out)
    );
    assert_eq!(last.calls("EtcdRecover").len(), 1);
    assert_eq!(last.calls("Bootstrap")[0]["recover_etcd"], true);
    // The upload stays where Talos put it; the member's data is untouched.
    assert!(last.var_lib.join("etcd/member").is_dir());
}
