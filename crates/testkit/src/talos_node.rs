//! Talos nodes for tests: the cluster's trust as the real talosctl makes it, certificates of its
//! machine CA, and configured control planes played by `stand-ins/talos_maintenance.py` (the real
//! `MachineService` messages, mutual TLS), each on an address of its own in 127.0.0.0/8 with a
//! real etcd member behind it (`stand-ins/talos_etcd.py`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::standin::StandIn;

fn run(dir: &Path, program: &str, args: &[&str]) {
    crate::process::stdout_of(Command::new(program).args(args).current_dir(dir));
}

/// `openssl req` with a new P-256 key `name.key` and the subject `/CN=name`, writing `out`:
/// a self-signed certificate (`-x509`) or a signing request (`-new`), `extra` options after.
pub fn new_key_and_request(dir: &Path, name: &str, kind: &str, out: &str, extra: &[&str]) {
    let (key, subject) = (format!("{name}.key"), format!("/CN={name}"));
    crate::openssl::request(dir, &key, &subject, kind, out, extra);
}

/// `name.crt` (key `name.key`): a certificate for `addresses` issued by the CA `ca`
/// (`ca.crt`, `ca.key`), as a configured node's API certificate is by its machine CA, naming its
/// addresses (Talos v1.13.9 internal/app/machined/pkg/controllers/secrets/api_cert_sans.go).
#[allow(clippy::panic)] // a test helper: a certificate it cannot make fails the test
pub fn issued(dir: &Path, name: &str, ca: &str, addresses: &[&str]) {
    let (csr, crt, ext) = (
        format!("{name}.csr"),
        format!("{name}.crt"),
        format!("{name}.ext"),
    );
    new_key_and_request(dir, name, "-new", &csr, &[]);
    let sans: Vec<String> = addresses.iter().map(|a| format!("IP:{a}")).collect();
    let extensions = format!(
        "subjectAltName={}\nextendedKeyUsage=serverAuth,clientAuth\n",
        sans.join(",")
    );
    if let Err(err) = fs::write(dir.join(&ext), extensions) {
        panic!("cannot write {ext}: {err}");
    }
    let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
    run(
        dir,
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &crt,
            "-extfile",
            &ext,
        ],
    );
}

/// The machine (OS) CA of `dir/secrets.yaml` as `machine-ca.{crt,key}`: Talos labels its Ed25519
/// key `ED25519 PRIVATE KEY` (PKCS#8 inside), which openssl reads as `PRIVATE KEY`.
pub fn machine_ca(dir: &Path) {
    let extract = "import base64, yaml\n\
                   ca = yaml.safe_load(open('secrets.yaml'))['certs']['os']\n\
                   open('machine-ca.crt', 'wb').write(base64.b64decode(ca['crt']))\n\
                   key = base64.b64decode(ca['key']).decode()\n\
                   open('machine-ca.key', 'w').write(key.replace('ED25519 PRIVATE KEY', 'PRIVATE KEY'))\n";
    run(dir, "python3", &["-c", extract]);
}

/// A cluster's trust in `dir`, made by the real talosctl: `secrets.yaml`, the `talosconfig` of
/// `cluster`, the machine CA (`machine-ca.{crt,key}`), and `node.{crt,key}`, the API
/// certificate of every node at `addresses`.
pub fn cluster_trust(dir: &Path, talosctl: &Path, cluster: &str, addresses: &[&str]) {
    let talosctl = talosctl.to_string_lossy();
    run(dir, &talosctl, &["gen", "secrets", "-o", "secrets.yaml"]);
    let endpoint = "https://api.example.com:6443";
    run(
        dir,
        &talosctl,
        &[
            "gen",
            "config",
            cluster,
            endpoint,
            "--with-secrets",
            "secrets.yaml",
            "--output-types",
            "talosconfig",
            "-o",
            "talosconfig",
        ],
    );
    machine_ca(dir);
    issued(dir, "node", "machine-ca", addresses);
}

/// The programs a control-plane node stand-in runs: the real talosctl (its validate), etcd,
/// etcdctl and etcdutl; `None` after [`crate::skip_or_fail`] when one is missing.
#[derive(Debug, Clone)]
pub struct Programs {
    pub talosctl: PathBuf,
    pub etcd: PathBuf,
    pub etcdctl: PathBuf,
    pub etcdutl: PathBuf,
    /// Talos's protos (`../shared/talos/v1.13.9/api`).
    pub api: PathBuf,
}

impl Programs {
    pub fn find(test: &str) -> Option<Programs> {
        let shared = crate::workspace::shared_dir(test)?;
        if !crate::workspace::python3(test)
            || !crate::workspace::python_imports(
                test,
                "grpc, grpc_tools, yaml",
                "Python grpcio-tools (pip install grpcio-tools)",
            )
        {
            return None;
        }
        crate::process::which_or_skip(test, "openssl", "openssl")?;
        let program = |name| crate::upstream::program(test, name);
        Some(Programs {
            talosctl: program("talosctl")?,
            etcd: program("etcd")?,
            etcdctl: program("etcdctl")?,
            etcdutl: program("etcdutl")?,
            api: shared.join("talos/v1.13.9/api"),
        })
    }
}

/// A configured control plane: its name, its address, its etcd.
#[derive(Debug, Clone, Default)]
pub struct ControlPlaneSpec {
    /// Its hostname: its etcd member's name.
    pub hostname: String,
    /// Its own address in 127.0.0.0/8.
    pub address: String,
    /// The Talos API's port (the same on every node, as 50000 is on a real cluster).
    pub port: u16,
    /// Where its etcd serves clients, and its peer URL.
    pub etcd_client_url: String,
    pub etcd_peer_url: String,
    /// Its etcd runs from the start, a member of this initial cluster (`name=peer,...`); `None`:
    /// it runs only once bootstrapped (or the client URL is another's etcd).
    pub initial_cluster: Option<String>,
    /// With no initial cluster: its etcd joins the cluster of `control_plane_etcd_endpoints` at
    /// once, as a learner first, as a control plane made again or added does.
    pub join_etcd: bool,
    /// Every control plane's etcd client URL, as Talos discovers them for a member's removal;
    /// empty: the node's own only.
    pub control_plane_etcd_endpoints: Vec<String>,
    /// A file holding the pid of the process that plays its kube-apiserver (what `talosctl
    /// restart -k` stops there); `None`: no API server runs on it.
    pub kube_apiserver_pid_file: Option<PathBuf>,
    /// The admin kubeconfig it serves through the Talos API (what talosctl's drain fetches);
    /// `None`: it serves none.
    pub admin_kubeconfig: Option<PathBuf>,
    /// Addresses the test's network takes elsewhere (`address`, `loopback address`): where its
    /// apid's forwarded calls go for an address no loopback interface has.
    pub routes: Vec<(String, String)>,
}

impl ControlPlaneSpec {
    /// `hostname` at `address`, its Talos API on `port`, its etcd at the two URLs; the rest as
    /// [`Default`] leaves it: etcd runs only once bootstrapped, no API server runs on it, it serves
    /// no kubeconfig, no route.
    pub fn new(
        hostname: &str,
        address: &str,
        port: u16,
        etcd_client_url: String,
        etcd_peer_url: String,
    ) -> ControlPlaneSpec {
        ControlPlaneSpec {
            hostname: hostname.to_owned(),
            address: address.to_owned(),
            port,
            etcd_client_url,
            etcd_peer_url,
            ..ControlPlaneSpec::default()
        }
    }
}

/// A running node stand-in, a control plane ([`ControlPlaneNode::start`]) or a worker
/// ([`ControlPlaneNode::start_worker`]), killed (its etcd with it) when dropped.
#[derive(Debug)]
pub struct ControlPlaneNode {
    _server: StandIn,
    /// Its calls (`calls.jsonl`) and its etcd's log.
    pub records: PathBuf,
    /// Its /var/lib: `etcd/`, `etcd.snapshot`.
    pub var_lib: PathBuf,
}

impl ControlPlaneNode {
    /// Starts it with the trust [`cluster_trust`] made in `dir`, its disk a new folder of `dir`
    /// (`<hostname>`, or `<hostname>.2`, ... for a machine made again).
    pub fn start(programs: &Programs, dir: &Path, spec: &ControlPlaneSpec) -> ControlPlaneNode {
        let (mut command, records, var_lib) = node_command(
            programs,
            dir,
            "controlplane",
            &spec.hostname,
            &spec.address,
            spec.port,
        );
        command
            .args(["--etcd-client-url", &spec.etcd_client_url])
            .args(["--etcd-peer-url", &spec.etcd_peer_url]);
        if let Some(initial) = &spec.initial_cluster {
            command.args(["--etcd-initial-cluster", initial]);
        } else if spec.join_etcd {
            command.arg("--etcd-join");
        }
        if let Some(pid_file) = &spec.kube_apiserver_pid_file {
            command.arg("--kube-apiserver-pid-file").arg(pid_file);
        }
        if let Some(kubeconfig) = &spec.admin_kubeconfig {
            command.arg("--admin-kubeconfig").arg(kubeconfig);
        }
        for (address, to) in &spec.routes {
            command.arg("--route").arg(format!("{address}={to}"));
        }
        if !spec.control_plane_etcd_endpoints.is_empty() {
            command.args([
                "--control-plane-etcd-endpoints",
                &spec.control_plane_etcd_endpoints.join(","),
            ]);
        }
        ControlPlaneNode::run(command, records, var_lib)
    }

    /// A configured worker `hostname` at `address`, the Talos API at `port`: no etcd, and the
    /// control planes' APIs (etcd, the kubeconfig) refused as Talos refuses them on a worker.
    pub fn start_worker(
        programs: &Programs,
        dir: &Path,
        hostname: &str,
        address: &str,
        port: u16,
    ) -> ControlPlaneNode {
        let (command, records, var_lib) =
            node_command(programs, dir, "worker", hostname, address, port);
        ControlPlaneNode::run(command, records, var_lib)
    }

    fn run(mut command: Command, records: PathBuf, var_lib: PathBuf) -> ControlPlaneNode {
        let port_file = records.join("port");
        ControlPlaneNode {
            _server: StandIn::start(&mut command, &port_file),
            records,
            var_lib,
        }
    }

    /// How its apid routed the calls of `method` (`EtcdSnapshot`, `LifecycleService/Upgrade`):
    /// `{"apid": "one-to-one", "node": ...}` or `{"apid": "one-to-many", "nodes": [...]}`.
    pub fn routed(&self, method: &str) -> Vec<serde_json::Value> {
        // `/machine.LifecycleService/Upgrade`: `Upgrade`, or `LifecycleService/Upgrade`.
        let named = |full: &str| {
            let (service, name) = full.rsplit_once('/').unwrap_or_default();
            let service = service.rsplit('.').next().unwrap_or_default();
            name == method || format!("{service}/{name}") == method
        };
        self.calls("")
            .into_iter()
            .filter(|c| c["method"].as_str().is_some_and(named))
            .collect()
    }

    /// The calls it answered, as JSON lines, of the RPC `rpc` (or every line, with `""`).
    pub fn calls(&self, rpc: &str) -> Vec<serde_json::Value> {
        fs::read_to_string(self.records.join("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|c| rpc.is_empty() || c["rpc"] == rpc)
            .collect()
    }
}

/// The node stand-in's command for a configured node of `machine_type`, with the trust
/// [`cluster_trust`] made in `dir`, its disk a new folder of `dir` (`<hostname>`, or
/// `<hostname>.2`, ... for a machine made again): the command, its records, its /var/lib.
#[allow(clippy::panic)] // a test helper: a node it cannot start fails the test
fn node_command(
    programs: &Programs,
    dir: &Path,
    machine_type: &str,
    hostname: &str,
    address: &str,
    port: u16,
) -> (Command, PathBuf, PathBuf) {
    let node_dir = (1..)
        .map(|n| match n {
            1 => dir.join(hostname),
            n => dir.join(format!("{hostname}.{n}")),
        })
        .find(|folder| !folder.exists())
        .unwrap_or_else(|| dir.join(hostname));
    let (records, var_lib) = (node_dir.join("records"), node_dir.join("var-lib"));
    for folder in [&records, &var_lib] {
        if let Err(err) = fs::create_dir_all(folder) {
            panic!("cannot make {}: {err}", folder.display());
        }
    }
    let mut command = crate::standin::python("talos_maintenance.py");
    command
        .arg("--api-dir")
        .arg(&programs.api)
        .args(["--start", "configured", "--machine-type", machine_type])
        .args(["--address", address, "--port", &port.to_string()])
        .args(["--hostname", hostname, "--lifetime", "600"]);
    for (flag, path) in [
        ("--cert", dir.join("node.crt")),
        ("--key", dir.join("node.key")),
        ("--client-ca", dir.join("machine-ca.crt")),
        ("--port-file", records.join("port")),
        ("--record-dir", records.clone()),
        ("--var-lib", var_lib.clone()),
        ("--talosctl", programs.talosctl.clone()),
        ("--etcd", programs.etcd.clone()),
        ("--etcdctl", programs.etcdctl.clone()),
        ("--etcdutl", programs.etcdutl.clone()),
    ] {
        command.arg(flag).arg(path);
    }
    command.current_dir(dir).stdin(Stdio::null());
    (command, records, var_lib)
}

/// Control planes `names` at `addresses`, one etcd cluster of their members from the start, each
/// reaching every member for a removal (as Talos discovers them); the Talos API at `port` on
/// every one. Their etcd client URLs are `http://<address>:<port>`, ports picked here.
pub fn etcd_cluster(names: &[&str], addresses: &[&str], port: u16) -> Vec<ControlPlaneSpec> {
    let url = |address: &str| format!("http://{address}:{}", crate::free_port());
    let peers: Vec<String> = addresses.iter().map(|a| url(a)).collect();
    let clients: Vec<String> = addresses.iter().map(|a| url(a)).collect();
    let initial: Vec<String> = names
        .iter()
        .zip(&peers)
        .map(|(n, p)| format!("{n}={p}"))
        .collect();
    let initial = initial.join(",");
    names
        .iter()
        .zip(addresses)
        .zip(peers.iter().zip(&clients))
        .map(|((name, address), (peer, client))| ControlPlaneSpec {
            initial_cluster: Some(initial.clone()),
            control_plane_etcd_endpoints: clients.clone(),
            ..ControlPlaneSpec::new(name, address, port, client.clone(), peer.clone())
        })
        .collect()
}

/// The real etcdctl, independent of the tools under test, against the member at `url` with
/// `args`, whether it succeeds or not; a member that does not answer fails the call within
/// seconds.
#[allow(clippy::panic)] // a test helper: an etcdctl that cannot start fails the test
pub fn etcdctl(program: &Path, url: &str, args: &[&str]) -> std::process::Output {
    let mut command = Command::new(program);
    command
        .args(["--endpoints", url])
        .args(["--dial-timeout=2s", "--command-timeout=10s"])
        .args(args);
    match command.output() {
        Ok(out) => out,
        Err(err) => panic!("cannot start {command:?}: {err}"),
    }
}

/// [`etcdctl`]'s stdout, the call having succeeded.
#[track_caller]
pub fn etcdctl_ok(program: &Path, url: &str, args: &[&str]) -> String {
    crate::process::success_stdout(&etcdctl(program, url, args))
}

/// [`etcdctl`] again until it succeeds: once the member has elected itself (a put, a health
/// check).
pub fn etcdctl_once_elected(program: &Path, url: &str, args: &[&str]) {
    crate::eventually("the member to elect itself", || {
        etcdctl(program, url, args).status.success().then_some(())
    });
}

/// The member at `url`'s id and the leader it follows (0: none), when it answers without an
/// error (the real etcdctl, independent of the tools under test).
pub fn member_and_leader(program: &Path, url: &str) -> Option<(u64, u64)> {
    let out = etcdctl(program, url, &["endpoint", "status", "-w", "json"]);
    let status: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    let status = &status[0]["Status"];
    if !status["errors"].is_null() {
        return None;
    }
    Some((
        status["header"]["member_id"].as_u64()?,
        status["leader"].as_u64().unwrap_or(0),
    ))
}

/// The members etcd lists (`member list -w json`: `ID`, `name`, `isLearner`...), asked of the
/// member at `url` by the real etcdctl; none when it does not answer.
pub fn members(program: &Path, url: &str) -> Vec<serde_json::Value> {
    let out = etcdctl(program, url, &["member", "list", "-w", "json"]);
    let list: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    list["members"].as_array().cloned().unwrap_or_default()
}

/// Whether the member at `url` answers with a leader.
pub fn has_leader(etcdctl: &Path, url: &str) -> bool {
    member_and_leader(etcdctl, url).is_some_and(|(_, leader)| leader != 0)
}

/// Whether the members at `urls` all follow one leader that is one of them: an election after
/// a member went is over (until then the others may still name the one gone).
pub fn settled(etcdctl: &Path, urls: &[&str]) -> bool {
    let answers: Option<Vec<(u64, u64)>> = urls
        .iter()
        .map(|url| member_and_leader(etcdctl, url))
        .collect();
    answers.is_some_and(|answers| {
        let leader = answers[0].1;
        answers.iter().all(|&(_, l)| l == leader) && answers.iter().any(|&(m, _)| m == leader)
    })
}
