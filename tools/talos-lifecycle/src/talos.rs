//! The calls to the cluster, behind one narrow trait: [`Talos`]. The real one ([`Programs`])
//! runs the real talosctl for every node call (its snapshot stream, its checks of the file, its
//! upload and bootstrap are upstream's own) and etcdutl for the snapshot files; tests hand in a
//! scripted one.

use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use pop_common::records::EtcdSnapshotStatus;
use serde::Deserialize;

use crate::quorum::{MemberStatus, NodeError, TalosNode};

/// What the tool asks of the cluster and of a snapshot file.
pub trait Talos {
    /// The node's etcd member, as `EtcdStatus` reports it (`talosctl etcd status`).
    fn etcd_status(&self, node: &TalosNode) -> Result<MemberStatus, NodeError>;
    /// The members' names, as the node's etcd lists them (`talosctl etcd members`).
    fn etcd_members(&self, node: &TalosNode) -> Result<Vec<String>, NodeError>;
    /// Streams a snapshot of the node's etcd into `path` (`talosctl etcd snapshot`: written as
    /// `<path>.part`, mode 0600, checked, then renamed).
    fn snapshot(&self, node: &TalosNode, path: &Path) -> Result<(), NodeError>;
    /// Uploads `snapshot` and bootstraps etcd from it on the node
    /// (`talosctl bootstrap --recover-from`).
    fn recover(
        &self,
        node: &TalosNode,
        snapshot: &Path,
        skip_hash_check: bool,
    ) -> Result<(), NodeError>;
    /// What `etcdutl snapshot status` reads in a snapshot file.
    fn snapshot_status(&self, path: &Path) -> Result<EtcdSnapshotStatus, String>;
    /// The Talos version the node runs, as `Version` answers it (`talosctl version`).
    fn version(&self, node: &TalosNode) -> Result<String, NodeError>;
    /// The version of the talosctl that runs the calls.
    fn client_version(&self) -> Result<String, String>;
    /// Upgrades the node with `installer` and waits until it is back (`talosctl upgrade --image
    /// --wait`: the installer pulled and run, the node drained, rebooted, uncordoned).
    fn upgrade(&self, node: &TalosNode, installer: &str) -> Result<(), NodeError>;
    /// Whether the Kubernetes node `name` is Ready (`kubectl get node`).
    fn node_ready(&self, name: &str) -> Result<bool, NodeError>;
    /// Every Kubernetes node's name, kubelet version and readiness (`kubectl get nodes`).
    fn kubelets(&self) -> Result<Vec<Kubelet>, NodeError>;
    /// The control planes' static pods, as their mirror pods show them in kube-system
    /// (`kubectl get pods -n kube-system -l 'k8s-app in (...)'`).
    fn static_pods(&self) -> Result<Vec<StaticPod>, NodeError>;
    /// Upgrades Kubernetes through the control plane `node` (`talosctl upgrade-k8s --to`).
    fn upgrade_k8s(&self, node: &TalosNode, to: &str) -> Result<(), NodeError>;
    /// The members, with their ids, as the node's etcd lists them (`talosctl etcd members`).
    fn etcd_member_list(&self, node: &TalosNode) -> Result<Vec<Member>, NodeError>;
    /// The node's own member leaves etcd, which empties its etcd folder (`talosctl etcd leave`).
    fn etcd_leave(&self, node: &TalosNode) -> Result<(), NodeError>;
    /// The member of this id is removed, asked through `through` (`talosctl etcd
    /// remove-member`).
    fn etcd_remove_member(&self, through: &TalosNode, member_id: &str) -> Result<(), NodeError>;
    /// The state of the node's etcd service (`talosctl service etcd`): `Preparing` while its
    /// etcd folder is empty and it waits for a bootstrap or a cluster to join.
    fn etcd_service_state(&self, node: &TalosNode) -> Result<String, NodeError>;
    /// Wipes the node's EPHEMERAL partition, its etcd folder with it, and reboots it; returns
    /// once Talos took the request (`talosctl reset --graceful=false --reboot
    /// --system-labels-to-wipe=EPHEMERAL --wait=false`).
    fn reset_ephemeral(&self, node: &TalosNode) -> Result<(), NodeError>;
    /// Stops the node's kube-apiserver container, which kubelet starts again (`talosctl restart
    /// -k kube-system/kube-apiserver-<node>:kube-apiserver`).
    fn restart_apiserver(&self, node: &TalosNode) -> Result<(), NodeError>;
}

/// The id `talosctl restart -k` takes for a control plane's kube-apiserver: Talos's static pod
/// `kube-system/kube-apiserver` (controllers/k8s/control_plane_static_pod.go), named by kubelet
/// `<pod>-<node name, lowercase>` (pkg/kubelet/config/common.go, generatePodName), then `:` and
/// its container.
pub fn apiserver_container(node: &TalosNode) -> String {
    format!(
        "kube-system/kube-apiserver-{}:kube-apiserver",
        node.name.to_lowercase()
    )
}

/// A member as `talosctl etcd members` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Hexadecimal, as talosctl prints it and `remove-member` reads it.
    pub id: String,
    pub hostname: String,
    pub learner: bool,
}

/// A Kubernetes node as `kubectl get nodes` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kubelet {
    pub name: String,
    /// `status.nodeInfo.kubeletVersion`.
    pub version: String,
    pub ready: bool,
    /// `spec.unschedulable`: cordoned (a drain not undone yet).
    pub cordoned: bool,
}

/// The components of the control plane Talos runs as static pods, each labelled `k8s-app` with
/// its name and running a container of that name (internal/app/machined/pkg/controllers/k8s/
/// control_plane_static_pod.go at v1.13.9); kube-proxy too when it is enabled. The labels
/// `talosctl upgrade-k8s` reads the version it upgrades from (pkg/cluster/kubernetes/detect.go).
pub const STATIC_POD_COMPONENTS: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
];

/// A control plane component's pod as the API server lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticPod {
    /// The mirror pod's name: the static pod's, `-`, its node's.
    pub name: String,
    /// Its `k8s-app` label, one of [`STATIC_POD_COMPONENTS`].
    pub component: String,
    /// The image of its container named as the component.
    pub image: String,
}

/// The real programs: talosctl with the cluster's talosconfig, etcdutl, and kubectl with the
/// cluster's kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Programs {
    pub talosctl: PathBuf,
    pub etcdutl: PathBuf,
    pub talosconfig: PathBuf,
    pub kubectl: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Programs {
    /// `talosctl --talosconfig F --endpoints E --nodes N <args>`.
    fn talosctl_command(&self, node: &TalosNode, args: &[&str]) -> Command {
        let mut command = Command::new(&self.talosctl);
        command
            .arg("--talosconfig")
            .arg(&self.talosconfig)
            .args(["--endpoints", &node.endpoint, "--nodes", &node.address])
            .args(args)
            .stdin(Stdio::null());
        command
    }

    /// A talosctl call that takes minutes: its progress lines go to our log as they come.
    fn talosctl_long(&self, node: &TalosNode, args: &[&str]) -> Result<(), NodeError> {
        let progress = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|err| NodeError::Client(format!("cannot pass stderr on: {err}")))?;
        let mut command = self.talosctl_command(node, args);
        command.stdout(Stdio::from(progress));
        let out = output(&mut command)?;
        let said = String::from_utf8_lossy(&out.stderr);
        log_lines("talosctl", &said);
        if out.status.success() {
            Ok(())
        } else {
            Err(node_error(&said))
        }
    }

    /// `kubectl --kubeconfig F <args>`: its stdout.
    fn kubectl(&self, args: &[&str]) -> Result<String, NodeError> {
        let mut command = Command::new(&self.kubectl);
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::null());
        let out = output(&mut command)?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            return Err(NodeError::Client(format!(
                "kubectl {}: {}",
                args.join(" "),
                last_line(&said).unwrap_or("failed")
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs talosctl on the node; stdout on success (what talosctl says of a snapshot or an
    /// upload goes to our log, never to our output).
    fn talosctl(&self, node: &TalosNode, args: &[&str]) -> Result<String, NodeError> {
        let out = output(&mut self.talosctl_command(node, args))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(node_error(&String::from_utf8_lossy(&out.stderr)))
        }
    }
}

fn output(command: &mut Command) -> Result<Output, NodeError> {
    command.output().map_err(|err| {
        NodeError::Client(format!(
            "cannot run {}: {err}",
            command.get_program().to_string_lossy()
        ))
    })
}

impl Talos for Programs {
    fn etcd_status(&self, node: &TalosNode) -> Result<MemberStatus, NodeError> {
        parse_status(&self.talosctl(node, &["etcd", "status"])?)
    }

    fn etcd_members(&self, node: &TalosNode) -> Result<Vec<String>, NodeError> {
        parse_members(&self.talosctl(node, &["etcd", "members"])?)
    }

    fn snapshot(&self, node: &TalosNode, path: &Path) -> Result<(), NodeError> {
        let path = path
            .to_str()
            .ok_or_else(|| NodeError::Client(format!("{}: not a UTF-8 path", path.display())))?;
        let said = self.talosctl(node, &["etcd", "snapshot", path])?;
        log_lines("talosctl", &said);
        Ok(())
    }

    fn recover(
        &self,
        node: &TalosNode,
        snapshot: &Path,
        skip_hash_check: bool,
    ) -> Result<(), NodeError> {
        let from = format!("--recover-from={}", snapshot.display());
        let mut args = vec!["bootstrap", from.as_str()];
        if skip_hash_check {
            args.push("--recover-skip-hash-check");
        }
        let said = self.talosctl(node, &args)?;
        log_lines("talosctl", &said);
        Ok(())
    }

    fn snapshot_status(&self, path: &Path) -> Result<EtcdSnapshotStatus, String> {
        let mut command = Command::new(&self.etcdutl);
        command
            .args(["snapshot", "status", "-w", "json"])
            .arg(path)
            .stdin(Stdio::null());
        let out = output(&mut command).map_err(|e| e.to_string())?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            return Err(last_line(&said).unwrap_or("etcdutl failed").to_owned());
        }
        parse_snapshot_status(&String::from_utf8_lossy(&out.stdout))
    }

    fn etcd_member_list(&self, node: &TalosNode) -> Result<Vec<Member>, NodeError> {
        parse_member_list(&self.talosctl(node, &["etcd", "members"])?)
    }

    fn etcd_leave(&self, node: &TalosNode) -> Result<(), NodeError> {
        log_lines("talosctl", &self.talosctl(node, &["etcd", "leave"])?);
        Ok(())
    }

    fn etcd_remove_member(&self, through: &TalosNode, member_id: &str) -> Result<(), NodeError> {
        let said = self.talosctl(through, &["etcd", "remove-member", member_id])?;
        log_lines("talosctl", &said);
        Ok(())
    }
    fn etcd_service_state(&self, node: &TalosNode) -> Result<String, NodeError> {
        parse_service_state(&self.talosctl(node, &["service", "etcd"])?)
    }

    fn reset_ephemeral(&self, node: &TalosNode) -> Result<(), NodeError> {
        // Talos's disaster recovery empties a member's etcd folder so: no graceful leave (the
        // cluster has no quorum to leave), only EPHEMERAL, then a reboot. --wait=false: the
        // call returns once Talos took it; the recovery waits for the etcd service itself.
        let said = self.talosctl(
            node,
            &[
                "reset",
                "--graceful=false",
                "--reboot",
                "--system-labels-to-wipe=EPHEMERAL",
                "--wait=false",
            ],
        )?;
        log_lines("talosctl", &said);
        Ok(())
    }

    fn restart_apiserver(&self, node: &TalosNode) -> Result<(), NodeError> {
        let container = apiserver_container(node);
        let said = self.talosctl(node, &["restart", "-k", &container])?;
        log_lines("talosctl", &said);
        Ok(())
    }

    fn version(&self, node: &TalosNode) -> Result<String, NodeError> {
        parse_version(&self.talosctl(node, &["version", "--json"])?)
    }

    fn client_version(&self) -> Result<String, String> {
        let mut command = Command::new(&self.talosctl);
        command
            .args(["version", "--client", "--short"])
            .stdin(Stdio::null());
        let out = output(&mut command).map_err(|e| e.to_string())?;
        let said = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!("talosctl version --client failed: {said}"));
        }
        parse_client_version(&said)
    }

    fn upgrade(&self, node: &TalosNode, installer: &str) -> Result<(), NodeError> {
        self.talosctl_long(
            node,
            &[
                "upgrade",
                "--image",
                installer,
                "--wait",
                "--progress",
                "plain",
            ],
        )
    }

    fn upgrade_k8s(&self, node: &TalosNode, to: &str) -> Result<(), NodeError> {
        self.talosctl_long(node, &["upgrade-k8s", "--to", to])
    }

    fn kubelets(&self) -> Result<Vec<Kubelet>, NodeError> {
        parse_kubelets(&self.kubectl(&["get", "nodes", "-o", "json"])?)
    }

    fn static_pods(&self) -> Result<Vec<StaticPod>, NodeError> {
        let selector = format!("k8s-app in ({})", STATIC_POD_COMPONENTS.join(","));
        parse_static_pods(&self.kubectl(&[
            "get",
            "pods",
            "--namespace",
            "kube-system",
            "--selector",
            &selector,
            "-o",
            "json",
        ])?)
    }

    fn node_ready(&self, name: &str) -> Result<bool, NodeError> {
        parse_ready(&self.kubectl(&["get", "node", name, "-o", "json"])?)
    }
}

/// `talosctl version --json` of one node: the `version.tag` of its message (the hidden `--json`
/// flag prints each `machine.Version` message as protojson, cmd/talosctl/cmd/talos/version.go,
/// `printVersionResponse`).
pub fn parse_version(text: &str) -> Result<String, NodeError> {
    let unreadable = || NodeError::Client(format!("talosctl version --json: cannot read {text:?}"));
    let first = serde_json::Deserializer::from_str(text)
        .into_iter::<serde_json::Value>()
        .next()
        .and_then(Result::ok)
        .ok_or_else(unreadable)?;
    first["version"]["tag"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(unreadable)
}

/// `talosctl version --client --short`: `Client:` then `Talos <tag>`.
pub fn parse_client_version(text: &str) -> Result<String, String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Talos "))
        .map(|t| t.trim().to_owned())
        .ok_or_else(|| format!("talosctl version --client --short said {text:?}"))
}

/// `kubectl get node -o json`: whether its `Ready` condition is `True`.
pub fn parse_ready(text: &str) -> Result<bool, NodeError> {
    let node: serde_json::Value = serde_json::from_str(text)
        .map_err(|err| NodeError::Client(format!("kubectl get node: {err}")))?;
    Ok(ready(&node))
}

fn ready(node: &serde_json::Value) -> bool {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The `items` of a `kubectl get ... -o json` list; `unreadable` says what is wrong with it.
fn list_items(
    text: &str,
    unreadable: impl Fn(String) -> NodeError,
) -> Result<Vec<serde_json::Value>, NodeError> {
    let mut list: serde_json::Value =
        serde_json::from_str(text).map_err(|err| unreadable(err.to_string()))?;
    match list["items"].take() {
        serde_json::Value::Array(items) => Ok(items),
        _ => Err(unreadable("no items".into())),
    }
}

/// `kubectl get nodes -o json`: each node's name, kubelet version, readiness and cordon.
pub fn parse_kubelets(text: &str) -> Result<Vec<Kubelet>, NodeError> {
    let unreadable = |why: String| NodeError::Client(format!("kubectl get nodes: {why}"));
    list_items(text, unreadable)?
        .iter()
        .map(|node| {
            let name = node["metadata"]["name"].as_str();
            let version = node["status"]["nodeInfo"]["kubeletVersion"].as_str();
            match (name, version) {
                (Some(name), Some(version)) => Ok(Kubelet {
                    name: name.to_owned(),
                    version: version.to_owned(),
                    ready: ready(node),
                    cordoned: node["spec"]["unschedulable"] == true,
                }),
                _ => Err(unreadable(format!(
                    "a node without a name or kubelet version: {node}"
                ))),
            }
        })
        .collect()
}

/// `kubectl get pods -o json` of the control plane components: each pod labelled as one, with
/// the image of its container of that name (a pod without one is left out, as talosctl does).
pub fn parse_static_pods(text: &str) -> Result<Vec<StaticPod>, NodeError> {
    let unreadable = |why: String| NodeError::Client(format!("kubectl get pods: {why}"));
    let mut pods = Vec::new();
    for pod in &list_items(text, unreadable)? {
        let Some(component) = pod["metadata"]["labels"]["k8s-app"].as_str() else {
            continue;
        };
        let name = pod["metadata"]["name"]
            .as_str()
            .ok_or_else(|| unreadable(format!("a pod without a name: {pod}")))?;
        let containers = pod["spec"]["containers"].as_array().into_iter().flatten();
        if let Some(image) = containers
            .filter(|c| c["name"] == component)
            .find_map(|c| c["image"].as_str())
        {
            pods.push(StaticPod {
                name: name.to_owned(),
                component: component.to_owned(),
                image: image.to_owned(),
            });
        }
    }
    Ok(pods)
}

/// An image reference's tag: after the last `:` of its last path segment, its digest left out.
pub fn image_tag(image: &str) -> Option<&str> {
    let image = image.split_once('@').map_or(image, |(name, _)| name);
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split_once(':').map(|(_, tag)| tag)
}

fn log_lines(who: &str, text: &str) {
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        pop_common::info!("{who}: {line}");
    }
}

fn last_line(text: &str) -> Option<&str> {
    text.lines().rev().map(str::trim).find(|l| !l.is_empty())
}

/// talosctl's report of a failed call: the gRPC code and message it quotes
/// (`rpc error: code = X desc = Y`, alone or in apid's per-node list); a node whose Talos API
/// does not answer is `Unavailable`.
pub fn node_error(stderr: &str) -> NodeError {
    const MARK: &str = "rpc error: code = ";
    let Some(at) = stderr.find(MARK) else {
        return NodeError::Client(last_line(stderr).unwrap_or("talosctl failed").to_owned());
    };
    let rest = &stderr[at + MARK.len()..];
    let (code, message) = rest.split_once(" desc = ").unwrap_or((rest, ""));
    let message = message.lines().next().unwrap_or_default().trim().to_owned();
    match code.trim() {
        "Unavailable" => NodeError::Unreachable(message),
        code => NodeError::Answered {
            code: code.to_owned(),
            message,
        },
    }
}

/// A table talosctl prints with Go's tabwriter: its columns (name, where the header starts) and
/// its rows.
struct Table<'a> {
    columns: Vec<(String, usize)>,
    rows: Vec<&'a str>,
}

/// Each column starts where its header does, and headers are apart by at least two spaces (a
/// header may hold one: `DB SIZE`).
fn table(text: &str) -> Option<Table<'_>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next()?;
    let mut columns = Vec::new();
    let mut start = None;
    let bytes = header.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let gap = b == b' ' && (bytes.get(i + 1) == Some(&b' ') || i > 0 && bytes[i - 1] == b' ');
        match (start, gap) {
            (None, false) => start = Some(i),
            (Some(s), true) => {
                columns.push((header[s..i].to_owned(), s));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        columns.push((header[s..].trim_end().to_owned(), s));
    }
    Some(Table {
        columns,
        rows: lines.collect(),
    })
}

/// The cell of `column` in `line`.
fn cell<'a>(columns: &[(String, usize)], line: &'a str, column: &str) -> Option<&'a str> {
    let at = columns.iter().position(|(name, _)| name == column)?;
    let start = columns[at].1.min(line.len());
    let end = columns
        .get(at + 1)
        .map_or(line.len(), |c| c.1.min(line.len()));
    line.get(start..end).map(str::trim)
}

/// `talosctl etcd status` of one node: MEMBER, LEADER, LEARNER and ERRORS
/// (cmd/talosctl/cmd/talos/etcd.go:267-332 at v1.13.9).
pub fn parse_status(text: &str) -> Result<MemberStatus, NodeError> {
    let unreadable = || NodeError::Client(format!("talosctl etcd status: cannot read {text:?}"));
    let table = table(text).ok_or_else(unreadable)?;
    let row = table.rows.first().ok_or_else(unreadable)?;
    let get = |name| cell(&table.columns, row, name).ok_or_else(unreadable);
    let errors = get("ERRORS")?;
    Ok(MemberStatus {
        member_id: get("MEMBER")?.to_owned(),
        leader: get("LEADER")?.to_owned(),
        learner: get("LEARNER")? == "true",
        errors: if errors.is_empty() {
            Vec::new()
        } else {
            errors.split(", ").map(str::to_owned).collect()
        },
    })
}

/// `talosctl service etcd`: the value of its STATE line
/// (pkg/machinery/formatters/formatters.go:208-245 at v1.13.9).
pub fn parse_service_state(text: &str) -> Result<String, NodeError> {
    text.lines()
        .find_map(|line| {
            let (label, value) = line.split_once(char::is_whitespace)?;
            (label == "STATE").then(|| value.trim().to_owned())
        })
        .filter(|state| !state.is_empty())
        .ok_or_else(|| NodeError::Client(format!("talosctl service etcd: cannot read {text:?}")))
}

/// `talosctl etcd members`: the HOSTNAME of each.
pub fn parse_members(text: &str) -> Result<Vec<String>, NodeError> {
    Ok(parse_member_list(text)?
        .into_iter()
        .map(|m| m.hostname)
        .collect())
}

/// `talosctl etcd members`: ID, HOSTNAME and LEARNER of each (etcd.go:205-265).
pub fn parse_member_list(text: &str) -> Result<Vec<Member>, NodeError> {
    let unreadable = || NodeError::Client(format!("talosctl etcd members: cannot read {text:?}"));
    let table = table(text).ok_or_else(unreadable)?;
    table
        .rows
        .iter()
        .map(|row| {
            let get = |name| cell(&table.columns, row, name).ok_or_else(unreadable);
            Ok(Member {
                id: get("ID")?.to_owned(),
                hostname: get("HOSTNAME")?.to_owned(),
                learner: get("LEARNER")? == "true",
            })
        })
        .collect()
}

/// `etcdutl snapshot status -w json`.
pub fn parse_snapshot_status(text: &str) -> Result<EtcdSnapshotStatus, String> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        hash: u32,
        revision: u64,
        total_key: u64,
        total_size: u64,
    }
    let status: Status = serde_json::from_str(text.trim())
        .map_err(|err| format!("etcdutl snapshot status said {text:?}: {err}"))?;
    Ok(EtcdSnapshotStatus {
        hash: format!("{:08x}", status.hash),
        revision: status.revision,
        total_keys: status.total_key,
        total_size: status.total_size,
    })
}
