//! `make apply-infra` interrupted right after each call that changes something, then run again:
//! every interruption point must converge to what one uninterrupted run makes.
//!
//! The run is the rehearsal's layer 1 (tests/rehearsal.rs): the real scw-infra against the
//! Scaleway and S3 stand-ins (the control planes' image imported for real), the real
//! scw-rescue-flash through the real sshd standing for the worker's rescue system, the real
//! talosctl for the configs and its stand-in for the calls that need a node. talos-apply-insecure
//! is testkit's stand-in of its decisions (`stand-ins/talos-apply-insecure`): each node's answer
//! is read from what the stand-ins hold (an Instance's first boot with or without its config, the
//! worker's disk and boot), since no Talos node can run here.
//!
//! A point is the nth request of one service that can change something (Scaleway's API, Object
//! Storage) or the worker's config applied in maintenance mode. The stand-in serves it (it takes
//! effect) and never answers; the test then kills the whole `make` process group (SIGKILL, as a
//! lost terminal or machine leaves it: nothing cleans up) and runs `make apply-infra` again,
//! uninterrupted. Proved for every point: the rerun succeeds; the Scaleway objects and the
//! buckets are those of the uninterrupted run (by name and count: no duplicate, nothing orphaned),
//! every Instance is running with its IP attached; no control plane's first boot lacked its
//! config (maintenance mode); the worker's disk was written once, and never once it proved ours;
//! the Scaleway secret is in no file under OUT, no argv and no output.
//!
//! The points run in groups (one test each), so that they spread over the test threads; the
//! uninterrupted run they compare with is made once per group.

use std::fs;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::http::{Reply, Server};
use testkit::process::text;
use testkit::scaleway::control;

use crate::infra_pipeline::record_tool;
use crate::rehearsal::{
    CLUSTER_TAG, InfraStandIns, SECRET, WORKER_SCHEMATIC, record_rescue_flash, sha256,
};

/// The longest a run may take to reach its interruption point or to end: bounds the wait.
const RUN_BOUND: Duration = Duration::from_secs(300);

/// Layer 1's stand-ins and folders, fresh for each run that is interrupted.
struct Layer1 {
    dir: tempfile::TempDir,
    infra: InfraStandIns,
    talosctl: PathBuf,
    /// The id of the server of another project that carries our cluster's tags.
    theirs: String,
}

/// A project the same API key reads, which is not the deployment's.
const OTHER_PROJECT: &str = "44444444-4444-4444-8444-444444444444";

/// Where a run is interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    /// After the nth request of the Scaleway API that can change something.
    Scaleway(usize),
    /// After the nth such request of Object Storage.
    ObjectStorage(usize),
    /// After the worker's config was applied in maintenance mode.
    WorkerConfig,
}

/// What one interrupted run did.
#[derive(Debug)]
enum Interrupted {
    /// Killed right after this call.
    After(String),
    /// The run ended before the point came (the service got fewer such requests).
    NeverReached,
}

impl Layer1 {
    fn start(test: &str) -> Option<Layer1> {
        let talosctl = testkit::upstream::program(test, "talosctl")?;
        let dir = tempfile::tempdir().unwrap();
        // The Image Factory, answering by path as often as asked: a rerun downloads again what
        // the interrupted run had not kept.
        let infra = InfraStandIns::start(test, dir.path(), |worker, control_plane| {
            let talos = testkit::pin("TALOS_VERSION");
            let control_plane_schematic = testkit::pin("TALOS_CONTROL_PLANE_SCHEMATIC");
            Server::routes(vec![
                (
                    "POST",
                    "/schematics".into(),
                    Reply::json(201, format!(r#"{{"id":"{WORKER_SCHEMATIC}"}}"#)),
                ),
                (
                    "GET",
                    format!("/image/{WORKER_SCHEMATIC}/{talos}/metal-amd64.raw.zst"),
                    Reply::ok(worker.to_vec()),
                ),
                (
                    "GET",
                    format!("/image/{control_plane_schematic}/{talos}/scaleway-amd64.raw.zst"),
                    Reply::ok(control_plane.to_vec()),
                ),
            ])
            .unwrap()
        })?;
        fs::write(
            dir.path().join("cluster-kubeconfig"),
            "apiVersion: v1\nkind: Config\n",
        )
        .unwrap();
        install_node_tools(dir.path(), infra.sshd.port);
        // Another project the same key reads holds a control plane with our cluster's very tags:
        // no run, interrupted or not, may touch it.
        let seed = |body: Value| control(&infra.scaleway.url(), "seed", Some(&body));
        let image = seed(json!({"kind": "image", "name": "theirs", "project": OTHER_PROJECT}));
        let theirs = seed(json!({"kind": "instance_server", "name": "edge-par-cp-1",
                                 "project": OTHER_PROJECT, "image": image["id"],
                                 "tags": [CLUSTER_TAG, "edgepop-role=controlplane",
                                          "edgepop-node=edge-par-cp-1"]}));
        Some(Layer1 {
            dir,
            infra,
            talosctl,
            theirs: theirs["id"].as_str().unwrap().to_owned(),
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `make apply-infra`, in a process group of its own, with the Makefile's variables pointing
    /// here and nothing else of this process's environment.
    fn apply_infra(&self, interrupt: Option<&Path>) -> Command {
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap()
        );
        let mut command = self.infra.make(self.dir.path(), &self.talosctl, &path);
        command
            .arg("apply-infra")
            .env("TALOSCTL_LOG", self.path("talosctl.jsonl"))
            .env("TALOS_APPLY_SCALEWAY", self.infra.scaleway.url())
            .env("TALOS_APPLY_DISK", self.infra.rescue.disk())
            .env("TALOS_APPLY_LOG", self.path("talos-apply.jsonl"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(marker) = interrupt {
            command.env("TALOS_APPLY_INTERRUPT", marker);
        }
        command
    }

    /// One `make apply-infra` that must succeed.
    fn apply_ok(&self, what: &str) -> String {
        let out = self.apply_infra(None).output().unwrap();
        assert!(out.status.success(), "{what}: {}", text(&out));
        assert_no_secret(&text(&out), what);
        text(&out)
    }

    /// One `make apply-infra` killed right after the call at `point`, or run to its end when the
    /// point never comes.
    fn apply_interrupted(&self, point: Point) -> Interrupted {
        let marker = self.path("interrupted");
        let service = match point {
            Point::Scaleway(nth) => Some((&self.infra.scaleway, nth)),
            Point::ObjectStorage(nth) => Some((&self.infra.s3, nth)),
            Point::WorkerConfig => None,
        };
        if let Some((stand_in, nth)) = service {
            let interrupt = json!({"nth": nth, "marker": marker});
            control(&stand_in.url(), "interrupt", Some(&interrupt));
        }
        let talos_marker = service.is_none().then_some(marker.as_path());
        let mut child = self.apply_infra(talos_marker).spawn().unwrap();
        let started = Instant::now();
        loop {
            if let Ok(call) = fs::read_to_string(&marker)
                && !call.is_empty()
            {
                kill_group(&mut child);
                let out = child.wait_with_output().unwrap();
                assert_no_secret(&text(&out), "the interrupted run");
                return Interrupted::After(call.trim().to_owned());
            }
            if let Some(status) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                assert!(
                    status.success(),
                    "the run to interrupt at {point:?} failed: {}",
                    text(&out)
                );
                return Interrupted::NeverReached;
            }
            assert!(
                started.elapsed() < RUN_BOUND,
                "the run neither reached {point:?} nor ended in {RUN_BOUND:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn state(&self) -> Value {
        control(&self.infra.scaleway.url(), "state", None)
    }

    /// The commands the worker's rescue system ran as root that wrote its disk.
    fn disk_writes(&self) -> usize {
        fs::read_to_string(self.infra.rescue.path("sudo.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("dd of="))
            .count()
    }
}

/// SIGKILL to the whole process group of `child` (make, the pipeline's shells and tools).
fn kill_group(child: &mut Child) {
    let status = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .status()
        .unwrap();
    assert!(status.success(), "kill of the process group failed");
}

fn assert_no_secret(said: &str, what: &str) {
    assert!(!said.contains(SECRET), "{what} printed the secret key");
}

/// BIN: the tools cargo built, the node tools' calls recorded; scw-rescue-flash runs for real
/// (told the rescue sshd's port, and to look again at once: the stand-in's server changes
/// state at each look), talos-apply-insecure is testkit's stand-in; on PATH, the talosctl
/// stand-in.
fn install_node_tools(dir: &Path, sshd_port: u16) {
    let bin = dir.join("tools");
    std::os::unix::fs::symlink(testkit::workspace::bin("scw-infra"), bin.join("scw-infra"))
        .unwrap();
    let log = dir.join("node-tools.log");
    record_rescue_flash(&bin, &log, sshd_port);
    record_tool(
        &bin,
        "talos-apply-insecure",
        &log,
        &format!(
            "exec {} \"$@\"",
            testkit::standin::path("talos-apply-insecure").display()
        ),
    );
    std::os::unix::fs::symlink(testkit::standin::path("talosctl"), dir.join("bin/talosctl"))
        .unwrap();
}

/// What the Scaleway and S3 stand-ins hold, without what each run names afresh (ids, addresses,
/// times): for each kind, the sorted names (`(unnamed)` for each object without one), and the
/// buckets' objects by path, so that a duplicate or an orphan shows.
fn summary(state: &Value, s3_root: &Path) -> Value {
    let mut out = serde_json::Map::new();
    for kind in [
        "security_groups",
        "ips",
        "servers",
        "volumes",
        "bm_servers",
        "ssh_keys",
        "namespaces",
        "images",
        "snapshots",
    ] {
        let objects = state[kind].as_array().unwrap();
        let mut names: Vec<String> = objects
            .iter()
            .map(|o| o["name"].as_str().unwrap_or("(unnamed)").to_owned())
            .collect();
        names.sort();
        out.insert(kind.to_owned(), json!(names));
    }
    let mut records: Vec<String> = state["records"]
        .as_object()
        .map(|zones| {
            zones
                .values()
                .flat_map(|r| r.as_array().cloned().unwrap_or_default())
                .map(|r| format!("{} {}", r["name"], r["type"]))
                .collect()
        })
        .unwrap_or_default();
    records.sort();
    out.insert("records".to_owned(), json!(records));
    // Object Storage: each bucket's objects, by key (the stand-in keeps a folder a bucket).
    let mut objects: Vec<String> = testkit::files_under(s3_root)
        .iter()
        .map(|f| f.strip_prefix(s3_root).unwrap().display().to_string())
        .collect();
    objects.sort();
    out.insert("objects".to_owned(), json!(objects));
    Value::Object(out)
}

/// The node steps the inventory records that the guards of later runs read, by node: the image
/// flashed and the proof that the node is ours. Not `config_applied`: a node configured by a run
/// killed before it wrote its inventory is found configured and ours by the rerun, which cannot
/// tell which config it took, and records the proof only (talos-apply-insecure, `AlreadyOurs`).
fn recorded_steps(out: &Path) -> Value {
    let inventory: Value =
        serde_json::from_str(&fs::read_to_string(out.join("inventory.json")).unwrap()).unwrap();
    let mut nodes = serde_json::Map::new();
    for node in inventory["nodes"].as_array().unwrap() {
        let steps = &node["steps"];
        nodes.insert(
            node["name"].as_str().unwrap().to_owned(),
            json!({"image_flashed": steps["image_flashed"], "proved_ours": steps["proved_ours"]}),
        );
    }
    Value::Object(nodes)
}

/// What an uninterrupted run made, which every interrupted one must converge to.
struct Converged {
    summary: Value,
    steps: Value,
    /// How many requests that can change something each service got.
    scaleway_changes: usize,
    object_storage_changes: usize,
}

fn uninterrupted(test: &str) -> Option<Converged> {
    let layer = Layer1::start(test)?;
    layer.apply_ok("the uninterrupted run");
    let state = layer.state();
    let changes = |log: &Path| {
        fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| {
                r["method"]
                    .as_str()
                    .is_some_and(|m| !["GET", "HEAD"].contains(&m))
            })
            .count()
    };
    let converged = Converged {
        summary: summary(&state, &layer.path("s3")),
        steps: recorded_steps(&layer.path("out")),
        scaleway_changes: changes(&layer.path("requests.jsonl")),
        object_storage_changes: changes(&layer.path("s3.jsonl")),
    };
    assert_converged(&layer, &state, &converged, "the uninterrupted run");
    Some(converged)
}

/// What every run must have left: the objects of the uninterrupted run, running and attached;
/// every control plane booted configured; the worker written once; no secret under OUT.
fn assert_converged(layer: &Layer1, state: &Value, converged: &Converged, what: &str) {
    assert_eq!(
        summary(state, &layer.path("s3")),
        converged.summary,
        "{what}: the objects"
    );
    assert_eq!(
        recorded_steps(&layer.path("out")),
        converged.steps,
        "{what}: the steps the inventory records"
    );
    for server in state["servers"].as_array().unwrap() {
        if server["id"] != layer.theirs.as_str() {
            assert_eq!(server["state"], "running", "{what}: {server}");
        }
    }
    for ip in state["ips"].as_array().unwrap() {
        assert_eq!(ip["state"], "attached", "{what}: {ip}");
    }
    assert_the_other_project_untouched(layer, state, what);
    assert_the_nodes_configured_once(layer, state, what);
    assert_no_secret_left(layer, what);
}

/// The other project's server is as it was, and was never the target of a call.
fn assert_the_other_project_untouched(layer: &Layer1, state: &Value, what: &str) {
    let theirs: Vec<&Value> = state["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|server| server["id"] == layer.theirs.as_str())
        .collect();
    assert_eq!(
        theirs.len(),
        1,
        "{what}: the other project's server is gone"
    );
    assert_eq!(theirs[0]["state"], "stopped", "{what}: {}", theirs[0]);
    let touched: Vec<String> = fs::read_to_string(layer.path("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["method"] != "GET")
        .filter(|r| {
            r["path"].to_string().contains(&layer.theirs)
                || r["body"].to_string().contains(&layer.theirs)
        })
        .map(|r| r["path"].to_string())
        .collect();
    assert!(touched.is_empty(), "{what}: {touched:?}");
}

/// Every control plane booted with its config (never in maintenance mode) and no longer holds it
/// in its user data, only the worker took a config in maintenance mode; the worker's disk was
/// written once, with its image.
fn assert_the_nodes_configured_once(layer: &Layer1, state: &Value, what: &str) {
    for (name, boot) in state["first_boots"].as_object().unwrap() {
        assert_eq!(boot, "config", "{what}: {name} opened maintenance mode");
    }
    let cluster: Vec<&Value> = testkit::scaleway::tagged(&state["servers"], CLUSTER_TAG)
        .into_iter()
        .filter(|server| server["id"] != layer.theirs.as_str())
        .collect();
    assert_eq!(
        state["first_boots"].as_object().unwrap().len(),
        cluster.len(),
        "{what}: every control plane booted: {}",
        state["first_boots"]
    );
    // Their config (every cluster CA key) no longer in their user data once they proved ours.
    for server in &cluster {
        let user_data = &state["user_data"][server["id"].as_str().unwrap()];
        assert!(
            user_data.get("cloud-init").is_none(),
            "{what}: {} keeps its config in its user data",
            server["name"]
        );
    }
    let applies = fs::read_to_string(layer.path("talos-apply.jsonl")).unwrap_or_default();
    let maintenance: Vec<&str> = applies
        .lines()
        .filter(|l| l.contains("configured-in-maintenance"))
        .collect();
    assert!(
        maintenance
            .iter()
            .all(|l| l.contains(r#""role": "worker""#)),
        "{what}: {maintenance:?}"
    );
    assert_eq!(layer.disk_writes(), 1, "{what}: the worker's disk writes");
    let disk = fs::read(layer.infra.rescue.disk()).unwrap();
    assert_eq!(
        sha256(&disk),
        sha256(&fs::read(layer.path("worker.raw")).unwrap()),
        "{what}: the worker's disk"
    );
}

/// The Scaleway secret in no file under OUT, no tool's argv or log, no build's environment.
fn assert_no_secret_left(layer: &Layer1, what: &str) {
    for file in testkit::files_under(&layer.path("out")) {
        let bytes = fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(SECRET),
            "{what}: the secret key is in {}",
            file.display()
        );
    }
    for log in ["node-tools.log", "talosctl.jsonl"] {
        let said = fs::read_to_string(layer.path(log)).unwrap_or_default();
        assert_no_secret(&said, log);
    }
    assert_eq!(
        fs::read_to_string(layer.path("secret-seen.log")).unwrap_or_default(),
        "",
        "{what}: a build got the secret"
    );
}

/// Interrupts a fresh run at each of `points`, reruns it, checks that it converged; prints the
/// table (point, call, outcome) and fails when a point did not converge.
fn interrupt_each(test: &str, points: impl Fn(&Converged) -> Vec<Point>) {
    let Some(converged) = uninterrupted(test) else {
        return;
    };
    let mut rows = Vec::new();
    for point in points(&converged) {
        let Some(layer) = Layer1::start(test) else {
            return;
        };
        let mut call = String::from("-");
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let Interrupted::After(after) = layer.apply_interrupted(point) else {
                panic!("{point:?} was never reached: the uninterrupted run made more calls");
            };
            call = without_ids(&after);
            let what = format!("after {point:?} ({call})");
            layer.apply_ok(&format!("the rerun {what}"));
            assert_converged(&layer, &layer.state(), &converged, &what);
            // Converged: one more run only reads.
            let before = layer.scaleway_changes_so_far();
            layer.apply_ok("the run after convergence");
            assert_eq!(
                layer.scaleway_changes_so_far(),
                before,
                "{what}: the run after convergence changed something"
            );
        }));
        let outcome = match outcome {
            Ok(()) => "converged".to_owned(),
            Err(panic) => panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default()
                .lines()
                .next()
                .unwrap_or("failed")
                .to_owned(),
        };
        rows.push(format!("{point:?}\t{call}\t{outcome}"));
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "interruptions ({test}):\n{}",
        rows.join("\n")
    );
    let failed: Vec<&String> = rows
        .iter()
        .filter(|r| !r.ends_with("\tconverged"))
        .collect();
    assert!(failed.is_empty(), "did not converge: {failed:#?}");
}

/// `call` with each path segment that is an id (a UUID) written `{id}`.
fn without_ids(call: &str) -> String {
    call.split('/')
        .map(|segment| {
            let is_id =
                segment.len() == 36 && segment.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
            if is_id { "{id}" } else { segment }
        })
        .collect::<Vec<_>>()
        .join("/")
}

impl Layer1 {
    /// How many requests that can change something the Scaleway stand-in got so far.
    fn scaleway_changes_so_far(&self) -> usize {
        fs::read_to_string(self.path("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                serde_json::from_str::<Value>(l)
                    .unwrap()
                    .get("method")
                    .is_some_and(|m| m != "GET")
            })
            .count()
    }
}

#[test]
fn an_apply_killed_after_any_of_the_first_half_of_its_scaleway_calls_converges_when_rerun() {
    interrupt_each("interrupted_scaleway_first_half", |converged| {
        (1..=converged.scaleway_changes / 2)
            .map(Point::Scaleway)
            .collect()
    });
}

#[test]
fn an_apply_killed_after_any_of_the_second_half_of_its_scaleway_calls_converges_when_rerun() {
    interrupt_each("interrupted_scaleway_second_half", |converged| {
        (converged.scaleway_changes / 2 + 1..=converged.scaleway_changes)
            .map(Point::Scaleway)
            .collect()
    });
}

#[test]
fn an_apply_killed_after_an_object_storage_call_or_the_worker_config_converges_when_rerun() {
    interrupt_each(
        "interrupted_object_storage_and_worker_config",
        |converged| {
            (1..=converged.object_storage_changes)
                .map(Point::ObjectStorage)
                .chain([Point::WorkerConfig])
                .collect()
        },
    );
}
