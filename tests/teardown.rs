//! make destroy, destroy-infra and down against the Scaleway and S3 stand-ins (testkit's
//! `scaleway_api.py`, `s3_api.py`) and the talosctl stand-in, with the scw-infra cargo built:
//! the destroy question shows scw-infra's plan and names the cluster and the project, and what is
//! deleted is that list; a cluster already powered off goes on to the infrastructure; the worker
//! is shut down through Talos, then stopped, before the control planes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use testkit::process::text;
use testkit::scaleway::{control, mutations};

const SECRET: &str = "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b";
const ACCESS: &str = "SCWTEARDOWNTEARDOWNT";
const PROJECT: &str = "11111111-1111-4111-8111-111111111111";
const CLUSTER_TAG: &str = "edgepop-cluster=edge-par";

struct World {
    scaleway: testkit::standin::StandIn,
    s3: testkit::standin::StandIn,
    dir: tempfile::TempDir,
}

impl World {
    /// The stand-ins holding this cluster's Talos image; `None` (after skip_or_fail) when
    /// python3 or the shared specs are missing.
    fn start(test: &str) -> Option<World> {
        if !testkit::workspace::python3(test) {
            return None;
        }
        let shared = testkit::workspace::shared_dir(test)?;
        let dir = tempfile::tempdir().unwrap();
        let scaleway = testkit::standin::scaleway(&shared, dir.path(), SECRET, PROJECT, None);
        let s3 = testkit::standin::s3(dir.path(), ACCESS, SECRET);
        let key = dir.path().join("id.pub");
        fs::write(
            &key,
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlYXJkb3duLXRlc3Qta2V5LW5vdC1yZWFs t@e\n",
        )
        .unwrap();
        let mut config: Value = serde_json::from_str(
            &fs::read_to_string(testkit::workspace::root().join("config/infra.example.json"))
                .unwrap(),
        )
        .unwrap();
        config["ssh_public_key_path"] = json!(key);
        fs::write(dir.path().join("infra.json"), config.to_string()).unwrap();
        fs::create_dir_all(dir.path().join("out")).unwrap();
        fs::create_dir_all(dir.path().join("talos-state")).unwrap();
        let world = World { scaleway, s3, dir };
        control(
            &world.scaleway.url(),
            "seed",
            Some(&json!({"kind": "image", "name": "talos-v1.13.11",
                         "tags": ["edgepop-talos=v1.13.11", CLUSTER_TAG]})),
        );
        Some(world)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `program` with only the stand-ins' credentials and endpoints, the talosctl stand-in first
    /// on PATH, and its log interleaved with the Scaleway requests (one file, in order).
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let bin = self.path("bin");
        fs::create_dir_all(&bin).unwrap();
        if !bin.join("talosctl").exists() {
            std::os::unix::fs::symlink(testkit::standin::path("talosctl"), bin.join("talosctl"))
                .unwrap();
        }
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("HOME", self.dir.path())
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            // The stand-ins on PATH, never the clients of a `make tools` folder.
            .env("TOOLS_DIR", "")
            .env("TALOSCTL_LOG", self.path("requests.jsonl"))
            .env("TALOSCTL_STATE", self.path("talos-state"))
            .current_dir(testkit::workspace::root())
            .stdin(Stdio::null());
        testkit::scaleway::stand_in_env(
            &mut cmd,
            self.dir.path(),
            &self.scaleway,
            &self.s3,
            (ACCESS, SECRET, PROJECT),
        );
        cmd
    }

    fn scw_infra(&self, args: &[&str]) -> Output {
        let out = self
            .command(testkit::workspace::bin("scw-infra"))
            .args(args)
            .arg("--config")
            .arg(self.path("infra.json"))
            .args(["--poll-seconds", "0", "--retry-base-ms", "1"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        out
    }

    /// The stand-ins, and the cluster on them as `make apply-infra` leaves it: where the tests of
    /// taking it down start.
    fn applied(test: &str) -> Option<World> {
        let world = World::start(test)?;
        world.apply();
        Some(world)
    }

    /// The cluster, as `make apply-infra` leaves it: built, its inventory in out/.
    fn apply(&self) {
        let out = self.scw_infra(&["apply", "--talos-version", "v1.13.11"]);
        fs::write(self.path("out/inventory.json"), &out.stdout).unwrap();
        fs::write(self.path("out/talosconfig"), "context: edge-par\n").unwrap();
        self.take_log();
    }

    /// `make <args>` for this world (the tools cargo built; nothing rebuilt).
    fn make_args(&self) -> Vec<String> {
        let bin = testkit::workspace::bin("scw-infra");
        vec![
            "--no-print-directory".into(),
            format!("OUT={}", self.path("out").display()),
            format!("INFRA_CONFIG={}", self.path("infra.json").display()),
            format!("BIN={}", bin.parent().unwrap().display()),
            "RUST_SOURCES=".into(),
        ]
    }

    /// Everything logged (Scaleway requests, talosctl calls as `{argv, scw_secret_in_env}`), in
    /// order, and forgets it.
    fn take_log(&self) -> Vec<Value> {
        testkit::scaleway::take_log(&self.path("requests.jsonl"))
    }

    /// `make <args>` for this world, which must succeed.
    fn make_ok(&self, args: &[&str]) -> Output {
        let out = self
            .command("make")
            .args(self.make_args())
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        out
    }

    /// The public IPv4 of the inventory's nodes of `role`, in its order.
    fn addresses(&self, role: &str) -> Vec<String> {
        let inventory: Value =
            serde_json::from_str(&fs::read_to_string(self.path("out/inventory.json")).unwrap())
                .unwrap();
        inventory["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["role"] == role)
            .map(|n| n["public_ipv4"].as_str().unwrap().to_owned())
            .collect()
    }

    fn state(&self) -> Value {
        control(&self.scaleway.url(), "state", None)
    }

    /// Nothing tagged with the cluster is left: no server, address, group or Elastic Metal
    /// server.
    fn assert_the_cluster_is_gone(&self) {
        let state = self.state();
        for kind in ["servers", "ips", "security_groups", "bm_servers"] {
            assert!(tagged(&state[kind]).is_empty(), "{kind}: {}", state[kind]);
        }
    }
}

fn tagged(objects: &Value) -> Vec<&Value> {
    testkit::scaleway::tagged(objects, CLUSTER_TAG)
}

/// The ids of what a destroy's requests deleted (terminated Instances, deleted objects).
fn deleted_ids(log: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = log
        .iter()
        .filter(|r| r.is_object())
        .filter_map(|r| {
            let path = r["path"].as_str().unwrap();
            match r["method"].as_str().unwrap() {
                "DELETE" => path.rsplit('/').next().map(str::to_owned),
                "POST" if path.ends_with("/action") => {
                    assert_eq!(r["body"]["action"], "terminate", "{r}");
                    path.split('/').rev().nth(1).map(str::to_owned)
                }
                _ => None,
            }
        })
        .collect();
    ids.sort();
    ids
}

/// The ids of the question's lines (`  <kind> <name> (<id>)[, terminated]`).
fn question_ids(terminal: &str) -> Vec<String> {
    let mut ids: Vec<String> = terminal
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| l.starts_with("  ") && l.contains(" ("))
        .map(|l| {
            let l = l
                .trim()
                .trim_end_matches(", terminated")
                .trim_end_matches(", deleted");
            l.rsplit_once(" (")
                .unwrap()
                .1
                .trim_end_matches(')')
                .to_owned()
        })
        .collect();
    ids.sort();
    ids
}

#[test]
fn make_destroy_infra_asks_naming_cluster_and_project_and_deletes_the_list_it_showed() {
    let test = "make_destroy_infra_prompt";
    let Some(world) = World::start(test) else {
        return;
    };
    let Some(script) = testkit::process::which("script") else {
        testkit::skip_or_fail(test, "util-linux script (a pseudo-terminal)");
        return;
    };
    world.apply();
    let make = |answer: &str| {
        let mut make = world.command("make");
        make.args(world.make_args()).arg("destroy-infra");
        let out = testkit::process::at_a_terminal(&script, &make, answer);
        let terminal = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(!terminal.contains(SECRET), "{terminal}");
        (terminal, out.status.code())
    };

    // A wrong answer: the list and the question, and nothing deleted.
    let (terminal, code) = make("edge-ams");
    assert_ne!(code, Some(0), "{terminal}");
    let shown = question_ids(&terminal);
    assert!(shown.len() > 10, "{terminal}");
    assert!(
        terminal.contains(&format!("of cluster edge-par in project {PROJECT}"))
            && terminal.contains("Type the cluster name (edge-par)"),
        "{terminal}"
    );
    assert!(terminal.contains("nothing destroyed"), "{terminal}");
    assert_eq!(mutations(&world.take_log()), Vec::<String>::new());

    // The cluster's name: exactly the list shown is deleted.
    let (terminal, code) = make("edge-par");
    assert_eq!(code, Some(0), "{terminal}");
    assert_eq!(
        question_ids(&terminal),
        shown,
        "the same plan is shown again"
    );
    assert_eq!(deleted_ids(&world.take_log()), shown, "{terminal}");
    world.assert_the_cluster_is_gone();
}

#[test]
fn make_destroy_goes_on_to_the_infra_when_the_cluster_is_powered_off() {
    let Some(world) = World::applied("make_destroy_powered_off") else {
        return;
    };
    world.scw_infra(&["power", "off"]);
    world.take_log();
    // No kubeconfig, no platform inputs, no edge config: the Kubernetes layers cannot be reached,
    // and need not be: their objects go with the servers.
    let out = world.make_ok(&["destroy", "CONFIRM=yes"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is stopped")
            && stderr.contains("skipping destroy-edge and destroy-platform"),
        "{stderr}"
    );
    let log = world.take_log();
    assert!(!deleted_ids(&log).is_empty());
    world.assert_the_cluster_is_gone();
}

#[test]
fn make_destroy_skips_a_layer_never_configured_before_asking_and_goes_on() {
    let Some(world) = World::applied("make_destroy_skips_a_layer") else {
        return;
    };
    // The cluster runs and its kubeconfig is there, but neither Kubernetes layer was ever
    // configured from here (a first `make apply` that stopped after the infrastructure).
    fs::write(
        world.path("out/kubeconfig"),
        "apiVersion: v1\nkind: Config\n",
    )
    .unwrap();
    let edge = format!("EDGE_CONFIG={}", world.path("edge.json").display());
    let platform = format!("PLATFORM_CONFIG={}", world.path("platform.json").display());
    let out = world.make_ok(&[&edge, &platform, "destroy", "CONFIRM=yes"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for layer in ["edge", "platform"] {
        let config = world.path(&format!("{layer}.json"));
        assert!(
            stderr.contains(&format!("no {layer} config at '{}'", config.display()))
                && stderr.contains(&format!("skipping destroy-{layer}")),
            "{stderr}"
        );
    }
    world.assert_the_cluster_is_gone();
}

/// The position in `log` of the first entry `matches` picks.
pub(crate) fn first(log: &[Value], what: &str, matches: impl Fn(&Value) -> bool) -> usize {
    log.iter()
        .position(matches)
        .unwrap_or_else(|| panic!("no {what} in {log:#?}"))
}

pub(crate) fn talosctl_on(entry: &Value, node: &str) -> bool {
    let argv: Vec<&str> = entry["argv"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    argv.contains(&"shutdown") && argv.windows(2).any(|w| w == ["--nodes", node])
}

#[test]
fn make_down_shuts_down_through_talos_each_control_plane_that_runs_when_another_is_off() {
    let Some(world) = World::applied("make_down_mixed") else {
        return;
    };
    let running = world.addresses("controlplane");
    // A fourth control plane of the cluster, stopped: the control planes are `mixed`.
    let off = control(
        &world.scaleway.url(),
        "seed",
        Some(&json!({"kind": "instance_server", "name": "edge-par-cp-4",
                     "tags": [CLUSTER_TAG, "edgepop-role=controlplane"]})),
    );
    assert_eq!(off["state"], "stopped", "{off}");
    world.take_log();
    world.make_ok(&["down"]);
    let log = world.take_log();
    let poweroff = first(&log, "poweroff", |e| e["body"]["action"] == "poweroff");
    for cp in &running {
        let at = first(&log, "control-plane shutdown", |e| talosctl_on(e, cp));
        assert!(at < poweroff, "{cp}: {log:#?}");
    }
    let shutdowns = log.iter().filter(|e| e.get("argv").is_some()).count();
    assert_eq!(shutdowns, 1 + running.len(), "{log:#?}");
}

#[test]
fn make_down_shuts_the_worker_down_through_talos_and_stops_it_before_the_control_planes() {
    let Some(world) = World::applied("make_down") else {
        return;
    };
    let (worker, control_planes) = (
        world.addresses("worker").remove(0),
        world.addresses("controlplane"),
    );

    world.make_ok(&["down"]);
    let log = world.take_log();
    let worker_shutdown = first(&log, "worker shutdown", |e| talosctl_on(e, &worker));
    let worker_stop = first(&log, "worker stop", |e| {
        e["method"] == "POST" && e["path"].as_str().is_some_and(|p| p.ends_with("/stop"))
    });
    let poweroff = first(&log, "poweroff", |e| e["body"]["action"] == "poweroff");
    assert!(worker_shutdown < worker_stop, "{log:#?}");
    // The worker is drained (no --force); the control planes, which run no workloads, are not.
    let argv = |i: usize| log[i]["argv"].as_array().unwrap().clone();
    assert!(
        !argv(worker_shutdown).contains(&json!("--force")),
        "{log:#?}"
    );
    for cp in &control_planes {
        let at = first(&log, "control-plane shutdown", |e| talosctl_on(e, cp));
        assert!(worker_stop < at && at < poweroff, "{cp}: {log:#?}");
        assert!(argv(at).contains(&json!("--force")), "{log:#?}");
    }
    // talosctl talks to Talos only: the Scaleway secret key is not in its environment.
    let talosctl: Vec<&Value> = log.iter().filter(|e| e.get("argv").is_some()).collect();
    assert_eq!(talosctl.len(), 1 + control_planes.len(), "{log:#?}");
    for call in talosctl {
        assert_eq!(call["scw_secret_in_env"], false, "{call}");
    }
    assert_a_shut_down_node_answers_nothing(&world, &control_planes[0]);
    world.take_log();
    let state = world.state();
    assert!(
        tagged(&state["servers"])
            .iter()
            .all(|s| s["state"] == "stopped")
    );
    assert!(
        tagged(&state["bm_servers"])
            .iter()
            .all(|s| s["status"] == "stopped")
    );
    assert_up_powers_the_control_planes_on_before_the_worker(&world);
}

#[test]
fn make_down_with_two_workers_drains_neither_and_stops_both_before_the_control_planes() {
    let Some(world) = World::start("make_down_two_workers") else {
        return;
    };
    // Two workers: the gateway's disruption budget would refuse the second drain, the first
    // one's gateway replacement having nowhere to go.
    let mut config: Value =
        serde_json::from_str(&fs::read_to_string(world.path("infra.json")).unwrap()).unwrap();
    let mut second = config["workers"][0].clone();
    second["name"] = json!("edge-worker-2");
    config["workers"].as_array_mut().unwrap().push(second);
    fs::write(world.path("infra.json"), config.to_string()).unwrap();
    world.apply();
    let workers = world.addresses("worker");
    assert_eq!(workers.len(), 2, "{workers:?}");
    world.take_log();
    world.make_ok(&["down"]);
    let log = world.take_log();
    let first_control_plane = world.addresses("controlplane").remove(0);
    let control_plane = first(&log, "control-plane shutdown", |e| {
        talosctl_on(e, &first_control_plane)
    });
    for worker in &workers {
        let at = first(&log, "worker shutdown", |e| talosctl_on(e, worker));
        assert!(at < control_plane, "{worker}: {log:#?}");
        assert!(
            log[at]["argv"]
                .as_array()
                .unwrap()
                .contains(&json!("--force")),
            "{worker} is not drained: {log:#?}"
        );
    }
    assert!(
        tagged(&world.state()["bm_servers"])
            .iter()
            .all(|s| s["status"] == "stopped")
    );
}

/// A node Talos shut down answers no other call either (what the bring-up's probes meet).
fn assert_a_shut_down_node_answers_nothing(world: &World, control_plane: &str) {
    let probe = world
        .command("talosctl")
        .arg("--talosconfig")
        .arg(world.path("out/talosconfig"))
        .args(["--endpoints", control_plane, "--nodes", control_plane])
        .args(["get", "services", "etcd", "-o", "jsonpath={.spec.running}"])
        .output()
        .unwrap();
    assert!(
        !probe.status.success() && text(&probe).contains("code = Unavailable"),
        "{}",
        text(&probe)
    );
}

/// `make up`'s power step: the control planes before the worker.
fn assert_up_powers_the_control_planes_on_before_the_worker(world: &World) {
    let out = world
        .command("bash")
        .arg(testkit::workspace::root().join("pipelines/power.sh"))
        .arg("up")
        .env("OUT", world.path("out"))
        .env("INFRA_CONFIG", world.path("infra.json"))
        .env(
            "BIN",
            testkit::workspace::bin("scw-infra").parent().unwrap(),
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let log = world.take_log();
    let poweron = first(&log, "poweron", |e| e["body"]["action"] == "poweron");
    let start = first(&log, "worker start", |e| {
        e["method"] == "POST" && e["path"].as_str().is_some_and(|p| p.ends_with("/start"))
    });
    let running = first(&log, "control planes running", |e| {
        e["method"] == "GET" && e["response"]["server"]["state"] == "running"
    });
    assert!(poweron < start && running < start, "{log:#?}");
}
