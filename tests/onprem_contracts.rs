//! What the onprem profile renders, read by the real upstream code that will read it: external-dns
//! v0.21.0's own flag parser, domain filter and OVH provider (`external-dns-filter`, built by
//! pipelines/upstream.sh from the Go module proxy) on the arguments its chart makes of the
//! rendered values; the CrowdSec bouncer plugin (`crowdsec-bouncer-once`, likewise) built from the
//! rendered Middleware as Traefik builds it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::onprem_profile::{render_example_with, sops_file};

const TEST: &str = "onprem_contracts";

/// The rendered values of `component` over the committed file (only top-level keys are merged:
/// the two files set different ones).
fn merged_values(dir: &Path, component: &str) -> Value {
    let committed = testkit::workspace::root().join(format!("values/{component}.yaml"));
    let mut values: Value =
        serde_norway::from_str(&fs::read_to_string(committed).unwrap()).unwrap();
    let rendered: Value = serde_json::from_str(
        &fs::read_to_string(dir.join(format!("rendered/{component}.json"))).unwrap(),
    )
    .unwrap();
    for (key, value) in rendered.as_object().unwrap() {
        values[key] = value.clone();
    }
    values
}

/// The arguments external-dns's chart gives its container from `values`, for the keys the
/// profile sets (kubernetes-sigs/external-dns, external-dns-helm-chart-1.21.1,
/// charts/external-dns/templates/deployment.yaml, lines 95-163: one `--source` per source, the
/// policy, the registry (`txt` by default), the owner, one `--domain-filter` per entry, the
/// provider, then `extraArgs` as they are).
fn chart_args(values: &Value) -> Vec<String> {
    let list = |key: &str| -> Vec<String> {
        values[key]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|v| v.as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut args: Vec<String> = list("sources")
        .iter()
        .map(|s| format!("--source={s}"))
        .collect();
    args.push(format!("--policy={}", values["policy"].as_str().unwrap()));
    args.push(format!(
        "--registry={}",
        values["registry"].as_str().unwrap_or("txt")
    ));
    args.push(format!(
        "--txt-owner-id={}",
        values["txtOwnerId"].as_str().unwrap()
    ));
    args.extend(
        list("domainFilters")
            .iter()
            .map(|d| format!("--domain-filter={d}")),
    );
    args.push(format!(
        "--provider={}",
        values["provider"]["name"].as_str().unwrap()
    ));
    args.extend(list("extraArgs"));
    args
}

/// What external-dns answers to `questions` (`zone NAME`, `name NAME`) with `args`.
fn external_dns_answers(filter: &Path, args: &[String], questions: &[&str]) -> Vec<String> {
    let out = testkit::process::run_with_stdin(
        Command::new(filter).args(args),
        questions.join("\n").as_bytes(),
    );
    testkit::process::success_stdout(&out)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The seed's layout: the platform's domain `k8s.exemple.fr` in the company's OVH zone
/// `exemple.fr`. external-dns must keep that zone, write the names under the domain (and their
/// TXT ownership records), and nothing else of the zone; a domain delegated as its own zone keeps
/// working too.
#[test]
fn external_dns_keeps_the_ovh_zone_and_writes_only_under_the_domain() {
    let Some(filter) = testkit::upstream::program(TEST, "external-dns-filter") else {
        return;
    };
    let questions = [
        "zone exemple.fr",
        "name whoami.demo.k8s.exemple.fr",
        "name a-whoami.demo.k8s.exemple.fr",
        "name k8s.exemple.fr",
        "name www.exemple.fr",
        "name xk8s.exemple.fr",
        "name k8s.exemple.fr.example.net",
    ];
    let dir = tempfile::tempdir().unwrap();
    render_example_with(dir.path(), &sops_file(), |_| {});
    let args = chart_args(&merged_values(dir.path(), "external-dns"));
    assert_eq!(
        external_dns_answers(&filter, &args, &questions),
        [
            "zone exemple.fr kept",
            "name whoami.demo.k8s.exemple.fr written",
            "name a-whoami.demo.k8s.exemple.fr written",
            "name k8s.exemple.fr written",
            "name www.exemple.fr refused",
            "name xk8s.exemple.fr refused",
            "name k8s.exemple.fr.example.net refused",
        ],
        "{args:?}"
    );

    let delegated = tempfile::tempdir().unwrap();
    render_example_with(delegated.path(), &sops_file(), |config| {
        config["dns"]["zone"] = config["dns"]["domain"].clone();
    });
    let args = chart_args(&merged_values(delegated.path(), "external-dns"));
    assert_eq!(
        external_dns_answers(
            &filter,
            &args,
            &[
                "zone k8s.exemple.fr",
                "name whoami.demo.k8s.exemple.fr",
                "name www.exemple.fr"
            ]
        ),
        [
            "zone k8s.exemple.fr kept",
            "name whoami.demo.k8s.exemple.fr written",
            "name www.exemple.fr refused",
        ],
        "{args:?}"
    );
}

/// external-dns-filter is built at the chart's own appVersion: one declaration of the app
/// (EXTERNAL_DNS_APP_VERSION), which the chart at its pin (EXTERNAL_DNS_VERSION) agrees with.
#[test]
fn the_external_dns_the_tests_build_is_the_one_the_pinned_chart_runs() {
    let Some(shared) = testkit::workspace::shared_dir(TEST) else {
        return;
    };
    let chart = shared.join(format!(
        "charts/external-dns/{}/Chart.yaml",
        testkit::pin("EXTERNAL_DNS_VERSION")
    ));
    let chart: Value = serde_norway::from_str(&fs::read_to_string(chart).unwrap()).unwrap();
    assert_eq!(
        format!("v{}", chart["appVersion"].as_str().unwrap()),
        testkit::pin("EXTERNAL_DNS_APP_VERSION")
    );
}

/// The bouncer's Middleware as the profile renders it (`spec.plugin.crowdsec-bouncer`), written
/// to `dir/plugin.json`.
fn bouncer_plugin_config(dir: &Path) -> std::path::PathBuf {
    let rendered: Value = serde_json::from_str(
        &fs::read_to_string(dir.join("rendered/crowdsec-bouncer.json")).unwrap(),
    )
    .unwrap();
    let middleware = &rendered["items"][0];
    assert_eq!(middleware["kind"], "Middleware");
    let path = dir.join("plugin.json");
    fs::write(
        &path,
        middleware["spec"]["plugin"]["crowdsec-bouncer"].to_string(),
    )
    .unwrap();
    path
}

/// A LAPI outage (its address answers nothing) must not turn the bouncer into a 403 for every
/// visitor: the plugin, built from the rendered Middleware by its own code, lets the request
/// through with the decisions it has (it fails open, as docs/onprem.md says).
#[test]
fn a_lapi_outage_lets_visitors_through_the_bouncer() {
    let Some(plugin) = testkit::upstream::program(TEST, "crowdsec-bouncer-once") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    render_example_with(dir.path(), &sops_file(), |_| {});
    let config = bouncer_plugin_config(dir.path());
    let key = dir.path().join("api-key");
    fs::write(&key, "test-only-bouncer-key\n").unwrap();
    // A loopback port nobody listens on: every pull of decisions is refused.
    let lapi = format!("127.0.0.1:{}", testkit::free_port());
    let out = Command::new(plugin)
        .arg(&config)
        .arg(&key)
        .arg(&lapi)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("connection refused"), "no outage: {stderr}");
    assert_eq!(
        testkit::process::success_stdout(&out).trim(),
        "200",
        "{}\n{stderr}",
        fs::read_to_string(&config).unwrap()
    );
}
