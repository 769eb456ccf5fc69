//! The ValidatingAdmissionPolicy that keeps the lists-refresh job to `spec.pluginConfig.lists`,
//! its CEL evaluated on allowed and refused changes of the rendered WasmPlugin.
//!
//! Evaluator: the `cel` crate (the Rust interpreter of the CEL spec). The API server runs
//! cel-go on the same inputs: at admission it declares `object`, `oldObject` and `request` as
//! dynamic values built from the unstructured objects (maps, lists, strings, numbers), which
//! is what this test hands the interpreter: the expressions are read from the rendered policy,
//! never re-typed here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use cel::{Context, Program, Value as CelValue};
use render_edge::{Config, Format, plan, render};
use serde_json::{Value, json};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../config")
        .join(name)
}

fn rendered() -> Vec<Value> {
    let cli = Config {
        inputs: example("platform-inputs.example.json"),
        config: example("edge-pow.example.json"),
        format: Format::Json,
        names: false,
    };
    render::objects(&plan(&cli).unwrap()).unwrap()
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects.iter().find(|o| o["kind"] == kind).unwrap()
}

/// The WasmPlugin as it lives in the cluster after the edge apply and a first refresh.
fn live_plugin() -> Value {
    let mut plugin = find(&rendered(), "WasmPlugin").clone();
    plugin["metadata"]["resourceVersion"] = json!("41");
    plugin["metadata"]["generation"] = json!(3);
    plugin["spec"]["pluginConfig"]["lists"] = lists("2026-11-30T10:17:00Z", "185.220.101.0/24\n");
    plugin
}

/// `pluginConfig.lists` as lists-refresh publishes it.
fn lists(version: &str, tor: &str) -> Value {
    json!({"version": version, "generated_at": version, "sets": {"tor": tor}})
}

fn eval(expression: &str, object: &Value, old: &Value, username: &str) -> bool {
    let program = Program::compile(expression)
        .unwrap_or_else(|e| panic!("the API server would refuse to compile {expression}: {e:?}"));
    let mut context = Context::default();
    context.add_variable("object", object.clone()).unwrap();
    context.add_variable("oldObject", old.clone()).unwrap();
    context
        .add_variable(
            "request",
            json!({"operation": "UPDATE", "userInfo": {"username": username}}),
        )
        .unwrap();
    match program.execute(&context) {
        Ok(CelValue::Bool(b)) => b,
        // failurePolicy Fail: an error refuses the change. Say which, so a broken expression
        // does not pass for a refusal.
        other => panic!("{expression} did not evaluate to a bool: {other:?}"),
    }
}

struct Policy {
    condition: String,
    validations: Vec<(String, String)>,
}

fn policy() -> Policy {
    let objects = rendered();
    let vap = find(&objects, "ValidatingAdmissionPolicy");
    let conditions = vap["spec"]["matchConditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1);
    Policy {
        condition: conditions[0]["expression"].as_str().unwrap().to_string(),
        validations: vap["spec"]["validations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["expression"].as_str().unwrap().to_string(),
                    v["message"].as_str().unwrap().to_string(),
                )
            })
            .collect(),
    }
}

const JOB: &str = "system:serviceaccount:edge:lists-refresh";

/// The messages of the validations that refuse `new` over `old`, as the job.
fn refusals(new: &Value, old: &Value) -> Vec<String> {
    let policy = policy();
    assert!(eval(&policy.condition, new, old, JOB));
    policy
        .validations
        .iter()
        .filter(|(expression, _)| !eval(expression, new, old, JOB))
        .map(|(_, message)| message.clone())
        .collect()
}

#[test]
fn the_job_may_publish_new_lists() {
    let old = live_plugin();
    let mut new = old.clone();
    new["spec"]["pluginConfig"]["lists"] = json!({
        "version": "2026-11-30T11:17:00Z", "generated_at": "2026-11-30T11:17:00Z",
        "sets": {"tor": "185.220.101.0/24\n2a0b:f4c2::/40\n", "hosting": "3.0.0.0/8\n"},
    });
    // What a server-side apply changes besides: the server's bookkeeping.
    new["metadata"]["resourceVersion"] = json!("42");
    new["metadata"]["generation"] = json!(4);
    new["metadata"]["managedFields"] = json!([{"manager": "edgepop-lists", "operation": "Apply"}]);
    assert_eq!(refusals(&new, &old), Vec::<String>::new());
}

#[test]
fn the_job_may_publish_the_first_lists() {
    let old = find(&rendered(), "WasmPlugin").clone();
    assert!(old["spec"]["pluginConfig"].get("lists").is_none());
    let mut new = old.clone();
    new["spec"]["pluginConfig"]["lists"] = lists("2026-11-30T10:17:00Z", "185.220.101.0/24\n");
    assert_eq!(refusals(&new, &old), Vec::<String>::new());
}

#[test]
fn the_job_may_not_change_the_module_or_its_environment() {
    let old = live_plugin();
    for (field, value) in [
        ("url", json!("oci://attacker.example/pow:evil")),
        ("sha256", json!("ab".repeat(32))),
        (
            "vmConfig",
            json!({"env": [{"name": "POW_HMAC_SECRET", "value": "known"}]}),
        ),
        ("failStrategy", json!("FAIL_CLOSE")),
        ("match", json!([{"ports": [{"number": 80}]}])),
        // A key the rendered object does not have: gaining one is a change too.
        ("priority", json!(1000)),
    ] {
        let mut new = old.clone();
        new["spec"][field] = value;
        let refused = refusals(&new, &old);
        assert_eq!(refused.len(), 1, "{field}: {refused:?}");
        assert!(refused[0].ends_with("(spec)"), "{field}: {refused:?}");
        assert!(refused[0].contains("may change only spec.pluginConfig.lists"));
    }
    let mut new = old.clone();
    new["spec"].as_object_mut().unwrap().remove("match");
    assert_eq!(
        refusals(&new, &old).len(),
        1,
        "removing a field is a change"
    );
}

#[test]
fn the_job_may_not_change_the_filter_settings_beside_the_lists() {
    let old = live_plugin();
    let settings = old["spec"]["pluginConfig"].as_object().unwrap();
    let setting = settings.keys().find(|k| *k != "lists").unwrap().clone();
    let mut changed = old.clone();
    changed["spec"]["pluginConfig"][&setting] = json!("something else");
    let mut added = old.clone();
    added["spec"]["pluginConfig"]["demo_secret"] = json!("known");
    let mut removed = old.clone();
    removed["spec"]["pluginConfig"]
        .as_object_mut()
        .unwrap()
        .remove(&setting);
    for new in [changed, added, removed] {
        let refused = refusals(&new, &old);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].ends_with("(spec.pluginConfig)"), "{refused:?}");
    }
}

#[test]
fn the_job_may_not_relabel_the_plugin() {
    let old = live_plugin();
    let mut new = old.clone();
    new["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("someone-else");
    let refused = refusals(&new, &old);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].contains("metadata.labels"));
    let mut new = old.clone();
    new["metadata"]["annotations"] = json!({"a": "b"});
    assert_eq!(refusals(&new, &old).len(), 1);
}

#[test]
fn the_policy_binds_only_the_lists_job_to_the_one_plugin_in_the_edge_namespace() {
    let policy = policy();
    let old = live_plugin();
    let mut new = old.clone();
    new["spec"]["url"] = json!("oci://registry.example/pow:next");
    // The operator's own apply (edgepop-edge, any admin) is not this policy's business.
    for user in ["kubernetes-admin", "system:serviceaccount:edge:default"] {
        assert!(!eval(&policy.condition, &new, &old, user), "{user}");
    }
    assert!(eval(&policy.condition, &new, &old, JOB));

    // JOB is the identity the API server gives the rendered CronJob's pods.
    let objects = rendered();
    let cron = find(&objects, "CronJob");
    let account = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"];
    assert_eq!(
        JOB,
        format!(
            "system:serviceaccount:{}:{}",
            cron["metadata"]["namespace"].as_str().unwrap(),
            account.as_str().unwrap()
        )
    );

    let vap = find(&objects, "ValidatingAdmissionPolicy");
    let rule = &vap["spec"]["matchConstraints"]["resourceRules"][0];
    assert_eq!(rule["resources"], json!(["wasmplugins"]));
    assert_eq!(rule["resourceNames"], json!(["pow-filter"]));
    assert_eq!(rule["operations"], json!(["UPDATE"]));
    assert_eq!(vap["spec"]["failurePolicy"], "Fail");
    let binding = find(&objects, "ValidatingAdmissionPolicyBinding");
    assert_eq!(binding["spec"]["policyName"], vap["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert_eq!(
        binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "edge"
    );
    // The Role the policy guards: the job's account, the plugin it patches.
    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "lists-refresh")
        .unwrap();
    assert!(
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"] == json!(["wasmplugins"])
                && r["resourceNames"] == json!(["pow-filter"]))
    );
}
