//! The whole life of a cluster, as an operator drives it: `make vendor`, `make apply`,
//! `make add-worker` and `make remove-worker` (a second worker listed in the infra config, then
//! taken out: the `workers` module), `make down`, `make up`, `make destroy`, each through the
//! Makefile with its variables (OUT, INFRA_CONFIG, PLATFORM_CONFIG, EDGE_CONFIG, BIN) pointing
//! into a temporary folder, on the chained parts that can run here:
//!
//! - Scaleway: testkit's `scaleway_api.py` (every request checked against Scaleway's OpenAPI) and
//!   `s3_api.py`, with the real scw-infra: the control planes' Talos image is imported for real
//!   (download from a loopback Image Factory, zstd, qemu-img, multipart upload, snapshot import);
//! - Talos: the real talosctl for gen secrets, gen config and validate; testkit's talosctl
//!   stand-in for the calls that need a node (bootstrap, kubeconfig, the host firewall's patch,
//!   shutdown). Its `kubeconfig` hands out the test control plane's admin kubeconfig under the
//!   config's `cluster_endpoint`, `https://api.example.com:6443`, as Talos would;
//! - the workers' flash: the real scw-rescue-flash, through a real sshd a worker standing for
//!   its rescue system (testkit::sshd), the first worker adopted at 127.0.0.1, the second
//!   (make add-worker's) ordered, the stand-in giving it its rescue's address, 127.0.0.2 (both
//!   sshds on one port, the only one added to the command infra.sh runs); talos-apply-insecure
//!   is recorded: it gives each worker's node stand-in in maintenance mode its own config and
//!   records it configured and proved ours, as the real tool does once the node answers mutual
//!   TLS (its own tests run it against the Talos maintenance stand-in: here every node would
//!   need a machine-CA certificate of its own on loopback), so that scw-infra names a new
//!   worker in the edge names only once the edge serves from it;
//! - Kubernetes: the real control plane (testkit::control_plane) with kwok nodes named as the
//!   inventory names the machines, reached under the endpoint's name through a loopback CONNECT
//!   proxy (`HTTPS_PROXY`, testkit::tunnel) that refuses any other destination, by the pinned
//!   kubectl and by wait-ready; the recording helm (which keeps which releases are installed);
//!   istiod's answer (the GatewayClass and Gateway conditions) written by testkit::istiod as
//!   istiod writes it, since istiod does not build here.
//!
//! After each step: what exists (Scaleway objects, Kubernetes objects, files under OUT with
//! their modes), what was called, in order (Scaleway requests and talosctl calls in one log, the
//! helm calls), and after destroy that nothing of the cluster is left. Between the steps, a step
//! whose input was removed (the inventory before down, the platform inputs before up) stops
//! naming the file and changes nothing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use testkit::control_plane::ControlPlane;
use testkit::http::{Reply, Server};
use testkit::istiod::{self, Istiod};
use testkit::process::text;
use testkit::scaleway::{control, mutations};

use crate::infra_pipeline::{mode, record_tool};

mod workers;
use crate::teardown::{first, talosctl_on};

pub(crate) const SECRET: &str = "5c4b3a29-1807-4f6e-9d5c-4b3a29180706";
const ACCESS: &str = "SCWREHEARSALREHEARSA";
const PROJECT: &str = "33333333-3333-4333-8333-333333333333";
const CLUSTER: &str = "edge-par";
pub(crate) const CLUSTER_TAG: &str = "edgepop-cluster=edge-par";
/// The worker's address: its rescue system's sshd listens there, and its node stand-in answers
/// there.
const WORKER_ADDRESS: &str = "127.0.0.1";
/// The second worker's (the one `make add-worker` adds): another loopback address, its rescue's
/// sshd on the first one's port, the one port scw-rescue-flash is told.
const SECOND_WORKER_ADDRESS: &str = "127.0.0.2";
/// The worker's schematic of the example config's offer (as tests/infra_pipeline.rs has it).
pub(crate) const WORKER_SCHEMATIC: &str =
    "b4f89946a66f1ffdda1caf6d31f852c10b2b2b2c320d040baf863e9962065f02";

/// Everything the rehearsal runs against; dropped (stopped) when the test ends.
struct Stage {
    dir: tempfile::TempDir,
    plane: ControlPlane,
    infra: InfraStandIns,
    vendor: crate::pipelines::Server,
    tunnel: testkit::tunnel::Tunnel,
    kubectl_dir: PathBuf,
    talosctl: PathBuf,
}

/// The infra layer's world outside the tools, in a test's folder: the Image Factory serving the
/// two Talos images (real zstd files, recorded as `make talos-image-digests` records them), the
/// worker's rescue system and its sshd, the Scaleway and S3 stand-ins; the configs and the
/// recording cargo are written beside them.
pub(crate) struct InfraStandIns {
    pub(crate) scaleway: testkit::standin::StandIn,
    pub(crate) s3: testkit::standin::StandIn,
    pub(crate) factory: Server,
    pub(crate) rescue: testkit::sshd::Rescue,
    pub(crate) sshd: testkit::sshd::Sshd,
    /// The rescue system of the worker an operator adds, edge-worker-2's.
    pub(crate) second_rescue: testkit::sshd::Rescue,
    pub(crate) second_sshd: testkit::sshd::Sshd,
    /// The worker's image, as its disk must hold it once flashed.
    pub(crate) worker_raw: Vec<u8>,
}

impl InfraStandIns {
    /// Started in `dir` (which gets `bin/`, `out/`, `talos-state/`, `config/` and `tools/`),
    /// `serve` making the factory from the worker's and the control planes' `.raw.zst` bytes;
    /// `None` when a program they need is missing (the test is skipped, or failed under
    /// EDGEPOP_REQUIRE_ALL).
    pub(crate) fn start(
        test: &str,
        dir: &Path,
        serve: impl FnOnce(&[u8], &[u8]) -> Server,
    ) -> Option<InfraStandIns> {
        if !testkit::workspace::python3(test) {
            return None;
        }
        for program in ["zstd", "qemu-img", "curl", "make"] {
            if testkit::process::which(program).is_none() {
                testkit::skip_or_fail(test, program);
                return None;
            }
        }
        let shared = testkit::workspace::shared_dir(test)?;
        for sub in ["bin", "out", "talos-state", "config", "tools"] {
            fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let worker_image = zstd_image(&dir.join("worker.raw"), 0x11);
        let control_plane_image = zstd_image(&dir.join("control-plane.raw"), 0x22);
        let factory = serve(&worker_image, &control_plane_image);
        pin_the_factory(dir, &factory.url, &worker_image, &control_plane_image);
        let ((rescue, sshd), (second_rescue, second_sshd), scaleway) =
            rescue_and_scaleway(test, &shared, dir)?;
        let s3 = testkit::standin::s3(dir, ACCESS, SECRET);
        write_configs(dir, &rescue);
        recording_cargo(dir);
        Some(InfraStandIns {
            scaleway,
            s3,
            factory,
            rescue,
            sshd,
            second_rescue,
            second_sshd,
            worker_raw: fs::read(dir.join("worker.raw")).unwrap(),
        })
    }

    /// `make` with the Makefile's variables pointing into `dir` (the infra config, OUT, BIN,
    /// the digests, the recording cargo), the talosctl stand-in's variables (`talosctl` the real
    /// one behind it), the stand-ins' endpoints and credentials, `path` as PATH, and nothing else
    /// of this process's environment.
    pub(crate) fn make(&self, dir: &Path, talosctl: &Path, path: &str) -> Command {
        let mut command = Command::new("make");
        command
            .env_clear()
            .args(["--no-print-directory", "-C"])
            .arg(testkit::workspace::root())
            // The stand-ins on PATH, never the clients of a `make tools` folder.
            .arg("TOOLS_DIR=")
            .arg(format!("OUT={}", dir.join("out").display()))
            .arg(format!(
                "INFRA_CONFIG={}",
                dir.join("config/infra.json").display()
            ))
            .arg(format!("BIN={}", dir.join("tools").display()))
            .arg(format!(
                "TALOS_DIGESTS={}",
                dir.join("talos-image-digests.env").display()
            ))
            // The tools are the ones cargo built for this test: nothing is rebuilt.
            // cargo here only notes whether it got the Scaleway secret: a build script could
            // read it, and none needs it.
            .arg("RUST_SOURCES=")
            .arg(format!("CARGO={}", dir.join("cargo").display()))
            .env("HOME", dir)
            .env("PATH", path)
            .env("VERSIONS_FILE", dir.join("versions.env"))
            .env("BOOTSTRAP_INTERVAL", "0")
            .env("TALOSCTL_STATE", dir.join("talos-state"))
            .env("TALOSCTL_REAL", talosctl)
            .env("TALOSCTL_KUBECONFIG", dir.join("cluster-kubeconfig"))
            .stdin(Stdio::null());
        testkit::scaleway::stand_in_env(
            &mut command,
            dir,
            &self.scaleway,
            &self.s3,
            (ACCESS, SECRET, PROJECT),
        );
        command
    }
}

impl Stage {
    fn start(test: &str) -> Option<Stage> {
        let talosctl = testkit::upstream::program(test, "talosctl")?;
        let kubectl = testkit::upstream::program(test, "kubectl")?;
        let crds = testkit::crds::platform(test)?;
        let plane = ControlPlane::start(test)?;
        // The CRDs the charts bring (istio-base's templates, cert-manager's, Cilium's operator
        // installs its own): the recording helm installs nothing. The Gateway API's are the
        // platform layer's own to apply, from the vendored files.
        plane.install_crds(&crds[1..]);

        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        fs::create_dir_all(path("served")).unwrap();

        // The Image Factory: the worker's schematic registered, its metal image, then the
        // control planes' image, which scw-infra imports.
        let infra = InfraStandIns::start(test, dir.path(), |worker, control_plane| {
            Server::start(vec![
                Reply::json(201, format!(r#"{{"id":"{WORKER_SCHEMATIC}"}}"#)),
                Reply::ok(worker.to_vec()),
                Reply::ok(control_plane.to_vec()),
            ])
            .unwrap()
        })?;
        let shared = testkit::workspace::shared_dir(test)?;
        let vendor = vendor_server(test, &shared, dir.path())?;

        // The cluster's admin kubeconfig as Talos hands it out (its server the config's
        // cluster_endpoint), and the route to it.
        plane.example_endpoint_kubeconfig(&path("cluster-kubeconfig"));
        let tunnel = testkit::tunnel::Tunnel::start(
            &ControlPlane::example_endpoint_authority(),
            plane.address(),
        );

        install_tools(dir.path(), infra.sshd.port);

        Some(Stage {
            dir,
            plane,
            infra,
            vendor,
            tunnel,
            kubectl_dir: kubectl.parent().unwrap().to_path_buf(),
            talosctl,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn out(&self, name: &str) -> PathBuf {
        self.path("out").join(name)
    }

    /// `make <args>` as the operator runs it, with the Makefile's variables pointing here, the
    /// stand-ins' endpoints and credentials, and nothing else of this process's environment.
    fn make(&self, args: &[&str]) -> Output {
        self.make_command(args).output().unwrap()
    }

    /// `make <args>` run at a terminal (util-linux `script`, a pseudo-terminal) whose operator
    /// types `answer` and Enter: what the terminal showed (the recipes' stdout and stderr), and
    /// make's exit code.
    fn make_at_a_terminal(
        &self,
        script: &Path,
        args: &[&str],
        answer: &str,
    ) -> (String, Option<i32>) {
        let out = testkit::process::at_a_terminal(script, &self.make_command(args), answer);
        let terminal = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(!terminal.contains(SECRET), "the secret key was shown");
        (terminal, out.status.code())
    }

    /// The command [`Stage::make`] runs.
    fn make_command(&self, args: &[&str]) -> Command {
        let path = format!(
            "{}:{}:{}",
            self.path("bin").display(),
            self.kubectl_dir.display(),
            std::env::var("PATH").unwrap()
        );
        let mut command = self.infra.make(self.dir.path(), &self.talosctl, &path);
        command
            .arg(format!(
                "PLATFORM_CONFIG={}",
                self.path("config/platform.json").display()
            ))
            .arg(format!(
                "EDGE_CONFIG={}",
                self.path("config/edge.json").display()
            ))
            .args(args)
            .env("VENDOR_DIR", self.path("vendor"))
            .env("VENDOR_BASE_URL", &self.vendor.url)
            .env("GATEWAY_WAIT_SECONDS", "120")
            // The Scaleway requests and the talosctl calls in one log, in order.
            .env("TALOSCTL_LOG", self.path("requests.jsonl"))
            .env("STANDIN_LOG", self.path("helm.log"))
            .env("STANDIN_HELM_STATE", self.path("helm-releases"))
            // The API server is reached under the endpoint's name through the proxy only;
            // everything else here is on 127.0.0.1, which goes direct.
            .env("HTTPS_PROXY", self.tunnel.url())
            .env("NO_PROXY", "127.0.0.1");
        command
    }

    fn make_ok(&self, args: &[&str]) -> String {
        let out = self.make(args);
        assert!(out.status.success(), "make {args:?}: {}", text(&out));
        assert!(!text(&out).contains(SECRET), "the secret key was printed");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// The Scaleway requests and talosctl calls since the last look.
    /// No talosctl call of the pipelines gets the Scaleway secret key.
    fn take_log(&self) -> Vec<Value> {
        let log = testkit::scaleway::take_log(&self.path("requests.jsonl"));
        for call in log.iter().filter(|l| l.get("argv").is_some()) {
            assert_eq!(
                call["scw_secret_in_env"], false,
                "talosctl got the secret: {call}"
            );
        }
        log
    }

    /// The helm calls since the last look, each `helm <verb> <release>`.
    fn take_helm(&self) -> Vec<String> {
        let path = self.path("helm.log");
        let text = fs::read_to_string(&path).unwrap_or_default();
        fs::write(&path, "").unwrap();
        text.lines()
            .map(|l| l.replace("upgrade --install", "upgrade"))
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .collect()
    }

    /// The releases the recording helm holds as installed (`<namespace>.<release>`).
    fn releases(&self) -> Vec<String> {
        let dir = self.path("helm-releases");
        if dir.exists() {
            testkit::file_names(&dir)
        } else {
            Vec::new()
        }
    }

    fn state(&self) -> Value {
        control(&self.infra.scaleway.url(), "state", None)
    }

    fn kubectl(&self, args: &[&str]) -> String {
        self.plane.kubectl_ok(args, "")
    }

    fn inventory(&self) -> Value {
        serde_json::from_str(&fs::read_to_string(self.out("inventory.json")).unwrap()).unwrap()
    }
}

/// `dir/versions.env`: the pins with the Image Factory at `factory_url`; and
/// `dir/talos-image-digests.env`: both images recorded, as `make talos-image-digests` records them.
fn pin_the_factory(dir: &Path, factory_url: &str, worker_image: &[u8], control_plane_image: &[u8]) {
    let versions = fs::read_to_string(testkit::workspace::root().join("k8s/versions.env"))
        .unwrap()
        .lines()
        .map(|line| match line.split_once('=') {
            Some(("TALOS_FACTORY_URL", _)) => format!("TALOS_FACTORY_URL={factory_url}"),
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    fs::write(dir.join("versions.env"), versions + "\n").unwrap();
    let talos = testkit::pin("TALOS_VERSION");
    let control_plane_schematic = testkit::pin("TALOS_CONTROL_PLANE_SCHEMATIC");
    fs::write(
        dir.join("talos-image-digests.env"),
        format!(
            "{talos}/{control_plane_schematic}/scaleway-amd64.raw.zst={}\n\
             {talos}/{WORKER_SCHEMATIC}/metal-amd64.raw.zst={}\n",
            sha256(control_plane_image),
            sha256(worker_image)
        ),
    )
    .unwrap();
}

fn example(name: &str) -> Value {
    serde_json::from_str(
        &fs::read_to_string(testkit::workspace::root().join("config").join(name)).unwrap(),
    )
    .unwrap()
}

pub(crate) fn sha256(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// A 1 MiB raw disk image (zeros and one marked block) compressed by the zstd command.
fn zstd_image(raw: &Path, mark: u8) -> Vec<u8> {
    let mut bytes = vec![0u8; 1 << 20];
    bytes[4096..8192].fill(mark);
    fs::write(raw, &bytes).unwrap();
    let out = Command::new("zstd")
        .args(["-q", "-f", "-3"])
        .arg(raw)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    fs::read(raw.with_extension("raw.zst")).unwrap()
}

/// istiod's answers ([`testkit::istiod`]), played while `make apply` runs: the class of its
/// controller Accepted, then the edge's Gateway. Ends when both are answered, or when told to
/// stop; says how many classes and Gateways it answered.
fn istiod(
    plane_kubeconfig: PathBuf,
    kubectl: PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(usize, usize)> {
    std::thread::spawn(move || {
        let mut istiod = Istiod::new(|| {
            let mut command = Command::new(&kubectl);
            command.arg("--kubeconfig").arg(&plane_kubeconfig);
            command
        });
        // Bounded: 10 minutes at most, a look every half second.
        for _ in 0..1200 {
            let (classes, gateways) = istiod.answered();
            if stop.load(Ordering::SeqCst) || (classes > 0 && gateways > 0) {
                break;
            }
            istiod.look(istiod::ACCEPTED);
            std::thread::sleep(Duration::from_millis(500));
        }
        istiod.answered()
    })
}

/// The argv of a talosctl call logged, or `None` for a Scaleway request.
fn argv(entry: &Value) -> Option<Vec<String>> {
    serde_json::from_value(entry.get("argv")?.clone()).ok()
}

/// The talosctl calls of a log, as their subcommand words (`gen secrets`, `bootstrap`...) with
/// the node they name.
fn talosctl_calls(log: &[Value]) -> Vec<String> {
    log.iter()
        .filter_map(argv)
        .map(|argv| {
            let mut words = Vec::new();
            let mut node = None;
            let mut i = 0;
            while i < argv.len() {
                let a = &argv[i];
                if a == "--nodes" {
                    node = argv.get(i + 1).cloned();
                    i += 2;
                    continue;
                }
                if a.starts_with('-') {
                    // Flags with a value: skip the value.
                    if !a.contains('=')
                        && ![
                            "--force",
                            "--wait",
                            "--strict",
                            "--dry-run",
                            "--short",
                            "--client",
                        ]
                        .contains(&a.as_str())
                    {
                        i += 1;
                    }
                    i += 1;
                    continue;
                }
                if words.len() < 2 {
                    words.push(a.clone());
                }
                i += 1;
            }
            match node {
                Some(node) => format!("{} @{node}", words.join(" ")),
                None => words.join(" "),
            }
        })
        .collect()
}

/// The tagged objects of the cluster left in the stand-in's state, by kind.
fn leftovers(state: &Value) -> Vec<String> {
    let mut left = Vec::new();
    for kind in [
        "servers",
        "ips",
        "security_groups",
        "bm_servers",
        "images",
        "snapshots",
        "volumes",
    ] {
        for object in testkit::scaleway::tagged(&state[kind], CLUSTER_TAG) {
            left.push(format!("{kind} {}", object["id"]));
        }
    }
    for key in state["ssh_keys"].as_array().unwrap() {
        if key["name"] == format!("edgepop-{CLUSTER}") {
            left.push(format!("ssh_key {}", key["id"]));
        }
    }
    left
}

/// make vendor's upstream: the pinned Gateway API files, rebuilt from the shared bundle and
/// served on loopback.
fn vendor_server(test: &str, shared: &Path, dir: &Path) -> Option<crate::pipelines::Server> {
    let path = |name: &str| dir.join(name);
    let crd_dir = shared.join("crds");
    crate::pipelines::rebuild_upstream_files(
        &crd_dir.join(format!(
            "gateway-api-{}-standard.yaml",
            testkit::pin("GATEWAY_API_VERSION")
        )),
        &crd_dir.join("UPSTREAM-FILES.tsv"),
        &path("served"),
    );
    let Some(vendor) = crate::pipelines::Server::start(&path("served")) else {
        testkit::skip_or_fail(test, "python3 (its http.server)");
        return None;
    };
    Some(vendor)
}

type RescueAndSshd = (testkit::sshd::Rescue, testkit::sshd::Sshd);

/// A worker's rescue system: the real sshd at `address` on `port`, its user's sudo asking for
/// the rescue password, an empty 16 MiB disk; authorized_keys empty until the API boots the
/// server into rescue with the IAM key scw-infra registers.
fn worker_rescue(test: &str, address: &str, port: u16) -> Option<RescueAndSshd> {
    let (rescue, sshd) = testkit::sshd::rescue_at(test, address, port)?;
    fs::write(rescue.path("authorized_keys"), "").unwrap();
    rescue.sudo_that_asks_for_the_password();
    rescue.lsblk(json!([rescue.disk_device(16 << 20, &[])]));
    Some((rescue, sshd))
}

/// The workers' rescue systems (edge-worker-1's, and edge-worker-2's for `make add-worker`) and
/// the Scaleway stand-in that boots each server into its own and gives it its address.
fn rescue_and_scaleway(
    test: &str,
    shared: &Path,
    dir: &Path,
) -> Option<(RescueAndSshd, RescueAndSshd, testkit::standin::StandIn)> {
    let first = worker_rescue(test, WORKER_ADDRESS, testkit::free_port())?;
    let second = worker_rescue(test, SECOND_WORKER_ADDRESS, first.1.port)?;
    let scaleway = testkit::standin::scaleway_with_rescues(
        shared,
        dir,
        SECRET,
        PROJECT,
        &[("edge-worker-1", &first.0), ("edge-worker-2", &second.0)],
    );
    // The first worker, an Elastic Metal server carrying our tags, which scw-infra adopts rather
    // than ordering (as an operator's server bought by hand); the second is ordered.
    control(
        &scaleway.url(),
        "seed",
        Some(&json!({"kind": "baremetal_server", "name": "edge-worker-1",
                     "tags": [CLUSTER_TAG, "edgepop-role=worker", "edgepop-node=edge-worker-1"]})),
    );
    Some((first, second, scaleway))
}

/// The configs, from the committed examples, with the rescue's user key and disk.
fn write_configs(dir: &Path, rescue: &testkit::sshd::Rescue) {
    let path = |name: &str| dir.join(name);
    let mut infra = example("infra.example.json");
    infra["ssh_public_key_path"] = json!(rescue.path("user_key.pub"));
    infra["ssh_private_key_path"] = json!(rescue.path("user_key"));
    infra["workers"][0]["install_disk"] = json!(rescue.disk());
    fs::write(path("config/infra.json"), infra.to_string()).unwrap();
    for (from, to) in [
        ("platform.example.json", "platform.json"),
        ("edge.example.json", "edge.json"),
    ] {
        fs::write(path("config").join(to), example(from).to_string()).unwrap();
    }
}

/// BIN: the tools cargo built, the two node tools after scw-infra apply recorded; on PATH, the
/// talosctl stand-in and the recording helm.
/// `dir/cargo`: a cargo that builds nothing (the tools are the ones cargo built for this test)
/// and appends its arguments to `dir/secret-seen.log` when a Scaleway secret variable is in its
/// environment: a dependency's build script could read it, and none needs it.
fn recording_cargo(dir: &Path) {
    let path = |name: &str| dir.join(name);
    testkit::sshd::secret_noting_script(
        &path("cargo"),
        &scaleway::creds::SECRET_VARIABLES,
        &path("secret-seen.log"),
        "",
    );
}

/// `bin/scw-rescue-flash`: the real one, its calls recorded in `log`, told the rescue sshd's
/// port and to look again at once (the stand-in's server changes state at each look).
pub(crate) fn record_rescue_flash(bin: &Path, log: &Path, sshd_port: u16) {
    record_tool(
        bin,
        "scw-rescue-flash",
        log,
        &format!(
            "exec {} --ssh-port {} --ssh-tries 20 --ssh-interval-seconds 0 \"$@\"",
            testkit::workspace::bin("scw-rescue-flash").display(),
            sshd_port
        ),
    );
}

/// What talos-apply-insecure does to each worker of the inventory on its input, in Python: a
/// worker whose recorded config is not its `worker-<name>.yaml` (argv[1]: the config folder)
/// gets that file at its node stand-in (argv[2], `ADDRESS` its address), then the two steps
/// the real tool records once the node answers mutual TLS with our talosconfig
/// (`config_applied`, the config's sha256; `proved_ours`, the image it was flashed with: see
/// talos-apply-insecure's apply.rs and its tests against the Talos node stand-in); the
/// inventory goes on, as the real tool hands it on.
const APPLY_TO_WORKERS: &str = "import hashlib, json, os, sys\n\
inventory = json.load(sys.stdin)\n\
for n in inventory[\"nodes\"]:\n    \
if n[\"role\"] != \"worker\": continue\n    \
config = open(os.path.join(sys.argv[1], \"worker-\" + n[\"name\"] + \".yaml\"), \"rb\").read()\n    \
digest = \"sha256:\" + hashlib.sha256(config).hexdigest()\n    \
steps = n.setdefault(\"steps\", {})\n    \
if steps.get(\"config_applied\") == digest: continue\n    \
held = sys.argv[2].replace(\"ADDRESS\", n[\"public_ipv4\"])\n    \
os.makedirs(os.path.dirname(held), exist_ok=True)\n    \
fd = os.open(held, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)\n    \
os.write(fd, config)\n    \
os.close(fd)\n    \
steps[\"config_applied\"] = digest\n    \
steps[\"proved_ours\"] = steps.get(\"image_flashed\", \"ours\")\n\
print(json.dumps(inventory))";

fn install_tools(dir: &Path, sshd_port: u16) {
    let path = |name: &str| dir.join(name);
    let bin = path("tools");
    fs::create_dir_all(&bin).unwrap();
    for tool in [
        "scw-infra",
        "kubeconfig-guard",
        "render-platform",
        "render-edge",
        "wait-ready",
    ] {
        std::os::unix::fs::symlink(testkit::workspace::bin(tool), bin.join(tool)).unwrap();
    }
    // The node tools' calls recorded; scw-rescue-flash then runs for real, told the rescue
    // sshds' port and to look again at once (the stand-in's server changes state at each
    // look); talos-apply-insecure gives each worker of the inventory, in maintenance mode, its
    // own worker-<name>.yaml from --config-dir (the node stand-in at its address holds it from
    // then on) and records it configured and proved ours, as the real tool does (the control
    // planes took theirs as user data, which no talosctl call here reads, and are not proved:
    // no node stand-in answers at their addresses).
    let log = path("node-tools.log");
    record_rescue_flash(&bin, &log, sshd_port);
    let node_config = testkit::standin::talos_node_config(&path("talos-state"), "ADDRESS");
    record_tool(
        &bin,
        "talos-apply-insecure",
        &log,
        &format!(
            "while (( $# )); do [[ $1 == --config-dir ]] && config_dir=$2; shift; done\n\
             exec python3 -c '{APPLY_TO_WORKERS}' \"$config_dir\" '{}'",
            node_config.display()
        ),
    );
    std::os::unix::fs::symlink(testkit::standin::path("talosctl"), path("bin/talosctl")).unwrap();
    std::os::unix::fs::symlink(testkit::standin::path("recording/helm"), path("bin/helm")).unwrap();
}

#[test]
fn the_cluster_is_applied_powered_down_and_up_and_destroyed_with_nothing_left() {
    let test = "the_cluster_is_applied_powered_down_and_up_and_destroyed";
    let started = Instant::now();
    let Some(script) = testkit::process::which("script") else {
        testkit::skip_or_fail(test, "util-linux script (a pseudo-terminal)");
        return;
    };
    let Some(stage) = Stage::start(test) else {
        return;
    };

    vendor_step(&stage);
    let said = apply_step(&stage);
    let (inventory, control_planes, worker, worker_ip) = assert_the_outputs_written(&stage);
    let state = assert_the_scaleway_resources(&stage);
    let log = assert_the_calls_in_order(&stage, &control_planes, &worker_ip);
    assert_the_scaleway_side_and_the_node_tools(&stage, &log);
    assert_the_worker_was_flashed(&stage, &inventory, &log, &state);
    let components = assert_the_helm_releases_in_order(&stage);
    let namespace = assert_the_edge_objects_in_their_applyset(&stage);
    assert_the_routed_names_are_those_recorded(&stage, &said, &worker_ip, &namespace);
    bring_the_nodes_up(&stage, &worker, &namespace, &control_planes);
    let before = workers::add_worker_step(&stage);
    workers::remove_worker_step(&stage, &before);
    down_step(&stage, &worker, &worker_ip, &control_planes);
    up_step(&stage, &worker);
    destroy_step(&stage, &script, &components, &namespace);

    // No build cargo ran got the Scaleway secret.
    assert_eq!(
        fs::read_to_string(stage.path("secret-seen.log")).unwrap_or_default(),
        ""
    );
    // Nothing tried to leave loopback, and the cluster was reached under its endpoint's name.
    assert_eq!(stage.tunnel.refused(), Vec::<String>::new());
    assert!(stage.tunnel.opened() > 0);

    // The figure the report gives (not asserted: speed is measured by make bench only).
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "rehearsal: vendor, apply, add-worker, remove-worker, down, up, destroy in {:.0?}",
        started.elapsed()
    );
}

/// make vendor: the pinned Gateway API files, each checked.
fn vendor_step(stage: &Stage) {
    stage.make_ok(&["vendor"]);
    assert!(
        stage
            .path("vendor")
            .join(format!(
                "gateway-api-{}.yaml",
                testkit::pin("GATEWAY_API_VERSION")
            ))
            .is_file()
    );
}

/// make apply, istiod answering for the edge's class and Gateway meanwhile.
fn apply_step(stage: &Stage) -> String {
    let stop = Arc::new(AtomicBool::new(false));
    let istiod = istiod(
        stage.plane.kubeconfig().to_path_buf(),
        stage.kubectl_dir.join("kubectl"),
        stop.clone(),
    );
    let applied = stage.make(&["apply"]);
    // apply-edge.sh waits for both answers; a failed apply leaves nothing to answer for.
    if !applied.status.success() {
        stop.store(true, Ordering::SeqCst);
    }
    let (classes, gateways) = istiod.join().unwrap();
    assert!(applied.status.success(), "make apply: {}", text(&applied));
    assert!(!text(&applied).contains(SECRET));
    assert_eq!((classes, gateways), (1, 1));
    // apply-edge.sh saw istiod's answers for the generations it applied.
    let said = text(&applied);
    assert!(
        said.contains("GatewayClass istio is Accepted")
            && said.contains(&format!("Gateway {}", "edge/"))
            && said.matches(" is Accepted").count() == 2,
        "{said}"
    );
    said
}

/// Written: the layers' outputs under OUT, what holds a secret 0600.
fn assert_the_outputs_written(stage: &Stage) -> (Value, Vec<(String, String)>, String, String) {
    for file in [
        "secrets.yaml",
        "controlplane.yaml",
        "worker.yaml",
        "worker-edge-worker-1.yaml",
        "talosconfig",
        "kubeconfig",
    ] {
        assert_eq!(mode(&stage.out(file)), 0o600, "{file}");
    }
    for file in [
        "inventory.json",
        "platform-inputs.json",
        "platform-values/components.tsv",
        "edge-objects.yaml",
        "edge-names.env",
    ] {
        assert!(stage.out(file).is_file(), "{file}");
    }
    assert!(!stage.out("inventory.json.partial").exists());
    // The kubeconfig infra.sh wrote is the one the node handed out: the cluster's endpoint.
    assert_eq!(
        fs::read(stage.out("kubeconfig")).unwrap(),
        fs::read(stage.path("cluster-kubeconfig")).unwrap()
    );
    let inputs: pop_common::records::PlatformInputs =
        serde_json::from_str(&fs::read_to_string(stage.out("platform-inputs.json")).unwrap())
            .unwrap();
    assert_eq!(inputs.cluster_endpoint, "https://api.example.com:6443");
    let inventory = stage.inventory();
    let nodes: Vec<(String, String, String)> = inventory["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["role"].as_str().unwrap().to_owned(),
                n["name"].as_str().unwrap().to_owned(),
                n["public_ipv4"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let of_role = |role: &str| -> Vec<(String, String)> {
        nodes
            .iter()
            .filter(|n| n.0 == role)
            .map(|n| (n.1.clone(), n.2.clone()))
            .collect()
    };
    let (control_planes, workers) = (of_role("controlplane"), of_role("worker"));
    assert_eq!(control_planes.len(), 3, "{inventory}");
    assert_eq!(workers.len(), 1, "{inventory}");
    let (worker, worker_ip) = workers[0].clone();
    // The edge node is the worker, by the name Talos gives it, at the address DNS points at.
    assert_eq!(worker, "edge-worker-1");
    let edge_nodes: Vec<(String, String)> = inputs
        .edge_nodes
        .iter()
        .map(|n| (n.name.clone(), n.public_ipv4.to_string()))
        .collect();
    assert_eq!(edge_nodes, [(worker.clone(), worker_ip.clone())]);
    (inventory, control_planes, worker, worker_ip)
}

/// What exists at Scaleway: the cluster's machines running, its image imported.
fn assert_the_scaleway_resources(stage: &Stage) -> Value {
    let state = stage.state();
    let servers = testkit::scaleway::tagged(&state["servers"], CLUSTER_TAG);
    assert_eq!(servers.len(), 3);
    assert!(
        servers.iter().all(|s| s["state"] == "running"),
        "{servers:?}"
    );
    assert_eq!(
        testkit::scaleway::tagged(&state["bm_servers"], CLUSTER_TAG).len(),
        1
    );
    let images = testkit::scaleway::tagged(&state["images"], CLUSTER_TAG);
    assert_eq!(images.len(), 1, "{images:?}");
    // Each control plane got the config as user data: its digest is controlplane.yaml's.
    let config_digest = sha256(&fs::read(stage.out("controlplane.yaml")).unwrap());
    for server in &servers {
        let id = server["id"].as_str().unwrap();
        assert_eq!(
            state["user_data"][id]["cloud-init"], config_digest,
            "{id}: {}",
            state["user_data"]
        );
    }
    state
}

/// What was called, in order: the Image Factory (schematic, worker image, control planes'
/// image); talosctl: the configs, then the bootstrap and the kubeconfig from the first control
/// plane, then the host firewall on the worker (platform layer).
fn assert_the_calls_in_order(
    stage: &Stage,
    control_planes: &[(String, String)],
    worker_ip: &str,
) -> Vec<Value> {
    let factory: Vec<(String, String)> = stage
        .infra
        .factory
        .requests()
        .iter()
        .map(|r| (r.method.clone(), r.target.clone()))
        .collect();
    assert_eq!(factory.len(), 3, "{factory:?}");
    assert_eq!(factory[0], ("POST".into(), "/schematics".into()));
    assert!(
        factory[1].1.ends_with("/metal-amd64.raw.zst"),
        "{factory:?}"
    );
    assert!(
        factory[2].1.ends_with("/scaleway-amd64.raw.zst"),
        "{factory:?}"
    );
    let log = stage.take_log();
    let talos = talosctl_calls(&log);
    let first_cp = &control_planes[0].1;
    let position = |call: &str| {
        talos
            .iter()
            .position(|c| c == call)
            .unwrap_or_else(|| panic!("no `{call}` in {talos:#?}"))
    };
    let bootstrap = position(&format!("bootstrap @{first_cp}"));
    let kubeconfig = talos
        .iter()
        .position(|c| c.starts_with("kubeconfig ") && c.ends_with(&format!("@{first_cp}")))
        .unwrap_or_else(|| panic!("no kubeconfig call in {talos:#?}"));
    let patch = position(&format!("patch machineconfig @{worker_ip}"));
    assert!(
        position("gen secrets") < position("gen config")
            && position("gen config") < bootstrap
            && bootstrap < kubeconfig
            && kubeconfig < patch,
        "{talos:#?}"
    );
    // The worker took its host firewall without a reboot: its config holds each rule.
    assert_eq!(worker_ip, WORKER_ADDRESS);
    let worker_config = crate::talos_schema::documents(
        &fs::read_to_string(testkit::standin::talos_node_config(
            &stage.path("talos-state"),
            WORKER_ADDRESS,
        ))
        .unwrap(),
    );
    let rules =
        fs::read_to_string(stage.out("platform-values/talos-firewall.worker.yaml")).unwrap();
    for rule in crate::talos_schema::documents(&rules) {
        assert!(
            worker_config.contains(&rule),
            "{rule} not in the worker's config"
        );
    }
    log
}

/// The Scaleway side: the image imported before any server is made; the worker ordered.
fn assert_the_scaleway_side_and_the_node_tools(stage: &Stage, log: &[Value]) {
    let changes = mutations(log);
    let image_made = changes
        .iter()
        .position(|c| c.ends_with("/images"))
        .unwrap_or_else(|| panic!("{changes:#?}"));
    let server_made = changes
        .iter()
        .position(|c| c.ends_with("/servers"))
        .unwrap_or_else(|| panic!("{changes:#?}"));
    assert!(image_made < server_made, "{changes:#?}");
    // The node tools got the inventory in the pipe; only the Scaleway one got the secret.
    let node_tools = fs::read_to_string(stage.path("node-tools.log")).unwrap();
    let tools: Vec<(&str, &str)> = node_tools
        .lines()
        .map(|l| {
            let mut f = l.splitn(3, '\t');
            (f.next().unwrap(), f.next().unwrap())
        })
        .collect();
    assert_eq!(tools.len(), 3, "{node_tools}");
    assert!(
        tools.contains(&("talos-apply-insecure", ""))
            && tools
                .iter()
                .filter(|t| *t == &("scw-rescue-flash", "secret"))
                .count()
                == 2,
        "{node_tools}"
    );
}

/// The worker was flashed through its rescue system: its disk holds the image, the inventory
/// records it, and the server went through rescue and back to a normal boot.
fn assert_the_worker_was_flashed(stage: &Stage, inventory: &Value, log: &[Value], state: &Value) {
    let disk = fs::read(stage.infra.rescue.disk()).unwrap();
    assert!(
        disk.len() == stage.infra.worker_raw.len()
            && sha256(&disk) == sha256(&stage.infra.worker_raw),
        "the worker's disk is not the image"
    );
    let worker_node = testkit::json::element(&inventory["nodes"], "/role", "worker");
    assert_eq!(
        worker_node["steps"]["image_flashed"],
        format!("sha256:{}", sha256(&stage.infra.worker_raw)),
        "{inventory}"
    );
    let boots: Vec<&str> = log
        .iter()
        .filter(|r| {
            r["method"] == "POST"
                && r["path"]
                    .as_str()
                    .is_some_and(|p| p.contains("/baremetal/") && p.ends_with("/start"))
        })
        .map(|r| r["body"]["boot_type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(boots, ["rescue", "normal"], "{log:#?}");
    // Configured and proved ours (talos-apply-insecure's record), it carries the flashed tag,
    // which only a node proved ours gets: the image it runs.
    let state_worker = testkit::scaleway::tagged(&state["bm_servers"], CLUSTER_TAG)[0].clone();
    let flashed: Vec<&str> = state_worker["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str().unwrap().strip_prefix("edgepop-image-flashed="))
        .collect();
    assert_eq!(
        flashed,
        [format!("sha256:{}", sha256(&stage.infra.worker_raw))],
        "{state_worker}"
    );
    assert_eq!(
        worker_node["steps"]["proved_ours"], worker_node["steps"]["image_flashed"],
        "{inventory}"
    );
}

/// helm: each release of the platform layer, in the order components.tsv gives.
fn assert_the_helm_releases_in_order(stage: &Stage) -> Vec<String> {
    let components: Vec<String> = fs::read_to_string(stage.out("platform-values/components.tsv"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter(|l| l.split('\t').nth(1) == Some("helm"))
        .map(|l| l.split('\t').next().unwrap().to_owned())
        .collect();
    let helm = stage.take_helm();
    let upgrades = releases_by(&helm, "upgrade");
    assert_eq!(upgrades, components, "{helm:#?}");
    assert!(components.len() >= 3, "{components:?}");
    components
}

/// What exists in Kubernetes: the Gateway API CRDs the platform layer applied, the edge's
/// objects, each a member of its ApplySet.
fn assert_the_edge_objects_in_their_applyset(stage: &Stage) -> String {
    stage.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/gateways.gateway.networking.k8s.io",
        "--timeout=10s",
    ]);
    let names = fs::read_to_string(stage.out("edge-names.env")).unwrap();
    let namespace = names
        .lines()
        .find_map(|l| l.strip_prefix("EDGE_NAMESPACE="))
        .unwrap()
        .trim_matches('\'')
        .to_owned();
    let kinds = stage.kubectl(&[
        "get",
        "gateways,httproutes,deployments,services",
        "--namespace",
        &namespace,
        "--selector=applyset.kubernetes.io/part-of",
        "-o",
        "jsonpath={range .items[*]}{.kind}{\"\\n\"}{end}",
    ]);
    for kind in ["Gateway", "HTTPRoute", "Deployment", "Service"] {
        assert!(kinds.lines().any(|k| k == kind), "{kind}: {kinds}");
    }
    stage.kubectl(&["get", "gatewayclass", "istio"]);
    namespace
}

/// The names routed are those the infra layer gave the worker's DNS records, from the one
/// declaration of them (the infra config's edge_hostnames). The stand-in hosts no zone, so the
/// records are the ones the operator is told to create (in what make apply said).
fn assert_the_routed_names_are_those_recorded(
    stage: &Stage,
    said: &str,
    worker_ip: &str,
    namespace: &str,
) {
    let shown = said
        .lines()
        .find_map(|l| l.split_once("create these records yourself: "))
        .unwrap_or_else(|| panic!("no records shown: {said}"))
        .1;
    let recorded: std::collections::BTreeSet<String> = shown
        .split("; ")
        .filter_map(|r| match r.split(' ').collect::<Vec<_>>()[..] {
            [name, "A", data] if data == worker_ip => Some(format!("{name}.example.com")),
            _ => None,
        })
        .collect();
    let routed = stage.kubectl(&[
        "get",
        "httproutes",
        "--namespace",
        namespace,
        "-o",
        "jsonpath={range .items[*]}{range .spec.hostnames[*]}{@}{\"\\n\"}{end}{end}",
    ]);
    let routed: std::collections::BTreeSet<String> = routed.lines().map(str::to_owned).collect();
    assert_eq!(recorded.len(), 2, "{shown}");
    assert_eq!(routed, recorded);
}

/// The machines come up as the inventory names them: kwok's nodes stand for their kubelets. The
/// worker first, so that the edge's pods, pending until a node exists, land on it; then the
/// control planes, labelled and tainted as Talos registers them when
/// `allowSchedulingOnControlPlanes` is false (talos/patches/60-control-plane-no-workloads).
fn bring_the_nodes_up(
    stage: &Stage,
    worker: &str,
    namespace: &str,
    control_planes: &[(String, String)],
) {
    stage.plane.add_node(worker, &[]);
    let deployments =
        stage.kubectl(&["get", "deployments", "--namespace", namespace, "-o", "name"]);
    for deployment in deployments.lines() {
        stage.kubectl(&[
            "rollout",
            "status",
            deployment,
            "--namespace",
            namespace,
            "--timeout=120s",
        ]);
    }
    let placed = stage.kubectl(&[
        "get",
        "pods",
        "--namespace",
        namespace,
        "-o",
        "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}",
    ]);
    assert!(
        !placed.is_empty() && placed.lines().all(|node| node == worker),
        "{placed}"
    );
    for (name, _) in control_planes {
        stage
            .plane
            .add_node(name, &[("node-role.kubernetes.io/control-plane", "")]);
        stage.kubectl(&[
            "taint",
            "node",
            name,
            "node-role.kubernetes.io/control-plane:NoSchedule",
        ]);
    }
}

/// `make <target>` with OUT's `file` set aside: refused (exit 2) naming it, nothing changed;
/// then the file is put back.
fn refused_without(stage: &Stage, file: &str, target: &str) {
    let aside = stage.path(&format!("{file}.aside"));
    fs::rename(stage.out(file), &aside).unwrap();
    let out = stage.make(&[target]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("{file} is missing")),
        "{}",
        text(&out)
    );
    assert_eq!(mutations(&stage.take_log()), Vec::<String>::new());
    fs::rename(&aside, stage.out(file)).unwrap();
}

/// make down: first without the talosconfig, which stops it, naming the file, with nothing
/// changed (the nodes could not be shut down before their power is cut); then the worker shut
/// down through Talos and stopped, then the control planes.
fn down_step(stage: &Stage, worker: &str, worker_ip: &str, control_planes: &[(String, String)]) {
    refused_without(stage, "talosconfig", "down");

    // --- make down: the worker shut down through Talos and stopped, then the control planes.
    stage.make_ok(&["down"]);
    let log = stage.take_log();
    let worker_shutdown = first(&log, "worker shutdown", |e| talosctl_on(e, worker_ip));
    let worker_stop = first(&log, "worker stop", |e| {
        e["method"] == "POST" && e["path"].as_str().is_some_and(|p| p.ends_with("/stop"))
    });
    let poweroff = first(&log, "poweroff", |e| e["body"]["action"] == "poweroff");
    assert!(
        worker_shutdown < worker_stop && worker_stop < poweroff,
        "{log:#?}"
    );
    for (_, ip) in control_planes {
        let at = first(&log, "control-plane shutdown", |e| talosctl_on(e, ip));
        assert!(worker_stop < at && at < poweroff, "{ip}: {log:#?}");
    }
    let state = stage.state();
    assert!(
        testkit::scaleway::tagged(&state["servers"], CLUSTER_TAG)
            .iter()
            .all(|s| s["state"] == "stopped")
    );
    assert!(
        testkit::scaleway::tagged(&state["bm_servers"], CLUSTER_TAG)
            .iter()
            .all(|s| s["status"] == "stopped")
    );
    // Talos cordoned the worker before its shutdown (its drain): the cluster holds that when it
    // comes back.
    stage.kubectl(&["cordon", worker]);
}

/// make up: first without the platform inputs, refused before any machine is started; then
/// the control planes first, then the worker, which wait-ready uncordons.
fn up_step(stage: &Stage, worker: &str) {
    refused_without(stage, "platform-inputs.json", "up");

    // --- make up: the control planes first, then the worker; wait-ready uncordons it.
    let out = stage.make(&["up", "UP_TIMEOUT=3m"]);
    assert!(out.status.success(), "make up: {}", text(&out));
    let summary: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(summary["nodes_ready"], 4, "{summary}");
    assert_eq!(summary["uncordoned"], json!([worker]), "{summary}");
    assert_eq!(
        stage.kubectl(&[
            "get",
            "node",
            worker,
            "-o",
            "jsonpath={.spec.unschedulable}"
        ]),
        ""
    );
    let log = stage.take_log();
    let poweron = first(&log, "poweron", |e| e["body"]["action"] == "poweron");
    let start = first(&log, "worker start", |e| {
        e["method"] == "POST" && e["path"].as_str().is_some_and(|p| p.ends_with("/start"))
    });
    assert!(poweron < start, "{log:#?}");
    let state = stage.state();
    assert!(
        testkit::scaleway::tagged(&state["servers"], CLUSTER_TAG)
            .iter()
            .all(|s| s["state"] == "running")
    );
}

/// The releases of the `helm` calls (see [`Stage::take_helm`]) that `verb` them, in order.
fn releases_by(helm: &[String], verb: &str) -> Vec<String> {
    let call = format!("helm {verb}");
    helm.iter()
        .filter(|c| c.starts_with(&call))
        .map(|c| c.trim_start_matches(&format!("{call} ")).to_owned())
        .collect()
}

/// make destroy, with everything the platform brought (DELETE_CRDS=yes): edge, platform, then
/// exactly the Scaleway plan shown. The operator is shown the plan and asked, at a terminal,
/// for the cluster's name.
fn destroy_step(stage: &Stage, script: &Path, components: &[String], namespace: &str) {
    let (terminal, code) =
        stage.make_at_a_terminal(script, &["destroy", "DELETE_CRDS=yes"], CLUSTER);
    assert_eq!(code, Some(0), "{terminal}");
    assert!(
        terminal.contains("Destroy the edge layer, the platform layer and the ")
            && terminal.contains(&format!("of cluster {CLUSTER} in project {PROJECT}"))
            && terminal.contains(&format!("Type the cluster name ({CLUSTER})"))
            && terminal.contains("cluster edge-par destroyed"),
        "{terminal}"
    );
    assert_eq!(leftovers(&stage.state()), Vec::<String>::new());
    assert_eq!(stage.releases(), Vec::<String>::new());
    let helm = stage.take_helm();
    let uninstalled = releases_by(&helm, "uninstall");
    let mut reversed = components.to_vec();
    reversed.reverse();
    assert_eq!(uninstalled, reversed, "{helm:#?}");
    assert_eq!(
        stage.kubectl(&[
            "get",
            "namespace",
            namespace,
            "--ignore-not-found",
            "-o",
            "name"
        ]),
        ""
    );
    // The platform's CRDs went with DELETE_CRDS=yes, and every object of them (the
    // GatewayClass, the ClusterIssuer) with them.
    let crds = stage.kubectl(&["get", "crd", "-o", "name"]);
    for group in [
        "gateway.networking.k8s.io",
        "cert-manager.io",
        "istio.io",
        "cilium.io",
    ] {
        assert!(!crds.contains(group), "{group}: {crds}");
    }
}
