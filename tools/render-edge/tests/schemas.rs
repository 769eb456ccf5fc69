//! Every object of every committed example, validated strictly against the real upstream JSON
//! Schemas in `../shared/schemas` (Kubernetes 1.36, Gateway API v1.4.0 standard, cert-manager
//! v1.21.1, Istio 1.30.3): unknown fields are refused as the schemas say.
//!
//! `SCHEMAS_DIR` overrides the location. A missing schema directory skips the test on a user's
//! machine and fails it under CI (`EDGEPOP_REQUIRE_ALL=1`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use manifest_check::Validator;

use crate::api_server::{example, examples};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn schemas_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SCHEMAS_DIR") {
        return PathBuf::from(dir);
    }
    let shared = std::env::var_os("EDGEPOP_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("../shared"));
    shared.join("schemas")
}

#[test]
fn every_rendered_object_of_every_example_is_valid_against_the_upstream_schemas() {
    let dir = schemas_dir();
    if !dir.is_dir() {
        testkit::skip_or_fail(
            "every_rendered_object_is_valid",
            &format!("the schema directory {}", dir.display()),
        );
        return;
    }
    let validator = Validator::new(&dir).unwrap();
    let mut checked = 0;
    let mut problems = Vec::new();
    for (config, objects) in examples() {
        for object in objects {
            checked += 1;
            if let Err(violations) = validator.validate(&object) {
                problems.extend(violations.iter().map(|v| format!("{config}: {v}")));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 25, "only {checked} objects checked");
}

#[test]
fn the_validator_catches_a_typo_in_a_rendered_gateway() {
    // The check above is only worth something if it can fail: a misspelt field must be refused.
    let dir = schemas_dir();
    if !dir.is_dir() {
        testkit::skip_or_fail("the_validator_catches_a_typo", "the schema directory");
        return;
    }
    let mut objects = example("edge.example.json");
    let gateway = objects.iter_mut().find(|o| o["kind"] == "Gateway").unwrap();
    gateway["spec"]["listeners"][1]["tls"]["certificateRef"] = serde_json::json!([]);
    let violations = Validator::new(&dir).unwrap().validate(gateway).unwrap_err();
    assert!(
        violations
            .iter()
            .any(|v| v.to_string().contains("certificateRef")),
        "{violations:?}"
    );
}
