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
//!   each pinned line collected there, as for the values contracts.

use std::path::PathBuf;

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
    ];
    if let Some(missing) = bundles.iter().find(|bundle| !bundle.is_file()) {
        crate::skip_or_fail(test, &format!("the CRD bundle {}", missing.display()));
        return None;
    }
    Some(bundles)
}
