//! The rendered objects against the real Kubernetes API server at the cluster's version
//! (`testkit::control_plane`), with the CRDs the platform layer installs (Gateway API standard
//! channel, Istio, cert-manager: `testkit::crds`): every object of both committed examples is
//! taken, validated as a creation (OpenAPI schemas, the CRDs' CEL rules, strict field
//! validation, admission), and the edge config's limits are the ones the API server holds.
//!
//! One control plane for this test binary holds one edge: before anything else of the edge
//! exists, the filter-off example is applied as a server-side dry run, then the filter-on
//! example is applied for real ([`edge`]); the admission tests work on that one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use manifest_check::Validator;
use render_edge::{Config, Format, plan, render};
use serde_json::{Value, json};
use testkit::control_plane::ControlPlane;
use testkit::process::text;

/// The field manager of `make apply-edge` (the Makefile's FIELD_MANAGER_EDGE).
pub const FIELD_MANAGER: &str = "edgepop-edge";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The objects of the committed example `config`.
pub fn example(config: &str) -> Vec<Value> {
    let inputs = workspace().join("config/platform-inputs.example.json");
    rendered(&inputs, &workspace().join("config").join(config)).unwrap()
}

/// The committed examples: the edge without the filter, and with it.
pub const EXAMPLES: [&str; 2] = ["edge.example.json", "edge-pow.example.json"];

/// Each committed example with its objects.
pub fn examples() -> impl Iterator<Item = (&'static str, Vec<Value>)> {
    EXAMPLES.into_iter().map(|config| (config, example(config)))
}

/// The objects of the platform inputs `inputs` and the edge config `config`; or render-edge's
/// refusal.
pub fn rendered(inputs: &Path, config: &Path) -> Result<Vec<Value>, String> {
    let cli = Config {
        inputs: inputs.to_path_buf(),
        config: config.to_path_buf(),
        format: Format::Json,
        names: false,
    };
    let plan = plan(&cli).map_err(|e| e.to_string())?;
    Ok(render::objects(&plan).unwrap())
}

/// A YAML stream of the objects, one JSON document each, as kubectl reads it.
pub fn stream(objects: &[Value]) -> String {
    objects.iter().map(|o| format!("---\n{o}\n")).collect()
}

/// `kubectl <args>` with `stdin`, as the control plane's admin.
pub fn kubectl(plane: &ControlPlane, args: &[&str], stdin: &str) -> Output {
    testkit::process::run_with_stdin(plane.kubectl().args(args), stdin.as_bytes())
}

/// A server-side apply of `objects` as `make apply-edge` does it (its field manager), with
/// `--dry-run=server` when `dry_run`.
pub fn apply(plane: &ControlPlane, objects: &[Value], dry_run: bool) -> Output {
    let manager = format!("--field-manager={FIELD_MANAGER}");
    let mut args = vec!["apply", "--server-side", manager.as_str(), "--filename=-"];
    if dry_run {
        args.push("--dry-run=server");
    }
    kubectl(plane, &args, &stream(objects))
}

/// The edge of this test binary's control plane.
pub struct Edge {
    pub plane: &'static ControlPlane,
    /// kubectl's answer to the server-side dry run of `edge.example.json` (filter off), sent
    /// when only the namespace existed: every object was checked as a creation.
    without_filter: Output,
    /// kubectl's answer to the apply of `edge-pow.example.json` (filter on), for real.
    with_filter: Output,
}

/// The edge on this test binary's control plane, set up by the first test that asks; `None`
/// after a skip when a program or the CRDs are missing.
pub fn edge(test: &str) -> Option<&'static Edge> {
    static EDGE: OnceLock<Edge> = OnceLock::new();
    let crds = testkit::crds::platform(test)?;
    let plane = ControlPlane::shared(test)?;
    Some(EDGE.get_or_init(|| {
        plane.install_crds(&crds);
        let (without, with) = (
            example("edge.example.json"),
            example("edge-pow.example.json"),
        );
        // The namespaced objects of a dry run need their namespace to exist: both examples
        // render the same one, applied for real first.
        assert_eq!(without[0], with[0]);
        assert_eq!(with[0]["kind"], "Namespace");
        let namespace = apply(plane, &with[..1], false);
        assert!(namespace.status.success(), "{}", text(&namespace));
        let without_filter = apply(plane, &without, true);
        let with_filter = apply(plane, &with, false);
        assert!(with_filter.status.success(), "{}", text(&with_filter));
        Edge {
            plane,
            without_filter,
            with_filter,
        }
    }))
}

/// How kubectl names an object in its output: `<kind>.<group>/<name>`, the group left out for
/// the core API.
fn kubectl_name(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap().to_lowercase();
    let name = object["metadata"]["name"].as_str().unwrap();
    match object["apiVersion"].as_str().unwrap().split_once('/') {
        Some((group, _)) => format!("{kind}.{group}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// Every field of `sent` is in `stored` with the same value: the server dropped or changed
/// nothing of what was rendered (it may add defaults and its bookkeeping).
fn kept(sent: &Value, stored: &Value, at: &str, lost: &mut Vec<String>) {
    match (sent, stored) {
        (Value::Object(sent), Value::Object(stored)) => {
            for (key, value) in sent {
                match stored.get(key) {
                    Some(there) => kept(value, there, &format!("{at}.{key}"), lost),
                    None => lost.push(format!("{at}.{key}: gone")),
                }
            }
        }
        (Value::Array(sent), Value::Array(stored)) if sent.len() == stored.len() => {
            for (i, (value, there)) in sent.iter().zip(stored).enumerate() {
                kept(value, there, &format!("{at}[{i}]"), lost);
            }
        }
        _ if sent == stored => {}
        _ => lost.push(format!("{at}: sent {sent}, stored {stored}")),
    }
}

#[test]
fn every_object_of_both_examples_is_taken_by_the_api_server_as_a_creation() {
    let Some(edge) = edge("every_object_of_both_examples_is_taken") else {
        return;
    };
    for (config, out, answer) in [
        (
            "edge.example.json",
            &edge.without_filter,
            "serverside-applied (server dry run)",
        ),
        (
            "edge-pow.example.json",
            &edge.with_filter,
            "serverside-applied",
        ),
    ] {
        assert!(out.status.success(), "{config}: {}", text(out));
        // No warning either: no deprecated API, no PodSecurity level the pods would break (the
        // namespace warns on `restricted`), no field the server would drop.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.trim().is_empty(), "{config}: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let objects = example(config);
        assert!(objects.len() >= 10, "{config}: {} objects", objects.len());
        for object in &objects {
            let line = format!("{} {answer}", kubectl_name(object));
            assert!(
                stdout.lines().any(|l| l == line),
                "{config}: no `{line}` in:\n{stdout}"
            );
        }
        assert_eq!(stdout.lines().count(), objects.len(), "{config}: {stdout}");
    }
    // What is stored is what was rendered.
    let mut lost = Vec::new();
    for object in example("edge-pow.example.json") {
        let mut args = vec!["get", "--output=json"];
        let namespace = object["metadata"]["namespace"].as_str();
        let ns = namespace.map(|ns| format!("--namespace={ns}"));
        args.extend(ns.as_deref());
        let name = kubectl_name(&object);
        args.push(&name);
        let out = kubectl(edge.plane, &args, "");
        let stored: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{name}: {}", text(&out)));
        kept(&object, &stored, &name, &mut lost);
    }
    assert!(lost.is_empty(), "{}", lost.join("\n"));
}

/// The committed platform inputs and `edge.example.json`, `change` applied to them (in this
/// order), written into `dir`: their paths.
pub fn files_with(dir: &Path, change: impl FnOnce(&mut Value, &mut Value)) -> (PathBuf, PathBuf) {
    let read = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(workspace().join(name)).unwrap()).unwrap()
    };
    let mut inputs = read("config/platform-inputs.example.json");
    let mut config = read("config/edge.example.json");
    change(&mut inputs, &mut config);
    let paths = (dir.join("platform-inputs.json"), dir.join("edge.json"));
    std::fs::write(&paths.0, inputs.to_string()).unwrap();
    std::fs::write(&paths.1, config.to_string()).unwrap();
    paths
}

/// The objects of the examples' inputs with `nodes` as the edge nodes, and `edge.example.json`.
pub fn with_edge_nodes(nodes: &[&str]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let (inputs, config) = files_with(dir.path(), |inputs, _| {
        inputs["edge_nodes"] = nodes
            .iter()
            .zip(10..)
            .map(|(name, i)| json!({"name": name, "public_ipv4": format!("203.0.113.{i}")}))
            .collect();
    });
    rendered(&inputs, &config).unwrap()
}

/// A name of `len` characters in the examples' DNS zone, made of labels of at most 63.
fn hostname_of_length(len: usize) -> String {
    let zone = ".example.com";
    let mut labels = Vec::new();
    let mut left = len - zone.len();
    while left > 0 {
        // A label, and the dot before the next one when one follows.
        let take = left.min(63);
        let take = if left - take == 1 { take - 1 } else { take };
        let letter = char::from(b'a' + u8::try_from(labels.len()).unwrap());
        labels.push(letter.to_string().repeat(take));
        // The dot before the next label, if any.
        left = (left - take).saturating_sub(1);
    }
    let host = format!("{}{zone}", labels.join("."));
    assert_eq!(host.len(), len, "{host}");
    host
}

#[test]
fn what_the_edge_config_accepts_at_its_limits_the_api_server_takes() {
    let Some(edge) = edge("what_the_edge_config_accepts_at_its_limits") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let render = |change: &dyn Fn(&mut Value, &mut Value)| {
        let (inputs, config) = files_with(dir.path(), change);
        rendered(&inputs, &config)
    };

    // The longest hostname render-edge takes: the names made from it (listener, route, Secret)
    // must still be valid names.
    let longest = (200..=253)
        .rev()
        .map(hostname_of_length)
        .find(|host| {
            let host = host.clone();
            render(&move |i: &mut Value, _: &mut Value| {
                i["edge_hostnames"] = json!([host, "www.example.com"]);
            })
            .is_ok()
        })
        .unwrap();
    // As many hostnames as it takes, and a Deployment as large as it takes.
    let hostnames: Vec<String> = (1..)
        .map(|i| format!("h{i}.example.com"))
        .take(64)
        .collect();
    let most = (1..=hostnames.len())
        .rev()
        .find(|n| {
            let some = hostnames[..*n].to_vec();
            render(&move |i: &mut Value, _: &mut Value| i["edge_hostnames"] = json!(some)).is_ok()
        })
        .unwrap();
    let replicas = [u64::from(u32::MAX), 2_147_483_648, 2_147_483_647]
        .into_iter()
        .find(|n| {
            let n = *n;
            render(&move |_: &mut Value, c: &mut Value| c["origin"]["replicas"] = json!(n)).is_ok()
        })
        .unwrap();
    let cases = [
        (
            format!("a hostname of {} characters", longest.len()),
            render(&|i: &mut Value, _: &mut Value| {
                i["edge_hostnames"] = json!([longest, "www.example.com"]);
            }),
        ),
        (
            format!("{most} hostnames"),
            render(&|i: &mut Value, _: &mut Value| i["edge_hostnames"] = json!(hostnames[..most])),
        ),
        (
            format!("{replicas} replicas"),
            render(&|_: &mut Value, c: &mut Value| c["origin"]["replicas"] = json!(replicas)),
        ),
    ];
    let mut refused = Vec::new();
    for (case, objects) in cases {
        let out = apply(edge.plane, &objects.unwrap(), true);
        if !out.status.success() {
            refused.push(format!(
                "{case}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

#[test]
fn the_api_server_refuses_what_the_schema_check_lets_through() {
    let test = "the_api_server_refuses_what_the_schema_check_lets_through";
    let Some(edge) = edge(test) else {
        return;
    };
    let Some(shared) = testkit::workspace::shared_dir(test) else {
        return;
    };
    let validator = Validator::new(&shared.join("schemas")).unwrap();
    let objects = example("edge.example.json");
    let find = |kind: &str| objects.iter().find(|o| o["kind"] == kind).unwrap().clone();
    // A name over the 253 characters of a DNS subdomain; a replica count that is no int32; an
    // HTTPS listener terminating TLS with no certificate, which a CEL rule of the Gateway CRD
    // refuses.
    let mut route = find("HTTPRoute");
    route["metadata"]["name"] = json!(format!("origin-{}", hostname_of_length(247)));
    let mut deployment = find("Deployment");
    deployment["spec"]["replicas"] = json!(2_147_483_648_u64);
    let mut gateway = find("Gateway");
    let https = gateway["spec"]["listeners"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|l| l["protocol"] == "HTTPS")
        .unwrap();
    https["tls"]["certificateRefs"] = json!([]);
    for (object, said) in [
        (route, "must be no more than 253 characters"),
        (deployment, "spec.replicas"),
        (
            gateway,
            "certificateRefs or options must be specified when mode is Terminate",
        ),
    ] {
        let name = kubectl_name(&object);
        assert!(
            validator.validate(&object).is_ok(),
            "{name}: the schema check refuses it too"
        );
        let out = apply(edge.plane, std::slice::from_ref(&object), true);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: taken");
        assert!(stderr.contains(said), "{name}: {stderr}");
    }
}
