//! `talos/patches/`: every patch, and the control-plane and worker configs merged from them, valid
//! against Talos's own machine-config schema (`../shared/talos/v1.13.9/schemas/config.schema.json`,
//! JSON Schema 2020-12, `additionalProperties: false` on every v1alpha1 object, so an unknown or
//! misspelt key fails). Contract checked: what Talos v1.13 accepts as a v1alpha1 document.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::{Path, PathBuf};

use crate::talos_schema::schemas;
use serde_json::{Value, json};

const TEST: &str = "talos_patches";

/// The placeholders `pipelines/infra.sh` fills in, with example values.
const API_HOSTNAME: &str = "api.example.com";
const INSTALL_DISK: &str = "/dev/nvme0n1";

fn patches_dir() -> PathBuf {
    testkit::workspace::root().join("talos/patches")
}

/// Which nodes a patch applies to, from its name (`NN-name[.controlplane|.worker].yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    All,
    ControlPlane,
    Worker,
}

fn scope(path: &Path) -> Scope {
    let name = path.file_name().unwrap().to_str().unwrap();
    if name.ends_with(".controlplane.yaml") {
        Scope::ControlPlane
    } else if name.ends_with(".worker.yaml") {
        Scope::Worker
    } else {
        Scope::All
    }
}

/// The patches in the order talosctl receives them (name order).
fn patches() -> Vec<(PathBuf, Value)> {
    let mut paths: Vec<PathBuf> = fs::read_dir(patches_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 5, "too few patches: {paths:?}");
    paths
        .into_iter()
        .map(|path| {
            let text = fs::read_to_string(&path)
                .unwrap()
                .replace("${API_HOSTNAME}", API_HOSTNAME)
                .replace("${INSTALL_DISK}", INSTALL_DISK);
            assert!(
                !text.contains("${"),
                "{}: unknown placeholder",
                path.display()
            );
            let value: Value = serde_norway::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
            (path, value)
        })
        .collect()
}

/// Talos's merge of a v1alpha1 patch (pkg/machinery/config/merge): maps merge key by key, lists
/// are appended, scalars are replaced.
fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                match base.get_mut(key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (Value::Array(base), Value::Array(patch)) => base.extend(patch.iter().cloned()),
        (base, patch) => *base = patch.clone(),
    }
}

/// The skeleton talosctl gen config starts from (the fields these patches do not set), merged
/// with the patches of one role in name order.
fn merged(role: &str, patches: &[(PathBuf, Value)]) -> Value {
    let mut config = json!({
        "version": "v1alpha1",
        "machine": {"type": role, "install": {"disk": "/dev/sda", "wipe": false}},
        "cluster": {
            "clusterName": "edge-par",
            "controlPlane": {"endpoint": format!("https://{API_HOSTNAME}:6443")},
            "network": {"dnsDomain": "cluster.local"}
        }
    });
    for (path, patch) in patches {
        let applies = match scope(path) {
            Scope::All => true,
            Scope::ControlPlane => role == "controlplane",
            Scope::Worker => role == "worker",
        };
        if applies {
            merge(&mut config, patch);
        }
    }
    config
}

#[test]
fn every_patch_is_a_valid_talos_document() {
    let Some(schemas) = schemas(TEST) else { return };
    for (path, patch) in patches() {
        let errors = schemas.errors(&patch);
        assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
    }
}

#[test]
fn the_merged_configs_are_valid_and_carry_what_the_platform_layer_relies_on() {
    let Some(schemas) = schemas(TEST) else { return };
    let patches = patches();
    for role in ["controlplane", "worker"] {
        let config = merged(role, &patches);
        let errors = schemas.errors(&config);
        assert!(errors.is_empty(), "{role}: {errors:#?}");
        // Cilium is the CNI and kube-proxy's replacement; KubePrism is its way to the API.
        assert_eq!(config["cluster"]["network"]["cni"]["name"], "none");
        assert_eq!(config["cluster"]["proxy"]["disabled"], true);
        assert_eq!(config["machine"]["features"]["kubePrism"]["enabled"], true);
        assert_eq!(config["machine"]["features"]["kubePrism"]["port"], 7445);
    }
    let control_plane = merged("controlplane", &patches);
    let api = &control_plane["cluster"]["apiServer"];
    assert_eq!(api["certSANs"], json!([API_HOSTNAME]));
    let range = api["extraArgs"]["service-node-port-range"]
        .as_str()
        .unwrap();
    let (low, high) = range.split_once('-').unwrap();
    let (low, high): (u16, u16) = (low.parse().unwrap(), high.parse().unwrap());
    assert!(low <= 80 && 443 <= high, "{range} must cover 80 and 443");
    assert_eq!(
        control_plane["cluster"]["allowSchedulingOnControlPlanes"],
        false
    );
    assert_eq!(control_plane["machine"]["install"]["disk"], "/dev/sda");

    let worker = merged("worker", &patches);
    assert_eq!(worker["machine"]["install"]["disk"], INSTALL_DISK);
    assert_eq!(
        worker["machine"]["nodeLabels"]["edge.node.kubernetes.io/public"],
        "true"
    );
    assert!(worker["cluster"].get("apiServer").is_none(), "{worker:#}");
}

#[test]
fn a_misspelt_key_or_a_wrong_type_fails_validation() {
    let Some(schemas) = schemas(TEST) else { return };
    let patches = patches();
    let good = merged("controlplane", &patches);
    assert!(schemas.errors(&good).is_empty());

    // kubePrism spelt with a capital P: Talos would ignore nothing, it refuses the key.
    let mut misspelt = good.clone();
    let features = misspelt["machine"]["features"].as_object_mut().unwrap();
    let prism = features.remove("kubePrism").unwrap();
    features.insert("kubePRism".into(), prism);
    let errors = schemas.errors(&misspelt).join("\n");
    assert!(
        errors.contains("/machine/features") && errors.contains("kubePRism"),
        "{errors}"
    );

    let mut wrong_type = good.clone();
    wrong_type["machine"]["features"]["kubePrism"]["port"] = json!("7445");
    let errors = schemas.errors(&wrong_type).join("\n");
    assert!(
        errors.contains("/machine/features/kubePrism/port"),
        "{errors}"
    );

    let mut unknown_top = good;
    unknown_top["clusterr"] = json!({});
    assert!(!schemas.errors(&unknown_top).is_empty());
}
