//! `pipelines/infra.sh bootstrap`, the step `make apply-infra` runs once the machines are made,
//! with the real talosctl against three new control planes played by testkit's node stand-in
//! (Talos's messages over mutual TLS, apid's routing, COSI's resources: the `etcd` Service
//! resource exists only while etcd runs), each over a real etcd member at an address of its own,
//! the Talos API at its real port. None runs etcd: the step asks each (`talosctl get services
//! etcd`, NotFound on all three), bootstraps the first, and the two others join its member, as
//! Talos's etcd service makes a control plane join. Run again, it finds etcd running on the first
//! and bootstraps nothing. `infra_pipeline.rs` runs the step's other cases against the talosctl
//! stand-in (a node not ready yet, a snapshot to recover).

use std::path::Path;
use std::process::{Command, Output};

use testkit::process::text;
use testkit::talos_node::{ControlPlaneNode, Programs};

use crate::etcd_day2::{inventory, operator_folder};

const NAMES: [&str; 3] = ["edge-par-cp-1", "edge-par-cp-2", "edge-par-cp-3"];
/// Addresses no other test uses: a member's peer port is picked before it listens.
const ADDRESSES: [&str; 3] = ["127.0.12.1", "127.0.12.2", "127.0.12.3"];
/// The step reaches each control plane at its address alone: Talos's API port.
const APID_PORT: u16 = 50000;

/// The step as the Makefile runs it, the operator's folder `dir` ([`operator_folder`]) its OUT,
/// its `bin/` (the real talosctl) first on PATH, the example infra config.
fn bootstrap(dir: &Path) -> Output {
    let scw_infra = testkit::workspace::bin("scw-infra");
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    Command::new("bash")
        .arg(testkit::workspace::root().join("pipelines/infra.sh"))
        .arg("bootstrap")
        .current_dir(testkit::workspace::root())
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir)
        .env("BIN", scw_infra.parent().unwrap())
        .env("OUT", dir.join("out"))
        .env(
            "INFRA_CONFIG",
            testkit::workspace::root().join("config/infra.example.json"),
        )
        .env("BOOTSTRAP_TRIES", "30")
        .env("BOOTSTRAP_INTERVAL", "1")
        .output()
        .unwrap()
}

#[test]
fn the_first_of_three_new_control_planes_is_bootstrapped_and_the_others_join_it() {
    let test = "infra_bootstrap_with_the_real_talosctl";
    let Some(programs) = Programs::find(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    testkit::talos_node::cluster_trust(dir.path(), &programs.talosctl, "edge-par", &ADDRESSES);
    // New machines: cp-1's etcd waits for its bootstrap, the others try to join from the start.
    let mut specs = testkit::talos_node::etcd_cluster(&NAMES, &ADDRESSES, APID_PORT);
    for (i, spec) in specs.iter_mut().enumerate() {
        spec.initial_cluster = None;
        spec.join_etcd = i > 0;
    }
    let nodes: Vec<ControlPlaneNode> = specs
        .iter()
        .map(|spec| ControlPlaneNode::start(&programs, dir.path(), spec))
        .collect();
    let control_planes: Vec<(&str, &str)> = NAMES.into_iter().zip(ADDRESSES).collect();
    operator_folder(dir.path(), &programs, &inventory(&control_planes, &[]), &[]);

    let out = bootstrap(dir.path());
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("bootstrapped etcd on 127.0.12.1"), "{said}");
    let bootstraps: Vec<usize> = nodes.iter().map(|n| n.calls("Bootstrap").len()).collect();
    assert_eq!(bootstraps, [1, 0, 0], "{said}");
    // Each was asked for its etcd Service resource, through its own Talos API, before it.
    for node in &nodes {
        let asked = node.calls("COSI.Get");
        assert!(
            asked
                .iter()
                .any(|c| c["type"] == "Services.v1alpha1.talos.dev" && c["id"] == "etcd"),
            "{asked:?}"
        );
    }
    let clients: Vec<&str> = specs.iter().map(|s| s.etcd_client_url.as_str()).collect();
    testkit::eventually("the two others to join the bootstrapped member", || {
        testkit::talos_node::settled(&programs.etcdctl, &clients).then_some(())
    });

    let out = bootstrap(dir.path());
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("etcd runs on 127.0.12.1: the cluster is bootstrapped"),
        "{said}"
    );
    assert_eq!(nodes[0].calls("Bootstrap").len(), 1, "{said}");
}
