//! How the gateway's metrics reach Prometheus: the ProxyConfig annotation that turns the
//! filter's metric tags into labels (the same tags the module writes), the metrics port open to
//! the cluster's pods only, and, when the edge config says the cluster runs the Prometheus
//! Operator, the PodMonitor and the PrometheusRule, taken by the real API server with the
//! operator's CRDs; the alerts themselves checked and unit-tested by the real promtool.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use render_edge::render::monitoring;
use serde_json::{Value, json};

use crate::api_server::{apply, edge, files_with, rendered};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The objects of the committed filter-on example with `monitoring` set to `mode`.
fn with_monitoring(dir: &Path, mode: &str) -> Vec<Value> {
    let (inputs, config) = files_with(dir, |_, config| {
        let pow: Value = serde_json::from_str(
            &std::fs::read_to_string(workspace().join("config/edge-pow.example.json")).unwrap(),
        )
        .unwrap();
        *config = pow;
        // The record of the published images, where the example names it.
        let published = workspace().join("config/published-images.example.json");
        config["images"]["published"] = published.display().to_string().into();
        config["monitoring"] = mode.into();
    });
    rendered(&inputs, &config).unwrap()
}

fn find<'a>(objects: &'a [Value], kind: &str) -> Option<&'a Value> {
    objects.iter().find(|o| o["kind"] == kind)
}

#[test]
fn the_gateway_turns_the_filters_metric_tags_into_labels() {
    let dir = tempfile::tempdir().unwrap();
    let objects = with_monitoring(dir.path(), "annotations");
    let gateway = find(&objects, "Gateway").unwrap();
    let annotation = gateway["spec"]["infrastructure"]["annotations"]
        [monitoring::PROXY_CONFIG_ANNOTATION]
        .as_str()
        .unwrap();
    let proxy_config: Value = serde_json::from_str(annotation).unwrap();
    assert_eq!(
        proxy_config,
        json!({"extraStatTags": pow_core::filter::metric::TAGS})
    );
    // Every tag the module writes in a metric's name is one the gateway extracts: the tags of
    // every labelled name the filter defines, over a configuration with lists, rules, crawlers
    // and signed agents.
    let tags = crate::objects::strings(&proxy_config["extraStatTags"]);
    let plugin = find(&objects, "WasmPlugin").unwrap()["spec"]["pluginConfig"].clone();
    let config = pow_core::PluginConfig::from_json(plugin.to_string().as_bytes()).unwrap();
    let filter = pow_core::Filter::new(config, None, [0; 32]).unwrap();
    for name in filter.metric_names() {
        let sep = pow_core::filter::metric::VALUE_SEPARATOR;
        for field in name.split(pow_core::filter::metric::FIELD_SEPARATOR) {
            if let Some((tag, _)) = field.split_once(sep) {
                assert!(tags.contains(&tag), "{tag} of {name} is not extracted");
            }
        }
    }
    // Without the operator, nothing of it is rendered: istiod's scrape annotations do.
    assert!(find(&objects, "PodMonitor").is_none());
    assert!(find(&objects, "PrometheusRule").is_none());
}

#[test]
fn the_metrics_port_opens_to_the_clusters_pods_only() {
    let dir = tempfile::tempdir().unwrap();
    let objects = with_monitoring(dir.path(), "annotations");
    let policy = objects
        .iter()
        .find(|o| o["kind"] == "CiliumNetworkPolicy" && o["metadata"]["name"] == "edge-gateway")
        .unwrap();
    let port = pow_core::filter::metric::METRICS_PORT.to_string();
    let rules = crate::objects::ingress_to_port(policy, &port);
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0]["fromEntities"], json!(["cluster"]));
}

#[test]
fn with_the_operator_a_pod_monitor_and_the_alerts_are_taken_by_the_api_server() {
    let test = "with_the_operator_a_pod_monitor_and_the_alerts_are_taken";
    let Some(edge) = edge(test) else { return };
    let Some(crds) = testkit::crds::prometheus_operator(test) else {
        return;
    };
    edge.plane.install_crds(&crds);
    let dir = tempfile::tempdir().unwrap();
    let objects = with_monitoring(dir.path(), "prometheus-operator");
    let monitor = find(&objects, "PodMonitor").unwrap();
    let rule = find(&objects, "PrometheusRule").unwrap();
    assert_eq!(
        monitor["spec"]["podMetricsEndpoints"][0]["path"],
        pow_core::filter::metric::METRICS_PATH
    );
    let out = apply(edge.plane, &[monitor.clone(), rule.clone()], false);
    assert!(out.status.success(), "{}", testkit::process::text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.trim().is_empty(), "{stderr}");
    let rules: Value = serde_norway::from_str(monitoring::ALERTS).unwrap();
    assert_eq!(rule["spec"]["groups"], rules["groups"]);
}

#[test]
fn without_the_filter_the_rule_keeps_only_the_alerts_that_read_none_of_its_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (inputs, config) = files_with(dir.path(), |_, config| {
        assert!(
            config.get("pow").is_none(),
            "edge.example.json runs no filter"
        );
        config["monitoring"] = "prometheus-operator".into();
    });
    let objects = rendered(&inputs, &config).unwrap();
    assert!(find(&objects, "WasmPlugin").is_none());
    let names = |rule: &Value| -> Vec<String> {
        rule["spec"]["groups"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["alert"].as_str().unwrap().to_owned())
            .collect()
    };
    let without = names(find(&objects, "PrometheusRule").unwrap());
    assert_eq!(
        without,
        ["EdgeCertificateExpiringSoon", "EdgeGatewayNotProgrammed"]
    );
    // With the filter, every alert.
    let with = names(
        find(
            &with_monitoring(dir.path(), "prometheus-operator"),
            "PrometheusRule",
        )
        .unwrap(),
    );
    assert_eq!(with.len(), 10, "{with:?}");
    assert!(with.contains(&"PowFilterNotLoaded".to_owned()), "{with:?}");
}

/// The text an HTTP GET of `path` on a loopback port answers (HTTP/1.0: the server closes), or
/// `None` while nothing listens.
fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(text)
}

/// The Gateway alert's input, made by the real kube-state-metrics with the committed
/// custom-resource configuration from the Gateway the API server holds: one series per status
/// condition, labelled as the alert selects it, 1 when True and 0 when False.
#[test]
fn kube_state_metrics_exports_the_gateway_conditions_the_alert_reads() {
    let test = "kube_state_metrics_exports_the_gateway_conditions_the_alert_reads";
    let Some(edge) = edge(test) else { return };
    let Some(ksm) = testkit::upstream::program(test, "kube-state-metrics") else {
        return;
    };
    let (namespace, gateway) = (render_edge::render::NAMESPACE, render_edge::render::GATEWAY);
    // What istiod would write: accepted, but not programmed (no address yet).
    let status = json!({"status": {"conditions": [
        {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
         "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": 1},
        {"type": "Programmed", "status": "False", "reason": "AddressNotAssigned",
         "message": "no address yet", "lastTransitionTime": "2026-12-01T00:00:00Z",
         "observedGeneration": 1},
    ]}});
    edge.plane.kubectl_ok(
        &[
            "--namespace",
            namespace,
            "patch",
            "gateway",
            gateway,
            "--subresource=status",
            "--type=merge",
            "--patch",
            &status.to_string(),
        ],
        "",
    );
    let (port, telemetry) = (testkit::free_port(), testkit::free_port());
    let config = workspace().join("k8s/observability/gateway-state-metrics.yaml");
    let mut process = testkit::process::Running::spawn(
        Command::new(&ksm)
            .arg(format!(
                "--kubeconfig={}",
                edge.plane.kubeconfig().display()
            ))
            .args(["--host=127.0.0.1", "--telemetry-host=127.0.0.1"])
            .arg(format!("--port={port}"))
            .arg(format!("--telemetry-port={telemetry}"))
            .arg("--custom-resource-state-only")
            .arg(format!(
                "--custom-resource-state-config-file={}",
                config.display()
            )),
    );
    // KSM adds the custom resource's group, version and kind as labels: the alert, which
    // selects by namespace and type and groups by namespace and name, reads through them.
    let value_of = |text: &str, condition: &str| -> Option<String> {
        let labels = [
            format!("name=\"{gateway}\""),
            format!("namespace=\"{namespace}\""),
            format!("type=\"{condition}\""),
        ];
        text.lines()
            .filter_map(|l| l.strip_prefix("gatewayapi_gateway_status{"))
            .filter_map(|l| l.rsplit_once("} "))
            .find(|(found, _)| {
                labels
                    .iter()
                    .all(|label| found.split(',').any(|f| f == label))
            })
            .map(|(_, value)| value.to_owned())
    };
    let wanted = [("Programmed", "0"), ("Accepted", "1")];
    let mut last = String::new();
    for _ in 0..120 {
        assert!(process.running(), "kube-state-metrics stopped:\n{last}");
        if let Some(text) = http_get(port, "/metrics") {
            if wanted
                .iter()
                .all(|(condition, value)| value_of(&text, condition).as_deref() == Some(*value))
            {
                return;
            }
            last = text;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("kube-state-metrics never exported {wanted:?}:\n{last}");
}

/// promtool at its pin, or `None` after a skip (a failure under CI).
fn promtool(test: &str) -> Option<PathBuf> {
    testkit::upstream::program(test, "promtool")
}

#[test]
fn promtool_checks_the_rendered_alerts_and_their_unit_tests_pass() {
    let test = "promtool_checks_the_rendered_alerts_and_their_unit_tests_pass";
    let Some(promtool) = promtool(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The groups as the PrometheusRule carries them, back as a rule file.
    let objects = with_monitoring(dir.path(), "prometheus-operator");
    let rule = find(&objects, "PrometheusRule").unwrap();
    let file = dir.path().join("rendered.rules.yaml");
    std::fs::write(&file, json!({"groups": rule["spec"]["groups"]}).to_string()).unwrap();
    let out = Command::new(&promtool)
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", testkit::process::text(&out));
    let observability = workspace().join("k8s/observability");
    let out = Command::new(&promtool)
        .args(["test", "rules", "pow-alerts.test.yaml"])
        .current_dir(&observability)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", testkit::process::text(&out));
    // Every alert has a unit test that fires it, and its runbook is a section of the docs.
    let tests = std::fs::read_to_string(observability.join("pow-alerts.test.yaml")).unwrap();
    let docs = std::fs::read_to_string(workspace().join("docs/operations.md")).unwrap();
    for alert in rule["spec"]["groups"][0]["rules"].as_array().unwrap() {
        let name = alert["alert"].as_str().unwrap();
        let fired = format!("alertname: {name}\n        exp_alerts:\n          - exp_labels");
        assert!(tests.contains(&fired), "no unit test fires {name}");
        assert!(
            tests.contains(&format!("alertname: {name}, exp_alerts: []")),
            "no unit test keeps {name} silent"
        );
        let runbook = alert["annotations"]["runbook"].as_str().unwrap();
        assert_eq!(
            runbook,
            format!("docs/operations.md#{}", name.to_lowercase())
        );
        assert!(
            docs.contains(&format!("#### {name}\n")),
            "no runbook for {name}"
        );
    }
}
