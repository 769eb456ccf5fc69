//! Talos's machine-config schema (`../shared/talos/v1.13.9/schemas/config.schema.json`, JSON
//! Schema 2020-12, `additionalProperties: false` on every v1alpha1 object), shared by the tests
//! that validate patches and generated configs.

use std::fs;

use serde_json::{Value, json};

/// The schema twice: as Talos takes a document (one of every kind), and narrowed to the v1alpha1
/// document so an error names the exact path; and the whole schema, to narrow it to another kind.
pub struct Schemas {
    any_document: jsonschema::Validator,
    v1alpha1: jsonschema::Validator,
    full: Value,
}

/// The schemas, or a skip (a failure under CI) when ../shared is missing.
pub fn schemas(test: &str) -> Option<Schemas> {
    let shared = testkit::workspace::shared_dir(test)?;
    let path = shared.join("talos/v1.13.9/schemas/config.schema.json");
    let Ok(text) = fs::read_to_string(&path) else {
        testkit::skip_or_fail(test, &path.display().to_string());
        return None;
    };
    let full: Value = serde_json::from_str(&text).unwrap();
    Some(Schemas {
        any_document: build(&full),
        v1alpha1: build(&narrowed(&full, "v1alpha1.Config")),
        full,
    })
}

fn build(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(schema)
        .unwrap()
}

/// The schema of one document kind (a `$defs` entry), so an error names the exact path.
fn narrowed(full: &Value, definition: &str) -> Value {
    let mut narrowed = full.clone();
    let object = narrowed.as_object_mut().unwrap();
    object.remove("oneOf");
    object.insert("$ref".into(), json!(format!("#/$defs/{definition}")));
    narrowed
}

impl Schemas {
    /// Every error, each with the path of the offending value; empty when Talos accepts it.
    pub fn errors(&self, document: &Value) -> Vec<String> {
        self.errors_against(&self.v1alpha1, document)
    }

    /// The errors `narrowed` finds, each with its path; then whether Talos takes it at all.
    fn errors_against(&self, narrowed: &jsonschema::Validator, document: &Value) -> Vec<String> {
        let mut errors: Vec<String> = narrowed
            .iter_errors(document)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        if errors.is_empty() && !self.any_document.is_valid(document) {
            errors.push("not exactly one of Talos's document kinds".into());
        }
        errors
    }

    /// Every error of a document of another kind than v1alpha1, against its own definition
    /// (`network.RuleConfigV1Alpha1`...); empty when Talos accepts it.
    pub fn document_errors(&self, definition: &str, document: &Value) -> Vec<String> {
        assert!(
            self.full["$defs"].get(definition).is_some(),
            "no {definition} in Talos's schema"
        );
        self.errors_against(&build(&narrowed(&self.full, definition)), document)
    }
}
