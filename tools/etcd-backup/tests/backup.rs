//! etcd-backup as its CronJob runs it: the real talosctl streams a snapshot from a control plane
//! played by testkit's node stand-in over a real etcd member holding a key, the real age
//! encrypts it, and the S3 stand-in (SigV4 checked, objects kept as files) stores it. The
//! object is read back, decrypted by the real age with the operator's identity, and the real
//! etcdutl reads it: the hash and revision the record names, the key written before.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use pop_common::wait::ThreadSleeper;
use scaleway::s3::S3;
use scaleway::{RetryPolicy, SecretKey, UreqTransport};
use serde_json::Value;
use testkit::process::text;
use testkit::talos_node::{ControlPlaneNode, ControlPlaneSpec, Programs};

/// Addresses no other test of the workspace gives a node, one per test of this file.
const ADDRESSES: [&str; 3] = ["127.0.0.41", "127.0.0.42", "127.0.0.43"];
const CLUSTER: &str = "edge-par";
const BUCKET: &str = "edgepop-edge-par-22222222";
const ACCESS_KEY: &str = "SCWBACKUPXXXXXXXXXXX";
const SECRET: &str = "33333333-3333-4333-8333-333333333333";
const PROJECT: &str = "22222222-2222-4222-8222-222222222222";

/// The cluster, the bucket's stand-in and the operator's age identity.
struct World {
    address: &'static str,
    node: ControlPlaneNode,
    programs: Programs,
    age: PathBuf,
    dir: tempfile::TempDir,
    s3: testkit::standin::StandIn,
    etcd_client_url: String,
    recipient: String,
}

impl World {
    fn start(test: &str, address: &'static str) -> Option<World> {
        World::start_routed(test, address, &[])
    }

    /// The world, the test's network taking each `(address, loopback address)` of `routes` to
    /// the second (an address the API server publishes, which refuses loopback addresses).
    fn start_routed(test: &str, address: &'static str, routes: &[(&str, &str)]) -> Option<World> {
        let programs = Programs::find(test)?;
        let age = testkit::upstream::program(test, "age")?;
        let age_keygen = testkit::upstream::program(test, "age-keygen")?;
        let dir = tempfile::tempdir().unwrap();
        testkit::talos_node::cluster_trust(dir.path(), &programs.talosctl, CLUSTER, &[address]);
        // The pod's talosconfig names one endpoint (talos.default in a cluster) and no node.
        let port = testkit::free_port();
        let talosconfig = dir.path().join("talosconfig");
        let set = Command::new(&programs.talosctl)
            .arg("--talosconfig")
            .arg(&talosconfig)
            .args(["config", "endpoint", &format!("{address}:{port}")])
            .output()
            .unwrap();
        assert!(set.status.success(), "{}", text(&set));
        let peer = format!("http://{address}:{}", testkit::free_port());
        let etcd_client_url = format!("http://{address}:{}", testkit::free_port());
        let node = ControlPlaneNode::start(
            &programs,
            dir.path(),
            &ControlPlaneSpec {
                initial_cluster: Some(format!("edge-par-cp-1={peer}")),
                routes: routes
                    .iter()
                    .map(|(from, to)| ((*from).to_owned(), (*to).to_owned()))
                    .collect(),
                ..ControlPlaneSpec::new(
                    "edge-par-cp-1",
                    address,
                    port,
                    etcd_client_url.clone(),
                    peer.clone(),
                )
            },
        );
        let identity = dir.path().join("identity.txt");
        let made = Command::new(&age_keygen)
            .arg("-o")
            .arg(&identity)
            .output()
            .unwrap();
        assert!(made.status.success(), "{}", text(&made));
        let public = Command::new(&age_keygen)
            .arg("-y")
            .arg(&identity)
            .output()
            .unwrap();
        let recipient = testkit::process::success_stdout(&public).trim().to_owned();
        let s3 = testkit::standin::s3(dir.path(), ACCESS_KEY, SECRET);
        fs::create_dir(dir.path().join("work")).unwrap();
        Some(World {
            address,
            programs,
            age,
            dir,
            s3,
            etcd_client_url,
            recipient,
            node,
        })
    }

    fn etcdctl_once_elected(&self, args: &[&str]) {
        testkit::talos_node::etcdctl_once_elected(
            &self.programs.etcdctl,
            &self.etcd_client_url,
            args,
        );
    }

    /// The tool as the CronJob runs it, the keys in its environment, the node named.
    fn backup(&self, extra: &[&str]) -> Output {
        let mut args = vec!["--node", self.address];
        args.extend_from_slice(extra);
        self.backup_bare(&args)
    }

    /// The tool with only `extra` besides the bucket's and Talos's inputs.
    fn backup_bare(&self, extra: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_etcd-backup"))
            .env_clear()
            .env("HOME", self.dir.path())
            .env("SCW_ACCESS_KEY", ACCESS_KEY)
            .env("SCW_SECRET_KEY", SECRET)
            .env("SCW_DEFAULT_PROJECT_ID", PROJECT)
            .env("SCW_S3_ENDPOINT", self.s3.url())
            .args([
                "--cluster",
                CLUSTER,
                "--bucket",
                BUCKET,
                "--region",
                "fr-par",
            ])
            .arg("--talosconfig")
            .arg(self.dir.path().join("talosconfig"))
            .arg("--talosctl")
            .arg(&self.programs.talosctl)
            .arg("--age")
            .arg(&self.age)
            .arg("--work-dir")
            .arg(self.dir.path().join("work"))
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Object Storage as the operator's own client sees it.
    fn put(&self, key: &str, body: &[u8]) {
        let file = self.dir.path().join("upload");
        fs::write(&file, body).unwrap();
        let transport = UreqTransport::new(Duration::from_secs(10));
        let s3 = S3::new(
            &transport,
            &ThreadSleeper,
            &self.s3.url(),
            "fr-par",
            &format!("{ACCESS_KEY}@{PROJECT}"),
            SecretKey::new(SECRET),
            RetryPolicy::default(),
        );
        if key.is_empty() {
            s3.create_bucket(BUCKET).unwrap();
        } else {
            s3.upload_file(BUCKET, key, &file, Default::default(), &[])
                .unwrap();
        }
    }

    /// The stored object `key` (the stand-in keeps it as a file).
    fn stored(&self, key: &str) -> PathBuf {
        self.dir
            .path()
            .join("s3")
            .join(BUCKET)
            .join(key.replace('/', "%2F"))
    }

    fn stored_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = fs::read_dir(self.dir.path().join("s3").join(BUCKET))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().replace("%2F", "/"))
            .collect();
        keys.sort();
        keys
    }

    fn work_is_empty(&self) -> bool {
        fs::read_dir(self.dir.path().join("work")).unwrap().count() == 0
    }
}

/// The record of a run that succeeded.
fn record(out: &Output) -> Value {
    let stdout = testkit::process::success_stdout(out);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let record: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(record["kind"], "EtcdBackup");
    record
}

/// `etcdutl snapshot status` of what `age -d` makes of `sealed` with the identity.
fn decrypted_status(world: &World, sealed: &Path) -> Value {
    let plain = world.dir.path().join("restored.snapshot");
    let _ = fs::remove_file(&plain);
    let opened = Command::new(&world.age)
        .args(["--decrypt", "--identity"])
        .arg(world.dir.path().join("identity.txt"))
        .arg("--output")
        .arg(&plain)
        .arg(sealed)
        .output()
        .unwrap();
    assert!(opened.status.success(), "{}", text(&opened));
    let status = Command::new(&world.programs.etcdutl)
        .args(["snapshot", "status", "-w", "json"])
        .arg(&plain)
        .output()
        .unwrap();
    serde_json::from_str(&testkit::process::success_stdout(&status)).unwrap()
}

#[test]
fn a_snapshot_is_encrypted_to_the_operator_stored_read_back_and_the_oldest_pruned() {
    let Some(world) = World::start("etcd_backup_round_trip", ADDRESSES[0]) else {
        return;
    };
    world.etcdctl_once_elected(&["put", "/registry/made-before", "1"]);

    // No bucket yet: the snapshot is taken and encrypted, the upload refused naming the
    // bucket, and nothing is left in the work folder.
    let out = world.backup(&["--age-recipient", &world.recipient]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    testkit::process::assert_says_all(
        &said,
        &[format!("uploading {BUCKET}/"), "NoSuchBucket".into()],
    );
    assert!(!said.contains(SECRET), "{said}");
    assert!(world.work_is_empty());

    world.put("", b"");
    let older = [
        "edge-par/edge-par-20200101T000000Z.snapshot.age",
        "edge-par/edge-par-20200101T010000Z.snapshot.age",
    ];
    for key in older {
        world.put(key, b"an older backup");
    }
    world.put("edge-par/README", b"not a backup: never pruned");

    let out = world.backup(&["--age-recipient", &world.recipient, "--keep", "2"]);
    let made = record(&out);
    let key = made["key"].as_str().unwrap();
    assert!(
        key.starts_with("edge-par/edge-par-") && key.ends_with(".snapshot.age"),
        "{key}"
    );
    assert_eq!(made["pruned"], serde_json::json!([older[0]]));
    let mut kept = vec![older[1], key, "edge-par/README"];
    kept.sort_unstable();
    assert_eq!(world.stored_keys(), kept);
    assert!(world.work_is_empty());

    let sealed = world.stored(key);
    let stored = fs::read(&sealed).unwrap();
    assert!(stored.starts_with(b"age-encryption.org/v1\n"));
    assert_eq!(made["bytes"], stored.len());
    let status = decrypted_status(&world, &sealed);
    assert_eq!(status["totalKey"], made["status"]["total_keys"]);
    assert_eq!(status["revision"], made["status"]["revision"]);
    assert_eq!(
        format!("{:08x}", status["hash"].as_u64().unwrap()),
        made["status"]["hash"].as_str().unwrap()
    );
    assert!(made["status"]["total_keys"].as_u64().unwrap() >= 1);
    let asked = world.node.calls("EtcdSnapshot");
    assert_eq!(asked.len(), 2, "one snapshot per run: {asked:?}");
    // Each asked of the node named, through the endpoint's apid.
    let routed = world.node.routed("EtcdSnapshot");
    assert_eq!(routed.len(), 2, "{routed:?}");
    assert!(
        routed
            .iter()
            .all(|a| a["nodes"] == serde_json::json!([world.address]))
    );
}

#[test]
fn a_recipient_age_refuses_stops_before_anything_is_uploaded() {
    let Some(world) = World::start("etcd_backup_bad_recipient", ADDRESSES[1]) else {
        return;
    };
    world.etcdctl_once_elected(&["endpoint", "health"]);
    world.put("", b"");
    // The right shape, a wrong checksum: only age can tell.
    let mut wrong = world.recipient.clone();
    let last = wrong.pop().unwrap();
    wrong.push(if last == 'q' { 'p' } else { 'q' });
    let out = world.backup(&["--age-recipient", &wrong]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("etcd-backup: error: age: "), "{said}");
    assert!(world.stored_keys().is_empty(), "{:?}", world.stored_keys());
    assert!(world.work_is_empty());
}

/// What the job's Role allows: `get` on Talos's EndpointSlice, nothing else.
const ROLE: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: etcd-backup-talos-endpoints, namespace: default}
rules:
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  resourceNames: [talos-ipv4]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: etcd-backup-talos-endpoints, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: etcd-backup-talos-endpoints}
subjects:
- {kind: ServiceAccount, name: etcd-backup, namespace: etcd-backup}
"#;

#[test]
fn in_a_pod_the_control_planes_come_from_talos_s_endpoint_slice_the_role_lets_it_read() {
    // As Talos writes it (endpoint.go l.266-358 at v1.13.9). The API server refuses a loopback
    // address there (EndpointSlice validation), so the control plane's is a documentation
    // address, which the test's network takes to the node stand-in's.
    let published = "192.0.2.10";
    let test = "etcd_backup_endpoint_slice";
    let Some(world) = World::start_routed(test, ADDRESSES[2], &[(published, ADDRESSES[2])]) else {
        return;
    };
    let Some(plane) = testkit::control_plane::ControlPlane::shared("etcd_backup_endpoint_slice")
    else {
        return;
    };
    plane.kubectl_ok(&["create", "namespace", "etcd-backup"], "");
    plane.kubectl_ok(
        &[
            "create",
            "serviceaccount",
            "etcd-backup",
            "-n",
            "etcd-backup",
        ],
        "",
    );
    let account = plane.service_account("etcd-backup", "etcd-backup");
    let slice = serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": "talos-ipv4", "namespace": "default", "labels": {
            "kubernetes.io/service-name": "talos", "provider": "talos", "component": "apid"}},
        "ports": [{"name": "apid", "port": 50000, "protocol": "TCP"}],
        "endpoints": [{"addresses": [published],
            "conditions": {"ready": true, "serving": true, "terminating": false}}],
    });
    plane.kubectl_ok(&["apply", "-f", "-"], &slice.to_string());
    world.etcdctl_once_elected(&["put", "/registry/made-before", "1"]);
    world.put("", b"");
    let in_pod = |world: &World| {
        world.backup_bare(&[
            "--age-recipient",
            &world.recipient,
            "--api-server",
            plane.server(),
            "--serviceaccount-dir",
            account.dir().to_str().unwrap(),
        ])
    };

    // Without the Role the API server refuses, and no snapshot is asked for.
    let out = in_pod(&world);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    testkit::process::assert_says_all(&said, &["talos-ipv4", "HTTP 403"]);
    assert!(!said.contains("etcd snapshot"), "{said}");

    plane.kubectl_ok(&["apply", "-f", "-"], ROLE);
    let made = testkit::eventually("the Role to be in force", || {
        let out = in_pod(&world);
        out.status.success().then(|| record(&out))
    });
    assert_eq!(made["status"]["total_keys"], 1);
    assert!(world.stored(made["key"].as_str().unwrap()).is_file());
    let asked = world.node.calls("EtcdSnapshot");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let routed = world.node.routed("EtcdSnapshot");
    assert_eq!(routed.len(), 1, "{routed:?}");
    assert_eq!(routed[0]["nodes"], serde_json::json!([published]));
}
