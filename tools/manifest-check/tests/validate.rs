//! manifest-check against the real upstream schemas in `../shared/schemas`.
#![allow(clippy::unwrap_used)] // a failed unwrap in a test helper is a test failure

use std::path::PathBuf;

use manifest_check::{Config, Error, Input, Validator, run};
use pop_common::exit::{Exit, Report};
use serde_json::{Value, json};

/// `<workspace root>/../shared/schemas`, or `$EDGEPOP_SHARED/schemas`; None (after a skip or a
/// failure under CI) when it is absent.
fn schemas(test: &str) -> Option<PathBuf> {
    let shared = match std::env::var_os("EDGEPOP_SHARED") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    };
    let dir = shared.join("schemas");
    if dir.join("namespace-v1.json").is_file() {
        Some(dir)
    } else {
        testkit::skip_or_fail(test, &format!("the schemas in {}", dir.display()));
        None
    }
}

/// The validator over the shared schemas; None (after a skip or a failure under CI) when they
/// are absent.
fn validator(test: &str) -> Option<Validator> {
    Some(Validator::new(&schemas(test)?).unwrap())
}

fn namespace() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "edge", "labels": {"app.kubernetes.io/part-of": "edgepop"}}})
}

fn gateway() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "edge-gateway", "namespace": "edge"},
        "spec": {
            "gatewayClassName": "istio",
            "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP",
                 "allowedRoutes": {"namespaces": {"from": "Same"}}},
                {"name": "https-www", "port": 443, "protocol": "HTTPS", "hostname": "www.example.com",
                 "tls": {"mode": "Terminate", "certificateRefs": [{"kind": "Secret", "name": "www-tls"}]},
                 "allowedRoutes": {"namespaces": {"from": "Same"}}}
            ]
        }
    })
}

fn httproute() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "origin", "namespace": "edge"},
        "spec": {
            "parentRefs": [{"name": "edge-gateway", "sectionName": "https-www"}],
            "hostnames": ["www.example.com"],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [{"name": "origin", "port": 8080}]
            }]
        }
    })
}

/// Runs the check on `text` as stdin (the input every message then names `<stdin>`).
fn run_text(schemas: PathBuf, text: &str) -> (Result<(), Error>, String) {
    let config = Config {
        schemas_dir: schemas,
        input: Input::Stdin,
    };
    let mut out = Vec::new();
    let result = run(&config, text.as_bytes(), &mut out);
    (result, String::from_utf8(out).unwrap())
}

#[test]
fn every_shared_schema_compiles() {
    let Some(v) = validator("every_shared_schema_compiles") else {
        return;
    };
    let count = v.compile_all().unwrap();
    assert!(count >= 60, "only {count} schemas found");
}

#[test]
fn real_objects_pass() {
    let Some(v) = validator("real_objects_pass") else {
        return;
    };
    for object in [namespace(), gateway(), httproute()] {
        assert_eq!(v.validate(&object), Ok(()), "{object}");
    }
}

#[test]
fn an_unknown_field_deep_in_a_listener_is_named_with_its_path() {
    let Some(v) = validator("an_unknown_field_deep_in_a_listener_is_named_with_its_path") else {
        return;
    };
    let mut gw = gateway();
    gw["spec"]["listeners"][1]["tls"]["certificateRefs"][0]["nmae"] = json!("typo");
    let violations = v.validate(&gw).unwrap_err();
    assert_eq!(violations.len(), 1, "{violations:?}");
    let v = &violations[0];
    assert_eq!(v.object, "Gateway edge/edge-gateway");
    assert_eq!(v.path, "/spec/listeners/1/tls/certificateRefs/0");
    assert!(v.message.contains("'nmae'"), "{v}");
    assert_eq!(
        v.to_string(),
        format!(
            "Gateway edge/edge-gateway: at /spec/listeners/1/tls/certificateRefs/0: {}",
            v.message
        )
    );
}

#[test]
fn a_wrong_type_fails() {
    let Some(v) = validator("a_wrong_type_fails") else {
        return;
    };
    let mut route = httproute();
    route["spec"]["rules"][0]["backendRefs"][0]["port"] = json!("8080");
    let violations = v.validate(&route).unwrap_err();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0].path, "/spec/rules/0/backendRefs/0/port");
    assert!(
        violations[0].message.contains("integer"),
        "{}",
        violations[0]
    );
}

#[test]
fn an_enum_and_a_pattern_are_enforced() {
    let Some(v) = validator("an_enum_and_a_pattern_are_enforced") else {
        return;
    };
    let mut gw = gateway();
    gw["spec"]["listeners"][0]["allowedRoutes"]["namespaces"]["from"] = json!("all");
    gw["spec"]["listeners"][1]["hostname"] = json!("Not A Host");
    let paths: Vec<String> = v
        .validate(&gw)
        .unwrap_err()
        .into_iter()
        .map(|v| v.path)
        .collect();
    assert!(
        paths.contains(&"/spec/listeners/0/allowedRoutes/namespaces/from".to_string()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"/spec/listeners/1/hostname".to_string()),
        "{paths:?}"
    );
}

#[test]
fn a_kind_with_no_schema_fails_and_names_the_paths_looked_for() {
    let Some(dir) = schemas("a_kind_with_no_schema_fails_and_names_the_paths_looked_for") else {
        return;
    };
    let v = Validator::new(&dir).unwrap();
    let widget =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    let violations = v.validate(&widget).unwrap_err();
    let text = violations[0].to_string();
    let top = dir.join("widget-example-v1.json");
    let crd = dir.join("example.com/widget_v1.json");
    assert!(text.contains(&top.display().to_string()), "{text}");
    assert!(text.contains(&crd.display().to_string()), "{text}");
    assert!(
        text.starts_with("Widget w: no schema for example.com/v1 Widget"),
        "{text}"
    );
    // A core kind that is not in the directory is no pass either.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    let text = v.validate(&pod).unwrap_err()[0].to_string();
    assert!(
        text.contains(&dir.join("pod-v1.json").display().to_string()),
        "{text}"
    );
}

#[test]
fn an_object_without_kind_or_api_version_fails() {
    let Some(v) = validator("an_object_without_kind_or_api_version_fails") else {
        return;
    };
    let text = v.validate(&json!({"kind": "Namespace"})).unwrap_err()[0].to_string();
    assert!(text.contains("no apiVersion"), "{text}");
    let text = v.validate(&json!({"apiVersion": "v1"})).unwrap_err()[0].to_string();
    assert!(text.contains("no kind"), "{text}");
}

#[test]
fn cilium_unicode_class_pattern_works() {
    let Some(v) = validator("cilium_unicode_class_pattern_works") else {
        return;
    };
    let mut cnp = json!({
        "apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
        "metadata": {"name": "p", "namespace": "edge"},
        "spec": {"endpointSelector": {}, "ingress": [{}], "log": {"value": "edge ingress é"}}
    });
    assert_eq!(v.validate(&cnp), Ok(()));
    cnp["spec"]["log"]["value"] = json!("bell\u{7}");
    let violations = v.validate(&cnp).unwrap_err();
    assert_eq!(violations[0].path, "/spec/log/value", "{violations:?}");
}

#[test]
fn a_yaml_stream_is_reported_object_by_object() {
    let Some(dir) = schemas("a_yaml_stream_is_reported_object_by_object") else {
        return;
    };
    let mut bad = gateway();
    bad["spec"]["listeners"][0]["port"] = json!(-1);
    let docs: Vec<String> = [namespace(), gateway(), httproute(), bad]
        .iter()
        .map(|o| serde_norway::to_string(o).unwrap())
        .collect();
    let text = format!("# rendered\n---\n{}", docs.join("---\n"));
    let (result, out) = run_text(dir.clone(), &text);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..3],
        [
            "ok Namespace edge",
            "ok Gateway edge/edge-gateway",
            "ok HTTPRoute edge/origin"
        ],
        "{out}"
    );
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[3].starts_with("invalid Gateway edge/edge-gateway: at /spec/listeners/0/port: "),
        "{out}"
    );
    let err = result.unwrap_err();
    assert_eq!(err.exit(), Exit::Failure);
    assert_eq!(
        err.to_string(),
        "1 of 4 objects are invalid (see the report on stdout)"
    );

    let (result, out) = run_text(dir, &text.replace("port: -1", "port: 8080"));
    assert!(result.is_ok(), "{out}");
    assert_eq!(out.lines().count(), 4);
}

#[test]
fn a_json_list_is_checked_item_by_item() {
    let Some(dir) = schemas("a_json_list_is_checked_item_by_item") else {
        return;
    };
    let list =
        json!({"apiVersion": "v1", "kind": "List", "items": [namespace(), gateway(), httproute()]});
    let (result, out) = run_text(dir, &serde_json::to_string_pretty(&list).unwrap());
    assert!(result.is_ok(), "{out}");
    assert_eq!(
        out,
        "ok Namespace edge\nok Gateway edge/edge-gateway\nok HTTPRoute edge/origin\n"
    );
}

#[test]
fn an_empty_input_is_an_error() {
    let Some(dir) = schemas("an_empty_input_is_an_error") else {
        return;
    };
    for text in [
        "",
        "\n",
        "---\n# nothing\n---\n",
        r#"{"apiVersion":"v1","kind":"List","items":[]}"#,
    ] {
        let (result, out) = run_text(dir.clone(), text);
        let err = result.unwrap_err();
        assert!(matches!(err, Error::Empty { .. }), "{text:?}: {err}");
        assert_eq!(err.exit(), Exit::Usage);
        assert_eq!(out, "");
    }
}

#[test]
fn broken_yaml_is_bad_input() {
    let Some(dir) = schemas("broken_yaml_is_bad_input") else {
        return;
    };
    let (result, _) = run_text(dir, "apiVersion: v1\nkind: [Namespace\n");
    let err = result.unwrap_err();
    assert_eq!(err.exit(), Exit::Usage, "{err}");
    assert!(
        err.to_string()
            .starts_with("<stdin>: document 1: invalid YAML"),
        "{err}"
    );
}
