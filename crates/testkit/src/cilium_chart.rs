//! The Cilium chart's host-network listeners, played by tests: helm cannot render the chart here
//! (`../shared/charts/cilium` holds its values and schema, not its templates), so this reads the
//! merged values as the templates do and names every port a host-network workload of the chart
//! opens on a node, and whether it binds the node's addresses or loopback only.
//!
//! What each entry reproduces (cilium v1.20 chart, `install/kubernetes/cilium/`; the agent and
//! operator sources for the listeners the chart only configures):
//!
//! - the agent, a DaemonSet with `hostNetwork: true` on every node
//!   (`templates/cilium-agent/daemonset.yaml`): cilium-health on `clusterHealthPort` (all
//!   addresses, when `healthChecking`), Hubble on `hubble.listenAddress` (`:4244`, all
//!   addresses), its metrics on `prometheus.port` and Hubble's on `hubble.metrics.port` when
//!   enabled (`templates/cilium-configmap.yaml`: `prometheus-serve-addr: ":<port>"`, "this will
//!   open the port on ALL nodes"; `hubble-metrics-server: ":<port>"`), its health API on
//!   `healthPort` and gops on 9890 (loopback), pprof on `pprof.address`; the tunnel's UDP port
//!   (`tunnelPort`, 8472 for VXLAN) and WireGuard's (51871) are kernel sockets on all addresses;
//! - cilium-envoy, a DaemonSet with `hostNetwork: true` (`templates/cilium-envoy/daemonset.yaml`)
//!   whose bootstrap (`files/cilium-envoy/configmap/bootstrap-config.yaml`) listens on
//!   `envoy.prometheus.port` at `0.0.0.0` when `envoy.prometheus.enabled`, on `envoy.healthPort`
//!   and, when `envoy.debug.admin.enabled`, on its admin port at `127.0.0.1`;
//! - the operator, a Deployment with `hostNetwork: {{ .Values.operator.hostNetwork }}` and no
//!   node selector but the OS (`templates/cilium-operator/deployment.yaml`): its metrics on
//!   `operator.prometheus.port` when `operator.prometheus.enabled` (the configmap's
//!   `operator-prometheus-serve-addr: ":<port>"` and `enable-metrics`, without which the
//!   operator starts no metrics server: `operator/metrics`, `registerMetricsManager`), its API
//!   on `127.0.0.1:9234` (the configmap's `operator-api-serve-addr`), gops on 9891 (loopback),
//!   pprof on `operator.pprof.address`.
//!
//! A switch that would add a host-network listener this does not model (the clustermesh API
//! server, BGP, mutual authentication, the standalone DNS proxy, Cilium's own ingress or Gateway
//! API on the host network) panics, naming it: this must learn that listener first.

use serde_json::Value;

/// One port a host-network workload of the chart opens on a node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HostListener {
    /// The workload (`cilium-agent`, `cilium-envoy`, `cilium-operator`).
    pub workload: &'static str,
    /// What listens there.
    pub what: &'static str,
    /// `tcp` or `udp`.
    pub protocol: &'static str,
    pub port: u16,
    /// Bound to loopback only: unreachable from another host whatever the firewall says.
    pub loopback: bool,
}

/// The switches that open listeners this stand-in does not model.
const UNMODELLED: [&str; 7] = [
    "/clustermesh/useAPIServer",
    "/bgpControlPlane/enabled",
    "/authentication/mutual/spire/enabled",
    "/standaloneDnsProxy/enabled",
    "/ingressController/hostNetwork/enabled",
    "/gatewayAPI/hostNetwork/enabled",
    "/hubble/metrics/dynamic/enabled",
];

/// A TCP listener a workload opens when a switch is on: `(workload, what, switch, port, on
/// loopback only)`, the switch and the port as JSON pointers into the values.
const SWITCHED: [(&str, &str, &str, &str, bool); 5] = [
    (
        "cilium-agent",
        "agent metrics",
        "/prometheus/enabled",
        "/prometheus/port",
        false,
    ),
    (
        "cilium-envoy",
        "Envoy metrics",
        "/envoy/prometheus/enabled",
        "/envoy/prometheus/port",
        false,
    ),
    (
        "cilium-envoy",
        "Envoy admin",
        "/envoy/debug/admin/enabled",
        "/envoy/debug/admin/port",
        true,
    ),
    (
        "cilium-operator",
        "operator metrics",
        "/operator/prometheus/enabled",
        "/operator/prometheus/port",
        false,
    ),
    ("cilium-operator", "operator API", "", "", true),
];

/// pprof, bound to its `address`: `(workload, what, values prefix)`.
const PPROF: [(&str, &str, &str); 2] = [
    ("cilium-agent", "agent pprof", "/pprof"),
    ("cilium-operator", "operator pprof", "/operator/pprof"),
];

/// Every host-network listener of the chart for `values` (the chart's defaults merged with
/// every values file given to helm, in order).
#[allow(clippy::panic)] // a test stand-in: an unmodelled switch must stop the test
pub fn host_listeners(values: &Value) -> Vec<HostListener> {
    for pointer in UNMODELLED {
        if on(values, pointer) {
            panic!("{pointer} is on: the Cilium chart stand-in does not know its listeners");
        }
    }
    let present = |workload: &str| match workload {
        "cilium-envoy" => values.pointer("/envoy/enabled") != Some(&Value::Bool(false)),
        "cilium-operator" => on(values, "/operator/enabled") && on(values, "/operator/hostNetwork"),
        _ => true,
    };
    let tcp = |workload, what, port, loopback| HostListener {
        workload,
        what,
        protocol: "tcp",
        port,
        loopback,
    };
    let mut out = agent(values);
    out.push(tcp("cilium-agent", "gops", 9890, true));
    if present("cilium-envoy") {
        out.push(tcp(
            "cilium-envoy",
            "Envoy health",
            port(values, "/envoy/healthPort"),
            true,
        ));
    }
    if present("cilium-operator") {
        out.push(tcp("cilium-operator", "gops", 9891, true));
    }
    for (workload, what, switch, pointer, loopback) in SWITCHED {
        if !present(workload) || !(switch.is_empty() || on(values, switch)) {
            continue;
        }
        // The operator's API has no value of its own: the configmap's 127.0.0.1:9234.
        let number = if pointer.is_empty() {
            9234
        } else {
            port(values, pointer)
        };
        out.push(tcp(workload, what, number, loopback));
    }
    for (workload, what, prefix) in PPROF {
        if present(workload) && on(values, &format!("{prefix}/enabled")) {
            let host = text(values, &format!("{prefix}/address"));
            let number = port(values, &format!("{prefix}/port"));
            out.push(tcp(workload, what, number, is_loopback(&host)));
        }
    }
    out.sort();
    out
}

/// The agent's own listeners, beside gops, its metrics and pprof.
fn agent(values: &Value) -> Vec<HostListener> {
    let listener = |what, protocol, port, loopback| HostListener {
        workload: "cilium-agent",
        what,
        protocol,
        port,
        loopback,
    };
    let mut out = vec![listener(
        "agent health API",
        "tcp",
        port(values, "/healthPort"),
        true,
    )];
    if on(values, "/healthChecking") {
        // The chart leaves cluster-health-port unset unless the key exists: the agent's 4240.
        let health = values
            .pointer("/clusterHealthPort")
            .map_or(4240, |_| port(values, "/clusterHealthPort"));
        out.push(listener("cilium-health", "tcp", health, false));
    }
    if on(values, "/hubble/enabled") {
        let (host, hubble) = address(values, "/hubble/listenAddress");
        out.push(listener("Hubble server", "tcp", hubble, is_loopback(&host)));
    }
    if values
        .pointer("/hubble/metrics/enabled")
        .and_then(Value::as_array)
        .is_some_and(|m| !m.is_empty())
    {
        let number = port(values, "/hubble/metrics/port");
        out.push(listener("Hubble metrics", "tcp", number, false));
    }
    // The chart's default routing mode is a tunnel (VXLAN, 8472, when tunnelPort is 0).
    let routing = text(values, "/routingMode");
    if routing.is_empty() || routing == "tunnel" {
        let tunnel = match port(values, "/tunnelPort") {
            0 => 8472,
            other => other,
        };
        out.push(listener("tunnel (VXLAN)", "udp", tunnel, false));
    }
    if on(values, "/encryption/enabled") && text(values, "/encryption/type") == "wireguard" {
        out.push(listener("WireGuard", "udp", 51871, false));
    }
    out
}

fn on(values: &Value, pointer: &str) -> bool {
    values.pointer(pointer) == Some(&Value::Bool(true))
}

fn text(values: &Value, pointer: &str) -> String {
    values
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[allow(clippy::panic)] // a test stand-in
fn port(values: &Value, pointer: &str) -> u16 {
    let value = values.pointer(pointer);
    let number = match value {
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    number.unwrap_or_else(|| panic!("{pointer}: not a port: {value:?}"))
}

/// `host:port` (`:4244` for every address).
#[allow(clippy::panic)] // a test stand-in
fn address(values: &Value, pointer: &str) -> (String, u16) {
    let text = text(values, pointer);
    let (host, port) = text
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{pointer}: not host:port: {text}"));
    let port = port
        .parse()
        .unwrap_or_else(|_| panic!("{pointer}: not host:port: {text}"));
    (host.trim_matches(['[', ']']).to_owned(), port)
}

fn is_loopback(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn open(values: &Value) -> Vec<(&'static str, u16)> {
        host_listeners(values)
            .into_iter()
            .filter(|l| !l.loopback)
            .map(|l| (l.protocol, l.port))
            .collect()
    }

    #[test]
    fn the_chart_defaults_open_the_metrics_of_envoy_and_the_operator_to_every_address() {
        let defaults = json!({
            "healthPort": 9879, "healthChecking": true, "routingMode": "", "tunnelPort": 0,
            "hubble": {"enabled": true, "listenAddress": ":4244", "metrics": {"enabled": null}},
            "prometheus": {"enabled": false, "port": 9962},
            "pprof": {"enabled": false},
            "encryption": {"enabled": false},
            "envoy": {"enabled": null, "healthPort": 9878,
                      "prometheus": {"enabled": true, "port": 9964},
                      "debug": {"admin": {"enabled": false, "port": 9901}}},
            "operator": {"enabled": true, "hostNetwork": true,
                         "prometheus": {"enabled": true, "port": 9963}, "pprof": {"enabled": false}},
        });
        let mut open = open(&defaults);
        open.sort_unstable();
        assert_eq!(
            open,
            [
                ("tcp", 4240),
                ("tcp", 4244),
                ("tcp", 9963),
                ("tcp", 9964),
                ("udp", 8472)
            ]
        );
    }

    #[test]
    #[should_panic(expected = "/bgpControlPlane/enabled is on")]
    fn a_switch_it_does_not_model_stops_it() {
        host_listeners(&json!({"bgpControlPlane": {"enabled": true}}));
    }
}
