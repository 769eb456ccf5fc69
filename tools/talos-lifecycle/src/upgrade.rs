//! A Talos upgrade, decided from what was read only: the versions and their paths, the installer
//! of each kind of node, the gate before each node, the plan.
//!
//! Talos v1.13's `talosctl upgrade` goes through `LifecycleService.Upgrade`, which neither takes
//! the etcd lock nor checks etcd's health the way the legacy `MachineService.Upgrade` did
//! (siderolabs/talos v1.13.9 `internal/app/lifecycle/lifecycle.go:145-232` against
//! `internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go:539-559`): the control
//! planes are taken one at a time here, each behind [`gate`].

use std::cmp::Ordering;
use std::fmt;
use std::path::Path;

use pop_common::records::{Kind, NodeRole, TalosUpgradeStep, UpgradeStepKind, Version};

use crate::quorum::{MemberStatus, NodeError, Observed, TalosNode};

/// A release of Talos or Kubernetes, `vMAJOR.MINOR.PATCH` with an optional pre-release
/// (`-alpha.2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    pub pre: Option<String>,
}

impl Release {
    /// `v1.13.11` (the `v` may be left out); `None` for anything else.
    pub fn parse(text: &str) -> Option<Release> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let (core, pre) = match text.split_once('-') {
            Some((core, pre)) if !pre.is_empty() => (core, Some(pre.to_owned())),
            Some(_) => return None,
            None => (text, None),
        };
        let mut parts = core.split('.').map(|p| {
            (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse::<u64>().ok())
                .flatten()
        });
        let (major, minor, patch) = (parts.next()??, parts.next()??, parts.next()??);
        if parts.next().is_some() {
            return None;
        }
        Some(Release {
            major,
            minor,
            patch,
            pre,
        })
    }

    /// `v1.13`.
    pub fn minor_line(&self) -> String {
        format!("v{}.{}", self.major, self.minor)
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)?;
        match &self.pre {
            Some(pre) => write!(f, "-{pre}"),
            None => Ok(()),
        }
    }
}

impl PartialOrd for Release {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Release {
    /// A pre-release comes before its release; pre-releases compare as text.
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (&self.pre, &other.pre) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(a), Some(b)) => a.cmp(b),
            })
    }
}

/// Why a node cannot go from its version to the target in one upgrade.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathRefusal {
    #[error("{from} is newer than the target {to}: a downgrade is not a path this tool takes")]
    Downgrade { from: String, to: String },
    #[error(
        "{from} to {to} skips a minor: an upgrade goes to the same minor or the next one only \
         (through the latest patch of every minor in between, one bump at a time)"
    )]
    TooFar { from: String, to: String },
}

/// Whether a node at `from` may be upgraded straight to `to`: the same minor or the next one, no
/// downgrade. Talos's docs test adjacent minors only, through the latest patch of each
/// (`upgrading-talos.mdx` l.29-40; the installer's pre-flight refuses hosts older than its
/// previous-but-one minor, `pkg/machinery/compatibility/talos113/talos113.go:15-19`), and
/// `talosctl upgrade-k8s` takes Kubernetes to the same minor or the next one only
/// (siderolabs/go-kubernetes v0.2.38 `kubernetes/upgrade/path.go:57-100`).
pub fn check_path(from: &Release, to: &Release) -> Result<(), PathRefusal> {
    if from > to {
        return Err(PathRefusal::Downgrade {
            from: from.to_string(),
            to: to.to_string(),
        });
    }
    if from.major != to.major || to.minor > from.minor + 1 {
        return Err(PathRefusal::TooFar {
            from: from.to_string(),
            to: to.to_string(),
        });
    }
    Ok(())
}

/// The installer profile a kind of node needs: the control planes are Scaleway Instances booted
/// from the Scaleway image, the worker an Elastic Metal server written from the metal image.
pub fn platform(role: NodeRole) -> &'static str {
    match role {
        NodeRole::Controlplane => "scaleway",
        NodeRole::Worker => "metal",
    }
}

/// Why an installer reference does not fit a node kind or the target.
pub fn check_installer(image: &str, role: NodeRole, to: &Release) -> Result<(), String> {
    let profile = format!("/{}-installer/", platform(role));
    if !image.contains(&profile) {
        return Err(format!(
            "`{image}` is not a {}-installer: `--image` alone decides what `talosctl upgrade` \
             installs, and the {} need `<factory>{profile}<their schematic>:<version>`",
            platform(role),
            match role {
                NodeRole::Controlplane => "control planes",
                NodeRole::Worker => "worker",
            }
        ));
    }
    let tag = format!(":{to}");
    if !image.ends_with(&tag) {
        return Err(format!(
            "`{image}` is not tagged {to}, the target: the installer decides the version"
        ));
    }
    Ok(())
}

/// A node of the upgrade, with its role and the installer it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeNode {
    pub node: TalosNode,
    pub role: NodeRole,
}

/// A node and the version it answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub node: UpgradeNode,
    pub version: Release,
}

/// The nodes in the order they are upgraded: the control planes, one at a time, in the
/// inventory's order, then the workers.
pub fn order(mut nodes: Vec<UpgradeNode>) -> Vec<UpgradeNode> {
    nodes.sort_by_key(|n| n.role != NodeRole::Controlplane);
    nodes
}

/// What the gate found wrong, each a line naming the member or node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unhealthy(pub Vec<String>);

/// The gate before a node's upgrade: every control plane's etcd member answers healthy (a voter,
/// a leader, no error) and all follow the same leader, the member list has as many members as
/// there are control planes (the checks the legacy upgrade's `ValidateForUpgrade` made,
/// `internal/pkg/etcd/etcd.go:93-121`, which the v1.13 upgrade no longer makes), and every node
/// is Ready in Kubernetes.
pub fn gate(
    observed: &[Observed],
    members: Result<&[String], &NodeError>,
    ready: &[(String, Result<bool, NodeError>)],
) -> Result<(), Unhealthy> {
    let mut wrong = Vec::new();
    for o in observed {
        if !o.status.as_ref().is_ok_and(MemberStatus::healthy) {
            wrong.push(o.to_string());
        }
    }
    let mut leaders: Vec<&str> = observed
        .iter()
        .filter_map(|o| o.status.as_ref().ok())
        .filter(|s| s.healthy())
        .map(|s| s.leader.as_str())
        .collect();
    leaders.sort_unstable();
    leaders.dedup();
    if leaders.len() > 1 {
        wrong.push(format!(
            "the members follow different leaders ({})",
            leaders.join(", ")
        ));
    }
    match members {
        Ok(list) if list.len() != observed.len() => wrong.push(format!(
            "etcd lists {} members ({}) for {} control planes",
            list.len(),
            list.join(", "),
            observed.len()
        )),
        Ok(_) => {}
        Err(error) => wrong.push(format!("the member list could not be read: {error}")),
    }
    for (name, answer) in ready {
        match answer {
            Ok(true) => {}
            Ok(false) => wrong.push(format!("{name}: its Kubernetes node is not Ready")),
            Err(error) => wrong.push(format!("{name}: its Kubernetes node: {error}")),
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(Unhealthy(wrong))
    }
}

/// What the plan is made from.
#[derive(Debug)]
pub struct PlanInput<'a> {
    pub cluster: &'a str,
    pub to: &'a Release,
    pub client: &'a Release,
    /// Every node, in [`order`], with the version it answered with.
    pub seen: &'a [Seen],
    pub control_plane_installer: &'a str,
    pub worker_installer: &'a str,
    /// The control plane the snapshot comes from, and its file (none when nothing is to do).
    pub snapshot: Option<(&'a TalosNode, &'a Path)>,
}

impl PlanInput<'_> {
    pub fn installer(&self, role: NodeRole) -> &str {
        match role {
            NodeRole::Controlplane => self.control_plane_installer,
            NodeRole::Worker => self.worker_installer,
        }
    }
}

/// The steps of a Talos or a Kubernetes upgrade, numbered as they are added.
#[derive(Debug, Default)]
pub(crate) struct Steps(pub(crate) Vec<TalosUpgradeStep>);

impl Steps {
    fn push(&mut self, kind: UpgradeStepKind, node: Option<&UpgradeNode>, says: String) {
        self.push_at(kind, node.map(|n| (&n.node, n.role)), says);
    }

    /// A step on `node` in its role, or on none.
    pub(crate) fn push_at(
        &mut self,
        kind: UpgradeStepKind,
        node: Option<(&TalosNode, NodeRole)>,
        says: String,
    ) {
        self.0.push(TalosUpgradeStep {
            kind: Kind::new(),
            version: Version,
            n: self.0.len() + 1,
            step: kind,
            node: node.map(|(n, _)| n.name.clone()),
            role: node.map(|(_, role)| role),
            endpoint: node.map(|(n, _)| n.endpoint.clone()),
            says,
        });
    }
}

/// The steps of an upgrade, in order: what was checked, the snapshot, then each node (skipped
/// when it runs the target already, else gate, upgrade, wait).
pub fn plan(input: &PlanInput<'_>) -> Vec<TalosUpgradeStep> {
    let mut steps = Steps::default();
    let versions: Vec<String> = input
        .seen
        .iter()
        .map(|s| format!("{} {}", s.node.node.name, s.version))
        .collect();
    steps.push(
        UpgradeStepKind::Preflight,
        None,
        format!(
            "{} to Talos {}: {}; every path the same minor or the next; talosctl {} (the \
             target's minor); installers {} (control planes) and {} (workers)",
            input.cluster,
            input.to,
            versions.join(", "),
            input.client,
            input.control_plane_installer,
            input.worker_installer
        ),
    );
    if let Some((source, path)) = input.snapshot {
        steps.push(
            UpgradeStepKind::TakeSnapshot,
            None,
            format!(
                "talosctl etcd snapshot {} from {}'s member (written 0600, its sha256 trailer \
                 checked), before any node changes",
                path.display(),
                source.name
            ),
        );
        steps.push(
            UpgradeStepKind::CheckSnapshot,
            None,
            format!("etcdutl snapshot status {}", path.display()),
        );
    }
    let workers = input
        .seen
        .iter()
        .filter(|s| s.node.role == NodeRole::Worker)
        .count();
    for seen in input.seen {
        node_steps(&mut steps, input, seen, workers);
    }
    steps.0
}

/// One node's steps: skipped at the target, else its gate, its upgrade (what goes away while it
/// reboots said), its wait.
fn node_steps(steps: &mut Steps, input: &PlanInput<'_>, seen: &Seen, workers: usize) {
    let (node, name) = (&seen.node, seen.node.node.name.as_str());
    if seen.version == *input.to {
        steps.push(
            UpgradeStepKind::Skip,
            Some(node),
            format!("{name} runs {} already: left as it is", input.to),
        );
        return;
    }
    steps.push(
        UpgradeStepKind::Gate,
        Some(node),
        format!(
            "before {name}: every etcd member healthy under one leader, as many members as \
             control planes, every Kubernetes node Ready; otherwise stop here, nothing started \
             on {name}"
        ),
    );
    let downtime = match node.role {
        NodeRole::Controlplane => "its etcd member and API server are away while it reboots (the \
                                   other members keep the quorum)"
            .to_owned(),
        NodeRole::Worker if workers == 1 => format!(
            "EDGE DOWNTIME: {name} is the only node that takes workloads, so the edge answers \
             nothing from its drain until it is back Ready and its pods run again (minutes: the \
             installer's pull, the reboot, the pods' start)"
        ),
        NodeRole::Worker => {
            "its pods move to the other workers while it drains and reboots".to_owned()
        }
    };
    steps.push(
        UpgradeStepKind::Upgrade,
        Some(node),
        format!(
            "talosctl upgrade --image {} on {name} ({} to {}): the installer pulled and run, the \
             node drained, rebooted, uncordoned; {downtime}",
            input.installer(node.role),
            seen.version,
            input.to
        ),
    );
    let member = match node.role {
        NodeRole::Controlplane => ", its etcd member healthy",
        NodeRole::Worker => "",
    };
    steps.push(
        UpgradeStepKind::WaitUpgraded,
        Some(node),
        format!(
            "wait until {name} answers with {}{member} and is Ready",
            input.to
        ),
    );
}
