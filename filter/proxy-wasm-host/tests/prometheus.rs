//! The real module's metrics as an Istio gateway serves them (`/stats/prometheus`, reproduced by
//! `proxy_wasm_host::envoy_stats` from Envoy's and Istio's sources) with the `extraStatTags`
//! the edge renders (`pow_core::filter::metric::TAGS`): every labelled family comes out as one
//! metric with `rule`, `action`, `list` and `reason` labels, none as a name per value; and each
//! decision the filter answers itself is one JSON log line naming the network, not the address.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use proxy_wasm_host::envoy_stats::IstioStats;

use crate::common::*;

/// The families the module defines, as `# TYPE` lines name them.
const FAMILIES: &[&str] = &[
    "pow_challenges_issued",
    "pow_challenges_solved",
    "pow_decisions",
    "pow_verify_failed",
    "pow_list_matches",
    "pow_list_prefixes",
    "pow_solve_seconds",
];

#[test]
fn the_labelled_metrics_reach_prometheus_as_one_family_each() {
    let Some(mut host) = start(
        "the_labelled_metrics_reach_prometheus_as_one_family_each",
        "all",
    ) else {
        return;
    };
    host.request(browser("/", "185.220.101.7:40000")).unwrap();
    let (_, url) = solved(&mut host, "/", "198.51.100.20:40000");
    host.request(browser(&url, "198.51.100.20:40000")).unwrap();
    // Replayed: refused, counted by its reason.
    host.request(browser(&url, "198.51.100.20:40000")).unwrap();

    let stats = IstioStats::new(&pow_core::filter::metric::TAGS).unwrap();
    let text = host.prometheus(&stats);
    for line in [
        "pow_decisions{rule=\"list.tor\",action=\"challenged\"} 1",
        "pow_decisions{rule=\"default\",action=\"challenged\"} 1",
        "pow_list_matches{list=\"tor\"} 1",
        "pow_list_matches{list=\"hosting\"} 0",
        "pow_verify_failed{reason=\"replay\"} 1",
        "pow_verify_failed{reason=\"mac\"} 0",
        "pow_list_prefixes{list=\"tor\"} 2",
        "pow_challenges_solved{} 1",
        "pow_solve_seconds_count{} 1",
        "pow_solve_seconds_bucket{le=\"0.5\"} 1",
    ] {
        assert!(text.contains(line), "{line} in:\n{text}");
    }
    let types: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    for family in FAMILIES {
        assert!(types.contains(family), "{family} in {types:?}");
    }
    // Envoy's own, which the alerts read beside the filter's.
    assert!(types.contains(&"envoy_server_live"), "{types:?}");
    for name in types.iter().filter(|n| **n != "envoy_server_live") {
        assert!(
            name.starts_with("pow_") && !name.contains("___"),
            "{name}: a tag the gateway does not extract stayed in the name"
        );
    }
}

/// The log lines written so far that are JSON: the decisions' lines.
fn json_lines(host: &proxy_wasm_host::Host) -> Vec<serde_json::Value> {
    host.logs()
        .iter()
        .filter_map(|(_, line)| serde_json::from_str(line).ok())
        .collect()
}

#[test]
fn each_decision_the_filter_answers_is_one_json_line_without_the_address() {
    let Some(mut host) = start(
        "each_decision_the_filter_answers_is_one_json_line_without_the_address",
        "all",
    ) else {
        return;
    };
    host.clear_logs();
    host.request(browser("/", "185.220.101.7:40000")).unwrap();
    let lines = json_lines(&host);
    assert_eq!(lines.len(), 1, "{:?}", host.logs());
    let line = &lines[0];
    assert_eq!(line["event"], "challenge");
    assert_eq!(line["rule"], "list.tor");
    assert_eq!(line["action"], "challenged");
    assert_eq!(line["lists"], serde_json::json!(["tor"]));
    assert_eq!(line["host"], "edge.example.org");
    assert_eq!(line["network"], "185.220.101.0/24");
    assert_eq!(line["difficulty"], 10);
    let raw = host
        .logs()
        .iter()
        .map(|(_, l)| l.clone())
        .collect::<String>();
    assert!(!raw.contains("185.220.101.7"), "{raw}");

    // Within the same second, the next lines are counted, not written; the one after says so.
    for _ in 0..3 {
        host.request(browser("/", "185.220.101.7:40000")).unwrap();
    }
    host.set_time_nanos((T0 + 2) * 1_000_000_000);
    let (_, url) = solved(&mut host, "/", "198.51.100.20:40000");
    let forged = url.replace("&n=", "&n=1");
    host.request(browser(&forged, "198.51.100.20:40000"))
        .unwrap();
    let decisions = json_lines(&host);
    assert_eq!(decisions.len(), 2, "{:?}", host.logs());
    assert_eq!(decisions[1]["event"], "challenge", "{}", decisions[1]);
    assert_eq!(decisions[1]["suppressed"], 3, "{}", decisions[1]);
}
