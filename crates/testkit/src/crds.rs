//! The CustomResourceDefinitions the platform layer installs, for a test control plane
//! ([`crate::control_plane::ControlPlane::install_crds`]): what the edge layer's objects need
//! before an API server takes them. They come from the shared upstream material
//! (`../shared/crds`, its PROVENANCE.md), at the versions of `k8s/versions.env`:
//!
//! - the Gateway API standard channel at `GATEWAY_API_VERSION`: the same files, in the same
//!   order, as the bundle `make vendor` writes and `make apply-platform` applies
//!   (`tests/pipelines.rs` checks each against its pinned sha256 and the two bundles' bodies
//!   byte for byte);
//! - Istio's at `ISTIO_CONTRACT_VERSION` (the istio-base chart's `crd-all.gen.yaml`) and
//!   cert-manager's at `CERT_MANAGER_CONTRACT_VERSION` (its chart's CRDs): the newest patch of
//!   each pinned line collected there, as for the values contracts;
//! - Cilium's policies (CiliumNetworkPolicy and the rest of its `cilium.io/v2` bundle): the one
//!   `cilium-v*.yaml` bundle there, the release the schemas of `../shared/schemas` come from
//!   (the pinned line's files there hold only the LB IPAM and L2 CRDs; in a cluster, Cilium's
//!   operator installs its own).

use std::path::{Path, PathBuf};

/// The bundles, in install order; or `None` after [`crate::skip_or_fail`] when the shared
/// material is absent.
pub fn platform(test: &str) -> Option<Vec<PathBuf>> {
    let dir = crate::workspace::shared_dir(test)?.join("crds");
    let bundles = vec![
        dir.join(format!(
            "gateway-api-{}-standard.yaml",
            crate::pin("GATEWAY_API_VERSION")
        )),
        dir.join(format!(
            "istio-{}.yaml",
            crate::pin("ISTIO_CONTRACT_VERSION")
        )),
        dir.join(format!(
            "cert-manager-{}.yaml",
            crate::pin("CERT_MANAGER_CONTRACT_VERSION")
        )),
        cilium_bundle(&dir),
    ];
    if let Some(missing) = bundles.iter().find(|bundle| !bundle.is_file()) {
        crate::skip_or_fail(test, &format!("the CRD bundle {}", missing.display()));
        return None;
    }
    Some(bundles)
}

/// The Prometheus Operator's PodMonitor and PrometheusRule CRDs at
/// `PROMETHEUS_OPERATOR_CRDS_VERSION` (`../shared/crds/prometheus-operator-<version>/`), what a
/// cluster that runs the operator serves; or `None` after [`crate::skip_or_fail`].
pub fn prometheus_operator(test: &str) -> Option<Vec<PathBuf>> {
    let dir = crate::workspace::shared_dir(test)?
        .join("crds")
        .join(format!(
            "prometheus-operator-{}",
            crate::pin("PROMETHEUS_OPERATOR_CRDS_VERSION")
        ));
    let bundles: Vec<PathBuf> = ["podmonitors", "prometheusrules"]
        .iter()
        .map(|kind| dir.join(format!("monitoring.coreos.com_{kind}.yaml")))
        .collect();
    if let Some(missing) = bundles.iter().find(|bundle| !bundle.is_file()) {
        crate::skip_or_fail(test, &format!("the CRD {}", missing.display()));
        return None;
    }
    Some(bundles)
}

/// `<dir>/cilium-v<version>.yaml`, the only one; a path that does not exist (and is named as
/// missing) when there is none, and a failure when there are several to choose from.
#[allow(clippy::panic)] // a test helper: an ambiguous choice fails the test, naming both
fn cilium_bundle(dir: &Path) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| Some(entry.ok()?.path()))
                .filter(|path| {
                    path.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("cilium-v") && n.ends_with(".yaml"))
                })
                .collect()
        })
        .unwrap_or_default();
    match found.len() {
        0 => dir.join("cilium-v<version>.yaml"),
        1 => found.remove(0),
        _ => panic!("several Cilium CRD bundles to choose from: {found:?}"),
    }
}
