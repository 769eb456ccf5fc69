//! The scheduled etcd backup as the platform layer renders it, on a real API server: the real
//! render-platform's objects applied with the real kubectl, the Object Storage Secret made from
//! the environment, RBAC asked of the API server for the job's ServiceAccount, the pod template
//! admitted by the namespace's restricted Pod Security, and the control planes' Talos patch
//! naming the namespace and the role the objects use.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use testkit::control_plane::ControlPlane;
use testkit::process::text;

const TEST: &str = "etcd_backup_objects";
const RECIPIENT: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";
const JOB: &str = "system:serviceaccount:etcd-backup:etcd-backup";

/// Talos's ServiceAccount CRD as Talos v1.13.9 registers it
/// (internal/app/machined/pkg/controllers/k8s/internal/k8stemplates/testdata/
/// talos-service-account-crd.yaml): Talos serves it on the cluster, no chart brings it.
const TALOS_SERVICE_ACCOUNT_CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "serviceaccounts.talos.dev"},
  "spec": {"group": "talos.dev", "scope": "Namespaced",
    "names": {"kind": "ServiceAccount", "listKind": "ServiceAccountList",
              "plural": "serviceaccounts", "singular": "serviceaccount", "shortNames": ["tsa"]},
    "versions": [{"name": "v1alpha1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"roles": {"type": "array", "items": {"type": "string"}}}},
        "status": {"type": "object", "properties": {"failureReason": {"type": "string"}}}}}}}]}
}"#;

fn repo() -> PathBuf {
    testkit::workspace::root()
}

/// The example platform config with a backup and the example record with its image, rendered
/// by the real render-platform into `dir/rendered`.
pub(crate) fn render_with_backup(dir: &Path) {
    let config_text = fs::read_to_string(repo().join("config/platform.example.json")).unwrap();
    let mut config: Value = serde_json::from_str(&config_text).unwrap();
    config["etcd_backup"] = json!({
        "bucket": "edge-par-etcd-backups", "region": "fr-par", "age_recipient": RECIPIENT,
        "keep": 48, "schedule": "23 * * * *",
    });
    fs::write(dir.join("platform.json"), config.to_string()).unwrap();
    let record_text =
        fs::read_to_string(repo().join("config/published-images.example.json")).unwrap();
    let mut record: Value = serde_json::from_str(&record_text).unwrap();
    record["etcd_backup"] = json!({
        "repository": "rg.fr-par.scw.cloud/edgepop/etcd-backup", "tag": "0.1.0",
        "digest": format!("sha256:{}", "4".repeat(64)),
    });
    fs::write(dir.join("published-images.json"), record.to_string()).unwrap();
    let out = Command::new(testkit::workspace::bin("render-platform"))
        .arg("--config")
        .arg(dir.join("platform.json"))
        .arg("--inputs")
        .arg(repo().join("config/platform-inputs.example.json"))
        .arg("--published-images")
        .arg(dir.join("published-images.json"))
        .arg("--out-dir")
        .arg(dir.join("rendered"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// The backup's objects as [`render_with_backup`] renders them.
fn rendered(dir: &Path) -> Value {
    render_with_backup(dir);
    let list = fs::read_to_string(dir.join("rendered/etcd-backup.json")).unwrap();
    serde_json::from_str(&list).unwrap()
}

/// The Secret render-platform makes from `env`, applied; what it printed.
fn environment_secret(plane: &ControlPlane, env: &[(&str, &str)]) -> String {
    let out = Command::new(testkit::workspace::bin("render-platform"))
        .env_clear()
        .envs(env.iter().copied())
        .args([
            "--environment-secret",
            "etcd-backup/etcd-backup-object-storage",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = testkit::process::success_stdout(&out);
    if !printed.is_empty() {
        plane.kubectl_ok(&["apply", "--server-side", "-f", "-"], &printed);
    }
    printed
}

fn can(plane: &ControlPlane, args: &[&str]) -> bool {
    let out = plane
        .kubectl()
        .args(["auth", "can-i", "--as", JOB])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

#[test]
fn the_rendered_backup_is_admitted_reads_one_endpoint_slice_and_gets_its_keys_from_the_environment()
{
    let Some(plane) = ControlPlane::shared(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let list = rendered(dir.path());
    plane.kubectl_ok(
        &["apply", "--server-side", "-f", "-"],
        TALOS_SERVICE_ACCOUNT_CRD,
    );
    plane.kubectl_ok(
        &[
            "wait",
            "--for=condition=Established",
            "crd/serviceaccounts.talos.dev",
            "--timeout=60s",
        ],
        "",
    );
    plane.kubectl_ok(&["apply", "--server-side", "-f", "-"], &list.to_string());

    assert_the_keys_come_from_the_environment(plane);
    assert_the_job_reads_one_endpoint_slice_and_no_secret(plane);
    assert_pod_security_admits_the_job_alone(plane, &list);
    assert_the_talos_patch_grants_what_the_objects_use(&list);
}

/// None of the variables given keeps the cluster's Secret (here none yet); all three make it.
fn assert_the_keys_come_from_the_environment(plane: &ControlPlane) {
    assert_eq!(environment_secret(plane, &[]), "");
    let printed = environment_secret(
        plane,
        &[
            ("EDGEPOP_BACKUP_ACCESS_KEY", "SCWBACKUPXXXXXXXXXXX"),
            (
                "EDGEPOP_BACKUP_SECRET_KEY",
                "33333333-3333-4333-8333-333333333333",
            ),
            (
                "EDGEPOP_BACKUP_PROJECT_ID",
                "22222222-2222-4222-8222-222222222222",
            ),
        ],
    );
    assert!(
        !printed.contains("33333333-3333"),
        "values are base64: {printed}"
    );
    let keys = plane.kubectl_ok(
        &[
            "get",
            "secret",
            "-n",
            "etcd-backup",
            "etcd-backup-object-storage",
            "-o",
            "jsonpath={.data}",
        ],
        "",
    );
    let keys: Value = serde_json::from_str(&keys).unwrap();
    let mut names: Vec<&String> = keys.as_object().unwrap().keys().collect();
    names.sort();
    assert_eq!(
        names,
        ["SCW_ACCESS_KEY", "SCW_DEFAULT_PROJECT_ID", "SCW_SECRET_KEY"]
    );
}

/// What the job's ServiceAccount may do, as the API server's RBAC answers.
fn assert_the_job_reads_one_endpoint_slice_and_no_secret(plane: &ControlPlane) {
    assert!(can(
        plane,
        &[
            "get",
            "endpointslices.discovery.k8s.io/talos-ipv4",
            "-n",
            "default"
        ]
    ));
    assert!(!can(
        plane,
        &[
            "get",
            "endpointslices.discovery.k8s.io/kubernetes",
            "-n",
            "default"
        ]
    ));
    assert!(!can(
        plane,
        &["list", "endpointslices.discovery.k8s.io", "-n", "default"]
    ));
    assert!(!can(plane, &["get", "secrets", "-n", "etcd-backup"]));
}

/// The CronJob's pod, created (server dry run) in its namespace, which enforces the restricted
/// standard; the same pod as root is refused there, so the admission is not a formality.
fn assert_pod_security_admits_the_job_alone(plane: &ControlPlane, list: &Value) {
    let job = testkit::json::element(&list["items"], "/kind", "CronJob");
    let template = &job["spec"]["jobTemplate"]["spec"]["template"];
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "etcd-backup-admission", "namespace": "etcd-backup"},
        "spec": template["spec"],
    });
    plane.kubectl_ok(&["create", "--dry-run=server", "-f", "-"], &pod.to_string());
    let mut root = pod.clone();
    root["spec"]["securityContext"]["runAsNonRoot"] = json!(false);
    root["spec"]["securityContext"]["runAsUser"] = json!(0);
    let out = testkit::process::run_with_stdin(
        plane
            .kubectl()
            .args(["create", "--dry-run=server", "-f", "-"]),
        root.to_string().as_bytes(),
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("violates PodSecurity \"restricted"),
        "{}",
        text(&out)
    );
}

/// The control planes' patch admits exactly the namespace and the role the objects use.
fn assert_the_talos_patch_grants_what_the_objects_use(list: &Value) {
    let patch = repo().join("talos/patches/65-talos-api-access.controlplane.yaml");
    let patch: Value = serde_norway::from_str(&fs::read_to_string(patch).unwrap()).unwrap();
    let access = &patch["machine"]["features"]["kubernetesTalosAPIAccess"];
    assert_eq!(access["enabled"], true);
    let talos_account = testkit::json::element(&list["items"], "/apiVersion", "talos.dev/v1alpha1");
    assert_eq!(
        access["allowedKubernetesNamespaces"],
        json!([talos_account["metadata"]["namespace"]])
    );
    assert_eq!(access["allowedRoles"], talos_account["spec"]["roles"]);
}
