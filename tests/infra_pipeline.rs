//! `pipelines/infra.sh` with a recording talosctl stand-in (testkit's `stand-ins/talosctl`, which
//! behaves as talosctl v1.13.9 does for gen secrets/config, bootstrap and kubeconfig) on PATH:
//! the secrets are made once and kept (0600), the configs come from the rendered patches and
//! validate against Talos's schema, etcd is bootstrapped once, the kubeconfig (0600) and the
//! PlatformInputs record are written. The image step is checked against a loopback release.
//! The script reads the config and the inventory, and writes the record, only through the
//! scw-infra cargo built (`names`, `platform-inputs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::talos_schema;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            dir: tempfile::tempdir().unwrap(),
        };
        fs::create_dir_all(env.path("bin")).unwrap();
        fs::create_dir_all(env.path("state")).unwrap();
        std::os::unix::fs::symlink(testkit::standin::path("talosctl"), env.path("bin/talosctl"))
            .unwrap();
        let example =
            fs::read_to_string(testkit::workspace::root().join("config/infra.example.json"))
                .unwrap();
        let mut infra: Value = serde_json::from_str(&example).unwrap();
        infra["worker"]["install_disk"] = "/dev/nvme0n1".into();
        fs::write(env.path("infra.json"), infra.to_string()).unwrap();
        env
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn out(&self, name: &str) -> PathBuf {
        self.path("out").join(name)
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
            .env("TALOSCTL_LOG", self.path("talosctl.log"))
            .env("TALOSCTL_STATE", self.path("state"));
        for (k, v) in extra {
            command.env(k, v);
        }
        command.output().unwrap()
    }

    /// The talosctl calls so far, each as its argv.
    fn calls(&self) -> Vec<Vec<String>> {
        fs::read_to_string(self.path("talosctl.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn prerequisites(test: &str) -> bool {
    let yaml = Command::new("python3")
        .args(["-c", "import yaml"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !yaml {
        testkit::skip_or_fail(test, "python3 with PyYAML (the talosctl stand-in)");
    }
    yaml
}

#[test]
fn configs_come_from_the_patches_with_secrets_made_once_and_kept() {
    let test = "configs_come_from_the_patches";
    if !prerequisites(test) {
        return;
    }
    let Some(schemas) = talos_schema::schemas(test) else {
        return;
    };
    let env = Env::new();
    ok(&env.infra("configs", &[]));

    let calls = env.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0][..2], ["gen", "secrets"]);
    let gen_config = &calls[1];
    assert_eq!(
        gen_config[..4],
        ["gen", "config", "edge-par", "https://api.example.com:6443"]
    );
    let flag = |name: &str| -> Vec<String> {
        gen_config
            .windows(2)
            .filter(|w| w[0] == name)
            .map(|w| {
                Path::new(&w[1])
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    };
    assert_eq!(flag("--with-secrets"), ["secrets.yaml"]);
    assert_eq!(
        flag("--config-patch"),
        ["10-cni-none-no-kube-proxy.yaml", "20-kubeprism.yaml"]
    );
    assert_eq!(
        flag("--config-patch-control-plane"),
        [
            "30-cert-sans.controlplane.yaml",
            "40-nodeport-range.controlplane.yaml",
            "60-control-plane-no-workloads.controlplane.yaml"
        ]
    );
    assert_eq!(
        flag("--config-patch-worker"),
        ["50-install-disk.worker.yaml", "70-edge-worker.worker.yaml"]
    );
    assert!(
        !gen_config.iter().any(|a| a == "--kubernetes-version"),
        "Kubernetes is Talos's default"
    );

    // Secrets and everything that embeds them are 0600.
    for file in [
        "secrets.yaml",
        "controlplane.yaml",
        "worker.yaml",
        "talosconfig",
    ] {
        assert_eq!(mode(&env.out(file)), 0o600, "{file}");
    }
    // The generated configs are valid Talos documents with the rendered values.
    for role in ["controlplane", "worker"] {
        let text = fs::read_to_string(env.out(&format!("{role}.yaml"))).unwrap();
        let config: Value = serde_norway::from_str(&text).unwrap();
        let errors = schemas.errors(&config);
        assert!(errors.is_empty(), "{role}: {errors:#?}");
        assert_eq!(config["cluster"]["network"]["cni"]["name"], "none");
    }
    let cp: Value =
        serde_norway::from_str(&fs::read_to_string(env.out("controlplane.yaml")).unwrap()).unwrap();
    assert_eq!(
        cp["cluster"]["apiServer"]["certSANs"],
        serde_json::json!(["api.example.com"])
    );
    let worker: Value =
        serde_norway::from_str(&fs::read_to_string(env.out("worker.yaml")).unwrap()).unwrap();
    assert_eq!(worker["machine"]["install"]["disk"], "/dev/nvme0n1");

    // A second run changes nothing: same secrets, no talosctl call, same configs (same digests).
    let secrets = fs::read(env.out("secrets.yaml")).unwrap();
    let worker_bytes = fs::read(env.out("worker.yaml")).unwrap();
    let stderr = ok(&env.infra("configs", &[]));
    assert!(stderr.contains("up to date"), "{stderr}");
    assert_eq!(env.calls().len(), 2);
    assert_eq!(fs::read(env.out("worker.yaml")).unwrap(), worker_bytes);

    // A changed input regenerates the configs, never the secrets.
    let mut infra: Value =
        serde_json::from_str(&fs::read_to_string(env.path("infra.json")).unwrap()).unwrap();
    infra["worker"]["install_disk"] = "/dev/sdb".into();
    fs::write(env.path("infra.json"), infra.to_string()).unwrap();
    ok(&env.infra("configs", &[]));
    let calls = env.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[2][..2], ["gen", "config"]);
    assert_eq!(fs::read(env.out("secrets.yaml")).unwrap(), secrets);
    assert!(
        fs::read_to_string(env.out("worker.yaml"))
            .unwrap()
            .contains("/dev/sdb")
    );
}

const INVENTORY: &str = r#"{"kind":"NodeInventory","version":1,"cluster_name":"edge-par",
  "cluster_endpoint":"https://api.example.com:6443","nodes":[
  {"name":"edge-par-cp-1","role":"controlplane","kind":"instance","zone":"fr-par-1","id":"11111111-1111-4111-8111-111111111111",
   "public_ipv4":"203.0.113.11","public_ipv6":null,"private_ipv4":"10.194.0.11","steps":{"config_applied":"sha256:aa"}},
  {"name":"edge-worker-1","role":"worker","kind":"elastic-metal","zone":"fr-par-1","id":"22222222-2222-4222-8222-222222222222",
   "public_ipv4":"203.0.113.10","public_ipv6":null,"private_ipv4":null,"steps":{"image_flashed":"sha256:bb"}}]}"#;

#[test]
fn bootstrap_happens_once_and_the_outputs_are_written() {
    let test = "bootstrap_happens_once";
    if !prerequisites(test) {
        return;
    }
    let env = Env::new();
    ok(&env.infra("configs", &[]));
    // Without an inventory the step says what to run first.
    let out = env.infra("bootstrap", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("inventory.json is missing"));

    fs::write(env.out("inventory.json"), INVENTORY).unwrap();
    ok(&env.infra("bootstrap", &[]));
    let bootstrap: Vec<Vec<String>> = env
        .calls()
        .into_iter()
        .filter(|c| c.contains(&"bootstrap".to_owned()))
        .collect();
    assert_eq!(bootstrap.len(), 1);
    let call = bootstrap[0].join(" ");
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

    // Again: nothing asked of Talos.
    let stderr = ok(&env.infra("bootstrap", &[]));
    assert!(
        stderr.contains("already bootstrapped (203.0.113.11)"),
        "{stderr}"
    );
    // Marker lost (another machine): Talos answers AlreadyExists, which is success.
    fs::remove_file(env.out("bootstrapped")).unwrap();
    let stderr = ok(&env.infra("bootstrap", &[]));
    assert!(
        stderr.contains("was already bootstrapped on 203.0.113.11"),
        "{stderr}"
    );

    ok(&env.infra("outputs", &[]));
    assert_eq!(mode(&env.out("kubeconfig")), 0o600);
    let inputs: Value =
        serde_json::from_str(&fs::read_to_string(env.out("platform-inputs.json")).unwrap())
            .unwrap();
    // The record render-edge reads: decoded with its own type, unknown fields refused.
    let record: pop_common::records::PlatformInputs = serde_json::from_value(inputs).unwrap();
    assert_eq!(record.edge_node_name, "edge-worker-1");
    assert_eq!(record.edge_public_ipv4.to_string(), "203.0.113.10");
    assert_eq!(record.dns_zone, "example.com");
    assert_eq!(record.cluster_endpoint, "https://api.example.com:6443");
    // What the host firewall is rendered from: the admin networks and every node's address.
    assert_eq!(record.admin_cidrs, ["198.51.100.0/24".parse().unwrap()]);
    assert_eq!(
        record.control_plane_addresses,
        ["203.0.113.11".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(
        record.worker_addresses,
        ["203.0.113.10".parse::<std::net::IpAddr>().unwrap()]
    );
}

#[test]
fn the_node_pipeline_names_a_tool_that_is_not_built() {
    let test = "the_node_pipeline_names_a_tool";
    if !prerequisites(test) {
        return;
    }
    let env = Env::new();
    fs::create_dir_all(env.path("empty-bin")).unwrap();
    let bin = env.path("empty-bin");
    let out = env.infra(
        "nodes",
        &[
            ("BIN", bin.to_str().unwrap()),
            ("TALOS_VERSION", "v1.13.11"),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("scw-infra is not built"), "{stderr}");
    assert!(env.calls().is_empty());
}

#[test]
fn a_bad_config_stops_every_step_with_the_field_named_before_talos_is_asked() {
    let test = "a_bad_config_stops_every_step";
    if !prerequisites(test) {
        return;
    }
    let env = Env::new();
    let mut infra: Value =
        serde_json::from_str(&fs::read_to_string(env.path("infra.json")).unwrap()).unwrap();
    infra["cluster_endpoint"] = "https://elsewhere.example.net:6443".into();
    fs::write(env.path("infra.json"), infra.to_string()).unwrap();
    fs::create_dir_all(env.path("out")).unwrap();
    fs::write(env.out("inventory.json"), INVENTORY).unwrap();
    for step in ["configs", "bootstrap", "outputs"] {
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
fn the_worker_image_is_downloaded_once_and_checked_against_the_release() {
    use sha2::{Digest, Sha256};
    use testkit::http::{Reply, Server};
    let test = "the_worker_image_is_downloaded_once";
    if !prerequisites(test) {
        return;
    }
    if Command::new("curl").arg("--version").output().is_err() {
        testkit::skip_or_fail(test, "curl");
        return;
    }
    let image = b"zstd image bytes".to_vec();
    let sums = format!(
        "{:x}  metal-amd64.raw.zst\n{:x}  other.iso\n",
        Sha256::digest(&image),
        Sha256::digest(b"x")
    );

    let env = Env::new();
    let bad = Server::start(vec![
        Reply::ok(sums.replace(&format!("{:x}", Sha256::digest(&image)), &"0".repeat(64))),
        Reply::ok(image.clone()),
    ])
    .unwrap();
    let out = env.infra(
        "image",
        &[
            ("TALOS_VERSION", "v1.13.11"),
            ("TALOS_RELEASE_URL", &bad.url),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused"));
    assert!(!env.out("talos-v1.13.11-metal-amd64.raw.zst").exists());
    assert!(!env.out("talos-v1.13.11-metal-amd64.raw.zst.part").exists());

    let good = Server::start(vec![Reply::ok(sums), Reply::ok(image.clone())]).unwrap();
    ok(&env.infra(
        "image",
        &[
            ("TALOS_VERSION", "v1.13.11"),
            ("TALOS_RELEASE_URL", &good.url),
        ],
    ));
    assert_eq!(
        fs::read(env.out("talos-v1.13.11-metal-amd64.raw.zst")).unwrap(),
        image
    );
    let targets: Vec<String> = good.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(targets, ["/sha256sum.txt", "/metal-amd64.raw.zst"]);
    // Present: not downloaded again (the server has no reply left).
    ok(&env.infra(
        "image",
        &[
            ("TALOS_VERSION", "v1.13.11"),
            ("TALOS_RELEASE_URL", &good.url),
        ],
    ));
}
