//! lists-refresh against the real API server (`testkit::control_plane`), as its CronJob runs it:
//! the edge render-edge renders with the filter on is applied (after the platform's CRDs) as
//! `make apply-edge` applies it, and the job runs with its ServiceAccount's credentials as its
//! pod gets them (a token the API server issued, the cluster's CA), under the Role, RoleBinding
//! and admission policy rendered for it. What the Role grants works; everything else is refused
//! by the server, and the refusal is the job's error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::{Value, json};
use testkit::control_plane::{ControlPlane, ServiceAccount};
use testkit::workspace;

use common::{NOW, data_keys, failure_log, generators, stderr};

const LATER: &str = "2026-11-29T18:17:00Z";
/// The namespace, objects and account of the rendered edge (render-edge's names).
const NAMESPACE: &str = "edge";
const ACCOUNT: &str = "lists-refresh";
const EDGE_MANAGER: &str = "edgepop-edge";

/// The rendered edge, applied on this test binary's control plane, and the job's credentials.
struct Edge {
    plane: &'static ControlPlane,
    objects: Vec<u8>,
    job: ServiceAccount,
    shared: PathBuf,
}

fn edge(test: &str) -> Option<&'static Edge> {
    static EDGE: OnceLock<Edge> = OnceLock::new();
    let shared = workspace::shared_dir(test)?;
    let crds = testkit::crds::platform(test)?;
    let plane = ControlPlane::shared(test)?;
    Some(EDGE.get_or_init(|| {
        plane.install_crds(&crds);
        let config = workspace::root().join("config");
        let out = Command::new(workspace::bin("render-edge"))
            .arg("--inputs")
            .arg(config.join("platform-inputs.example.json"))
            .arg("--config")
            .arg(config.join("edge-pow.example.json"))
            .output()
            .unwrap();
        testkit::process::success_stdout(&out);
        apply(plane, &out.stdout);
        Edge {
            plane,
            objects: out.stdout,
            job: plane.service_account(NAMESPACE, ACCOUNT),
            shared,
        }
    }))
}

/// The edge objects, server-side applied by the edge layer's field manager.
fn apply(plane: &ControlPlane, objects: &[u8]) {
    let manager = format!("--field-manager={EDGE_MANAGER}");
    let out = testkit::process::run_with_stdin(
        plane
            .kubectl()
            .args(["apply", "--server-side", &manager, "--filename=-"]),
        objects,
    );
    testkit::process::success_stdout(&out);
}

impl Edge {
    fn apply(&self) {
        apply(self.plane, &self.objects);
    }

    fn get(&self, what: &str) -> Value {
        let out = self.plane.kubectl_ok(
            &[
                "get",
                what,
                "--namespace",
                NAMESPACE,
                "--output=json",
                "--show-managed-fields",
            ],
            "",
        );
        serde_json::from_str(&out).unwrap()
    }

    /// The tor, hosting and gptbot lists from the shared captures (files: no network).
    fn sources(&self, dir: &std::path::Path) -> PathBuf {
        let fixtures = self.shared.join("fixtures");
        let record = json!({
            "kind": "ListSources", "version": 3, "max_shrink_percent": 50, "timeout_seconds": 30,
            "lists": [
                {"name": "tor", "generator": "tor",
                 "sources": [fixtures.join("tor/torbulkexitlist_2023-10-14.txt")]},
                {"name": "hosting", "generator": "asn", "asns": [13335],
                 "sources": [fixtures.join("asn/iptoasn/ip2asn-v4_slice-google-cloudflare_2019-02-19.tsv")]},
                {"name": "gptbot", "generator": "crawlers", "tokens": ["GPTBot"],
                 "sources": [fixtures.join("bots/crawler-ip-ranges/openai/gptbot.json")]},
            ],
        });
        let file = dir.join("sources.json");
        std::fs::write(&file, record.to_string()).unwrap();
        file
    }

    /// lists-refresh as the CronJob runs it, with `account`'s credentials.
    fn refresh(&self, account: &ServiceAccount, now: &str, extra: &[&str]) -> Output {
        let dir = tempfile::tempdir().unwrap();
        Command::new(env!("CARGO_BIN_EXE_lists-refresh"))
            .arg(format!("--namespace={NAMESPACE}"))
            .arg(format!("--sources={}", self.sources(dir.path()).display()))
            .arg(format!("--api-server={}", self.plane.server()))
            .arg(format!("--serviceaccount-dir={}", account.dir().display()))
            .arg(format!("--generators-dir={}", generators().display()))
            .arg(format!("--now={now}"))
            .args(extra)
            .env_remove("EDGEPOP_LOG")
            .output()
            .unwrap()
    }
}

/// The managers of `object` and the fields each owns.
fn managers(object: &Value) -> Vec<(String, Value)> {
    object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap().to_owned(),
                m["fieldsV1"].clone(),
            )
        })
        .collect()
}

fn owned_by<'a>(object: &'a [(String, Value)], manager: &str) -> &'a Value {
    &object
        .iter()
        .find(|(m, _)| m == manager)
        .unwrap_or_else(|| panic!("{manager} owns nothing: {object:?}"))
        .1
}

/// What the job published, as the API server stores it and whose it is; the two objects'
/// resourceVersions, to see whether a later run wrote them again.
fn check(edge: &Edge) -> (Value, Value) {
    let cm = edge.get("configmap/policy-lists");
    assert_eq!(
        data_keys(&cm),
        [
            "generated_at",
            "gptbot.txt",
            "hosting.txt",
            "tor.txt",
            "version"
        ]
    );
    let data = &cm["data"];
    assert_eq!(data["version"], NOW);
    assert_eq!(data["tor.txt"].as_str().unwrap().lines().count(), 1305);
    assert!(
        data["hosting.txt"]
            .as_str()
            .unwrap()
            .lines()
            .any(|l| l == "1.1.1.0/24")
    );
    // The data is the job's, the labels and annotations the edge layer's.
    let owners = managers(&cm);
    let lists = owned_by(&owners, "edgepop-lists");
    assert!(lists["f:data"]["f:tor.txt"].is_object(), "{lists}");
    assert!(lists.get("f:metadata").is_none(), "{lists}");
    assert!(owned_by(&owners, EDGE_MANAGER)["f:metadata"]["f:labels"].is_object());
    assert_eq!(
        cm["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "render-edge"
    );

    let plugin = edge.get("wasmplugin/pow-filter");
    let published = &plugin["spec"]["pluginConfig"]["lists"];
    assert_eq!(published["version"], NOW);
    // Packed, the same prefixes as the ConfigMap's text (which fits, so stays text).
    assert!(cm.get("binaryData").is_none(), "{cm}");
    for name in ["tor", "hosting", "gptbot"] {
        let packed = published["packed"][name].as_str().unwrap();
        let unpacked = pow_core::packed::decode(packed, pow_core::packed::MAX_PREFIXES);
        let text = data[&format!("{name}.txt")].as_str().unwrap();
        let mut nets = pow_core::lists::parse_set(text).unwrap();
        nets.sort_by_key(|n| match *n {
            pow_core::lists::Net::V4(a, l) => (0, u128::from(a), l),
            pow_core::lists::Net::V6(a, l) => (1, a, l),
        });
        assert_eq!(unpacked, Ok(nets), "{name}");
    }
    assert_eq!(published["tokens"], json!({"gptbot": ["GPTBot"]}));
    let owners = managers(&plugin);
    assert_eq!(
        owned_by(&owners, "edgepop-lists"),
        &json!({"f:spec": {"f:pluginConfig": {"f:lists": {
            ".": {}, "f:generated_at": {}, "f:version": {},
            "f:packed": {".": {}, "f:gptbot": {}, "f:hosting": {}, "f:tor": {}},
            "f:tokens": {".": {}, "f:gptbot": {}},
        }}}})
    );
    // The rest of the filter's settings stay the edge layer's.
    assert_eq!(plugin["spec"]["pluginConfig"]["mode"], "listed");
    (
        cm["metadata"]["resourceVersion"].clone(),
        plugin["metadata"]["resourceVersion"].clone(),
    )
}

#[test]
fn the_job_publishes_its_lists_and_a_reapplied_edge_keeps_them() {
    let Some(edge) = edge("the_job_publishes_its_lists") else {
        return;
    };
    let out = edge.refresh(&edge.job, NOW, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary,
        json!({"version": NOW, "changed": true, "regenerated": ["tor", "hosting", "gptbot"], "kept": []})
    );

    check(edge);

    // `make apply-edge` again: the edge renders the ConfigMap without data and the plugin
    // without lists, and server-side apply leaves what the job owns.
    edge.apply();
    let versions = check(edge);

    // Nothing changed since: the next run writes nothing.
    let out = edge.refresh(&edge.job, LATER, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("lists unchanged since version {NOW}")),
        "{}",
        stderr(&out)
    );
    assert_eq!(check(edge), versions, "written again");
}

#[test]
fn what_the_role_does_not_grant_is_refused_by_the_api_server() {
    let Some(edge) = edge("what_the_role_does_not_grant_is_refused") else {
        return;
    };
    let sources_before = edge.get("configmap/lists-sources")["metadata"]["resourceVersion"].clone();
    // The job pointed at objects its Role does not name: the server's refusal is its error, and
    // nothing is written.
    for (flag, refused) in [
        (
            "--configmap=lists-sources",
            r#"cannot get resource "configmaps" in API group "" in the namespace "edge""#,
        ),
        (
            "--wasmplugin=other-filter",
            r#"cannot get resource "wasmplugins" in API group "extensions.istio.io""#,
        ),
    ] {
        let out = edge.refresh(&edge.job, NOW, &[flag]);
        let log = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{flag}: {log}");
        assert!(log.contains("HTTP 403"), "{flag}: {log}");
        assert!(log.contains(refused), "{flag}: {log}");
        assert!(
            log.contains(&format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}")),
            "{log}"
        );
        assert!(!log.contains("applied version"), "{flag}: {log}");
    }
    assert_eq!(
        edge.get("configmap/lists-sources")["metadata"]["resourceVersion"],
        sources_before
    );

    // Another account of the namespace is not bound to the Role at all.
    let other = edge.plane.service_account(NAMESPACE, "default");
    let log = failure_log(&edge.refresh(&other, NOW, &[]));
    assert!(
        log.contains(
            r#"User "system:serviceaccount:edge:default" cannot get resource "configmaps""#
        ),
        "{log}"
    );

    // Beyond reading and patching its two objects, the job may do nothing (asked as server-side
    // dry runs: authorisation comes first, and nothing is stored either way).
    for args in [
        &["get", "secrets"][..],
        &["get", "configmap", "lists-sources"],
        &["delete", "wasmplugin", "pow-filter", "--dry-run=server"],
        &["delete", "configmap", "policy-lists", "--dry-run=server"],
        &["create", "configmap", "extra", "--dry-run=server"],
        &[
            "create",
            "job",
            "again",
            "--image=busybox",
            "--dry-run=server",
        ],
        &[
            "patch",
            "cronjob",
            "lists-refresh",
            "--type=merge",
            "--patch={\"spec\":{\"suspend\":true}}",
            "--dry-run=server",
        ],
    ] {
        let out = testkit::process::run_with_stdin(edge.job.kubectl().args(args), b"");
        let said = stderr(&out);
        assert!(!out.status.success(), "{args:?} was allowed");
        assert!(
            said.contains(r#"User "system:serviceaccount:edge:lists-refresh" cannot"#),
            "{args:?}: {said}"
        );
    }
}
