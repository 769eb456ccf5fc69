//! The rehearsal's `make add-worker` and `make remove-worker`, between apply and down: a second
//! worker, edge-worker-2, listed in the infra config, ordered through Scaleway, flashed through
//! its own rescue system (an sshd at 127.0.0.2, on the first rescue's port), configured, its
//! kwok Node Ready and the edge names pointing at both workers; then taken out of the config,
//! out of the records, drained, its Node and its server deleted, and nothing of it left.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use testkit::process::text;

use super::{
    SECOND_WORKER_ADDRESS, SECRET, Stage, WORKER_ADDRESS, istiod, leftovers, releases_by, sha256,
};

const SECOND: &str = "edge-worker-2";

/// The infra config with edge-worker-2 under `workers` (on the offer of the first, its disk
/// the second rescue's), or without it.
fn list_the_second_worker(stage: &Stage, listed: bool) {
    let path = stage.path("config/infra.json");
    let mut infra: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    let workers = infra["workers"].as_array_mut().unwrap();
    if listed {
        let mut second = workers[0].clone();
        second["name"] = json!(SECOND);
        second["install_disk"] = json!(stage.infra.second_rescue.disk());
        workers.push(second);
    } else {
        workers.retain(|w| w["name"] != SECOND);
    }
    fs::write(&path, infra.to_string()).unwrap();
}

/// Which of the applies a `make` ran: the first, or the last.
#[derive(Clone, Copy)]
enum Apply {
    First,
    Last,
}

/// The A sets of the edge names (the infra config's `edge_hostnames`) in the records the
/// `which` apply of `said` told the operator to create (the stand-in hosts no zone), by name.
fn a_sets_shown(stage: &Stage, said: &str, which: Apply) -> BTreeMap<String, BTreeSet<String>> {
    let infra: Value =
        serde_json::from_str(&fs::read_to_string(stage.path("config/infra.json")).unwrap())
            .unwrap();
    let edge_names: Vec<&str> = infra["edge_hostnames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let mut shown = said
        .lines()
        .filter_map(|l| l.split_once("create these records yourself: "));
    let shown = match which {
        Apply::First => shown.next(),
        Apply::Last => shown.next_back(),
    }
    .unwrap_or_else(|| panic!("no records shown: {said}"))
    .1;
    let mut sets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for record in shown.split("; ") {
        if let [name, "A", data] = record.split(' ').collect::<Vec<_>>()[..]
            && edge_names.contains(&name)
        {
            sets.entry(name.to_owned())
                .or_default()
                .extend(data.split(',').map(str::to_owned));
        }
    }
    assert_eq!(sets.len(), edge_names.len(), "{shown}");
    sets
}

/// Every edge name's A set is exactly `addresses` in the records of the `which` apply.
fn assert_the_a_sets(stage: &Stage, said: &str, which: Apply, addresses: &[&str]) {
    let want: BTreeSet<String> = addresses.iter().map(|a| (*a).to_owned()).collect();
    for (name, set) in a_sets_shown(stage, said, which) {
        assert_eq!(set, want, "{name}: {said}");
    }
}

/// `make <args>` with istiod answering meanwhile (apply-edge waits for its answers) and, when
/// `joins`, once the node stand-in at edge-worker-2's address holds its machine config, its
/// kubelet registering (a kwok Node, made Ready).
fn make_with_the_cluster_answering(stage: &Stage, args: &[&str], joins: bool) -> String {
    let stop = Arc::new(AtomicBool::new(false));
    let answering = istiod(
        stage.plane.kubeconfig().to_path_buf(),
        stage.kubectl_dir.join("kubectl"),
        stop.clone(),
    );
    let config =
        testkit::standin::talos_node_config(&stage.path("talos-state"), SECOND_WORKER_ADDRESS);
    let (plane, looking) = (&stage.plane, stop.clone());
    let out = std::thread::scope(|scope| {
        let joined = scope.spawn(move || {
            // Bounded: 5 minutes at most, a look every tenth of a second.
            for _ in 0..3000 {
                if joins && config.exists() {
                    plane.add_node(SECOND, &[]);
                    return;
                }
                if looking.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let out = stage.make(args);
        stop.store(true, Ordering::SeqCst);
        joined.join().unwrap();
        out
    });
    stop.store(true, Ordering::SeqCst);
    answering.join().unwrap();
    assert!(out.status.success(), "make {args:?}: {}", text(&out));
    assert!(!text(&out).contains(SECRET), "the secret key was printed");
    text(&out)
}

/// The worker servers the stand-in holds, by name.
fn worker_servers(stage: &Stage) -> BTreeMap<String, Value> {
    testkit::scaleway::tagged(&stage.state()["bm_servers"], super::CLUSTER_TAG)
        .into_iter()
        .map(|s| (s["name"].as_str().unwrap().to_owned(), s.clone()))
        .collect()
}

/// make add-worker NODE=edge-worker-2 once the config lists it: ordered, flashed through its
/// own rescue, configured (its node stand-in holds its own worker config), its Node Ready, and
/// the edge names pointing at both workers. Returns what the cluster left before.
pub(super) fn add_worker_step(stage: &Stage) -> Vec<String> {
    let before = leftovers(&stage.state());
    // Both rescues answer on the one port scw-rescue-flash is told.
    assert_eq!(stage.infra.second_sshd.port, stage.infra.sshd.port);
    list_the_second_worker(stage, true);
    let said = make_with_the_cluster_answering(
        stage,
        &["add-worker", &format!("NODE={SECOND}"), "UP_TIMEOUT=3m"],
        true,
    );
    let log = stage.take_log();
    stage.take_helm();

    // Ordered, at its own rescue's address, booted into rescue then normally.
    let servers = worker_servers(stage);
    let server = &servers[SECOND];
    assert_eq!(
        server["ips"][0]["address"], SECOND_WORKER_ADDRESS,
        "{server}"
    );
    let ordered = testkit::scaleway::mutations(&log)
        .into_iter()
        .filter(|m| m.starts_with("POST") && m.ends_with("/baremetal/v1/zones/fr-par-1/servers"))
        .count();
    assert_eq!(ordered, 1, "{log:#?}");
    let boots: Vec<&str> = log
        .iter()
        .filter(|r| {
            r["method"] == "POST"
                && r["path"].as_str().is_some_and(|p| {
                    p.contains(server["id"].as_str().unwrap()) && p.ends_with("/start")
                })
        })
        .map(|r| r["body"]["boot_type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(boots, ["rescue", "normal"], "{log:#?}");
    // The first worker was left as it was: never booted again.
    let first_id = servers["edge-worker-1"]["id"].as_str().unwrap();
    assert!(
        !log.iter()
            .any(|r| r["path"].as_str().is_some_and(|p| p.contains(first_id))
                && r["method"] != "GET"),
        "{log:#?}"
    );

    // Flashed: its disk holds the image, the inventory records it at its address.
    let disk = fs::read(stage.infra.second_rescue.disk()).unwrap();
    assert!(
        sha256(&disk) == sha256(&stage.infra.worker_raw),
        "the second worker's disk is not the image"
    );
    let inventory = stage.inventory();
    let node = testkit::json::element(&inventory["nodes"], "/name", SECOND);
    assert_eq!(node["public_ipv4"], SECOND_WORKER_ADDRESS, "{inventory}");
    assert_eq!(
        node["steps"]["image_flashed"],
        format!("sha256:{}", sha256(&stage.infra.worker_raw)),
        "{inventory}"
    );
    // Configured with its own config, the first worker's kept.
    assert_the_node_configs(stage);

    // Ready, and the edge names point at both workers.
    assert_eq!(
        stage.kubectl(&[
            "get",
            "node",
            SECOND,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]),
        "True"
    );
    // The new worker stays out of the names until the edge serves from it: the apply that
    // ordered it named the first worker only (the one proved ours), the last apply, after
    // wait-ready, both.
    assert_the_a_sets(stage, &said, Apply::First, &[WORKER_ADDRESS]);
    assert_the_a_sets(
        stage,
        &said,
        Apply::Last,
        &[WORKER_ADDRESS, SECOND_WORKER_ADDRESS],
    );
    before
}

/// Each worker's node stand-in holds its own worker-<name>.yaml, the one config
/// talos-apply-insecure gave it in maintenance mode (the first worker's was not given again:
/// the tool configures nodes in maintenance mode only), followed by the host firewall's
/// documents apply-platform patched in, which let the new worker's address in.
fn assert_the_node_configs(stage: &Stage) {
    let state = stage.path("talos-state");
    for (name, address) in [
        ("edge-worker-1", WORKER_ADDRESS),
        (SECOND, SECOND_WORKER_ADDRESS),
    ] {
        let held =
            fs::read_to_string(testkit::standin::talos_node_config(&state, address)).unwrap();
        let given = fs::read_to_string(stage.out(&format!("worker-{name}.yaml"))).unwrap();
        let patched = held
            .strip_prefix(&given)
            .unwrap_or_else(|| panic!("{name} holds another config: {held}"));
        assert!(
            patched.contains("kind: NetworkRuleConfig")
                && patched.contains(&format!("subnet: {SECOND_WORKER_ADDRESS}/32")),
            "{name}: {patched}"
        );
    }
}

/// make remove-worker NODE=edge-worker-2 once the config no longer lists it (CONFIRM=yes, no
/// wait for resolvers): its records out first, then the drain, its Node deleted, its server
/// deleted; the edge names back to the first worker; nothing of it left (`before`: what the
/// cluster left before it was added).
pub(super) fn remove_worker_step(stage: &Stage, before: &[String]) {
    list_the_second_worker(stage, false);
    let said = make_with_the_cluster_answering(
        stage,
        &[
            "remove-worker",
            &format!("NODE={SECOND}"),
            "CONFIRM=yes",
            "DNS_WAIT=0",
            "DRAIN_TIMEOUT=60s",
        ],
        false,
    );
    let log = stage.take_log();
    let helm = stage.take_helm();
    assert_eq!(releases_by(&helm, "uninstall"), Vec::<String>::new());

    // Out of the records first, then drained, deleted, its server deleted.
    assert_the_a_sets(stage, &said, Apply::Last, &[WORKER_ADDRESS]);
    let at = |what: &str| said.find(what).unwrap_or_else(|| panic!("{what}: {said}"));
    assert!(
        at("create these records yourself") < at(&format!("node/{SECOND} cordoned")),
        "{said}"
    );
    assert!(
        at(&format!("node/{SECOND} drained")) < at(&format!("node \"{SECOND}\" deleted")),
        "{said}"
    );
    let deleted = testkit::scaleway::mutations(&log)
        .into_iter()
        .filter(|m| m.starts_with("DELETE /baremetal/"))
        .count();
    assert_eq!(deleted, 1, "{log:#?}");
    assert_eq!(
        stage.kubectl(&["get", "node", SECOND, "--ignore-not-found", "-o", "name"]),
        ""
    );

    // Nothing of it left: the stand-in holds what it held before it was added, the inventory
    // no longer names it.
    assert_eq!(leftovers(&stage.state()), before);
    assert!(!worker_servers(stage).contains_key(SECOND));
    assert!(
        !stage.inventory()["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["name"] == SECOND),
        "{}",
        stage.inventory()
    );
    assert!(!Path::new(&stage.out(&format!("remove-{SECOND}.destroy-plan.json"))).exists());
}
