//! `pipelines/infra.sh` as `make apply-infra` runs it:
//! - the configs come from the real talosctl (built at `TALOSCTL_VERSION` by
//!   pipelines/upstream.sh): `gen secrets`, `gen config` with the patches scw-infra rendered,
//!   `machineconfig patch` for each worker's own config, `validate` (mode cloud for the control
//!   planes, metal for each worker); a talosctl of another minor is refused;
//! - the node calls (bootstrap, get, kubeconfig) go to testkit's `stand-ins/talosctl`, which
//!   answers as a node would (listening late, FailedPrecondition early in boot, AlreadyExists);
//!   whether etcd is bootstrapped is asked of the cluster, so a new cluster is bootstrapped again;
//! - the worker's image comes from a loopback Image Factory, checked against its pin;
//! - the node tools are recording stand-ins that show what the script gives each of them (the
//!   pins, the Scaleway secret only to the tools that need it).
//!
//! The script reads the config and the inventory, and writes the record, only through the
//! scw-infra cargo built (`names`, `talos-patches`, `platform-inputs`).

use crate::talos_schema;

mod workers;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use testkit::pin;
use testkit::process::assert_says_all;

/// The worker's schematic: the kernel arguments of the example config's offer (EM-A116X-SSD).
const WORKER_SCHEMATIC: &str = "b4f89946a66f1ffdda1caf6d31f852c10b2b2b2c320d040baf863e9962065f02";
const SECRET: &str = "11111111-1111-4111-8111-111111111111";
/// The example config's worker's own machine config, in OUT.
const WORKER_CONFIG: &str = "worker-edge-worker-1.yaml";

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    /// A working folder with the example config (disk /dev/nvme0n1) and a PATH whose talosctl is
    /// the stand-in in front of the real one; `None` (after a skip) when talosctl is not built.
    /// [`Env::new`] for a test whose pipeline downloads with curl (the images).
    fn with_curl(test: &str) -> Option<Env> {
        if Command::new("curl").arg("--version").output().is_err() {
            testkit::skip_or_fail(test, "curl");
            return None;
        }
        Env::new(test)
    }

    fn new(test: &str) -> Option<Env> {
        if !testkit::workspace::python_imports(test, "yaml", "python3 (the talosctl stand-in)") {
            return None;
        }
        let real = testkit::upstream::program(test, "talosctl")?;
        let env = Env {
            dir: tempfile::tempdir().unwrap(),
        };
        fs::create_dir_all(env.path("bin")).unwrap();
        fs::create_dir_all(env.path("state")).unwrap();
        std::os::unix::fs::symlink(testkit::standin::path("talosctl"), env.path("bin/talosctl"))
            .unwrap();
        fs::write(env.path("real-talosctl"), real.display().to_string()).unwrap();
        let example =
            fs::read_to_string(testkit::workspace::root().join("config/infra.example.json"))
                .unwrap();
        let mut infra: Value = serde_json::from_str(&example).unwrap();
        infra["workers"][0]["install_disk"] = "/dev/nvme0n1".into();
        env.write_config(&infra);
        // The pins as the repository has them.
        fs::copy(
            testkit::workspace::root().join("k8s/versions.env"),
            env.path("versions.env"),
        )
        .unwrap();
        Some(env)
    }

    /// [`Env::new`] with the configs made (`infra configs`).
    fn with_configs(test: &str) -> Option<Env> {
        let env = Env::new(test)?;
        ok(&env.infra("configs", &[]));
        Some(env)
    }

    /// The folder for stand-ins of the node tools (made) and the log they record their calls
    /// in.
    fn node_tools(&self) -> (PathBuf, PathBuf) {
        let bin = self.path("node-tools");
        fs::create_dir_all(&bin).unwrap();
        (bin, self.path("node-tools.log"))
    }

    /// A PATH whose first talosctl is one that says it is `version` (and does nothing else).
    fn path_with_talosctl_of(&self, version: &str) -> String {
        let other = self.path("other-bin");
        fs::create_dir_all(&other).unwrap();
        let fake = other.join("talosctl");
        fs::write(
            &fake,
            format!("#!/bin/sh\nprintf 'Client:\\nTalos {version}\\n'\n"),
        )
        .unwrap();
        fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
        format!("{}:{}", other.display(), std::env::var("PATH").unwrap())
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn out(&self, name: &str) -> PathBuf {
        self.path("out").join(name)
    }

    fn config(&self) -> Value {
        serde_json::from_str(&fs::read_to_string(self.path("infra.json")).unwrap()).unwrap()
    }

    fn write_config(&self, infra: &Value) {
        fs::write(self.path("infra.json"), infra.to_string()).unwrap();
    }

    /// Sets pins of the versions file the script reads (a test's copy of k8s/versions.env).
    fn pin(&self, key: &str, value: &str) {
        let text = fs::read_to_string(self.path("versions.env")).unwrap();
        let mut found = false;
        let lines: Vec<String> = text
            .lines()
            .map(|line| {
                if line.starts_with(&format!("{key}=")) {
                    found = true;
                    format!("{key}={value}")
                } else {
                    line.to_owned()
                }
            })
            .collect();
        assert!(found, "{key} is not pinned");
        fs::write(self.path("versions.env"), lines.join("\n") + "\n").unwrap();
    }

    /// The key the pipeline records `image` (`control-plane` or `worker`) under in the digests
    /// file: `<TALOS_VERSION>/<schematic>/<file>`.
    fn image_key(&self, image: &str) -> String {
        let (schematic, file) = match image {
            "control-plane" => (
                pin("TALOS_CONTROL_PLANE_SCHEMATIC"),
                "scaleway-amd64.raw.zst",
            ),
            "worker" => (WORKER_SCHEMATIC.to_owned(), "metal-amd64.raw.zst"),
            other => panic!("no image {other}"),
        };
        format!("{}/{schematic}/{file}", pin("TALOS_VERSION"))
    }

    /// Records the sha256 of `image` in the digests file the script reads, as
    /// `make talos-image-digests` does.
    fn record(&self, image: &str, digest: &str) {
        let path = self.path("talos-image-digests.env");
        let mut text = fs::read_to_string(&path).unwrap_or_default();
        text.push_str(&format!("{}={digest}\n", self.image_key(image)));
        fs::write(path, text).unwrap();
    }

    fn infra(&self, step: &str, extra: &[(&str, &str)]) -> Output {
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap()
        );
        let scw_infra = testkit::workspace::bin("scw-infra");
        let mut command = Command::new("bash");
        command
            .arg(testkit::workspace::root().join("pipelines/infra.sh"))
            .arg(step)
            .current_dir(testkit::workspace::root())
            .env("PATH", path)
            .env("BIN", scw_infra.parent().unwrap())
            .env("OUT", self.path("out"))
            .env("INFRA_CONFIG", self.path("infra.json"))
            .env("VERSIONS_FILE", self.path("versions.env"))
            .env("TALOS_DIGESTS", self.path("talos-image-digests.env"))
            .env("TALOSCTL_LOG", self.path("talosctl.log"))
            .env("TALOSCTL_STATE", self.path("state"))
            .env(
                "TALOSCTL_REAL",
                fs::read_to_string(self.path("real-talosctl")).unwrap(),
            )
            .env("BOOTSTRAP_INTERVAL", "0")
            // The operator's credentials, as the Makefile's environment would hold them.
            .env("SCW_SECRET_KEY", SECRET);
        for (k, v) in extra {
            command.env(k, v);
        }
        command.output().unwrap()
    }

    /// The talosctl calls so far: each one's argv, and whether the Scaleway secret reached it.
    fn calls(&self) -> Vec<(Vec<String>, bool)> {
        fs::read_to_string(self.path("talosctl.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let call: Value = serde_json::from_str(l).unwrap();
                let argv = serde_json::from_value(call["argv"].clone()).unwrap();
                (argv, call["scw_secret_in_env"] == true)
            })
            .collect()
    }

    /// What the etcd of the node at `address` runs from, as the talosctl stand-in keeps it:
    /// None while it has no etcd, null for a new one, the snapshot's record for a recovered one.
    fn state_of_etcd(&self, address: &str) -> Option<Value> {
        let text = fs::read_to_string(self.path("state").join(address).join("etcd")).ok()?;
        Some(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// The talosctl calls whose argv contains `word`.
    fn calls_with(&self, word: &str) -> Vec<Vec<String>> {
        self.calls()
            .into_iter()
            .map(|(argv, _)| argv)
            .filter(|argv| argv.iter().any(|a| a == word))
            .collect()
    }
}

/// What a step that must succeed said on stderr.
fn ok(out: &Output) -> String {
    testkit::process::assert_success(out);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn failed(out: &Output, code: i32, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert_says_all(&stderr, needles);
    stderr
}

pub(crate) fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The value of `--flag` in an argv, each time it is given (file names for `@file` patches).
/// Each `talosctl validate` call so far: the config it checked and its mode.
fn validations(env: &Env) -> Vec<(String, String)> {
    env.calls_with("validate")
        .iter()
        .map(|argv| {
            (
                flag_values(argv, "--config")[0].clone(),
                flag_values(argv, "--mode")[0].clone(),
            )
        })
        .collect()
}

fn flag_values(argv: &[String], name: &str) -> Vec<String> {
    argv.windows(2)
        .filter(|w| w[0] == name)
        .map(|w| {
            let value = w[1].trim_start_matches('@');
            if value.starts_with('/') {
                Path::new(value)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            } else {
                value.to_owned()
            }
        })
        .collect()
}

#[test]
fn configs_are_made_by_the_real_talosctl_from_the_rendered_patches_and_pass_its_validation() {
    let test = "configs_are_made_by_the_real_talosctl";
    let Some(env) = Env::with_configs(test) else {
        return;
    };

    assert_gen_config_gets_the_pins_and_the_patches(&env);
    assert_the_configs_are_private_and_hold_the_rendered_values(&env);
    let read = |role: &str| {
        talos_schema::documents(&fs::read_to_string(env.out(&format!("{role}.yaml"))).unwrap())
    };

    // A second run changes nothing: same secrets, no gen call, same configs (same digests).
    let secrets = fs::read(env.out("secrets.yaml")).unwrap();
    let worker_bytes = fs::read(env.out(WORKER_CONFIG)).unwrap();
    let stderr = ok(&env.infra("configs", &[]));
    assert!(stderr.contains("up to date"), "{stderr}");
    assert_eq!(env.calls_with("gen").len(), 2);
    assert_eq!(env.calls_with("machineconfig").len(), 1);
    assert_eq!(fs::read(env.out(WORKER_CONFIG)).unwrap(), worker_bytes);

    // Another pin's bump changes nothing; Kubernetes' regenerates them.
    env.pin("CILIUM_VERSION", "1.20.9");
    assert!(ok(&env.infra("configs", &[])).contains("up to date"));
    env.pin("KUBERNETES_VERSION", "v1.36.4");
    ok(&env.infra("configs", &[]));
    let regenerated = env.calls_with("config");
    assert_eq!(regenerated.len(), 2, "{regenerated:?}");
    assert_eq!(
        flag_values(&regenerated[1], "--kubernetes-version"),
        ["v1.36.4"]
    );

    // A changed input regenerates the configs, never the secrets.
    let mut infra = env.config();
    infra["workers"][0]["install_disk"] = "/dev/sdb".into();
    env.write_config(&infra);
    ok(&env.infra("configs", &[]));
    assert_eq!(env.calls_with("config").len(), 3);
    assert_eq!(fs::read(env.out("secrets.yaml")).unwrap(), secrets);
    let worker = read("worker-edge-worker-1");
    assert_eq!(
        talos_schema::document(&worker, "v1alpha1")["machine"]["install"]["disk"],
        "/dev/sdb"
    );
}

/// talosctl gen config gets the pins, not its own defaults (the nodes' Talos, the cluster's one
/// Kubernetes, the installer of TALOS_VERSION) and the patches by role; each config is checked
/// by talosctl validate as its node will; no call holds the Scaleway secret.
fn assert_gen_config_gets_the_pins_and_the_patches(env: &Env) {
    let gen_secrets = env.calls_with("secrets");
    assert_eq!(gen_secrets.len(), 1);
    let gen_config = env.calls_with("config");
    assert_eq!(gen_config.len(), 1, "{gen_config:?}");
    let gen_config = &gen_config[0];
    assert_eq!(
        gen_config[..4],
        ["gen", "config", "edge-par", "https://api.example.com:6443"]
    );
    assert_eq!(flag_values(gen_config, "--talos-version"), ["v1.13.11"]);
    assert_eq!(flag_values(gen_config, "--kubernetes-version"), ["v1.36.3"]);
    assert_eq!(
        flag_values(gen_config, "--install-image"),
        [format!(
            "factory.talos.dev/scaleway-installer/{}:v1.13.11",
            pin("TALOS_CONTROL_PLANE_SCHEMATIC")
        )]
    );
    assert_eq!(flag_values(gen_config, "--with-secrets"), ["secrets.yaml"]);
    assert_eq!(
        flag_values(gen_config, "--config-patch"),
        ["10-cni-none-no-kube-proxy.yaml", "20-kubeprism.yaml"]
    );
    assert_eq!(
        flag_values(gen_config, "--config-patch-control-plane"),
        [
            "30-cert-sans.controlplane.yaml",
            "40-nodeport-range.controlplane.yaml",
            "60-control-plane-no-workloads.controlplane.yaml",
            "65-talos-api-access.controlplane.yaml"
        ]
    );
    assert_eq!(
        flag_values(gen_config, "--config-patch-worker"),
        [
            "55-installer-image.worker.yaml",
            "70-edge-worker.worker.yaml"
        ]
    );
    // The worker's own config: gen config's worker.yaml with its own patches, written aside
    // then moved into place.
    let patch = env.calls_with("machineconfig");
    assert_eq!(patch.len(), 1, "{patch:?}");
    assert_eq!(
        patch[0][..3],
        [
            "machineconfig",
            "patch",
            &env.out("worker.yaml").display().to_string()
        ]
    );
    assert_eq!(
        flag_values(&patch[0], "--patch"),
        [
            "50-install-disk.each-worker.yaml",
            "75-hostname.each-worker.yaml"
        ]
    );
    assert_eq!(
        flag_values(&patch[0], "--output"),
        [format!("{WORKER_CONFIG}.part")]
    );
    // Each node's config checked by talosctl validate as its node will: cloud, metal.
    let validations = validations(env);
    assert_eq!(
        validations,
        [
            ("controlplane.yaml".to_owned(), "cloud".to_owned()),
            (WORKER_CONFIG.to_owned(), "metal".to_owned())
        ]
    );
    // No talosctl call ever holds the Scaleway secret.
    assert!(env.calls().iter().all(|(_, secret)| !secret));
}

/// Secrets and everything that embeds them are 0600; what talosctl validate accepted holds the
/// rendered values.
fn assert_the_configs_are_private_and_hold_the_rendered_values(env: &Env) {
    for file in [
        "secrets.yaml",
        "controlplane.yaml",
        "worker.yaml",
        WORKER_CONFIG,
        "talosconfig",
    ] {
        assert_eq!(mode(&env.out(file)), 0o600, "{file}");
    }
    // What talosctl validate accepted holds the rendered values. (Talos's JSON schema is not
    // the judge of a whole generated config: gen config writes the deprecated `persist: true`,
    // which the schema leaves out.)
    let read = |role: &str| {
        talos_schema::documents(&fs::read_to_string(env.out(&format!("{role}.yaml"))).unwrap())
    };
    for role in ["controlplane", "worker"] {
        let machine = talos_schema::document(&read(role), "v1alpha1").clone();
        assert_eq!(machine["cluster"]["network"]["cni"]["name"], "none");
        assert!(
            machine["machine"]["kubelet"]["image"]
                .as_str()
                .unwrap()
                .ends_with(":v1.36.3")
        );
    }
    let cp = read("controlplane");
    let cp_machine = talos_schema::document(&cp, "v1alpha1");
    assert_eq!(
        cp_machine["cluster"]["apiServer"]["certSANs"],
        json!(["api.example.com"])
    );
    assert_eq!(
        cp_machine["machine"]["install"]["image"],
        format!(
            "factory.talos.dev/scaleway-installer/{}:v1.13.11",
            testkit::pin("TALOS_CONTROL_PLANE_SCHEMATIC")
        )
    );
    let worker = read("worker-edge-worker-1");
    let worker_machine = talos_schema::document(&worker, "v1alpha1");
    assert_eq!(worker_machine["machine"]["install"]["disk"], "/dev/nvme0n1");
    // The installer of the worker's schematic, whose kernel arguments its offer needs.
    assert_eq!(
        worker_machine["machine"]["install"]["image"],
        format!("factory.talos.dev/metal-installer/{WORKER_SCHEMATIC}:v1.13.11")
    );
    // gen config's HostnameConfig (auto: stable) turned into the config's worker name.
    let hostname = talos_schema::document(&worker, "HostnameConfig");
    assert_eq!(hostname["hostname"], "edge-worker-1");
    assert_eq!(hostname["auto"], "off");
}

#[test]
fn each_worker_gets_its_own_config_the_same_across_runs_and_a_removed_workers_goes() {
    let test = "each_worker_gets_its_own_config";
    let Some(env) = Env::new(test) else { return };
    let mut infra = env.config();
    let mut second = infra["workers"][0].clone();
    second["name"] = "edge-worker-2".into();
    second["install_disk"] = "/dev/sdb".into();
    infra["workers"].as_array_mut().unwrap().push(second);
    env.write_config(&infra);
    ok(&env.infra("configs", &[]));
    let own = |name: &str| env.out(&format!("worker-{name}.yaml"));
    let read = |name: &str| talos_schema::documents(&fs::read_to_string(own(name)).unwrap());
    for (name, disk) in [
        ("edge-worker-1", "/dev/nvme0n1"),
        ("edge-worker-2", "/dev/sdb"),
    ] {
        assert_eq!(mode(&own(name)), 0o600, "{name}");
        let documents = read(name);
        let machine = talos_schema::document(&documents, "v1alpha1");
        assert_eq!(machine["machine"]["install"]["disk"], disk, "{name}");
        assert_eq!(
            talos_schema::document(&documents, "HostnameConfig")["hostname"],
            name
        );
    }
    // Each node's config checked as its node will: the control planes', then each worker's.
    let validated = validations(&env);
    let checked = |file: &str, mode: &str| (file.to_owned(), mode.to_owned());
    assert_eq!(
        validated,
        [
            checked("controlplane.yaml", "cloud"),
            checked("worker-edge-worker-1.yaml", "metal"),
            checked("worker-edge-worker-2.yaml", "metal")
        ]
    );

    // A second run makes none again: the same bytes, so the same digests on the nodes.
    let bytes = |name: &str| fs::read(own(name)).unwrap();
    let (first, second) = (bytes("edge-worker-1"), bytes("edge-worker-2"));
    assert!(ok(&env.infra("configs", &[])).contains("up to date"));
    assert_eq!(env.calls_with("machineconfig").len(), 2);
    assert_eq!(
        (bytes("edge-worker-1"), bytes("edge-worker-2")),
        (first.clone(), second)
    );

    // One worker's disk changed: its config says so, the other's is what it was.
    infra["workers"][1]["install_disk"] = "/dev/sdc".into();
    env.write_config(&infra);
    ok(&env.infra("configs", &[]));
    let documents = read("edge-worker-2");
    assert_eq!(
        talos_schema::document(&documents, "v1alpha1")["machine"]["install"]["disk"],
        "/dev/sdc"
    );
    assert_eq!(bytes("edge-worker-1"), first);

    // A worker removed from the config: its config (the cluster's secrets) and patches go.
    infra["workers"].as_array_mut().unwrap().remove(0);
    env.write_config(&infra);
    let stderr = ok(&env.infra("configs", &[]));
    assert!(
        stderr.contains("edge-worker-1 is no longer a worker"),
        "{stderr}"
    );
    assert!(!own("edge-worker-1").exists());
    assert!(!env.out("patches/workers/edge-worker-1").exists());
    assert!(own("edge-worker-2").is_file());
}

#[test]
fn a_value_that_is_not_what_its_field_holds_stops_the_configs_before_talosctl() {
    let test = "a_value_that_is_not_what_its_field_holds";
    let Some(env) = Env::new(test) else { return };
    // GNU sed's `e` flag runs the pattern space as a command: a disk like this one ran `touch`
    // when the patches were templated with sed.
    let marker = env.path("ran");
    for (field, value) in [
        (
            "install_disk",
            format!("/dev/sda|e touch {}|", marker.display()),
        ),
        ("install_disk", "/dev/sda\n    wipe: true".to_owned()),
    ] {
        let mut infra = env.config();
        infra["workers"][0][field] = value.clone().into();
        env.write_config(&infra);
        let out = env.infra("configs", &[]);
        failed(
            &out,
            2,
            &["infra.json", "workers[0].install_disk", "device path"],
        );
        assert!(!marker.exists(), "{value}");
    }
    let mut infra = env.config();
    infra["workers"][0]["install_disk"] = "/dev/sda".into();
    infra["api_hostname"] = "api|e touch x|".into();
    env.write_config(&infra);
    failed(&env.infra("configs", &[]), 2, &["api_hostname"]);
    assert!(env.calls().is_empty(), "{:?}", env.calls());
    assert!(!env.out("patches").exists());
}

#[test]
fn a_talosctl_of_another_minor_is_refused_naming_both_versions() {
    let test = "a_talosctl_of_another_minor_is_refused";
    let Some(env) = Env::new(test) else { return };
    let other = env.path("other-bin");
    fs::create_dir_all(&other).unwrap();
    let fake = other.join("talosctl");
    fs::write(
        &fake,
        "#!/bin/sh\nprintf 'Client:\\nTalos v1.12.4\\n'\necho \"$@\" >> \"$0.calls\"\n",
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", other.display(), std::env::var("PATH").unwrap());
    let out = env.infra("configs", &[("PATH", &path)]);
    failed(
        &out,
        1,
        &["talosctl v1.12 is installed", "v1.13.11", "same minor only"],
    );
    // Asked its version, nothing else.
    assert_eq!(
        fs::read_to_string(other.join("talosctl.calls")).unwrap(),
        "version --client --short\n"
    );
    assert!(!env.out("secrets.yaml").exists());
}

/// An inventory of one cluster: three control planes at `203.0.113.<first>..+2`, the worker.
fn inventory(first: u8) -> String {
    let cp = |i: u8| {
        json!({"name": format!("edge-par-cp-{i}"), "role": "controlplane", "kind": "instance",
               "zone": "fr-par-1", "id": format!("1111111{i}-1111-4111-8111-{first:012}"),
               "public_ipv4": format!("203.0.113.{}", first + i - 1), "public_ipv6": null,
               "private_ipv4": null, "steps": {}})
    };
    json!({"kind": "NodeInventory", "version": 2, "cluster_name": "edge-par",
           "cluster_endpoint": "https://api.example.com:6443", "ssh_key_ids": [],
           "nodes": [cp(1), cp(2), cp(3),
                     {"name": "edge-worker-1", "role": "worker", "kind": "elastic-metal",
                      "zone": "fr-par-1", "id": "22222222-2222-4222-8222-222222222222",
                      "public_ipv4": "203.0.113.10", "public_ipv6": null, "private_ipv4": null,
                      "steps": {}}]})
    .to_string()
}

#[test]
fn etcd_is_bootstrapped_when_the_cluster_runs_none_once_ready_and_again_for_a_new_cluster() {
    let test = "etcd_is_bootstrapped_when_the_cluster_runs_none";
    let Some(env) = Env::with_configs(test) else {
        return;
    };
    // Without an inventory the step says what to run first.
    failed(
        &env.infra("bootstrap", &[]),
        1,
        &["inventory.json is missing"],
    );

    // Booting machines: each node refuses the first call, and the first bootstrap comes too
    // early for Talos.
    let booting = [
        ("TALOSCTL_SILENT_CALLS", "1"),
        ("TALOSCTL_BOOTSTRAP_NOT_READY", "1"),
    ];
    fs::write(env.out("inventory.json"), inventory(11)).unwrap();
    let stderr = ok(&env.infra("bootstrap", &booting));
    assert!(
        stderr.contains(
            "waiting for the control planes to answer (203.0.113.11 203.0.113.12 203.0.113.13)"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "203.0.113.11 is not ready to bootstrap yet (2/90): bootstrap is not available yet"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("bootstrapped etcd on 203.0.113.11"),
        "{stderr}"
    );
    let bootstraps = env.calls_with("bootstrap");
    assert_eq!(bootstraps.len(), 2, "{bootstraps:?}");
    let call = bootstraps[1].join(" ");
    assert!(
        call.contains("--nodes 203.0.113.11") && call.contains("--endpoints 203.0.113.11"),
        "{call}"
    );
    assert!(
        call.contains(&format!(
            "--talosconfig {}",
            env.out("talosconfig").display()
        )),
        "{call}"
    );

    // Again: the cluster says etcd runs; nothing is bootstrapped.
    let stderr = ok(&env.infra("bootstrap", &[]));
    assert!(
        stderr.contains("etcd runs on 203.0.113.11: the cluster is bootstrapped"),
        "{stderr}"
    );
    assert_eq!(env.calls_with("bootstrap").len(), 2);

    // make destroy, then make apply: new machines, new addresses, no etcd anywhere. The cluster
    // is asked, not a file of this machine: it is bootstrapped again.
    fs::write(env.out("inventory.json"), inventory(21)).unwrap();
    let stderr = ok(&env.infra("bootstrap", &[]));
    assert!(
        stderr.contains("bootstrapped etcd on 203.0.113.21"),
        "{stderr}"
    );
    assert_eq!(env.calls_with("bootstrap").len(), 3);
    assert!(env.calls().iter().all(|(_, secret)| !secret));

    assert_the_outputs_are_what_the_next_layers_read(&env);
}

/// A real etcd snapshot holding `key`, and the real etcdutl: a one-member etcd started for it,
/// `etcdctl put`, then `etcdctl snapshot save` (the stream Talos's EtcdSnapshot sends). None:
/// the upstream programs are missing (skipped, or failed under EDGEPOP_REQUIRE_ALL).
fn real_snapshot(test: &str, dir: &Path, key: &str) -> Option<(PathBuf, PathBuf)> {
    let program = |name| testkit::upstream::program(test, name);
    let (etcd, etcdctl, etcdutl) = (program("etcd")?, program("etcdctl")?, program("etcdutl")?);
    let client = format!("http://127.0.0.1:{}", testkit::free_port());
    let peer = format!("http://127.0.0.1:{}", testkit::free_port());
    let mut member = testkit::process::Running::spawn(
        Command::new(etcd)
            .arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=default={peer}")),
    );
    member.wait_for_line("ready to serve client requests");
    let etcdctl = |args: &[&str]| testkit::talos_node::etcdctl_ok(&etcdctl, &client, args);
    etcdctl(&["put", key, "before"]);
    let snapshot = dir.join("edge-par.snapshot");
    etcdctl(&["snapshot", "save", snapshot.to_str().unwrap()]);
    Some((snapshot, etcdutl))
}

#[test]
fn after_losing_every_control_plane_the_bootstrap_recovers_etcd_from_the_snapshot_given() {
    let test = "after_losing_every_control_plane_the_bootstrap_recovers_etcd";
    let Some(env) = Env::with_configs(test) else {
        return;
    };
    let Some((snapshot, etcdutl)) = real_snapshot(test, &env.path(""), "/registry/kept") else {
        return;
    };
    let (snapshot_arg, etcdutl) = (snapshot.to_str().unwrap(), etcdutl.to_str().unwrap());
    let recovering = [
        ("SNAPSHOT", snapshot_arg),
        ("TALOSCTL_ETCDUTL", etcdutl),
        ("TALOSCTL_BOOTSTRAP_NOT_READY", "1"),
    ];
    fs::write(env.out("inventory.json"), inventory(11)).unwrap();

    assert_an_unreadable_snapshot_stops_before_any_node(&env, etcdutl);

    // New control planes, no etcd anywhere: the first one gets the snapshot's etcd, once Talos
    // allows a bootstrap; the others join it.
    let stderr = ok(&env.infra("bootstrap", &recovering));
    assert_says_all(
        &stderr,
        &[
            "203.0.113.11 is not ready to bootstrap yet (1/90): bootstrap is not available yet",
            &format!("recovering from snapshot \"{snapshot_arg}\": hash "),
            &format!("recovered etcd on 203.0.113.11 from {snapshot_arg}"),
        ],
    );
    // The broken file's call, then the one too early, then the recovery.
    let recoveries = env.calls_with("--recover-from");
    assert_eq!(recoveries.len(), 3, "{recoveries:?}");
    assert_says_all(
        &recoveries[2].join(" "),
        &[
            "--nodes 203.0.113.11",
            "bootstrap --recover-from",
            snapshot_arg,
        ],
    );
    assert!(
        !recoveries[2]
            .iter()
            .any(|a| a == "--recover-skip-hash-check")
    );
    let state = env.state_of_etcd("203.0.113.11").unwrap();
    let sha256 = testkit::process::stdout_of(Command::new("sha256sum").arg(&snapshot));
    assert_eq!(
        state["recovered_from_sha256"],
        sha256.split_whitespace().next().unwrap()
    );
    assert!(env.state_of_etcd("203.0.113.12").is_none());

    // Again, the same line: etcd runs now, so nothing is recovered twice, and the step says so.
    failed(
        &env.infra("bootstrap", &recovering),
        1,
        &[
            "etcd runs on 203.0.113.11: SNAPSHOT is for control planes that run no etcd",
            "make etcd-restore SNAPSHOT=",
        ],
    );
    assert_eq!(env.calls_with("--recover-from").len(), 3);

    // A first control plane that holds etcd data, though none runs it: nothing is recovered.
    fs::write(env.out("inventory.json"), inventory(21)).unwrap();
    fs::create_dir_all(env.path("state/203.0.113.21")).unwrap();
    fs::write(env.path("state/203.0.113.21/etcd"), "").unwrap();
    fs::write(env.path("state/203.0.113.21/etcd-failed"), "").unwrap();
    failed(
        &env.infra("bootstrap", &recovering[..2]),
        1,
        &[
            "AlreadyExists desc = etcd data directory is not empty",
            "203.0.113.21 holds etcd data already: nothing was recovered",
        ],
    );
}

/// A snapshot file etcdutl cannot read stops talosctl before any node is called, and a missing
/// one stops the step before talosctl.
fn assert_an_unreadable_snapshot_stops_before_any_node(env: &Env, etcdutl: &str) {
    let broken = env.path("broken.snapshot");
    fs::write(&broken, b"not a snapshot").unwrap();
    failed(
        &env.infra(
            "bootstrap",
            &[
                ("SNAPSHOT", broken.to_str().unwrap()),
                ("TALOSCTL_ETCDUTL", etcdutl),
            ],
        ),
        1,
        &["bootstrap on 203.0.113.11 failed"],
    );
    assert!(env.state_of_etcd("203.0.113.11").is_none());
    failed(
        &env.infra("bootstrap", &[("SNAPSHOT", "/nonexistent.snapshot")]),
        1,
        &["SNAPSHOT: /nonexistent.snapshot is not a file"],
    );
}

/// The outputs: a private kubeconfig, and the PlatformInputs record render-edge reads, with the
/// worker as the edge node and what the host firewall is rendered from.
fn assert_the_outputs_are_what_the_next_layers_read(env: &Env) {
    ok(&env.infra("outputs", &[]));
    assert_eq!(mode(&env.out("kubeconfig")), 0o600);
    // An operator's talosctl reaches the nodes through the control planes' Talos APIs (a
    // worker's calls forwarded by them, which alone serve what a drain asks): the talosconfig
    // names them as its endpoints, gen config having left it none.
    let talosconfig = talos_schema::documents(&fs::read_to_string(env.out("talosconfig")).unwrap());
    let context = &talosconfig[0]["contexts"][talosconfig[0]["context"].as_str().unwrap()];
    assert_eq!(
        context["endpoints"],
        json!([
            "203.0.113.21:50000",
            "203.0.113.22:50000",
            "203.0.113.23:50000"
        ])
    );
    assert_eq!(mode(&env.out("talosconfig")), 0o600);
    let inputs: Value =
        serde_json::from_str(&fs::read_to_string(env.out("platform-inputs.json")).unwrap())
            .unwrap();
    // The record render-edge reads: decoded with its own type, unknown fields refused.
    let record: pop_common::records::PlatformInputs = serde_json::from_value(inputs).unwrap();
    let edge_nodes: Vec<(&str, String)> = record
        .edge_nodes
        .iter()
        .map(|n| (n.name.as_str(), n.public_ipv4.to_string()))
        .collect();
    assert_eq!(edge_nodes, [("edge-worker-1", "203.0.113.10".to_owned())]);
    assert_eq!(record.dns_zone, "example.com");
    assert_eq!(record.cluster_endpoint, "https://api.example.com:6443");
    // An edge node's name is the worker's hostname in its Talos config: its Kubernetes node name.
    let worker = talos_schema::documents(&fs::read_to_string(env.out(WORKER_CONFIG)).unwrap());
    assert_eq!(
        talos_schema::document(&worker, "HostnameConfig")["hostname"],
        edge_nodes[0].0
    );
    // What the host firewall is rendered from: the admin networks and every node's address.
    assert_eq!(record.admin_cidrs, ["198.51.100.0/24".parse().unwrap()]);
    let addresses = |list: &[&str]| -> Vec<std::net::IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    };
    assert_eq!(
        record.control_plane_addresses,
        addresses(&["203.0.113.21", "203.0.113.22", "203.0.113.23"])
    );
    assert_eq!(record.worker_addresses, addresses(&["203.0.113.10"]));
}

#[test]
fn control_planes_that_never_answer_fail_the_bootstrap_naming_them() {
    let test = "control_planes_that_never_answer";
    let Some(env) = Env::with_configs(test) else {
        return;
    };
    fs::write(env.out("inventory.json"), inventory(31)).unwrap();
    let out = env.infra(
        "bootstrap",
        &[("TALOSCTL_SILENT_CALLS", "1000"), ("BOOTSTRAP_TRIES", "3")],
    );
    failed(
        &out,
        1,
        &[
            "the control planes 203.0.113.31 203.0.113.32 203.0.113.33 did not answer after 3 tries",
            "etcd is not bootstrapped",
        ],
    );
    assert!(env.calls_with("bootstrap").is_empty());
}

#[test]
fn a_bad_config_stops_every_step_with_the_field_named_before_talos_is_asked() {
    let test = "a_bad_config_stops_every_step";
    let Some(env) = Env::new(test) else { return };
    let mut infra = env.config();
    infra["cluster_endpoint"] = "https://elsewhere.example.net:6443".into();
    env.write_config(&infra);
    fs::create_dir_all(env.path("out")).unwrap();
    fs::write(env.out("inventory.json"), inventory(11)).unwrap();
    for step in ["configs", "bootstrap", "outputs", "image"] {
        let out = env.infra(step, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{step}: {stderr}");
        assert!(
            stderr.contains("infra.json") && stderr.contains("cluster_endpoint"),
            "{step}: {stderr}"
        );
    }
    assert!(env.calls().is_empty(), "{:?}", env.calls());
    assert!(!env.out("platform-inputs.json").exists());
}

#[test]
fn the_worker_image_is_registered_downloaded_once_and_checked_against_its_pin() {
    use sha2::{Digest, Sha256};
    use testkit::http::{Reply, Server};
    let test = "the_worker_image_is_registered_downloaded_once";
    let Some(env) = Env::with_curl(test) else {
        return;
    };
    let image = b"zstd image bytes".to_vec();
    let digest = format!("{:x}", Sha256::digest(&image));
    let file = env.out(&format!(
        "talos-v1.13.11-{}-metal-amd64.raw.zst",
        &WORKER_SCHEMATIC[..12]
    ));

    // Not recorded yet: stopped before any download, saying how to record it.
    let none = Server::start(vec![]).unwrap();
    env.pin("TALOS_FACTORY_URL", &none.url);
    failed(
        &env.infra("image", &[]),
        1,
        &[
            "records no sha256 of the worker image",
            "make talos-image-digests",
        ],
    );
    assert!(none.requests().is_empty());

    // A download that is not the pinned file is refused and not kept.
    let factory = |bytes: Vec<u8>| {
        Server::start(vec![
            Reply::json(201, format!(r#"{{"id":"{WORKER_SCHEMATIC}"}}"#)),
            Reply::ok(bytes),
        ])
        .unwrap()
    };
    env.record("worker", &digest);
    let bad = factory(b"another image".to_vec());
    env.pin("TALOS_FACTORY_URL", &bad.url);
    failed(&env.infra("image", &[]), 1, &["refused", &digest]);
    assert!(!file.exists());
    assert!(!file.with_extension("zst.part").exists());

    let good = factory(image.clone());
    env.pin("TALOS_FACTORY_URL", &good.url);
    ok(&env.infra("image", &[]));
    assert_eq!(fs::read(&file).unwrap(), image);
    let requests = good.requests();
    let targets: Vec<(&str, &str)> = requests
        .iter()
        .map(|r| (r.method.as_str(), r.target.as_str()))
        .collect();
    assert_eq!(
        targets,
        [
            ("POST", "/schematics"),
            (
                "GET",
                &*format!("/image/{WORKER_SCHEMATIC}/v1.13.11/metal-amd64.raw.zst")
            )
        ]
    );
    // The schematic posted is the one whose digest is the pinned id.
    assert_eq!(
        format!("{:x}", Sha256::digest(&requests[0].body)),
        WORKER_SCHEMATIC
    );
    assert_eq!(
        String::from_utf8_lossy(&requests[0].body),
        "customization:\n    extraKernelArgs:\n        - intel_iommu=on\n        - iommu=pt\n"
    );
    // Present and matching its pin: not downloaded again (the server has no reply left).
    ok(&env.infra("image", &[]));
}

/// A node tool that records its argv and whether the Scaleway secret reached it, then hands the
/// inventory on (scw-infra: the real one for every command but `apply`, which prints `inventory`).
fn recording_tool(bin: &Path, name: &str, log: &Path, inventory: &Path) {
    let body = if name == "scw-infra" {
        format!(
            "if [ \"$1\" = apply ]; then cat {}; elif [ \"$1\" = clear-user-data ]; then cat; else exec {} \"$@\"; fi",
            inventory.display(),
            testkit::workspace::bin("scw-infra").display()
        )
    } else {
        "cat".to_owned()
    };
    record_tool(bin, name, log, &body);
}

/// Writes `bin/<name>`: a bash script that appends `name`, whether the Scaleway secret reached
/// it, and its arguments, tab-separated, to `log`, then runs `body`.
pub(crate) fn record_tool(bin: &Path, name: &str, log: &Path, body: &str) {
    let script = format!(
        "#!/bin/bash\nprintf '%s\\t%s\\t%s\\n' {name} \"${{SCW_SECRET_KEY:+secret}}\" \"$*\" >> {log}\n{body}\n",
        log = log.display()
    );
    testkit::sshd::script(&bin.join(name), &script);
}

/// What the node pipeline needs before it runs: the configs made, the Image Factory played
/// (the schematic, then the worker's image once) and pinned, the control planes' image pinned.
/// Returns the factory (it must outlive the run) and the control planes' pinned digest.
fn node_pipeline_pins(env: &Env) -> (testkit::http::Server, String) {
    use sha2::{Digest, Sha256};
    use testkit::http::{Reply, Server};
    ok(&env.infra("configs", &[]));
    let image = b"zstd image bytes".to_vec();
    let factory = Server::start(vec![
        Reply::json(201, format!(r#"{{"id":"{WORKER_SCHEMATIC}"}}"#)),
        Reply::ok(image.clone()),
    ])
    .unwrap();
    env.pin("TALOS_FACTORY_URL", &factory.url);
    env.record("worker", &format!("{:x}", Sha256::digest(&image)));
    let control_plane_digest = "c".repeat(64);
    env.record("control-plane", &control_plane_digest);
    (factory, control_plane_digest)
}

/// The node tools' calls the recording tools logged, each as (tool, whether the Scaleway secret
/// was in its environment, its arguments); scw-infra's `names` and `talos-*` look-ups left out.
fn node_tool_calls(log: &Path) -> Vec<(String, bool, String)> {
    fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| {
            let mut fields = l.splitn(3, '\t');
            (
                fields.next().unwrap().to_owned(),
                fields.next().unwrap() == "secret",
                fields.next().unwrap().to_owned(),
            )
        })
        .filter(|(_, _, args)| !args.starts_with("names") && !args.starts_with("talos-"))
        .collect()
}

/// The three node tools, each recording its call and handing on an inventory of 11 nodes: the
/// folder that holds them, and their log.
fn recording_node_tools(env: &Env) -> (String, PathBuf) {
    let (bin, log) = env.node_tools();
    fs::write(env.path("scw-inventory.json"), inventory(11)).unwrap();
    for tool in ["scw-infra", "scw-rescue-flash", "talos-apply-insecure"] {
        recording_tool(&bin, tool, &log, &env.path("scw-inventory.json"));
    }
    (bin.display().to_string(), log)
}

/// scw-infra apply's `args` import the control planes' image from the pins when it is missing,
/// from the file make talos-image-digests kept when it holds the pinned bytes.
fn assert_scw_infra_imports_the_pinned_image(env: &Env, args: &str, factory: &str, digest: &str) {
    let schematic = testkit::pin("TALOS_CONTROL_PLANE_SCHEMATIC");
    let kept = env.out(&format!(
        "talos-v1.13.11-{}-scaleway-amd64.raw.zst",
        &schematic[..12]
    ));
    assert_says_all(
        args,
        &[
            format!(
                "--talos-image-url {factory}/image/{schematic}/v1.13.11/scaleway-amd64.raw.zst --talos-image-sha256 {digest}"
            ),
            format!("--talos-image-file {}", kept.display()),
        ],
    );
}

#[test]
fn the_node_pipeline_gets_the_pins_and_only_the_scaleway_tools_get_the_secret() {
    let test = "the_node_pipeline_gets_the_pins";
    let Some(env) = Env::new(test) else { return };
    let (factory, control_plane_digest) = node_pipeline_pins(&env);
    let (bin_dir, log) = recording_node_tools(&env);
    // The worker's certificate fingerprint, read on its console, pins the first contact; the
    // nodes' Talos API is behind a tunnel's port, where every step reaches it.
    let pin = "U6UHi4Fk3lgHDR8M1AZMkCTxUvFqBdFwO7XbSxeM4e0=";
    ok(&env.infra(
        "nodes",
        &[
            ("BIN", &bin_dir),
            ("REFLASH", "yes"),
            ("WORKER_CERT_FINGERPRINT", pin),
            ("TALOS_API_PORT", "50001"),
        ],
    ));
    assert_eq!(
        fs::read_to_string(env.out("inventory.json")).unwrap(),
        inventory(11)
    );
    let calls = node_tool_calls(&log);
    // The five stages of the pipe (they start together: their lines come in any order), each
    // found by its tool and whether its arguments start with `first`.
    let call = |tool: &str, first: &str| {
        let found: Vec<&(String, bool, String)> = calls
            .iter()
            .filter(|c| {
                c.0 == tool
                    && ["--tag-proven", "clear-user-data"]
                        .iter()
                        .all(|f| (*f == first) == c.2.starts_with(f))
            })
            .collect();
        assert_eq!(found.len(), 1, "{tool} {first}: {calls:?}");
        found[0].clone()
    };
    assert_eq!(calls.len(), 5, "{calls:?}");
    let (apply, flash, talos, tag, clear) = (
        call("scw-infra", ""),
        call("scw-rescue-flash", ""),
        call("talos-apply-insecure", ""),
        call("scw-rescue-flash", "--tag-proven"),
        call("scw-infra", "clear-user-data"),
    );
    // The Scaleway secret reaches the tools that call Scaleway, never the Talos one.
    assert_eq!(
        [apply.1, flash.1, talos.1, tag.1, clear.1],
        [true, true, false, true, true]
    );
    assert_scw_infra_imports_the_pinned_image(&env, &apply.2, &factory.url, &control_plane_digest);
    // The control planes get their config as user data: they boot configured.
    assert!(
        apply.2.contains(&format!(
            "--control-plane-config {}",
            env.out("controlplane.yaml").display()
        )),
        "{}",
        apply.2
    );
    let flash = &flash.2;
    assert_says_all(
        flash,
        &[
            &format!(
                "--image {}",
                env.out(&format!(
                    "talos-v1.13.11-{}-metal-amd64.raw.zst",
                    &WORKER_SCHEMATIC[..12]
                ))
                .display()
            ),
            &format!(
                "--installer-image factory.talos.dev/metal-installer/{WORKER_SCHEMATIC}:v1.13.11"
            ),
            "--reflash",
        ],
    );
    // Each worker is written onto the install_disk its inventory records: no one --disk.
    assert!(!flash.contains("--disk"), "{flash}");
    let talosconfig = format!(
        "--talosconfig {} --port 50001",
        env.out("talosconfig").display()
    );
    assert_says_all(
        &talos.2,
        &[talosconfig, format!("--cert-fingerprint {pin}")],
    );
}

#[test]
fn a_failed_node_pipeline_keeps_what_it_did_and_the_next_run_carries_it_over_first() {
    use sha2::{Digest, Sha256};
    let test = "a_failed_node_pipeline_keeps_what_it_did";
    let Some(env) = Env::new(test) else { return };
    let _factory = node_pipeline_pins(&env);
    let (bin, log) = env.node_tools();
    let seen = env.path("previous-seen.log");
    fs::write(env.path("scw-inventory.json"), inventory(11)).unwrap();
    // scw-infra apply notes which of its --previous files exist, and what they hold, when it
    // starts; the other commands are the real ones.
    let scw_infra = format!(
        "if [ \"$1\" = apply ]; then\n  while [ $# -gt 0 ]; do\n    if [ \"$1\" = --previous ]; then\n      if [ -s \"$2\" ]; then echo \"$2 $(sha256sum < \"$2\" | cut -c1-64)\"; else echo \"$2 none\"; fi >> {seen}\n    fi\n    shift\n  done\n  cat {inventory}\nelif [ \"$1\" = clear-user-data ]; then cat\nelse exec {real} \"$@\"; fi",
        seen = seen.display(),
        inventory = env.path("scw-inventory.json").display(),
        real = testkit::workspace::bin("scw-infra").display()
    );
    record_tool(&bin, "scw-infra", &log, &scw_infra);
    recording_tool(
        &bin,
        "scw-rescue-flash",
        &log,
        &env.path("scw-inventory.json"),
    );
    // talos-apply-insecure fails after writing what it did, as the node tools do.
    let worked =
        inventory(11).replace(r#""steps":{}"#, r#""steps":{"config_applied":"sha256:11"}"#);
    assert_ne!(worked, inventory(11));
    fs::write(env.path("worked.json"), &worked).unwrap();
    record_tool(
        &bin,
        "talos-apply-insecure",
        &log,
        &format!(
            "cat > /dev/null; cat {}; exit 1",
            env.path("worked.json").display()
        ),
    );
    let bin_dir = bin.display().to_string();
    let out = env.infra("nodes", &[("BIN", &bin_dir)]);
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inventory_file = env.out("inventory.json");
    let partial = env.out("inventory.json.partial");
    let unfinished = env.out("inventory.json.unfinished");
    assert!(
        !inventory_file.exists(),
        "only a whole run writes the inventory"
    );
    assert_eq!(fs::read_to_string(&partial).unwrap(), worked);

    // The next run succeeds: it read the failed run's record first, then the last inventory
    // (none yet), and leaves only the new inventory.
    recording_tool(
        &bin,
        "talos-apply-insecure",
        &log,
        &env.path("scw-inventory.json"),
    );
    ok(&env.infra("nodes", &[("BIN", &bin_dir)]));
    let digest = format!("{:x}", Sha256::digest(worked.as_bytes()));
    let said = fs::read_to_string(&seen).unwrap();
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines[lines.len() - 2..],
        [
            format!("{} {digest}", unfinished.display()),
            format!("{} none", inventory_file.display())
        ],
        "{said}"
    );
    assert_eq!(fs::read_to_string(&inventory_file).unwrap(), inventory(11));
    assert!(!unfinished.exists() && !partial.exists());
}

#[test]
fn the_node_pipeline_names_a_tool_that_is_not_built() {
    let test = "the_node_pipeline_names_a_tool";
    let Some(env) = Env::new(test) else { return };
    fs::create_dir_all(env.path("empty-bin")).unwrap();
    let bin = env.path("empty-bin");
    let out = env.infra("nodes", &[("BIN", bin.to_str().unwrap())]);
    failed(&out, 1, &["scw-infra is not built"]);
    assert!(env.calls().is_empty());
}

#[test]
fn the_dry_run_plans_with_the_pins_and_the_config_the_nodes_step_uses() {
    let test = "the_dry_run_plans_with_the_pins";
    let Some(env) = Env::new(test) else { return };
    let (bin, log) = env.node_tools();
    // Its `apply` prints what it is given to print: the plan is not this test's concern.
    fs::write(env.path("plan.jsonl"), "").unwrap();
    recording_tool(&bin, "scw-infra", &log, &env.path("plan.jsonl"));
    let bin_dir = bin.display().to_string();
    let plans = || -> Vec<String> {
        fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("apply --dry-run"))
            .map(str::to_owned)
            .collect()
    };
    // Nothing recorded, nothing generated: the plan says what it leaves out.
    let stderr = ok(&env.infra("plan", &[("BIN", &bin_dir)]));
    assert!(
        stderr.contains(&format!(
            "the control-plane image {} is not recorded",
            env.image_key("control-plane")
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("controlplane.yaml is not generated yet"),
        "{stderr}"
    );
    assert!(!plans()[0].contains("--talos-image-url"), "{:?}", plans());
    assert!(!stderr.contains("etcd recovered"), "{stderr}");

    // With a snapshot, the plan says the bootstrap recovers it (apply-infra SNAPSHOT=FILE).
    let stderr = ok(&env.infra(
        "plan",
        &[("BIN", &bin_dir), ("SNAPSHOT", "edge-par-1.snapshot")],
    ));
    assert!(
        stderr.contains("then: etcd recovered from edge-par-1.snapshot on the first control plane"),
        "{stderr}"
    );

    let digest = "c".repeat(64);
    env.record("control-plane", &digest);
    ok(&env.infra("configs", &[]));
    ok(&env.infra("plan", &[("BIN", &bin_dir)]));
    let plan = &plans()[2];
    assert_says_all(
        plan,
        &[
            "--talos-version v1.13.11".to_owned(),
            format!("--talos-image-sha256 {digest}"),
            format!(
                "--control-plane-config {}",
                env.out("controlplane.yaml").display()
            ),
        ],
    );
}

#[test]
fn apply_checks_every_precondition_before_it_writes_anything() {
    let test = "apply_checks_every_precondition";
    let Some(env) = Env::new(test) else { return };
    let (bin_dir, log) = recording_node_tools(&env);
    let bin = PathBuf::from(&bin_dir);
    let nothing_written = |what: &str| {
        assert!(
            !env.path("out").exists(),
            "{what}: {:?}",
            fs::read_dir(env.path("out")).map(|d| d.count())
        );
        assert!(
            env.calls_with("gen").is_empty(),
            "{what}: {:?}",
            env.calls()
        );
        assert!(
            !fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("\tapply"),
            "{what}"
        );
    };

    // Nothing recorded yet: the control planes' image is not.
    failed(
        &env.infra("apply", &[("BIN", &bin_dir)]),
        1,
        &[
            "records no sha256 of the control-plane image",
            "make talos-image-digests",
        ],
    );
    nothing_written("no control-plane digest");
    env.record("control-plane", &"c".repeat(64));
    failed(
        &env.infra("apply", &[("BIN", &bin_dir)]),
        1,
        &["records no sha256 of the worker image"],
    );
    nothing_written("no worker digest");
    env.record("worker", &"d".repeat(64));

    // A talosctl of another minor.
    let path = env.path_with_talosctl_of("v1.12.4");
    failed(
        &env.infra("apply", &[("BIN", &bin_dir), ("PATH", &path)]),
        1,
        &["talosctl v1.12 is installed", "same minor only"],
    );
    nothing_written("talosctl v1.12");

    // A node tool that is not built.
    fs::remove_file(bin.join("talos-apply-insecure")).unwrap();
    failed(
        &env.infra("apply", &[("BIN", &bin_dir)]),
        1,
        &["talos-apply-insecure is not built"],
    );
    nothing_written("a tool missing");
    recording_tool(
        &bin,
        "talos-apply-insecure",
        &log,
        &env.path("scw-inventory.json"),
    );

    // A snapshot to recover that is not there.
    failed(
        &env.infra(
            "apply",
            &[
                ("BIN", &bin_dir),
                ("SNAPSHOT", "/nonexistent/edge-par.snapshot"),
            ],
        ),
        1,
        &["SNAPSHOT: /nonexistent/edge-par.snapshot is not a file"],
    );
    nothing_written("a snapshot missing");

    // A config that is not valid.
    let mut infra = env.config();
    infra["cluster_endpoint"] = "https://elsewhere.example.net:6443".into();
    env.write_config(&infra);
    failed(
        &env.infra("apply", &[("BIN", &bin_dir)]),
        2,
        &["cluster_endpoint"],
    );
    nothing_written("a bad config");
}

#[test]
fn an_image_factory_out_of_reach_is_not_called_a_refusal() {
    use testkit::http::{Reply, Server};
    let test = "an_image_factory_out_of_reach";
    let Some(env) = Env::with_curl(test) else {
        return;
    };
    // A name that never resolves (RFC 6761, .invalid): the factory was not reached.
    env.pin("TALOS_FACTORY_URL", "https://factory.edgepop-test.invalid");
    let stderr = failed(
        &env.infra("digests", &[]),
        1,
        &[
            "could not reach factory.edgepop-test.invalid",
            "the worker's schematic",
        ],
    );
    assert!(
        !stderr.contains("refused") && !stderr.contains("answered"),
        "{stderr}"
    );

    // Reached, and answering an error: that is the factory's answer, with its status.
    let factory = Server::start(vec![Reply::json(400, r#"{"error":"bad schematic"}"#)]).unwrap();
    env.pin("TALOS_FACTORY_URL", &factory.url);
    let stderr = failed(
        &env.infra("digests", &[]),
        1,
        &["answered HTTP 400", "the worker's schematic"],
    );
    assert!(!stderr.contains("could not reach"), "{stderr}");

    // The schematic is taken but the image is not served: the download is named, nothing kept.
    let factory = Server::start(vec![
        Reply::json(201, format!(r#"{{"id":"{WORKER_SCHEMATIC}"}}"#)),
        Reply::json(404, r#"{"error":"not found"}"#),
    ])
    .unwrap();
    env.pin("TALOS_FACTORY_URL", &factory.url);
    failed(
        &env.infra("digests", &[]),
        1,
        &[
            "answered HTTP 404",
            "the download of",
            "metal-amd64.raw.zst",
        ],
    );
    let kept: Vec<_> = fs::read_dir(env.path("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".zst") || name.ends_with(".part"))
        .collect();
    assert!(kept.is_empty(), "{kept:?}");
}

#[test]
fn the_digests_are_recorded_outside_the_tracked_pins_keyed_by_version_and_schematic() {
    use sha2::{Digest, Sha256};
    use testkit::http::{Reply, Server};
    let test = "the_digests_are_recorded_outside_the_tracked_pins";
    let Some(env) = Env::with_curl(test) else {
        return;
    };
    let (worker, control_plane) = (b"worker image".to_vec(), b"control plane image".to_vec());
    let factory = Server::start(vec![
        Reply::json(201, format!(r#"{{"id":"{WORKER_SCHEMATIC}"}}"#)),
        Reply::ok(worker.clone()),
        Reply::ok(control_plane.clone()),
    ])
    .unwrap();
    env.pin("TALOS_FACTORY_URL", &factory.url);
    // An earlier record of these images is replaced; another version's is kept.
    let other = format!(
        "v1.13.0/{WORKER_SCHEMATIC}/metal-amd64.raw.zst={}",
        "e".repeat(64)
    );
    fs::write(
        env.path("talos-image-digests.env"),
        format!("{other}\n{}={}\n", env.image_key("worker"), "f".repeat(64)),
    )
    .unwrap();
    let tracked = fs::read(env.path("versions.env")).unwrap();
    let out = env.infra("digests", &[]);
    ok(&out);
    let expected = format!(
        "{}={:x}\n{}={:x}\n",
        env.image_key("control-plane"),
        Sha256::digest(&control_plane),
        env.image_key("worker"),
        Sha256::digest(&worker)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
    let recorded = fs::read_to_string(env.path("talos-image-digests.env")).unwrap();
    let lines: Vec<&str> = recorded.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        lines.join("\n") + "\n",
        format!("{other}\n{expected}"),
        "{recorded}"
    );
    assert_eq!(mode(&env.path("talos-image-digests.env")), 0o644);
    assert_eq!(fs::read(env.path("versions.env")).unwrap(), tracked);
    // The control planes' image is kept for the apply's import, which takes it from there.
    let kept = env.out(&format!(
        "talos-v1.13.11-{}-scaleway-amd64.raw.zst",
        &testkit::pin("TALOS_CONTROL_PLANE_SCHEMATIC")[..12]
    ));
    assert_eq!(fs::read(&kept).unwrap(), control_plane);

    // The worker's image is the one recorded: kept, not downloaded again (no reply is left).
    ok(&env.infra("image", &[]));
    // A Talos bump: its images are not recorded yet.
    env.pin("TALOS_VERSION", "v1.13.12");
    failed(
        &env.infra("image", &[]),
        1,
        &[
            "records no sha256 of the worker image v1.13.12/",
            "make talos-image-digests",
        ],
    );
}
