//! The `onprem` profile end to end: `pipelines/platform.sh` on what render-platform renders from
//! `config/onprem.example.json` (its secrets file being the committed test-only SOPS fixture),
//! with the recording helm stand-in, the real sops decrypting with the test age key, and the
//! real kubectl against a real API server (testkit's control plane), on which the recording helm
//! makes the CRDs each chart brings, from ../shared/crds, when it installs the chart, and as the
//! chart brings them (an operator's once it runs). Every call is recorded in order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use render_platform::Profile;
use render_platform::profile::Kind;
use serde_json::Value;
use testkit::control_plane::ControlPlane;

const TEST: &str = "onprem_profile";

fn repo() -> PathBuf {
    testkit::workspace::root()
}

fn fixtures() -> PathBuf {
    repo().join("tests/fixtures/sops")
}

/// The clear values of the fixture (fake, test-only): none may appear in an argument, a log or
/// a file other than the 0600 one.
const CLEAR: [&str; 5] = [
    "test-only-ceph-user-key",
    "test-only-ovh-application-key",
    "test-only-ovh-application-secret",
    "test-only-ovh-consumer-key",
    "test-only-crowdsec-bouncer-key",
];

/// Records the call (arguments shell-quoted, and whether $TMPDIR holds anything as it starts: a
/// file of Secrets would be there), then runs the real program.
const WRAPPER: &str = r#"#!/usr/bin/env bash
set -euo pipefail
line=$(basename "$0")
for a in "$@"; do line+=" $(printf '%q' "$a")"; done
if [[ -n "$(ls -A "$TMPDIR")" ]]; then line+=" <TMPDIR holds $(ls -A "$TMPDIR")>"; fi
printf '%s\n' "$line" >> "$STANDIN_LOG"
exec "$REAL_PROGRAM_DIR/$(basename "$0")" "$@"
"#;

/// render-platform on the onprem example config, its `secrets` replaced, into `dir/rendered`;
/// returns the config as written (`dir/onprem.json`).
pub(crate) fn render_example(dir: &Path, secrets: &Path) -> Value {
    render_example_with(dir, secrets, |_| {})
}

/// [`render_example`], the config changed by `change` first.
pub(crate) fn render_example_with(
    dir: &Path,
    secrets: &Path,
    change: impl Fn(&mut Value),
) -> Value {
    let mut config: Value = serde_json::from_str(
        &fs::read_to_string(repo().join("config/onprem.example.json")).unwrap(),
    )
    .unwrap();
    config["secrets"] = Value::String(secrets.display().to_string());
    change(&mut config);
    let path = dir.join("onprem.json");
    fs::write(&path, config.to_string()).unwrap();
    let out = Command::new(testkit::workspace::bin("render-platform"))
        .args(["--profile", "onprem", "--config"])
        .arg(&path)
        .arg("--out-dir")
        .arg(dir.join("rendered"))
        .output()
        .unwrap();
    testkit::process::success_stdout(&out);
    config
}

struct World {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    /// STANDIN_HELM_CRDS: what each chart brings as CRDs, and how.
    chart_crds: String,
}

impl World {
    /// The rendered profile (with `secrets` as the config's SOPS file), a PATH of the recording
    /// helm and of wrappers of the real sops and kubectl, an empty $TMPDIR and $HOME.
    fn new(kubeconfig: &Path, secrets: &Path) -> Option<World> {
        let sops = testkit::upstream::program(TEST, "sops")?;
        let kubectl = testkit::upstream::program(TEST, "kubectl")?;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        let bin = dir.path().join("bin");
        for d in [
            &real,
            &bin,
            &dir.path().join("tmp"),
            &dir.path().join("home"),
        ] {
            fs::create_dir_all(d).unwrap();
        }
        std::os::unix::fs::symlink(&sops, real.join("sops")).unwrap();
        std::os::unix::fs::symlink(&kubectl, real.join("kubectl")).unwrap();
        for name in ["sops", "kubectl"] {
            fs::write(bin.join(name), WRAPPER).unwrap();
            fs::set_permissions(bin.join(name), fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::os::unix::fs::symlink(
            testkit::standin::path("recording").join("helm"),
            bin.join("helm"),
        )
        .unwrap();
        let world = World {
            dir,
            kubeconfig: kubeconfig.to_path_buf(),
            chart_crds: chart_crds()?,
        };
        world.render(secrets);
        fs::write(world.log(), "").unwrap();
        Some(world)
    }

    fn render(&self, secrets: &Path) {
        render_example(self.dir.path(), secrets);
    }

    fn rendered(&self) -> PathBuf {
        self.dir.path().join("rendered")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("calls.log")
    }

    fn tmp(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }

    fn platform(&self, mode: &str, env: &[(&str, &Path)]) -> Output {
        self.platform_with(mode, env, &[])
    }

    /// [`World::platform`] with variables that are not paths too.
    fn platform_with(&self, mode: &str, env: &[(&str, &Path)], vars: &[(&str, &str)]) -> Output {
        let path = format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap()
        );
        let mut cmd = Command::new("bash");
        cmd.arg(repo().join("pipelines/platform.sh"))
            .arg(mode)
            .env("PATH", path)
            .env("STANDIN_LOG", self.log())
            .env("REAL_PROGRAM_DIR", self.dir.path().join("real"))
            .env("RENDERED_DIR", self.rendered())
            .env(
                "RENDER_PLATFORM",
                testkit::workspace::bin("render-platform"),
            )
            .env("KUBECONFIG", &self.kubeconfig)
            .env("TMPDIR", self.tmp())
            .env("HOME", self.dir.path().join("home"))
            .env("XDG_CONFIG_HOME", self.dir.path().join("home"))
            // A bound, not a speed: under a full parallel test run the test apiserver rebuilds
            // its OpenAPI document on every CRD change, and deleting the profile's CRDs alone
            // has taken over two minutes there.
            .env("HELM_TIMEOUT", "300s")
            .env("STANDIN_HELM_CRDS", &self.chart_crds)
            .env("STANDIN_HELM_KUBECTL", self.dir.path().join("real/kubectl"))
            .env("STANDIN_HELM_STATE", self.dir.path().join("helm-state"))
            .env_remove("STANDIN_HELM_FAIL")
            .stdin(Stdio::null());
        without_sops_keys(&mut cmd);
        for (k, v) in env {
            cmd.env(k, v);
        }
        for (k, v) in vars {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    /// The calls since the last reset.
    fn take_calls(&self) -> Vec<String> {
        let text = fs::read_to_string(self.log()).unwrap();
        fs::write(self.log(), "").unwrap();
        text.lines().map(str::to_owned).collect()
    }
}

pub(crate) fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The test-only key's recipient (tests/fixtures/sops/README.md).
pub(crate) const TEST_RECIPIENT: &str =
    "age1nuhnt27e8q0ssp9qweqsy9tzfwccccv0g5p64agdm9ulng729q7q5tnw97";

pub(crate) fn key() -> PathBuf {
    fixtures().join("test-only.agekey")
}

/// Removes from `cmd` every variable sops finds an age key in, so that the user's own keys
/// never decrypt (or fail to decrypt) a fixture: only the keys a test gives reach sops.
pub(crate) fn without_sops_keys(cmd: &mut Command) {
    for variable in [
        "SOPS_AGE_KEY",
        "SOPS_AGE_KEY_FILE",
        "SOPS_AGE_KEY_CMD",
        "SOPS_AGE_SSH_PRIVATE_KEY_FILE",
    ] {
        cmd.env_remove(variable);
    }
}

/// The test-only SOPS fixture.
pub(crate) fn sops_file() -> PathBuf {
    fixtures().join("onprem.secrets.sops.yaml")
}

/// The component a changing call acts for, given the call before it: a helm release, the
/// rendered file applied, or the Secrets sops decrypted just before (not a chart's CRDs, applied
/// from stdin before its release).
fn acted_on(previous: Option<&String>, call: &str) -> Option<String> {
    let words: Vec<&str> = call.split(' ').collect();
    if call.starts_with("helm upgrade --install ") {
        return Some(words[3].to_owned());
    }
    if call.starts_with("kubectl apply ") && call.ends_with(" -f -") {
        return previous
            .is_some_and(|p| p.starts_with("sops "))
            .then(|| "secrets".to_owned());
    }
    if call.starts_with("kubectl apply ") {
        let file = words.windows(2).find(|w| w[0] == "-f")?[1];
        return Some(
            Path::new(file)
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        );
    }
    None
}

/// What the API server says of an object it refuses (server-side dry run).
fn refused(plane: &ControlPlane, object: &str) -> String {
    let out = testkit::process::run_with_stdin(
        plane
            .kubectl()
            .args(["apply", "--server-side", "--dry-run=server", "-f", "-"]),
        object.as_bytes(),
    );
    assert!(!out.status.success(), "accepted: {object}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What each chart brings as CRDs, from ../shared/crds, and how (the recording helm's
/// STANDIN_HELM_CRDS): Cilium's operator registers its own once it runs, the snapshot
/// controller's and cert-manager's charts render theirs as templates, Traefik's are its crds/.
fn chart_crds() -> Option<String> {
    let crds = testkit::workspace::shared_dir(TEST)?.join("crds");
    let every_file = |dir: &str| -> Vec<String> {
        let mut files: Vec<String> = testkit::files_under(&crds.join(dir))
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        files.sort();
        files
    };
    let brought = [
        (
            "cilium:operator",
            vec![
                crds.join("cilium-v1.20/v2/ciliumloadbalancerippools.yaml")
                    .display()
                    .to_string(),
                crds.join("cilium-v1.20/v2alpha1/ciliuml2announcementpolicies.yaml")
                    .display()
                    .to_string(),
            ],
        ),
        (
            "snapshot-controller:templates",
            every_file("external-snapshotter-v8.6.0"),
        ),
        ("traefik:folder", every_file("traefik-41.3.0")),
        (
            "cert-manager:templates",
            vec![crds.join("cert-manager-v1.21.1.yaml").display().to_string()],
        ),
    ];
    Some(
        brought
            .iter()
            .map(|(chart, files)| format!("{chart}={}", files.join(",")))
            .collect::<Vec<_>>()
            .join(";"),
    )
}

/// `kind/namespace/name resourceVersion` of every object the profile applied.
fn resource_versions(plane: &ControlPlane, world: &World) -> Vec<String> {
    let mut files: Vec<PathBuf> = Profile::Onprem
        .components()
        .iter()
        .filter(|c| matches!(c.kind, Kind::Objects { .. } | Kind::Namespaces))
        .map(|c| world.rendered().join(format!("{}.json", c.name)))
        .collect();
    files.sort();
    let mut versions = Vec::new();
    for file in files {
        versions.push(plane.kubectl_ok(
            &[
                "get",
                "-f",
                file.to_str().unwrap(),
                "-o",
                "jsonpath={range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name} {.metadata.resourceVersion}{\"\\n\"}{end}",
            ],
            "",
        ));
    }
    versions.push(plane.kubectl_ok(
        &[
            "get",
            "secrets",
            "-A",
            "-l",
            "app.kubernetes.io/component=secrets",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {.metadata.resourceVersion}{\"\\n\"}{end}",
        ],
        "",
    ));
    versions
}

fn secret_value(plane: &ControlPlane, namespace: &str, name: &str, key: &str) -> String {
    plane.kubectl_ok(
        &[
            "-n",
            namespace,
            "get",
            "secret",
            name,
            "-o",
            &format!("jsonpath={{.data.{key}}}"),
        ],
        "",
    )
}

/// Every file under `dir` whose text holds a clear value.
fn files_holding_a_secret(dir: &Path) -> Vec<PathBuf> {
    testkit::files_under(dir)
        .into_iter()
        .filter(|path| {
            !path.is_symlink()
                && fs::read_to_string(path).is_ok_and(|text| CLEAR.iter().any(|c| text.contains(c)))
        })
        .collect()
}

#[test]
fn apply_installs_the_profile_in_order_on_a_real_api_server_and_a_rerun_changes_nothing_but_hand_edits()
 {
    let Some(plane) = ControlPlane::start(TEST) else {
        return;
    };
    // A worker for the smoke test's pod (kwok runs it).
    plane.add_node("onprem-worker-1", &[]);
    let Some(world) = World::new(plane.kubeconfig(), &sops_file()) else {
        return;
    };
    let key = key();
    let env = [("SOPS_AGE_KEY_FILE", key.as_path())];

    let out = world.platform("apply", &env);
    assert!(out.status.success(), "{}", output_text(&out));
    let calls = world.take_calls();

    // sops decrypts first, before any helm or kubectl call but helm's version check, then again
    // for the Secrets' apply.
    assert_eq!(calls[0], "helm version --short");
    assert!(
        calls[1].starts_with("sops --decrypt --output-type json "),
        "{calls:#?}"
    );
    assert_eq!(calls.iter().filter(|c| c.starts_with("sops")).count(), 2);

    assert_each_component_comes_after_what_it_needs(&calls);
    assert_the_secrets_never_show_and_reach_the_api_server(&plane, &world, &calls, &out);
    // A second run asks the same and changes nothing on the API server.
    let before = resource_versions(&plane, &world);
    let out = world.platform("apply", &env);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(world.take_calls(), calls);
    assert_eq!(resource_versions(&plane, &world), before);

    assert_a_rerun_takes_back_hand_edits(&plane, &world, &env, &calls);
    assert_a_rerun_brings_the_crds_of_a_chart_s_folder(&plane, &world, &env, &calls);
    assert_the_dry_run_changes_nothing_and_masks_the_secrets(&plane, &world, env[0]);
    assert_the_destroy_plan_names_what_goes(&plane, &world);
    assert_destroy_keeps_the_crds_unless_asked(&plane, &world);
}

/// A volume claim of the crowdsec release as its chart makes it (crowdsecurity/helm-charts
/// crowdsec-0.24.0, charts/crowdsec/templates/lapi-persistentVolume.yaml: `<release>-db-pvc`,
/// `<release>-config-pvc`, the annotations of the values) and as helm marks what it installs
/// (helm v3.22.0 pkg/action/validate.go, lines 140-160), bound to a Ceph volume.
fn crowdsec_claim(claim: &str, annotations: &Value) -> String {
    let mut annotations = annotations.clone();
    annotations["meta.helm.sh/release-name"] = "crowdsec".into();
    annotations["meta.helm.sh/release-namespace"] = "crowdsec".into();
    let volume = format!("pvc-{claim}");
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                  "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "",
                  "csi": {"driver": "rbd.csi.ceph.com", "volumeHandle": claim},
                  "claimRef": {"namespace": "crowdsec", "name": claim}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": claim, "namespace": "crowdsec", "annotations": annotations,
                      "labels": {"app.kubernetes.io/managed-by": "Helm"}},
         "spec": {"volumeName": volume, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                  "resources": {"requests": {"storage": "1Gi"}}}},
    ]})
    .to_string()
}

/// What make destroy-platform shows before it asks: the CNI and the storage driver that go with
/// their releases, the LAPI's claims that stay (the values' keep), and a claim without it (made
/// before) going with its data; nothing is changed.
fn assert_the_destroy_plan_names_what_goes(plane: &ControlPlane, world: &World) {
    let rendered: Value =
        serde_json::from_str(&fs::read_to_string(world.rendered().join("crowdsec.json")).unwrap())
            .unwrap();
    let keep = &rendered["lapi"]["persistentVolume"]["data"]["annotations"];
    for (claim, annotations) in [
        ("crowdsec-db-pvc", keep.clone()),
        ("crowdsec-config-pvc", serde_json::json!({})),
    ] {
        plane.kubectl_ok(&["apply", "-f", "-"], &crowdsec_claim(claim, &annotations));
    }
    let out = world.platform("destroy-plan", &[]);
    assert!(out.status.success(), "{}", output_text(&out));
    let text = output_text(&out);
    for said in [
        "cilium: the helm release in kube-system and what its chart made; Cilium is the cluster's CNI",
        "ceph-csi-rbd: the helm release in ceph-csi-rbd and what its chart made; its StorageClass ceph-rbd",
        "crowdsec: the helm release in crowdsec and what its chart made; its volume claims \
         crowdsec/crowdsec-config-pvc (reclaim policy Delete: its data goes), \
         crowdsec/crowdsec-db-pvc (kept: helm.sh/resource-policy keep)",
        "snapshot-controller kept: its templates are CRDs",
        "namespaces kept",
        "CRDs kept",
    ] {
        assert!(text.contains(said), "`{said}` not in:\n{text}");
    }
    assert_only_reads(&world.take_calls());
}

/// Every call read the cluster, none changed it.
#[track_caller]
pub(crate) fn assert_only_reads(calls: &[String]) {
    assert!(
        calls
            .iter()
            .all(|c| c.starts_with("kubectl get ") || c.starts_with("helm version")),
        "{calls:#?}"
    );
}

/// The CRDs the snapshot controller's chart renders as templates (Piraeus's snapshot-controller
/// 5.2.0: templates/crds.yaml includes the six files its Makefile's `crds` target fetches from
/// external-snapshotter, lines 7-14), which `helm uninstall` deletes with the release.
const SNAPSHOT_TEMPLATE_CRDS: &str = "snapshot-controller=\
    volumesnapshotclasses.snapshot.storage.k8s.io,volumesnapshots.snapshot.storage.k8s.io,\
    volumesnapshotcontents.snapshot.storage.k8s.io,\
    volumegroupsnapshotclasses.groupsnapshot.storage.k8s.io,\
    volumegroupsnapshots.groupsnapshot.storage.k8s.io,\
    volumegroupsnapshotcontents.groupsnapshot.storage.k8s.io";

/// `destroy` keeps every CRD (and so every VolumeSnapshot Velero made) unless `DELETE_CRDS=yes`,
/// as the README says: a release whose templates are CRDs is not uninstalled without it.
fn assert_destroy_keeps_the_crds_unless_asked(plane: &ControlPlane, world: &World) {
    let snapshots = "crd/volumesnapshots.snapshot.storage.k8s.io";
    let destroy = |delete_crds: &str| {
        let out = world.platform_with(
            "destroy",
            &[],
            &[
                ("STANDIN_HELM_TEMPLATE_CRDS", SNAPSHOT_TEMPLATE_CRDS),
                ("DELETE_CRDS", delete_crds),
            ],
        );
        assert!(out.status.success(), "{}", output_text(&out));
        (world.take_calls(), output_text(&out))
    };
    let (calls, log) = destroy("");
    plane.kubectl_ok(&["get", snapshots, "-o", "name"], "");
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("helm uninstall snapshot-controller")),
        "{calls:#?}"
    );
    assert!(log.contains("snapshot-controller kept"), "{log}");
    let (calls, _) = destroy("yes");
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("helm uninstall snapshot-controller")),
        "{calls:#?}"
    );
    let gone = plane.kubectl().args(["get", snapshots]).output().unwrap();
    assert!(!gone.status.success(), "the CRDs stay with DELETE_CRDS=yes");
}

/// The order, on the calls: each component acted on once, in the profile's order, after every
/// component it depends on; objects wait for the CRDs they need, after the release that brings
/// them.
fn assert_each_component_comes_after_what_it_needs(calls: &[String]) {
    let acted: Vec<String> = calls
        .iter()
        .enumerate()
        .filter_map(|(at, c)| acted_on(at.checked_sub(1).map(|p| &calls[p]), c))
        .collect();
    let profile: Vec<&str> = Profile::Onprem
        .components()
        .iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(acted, profile, "{calls:#?}");
    for component in Profile::Onprem.components() {
        let at = acted.iter().position(|a| a == component.name).unwrap();
        for dependency in component.depends_on {
            let there = acted.iter().position(|a| a == dependency).unwrap();
            assert!(there < at, "{} before {dependency}", component.name);
        }
    }
    // Objects wait for the CRDs they need, after the release that brings them.
    let wait_pool = calls
        .iter()
        .position(|c| c.contains("crd/ciliumloadbalancerippools.cilium.io"))
        .unwrap();
    let cilium = calls
        .iter()
        .position(|c| c.starts_with("helm upgrade --install cilium "))
        .unwrap();
    assert!(cilium < wait_pool, "{calls:#?}");
    assert!(
        calls
            .iter()
            .any(|c| c.contains("rollout status deployment/whoami")),
        "{calls:#?}"
    );
    // Traefik's crds/, which helm installs only once, applied at its pin just before it.
    let at = |prefix: &str| calls.iter().position(|c| c.starts_with(prefix)).unwrap();
    let traefik = at("helm upgrade --install traefik ");
    assert!(
        calls[traefik - 2].starts_with("helm show crds traefik ")
            && calls[traefik - 1].starts_with("kubectl apply --server-side --force-conflicts")
            && calls[traefik - 1].ends_with(" -f -"),
        "{calls:#?}"
    );
}

/// A CRD of Traefik's crds/ missing from the cluster (one a chart bump adds): helm brings it on
/// the first install only, the next apply brings it from the pinned chart.
fn assert_a_rerun_brings_the_crds_of_a_chart_s_folder(
    plane: &ControlPlane,
    world: &World,
    env: &[(&str, &Path)],
    calls: &[String],
) {
    let crd = "crd/tlsstores.traefik.io";
    plane.kubectl_ok(&["delete", crd, "--wait"], "");
    let out = world.platform("apply", env);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(world.take_calls(), calls, "a re-run makes the same calls");
    plane.kubectl_ok(&["get", crd, "-o", "name"], "");
}

/// The Secrets: never in a file, even for a moment; no clear value in an argument, the log or
/// any file left; the values reached the API server.
fn assert_the_secrets_never_show_and_reach_the_api_server(
    plane: &ControlPlane,
    world: &World,
    calls: &[String],
    out: &Output,
) {
    // Decrypted into a pipe, applied from another: at no call did a file hold anything.
    let decrypted = calls.iter().rposition(|c| c.starts_with("sops")).unwrap();
    assert!(
        calls[decrypted + 1].starts_with("kubectl apply --server-side")
            && calls[decrypted + 1].ends_with(" -f -"),
        "{calls:#?}"
    );
    assert!(
        !calls.iter().any(|c| c.contains("<TMPDIR holds")),
        "{calls:#?}"
    );
    for clear in CLEAR {
        assert!(
            !calls.iter().any(|c| c.contains(clear)),
            "{clear} in an argument"
        );
        assert!(!output_text(out).contains(clear), "{clear} in the log");
    }
    assert!(
        testkit::file_names(&world.tmp()).is_empty(),
        "the secrets folder is left"
    );
    assert_eq!(
        files_holding_a_secret(world.dir.path()),
        Vec::<PathBuf>::new()
    );
    // base64 of test-only-ovh-consumer-key
    assert_eq!(
        secret_value(plane, "external-dns", "ovh-credentials", "consumer_key"),
        "dGVzdC1vbmx5LW92aC1jb25zdW1lci1rZXk="
    );
    assert_eq!(
        secret_value(plane, "traefik", "crowdsec-bouncer-key", "api-key"),
        secret_value(plane, "crowdsec", "crowdsec-bouncer-key", "api-key"),
    );
}

/// The OVH consumer key's Secret edited by hand (kubectl's field manager), `encoded` its new
/// base64 value.
fn edit_consumer_key(plane: &ControlPlane, encoded: &str) {
    let patch = format!(r#"{{"data":{{"consumer_key":"{encoded}"}}}}"#);
    plane.kubectl_ok(
        &[
            "-n",
            "external-dns",
            "patch",
            "secret",
            "ovh-credentials",
            "--type=merge",
            "-p",
            &patch,
        ],
        "",
    );
}

/// Edited by hand (another field manager): the next run takes it back, with the same calls.
fn assert_a_rerun_takes_back_hand_edits(
    plane: &ControlPlane,
    world: &World,
    env: &[(&str, &Path)],
    calls: &[String],
) {
    plane.kubectl_ok(
        &[
            "patch",
            "ciliumloadbalancerippool",
            "demo-pool",
            "--type=merge",
            "-p",
            r#"{"spec":{"blocks":[{"start":"10.20.1.200","stop":"10.20.1.210"}]}}"#,
        ],
        "",
    );
    edit_consumer_key(plane, "aGFuZA==");
    let out = world.platform("apply", env);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(world.take_calls(), calls, "a re-run makes the same calls");
    let blocks = plane.kubectl_ok(
        &[
            "get",
            "ciliumloadbalancerippool",
            "demo-pool",
            "-o",
            "jsonpath={.spec.blocks[*].start}-{.spec.blocks[*].stop}",
        ],
        "",
    );
    assert_eq!(blocks, "10.20.1.101-10.20.1.150");
    assert_eq!(
        secret_value(plane, "external-dns", "ovh-credentials", "consumer_key"),
        "dGVzdC1vbmx5LW92aC1jb25zdW1lci1rZXk="
    );
}

/// The dry-run twin: nothing changed, and a Secret edited by hand shown changed with its values
/// masked, before and after (helm's side through the helm-diff plugin of the stand-in).
fn assert_the_dry_run_changes_nothing_and_masks_the_secrets(
    plane: &ControlPlane,
    world: &World,
    sops_key: (&str, &Path),
) {
    // A Secret changed by hand, so that kubectl diff has a value to show, before and after.
    let hand = "test-only-hand-edited-value";
    let encoded = "dGVzdC1vbmx5LWhhbmQtZWRpdGVkLXZhbHVl"; // base64 of `hand`
    edit_consumer_key(plane, encoded);
    let plugin = Path::new("yes");
    let out = world.platform("diff", &[sops_key, ("STANDIN_HELM_DIFF", plugin)]);
    assert!(out.status.success(), "{}", output_text(&out));
    let calls = world.take_calls();
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("kubectl apply") || c.starts_with("helm upgrade")),
        "{calls:#?}"
    );
    assert!(
        !calls.iter().any(|c| c.contains("<TMPDIR holds")),
        "{calls:#?}"
    );
    let text = output_text(&out);
    // The change is shown, its values masked on both sides.
    assert!(
        text.contains("consumer_key")
            && text.contains("*** (before)")
            && text.contains("*** (after)"),
        "{text}"
    );
    for clear in CLEAR.iter().chain([&hand, &encoded]) {
        assert!(!text.contains(clear), "{clear} in the diff");
    }
    assert!(testkit::file_names(&world.tmp()).is_empty());
    assert_eq!(
        secret_value(plane, "external-dns", "ovh-credentials", "consumer_key"),
        encoded,
        "the dry run changed the Secret"
    );
}

#[test]
fn the_api_server_refuses_an_unknown_field_so_its_acceptance_means_something() {
    let Some(plane) = ControlPlane::shared(TEST) else {
        return;
    };
    let Some(crds) = testkit::workspace::shared_dir(TEST).map(|d| d.join("crds")) else {
        return;
    };
    plane.install_crds(&[crds.join("cilium-v1.20/v2/ciliumloadbalancerippools.yaml")]);
    let typo = r#"{"apiVersion":"cilium.io/v2","kind":"CiliumLoadBalancerIPPool","metadata":{"name":"onprem-typo"},"spec":{"blocks":[{"begin":"10.0.0.1","stop":"10.0.0.2"}]}}"#;
    let err = refused(plane, typo);
    assert!(
        err.contains(".spec.blocks[0].begin: field not declared in schema"),
        "{err}"
    );
    // The L2 policy has no cilium.io/v2: the seed's v2alpha1 is its only version.
    plane.install_crds(&[crds.join("cilium-v1.20/v2alpha1/ciliuml2announcementpolicies.yaml")]);
    let v2 = r#"{"apiVersion":"cilium.io/v2","kind":"CiliumL2AnnouncementPolicy","metadata":{"name":"onprem-v2"},"spec":{"loadBalancerIPs":true}}"#;
    let err = refused(plane, v2);
    assert!(err.contains("CiliumL2AnnouncementPolicy"), "{err}");
}

#[test]
fn a_wrong_or_missing_key_or_a_tampered_file_stops_before_any_helm_or_kubectl_call() {
    // No API server: nothing may be asked of one.
    let unreachable = Path::new("/nonexistent/kubeconfig");
    let Some(world) = World::new(unreachable, &sops_file()) else {
        return;
    };
    let Some(age_keygen) = testkit::upstream::program(TEST, "age-keygen") else {
        return;
    };
    let other_key = world.dir.path().join("other.agekey");
    let out = Command::new(age_keygen)
        .arg("-o")
        .arg(&other_key)
        .output()
        .unwrap();
    assert!(out.status.success());

    let refused = |world: &World, env: &[(&str, &Path)], what: &str| {
        let out = world.platform("apply", env);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", output_text(&out));
        let text = output_text(&out);
        assert!(text.contains("nothing installed"), "{what}: {text}");
        let calls = world.take_calls();
        assert!(
            calls
                .iter()
                .all(|c| c.starts_with("sops ") || c == "helm version --short"),
            "{what}: {calls:#?}"
        );
        for clear in CLEAR {
            assert!(!text.contains(clear), "{what}: {clear} in the log");
        }
        assert!(
            testkit::file_names(&world.tmp()).is_empty(),
            "{what}: left files"
        );
    };
    refused(
        &world,
        &[("SOPS_AGE_KEY_FILE", other_key.as_path())],
        "another key",
    );
    refused(&world, &[], "no key at all");

    // One encrypted value altered: the file's MAC no longer matches.
    let tampered = world.dir.path().join("tampered.sops.yaml");
    let text = fs::read_to_string(sops_file()).unwrap();
    let at = text.find("data:").unwrap() + "data:".len();
    let flipped = if &text[at..=at] == "A" { "B" } else { "A" };
    fs::write(
        &tampered,
        format!("{}{flipped}{}", &text[..at], &text[at + 1..]),
    )
    .unwrap();
    world.render(&tampered);
    let key = key();
    refused(
        &world,
        &[("SOPS_AGE_KEY_FILE", key.as_path())],
        "a tampered file",
    );
}

/// The layers agree: every Secret a rendered value names is one the secrets component makes, in
/// that namespace, with that key; the Traefik Service's address is in the pool; the published
/// address is given once, by the chart's own key.
#[test]
fn every_secret_the_values_name_is_made_from_the_sops_file_and_the_addresses_agree() {
    let dir = tempfile::tempdir().unwrap();
    let config = render_example(dir.path(), &sops_file());
    let out_dir = dir.path().join("rendered");
    let read = |name: &str| -> Value {
        serde_json::from_str(&fs::read_to_string(out_dir.join(format!("{name}.json"))).unwrap())
            .unwrap()
    };
    let template = read("secrets");
    let made: Vec<(String, String, String)> = template["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| {
            s["data"].as_object().unwrap().keys().map(move |k| {
                (
                    s["namespace"].as_str().unwrap().to_owned(),
                    s["name"].as_str().unwrap().to_owned(),
                    k.clone(),
                )
            })
        })
        .collect();
    let mut named = 0;
    for component in Profile::Onprem.components() {
        if !matches!(component.kind, Kind::Helm { .. }) {
            continue;
        }
        let values = read(component.name);
        let text = values.to_string();
        let namespace = component.namespace.unwrap();
        // Every secretKeyRef in the rendered values.
        let mut refs = Vec::new();
        collect_secret_refs(&values, &mut refs);
        for (name, key) in refs {
            named += 1;
            assert!(
                made.contains(&(namespace.to_owned(), name.clone(), key.clone())),
                "{}: {name}/{key} is made by no secret of {namespace}: {made:#?}",
                component.name
            );
        }
        assert!(!CLEAR.iter().any(|c| text.contains(c)));
    }
    assert_eq!(named, 4, "external-dns's three and the LAPI's bouncer key");
    // Traefik mounts the bouncer's key from a Secret of its namespace.
    let traefik = read("traefik");
    let volume = traefik["volumes"][0]["name"].as_str().unwrap();
    assert!(
        made.iter()
            .any(|(ns, name, _)| ns == "traefik" && name == volume)
    );
    // Its address is the pool that takes its Service alone (the chart names the Service after
    // the release, traefik/traefik); the published one is given by the chart's key, once.
    let pools = read("load-balancer");
    let selector = serde_json::json!({"matchLabels": {
        "io.kubernetes.service.namespace": "traefik",
        "io.kubernetes.service.name": "traefik",
    }});
    let pool = &testkit::json::element(&pools["items"], "/spec/serviceSelector", selector)["spec"]
        ["blocks"][0];
    let address = traefik["service"]["annotations"]["lbipam.cilium.io/ips"]
        .as_str()
        .unwrap();
    let ip = |s: &Value| s.as_str().unwrap().parse::<std::net::Ipv4Addr>().unwrap();
    let address: std::net::Ipv4Addr = address.parse().unwrap();
    assert!(ip(&pool["start"]) <= address && address <= ip(&pool["stop"]));
    assert_eq!(
        traefik["providers"]["kubernetesIngress"]["ingressEndpoint"]["ip"],
        config["ingress"]["public_address"]
    );
    assert!(traefik.get("additionalArguments").is_none());
}

fn collect_secret_refs(value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            if let Some(r) = map.get("secretKeyRef") {
                out.push((
                    r["name"].as_str().unwrap().to_owned(),
                    r["key"].as_str().unwrap().to_owned(),
                ));
            }
            map.values().for_each(|v| collect_secret_refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_secret_refs(v, out)),
        _ => {}
    }
}

/// `make diff-platform PROFILE=onprem KUBECONFIG=...`: make renders the profile from its config
/// (the plan, the secrets' template) and hands platform.sh render-platform for the secrets; the
/// recording helm and kubectl show the dry run, sops decrypts with the test key.
/// `make` in the repository for an on-premises cluster: the recording helm and kubectl, the real
/// sops with the test key, a $TMPDIR and $HOME of its own, the tools this test binary built (make
/// builds none), and a log of the calls.
pub(crate) struct OnpremMake {
    pub(crate) dir: tempfile::TempDir,
    bin: PathBuf,
}

impl OnpremMake {
    pub(crate) fn new() -> Option<OnpremMake> {
        let sops = testkit::upstream::program(TEST, "sops")?;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(&sops, bin.join("sops")).unwrap();
        fs::create_dir_all(dir.path().join("tmp")).unwrap();
        fs::write(dir.path().join("calls.log"), "").unwrap();
        testkit::workspace::bin("render-platform");
        testkit::workspace::bin("kubeconfig-guard");
        Some(OnpremMake { dir, bin })
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.path("calls.log")
    }

    /// The calls since the last one, the log emptied.
    pub(crate) fn take_calls(&self) -> Vec<String> {
        let text = fs::read_to_string(self.log()).unwrap();
        fs::write(self.log(), "").unwrap();
        text.lines().map(str::to_owned).collect()
    }

    /// `make TARGET ARGS...`, nothing read from the terminal.
    pub(crate) fn make(&self, target: &str, args: &[String]) -> Output {
        self.make_with(target, args, &[])
    }

    /// [`OnpremMake::make`] with variables of the stand-ins in its environment.
    pub(crate) fn make_with(&self, target: &str, args: &[String], env: &[(&str, &str)]) -> Output {
        let tools = testkit::workspace::bin("render-platform");
        Command::new("make")
            .args(["--no-print-directory", "-C"])
            .arg(repo())
            .args([target, "TOOLS_DIR=", "RUST_SOURCES="])
            .arg(format!("BIN={}", tools.parent().unwrap().display()))
            .args(args)
            .env(
                "PATH",
                format!(
                    "{}:{}:{}",
                    testkit::standin::path("recording").display(),
                    self.bin.display(),
                    std::env::var("PATH").unwrap()
                ),
            )
            .env("STANDIN_LOG", self.log())
            .env("SOPS_AGE_KEY_FILE", key())
            .env("TMPDIR", self.path("tmp"))
            .env("HOME", self.dir.path())
            .env_remove("STANDIN_HELM_DIFF")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

/// A kubeconfig at `path` whose current context points at `server` (make reads it before any
/// call: it must be the config's cluster_endpoint).
pub(crate) fn write_kubeconfig(path: &Path, server: &str) {
    fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: demo\n  cluster:\n    server: {server}\n\
             contexts:\n- name: admin@demo\n  context:\n    cluster: demo\n    user: admin\n\
             current-context: admin@demo\n"
        ),
    )
    .unwrap();
}

#[test]
fn make_renders_the_onprem_profile_and_runs_its_dry_run_twin() {
    let Some(world) = OnpremMake::new() else {
        return;
    };
    let mut config: Value = serde_json::from_str(
        &fs::read_to_string(repo().join("config/onprem.example.json")).unwrap(),
    )
    .unwrap();
    config["secrets"] = Value::String(sops_file().display().to_string());
    let config_path = world.path("onprem.json");
    fs::write(&config_path, config.to_string()).unwrap();
    // kubectl is a stand-in, but make reads the kubeconfig's current context before any call.
    let kubeconfig = world.path("kubeconfig");
    write_kubeconfig(&kubeconfig, config["cluster_endpoint"].as_str().unwrap());
    let rendered = world.path("rendered");
    let args = [
        "PROFILE=onprem".to_owned(),
        format!("KUBECONFIG={}", kubeconfig.display()),
        format!("PLATFORM_CONFIG={}", config_path.display()),
        format!("PLATFORM_VALUES={}", rendered.display()),
    ];
    let out = world.make("diff-platform", &args);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_the_dry_run_rendered_the_plan_and_wrote_nothing(
        &out,
        &world.log(),
        &rendered,
        &world.path("tmp"),
    );

    // A kubeconfig whose current context is another cluster: refused before any call.
    write_kubeconfig(&kubeconfig, "https://prod.example.net:6443");
    world.take_calls();
    let out = world.make("diff-platform", &args);
    assert_ne!(out.status.code(), Some(0), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("points at https://prod.example.net:6443"),
        "{}",
        output_text(&out)
    );
    assert_eq!(world.take_calls(), Vec::<String>::new(), "a call was made");
}

/// make rendered the plan from the config; the dry run diffed, wrote nothing, and left no
/// secret behind or in its calls.
fn assert_the_dry_run_rendered_the_plan_and_wrote_nothing(
    out: &Output,
    log: &Path,
    rendered: &Path,
    tmp: &Path,
) {
    // make rendered the plan from the config.
    let plan = fs::read_to_string(rendered.join("components.tsv")).unwrap();
    assert!(
        plan.contains("\nsmoke-test\tobjects\tsmoke-test\t"),
        "{plan}"
    );
    let calls: Vec<String> = fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("helm upgrade") || c.starts_with("kubectl apply")),
        "{calls:#?}"
    );
    let diffs = |what: &str| {
        calls
            .iter()
            .any(|c| c.starts_with("kubectl diff") && c.contains(what))
    };
    assert!(
        diffs("namespaces.json") && diffs("smoke-test.json"),
        "{calls:#?}"
    );
    // The Secrets, right after the namespaces, from a pipe.
    let namespaces = calls
        .iter()
        .position(|c| c.starts_with("kubectl diff") && c.contains("namespaces.json"))
        .unwrap();
    assert!(
        calls[namespaces + 1].starts_with("kubectl diff")
            && calls[namespaces + 1].contains("-f - <stdin:"),
        "{calls:#?}"
    );
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("helm template traefik traefik ")),
        "{calls:#?}"
    );
    assert!(
        testkit::file_names(tmp).is_empty(),
        "the secrets folder is left"
    );
    for clear in CLEAR {
        assert!(!output_text(out).contains(clear) && !calls.iter().any(|c| c.contains(clear)));
    }
}

/// The LAPI variable that registers the bouncer (`BOUNCER_KEY_<name>`) and the annotation that
/// rolls Traefik when its key changes, as rendered in `dir/rendered`.
fn bouncer_rendering(dir: &Path) -> (String, Value, String) {
    let read = |name: &str| -> Value {
        serde_json::from_str(
            &fs::read_to_string(dir.join(format!("rendered/{name}.json"))).unwrap(),
        )
        .unwrap()
    };
    let crowdsec = read("crowdsec");
    let variable = crowdsec["lapi"]["env"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let traefik = read("traefik");
    let annotations = traefik["deployment"]["podAnnotations"].clone();
    let names = fs::read_to_string(dir.join("rendered/status.env")).unwrap();
    let name = names
        .lines()
        .find_map(|l| l.strip_prefix("BOUNCER_NAME="))
        .unwrap()
        .to_owned();
    (variable, annotations, name)
}

/// A new `crowdsec.bouncer_key` in the SOPS file must reach the LAPI: the chart's LAPI registers
/// `BOUNCER_KEY_<name>` only when no bouncer has that name yet, in a database kept on a volume
/// (crowdsecurity/helm-charts crowdsec-0.24.0, charts/crowdsec/files/docker-start-custom.sh,
/// register_bouncer at lines 94-103, called at lines 308-314), and a pod reads its environment
/// and Traefik its key file only when it starts. So a new key gives a new bouncer name, which
/// rolls the LAPI, and a new annotation on Traefik's pods; the same file renders the same.
#[test]
fn a_rotated_bouncer_key_registers_a_new_bouncer_and_rolls_both_sides() {
    let Some(sops) = testkit::upstream::program(TEST, "sops") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let decrypt = |file: &Path| -> Value {
        let mut cmd = Command::new(&sops);
        without_sops_keys(&mut cmd);
        cmd.env("SOPS_AGE_KEY_FILE", key())
            .args(["--decrypt", "--output-type", "json"])
            .arg(file);
        serde_json::from_str(&testkit::process::success_stdout(&cmd.output().unwrap())).unwrap()
    };
    let mut clear = decrypt(&sops_file());
    clear["crowdsec"]["bouncer_key"] = Value::String("test-only-rotated-bouncer-key".into());
    let clear_file = dir.path().join("rotated.json");
    fs::write(&clear_file, clear.to_string()).unwrap();
    let rotated = dir.path().join("rotated.sops.yaml");
    let recipient = TEST_RECIPIENT;
    let mut encrypt = Command::new(&sops);
    without_sops_keys(&mut encrypt);
    encrypt
        .args(["--encrypt", "--age", recipient, "--input-type", "json"])
        .args(["--output-type", "yaml", "--output"])
        .arg(&rotated)
        .arg(&clear_file);
    testkit::process::success_stdout(&encrypt.output().unwrap());
    fs::remove_file(&clear_file).unwrap();

    let render = |name: &str, secrets: &Path| {
        let at = dir.path().join(name);
        fs::create_dir_all(&at).unwrap();
        render_example(&at, secrets);
        bouncer_rendering(&at)
    };
    let before = render("before", &sops_file());
    let again = render("again", &sops_file());
    let after = render("after", &rotated);
    assert_eq!(before, again, "the same file renders the same");
    let (variable, annotations, name) = &before;
    assert_eq!(variable, &format!("BOUNCER_KEY_{name}"));
    assert!(name.starts_with("traefik_"), "{name}");
    assert_ne!(
        after.0, before.0,
        "the LAPI keeps the old bouncer: {variable}"
    );
    assert_ne!(&after.1, annotations, "Traefik keeps the old key");
    assert_eq!(after.0, format!("BOUNCER_KEY_{}", after.2));
}
