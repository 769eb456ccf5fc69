//! The cluster's network as one contract: every layer that opens or closes a port is rendered,
//! read back, and compared with the declaration (`crates/flows`), for each peer class and port.
//!
//! - the control planes' security group (scw-infra's planned rules): the networks it accepts on
//!   each port are exactly those of the declared peers (pods excepted: they reach another node
//!   only inside the tunnel, which is what the group sees);
//! - Cilium's values (render-platform over values/cilium.yaml): the routing mode, the tunnel,
//!   health and Hubble ports and WireGuard's are declared flows between nodes;
//! - the NodePort ranges of the API server (talos/patches) and of Cilium are the declared one;
//! - the host firewall (render-platform): the Cilium host policies, read back peer by peer from
//!   their selectors, allow on each role's nodes exactly the declared flows, and validate against
//!   the CiliumClusterwideNetworkPolicy schema (`../shared/schemas`, from the Cilium CRDs in
//!   `../shared/crds`); Talos's ingress firewall documents for the worker accept exactly the
//!   declared networks on each port, validate against Talos's own config schema, and block by
//!   default only once the platform config enforces;
//! - the ports table of docs/infrastructure.md is the declaration's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::values_contract::example_platform;
use flows::{Addresses, FLOWS, NODE_PORT_RANGE, Peer, Ports, Role, Traffic};
use ipnet::IpNet;
use render_platform::host_firewall;
use scw_infra::apply::Address;
use scw_infra::apply::firewall::{self, Source};
use serde::Deserialize;
use serde_json::Value;

/// A cluster's addresses: admin networks, three control planes, a worker with IPv6.
fn addresses() -> Addresses {
    Addresses {
        admin: vec![
            "198.51.100.0/24".parse().unwrap(),
            "2001:db8:a::/48".parse().unwrap(),
        ],
        control_planes: ["203.0.113.11", "203.0.113.12", "203.0.113.13"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect(),
        workers: vec![
            "203.0.113.10".parse().unwrap(),
            "2001:db8::10".parse().unwrap(),
        ],
    }
}

/// One port of one protocol (ICMP echo has none): what the comparisons are made on, so that a
/// rule for `50000-50001` and two flows for `50000` and `50001` compare equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Port(&'static str, Option<u16>);

impl std::fmt::Display for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Some(port) => write!(f, "{} {port}", self.0.to_uppercase()),
            None => write!(f, "{} echo", self.0.to_uppercase()),
        }
    }
}

fn ports_of(traffic: Traffic) -> Vec<Port> {
    match traffic.ports() {
        Some(ports) => (ports.first..=ports.last)
            .map(|p| Port(traffic.protocol(), Some(p)))
            .collect(),
        None => vec![Port(traffic.protocol(), None)],
    }
}

/// What a layer accepts: the networks allowed on each port.
type Accepted = BTreeMap<Port, BTreeSet<IpNet>>;

fn accept(into: &mut Accepted, traffic: Traffic, networks: impl IntoIterator<Item = IpNet>) {
    let networks: Vec<IpNet> = networks.into_iter().collect();
    for port in ports_of(traffic) {
        into.entry(port)
            .or_default()
            .extend(networks.iter().copied());
    }
}

/// What a filter by address must accept on each port of `role`: the union of the declared
/// peers' networks (only the peers `sees` lets through).
fn declared_networks(role: Role, addresses: &Addresses, sees: impl Fn(Peer) -> bool) -> Accepted {
    let mut out = Accepted::new();
    for flow in FLOWS.iter().filter(|f| f.reaches(role) && sees(f.from)) {
        accept(&mut out, flow.traffic, flow.from.networks(addresses));
    }
    out
}

/// Compares what a layer accepts with what is declared, one line per difference.
fn differences(layer: &str, declared: &Accepted, rendered: &Accepted) -> Vec<String> {
    let mut out = Vec::new();
    let keys: BTreeSet<&Port> = declared.keys().chain(rendered.keys()).collect();
    for traffic in keys {
        let empty = BTreeSet::new();
        let want = declared.get(traffic).unwrap_or(&empty);
        let got = rendered.get(traffic).unwrap_or(&empty);
        for missing in want.difference(got) {
            out.push(format!(
                "{layer}: {traffic} from {missing} is declared, not allowed"
            ));
        }
        for extra in got.difference(want) {
            out.push(format!(
                "{layer}: {traffic} from {extra} is allowed, not declared"
            ));
        }
    }
    out
}

#[test]
fn the_security_group_accepts_exactly_the_declared_flows_to_the_control_planes() {
    let addresses = addresses();
    let known =
        |list: &[IpAddr]| -> Vec<Address> { list.iter().map(|a| Address::Known(*a)).collect() };
    let rules = firewall::desired(
        &addresses.admin,
        &known(&addresses.control_planes),
        &known(&addresses.workers),
    );
    let mut rendered = Accepted::new();
    for rule in &rules {
        let Source::Net(net) = &rule.from else {
            panic!("an address left pending: {rule:?}")
        };
        let ports = rule
            .ports
            .map(|(first, last)| Ports::range(first as u16, last as u16));
        let traffic = match (&rule.protocol, ports) {
            (scaleway::instance::Protocol::Tcp, Some(ports)) => Traffic::Tcp(ports),
            (scaleway::instance::Protocol::Udp, Some(ports)) => Traffic::Udp(ports),
            // A group's ICMP rule takes every type, echo among them.
            (scaleway::instance::Protocol::Icmp, None) => Traffic::IcmpEcho,
            other => panic!("a rule for {other:?}"),
        };
        accept(&mut rendered, traffic, [*net]);
    }
    let declared = declared_networks(Role::ControlPlane, &addresses, Peer::outside_the_tunnel);
    let diff = differences("security group", &declared, &rendered);
    assert!(diff.is_empty(), "{}", diff.join("\n"));
}

/// Our Cilium values for a config: values/cilium.yaml, then what render-platform writes.
fn cilium_values(platform: &render_platform::PlatformConfig) -> Value {
    crate::values_contract::edge_values("cilium", platform)
}

/// A flow from the nodes to every node carrying this traffic is declared.
fn between_nodes(traffic: Traffic) -> bool {
    Role::ALL.iter().all(|role| {
        FLOWS
            .iter()
            .any(|f| f.from == Peer::Nodes && f.traffic == traffic && f.reaches(*role))
    })
}

fn port_of(value: &Value, what: &str) -> u16 {
    match value {
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Value::String(s) => s.rsplit(':').next().and_then(|p| p.parse().ok()),
        _ => None,
    }
    .unwrap_or_else(|| panic!("{what}: not a port: {value}"))
}

#[test]
fn the_cilium_ports_are_declared_flows_between_nodes() {
    let values = cilium_values(&example_platform());
    let mut problems = Vec::new();
    // The routing mode is chosen here, not left to the chart's default.
    let routing = values.get("routingMode").and_then(Value::as_str);
    let protocol = values.get("tunnelProtocol").and_then(Value::as_str);
    match (routing, protocol, values.get("tunnelPort")) {
        (Some("tunnel"), Some("vxlan"), Some(port)) => {
            let tunnel = Traffic::Udp(Ports::one(port_of(port, "tunnelPort")));
            if !between_nodes(tunnel) {
                problems.push(format!(
                    "the tunnel ({tunnel}) is not declared between nodes"
                ));
            }
        }
        other => problems.push(format!(
            "routingMode, tunnelProtocol, tunnelPort are not tunnel, vxlan and a port: {other:?}"
        )),
    }
    match values.get("clusterHealthPort") {
        Some(port) => {
            let health = Traffic::Tcp(Ports::one(port_of(port, "clusterHealthPort")));
            if !between_nodes(health) || !between_nodes(Traffic::IcmpEcho) {
                problems.push(format!(
                    "the health checks ({health}, ICMP) are not declared"
                ));
            }
        }
        None => problems.push("clusterHealthPort is not set".into()),
    }
    for pointer in ["/hubble/listenAddress", "/hubble/peerService/targetPort"] {
        match values.pointer(pointer) {
            Some(port) => {
                let hubble = Traffic::Tcp(Ports::one(port_of(port, pointer)));
                let declared = Role::ALL.iter().all(|role| {
                    FLOWS
                        .iter()
                        .any(|f| f.traffic == hubble && f.reaches(*role))
                });
                if !declared {
                    problems.push(format!("Hubble's {pointer} ({hubble}) is not declared"));
                }
            }
            None => problems.push(format!("{pointer} is not set")),
        }
    }
    if values.pointer("/encryption/type") == Some(&Value::from("wireguard"))
        && !between_nodes(Traffic::Udp(Ports::one(flows::WIREGUARD)))
    {
        problems.push("WireGuard's port is not declared between nodes".into());
    }
    let range = values.pointer("/nodePort/range").and_then(Value::as_str);
    if range != Some(NODE_PORT_RANGE.cilium().as_str()) {
        problems.push(format!(
            "nodePort.range is {range:?}, the declared range is {}",
            NODE_PORT_RANGE.cilium()
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_api_server_and_cilium_share_the_declared_node_port_range() {
    let path = testkit::workspace::root().join("talos/patches/40-nodeport-range.controlplane.yaml");
    let patch: Value = serde_norway::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let api_server = patch
        .pointer("/cluster/apiServer/extraArgs/service-node-port-range")
        .and_then(Value::as_str)
        .unwrap();
    assert_eq!(
        api_server,
        NODE_PORT_RANGE.to_string(),
        "{}",
        path.display()
    );
    let cilium = cilium_values(&example_platform());
    assert_eq!(
        cilium.pointer("/nodePort/range").and_then(Value::as_str),
        Some(NODE_PORT_RANGE.cilium().as_str())
    );
    // The same ports, spelt each tool's way.
    let (first, last) = api_server.split_once('-').unwrap();
    assert_eq!(format!("{first},{last}"), NODE_PORT_RANGE.cilium());
}

#[test]
fn every_address_class_is_what_the_addresses_say() {
    // The comparisons above only mean something if the peers' networks are distinct.
    let addresses = addresses();
    let mut seen: BTreeMap<IpNet, Peer> = BTreeMap::new();
    for peer in [Peer::Internet, Peer::Admin, Peer::ControlPlanes, Peer::Pods] {
        for net in peer.networks(&addresses) {
            assert!(seen.insert(net, peer).is_none(), "{net} twice");
        }
    }
    let worker: IpAddr = addresses.workers[0];
    assert!(
        Peer::Nodes
            .networks(&addresses)
            .contains(&IpNet::from(worker))
    );
    assert!(
        !Peer::ControlPlanes
            .networks(&addresses)
            .contains(&IpNet::from(worker))
    );
}

/// The host firewall as render-platform writes it for the example config (audit or enforce) and
/// the example inputs: the Cilium policies (a `List`) and Talos's documents (a YAML stream).
fn rendered_firewall(audit: bool) -> (Vec<Value>, Vec<Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let root = testkit::workspace::root();
    let mut platform: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("config/platform.example.json")).unwrap(),
    )
    .unwrap();
    platform["cilium"]["policy_audit_mode"] = Value::Bool(audit);
    let config = dir.path().join("platform.json");
    std::fs::write(&config, platform.to_string()).unwrap();
    let out = dir.path().join("rendered");
    render_edge_platform(&config, &out);
    let list: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join(render_platform::HOST_POLICIES_FILE)).unwrap(),
    )
    .unwrap();
    assert_eq!(list["kind"], "List");
    let talos_text =
        std::fs::read_to_string(out.join(render_platform::TALOS_FIREWALL_FILE)).unwrap();
    let talos: Vec<Value> = talos_text
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_norway::from_str(d).unwrap())
        .collect();
    let where_to = std::fs::read_to_string(out.join(render_platform::TALOS_FIREWALL_LIST)).unwrap();
    (list["items"].as_array().unwrap().clone(), talos, where_to)
}

/// render-platform's edge render of `config`, with the example platform inputs, into `out`.
pub(crate) fn render_edge_platform(config: &std::path::Path, out: &std::path::Path) {
    let inputs = testkit::workspace::root().join("config/platform-inputs.example.json");
    let run = std::process::Command::new(testkit::workspace::bin("render-platform"))
        .arg("--config")
        .arg(config)
        .arg("--inputs")
        .arg(inputs)
        .arg("--out-dir")
        .arg(out)
        .output()
        .unwrap();
    testkit::process::success_stdout(&run);
}

/// The example inputs' addresses (what the rendered files were made from).
fn example_addresses() -> Addresses {
    let inputs: pop_common::records::PlatformInputs = serde_json::from_str(
        &std::fs::read_to_string(
            testkit::workspace::root().join("config/platform-inputs.example.json"),
        )
        .unwrap(),
    )
    .unwrap();
    render_platform::addresses(&inputs)
}

/// Which nodes a host policy's selector picks, read back: control planes carry Talos's
/// control-plane label, the worker does not.
fn role_of(policy: &Value) -> Role {
    let selector = &policy["spec"]["nodeSelector"];
    let label = host_firewall::CONTROL_PLANE_LABEL;
    if selector.pointer("/matchLabels").and_then(|m| m.get(label)) == Some(&Value::from("")) {
        Role::ControlPlane
    } else if selector["matchExpressions"]
        == serde_json::json!([{"key": label, "operator": "DoesNotExist"}])
    {
        Role::Worker
    } else {
        panic!("a node selector of no role: {selector}")
    }
}

/// The networks of a list of objects that give each under `key`, none with an `except`: what
/// both a Cilium `fromCIDRSet` and a Talos `ingress` are.
fn whole_networks(list: &Value, key: &str) -> Vec<IpNet> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            assert!(entry.get("except").is_none(), "{entry}");
            entry[key].as_str().unwrap().parse().unwrap()
        })
        .collect()
}

/// The peer class of a Cilium ingress rule, read back from its selector.
fn peer_of(rule: &Value, addresses: &Addresses) -> Peer {
    let entities: Option<BTreeSet<&str>> = rule.get("fromEntities").map(|e| {
        e.as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect()
    });
    if let Some(entities) = entities {
        let nodes: BTreeSet<&str> = host_firewall::NODE_ENTITIES.into_iter().collect();
        return match entities.iter().copied().collect::<Vec<_>>().as_slice() {
            ["world"] => Peer::Internet,
            ["kube-apiserver"] => Peer::ControlPlanes,
            _ if entities == nodes => Peer::Nodes,
            other => panic!("entities of no peer class: {other:?}"),
        };
    }
    if let Some(set) = rule.get("fromCIDRSet") {
        let cidrs = whole_networks(set, "cidr");
        // A CIDR set stands for the class whose networks it is exactly.
        return [Peer::Admin, Peer::ControlPlanes, Peer::Nodes]
            .into_iter()
            .find(|peer| peer.networks(addresses) == cidrs)
            .unwrap_or_else(|| panic!("a CIDR set of no peer class: {cidrs:?}"));
    }
    let pods = serde_json::json!([{"matchExpressions": [
        {"key": host_firewall::POD_NAMESPACE_LABEL, "operator": "Exists"}
    ]}]);
    if rule.get("fromEndpoints") == Some(&pods) {
        return Peer::Pods;
    }
    panic!("a rule of no peer class: {rule}")
}

/// What a host policy allows: (peer, port), read back from every ingress rule.
fn cilium_allows(policy: &Value, addresses: &Addresses) -> BTreeSet<(Peer, Port)> {
    let mut out = BTreeSet::new();
    for rule in policy["spec"]["ingress"].as_array().unwrap() {
        let peer = peer_of(rule, addresses);
        for to_ports in rule
            .get("toPorts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for port in to_ports["ports"].as_array().unwrap() {
                let first: u16 = port["port"].as_str().unwrap().parse().unwrap();
                let last = port
                    .get("endPort")
                    .map_or(first, |e| e.as_u64().unwrap() as u16);
                let traffic = match port["protocol"].as_str().unwrap() {
                    "TCP" => Traffic::Tcp(Ports::range(first, last)),
                    "UDP" => Traffic::Udp(Ports::range(first, last)),
                    other => panic!("protocol {other}"),
                };
                out.extend(ports_of(traffic).into_iter().map(|p| (peer, p)));
            }
        }
        for icmp in rule
            .get("icmps")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let types: BTreeSet<(String, u64)> = icmp["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    (
                        f["family"].as_str().unwrap().to_owned(),
                        f["type"].as_u64().unwrap(),
                    )
                })
                .collect();
            let echo: BTreeSet<(String, u64)> =
                [("IPv4".to_owned(), 8), ("IPv6".to_owned(), 128)].into();
            assert_eq!(types, echo, "ICMP other than echo");
            out.insert((peer, ports_of(Traffic::IcmpEcho)[0]));
        }
    }
    out
}

#[test]
fn the_host_policies_allow_exactly_the_declared_flows_on_each_role() {
    let addresses = example_addresses();
    let (policies, _, _) = rendered_firewall(true);
    let mut roles = Vec::new();
    let mut problems = Vec::new();
    for policy in &policies {
        let role = role_of(policy);
        roles.push(role);
        let rendered = cilium_allows(policy, &addresses);
        let declared: BTreeSet<(Peer, Port)> = FLOWS
            .iter()
            .filter(|f| f.reaches(role))
            .flat_map(|f| ports_of(f.traffic).into_iter().map(move |p| (f.from, p)))
            .collect();
        for (peer, port) in declared.difference(&rendered) {
            problems.push(format!(
                "{role}: {port} from {peer} is declared, not allowed"
            ));
        }
        for (peer, port) in rendered.difference(&declared) {
            problems.push(format!(
                "{role}: {port} from {peer} is allowed, not declared"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    roles.sort();
    assert_eq!(roles, Role::ALL, "one host policy a role");
}

/// A label selector's verdict on a node's labels (matchLabels and the operators used here).
fn selects(selector: &Value, labels: &BTreeMap<&str, &str>) -> bool {
    let by_label = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k.as_str()) == Some(&v.as_str().unwrap()));
    let by_expression = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap();
            match e["operator"].as_str().unwrap() {
                "Exists" => labels.contains_key(key),
                "DoesNotExist" => !labels.contains_key(key),
                other => panic!("operator {other}"),
            }
        });
    by_label && by_expression
}

#[test]
fn every_node_is_selected_by_exactly_one_host_policy_on_labels_cilium_keeps() {
    let (policies, _, _) = rendered_firewall(true);
    // The labels of the nodes as Talos and our patches set them (70-edge-worker.worker.yaml).
    let control_plane: BTreeMap<&str, &str> = [
        (host_firewall::CONTROL_PLANE_LABEL, ""),
        ("kubernetes.io/os", "linux"),
    ]
    .into();
    let worker: BTreeMap<&str, &str> = [
        pop_common::records::EDGE_NODE_LABEL,
        ("kubernetes.io/os", "linux"),
    ]
    .into();
    for (node, role) in [
        (&control_plane, Role::ControlPlane),
        (&worker, Role::Worker),
    ] {
        let picked: Vec<Role> = policies
            .iter()
            .filter(|p| selects(&p["spec"]["nodeSelector"], node))
            .map(role_of)
            .collect();
        assert_eq!(picked, [role]);
    }
    // Cilium's default label filter drops keys that start with kubernetes.io or k8s.io from a
    // host endpoint's labels (cilium pkg/labelsfilter/filter.go, defaultLabelPrefixCfg): a
    // selector on one of them would select nothing, silently.
    for policy in &policies {
        let selector = &policy["spec"]["nodeSelector"];
        let keys = selector
            .get("matchLabels")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.keys().map(String::as_str))
            .chain(
                selector
                    .get("matchExpressions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|e| e["key"].as_str().unwrap()),
            );
        for key in keys {
            assert!(
                !key.starts_with("kubernetes.io") && !key.starts_with("k8s.io"),
                "{key} is not among a host endpoint's labels"
            );
        }
    }
}

#[test]
fn every_host_policy_is_valid_against_the_cilium_crd() {
    let Some(shared) = testkit::workspace::shared_dir("every_host_policy_is_valid") else {
        return;
    };
    let validator = manifest_check::Validator::new(&shared.join("schemas")).unwrap();
    for audit in [true, false] {
        let (policies, _, _) = rendered_firewall(audit);
        for policy in &policies {
            if let Err(violations) = validator.validate(policy) {
                panic!("{}: {violations:#?}", policy["metadata"]["name"]);
            }
        }
        // The check can fail: a misspelt field is refused.
        let mut typo = policies[0].clone();
        typo["spec"]["ingress"][0]["fromEntity"] = serde_json::json!(["world"]);
        let violations = validator.validate(&typo).unwrap_err();
        assert!(
            violations
                .iter()
                .any(|v| v.to_string().contains("fromEntity")),
            "{violations:?}"
        );
    }
}

/// What Talos's documents accept on each port: the rules' subnets (every rule is an accept rule
/// when blocking by default, and the only sources let in on its ports when accepting).
fn talos_accepts(documents: &[Value]) -> Accepted {
    let mut out = Accepted::new();
    for document in documents
        .iter()
        .filter(|d| d["kind"] == "NetworkRuleConfig")
    {
        let protocol = document["portSelector"]["protocol"].as_str().unwrap();
        let networks = whole_networks(&document["ingress"], "subnet");
        for port in document["portSelector"]["ports"].as_array().unwrap() {
            let ports = match port {
                Value::Number(n) => Ports::one(n.as_u64().unwrap() as u16),
                Value::String(s) => {
                    let (a, b) = s.split_once('-').unwrap();
                    Ports::range(a.parse().unwrap(), b.parse().unwrap())
                }
                other => panic!("port {other}"),
            };
            let traffic = match protocol {
                "tcp" => Traffic::Tcp(ports),
                "udp" => Traffic::Udp(ports),
                other => panic!("protocol {other}"),
            };
            accept(&mut out, traffic, networks.iter().copied());
        }
    }
    out
}

#[test]
fn talos_accepts_exactly_the_declared_networks_on_the_worker_and_blocks_only_when_enforcing() {
    let addresses = example_addresses();
    let Some(schemas) = crate::talos_schema::schemas("talos_accepts_exactly_the_declared") else {
        return;
    };
    for (audit, default_action) in [(true, "accept"), (false, "block")] {
        let (_, documents, where_to) = rendered_firewall(audit);
        for document in &documents {
            let definition = match document["kind"].as_str().unwrap() {
                "NetworkDefaultActionConfig" => "network.DefaultActionConfigV1Alpha1",
                "NetworkRuleConfig" => "network.RuleConfigV1Alpha1",
                other => panic!("a {other} document"),
            };
            let errors = schemas.document_errors(definition, document);
            assert!(errors.is_empty(), "{document}: {errors:#?}");
        }
        let defaults: Vec<&Value> = documents
            .iter()
            .filter(|d| d["kind"] == "NetworkDefaultActionConfig")
            .collect();
        assert_eq!(defaults.len(), 1);
        assert_eq!(defaults[0]["ingress"], default_action);
        let mut names: Vec<&str> = documents
            .iter()
            .filter_map(|d| d["name"].as_str())
            .collect();
        let count = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), count, "Talos wants each rule's name once");

        // ICMP takes no rule (Talos wants ports): blocking, Talos itself accepts ICMP at 5
        // packets a second (siderolabs/talos v1.13.0 nftables_chain_config.go), accepting, all
        // of it. Every other declared port is a rule with exactly the declared networks.
        let mut declared = declared_networks(Role::Worker, &addresses, |_| true);
        let icmp = declared.remove(&ports_of(Traffic::IcmpEcho)[0]);
        assert!(
            icmp.is_some(),
            "the health checks' ICMP is declared to the worker"
        );
        let rendered = talos_accepts(&documents);
        let diff = differences("Talos (worker)", &declared, &rendered);
        assert!(diff.is_empty(), "{}", diff.join("\n"));

        // Applied through the first control plane's apid, to the worker's IPv4 address.
        let lines: Vec<&str> = where_to.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [format!(
                "{}\t{}\t{}",
                addresses.control_planes[0],
                addresses.workers[0],
                render_platform::TALOS_FIREWALL_FILE
            )]
        );
    }
}

#[test]
fn the_documented_ports_table_is_the_declared_flows() {
    let doc =
        std::fs::read_to_string(testkit::workspace::root().join("docs/infrastructure.md")).unwrap();
    let table = flows::markdown_table();
    assert!(
        doc.contains(&table),
        "docs/infrastructure.md must hold the flows' table as crates/flows renders it:\n{table}"
    );
}

/// Whether a flow to `role` carries `port` of `protocol`.
fn declared_to(role: Role, protocol: &str, port: u16) -> bool {
    FLOWS.iter().any(|f| {
        f.reaches(role)
            && f.traffic.protocol() == protocol
            && f.traffic.ports().is_some_and(|p| p.contains(port))
    })
}

#[test]
fn every_host_network_listener_of_cilium_is_a_declared_flow_or_on_loopback() {
    // The agent and cilium-envoy run on every node, the operator on any (the worker included):
    // what they open on every address must be declared to every role, whichever mode the
    // platform config is in.
    let mut enforce = example_platform();
    enforce.cilium.policy_audit_mode = false;
    for platform in [example_platform(), enforce] {
        let Some(values) =
            crate::values_contract::edge_values_over_chart_defaults("cilium", &platform)
        else {
            return;
        };
        let listeners = testkit::cilium_chart::host_listeners(&values);
        let mut problems = Vec::new();
        for listener in &listeners {
            let traffic = match listener.protocol {
                "tcp" => Traffic::Tcp(Ports::one(listener.port)),
                _ => Traffic::Udp(Ports::one(listener.port)),
            };
            if !flows::HOST_PORTS.contains(&traffic) {
                problems.push(format!(
                    "{} {} ({traffic}) is not among flows::HOST_PORTS",
                    listener.workload, listener.what
                ));
            }
            if listener.loopback {
                continue;
            }
            for role in Role::ALL {
                if !declared_to(role, listener.protocol, listener.port) {
                    problems.push(format!(
                        "{} {} listens on every address of the {role} ({traffic}), \
                         no flow declares it",
                        listener.workload, listener.what
                    ));
                }
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
        // The reading found what the chart opens: the declared tunnel and health checks at least.
        assert!(
            listeners
                .iter()
                .any(|l| l.port == flows::VXLAN && !l.loopback)
        );
        assert!(listeners.iter().any(|l| l.port == flows::CILIUM_HEALTH));
    }
}

/// The objects render-edge makes of the committed examples.
fn rendered_edge() -> Vec<Value> {
    let root = testkit::workspace::root();
    let run = std::process::Command::new(testkit::workspace::bin("render-edge"))
        .arg("--inputs")
        .arg(root.join("config/platform-inputs.example.json"))
        .arg("--config")
        .arg(root.join("config/edge.example.json"))
        .args(["-o", "json"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_str(&testkit::process::success_stdout(&run)).unwrap();
    list["items"].as_array().unwrap().clone()
}

#[test]
fn every_layer_serves_ipv6_as_the_declaration_says() {
    let served = flows::EDGE_SERVES_IPV6;
    // DNS: the edge's names get the worker's IPv6 address only when it is served, and an AAAA
    // left by an earlier apply is cleared when it is not.
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("infra.json");
    std::fs::copy(
        testkit::workspace::root().join("config/infra.example.json"),
        &config_path,
    )
    .unwrap();
    let config = scw_infra::config::InfraConfig::load(&config_path, Some("/home/me")).unwrap();
    let worker: Vec<Address> = addresses()
        .workers
        .into_iter()
        .map(Address::Known)
        .collect();
    let sets = scw_infra::apply::dns::wanted(&config, &[], &worker);
    let aaaa = |sets: &[scw_infra::apply::dns::RecordSet]| {
        sets.iter()
            .filter(|s| s.record_type == scaleway::dns::RecordType::Aaaa)
            .count()
    };
    let names = config.edge_record_names().count();
    assert_eq!(aaaa(&sets), if served { names } else { 0 }, "{sets:?}");
    let cleared = scw_infra::apply::dns::unwanted(&config);
    assert_eq!(aaaa(&cleared), if served { 0 } else { names });

    // Cilium: IPv6 on exactly when served.
    let cilium = cilium_values(&example_platform());
    assert_eq!(
        cilium.pointer("/ipv6/enabled"),
        Some(&Value::Bool(served)),
        "Cilium's ipv6.enabled"
    );

    // The gateway Service: single-stack IPv4, or dual-stack required.
    let objects = rendered_edge();
    let options = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["data"].get("service").is_some())
        .unwrap();
    let service: Value =
        serde_norway::from_str(options["data"]["service"].as_str().unwrap()).unwrap();
    let families: Vec<&str> = service["spec"]["ipFamilies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(families.contains(&"IPv6"), served, "{service}");
    assert_eq!(
        service["spec"]["ipFamilyPolicy"],
        if served {
            "RequireDualStack"
        } else {
            "SingleStack"
        }
    );

    // Talos: IPv6 served needs dual-stack pod and service subnets, which no patch gives yet.
    let mut v6_subnets = Vec::new();
    for path in testkit::files_under(&testkit::workspace::root().join("talos/patches")) {
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for document in serde_norway::Deserializer::from_str(&text) {
            let patch = Value::deserialize(document).unwrap();
            for pointer in [
                "/cluster/network/podSubnets",
                "/cluster/network/serviceSubnets",
            ] {
                let subnets = patch.pointer(pointer).and_then(Value::as_array);
                for subnet in subnets.into_iter().flatten() {
                    if subnet.as_str().is_some_and(|s| s.contains(':')) {
                        v6_subnets.push(format!("{}: {pointer}", path.display()));
                    }
                }
            }
        }
    }
    assert_eq!(
        !v6_subnets.is_empty(),
        served,
        "IPv6 pod and service subnets must come with flows::EDGE_SERVES_IPV6: {v6_subnets:?}"
    );
}

#[test]
fn the_documented_worker_ports_table_is_the_declarations() {
    let doc =
        std::fs::read_to_string(testkit::workspace::root().join("docs/infrastructure.md")).unwrap();
    let table = flows::worker_ports::markdown_table();
    assert!(
        doc.contains(&table),
        "docs/infrastructure.md must hold the worker's ports table as crates/flows renders it:\n{table}"
    );
    // Its claims rest on what the layers render: the gateway's policy holds every node port of
    // the worker to the declared peers, and Talos accepts by default only while auditing
    // (checked with the Talos rules above).
    let objects = rendered_edge();
    let policy = objects
        .iter()
        .find(|o| o["kind"] == "CiliumNetworkPolicy" && o["metadata"]["name"] == "edge-gateway")
        .unwrap();
    for (port, node_port) in flows::GATEWAY_NODE_PORTS {
        let peers = flows::worker_ports::worker_peers(Traffic::Tcp(Ports::one(node_port)));
        let rule = policy["spec"]["ingress"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                r["toPorts"][0]["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["port"].as_str().and_then(|s| s.parse().ok()) == Some(port))
            })
            .unwrap_or_else(|| panic!("no rule of the gateway's policy takes {port}"));
        let world = rule["fromEntities"]
            .as_array()
            .unwrap()
            .contains(&Value::from("world"));
        assert_eq!(
            world,
            peers.contains(&Peer::Internet),
            "node port {node_port}: {rule}"
        );
    }
}

#[test]
fn every_node_address_is_admitted_by_address_on_its_flows_not_only_by_identity() {
    // A machine that is not a Node yet (a replacement control plane: trustd, the API server,
    // etcd's join; a worker with a new address) has no node identity: while enforcing, only a
    // rule on its address admits it. Cilium matches such a rule to a node's identity only with
    // policyCIDRMatchMode "nodes".
    let addresses = example_addresses();
    let (policies, _, _) = rendered_firewall(false);
    let mut problems = Vec::new();
    for policy in &policies {
        let role = role_of(policy);
        for flow in FLOWS.iter().filter(|f| f.reaches(role)) {
            if !matches!(flow.from, Peer::Nodes | Peer::ControlPlanes) {
                continue;
            }
            let wanted: BTreeSet<String> = flow
                .from
                .networks(&addresses)
                .iter()
                .map(ToString::to_string)
                .collect();
            let by_address = policy["spec"]["ingress"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|rule| {
                    let cidrs: BTreeSet<String> = rule
                        .get("fromCIDRSet")?
                        .as_array()?
                        .iter()
                        .map(|c| c["cidr"].as_str().unwrap().to_owned())
                        .collect();
                    wanted.is_subset(&cidrs).then_some(rule)
                })
                .any(|rule| {
                    let allowed = cilium_allows(
                        &serde_json::json!({"spec": {"ingress": [rule]}}),
                        &addresses,
                    );
                    ports_of(flow.traffic)
                        .iter()
                        .all(|p| allowed.iter().any(|(_, q)| q == p))
                });
            if !by_address {
                problems.push(format!(
                    "{role}: {} from {} ({}) is admitted by identity only",
                    flow.traffic, flow.from, flow.service
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let cilium = cilium_values(&example_platform());
    assert_eq!(
        cilium["policyCIDRMatchMode"],
        serde_json::json!(["nodes"]),
        "CIDR rules must match the nodes too"
    );
}
