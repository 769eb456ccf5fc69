//! The edge's names across the layer seam: declared once (the infra config's `edge_hostnames`),
//! the DNS records scw-infra's DNS step makes for them, and what render-edge routes and
//! certifies from the platform inputs `scw-infra platform-inputs` writes. A name routed without
//! a record could never pass HTTP-01; a record without a route serves nothing.

use std::collections::BTreeSet;
use std::fs;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

use scaleway::dns::RecordType;
use scw_infra::apply::Address;
use scw_infra::apply::dns;
use scw_infra::config::InfraConfig;
use serde_json::{Value, json};
use testkit::workspace;

/// Three control planes and the Elastic Metal worker, with IPv4 and IPv6, as `scw-infra apply`
/// records them.
fn inventory(config: &InfraConfig) -> Value {
    let node = |name: &str, role: &str, kind: &str, n: u8, ipv6: Option<&str>| {
        json!({"name": name, "role": role, "kind": kind, "zone": config.zone,
               "id": format!("{n}{n}{n}{n}{n}{n}{n}{n}-1111-4111-8111-111111111111"),
               "public_ipv4": format!("203.0.113.1{n}"), "public_ipv6": ipv6,
               "private_ipv4": null, "steps": {}})
    };
    json!({
        "kind": "NodeInventory", "version": 2, "cluster_name": config.cluster_name,
        "cluster_endpoint": config.cluster_endpoint, "ssh_key_ids": [],
        "nodes": [
            node("edge-par-cp-1", "controlplane", "instance", 1, None),
            node("edge-par-cp-2", "controlplane", "instance", 2, None),
            node("edge-par-cp-3", "controlplane", "instance", 3, None),
            node(&config.workers[0].name, "worker", "elastic-metal", 0, Some("2001:db8::10")),
        ],
    })
}

fn run(command: &mut Command) -> Vec<u8> {
    let out = command.env_remove("EDGEPOP_LOG").output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The names of `infra` (an infra config) end to end, in `dir`: the fully qualified names the
/// DNS step gives records pointing at the worker (with each record's type), and the names
/// render-edge redirects, certifies and routes with `edge_config`.
fn seam(dir: &Path, infra: &Value, edge_config: &Path) -> (Vec<(String, RecordType)>, Vec<Value>) {
    let config_path = dir.join("infra.json");
    fs::write(&config_path, infra.to_string()).unwrap();
    let config = InfraConfig::load(&config_path, Some("/home/me")).unwrap();
    let inventory = inventory(&config);
    let inventory_path = dir.join("inventory.json");
    fs::write(&inventory_path, inventory.to_string()).unwrap();

    // What pipelines/infra.sh writes to platform-inputs.json.
    let inputs = run(Command::new(workspace::bin("scw-infra"))
        .arg("platform-inputs")
        .arg("--config")
        .arg(&config_path)
        .arg("--inventory")
        .arg(&inventory_path));
    let inputs_path = dir.join("platform-inputs.json");
    fs::write(&inputs_path, inputs).unwrap();
    let list: Value = serde_json::from_slice(&run(Command::new(workspace::bin("render-edge"))
        .arg("--inputs")
        .arg(&inputs_path)
        .arg("--config")
        .arg(edge_config)
        .args(["-o", "json"])))
    .unwrap();

    // The DNS step's record sets for the same cluster, its addresses those of the inventory.
    let addresses = |role: &str| -> Vec<Address> {
        inventory["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["role"] == role)
            .flat_map(|n| [&n["public_ipv4"], &n["public_ipv6"]])
            .filter_map(|a| a.as_str())
            .map(|a| Address::Known(a.parse::<IpAddr>().unwrap()))
            .collect()
    };
    let worker = addresses("worker");
    let records = dns::wanted(&config, &addresses("controlplane"), &worker)
        .into_iter()
        .filter(|set| set.data.iter().all(|a| worker.contains(a)))
        .map(|set| {
            let fqdn = match set.name.as_str() {
                "" => config.dns_zone.clone(),
                name => format!("{name}.{}", config.dns_zone),
            };
            (fqdn, set.record_type)
        })
        .collect();
    (records, list["items"].as_array().unwrap().clone())
}

/// The hostnames render-edge's objects use, each set by its use: redirected (the HTTP listener's
/// route), certified (an HTTPS listener with a certificate, which cert-manager's gateway-shim
/// turns into a Certificate for its hostname) and routed (the origin's routes).
fn served(items: &[Value]) -> [(&'static str, BTreeSet<String>); 3] {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap().to_owned())
            .collect()
    };
    let routes = |redirect: bool| -> BTreeSet<String> {
        items
            .iter()
            .filter(|i| i["kind"] == "HTTPRoute")
            .filter(|r| (r["metadata"]["name"] == "http-to-https") == redirect)
            .flat_map(|r| strings(&r["spec"]["hostnames"]))
            .collect()
    };
    let certified = items
        .iter()
        .filter(|i| i["kind"] == "Gateway")
        .flat_map(|g| g["spec"]["listeners"].as_array().unwrap().clone())
        .filter(|l| l["tls"]["certificateRefs"].is_array())
        .map(|l| l["hostname"].as_str().unwrap().to_owned())
        .collect();
    [
        ("redirected", routes(true)),
        ("certified", certified),
        ("routed", routes(false)),
    ]
}

fn example(name: &str) -> Value {
    let path = workspace::root().join("config").join(name);
    serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_edge_serves_exactly_the_names_the_dns_step_makes_records_for() {
    let dir = tempfile::tempdir().unwrap();
    let infra = example("infra.example.json");
    let mut apex = infra.clone();
    apex["edge_hostnames"] = json!(["@", "shop.eu", "www"]);
    for (case, infra) in [("the example", infra), ("the apex and two labels", apex)] {
        for edge in ["edge.example.json", "edge-pow.example.json"] {
            let edge_config = workspace::root().join("config").join(edge);
            let (records, items) = seam(dir.path(), &infra, &edge_config);
            let named: BTreeSet<String> = records.iter().map(|(n, _)| n.clone()).collect();
            // The worker has both families: every name gets an A record, and an AAAA record
            // only if the edge serves IPv6.
            for name in &named {
                assert!(
                    records.contains(&(name.clone(), RecordType::A)),
                    "{case}: no A record for {name}: {records:?}"
                );
                assert_eq!(
                    records.contains(&(name.clone(), RecordType::Aaaa)),
                    flows::EDGE_SERVES_IPV6,
                    "{case}: {name}'s AAAA record: {records:?}"
                );
            }
            assert_eq!(
                named.len(),
                infra["edge_hostnames"].as_array().unwrap().len(),
                "{case}: {records:?}"
            );
            for (used, hosts) in served(&items) {
                assert_eq!(hosts, named, "{case}, {edge}: the names {used}");
            }
        }
    }
}

#[test]
fn the_committed_examples_name_the_same_edge_hostnames() {
    let (_dir, path) = testkit::temp_file("infra.json", example("infra.example.json").to_string());
    let config = InfraConfig::load(&path, Some("/home/me")).unwrap();
    assert_eq!(
        example("platform-inputs.example.json")["edge_hostnames"],
        json!(config.edge_fqdns()),
        "config/platform-inputs.example.json is what config/infra.example.json gives"
    );
    // Its edge nodes are the example's workers, in order.
    let edge_nodes: Vec<Value> = example("platform-inputs.example.json")["edge_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].clone())
        .collect();
    let workers: Vec<Value> = config.worker_names().map(|n| json!(n)).collect();
    assert_eq!(edge_nodes, workers);
    // The edge configs carry no names: render-edge refuses a list that differs.
    for edge in [
        "edge.example.json",
        "edge-pow.example.json",
        "edge-site.example.json",
    ] {
        assert!(example(edge).get("hostnames").is_none(), "{edge}");
    }
}
