//! `talos/patches/`, rendered by `scw-infra talos-patches` from the example config as the infra
//! pipeline renders them: every patch document valid against Talos's own machine-config schema
//! (`../shared/talos/v1.13.9/schemas/config.schema.json`, JSON Schema 2020-12,
//! `additionalProperties: false` on every v1alpha1 object), and the configs the real
//! `talosctl gen config` (built at `TALOSCTL_VERSION`) makes from them, each worker's own made by
//! the real `talosctl machineconfig patch` from gen config's `worker.yaml`, accepted by the real
//! `talosctl validate`, mode cloud for the control planes and metal for each worker. Contract
//! checked: what Talos v1.13 accepts.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::talos_schema::{self, Schemas};
use serde_json::{Value, json};

const TEST: &str = "talos_patches";

/// What the example config renders into the placeholders.
const API_HOSTNAME: &str = "api.example.com";
/// Two workers of different names and disks: each must get its own.
const WORKERS: [(&str, &str); 2] = [
    ("edge-worker-1", "/dev/nvme0n1"),
    ("edge-worker-2", "/dev/sdb"),
];

/// The patches rendered into a temporary folder, with the example config and `workers`: the
/// shared ones as `(gen config flag, path)` in name order, and each worker's own by worker.
struct Rendered {
    dir: tempfile::TempDir,
    patches: Vec<(String, PathBuf)>,
    each_worker: Vec<(String, Vec<PathBuf>)>,
}

fn render(workers: &[(&str, &str)]) -> Rendered {
    let dir = tempfile::tempdir().unwrap();
    let example =
        fs::read_to_string(testkit::workspace::root().join("config/infra.example.json")).unwrap();
    let mut infra: Value = serde_json::from_str(&example).unwrap();
    let template = infra["workers"][0].clone();
    infra["workers"] = workers
        .iter()
        .map(|(name, disk)| {
            let mut worker = template.clone();
            worker["name"] = (*name).into();
            worker["install_disk"] = (*disk).into();
            worker
        })
        .collect();
    let config = dir.path().join("infra.json");
    fs::write(&config, infra.to_string()).unwrap();
    let out = Command::new(testkit::workspace::bin("scw-infra"))
        .arg("talos-patches")
        .arg("--config")
        .arg(&config)
        .arg("--patches")
        .arg(testkit::workspace::root().join("talos/patches"))
        .arg("--out-dir")
        .arg(dir.path().join("patches"))
        .output()
        .unwrap();
    let listing = testkit::process::success_stdout(&out);
    let mut patches = Vec::new();
    let mut each_worker: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for line in listing.lines() {
        let (label, path) = line.split_once('\t').unwrap();
        let path = PathBuf::from(path);
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("${"),
            "{}: a placeholder is left",
            path.display()
        );
        match label.strip_prefix("--each-worker=") {
            Some(name) => match each_worker.iter_mut().find(|(n, _)| n == name) {
                Some((_, paths)) => paths.push(path),
                None => each_worker.push((name.to_owned(), vec![path])),
            },
            None => patches.push((label.to_owned(), path)),
        }
    }
    assert!(patches.len() >= 7, "too few patches: {patches:?}");
    let names: Vec<&str> = each_worker.iter().map(|(n, _)| n.as_str()).collect();
    let wanted: Vec<&str> = workers.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, wanted, "{listing}");
    Rendered {
        dir,
        patches,
        each_worker,
    }
}

/// The worker's machine config as the infra layer makes it for the example config (the committed
/// patches rendered, the real `talosctl gen config`, then its own patches): what the worker holds
/// once it took it.
pub(crate) fn example_worker_config(talosctl: &Path) -> Vec<u8> {
    let rendered = render(&[("edge-worker-1", "/dev/sda")]);
    let out = gen_config(talosctl, rendered.dir.path(), "configs", &rendered.patches).unwrap();
    let (name, patches) = &rendered.each_worker[0];
    fs::read(worker_config(talosctl, &out, name, patches).unwrap()).unwrap()
}

/// `talosctl machineconfig patch` of gen config's `worker.yaml` in `out` with one worker's own
/// patches, as the infra pipeline makes `worker-<name>.yaml`; returns its path, or talosctl's
/// stderr when it refuses.
fn worker_config(
    talosctl: &Path,
    out: &Path,
    name: &str,
    patches: &[PathBuf],
) -> Result<PathBuf, String> {
    let config = out.join(format!("worker-{name}.yaml"));
    let mut command = Command::new(talosctl);
    command
        .args(["machineconfig", "patch"])
        .arg(out.join("worker.yaml"));
    for patch in patches {
        command.arg("--patch").arg(format!("@{}", patch.display()));
    }
    let result = command.arg("--output").arg(&config).output().unwrap();
    if result.status.success() {
        Ok(config)
    } else {
        Err(String::from_utf8_lossy(&result.stderr).into_owned())
    }
}

fn talosctl(test: &str) -> Option<PathBuf> {
    testkit::upstream::program(test, "talosctl")
}

/// `talosctl gen config` of the example cluster with `patches`, in a folder of `dir`; returns
/// the folder, or talosctl's stderr when it refuses.
fn gen_config(
    talosctl: &Path,
    dir: &Path,
    name: &str,
    patches: &[(String, PathBuf)],
) -> Result<PathBuf, String> {
    let secrets = dir.join("secrets.yaml");
    if !secrets.exists() {
        let out = Command::new(talosctl)
            .args(["gen", "secrets", "-o"])
            .arg(&secrets)
            .output()
            .unwrap();
        testkit::process::success_stdout(&out);
    }
    let out_dir = dir.join(name);
    let mut command = Command::new(talosctl);
    command
        .args(["gen", "config", "edge-par", "https://api.example.com:6443"])
        .arg("--with-secrets")
        .arg(&secrets)
        .args([
            "--talos-version",
            "v1.13.11",
            "--kubernetes-version",
            "v1.36.3",
        ]);
    for (flag, path) in patches {
        command.arg(flag).arg(format!("@{}", path.display()));
    }
    let out = command.arg("--output").arg(&out_dir).output().unwrap();
    if out.status.success() {
        Ok(out_dir)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `talosctl validate --strict` of `config` in `mode`: `Ok` or its complaint.
fn validate(talosctl: &Path, config: &Path, mode: &str) -> Result<(), String> {
    let out = Command::new(talosctl)
        .arg("validate")
        .arg("--config")
        .arg(config)
        .args(["--mode", mode, "--strict"])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn machine(dir: &Path, role: &str) -> Vec<Value> {
    talos_schema::documents(&fs::read_to_string(dir.join(format!("{role}.yaml"))).unwrap())
}

#[test]
fn every_rendered_patch_document_is_a_valid_talos_document() {
    let Some(schemas): Option<Schemas> = talos_schema::schemas(TEST) else {
        return;
    };
    let rendered = render(&WORKERS);
    let each_worker = rendered.each_worker.iter().flat_map(|(_, paths)| paths);
    for path in rendered
        .patches
        .iter()
        .map(|(_, path)| path)
        .chain(each_worker)
    {
        for document in talos_schema::documents(&fs::read_to_string(path).unwrap()) {
            let errors = schemas.any_kind_errors(&document);
            assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
        }
    }
}

#[test]
fn the_real_talosctl_makes_valid_configs_that_carry_what_the_platform_layer_relies_on() {
    let test = "the_real_talosctl_makes_valid_configs";
    let Some(talosctl) = talosctl(test) else {
        return;
    };
    let rendered = render(&WORKERS);
    let out = gen_config(&talosctl, rendered.dir.path(), "configs", &rendered.patches).unwrap();
    validate(&talosctl, &out.join("controlplane.yaml"), "cloud").unwrap();

    for role in ["controlplane", "worker"] {
        let documents = machine(&out, role);
        let config = talos_schema::document(&documents, "v1alpha1");
        // Cilium is the CNI and kube-proxy's replacement; KubePrism is its way to the API.
        assert_eq!(config["cluster"]["network"]["cni"]["name"], "none");
        assert_eq!(config["cluster"]["proxy"]["disabled"], true);
        assert_eq!(config["machine"]["features"]["kubePrism"]["enabled"], true);
        assert_eq!(config["machine"]["features"]["kubePrism"]["port"], 7445);
    }
    let documents = machine(&out, "controlplane");
    let control_plane = talos_schema::document(&documents, "v1alpha1");
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
    // The control planes keep gen config's own hostname document (auto: stable), and so does
    // the workers' common template, which no node takes as it is.
    for role in ["controlplane", "worker"] {
        let hostname = talos_schema::document(&machine(&out, role), "HostnameConfig").clone();
        assert_eq!(hostname["auto"], "stable", "{role}");
    }
    assert_each_worker_gets_its_own_valid_config(&talosctl, &rendered, &out);
}

/// Each worker's own config (gen config's template with its own patches, by the real
/// `machineconfig patch`) passes `validate` in metal mode and carries its own hostname and disk,
/// and what every worker shares.
fn assert_each_worker_gets_its_own_valid_config(talosctl: &Path, rendered: &Rendered, out: &Path) {
    for ((name, patches), (wanted_name, disk)) in rendered.each_worker.iter().zip(WORKERS) {
        assert_eq!(name, wanted_name);
        let config = worker_config(talosctl, out, name, patches).unwrap();
        validate(talosctl, &config, "metal").unwrap();
        let documents = talos_schema::documents(&fs::read_to_string(&config).unwrap());
        let worker = talos_schema::document(&documents, "v1alpha1");
        assert_eq!(worker["machine"]["install"]["disk"], disk, "{name}");
        assert!(
            worker["machine"]["install"]["image"]
                .as_str()
                .unwrap()
                .starts_with("factory.talos.dev/metal-installer/"),
            "{worker:#}"
        );
        assert_eq!(
            worker["machine"]["nodeLabels"]["edge.node.kubernetes.io/public"],
            "true"
        );
        assert!(worker["cluster"].get("apiServer").is_none(), "{worker:#}");
        // gen config for 1.13 writes `auto: stable`; the worker's own patch, merged by
        // machineconfig patch into that one document, turns it off and names it.
        let hostnames: Vec<&Value> = documents
            .iter()
            .filter(|d| d["kind"] == "HostnameConfig")
            .collect();
        assert_eq!(hostnames.len(), 1, "{name}: {hostnames:?}");
        assert_eq!(
            (&hostnames[0]["auto"], &hostnames[0]["hostname"]),
            (&json!("off"), &json!(name)),
            "{name}"
        );
    }
}

#[test]
fn a_misspelt_key_a_wrong_type_or_a_hostname_set_twice_is_refused_by_the_real_talosctl() {
    let test = "a_misspelt_key_a_wrong_type";
    let Some(talosctl) = talosctl(test) else {
        return;
    };
    let Some(schemas) = talos_schema::schemas(test) else {
        return;
    };
    let rendered = render(&WORKERS);
    let write = |name: &str, text: &str| {
        let path = rendered.dir.path().join(name);
        fs::write(&path, text).unwrap();
        path
    };
    // kubePrism spelt with a capital P: Talos would ignore nothing, it refuses the key.
    let misspelt = write(
        "misspelt.yaml",
        "machine:\n  features:\n    kubePRism:\n      enabled: true\n",
    );
    let wrong_type = write(
        "wrong-type.yaml",
        "machine:\n  features:\n    kubePrism:\n      port: \"7445x\"\n",
    );
    // A hostname next to gen config's `auto: stable`, without turning auto off.
    let twice = write(
        "twice.yaml",
        "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: edge-worker-1\n",
    );
    for (name, patch, needle) in [
        ("misspelt", &misspelt, "unknown keys found during decoding"),
        ("wrong-type", &wrong_type, "7445x"),
    ] {
        let patches = [("--config-patch".to_owned(), patch.clone())];
        let err = gen_config(&talosctl, rendered.dir.path(), name, &patches).unwrap_err();
        assert!(err.contains(needle), "{name}: {err}");
        // The schema says the same of the patch on its own.
        let document = &talos_schema::documents(&fs::read_to_string(patch).unwrap())[0];
        assert!(!schemas.any_kind_errors(document).is_empty(), "{name}");
    }
    let patches = [("--config-patch-worker".to_owned(), twice)];
    let refused = match gen_config(&talosctl, rendered.dir.path(), "twice", &patches) {
        Err(err) => err,
        Ok(out) => validate(&talosctl, &out.join("worker.yaml"), "metal").unwrap_err(),
    };
    assert!(
        refused.contains("'auto' and 'hostname' cannot be set at the same time"),
        "{refused}"
    );
}
