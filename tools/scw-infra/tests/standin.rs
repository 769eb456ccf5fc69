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
use testkit::scaleway::{control, mutations};

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
    /// The stand-in with this cluster's Talos image, as an earlier import left it; `None` (after
    /// skip_or_fail) when python3 or the shared specs are missing.
    fn start(test: &str, dns_zone: bool) -> Option<StandIn> {
        let s = StandIn::start_bare(test, dns_zone)?;
        s.seed_talos_image(PROJECT, CLUSTER_TAG);
        Some(s)
    }

    /// The Talos image of v1.13.11 in `project`, tagged for the cluster `cluster_tag`.
    fn seed_talos_image(&self, project: &str, cluster_tag: &str) -> Value {
        self.seed(
            json!({"kind": "image", "name": "talos-v1.13.11", "project": project,
                         "tags": ["edgepop-talos=v1.13.11", cluster_tag]}),
        )
    }

    /// The stand-in with nothing in it (not even a Talos image).
    fn start_bare(test: &str, dns_zone: bool) -> Option<StandIn> {
        if !testkit::workspace::python3(test) {
            return None;
        }
        let shared = testkit::workspace::shared_dir(test)?;
        let dir = tempfile::tempdir().unwrap();
        let scaleway = testkit::standin::scaleway(
            &shared,
            dir.path(),
            SECRET,
            PROJECT,
            dns_zone.then_some("example.com"),
        );
        let s3 = testkit::standin::s3(dir.path(), ACCESS, SECRET);
        std::fs::write(dir.path().join("id.pub"), format!("{PUBKEY}\n")).unwrap();
        let mut config: Value = serde_json::from_slice(
            &std::fs::read(root().join("config/infra.example.json")).unwrap(),
        )
        .unwrap();
        config["ssh_public_key_path"] = json!(dir.path().join("id.pub"));
        std::fs::write(dir.path().join("infra.json"), config.to_string()).unwrap();
        wrap_image_tools(dir.path());
        Some(StandIn { scaleway, s3, dir })
    }

    /// The programs scw-infra ran with a Scaleway secret in their environment (see
    /// [`wrap_image_tools`]).
    fn saw_the_secret(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("secret-seen.log")).unwrap_or_default()
    }

    fn state(&self) -> Value {
        control(&self.scaleway.url(), "state", None)
    }

    fn seed(&self, body: Value) -> Value {
        control(&self.scaleway.url(), "seed", Some(&body))
    }

    fn faults(&self, faults: Value) {
        control(&self.scaleway.url(), "faults", Some(&faults));
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
            // The image tools, through wrappers that note whether they got the secret.
            .env(
                "PATH",
                format!(
                    "{}:/usr/bin:/bin",
                    self.dir.path().join("wrappers").display()
                ),
            )
            .env("SCW_API_URL", self.scaleway.url())
            .env("SCW_S3_ENDPOINT", self.s3.url())
            .stdin(Stdio::null());
        cmd
    }

    /// Runs scw-infra with only the given credentials in its environment (no profile file),
    /// and checks that the secret shows in none of its output.
    fn scw_env(&self, args: &[&str], secret: &str) -> Output {
        let out = self.scw_command(args, secret).output().unwrap();
        assert_not_shown(&out, &[secret]);
        out
    }

    /// scw-infra `args` with the test's config and only the given credentials.
    fn scw_command(&self, args: &[&str], secret: &str) -> Command {
        let config = self.dir.path().join("infra.json");
        let mut command = self.scw_infra();
        testkit::scaleway::stand_in_env(
            &mut command,
            self.dir.path(),
            &self.scaleway,
            &self.s3,
            (ACCESS, secret, PROJECT),
        )
        .args(args)
        .arg("--config")
        .arg(&config)
        .args(["--poll-seconds", "0", "--retry-base-ms", "1"])
        .env("EDGEPOP_LOG", "debug");
        command
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
    testkit::process::assert_success(out);
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The stderr of a run that failed (exit 1).
#[track_caller]
fn failed(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    stderr
}

fn tagged(objects: &Value) -> Vec<&Value> {
    testkit::scaleway::tagged(objects, CLUSTER_TAG)
}

/// Every object of the cluster in the stand-in state's `collection` has `field` at `value`.
fn assert_all_tagged(state: &Value, collection: &str, field: &str, value: &str) {
    assert!(
        tagged(&state[collection]).iter().all(|v| v[field] == value),
        "not every one of {collection} has {field} {value}: {state}"
    );
}

const APPLY: &[&str] = &["apply", "--talos-version", "v1.13.11"];

/// The stand-in state's collections of a cluster's servers, addresses, firewall and key.
const CLUSTER_COLLECTIONS: [&str; 5] = [
    "servers",
    "ips",
    "security_groups",
    "bm_servers",
    "ssh_keys",
];

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

/// The inventory of a fresh apply: its kind and endpoint, three Instances with an IPv4, the
/// Elastic Metal worker with both addresses.
fn assert_inventory_of_three_control_planes_and_the_worker(inventory: &Value) {
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
}

/// The security group drops inbound by default and accepts the declared flows to the control
/// planes (crates/flows), from each admin CIDR and each node address.
fn assert_the_group_drops_all_but_the_declared_flows(state: &Value) {
    let group = &tagged(&state["security_groups"])[0];
    assert_eq!(group["inbound_default_policy"], "drop");
    let rules = state["rules"][group["id"].as_str().unwrap()]
        .as_array()
        .unwrap();
    let inbound: Vec<&Value> = rules
        .iter()
        .filter(|r| r["direction"] == "inbound")
        .collect();
    // The declared flows to the control planes (crates/flows): from each admin CIDR, from each
    // node address (3 control planes and the worker's IPv4 and IPv6), and from each control
    // plane's address (etcd).
    let from = |peer: flows::Peer| {
        flows::to(flows::Role::ControlPlane)
            .filter(|f| f.from == peer)
            .count()
    };
    assert_eq!(
        inbound.len(),
        from(flows::Peer::Admin)
            + 5 * from(flows::Peer::Nodes)
            + 3 * from(flows::Peer::ControlPlanes),
        "{inbound:?}"
    );
    assert!(
        inbound
            .iter()
            .any(|r| r["protocol"] == "UDP" && r["dest_port_from"] == 8472)
    );
    assert!(
        inbound
            .iter()
            .any(|r| r["protocol"] == "ICMP" && r["dest_port_from"].is_null())
    );
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
}

/// `power off`, then `power on`: real states, bounded waits.
fn assert_power_off_then_on(s: &StandIn) {
    ok(&s.scw(&["power", "off"]));
    let state = s.state();
    assert_all_tagged(&state, "servers", "state", "stopped");
    assert_all_tagged(&state, "bm_servers", "status", "stopped");
    ok(&s.scw(&["power", "on"]));
    let state = s.state();
    assert_all_tagged(&state, "servers", "state", "running");
    assert_all_tagged(&state, "bm_servers", "status", "ready");
}

/// Each control plane boots from a root volume of at least 10 GiB, Talos's minimum for a
/// control plane (siderolabs/docs, talos/v1.13 getting-started/system-requirements): larger
/// than the image's 10 GB snapshot, which is what Scaleway makes the root volume of when it is
/// asked for no size.
fn assert_each_control_plane_disk_holds_what_talos_asks(state: &Value) {
    const GIB: u64 = 1 << 30;
    for server in tagged(&state["servers"]) {
        let root = &server["volumes"]["0"]["id"];
        let volume = testkit::json::element(&state["volumes"], "/id", root.clone());
        let size = volume["size"].as_u64().unwrap();
        assert!(
            size >= 10 * GIB,
            "{}: a root volume of {size} bytes",
            server["name"]
        );
    }
}

#[test]
fn a_fresh_apply_builds_the_cluster_and_a_second_one_only_reads() {
    let Some(s) = StandIn::start("fresh_apply", true) else {
        return;
    };
    let first = ok(&s.scw(APPLY));
    let requests = s.take_requests();
    let writes = mutations(&requests);
    let inventory: Value = serde_json::from_str(first.trim()).unwrap();
    assert_inventory_of_three_control_planes_and_the_worker(&inventory);

    // What the API now holds.
    let state = s.state();
    assert_eq!(tagged(&state["servers"]).len(), 3);
    assert_all_tagged(&state, "servers", "state", "running");
    assert_eq!(tagged(&state["ips"]).len(), 3);
    assert_all_tagged(&state, "ips", "state", "attached");
    assert_eq!(tagged(&state["bm_servers"]).len(), 1);
    assert_each_control_plane_disk_holds_what_talos_asks(&state);
    assert_the_group_drops_all_but_the_declared_flows(&state);
    let records = state["records"]["example.com"].as_array().unwrap();
    assert_eq!(records.iter().filter(|r| r["name"] == "api").count(), 3);
    // The worker has an IPv6 address, but the edge serves IPv4 only: its names get an A record
    // and no AAAA (flows::EDGE_SERVES_IPV6).
    assert!(
        records
            .iter()
            .any(|r| r["name"] == "www" && r["type"] == "A")
    );
    assert!(!records.iter().any(|r| r["type"] == "AAAA"), "{records:?}");
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

    assert_power_off_then_on(&s);
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

/// What the node tools recorded is carried over by server id: an unfinished run's record of a
/// server first, whole (its reflash undid the applied config), then the last complete run's; a
/// file that does not exist is no inventory. Returns the last run's inventory.
fn assert_steps_are_carried_over_by_server_id(s: &StandIn) -> Value {
    let inventory: Value = serde_json::from_str(&ok(&s.scw(APPLY))).unwrap();
    let mut last = inventory.clone();
    for node in last["nodes"].as_array_mut().unwrap() {
        node["steps"] = json!({"image_flashed": "sha256:old", "config_applied": "sha256:11"});
    }
    let mut unfinished = inventory.clone();
    unfinished["nodes"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["role"] == "worker");
    unfinished["nodes"][0]["steps"] = json!({"image_flashed": "sha256:new"});
    let file = |name: &str, value: &Value| {
        let path = s.dir.path().join(name);
        std::fs::write(&path, value.to_string()).unwrap();
        path.display().to_string()
    };
    let (last_file, unfinished_file) = (
        file("last.json", &last),
        file("unfinished.json", &unfinished),
    );
    let missing = s.dir.path().join("missing.json").display().to_string();
    let mut args = APPLY.to_vec();
    args.extend([
        "--previous",
        &missing,
        "--previous",
        &unfinished_file,
        "--previous",
        &last_file,
    ]);
    let carried: Value = serde_json::from_str(&ok(&s.scw(&args))).unwrap();
    for node in carried["nodes"].as_array().unwrap() {
        let expected = if node["role"] == "worker" {
            json!({"image_flashed": "sha256:new"})
        } else {
            json!({"image_flashed": "sha256:old", "config_applied": "sha256:11"})
        };
        assert_eq!(node["steps"], expected, "{node}");
    }
    last
}

/// A fresh cluster's plan: one group, three IPs and Instances, the worker and its key, the
/// rules; what the plan makes is named by the step that makes it, an address not known yet by
/// its node. Returns the IPs and Instances to create.
fn assert_the_plan_names_what_it_makes(planned: &[Value]) -> (usize, usize) {
    let group = steps(planned, "create-security-group");
    assert_eq!(group.len(), 1, "{planned:?}");
    let ips = steps(planned, "create-flexible-ip");
    let instances = steps(planned, "create-instance");
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
    assert_eq!(steps(planned, "order-worker").len(), 1);
    assert_eq!(steps(planned, "register-ssh-key").len(), 1);
    let rules = steps(planned, "set-firewall-rules");
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
    (ips.len(), instances.len())
}

#[test]
fn a_dry_run_makes_no_mutating_call_and_the_run_makes_the_planned_ones() {
    let Some(s) = StandIn::start("dry_run", true) else {
        return;
    };
    let dry_run = s.scw(&["apply", "--talos-version", "v1.13.11", "--dry-run"]);
    let planned = lines(&ok(&dry_run));
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    // The example config's admin range is a documentation one: the plan says so before the
    // first apply waits for nodes nobody can reach.
    let said = String::from_utf8_lossy(&dry_run.stderr);
    assert!(
        said.contains("admin_cidrs: 198.51.100.0/24 is a documentation range"),
        "{said}"
    );
    let (ips, instances) = assert_the_plan_names_what_it_makes(&planned);

    // The run makes the planned calls: one creation per creating step.
    ok(&s.scw(APPLY));
    let writes = mutations(&s.take_requests());
    let sent = |call: &str| writes.iter().filter(|w| *w == call).count();
    assert_eq!(sent("POST /instance/v1/zones/fr-par-1/security_groups"), 1);
    assert_eq!(sent("POST /instance/v1/zones/fr-par-1/ips"), ips);
    assert_eq!(sent("POST /instance/v1/zones/fr-par-1/servers"), instances);
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

    let last = assert_steps_are_carried_over_by_server_id(&s);
    let file = |name: &str, value: &Value| {
        let path = s.dir.path().join(name);
        std::fs::write(&path, value.to_string()).unwrap();
        path.display().to_string()
    };
    // Another cluster's inventory is refused, named with its field.
    let mut other = last.clone();
    other["cluster_name"] = "edge-ams".into();
    let other_file = file("other.json", &other);
    let mut args = APPLY.to_vec();
    args.extend(["--previous", &other_file]);
    let out = s.scw(&args);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&other_file) && stderr.contains("field `cluster_name`"),
        "{stderr}"
    );
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
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
    // This run is cut while creating the second server: the POST is not repeated blindly (it
    // may have been done); the servers tagged for that node are looked for, none is there, and
    // only then is it sent again.
    s.faults(json!([{"method": "POST", "path": "/servers$", "kind": "cut", "count": 1}]));
    let out = s.scw(APPLY);
    ok(&out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("did not take effect"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

/// What destroy's requests removed, as `(kind, id)`, in the order sent: the reads skipped, a
/// PATCH of the Domain API's records counted as the records it deletes.
fn deletions(requests: Vec<Value>) -> Vec<(String, String)> {
    let mut deleted = Vec::new();
    for request in requests {
        if request["method"] == "GET" {
            continue;
        }
        if request["method"] == "PATCH" && request["path"].as_str().unwrap().contains("/records") {
            deleted.extend(dns_deletions(&request));
        } else {
            deleted.push(deletion(&request));
        }
    }
    deleted
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
        let out = testkit::process::at_a_terminal(&script, &self.scw_command(args, SECRET), answer);
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
    let deleted = deletions(s.take_requests());
    let mut deleted_sorted = deleted.clone();
    deleted_sorted.sort();
    let mut plan_sorted = plan.clone();
    plan_sorted.sort();
    assert_eq!(deleted_sorted, plan_sorted, "deletions made: {deleted:?}");
    for kind in CLUSTER_COLLECTIONS {
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
    let stderr = failed(&out);
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
    let stderr = failed(&out);
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
    assert!(failed(&out).contains("run apply first"));
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

/// In `dir/wrappers`, zstd and qemu-img (when this machine has them) as scripts that append
/// their name to `dir/secret-seen.log` when a Scaleway secret variable is in their environment,
/// then run the real program: they need no credential, so they must get none.
fn wrap_image_tools(dir: &Path) {
    let wrappers = dir.join("wrappers");
    std::fs::create_dir_all(&wrappers).unwrap();
    for program in ["zstd", "qemu-img"] {
        let Some(real) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join(program))
            .find(|p| p.is_file())
        else {
            continue;
        };
        testkit::sshd::secret_noting_script(
            &wrappers.join(program),
            &scaleway::creds::SECRET_VARIABLES,
            &dir.join("secret-seen.log"),
            &format!("exec '{}' \"$@\"", real.display()),
        );
    }
}

/// Whether zstd and qemu-img, which the import runs, are here (else skip_or_fail).
fn image_tools(test: &str) -> bool {
    for program in ["zstd", "qemu-img"] {
        if !have(program) {
            testkit::skip_or_fail(test, program);
            return false;
        }
    }
    true
}

/// `zstd -q raw -o zst`.
fn compress(raw: &Path, zst: &Path) {
    let status = Command::new("zstd")
        .arg("-q")
        .arg(raw)
        .arg("-o")
        .arg(zst)
        .status()
        .unwrap();
    assert!(status.success());
}

/// A Talos disk that does not compress, served as `.raw.zst` by an Image Factory stand-in
/// (one answer per download, two answers).
struct FactoryImage {
    raw: PathBuf,
    /// The `.zst`'s SHA-256, the digest `apply` pins.
    digest: String,
    url: String,
    _factory: testkit::http::Server,
}

impl FactoryImage {
    /// A disk of `size` bytes drawn from `seed`; `None` when the test is skipped for want of
    /// the image tools.
    fn serve(s: &StandIn, test: &str, size: usize, seed: u64) -> Option<Self> {
        if !image_tools(test) {
            return None;
        }
        let raw = s.dir.path().join("disk.raw");
        std::fs::write(&raw, testkit::incompressible_bytes(size, seed)).unwrap();
        let zst = s.dir.path().join("disk.raw.zst");
        compress(&raw, &zst);
        let zst = std::fs::read(&zst).unwrap();
        let digest = scaleway::s3::sigv4::sha256_hex(&zst);
        let factory = testkit::http::Server::start(vec![
            testkit::http::Reply::ok(zst.clone()),
            testkit::http::Reply::ok(zst),
        ])
        .unwrap();
        let url = format!(
            "{}/image/schematic/v1.14.0/scaleway-amd64.raw.zst",
            factory.url
        );
        Some(FactoryImage {
            raw,
            digest,
            url,
            _factory: factory,
        })
    }

    /// The arguments of an `apply` that imports this image pinned at `sha256`, uploaded in
    /// parts of 5 MiB.
    fn apply_args<'a>(&'a self, sha256: &'a str) -> [&'a str; 9] {
        [
            "apply",
            "--talos-version",
            "v1.14.0",
            "--talos-image-url",
            &self.url,
            "--talos-image-sha256",
            sha256,
            "--upload-part-mib",
            "5",
        ]
    }
}

/// The S3 stand-in does check signatures: an unsigned request and a forged one are refused.
fn assert_the_s3_stand_in_checks_signatures(s: &StandIn) {
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
}

/// The dry run plans the import (the upload to the bucket, the snapshot, the image), and
/// downloads nothing; the control planes boot from the image that step makes.
fn assert_the_dry_run_plans_the_import(s: &StandIn, url: &str, digest: &str) {
    let planned = lines(&ok(&s.scw(&[
        "apply",
        "--dry-run",
        "--talos-version",
        "v1.14.0",
        "--talos-image-url",
        url,
        "--talos-image-sha256",
        digest,
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
}

/// Parts 1 and 2 are held until the test has read scw-infra's first progress line: the
/// progress counts what Object Storage acknowledged, so that line is part 3's 2 MiB (the
/// QCOW2's last part: 12 MiB of disk and its header), not the 5 MiB of the first part read.
fn assert_the_progress_counts_what_object_storage_acknowledged(s: &StandIn, talos: &FactoryImage) {
    let digest = &talos.digest;
    control(
        &s.s3.url(),
        "faults",
        Some(
            &json!([{"method": "PUT", "query": "(^|&)partNumber=[12](&|$)",
                      "hold_until": "(^|&)signal=first-progress-read(&|$)", "count": 2}]),
        ),
    );
    let mut run =
        testkit::process::Running::spawn(&mut s.scw_command(&talos.apply_args(digest), SECRET));
    run.wait_for_line("% acknowledged ");
    control(
        &s.s3.url(),
        "signal",
        Some(&json!({"name": "first-progress-read"})),
    );
    let out = run.finish();
    assert_not_shown(&out, &[SECRET]);
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let progress: Vec<&str> = stderr
        .lines()
        .filter_map(|line| Some(line.split_once("% acknowledged ")?.1))
        .collect();
    assert_eq!(progress[0], "(2 of 12 MiB, 1 of 3 parts)", "{stderr}");
    assert_eq!(
        progress.last().copied(),
        Some("(12 of 12 MiB, 3 of 3 parts)"),
        "{stderr}"
    );
    assert_eq!(progress.len(), 3, "{stderr}");
    assert!(stderr.contains("100% acknowledged"), "{stderr}");
    let s3 = s.take_s3();
    let parts = s3
        .iter()
        .filter(|r| r["method"] == "PUT" && r["query"].as_str().unwrap().contains("partNumber"))
        .count();
    assert_eq!(parts, 3, "{s3:?}");
}

/// One Talos image of the pinned digest, available, booting every control plane, made from
/// one snapshot of one object.
fn assert_one_image_of_the_pin_boots_the_servers(s: &StandIn, digest: &str) {
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
}

/// Destroy: the image, then the snapshot, then the object and the bucket.
fn assert_destroy_removes_the_image_then_the_snapshot_then_the_bucket(s: &StandIn) {
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
}

#[test]
fn the_talos_image_is_imported_once_and_a_wrong_digest_is_refused() {
    let Some(s) = StandIn::start("image_import", false) else {
        return;
    };
    // 12 MiB that do not compress: the QCOW2 is as big, so the upload goes in 3 parts of 5 MiB.
    let Some(talos) = FactoryImage::serve(&s, "image_import", 12 << 20, 0x9e37_79b9_7f4a_7c15)
    else {
        return;
    };
    let (url, digest) = (&talos.url, &talos.digest);
    let apply = |sha: &str| s.scw(&talos.apply_args(sha));

    assert_the_s3_stand_in_checks_signatures(&s);

    assert_the_dry_run_plans_the_import(&s, url, digest);

    // A download whose digest is not the pinned one: refused, nothing uploaded or imported.
    let out = apply(&"0".repeat(64));
    let stderr = failed(&out);
    assert!(
        stderr.contains("the pinned one is") && stderr.contains("refused"),
        "{stderr}"
    );
    assert_eq!(s.take_s3(), Vec::<Value>::new());
    assert!(s.state()["snapshots"].as_array().unwrap().is_empty());
    s.take_requests();

    assert_the_progress_counts_what_object_storage_acknowledged(&s, &talos);
    assert_one_image_of_the_pin_boots_the_servers(&s, digest);

    // Again: no download (the factory has no answer left), no upload, no mutation.
    ok(&apply(digest));
    assert_eq!(s.take_s3(), Vec::<Value>::new());
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());

    assert_destroy_removes_the_image_then_the_snapshot_then_the_bucket(&s);
    s.take_requests();
    // zstd and qemu-img ran (the image was converted), without the Scaleway secret.
    assert_eq!(s.saw_the_secret(), "");
    assert!(s.dir.path().join("wrappers/qemu-img").exists());
}

#[test]
fn an_import_a_stopped_run_left_is_used_not_sent_again() {
    let test = "import_left_by_a_stopped_run";
    let Some(s) = StandIn::start(test, false) else {
        return;
    };
    let Some(talos) = FactoryImage::serve(&s, test, 6 << 20, 0x2545_f491_4f6c_dd1d) else {
        return;
    };
    // The run stops once the snapshot import was sent, before it makes the image (here the
    // image's creation is refused; a killed run leaves the same).
    s.faults(
        json!([{"method": "POST", "path": "/instance/v1/zones/[^/]+/images$",
                     "kind": "status", "status": 400, "count": 1}]),
    );
    let out = s.scw(&talos.apply_args(&talos.digest));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(tagged(&s.state()["snapshots"]).len(), 1);
    s.take_s3();
    s.take_requests();

    // The rerun plans the image from that snapshot, and makes it: one snapshot, one image, no
    // second upload or import.
    let plan = ok(&s.scw(&[&talos.apply_args(&talos.digest)[..], &["--dry-run"]].concat()));
    let snapshot = tagged(&s.state()["snapshots"])[0]["id"].clone();
    let import: Value = plan
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|step| step["step"] == "import-talos-image")
        .unwrap();
    assert_eq!(import["snapshot"], snapshot, "{plan}");
    ok(&s.scw(&talos.apply_args(&talos.digest)));
    assert_eq!(s.take_s3(), Vec::<Value>::new());
    let mutations = mutations(&s.take_requests());
    assert!(
        !mutations
            .iter()
            .any(|m| m.contains("import-from-object-storage")),
        "{mutations:?}"
    );
    let state = s.state();
    let snapshots = tagged(&state["snapshots"]);
    assert_eq!(snapshots.len(), 1);
    // Taken by the image made from it.
    assert_eq!(snapshots[0]["status"], "in_use");
    let images = testkit::scaleway::tagged(&state["images"], "edgepop-talos=v1.14.0");
    assert_eq!(images.len(), 1, "{images:#?}");
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

/// The server `id` got `digest`'s bytes as text/plain, under the key Talos's Scaleway platform
/// reads, before its first boot.
fn assert_user_data_before_first_boot(state: &Value, requests: &[Value], id: &str, digest: &str) {
    // The bytes as they are, as text/plain, under the key Talos's Scaleway platform reads.
    assert_eq!(state["user_data"][id]["cloud-init"], digest);
    let ends_with = |r: &Value, suffix: &str| r["path"].as_str().unwrap().ends_with(suffix);
    let cloud_init = format!("{id}/user_data/cloud-init");
    let set = requests.iter().find(|r| ends_with(r, &cloud_init)).unwrap();
    assert_eq!(set["body"]["content_type"], "text/plain");
    // Before the server's first boot.
    let poweron = requests
        .iter()
        .position(|r| ends_with(r, &format!("{id}/action")) && r["body"]["action"] == "poweron")
        .unwrap();
    let user_data = requests
        .iter()
        .position(|r| ends_with(r, &cloud_init))
        .unwrap();
    assert!(
        user_data < poweron,
        "{id}: user data after the first poweron"
    );
}

/// The three control planes exist, and each got the config `digest` names before its first
/// boot (see [`assert_user_data_before_first_boot`]).
fn assert_three_control_planes_got_their_config_before_first_boot(
    s: &StandIn,
    requests: &[Value],
    digest: &str,
) {
    let state = s.state();
    assert_eq!(tagged(&state["servers"]).len(), 3);
    for server in tagged(&state["servers"]) {
        assert_user_data_before_first_boot(
            &state,
            requests,
            server["id"].as_str().unwrap(),
            digest,
        );
    }
}

/// A machine config standing for talos/_out/controlplane.yaml (it holds every cluster CA key:
/// the plan and the logs may show its digest, never its content), written in the stand-in's
/// folder: its path and digest.
fn control_plane_config(s: &StandIn) -> (PathBuf, String) {
    let config = "version: v1alpha1\nmachine:\n  type: controlplane\n  token: secret-token-1234\n";
    let path = s.dir.path().join("controlplane.yaml");
    std::fs::write(&path, config).unwrap();
    (path, scaleway::s3::sigv4::sha256_hex(config.as_bytes()))
}

/// `scw-infra apply` with the control planes' config (and `--dry-run` when asked), its output
/// checked for the config's content.
fn apply_with_config(s: &StandIn, path: &Path, dry_run: bool) -> Output {
    let mut args = APPLY.to_vec();
    args.extend(["--control-plane-config", path.to_str().unwrap()]);
    if dry_run {
        args.push("--dry-run");
    }
    let out = s.scw(&args);
    assert_not_shown(&out, &["secret-token-1234"]);
    out
}

#[test]
fn each_new_control_plane_gets_its_config_as_user_data_before_it_first_boots() {
    let Some(s) = StandIn::start("user_data", false) else {
        return;
    };
    let (path, digest) = control_plane_config(&s);
    let with_config = |dry_run: bool| ok(&apply_with_config(&s, &path, dry_run));
    let planned = lines(&with_config(true));
    let user_data = steps(&planned, "set-user-data");
    assert_eq!(user_data.len(), 3, "{planned:?}");
    for step in &user_data {
        assert_eq!(step["key"], "cloud-init");
        assert_eq!(step["sha256"], format!("sha256:{digest}"));
    }
    s.take_requests();

    // The first creation is done, then answered 502: the server it made is found by its tags,
    // not made twice, and still gets its config before its first boot.
    s.faults(
        json!([{"method": "POST", "path": "/instance/v1/zones/fr-par-1/servers$",
                     "kind": "status", "status": 502, "applied": true, "count": 1}]),
    );
    with_config(false);
    let requests = s.take_requests();
    let writes = mutations(&requests);
    assert_eq!(
        requests.iter().filter(|r| r["fault_status"] == 502).count(),
        1
    );
    let creations = writes
        .iter()
        .filter(|w| *w == "POST /instance/v1/zones/fr-par-1/servers")
        .count();
    assert_eq!(creations, 3, "{writes:#?}");
    assert_three_control_planes_got_their_config_before_first_boot(&s, &requests, &digest);
    // The servers exist now: a second apply gives nothing again.
    with_config(false);
    assert!(
        !mutations(&s.take_requests())
            .iter()
            .any(|w| w.contains("user_data")),
    );
}
#[test]
fn a_control_plane_a_cut_run_left_without_its_config_gets_it_before_it_first_boots() {
    let Some(s) = StandIn::start("user_data_refused", false) else {
        return;
    };
    let (path, digest) = control_plane_config(&s);
    // The first control plane is made, then its user data refused: the run stops there.
    s.faults(json!([{"method": "PATCH", "path": "/user_data/cloud-init$",
                     "kind": "status", "status": 400, "count": 1}]));
    let out = apply_with_config(&s, &path, false);
    assert!(!out.status.success());
    let state = s.state();
    let made = tagged(&state["servers"]);
    assert_eq!(made.len(), 1);
    let first = made[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(made[0]["state"], "stopped");
    assert!(state["user_data"][&first].get("cloud-init").is_none());
    s.take_requests();

    // The rerun finds it off without its config: it gets it before its first boot, as the new
    // ones do.
    let planned = lines(&ok(&apply_with_config(&s, &path, true)));
    let user_data = steps(&planned, "set-user-data");
    assert_eq!(user_data.len(), 3, "{planned:?}");
    assert_eq!(user_data[0]["server"], first.as_str(), "{planned:?}");
    ok(&apply_with_config(&s, &path, false));
    let requests = s.take_requests();
    assert_three_control_planes_got_their_config_before_first_boot(&s, &requests, &digest);
}

#[test]
fn a_control_plane_proved_ours_loses_the_copy_of_its_config_and_never_gets_it_back() {
    let Some(s) = StandIn::start("user_data_cleared", false) else {
        return;
    };
    let (path, _) = control_plane_config(&s);
    let applied: Value =
        serde_json::from_str(ok(&apply_with_config(&s, &path, false)).trim()).unwrap();
    let ids: Vec<String> = tagged(&s.state()["servers"])
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect();
    let holds = |id: &str| s.state()["user_data"][id].get("cloud-init").is_some();
    assert!(ids.iter().all(|id| holds(id)));
    // talos-apply-insecure proved each control plane ours.
    let mut proved = applied.clone();
    for node in proved["nodes"].as_array_mut().unwrap() {
        if node["role"] == "controlplane" {
            node["steps"]["proved_ours"] = json!("ours");
        }
    }
    let clear = |extra: &[&str]| {
        let mut args = vec!["clear-user-data"];
        args.extend(extra);
        testkit::process::run_with_stdin(
            &mut s.scw_command(&args, SECRET),
            proved.to_string().as_bytes(),
        )
    };
    s.take_requests();
    // The dry run says which, and changes nothing.
    let out = clear(&["--dry-run"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("would leave its user data"));
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    // Refused: the run fails, and still hands the inventory on (the pipe keeps it).
    s.faults(
        json!([{"method": "DELETE", "path": "/user_data/cloud-init$",
                      "kind": "status", "status": 403, "count": 1}]),
    );
    let out = clear(&[]);
    assert_eq!(out.status.code(), Some(1));
    let kept: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(kept, proved);
    let out = clear(&[]);
    let written: Value = serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap();
    assert_eq!(written, proved, "the inventory is handed on");
    assert!(
        ids.iter().all(|id| !holds(id)),
        "{}",
        s.state()["user_data"]
    );
    assert_not_shown(&out, &["secret-token-1234"]);
    // Again: nothing left to delete.
    s.take_requests();
    clear(&[]);
    assert!(
        !mutations(&s.take_requests())
            .iter()
            .any(|m| m.starts_with("DELETE")),
    );

    // Powered off, then applied again with that inventory: the config does not go back.
    ok(&s.scw(&["power", "off"]));
    let previous = s.dir.path().join("inventory.json");
    std::fs::write(&previous, proved.to_string()).unwrap();
    let mut args = APPLY.to_vec();
    args.extend([
        "--control-plane-config",
        path.to_str().unwrap(),
        "--previous",
        previous.to_str().unwrap(),
    ]);
    s.take_requests();
    ok(&s.scw(&args));
    assert!(
        !mutations(&s.take_requests())
            .iter()
            .any(|m| m.contains("user_data")),
    );
    assert!(ids.iter().all(|id| !holds(id)));
}

/// Another project the same API key reads, holding a cluster of the same name.
const OTHER_PROJECT: &str = "22222222-2222-4222-8222-222222222222";

impl StandIn {
    /// A whole `edge-par` in `project`, as an apply there left it: three control planes with
    /// their IPs, the worker, the security group, the SSH key (the same public key), the image.
    fn seed_cluster(&self, project: &str) -> Vec<String> {
        let image = self.seed_talos_image(project, CLUSTER_TAG);
        let mut ids = vec![image["id"].as_str().unwrap().to_owned()];
        for n in 1..=3 {
            let node = format!("edgepop-node=edge-par-cp-{n}");
            let tags = json!([CLUSTER_TAG, "edgepop-role=controlplane", node]);
            let ip = self.seed(json!({"kind": "ip", "project": project, "tags": tags}));
            let server = self.seed(json!({"kind": "instance_server", "project": project,
                "name": format!("edge-par-cp-{n}"), "image": image["id"], "tags": tags,
                "public_ips": [ip["id"]]}));
            ids.push(ip["id"].as_str().unwrap().to_owned());
            ids.push(server["id"].as_str().unwrap().to_owned());
        }
        let worker = self.seed(json!({"kind": "baremetal_server", "project": project,
            "name": "edge-worker-1",
            "tags": [CLUSTER_TAG, "edgepop-role=worker", "edgepop-node=edge-worker-1"]}));
        let group = self.seed(json!({"kind": "security_group", "project": project,
            "name": "edge-par-controlplane",
            "tags": [CLUSTER_TAG, "edgepop-role=controlplane-firewall"]}));
        let key = self.seed(json!({"kind": "ssh_key", "project": project,
            "name": "edgepop-edge-par", "public_key": PUBKEY}));
        for object in [worker, group, key] {
            ids.push(object["id"].as_str().unwrap().to_owned());
        }
        ids
    }
}

/// The ids of what the state holds of `project`.
fn ids_in(state: &Value, project: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for kind in CLUSTER_COLLECTIONS.into_iter().chain(["images"]) {
        for o in state[kind].as_array().unwrap() {
            let owner = o.get("project").or_else(|| o.get("project_id")).unwrap();
            if owner == project {
                ids.push(o["id"].as_str().unwrap().to_owned());
            }
        }
    }
    ids.sort();
    ids
}

#[test]
fn the_same_cluster_name_in_another_project_is_never_planned_adopted_powered_or_destroyed() {
    let Some(s) = StandIn::start_bare("other_project", true) else {
        return;
    };
    // Another project of the organization holds an edge-par of its own; this project has an
    // image of another cluster of the same Talos version, then its own.
    let mut theirs = s.seed_cluster(OTHER_PROJECT);
    theirs.sort();
    s.seed_talos_image(PROJECT, "edgepop-cluster=edge-ams");
    let ours = s.seed_talos_image(PROJECT, CLUSTER_TAG);

    // destroy finds nothing of this project's edge-par but its image; power finds nothing.
    let planned = lines(&ok(&s.scw(&["destroy", "--dry-run"])));
    assert_eq!(
        kind_and_id(&planned),
        [("image".to_owned(), ours["id"].as_str().unwrap().to_owned())],
        "another project's resources planned for deletion"
    );
    let out = s.scw(&["power", "off", "--dry-run"]);
    assert_eq!(out.status.code(), Some(1), "{}", ok_or_text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run apply first"));
    let requests = s.take_requests();
    // Every list named the project.
    for r in requests.iter().filter(|r| {
        r["method"] == "GET"
            && [
                "servers",
                "ips",
                "security_groups",
                "images",
                "snapshots",
                "ssh-keys",
            ]
            .iter()
            .any(|c| r["path"].as_str().unwrap().ends_with(c))
    }) {
        let project = r["query"]
            .get("project")
            .or_else(|| r["query"].get("project_id"));
        assert_eq!(project, Some(&json!([PROJECT])), "unscoped list: {r}");
    }

    // apply plans a cluster of its own: no worker adopted, the key registered here, and the
    // control planes booted from this cluster's image.
    let plan = lines(&ok(&s.scw(&[
        "apply",
        "--talos-version",
        "v1.13.11",
        "--dry-run",
    ])));
    assert_eq!(steps(&plan, "order-worker").len(), 1, "{plan:?}");
    assert_eq!(steps(&plan, "register-ssh-key").len(), 1, "{plan:?}");
    assert_eq!(steps(&plan, "create-instance").len(), 3, "{plan:?}");
    for create in steps(&plan, "create-instance") {
        assert_eq!(create["image"], ours["id"], "{create}");
    }
    ok(&s.scw(APPLY));
    ok(&s.scw(&["power", "off"]));
    ok(&s.scw(&["destroy", "--yes"]));

    // The other project's cluster is as it was: never written to.
    let writes = mutations(&s.take_requests());
    for id in &theirs {
        assert!(
            !writes.iter().any(|w| w.contains(id.as_str())),
            "touched {id}: {writes:?}"
        );
    }
    let state = s.state();
    assert_eq!(ids_in(&state, OTHER_PROJECT), theirs);
    for server in state["servers"].as_array().unwrap() {
        assert_ne!(server["state"], "stopping", "{server}");
    }
}

fn ok_or_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_post_answered_502_after_it_took_effect_is_sent_once() {
    let Some(s) = StandIn::start("post_502", true) else {
        return;
    };
    // Each creation and each power action is done, then answered 502 (a gateway that gave up
    // while the API acted); a second POST would be answered 200 and make a second one.
    let applied = |path: &str| {
        json!({"method": "POST", "path": path, "kind": "status",
                                      "status": 502, "applied": true, "count": 1})
    };
    s.faults(json!([
        applied("/instance/v1/zones/fr-par-1/servers$"),
        applied("/instance/v1/zones/fr-par-1/ips$"),
        applied("/security_groups$"),
        applied("/baremetal/v1/zones/fr-par-1/servers$"),
        applied("/iam/v1alpha1/ssh-keys$"),
        applied("/action$"),
        applied("/namespaces$"),
    ]));
    let out = s.scw(APPLY);
    ok(&out);
    let requests = s.take_requests();
    let answered_502 = requests.iter().filter(|r| r["fault_status"] == 502).count();
    assert_eq!(answered_502, 7, "every fault was met: {requests:#?}");
    let writes = mutations(&requests);
    let sent = |call: &str| writes.iter().filter(|w| *w == call).count();
    assert_eq!(sent("POST /instance/v1/zones/fr-par-1/servers"), 3);
    assert_eq!(sent("POST /instance/v1/zones/fr-par-1/ips"), 3);
    assert_eq!(sent("POST /instance/v1/zones/fr-par-1/security_groups"), 1);
    assert_eq!(sent("POST /baremetal/v1/zones/fr-par-1/servers"), 1);
    assert_eq!(sent("POST /iam/v1alpha1/ssh-keys"), 1);
    assert_eq!(sent("POST /registry/v1/regions/fr-par/namespaces"), 1);
    let actions = writes.iter().filter(|w| w.ends_with("/action")).count();
    assert_eq!(actions, 3, "one poweron per control plane: {writes:#?}");
    let state = s.state();
    assert_eq!(tagged(&state["servers"]).len(), 3);
    assert_eq!(tagged(&state["ips"]).len(), 3);
    assert_eq!(tagged(&state["security_groups"]).len(), 1);
    assert_eq!(tagged(&state["bm_servers"]).len(), 1);
    assert_eq!(state["ssh_keys"].as_array().unwrap().len(), 1);
    assert_eq!(state["namespaces"].as_array().unwrap().len(), 1);
    // Converged: the next run only reads.
    ok(&s.scw(APPLY));
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
}

#[test]
fn a_registry_name_taken_elsewhere_stops_the_run_before_anything_billed() {
    let Some(s) = StandIn::start("registry_name_taken", false) else {
        return;
    };
    // Registry namespace names are unique across Scaleway ("each namespace must have a globally
    // unique name": docs-content pages/container-registry/concepts.mdx), and the lookup sees
    // only this project's: another project holds the example's name.
    s.seed(json!({"kind": "namespace", "name": "edge-par", "project": OTHER_PROJECT}));
    s.take_requests();
    let planned = lines(&ok(&s.scw(&[APPLY, &["--dry-run"]].concat())));
    let kinds: Vec<&str> = planned.iter().filter_map(|p| p["step"].as_str()).collect();
    assert_eq!(
        kinds.first(),
        Some(&"create-registry-namespace"),
        "{kinds:?}"
    );

    let out = s.scw(APPLY);
    let stderr = failed(&out);
    testkit::process::assert_says_all(
        &stderr,
        &["edge-par", "registry_namespace", "globally unique"],
    );
    let writes = mutations(&s.take_requests());
    assert_eq!(
        writes,
        ["POST /registry/v1/regions/fr-par/namespaces"],
        "nothing billed was made"
    );
}

#[test]
fn a_dns_record_made_by_someone_else_during_the_run_is_not_written_over() {
    let Some(s) = StandIn::start("dns_record_during_the_run", true) else {
        return;
    };
    // The plan read the zone before the worker was ordered; its wait is long (here one look
    // held a few seconds), and meanwhile someone makes a record of one of our names.
    s.faults(
        json!([{"method": "GET", "path": "/baremetal/v1/zones/fr-par-1/servers/[^/]+$",
                      "kind": "slow", "seconds": 5, "count": 1}]),
    );
    let mut run = testkit::process::Running::spawn(&mut s.scw_command(APPLY, SECRET));
    run.wait_for_line("ordering the Elastic Metal server");
    s.seed(
        json!({"kind": "record", "dns_zone": "example.com", "name": "www",
                  "type": "A", "data": "192.0.2.99"}),
    );
    let out = run.finish();
    let stderr = failed(&out);
    assert!(
        stderr.contains("www.example.com A 192.0.2.99 is not ours"),
        "{stderr}"
    );
    assert!(
        !mutations(&s.take_requests())
            .iter()
            .any(|m| m.starts_with("PATCH /domain/")),
        "the zone was written"
    );
    let records = s.state()["records"]["example.com"].clone();
    assert!(
        records
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "www" && r["data"] == "192.0.2.99"),
        "{records}"
    );
}

#[test]
fn an_aaaa_record_of_ours_for_an_edge_name_goes_and_another_one_stops_the_plan() {
    let Some(s) = StandIn::start("edge_aaaa_goes", true) else {
        return;
    };
    ok(&s.scw(APPLY));
    // What an earlier version wrote: the worker's IPv6 address under the edge's name, ours.
    let stale = s.seed(
        json!({"kind": "record", "dns_zone": "example.com", "name": "www", "type": "AAAA",
               "data": "2001:db8::10", "comment": CLUSTER_TAG}),
    );
    s.take_requests();
    ok(&s.scw(APPLY));
    let records = s.state()["records"]["example.com"].clone();
    let records = records.as_array().unwrap();
    assert!(
        !records.iter().any(|r| r["id"] == stale["id"]),
        "{records:?}"
    );
    assert!(!records.iter().any(|r| r["type"] == "AAAA"), "{records:?}");
    assert!(
        records
            .iter()
            .any(|r| r["name"] == "www" && r["type"] == "A"),
        "{records:?}"
    );
    assert_eq!(
        mutations(&s.take_requests()),
        ["PATCH /domain/v2beta1/dns-zones/example.com/records"]
    );
    // Nothing left to delete: the next apply only reads.
    ok(&s.scw(APPLY));
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());

    // Someone else's AAAA under the edge's name would take the IPv6-first clients (and Let's
    // Encrypt) elsewhere: the plan stops, naming it, and writes nothing.
    s.seed(
        json!({"kind": "record", "dns_zone": "example.com", "name": "www", "type": "AAAA",
               "data": "2001:db8::99"}),
    );
    let out = s.scw(APPLY);
    let stderr = failed(&out);
    assert!(
        stderr.contains("www.example.com AAAA 2001:db8::99 is not ours"),
        "{stderr}"
    );
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
}

#[test]
fn a_public_key_registered_under_another_name_is_used_and_left_alone() {
    let Some(s) = StandIn::start("key_registered_already", false) else {
        return;
    };
    // The operator registered their key by hand (the console's name for it), and IAM refuses
    // the same public key twice.
    let laptop = s.seed(json!({"kind": "ssh_key", "name": "laptop", "public_key": PUBKEY}));
    control(
        &s.scaleway.url(),
        "iam-refuses-duplicate-keys",
        Some(&json!({})),
    );
    s.take_requests();
    let inventory: Value = serde_json::from_str(ok(&s.scw(APPLY)).trim()).unwrap();
    assert_eq!(inventory["ssh_key_ids"], json!([laptop["id"]]));
    assert!(
        !mutations(&s.take_requests())
            .iter()
            .any(|m| m.contains("ssh-keys")),
        "no key registered"
    );
    // Not ours: destroy leaves it.
    let plan = ok(&s.scw(&["destroy", "--dry-run"]));
    assert!(!plan.contains(laptop["id"].as_str().unwrap()), "{plan}");
}

#[test]
fn a_data_volume_attached_by_hand_survives_destroy() {
    let Some(s) = StandIn::start("hand_attached_volume", false) else {
        return;
    };
    ok(&s.scw(APPLY));
    let server = tagged(&s.state()["servers"])[0]["id"].clone();
    let data = s.seed(json!({"kind": "attached_volume", "server": server, "name": "data"}));
    let root_volumes: Vec<String> = tagged(&s.state()["servers"])
        .iter()
        .map(|v| v["volumes"]["0"]["id"].as_str().unwrap().to_owned())
        .collect();
    s.take_requests();

    let plan = lines(&ok(&s.scw(&["destroy", "--dry-run"])));
    let volumes: Vec<&str> = plan
        .iter()
        .filter(|r| r["removed"] == "volume")
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = root_volumes.iter().map(String::as_str).collect();
    expected.sort_unstable();
    let mut volumes_sorted = volumes.clone();
    volumes_sorted.sort_unstable();
    assert_eq!(volumes_sorted, expected, "only the root volumes: {plan:?}");

    ok(&s.scw(&["destroy", "--yes"]));
    let state = s.state();
    let left: Vec<&Value> = state["volumes"].as_array().unwrap().iter().collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["id"], data["id"]);
    assert_eq!(
        left[0]["status"], "available",
        "detached by the termination"
    );
    assert!(tagged(&state["servers"]).is_empty());
}

/// The KEY=value lines of an output.
fn pairs(out: &str) -> std::collections::BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn destroy_carries_out_the_plan_file_it_showed_and_refuses_one_that_no_longer_matches() {
    let Some(s) = StandIn::start("destroy_plan_file", true) else {
        return;
    };
    ok(&s.scw(APPLY));
    s.take_requests();
    let file = s.dir.path().join("destroy-plan.jsonl");
    let file_arg = file.to_str().unwrap();

    // The plan, written and shown; nothing changed.
    let out = s.scw(&["destroy", "--plan-out", file_arg]);
    let said = pairs(&ok(&out));
    assert_eq!(said["CLUSTER"], "edge-par");
    assert_eq!(said["PROJECT"], PROJECT);
    assert_eq!(said["POWER"], "running");
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    let text = std::fs::read_to_string(&file).unwrap();
    let (header, rest) = text.split_once('\n').unwrap();
    let header: Value = serde_json::from_str(header).unwrap();
    assert_eq!(
        header,
        json!({"kind": "DestroyPlan", "cluster": "edge-par", "project": PROJECT, "zone": "fr-par-1"})
    );
    let planned = lines(rest);
    assert_eq!(said["RESOURCES"], planned.len().to_string());
    let shown = question_lines(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(shown, kind_and_id(&planned), "the list shown is the plan");

    // Something new of the cluster appears: the plan shown is no longer the truth.
    s.seed(json!({"kind": "ip", "tags": [CLUSTER_TAG]}));
    s.take_requests();
    let out = s.scw(&["destroy", "--plan", file_arg, "--yes"]);
    let stderr = failed(&out);
    assert!(
        stderr.contains("no longer matches") && stderr.contains("flexible-ip"),
        "{stderr}"
    );
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());

    // A plan made for another project is refused as well.
    let foreign = text.replace(PROJECT, OTHER_PROJECT);
    let foreign_file = s.dir.path().join("foreign-plan.jsonl");
    std::fs::write(&foreign_file, foreign).unwrap();
    let out = s.scw(&["destroy", "--plan", foreign_file.to_str().unwrap(), "--yes"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not for cluster edge-par"));
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    // So is a file that is no plan, or none: bad input, named.
    let garbage = s.dir.path().join("garbage-plan.jsonl");
    std::fs::write(&garbage, "garbage\n").unwrap();
    let missing = s.dir.path().join("missing-plan.jsonl");
    for (path, needle) in [(&garbage, "not a destroy plan"), (&missing, "cannot read")] {
        let out = s.scw(&["destroy", "--plan", path.to_str().unwrap(), "--yes"]);
        assert_eq!(out.status.code(), Some(2), "{}", path.display());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&path.display().to_string()) && stderr.contains(needle),
            "{stderr}"
        );
    }
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());

    // A new plan, carried out: exactly its resources are deleted, and the file is used up.
    let said = pairs(&ok(&s.scw(&["destroy", "--plan-out", file_arg])));
    let planned = lines(
        std::fs::read_to_string(&file)
            .unwrap()
            .split_once('\n')
            .unwrap()
            .1,
    );
    assert_eq!(said["RESOURCES"], planned.len().to_string());
    s.take_requests();
    let removed = lines(&ok(&s.scw(&["destroy", "--plan", file_arg, "--yes"])));
    assert_eq!(removed, planned);
    let mut deleted = deletions(s.take_requests());
    deleted.sort();
    let mut expected = kind_and_id(&planned);
    expected.sort();
    assert_eq!(deleted, expected);
    assert!(
        !file.exists(),
        "a plan carried out is not left to be run again"
    );
}

#[test]
fn a_stopping_worker_is_waited_for_until_stopped_then_started() {
    let Some(s) = StandIn::start("stopping_worker", false) else {
        return;
    };
    s.seed(
        json!({"kind": "baremetal_server", "name": "edge-worker-1", "status": "stopping",
                  "tags": [CLUSTER_TAG, "edgepop-role=worker", "edgepop-node=edge-worker-1"]}),
    );
    // The plan waits only for what is under way (the stop) and for what it sends (the start).
    let plan = lines(&ok(&s.scw(&["power", "on", "--dry-run"])));
    let kinds: Vec<(&str, &str)> = plan
        .iter()
        .map(|p| {
            (
                p["step"].as_str().unwrap(),
                p["status"]
                    .as_str()
                    .or_else(|| p["action"].as_str())
                    .unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("wait-worker", "stopped"),
            ("power-worker", "start"),
            ("wait-worker", "ready")
        ],
        "{plan:?}"
    );
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    ok(&s.scw(&["power", "on"]));
    let state = s.state();
    assert_eq!(tagged(&state["bm_servers"])[0]["status"], "ready");
    let writes = mutations(&s.take_requests());
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(writes[0].ends_with("/start"), "{writes:?}");
}

#[test]
fn plain_http_endpoints_other_than_loopback_are_refused_before_any_call() {
    let Some(s) = StandIn::start("plain_http", false) else {
        return;
    };
    for (var, url) in [
        ("SCW_API_URL", "http://api.scaleway.com"),
        ("SCW_S3_ENDPOINT", "http://s3.fr-par.scw.cloud"),
    ] {
        let config = s.dir.path().join("infra.json");
        let out = s
            .scw_infra()
            .args(["power", "off", "--dry-run", "--config"])
            .arg(&config)
            .env("SCW_CONFIG_PATH", s.dir.path().join("none.yaml"))
            .env("SCW_ACCESS_KEY", ACCESS)
            .env("SCW_SECRET_KEY", SECRET)
            .env("SCW_DEFAULT_PROJECT_ID", PROJECT)
            .env(var, url)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{var}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(var) && stderr.contains("https"),
            "{var}: {stderr}"
        );
        assert_not_shown(&out, &[SECRET]);
    }
    assert!(s.take_requests().is_empty());
}

#[test]
fn an_uploaded_object_is_reused_only_when_it_is_this_very_image() {
    let Some(s) = StandIn::start("image_reuse", false) else {
        return;
    };
    // A disk of 6 MiB that does not compress, and the QCOW2 the tool will make of it.
    let Some(talos) = FactoryImage::serve(&s, "image_reuse", 6 << 20, 7) else {
        return;
    };
    let digest = &talos.digest;
    let qcow2 = s.dir.path().join("disk.qcow2");
    let converted = Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "qcow2"])
        .arg(&talos.raw)
        .arg(&qcow2)
        .status()
        .unwrap();
    assert!(converted.success());
    let image = std::fs::read(&qcow2).unwrap();

    // Where the tool uploads it, another file of the same size already is: a QCOW2 header and
    // nothing of this image (an older conversion, a half-written upload, someone else's file).
    let name = format!("edgepop-edge-par-{}", &PROJECT[..8]);
    let bucket = s.dir.path().join("s3").join(&name);
    std::fs::create_dir_all(&bucket).unwrap();
    // A bucket of this project, where the S3 stand-in keeps it.
    let projects = s.dir.path().join("s3.projects");
    std::fs::create_dir_all(&projects).unwrap();
    std::fs::write(projects.join(&name), PROJECT).unwrap();
    let key = format!("talos%2Fv1.14.0-{}.qcow2", &digest[..12]);
    let mut other = b"QFI\xfb".to_vec();
    other.resize(image.len(), 0);
    std::fs::write(bucket.join(&key), &other).unwrap();

    let apply = || s.scw(&talos.apply_args(digest));
    // The run uploads the image over it; the import then fails (a refusal of the Block API),
    // which leaves the object for the next run.
    s.faults(
        json!([{"method": "POST", "path": "/import-from-object-storage$", "kind": "status",
                     "status": 400, "count": 1}]),
    );
    let out = apply();
    assert_eq!(out.status.code(), Some(1), "{}", ok_or_text(&out));
    assert!(
        ok_or_text(&out).contains("holds another file"),
        "{}",
        ok_or_text(&out)
    );
    let uploads = s
        .take_s3()
        .iter()
        .filter(|r| r["method"] == "PUT" && r["size"].as_u64().unwrap() > 0)
        .count();
    assert!(uploads > 0, "the other file was taken for this image");
    assert!(
        std::fs::read(bucket.join(&key)).unwrap() == image,
        "the object is not this image"
    );
    s.take_requests();

    // The next run reuses its own upload: nothing is uploaded, the import is made from it.
    let out = apply();
    ok(&out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is already uploaded"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let puts = s
        .take_s3()
        .iter()
        .filter(|r| r["method"] == "PUT" && r["size"].as_u64().unwrap() > 0)
        .count();
    assert_eq!(puts, 0);
    s.take_requests();
}

/// The command fails at its first call, to a `host` that does not resolve: the call and the host
/// named, no retry, and the one read `counted` so.
fn assert_unresolved_once(command: &mut Command, call: &str, host: &str, counted: &str) {
    let out = command.output().unwrap();
    let stderr = failed(&out);
    assert!(
        stderr.contains(call)
            && stderr.contains(&format!("cannot resolve the host {host}"))
            && !stderr.contains("retrying"),
        "{stderr}"
    );
    assert!(stderr.contains(counted), "{stderr}");
}

#[test]
fn a_host_that_does_not_resolve_is_named_tried_once_and_counted() {
    let Some(s) = StandIn::start("unresolvable", false) else {
        return;
    };
    // The API at a name that never resolves (RFC 6761): one attempt, and the host is named.
    let mut apply = s.scw_command(APPLY, SECRET);
    apply
        .arg("--dry-run")
        .env("SCW_API_URL", "https://api.edgepop-test.invalid");
    assert_unresolved_once(
        &mut apply,
        "GET https://api.edgepop-test.invalid/registry/v1/regions/fr-par/",
        "api.edgepop-test.invalid",
        "API calls: 1 reads, 0 mutations (0 retries)",
    );
    // Object Storage the same: destroy's bucket lookup, after the API's reads.
    let mut destroy = s.scw_command(&["destroy", "--dry-run"], SECRET);
    destroy.env("SCW_S3_ENDPOINT", "https://s3.edgepop-test.invalid");
    assert_unresolved_once(
        &mut destroy,
        "S3 HEAD https://s3.edgepop-test.invalid/",
        "s3.edgepop-test.invalid",
        "Object Storage: 1 reads, 0 writes (0 retries)",
    );
    s.take_requests();
}

#[test]
fn a_zone_without_elastic_metal_is_refused_before_any_request() {
    let Some(s) = StandIn::start("zone_refused", false) else {
        return;
    };
    // The API refuses a zone its OpenAPI does not list for the product with a 400 (the
    // stand-in checks the zone path parameter against the spec's enum), after whatever calls
    // came before: the config is refused first, locally.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    for path in [
        "/instance/v1/zones/fr-par-9/servers",
        "/baremetal/v1/zones/fr-par-3/servers",
    ] {
        let mut answer = agent
            .get(format!("{}{path}", s.scaleway.url()))
            .header("X-Auth-Token", SECRET)
            .call()
            .unwrap();
        assert_eq!(answer.status().as_u16(), 400, "{path}");
        let body = answer.body_mut().read_to_string().unwrap();
        assert!(
            body.contains("invalid_arguments") && body.contains("path zone"),
            "{path}: {body}"
        );
    }
    s.take_log("requests.jsonl");
    let config = s.dir.path().join("infra.json");
    let mut infra: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    for zone in ["fr-par-9", "fr-par-3"] {
        infra["zone"] = json!(zone);
        std::fs::write(&config, infra.to_string()).unwrap();
        let out = s.scw(&["apply", "--talos-version", "v1.13.11", "--dry-run"]);
        assert_eq!(out.status.code(), Some(2), "{zone}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("field `zone`") && stderr.contains("Elastic Metal"),
            "{zone}: {stderr}"
        );
        assert!(s.take_requests().is_empty(), "{zone}: the API was asked");
    }
}

#[test]
fn the_credentials_source_is_what_gave_the_keys() {
    let Some(s) = StandIn::start("credentials_source", false) else {
        return;
    };
    // Only the environment, and no config file where the default one would be.
    let out = s
        .scw_infra()
        .arg("credentials")
        .env("SCW_ACCESS_KEY", ACCESS)
        .env("SCW_SECRET_KEY", SECRET)
        .env("SCW_DEFAULT_PROJECT_ID", PROJECT)
        .output()
        .unwrap();
    let line: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(
        line["source"],
        "the environment variables SCW_ACCESS_KEY, SCW_SECRET_KEY, SCW_DEFAULT_PROJECT_ID"
    );
    // Only the file, at the default place under HOME.
    let dir = s.dir.path().join(".config/scw");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.yaml"),
        format!("access_key: {ACCESS}\nsecret_key: {SECRET}\ndefault_project_id: {PROJECT}\n"),
    )
    .unwrap();
    let out = s.scw_infra().arg("credentials").output().unwrap();
    let line: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(
        line["source"],
        format!(
            "the default profile of {}",
            dir.join("config.yaml").display()
        )
    );
}

#[test]
fn one_control_plane_goes_alone_and_apply_makes_it_again_at_its_address() {
    let Some(s) = StandIn::start("destroy_one_control_plane", true) else {
        return;
    };
    ok(&s.scw(APPLY));
    s.take_requests();
    let node = "edge-par-cp-2";
    let server = |state: &Value| -> Option<Value> {
        tagged(&state["servers"])
            .into_iter()
            .find(|s| s["name"] == node)
            .cloned()
    };
    let before = s.state();
    let old = server(&before).unwrap();
    let address_of = |state: &Value, server: &Value| -> String {
        let ip = &server["public_ips"][0];
        let id = ip.as_str().or_else(|| ip["id"].as_str()).unwrap();
        tagged(&state["ips"])
            .into_iter()
            .find(|i| i["id"] == id)
            .unwrap()["address"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let address = address_of(&before, &old);

    // The plan names that Instance and nothing of the rest of the cluster.
    let planned = lines(&ok(&s.scw(&["destroy", "--node", node, "--dry-run"])));
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    let servers: Vec<&Value> = planned
        .iter()
        .filter(|l| l["removed"] == "instance-server")
        .collect();
    assert_eq!(servers.len(), 1, "{planned:?}");
    assert_eq!(servers[0]["id"], old["id"]);
    assert!(
        planned
            .iter()
            .all(|l| l["removed"] == "instance-server" || l["removed"] == "volume"),
        "{planned:?}"
    );

    // Carried out as `make replace-control-plane` does it: exactly the plan's deletions; the
    // other servers, every address, the records and the security group stay.
    destroy_from_node_plan(&s, node, planned.len());
    let mut deleted = deletions(s.take_requests());
    deleted.sort();
    let mut expected = kind_and_id(&planned);
    expected.sort();
    assert_eq!(deleted, expected);
    let after = s.state();
    assert!(server(&after).is_none());
    assert_eq!(tagged(&after["servers"]).len(), 2);
    for kind in ["ips", "security_groups", "bm_servers"] {
        assert_eq!(
            tagged(&after[kind]).len(),
            tagged(&before[kind]).len(),
            "{kind}"
        );
    }

    // The next apply makes it again, under its name and at its address.
    ok(&s.scw(APPLY));
    let again = s.state();
    let new = server(&again).unwrap();
    assert_ne!(new["id"], old["id"]);
    assert_eq!(address_of(&again, &new), address);
    assert_eq!(tagged(&again["servers"]).len(), 3);

    // A name that is not one of the config's control planes is refused before any call.
    s.take_requests();
    for (name, says) in [
        ("edge-worker-1", "REFLASH=yes make apply-infra"),
        (
            "edge-par-cp-9",
            "edge-par-cp-1, edge-par-cp-2, edge-par-cp-3",
        ),
    ] {
        let out = s.scw(&["destroy", "--node", name, "--dry-run"]);
        assert_eq!(out.status.code(), Some(2), "{}", ok_or_text(&out));
        assert!(ok_or_text(&out).contains(says), "{}", ok_or_text(&out));
    }
    assert!(s.take_requests().is_empty());
}

/// `destroy --node NODE` as `make replace-control-plane` runs it: the plan written and shown
/// (`--plan-out`, `planned` resources, nothing changed), then carried out from its file, which
/// is used up. Before that, a whole cluster's plan given with `--node` is refused as not this
/// node's, nothing deleted.
fn destroy_from_node_plan(s: &StandIn, node: &str, planned: usize) {
    let file = s.dir.path().join("replace-plan.jsonl");
    let file_arg = file.to_str().unwrap();
    ok(&s.scw(&["destroy", "--plan-out", file_arg]));
    s.take_requests();
    let out = s.scw(&["destroy", "--node", node, "--plan", file_arg, "--yes"]);
    assert!(
        failed(&out).contains("no longer matches"),
        "{}",
        failed(&out)
    );
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    let plan_out = ["destroy", "--node", node, "--plan-out", file_arg];
    let said = pairs(&ok(&s.scw(&plan_out)));
    assert_eq!(said["RESOURCES"], planned.to_string());
    assert_eq!(mutations(&s.take_requests()), Vec::<String>::new());
    ok(&s.scw(&["destroy", "--node", node, "--plan", file_arg, "--yes"]));
    assert!(!file.exists());
}

/// The test's config with `workers` as given.
fn write_workers(s: &StandIn, workers: &[&str]) {
    let path = s.dir.path().join("infra.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let first = config["workers"][0].clone();
    config["workers"] = workers
        .iter()
        .map(|name| {
            let mut worker = first.clone();
            worker["name"] = json!(name);
            worker
        })
        .collect();
    std::fs::write(&path, config.to_string()).unwrap();
}

/// The addresses the zone's `www` A records hold, sorted.
fn www_addresses(state: &Value) -> Vec<String> {
    let mut found: Vec<String> = state["records"]["example.com"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == "www" && r["type"] == "A")
        .map(|r| r["data"].as_str().unwrap().to_owned())
        .collect();
    found.sort();
    found
}

/// The worker servers of the cluster, by their `edgepop-node` tag: (node, IPv4).
fn worker_servers(state: &Value) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = tagged(&state["bm_servers"])
        .into_iter()
        .map(|s| {
            let node = s["tags"]
                .as_array()
                .unwrap()
                .iter()
                .find_map(|t| t.as_str()?.strip_prefix("edgepop-node="))
                .unwrap()
                .to_owned();
            let ipv4 = testkit::json::element(&s["ips"], "/version", "IPv4")["address"]
                .as_str()
                .unwrap()
                .to_owned();
            (node, ipv4)
        })
        .collect();
    found.sort();
    found
}

#[test]
fn each_worker_gets_a_server_every_edge_name_points_at_all_and_one_taken_out_leaves_alone() {
    let Some(s) = StandIn::start("two_workers", true) else {
        return;
    };
    write_workers(&s, &["edge-worker-1", "edge-worker-2"]);
    let inventory: Value = serde_json::from_str(ok(&s.scw(APPLY)).trim()).unwrap();
    s.take_requests();
    let state = s.state();
    let servers = worker_servers(&state);
    assert_eq!(
        servers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["edge-worker-1", "edge-worker-2"]
    );
    let mut both: Vec<String> = servers.iter().map(|(_, a)| a.clone()).collect();
    both.sort();
    assert_eq!(www_addresses(&state), both, "one A set holds every worker");
    let workers: Vec<(&str, &str)> = inventory["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["role"] == "worker")
        .map(|n| {
            (
                n["name"].as_str().unwrap(),
                n["install_disk"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        workers,
        [("edge-worker-1", "/dev/sda"), ("edge-worker-2", "/dev/sda")]
    );

    assert_a_new_worker_is_named_once_proved_ours(&s, &inventory, &servers[0].1, &both);
    assert_a_worker_out_of_the_config_leaves_dns_then_goes_alone(&s, &servers[0]);
}

/// The edge names hold a worker of a running edge only once an earlier inventory records it as
/// proved ours; `both` is every worker's address, `first` worker-1's.
fn assert_a_new_worker_is_named_once_proved_ours(
    s: &StandIn,
    inventory: &Value,
    first: &str,
    both: &[String],
) {
    // A worker added to a running edge is named only once it is proved ours (configured): the
    // inventory of the run that configured worker-1 only, as the node tools leave it.
    let mut previous = inventory.clone();
    for node in previous["nodes"].as_array_mut().unwrap() {
        if node["name"] != "edge-worker-2" {
            node["steps"] = json!({"proved_ours": "ours"});
        }
    }
    let previous_file = s.dir.path().join("previous.json");
    std::fs::write(&previous_file, previous.to_string()).unwrap();
    let previous_arg = previous_file.to_str().unwrap();
    let mut apply = APPLY.to_vec();
    apply.extend(["--previous", previous_arg]);
    ok(&s.scw(&apply));
    s.take_requests();
    assert_eq!(www_addresses(&s.state()), [first]);
    previous["nodes"][4]["steps"] = json!({"proved_ours": "ours"});
    std::fs::write(&previous_file, previous.to_string()).unwrap();
    ok(&s.scw(&apply));
    s.take_requests();
    assert_eq!(www_addresses(&s.state()), both, "named once configured");
}

/// Taken out of the config, worker-2 leaves DNS but not the firewall, then `destroy --node`
/// removes its server alone; `kept` is worker-1 (node, IPv4).
fn assert_a_worker_out_of_the_config_leaves_dns_then_goes_alone(
    s: &StandIn,
    kept: &(String, String),
) {
    // A worker the config still lists is never destroyed alone.
    let out = s.scw(&["destroy", "--node", "edge-worker-2", "--dry-run"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("still lists it under workers"), "{stderr}");

    // Out of the config: the next apply points the names at the one left, leaves its server
    // be, and names it.
    write_workers(s, &["edge-worker-1"]);
    // Before that apply, its destroy plan would take its records too (one A per edge name).
    let early = lines(&ok(&s.scw(&[
        "destroy",
        "--node",
        "edge-worker-2",
        "--dry-run",
    ])));
    let records = early
        .iter()
        .filter(|r| r["removed"] == "dns-record")
        .count();
    assert_eq!((records, early.len()), (2, 3), "{early:?}");
    s.take_requests();
    let out = s.scw(APPLY);
    let inventory: Value = serde_json::from_str(ok(&out).trim()).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("make remove-worker NODE=edge-worker-2"),
        "{stderr}"
    );
    // Only its records change: the control planes' firewall still lets it in, until it is
    // drained and deleted.
    let writes = mutations(&s.take_requests());
    assert_eq!(
        writes,
        ["PATCH /domain/v2beta1/dns-zones/example.com/records"],
        "only DNS changes"
    );
    let state = s.state();
    assert_eq!(www_addresses(&state), [kept.1.as_str()]);
    assert_eq!(worker_servers(&state).len(), 2);
    assert_eq!(
        inventory["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["role"] == "worker")
            .count(),
        1
    );

    // Then its server alone goes, as the plan shown says.
    let plan = ok(&s.scw(&["destroy", "--node", "edge-worker-2", "--dry-run"]));
    let planned = lines(&plan);
    assert_eq!(planned.len(), 1, "{plan}");
    assert_eq!(planned[0]["name"], "edge-worker-2", "{plan}");
    ok(&s.scw(&["destroy", "--node", "edge-worker-2", "--yes"]));
    s.take_requests();
    assert_eq!(worker_servers(&s.state()), std::slice::from_ref(kept));
    let out = s.scw(&["destroy", "--node", "edge-worker-2", "--dry-run"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no worker edge-worker-2 to remove"),
        "{stderr}"
    );
}
