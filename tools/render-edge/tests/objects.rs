//! What the rendered objects must say for the edge to work, checked field by field on the
//! committed examples (the golden files freeze the bytes; these tests say why they matter).

// Integration-test helpers live outside #[test] functions: clippy.toml's in-tests allowance
// does not reach them, and a failed unwrap here is a failed test, as intended.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use serde_json::{Value, json};

use crate::api_server::{example, examples, with_edge_nodes};

/// The strings of a JSON array.
pub(crate) fn strings(array: &Value) -> Vec<&str> {
    array
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

/// The ingress rules of a CiliumNetworkPolicy whose first `toPorts` names `port`.
pub(crate) fn ingress_to_port<'a>(policy: &'a Value, port: &str) -> Vec<&'a Value> {
    policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|rule| {
            rule["toPorts"][0]["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["port"] == port)
        })
        .collect()
}

pub(crate) fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn all<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

#[test]
fn the_gateway_has_one_https_listener_per_hostname_with_its_own_certificate() {
    let objects = example("edge.example.json");
    let gateway = find(&objects, "Gateway", "edge-gateway");
    assert_eq!(gateway["spec"]["gatewayClassName"], "istio");
    let listeners = gateway["spec"]["listeners"].as_array().unwrap();
    let http: Vec<_> = listeners
        .iter()
        .filter(|l| l["protocol"] == "HTTP")
        .collect();
    assert_eq!(http.len(), 1);
    assert_eq!(http[0]["port"], 80);
    let https: Vec<_> = listeners
        .iter()
        .filter(|l| l["protocol"] == "HTTPS")
        .collect();
    assert_eq!(https.len(), 2);
    let mut secrets = Vec::new();
    for listener in &https {
        assert_eq!(listener["port"], 443);
        assert_eq!(listener["tls"]["mode"], "Terminate");
        let host = listener["hostname"].as_str().unwrap();
        assert!(host.ends_with(".example.com"));
        secrets.push(listener["tls"]["certificateRefs"][0]["name"].clone());
    }
    secrets.dedup();
    assert_eq!(secrets.len(), 2, "each hostname has its own certificate");
    assert_eq!(
        gateway["metadata"]["annotations"]["cert-manager.io/cluster-issuer"],
        "letsencrypt-staging"
    );
}

#[test]
fn the_gateway_carries_no_deprecated_field_so_istio_accepts_it() {
    // Istio 1.30.3 pilot/pkg/config/kube/gateway/conversion.go: a Gateway annotated
    // networking.istio.io/service-type gets a DeprecateFieldUsage error ("annotation ... is
    // deprecated, use Spec.Infrastructure.Routeability") and is not Accepted.
    for (_, objects) in examples() {
        let gateway = find(&objects, "Gateway", "edge-gateway");
        let annotations = gateway["metadata"]["annotations"].as_object().unwrap();
        assert!(
            !annotations.contains_key("networking.istio.io/service-type"),
            "{annotations:?}"
        );
    }
}

#[test]
fn every_route_names_an_existing_listener_of_its_gateway() {
    let objects = example("edge-pow.example.json");
    let gateway = find(&objects, "Gateway", "edge-gateway");
    let listeners: Vec<&str> = gateway["spec"]["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    let routes = all(&objects, "HTTPRoute");
    assert_eq!(routes.len(), 3, "one redirect and one route per hostname");
    for route in routes {
        for parent in route["spec"]["parentRefs"].as_array().unwrap() {
            assert_eq!(parent["name"], "edge-gateway");
            let section = parent["sectionName"].as_str().expect("sectionName is set");
            assert!(
                listeners.contains(&section),
                "{section} not in {listeners:?}"
            );
        }
    }
}

#[test]
fn the_redirect_never_captures_the_acme_challenge() {
    let objects = example("edge.example.json");
    let redirect = find(&objects, "HTTPRoute", "http-to-https");
    let rules = redirect["spec"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    let matches = rules[0]["matches"].as_array().unwrap();
    // Only a prefix match: cert-manager's Exact match on /.well-known/acme-challenge/<token>
    // takes precedence over any prefix (Gateway API HTTPRoute precedence rules).
    assert_eq!(matches.len(), 1);
    assert_eq!(matches[0]["path"]["type"], "PathPrefix");
    assert_eq!(matches[0]["path"]["value"], "/");
    assert_eq!(rules[0]["filters"][0]["requestRedirect"]["scheme"], "https");
    assert_eq!(redirect["spec"]["parentRefs"][0]["sectionName"], "http");
    // And the solver's own route attaches to that listener.
    let issuer = find(&objects, "ClusterIssuer", "letsencrypt-staging");
    let parent =
        &issuer["spec"]["acme"]["solvers"][0]["http01"]["gatewayHTTPRoute"]["parentRefs"][0];
    assert_eq!(parent["sectionName"], "http");
    assert_eq!(parent["name"], "edge-gateway");
}

#[test]
fn the_production_issuer_has_the_email_and_the_production_server() {
    let objects = example("edge-pow.example.json");
    let issuer = find(&objects, "ClusterIssuer", "letsencrypt-production");
    assert_eq!(issuer["spec"]["acme"]["email"], "ops@example.com");
    assert_eq!(
        issuer["spec"]["acme"]["server"],
        "https://acme-v02.api.letsencrypt.org/directory"
    );
}

#[test]
fn the_origin_is_pinned_limited_probed_and_restricted() {
    let objects = example("edge.example.json");
    let deployment = find(&objects, "Deployment", "origin");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let image = container["image"].as_str().unwrap();
    assert!(
        image.contains(':') && !image.ends_with(":latest"),
        "{image}"
    );
    for key in ["requests", "limits"] {
        assert!(container["resources"][key]["cpu"].is_string());
        assert!(container["resources"][key]["memory"].is_string());
    }
    assert!(container["readinessProbe"]["httpGet"].is_object());
    assert!(container["livenessProbe"]["httpGet"].is_object());
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let service = find(&objects, "Service", "origin");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
}

#[test]
fn without_the_filter_nothing_of_the_filter_is_rendered() {
    let objects = example("edge.example.json");
    for kind in [
        "WasmPlugin",
        "CronJob",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ] {
        assert!(
            all(&objects, kind).is_empty(),
            "{kind} rendered with the filter off"
        );
    }
    let options = find(&objects, "ConfigMap", "edge-gateway-options");
    assert!(
        !options["data"]["deployment"]
            .as_str()
            .unwrap()
            .contains("POW_HMAC")
    );
    // No metric tags to extract either: the gateway's pods keep the mesh's proxy config.
    let gateway = find(&objects, "Gateway", "edge-gateway");
    let annotations = gateway["spec"]["infrastructure"]["annotations"]
        .as_object()
        .unwrap();
    assert!(
        !annotations.contains_key("proxy.istio.io/config"),
        "{annotations:?}"
    );
}

#[test]
fn the_wasm_plugin_fails_open_in_authn_and_takes_its_secret_from_the_host() {
    let objects = example("edge-pow.example.json");
    let plugin = find(&objects, "WasmPlugin", "pow-filter");
    let spec = &plugin["spec"];
    assert_eq!(spec["phase"], "AUTHN");
    assert_eq!(spec["failStrategy"], "FAIL_OPEN");
    assert_eq!(spec["targetRefs"][0]["kind"], "Gateway");
    assert_eq!(spec["targetRefs"][0]["name"], "edge-gateway");
    assert_eq!(spec["sha256"].as_str().unwrap().len(), 64);
    assert!(spec["url"].as_str().unwrap().starts_with("oci://"));
    assert!(
        spec["pluginConfig"].get("lists").is_none(),
        "the refresh owns lists"
    );
    let env = spec["vmConfig"]["env"].as_array().unwrap();
    assert!(
        env.iter()
            .all(|e| e["valueFrom"] == "HOST" && e.get("value").is_none())
    );
    // The proxy container gets those variables from the Secret, through Istio's overlay.
    let options = find(&objects, "ConfigMap", "edge-gateway-options");
    let overlay: Value =
        serde_norway::from_str(options["data"]["deployment"].as_str().unwrap()).unwrap();
    let container = &overlay["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "istio-proxy");
    for var in env {
        let name = &var["name"];
        let entry = testkit::json::element(&container["env"], "/name", name.clone());
        assert_eq!(entry["valueFrom"]["secretKeyRef"]["name"], "pow-hmac");
    }
    let gateway = find(&objects, "Gateway", "edge-gateway");
    assert_eq!(
        gateway["spec"]["infrastructure"]["parametersRef"]["name"],
        options["metadata"]["name"]
    );
}

#[test]
fn the_gateway_service_keeps_client_addresses_on_ports_80_and_443() {
    let objects = example("edge.example.json");
    let options = find(&objects, "ConfigMap", "edge-gateway-options");
    let service: Value =
        serde_norway::from_str(options["data"]["service"].as_str().unwrap()).unwrap();
    assert_eq!(service["spec"]["type"], "NodePort");
    assert_eq!(service["spec"]["externalTrafficPolicy"], "Local");
    let node_ports: Vec<i64> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["nodePort"].as_i64().unwrap())
        .collect();
    assert_eq!(node_ports, [80, 443, 442]);
    // Istio makes a PodDisruptionBudget and an autoscaler for a gateway only when they are
    // overlaid: none, so the replica count is the overlay's and the one budget is ours.
    let keys: Vec<&String> = options["data"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["deployment", "service"]);
}

/// The gateway Deployment overlay of `objects`.
pub(crate) fn gateway_overlay(objects: &[Value]) -> Value {
    let options = find(objects, "ConfigMap", "edge-gateway-options");
    serde_norway::from_str(options["data"]["deployment"].as_str().unwrap()).unwrap()
}

#[test]
fn the_edge_label_the_gateway_selects_is_the_one_the_worker_patch_sets_and_only_it() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../talos/patches/70-edge-worker.worker.yaml");
    let patch: Value = serde_norway::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let (key, value) = pop_common::records::EDGE_NODE_LABEL;
    assert_eq!(
        patch,
        json!({"machine": {"nodeLabels": {key: value}}}),
        "{}",
        path.display()
    );
    let overlay = gateway_overlay(&example("edge.example.json"));
    assert_eq!(
        overlay["spec"]["template"]["spec"]["nodeSelector"],
        json!({key: value})
    );
}

#[test]
fn a_gateway_pod_runs_on_each_edge_node_and_a_drain_takes_one_at_a_time() {
    for nodes in [&["edge-worker-1"][..], &["edge-worker-1", "edge-worker-2"]] {
        let objects = with_edge_nodes(nodes);
        let overlay = gateway_overlay(&objects);
        let spec = &overlay["spec"];
        assert_eq!(spec["replicas"], nodes.len(), "{overlay}");
        // Selected by the label the infra layer sets on every worker, never by a node's name.
        let pod = &spec["template"]["spec"];
        assert_eq!(
            pod["nodeSelector"],
            json!({"edge.node.kubernetes.io/public": "true"})
        );
        let text = overlay.to_string();
        assert!(!nodes.iter().any(|n| text.contains(n)), "{text}");
        // One on each node: no node more than one pod ahead, required, keyed by the node's
        // name, on the gateway's pods; a cordoned node still counts.
        assert!(pod.get("affinity").is_none(), "{pod}");
        let spread = &pod["topologySpreadConstraints"];
        assert_eq!(
            spread,
            &json!([{
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {
                    "gateway.networking.k8s.io/gateway-name": "edge-gateway"}},
                "matchLabelKeys": ["pod-template-hash"],
                "nodeAffinityPolicy": "Honor",
                "nodeTaintsPolicy": "Ignore",
            }])
        );
        // A rollout starts the new pod before it stops the old one.
        assert_eq!(
            spec["strategy"]["rollingUpdate"],
            json!({"maxSurge": 1, "maxUnavailable": 0})
        );
        let budget = find(&objects, "PodDisruptionBudget", "edge-gateway");
        assert_eq!(budget["spec"]["maxUnavailable"], 1);
        assert!(budget["spec"].get("minAvailable").is_none());
        // The pods the budget counts are the ones the spread places, and the ones the
        // gateway's Service and policy select.
        assert_eq!(budget["spec"]["selector"], spread[0]["labelSelector"]);
        let policy = find(&objects, "CiliumNetworkPolicy", "edge-gateway");
        assert_eq!(
            budget["spec"]["selector"]["matchLabels"],
            policy["spec"]["endpointSelector"]["matchLabels"]
        );
    }
}

#[test]
fn the_lists_refresh_runs_hourly_alone_with_only_the_rights_it_needs() {
    let objects = example("edge-pow.example.json");
    let cron = find(&objects, "CronJob", "lists-refresh");
    assert_eq!(cron["spec"]["schedule"], "17 * * * *");
    assert_eq!(cron["spec"]["concurrencyPolicy"], "Forbid");
    let pod = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "lists-refresh");
    let image = pod["containers"][0]["image"].as_str().unwrap();
    assert!(image.contains(':') && !image.ends_with(":latest"));
    let role = find(&objects, "Role", "lists-refresh");
    for rule in role["rules"].as_array().unwrap() {
        assert_eq!(strings(&rule["verbs"]), ["get", "patch"]);
        assert_eq!(rule["resourceNames"].as_array().unwrap().len(), 1);
    }
    let binding = find(&objects, "RoleBinding", "lists-refresh");
    assert_eq!(binding["subjects"][0]["name"], "lists-refresh");
    // The lists ConfigMap is rendered without data: the refresh owns its keys.
    let lists = find(&objects, "ConfigMap", "policy-lists");
    assert!(lists.get("data").is_none());
    // The sources file is a ListSources record the refresh reads back.
    let sources = find(&objects, "ConfigMap", "lists-sources");
    let record: lists_core::records::ListSources =
        serde_json::from_str(sources["data"]["sources.json"].as_str().unwrap()).unwrap();
    assert!(record.problems().is_empty());
    assert_eq!(record.lists.len(), 2);
}

#[test]
fn the_gateway_class_says_only_what_istiod_says_the_same_way() {
    // istiod creates `istio` with its own description (gatewaycommon/gatewayclass.go): a
    // description here would conflict with it at server-side apply; the controllerName is the
    // same value, so the field is co-owned.
    let objects = example("edge.example.json");
    let class = find(&objects, "GatewayClass", "istio");
    assert_eq!(
        class["spec"],
        serde_json::json!({"controllerName": "istio.io/gateway-controller"})
    );
}

#[test]
fn what_istiod_generates_for_the_gateway_gets_its_own_labels_not_the_gateways() {
    // istiod copies the Gateway's labels (kubectl's ApplySet label among them) onto the
    // Deployment, Service and ServiceAccount it generates unless spec.infrastructure.labels is
    // set, and the same for annotations; the prune would then delete them.
    let objects = example("edge.example.json");
    let gateway = find(&objects, "Gateway", "edge-gateway");
    let infrastructure = &gateway["spec"]["infrastructure"];
    let labels = infrastructure["labels"].as_object().unwrap();
    assert!(!labels.is_empty(), "an empty map may be dropped on the way");
    assert!(
        labels
            .keys()
            .all(|k| !k.starts_with("applyset.kubernetes.io/")
                && k != "app.kubernetes.io/managed-by"),
        "{labels:?}"
    );
    assert!(
        !infrastructure["annotations"]
            .as_object()
            .unwrap()
            .is_empty()
    );
    // What Istio reads from the Gateway's own annotations stays there.
    assert_eq!(
        gateway["metadata"]["annotations"]["cert-manager.io/cluster-issuer"],
        "letsencrypt-staging"
    );
}

#[test]
fn the_acme_solver_service_stays_inside_the_cluster() {
    // cert-manager's solver Service defaults to NodePort, and NodePorts here are 80-443.
    for (config, objects) in examples() {
        for issuer in all(&objects, "ClusterIssuer") {
            for solver in issuer["spec"]["acme"]["solvers"].as_array().unwrap() {
                assert_eq!(
                    solver["http01"]["gatewayHTTPRoute"]["serviceType"], "ClusterIP",
                    "{config}"
                );
            }
        }
    }
}

#[test]
fn the_filter_runs_on_the_https_listeners_only() {
    let objects = example("edge-pow.example.json");
    let plugin = find(&objects, "WasmPlugin", "pow-filter");
    assert_eq!(
        plugin["spec"]["match"],
        serde_json::json!([{"ports": [{"number": 443}]}])
    );
    // Every HTTPS listener is on that port, and the HTTP one is not.
    let gateway = find(&objects, "Gateway", "edge-gateway");
    for listener in gateway["spec"]["listeners"].as_array().unwrap() {
        let https = listener["protocol"] == "HTTPS";
        assert_eq!(listener["port"] == 443, https, "{listener}");
    }
}

/// The Service istiod's deployment controller generates for a Gateway, as Istio 1.30.3 builds it
/// (pilot/pkg/config/kube/gatewaycommon/deploymentcontroller.go, `extractServicePorts`, and the
/// istiod chart's files/kube-gateway.yaml): first `status-port` 15021, then one port per distinct
/// listener port, named after its first listener, protocol TCP, no node port; type LoadBalancer
/// (the class's default). Then the parametersRef ConfigMap's `service` overlay, as a strategic
/// merge patch: `spec` maps merge, `ports` merge by their key `port` (core/v1 ServicePort's
/// patchMergeKey), scalars are replaced.
fn istio_gateway_service(gateway: &Value, overlay: &Value) -> Value {
    let mut ports = vec![serde_json::json!({
        "name": "status-port", "port": flows::GATEWAY_STATUS_PORT, "protocol": "TCP",
        "appProtocol": "tcp",
    })];
    let mut seen = Vec::new();
    for listener in gateway["spec"]["listeners"].as_array().unwrap() {
        let port = listener["port"].as_u64().unwrap();
        if seen.contains(&port) {
            continue;
        }
        seen.push(port);
        ports.push(serde_json::json!({
            "name": listener["name"].as_str().unwrap().replace('.', "-"),
            "port": port,
            "protocol": "TCP",
            "appProtocol": listener["protocol"].as_str().unwrap().to_lowercase(),
        }));
    }
    let mut service = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "spec": {"ipFamilyPolicy": "PreferDualStack", "ports": ports, "type": "LoadBalancer"},
    });
    for (key, value) in overlay["spec"].as_object().unwrap() {
        if key == "ports" {
            for patch in value.as_array().unwrap() {
                let list = service["spec"]["ports"].as_array_mut().unwrap();
                match list.iter_mut().find(|p| p["port"] == patch["port"]) {
                    Some(port) => {
                        for (k, v) in patch.as_object().unwrap() {
                            port[k] = v.clone();
                        }
                    }
                    None => list.push(patch.clone()),
                }
            }
        } else {
            service["spec"][key] = value.clone();
        }
    }
    service
}

#[test]
fn every_node_port_of_the_gateway_service_is_pinned_in_the_range_and_declared() {
    for (_, objects) in examples() {
        let gateway = find(&objects, "Gateway", "edge-gateway");
        let options = find(&objects, "ConfigMap", "edge-gateway-options");
        let overlay: Value =
            serde_norway::from_str(options["data"]["service"].as_str().unwrap()).unwrap();
        let service = istio_gateway_service(gateway, &overlay);
        assert_eq!(service["spec"]["type"], "NodePort");
        let ports = service["spec"]["ports"].as_array().unwrap();
        let names: Vec<&str> = ports.iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names[..2], ["status-port", "http"], "{names:?}");
        assert_eq!(ports.len(), 3, "status, HTTP, HTTPS: {ports:#?}");
        for port in ports {
            // An overlay entry for a port istiod does not generate would add a port of its own.
            assert!(
                port.get("name").is_some(),
                "a port istiod does not make: {port}"
            );
            let node_port = port["nodePort"]
                .as_u64()
                .unwrap_or_else(|| panic!("a random node port: {port}"))
                as u16;
            assert!(
                flows::NODE_PORT_RANGE.contains(node_port),
                "{port} outside {}",
                flows::NODE_PORT_RANGE
            );
            let flow = flows::to(flows::Role::Worker)
                .find(|f| f.traffic == flows::Traffic::Tcp(flows::Ports::one(node_port)))
                .unwrap_or_else(|| panic!("node port {node_port} is not a declared flow"));
            // The gateway's pods take the Service's port (its target) from the flow's peer only.
            let policy = find(&objects, "CiliumNetworkPolicy", "edge-gateway");
            let target = port["port"].as_u64().unwrap().to_string();
            let allowed = ingress_to_port(policy, &target);
            assert_eq!(allowed.len(), 1, "{target}: {allowed:?}");
            let entities = allowed[0]["fromEntities"].as_array().unwrap();
            let world = entities.contains(&Value::from("world"));
            assert_eq!(
                world,
                flow.from == flows::Peer::Internet,
                "{target} from {entities:?}, declared from {}",
                flow.from
            );
        }
        // The policy selects the gateway's pods by the label istiod gives them.
        let policy = find(&objects, "CiliumNetworkPolicy", "edge-gateway");
        assert_eq!(
            policy["spec"]["endpointSelector"]["matchLabels"]["gateway.networking.k8s.io/gateway-name"],
            "edge-gateway"
        );
    }
}

#[test]
fn only_the_gateways_pods_reach_the_origin() {
    // A packet injected into the tunnel under another identity, or any other pod of the cluster,
    // must not reach the origin around the filter: its own policy takes its port from the
    // gateway's pods alone (enforced once the policies are).
    for (config, objects) in examples() {
        let policy = find(&objects, "CiliumNetworkPolicy", "origin");
        let origin = find(&objects, "Deployment", "origin");
        let pod_labels = &origin["spec"]["template"]["metadata"]["labels"];
        let selector = policy["spec"]["endpointSelector"]["matchLabels"]
            .as_object()
            .unwrap();
        assert!(!selector.is_empty());
        for (key, value) in selector {
            assert_eq!(
                &pod_labels[key], value,
                "{config}: the origin's pods carry {key}"
            );
        }
        let gateway_pods =
            &find(&objects, "CiliumNetworkPolicy", "edge-gateway")["spec"]["endpointSelector"];
        let container_port =
            &origin["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"];
        assert_eq!(
            policy["spec"]["ingress"],
            serde_json::json!([{
                "fromEndpoints": [gateway_pods],
                "toPorts": [{"ports": [
                    {"port": container_port.to_string(), "protocol": "TCP"}
                ]}],
            }]),
            "{config}"
        );
    }
}
