//! talos-apply-insecure against testkit's `talos_maintenance.py`: a Talos API on loopback
//! with a self-signed certificate, speaking the real `machine.MachineService` messages compiled
//! from `../shared/talos/v1.13.9/api` (so the hand-written prost messages are checked against
//! Talos's own .proto), behaving as Talos v1.13.9's maintenance mode does (and v1.11's, where
//! Version is Unimplemented), leaving maintenance mode for mutual TLS once a config is applied.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use sha2::{Digest, Sha256};

const WORKER_CONFIG: &str =
    "version: v1alpha1\nmachine:\n  type: worker\n  token: t\ncluster:\n  clusterName: edge-par\n";

struct StandIn {
    child: Child,
    port: u16,
    records: PathBuf,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StandIn {
    fn calls(&self, rpc: &str) -> Vec<serde_json::Value> {
        fs::read_to_string(self.records.join("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|c| c["rpc"] == rpc)
            .collect()
    }
}

/// The tools this test needs, or a skip (a failure under CI).
fn prerequisites(test: &str) -> Option<PathBuf> {
    let shared = testkit::workspace::shared_dir(test)?;
    if !testkit::workspace::python3(test) {
        return None;
    }
    let grpc = Command::new("python3")
        .args(["-c", "import grpc, grpc_tools, yaml"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !grpc {
        testkit::skip_or_fail(test, "Python grpcio-tools (pip install grpcio-tools)");
        return None;
    }
    if Command::new("openssl").arg("version").output().is_err() {
        testkit::skip_or_fail(test, "openssl");
        return None;
    }
    Some(shared.join("talos/v1.13.9/api"))
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A self-signed node certificate (as the maintenance CA's would be) and a client CA the tool
/// never has.
fn certificates(dir: &Path) {
    for name in ["node", "client-ca"] {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ],
        );
    }
}

/// The node certificate's SPKI fingerprint, computed by openssl (independent of the tool).
fn spki_fingerprint(dir: &Path) -> String {
    let script = "openssl x509 -in node.crt -pubkey -noout | openssl pkey -pubin -outform der \
                  | openssl dgst -sha256 -binary | base64";
    let out = Command::new("bash")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn start(api: &Path, dir: &Path, extra: &[&str]) -> StandIn {
    let records = dir.join(format!("records-{}", extra.join("-")));
    fs::create_dir_all(&records).unwrap();
    let port_file = records.join("port");
    let script = testkit::standin::path("talos_maintenance.py");
    let child = Command::new("python3")
        .arg(script)
        .args(["--api-dir", api.to_str().unwrap()])
        .args(["--cert", dir.join("node.crt").to_str().unwrap()])
        .args(["--key", dir.join("node.key").to_str().unwrap()])
        .args(["--client-ca", dir.join("client-ca.crt").to_str().unwrap()])
        .args(["--port-file", port_file.to_str().unwrap()])
        .args(["--record-dir", records.to_str().unwrap()])
        .args(extra)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut stand_in = StandIn {
        child,
        port: 0,
        records,
    };
    for _ in 0..300 {
        if let Ok(port) = fs::read_to_string(&port_file) {
            stand_in.port = port.trim().parse().unwrap();
            return stand_in;
        }
        if let Some(status) = stand_in.child.try_wait().unwrap() {
            panic!("the stand-in exited: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the stand-in did not start within 30 s");
}

fn inventory(steps: &str) -> String {
    format!(
        r#"{{"kind":"NodeInventory","version":1,"cluster_name":"edge-par","cluster_endpoint":"https://api.example.com:6443",
        "nodes":[{{"name":"edge-worker-1","role":"worker","kind":"elastic-metal","zone":"fr-par-1",
        "id":"22222222-2222-4222-8222-222222222222","public_ipv4":"127.0.0.1","public_ipv6":null,
        "private_ipv4":null,"steps":{steps}}}]}}"#
    )
}

fn tool(dir: &Path, port: u16, stdin: &str, extra: &[&str]) -> Output {
    testkit::process::run_with_stdin(
        Command::new(env!("CARGO_BIN_EXE_talos-apply-insecure"))
            .args([
                "--config-dir",
                dir.to_str().unwrap(),
                "--port",
                &port.to_string(),
            ])
            .args([
                "--wait-tries",
                "30",
                "--wait-interval-seconds",
                "1",
                "--timeout-seconds",
                "5",
            ])
            .args(extra),
        stdin.as_bytes(),
    )
}

fn setup(test: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    let api = prerequisites(test)?;
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    fs::write(dir.path().join("worker.yaml"), WORKER_CONFIG).unwrap();
    Some((dir, api))
}

/// A node failed: exit 1, every needle on stderr, and the inventory still written (without a
/// record for that node) so that the pipeline keeps what the other nodes did.
fn assert_failed(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "`{needle}` not in: {stderr}");
    }
    let written: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(written["nodes"][0]["steps"].get("config_applied").is_none());
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

#[test]
fn a_node_in_maintenance_takes_its_config_leaves_maintenance_and_a_rerun_skips_it() {
    let Some((dir, api)) = setup("a_node_in_maintenance_takes_its_config") else {
        return;
    };
    let node = start(&api, dir.path(), &[]);
    let out = tool(dir.path(), node.port, &inventory("{}"), &[]);
    let stdout = testkit::process::success_stdout(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let written: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let recorded = written["nodes"][0]["steps"]["config_applied"]
        .as_str()
        .unwrap();
    assert_eq!(recorded, digest(WORKER_CONFIG.as_bytes()));
    // The node received exactly the worker config, in mode AUTO, over the real messages.
    assert_eq!(
        fs::read_to_string(node.records.join("applied-1.yaml")).unwrap(),
        WORKER_CONFIG
    );
    let applies = node.calls("ApplyConfiguration");
    assert_eq!(applies.len(), 1, "{applies:?}");
    assert_eq!(applies[0]["mode"], "AUTO");
    assert_eq!(applies[0]["dry_run"], false);
    // The log names the certificate it trusted on first use and what the node answered.
    assert!(stderr.contains(&spki_fingerprint(dir.path())), "{stderr}");
    assert!(stderr.contains("trusted on first use"), "{stderr}");
    assert!(
        stderr.contains("mode NO_REBOOT: Applied configuration without a reboot"),
        "{stderr}"
    );
    assert!(stderr.contains("left maintenance mode"), "{stderr}");
    assert!(
        stderr.contains("config applied: edge-worker-1;"),
        "{stderr}"
    );

    // Re-run with the inventory it wrote: skipped without a call.
    let again = tool(dir.path(), node.port, &stdout, &[]);
    let stdout_again = testkit::process::success_stdout(&again);
    assert_eq!(stdout_again, stdout);
    assert_eq!(node.calls("ApplyConfiguration").len(), 1);
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("skipped (same config already applied): edge-worker-1")
    );

    // A changed config on a node that is configured now: reported, not sent, record kept.
    fs::write(
        dir.path().join("worker.yaml"),
        format!("{WORKER_CONFIG}debug: true\n"),
    )
    .unwrap();
    let changed = tool(dir.path(), node.port, &stdout, &[]);
    let stdout_changed = testkit::process::success_stdout(&changed);
    let stderr_changed = String::from_utf8_lossy(&changed.stderr);
    assert!(
        stderr_changed.contains("already configured with sha256:"),
        "{stderr_changed}"
    );
    assert!(
        stderr_changed.contains("talosctl apply-config"),
        "{stderr_changed}"
    );
    assert_eq!(node.calls("ApplyConfiguration").len(), 1);
    assert_eq!(stdout_changed, stdout);
}

#[test]
fn an_older_talos_whose_version_is_unimplemented_in_maintenance_is_recognised_and_pinned() {
    let Some((dir, api)) = setup("an_older_talos") else {
        return;
    };
    let node = start(&api, dir.path(), &["--talos", "v1.11"]);
    let pin = spki_fingerprint(dir.path());
    let out = tool(
        dir.path(),
        node.port,
        &inventory("{}"),
        &["--cert-fingerprint", &pin],
    );
    testkit::process::success_stdout(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("certificate SPKI {pin} (pinned)")),
        "{stderr}"
    );
    assert_eq!(node.calls("ApplyConfiguration")[0]["mode"], "AUTO");
    assert_eq!(node.calls("Version")[0]["maintenance"], true);
}

#[test]
fn a_wrong_pin_is_refused_and_nothing_is_sent() {
    let Some((dir, api)) = setup("a_wrong_pin_is_refused") else {
        return;
    };
    let node = start(&api, dir.path(), &[]);
    let wrong = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    let out = tool(
        dir.path(),
        node.port,
        &inventory("{}"),
        &["--cert-fingerprint", wrong],
    );
    assert_failed(
        &out,
        &[
            "edge-worker-1",
            "is not one of the pinned ones",
            "nothing sent",
        ],
    );
    assert!(node.calls("ApplyConfiguration").is_empty());
    assert!(
        node.calls("Version").is_empty(),
        "the handshake must fail before any call"
    );
}

#[test]
fn a_configured_node_requiring_mutual_tls_is_reported_and_left_alone() {
    let Some((dir, api)) = setup("a_configured_node") else {
        return;
    };
    let node = start(&api, dir.path(), &["--start", "configured"]);
    let out = tool(dir.path(), node.port, &inventory("{}"), &[]);
    let stdout = testkit::process::success_stdout(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("already configured (its API requires a client certificate)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("configured outside this run (use talosctl): edge-worker-1"),
        "{stderr}"
    );
    let written: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(written["nodes"][0]["steps"].get("config_applied").is_none());
    assert!(node.calls("ApplyConfiguration").is_empty());
}

#[test]
fn a_config_the_node_refuses_fails_the_node_and_records_nothing() {
    let Some((dir, api)) = setup("a_config_the_node_refuses") else {
        return;
    };
    fs::write(dir.path().join("worker.yaml"), "machine: [unclosed\n").unwrap();
    let node = start(&api, dir.path(), &[]);
    let out = tool(dir.path(), node.port, &inventory("{}"), &[]);
    assert_failed(
        &out,
        &[
            "edge-worker-1",
            "InvalidArgument",
            "failed to decode config",
        ],
    );
    assert!(!node.records.join("applied-1.yaml").exists());
}

#[test]
fn bad_input_is_refused_before_any_connection() {
    let dir = tempfile::tempdir().unwrap();
    // Port 9 (discard) on loopback: nothing must even try it.
    let out = tool(dir.path(), 9, "{\"kind\":\"NodeInventory\"}", &[]);
    testkit::process::assert_refused(&out, 2, &["<stdin>", "version"]);
    let out = tool(dir.path(), 9, &inventory("{}"), &[]);
    testkit::process::assert_refused(&out, 2, &["worker.yaml", "cannot read the machine config"]);
    assert!(out.stdout.is_empty());
}

/// A Python client on the same compiled protos: sends `mode` to a stand-in and prints the
/// status code name and the mode the node chose.
fn apply_with_mode(api: &Path, dir: &Path, port: u16, mode: &str) -> String {
    let client = format!(
        r#"
import sys, tempfile, grpc
sys.path.insert(0, {stand_ins:?})
import talos_maintenance
pb, pb_grpc = talos_maintenance.compile_protos({api:?}, tempfile.mkdtemp())
credentials = grpc.ssl_channel_credentials(root_certificates=open({cert:?}, "rb").read())
channel = grpc.secure_channel("127.0.0.1:{port}", credentials)
stub = pb_grpc.MachineServiceStub(channel)
request = pb.ApplyConfigurationRequest(data=b"version: v1alpha1\n", mode=pb.ApplyConfigurationRequest.{mode}, dry_run=True)
try:
    answer = stub.ApplyConfiguration(request, timeout=10)
    print("OK", pb.ApplyConfigurationRequest.Mode.Name(answer.messages[0].mode))
except grpc.RpcError as e:
    print(e.code().name, e.details())
"#,
        stand_ins = testkit::standin::path("").display().to_string(),
        api = api.display().to_string(),
        cert = dir.join("node.crt").display().to_string(),
    );
    let out = Command::new("python3")
        .args(["-c", &client])
        .output()
        .unwrap();
    testkit::process::success_stdout(&out).trim().to_owned()
}

/// The stand-in's contract, each version as its source says: v1.13.9's machined turns AUTO and
/// REBOOT into NO_REBOOT in maintenance and takes STAGED; v1.11's maintenance service took only
/// AUTO, TRY and REBOOT.
#[test]
fn the_stand_in_answers_modes_as_each_talos_version_does() {
    let Some((dir, api)) = setup("the_stand_in_answers_modes") else {
        return;
    };
    let current = start(&api, dir.path(), &[]);
    assert_eq!(
        apply_with_mode(&api, dir.path(), current.port, "AUTO"),
        "OK NO_REBOOT"
    );
    assert_eq!(
        apply_with_mode(&api, dir.path(), current.port, "REBOOT"),
        "OK NO_REBOOT"
    );
    assert_eq!(
        apply_with_mode(&api, dir.path(), current.port, "STAGED"),
        "OK STAGED"
    );
    let older = start(&api, dir.path(), &["--talos", "v1.11"]);
    assert_eq!(
        apply_with_mode(&api, dir.path(), older.port, "TRY"),
        "OK TRY"
    );
    let refused = apply_with_mode(&api, dir.path(), older.port, "STAGED");
    assert!(refused.starts_with("UNIMPLEMENTED"), "{refused}");
    let refused = apply_with_mode(&api, dir.path(), older.port, "NO_REBOOT");
    assert!(refused.starts_with("UNIMPLEMENTED"), "{refused}");
    // Dry runs change nothing: still in maintenance, nothing recorded.
    assert!(!current.records.join("applied-1.yaml").exists());
}
