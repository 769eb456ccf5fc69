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

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};

use crate::free_port;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

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
        if crate::process::which("openssl").is_none() {
            crate::skip_or_fail(test, "openssl (the control plane's certificates)");
            return None;
        }
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

    #[allow(clippy::panic)] // a test helper: a control plane that cannot start fails the test
    fn start_with(programs: &Programs) -> ControlPlane {
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
            kubectl: programs.kubectl.clone(),
            components: Vec::new(),
            crds: Mutex::new(BTreeSet::new()),
            lifeline: Some(lifeline),
            dir,
        };
        let dir = plane.dir.clone();
        let pki = Pki::make(&dir.join("pki"));
        create_dir(&dir.join("logs"));

        let etcd_client = free_port();
        let etcd_peer = free_port();
        let apiserver_port = free_port();
        plane.server = format!("https://127.0.0.1:{apiserver_port}");
        write_kubeconfig(&plane.kubeconfig, &plane.server, &pki, "admin");
        let controller_manager_kubeconfig = dir.join("kube-controller-manager.kubeconfig");
        write_kubeconfig(
            &controller_manager_kubeconfig,
            &plane.server,
            &pki,
            "kube-controller-manager",
        );
        let scheduler_kubeconfig = dir.join("kube-scheduler.kubeconfig");
        write_kubeconfig(&scheduler_kubeconfig, &plane.server, &pki, "kube-scheduler");
        let admission = dir.join("admission-control-config.yaml");
        write(&admission, ADMISSION_CONFIG);

        let etcd_peer_url = format!("http://127.0.0.1:{etcd_peer}");
        let etcd_client_url = format!("http://127.0.0.1:{etcd_client}");
        plane.spawn(
            "etcd",
            Command::new(&programs.etcd)
                .arg("--name=edgepop-test")
                .arg(flag("data-dir", &dir.join("etcd")))
                .arg(format!("--listen-client-urls={etcd_client_url}"))
                .arg(format!("--advertise-client-urls={etcd_client_url}"))
                .arg(format!("--listen-peer-urls={etcd_peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={etcd_peer_url}"))
                .arg(format!("--initial-cluster=edgepop-test={etcd_peer_url}"))
                // The data dies with the test: no fsync (as envtest runs it).
                .arg("--unsafe-no-fsync")
                .arg("--log-level=warn"),
        );
        plane.wait_until("etcd to listen", || {
            let addr = SocketAddr::from(([127, 0, 0, 1], etcd_client));
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
        });

        // Talos v1.13.9 internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go,
        // manageAPIServer: the same flags, on loopback, without the audit log and encryption.
        let mut apiserver = Command::new(&programs.apiserver);
        apiserver
            .arg(format!("--etcd-servers={etcd_client_url}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={apiserver_port}"))
            .arg(flag("cert-dir", &dir.join("apiserver")))
            .arg(flag("tls-cert-file", &pki.cert("apiserver")))
            .arg(flag("tls-private-key-file", &pki.key("apiserver")))
            .arg(flag("client-ca-file", &pki.ca))
            .arg(format!("--service-account-issuer={}", plane.server))
            .arg(format!("--api-audiences={}", plane.server))
            .arg(flag(
                "service-account-key-file",
                &pki.service_account_public,
            ))
            .arg(flag(
                "service-account-signing-key-file",
                &pki.service_account_key,
            ))
            .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
            .arg("--authorization-mode=Node,RBAC")
            .arg("--enable-admission-plugins=NodeRestriction")
            .arg(flag("admission-control-config-file", &admission))
            .arg("--allow-privileged=true")
            .arg("--anonymous-auth=false")
            .arg("--enable-bootstrap-token-auth=true")
            .arg("--profiling=false")
            .args(talos_extra_args("apiServer"));
        plane.spawn("kube-apiserver", &mut apiserver);
        plane.wait_for_kubectl("kube-apiserver to be ready", &["get", "--raw=/readyz"]);

        // manageControllerManager, same file: every controller and the token cleaner, node CIDRs
        // allocated from the pod network, per-controller ServiceAccount credentials.
        let mut controller_manager = Command::new(&programs.controller_manager);
        controller_manager
            .arg(flag("kubeconfig", &controller_manager_kubeconfig))
            .arg(flag(
                "authentication-kubeconfig",
                &controller_manager_kubeconfig,
            ))
            .arg(flag(
                "authorization-kubeconfig",
                &controller_manager_kubeconfig,
            ))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", free_port()))
            .arg("--use-service-account-credentials")
            .arg(flag(
                "service-account-private-key-file",
                &pki.service_account_key,
            ))
            .arg(flag("root-ca-file", &pki.ca))
            .arg(flag("cluster-signing-cert-file", &pki.ca))
            .arg(flag("cluster-signing-key-file", &pki.ca_key))
            .arg("--controllers=*,tokencleaner")
            .arg("--allocate-node-cidrs=true")
            .arg(format!("--cluster-cidr={POD_CIDR}"))
            .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
            .arg("--configure-cloud-routes=false")
            // One instance: nothing to elect, and no wait for a lease.
            .arg("--leader-elect=false")
            .arg("--profiling=false")
            .args(talos_extra_args("controllerManager"));
        plane.spawn("kube-controller-manager", &mut controller_manager);

        let mut scheduler = Command::new(&programs.scheduler);
        scheduler
            .arg(flag("kubeconfig", &scheduler_kubeconfig))
            .arg(flag("authentication-kubeconfig", &scheduler_kubeconfig))
            .arg(flag("authorization-kubeconfig", &scheduler_kubeconfig))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", free_port()))
            .arg("--leader-elect=false")
            .arg("--profiling=false")
            .args(talos_extra_args("scheduler"));
        plane.spawn("kube-scheduler", &mut scheduler);

        let mut kwok = Command::new(&programs.kwok);
        kwok.arg(flag("kubeconfig", &plane.kubeconfig))
            .arg("--manage-all-nodes=false")
            .arg(format!(
                "--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}"
            ))
            .arg("--node-ip=127.0.0.1")
            .arg("--node-lease-duration-seconds=40");
        for stage in sorted_files(&programs.kwok_stages) {
            kwok.arg(flag("config", &stage));
        }
        plane.spawn("kwok", &mut kwok);

        // The ServiceAccount controller makes `default` in every namespace, and a pod cannot be
        // created before its namespace has one: the sign that the controllers run.
        plane.wait_for_kubectl(
            "the controller manager to make the default ServiceAccount",
            &["get", "serviceaccount", "default", "--namespace=default"],
        );
        plane
    }

    /// The admin kubeconfig (user in `system:masters`, client certificate), on loopback.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
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

/// A ServiceAccount's credentials, laid out as in a pod's
/// `/var/run/secrets/kubernetes.io/serviceaccount` (what the kubelet's projected volume holds):
/// `token` (a TokenRequest, for the API server's own audience, one hour), `ca.crt` (the
/// namespace's `kube-root-ca.crt` ConfigMap, which the controller manager publishes) and
/// `namespace`; beside them a kubeconfig that authenticates with that token file. The token is
/// written 0600 and never passes through an argument. Removed when dropped.
#[derive(Debug)]
pub struct ServiceAccount {
    dir: tempfile::TempDir,
    kubectl: PathBuf,
}

impl ServiceAccount {
    #[allow(clippy::panic)] // a test helper: credentials that cannot be made fail the test
    #[track_caller]
    fn issue(plane: &ControlPlane, namespace: &str, name: &str) -> ServiceAccount {
        let dir = match tempfile::Builder::new()
            .prefix("edgepop-serviceaccount-")
            .tempdir()
        {
            Ok(dir) => dir,
            Err(err) => panic!("cannot make a folder for {namespace}/{name}'s credentials: {err}"),
        };
        let account = ServiceAccount {
            kubectl: plane.kubectl.clone(),
            dir,
        };
        let ns = format!("--namespace={namespace}");
        let token = plane.kubectl_ok(&["create", "token", name, &ns, "--duration=1h"], "");
        write_private(&account.token(), token.trim());
        // Published by the controller manager's root-ca-cert-publisher soon after the namespace.
        plane.kubectl_ok(
            &[
                "wait",
                "--for=create",
                "configmap/kube-root-ca.crt",
                &ns,
                "--timeout=60s",
            ],
            "",
        );
        let ca = plane.kubectl_ok(
            &[
                "get",
                "configmap",
                "kube-root-ca.crt",
                &ns,
                "--output=jsonpath={.data.ca\\.crt}",
            ],
            "",
        );
        write(&account.ca(), &ca);
        write(&account.dir.path().join("namespace"), namespace);
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{
                "name": "edgepop-test",
                "cluster": {"server": plane.server, "certificate-authority": account.ca()},
            }],
            "users": [{"name": name, "user": {"tokenFile": account.token()}}],
            "contexts": [{
                "name": name,
                "context": {"cluster": "edgepop-test", "user": name, "namespace": namespace},
            }],
            "current-context": name,
        });
        write(&account.kubeconfig(), &config.to_string());
        account
    }

    /// The folder, for a program that reads it as a pod would (`token`, `ca.crt`, `namespace`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn token(&self) -> PathBuf {
        self.dir.path().join("token")
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// A kubeconfig whose user is this ServiceAccount (its namespace is the default one).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// The pinned kubectl, authenticated as this ServiceAccount.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(&self.kubectl);
        command.arg("--kubeconfig").arg(self.kubeconfig());
        command
    }
}

/// A process that outlives nothing: it reads pids on its stdin, and when that pipe closes without
/// a `done` line (the test process ended, however it ended) it kills them (SIGKILL: a graceful
/// API server shutdown takes seconds and keeps nothing worth keeping) and removes the control
/// plane's folder. A shared control plane is a static, never dropped: this is what stops it.
#[derive(Debug)]
struct Lifeline {
    reaper: Child,
    stdin: Option<ChildStdin>,
}

const REAPER: &str = r#"trap '' INT TERM HUP
dir=$1 pids=()
while read -r line; do
  if [[ $line == done ]]; then rm -rf -- "$dir"; exit 0; fi
  pids+=("$line")
done
((${#pids[@]})) && kill -KILL "${pids[@]}" 2>/dev/null
rm -rf -- "$dir"
"#;

impl Lifeline {
    #[allow(clippy::panic)] // a test helper: without its lifeline nothing would stop the programs
    fn start(dir: &Path) -> Lifeline {
        // Its stdout and stderr are not the test's: cargo would wait for them to close.
        let mut reaper = match Command::new("bash")
            .args(["-c", REAPER, "control-plane-lifeline"])
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(reaper) => reaper,
            Err(err) => panic!("cannot start the control plane's lifeline: {err}"),
        };
        let stdin = reaper.stdin.take();
        Lifeline { reaper, stdin }
    }

    fn watch(&mut self, pid: u32) {
        if let Some(stdin) = &mut self.stdin {
            let _ = writeln!(stdin, "{pid}");
        }
    }

    /// The programs are stopped already: the reaper only removes the folder and ends.
    fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "done");
        }
        let _ = self.reaper.wait();
    }
}

/// The control plane's certificates (one CA, ECDSA P-256), made with the openssl command.
#[derive(Debug)]
struct Pki {
    dir: PathBuf,
    ca: PathBuf,
    ca_key: PathBuf,
    service_account_key: PathBuf,
    service_account_public: PathBuf,
}

impl Pki {
    fn make(dir: &Path) -> Pki {
        create_dir(dir);
        let pki = Pki {
            dir: dir.to_path_buf(),
            ca: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            service_account_key: dir.join("service-account.key"),
            service_account_public: dir.join("service-account.pub"),
        };
        pki.issue(
            "ca",
            "/CN=edgepop-test-ca",
            &[
                "basicConstraints=critical,CA:TRUE",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        pki.issue(
            "apiserver",
            "/CN=kube-apiserver",
            &[
                "extendedKeyUsage=serverAuth",
                &format!("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:{EXAMPLE_API_HOST}"),
            ],
        );
        // The users the RBAC bootstrap roles are bound to.
        pki.issue(
            "admin",
            "/O=system:masters/CN=edgepop-test-admin",
            &["extendedKeyUsage=clientAuth"],
        );
        pki.issue(
            "kube-controller-manager",
            "/CN=system:kube-controller-manager",
            &["extendedKeyUsage=clientAuth"],
        );
        pki.issue(
            "kube-scheduler",
            "/CN=system:kube-scheduler",
            &["extendedKeyUsage=clientAuth"],
        );
        openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            &path_str(&pki.service_account_key),
        ]);
        openssl(&[
            "pkey",
            "-in",
            &path_str(&pki.service_account_key),
            "-pubout",
            "-out",
            &path_str(&pki.service_account_public),
        ]);
        pki
    }

    /// A new P-256 key `<name>.key` and its certificate `<name>.crt` for `subject`, valid two
    /// days: the CA's signs itself, every other is a leaf the CA signs.
    fn issue(&self, name: &str, subject: &str, extensions: &[&str]) {
        let (cert, key) = (path_str(&self.cert(name)), path_str(&self.key(name)));
        let (ca, ca_key) = (path_str(&self.ca), path_str(&self.ca_key));
        let mut args = vec![
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-noenc",
            "-days",
            "2",
            "-subj",
            subject,
            "-keyout",
            &key,
            "-out",
            &cert,
        ];
        if name != "ca" {
            args.extend(["-CA", &ca, "-CAkey", &ca_key]);
            args.extend(["-addext", "basicConstraints=critical,CA:FALSE"]);
        }
        for extension in extensions {
            args.extend(["-addext", extension]);
        }
        openssl(&args);
    }

    fn cert(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.crt"))
    }

    fn key(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.key"))
    }
}

#[allow(clippy::panic)] // a test helper: certificates that cannot be made fail the test
fn openssl(args: &[&str]) {
    match Command::new("openssl").args(args).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(err) => panic!("cannot run openssl: {err}"),
    }
}

/// A kubeconfig for `user` (whose certificate is `<pki>/<user>.crt`), as JSON (which is YAML).
#[allow(clippy::panic)] // a test helper
fn write_kubeconfig(path: &Path, server: &str, pki: &Pki, user: &str) {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "edgepop-test",
            "cluster": {"server": server, "certificate-authority": pki.ca},
        }],
        "users": [{
            "name": user,
            "user": {"client-certificate": pki.cert(user), "client-key": pki.key(user)},
        }],
        "contexts": [{"name": "edgepop-test", "context": {"cluster": "edgepop-test", "user": user}}],
        "current-context": "edgepop-test",
    });
    write(path, &config.to_string());
}

/// Talos's PodSecurity defaults (pkg/machinery/config/generate/init.go, v1.13.9): baseline
/// enforced, restricted audited and warned, kube-system exempt. The project's patches leave them.
const ADMISSION_CONFIG: &str = "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1alpha1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
      audit: restricted
      audit-version: latest
      warn: restricted
      warn-version: latest
    exemptions:
      usernames: []
      runtimeClasses: []
      namespaces: [kube-system]
";

/// The `extraArgs` of `cluster.<component>` in the project's control-plane patches
/// (`talos/patches/*.yaml` but `*.worker.yaml`, in name order, a later one winning), as flags:
/// the test API server takes what the cluster's does, e.g. the NodePort range.
#[allow(clippy::panic)] // a test helper: a patch it cannot read fails the test, naming it
fn talos_extra_args(component: &str) -> Vec<String> {
    let mut args = BTreeMap::new();
    for patch in sorted_files(&crate::workspace::root().join("talos/patches")) {
        let name = patch.file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(name) = name.filter(|n| n.ends_with(".yaml") && !n.ends_with(".worker.yaml"))
        else {
            continue;
        };
        let text = match fs::read_to_string(&patch) {
            Ok(text) => text,
            Err(err) => panic!("{}: {err}", patch.display()),
        };
        let doc: serde_json::Value = match serde_norway::from_str(&text) {
            Ok(doc) => doc,
            Err(err) => panic!("{name}: not YAML: {err}"),
        };
        let Some(extra) = doc.pointer(&format!("/cluster/{component}/extraArgs")) else {
            continue;
        };
        let Some(extra) = extra.as_object() else {
            panic!("{name}: cluster.{component}.extraArgs is not a map")
        };
        for (key, value) in extra {
            let Some(value) = value.as_str() else {
                panic!("{name}: cluster.{component}.extraArgs.{key} is not a string")
            };
            args.insert(key.clone(), value.to_owned());
        }
    }
    args.into_iter()
        .map(|(key, value)| format!("--{key}={value}"))
        .collect()
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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn kubectl_version_shows_the_pinned_client_and_server() {
        let Some(plane) = ControlPlane::shared("kubectl_version_shows_the_pinned") else {
            return;
        };
        let out = plane.kubectl_ok(&["version", "--output=json"], "");
        let version: serde_json::Value = serde_json::from_str(&out).unwrap();
        let pin = crate::pin("KUBERNETES_VERSION");
        assert_eq!(
            version["clientVersion"]["gitVersion"],
            pin.as_str(),
            "{out}"
        );
        assert_eq!(
            version["serverVersion"]["gitVersion"],
            pin.as_str(),
            "{out}"
        );
    }

    #[test]
    fn the_api_server_takes_the_patches_extra_args() {
        let Some(plane) = ControlPlane::shared("the_api_server_takes_the_patches") else {
            return;
        };
        // talos/patches/40-nodeport-range.controlplane.yaml: the declared range (crates/flows),
        // the gateway's node ports and no host port.
        let range = flows::NODE_PORT_RANGE;
        assert!(
            talos_extra_args("apiServer").contains(&format!("--service-node-port-range={range}")),
            "{:?}",
            talos_extra_args("apiServer")
        );
        let service = |port: u16| {
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": format!("nodeport-{port}"), "namespace": "default"},
                "spec": {"type": "NodePort", "selector": {"app": "none"},
                         "ports": [{"port": 80, "nodePort": port}]},
            })
            .to_string()
        };
        // Created for real: a server-side dry run does not allocate the port, so checks no range.
        for port in [range.first, range.last] {
            plane.kubectl_ok(&["create", "-f", "-"], &service(port));
        }
        // Just outside, and the kubelet's port, which the old range 80-32767 held.
        let refused: Vec<_> = [range.first - 1, range.last + 1, 10250]
            .into_iter()
            .map(|port| {
                crate::process::run_with_stdin(
                    plane.kubectl().args(["create", "-f", "-"]),
                    service(port).as_bytes(),
                )
            })
            .collect();
        for port in [range.first, range.last] {
            plane.kubectl_ok(
                &[
                    "delete",
                    "service",
                    &format!("nodeport-{port}"),
                    "--namespace=default",
                ],
                "",
            );
        }
        for out in refused {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "a port outside {range} accepted");
            assert!(
                stderr.contains("provided port is not in the valid range"),
                "{stderr}"
            );
        }
    }

    #[test]
    fn a_deleted_namespace_goes_away_with_what_it_held() {
        let Some(plane) = ControlPlane::shared("a_deleted_namespace_goes_away") else {
            return;
        };
        let ns = "cp-namespace-deletion";
        plane.kubectl_ok(&["create", "namespace", ns], "");
        plane.kubectl_ok(
            &[
                "create",
                "configmap",
                "held",
                "--namespace",
                ns,
                "--from-literal=a=b",
            ],
            "",
        );
        // The namespace stays Terminating until the namespace controller has emptied it.
        plane.kubectl_ok(&["delete", "namespace", ns, "--wait=false"], "");
        plane.kubectl_ok(
            &[
                "wait",
                "--for=delete",
                &format!("namespace/{ns}"),
                "--timeout=120s",
            ],
            "",
        );
        let gone = plane
            .kubectl()
            .args(["get", "namespace", ns])
            .output()
            .unwrap();
        assert!(!gone.status.success());
        assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"));
    }

    #[test]
    fn only_a_node_kwok_manages_becomes_ready() {
        let Some(plane) = ControlPlane::shared("only_a_node_kwok_manages") else {
            return;
        };
        // Cordoned, so that no other test's pod lands on it.
        let unmanaged = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "cp-unmanaged"},
            "spec": {"unschedulable": true},
        });
        plane.kubectl_ok(&["create", "-f", "-"], &unmanaged.to_string());
        plane.add_node("cp-managed", &[("edge.node.kubernetes.io/public", "true")]);
        let ready = |node: &str| {
            plane.kubectl_ok(
                &[
                    "get",
                    "node",
                    node,
                    "--output=jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                ],
                "",
            )
        };
        assert_eq!(ready("cp-managed"), "True");
        assert_ne!(ready("cp-unmanaged"), "True");
        plane.kubectl_ok(&["delete", "node", "cp-unmanaged"], "");
    }

    #[test]
    fn a_deployment_gets_running_pods_that_go_with_it() {
        let Some(plane) = ControlPlane::shared("a_deployment_gets_running_pods") else {
            return;
        };
        let (ns, node) = ("cp-deployment", "cp-deployment-node");
        plane.add_node(node, &[]);
        plane.kubectl_ok(&["create", "namespace", ns], "");
        let deployment = serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}],
                    },
                },
            },
        });
        plane.kubectl_ok(&["create", "-f", "-"], &deployment.to_string());
        plane.kubectl_ok(
            &[
                "rollout",
                "status",
                "deployment/web",
                "--namespace",
                ns,
                "--timeout=120s",
            ],
            "",
        );
        let pods = plane.kubectl_ok(
            &[
                "get",
                "pods",
                "--namespace",
                ns,
                "--selector=app=web",
                "--output=json",
            ],
            "",
        );
        let pods: serde_json::Value = serde_json::from_str(&pods).unwrap();
        let pods = pods["items"].as_array().unwrap();
        assert_eq!(pods.len(), 2);
        for pod in pods {
            assert_eq!(pod["status"]["phase"], "Running", "{pod}");
            assert_eq!(pod["spec"]["nodeName"], node, "{pod}");
            assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        }
        // Garbage collection: the Deployment's ReplicaSet, then its pods, which kwok lets go.
        plane.kubectl_ok(&["delete", "deployment", "web", "--namespace", ns], "");
        let mut left = String::from("?");
        for _ in 0..120 {
            left = plane.kubectl_ok(
                &[
                    "get",
                    "pods,replicasets",
                    "--namespace",
                    ns,
                    "--output=name",
                ],
                "",
            );
            if left.trim().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        assert_eq!(left.trim(), "", "left after the Deployment was deleted");
        plane.kubectl_ok(&["delete", "namespace", ns, "--wait=false"], "");
    }

    #[test]
    fn a_dropped_control_plane_leaves_no_process_and_no_folder() {
        let Some(plane) = ControlPlane::start("a_dropped_control_plane_leaves") else {
            return;
        };
        let pids: Vec<u32> = plane.components.iter().map(|c| c.child.id()).collect();
        assert_eq!(pids.len(), 5);
        let dir = plane.dir.clone();
        assert!(dir.join("etcd").is_dir());
        drop(plane);
        assert!(!dir.exists(), "{}", dir.display());
        for pid in pids {
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "{pid} runs on"
            );
        }
    }

    #[test]
    fn the_lifeline_stops_what_it_watches_when_its_pipe_closes() {
        let dir = tempfile::tempdir().unwrap().keep();
        fs::write(dir.join("data"), "x").unwrap();
        let mut lifeline = Lifeline::start(&dir);
        let mut watched = Command::new("sleep").arg("600").spawn().unwrap();
        lifeline.watch(watched.id());
        // What the end of the test process does: the pipe closes without `done`.
        drop(lifeline.stdin.take());
        assert!(lifeline.reaper.wait().unwrap().success());
        let status = watched.wait().unwrap();
        assert!(!status.success(), "{status}");
        assert!(!dir.exists());
    }
}
