//! The scheduled etcd backup (the platform config's `etcd_backup`): a CronJob running
//! `etcd-backup` in its own namespace, the only one the control planes' Talos API access admits
//! (talos/patches/65-talos-api-access.controlplane.yaml).
//!
//! - a Talos `ServiceAccount` (talos.dev/v1alpha1) with the one role `os:etcd:backup`: Talos
//!   answers it with a Secret of the same name whose `config` is a talosconfig for the `talos`
//!   Service (internal/app/machined/pkg/controllers/kubeaccess/serviceaccount/crd_controller.go
//!   at v1.13.9), mounted where talosctl looks in a pod (`/var/run/secrets/talos.dev`);
//! - a Kubernetes ServiceAccount whose Role, in `default`, may `get` the EndpointSlice
//!   `talos-ipv4` and nothing else: the job reads the control planes' addresses there;
//! - the Secret `etcd-backup-object-storage` with the Object Storage keys, which the platform
//!   apply makes from the operator's environment: never rendered, never in git.

use serde::Deserialize;
use serde_json::{Value, json};

/// The namespace the control planes' patch admits, and the job's names.
pub const NAMESPACE: &str = "etcd-backup";
pub const NAME: &str = "etcd-backup";
/// The one Talos role the job's certificate carries (the patch allows only it).
pub const TALOS_ROLE: &str = "os:etcd:backup";
/// The Secret holding `SCW_ACCESS_KEY`, `SCW_SECRET_KEY` and `SCW_DEFAULT_PROJECT_ID`.
pub const OBJECT_STORAGE_SECRET: &str = "etcd-backup-object-storage";
/// Talos's EndpointSlice of its API, which the Role lets the job read.
const TALOS_ENDPOINTS: &str = "talos-ipv4";

/// `etcd_backup` in `config/platform.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdBackupConfig {
    /// The Object Storage bucket the backups go to. A bucket of its own, made outside edgepop,
    /// outlives `make destroy` (which deletes the cluster's own bucket and what it holds).
    pub bucket: String,
    /// The bucket's region.
    pub region: String,
    /// The folder of the bucket; the cluster's name by default.
    #[serde(default)]
    pub prefix: Option<String>,
    /// The age public key the snapshots are encrypted to; its private half stays off the
    /// cluster.
    pub age_recipient: String,
    /// How many backups to keep (the oldest beyond are deleted after each upload).
    pub keep: usize,
    /// When to run, in cron's five fields (UTC).
    pub schedule: String,
}

/// The rules the types cannot say; `Err((field, why))`.
pub fn check(config: &EtcdBackupConfig) -> Result<(), (&'static str, String)> {
    use pop_common::backup::{check_age_recipient, check_bucket_name, check_object_prefix};
    check_bucket_name(&config.bucket).map_err(|m| ("etcd_backup.bucket", m))?;
    if !pop_common::records::is_dns_label(&config.region) {
        return Err((
            "etcd_backup.region",
            format!(
                "{:?} is not a region (fr-par, nl-ams, pl-waw)",
                config.region
            ),
        ));
    }
    if let Some(prefix) = &config.prefix {
        check_object_prefix(prefix).map_err(|m| ("etcd_backup.prefix", m))?;
    }
    check_age_recipient(&config.age_recipient).map_err(|m| ("etcd_backup.age_recipient", m))?;
    if config.keep == 0 {
        return Err((
            "etcd_backup.keep",
            "0 would delete each backup as it is made: keep at least 1".into(),
        ));
    }
    let fields: Vec<&str> = config.schedule.split_whitespace().collect();
    let cron_field = |f: &&str| {
        f.bytes()
            .all(|b| b.is_ascii_digit() || b"*,-/".contains(&b))
    };
    if fields.len() != 5 || !fields.iter().all(cron_field) {
        return Err((
            "etcd_backup.schedule",
            format!(
                "{:?} is not a cron schedule of five numeric fields (minute hour day month \
                 weekday, such as \"23 * * * *\")",
                config.schedule
            ),
        ));
    }
    Ok(())
}

/// `namespace/name` of the Secret the apply makes from the operator's environment (the
/// component's `from_environment`).
pub const SECRET_REF: &str = "etcd-backup/etcd-backup-object-storage";

/// The operator's environment variables that hold the job's Object Storage keys, and the key
/// of the Secret (the variable the job reads) each one fills. An API key of an IAM application
/// that may only read, write and delete objects, not the operator's own key.
pub const SECRET_FROM_ENVIRONMENT: [(&str, &str); 3] = [
    ("EDGEPOP_BACKUP_ACCESS_KEY", "SCW_ACCESS_KEY"),
    ("EDGEPOP_BACKUP_SECRET_KEY", "SCW_SECRET_KEY"),
    ("EDGEPOP_BACKUP_PROJECT_ID", "SCW_DEFAULT_PROJECT_ID"),
];

/// The Secret `reference` (`namespace/name`) made from the environment: `Ok(None)` when none of
/// its variables is set (the apply keeps the Secret in the cluster), an error naming the
/// variables missing when only some are, or for a reference no component declares.
pub fn environment_secret(
    reference: &str,
    env: &pop_common::tool::Env,
) -> Result<Option<Value>, String> {
    if reference != SECRET_REF {
        return Err(format!(
            "no component makes the Secret {reference} from the environment (known: {SECRET_REF})"
        ));
    }
    let mut data = serde_json::Map::new();
    let mut missing = Vec::new();
    for (variable, key) in SECRET_FROM_ENVIRONMENT {
        match env.non_empty(variable) {
            Some(value) => {
                use base64::Engine as _;
                let encoded = base64::engine::general_purpose::STANDARD.encode(value);
                data.insert(key.to_owned(), Value::String(encoded));
            }
            None => missing.push(variable),
        }
    }
    if missing.len() == SECRET_FROM_ENVIRONMENT.len() {
        return Ok(None);
    }
    if !missing.is_empty() {
        return Err(format!(
            "{} set but not {}: the etcd backup's Object Storage key needs all three",
            SECRET_FROM_ENVIRONMENT
                .iter()
                .map(|(v, _)| *v)
                .filter(|v| !missing.contains(v))
                .collect::<Vec<_>>()
                .join(", "),
            missing.join(", ")
        ));
    }
    Ok(Some(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(OBJECT_STORAGE_SECRET, NAMESPACE),
        "type": "Opaque",
        "data": data,
    })))
}

fn labels() -> Value {
    json!({
        "app.kubernetes.io/part-of": "edgepop",
        "app.kubernetes.io/managed-by": "render-platform",
        "app.kubernetes.io/component": NAME,
    })
}

fn meta(name: &str, namespace: &str) -> Value {
    json!({"name": name, "namespace": namespace, "labels": labels()})
}

/// The objects of a checked config, for the cluster `cluster` and the job's image (pinned by
/// digest).
pub fn objects(config: &EtcdBackupConfig, cluster: &str, image: &str) -> Vec<Value> {
    let binding = format!("{NAME}-talos-endpoints");
    vec![
        json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            // The restricted Pod Security Standard: the job needs nothing more.
            "metadata": {"name": NAMESPACE, "labels": {
                "app.kubernetes.io/part-of": "edgepop",
                "app.kubernetes.io/managed-by": "render-platform",
                "app.kubernetes.io/component": NAME,
                "pod-security.kubernetes.io/enforce": "restricted",
            }},
        }),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(NAME, NAMESPACE)}),
        json!({
            "apiVersion": "talos.dev/v1alpha1",
            "kind": "ServiceAccount",
            "metadata": meta(NAME, NAMESPACE),
            "spec": {"roles": [TALOS_ROLE]},
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(&binding, "default"),
            "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                       "resourceNames": [TALOS_ENDPOINTS], "verbs": ["get"]}],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(&binding, "default"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": binding},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        }),
        cron_job(config, cluster, image),
    ]
}

fn cron_job(config: &EtcdBackupConfig, cluster: &str, image: &str) -> Value {
    let mut args = vec![
        format!("--cluster={cluster}"),
        format!("--bucket={}", config.bucket),
        format!("--region={}", config.region),
        format!("--age-recipient={}", config.age_recipient),
        format!("--keep={}", config.keep),
    ];
    if let Some(prefix) = &config.prefix {
        args.push(format!("--prefix={prefix}"));
    }
    let pod = json!({
        "metadata": {"labels": labels()},
        "spec": {
            "serviceAccountName": NAME,
            "restartPolicy": "Never",
            "securityContext": pop_common::pod_security::restricted_pod(),
            "containers": [{
                "name": NAME,
                "image": image,
                "command": ["etcd-backup"],
                "args": args,
                "envFrom": [{"secretRef": {"name": OBJECT_STORAGE_SECRET}}],
                "resources": {
                    "requests": {"cpu": "50m", "memory": "64Mi"},
                    "limits": {"memory": "512Mi"},
                },
                "securityContext": pop_common::pod_security::restricted_container(),
                "volumeMounts": [
                    {"name": "talos", "mountPath": "/var/run/secrets/talos.dev",
                     "readOnly": true},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
            }],
            "volumes": [
                {"name": "talos", "secret": {"secretName": NAME}},
                // The snapshot and its encrypted copy: etcd's default quota is
                // 2 GiB, so twice that at most.
                {"name": "tmp", "emptyDir": {"sizeLimit": "4Gi"}},
            ],
        },
    });
    let mut job =
        pop_common::cron_job::cron_job(meta(NAME, NAMESPACE), &config.schedule, 1800, pod);
    // The schedule is the operator's, read in UTC whatever the controller manager's zone.
    job["spec"]["timeZone"] = json!("Etc/UTC");
    job
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::{Config, Error, Profile, Target, run};

    const RECIPIENT: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";
    const DIGEST: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";

    fn example(dir: &Path) -> PathBuf {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
        let text = std::fs::read_to_string(root.join("platform.example.json")).unwrap();
        let mut config: Value = serde_json::from_str(&text).unwrap();
        config["etcd_backup"] = json!({
            "bucket": "edge-par-etcd-backups", "region": "fr-par", "age_recipient": RECIPIENT,
            "keep": 48, "schedule": "23 * * * *",
        });
        let path = dir.join("platform.json");
        std::fs::write(&path, config.to_string()).unwrap();
        path
    }

    fn published(dir: &Path, with_backup: bool) -> PathBuf {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
        let text = std::fs::read_to_string(root.join("published-images.example.json")).unwrap();
        let mut record: Value = serde_json::from_str(&text).unwrap();
        if with_backup {
            record["etcd_backup"] = json!({
                "repository": "rg.fr-par.scw.cloud/edgepop/etcd-backup", "tag": "0.1.0",
                "digest": DIGEST,
            });
        }
        let path = dir.join("published-images.json");
        std::fs::write(&path, record.to_string()).unwrap();
        path
    }

    fn render(dir: &Path, published: Option<PathBuf>) -> Result<(), Error> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
        let config = Config::Render {
            profile: Profile::Edge,
            config: example(dir),
            target: Target::Dir(dir.join("rendered")),
            inputs: Some(root.join("platform-inputs.example.json")),
            published,
            cluster: None,
        };
        run(&config, std::io::empty(), Vec::new())
    }

    #[test]
    fn a_configured_backup_renders_its_objects_last_in_the_plan_with_the_published_image() {
        let dir = tempfile::tempdir().unwrap();
        render(dir.path(), Some(published(dir.path(), true))).unwrap();
        let rendered = dir.path().join("rendered");
        let plan = std::fs::read_to_string(rendered.join(crate::profile::PLAN_FILE)).unwrap();
        let last = plan.lines().last().unwrap();
        assert!(
            last.starts_with("etcd-backup\tobjects\tetcd-backup\t"),
            "{last}"
        );
        let text = std::fs::read_to_string(rendered.join("etcd-backup.json")).unwrap();
        let list: Value = serde_json::from_str(&text).unwrap();
        let kinds: Vec<(&str, &str)> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap(),
                    o["apiVersion"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("Namespace", "v1"),
                ("ServiceAccount", "v1"),
                ("ServiceAccount", "talos.dev/v1alpha1"),
                ("Role", "rbac.authorization.k8s.io/v1"),
                ("RoleBinding", "rbac.authorization.k8s.io/v1"),
                ("CronJob", "batch/v1"),
            ]
        );
        let pod = &list["items"][5]["spec"]["jobTemplate"]["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        assert_eq!(
            container["image"],
            format!("rg.fr-par.scw.cloud/edgepop/etcd-backup@{DIGEST}")
        );
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(
            args,
            [
                "--cluster=edge-par",
                "--bucket=edge-par-etcd-backups",
                "--region=fr-par",
                &format!("--age-recipient={RECIPIENT}"),
                "--keep=48",
            ]
        );
        // No key in the rendered objects: they come from the Secret made at apply time.
        assert!(!text.contains("SCW_SECRET_KEY"), "{text}");
        assert_eq!(
            container["envFrom"][0]["secretRef"]["name"],
            OBJECT_STORAGE_SECRET
        );
    }

    #[test]
    fn without_the_record_or_its_backup_image_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let err = render(dir.path(), None).unwrap_err();
        assert!(matches!(err, Error::PublishedImages), "{err}");
        let err = render(dir.path(), Some(published(dir.path(), false)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("published-images.json") && err.contains("etcd_backup"),
            "{err}"
        );
        // An image pushed somewhere else than the record's registry.
        let path = published(dir.path(), true);
        let mut record: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        record["etcd_backup"]["repository"] = json!("docker.io/someone/etcd-backup");
        std::fs::write(&path, record.to_string()).unwrap();
        let err = render(dir.path(), Some(path)).unwrap_err().to_string();
        assert!(
            err.contains("etcd_backup.repository") && err.contains("is outside"),
            "{err}"
        );
        assert!(!dir.path().join("rendered").exists());
    }

    #[test]
    fn every_bad_field_is_refused_by_its_name() {
        let good = EtcdBackupConfig {
            bucket: "edge-par-etcd-backups".into(),
            region: "fr-par".into(),
            prefix: None,
            age_recipient: RECIPIENT.into(),
            keep: 48,
            schedule: "23 * * * *".into(),
        };
        assert_eq!(check(&good), Ok(()));
        type Spoil = fn(&mut EtcdBackupConfig);
        let cases: [(Spoil, &str); 6] = [
            (|c| c.bucket = "Backups".into(), "etcd_backup.bucket"),
            (|c| c.region = "FR PAR".into(), "etcd_backup.region"),
            (|c| c.prefix = Some("a//b".into()), "etcd_backup.prefix"),
            (
                |c| c.age_recipient = "AGE-SECRET-KEY-1X".into(),
                "etcd_backup.age_recipient",
            ),
            (|c| c.keep = 0, "etcd_backup.keep"),
            (|c| c.schedule = "@hourly".into(), "etcd_backup.schedule"),
        ];
        for (spoil, field) in cases {
            let mut config = good.clone();
            spoil(&mut config);
            assert_eq!(check(&config).map_err(|(f, _)| f), Err(field));
        }
    }

    #[test]
    fn the_object_storage_secret_is_made_from_all_three_variables_or_left_as_it_is() {
        use pop_common::tool::Env;
        let env = |pairs: &[(&str, &str)]| Env::from_pairs(pairs.iter().copied());
        let all = env(&[
            ("EDGEPOP_BACKUP_ACCESS_KEY", "SCWBACKUPXXXXXXXXXXX"),
            (
                "EDGEPOP_BACKUP_SECRET_KEY",
                "33333333-3333-4333-8333-333333333333",
            ),
            (
                "EDGEPOP_BACKUP_PROJECT_ID",
                "22222222-2222-4222-8222-222222222222",
            ),
        ]);
        assert_eq!(SECRET_REF, format!("{NAMESPACE}/{OBJECT_STORAGE_SECRET}"));
        let secret = environment_secret(SECRET_REF, &all).unwrap().unwrap();
        assert_eq!(secret["metadata"]["namespace"], NAMESPACE);
        assert_eq!(secret["metadata"]["name"], OBJECT_STORAGE_SECRET);
        assert_eq!(
            secret["data"]["SCW_SECRET_KEY"],
            "MzMzMzMzMzMtMzMzMy00MzMzLTgzMzMtMzMzMzMzMzMzMzMz"
        );
        assert_eq!(secret["data"].as_object().unwrap().len(), 3);
        assert_eq!(environment_secret(SECRET_REF, &env(&[])), Ok(None));
        let partial = env(&[("EDGEPOP_BACKUP_ACCESS_KEY", "SCWBACKUPXXXXXXXXXXX")]);
        let err = environment_secret(SECRET_REF, &partial).unwrap_err();
        assert!(
            err.contains("EDGEPOP_BACKUP_ACCESS_KEY set but not EDGEPOP_BACKUP_SECRET_KEY, EDGEPOP_BACKUP_PROJECT_ID"),
            "{err}"
        );
        let err = environment_secret("edge/other", &all).unwrap_err();
        assert!(
            err.contains("no component makes the Secret edge/other"),
            "{err}"
        );
        let config = crate::Config::EnvironmentSecret(crate::cli::SecretObject(Some(secret)));
        assert!(!format!("{config:?}").contains("MzMz"));
    }
}
