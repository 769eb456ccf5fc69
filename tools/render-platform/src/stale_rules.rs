//! Apply time: the worker's firewall rules the render no longer produces, deleted.
//!
//! `talosctl patch machineconfig` adds or merges documents by (apiVersion, kind, name) and never
//! removes one a patch leaves out (siderolabs/talos v1.13.9
//! pkg/machinery/config/configpatcher/strategic.go:31-78): a rule whose flow was renamed or
//! dropped would keep accepting (or, while auditing, dropping) traffic on its ports forever. A
//! document of the same key with `$patch: delete` removes it (same file, 53-71; the decoder takes
//! it from a patch, pkg/machinery/config/configpatcher/load.go:24). A delete for a document the
//! node does not hold is appended instead of failing, so deletes are made only for the documents
//! the node's active config holds, read with `talosctl get machineconfig v1alpha1 -o json`
//! (its `spec` is the config's YAML text: pkg/machinery/resources/config/machine_config.go:40-50,
//! cmd/talosctl/cmd/talos/output/json.go:41-74).
//!
//! Only the render's own rules are deleted: the names it gives ([`RULE_PREFIX`]), and the form
//! `<service>-<protocol>` of a declared flow, which rules had without the prefix. A rule the
//! operator added under another name stays.

use std::path::Path;

use pop_common::input::InputError;
use serde::Deserialize;
use serde_json::Value;

/// What every rule name the render gives starts with.
pub const RULE_PREFIX: &str = "edgepop-";

const RULE_KIND: &str = "NetworkRuleConfig";

/// The name the render gives a service's rule.
pub fn rule_name(service: &str, protocol: &str) -> String {
    format!("{RULE_PREFIX}{service}-{protocol}")
}

/// Whether a rule of this name is one the render wrote (and may delete).
fn is_rendered_name(name: &str) -> bool {
    name.starts_with(RULE_PREFIX)
        || flows::FLOWS
            .iter()
            .any(|f| name == format!("{}-{}", f.service, f.traffic.protocol()))
}

/// Where the node's config is read from, in errors.
pub const STDIN: &str = "<stdin>";

/// The rules the node holds, per `resource` (what `talosctl get machineconfig v1alpha1 -o json`
/// printed), that are the render's and not in `patch` (the rendered patch's text, read from
/// `patch_path`), in the node's order.
pub fn stale(resource: &Value, patch_path: &Path, patch: &str) -> Result<Vec<String>, InputError> {
    let stdin = Path::new(STDIN);
    let Some(config) = resource.get("spec").and_then(Value::as_str) else {
        return Err(InputError::field(
            stdin,
            "spec",
            "missing or not the machine config's text: give what `talosctl get machineconfig v1alpha1 -o json` prints for one node",
        ));
    };
    let held = rule_names(config).map_err(|e| InputError::field(stdin, "spec", e))?;
    let rendered = rule_names(patch).map_err(|e| InputError::field(patch_path, "documents", e))?;
    Ok(held
        .into_iter()
        .filter(|n| is_rendered_name(n) && !rendered.contains(n))
        .collect())
}

/// The patch that deletes these rules: a YAML stream, empty for none.
pub fn delete_documents(names: &[String]) -> String {
    names
        .iter()
        .map(|name| {
            // The name quoted as JSON, which YAML reads as the same string.
            format!(
                "apiVersion: v1alpha1\nkind: {RULE_KIND}\nname: {}\n$patch: delete\n",
                Value::from(name.as_str())
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The names of the `NetworkRuleConfig` documents of a YAML stream.
fn rule_names(text: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for document in serde_norway::Deserializer::from_str(text) {
        let value = Value::deserialize(document).map_err(|e| e.to_string())?;
        if value.get("kind").and_then(Value::as_str) != Some(RULE_KIND) {
            continue;
        }
        match value.get("name").and_then(Value::as_str) {
            Some(name) => names.push(name.to_owned()),
            None => return Err(format!("a {RULE_KIND} document has no name")),
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RENDERED: &str = "apiVersion: v1alpha1\nkind: NetworkDefaultActionConfig\ningress: accept\n\
        ---\napiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: edgepop-gateway-tcp\n\
        portSelector:\n  ports: [80]\n  protocol: tcp\ningress:\n  - subnet: 0.0.0.0/0\n";

    fn node(config: &str) -> Value {
        serde_json::json!({
            "node": "203.0.113.10",
            "metadata": {"id": "v1alpha1"},
            "spec": config,
        })
    }

    fn rule(name: &str) -> String {
        format!(
            "---\napiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: {name}\n\
             portSelector:\n  ports: [9]\n  protocol: udp\ningress:\n  - subnet: 10.0.0.0/8\n"
        )
    }

    #[test]
    fn only_the_render_s_rules_it_no_longer_produces_are_deleted() {
        let config = format!(
            "version: v1alpha1\nmachine:\n  type: worker\n{}{}{}{}",
            rule("edgepop-gateway-tcp"),
            rule("edgepop-retired-udp"),
            rule("kubelet-tcp"),
            rule("operator-ssh"),
        );
        let names = stale(&node(&config), Path::new("p.yaml"), RENDERED).unwrap();
        let out = delete_documents(&names);
        let deleted: Vec<Value> = serde_norway::Deserializer::from_str(&out)
            .map(|d| Value::deserialize(d).unwrap())
            .collect();
        assert_eq!(
            deleted,
            ["edgepop-retired-udp", "kubelet-tcp"].map(|n| serde_json::json!({
                "apiVersion": "v1alpha1",
                "kind": "NetworkRuleConfig",
                "name": n,
                "$patch": "delete",
            }))
        );
    }

    #[test]
    fn nothing_to_delete_prints_nothing_and_bad_input_names_the_field() {
        let config = format!("version: v1alpha1\n{}", rule("edgepop-gateway-tcp"));
        let names = stale(&node(&config), Path::new("p.yaml"), RENDERED).unwrap();
        assert!(names.is_empty(), "{names:?}");
        assert_eq!(delete_documents(&names), "");
        let err = stale(
            &serde_json::json!({"node": "x"}),
            Path::new("p.yaml"),
            RENDERED,
        )
        .unwrap_err();
        assert!(err.to_string().contains("spec"), "{err}");
        let err = stale(
            &node(&config),
            Path::new("p.yaml"),
            "kind: NetworkRuleConfig\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("p.yaml"), "{err}");
    }
}
