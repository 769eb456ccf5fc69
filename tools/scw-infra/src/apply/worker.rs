//! The Elastic Metal workers and their SSH key: the key registered in IAM (public key only), each
//! worker's server found by its tags (or adopted) or ordered, then started and waited for until
//! it is ready.

use std::collections::{BTreeMap, BTreeSet};

use scaleway::baremetal::{self, CreateServer, ServerStatus, Stock};
use scaleway::iam::{CreateSshKey, same_key};
use serde::Serialize;

use super::{ApplyInputs, ApplyStep, Known};
use crate::cluster::Cluster;
use crate::error::{InfraError, R};
use crate::plan::{PlannedId, Ref, Steps};
use crate::power;
use crate::tags::{Role, TAG_NODE};

/// Registering the worker's public key in IAM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegisterKey {
    pub creates: PlannedId,
    pub name: String,
    pub public_key: String,
}

/// Ordering the worker (hourly).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Order {
    pub creates: PlannedId,
    pub name: String,
    pub offer: String,
    pub offer_id: String,
    pub tags: Vec<String>,
}

/// The key, then each worker of the config; returns the workers a step of the plan makes or
/// changes (their addresses are only known once those steps have run).
///
/// A server is a worker of the config by its `edgepop-node` tag. When exactly one worker of the
/// config has no server and exactly one server of the cluster has no worker of the config, that
/// server is adopted (a worker renamed in the config keeps its machine). Any other server left
/// over is leaving the cluster: it gets no DNS record and no place in the inventory, but the
/// control planes' firewall still lets it in (`Known::leaving`), so that `make remove-worker`
/// can drain it (its kubelet must reach the API server to stop its pods) before deleting it.
pub fn plan(
    cluster: &Cluster<'_>,
    inputs: &ApplyInputs,
    steps: &mut Steps<ApplyStep>,
    known: &mut Known,
) -> R<BTreeSet<String>> {
    plan_key(cluster, inputs, steps, known)?;
    let names = cluster.names();
    let servers = cluster
        .api
        .baremetal()
        .servers(cluster.zone(), &names.tags(Role::Worker))?;
    let (found, leaving) = match_servers(cluster.config.worker_names(), servers)?;
    known.leaving = leaving;
    let mut settles = BTreeSet::new();
    for worker in &cluster.config.workers {
        let name = worker.name.clone();
        let (server, status) = match found.get(name.as_str()) {
            Some(found) => {
                if found.status.is_failed() {
                    return Err(InfraError::Failed {
                        what: "Elastic Metal server",
                        name: found.name.clone(),
                        id: found.id.clone(),
                        state: found.status.to_string(),
                    });
                }
                known.workers.insert(name.clone(), found.clone());
                (Ref::Existing(found.id.clone()), found.status.clone())
            }
            None => {
                let offer = cluster
                    .api
                    .baremetal()
                    .offers(cluster.zone(), &worker.offer)?
                    .into_iter()
                    .find(|o| o.enable)
                    .ok_or_else(|| InfraError::NoOffer {
                        offer: worker.offer.clone(),
                        zone: cluster.zone().to_owned(),
                    })?;
                if offer.stock == Stock::Empty {
                    return Err(InfraError::OutOfStock {
                        offer: offer.name,
                        zone: cluster.zone().to_owned(),
                    });
                }
                let server = steps.create(|creates| {
                    ApplyStep::OrderWorker(Order {
                        creates,
                        name: name.clone(),
                        offer: offer.name.clone(),
                        offer_id: offer.id.clone(),
                        tags: names.node_tags(Role::Worker, &name),
                    })
                });
                (server, ServerStatus::Delivering)
            }
        };
        let transition = power::worker_to(&name, &server, &status, true)?;
        if transition.changes() {
            settles.insert(name);
        }
        steps.extend(transition.before.map(ApplyStep::WaitWorker));
        steps.extend(transition.action.map(ApplyStep::PowerWorker));
        steps.extend(transition.after.map(ApplyStep::WaitWorker));
    }
    Ok(settles)
}

/// The servers paired with the config's workers, by worker name, and those left over.
type Paired<'a> = (BTreeMap<&'a str, baremetal::Server>, Vec<baremetal::Server>);

/// The cluster's worker servers by the config's worker each stands for: by its `edgepop-node`
/// tag, or adopted when one worker and one server are left unpaired. Two servers for one worker
/// stop the plan; the servers left over are named, and returned apart.
fn match_servers<'a>(
    workers: impl Iterator<Item = &'a str>,
    servers: Vec<baremetal::Server>,
) -> R<Paired<'a>> {
    let workers: Vec<&str> = workers.collect();
    let mut found: BTreeMap<&str, baremetal::Server> = BTreeMap::new();
    let mut unpaired = Vec::new();
    for server in servers {
        let node = node_tag(&server);
        match workers.iter().find(|w| Some(**w) == node.as_deref()) {
            Some(worker) => {
                if let Some(first) = found.insert(worker, server) {
                    return Err(InfraError::Ambiguous {
                        count: 2,
                        kind: "Elastic Metal servers",
                        tags: format!("{}={worker} (one is {})", TAG_NODE, first.id),
                    });
                }
            }
            None => unpaired.push(server),
        }
    }
    let missing: Vec<&str> = workers
        .iter()
        .copied()
        .filter(|w| !found.contains_key(w))
        .collect();
    if let ([worker], [_]) = (missing.as_slice(), unpaired.as_slice())
        && let Some(server) = unpaired.pop()
    {
        pop_common::warn!(
            "adopting the Elastic Metal server {} ({}) as the worker {worker}",
            server.name,
            server.id
        );
        found.insert(worker, server);
    }
    for server in &unpaired {
        pop_common::warn!(
            "the Elastic Metal server {} ({}) is a worker of this cluster the config does not \
             list: it gets no DNS record and is left out of the inventory (the control \
             planes' firewall still lets it in); make remove-worker NODE={} drains and deletes \
             it",
            server.name,
            server.id,
            node_tag(server).unwrap_or_else(|| server.name.clone())
        );
    }
    Ok((found, unpaired))
}

/// The node a server's `edgepop-node` tag names.
pub fn node_tag(server: &baremetal::Server) -> Option<String> {
    server.tags.iter().find_map(|t| {
        t.strip_prefix(TAG_NODE)
            .and_then(|rest| rest.strip_prefix('='))
            .map(str::to_owned)
    })
}

/// The key of the worker, ours by name and by public key; another key under our name stops the
/// run. Its id (found now, or once the step registers it) goes into the inventory: the rescue
/// system of a server ordered without an OS only accepts the keys its start names by id.
fn plan_key(
    cluster: &Cluster<'_>,
    inputs: &ApplyInputs,
    steps: &mut Steps<ApplyStep>,
    known: &mut Known,
) -> R<()> {
    let name = cluster.names().ssh_key();
    let keys = cluster.api.iam().ssh_keys(&name)?;
    if let Some(ours) = keys
        .iter()
        .find(|k| same_key(&k.public_key, &inputs.ssh_public_key))
    {
        known.ssh_key_id = Some(ours.id.clone());
        return Ok(());
    }
    if let Some(other) = keys.first() {
        return Err(InfraError::ForeignSshKey {
            name,
            id: other.id.clone(),
            path: cluster.config.ssh_public_key_path.clone(),
        });
    }
    // The same public key registered under another name (by hand, or by another tool): used as
    // it is, since IAM may refuse the same key twice, and not ours (destroy removes keys by our
    // name only, so it stays).
    if let Some(registered) = cluster
        .api
        .iam()
        .project_ssh_keys()?
        .into_iter()
        .find(|k| same_key(&k.public_key, &inputs.ssh_public_key))
    {
        pop_common::info!(
            "the public key of {} is registered already as the IAM key {} ({}): used for the rescue system, and left in place by destroy",
            cluster.config.ssh_public_key_path,
            registered.name,
            registered.id
        );
        known.ssh_key_id = Some(registered.id);
        return Ok(());
    }
    steps.create(|creates| {
        ApplyStep::RegisterSshKey(RegisterKey {
            creates,
            name,
            public_key: inputs.ssh_public_key.clone(),
        })
    });
    Ok(())
}

impl RegisterKey {
    pub fn execute(&self, cluster: &Cluster<'_>, known: &mut Known) -> R<()> {
        pop_common::info!("registering the SSH key {} in IAM", self.name);
        let key = cluster.api.iam().create_ssh_key(&CreateSshKey {
            name: self.name.clone(),
            public_key: self.public_key.clone(),
            project_id: cluster.project.to_owned(),
        })?;
        known.created.insert(self.creates, &key.id);
        known.ssh_key_id = Some(key.id);
        Ok(())
    }
}

impl Order {
    pub fn execute(&self, cluster: &Cluster<'_>, known: &mut Known) -> R<()> {
        pop_common::info!(
            "ordering the Elastic Metal server {} ({})",
            self.name,
            self.offer
        );
        let server = cluster.api.baremetal().create_server(
            cluster.zone(),
            &CreateServer {
                offer_id: self.offer_id.clone(),
                project_id: cluster.project.to_owned(),
                name: self.name.clone(),
                description: format!("edgepop worker of {}", cluster.config.cluster_name),
                tags: self.tags.clone(),
            },
        )?;
        known.created.insert(self.creates, &server.id);
        known.workers.insert(self.name.clone(), server);
        Ok(())
    }
}
