//! `make check` (pipelines/check-prereqs.sh) on a PATH made by the test: stand-ins of talosctl,
//! kubectl, helm, curl, cargo and rustup that print the versions the real ones print, and the few
//! system tools the script uses. One line per prerequisite; non-zero when a required one is
//! missing: a missing tool, a talosctl of another minor than the pinned Talos, no Scaleway
//! credentials, an invalid platform config.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use testkit::pin;

fn repo() -> PathBuf {
    testkit::workspace::root()
}

fn script(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    fs::write(&path, format!("#!/usr/bin/env bash\n{body}\n")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// What an operator has made before `make check`: both Talos images of the pins recorded, as
/// make talos-image-digests records them, and the SSH public key the example infra config names
/// (~/.ssh/id_ed25519.pub).
fn operator_files(work: &Path, home: &Path) {
    let talos = pin("TALOS_VERSION");
    fs::write(
        work.join("config/talos-image-digests.env"),
        format!(
            "{talos}/{}/scaleway-amd64.raw.zst={}\n{talos}/{}/metal-amd64.raw.zst={}\n",
            pin("TALOS_CONTROL_PLANE_SCHEMATIC"),
            "c".repeat(64),
            pin("TALOS_WORKER_SCHEMATIC"),
            "d".repeat(64)
        ),
    )
    .unwrap();
    fs::create_dir_all(home.join(".ssh")).unwrap();
    fs::write(
        home.join(".ssh/id_ed25519.pub"),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEdgepopTestKeyOnly operator\n",
    )
    .unwrap();
}

/// The clients make check asks for their versions, answering as the real ones do, and the
/// tools it only looks for.
fn client_stand_ins(bin: &Path) {
    // What the real clients print (talosctl: `version --client --short`; kubectl:
    // `version --client`; helm: `version --short`).
    let (talos, k8s) = (pin("TALOS_VERSION"), pin("KUBERNETES_VERSION"));
    for (name, text) in [
        (
            "talosctl",
            format!("echo 'Client:'; echo '\tTalos {talos}'"),
        ),
        (
            "kubectl",
            format!("echo 'Client Version: {k8s}'; echo 'Kustomize Version: v5.7.1'"),
        ),
        ("helm", helm_reporting("v3.19.0+g3d8990f")),
        ("curl", "echo curl 8.14.1".to_owned()),
        // scw-infra runs both on the control planes' image (apply/image_file.rs).
        (
            "zstd",
            "echo '*** Zstandard CLI (64-bit) v1.5.4'".to_owned(),
        ),
        ("qemu-img", "echo 'qemu-img version 7.2.15'".to_owned()),
        ("cargo", "echo cargo 1.95.0".to_owned()),
        ("rustup", "echo wasm32-wasip1".to_owned()),
    ] {
        script(bin, name, &text);
    }
}

/// A helm stand-in that prints `version` for `helm version --short`, and fails `helm diff` (no
/// plugin).
pub(crate) fn helm_reporting(version: &str) -> String {
    format!("[[ $1 == version ]] && echo '{version}'; [[ $1 != diff ]]")
}

struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    /// Everything present and right: the pinned talosctl minor, a kubectl of the pinned
    /// Kubernetes minor, a recent helm, credentials in the environment, valid configs and the
    /// vendored CRDs (under a versions file of the test's own, as in tests/platform.rs).
    fn ready() -> Machine {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        fs::create_dir_all(&bin).unwrap();
        for tool in [
            "bash",
            "env",
            "dirname",
            "grep",
            "head",
            "sort",
            "cut",
            "sha256sum",
            "awk",
            "tr",
            "mktemp",
            "cp",
            "rm",
        ] {
            let out = Command::new("bash")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .unwrap();
            let path = String::from_utf8(out.stdout).unwrap();
            std::os::unix::fs::symlink(path.trim(), bin.join(tool)).unwrap();
        }
        client_stand_ins(&bin);

        let work = dir.path().join("work");
        let version = pin("GATEWAY_API_VERSION");
        let crds = work.join(format!("k8s/vendor/gateway-api-{version}"));
        fs::create_dir_all(&crds).unwrap();
        fs::write(
            crds.join("gateways.yaml"),
            "kind: CustomResourceDefinition\n",
        )
        .unwrap();
        let sum = Command::new("sha256sum")
            .arg(crds.join("gateways.yaml"))
            .output()
            .unwrap();
        let sum = String::from_utf8(sum.stdout).unwrap()[..64].to_owned();
        let versions: String = fs::read_to_string(repo().join("k8s/versions.env"))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("VENDOR_GATEWAY_API_"))
            .map(|l| format!("{l}\n"))
            .collect();
        fs::write(
            dir.path().join("versions.env"),
            format!("{versions}VENDOR_GATEWAY_API_GATEWAYS=gateways.yaml:{sum}\n"),
        )
        .unwrap();
        fs::create_dir_all(work.join("config")).unwrap();
        for name in ["edge", "infra", "platform"] {
            fs::copy(
                repo().join(format!("config/{name}.example.json")),
                work.join(format!("config/{name}.json")),
            )
            .unwrap();
        }
        operator_files(&work, &dir.path().join("home"));
        Machine { dir }
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    /// [`Machine::check`] as it is, which must fail (exit 1): the line of its report naming
    /// `what`.
    fn failing_line(&self, what: &str) -> String {
        line_with(&self.check_exits(&[], &[], 1), what).to_owned()
    }

    /// Replaces `from` with `to` in the work folder's file `rel`; its path.
    fn edit(&self, rel: &str, from: &str, to: &str) -> PathBuf {
        let path = self.dir.path().join("work").join(rel);
        let text = fs::read_to_string(&path).unwrap().replace(from, to);
        fs::write(&path, text).unwrap();
        path
    }

    /// [`Machine::check`], which must exit with `code`: its stdout.
    fn check_exits(&self, env: &[(&str, &str)], unset: &[&str], code: i32) -> String {
        let out = self.check(env, unset);
        assert_eq!(out.status.code(), Some(code), "{}", report(&out));
        stdout(&out)
    }

    fn check(&self, env: &[(&str, &str)], unset: &[&str]) -> Output {
        // The tools make check builds before it runs the script.
        testkit::workspace::bin("scw-infra");
        testkit::workspace::bin("render-edge");
        let tools = testkit::workspace::bin("render-platform")
            .parent()
            .unwrap()
            .to_path_buf();
        let mut cmd = Command::new(self.bin().join("bash"));
        cmd.arg(repo().join("pipelines/check-prereqs.sh"))
            .current_dir(self.dir.path().join("work"))
            .env_clear()
            .env("PATH", self.bin())
            .env("HOME", self.dir.path().join("home"))
            .env("BIN", tools)
            .env("VERSIONS_FILE", self.dir.path().join("versions.env"))
            .env("SCW_ACCESS_KEY", "SCWABCDEFGHIJKLMNOPQ")
            .env("SCW_SECRET_KEY", "11111111-2222-4333-8444-555555555555")
            .env(
                "SCW_DEFAULT_PROJECT_ID",
                "66666666-7777-4888-9999-000000000000",
            )
            .stdin(Stdio::null());
        for name in unset {
            cmd.env_remove(name);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn report(out: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        out.status.code(),
        stdout(out),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(crate) fn line_with<'a>(out: &'a str, needle: &str) -> &'a str {
    out.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with `{needle}` in:\n{out}"))
}

/// Whether make check's line naming `needle` begins with `verdict` (`ok`, `MISSING`, ...).
pub(crate) fn line_begins(out: &str, needle: &str, verdict: &str) -> bool {
    line_with(out, needle).trim_start().starts_with(verdict)
}

#[test]
fn a_ready_machine_passes_with_one_line_per_prerequisite() {
    let machine = Machine::ready();
    let out = machine.check(&[], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let text = stdout(&out);
    let talos_minor = pin("TALOS_VERSION").rsplit_once('.').unwrap().0.to_owned();
    assert!(line_begins(&text, "talosctl", "ok"));
    assert!(line_with(&text, "talosctl").contains(&talos_minor));
    assert!(line_begins(&text, "kubectl", "ok"));
    let helm = line_with(&text, "helm v3.19.0");
    assert!(helm.trim_start().starts_with("ok"), "{helm}");
    // The major version the platform layer is written for is stated.
    assert!(
        helm.contains(&format!("Helm {}", pin("HELM_MAJOR_VERSION"))),
        "{helm}"
    );
    assert!(line_begins(&text, "helm diff plugin", "optional"));
    assert!(line_begins(&text, "kubeconform", "optional"));
    assert!(line_begins(&text, "config/platform.json", "ok"), "{text}");
    assert!(line_begins(&text, "Gateway API", "ok"), "{text}");
    assert!(line_begins(&text, "images' sha256", "ok"), "{text}");
    assert!(!text.contains("MISSING"), "{text}");
    // Nothing secret is printed: only whether it is set.
    assert!(!report(&out).contains("11111111-2222"), "{}", report(&out));
}

#[test]
fn a_missing_tool_fails_naming_it() {
    let machine = Machine::ready();
    fs::remove_file(machine.bin().join("helm")).unwrap();
    let out = machine.check(&[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", report(&out));
    assert!(line_begins(&stdout(&out), "helm", "MISSING"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("something is missing"));
}

#[test]
fn the_image_tools_of_the_import_are_missing_naming_their_package() {
    for (tool, package) in [("zstd", "zstd"), ("qemu-img", "qemu-utils")] {
        let machine = Machine::ready();
        fs::remove_file(machine.bin().join(tool)).unwrap();
        let said = machine.check_exits(&[], &[], 1);
        let line = line_with(&said, tool);
        assert!(line.trim_start().starts_with("MISSING"), "{line}");
        assert!(
            line.contains(&format!("apt-get install {package}")),
            "{line}"
        );
    }
}

#[test]
fn a_talosctl_of_another_minor_fails_naming_both_versions() {
    let machine = Machine::ready();
    script(
        &machine.bin(),
        "talosctl",
        "echo 'Client:'; echo '\tTalos v1.12.4'",
    );
    let line = machine.failing_line("talosctl");
    assert!(line.trim_start().starts_with("MISSING"), "{line}");
    assert!(
        line.contains("v1.12") && line.contains(&pin("TALOS_VERSION")),
        "{line}"
    );
}

#[test]
fn a_helm_older_than_the_minimum_or_a_kubectl_two_minors_away_fails() {
    let machine = Machine::ready();
    script(&machine.bin(), "helm", &helm_reporting("v3.5.4+g1b5edb6"));
    script(&machine.bin(), "kubectl", "echo 'Client Version: v1.33.2'");
    let text = machine.check_exits(&[], &[], 1);
    assert!(line_begins(&text, "helm v3.5.4", "MISSING"), "{text}");
    assert!(line_begins(&text, "kubectl v1.33", "MISSING"), "{text}");
}

#[test]
fn helm_4_is_refused_saying_which_major_version_is_supported() {
    let machine = Machine::ready();
    script(&machine.bin(), "helm", &helm_reporting("v4.0.1+g3a12c9e"));
    let line = machine.failing_line("helm v4.0.1");
    assert!(line.trim_start().starts_with("MISSING"), "{line}");
    assert!(
        line.contains(&format!(
            "only Helm {} is supported",
            pin("HELM_MAJOR_VERSION")
        )),
        "{line}"
    );
}

#[test]
fn missing_credentials_fail() {
    let machine = Machine::ready();
    let text = machine.check_exits(
        &[],
        &["SCW_ACCESS_KEY", "SCW_SECRET_KEY", "SCW_DEFAULT_PROJECT_ID"],
        1,
    );
    assert!(line_begins(&text, "SCW_ACCESS_KEY", "MISSING"), "{text}");
}

#[test]
fn an_invalid_platform_config_fails_naming_the_field() {
    let machine = Machine::ready();
    // Hubble's UI without its relay: the chart would refuse it.
    machine.edit(
        "config/platform.json",
        "\"relay\": true",
        "\"relay\": false",
    );
    let line = machine.failing_line("platform.json");
    assert!(
        line.trim_start().starts_with("INVALID")
            && line.contains("cilium.hubble.ui")
            && line.matches("platform.json").count() == 1,
        "{line}"
    );
}

#[test]
fn a_vendored_crd_that_does_not_match_its_pin_fails() {
    let machine = Machine::ready();
    let version = pin("GATEWAY_API_VERSION");
    fs::write(
        machine.dir.path().join(format!(
            "work/k8s/vendor/gateway-api-{version}/gateways.yaml"
        )),
        "tampered\n",
    )
    .unwrap();
    let said = machine.check_exits(&[], &[], 1);
    assert!(line_with(&said, "Gateway API").contains("make vendor"));
}

#[test]
fn make_check_for_the_onprem_profile_asks_for_sops_its_age_key_and_a_well_formed_secrets_file() {
    let machine = Machine::ready();
    script(&machine.bin(), "sops", "echo 'sops 3.13.3 (latest)'");
    let work = machine.dir.path().join("work");
    let fixture = repo().join("tests/fixtures/sops/onprem.secrets.sops.yaml");
    let mut config: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(repo().join("config/onprem.example.json")).unwrap(),
    )
    .unwrap();
    config["secrets"] = serde_json::json!(fixture);
    fs::write(work.join("config/onprem.json"), config.to_string()).unwrap();
    let key = repo().join("tests/fixtures/sops/test-only.agekey");
    let key = key.to_str().unwrap();
    let onprem = [("PROFILE", "onprem"), ("SOPS_AGE_KEY_FILE", key)];
    // No Scaleway credentials and no talosctl: this cluster exists already.
    fs::remove_file(machine.bin().join("talosctl")).unwrap();
    let unset = ["SCW_ACCESS_KEY", "SCW_SECRET_KEY", "SCW_DEFAULT_PROJECT_ID"];
    let text = machine.check_exits(&onprem, &unset, 0);
    assert!(line_begins(&text, "sops", "ok"), "{text}");
    assert!(line_begins(&text, "config/onprem.json", "ok"), "{text}");
    assert!(!text.contains("SCW_"), "{text}");

    // No sops, no key, a secrets file with a clear value: each named.
    fs::remove_file(machine.bin().join("sops")).unwrap();
    let clear = machine.dir.path().join("clear.sops.yaml");
    fs::write(
        &clear,
        fs::read_to_string(&fixture)
            .unwrap()
            .replacen("user_key: ENC[", "user_key: clear-[", 1),
    )
    .unwrap();
    config["secrets"] = serde_json::json!(clear);
    fs::write(work.join("config/onprem.json"), config.to_string()).unwrap();
    let text = machine.check_exits(&[("PROFILE", "onprem")], &unset, 1);
    assert!(
        line_with(&text, "sops (not installed").contains("MISSING"),
        "{text}"
    );
    assert!(line_with(&text, "no age key").contains("MISSING"), "{text}");
    assert!(
        line_with(&text, "ceph.user_key").contains("is not encrypted"),
        "{text}"
    );
}

#[test]
fn talos_images_unrecorded_for_the_current_pins_are_missing_naming_the_target() {
    let machine = Machine::ready();
    // Recorded for another Talos version only: a bump leaves the new images unrecorded.
    let digests = machine.edit(
        "config/talos-image-digests.env",
        &pin("TALOS_VERSION"),
        "v1.13.0",
    );
    let line = machine.failing_line("images' sha256");
    assert!(
        line.trim_start().starts_with("MISSING")
            && line.contains("make talos-image-digests")
            && line.contains(&format!("Talos {}", pin("TALOS_VERSION")))
            && line.contains("(control-plane worker)"),
        "{line}"
    );
    fs::remove_file(&digests).unwrap();
    let said = machine.check_exits(&[], &[], 1);
    assert!(line_with(&said, "images' sha256").contains("MISSING"));
}

#[test]
fn a_malformed_infra_or_edge_config_is_invalid_naming_the_field() {
    let machine = Machine::ready();
    let config = machine.dir.path().join("work/config");
    let out = machine.check(&[], &[]);
    let text = stdout(&out);
    assert!(line_begins(&text, "config/infra.json", "ok"), "{text}");
    // The edge config is rendered against what the infra config gives, not the example's zone.
    let edge = line_with(&text, "config/edge.json").to_owned();
    assert!(
        edge.trim_start().starts_with("ok") && edge.contains("config/infra.json gives"),
        "{edge}"
    );

    // A misspelt key in infra.json, an even control-plane count: each refused by its field.
    let infra = fs::read_to_string(config.join("infra.json")).unwrap();
    for (text, field) in [
        (
            infra.replacen("\"cluster_name\"", "\"cluster_nmae\"", 1),
            "cluster_nmae",
        ),
        (
            infra.replacen("\"count\": 3", "\"count\": 2", 1),
            "control_plane.count",
        ),
    ] {
        assert_ne!(text, infra, "the example changed: {field}");
        fs::write(config.join("infra.json"), &text).unwrap();
        let line = machine.failing_line("config/infra.json");
        assert!(
            line.trim_start().starts_with("INVALID")
                && line.contains(field)
                && line.matches("infra.json").count() == 1,
            "{line}"
        );
    }
    fs::write(config.join("infra.json"), &infra).unwrap();

    // A truncated edge.json, an ACME server that is not one.
    let edge = fs::read_to_string(config.join("edge.json")).unwrap();
    for (text, field) in [
        (edge[..edge.len() / 2].to_owned(), "invalid JSON"),
        (edge.replacen("\"staging\"", "\"prod\"", 1), "acme.server"),
    ] {
        assert_ne!(text, edge, "the example changed: {field}");
        fs::write(config.join("edge.json"), &text).unwrap();
        let line = machine.failing_line("config/edge.json");
        assert!(
            line.trim_start().starts_with("INVALID") && line.contains(field),
            "{line}"
        );
        // The stand-in inputs are named as what they stand for, not as a temporary file.
        assert!(!line.contains("/tmp"), "{line}");
    }
}
