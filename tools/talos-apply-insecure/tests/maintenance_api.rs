//! talos-apply-insecure against testkit's `talos_maintenance.py`: a Talos API on loopback
//! speaking the real `machine.MachineService` messages compiled from
//! `../shared/talos/v1.13.9/api` (so the hand-written prost messages are checked against Talos's
//! own .proto), behaving as Talos v1.13.9's maintenance mode does (and v1.11's, where Version is
//! Unimplemented), leaving maintenance mode for mutual TLS once a config is applied. The cluster's
//! trust is the real talosctl's (`gen secrets`, and the talosconfig of `gen config`: an Ed25519
//! machine CA and admin certificate); a configured node's certificate is issued by that machine
//! CA, or by another one (someone else's node).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sha2::{Digest, Sha256};

/// The machine config of the inventory's worker, edge-worker-1: its own file in --config-dir.
const WORKER_CONFIG: &str = "worker-edge-worker-1.yaml";

/// The maintenance API stand-in (stopped when dropped) and the folder it records calls in.
struct StandIn {
    _server: testkit::standin::StandIn,
    port: u16,
    records: PathBuf,
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

/// The tools this test needs (the shared protos, python with grpcio-tools, openssl, the real
/// talosctl), or a skip (a failure under CI).
fn prerequisites(test: &str) -> Option<(PathBuf, PathBuf)> {
    let shared = testkit::workspace::shared_dir(test)?;
    if !testkit::workspace::python3(test) {
        return None;
    }
    if !testkit::workspace::python_imports(
        test,
        "grpc, grpc_tools, yaml",
        "Python grpcio-tools (pip install grpcio-tools)",
    ) {
        return None;
    }
    if Command::new("openssl").arg("version").output().is_err() {
        testkit::skip_or_fail(test, "openssl");
        return None;
    }
    let talosctl = testkit::upstream::program(test, "talosctl")?;
    Some((shared.join("talos/v1.13.9/api"), talosctl))
}

fn run(dir: &Path, program: &str, args: &[&str]) {
    testkit::process::stdout_of(Command::new(program).args(args).current_dir(dir));
}

/// A self-signed certificate `name.crt` (key `name.key`) for 127.0.0.1: what a maintenance API
/// presents (its throwaway CA's), or a CA.
fn self_signed(dir: &Path, name: &str) {
    testkit::talos_node::new_key_and_request(
        dir,
        name,
        "-x509",
        &format!("{name}.crt"),
        &["-days", "2", "-addext", "subjectAltName=IP:127.0.0.1"],
    );
}

/// The cluster as talosctl makes it: `secrets.yaml`, the `talosconfig` (its context
/// `edge-par`) and the worker's config (`worker-edge-worker-1.yaml`), the machine CA as `machine-ca.{crt,key}`; then `node` (self-signed: the
/// maintenance certificate), `mitm` (another self-signed one), `configured` (the node's
/// certificate once configured, of the machine CA), and a `foreign-ca` with its `foreign` node.
fn certificates(dir: &Path, talosctl: &Path) {
    let talosctl = talosctl.to_str().unwrap();
    run(dir, talosctl, &["gen", "secrets", "-o", "secrets.yaml"]);
    // The talosconfig, and the worker's config, one the node's validation accepts.
    run(
        dir,
        talosctl,
        &[
            "gen",
            "config",
            "edge-par",
            "https://api.example.com:6443",
            "--with-secrets",
            "secrets.yaml",
            "--output-types",
            "talosconfig,worker",
            "-o",
            ".",
        ],
    );
    // The worker's own config, as the infra pipeline names it (gen config's worker.yaml is
    // only the workers' template): the tool sends each worker its own.
    fs::rename(dir.join("worker.yaml"), dir.join(WORKER_CONFIG)).unwrap();
    testkit::talos_node::machine_ca(dir);
    self_signed(dir, "node");
    self_signed(dir, "mitm");
    testkit::talos_node::issued(dir, "configured", "machine-ca", &["127.0.0.1"]);
    self_signed(dir, "foreign-ca");
    testkit::talos_node::issued(dir, "foreign", "foreign-ca", &["127.0.0.1"]);
}

/// A certificate's SPKI fingerprint, computed by openssl (independent of the tool).
fn spki_fingerprint(dir: &Path, name: &str) -> String {
    let script = format!(
        "openssl x509 -in {name}.crt -pubkey -noout | openssl pkey -pubin -outform der \
         | openssl dgst -sha256 -binary | base64"
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The stand-in, maintenance certificate `node`, configured certificate `configured` taking
/// clients of the machine CA, with `extra` arguments (which override those).
fn start(api: &Path, dir: &Path, extra: &[&str]) -> StandIn {
    let records = dir.join(format!("records-{}", extra.join("-").replace('/', "_")));
    fs::create_dir_all(&records).unwrap();
    let port_file = records.join("port");
    let mut args: Vec<String> = [
        ("--cert", "node.crt"),
        ("--key", "node.key"),
        ("--configured-cert", "configured.crt"),
        ("--configured-key", "configured.key"),
        ("--client-ca", "machine-ca.crt"),
    ]
    .into_iter()
    .filter(|(flag, _)| !extra.contains(flag))
    .flat_map(|(flag, file)| [flag.to_owned(), dir.join(file).display().to_string()])
    .collect();
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let mut command = Command::new("python3");
    command
        .arg(testkit::standin::path("talos_maintenance.py"))
        .args(["--api-dir", api.to_str().unwrap()])
        .args(["--port-file", port_file.to_str().unwrap()])
        .args(["--record-dir", records.to_str().unwrap()])
        .arg("--talosctl")
        .arg(dir.join("talosctl"))
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null());
    let server = testkit::standin::StandIn::start(&mut command, &port_file);
    StandIn {
        port: server.port(),
        _server: server,
        records,
    }
}

fn inventory(steps: &str) -> String {
    format!(
        r#"{{"kind":"NodeInventory","version":2,"cluster_name":"edge-par","cluster_endpoint":"https://api.example.com:6443",
        "ssh_key_ids":[],
        "nodes":[{{"name":"edge-worker-1","role":"worker","kind":"elastic-metal","zone":"fr-par-1",
        "id":"22222222-2222-4222-8222-222222222222","public_ipv4":"127.0.0.1","public_ipv6":null,
        "private_ipv4":null,"steps":{steps}}}]}}"#
    )
}

/// The tool on one node at `port`, with bounds a loopback node meets (overridden by `extra`).
fn tool(dir: &Path, port: u16, stdin: &str, extra: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_talos-apply-insecure"));
    command
        .arg("--config-dir")
        .arg(dir)
        .arg("--talosconfig")
        .arg(dir.join("talosconfig"))
        .args(["--port", &port.to_string()]);
    for (flag, value) in [
        ("--boot-tries", "60"),
        ("--boot-interval-seconds", "1"),
        ("--wait-tries", "30"),
        ("--wait-interval-seconds", "1"),
        ("--timeout-seconds", "5"),
    ] {
        if !extra.contains(&flag) {
            command.args([flag, value]);
        }
    }
    testkit::process::run_with_stdin(command.args(extra), stdin.as_bytes())
}

/// The stand-in started with `extra`, and the tool's first run against it: an inventory that
/// records no step yet, the tool's default bounds.
fn first_run(api: &Path, dir: &Path, extra: &[&str]) -> (StandIn, Output) {
    let node = start(api, dir, extra);
    let out = tool(dir, node.port, &inventory("{}"), &[]);
    (node, out)
}

fn setup(test: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    let (api, talosctl) = prerequisites(test)?;
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path(), &talosctl);
    // Where `start` finds the real talosctl, whose validate the stand-in runs on each config.
    std::os::unix::fs::symlink(&talosctl, dir.path().join("talosctl")).unwrap();
    Some((dir, api))
}

/// A node failed: exit 1, every needle on stderr, and the inventory still written (without a
/// record for that node) so that the pipeline keeps what the other nodes did.
fn assert_failed(out: &Output, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    testkit::process::assert_says_all(&stderr, needles);
    let written: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(written["nodes"][0]["steps"].get("config_applied").is_none());
    stderr
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

#[test]
fn a_booting_node_takes_its_config_once_it_listens_proves_ours_and_a_rerun_skips_it() {
    let Some((dir, api)) = setup("a_booting_node_takes_its_config") else {
        return;
    };
    // The machine is still in its POST for a few seconds: nothing listens yet.
    let (node, out) = first_run(&api, dir.path(), &["--listen-after", "3"]);
    let stdout = testkit::process::success_stdout(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let written: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let recorded = written["nodes"][0]["steps"]["config_applied"]
        .as_str()
        .unwrap();
    let worker = fs::read_to_string(dir.path().join(WORKER_CONFIG)).unwrap();
    assert_eq!(recorded, digest(worker.as_bytes()));
    // The node received exactly the worker config, in mode AUTO, over the real messages.
    assert_eq!(
        fs::read_to_string(node.records.join("applied-1.yaml")).unwrap(),
        worker
    );
    let applies = node.calls("ApplyConfiguration");
    assert_eq!(applies.len(), 1, "{applies:?}");
    assert_eq!(applies[0]["mode"], "AUTO");
    assert_eq!(applies[0]["dry_run"], false);
    // The log names the certificate the first probe saw, which pinned the rest.
    let pin = spki_fingerprint(dir.path(), "node");
    assert!(
        stderr.contains(&format!(
            "certificate SPKI {pin} (seen by the first probe, pinned for the rest of the run)"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("mode NO_REBOOT: Applied configuration without a reboot"),
        "{stderr}"
    );
    // Recorded only once mutual TLS with our talosconfig succeeded: the node's Version was
    // answered over it (configured, not in maintenance).
    assert!(
        stderr.contains("left maintenance mode, and is ours"),
        "{stderr}"
    );
    assert!(
        node.calls("Version")
            .iter()
            .any(|call| call["maintenance"] == false),
        "{:?}",
        node.calls("Version")
    );
    assert!(
        stderr.contains("config applied: edge-worker-1;"),
        "{stderr}"
    );

    // Re-run with the inventory it wrote: skipped without a call.
    let versions = node.calls("Version").len();
    let again = tool(dir.path(), node.port, &stdout, &[]);
    let stdout_again = testkit::process::success_stdout(&again);
    assert_eq!(stdout_again, stdout);
    assert_eq!(node.calls("Version").len(), versions);
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("skipped (same config already applied): edge-worker-1")
    );

    // A changed config on a node that is configured, and ours: reported, not sent, record kept.
    let changed_config = worker.replacen("debug: false", "debug: true", 1);
    assert_ne!(changed_config, worker);
    fs::write(dir.path().join(WORKER_CONFIG), changed_config).unwrap();
    let changed = tool(dir.path(), node.port, &stdout, &[]);
    let stdout_changed = testkit::process::success_stdout(&changed);
    let stderr_changed = String::from_utf8_lossy(&changed.stderr);
    assert!(
        stderr_changed.contains("configured with sha256:") && stderr_changed.contains("and ours"),
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
fn a_node_that_never_listens_fails_naming_it_when_the_bound_passes() {
    let Some((dir, api)) = setup("a_node_that_never_listens") else {
        return;
    };
    let node = start(&api, dir.path(), &["--listen-after", "100"]);
    let out = tool(
        dir.path(),
        node.port,
        &inventory("{}"),
        &["--boot-tries", "3", "--boot-interval-seconds", "0"],
    );
    assert_failed(
        &out,
        &[
            "edge-worker-1",
            "its Talos API did not answer after 3 checks",
            "nothing sent",
        ],
    );
}

#[test]
fn an_older_talos_whose_version_is_unimplemented_in_maintenance_is_recognised_and_pinned() {
    let Some((dir, api)) = setup("an_older_talos") else {
        return;
    };
    let node = start(&api, dir.path(), &["--talos", "v1.11"]);
    let pin = spki_fingerprint(dir.path(), "node");
    let out = tool(
        dir.path(),
        node.port,
        &inventory("{}"),
        &["--cert-fingerprint", &pin],
    );
    testkit::process::success_stdout(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "certificate SPKI {pin} (pinned by --cert-fingerprint)"
        )),
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
fn another_certificate_at_apply_than_at_the_probe_gets_nothing() {
    let Some((dir, api)) = setup("another_certificate_at_apply") else {
        return;
    };
    // Once the probe is answered, another host (or a rebooted node) answers in its place.
    let mitm = |name: &str| dir.path().join(name).display().to_string();
    let (cert, key) = (mitm("mitm.crt"), mitm("mitm.key"));
    let (node, out) = first_run(
        &api,
        dir.path(),
        &["--swap-cert", &cert, "--swap-key", &key],
    );
    assert_failed(
        &out,
        &[
            "edge-worker-1",
            &format!(
                "certificate SPKI fingerprint {} is not the pinned one",
                spki_fingerprint(dir.path(), "mitm")
            ),
        ],
    );
    assert_eq!(node.calls("Version").len(), 1);
    assert!(
        node.calls("ApplyConfiguration").is_empty(),
        "the config was sent"
    );
    assert!(!node.records.join("applied-1.yaml").exists());
}

#[test]
fn a_configured_node_is_ours_only_with_our_client_certificate_and_machine_ca() {
    let Some((dir, api)) = setup("a_configured_node_is_ours_only") else {
        return;
    };
    // Configured by us (an earlier run, or user-data): reported, left alone, nothing sent.
    let (ours, out) = first_run(&api, dir.path(), &["--start", "configured"]);
    let stdout = testkit::process::success_stdout(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("already configured, and ours (mutual TLS with our talosconfig)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("configured earlier and ours (use talosctl): edge-worker-1"),
        "{stderr}"
    );
    let written: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(written["nodes"][0]["steps"].get("config_applied").is_none());
    assert!(ours.calls("ApplyConfiguration").is_empty());
    assert_eq!(ours.calls("Version").len(), 1, "answered over mutual TLS");

    // Configured by someone else (another CA for its certificate and its clients): failed.
    let file = |name: &str| dir.path().join(name).display().to_string();
    let (foreign, out) = first_run(
        &api,
        dir.path(),
        &[
            "--start",
            "configured",
            "--configured-cert",
            &file("foreign.crt"),
            "--configured-key",
            &file("foreign.key"),
            "--client-ca",
            &file("foreign-ca.crt"),
        ],
    );
    assert_failed(
        &out,
        &[
            "edge-worker-1",
            "configured, but not as a node of this cluster",
            "edge-par",
            "not one of our machine CA's",
        ],
    );
    assert!(foreign.calls("ApplyConfiguration").is_empty());
    assert!(foreign.calls("Version").is_empty());
}

#[test]
fn a_config_the_node_refuses_fails_the_node_and_records_nothing() {
    let Some((dir, api)) = setup("a_config_the_node_refuses") else {
        return;
    };
    fs::write(dir.path().join(WORKER_CONFIG), "machine: [unclosed\n").unwrap();
    let (node, out) = first_run(&api, dir.path(), &[]);
    assert_failed(&out, &["edge-worker-1", "InvalidArgument", "decode error"]);
    assert!(!node.records.join("applied-1.yaml").exists());
}

/// Talos validates what it is given before taking it (configloader, then the config's own
/// Validate for the platform's mode: v1alpha1_server.go, ApplyConfiguration, at v1.13.9): a
/// config that parses but lacks what a metal node needs is refused, and the node stays as it was.
#[test]
fn a_config_talos_validation_refuses_fails_the_node_and_records_nothing() {
    let Some((dir, api)) = setup("a_config_talos_validation_refuses") else {
        return;
    };
    fs::write(
        dir.path().join(WORKER_CONFIG),
        "version: v1alpha1\nmachine:\n  type: worker\n  token: t\ncluster:\n  clusterName: edge-par\n",
    )
    .unwrap();
    let (node, out) = first_run(&api, dir.path(), &[]);
    assert_failed(
        &out,
        &[
            "edge-worker-1",
            "InvalidArgument",
            "cluster controlplane endpoint is required",
            "install instructions are required in \"metal\" mode",
        ],
    );
    assert!(!node.records.join("applied-1.yaml").exists());
    assert!(
        node.calls("Version")
            .iter()
            .all(|c| c["maintenance"] == true)
    );
}

#[test]
fn bad_input_is_refused_before_any_connection() {
    let Some((dir, _)) = setup("bad_input_is_refused") else {
        return;
    };
    // Port 9 (discard) on loopback: nothing must even try it.
    let out = tool(dir.path(), 9, "{\"kind\":\"NodeInventory\"}", &[]);
    testkit::process::assert_refused(&out, 2, &["<stdin>", "version"]);
    fs::remove_file(dir.path().join(WORKER_CONFIG)).unwrap();
    let out = tool(dir.path(), 9, &inventory("{}"), &[]);
    testkit::process::assert_refused(
        &out,
        2,
        &[
            WORKER_CONFIG,
            "no machine config for the worker edge-worker-1",
            "make apply-infra",
        ],
    );
    assert!(out.stdout.is_empty());
    // Refused while reading the arguments, before stdin is read: nothing is written to it.
    fs::write(dir.path().join("talosconfig"), "context: x\ncontexts: {}\n").unwrap();
    let out = tool(dir.path(), 9, "", &[]);
    testkit::process::assert_refused(&out, 2, &["--talosconfig", "`x` is not in `contexts`"]);
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
request = pb.ApplyConfigurationRequest(data=open({worker:?}, "rb").read(), mode=pb.ApplyConfigurationRequest.{mode}, dry_run=True)
try:
    answer = stub.ApplyConfiguration(request, timeout=10)
    print("OK", pb.ApplyConfigurationRequest.Mode.Name(answer.messages[0].mode))
except grpc.RpcError as e:
    print(e.code().name, e.details())
"#,
        stand_ins = testkit::standin::path("").display().to_string(),
        api = api.display().to_string(),
        cert = dir.join("node.crt").display().to_string(),
        worker = dir.join(WORKER_CONFIG).display().to_string(),
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
