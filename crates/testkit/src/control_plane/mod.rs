//! A real Kubernetes control plane for tests, on loopback, from the upstream programs built at the
//! pins ([`crate::upstream`]): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, and
//! kwok, which stands in for the kubelets (nodes it manages go Ready, their pods run without
//! containers).
//!
//! The API server is set up as Talos v1.13 sets up the cluster's: client certificates from one CA,
//! ServiceAccount tokens signed by a key of its own, `Node,RBAC` authorisation, the default
//! admission plugins plus `NodeRestriction`, PodSecurity `baseline` enforced outside kube-system,
//! and the `extraArgs` of the project's control-plane patches (`talos/patches/`). The controller
//! manager runs every controller with per-controller ServiceAccount credentials, as Talos runs it.
//!
//! [`ControlPlane::shared`] starts one per test binary (the first test to ask waits for it);
//! [`ControlPlane::start`] starts one of a test's own. Either way nothing outlives the test
//! process: a dropped control plane kills its programs and removes its folder, and a lifeline
//! process does the same for a shared one when the test process ends, however it ends.

mod components;
mod lifeline;
mod pki;
mod service_account;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::free_port;
use lifeline::Lifeline;
use pki::{Pki, write_kubeconfig};
pub use service_account::ServiceAccount;
pub use watch::{Cordon, NodeSeen, NodeWatch, cordons};

/// How long start-up may take, each step (the API server's first start on a loaded 2-core
/// machine takes tens of seconds).
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// Talos's default Service and Pod networks (pkg/machinery/constants DefaultIPv4ServiceNet,
/// DefaultIPv4PodNet, v1.13.9).
const SERVICE_CIDR: &str = "10.96.0.0/12";
const POD_CIDR: &str = "10.244.0.0/16";
/// The API server's name in the example configs' `cluster_endpoint`
/// (`https://api.example.com:6443`, config/infra.example.json): its certificate names it too, so
/// that a test reaching this server through [`crate::tunnel`] under that name checks it as a
/// client checks the cluster's (Talos puts the endpoint's host in the API server's SANs).
pub const EXAMPLE_API_HOST: &str = "api.example.com";
/// The annotation by which kwok manages a node (its `--manage-nodes-with-annotation-selector`):
/// a node without it is left alone, for tests that need a node that never becomes Ready.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
const KWOK_NODE_ANNOTATION_VALUE: &str = "fake";

/// The programs a control plane runs.
#[derive(Debug, Clone)]
struct Programs {
    etcd: PathBuf,
    apiserver: PathBuf,
    controller_manager: PathBuf,
    scheduler: PathBuf,
    kubectl: PathBuf,
    kwok: PathBuf,
    kwok_stages: PathBuf,
}

impl Programs {
    /// The programs, or what is missing.
    fn find(test: &str) -> Option<Programs> {
        crate::process::which_or_skip(
            test,
            "openssl",
            "openssl (the control plane's certificates)",
        )?;
        let program = |name| crate::upstream::program(test, name);
        Some(Programs {
            etcd: program("etcd")?,
            apiserver: program("kube-apiserver")?,
            controller_manager: program("kube-controller-manager")?,
            scheduler: program("kube-scheduler")?,
            kubectl: program("kubectl")?,
            kwok: program("kwok")?,
            kwok_stages: program("kwok-stages")?,
        })
    }
}

/// A running control plane. Its programs log to `<dir>/logs/<program>.log`.
#[derive(Debug)]
pub struct ControlPlane {
    dir: PathBuf,
    kubeconfig: PathBuf,
    server: String,
    etcd_url: String,
    /// The API server's command, to start it again ([`ControlPlane::restart_apiserver`]).
    apiserver: Option<Command>,
    kubectl: PathBuf,
    components: Vec<Component>,
    lifeline: Option<Lifeline>,
    /// The CRD bundles installed so far ([`ControlPlane::install_crds`]), held while installing.
    crds: Mutex<BTreeSet<PathBuf>>,
}

#[derive(Debug)]
struct Component {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl ControlPlane {
    /// The control plane shared by the tests of this test binary, started by the first test to
    /// ask; or `None` after [`crate::skip_or_fail`] when a program is not built. Tests sharing it
    /// keep to namespaces and node names of their own.
    pub fn shared(test: &str) -> Option<&'static ControlPlane> {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        let programs = Programs::find(test)?;
        Some(SHARED.get_or_init(|| ControlPlane::start_with(&programs)))
    }

    /// A control plane of the calling test's own, stopped when dropped; or `None` after
    /// [`crate::skip_or_fail`] when a program is not built.
    pub fn start(test: &str) -> Option<ControlPlane> {
        Some(ControlPlane::start_with(&Programs::find(test)?))
    }

    /// A control plane of the calling test's own whose API server stores in the etcd members
    /// at `etcd_servers` (client URLs, comma-separated), which the test runs: as a cluster's
    /// API servers use every control plane's member. It runs no etcd of its own
    /// ([`ControlPlane::lose_etcd`] does not apply); [`ControlPlane::etcd_url`] is that list.
    pub fn start_over_etcd(test: &str, etcd_servers: &str) -> Option<ControlPlane> {
        let programs = Programs::find(test)?;
        Some(ControlPlane::start_with_etcd(&programs, Some(etcd_servers)))
    }

    fn start_with(programs: &Programs) -> ControlPlane {
        ControlPlane::start_with_etcd(programs, None)
    }

    #[allow(clippy::panic)] // a test helper: a control plane that cannot start fails the test
    fn start_with_etcd(programs: &Programs, etcd_servers: Option<&str>) -> ControlPlane {
        let dir = match tempfile::Builder::new()
            .prefix("edgepop-control-plane-")
            .tempdir()
        {
            Ok(dir) => dir.keep(),
            Err(err) => panic!("cannot make the control plane's folder: {err}"),
        };
        let lifeline = Lifeline::start(&dir);
        // From here on, a panic drops (stops) what has started.
        let mut plane = ControlPlane {
            kubeconfig: dir.join("kubeconfig"),
            server: String::new(),
            etcd_url: String::new(),
            apiserver: None,
            kubectl: programs.kubectl.clone(),
            components: Vec::new(),
            crds: Mutex::new(BTreeSet::new()),
            lifeline: Some(lifeline),
            dir,
        };
        let dir = plane.dir.clone();
        let pki = Pki::make(&dir.join("pki"));
        create_dir(&dir.join("logs"));
        let apiserver_port = free_port();
        plane.server = format!("https://127.0.0.1:{apiserver_port}");
        write_kubeconfig(&plane.kubeconfig, &plane.server, &pki, "admin");

        match etcd_servers {
            Some(servers) => servers.clone_into(&mut plane.etcd_url),
            None => plane.etcd_url = plane.start_etcd(programs),
        }
        let mut apiserver = components::apiserver(
            &programs.apiserver,
            &dir,
            &pki,
            &plane.etcd_url,
            apiserver_port,
        );
        plane.spawn("kube-apiserver", &mut apiserver);
        plane.wait_for_kubectl("kube-apiserver to be ready", &["get", "--raw=/readyz"]);
        plane.apiserver = Some(apiserver);
        let mut controller_manager =
            components::controller_manager(&programs.controller_manager, &dir, &plane.server, &pki);
        plane.spawn("kube-controller-manager", &mut controller_manager);
        let mut scheduler = components::scheduler(&programs.scheduler, &dir, &plane.server, &pki);
        plane.spawn("kube-scheduler", &mut scheduler);
        let mut kwok = components::kwok(&programs.kwok, &programs.kwok_stages, &plane.kubeconfig);
        plane.spawn("kwok", &mut kwok);

        // The ServiceAccount controller makes `default` in every namespace, and a pod cannot be
        // created before its namespace has one: the sign that the controllers run.
        plane.wait_for_kubectl(
            "the controller manager to make the default ServiceAccount",
            &["get", "serviceaccount", "default", "--namespace=default"],
        );
        plane
    }

    /// Its own etcd, listening: its client URL.
    fn start_etcd(&mut self, programs: &Programs) -> String {
        // A node stand-in's recovery restarts this etcd while the API server redials it.
        let etcd_client = crate::port_outside_ephemeral_range();
        let etcd_client_url = format!("http://127.0.0.1:{etcd_client}");
        let mut etcd = components::etcd(&programs.etcd, &self.dir, &etcd_client_url);
        self.spawn("etcd", &mut etcd);
        self.wait_until("etcd to listen", || {
            let addr = SocketAddr::from(([127, 0, 0, 1], etcd_client));
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
        });
        etcd_client_url
    }

    /// The admin kubeconfig (user in `system:masters`, client certificate), on loopback.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Where etcd serves the API server: `http://127.0.0.1:<port>` (or the members of
    /// [`ControlPlane::start_over_etcd`]).
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// etcd lost, as a disaster loses it: killed, its data folder removed. The API server keeps
    /// running and keeps asking for it at [`ControlPlane::etcd_url`], where a restored etcd may
    /// then listen.
    #[allow(clippy::panic)] // a test helper: a control plane it cannot stop fails the test
    pub fn lose_etcd(&mut self) {
        let Some(at) = self.components.iter().position(|c| c.name == "etcd") else {
            panic!("this control plane runs no etcd any more");
        };
        let mut etcd = self.components.remove(at);
        let _ = etcd.child.kill();
        let _ = etcd.child.wait();
        if let Err(err) = fs::remove_dir_all(self.dir.join("etcd")) {
            panic!("cannot remove etcd's data: {err}");
        }
    }

    /// Writes the API server's pid to `path`: the process a node stand-in's `talosctl restart
    /// -k kube-system/kube-apiserver-<node>:kube-apiserver` stops.
    #[allow(clippy::panic)] // a test helper: a file it cannot write fails the test
    pub fn write_apiserver_pid(&self, path: &Path) {
        let pid = self.components[self.apiserver_at()].child.id();
        if let Err(err) = fs::write(path, pid.to_string()) {
            panic!("cannot write {}: {err}", path.display());
        }
    }

    /// Plays kubelet for the API server's static pod: once something stopped the API server (a
    /// restore's `talosctl restart -k`: a running API server keeps serving what its watch cache
    /// holds), starts it again and waits until it is ready; fails the test when it is still
    /// running after two minutes.
    pub fn start_apiserver_again_once_stopped(&mut self) {
        let at = self.apiserver_at();
        let apiserver = &mut self.components[at].child;
        crate::eventually("the API server to be stopped", || {
            apiserver.try_wait().ok().flatten()
        });
        self.start_apiserver_again(at);
    }

    #[allow(clippy::panic)] // a test helper: a control plane without its API server fails the test
    fn apiserver_at(&self) -> usize {
        match self
            .components
            .iter()
            .position(|c| c.name == "kube-apiserver")
        {
            Some(at) => at,
            None => panic!("this control plane runs no API server"),
        }
    }

    /// The stopped API server at `at` started again from its command, waited for until ready.
    #[allow(clippy::panic)] // a test helper: a control plane it cannot restart fails the test
    fn start_apiserver_again(&mut self, at: usize) {
        self.components.remove(at);
        let Some(mut command) = self.apiserver.take() else {
            panic!("the API server's command is gone");
        };
        self.spawn("kube-apiserver", &mut command);
        self.apiserver = Some(command);
        self.wait_for_kubectl(
            "kube-apiserver to be ready again",
            &["get", "--raw=/readyz"],
        );
    }

    /// The admin kubeconfig under the example configs' endpoint,
    /// `https://api.example.com:6443` (what Talos's `kubeconfig` hands out for them), written
    /// to `path` (0600, a file that does not exist yet): clients reach it through a [`crate::tunnel::Tunnel`] from
    /// [`ControlPlane::example_endpoint_authority`] to [`ControlPlane::address`].
    #[allow(clippy::panic)] // a test helper: a kubeconfig that cannot be written fails the test
    pub fn example_endpoint_kubeconfig(&self, path: &Path) {
        let text = fs::read_to_string(&self.kubeconfig)
            .unwrap_or_else(|err| panic!("{}: {err}", self.kubeconfig.display()));
        let mut config: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("{}: {err}", self.kubeconfig.display()));
        config["clusters"][0]["cluster"]["server"] =
            format!("https://{}", Self::example_endpoint_authority()).into();
        write_private(path, &config.to_string());
    }

    /// `api.example.com:6443`, the authority of the example configs' `cluster_endpoint`.
    pub fn example_endpoint_authority() -> String {
        format!("{EXAMPLE_API_HOST}:6443")
    }

    /// `127.0.0.1:<port>`, where the API server listens.
    pub fn address(&self) -> &str {
        self.server.trim_start_matches("https://")
    }

    /// The pinned kubectl, with `--kubeconfig` set to [`ControlPlane::kubeconfig`].
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(&self.kubectl);
        command.arg("--kubeconfig").arg(&self.kubeconfig);
        command
    }

    /// `kubectl get nodes --watch` from now on, once it has printed the `nodes` nodes there
    /// are, its output in `scratch`.
    pub fn watch_nodes(&self, nodes: usize, scratch: &Path) -> NodeWatch {
        NodeWatch::start(self.kubectl(), nodes, scratch)
    }

    /// Runs kubectl with `args` (and `stdin` as its input), and returns its stdout; fails the
    /// test with kubectl's stderr when it exits non-zero.
    #[track_caller]
    pub fn kubectl_ok(&self, args: &[&str], stdin: &str) -> String {
        let out = crate::process::run_with_stdin(self.kubectl().args(args), stdin.as_bytes());
        crate::process::success_stdout(&out)
    }

    /// Creates the node `name`, managed by kwok, with `labels` beside the ones a kubelet sets
    /// (`kubernetes.io/hostname`, `kubernetes.io/os`, `kubernetes.io/arch`), and waits until it
    /// is Ready.
    #[track_caller]
    pub fn add_node(&self, name: &str, labels: &[(&str, &str)]) {
        self.create_node(name, labels);
        self.kubectl_ok(
            &[
                "wait",
                "--for=condition=Ready",
                &format!("node/{name}"),
                "--timeout=120s",
            ],
            "",
        );
    }

    /// The node `name`'s kubelet reports `version` (`status.nodeInfo.kubeletVersion`), as a
    /// kubelet of that release would: kwok's node stage keeps a version already there
    /// (kwok v0.8.0 stages/node-initialize.yaml, `or $nodeInfo.kubeletVersion $kwokVersion`).
    pub fn report_kubelet_version(&self, name: &str, version: &str) {
        self.patch_node_status(
            name,
            &serde_json::json!({"status": {"nodeInfo": {"kubeletVersion": version}}}),
        );
    }

    /// Merges `status` into the node `name`'s status, as its kubelet reports it.
    fn patch_node_status(&self, name: &str, status: &serde_json::Value) {
        let status = status.to_string();
        let patch = [
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
        ];
        self.kubectl_ok(&[&patch[..], &[status.as_str()]].concat(), "");
    }

    /// The node `name`'s kubelet reports its machine's `address` as its InternalIP, beside its
    /// Hostname (kwok's node stage keeps an InternalIP already there: kwok v0.8.0
    /// stages/node-initialize.yaml). talosctl finds the nodes it upgrades by that address
    /// (siderolabs/talos v1.13.9 pkg/kubernetes/kubernetes.go NodeIPs).
    pub fn report_address(&self, name: &str, address: &str) {
        let addresses = serde_json::json!({"status": {"addresses": [
            {"type": "InternalIP", "address": address},
            {"type": "Hostname", "address": name},
        ]}});
        self.patch_node_status(name, &addresses);
    }

    /// The control plane node `node`'s static pods, as its kubelet mirrors them into the API
    /// server once Talos wrote them at Kubernetes `version`: Talos's pods `kube-apiserver`,
    /// `kube-controller-manager` and `kube-scheduler` in kube-system, labelled `k8s-app` and
    /// `tier: control-plane`, each with one container of its name running its upstream image at
    /// that tag (siderolabs/talos v1.13.9 internal/app/machined/pkg/controllers/k8s/
    /// control_plane_static_pod.go:455-490), each mirror pod named `<pod>-<node>`, annotated as a
    /// mirror and owned by its Node (kubernetes pkg/kubelet/config/common.go generatePodName,
    /// pkg/kubelet/pod/mirror_client.go CreateMirrorPod). Made again at a new `version` as
    /// kubelet makes a mirror pod again when its static pod changes.
    pub fn mirror_static_pods(&self, node: &str, version: &str) {
        let uid = self.kubectl_ok(&["get", "node", node, "-o", "jsonpath={.metadata.uid}"], "");
        for component in [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ] {
            let name = format!("{component}-{node}");
            let pod = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": "kube-system",
                    "labels": {"k8s-app": component, "tier": "control-plane", "component": component},
                    "annotations": {
                        "kubernetes.io/config.mirror": format!("{component}-{version}"),
                        "kubernetes.io/config.source": "file",
                    },
                    "ownerReferences": [{
                        "apiVersion": "v1", "kind": "Node", "name": node, "uid": uid,
                        "controller": true,
                    }],
                },
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": component, "image": format!("registry.k8s.io/{component}:{version}")}],
                },
            });
            self.kubectl_ok(
                &[
                    "delete",
                    "pod",
                    "--namespace",
                    "kube-system",
                    &name,
                    "--ignore-not-found",
                    "--force",
                    "--grace-period=0",
                ],
                "",
            );
            self.kubectl_ok(&["create", "-f", "-"], &pod.to_string());
        }
    }

    /// [`ControlPlane::add_node`] without the wait. kwok takes a node over by holding its Lease
    /// (`kube-node-lease/<name>`, as a kubelet does) and retries while another holder's is
    /// current: a node whose Lease a test holds stays without status (not Ready) until the test
    /// lets the Lease go, as a node whose kubelet has not come back.
    #[track_caller]
    pub fn create_node(&self, name: &str, labels: &[(&str, &str)]) {
        let mut all: BTreeMap<&str, &str> = BTreeMap::from([
            ("kubernetes.io/hostname", name),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
        ]);
        all.extend(labels.iter().copied());
        let node = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": all,
                "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE},
            },
        });
        self.kubectl_ok(&["create", "-f", "-"], &node.to_string());
    }

    /// Installs the CRDs of `bundles` (server-side apply, as `make apply-platform` applies the
    /// Gateway API's) and waits until each is Established, so that the API server serves their
    /// kinds. A bundle is installed once per control plane: tests sharing one may all ask, the
    /// first installs and the others wait for it.
    #[track_caller]
    pub fn install_crds(&self, bundles: &[PathBuf]) {
        let mut installed = self
            .crds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let new: Vec<&PathBuf> = bundles.iter().filter(|b| !installed.contains(*b)).collect();
        if new.is_empty() {
            return;
        }
        let files: Vec<String> = new
            .iter()
            .map(|b| format!("--filename={}", b.display()))
            .collect();
        let files: Vec<&str> = files.iter().map(String::as_str).collect();
        self.kubectl_ok(&[&["apply", "--server-side"], &files[..]].concat(), "");
        // kubectl wait fails outright on a CRD whose status has no conditions yet ("<nil> is of
        // the type <nil>"), as a just-applied one may: it is asked again, a bounded number of
        // times, and the last answer fails the test with kubectl's own words.
        let wait = [
            &["wait", "--for=condition=Established", "--timeout=120s"],
            &files[..],
        ]
        .concat();
        for _ in 0..30 {
            if self
                .kubectl()
                .args(&wait)
                .output()
                .is_ok_and(|out| out.status.success())
            {
                installed.extend(new.into_iter().cloned());
                return;
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        self.kubectl_ok(&wait, "");
        installed.extend(new.into_iter().cloned());
    }

    /// The credentials of the ServiceAccount `namespace/name` as the kubelet projects them into
    /// its pods: a token the API server issues for it, the cluster's CA, the namespace.
    #[track_caller]
    pub fn service_account(&self, namespace: &str, name: &str) -> ServiceAccount {
        ServiceAccount::issue(self, namespace, name)
    }

    /// Spawns a component, logging to `<dir>/logs/<name>.log`, and hands its pid to the lifeline.
    #[allow(clippy::panic)] // a test helper: a program that cannot start fails the test
    fn spawn(&mut self, name: &'static str, command: &mut Command) {
        let log = self.dir.join("logs").join(format!("{name}.log"));
        let file = match fs::File::create(&log) {
            Ok(file) => file,
            Err(err) => panic!("cannot create {}: {err}", log.display()),
        };
        let stderr = match file.try_clone() {
            Ok(file) => file,
            Err(err) => panic!("cannot share {}: {err}", log.display()),
        };
        let child = match command
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(stderr)
            .spawn()
        {
            Ok(child) => child,
            Err(err) => panic!("cannot start {name} ({command:?}): {err}"),
        };
        if let Some(lifeline) = &mut self.lifeline {
            lifeline.watch(child.id());
        }
        self.components.push(Component { name, child, log });
    }

    /// Waits until `kubectl <args>` succeeds, as [`ControlPlane::wait_until`] does.
    fn wait_for_kubectl(&mut self, what: &str, args: &[&str]) {
        let mut kubectl = self.kubectl();
        kubectl
            .args(args)
            .arg("--request-timeout=5s")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.wait_until(what, || kubectl.status().is_ok_and(|s| s.success()));
    }

    /// Polls `ready` until it holds; fails the test, with the logs, when a component has exited
    /// or [`START_TIMEOUT`] has passed.
    #[allow(clippy::panic)] // a test helper: a control plane that cannot start fails the test
    fn wait_until(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if ready() {
                return;
            }
            for component in &mut self.components {
                if let Ok(Some(status)) = component.child.try_wait() {
                    panic!(
                        "waiting for {what}: {} exited ({status}):\n{}",
                        component.name,
                        log_tail(&component.log)
                    );
                }
            }
            if Instant::now() >= deadline {
                let logs: Vec<String> = self
                    .components
                    .iter()
                    .map(|c| format!("--- {}\n{}", c.name, log_tail(&c.log)))
                    .collect();
                panic!("{what}: not within {START_TIMEOUT:?}\n{}", logs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The reverse of the start: kwok and the controllers first, etcd last. SIGKILL: nothing
        // here is worth a graceful shutdown, and the wait that follows is then bounded.
        for component in self.components.iter_mut().rev() {
            let _ = component.child.kill();
            let _ = component.child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
        if let Some(lifeline) = self.lifeline.take() {
            lifeline.release();
        }
    }
}

/// The files of `dir`, sorted by name.
#[allow(clippy::panic)] // a test helper
fn sorted_files(dir: &Path) -> Vec<PathBuf> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) => panic!("{}: {err}", dir.display()),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// The last lines of a component's log.
fn log_tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

fn flag(name: &str, path: &Path) -> String {
    format!("--{name}={}", path.display())
}

fn path_str(path: &Path) -> String {
    path.display().to_string()
}

#[allow(clippy::panic)] // a test helper
fn create_dir(dir: &Path) {
    if let Err(err) = fs::create_dir_all(dir) {
        panic!("cannot create {}: {err}", dir.display());
    }
}

/// Writes a secret: the file is created 0600, before anything is written into it.
#[allow(clippy::panic)] // a test helper
fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::OpenOptionsExt as _;
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()));
    if let Err(err) = written {
        panic!("cannot write {}: {err}", path.display());
    }
}

#[allow(clippy::panic)] // a test helper
fn write(path: &Path, text: &str) {
    if let Err(err) = fs::write(path, text) {
        panic!("cannot write {}: {err}", path.display());
    }
}

#[cfg(test)]
mod tests;
