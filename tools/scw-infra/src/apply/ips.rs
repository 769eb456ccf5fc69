//! One flexible IP per control plane, tagged with its node: found by that tag, or created.

use std::collections::BTreeMap;

use scaleway::instance;
use serde::Serialize;

use super::{ApplyStep, Known};
use crate::cluster::Cluster;
use crate::error::{InfraError, R};
use crate::plan::{PlannedId, Ref, Steps};
use crate::tags::{Role, TAG_NODE, tag};

/// Creating the flexible IP of a control plane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateIp {
    pub creates: PlannedId,
    pub node: String,
    pub tags: Vec<String>,
}

/// Attaching a control plane's flexible IP to its server (a half-built run may have left it
/// loose).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attach {
    pub node: String,
    pub ip: Ref,
    pub server: Ref,
}

/// The flexible IP of every control plane, by node: found, or created by a step.
pub fn plan(
    cluster: &Cluster<'_>,
    steps: &mut Steps<ApplyStep>,
    known: &mut Known,
) -> R<BTreeMap<String, Ref>> {
    let names = cluster.names();
    let mut ips = cluster
        .api
        .instance()
        .ips(cluster.zone(), &names.tags(Role::Controlplane))?;
    let mut by_node = BTreeMap::new();
    for node in names.control_planes() {
        let node_tag = tag(TAG_NODE, &node);
        let (mut mine, rest): (Vec<instance::Ip>, Vec<instance::Ip>) =
            ips.into_iter().partition(|ip| ip.tags.contains(&node_tag));
        ips = rest;
        if mine.len() > 1 {
            return Err(InfraError::Ambiguous {
                count: mine.len(),
                kind: "flexible IPs",
                tags: node_tag,
            });
        }
        let ip = match mine.pop() {
            Some(ip) => {
                let id = Ref::Existing(ip.id.clone());
                known.ips.insert(node.clone(), ip);
                id
            }
            None => steps.create(|creates| {
                ApplyStep::CreateFlexibleIp(CreateIp {
                    creates,
                    node: node.clone(),
                    tags: names.node_tags(Role::Controlplane, &node),
                })
            }),
        };
        by_node.insert(node, ip);
    }
    Ok(by_node)
}

impl CreateIp {
    pub fn execute(&self, cluster: &Cluster<'_>, known: &mut Known) -> R<()> {
        pop_common::info!("creating the flexible IP of {}", self.node);
        let ip = cluster.api.instance().create_ip(
            cluster.zone(),
            &instance::CreateIp {
                project: cluster.project.to_owned(),
                tags: self.tags.clone(),
                ip_type: "routed_ipv4",
            },
        )?;
        known.created.insert(self.creates, &ip.id);
        known.ips.insert(self.node.clone(), ip);
        Ok(())
    }
}

impl Attach {
    pub fn execute(&self, cluster: &Cluster<'_>, known: &mut Known, step: usize) -> R<()> {
        let ip = known.created.resolve(&self.ip, step)?;
        let server = known.created.resolve(&self.server, step)?;
        pop_common::info!("attaching the flexible IP {ip} to {}", self.node);
        let attached = cluster
            .api
            .instance()
            .attach_ip(cluster.zone(), &ip, &server)?;
        known.ips.insert(self.node.clone(), attached);
        Ok(())
    }
}
