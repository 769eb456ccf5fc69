//! Which control planes to ask: the addresses given, or those Talos publishes for its API.
//!
//! With `machine.features.kubernetesTalosAPIAccess`, Talos keeps a Service `default/talos` and
//! its EndpointSlice `default/talos-ipv4` (and `-ipv6`), one endpoint per control plane's
//! address, each ready (internal/app/machined/pkg/controllers/kubeaccess/endpoint.go l.166-199,
//! 266-358 at v1.13.9). The job's Role may `get` that one object and nothing else.

use std::path::PathBuf;

use kube_rest::Kube;
use serde_json::Value;

use crate::Error;

/// The EndpointSlice's path in the API.
pub const TALOS_API_SLICE: &str =
    "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/talos-ipv4";

/// Where the control planes' addresses come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nodes {
    /// `--node`, in the order given.
    Given(Vec<String>),
    /// The EndpointSlice, read with the pod's ServiceAccount.
    FromCluster(ClusterApi),
}

/// The API server and the ServiceAccount's credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterApi {
    pub base: String,
    pub ca_file: PathBuf,
    pub token_file: PathBuf,
}

/// The addresses of the ready endpoints of a `talos-ipv4` EndpointSlice, in its order.
pub fn talos_api_addresses(slice: &Value) -> Vec<String> {
    slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["conditions"]["ready"].as_bool() != Some(false))
        .filter_map(|e| e["addresses"].as_array())
        .flatten()
        .filter_map(Value::as_str)
        .filter(|a| a.parse::<std::net::IpAddr>().is_ok())
        .map(str::to_owned)
        .collect()
}

/// The addresses to ask, read from the cluster when none were given.
pub(crate) fn addresses(nodes: &Nodes) -> Result<Vec<String>, Error> {
    let api = match nodes {
        Nodes::Given(addresses) => return Ok(addresses.clone()),
        Nodes::FromCluster(api) => api,
    };
    let kube = Kube::new(
        &api.base,
        &api.ca_file,
        &api.token_file,
        concat!("edgepop-etcd-backup/", env!("CARGO_PKG_VERSION")),
    )?;
    let slice = kube.get(TALOS_API_SLICE)?.ok_or_else(|| {
        Error::NoControlPlane(format!(
            "GET {TALOS_API_SLICE}: not found: Talos publishes it once \
             machine.features.kubernetesTalosAPIAccess is on in the control planes' config"
        ))
    })?;
    let found = talos_api_addresses(&slice);
    if found.is_empty() {
        return Err(Error::NoControlPlane(format!(
            "GET {TALOS_API_SLICE}: no ready control plane address in it"
        )));
    }
    pop_common::info!(
        "control planes from {TALOS_API_SLICE}: {}",
        found.join(", ")
    );
    Ok(found)
}
