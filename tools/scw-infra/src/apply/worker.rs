//! The Elastic Metal worker and its SSH key: the key registered in IAM (public key only), the
//! server adopted by its tags or ordered, then started and waited for until it is ready.

use scaleway::baremetal::{CreateServer, ServerStatus, Stock};
use scaleway::iam::{CreateSshKey, same_key};
use serde::Serialize;

use super::{ApplyInputs, ApplyStep, Known};
use crate::cluster::Cluster;
use crate::error::InfraError;
use crate::plan::{PlannedId, Ref, Steps};
use crate::power;
use crate::tags::Role;

type R<T> = Result<T, InfraError>;

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

/// The key, then the worker; returns whether a step of the plan makes or changes the worker
/// (then its addresses are only known once those steps have run).
pub fn plan(
    cluster: &Cluster<'_>,
    inputs: &ApplyInputs,
    steps: &mut Steps<ApplyStep>,
    known: &mut Known,
) -> R<bool> {
    plan_key(cluster, inputs, steps, known)?;
    let names = cluster.names();
    let name = names.worker().to_owned();
    let tags = names.tags(Role::Worker);
    let mut servers = cluster.api.baremetal().servers(cluster.zone(), &tags)?;
    if servers.len() > 1 {
        return Err(InfraError::Ambiguous {
            count: servers.len(),
            kind: "Elastic Metal servers",
            tags: tags.join(","),
        });
    }
    let (server, status) = match servers.pop() {
        Some(found) => {
            if found.name != name {
                pop_common::warn!(
                    "adopting the Elastic Metal server {} ({}) as the worker {name}",
                    found.name,
                    found.id
                );
            }
            if found.status.is_failed() {
                return Err(InfraError::Failed {
                    what: "Elastic Metal server",
                    name: found.name,
                    id: found.id,
                    state: found.status.to_string(),
                });
            }
            let server = Ref::Existing(found.id.clone());
            let status = found.status.clone();
            known.worker = Some(found);
            (server, status)
        }
        None => {
            let offer = cluster
                .api
                .baremetal()
                .offers(cluster.zone(), &cluster.config.worker.offer)?
                .into_iter()
                .find(|o| o.enable)
                .ok_or_else(|| InfraError::NoOffer {
                    offer: cluster.config.worker.offer.clone(),
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
    let settles = transition.changes();
    steps.extend(transition.before.map(ApplyStep::WaitWorker));
    steps.extend(transition.action.map(ApplyStep::PowerWorker));
    steps.extend(transition.after.map(ApplyStep::WaitWorker));
    Ok(settles)
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
        known.worker = Some(server);
        Ok(())
    }
}
