//! What RBAC cannot say: the lists-refresh ServiceAccount may `patch` the WasmPlugin (to publish
//! `spec.pluginConfig.lists` and the trusted agents' keys, `spec.pluginConfig.agents`), and RBAC cannot limit a patch to one field, so the job that parses
//! internet data could otherwise rewrite the module's `url`, `sha256` or `vmConfig`. A
//! ValidatingAdmissionPolicy refuses any change by that account to anything else.
//!
//! At admission the API server compiles these expressions with `object` and `oldObject` as
//! dynamic values (plain maps, whatever the CRD's schema says), so they walk `spec` key by key:
//! a field a later Istio adds to WasmPlugin is covered without editing this list.

use serde_json::{Value, json};

use super::{LISTS_REFRESH, NAMESPACE, WASM_PLUGIN, labels};

pub const POLICY: &str = "edgepop-lists-refresh-changes-only-lists";

/// The lists-refresh job's identity, as the API server names a ServiceAccount.
pub fn lists_refresh_username() -> String {
    format!("system:serviceaccount:{NAMESPACE}:{LISTS_REFRESH}")
}

/// `spec` keeps every key but `pluginConfig`, with the same value, and gains none.
pub const SPEC_UNCHANGED: &str = "object.spec.all(k, k == 'pluginConfig' || \
     (k in oldObject.spec && object.spec[k] == oldObject.spec[k])) && \
     oldObject.spec.all(k, k == 'pluginConfig' || k in object.spec)";

/// `spec.pluginConfig` keeps every key but `lists` and `agents`, with the same value, and gains
/// none (a missing pluginConfig counts as an empty one).
pub const PLUGIN_CONFIG_UNCHANGED_BUT_LISTS: &str = "(!has(object.spec.pluginConfig) || \
     object.spec.pluginConfig.all(k, k == 'lists' || k == 'agents' || \
     (has(oldObject.spec.pluginConfig) && \
     k in oldObject.spec.pluginConfig && \
     object.spec.pluginConfig[k] == oldObject.spec.pluginConfig[k]))) && \
     (!has(oldObject.spec.pluginConfig) || \
     oldObject.spec.pluginConfig.all(k, k == 'lists' || k == 'agents' || \
     (has(object.spec.pluginConfig) && \
     k in object.spec.pluginConfig)))";

/// The metadata the job must leave as it is, each with the value its absence stands for: the
/// labels and annotations (the ApplySet and the prune read them), the owners (an owner whose uid
/// does not exist makes the garbage collector delete the plugin, and the gateway runs with no
/// filter), the finalizers (one nobody removes holds the plugin's deletion, and the edge's
/// destroy, forever) and the generated name.
pub const METADATA_KEPT: [(&str, &str); 5] = [
    ("labels", "{}"),
    ("annotations", "{}"),
    ("ownerReferences", "[]"),
    ("finalizers", "[]"),
    ("generateName", "''"),
];

/// Every field of [`METADATA_KEPT`] is the same before and after the change.
pub fn metadata_unchanged() -> String {
    METADATA_KEPT
        .iter()
        .map(|(field, absent)| {
            format!(
                "(has(object.metadata.{field}) ? object.metadata.{field} : {absent}) == \
                 (has(oldObject.metadata.{field}) ? oldObject.metadata.{field} : {absent})"
            )
        })
        .collect::<Vec<_>>()
        .join(" && ")
}

/// Applies only to the lists-refresh ServiceAccount (the match condition).
pub fn match_condition() -> String {
    format!(
        "request.userInfo.username == '{}'",
        lists_refresh_username()
    )
}

pub fn policy() -> Value {
    let refused = format!(
        "{} may change only spec.pluginConfig.lists and spec.pluginConfig.agents on WasmPlugin {NAMESPACE}/{WASM_PLUGIN}",
        lists_refresh_username()
    );
    let kept = METADATA_KEPT
        .iter()
        .map(|(field, _)| format!("metadata.{field}"))
        .collect::<Vec<_>>()
        .join(", ");
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY, "labels": labels("lists")},
        "spec": {
            // An expression that cannot be evaluated refuses the change: this is a guard.
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["extensions.istio.io"],
                    "apiVersions": ["*"],
                    "resources": ["wasmplugins"],
                    "resourceNames": [WASM_PLUGIN],
                    // Its Role grants get and patch only: a patch is an UPDATE at admission.
                    "operations": ["UPDATE"],
                }],
            },
            "matchConditions": [{
                "name": "only-the-lists-refresh-service-account",
                "expression": match_condition(),
            }],
            "validations": [
                {"expression": SPEC_UNCHANGED, "message": format!("{refused} (spec)"), "reason": "Forbidden"},
                {"expression": PLUGIN_CONFIG_UNCHANGED_BUT_LISTS,
                 "message": format!("{refused} (spec.pluginConfig)"), "reason": "Forbidden"},
                {"expression": metadata_unchanged(),
                 "message": format!("{refused} ({kept})"),
                 "reason": "Forbidden"},
            ],
        },
    })
}

/// The policy applies in the edge namespace only, and refuses (Deny) what it does not allow.
pub fn binding() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY, "labels": labels("lists")},
        "spec": {
            "policyName": POLICY,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": NAMESPACE,
            }}},
        },
    })
}
