//! The edge layer's objects, built from a resolved [`Plan`].
//!
//! Every object carries the labels `app.kubernetes.io/part-of: edgepop` and
//! `app.kubernetes.io/managed-by: render-edge`. `make apply-edge` applies them as one ApplySet
//! (kubectl labels each member), so an object this renderer stops producing is pruned on the next
//! apply; what controllers generate from these objects must never carry the set's label (see
//! the Gateway's `spec.infrastructure`).

pub mod admission;
pub mod monitoring;
pub mod placement;

use serde_json::{Value, json};

use crate::config::{AcmeServer, Monitoring, Plan, PowPlan};

pub const NAMESPACE: &str = "edge";
pub const GATEWAY: &str = "edge-gateway";
pub const GATEWAY_CLASS: &str = pop_common::records::EDGE_GATEWAY_CLASS;
pub const GATEWAY_OPTIONS: &str = "edge-gateway-options";
pub const HTTP_LISTENER: &str = "http";
pub const ORIGIN: &str = "origin";
pub const WASM_PLUGIN: &str = "pow-filter";
pub const POLICY_LISTS: &str = "policy-lists";
pub const LISTS_SOURCES: &str = "lists-sources";
pub const LISTS_REFRESH: &str = "lists-refresh";
/// The parent of the ApplySet `make apply-edge` applies and prunes with: a ConfigMap in the edge
/// namespace, created by kubectl, never rendered.
pub const APPLYSET_PARENT: &str = "edge-applyset";
/// The `app.kubernetes.io/managed-by` of every rendered object.
pub const MANAGED_BY: &str = "render-edge";
/// The VM environment variables that carry the HMAC keys into the filter.
pub const SECRET_ENV: &str = "POW_HMAC_SECRET";
pub const PREVIOUS_SECRET_ENV: &str = "POW_HMAC_SECRET_PREVIOUS";

const ORIGIN_PORT: u16 = 8080;
/// The Gateway's listener ports (the declared flows' public ports).
pub const HTTP_PORT: u16 = flows::HTTP;
pub const HTTPS_PORT: u16 = flows::HTTPS;
/// The label Istio puts on the gateway's pods, naming their Gateway (its deployment
/// controller's `GatewayNameLabel`, the Service's selector).
pub const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";
/// The proxy container in the Deployment Istio generates for a Gateway.
const ISTIO_PROXY_CONTAINER: &str = "istio-proxy";

/// All objects, in apply order: what others depend on comes first.
pub fn objects(plan: &Plan) -> Result<Vec<Value>, EncodeError> {
    let mut out = vec![
        namespace(),
        gateway_class(),
        cluster_issuer(plan),
        gateway_options(plan)?,
        gateway(plan),
        placement::disruption_budget(),
        gateway_policy(),
        http_redirect_route(plan),
    ];
    out.extend(plan.hostnames.iter().map(|host| origin_route(host)));
    out.push(origin_deployment(plan));
    out.push(origin_service());
    out.push(origin_policy());
    if let Some(pow) = &plan.pow {
        out.push(wasm_plugin(pow));
        out.push(policy_lists());
        out.push(lists_sources(pow)?);
        out.push(lists_service_account());
        out.push(lists_role());
        out.push(lists_role_binding());
        out.push(admission::policy());
        out.push(admission::binding());
        out.push(lists_cron_job(pow));
    }
    if plan.monitoring == Monitoring::PrometheusOperator {
        out.push(monitoring::pod_monitor());
        out.push(monitoring::prometheus_rule(plan.pow.is_some())?);
    }
    Ok(out)
}

/// The names the edge scripts need, as `(KEY, value)` in a fixed order: what `--names` prints.
/// An empty value means the object is not rendered (the filter's objects, when it is off).
pub fn names(plan: &Plan) -> Vec<(&'static str, String)> {
    let filter = |name: &str| plan.pow.as_ref().map_or(String::new(), |_| name.to_owned());
    vec![
        ("EDGE_NAMESPACE", NAMESPACE.to_owned()),
        (
            "EDGE_APPLYSET_PARENT",
            format!("configmap/{APPLYSET_PARENT}"),
        ),
        ("EDGE_GATEWAY_CLASS", GATEWAY_CLASS.to_owned()),
        ("EDGE_GATEWAY", GATEWAY.to_owned()),
        ("EDGE_GATEWAY_DEPLOYMENT", gateway_deployment_name()),
        // The selector of the gateway's pods, as istiod labels them.
        (
            "EDGE_GATEWAY_PODS",
            format!("{GATEWAY_NAME_LABEL}={GATEWAY}"),
        ),
        ("EDGE_WASM_PLUGIN", filter(WASM_PLUGIN)),
        (
            "EDGE_HMAC_SECRET",
            plan.pow
                .as_ref()
                .map_or(String::new(), |pow| pow.secret_name.clone()),
        ),
        ("EDGE_LISTS_CONFIGMAP", filter(POLICY_LISTS)),
        ("EDGE_LISTS_CRONJOB", filter(LISTS_REFRESH)),
        (
            "EDGE_POD_MONITOR",
            if plan.monitoring == Monitoring::PrometheusOperator {
                GATEWAY.to_owned()
            } else {
                String::new()
            },
        ),
    ]
}

/// The Deployment istiod generates for the Gateway: `<gateway>-<class>` (its deployment
/// controller's naming, the same for the Service and ServiceAccount).
pub fn gateway_deployment_name() -> String {
    format!("{GATEWAY}-{GATEWAY_CLASS}")
}

/// A value that could not be encoded (YAML or JSON): a bug, reported rather than rendered empty.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode {what}: {message}")]
pub struct EncodeError {
    what: &'static str,
    message: String,
}

impl EncodeError {
    pub fn new(what: &'static str, message: String) -> Self {
        EncodeError { what, message }
    }
}

fn labels(component: &str) -> Value {
    json!({
        "app.kubernetes.io/part-of": "edgepop",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/component": component,
    })
}

pub(crate) fn meta(name: &str, component: &str) -> Value {
    json!({"name": name, "namespace": NAMESPACE, "labels": labels(component)})
}

fn namespace() -> Value {
    let mut labels = labels("edge");
    // The gateway pods need only baseline (Istio sets a safe sysctl); warn on anything that is
    // not restricted, so drift shows up in kubectl's output.
    labels["pod-security.kubernetes.io/enforce"] = json!("baseline");
    labels["pod-security.kubernetes.io/warn"] = json!("restricted");
    labels["pod-security.kubernetes.io/audit"] = json!("restricted");
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": labels},
    })
}

/// The controller name istiod answers to (its `PILOT_GATEWAY_API_CONTROLLER_NAME` default).
pub const ISTIO_GATEWAY_CONTROLLER: &str = "istio.io/gateway-controller";

/// istiod creates this class itself when it is missing (its GatewayClass controller,
/// `PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER`, on by default), with its own description
/// and only on create; where that controller is off or has not run yet there is no class, and a
/// Gateway of it is ignored without a word, so the layer declares it too. It sets only what istiod sets the same way: with the same `controllerName` a
/// server-side apply co-owns the field with istiod instead of conflicting on it, and leaving
/// `description` out leaves istiod's value alone. `make apply-edge` then waits for `Accepted`.
fn gateway_class() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": GATEWAY_CLASS, "labels": labels("gateway")},
        "spec": {"controllerName": ISTIO_GATEWAY_CONTROLLER},
    })
}

pub fn issuer_name(server: AcmeServer) -> &'static str {
    server.issuer_name()
}

fn cluster_issuer(plan: &Plan) -> Value {
    let solver = json!({
        "http01": {
            "gatewayHTTPRoute": {
                // The solver's Service defaults to NodePort; with this cluster's NodePort
                // range (80-443) it would take a public port. The route reaches it inside
                // the cluster, so ClusterIP is all it needs.
                "serviceType": "ClusterIP",
                // The solver's route attaches to the HTTP listener only: port 80 is where
                // Let's Encrypt knocks.
                "parentRefs": [{
                    "group": "gateway.networking.k8s.io",
                    "kind": "Gateway",
                    "name": GATEWAY,
                    "namespace": NAMESPACE,
                    "sectionName": HTTP_LISTENER,
                }],
            },
        },
    });
    plan.acme_server
        .cluster_issuer(solver, plan.acme_email.as_deref(), labels("certificates"))
}

/// The listener that serves one hostname on 443.
pub fn https_listener_name(host: &str) -> String {
    format!("https-{host}")
}

/// The Secret cert-manager writes the hostname's certificate into.
pub fn certificate_secret_name(host: &str) -> String {
    format!("tls-{host}")
}

/// The HTTPRoute that sends the hostname's HTTPS traffic to the origin.
pub fn origin_route_name(host: &str) -> String {
    format!("origin-{host}")
}

/// The names made from a hostname, with what each names: each must stay a valid name.
pub fn names_of_hostname(host: &str) -> [(&'static str, String); 3] {
    [
        ("its HTTPS listener", https_listener_name(host)),
        ("its HTTPRoute", origin_route_name(host)),
        ("its certificate's Secret", certificate_secret_name(host)),
    ]
}

/// Istio's per-gateway customisation (`spec.infrastructure.parametersRef`): strategic merge
/// patches over the Deployment and Service it generates (see [`placement`]).
fn gateway_options(plan: &Plan) -> Result<Value, EncodeError> {
    let mut container = json!({"name": ISTIO_PROXY_CONTAINER});
    if let Some(pow) = &plan.pow {
        // The filter reads its keys from the VM environment (WasmPlugin vmConfig.env, valueFrom
        // HOST), which copies them from this container: the secret never enters the WasmPlugin.
        container["env"] = json!([
            {"name": SECRET_ENV, "valueFrom": {"secretKeyRef": {
                "name": pow.secret_name, "key": "current"}}},
            {"name": PREVIOUS_SECRET_ENV, "valueFrom": {"secretKeyRef": {
                "name": pow.secret_name, "key": "previous", "optional": true}}},
        ]);
    }
    let deployment = json!({"spec": placement::deployment_spec(plan, &[container])});
    let service = json!({
        "spec": {
            // The Service istiod generates is a LoadBalancer by default; the workers' own
            // addresses are the edge (no load balancer), so a NodePort.
            "type": "NodePort",
            // Keep the client's source address (no SNAT to another node): the filter's policy
            // and the challenge's binding depend on it.
            "externalTrafficPolicy": "Local",
            // The address families the edge serves end to end, as declared (the DNS step gives
            // its names an AAAA record only with IPv6 among them).
            "ipFamilyPolicy": if flows::EDGE_SERVES_IPV6 { "RequireDualStack" } else { "SingleStack" },
            "ipFamilies": flows::edge_ip_families(),
            // Every port of the Service gets a node port, pinned in the declared range (80-443,
            // shared with the API server): HTTP-01 and HTTPS on the workers' public addresses on
            // the standard ports, and the status port istiod always adds on a port of its own.
            // Merged into istiod's ports by `port` (strategic merge).
            "ports": flows::GATEWAY_NODE_PORTS
                .iter()
                .map(|(port, node_port)| json!({"port": port, "nodePort": node_port}))
                .collect::<Vec<_>>(),
        },
    });
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(GATEWAY_OPTIONS, "gateway"),
        "data": {
            "deployment": to_yaml(&deployment, "the gateway Deployment overlay")?,
            "service": to_yaml(&service, "the gateway Service overlay")?,
        },
    }))
}

fn gateway(plan: &Plan) -> Value {
    let mut listeners = vec![json!({
        "name": HTTP_LISTENER,
        "protocol": "HTTP",
        "port": HTTP_PORT,
        // cert-manager creates its solver routes in the Certificate's namespace, which is the
        // Gateway's: nothing from other namespaces may attach.
        "allowedRoutes": {"namespaces": {"from": "Same"}},
    })];
    listeners.extend(plan.hostnames.iter().map(|host| {
        json!({
            "name": https_listener_name(host),
            "hostname": host,
            "protocol": "HTTPS",
            "port": HTTPS_PORT,
            "tls": {
                "mode": "Terminate",
                "certificateRefs": [{"kind": "Secret", "name": certificate_secret_name(host)}],
            },
            "allowedRoutes": {"namespaces": {"from": "Same"}},
        })
    }));
    let mut metadata = meta(GATEWAY, "gateway");
    // No `networking.istio.io/service-type`: Istio 1.30 reports it as a deprecated field and
    // the Gateway is then not Accepted; the Service's type comes from the ConfigMap overlay.
    metadata["annotations"] = json!({
        // One Certificate per HTTPS listener, from the listener's hostname and certificateRef.
        "cert-manager.io/cluster-issuer": issuer_name(plan.acme_server),
    });
    let mut infrastructure_annotations =
        json!({"edgepop.dev/generated-for": format!("Gateway {NAMESPACE}/{GATEWAY}")});
    if plan.pow.is_some() {
        // The filter's metric tags as labels (see `monitoring`).
        infrastructure_annotations[monitoring::PROXY_CONFIG_ANNOTATION] =
            monitoring::proxy_config().into();
    }
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": metadata,
        "spec": {
            "gatewayClassName": GATEWAY_CLASS,
            "infrastructure": {
                "parametersRef": {"group": "", "kind": "ConfigMap", "name": GATEWAY_OPTIONS},
                // Without these two maps istiod copies the Gateway's own labels and annotations
                // onto the Deployment, Service and ServiceAccount it generates
                // (extractInfrastructureMetadata): among them kubectl's
                // `applyset.kubernetes.io/part-of`, and the next apply's prune would then delete
                // the live gateway as a stale member of the set. Non-empty on purpose: istiod
                // tests for a nil map, and an empty one may not survive the round trip.
                "labels": gateway_infrastructure_labels(),
                "annotations": infrastructure_annotations,
            },
            "listeners": listeners,
        },
    })
}

/// The Cilium entities a flow's peer stands for, seen from a pod: the internet, and the pods that
/// reach a worker's public address from inside the cluster (cert-manager's HTTP-01 self-check
/// does), or the nodes (kubelets, agents' health endpoints).
fn pod_peer_entities(peer: flows::Peer) -> &'static [&'static str] {
    match peer {
        flows::Peer::Internet => &["world", "cluster"],
        _ => &["host", "remote-node", "health"],
    }
}

/// What the gateway's pods take: on each port of their Service, the peers of the flow declared
/// to its node port; on the metrics port, the cluster's pods (Prometheus); nothing else
/// (Envoy's admin port and the agent's other ports stay closed). Cilium
/// serves node ports before a host policy could see the packet, so this is where a node port's
/// sources are held; `policyAuditMode` decides whether it logs or drops.
fn gateway_policy() -> Value {
    let mut ingress = Vec::new();
    for (port, node_port) in flows::GATEWAY_NODE_PORTS {
        let peer = flows::to(flows::Role::Worker)
            .find(|f| f.traffic == flows::Traffic::Tcp(flows::Ports::one(node_port)))
            .map_or(flows::Peer::Nodes, |f| f.from);
        let entities = pod_peer_entities(peer);
        let rule = json!({"port": port.to_string(), "protocol": "TCP"});
        match ingress
            .iter_mut()
            .find(|r: &&mut Value| r["fromEntities"] == json!(entities))
        {
            Some(existing) => existing["toPorts"][0]["ports"]
                .as_array_mut()
                .into_iter()
                .for_each(|ports| ports.push(rule.clone())),
            None => ingress.push(json!({
                "fromEntities": entities,
                "toPorts": [{"ports": [rule]}],
            })),
        }
    }
    ingress.push(monitoring::metrics_ingress());
    json!({
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": meta(GATEWAY, "gateway"),
        "spec": {
            "description": "The gateway's pods take the edge's ports from anywhere, the \
                status port from the nodes only (its node port is public otherwise) and the \
                metrics port from the cluster's pods",
            "endpointSelector": {"matchLabels": {GATEWAY_NAME_LABEL: GATEWAY}},
            "ingress": ingress,
        },
    })
}

/// The labels of what istiod generates for the Gateway: never `managed-by: render-edge`
/// (those objects are istiod's, not the renderer's) and never an ApplySet label.
pub fn gateway_infrastructure_labels() -> Value {
    json!({
        "app.kubernetes.io/part-of": "edgepop",
        "app.kubernetes.io/component": "gateway",
    })
}

/// HTTP to HTTPS. Its only match is the prefix `/`; cert-manager's solver route matches the
/// exact path `/.well-known/acme-challenge/<token>` for the same hostname, and Gateway API gives
/// an exact path match precedence over any prefix match, so the challenge is never redirected.
fn http_redirect_route(plan: &Plan) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": meta("http-to-https", "routes"),
        "spec": {
            "parentRefs": [{"name": GATEWAY, "sectionName": HTTP_LISTENER}],
            "hostnames": plan.hostnames,
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "filters": [{
                    "type": "RequestRedirect",
                    "requestRedirect": {"scheme": "https", "statusCode": 301},
                }],
            }],
        },
    })
}

fn origin_route(host: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": meta(&origin_route_name(host), "routes"),
        "spec": {
            // Several listeners share 443: naming the section keeps the route on its own name.
            "parentRefs": [{"name": GATEWAY, "sectionName": https_listener_name(host)}],
            "hostnames": [host],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [{"name": ORIGIN, "port": 80}],
            }],
        },
    })
}

fn origin_deployment(plan: &Plan) -> Value {
    let selector = json!({"app.kubernetes.io/name": ORIGIN});
    let mut pod_labels = labels("origin");
    pod_labels["app.kubernetes.io/name"] = json!(ORIGIN);
    let probe = json!({"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10});
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(ORIGIN, "origin"),
        "spec": {
            "replicas": plan.origin_replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "automountServiceAccountToken": false,
                    "securityContext": pop_common::pod_security::restricted_pod(),
                    "containers": [{
                        "name": ORIGIN,
                        "image": plan.origin_image,
                        "args": [format!("-listen=:{ORIGIN_PORT}"), format!("-text={}", plan.origin_text)],
                        "ports": [{"name": "http", "containerPort": ORIGIN_PORT, "protocol": "TCP"}],
                        "readinessProbe": probe,
                        "livenessProbe": probe,
                        "resources": {
                            "requests": {"cpu": "10m", "memory": "16Mi"},
                            "limits": {"cpu": "200m", "memory": "64Mi"},
                        },
                        "securityContext": pop_common::pod_security::restricted_container(),
                    }],
                },
            },
        },
    })
}

fn origin_service() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(ORIGIN, "origin"),
        "spec": {
            "selector": {"app.kubernetes.io/name": ORIGIN},
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    })
}

/// The origin takes its port from the gateway's pods alone: no other pod of the cluster, and no
/// packet injected into the tunnel under another identity, reaches it around the filter.
/// `policyAuditMode` decides whether it logs or drops.
fn origin_policy() -> Value {
    json!({
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": meta(ORIGIN, "origin"),
        "spec": {
            "description": "The origin takes traffic from the gateway's pods only",
            "endpointSelector": {"matchLabels": {"app.kubernetes.io/name": ORIGIN}},
            "ingress": [{
                "fromEndpoints": [{"matchLabels": {GATEWAY_NAME_LABEL: GATEWAY}}],
                "toPorts": [{"ports": [{"port": ORIGIN_PORT.to_string(), "protocol": "TCP"}]}],
            }],
        },
    })
}

fn wasm_plugin(pow: &PowPlan) -> Value {
    json!({
        "apiVersion": "extensions.istio.io/v1alpha1",
        "kind": "WasmPlugin",
        "metadata": meta(WASM_PLUGIN, "filter"),
        "spec": {
            "targetRefs": [{
                "group": "gateway.networking.k8s.io",
                "kind": "Gateway",
                "name": GATEWAY,
            }],
            "url": pow.url,
            "sha256": pow.sha256,
            // HTTPS only: without `match` the filter runs on every listener before the router,
            // so port 80 would serve the challenge and a cookie without `Secure` instead of
            // redirecting (and ACME's HTTP-01 requests would meet it). The port is the Gateway
            // listener's (istiod matches a gateway listener's port, in CLIENT mode).
            "match": [{"ports": [{"number": HTTPS_PORT}]}],
            "imagePullPolicy": "IfNotPresent",
            // Before authentication: an unpaid robot is stopped before anything else runs.
            "phase": "AUTHN",
            // A broken filter must never become an outage: traffic passes, and metrics say so.
            "failStrategy": "FAIL_OPEN",
            // `lists` is absent on purpose: the hourly refresh owns it (its own field manager).
            "pluginConfig": pow.plugin_config,
            "vmConfig": {"env": [
                {"name": SECRET_ENV, "valueFrom": "HOST"},
                {"name": PREVIOUS_SECRET_ENV, "valueFrom": "HOST"},
            ]},
        },
    })
}

/// Created empty: the refresh job owns its list keys through its own field manager, so a
/// re-apply of the edge layer never reverts them.
fn policy_lists() -> Value {
    let mut metadata = meta(POLICY_LISTS, "lists");
    metadata["annotations"] = json!({
        "edgepop.dev/owner-of-data": "the lists-refresh CronJob (field manager edgepop-lists); the edge layer owns only the metadata",
    });
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata})
}

fn lists_sources(pow: &PowPlan) -> Result<Value, EncodeError> {
    let sources = serde_json::to_string_pretty(&pow.lists).map_err(|e| EncodeError {
        what: "the list sources",
        message: e.to_string(),
    })?;
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(LISTS_SOURCES, "lists"),
        "data": {"sources.json": format!("{sources}\n")},
    }))
}

fn lists_service_account() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta(LISTS_REFRESH, "lists"),
        "automountServiceAccountToken": true,
    })
}

/// Only what the refresh needs: read and server-side-apply its two objects, by name.
fn lists_role() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(LISTS_REFRESH, "lists"),
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"],
             "resourceNames": [POLICY_LISTS], "verbs": ["get", "patch"]},
            {"apiGroups": ["extensions.istio.io"], "resources": ["wasmplugins"],
             "resourceNames": [WASM_PLUGIN], "verbs": ["get", "patch"]},
        ],
    })
}

fn lists_role_binding() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(LISTS_REFRESH, "lists"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": LISTS_REFRESH},
        "subjects": [{"kind": "ServiceAccount", "name": LISTS_REFRESH, "namespace": NAMESPACE}],
    })
}

fn lists_cron_job(pow: &PowPlan) -> Value {
    let mut pod_labels = labels("lists");
    pod_labels["app.kubernetes.io/name"] = json!(LISTS_REFRESH);
    // Minute 17: off the top of the hour, when every other cron on the internet fires.
    let pod = json!({
        "metadata": {"labels": pod_labels},
        "spec": {
            "serviceAccountName": LISTS_REFRESH,
            "restartPolicy": "Never",
            "securityContext": pop_common::pod_security::restricted_pod(),
            "containers": [{
                "name": LISTS_REFRESH,
                // Pinned by digest (the PublishedImages record): a tag can move.
                "image": pow.lists_refresh_image,
                "command": ["lists-refresh"],
                "args": [
                    format!("--namespace={NAMESPACE}"),
                    format!("--configmap={POLICY_LISTS}"),
                    format!("--wasmplugin={WASM_PLUGIN}"),
                    "--sources=/etc/lists-refresh/sources.json",
                ],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"cpu": "1", "memory": "512Mi"},
                },
                "securityContext": pop_common::pod_security::restricted_container(),
                "volumeMounts": [
                    {"name": "sources", "mountPath": "/etc/lists-refresh", "readOnly": true},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
            }],
            "volumes": [
                {"name": "sources", "configMap": {"name": LISTS_SOURCES}},
                {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
            ],
        },
    });
    pop_common::cron_job::cron_job(meta(LISTS_REFRESH, "lists"), "17 * * * *", 1200, pod)
}

/// YAML text of a value (the ConfigMap overlay values, and the output stream).
pub fn to_yaml(value: &Value, what: &'static str) -> Result<String, EncodeError> {
    serde_norway::to_string(value).map_err(|e| EncodeError {
        what,
        message: e.to_string(),
    })
}
