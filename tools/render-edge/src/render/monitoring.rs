//! How the filter's metrics leave the gateway's pods and reach Prometheus, read in istio/istio
//! 1.30.3:
//!
//! - Envoy keeps a Wasm module's metrics under `wasmcustom.` (see `proxy_wasm_host::envoy_stats`),
//!   which the stats matcher Istio's bootstrap renders lets through with no setting of ours: its
//!   required inclusion prefixes end with `wasm` (`pkg/bootstrap/config.go` 64, rendered at
//!   `tools/packaging/common/envoy_bootstrap.json` 159-194).
//! - Their tags become labels through one `stats_tags` entry per ProxyConfig `extraStatTags`
//!   entry (`envoy_bootstrap.json` 121-126, `config.go` 270-281). A Gateway API gateway gets its
//!   ProxyConfig from the `proxy.istio.io/config` annotation of its pods: istiod copies
//!   `spec.infrastructure.annotations` onto the pod template (`manifests/charts/istio-control/
//!   istio-discovery/files/kube-gateway.yaml` 50-58), the downward API puts the pod's
//!   annotations in `/etc/istio/pod/annotations` (the same file, 290-298), and pilot-agent
//!   applies the annotation over the mesh's ProxyConfig before it writes the bootstrap
//!   (`pilot/cmd/pilot-agent/config/config.go` 38, 54, 136-143).
//! - The pods serve Envoy's and the agent's metrics together on port 15020 at
//!   `/stats/prometheus`, and carry the `prometheus.io/scrape`, `port` and `path` annotations for
//!   that endpoint (`kube-gateway.yaml` 53-57, 109-111): a Prometheus that scrapes by
//!   annotations needs nothing more. One run by the Prometheus Operator reads PodMonitors and
//!   PrometheusRules instead, rendered here when the edge config says so.

use serde_json::{Value, json};

use super::{EncodeError, GATEWAY, GATEWAY_NAME_LABEL, meta};
use pow_core::filter::metric;

/// The pod annotation pilot-agent reads its ProxyConfig overrides from.
pub const PROXY_CONFIG_ANNOTATION: &str = "proxy.istio.io/config";
/// The gateway container's port named `metrics` (istiod's gateway template).
pub const METRICS_PORT_NAME: &str = "metrics";
/// The alerts, in Prometheus's rule file format (also checked and unit-tested by promtool).
pub const ALERTS: &str = include_str!("../../../../k8s/observability/pow-alerts.yaml");

/// The gateway's ProxyConfig overrides: the filter's metric tags as `extraStatTags`.
pub fn proxy_config() -> String {
    json!({"extraStatTags": metric::TAGS}).to_string()
}

/// The PodMonitor that scrapes the gateway's pods where their annotations say.
pub fn pod_monitor() -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": meta(GATEWAY, "gateway"),
        "spec": {
            "selector": {"matchLabels": {GATEWAY_NAME_LABEL: GATEWAY}},
            "podMetricsEndpoints": [{
                "port": METRICS_PORT_NAME,
                "path": metric::METRICS_PATH,
                "interval": "30s",
            }],
        },
    })
}

/// The PrometheusRule holding the edge's alerts; without the filter, only those that read none
/// of its metrics (a gateway without the filter would fire `PowFilterNotLoaded` for ever).
pub fn prometheus_rule(filter_on: bool) -> Result<Value, EncodeError> {
    let mut rules: Value = serde_norway::from_str(ALERTS)
        .map_err(|e| EncodeError::new("k8s/observability/pow-alerts.yaml", e.to_string()))?;
    if !filter_on {
        for group in rules["groups"].as_array_mut().into_iter().flatten() {
            if let Some(list) = group["rules"].as_array_mut() {
                list.retain(|rule| !reads_filter_metrics(rule));
            }
        }
    }
    Ok(json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": meta(GATEWAY, "gateway"),
        "spec": {"groups": rules["groups"]},
    }))
}

/// Whether a rule's expression reads one of the filter's metrics (every one is named `pow_...`).
pub fn reads_filter_metrics(rule: &Value) -> bool {
    rule["expr"]
        .as_str()
        .is_some_and(|expr| metric::FAMILIES.iter().any(|family| expr.contains(family)))
}

/// The gateway pods' metrics port, opened to the cluster's pods (where Prometheus runs) and to
/// nothing outside: a CiliumNetworkPolicy ingress rule.
pub fn metrics_ingress() -> Value {
    json!({
        "fromEntities": ["cluster"],
        "toPorts": [{"ports": [{"port": metric::METRICS_PORT.to_string(), "protocol": "TCP"}]}],
    })
}
