//! render-edge as a user runs it: the binary, real files, exit codes, stdout and stderr.
//!
//! Golden files live in tests/fixtures/; regenerate them with `UPDATE_GOLDEN=1 cargo test -p
//! render-edge` after an intended change, and review the diff.

// Integration-test helpers live outside #[test] functions: clippy.toml's in-tests allowance
// does not reach them, and a failed unwrap here is a failed test, as intended.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::json;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example(name: &str) -> PathBuf {
    workspace().join("config").join(name)
}

/// `render-edge -o json`, which must succeed: its List.
fn render_list(inputs: &Path, config: &Path) -> serde_json::Value {
    let out = render(inputs, config, &["-o", "json"]);
    serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap()
}

fn render(inputs: &Path, config: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_render-edge"))
        .arg("--inputs")
        .arg(inputs)
        .arg("--config")
        .arg(config)
        .args(extra)
        .env_remove("EDGEPOP_LOG")
        .env_remove("KUBECONFIG")
        .output()
        .unwrap()
}

fn check_golden(name: &str, actual: &[u8]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    if expected != actual {
        panic!(
            "{} differs from the rendered output:\n--- expected\n{}\n--- actual\n{}",
            path.display(),
            String::from_utf8_lossy(&expected),
            String::from_utf8_lossy(actual)
        );
    }
}

#[test]
fn the_examples_render_to_their_golden_files_in_yaml_and_json() {
    let inputs = example("platform-inputs.example.json");
    for (config, golden) in [
        ("edge.example.json", "edge"),
        ("edge-pow.example.json", "edge-pow"),
    ] {
        for (args, ext) in [(&[][..], "yaml"), (&["-o", "json"][..], "json")] {
            let out = render(&inputs, &example(config), args);
            assert!(
                out.status.success(),
                "{config}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.stderr.is_empty(),
                "{config}: stderr is for problems only"
            );
            check_golden(&format!("{golden}.{ext}"), &out.stdout);
        }
    }
}

#[test]
fn rendering_twice_gives_identical_bytes() {
    let inputs = example("platform-inputs.example.json");
    let config = example("edge-pow.example.json");
    let first = render(&inputs, &config, &[]);
    let second = render(&inputs, &config, &[]);
    assert!(first.status.success());
    assert_eq!(first.stdout, second.stdout);
}

#[test]
fn the_json_output_is_a_list_whose_items_all_carry_the_prune_label() {
    let out = render(
        &example("platform-inputs.example.json"),
        &example("edge-pow.example.json"),
        &["-o", "json"],
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().unwrap();
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    for kind in [
        "Namespace",
        "GatewayClass",
        "ClusterIssuer",
        "Gateway",
        "HTTPRoute",
        "Deployment",
        "Service",
        "WasmPlugin",
        "ConfigMap",
        "CronJob",
        "ServiceAccount",
        "Role",
        "RoleBinding",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    for item in items {
        let labels = &item["metadata"]["labels"];
        assert_eq!(
            labels["app.kubernetes.io/managed-by"], "render-edge",
            "{item}"
        );
        assert_eq!(labels["app.kubernetes.io/part-of"], "edgepop", "{item}");
    }
    // No secret material is ever rendered: no Secret object, no key in the WasmPlugin.
    assert!(!kinds.contains(&"Secret"));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("demo_secret"));
}

/// A scratch directory holding the example inputs and a config written by the test.
struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new() -> Case {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            example("platform-inputs.example.json"),
            dir.path().join("inputs.json"),
        )
        .unwrap();
        // The record `make publish-images` writes, beside the config that names it.
        std::fs::copy(
            example("published-images.example.json"),
            dir.path().join("published.json"),
        )
        .unwrap();
        Case { dir }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn inputs(&self) -> PathBuf {
        self.dir.path().join("inputs.json")
    }

    /// The example inputs with these `edge_hostnames`, as `names.json`.
    fn inputs_with(&self, hostnames: serde_json::Value) -> PathBuf {
        let text = std::fs::read_to_string(self.inputs()).unwrap();
        let mut inputs: serde_json::Value = serde_json::from_str(&text).unwrap();
        inputs["edge_hostnames"] = hostnames;
        self.write("names.json", &inputs.to_string())
    }

    /// Renders an empty config with inputs of these `edge_hostnames` and expects a refusal.
    fn refuses_names(&self, hostnames: serde_json::Value, needles: &[&str]) {
        let inputs = self.inputs_with(hostnames);
        let config = self.write("edge.json", "{}");
        self.refuses_files(&inputs, &config, needles);
    }

    /// Renders `config` (JSON text) and expects a refusal whose message holds every `needle`.
    fn refuses(&self, config: &str, needles: &[&str]) {
        let path = self.write("edge.json", config);
        self.refuses_files(&self.inputs(), &path, needles);
    }

    fn refuses_files(&self, inputs: &Path, config: &Path, needles: &[&str]) {
        let out = render(inputs, config, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "exit code; stderr: {stderr}");
        assert!(out.stdout.is_empty(), "stdout must stay empty on error");
        assert_eq!(stderr.lines().count(), 1, "one clear message: {stderr}");
        assert!(stderr.starts_with("render-edge: error: "), "{stderr}");
        testkit::process::assert_says_all(&stderr, needles);
    }
}

const POW_OK: &str = r#""pow": {"secret_name": "pow-hmac"},
    "images": {"registry": "rg.fr-par.scw.cloud/edgepop", "published": "published.json"}"#;
const IMAGES: &str =
    r#""images": {"registry": "rg.fr-par.scw.cloud/edgepop", "published": "published.json"}"#;
/// The manifest digests of config/published-images.example.json.
const FILTER_DIGEST: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const LISTS_DIGEST: &str = "2222222222222222222222222222222222222222222222222222222222222222";

/// An edge config of `rest`, the fields after the first (`, "pow_enabled": true, ...`).
fn edge_config(rest: &str) -> String {
    format!("{{{}}}", rest.strip_prefix(", ").unwrap_or(rest))
}

#[test]
fn a_missing_config_file_is_named() {
    let case = Case::new();
    let missing = case.dir.path().join("nope.json");
    case.refuses_files(&case.inputs(), &missing, &["nope.json", "cannot read"]);
}

#[test]
fn an_unreadable_inputs_file_is_named() {
    let case = Case::new();
    let config = case.write("edge.json", &edge_config(""));
    // A directory cannot be read as a file, even by root (file modes do not stop root).
    case.refuses_files(case.dir.path(), &config, &["cannot read"]);
}

#[test]
fn invalid_json_is_refused() {
    Case::new().refuses(
        r#"{"origin": {"replicas": 2},"#,
        &["edge.json", "invalid JSON"],
    );
}

#[test]
fn an_unknown_key_is_refused_with_its_path() {
    Case::new().refuses(
        &edge_config(r#", "acme": {"sever": "staging"}"#),
        &["edge.json", "field `acme.sever`", "unknown field"],
    );
    Case::new().refuses(
        &edge_config(r#", "pow_enable": true"#),
        &["unknown field pow_enable"],
    );
}

#[test]
fn an_unknown_monitoring_mode_is_refused_with_the_two_there_are() {
    Case::new().refuses(
        &edge_config(r#", "monitoring": "servicemonitor""#),
        &[
            "edge.json",
            "field `monitoring`",
            "servicemonitor",
            "annotations",
            "prometheus-operator",
        ],
    );
}

#[test]
fn a_hostname_that_is_not_a_dns_name_is_refused_saying_where_it_is_declared() {
    let case = Case::new();
    case.refuses_names(
        json!(["www..example.com"]),
        &[
            "names.json",
            "field `edge_hostnames[0]`",
            "empty label",
            "the infra config's edge_hostnames",
            "rerun `make apply-infra`",
        ],
    );
    case.refuses_names(
        json!(["www.example.com", "shop_1.example.com"]),
        &["field `edge_hostnames[1]`", "shop_1"],
    );
    case.refuses_names(json!(["*.example.com"]), &["edge_hostnames[0]", "wildcard"]);
    case.refuses_names(json!([]), &["field `edge_hostnames`", "nothing to serve"]);
}

#[test]
fn two_listeners_with_the_same_hostname_are_refused() {
    Case::new().refuses_names(
        json!(["www.example.com", "www.example.com"]),
        &["field `edge_hostnames[1]`", "listed twice"],
    );
}

#[test]
fn more_hostnames_than_an_httproute_holds_are_refused() {
    let hosts = |n: usize| {
        (1..=n)
            .map(|i| format!("h{i}.example.com"))
            .collect::<Vec<_>>()
    };
    let case = Case::new();
    let config = case.write("edge.json", "{}");
    let list = render_list(&case.inputs_with(json!(hosts(16))), &config);
    let redirect = testkit::json::element(&list["items"], "/metadata/name", "http-to-https");
    assert_eq!(redirect["spec"]["hostnames"].as_array().unwrap().len(), 16);
    case.refuses_names(
        json!(hosts(17)),
        &["field `edge_hostnames`", "17 hostnames, at most 16"],
    );
}

#[test]
fn a_hostname_too_long_for_the_names_made_from_it_is_refused() {
    // 246 characters: `origin-<host>` is 253, the longest name Kubernetes takes.
    let host = |last: usize| {
        format!(
            "{}.example.com",
            [63, 63, 63, last].map(|n| "a".repeat(n)).join(".")
        )
    };
    let longest = host(42);
    assert_eq!(longest.len(), 246);
    let case = Case::new();
    let config = case.write("edge.json", "{}");
    render_list(&case.inputs_with(json!([longest])), &config);
    case.refuses_names(
        json!(["www.example.com", host(43)]),
        &[
            "field `edge_hostnames[1]`",
            "too long: its HTTPRoute would be named with 254 characters",
        ],
    );
}

#[test]
fn more_replicas_than_a_deployment_takes_are_refused() {
    Case::new().refuses(
        &edge_config(r#", "origin": {"replicas": 2147483648}"#),
        &["field `origin.replicas`", "at most 2147483647"],
    );
}

#[test]
fn a_hostname_outside_the_dns_zone_is_refused() {
    Case::new().refuses_names(
        json!(["www.example.org"]),
        &[
            "field `edge_hostnames[0]`",
            "outside the DNS zone `example.com`",
        ],
    );
    // A suffix that is not a whole label is outside the zone too.
    Case::new().refuses_names(json!(["www.badexample.com"]), &["outside the DNS zone"]);
}

/// The hostnames of a render, where each is used: the HTTP redirect route's, the HTTPS
/// listeners' that carry a certificate (cert-manager's gateway-shim makes one Certificate per
/// such listener, from its hostname), and the origin routes'.
fn served(list: &serde_json::Value) -> [Vec<String>; 3] {
    let items = list["items"].as_array().unwrap();
    let of = |kind: &'static str| items.iter().filter(move |i| i["kind"] == kind);
    let hosts = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap().to_owned())
            .collect()
    };
    let (redirect, origin): (Vec<_>, Vec<_>) =
        of("HTTPRoute").partition(|r| r["metadata"]["name"] == "http-to-https");
    let certified = of("Gateway")
        .flat_map(|g| g["spec"]["listeners"].as_array().unwrap())
        .filter(|l| l["tls"]["certificateRefs"].is_array())
        .map(|l| l["hostname"].as_str().unwrap().to_owned())
        .collect();
    [
        redirect
            .iter()
            .flat_map(|r| hosts(&r["spec"]["hostnames"]))
            .collect(),
        certified,
        origin
            .iter()
            .flat_map(|r| hosts(&r["spec"]["hostnames"]))
            .collect(),
    ]
}

#[test]
fn the_names_served_are_the_platform_inputs_edge_hostnames() {
    let case = Case::new();
    let config = case.write("edge.json", "{}");
    let names = ["example.com", "shop.eu.example.com"];
    let list = render_list(&case.inputs_with(json!(names)), &config);
    for (used, hosts) in ["redirected", "certified", "routed"]
        .iter()
        .zip(served(&list))
    {
        assert_eq!(hosts, names, "{used}");
    }
}

#[test]
fn an_edge_config_that_still_lists_hostnames_is_refused_unless_they_are_the_same() {
    let case = Case::new();
    let served = r#"["www.example.com", "edge.example.com"]"#;
    // The same names, in any order: rendered as without the field, with a warning.
    let same = case.write("same.json", &format!(r#"{{"hostnames": {served}}}"#));
    let without = case.write("without.json", "{}");
    let out = render(&case.inputs(), &same, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(out.stdout, render(&case.inputs(), &without, &[]).stdout);
    testkit::process::assert_says_all(
        &stderr,
        &[
            "same.json: field `hostnames` is ignored",
            "the infra config's edge_hostnames",
            "inputs.json",
            "remove it",
        ],
    );
    // A name that has no DNS record, and one left out: refused, naming each.
    case.refuses(
        r#"{"hostnames": ["www.example.com", "shop.example.com"]}"#,
        &[
            "edge.json: field `hostnames`",
            "the infra config's edge_hostnames, read from",
            "inputs.json",
            "`shop.example.com` not in edge_hostnames",
            "rerun `make apply-infra`",
            "`edge.example.com` served but not listed here",
        ],
    );
    case.refuses(
        r#"{"hostnames": []}"#,
        &["field `hostnames`", "served but not listed"],
    );
}

#[test]
fn the_filter_enabled_without_a_published_record_is_refused() {
    Case::new().refuses(
        &edge_config(r#", "pow_enabled": true"#),
        &["field `pow`", "no `pow` section"],
    );
    // Even with a module URL: the CronJob's image can only be rendered pinned by digest.
    Case::new().refuses(
        &edge_config(r#", "pow_enabled": true, "pow": {"url": "https://example.net/f.wasm", "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}"#,
        ),
        &["field `images.published`", "required", "make publish-images"],
    );
    Case::new().refuses(
        &edge_config(r#", "pow_enabled": true, "pow": {}, "images": {"registry": "rg.fr-par.scw.cloud/edgepop", "published": "absent.json"}"#,
        ),
        &["absent.json", "cannot read"],
    );
}

/// Renders a filter config with the example record and returns the WasmPlugin and the CronJob.
fn render_pow(case: &Case, pow: &str) -> (serde_json::Value, serde_json::Value) {
    let config = case.write(
        "edge.json",
        &edge_config(&format!(r#", "pow_enabled": true, "pow": {pow}, {IMAGES}"#)),
    );
    let list = render_list(&case.inputs(), &config);
    let find = |kind: &str| testkit::json::element(&list["items"], "/kind", kind).clone();
    (find("WasmPlugin"), find("CronJob"))
}

#[test]
fn the_published_images_are_rendered_pinned_by_their_manifest_digests() {
    let (plugin, cron) = render_pow(&Case::new(), "{}");
    assert_eq!(
        plugin["spec"]["url"],
        format!("oci://rg.fr-par.scw.cloud/edgepop/pow-filter@sha256:{FILTER_DIGEST}")
    );
    // For oci:// Istio checks sha256 against the manifest digest (pkg/wasm PrepareFetch).
    assert_eq!(plugin["spec"]["sha256"], FILTER_DIGEST);
    assert_eq!(
        cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("rg.fr-par.scw.cloud/edgepop/lists-refresh@sha256:{LISTS_DIGEST}")
    );
}

#[test]
fn a_module_url_in_the_config_is_pinned_its_own_way() {
    let wasm_sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let (plugin, _) = render_pow(
        &Case::new(),
        &format!(
            r#"{{"url": "https://example.net/f.wasm", "sha256": "{}"}}"#,
            wasm_sha.to_uppercase()
        ),
    );
    assert_eq!(plugin["spec"]["url"], "https://example.net/f.wasm");
    assert_eq!(plugin["spec"]["sha256"], wasm_sha);
    let digest = "3".repeat(64);
    let (plugin, _) = render_pow(
        &Case::new(),
        &format!(r#"{{"url": "oci://ghcr.io/x/f@sha256:{digest}"}}"#),
    );
    assert_eq!(
        plugin["spec"]["url"],
        format!("oci://ghcr.io/x/f@sha256:{digest}")
    );
    assert_eq!(plugin["spec"]["sha256"], digest);
}

#[test]
fn module_urls_that_cannot_be_pinned_are_refused_with_the_reason() {
    for (pow, needles) in [
        (
            r#"{"url": "oci://ghcr.io/edgepop/pow-filter:0.1.0", "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}"#,
            &["field `pow.url`", "not pinned by digest", "manifest"][..],
        ),
        (
            r#"{"url": "file:///var/lib/pow.wasm", "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}"#,
            &["field `pow.url`", "every gateway node"][..],
        ),
        (
            r#"{"url": "http://example.net/f.wasm", "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}"#,
            &["field `pow.url`", "plain http", "FAIL_OPEN"][..],
        ),
        (
            &format!(r#"{{"url": "oci://@sha256:{}"}}"#, "3".repeat(64)),
            &["field `pow.url`", "not a registry/repository name"][..],
        ),
        (
            r#"{"url": "oci://ghcr.io/x/f@sha256:ABC"}"#,
            &["field `pow.url`", "is not a digest"][..],
        ),
        (
            r#"{"url": "https://example.net/f.wasm"}"#,
            &["field `pow.sha256`", "required with an https:// url"][..],
        ),
        (
            r#"{"sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}"#,
            &["field `pow.sha256`", "without pow.url"][..],
        ),
        (
            &format!(
                r#"{{"url": "oci://ghcr.io/x/f@sha256:{}", "sha256": "{}"}}"#,
                "3".repeat(64),
                "4".repeat(64)
            ),
            &["field `pow.sha256`", "differs from the digest"][..],
        ),
    ] {
        Case::new().refuses(
            &edge_config(&format!(r#", "pow_enabled": true, "pow": {pow}, {IMAGES}"#)),
            needles,
        );
    }
}

#[test]
fn a_record_published_to_another_registry_is_refused() {
    Case::new().refuses(
        &edge_config(r#", "pow_enabled": true, "pow": {}, "images": {"registry": "rg.nl-ams.scw.cloud/edgepop", "published": "published.json"}"#,
        ),
        &["published.json", "field `registry`", "rg.nl-ams.scw.cloud/edgepop", "make publish-images"],
    );
}

#[test]
fn the_production_issuer_without_an_email_is_refused() {
    Case::new().refuses(
        &edge_config(r#", "acme": {"server": "production"}"#),
        &["field `acme.email`", "production issuer needs an email"],
    );
}

#[test]
fn inputs_missing_a_field_are_refused_and_named() {
    let case = Case::new();
    let inputs = case.write(
        "inputs.json",
        r#"{"kind": "PlatformInputs", "version": 4, "cluster_name": "c",
            "cluster_endpoint": "https://api.example.com:6443",
            "edge_nodes": [{"name": "w", "public_ipv4": "203.0.113.10"}]}"#,
    );
    let config = case.write("edge.json", &edge_config(""));
    case.refuses_files(&inputs, &config, &["inputs.json", "missing field dns_zone"]);
}

#[test]
fn inputs_of_another_kind_or_version_are_refused() {
    let case = Case::new();
    let text = std::fs::read_to_string(case.inputs()).unwrap();
    let config = case.write("edge.json", &edge_config(""));
    let other_version = case.write("v1.json", &text.replace("\"version\": 4", "\"version\": 1"));
    case.refuses_files(
        &other_version,
        &config,
        &["field `version`", "unsupported version 1"],
    );
    // The version before the list of edge nodes: what rewrites it is named.
    let older = text.replace("\"version\": 4", "\"version\": 3").replace(
        r#""edge_nodes": [{"name": "edge-worker-1", "public_ipv4": "203.0.113.10"}],"#,
        r#""edge_node_name": "edge-worker-1", "edge_public_ipv4": "203.0.113.10","#,
    );
    assert!(!older.contains("edge_nodes"), "{older}");
    let older = case.write("v3.json", &older);
    case.refuses_files(
        &older,
        &config,
        &[
            "v3.json: field `version`",
            "unsupported version 3: this tool reads version 4",
            "rerun `make apply-infra`",
        ],
    );
}

#[test]
fn the_filter_config_may_not_carry_lists_a_secret_or_the_acme_bypass() {
    for (key, value) in [
        ("lists", "{}"),
        ("agents", "{}"),
        ("demo_secret", r#""0123456789abcdef""#),
        // HTTP-01 never reaches the filter on the HTTPS listener: render-edge turns it off.
        ("acme_bypass", "true"),
    ] {
        Case::new().refuses(
            &edge_config(&format!(
                r#", "pow_enabled": true, {IMAGES}, "pow": {{
                    "plugin_config": {{"{key}": {value}}}}}"#
            )),
            &[&format!("field `pow.plugin_config.{key}`"), "not allowed"],
        );
    }
}

#[test]
fn a_bad_list_source_is_refused_with_its_path() {
    Case::new().refuses(
        &edge_config(&format!(
                r#", "pow_enabled": true, {}"#,
                POW_OK.replacen(
                    "}",
                    r#", "lists": {"sources": [{"name": "hosting", "generator": "asn", "sources": ["https://example.net/a.tsv"]}]}}"#,
                    1,
                )
            ),
        ),
        &["field `pow.lists.sources[0].asns`"],
    );
}

#[test]
fn a_minimal_config_renders_with_defaults() {
    let case = Case::new();
    let config = case.write(
        "edge.json",
        &edge_config(&format!(r#", "pow_enabled": true, {POW_OK}"#)),
    );
    let list = render_list(&case.inputs_with(json!(["example.com"])), &config);
    let issuer = testkit::json::element(&list["items"], "/kind", "ClusterIssuer");
    // Staging unless the config says production: no quota burnt while trying things out.
    assert_eq!(issuer["metadata"]["name"], "letsencrypt-staging");
    assert_eq!(
        issuer["spec"]["acme"]["server"],
        "https://acme-staging-v02.api.letsencrypt.org/directory"
    );
}

#[test]
fn a_filter_setting_the_filter_would_refuse_is_refused_here() {
    let pow = |plugin_config: &str| {
        edge_config(&format!(
            r#", "pow_enabled": true, {IMAGES}, "pow": {{
                "plugin_config": {plugin_config}}}"#
        ))
    };
    Case::new().refuses(
        &pow(r#"{"mode": "everyone"}"#),
        &["field `pow.plugin_config.mode`", "everyone"],
    );
    Case::new().refuses(
        &pow(r#"{"dificulty": 16}"#),
        &["field `pow.plugin_config.dificulty`", "unknown field"],
    );
    Case::new().refuses(
        &pow(r#"{"list_difficulty": {"tors": 20}}"#),
        &[
            "field `pow.plugin_config.list_difficulty.tors`",
            "no list named `tors`",
        ],
    );
    // A rule is checked by the filter's own decoder, naming the rule and the field...
    Case::new().refuses(
        &pow(r#"{"rules": [{"name": "login", "path": ["/login;x"], "action": "allow"}]}"#),
        &["field `pow.plugin_config.rules[0].path[0]`", "plain path"],
    );
    // ...and against the lists the refresh writes.
    Case::new().refuses(
        &pow(r#"{"rules": [{"name": "t", "lists": ["tor", "tors"], "action": "challenge"}]}"#),
        &[
            "field `pow.plugin_config.rules[0].lists[1]`",
            "no list named `tors`",
        ],
    );
    // The filter reads the client address Envoy derived; proxies in front are Istio's to know
    // (numTrustedProxies), and the rendered topology has none.
    Case::new().refuses(
        &pow(r#"{"trusted_hops": 1}"#),
        &[
            "field `pow.plugin_config.trusted_hops`",
            "numTrustedProxies",
        ],
    );
}

/// A config whose filter has these list sources.
fn with_list_sources(sources: &str) -> String {
    edge_config(&format!(
        r#", "pow_enabled": true, {}"#,
        // The lists go inside `pow`, whose object is the first to close.
        POW_OK.replacen(
            "}",
            &format!(r#", "lists": {{"sources": [{sources}]}}}}"#),
            1
        )
    ))
}

#[test]
fn a_list_name_the_filter_would_refuse_is_refused_before_anything_is_rendered() {
    // The filter refuses every update that carries such a name (a metric name: 1 to 32 of
    // [a-z0-9_-]): caught here, before any apply.
    let tor = |name: &str| {
        format!(r#"{{"name": "{name}", "generator": "tor", "sources": ["https://example.net/x"]}}"#)
    };
    let case = Case::new();
    for name in ["a".repeat(33), "Tor".to_string(), "tor.exits".to_string()] {
        case.refuses(
            &with_list_sources(&tor(&name)),
            &[
                "field `pow.lists.sources[0].name`",
                &name,
                "1 to 32 of [a-z0-9_-]",
            ],
        );
    }
    let seventeen: Vec<String> = (0..17).map(|i| tor(&format!("l{i}"))).collect();
    case.refuses(
        &with_list_sources(&seventeen.join(",")),
        &["field `pow.lists.sources`", "at most 16"],
    );
    // The filter's rule, not a stricter one: `_` and 32 characters pass.
    let config = case.write(
        "ok.json",
        &with_list_sources(&tor(&format!("tor_{}", "x".repeat(28)))),
    );
    let out = render(&case.inputs(), &config, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--names` as `KEY=value` pairs, in order; the render must succeed.
fn names(inputs: &Path, config: &Path) -> Vec<(String, String)> {
    let out = render(inputs, config, &["--names"]);
    testkit::process::success_stdout(&out)
        .lines()
        .map(|line| {
            let (key, value) = line.split_once('=').unwrap();
            (key.to_owned(), value.to_owned())
        })
        .collect()
}

/// What the edge scripts read from the names, found in the rendered objects themselves.
fn names_in_objects(list: &serde_json::Value) -> Vec<(String, String)> {
    let items = list["items"].as_array().unwrap();
    let first = |kind: &str| items.iter().find(|i| i["kind"] == kind);
    let name = |kind: &str| {
        first(kind).map_or(String::new(), |o| {
            o["metadata"]["name"].as_str().unwrap().to_owned()
        })
    };
    let gateway = first("Gateway").unwrap();
    // The Secret the gateway overlay feeds the filter's keys from, and the ConfigMap the
    // CronJob publishes into.
    let overlay = items
        .iter()
        .find(|i| i["kind"] == "ConfigMap" && i["data"]["deployment"].is_string())
        .unwrap();
    let secret = overlay["data"]["deployment"]
        .as_str()
        .unwrap()
        .split("secretKeyRef:")
        .nth(1)
        .map_or(String::new(), |rest| {
            let line = rest.lines().find(|l| l.contains("name:")).unwrap();
            line.split_once("name:").unwrap().1.trim().to_owned()
        });
    let lists_configmap = first("CronJob").map_or(String::new(), |cron| {
        cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|a| a.as_str().unwrap().strip_prefix("--configmap="))
            .unwrap()
            .to_owned()
    });
    // The gateway's pods, as the PodDisruptionBudget selects them.
    let budget = &first("PodDisruptionBudget").unwrap()["spec"]["selector"]["matchLabels"];
    let pods = budget
        .as_object()
        .unwrap()
        .iter()
        .map(|(key, value)| format!("{key}={}", value.as_str().unwrap()))
        .collect::<Vec<_>>()
        .join(",");
    [
        ("EDGE_NAMESPACE", name("Namespace")),
        ("EDGE_APPLYSET_PARENT", "configmap/edge-applyset".to_owned()),
        ("EDGE_GATEWAY_CLASS", name("GatewayClass")),
        ("EDGE_GATEWAY", name("Gateway")),
        (
            "EDGE_GATEWAY_DEPLOYMENT",
            format!(
                "{}-{}",
                gateway["metadata"]["name"].as_str().unwrap(),
                gateway["spec"]["gatewayClassName"].as_str().unwrap()
            ),
        ),
        ("EDGE_GATEWAY_PODS", pods),
        ("EDGE_WASM_PLUGIN", name("WasmPlugin")),
        ("EDGE_HMAC_SECRET", secret),
        ("EDGE_LISTS_CONFIGMAP", lists_configmap),
        ("EDGE_LISTS_CRONJOB", name("CronJob")),
        ("EDGE_POD_MONITOR", name("PodMonitor")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[test]
fn the_names_are_those_of_the_rendered_objects_with_the_filter_on_or_off() {
    let inputs = example("platform-inputs.example.json");
    for config in crate::api_server::EXAMPLES {
        let config = example(config);
        let printed = names(&inputs, &config);
        assert_eq!(
            printed,
            names_in_objects(&render_list(&inputs, &config)),
            "{}",
            config.display()
        );
        let filter_on = printed
            .iter()
            .any(|(k, v)| k == "EDGE_WASM_PLUGIN" && !v.is_empty());
        assert_eq!(filter_on, config.ends_with("edge-pow.example.json"));
    }
    // With the operator's objects, the PodMonitor's name is given too (apply-edge checks that
    // the cluster serves their API).
    assert_the_names_give(
        r#", "monitoring": "prometheus-operator""#,
        ("EDGE_POD_MONITOR", "edge-gateway"),
    );
    // A renamed Secret is the one the names give.
    assert_the_names_give(
        &format!(
            r#", "pow_enabled": true, "pow": {{"secret_name": "edge-filter-keys"}}, {IMAGES}"#
        ),
        ("EDGE_HMAC_SECRET", "edge-filter-keys"),
    );
}

/// With the edge config given these `extra` fields, the names printed hold `(key, name)`, and
/// are those of the rendered objects.
fn assert_the_names_give(extra: &str, (key, name): (&str, &str)) {
    let case = Case::new();
    let config = case.write("edge.json", &edge_config(extra));
    let printed = names(&case.inputs(), &config);
    assert!(
        printed.contains(&(key.to_owned(), name.to_owned())),
        "{printed:?}"
    );
    assert_eq!(
        printed,
        names_in_objects(&render_list(&case.inputs(), &config))
    );
}

#[test]
fn names_of_a_bad_config_are_refused_like_the_objects() {
    let case = Case::new();
    let config = case.write("edge.json", r#"{"origin": {"replicas": 0}}"#);
    let out = render(&case.inputs(), &config, &["--names"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("field `origin.replicas`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The trusted agents go to the lists job's record, which fetches their directories; never to
/// the WasmPlugin, whose `agents` the job owns.
#[test]
fn trusted_agents_are_checked_and_rendered_into_the_lists_jobs_record() {
    let pow = |agents: &str, rules: &str| {
        edge_config(&format!(
            r#", "pow_enabled": true, {IMAGES}, "pow": {{
                "plugin_config": {{"rules": {rules}}}, "agents": {agents}}}"#
        ))
    };
    let directory = "https://bot.example.com/.well-known/http-message-signatures-directory";
    let agents = format!(r#"[{{"name": "examplebot", "directory": "{directory}"}}]"#);
    let signed = r#"[{"name": "signed", "signed_agent": ["examplebot"], "action": "allow"}]"#;
    let case = Case::new();
    let config = case.write("edge.json", &pow(&agents, signed));
    let list = render_list(&case.inputs(), &config);
    let items = list["items"].as_array().unwrap();
    let sources = items
        .iter()
        .find(|i| i["kind"] == "ConfigMap" && i["metadata"]["name"] == "lists-sources")
        .unwrap();
    let record: serde_json::Value =
        serde_json::from_str(sources["data"]["sources.json"].as_str().unwrap()).unwrap();
    assert_eq!(record["version"], 3);
    assert_eq!(
        record["agents"],
        serde_json::json!([{"name": "examplebot", "directory": directory}])
    );
    let plugin = items.iter().find(|i| i["kind"] == "WasmPlugin").unwrap();
    assert!(plugin["spec"]["pluginConfig"].get("agents").is_none());

    Case::new().refuses(
        &pow(
            r#"[{"name": "examplebot", "directory": "http://bot.example.com/d"}]"#,
            "[]",
        ),
        &["field `pow.agents[0].directory`", "https://"],
    );
    // Loopback http is for a test's stand-in, never the edge.
    Case::new().refuses(
        &pow(
            r#"[{"name": "examplebot", "directory": "http://127.0.0.1:8080/d"}]"#,
            "[]",
        ),
        &["field `pow.agents[0].directory`"],
    );
    Case::new().refuses(
        &pow(
            r#"[{"name": "examplebot", "keys": {"keys": [{"kty": "RSA"}]}}]"#,
            "[]",
        ),
        &["field `pow.agents[0].keys`", "no Ed25519 key"],
    );
    Case::new().refuses(
        &pow(&agents.replace("examplebot", "Example"), "[]"),
        &["field `pow.agents[0].name`"],
    );
    Case::new().refuses(
        &pow(
            &agents,
            &signed.replace("[\"examplebot\"]", "[\"otherbot\"]"),
        ),
        &[
            "field `pow.plugin_config.rules[0].signed_agent[0]`",
            "no agent named `otherbot` in pow.agents",
        ],
    );
}
