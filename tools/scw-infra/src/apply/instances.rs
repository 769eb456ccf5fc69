//! The control planes: one Instance per node name, found by its node tag or created from the
//! Talos image, in the cluster's security group, with its flexible IP, running.

use std::collections::BTreeMap;

use scaleway::instance::{self, CreateServer, RootVolume, ServerState, ServerVolumes};
use serde::Serialize;

use super::{ApplyInputs, ApplyStep, Known, image};
use crate::cluster::Cluster;
use crate::error::{InfraError, R};
use crate::plan::{PlannedId, Ref, Steps};
use crate::power;
use crate::tags::{Role, TAG_NODE, tag};

/// Creating a control plane (stopped, as the API creates every Instance), its flexible IP
/// attached at creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Create {
    pub creates: PlannedId,
    pub node: String,
    pub commercial_type: String,
    pub image: Ref,
    pub security_group: Ref,
    pub ip: Ref,
    pub tags: Vec<String>,
}

/// Giving a new control plane its machine config as user data (`cloud-init`) before its first
/// boot: Talos's Scaleway platform downloads it from the metadata service
/// (internal/app/machined/pkg/runtime/v1alpha1/platform/scaleway, Configuration), so the node
/// never opens maintenance mode. The plan shows the config's digest only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetUserData {
    pub node: String,
    pub server: Ref,
    pub key: &'static str,
    pub sha256: String,
}

/// The user data key Talos's Scaleway platform reads its config from.
pub const TALOS_USER_DATA_KEY: &str = "cloud-init";

/// Moving a control plane into the cluster's security group (a server made by hand, or by a
/// run that died, may sit in the default group, which accepts everything inbound).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MoveToGroup {
    pub node: String,
    pub server: Ref,
    pub security_group: Ref,
}

/// Every control plane, found or created, then powered on and waited for when it is not running.
pub fn plan(
    cluster: &Cluster<'_>,
    inputs: &ApplyInputs,
    steps: &mut Steps<ApplyStep>,
    known: &mut Known,
    group: &Ref,
    ips: &BTreeMap<String, Ref>,
) -> R<()> {
    let names = cluster.names();
    let mut servers = cluster
        .api
        .instance()
        .servers(cluster.zone(), &names.tags(Role::Controlplane))?;
    let mut talos_image: Option<Ref> = None;
    for node in names.control_planes() {
        let ip = ips.get(&node).cloned();
        let (server, state) = match take_by_node(&mut servers, &node)? {
            Some(found) => {
                let (server, state) = plan_found(steps, known, group, &node, ip.as_ref(), found)?;
                plan_missing_user_data(cluster, inputs, steps, &node, &server, &state)?;
                (server, state)
            }
            None => {
                let image = match &talos_image {
                    Some(image) => image.clone(),
                    None => {
                        let image = image::plan(cluster, inputs, steps)?;
                        talos_image = Some(image.clone());
                        image
                    }
                };
                let server = plan_create(cluster, inputs, steps, group, &node, ip, image)?;
                (server, ServerState::Stopped)
            }
        };
        let transition = power::instance_to(&node, &server, &state, true)?;
        steps.extend(transition.before.map(ApplyStep::WaitInstance));
        steps.extend(transition.action.map(ApplyStep::PowerInstance));
        steps.extend(transition.after.map(ApplyStep::WaitInstance));
    }
    if let Some(extra) = servers.first() {
        pop_common::warn!(
            "the Instance {} ({}) carries this cluster's control-plane tags but is not one of its {} nodes: left alone",
            extra.name,
            extra.id,
            cluster.config.control_plane.count
        );
    }
    Ok(())
}

/// A control plane found: moved into the group and given its IP when it lacks them.
fn plan_found(
    steps: &mut Steps<ApplyStep>,
    known: &mut Known,
    group: &Ref,
    node: &str,
    ip: Option<&Ref>,
    found: instance::Server,
) -> R<(Ref, ServerState)> {
    let server = Ref::Existing(found.id.clone());
    // A group this plan makes holds no server yet.
    let in_group = group
        .existing()
        .is_some_and(|id| found.security_group.as_ref().is_some_and(|g| g.id == id));
    if !in_group {
        steps.push(ApplyStep::MoveInstance(MoveToGroup {
            node: node.to_owned(),
            server: server.clone(),
            security_group: group.clone(),
        }));
    }
    if let Some(ip) = ip {
        plan_attach(steps, known, node, ip, &found)?;
    }
    let state = found.state.clone();
    known.servers.insert(node.to_owned(), found);
    Ok((server, state))
}

/// A control plane found off without its config as user data (a run cut between its creation
/// and the user data, or the user data refused) would boot into maintenance mode and take its
/// config on first-use trust: it gets the config before it is powered on, as a new one does.
fn plan_missing_user_data(
    cluster: &Cluster<'_>,
    inputs: &ApplyInputs,
    steps: &mut Steps<ApplyStep>,
    node: &str,
    server: &Ref,
    state: &ServerState,
) -> R<()> {
    let (Some(config), Some(id)) = (&inputs.control_plane_config, server.existing()) else {
        return Ok(());
    };
    // A node that proved ours has its config on its disk: its user data was cleared on purpose.
    if !state.is_off() || inputs.proved_ours.contains(id) {
        return Ok(());
    }
    let keys = cluster.api.instance().user_data_keys(cluster.zone(), id)?;
    if keys.iter().any(|k| k == TALOS_USER_DATA_KEY) {
        return Ok(());
    }
    pop_common::warn!(
        "{node} is off and holds no machine config as user data `{TALOS_USER_DATA_KEY}` (a run cut short after creating it?): it gets it before it is powered on"
    );
    steps.push(SetUserData::config_of(node, server, config));
    Ok(())
}

/// A control plane to make, from `image`, with its IP, and its machine config as user data.
fn plan_create(
    cluster: &Cluster<'_>,
    inputs: &ApplyInputs,
    steps: &mut Steps<ApplyStep>,
    group: &Ref,
    node: &str,
    ip: Option<Ref>,
    image: Ref,
) -> R<Ref> {
    let Some(ip) = ip else {
        return Err(InfraError::Unresolved {
            step: steps.len() + 1,
        });
    };
    let names = cluster.names();
    let server = steps.create(|creates| {
        ApplyStep::CreateInstance(Create {
            creates,
            node: node.to_owned(),
            commercial_type: cluster.config.control_plane.instance_type.clone(),
            image,
            security_group: group.clone(),
            ip,
            tags: names.node_tags(Role::Controlplane, node),
        })
    });
    if let Some(config) = &inputs.control_plane_config {
        steps.push(SetUserData::config_of(node, &server, config));
    }
    Ok(server)
}

/// The attach step when the node's flexible IP is not on its server: refused when it is on
/// another one.
fn plan_attach(
    steps: &mut Steps<ApplyStep>,
    known: &Known,
    node: &str,
    ip: &Ref,
    server: &instance::Server,
) -> R<()> {
    let attached = known
        .ips
        .get(node)
        .and_then(|i| i.server.as_ref())
        .map(|s| s.id.as_str());
    match attached {
        Some(id) if id == server.id => Ok(()),
        Some(_) => Err(InfraError::IpAttachedElsewhere {
            ip: ip.to_string(),
            node: node.to_owned(),
        }),
        None => {
            steps.push(ApplyStep::AttachFlexibleIp(super::ips::Attach {
                node: node.to_owned(),
                ip: ip.clone(),
                server: Ref::Existing(server.id.clone()),
            }));
            Ok(())
        }
    }
}

/// Takes the server tagged for `node` out of `servers`.
fn take_by_node(servers: &mut Vec<instance::Server>, node: &str) -> R<Option<instance::Server>> {
    let node_tag = tag(TAG_NODE, node);
    let matching: Vec<usize> = servers
        .iter()
        .enumerate()
        .filter(|(_, s)| s.tags.contains(&node_tag))
        .map(|(i, _)| i)
        .collect();
    match matching.as_slice() {
        [] => Ok(None),
        [i] => Ok(Some(servers.remove(*i))),
        _ => Err(InfraError::Ambiguous {
            count: matching.len(),
            kind: "Instances",
            tags: node_tag,
        }),
    }
}

/// The control planes' root volume, in bytes: Talos asks at least 10 GiB of a control plane's
/// disk (siderolabs/docs, talos/v1.13 getting-started/system-requirements) and grows its
/// partitions into the disk it boots from, while the image's own snapshot is 10 GB (9.3 GiB).
/// 25 GB is the disk the Talos Scaleway guide adds for a node's data
/// (platform-specific-installations/cloud-platforms/scaleway), in whole GB, Block's granularity.
pub const CONTROL_PLANE_ROOT_VOLUME_BYTES: u64 = 25_000_000_000;

impl Create {
    pub fn execute(&self, cluster: &Cluster<'_>, known: &mut Known, step: usize) -> R<()> {
        let created = &known.created;
        let body = CreateServer {
            name: self.node.clone(),
            commercial_type: self.commercial_type.clone(),
            image: created.resolve(&self.image, step)?,
            project: cluster.project.to_owned(),
            tags: self.tags.clone(),
            security_group: created.resolve(&self.security_group, step)?,
            public_ips: vec![created.resolve(&self.ip, step)?],
            dynamic_ip_required: false,
            enable_ipv6: false,
            volumes: ServerVolumes {
                root: RootVolume::block(CONTROL_PLANE_ROOT_VOLUME_BYTES),
            },
        };
        pop_common::info!("creating the Instance {}", self.node);
        let server = cluster
            .api
            .instance()
            .create_server(cluster.zone(), &body)?;
        known.created.insert(self.creates, &server.id);
        known.servers.insert(self.node.clone(), server);
        Ok(())
    }
}

impl SetUserData {
    /// The step giving `node` (`server`) the machine config `config` under Talos's key.
    fn config_of(node: &str, server: &Ref, config: &super::UserData) -> ApplyStep {
        ApplyStep::SetUserData(SetUserData {
            node: node.to_owned(),
            server: server.clone(),
            key: TALOS_USER_DATA_KEY,
            sha256: config.sha256.clone(),
        })
    }

    pub fn execute(
        &self,
        cluster: &Cluster<'_>,
        inputs: &ApplyInputs,
        known: &Known,
        step: usize,
    ) -> R<()> {
        let server = known.created.resolve(&self.server, step)?;
        let Some(config) = &inputs.control_plane_config else {
            return Err(InfraError::Unresolved { step });
        };
        pop_common::info!(
            "giving {} its machine config ({}) as user data `{}`",
            self.node,
            config.sha256,
            self.key
        );
        Ok(cluster.api.instance().set_user_data(
            cluster.zone(),
            &server,
            self.key,
            &config.bytes,
        )?)
    }
}

impl MoveToGroup {
    pub fn execute(&self, cluster: &Cluster<'_>, known: &mut Known, step: usize) -> R<()> {
        let server = known.created.resolve(&self.server, step)?;
        let group = known.created.resolve(&self.security_group, step)?;
        pop_common::info!(
            "moving {} into the control planes' security group",
            self.node
        );
        let moved = cluster
            .api
            .instance()
            .set_security_group(cluster.zone(), &server, &group)?;
        known.servers.insert(self.node.clone(), moved);
        Ok(())
    }
}
