//! `make check PROFILE=onprem` (pipelines/check-prereqs.sh, its on-prem part check-onprem.sh)
//! with the real sops and age built at their pins: the age key is good only when sops decrypts
//! the cluster's SOPS file with it, and a wrong key is named with the recipients it lacks;
//! kubectl's skew is checked against the cluster's own API server (testkit's control plane), not
//! the edge's pin, and said to be unchecked when the server cannot be asked. Also the shipped
//! example of the secrets file, encrypted with a key of the test's own, passes and renders; and
//! make refuses an unknown PROFILE by name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use testkit::control_plane::ControlPlane;

use crate::check_prereqs::{helm_reporting, line_begins, line_with};

const TEST: &str = "onprem_check";

fn repo() -> PathBuf {
    testkit::workspace::root()
}

/// The fixture's clear values (fake): none may be printed.
const CLEAR: [&str; 2] = ["test-only-ceph-user-key", "test-only-crowdsec-bouncer-key"];

/// A machine for `make check PROFILE=onprem`: a PATH of the real sops, age-keygen and kubectl
/// (or a wrapper of it), a helm stand-in printing what `helm version --short` prints, then the
/// system's; an empty $HOME; the config written by [`Machine::config`].
struct Machine {
    dir: tempfile::TempDir,
    sops: PathBuf,
    age_keygen: PathBuf,
    kubectl: PathBuf,
}

impl Machine {
    fn new() -> Option<Machine> {
        let sops = testkit::upstream::program(TEST, "sops")?;
        let age_keygen = testkit::upstream::program(TEST, "age-keygen")?;
        let kubectl = testkit::upstream::program(TEST, "kubectl")?;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        fs::create_dir_all(&bin).unwrap();
        fs::create_dir_all(dir.path().join("home")).unwrap();
        for (name, path) in [
            ("sops", &sops),
            ("age-keygen", &age_keygen),
            ("kubectl", &kubectl),
        ] {
            std::os::unix::fs::symlink(path, bin.join(name)).unwrap();
        }
        testkit::sshd::script(
            &bin.join("helm"),
            &format!(
                "#!/usr/bin/env bash\n{}\n",
                helm_reporting("v3.19.0+g3d8990f")
            ),
        );
        Some(Machine {
            dir,
            sops,
            age_keygen,
            kubectl,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A kubectl that reports `client` as its own version and is the real one otherwise.
    fn kubectl_claiming(&self, client: &str) {
        let wrapper = self.path("bin/kubectl");
        fs::remove_file(&wrapper).unwrap();
        testkit::sshd::script(
            &wrapper,
            &format!(
                "#!/usr/bin/env bash\n\"{}\" \"$@\" | sed 's/^Client Version: .*/Client Version: {client}/'\nexit \"${{PIPESTATUS[0]}}\"\n",
                self.kubectl.display()
            ),
        );
    }

    /// A fresh age key (0600), and its public key.
    fn age_key(&self, name: &str) -> (PathBuf, String) {
        let key = self.path(name);
        let out = Command::new(&self.age_keygen)
            .arg("-o")
            .arg(&key)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", testkit::process::text(&out));
        let out = Command::new(&self.age_keygen)
            .arg("-y")
            .arg(&key)
            .output()
            .unwrap();
        let recipient = testkit::process::success_stdout(&out).trim().to_owned();
        assert!(recipient.starts_with("age1"), "{recipient}");
        (key, recipient)
    }

    /// The onprem example config with `secrets` and, when given, `cluster_endpoint` replaced.
    fn config(&self, secrets: &Path, endpoint: Option<&str>) -> PathBuf {
        let mut config: Value = serde_json::from_str(
            &fs::read_to_string(repo().join("config/onprem.example.json")).unwrap(),
        )
        .unwrap();
        config["secrets"] = Value::String(secrets.display().to_string());
        if let Some(endpoint) = endpoint {
            config["cluster_endpoint"] = Value::String(endpoint.to_owned());
        }
        let path = self.path("onprem.json");
        fs::write(&path, config.to_string()).unwrap();
        path
    }

    /// `make check PROFILE=onprem` as make runs it, with `env` on top.
    /// `make check`'s script, which must exit with `code`; its stdout.
    fn check_exits(&self, config: &Path, env: &[(&str, &OsStr)], code: i32) -> String {
        let out = self.check(config, env);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{}",
            testkit::process::text(&out)
        );
        stdout(&out)
    }

    fn check(&self, config: &Path, env: &[(&str, &OsStr)]) -> Output {
        let tools = testkit::workspace::bin("render-platform")
            .parent()
            .unwrap()
            .to_path_buf();
        testkit::workspace::bin("kubeconfig-guard");
        let mut cmd = Command::new("bash");
        cmd.arg(repo().join("pipelines/check-prereqs.sh"))
            .current_dir(self.dir.path())
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.path("bin").display(),
                    std::env::var("PATH").unwrap()
                ),
            )
            .env("HOME", self.path("home"))
            .env("PROFILE", "onprem")
            .env("PLATFORM_CONFIG", config)
            .env("BIN", tools)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("KUBECONFIG")
            .env_remove("VERSIONS_FILE")
            .stdin(Stdio::null());
        crate::onprem_profile::without_sops_keys(&mut cmd);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let text = testkit::process::text(&out);
        for clear in CLEAR {
            assert!(!text.contains(clear), "a clear value was printed: {text}");
        }
        out
    }
}

fn fixture_key() -> PathBuf {
    repo().join("tests/fixtures/sops/test-only.agekey")
}

fn fixture_sops() -> PathBuf {
    repo().join("tests/fixtures/sops/onprem.secrets.sops.yaml")
}

/// The recipient the fixture is encrypted to (its key's comment, as age-keygen wrote it).
fn fixture_recipient() -> String {
    fs::read_to_string(fixture_key())
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("# public key: "))
        .unwrap()
        .to_owned()
}

#[track_caller]
fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_age_key_passes_only_when_sops_decrypts_the_file_with_it() {
    let Some(machine) = Machine::new() else {
        return;
    };
    let config = machine.config(&fixture_sops(), None);
    let text = machine.check_exits(
        &config,
        &[("SOPS_AGE_KEY_FILE", fixture_key().as_os_str())],
        0,
    );
    let line = line_with(&text, "age key");
    assert!(
        line.trim_start().starts_with("ok") && line.contains("decrypts"),
        "{text}"
    );
    assert!(line_begins(&text, "and its SOPS file", "ok"), "{text}");

    // Another key: its file exists and the SOPS file is well formed, but sops cannot decrypt.
    let (other, other_recipient) = machine.age_key("other.agekey");
    let text = machine.check_exits(&config, &[("SOPS_AGE_KEY_FILE", other.as_os_str())], 1);
    let line = line_with(&text, "cannot decrypt");
    assert!(line.trim_start().starts_with("MISSING"), "{text}");
    testkit::process::assert_says_all(
        line,
        &[
            other.to_str().unwrap(),
            fixture_sops().to_str().unwrap(),
            &fixture_recipient(),
            &other_recipient,
        ],
    );
    // The config itself is fine: only the key is wrong.
    assert!(line_begins(&text, "and its SOPS file", "ok"), "{text}");
    assert!(!text.contains("names a file"), "{text}");

    // The same wrong key through SOPS_AGE_KEY, which sops reads too: named as such.
    let key_text = fs::read_to_string(&other).unwrap();
    let text = machine.check_exits(&config, &[("SOPS_AGE_KEY", OsStr::new(key_text.trim()))], 1);
    let line = line_with(&text, "cannot decrypt");
    assert!(
        line.contains("SOPS_AGE_KEY") && line.contains(&other_recipient),
        "{line}"
    );
    assert!(
        !text.contains("AGE-SECRET-KEY"),
        "the key was printed: {text}"
    );
}

/// A DaemonSet of kube-system (no pod runs: the control plane has no kubelet), as JSON.
fn daemonset(name: &str, annotations: &str) -> String {
    format!(
        r#"{{"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {{"name": "{name}", "namespace": "kube-system", "annotations": {annotations}}},
            "spec": {{"selector": {{"matchLabels": {{"app": "{name}"}}}},
              "template": {{"metadata": {{"labels": {{"app": "{name}"}}}},
                "spec": {{"containers": [{{"name": "{name}", "image": "registry.example/{name}:1"}}]}}}}}}}}"#
    )
}

#[test]
fn kubectl_skew_and_what_already_runs_are_checked_against_the_cluster_itself() {
    let Some(machine) = Machine::new() else {
        return;
    };
    // Its own: the test creates DaemonSets in kube-system.
    let Some(plane) = ControlPlane::start(TEST) else {
        return;
    };
    let key = fixture_key();
    let config = machine.config(&fixture_sops(), Some(plane.server()));
    // The edge's pin says another Kubernetes: it must play no part on-prem.
    let versions: String = fs::read_to_string(repo().join("k8s/versions.env"))
        .unwrap()
        .lines()
        .map(|l| {
            if l.starts_with("KUBERNETES_VERSION=") {
                "KUBERNETES_VERSION=v1.30.0\n".to_owned()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let versions_file = machine.path("versions.env");
    fs::write(&versions_file, versions).unwrap();
    let server = testkit::pin("KUBERNETES_VERSION");
    let env = [
        ("SOPS_AGE_KEY_FILE", key.as_os_str()),
        ("KUBECONFIG", plane.kubeconfig().as_os_str()),
        ("VERSIONS_FILE", versions_file.as_os_str()),
    ];
    let text = machine.check_exits(&config, &env, 0);
    let line = line_with(&text, "kubectl v1.");
    assert!(
        line.trim_start().starts_with("ok")
            && line.contains(&format!("runs Kubernetes {server}"))
            && line.contains(plane.server()),
        "{text}"
    );
    assert!(!text.contains("v1.30"), "{text}");
    assert!(
        line_begins(&text, "no CNI and no kube-proxy yet", "ok"),
        "{text}"
    );

    assert_what_already_runs_is_refused_or_upgraded(&machine, &plane, &config, &env);
    // A kubectl two minors away from the server.
    machine.kubectl_claiming("v1.34.0");
    let text = machine.check_exits(&config, &env, 1);
    let line = line_with(&text, "kubectl v1.34");
    assert!(
        line.trim_start().starts_with("MISSING")
            && line.contains(&format!("cluster's Kubernetes {server}")),
        "{text}"
    );

    assert_the_skew_is_unchecked_without_an_answering_server(&machine, &plane, &key);
}

/// What a cluster made with Talos's defaults runs is refused, saying which setting its machine
/// config needs; a Cilium installed by another helm release too; the release this profile
/// upgrades is ok.
fn assert_what_already_runs_is_refused_or_upgraded(
    machine: &Machine,
    plane: &ControlPlane,
    config: &Path,
    env: &[(&str, &OsStr)],
) {
    // What a cluster made with Talos's defaults runs (its bootstrap manifests: the DaemonSets
    // kube-system/kube-flannel, Talos internal/app/machined/pkg/controllers/k8s/internal/
    // k8stemplates/flannel.go, and kube-system/kube-proxy), and a Cilium another helm release
    // installed (helm writes meta.helm.sh/release-name on every object it installs).
    for (name, annotations) in [
        ("kube-flannel", "{}"),
        ("kube-proxy", "{}"),
        ("cilium", r#"{"meta.helm.sh/release-name": "cilium-cli"}"#),
    ] {
        plane.kubectl_ok(&["apply", "-f", "-"], &daemonset(name, annotations));
    }
    let text = machine.check_exits(config, env, 1);
    for (needle, hint) in [
        ("runs flannel (kube-system/kube-flannel)", "cni.name: none"),
        (
            "runs kube-proxy (kube-system/kube-proxy)",
            "proxy.disabled: true",
        ),
        ("release 'cilium-cli'", "helm refuses to adopt"),
    ] {
        let line = line_with(&text, needle);
        assert!(
            line.trim_start().starts_with("MISSING") && line.contains(hint),
            "{text}"
        );
    }
    // Cilium as the helm release this profile upgrades, and nothing else.
    plane.kubectl_ok(
        &[
            "-n",
            "kube-system",
            "delete",
            "daemonset",
            "kube-flannel",
            "kube-proxy",
        ],
        "",
    );
    plane.kubectl_ok(
        &["apply", "-f", "-"],
        &daemonset("cilium", r#"{"meta.helm.sh/release-name": "cilium"}"#),
    );
    let text = machine.check_exits(config, env, 0);
    assert!(
        line_begins(&text, "Cilium is the helm release cilium", "ok"),
        "{text}"
    );
}

/// The server does not answer, or no kubeconfig is named: the skew is unchecked, not missing,
/// and the second says how to name one.
fn assert_the_skew_is_unchecked_without_an_answering_server(
    machine: &Machine,
    plane: &ControlPlane,
    key: &Path,
) {
    machine.kubectl_claiming("v1.32.0");
    let closed = format!("https://127.0.0.1:{}", testkit::free_port());
    let mut kubeconfig: Value =
        serde_json::from_str(&fs::read_to_string(plane.kubeconfig()).unwrap()).unwrap();
    kubeconfig["clusters"][0]["cluster"]["server"] = Value::String(closed.clone());
    let down = machine.path("down.kubeconfig");
    fs::write(&down, kubeconfig.to_string()).unwrap();
    let config = machine.config(&fixture_sops(), Some(&closed));
    let env = [
        ("SOPS_AGE_KEY_FILE", key.as_os_str()),
        ("KUBECONFIG", down.as_os_str()),
    ];
    let text = machine.check_exits(&config, &env, 0);
    let line = line_with(&text, "kubectl v1.32");
    assert!(
        line.trim_start().starts_with("optional")
            && line.contains("cannot be checked yet")
            && line.contains(&format!("the API server at {closed} does not answer")),
        "{text}"
    );

    // No kubeconfig named: unchecked too, saying how to name one.
    let text = machine.check_exits(&config, &[("SOPS_AGE_KEY_FILE", key.as_os_str())], 0);
    assert!(
        line_with(&text, "kubectl v1.32").contains("KUBECONFIG=FILE"),
        "{text}"
    );
}

#[test]
fn the_shipped_secrets_example_encrypted_with_a_test_key_passes_the_check_and_renders() {
    let Some(machine) = Machine::new() else {
        return;
    };
    let example = repo().join("config/onprem.secrets.example.yaml");
    // Missing, the SOPS file's error points at the example and the sops command.
    let sops_file = machine.path("onprem.secrets.sops.yaml");
    let config = machine.config(&sops_file, None);
    let (key, recipient) = machine.age_key("test.agekey");
    let text = machine.check_exits(&config, &[("SOPS_AGE_KEY_FILE", key.as_os_str())], 1);
    let line = line_with(&text, "cannot read");
    assert!(
        line.trim_start().starts_with("INVALID")
            && line.contains("config/onprem.secrets.example.yaml")
            && line.contains("sops --encrypt --age"),
        "{text}"
    );

    // The example, encrypted as its own comment says.
    let out = Command::new(&machine.sops)
        .args(["--encrypt", "--age", &recipient, "--output"])
        .arg(&sops_file)
        .arg(&example)
        .env_remove("SOPS_AGE_KEY_FILE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", testkit::process::text(&out));
    let text = machine.check_exits(&config, &[("SOPS_AGE_KEY_FILE", key.as_os_str())], 0);
    assert!(
        line_with(&text, "age key").contains("decrypts")
            && line_begins(&text, "and its SOPS file", "ok"),
        "{text}"
    );
    // The router's hairpin, which nothing here can see, is named with where it is checked.
    let hairpin = line_with(&text, "hairpins 203.0.113.47");
    assert!(
        hairpin.trim_start().starts_with("by hand") && hairpin.contains("make cluster-status"),
        "{text}"
    );

    assert_the_example_renders_every_secret_with_fake_values(&machine, &config, &sops_file, &key);
}

/// The encrypted example renders, and its values, all obviously fake, fill every Secret of the
/// template.
fn assert_the_example_renders_every_secret_with_fake_values(
    machine: &Machine,
    config: &Path,
    sops_file: &Path,
    key: &Path,
) {
    let rendered = machine.path("rendered");
    let out = Command::new(testkit::workspace::bin("render-platform"))
        .args(["--profile", "onprem", "--config"])
        .arg(config)
        .arg("--out-dir")
        .arg(&rendered)
        .output()
        .unwrap();
    testkit::process::success_stdout(&out);
    let decrypted = Command::new(&machine.sops)
        .args(["--decrypt", "--output-type", "json"])
        .arg(sops_file)
        .env("SOPS_AGE_KEY_FILE", key.as_os_str())
        .output()
        .unwrap();
    let document = testkit::process::success_stdout(&decrypted);
    let out = testkit::process::run_with_stdin(
        Command::new(testkit::workspace::bin("render-platform"))
            .arg("--secrets")
            .arg(rendered.join("secrets.json")),
        document.as_bytes(),
    );
    let secrets: Value = serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap();
    let names: Vec<String> = secrets["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}/{}",
                s["metadata"]["namespace"].as_str().unwrap(),
                s["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "ceph-csi-rbd/csi-rbd-secret",
            "external-dns/ovh-credentials",
            "crowdsec/crowdsec-bouncer-key",
            "traefik/crowdsec-bouncer-key",
        ]
    );
    // Its values are obviously fake.
    let clear: Value = serde_json::from_str(&document).unwrap();
    for (section, values) in clear.as_object().unwrap() {
        if section == "sops" {
            continue;
        }
        for (key, value) in values.as_object().unwrap() {
            assert!(
                value.as_str().unwrap().starts_with("EXAMPLE-"),
                "{section}.{key} does not look fake"
            );
        }
    }
}

#[test]
fn make_refuses_an_unknown_profile_by_name_before_anything_else() {
    for profile in ["onprme", "", "edge onprem"] {
        let out = Command::new("make")
            .args(["--no-print-directory", "check"])
            .arg(format!("PROFILE={profile}"))
            .current_dir(repo())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{profile}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "PROFILE={profile} is not a profile: use one of edge, onprem"
            )),
            "{profile}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{profile}: something ran");
        assert!(!stderr.contains("cp config/"), "{stderr}");
    }
}
