//! A Kubernetes upgrade, decided from what was read only: the support of the target by the
//! nodes' Talos, the path from the lowest version the control plane's static pods and the
//! kubelets run, the plan.
//!
//! `talosctl upgrade-k8s` does the upgrade itself, node by node (the control planes' static pods
//! one service at a time, then every kubelet: siderolabs/talos v1.13.9
//! `pkg/cluster/kubernetes/talos_managed.go:81-166`), and may be run again after a failure (its
//! docs, `upgrading-kubernetes.mdx` l.105). It sends no kube-proxy when the cluster's proxy is
//! disabled (`internal/app/machined/pkg/controllers/k8s/manifest.go:227-238`).

use std::path::Path;

use pop_common::records::{NodeRole, TalosUpgradeStep, UpgradeStepKind};

use crate::quorum::TalosNode;
use crate::upgrade::{Release, Steps};

/// A minor line: (major, minor).
type Minor = (u64, u64);

/// The Kubernetes minors each Talos minor supports, lowest and highest: Talos 1.13, 1.31 to 1.36
/// (`pkg/machinery/compatibility/talos113/talos113.go:24-28`).
const SUPPORTED: &[(Minor, Minor, Minor)] = &[((1, 13), (1, 31), (1, 36))];

/// Whether Talos `talos` runs Kubernetes `k8s`.
pub fn supported(talos: &Release, k8s: &Release) -> Result<(), String> {
    let Some((_, lowest, highest)) = SUPPORTED
        .iter()
        .find(|(minor, _, _)| *minor == (talos.major, talos.minor))
    else {
        return Err(format!(
            "no Kubernetes support table for Talos {} here (Talos's \
             pkg/machinery/compatibility/talosNNN): add its range before upgrading",
            talos.minor_line()
        ));
    };
    let minor = (k8s.major, k8s.minor);
    if minor < *lowest || minor > *highest {
        return Err(format!(
            "Talos {} runs Kubernetes {}.{} to {}.{}, not {k8s}",
            talos.minor_line(),
            lowest.0,
            lowest.1,
            highest.0,
            highest.1
        ));
    }
    Ok(())
}

/// What the plan is made from.
#[derive(Debug)]
pub struct PlanInput<'a> {
    pub cluster: &'a str,
    pub from: &'a Release,
    pub to: &'a Release,
    /// Each node's kubelet version, by its Kubernetes name.
    pub kubelets: &'a [(String, Release)],
    /// Each control plane component's version, by its static pod's name.
    pub components: &'a [(String, Release)],
    /// The control plane that runs `talosctl upgrade-k8s`, and the snapshot taken first (none
    /// when every kubelet and component runs the target).
    pub node: &'a TalosNode,
    pub snapshot: Option<(&'a TalosNode, &'a Path)>,
}

/// The steps of a Kubernetes upgrade, in order.
pub fn plan(input: &PlanInput<'_>) -> Vec<TalosUpgradeStep> {
    let mut steps = Steps::default();
    // Every step that names a node runs on the control plane `input.node`.
    let mut push = |step, node: Option<&TalosNode>, says: String| {
        steps.push_at(step, node.map(|n| (n, NodeRole::Controlplane)), says);
    };
    let listed = |versions: &[(String, Release)]| -> String {
        let named: Vec<String> = versions
            .iter()
            .map(|(name, v)| format!("{name} {v}"))
            .collect();
        named.join(", ")
    };
    push(
        UpgradeStepKind::Preflight,
        None,
        format!(
            "{} to Kubernetes {} from {} (the lowest of the control plane components: {}; and \
             of the kubelets: {}): the same minor or the next, supported by the nodes' Talos",
            input.cluster,
            input.to,
            input.from,
            listed(input.components),
            listed(input.kubelets)
        ),
    );
    let Some((source, path)) = input.snapshot else {
        push(
            UpgradeStepKind::Skip,
            None,
            format!(
                "every kubelet and control plane component runs {} already: nothing to do",
                input.to
            ),
        );
        return steps.0;
    };
    push(
        UpgradeStepKind::TakeSnapshot,
        None,
        format!(
            "talosctl etcd snapshot {} from {}'s member (written 0600, its sha256 trailer \
             checked), before anything changes",
            path.display(),
            source.name
        ),
    );
    push(
        UpgradeStepKind::CheckSnapshot,
        None,
        format!("etcdutl snapshot status {}", path.display()),
    );
    push(
        UpgradeStepKind::Gate,
        Some(input.node),
        "every etcd member healthy under one leader, as many members as control planes, every \
         Kubernetes node Ready; otherwise stop here, nothing started"
            .to_owned(),
    );
    push(
        UpgradeStepKind::Upgrade,
        Some(input.node),
        format!(
            "talosctl upgrade-k8s --to {} through {}: the images pre-pulled, each control \
             plane's API server, controller manager and scheduler one at a time, then every \
             kubelet (its node's pods restart), then Talos's bootstrap manifests; the machine \
             configs on the nodes are edited (the generated ones are regenerated at the pin)",
            input.to, input.node.name
        ),
    );
    push(
        UpgradeStepKind::WaitUpgraded,
        None,
        format!(
            "wait until every kubelet runs {} and every node is Ready",
            input.to
        ),
    );
    steps.0
}
