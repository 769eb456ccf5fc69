//! The upgrade: the reads and pre-flight checks, the plan, then (unless `--dry-run`) the
//! snapshot and each node behind its gate.

use std::io::Write;
use std::path::PathBuf;

use pop_common::records::{Kind, KubernetesUpgraded, NodeRole, TalosUpgraded, Version};
use pop_common::wait::{Poll, Sleeper};

use crate::quorum::{self, NodeError, Observed, TalosNode};
use crate::talos::{self, Kubelet, Talos};
use crate::upgrade::{self, PlanInput, Release, Seen, UpgradeNode};
use crate::upgrade_k8s;
use crate::{Config, Error, observe, write_line, write_plan};

/// What an upgrade is asked for.
#[derive(Debug)]
pub struct Upgrade<'a> {
    pub to: &'a Release,
    pub control_plane_installer: &'a str,
    pub worker_installer: &'a str,
    /// The snapshot taken first.
    pub snapshot: PathBuf,
    /// How long to wait for an upgraded node.
    pub wait: Poll,
}

impl Upgrade<'_> {
    fn installer(&self, role: NodeRole) -> &str {
        match role {
            NodeRole::Controlplane => self.control_plane_installer,
            NodeRole::Worker => self.worker_installer,
        }
    }
}

#[allow(clippy::too_many_arguments)] // the run's inputs, each of its own kind
pub fn upgrade(
    config: &Config,
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    cluster: &str,
    nodes: Vec<UpgradeNode>,
    asked: &Upgrade<'_>,
    now: u64,
    output: &mut dyn Write,
) -> Result<(), Error> {
    let to = asked.to;
    let client = client(talos, to)?;
    let seen = versions(talos, upgrade::order(nodes), to)?;
    let control_planes: Vec<TalosNode> = seen
        .iter()
        .filter(|s| s.node.role == NodeRole::Controlplane)
        .map(|s| s.node.node.clone())
        .collect();
    let behind: Vec<&Seen> = seen.iter().filter(|s| s.version != *to).collect();
    check_not_cordoned(talos, &seen, to)?;
    let observed = observe(talos, &control_planes);
    let source = if behind.is_empty() {
        None
    } else {
        Some(
            quorum::snapshot_source(&observed).ok_or_else(|| Error::NoNode {
                cluster: cluster.to_owned(),
                wanted: "has an etcd member that answers with a leader and no error",
                answers: observed.iter().map(ToString::to_string).collect(),
            })?,
        )
    };
    let steps = upgrade::plan(&PlanInput {
        cluster,
        to,
        client: &client,
        seen: &seen,
        control_plane_installer: asked.control_plane_installer,
        worker_installer: asked.worker_installer,
        snapshot: source.map(|s| (s, asked.snapshot.as_path())),
    });
    if config.dry_run {
        return write_plan(&steps, output);
    }
    let Some(source) = source else {
        pop_common::info!("every node of {cluster} runs {to} already: nothing to do");
        return Ok(());
    };
    let taken = crate::run::take_snapshot(talos, cluster, source, &asked.snapshot, now)?;
    write_line(&taken, &mut *output)?;
    let names: Vec<String> = seen.iter().map(|s| s.node.node.name.clone()).collect();
    for (i, node) in behind.iter().enumerate() {
        let name = &node.node.node.name;
        let done: Vec<String> = seen
            .iter()
            .filter(|s| s.version == *to)
            .chain(behind[..i].iter().copied())
            .map(|s| s.node.node.name.clone())
            .collect();
        check_gate(talos, &control_planes, &names, name, done)?;
        let installer = asked.installer(node.node.role);
        pop_common::info!(
            "{name}: talosctl upgrade --image {installer} ({} to {to})",
            node.version
        );
        talos
            .upgrade(&node.node.node, installer)
            .map_err(|error| Error::node(name, "talosctl upgrade", error))?;
        wait_upgraded(talos, sleeper, &node.node, to, asked.wait)?;
        pop_common::info!("{name}: runs {to}, Ready");
        write_line(
            &TalosUpgraded {
                kind: Kind::new(),
                version: Version,
                cluster_name: cluster.to_owned(),
                node: name.clone(),
                role: node.node.role,
                from: node.version.to_string(),
                to: to.to_string(),
                installer: installer.to_owned(),
            },
            &mut *output,
        )?;
    }
    Ok(())
}

/// talosctl's own version, which must be of the target's minor (Talos supports a client of the
/// cluster's minor, `upgrading-talos.mdx` l.220-222).
fn client(talos: &dyn Talos, to: &Release) -> Result<Release, Error> {
    let said = talos.client_version().map_err(|message| {
        Error::node("talosctl", "version --client", NodeError::Client(message))
    })?;
    let client = Release::parse(&said).ok_or_else(|| {
        Error::node(
            "talosctl",
            "version --client",
            NodeError::Client(format!("`{said}` is not a Talos release")),
        )
    })?;
    if (client.major, client.minor) != (to.major, to.minor) {
        return Err(Error::ClientMinor {
            client: client.to_string(),
            to: to.clone(),
        });
    }
    Ok(client)
}

/// The Talos version `node` runs, logged.
fn talos_version(talos: &dyn Talos, node: &TalosNode) -> Result<Release, Error> {
    let said = talos.version(node).map_err(|error| {
        Error::node(
            &node.name,
            "version (every node's is read before anything changes)",
            error,
        )
    })?;
    let version = Release::parse(&said).ok_or_else(|| {
        Error::node(
            &node.name,
            "version",
            NodeError::Client(format!("`{said}` is not a Talos release")),
        )
    })?;
    pop_common::info!("{}: runs {version}", node.name);
    Ok(version)
}

/// Every node's version, each checked to have a path to the target.
fn versions(talos: &dyn Talos, nodes: Vec<UpgradeNode>, to: &Release) -> Result<Vec<Seen>, Error> {
    nodes
        .into_iter()
        .map(|node| {
            let name = node.node.name.clone();
            let version = talos_version(talos, &node.node)?;
            upgrade::check_path(&version, to).map_err(|refusal| Error::Path {
                node: name.clone(),
                refusal,
            })?;
            Ok(Seen { node, version })
        })
        .collect()
}

/// Refused when a node already on the target is cordoned: a run skips it, so the cordon a
/// stopped run left (talosctl uncordons only once the node is Ready again) would stay, and the
/// worker, the one node that takes workloads, would take none.
fn check_not_cordoned(talos: &dyn Talos, seen: &[Seen], to: &Release) -> Result<(), Error> {
    if seen.iter().all(|s| s.version != *to) {
        return Ok(());
    }
    let kubelets = talos
        .kubelets()
        .map_err(|error| Error::node("kubectl", "get nodes", error))?;
    let cordoned = seen.iter().filter(|s| s.version == *to).find(|s| {
        kubelets
            .iter()
            .any(|k| k.cordoned && k.name == s.node.node.name)
    });
    match cordoned {
        Some(s) => Err(Error::Cordoned {
            node: s.node.node.name.clone(),
            to: to.to_string(),
        }),
        None => Ok(()),
    }
}

/// The gate before `node`: refused, naming what is wrong, unless the cluster is healthy.
fn check_gate(
    talos: &dyn Talos,
    control_planes: &[TalosNode],
    names: &[String],
    node: &str,
    done: Vec<String>,
) -> Result<(), Error> {
    cluster_health(talos, control_planes, names).map_err(|wrong| Error::Unhealthy {
        node: node.to_owned(),
        done,
        wrong,
    })
}

/// Whether the cluster is healthy: every control plane's member a healthy voter following the
/// one leader, one member per control plane, every node in `names` Ready; else what is wrong.
fn cluster_health(
    talos: &dyn Talos,
    control_planes: &[TalosNode],
    names: &[String],
) -> Result<(), Vec<String>> {
    let observed = observe(talos, control_planes);
    let members = members(talos, &observed);
    // Readiness is read once etcd passes: an unhealthy member already says what is wrong.
    let etcd = upgrade::gate(&observed, members.as_deref(), &[]);
    let ready: Vec<(String, Result<bool, NodeError>)> = if etcd.is_ok() {
        names
            .iter()
            .map(|n| (n.clone(), talos.node_ready(n)))
            .collect()
    } else {
        Vec::new()
    };
    upgrade::gate(&observed, members.as_deref(), &ready).map_err(|wrong| wrong.0)
}

/// Looks at the cluster until it is healthy as [`cluster_health`] reads it (a replaced control
/// plane's machine boots, joins etcd as a learner, is promoted, and its kubelet registers).
pub fn await_healthy(
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    cluster: &str,
    nodes: &[UpgradeNode],
    wait: Poll,
) -> Result<(), Error> {
    let control_planes: Vec<TalosNode> = nodes
        .iter()
        .filter(|n| n.role == NodeRole::Controlplane)
        .map(|n| n.node.clone())
        .collect();
    let names: Vec<String> = nodes.iter().map(|n| n.node.name.clone()).collect();
    let mut last = Vec::new();
    let healthy = wait.until(sleeper, |attempt| {
        match cluster_health(talos, &control_planes, &names) {
            Ok(()) => Ok::<_, Error>(Some(())),
            Err(wrong) => {
                if wrong != last {
                    pop_common::info!("look {attempt}: {}", wrong.join("; "));
                }
                last = wrong;
                Ok(None)
            }
        }
    })?;
    healthy.ok_or_else(|| Error::NotHealthy {
        cluster: cluster.to_owned(),
        tries: wait.tries,
        interval: wait.interval,
        last,
    })?;
    pop_common::info!(
        "{cluster}: {} etcd members, each a healthy voter following one leader; every node Ready",
        control_planes.len()
    );
    Ok(())
}

/// The member list from the first control plane whose member answers.
fn members(talos: &dyn Talos, observed: &[Observed]) -> Result<Vec<String>, NodeError> {
    let mut last = NodeError::Client("no member answered".into());
    for o in observed.iter().filter(|o| o.status.is_ok()) {
        match talos.etcd_members(&o.node) {
            Ok(list) => return Ok(list),
            Err(error) => last = error,
        }
    }
    Err(last)
}

/// Asks the upgraded node until it answers with the target, its member healthy (a control
/// plane), and its Kubernetes node is Ready.
fn wait_upgraded(
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    node: &UpgradeNode,
    to: &Release,
    wait: Poll,
) -> Result<(), Error> {
    let mut last = String::from("no answer yet");
    let name = &node.node.name;
    let found = wait.until(sleeper, |_| {
        let version = talos.version(&node.node);
        match version.as_deref().map(Release::parse) {
            Ok(Some(v)) if v == *to => {}
            Ok(Some(v)) => {
                last = format!("runs {v}");
                return Ok::<_, Error>(None);
            }
            Ok(None) => {
                last = "an unreadable version".into();
                return Ok(None);
            }
            Err(error) => {
                last = error.to_string();
                return Ok(None);
            }
        }
        if node.role == NodeRole::Controlplane {
            let observed = Observed {
                node: node.node.clone(),
                status: talos.etcd_status(&node.node),
            };
            if !observed
                .status
                .as_ref()
                .is_ok_and(quorum::MemberStatus::healthy)
            {
                last = observed.to_string();
                return Ok(None);
            }
        }
        match talos.node_ready(name) {
            Ok(true) => Ok(Some(())),
            Ok(false) => {
                last = format!("runs {to}, its Kubernetes node not Ready");
                Ok(None)
            }
            Err(error) => {
                last = error.to_string();
                Ok(None)
            }
        }
    })?;
    found.ok_or_else(|| Error::NotUpgraded {
        node: name.clone(),
        to: to.to_string(),
        tries: wait.tries,
        interval: wait.interval,
        last,
    })
}

/// What a Kubernetes upgrade is asked for.
#[derive(Debug)]
pub struct UpgradeK8s<'a> {
    pub to: &'a Release,
    /// The snapshot taken first.
    pub snapshot: PathBuf,
    /// How long to wait for the kubelets.
    pub wait: Poll,
}

#[allow(clippy::too_many_arguments)] // the run's inputs, each of its own kind
pub fn upgrade_k8s(
    config: &Config,
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    cluster: &str,
    nodes: &[UpgradeNode],
    asked: &UpgradeK8s<'_>,
    now: u64,
    output: &mut dyn Write,
) -> Result<(), Error> {
    let to = asked.to;
    if let Some(version) = cluster_talos(talos, nodes, to)? {
        client(talos, &version)?;
    }
    let kubelets = kubelet_versions(talos)?;
    if kubelets.is_empty() {
        return Err(Error::node(
            cluster,
            "kubectl get nodes",
            NodeError::Client("no node is registered in Kubernetes".into()),
        ));
    }
    let components = static_pod_versions(talos, cluster)?;
    // talosctl upgrades from the lowest component; the kubelets follow in the same run. Both
    // lists hold one version at least.
    let versions = || components.iter().chain(&kubelets);
    let from = versions().map(|(_, v)| v).min().unwrap_or(to);
    for (name, version) in versions() {
        upgrade::check_path(version, to).map_err(|refusal| Error::Path {
            node: name.clone(),
            refusal,
        })?;
    }
    let control_planes: Vec<TalosNode> = nodes
        .iter()
        .filter(|n| n.role == NodeRole::Controlplane)
        .map(|n| n.node.clone())
        .collect();
    let behind = versions().any(|(_, v)| v != to);
    let observed = observe(talos, &control_planes);
    let source = quorum::snapshot_source(&observed).ok_or_else(|| Error::NoNode {
        cluster: cluster.to_owned(),
        wanted: "has an etcd member that answers with a leader and no error",
        answers: observed.iter().map(ToString::to_string).collect(),
    })?;
    let steps = upgrade_k8s::plan(&upgrade_k8s::PlanInput {
        cluster,
        from,
        to,
        kubelets: &kubelets,
        components: &components,
        node: source,
        snapshot: behind.then_some((source, asked.snapshot.as_path())),
    });
    if config.dry_run {
        return write_plan(&steps, output);
    }
    if !behind {
        pop_common::info!(
            "every kubelet and control plane component of {cluster} runs {to} already: nothing to do"
        );
        return Ok(());
    }
    let taken = crate::run::take_snapshot(talos, cluster, source, &asked.snapshot, now)?;
    write_line(&taken, &mut *output)?;
    let names: Vec<String> = nodes.iter().map(|n| n.node.name.clone()).collect();
    check_gate(talos, &control_planes, &names, &source.name, Vec::new())?;
    pop_common::info!("{}: talosctl upgrade-k8s --to {to}", source.name);
    talos
        .upgrade_k8s(source, &to.to_string())
        .map_err(|error| Error::node(&source.name, "talosctl upgrade-k8s", error))?;
    let upgraded = wait_kubelets(talos, sleeper, to, asked.wait)?;
    write_line(
        &KubernetesUpgraded {
            kind: Kind::new(),
            version: Version,
            cluster_name: cluster.to_owned(),
            from: from.to_string(),
            to: to.to_string(),
            nodes: upgraded,
        },
        &mut *output,
    )
}

/// The nodes' Talos, each checked to run Kubernetes `to`: the first one's version.
fn cluster_talos(
    talos: &dyn Talos,
    nodes: &[UpgradeNode],
    to: &Release,
) -> Result<Option<Release>, Error> {
    let mut first = None;
    for node in nodes {
        let name = &node.node.name;
        let version = talos_version(talos, &node.node)?;
        upgrade_k8s::supported(&version, to).map_err(|message| Error::Unsupported {
            node: name.clone(),
            message,
        })?;
        first.get_or_insert(version);
    }
    Ok(first)
}

/// Every kubelet's version, read.
fn kubelet_versions(talos: &dyn Talos) -> Result<Vec<(String, Release)>, Error> {
    let kubelets = talos
        .kubelets()
        .map_err(|error| Error::node("kubectl", "get nodes", error))?;
    kubelets
        .into_iter()
        .map(|Kubelet { name, version, .. }| {
            let release = Release::parse(&version).ok_or_else(|| {
                Error::node(
                    &name,
                    "kubelet version",
                    NodeError::Client(format!("`{version}` is not a Kubernetes release")),
                )
            })?;
            Ok((name, release))
        })
        .collect()
}

/// The version each control plane component's static pod runs, by pod, from its image's tag,
/// as `talosctl upgrade-k8s` reads it (siderolabs/talos v1.13.9 pkg/cluster/kubernetes/
/// detect.go:17-72: a pod whose image has no release tag is passed over). None at all: talosctl
/// could not tell where it upgrades from, so neither can the plan.
fn static_pod_versions(talos: &dyn Talos, cluster: &str) -> Result<Vec<(String, Release)>, Error> {
    let pods = talos
        .static_pods()
        .map_err(|error| Error::node("kubectl", "get pods", error))?;
    let versions: Vec<(String, Release)> = pods
        .into_iter()
        .filter_map(|pod| {
            let release = talos::image_tag(&pod.image).and_then(Release::parse);
            if release.is_none() {
                pop_common::info!(
                    "{}: no Kubernetes release in its image {}",
                    pod.name,
                    pod.image
                );
            }
            Some((pod.name, release?))
        })
        .collect();
    if versions.is_empty() {
        return Err(Error::node(
            cluster,
            "kubectl get pods",
            NodeError::Client(format!(
                "no control plane static pod ({}, in kube-system) shows a Kubernetes release: \
                 talosctl upgrade-k8s reads the version it upgrades from there; are the control \
                 planes' kubelets registered?",
                talos::STATIC_POD_COMPONENTS.join(", ")
            )),
        ));
    }
    Ok(versions)
}

/// Asks Kubernetes until every kubelet runs `to` and every node is Ready: their names.
fn wait_kubelets(
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    to: &Release,
    wait: Poll,
) -> Result<Vec<String>, Error> {
    let mut last = String::from("no answer yet");
    let found = wait.until(sleeper, |_| {
        let kubelets = match talos.kubelets() {
            Ok(kubelets) => kubelets,
            Err(error) => {
                last = error.to_string();
                return Ok::<_, Error>(None);
            }
        };
        let waiting: Vec<String> = kubelets
            .iter()
            .filter(|k| !k.ready || Release::parse(&k.version).as_ref() != Some(to))
            .map(|k| {
                format!(
                    "{} {}{}",
                    k.name,
                    k.version,
                    if k.ready { "" } else { " not Ready" }
                )
            })
            .collect();
        if waiting.is_empty() {
            return Ok(Some(kubelets.into_iter().map(|k| k.name).collect()));
        }
        last = waiting.join(", ");
        Ok(None)
    })?;
    found.ok_or_else(|| Error::NotUpgraded {
        node: "the kubelets".into(),
        to: to.to_string(),
        tries: wait.tries,
        interval: wait.interval,
        last,
    })
}
