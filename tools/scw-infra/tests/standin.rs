//! scw-infra end to end against the Scaleway API stand-in (testkit's `scaleway_api.py`) on
//! loopback.
//!
//! Contract checked: Scaleway's OpenAPI specs (`../shared/scaleway-openapi`). The stand-in
//! refuses any request whose path, method, query or body (field names, types, enums, required
//! fields, `x-one-of` groups) the specs do not allow, and answers objects shaped like the
//! recorded traffic and valid against the specs; every test asserts that no request was refused
//! and no answer was invalid. Servers move through their real states; faults are injected on
//! demand. Every run's stdout and stderr is searched for the secret key.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use testkit::cassettes as recorded;

const SECRET: &str = "7f3c9e2a-5b1d-4e8f-a6c2-0d9b8e7f6a5c";
const ACCESS: &str = "SCWTESTTESTTESTTESTT";
const PROJECT: &str = "11111111-1111-4111-8111-111111111111";
const CLUSTER_TAG: &str = "edgepop-cluster=edge-par";
const PUBKEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGVkZ2Vwb3AtdGVzdC1rZXktbm90LWEtcmVhbC1vbmU test@edgepop";

struct StandIn {
    // Killed on drop, before `dir` is removed (fields drop in order).
    scaleway: testkit::standin::StandIn,
    s3: testkit::standin::StandIn,
    dir: tempfile::TempDir,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl StandIn {
    /// `None` (after skip_or_fail) when python3 or the shared specs are missing.
    fn start(test: &str, dns_zone: bool) -> Option<StandIn> {
        if !testkit::workspace::python3(test) {
            return None;
        }
        let shared = testkit::workspace::shared_dir(test)?;
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let mut cmd = testkit::standin::scaleway_api(
            &shared,
            &port_file,
            &dir.path().join("requests.jsonl"),
            SECRET,
            PROJECT,
        );
        if dns_zone {
            cmd.args(["--dns-zone", "example.com"]);
        }
        cmd.arg("--s3-root").arg(dir.path().join("s3"));
        // The Scaleway stand-in serves the image bucket's objects from the S3 stand-in's root.
        let scaleway = testkit::standin::StandIn::start(&mut cmd, &port_file);
        let s3 = testkit::standin::s3(dir.path(), ACCESS, SECRET);
        std::fs::write(dir.path().join("id.pub"), format!("{PUBKEY}\n")).unwrap();
        let mut config: Value = serde_json::from_slice(
            &std::fs::read(root().join("config/infra.example.json")).unwrap(),
        )
        .unwrap();
        config["ssh_public_key_path"] = json!(dir.path().join("id.pub"));
        std::fs::write(dir.path().join("infra.json"), config.to_string()).unwrap();
        let stand_in = StandIn { scaleway, s3, dir };
        // The Talos image an earlier run imported (the stand-in has none of its own).
        stand_in.seed(json!({"kind": "image", "version": "v1.13.11"}));
        Some(stand_in)
    }

    fn control(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(true)
            .build()
            .into();
        let url = format!("{}/__standin/{path}", self.scaleway.url());
        let mut resp = match body {
            Some(b) => agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(b.to_string())
                .unwrap(),
            None => {
                assert_eq!(method, "GET");
                agent.get(&url).call().unwrap()
            }
        };
        serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap()
    }

    fn state(&self) -> Value {
        self.control("GET", "state", None)
    }

    fn seed(&self, body: Value) -> Value {
        self.control("POST", "seed", Some(body))
    }

    fn faults(&self, faults: Value) {
        self.control("POST", "faults", Some(faults));
    }

    /// The JSON lines a stand-in logged to `name` in the test's directory.
    fn read_log(&self, name: &str) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join(name))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The JSON lines a stand-in logged to `name`, and forgets them.
    fn take_log(&self, name: &str) -> Vec<Value> {
        let lines = self.read_log(name);
        std::fs::write(self.dir.path().join(name), "").unwrap();
        lines
    }

    /// The Scaleway requests received so far (and forgets them); asserts none was refused by
    /// the specs and no answer was invalid.
    fn take_requests(&self) -> Vec<Value> {
        let requests = self.take_log("requests.jsonl");
        assert_signatures_accepted(&self.read_log("s3.jsonl"));
        for r in &requests {
            assert!(r.get("refused").is_none(), "the specs refuse: {r}");
            assert!(
                r.get("standin_bug").is_none(),
                "invalid stand-in answer: {r}"
            );
            assert_eq!(r["token"], true, "sent without the token: {r}");
        }
        requests
    }

    fn scw(&self, args: &[&str]) -> Output {
        self.scw_env(args, SECRET)
    }

    /// scw-infra with an empty environment but for a home in the test's directory and the two
    /// stand-ins' endpoints.
    fn scw_infra(&self) -> Command {
        self.command(Path::new(env!("CARGO_BIN_EXE_scw-infra")))
    }

    /// `program` with that environment.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("HOME", self.dir.path())
            .env("SCW_API_URL", self.scaleway.url())
            .env("SCW_S3_ENDPOINT", self.s3.url())
            .stdin(Stdio::null());
        cmd
    }

    /// Runs scw-infra with only the given credentials in its environment (no profile file),
    /// and checks that the secret shows in none of its output.
    fn scw_env(&self, args: &[&str], secret: &str) -> Output {
        let config = self.dir.path().join("infra.json");
        let out = self
            .scw_infra()
            .args(args)
            .arg("--config")
            .arg(&config)
            .args(["--poll-seconds", "0", "--retry-base-ms", "1"])
            .env(
                "SCW_CONFIG_PATH",
                self.dir.path().join("no-such-config.yaml"),
            )
            .env("SCW_ACCESS_KEY", ACCESS)
            .env("SCW_SECRET_KEY", secret)
            .env("SCW_DEFAULT_PROJECT_ID", PROJECT)
            .env("EDGEPOP_LOG", "debug")
            .output()
            .unwrap();
        assert_not_shown(&out, &[secret]);
        out
    }
}

/// Checks that none of `secrets` shows in the run's stdout or stderr.
fn assert_not_shown(out: &Output, secrets: &[&str]) {
    for (name, stream) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let text = String::from_utf8_lossy(stream);
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "the secret key is in {name}:\n{text}"
            );
        }
    }
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn mutations(requests: &[Value]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r["method"] != "GET")
        .map(|r| {
            format!(
                "{} {}",
                r["method"].as_str().unwrap(),
                r["path"].as_str().unwrap()
            )
        })
        .collect()
}

fn tagged(objects: &Value) -> Vec<&Value> {
    objects
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| {
            o["tags"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == CLUSTER_TAG))
        })
        .collect()
}

const APPLY: &[&str] = &["apply", "--talos-version", "v1.13.11"];

/// What destroy removes of a cluster that `APPLY` made (with its DNS zone at Scaleway).
const DESTROYED: [&str; 7] = [
    "dns-record",
    "instance-server",
    "volume",
    "elastic-metal-server",
    "flexible-ip",
    "security-group",
    "ssh-key",
];

#[test]
fn a_fresh_apply_builds_the_cluster_and_a_second_one_only_reads() {
    let Some(s) = StandIn::start("fresh_apply", true) else {
        return;
    };
    let first = ok(&s.scw(APPLY));
    let requests = s.take_requests();
    let writes = mutations(&requests);
    let inventory: Value = serde_json::from_str(first.trim()).unwrap();
    assert_eq!(inventory["kind"], "NodeInventory");
    assert_eq!(
        inventory["cluster_endpoint"],
        "https://api.example.com:6443"
    );
    let nodes = inventory["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4, "{inventory}");
    let cps: Vec<&Value> = nodes
        .iter()
        .filter(|n| n["role"] == "controlplane")
        .collect();
    assert_eq!(cps.len(), 3);
    assert!(
        cps.iter()
            .all(|n| n["kind"] == "instance" && n["public_ipv4"].is_string())
    );
    let worker = nodes.iter().find(|n| n["role"] == "worker").unwrap();
    assert_eq!(worker["kind"], "elastic-metal");
    assert!(worker["public_ipv4"].is_string() && worker["public_ipv6"].is_string());

    // What the API now holds.
    let state = s.state();
    assert_eq!(tagged(&state["servers"]).len(), 3);
    assert!(
        tagged(&state["servers"])
            .iter()
            .all(|v| v["state"] == "running")
    );
    assert_eq!(tagged(&state["ips"]).len(), 3);
    assert!(
        tagged(&state["ips"])
            .iter()
            .all(|v| v["state"] == "attached")
    );
    assert_eq!(tagged(&state["bm_servers"]).len(), 1);
    let group = &tagged(&state["security_groups"])[0];
    assert_eq!(group["inbound_default_policy"], "drop");
    let rules = state["rules"][group["id"].as_str().unwrap()]
        .as_array()
        .unwrap();
    let inbound: Vec<&Value> = rules
        .iter()
        .filter(|r| r["direction"] == "inbound")
        .collect();
    // 2 admin rules + 5 per node for 4 nodes with IPv4, plus the worker's IPv6.
    assert_eq!(inbound.len(), 2 + 5 * 5, "{inbound:?}");
    assert!(
        inbound
            .iter()
            .any(|r| r["ip_range"] == "198.51.100.0/24" && r["dest_port_from"] == 50000)
    );
    assert!(
        inbound
            .iter()
            .any(|r| r["protocol"] == "UDP" && r["dest_port_from"] == 51871)
    );
    let records = state["records"]["example.com"].as_array().unwrap();
    assert_eq!(records.iter().filter(|r| r["name"] == "api").count(), 3);
    assert!(
        records
            .iter()
            .any(|r| r["name"] == "www" && r["type"] == "AAAA")
    );
    assert_eq!(state["ssh_keys"][0]["public_key"], PUBKEY);
    // The key registered for the worker's rescue system is named by its IAM id.
    assert_eq!(
        inventory["ssh_key_ids"],
        json!([state["ssh_keys"][0]["id"]])
    );
    assert_eq!(state["namespaces"][0]["is_public"], true);

    let second = ok(&s.scw(APPLY));
    let found: Value = serde_json::from_str(second.trim()).unwrap();
    assert_eq!(
        found["ssh_key_ids"], inventory["ssh_key_ids"],
        "found again"
    );
    let again = s.take_requests();
    assert_eq!(
        mutations(&again),
        Vec::<String>::new(),
        "a no-op apply must only read"
    );
    assert_eq!(second, first, "the same inventory");
    eprintln!(
        "API calls: fresh apply {} ({} mutating), no-op apply {} ({} mutating)",
        requests.len(),
        writes.len(),
        again.len(),
        mutations(&again).len()
    );

    // power off, then on: real states, bounded waits.
    ok(&s.scw(&["power", "off"]));
    let state = s.state();
    assert!(
        tagged(&state["servers"])
            .iter()
            .all(|v| v["state"] == "stopped"),
        "{state}"
    );
    assert!(
        tagged(&state["bm_servers"])
            .iter()
            .all(|v| v["status"] == "stopped")
    );
    ok(&s.scw(&["power", "on"]));
    let state = s.state();
    assert!(
        tagged(&state["servers"])
            .iter()
            .all(|v| v["state"] == "running")
    );
    assert!(
        tagged(&state["bm_servers"])
            .iter()
            .all(|v| v["status"] == "ready")
    );
    s.take_requests();
}

/// The JSON lines of a run's stdout.
fn lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The steps of a printed plan of this kind.
fn steps<'a>(plan: &'a [Value], kind: &str) -> Vec<&'a Value> {
    plan.iter().filter(|p| p["step"] == kind).collect()
}

#[test]
fn a_dry_run_makes_no_mutating_call_and_the_run_makes_the_planned_ones() {
    let Some(s) = StandIn::start("dry_run", true) else {
        return;
    };
    let planned = lines(&ok(&s.scw(&[
        "apply",
        "--talos-version",
        "v1.13.11",
        "--dry-run",
    ])));
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    let group = steps(&planned, "create-security-group");
    assert_eq!(group.len(), 1, "{planned:?}");
    let ips = steps(&planned, "create-flexible-ip");
    let instances = steps(&planned, "create-instance");
    assert_eq!((ips.len(), instances.len()), (3, 3), "{planned:?}");
    // A resource made by the plan is named by the step that makes it, never by a placeholder.
    for instance in &instances {
        assert_eq!(instance["security_group"]["created_by_step"], group[0]["n"]);
        let ip = ips
            .iter()
            .find(|ip| ip["n"] == instance["ip"]["created_by_step"])
            .unwrap_or_else(|| panic!("{instance}"));
        assert_eq!(ip["node"], instance["node"]);
        assert!(
            instance["image"].is_string(),
            "the seeded image: {instance}"
        );
    }
    assert_eq!(steps(&planned, "order-worker").len(), 1);
    assert_eq!(steps(&planned, "register-ssh-key").len(), 1);
    let rules = steps(&planned, "set-firewall-rules");
    assert_eq!(rules.len(), 1);
    // The addresses that do not exist yet are named by their node.
    assert!(
        rules[0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["from"]["address_of"]["worker"] == "edge-worker-1"
                && r["from"]["family"] == "ipv6"),
        "{}",
        rules[0]
    );

    // The run makes the planned calls: one creation per creating step.
    ok(&s.scw(APPLY));
    let writes = mutations(&s.take_requests());
    let sent = |call: &str| writes.iter().filter(|w| *w == call).count();
    assert_eq!(sent("POST /instance/v1/zones/fr-par-1/security_groups"), 1);
    assert_eq!(sent("POST /instance/v1/zones/fr-par-1/ips"), ips.len());
    assert_eq!(
        sent("POST /instance/v1/zones/fr-par-1/servers"),
        instances.len()
    );
    assert_eq!(sent("POST /baremetal/v1/zones/fr-par-1/servers"), 1);
    assert_eq!(sent("POST /iam/v1alpha1/ssh-keys"), 1);
    assert_eq!(
        sent(
            "PUT /instance/v1/zones/fr-par-1/security_groups/{}/rules"
                .replace(
                    "{}",
                    tagged(&s.state()["security_groups"])[0]["id"]
                        .as_str()
                        .unwrap()
                )
                .as_str()
        ),
        1
    );

    // Converged: an empty plan.
    let again = ok(&s.scw(&["apply", "--talos-version", "v1.13.11", "--dry-run"]));
    assert_eq!(again, "", "nothing left to do");
    let out = lines(&ok(&s.scw(&["destroy", "--dry-run"])));
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    let servers: Vec<&Value> = out
        .iter()
        .filter(|r| r["removed"] == "instance-server")
        .collect();
    assert_eq!(servers.len(), 3, "{out:?}");
    assert_eq!(
        tagged(&s.state()["servers"]).len(),
        3,
        "nothing was deleted"
    );
    // power, planned only.
    let off = lines(&ok(&s.scw(&["power", "off", "--dry-run"])));
    assert_eq!(steps(&off, "power-instance").len(), 3, "{off:?}");
    assert_eq!(steps(&off, "power-worker").len(), 1, "{off:?}");
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
}

#[test]
fn a_half_built_or_interrupted_cluster_converges() {
    let Some(s) = StandIn::start("half_built", false) else {
        return;
    };
    // A previous run made cp-1's IP and cp-1 (stopped, IP not attached), then died.
    let ip = s.seed(json!({"kind": "ip", "tags": [CLUSTER_TAG, "edgepop-role=controlplane", "edgepop-node=edge-par-cp-1"]}));
    s.seed(json!({"kind": "instance_server", "name": "edge-par-cp-1",
                  "tags": [CLUSTER_TAG, "edgepop-role=controlplane", "edgepop-node=edge-par-cp-1"]}));
    // This run is cut while creating the second server: the POST is not repeated (it may have
    // been done), the run fails, and the next one converges.
    s.faults(json!([{"method": "POST", "path": "/servers$", "kind": "cut", "count": 1}]));
    let out = s.scw(APPLY);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.take_requests();
    ok(&s.scw(APPLY));
    s.take_requests();
    let state = s.state();
    let servers = tagged(&state["servers"]);
    assert_eq!(servers.len(), 3, "no duplicate: {servers:?}");
    assert!(servers.iter().all(|v| v["state"] == "running"));
    // The seeded cp-1 was in no group: it was moved into ours.
    let group = tagged(&state["security_groups"])[0]["id"].clone();
    assert!(
        servers.iter().all(|v| v["security_group"]["id"] == group),
        "{servers:?}"
    );
    let ips = tagged(&state["ips"]);
    assert_eq!(ips.len(), 3);
    assert!(
        ips.iter()
            .any(|i| i["id"] == ip["id"] && i["server"]["name"] == "edge-par-cp-1")
    );
    assert!(ips.iter().all(|i| i["state"] == "attached"));
    // Converged: nothing left to do.
    ok(&s.scw(APPLY));
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
}

#[test]
fn a_control_plane_given_its_flexible_ip_is_let_in_by_that_address() {
    let Some(s) = StandIn::start("new_flexible_ip", false) else {
        return;
    };
    // cp-1 exists with an address that is not its flexible IP (none is tagged for it yet).
    let other = s.seed(json!({"kind": "ip"}));
    s.seed(json!({"kind": "instance_server", "name": "edge-par-cp-1", "public_ips": [other["id"]],
                  "tags": [CLUSTER_TAG, "edgepop-role=controlplane", "edgepop-node=edge-par-cp-1"]}));
    ok(&s.scw(APPLY));
    s.take_requests();
    let state = s.state();
    let ip = tagged(&state["ips"])
        .into_iter()
        .find(|i| {
            i["tags"]
                .as_array()
                .unwrap()
                .contains(&json!("edgepop-node=edge-par-cp-1"))
        })
        .unwrap()
        .clone();
    let group = &tagged(&state["security_groups"])[0];
    let ranges: Vec<&str> = state["rules"][group["id"].as_str().unwrap()]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["direction"] == "inbound")
        .map(|r| r["ip_range"].as_str().unwrap())
        .collect();
    let address = |ip: &Value| format!("{}/32", ip["address"].as_str().unwrap());
    assert!(ranges.contains(&address(&ip).as_str()), "{ranges:?}");
    assert!(!ranges.contains(&address(&other).as_str()), "{ranges:?}");
}

#[test]
fn destroy_removes_everything_tagged_and_nothing_else() {
    let Some(s) = StandIn::start("destroy", true) else {
        return;
    };
    ok(&s.scw(APPLY));
    // Look-alikes that are not ours: same names, no tags (or another key).
    let foreign_server = s.seed(json!({"kind": "instance_server", "name": "edge-par-cp-1"}));
    let foreign_group = s.seed(json!({"kind": "security_group", "name": "edge-par-controlplane"}));
    let foreign_ip = s.seed(json!({"kind": "ip"}));
    let foreign_key = s.seed(json!({"kind": "ssh_key", "name": "edgepop-edge-par",
                                    "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOTHER other"}));
    let foreign_record = s.seed(
        json!({"kind": "record", "dns_zone": "example.com", "name": "www",
                                       "type": "AAAA", "data": "2001:db8::99"}),
    );
    s.take_requests();

    // Without --yes and without a terminal: refused, nothing deleted.
    let out = s.scw(&["destroy"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--yes"));
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());

    let out = ok(&s.scw(&["destroy", "--yes"]));
    let removed: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = removed
        .iter()
        .map(|r| r["removed"].as_str().unwrap())
        .collect();
    for kind in DESTROYED {
        assert!(kinds.contains(&kind), "{kind} not removed: {kinds:?}");
    }
    // Dependency order: records, servers, IPs, group, key.
    let pos = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
    assert!(pos("dns-record") < pos("instance-server"));
    assert!(pos("instance-server") < pos("flexible-ip"));
    assert!(pos("flexible-ip") < pos("security-group"));
    let writes = mutations(&s.take_requests());
    for id in [
        &foreign_server["id"],
        &foreign_group["id"],
        &foreign_ip["id"],
        &foreign_key["id"],
    ] {
        let id = id.as_str().unwrap();
        assert!(
            !writes.iter().any(|w| w.contains(id)),
            "touched {id}: {writes:?}"
        );
    }

    let state = s.state();
    for kind in ["servers", "ips", "security_groups", "bm_servers"] {
        assert_eq!(
            tagged(&state[kind]).len(),
            0,
            "{kind} left: {}",
            state[kind]
        );
    }
    assert_eq!(state["servers"][0]["id"], foreign_server["id"]);
    let kept = |kind: &str, object: &Value| {
        state[kind]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["id"] == object["id"])
    };
    assert!(kept("security_groups", &foreign_group), "{state}");
    assert!(kept("ips", &foreign_ip), "{state}");
    assert_eq!(state["ssh_keys"].as_array().unwrap().len(), 1);
    assert_eq!(state["ssh_keys"][0]["id"], foreign_key["id"]);
    let records = state["records"]["example.com"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["id"], foreign_record["id"]);
    // Only the foreign server's own root volume is left.
    assert_eq!(state["volumes"].as_array().unwrap().len(), 1);

    // A second destroy finds nothing.
    let out = ok(&s.scw(&["destroy", "--yes"]));
    assert_eq!(out, "");
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
}

/// What one deleting request removed, as `(kind, id)`: every mutation destroy sends must be one
/// of these.
fn deletion(request: &Value) -> (String, String) {
    let method = request["method"].as_str().unwrap();
    let path = request["path"].as_str().unwrap();
    let last = path.rsplit('/').next().unwrap().to_owned();
    let segments: Vec<&str> = path.split('/').collect();
    let kind = match (method, segments.as_slice()) {
        ("POST", [.., "servers", id, "action"]) => {
            assert_eq!(request["body"]["action"], "terminate", "{request}");
            return ("instance-server".into(), (*id).to_owned());
        }
        ("DELETE", ["", "instance", _, _, _, "servers", _]) => "instance-server",
        ("DELETE", ["", "instance", _, _, _, "volumes", _]) => "volume",
        ("DELETE", ["", "block", _, _, _, "volumes", _]) => "volume",
        ("DELETE", ["", "baremetal", _, _, _, "servers", _]) => "elastic-metal-server",
        ("DELETE", ["", "instance", _, _, _, "images", _]) => "image",
        ("DELETE", ["", "block", _, _, _, "snapshots", _]) => "snapshot",
        ("DELETE", ["", "instance", _, _, _, "ips", _]) => "flexible-ip",
        ("DELETE", ["", "instance", _, _, _, "security_groups", _]) => "security-group",
        ("DELETE", ["", "iam", _, "ssh-keys", _]) => "ssh-key",
        other => panic!("destroy sent {other:?}: {request}"),
    };
    (kind.to_owned(), last)
}

/// The DNS records a PATCH of the Domain API deleted, as `(kind, id)`.
fn dns_deletions(request: &Value) -> Vec<(String, String)> {
    request["body"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let id = c["delete"]["id"].as_str().unwrap_or_else(|| panic!("{c}"));
            ("dns-record".to_owned(), id.to_owned())
        })
        .collect()
}

/// `(kind, id)` of each line of the question: `  <kind> <name> (<id>)[, terminated]`.
fn question_lines(terminal: &str) -> Vec<(String, String)> {
    terminal
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| l.starts_with("  ") && l.trim_start().contains(" ("))
        .map(|l| {
            let l = l.trim();
            let l = l
                .strip_suffix(", terminated")
                .or_else(|| l.strip_suffix(", deleted"))
                .unwrap_or(l);
            let (kind, rest) = l.split_once(' ').unwrap();
            let (_, id) = rest.rsplit_once(" (").unwrap();
            (kind.to_owned(), id.trim_end_matches(')').to_owned())
        })
        .collect()
}

fn kind_and_id(lines: &[Value]) -> Vec<(String, String)> {
    lines
        .iter()
        .map(|l| {
            (
                l["removed"].as_str().unwrap().to_owned(),
                l["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

impl StandIn {
    /// scw-infra as a person at a terminal runs it: under a pseudo-terminal (util-linux
    /// `script`), typing `answer` to its question; returns what the terminal showed (stdout and
    /// stderr together) and the exit code.
    fn scw_at_terminal(&self, args: &[&str], answer: &str) -> Option<(String, Option<i32>)> {
        let Some(script) = testkit::process::which("script") else {
            testkit::skip_or_fail("destroy_prompt", "util-linux script (a pseudo-terminal)");
            return None;
        };
        let config = self.dir.path().join("infra.json");
        let mut command = vec![env!("CARGO_BIN_EXE_scw-infra").to_owned()];
        command.extend(args.iter().map(|a| (*a).to_owned()));
        command.extend([
            "--config".to_owned(),
            config.to_str().unwrap().to_owned(),
            "--poll-seconds".into(),
            "0".into(),
            "--retry-base-ms".into(),
            "1".into(),
        ]);
        // Paths and words of our own: quoting each in '' is enough for the shell script runs.
        let line: Vec<String> = command.iter().map(|a| format!("'{a}'")).collect();
        let out = testkit::process::run_with_stdin(
            self.command(&script)
                .args([
                    "-q",
                    "-e",
                    "-E",
                    "never",
                    "-c",
                    &line.join(" "),
                    "/dev/null",
                ])
                .env(
                    "SCW_CONFIG_PATH",
                    self.dir.path().join("no-such-config.yaml"),
                )
                .env("SCW_ACCESS_KEY", ACCESS)
                .env("SCW_SECRET_KEY", SECRET)
                .env("SCW_DEFAULT_PROJECT_ID", PROJECT)
                .env("EDGEPOP_LOG", "debug")
                .env("SHELL", "/bin/sh"),
            format!("{answer}\n").as_bytes(),
        );
        assert_not_shown(&out, &[SECRET]);
        Some((
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.status.code(),
        ))
    }
}

#[test]
fn destroy_shows_the_plan_it_then_executes_exactly() {
    let Some(s) = StandIn::start("destroy_prompt", true) else {
        return;
    };
    ok(&s.scw(APPLY));
    s.take_requests();

    // The plan, as --dry-run prints it.
    let planned = lines(&ok(&s.scw(&["destroy", "--dry-run"])));
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    let plan = kind_and_id(&planned);
    let kinds: std::collections::BTreeSet<&str> = plan.iter().map(|(k, _)| k.as_str()).collect();
    for kind in DESTROYED {
        assert!(kinds.contains(kind), "{kind} not planned: {plan:?}");
    }

    // Asked at a terminal and refused: the same list is shown, and nothing is deleted.
    let Some((terminal, code)) = s.scw_at_terminal(&["destroy"], "no") else {
        return;
    };
    assert_eq!(code, Some(1), "{terminal}");
    assert_eq!(question_lines(&terminal), plan, "{terminal}");
    assert!(terminal.contains("nothing was deleted"), "{terminal}");
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());

    // Answered with the cluster's name: the question shows the plan again, the run prints the
    // plan's lines as it goes, and the API received exactly those deletions.
    let (terminal, code) = s.scw_at_terminal(&["destroy"], "edge-par").unwrap();
    assert_eq!(code, Some(0), "{terminal}");
    assert_eq!(question_lines(&terminal), plan, "{terminal}");
    let printed: Vec<Value> = terminal
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        printed, planned,
        "the run prints the plan's lines, in order"
    );
    let mut deleted = Vec::new();
    for request in s.take_requests() {
        if request["method"] == "GET" {
            continue;
        }
        if request["method"] == "PATCH" && request["path"].as_str().unwrap().contains("/records") {
            deleted.extend(dns_deletions(&request));
        } else {
            deleted.push(deletion(&request));
        }
    }
    let mut deleted_sorted = deleted.clone();
    deleted_sorted.sort();
    let mut plan_sorted = plan.clone();
    plan_sorted.sort();
    assert_eq!(deleted_sorted, plan_sorted, "deletions made: {deleted:?}");
    for kind in [
        "servers",
        "ips",
        "security_groups",
        "bm_servers",
        "ssh_keys",
    ] {
        assert_eq!(tagged(&s.state()[kind]).len(), 0, "{kind}");
    }
}

#[test]
fn faults_are_retried_and_the_retries_are_bounded() {
    let Some(s) = StandIn::start("faults", true) else {
        return;
    };
    s.faults(json!([
        {"method": "GET", "path": "/security_groups$", "kind": "status", "status": 429, "retry_after": "0", "count": 2},
        {"method": "POST", "path": "/ips$", "kind": "status", "status": 503, "count": 2},
        {"method": "GET", "path": "/offers$", "kind": "cut", "count": 1},
        {"method": "GET", "path": "/ssh-keys$", "kind": "slow", "seconds": 0.2, "count": 1},
    ]));
    let out = s.scw(APPLY);
    ok(&out);
    let requests = s.take_requests();
    let faults: Vec<&str> = requests
        .iter()
        .filter_map(|r| r["fault"].as_str())
        .collect();
    assert_eq!(faults.len(), 6, "{faults:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("HTTP 429; retrying"));

    // A fault that does not stop: 6 attempts in all, then exit 1 with the status.
    s.faults(json!([{"method": "GET", "path": "/instance/v1/zones/fr-par-1/servers$", "kind": "status", "status": 503, "count": 100}]));
    let out = s.scw(APPLY);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("HTTP 503"), "{stderr}");
    let attempts = s
        .take_requests()
        .iter()
        .filter(|r| r["path"] == "/instance/v1/zones/fr-par-1/servers" && r["method"] == "GET")
        .count();
    assert_eq!(attempts, 6);
}

#[test]
fn a_4xx_shows_scaleway_s_error_and_the_secret_never_shows() {
    let Some(s) = StandIn::start("secrets", false) else {
        return;
    };
    // A wrong key: the API's 401 body is shown; the key is not (checked by scw_env).
    let wrong = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    let out = s.scw_env(APPLY, wrong);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("HTTP 401") && stderr.contains("denied_authentication"),
        "{stderr}"
    );
    // The stand-in refused it for its token, as it should: forget that request.
    std::fs::write(s.dir.path().join("requests.jsonl"), "").unwrap();
    // Every subcommand, at debug level, with the right key.
    ok(&s.scw(APPLY));
    ok(&s.scw(&["power", "off"]));
    ok(&s.scw(&["destroy", "--dry-run"]));
    let out = Command::new(env!("CARGO_BIN_EXE_scw-infra"))
        .arg("credentials")
        .env_clear()
        .env("SCW_CONFIG_PATH", s.dir.path().join("none.yaml"))
        .env("SCW_ACCESS_KEY", ACCESS)
        .env("SCW_SECRET_KEY", SECRET)
        .env("SCW_DEFAULT_PROJECT_ID", PROJECT)
        .output()
        .unwrap();
    let stdout = ok(&out);
    assert!(stdout.contains(ACCESS) && !stdout.contains(SECRET));
    s.take_requests();
}

#[test]
fn credentials_come_from_the_active_profile_and_the_environment_wins() {
    let Some(s) = StandIn::start("profiles", false) else {
        return;
    };
    // The file's root keys are wrong; the active profile `work` has the right secret; SCW_PROFILE
    // names another profile whose secret is wrong again.
    let config = s.dir.path().join("scw.yaml");
    std::fs::write(
        &config,
        format!(
            "access_key: {ACCESS}\nsecret_key: 00000000-0000-4000-8000-000000000000\n\
             default_project_id: {PROJECT}\napi_url: http://127.0.0.1:9\nactive_profile: work\n\
             profiles:\n  work:\n    secret_key: {SECRET}\n  other:\n    secret_key: 11111111-0000-4000-8000-000000000000\n"
        ),
    )
    .unwrap();
    let run = |extra: &[(&str, &str)], args: &[&str]| {
        let mut cmd = s.scw_infra();
        cmd.args(args).env("SCW_CONFIG_PATH", &config);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_not_shown(&out, &[SECRET, "00000000-0000-4000"]);
        out
    };
    let out = ok(&run(&[], &["credentials"]));
    assert!(
        out.contains("profile `work`") && out.contains(&s.scaleway.url()),
        "{out}"
    );
    // The profile's secret is the one the API accepts (the root's is not); SCW_API_URL from the
    // environment wins over the root's api_url.
    let config_file = s.dir.path().join("infra.json");
    let power = [
        "power",
        "off",
        "--config",
        config_file.to_str().unwrap(),
        "--poll-seconds",
        "0",
    ];
    let out = run(&[], &power);
    // No server exists yet: the API answered (authenticated), and the tool says so.
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run apply first"));
    // SCW_PROFILE wins over active_profile: its secret is refused by the API.
    let out = run(&[("SCW_PROFILE", "other")], &power);
    assert!(String::from_utf8_lossy(&out.stderr).contains("HTTP 401"));
    // SCW_SECRET_KEY wins over every profile.
    let out = run(
        &[("SCW_PROFILE", "other"), ("SCW_SECRET_KEY", SECRET)],
        &power,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("run apply first"));
    std::fs::write(s.dir.path().join("requests.jsonl"), "").unwrap();
}

impl StandIn {
    /// The S3 requests received so far (and forgets them).
    fn take_s3(&self) -> Vec<Value> {
        let requests = self.take_log("s3.jsonl");
        assert_signatures_accepted(&requests);
        requests
    }
}

/// Checks that the S3 stand-in accepted the signature of every request it logged.
fn assert_signatures_accepted(s3_requests: &[Value]) {
    for r in s3_requests {
        assert!(
            r.get("refused").is_none(),
            "the S3 stand-in refuses the signature: {r}"
        );
    }
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_talos_image_is_imported_once_and_a_wrong_digest_is_refused() {
    let Some(s) = StandIn::start("image_import", false) else {
        return;
    };
    for program in ["zstd", "qemu-img"] {
        if !have(program) {
            testkit::skip_or_fail("image_import", program);
            return;
        }
    }
    // 12 MiB that do not compress: the QCOW2 is as big, so the upload goes in 3 parts of 5 MiB.
    let raw = s.dir.path().join("disk.raw");
    let bytes = testkit::incompressible_bytes(12 << 20, 0x9e37_79b9_7f4a_7c15);
    std::fs::write(&raw, &bytes).unwrap();
    let zst = s.dir.path().join("disk.raw.zst");
    assert!(
        Command::new("zstd")
            .arg("-q")
            .arg(&raw)
            .arg("-o")
            .arg(&zst)
            .status()
            .unwrap()
            .success()
    );
    let zst = std::fs::read(&zst).unwrap();
    let digest = scaleway::s3::sigv4::sha256_hex(&zst);
    // The Image Factory stand-in: one answer per download.
    let factory = testkit::http::Server::start(vec![
        testkit::http::Reply::ok(zst.clone()),
        testkit::http::Reply::ok(zst.clone()),
    ])
    .unwrap();
    let url = format!(
        "{}/image/schematic/v1.14.0/scaleway-amd64.raw.zst",
        factory.url
    );
    let apply = |sha: &str| {
        s.scw(&[
            "apply",
            "--talos-version",
            "v1.14.0",
            "--talos-image-url",
            &url,
            "--talos-image-sha256",
            sha,
            "--upload-part-mib",
            "5",
        ])
    };

    // The S3 stand-in does check signatures: an unsigned request and a forged one are refused.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let unsigned = agent
        .put(format!("{}/some-bucket", s.s3.url()))
        .send(&[][..])
        .unwrap();
    assert_eq!(unsigned.status().as_u16(), 403);
    let forged = agent
        .put(format!("{}/some-bucket", s.s3.url()))
        .header("x-amz-date", "20260101T000000Z")
        .header("x-amz-content-sha256", scaleway::s3::sigv4::EMPTY_SHA256)
        .header(
            "authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential={ACCESS}/20260101/fr-par/s3/aws4_request, \
                 SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={}",
                "0".repeat(64)
            ),
        )
        .send(&[][..])
        .unwrap();
    assert_eq!(forged.status().as_u16(), 403);
    std::fs::write(s.dir.path().join("s3.jsonl"), "").unwrap();

    // The dry run plans the import (the upload to the bucket, the snapshot, the image), and
    // downloads nothing; the control planes boot from the image that step makes.
    let planned = lines(&ok(&s.scw(&[
        "apply",
        "--dry-run",
        "--talos-version",
        "v1.14.0",
        "--talos-image-url",
        &url,
        "--talos-image-sha256",
        &digest,
    ])));
    let import = steps(&planned, "import-talos-image");
    assert_eq!(import.len(), 1, "{planned:?}");
    let import = import[0];
    assert_eq!(
        (&import["url"], &import["sha256"]),
        (&json!(url), &json!(digest))
    );
    assert!(
        import["bucket"]
            .as_str()
            .unwrap()
            .starts_with("edgepop-edge-par-")
            && import["key"]
                .as_str()
                .unwrap()
                .starts_with("talos/v1.14.0-"),
        "{import}"
    );
    assert_eq!(import["name"], "talos-v1.14.0");
    for tag in [
        "edgepop-talos=v1.14.0".to_owned(),
        format!("edgepop-talos-sha256={digest}"),
        CLUSTER_TAG.to_owned(),
    ] {
        assert!(
            import["tags"].as_array().unwrap().contains(&json!(tag)),
            "{import}"
        );
    }
    let instances = steps(&planned, "create-instance");
    assert_eq!(instances.len(), 3);
    assert!(
        instances
            .iter()
            .all(|i| i["image"]["created_by_step"] == import["n"]),
        "{instances:?}"
    );
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    assert_eq!(s.take_s3(), Vec::<Value>::new());

    // A download whose digest is not the pinned one: refused, nothing uploaded or imported.
    let out = apply(&"0".repeat(64));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the pinned one is") && stderr.contains("refused"),
        "{stderr}"
    );
    assert_eq!(s.take_s3(), Vec::<Value>::new());
    assert!(s.state()["snapshots"].as_array().unwrap().is_empty());
    s.take_requests();

    ok(&apply(&digest));
    let s3 = s.take_s3();
    let parts = s3
        .iter()
        .filter(|r| r["method"] == "PUT" && r["query"].as_str().unwrap().contains("partNumber"))
        .count();
    assert_eq!(parts, 3, "{s3:?}");
    let state = s.state();
    let images: Vec<&Value> = state["images"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| {
            i["tags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == "edgepop-talos=v1.14.0")
        })
        .collect();
    assert_eq!(images.len(), 1);
    let image = images[0];
    assert_eq!(image["state"], "available");
    assert!(
        image["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| *t == json!(format!("edgepop-talos-sha256={digest}")))
    );
    assert!(
        tagged(&state["servers"])
            .iter()
            .all(|v| v["image"]["id"] == image["id"])
    );
    assert_eq!(tagged(&state["snapshots"]).len(), 1);
    // The object is the QCOW2 of the disk, whole.
    let objects: Vec<_> = std::fs::read_dir(s.dir.path().join("s3"))
        .unwrap()
        .collect();
    assert_eq!(objects.len(), 1, "one bucket");
    s.take_requests();

    // Again: no download (the factory has no answer left), no upload, no mutation.
    ok(&apply(&digest));
    assert_eq!(s.take_s3(), Vec::<Value>::new());
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());

    // Destroy: the image, then the snapshot, then the object and the bucket.
    let out = ok(&s.scw(&["destroy", "--yes"]));
    let kinds: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["removed"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let pos = |k: &str| {
        kinds
            .iter()
            .position(|x| x == k)
            .unwrap_or_else(|| panic!("{k}: {kinds:?}"))
    };
    assert!(
        pos("image") < pos("snapshot")
            && pos("snapshot") < pos("object")
            && pos("object") < pos("bucket")
    );
    let state = s.state();
    assert!(state["snapshots"].as_array().unwrap().is_empty());
    assert!(tagged(&state["images"]).is_empty());
    assert_eq!(
        std::fs::read_dir(s.dir.path().join("s3")).unwrap().count(),
        0
    );
    s.take_requests();
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Where `ours` does not have the shape of the recorded samples: a key no recording has, or a
/// value of another JSON type than every recording's. A recorded `null` says nothing of the type.
fn shape_errors(ours: &Value, samples: &[&Value], at: &str, errors: &mut Vec<String>) {
    let samples: Vec<&Value> = samples.iter().copied().filter(|v| !v.is_null()).collect();
    if ours.is_null() || samples.is_empty() {
        return;
    }
    if !samples.iter().any(|s| kind(s) == kind(ours)) {
        errors.push(format!(
            "{at}: {} where the recordings have {}",
            kind(ours),
            kind(samples[0])
        ));
        return;
    }
    match ours {
        Value::Object(map) => {
            // A map keyed by "0", "1", ... (server volumes): its values are compared.
            let is_map =
                !map.is_empty() && map.keys().all(|k| k.bytes().all(|b| b.is_ascii_digit()));
            for (key, value) in map {
                let inner: Vec<&Value> = samples
                    .iter()
                    .filter_map(|s| s.as_object())
                    .flat_map(|o| {
                        if is_map {
                            o.values().collect::<Vec<_>>()
                        } else {
                            o.get(key).into_iter().collect()
                        }
                    })
                    .collect();
                if inner.is_empty() && !is_map {
                    errors.push(format!("{at}.{key}: no recording has it"));
                    continue;
                }
                shape_errors(value, &inner, &format!("{at}.{key}"), errors);
            }
        }
        Value::Array(items) => {
            let inner: Vec<&Value> = samples
                .iter()
                .filter_map(|s| s.as_array())
                .flatten()
                .collect();
            for (i, item) in items.iter().take(3).enumerate() {
                shape_errors(item, &inner, &format!("{at}[{i}]"), errors);
            }
        }
        _ => {}
    }
}

#[test]
fn the_stand_in_answers_have_the_recorded_shape() {
    let Some(s) = StandIn::start("recorded_shape", true) else {
        return;
    };
    let shared = testkit::workspace::shared_dir("recorded_shape").unwrap();
    let recordings = recorded::load(&shared.join("scaleway-cassettes"));
    ok(&s.scw(APPLY));
    ok(&s.scw(&["power", "off"]));
    ok(&s.scw(&["power", "on"]));
    ok(&s.scw(&["destroy", "--yes"]));
    let mut compared = std::collections::BTreeSet::new();
    let mut errors = Vec::new();
    for r in s.take_requests() {
        let (Some(template), Some(response)) = (r["template"].as_str(), r.get("response")) else {
            continue;
        };
        let method = r["method"].as_str().unwrap();
        // The spec's {zone} and {server_id} are the recordings' segments.
        let pattern: String = template
            .split('/')
            .map(|seg| if seg.starts_with('{') { "*" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        let bodies: Vec<Value> = recordings
            .iter()
            .filter(|x| x.method == method && x.code < 300 && recorded::matches(&pattern, &x.path))
            .filter_map(|x| serde_json::from_str(&x.body).ok())
            .collect();
        if bodies.is_empty() {
            continue; // not recorded (Domain, Registry, Block v1, set-rules...)
        }
        let samples: Vec<&Value> = bodies.iter().collect();
        shape_errors(
            response,
            &samples,
            &format!("{method} {template}"),
            &mut errors,
        );
        compared.insert(format!("{method} {template}"));
    }
    errors.sort();
    errors.dedup();
    assert!(
        errors.is_empty(),
        "answers unlike the recordings:\n{}",
        errors.join("\n")
    );
    eprintln!("compared with the recordings: {compared:#?}");
    for endpoint in [
        "POST /instance/v1/zones/{zone}/servers",
        "GET /instance/v1/zones/{zone}/servers/{server_id}",
        "POST /instance/v1/zones/{zone}/servers/{server_id}/action",
        "POST /instance/v1/zones/{zone}/ips",
        "POST /instance/v1/zones/{zone}/security_groups",
        "POST /baremetal/v1/zones/{zone}/servers",
        "GET /baremetal/v1/zones/{zone}/servers/{server_id}",
        "GET /baremetal/v1/zones/{zone}/offers",
        "POST /iam/v1alpha1/ssh-keys",
    ] {
        assert!(
            compared.contains(endpoint),
            "{endpoint} was not compared: {compared:?}"
        );
    }
}

#[test]
fn each_new_control_plane_gets_its_config_as_user_data_before_it_first_boots() {
    let Some(s) = StandIn::start("user_data", false) else {
        return;
    };
    // A machine config stands here for talos/_out/controlplane.yaml (it holds every cluster CA
    // key: the plan and the logs may show its digest, never its content).
    let config = "version: v1alpha1\nmachine:\n  type: controlplane\n  token: secret-token-1234\n";
    let path = s.dir.path().join("controlplane.yaml");
    std::fs::write(&path, config).unwrap();
    let digest = scaleway::s3::sigv4::sha256_hex(config.as_bytes());
    let with_config = |dry_run: bool| {
        let mut args = APPLY.to_vec();
        args.extend(["--control-plane-config", path.to_str().unwrap()]);
        if dry_run {
            args.push("--dry-run");
        }
        let out = s.scw(&args);
        assert_not_shown(&out, &["secret-token-1234"]);
        ok(&out)
    };
    let planned = lines(&with_config(true));
    let user_data = steps(&planned, "set-user-data");
    assert_eq!(user_data.len(), 3, "{planned:?}");
    for step in &user_data {
        assert_eq!(step["key"], "cloud-init");
        assert_eq!(step["sha256"], format!("sha256:{digest}"));
    }
    s.take_requests();

    with_config(false);
    let requests = s.take_requests();
    let writes = mutations(&requests);
    let state = s.state();
    for server in tagged(&state["servers"]) {
        let id = server["id"].as_str().unwrap();
        // The bytes as they are, as text/plain, under the key Talos's Scaleway platform reads.
        assert_eq!(state["user_data"][id]["cloud-init"], digest.as_str());
        let set = requests
            .iter()
            .find(|r| {
                r["path"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("{id}/user_data/cloud-init"))
            })
            .unwrap();
        assert_eq!(set["body"]["content_type"], "text/plain");
        // Before the server's first boot.
        let poweron = requests
            .iter()
            .position(|r| {
                r["path"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("{id}/action"))
                    && r["body"]["action"] == "poweron"
            })
            .unwrap();
        let user_data = requests
            .iter()
            .position(|r| {
                r["path"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("{id}/user_data/cloud-init"))
            })
            .unwrap();
        assert!(user_data < poweron, "{writes:#?}");
    }
    // The servers exist now: a second apply gives nothing again.
    with_config(false);
    assert!(
        !mutations(&s.take_requests())
            .iter()
            .any(|w| w.contains("user_data")),
    );
}
