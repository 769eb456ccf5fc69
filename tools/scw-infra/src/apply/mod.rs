//! `apply`: plan, then execute. The plan reads the cluster's resources (found again by their
//! tags, [`crate::tags`]) and lists as typed steps what is missing or not as it should be, one
//! module per resource; a resource that does not exist yet is referred to by the step that
//! creates it ([`crate::plan::Ref::Planned`]), and an address that will only be known once an
//! earlier step has run is an [`Address::Pending`]. Every refusal (a foreign DNS record, a tag
//! carried twice, no such offer) happens while planning, before anything changes.
//!
//! Executing runs the steps in order and nothing else, keeping what it learns of each node
//! ([`Known`]); the `NodeInventory` is then made of what was found and what was made. A second
//! apply plans nothing and makes no mutating call.

pub mod dns;
pub mod firewall;
pub mod image;
pub mod image_file;
pub mod instances;
pub mod ips;
pub mod registry;
pub mod worker;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use pop_common::records::{Node, NodeInventory, NodeKind, NodeRole, Version};
use scaleway::baremetal;
use scaleway::instance;
use scaleway::s3::multipart::Multipart;
use serde::Serialize;

use crate::cluster::Cluster;
use crate::error::{InfraError, R};
use crate::plan::{Created, Ref, Steps};
use crate::power::{InstancePower, WaitInstance, WaitWorker, WorkerPower};
use image_file::TalosSource;

/// What `apply` is given besides the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyInputs {
    /// The Talos version whose image boots the control planes.
    pub talos_version: String,
    /// The pinned image to import when no Instance image of this version and digest exists.
    pub talos_source: Option<TalosSource>,
    /// The worker's SSH public key (one line).
    pub ssh_public_key: String,
    /// How the image goes up to Object Storage: part size, parts at once.
    pub upload: Multipart,
    /// The control planes' Talos machine config, given to each new one as its user data
    /// (`cloud-init`), which Talos's Scaleway platform reads at boot: it boots configured, with
    /// no maintenance mode open on the network. A secret: never printed, only its digest.
    pub control_plane_config: Option<UserData>,
    /// The servers an earlier inventory records as proved ours (`proved_ours`): their config is
    /// on their disk, and their user data was cleared on purpose, not left unset by a cut run.
    pub proved_ours: std::collections::BTreeSet<String>,
}

/// A machine config given as user data: its bytes, never printed, and their digest.
#[derive(Clone, PartialEq, Eq)]
pub struct UserData {
    pub bytes: Vec<u8>,
    pub sha256: String,
}

impl UserData {
    pub fn new(bytes: Vec<u8>) -> UserData {
        let sha256 = pop_common::records::Digest::sha256(&bytes).into();
        UserData { bytes, sha256 }
    }
}

impl std::fmt::Debug for UserData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.sha256)
    }
}

/// One step of `apply`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum ApplyStep {
    CreateSecurityGroup(firewall::CreateGroup),
    CreateFlexibleIp(ips::CreateIp),
    ImportTalosImage(image::Import),
    WaitTalosImage(image::WaitImage),
    CreateInstance(instances::Create),
    SetUserData(instances::SetUserData),
    MoveInstance(instances::MoveToGroup),
    AttachFlexibleIp(ips::Attach),
    PowerInstance(InstancePower),
    WaitInstance(WaitInstance),
    RegisterSshKey(worker::RegisterKey),
    OrderWorker(worker::Order),
    PowerWorker(WorkerPower),
    WaitWorker(WaitWorker),
    SetFirewallRules(firewall::SetRules),
    SetDnsRecords(dns::SetRecords),
    /// The zone is not hosted at Scaleway: the records are shown, for the operator to create.
    ShowDnsRecords(dns::SetRecords),
    CreateRegistryNamespace(registry::Create),
}

/// A plan of `apply`: its steps, and what the reads found (the starting point of execution).
#[derive(Debug, Clone)]
pub struct ApplyPlan {
    pub steps: Steps<ApplyStep>,
    known: Known,
}

/// Which address of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Ipv4,
    Ipv6,
}

/// A node of the cluster, as an address names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeOf {
    ControlPlane(String),
    /// The worker (the name of the config; an adopted server may be named otherwise).
    Worker(String),
}

/// A node's public address, as a step names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum Address {
    /// Known when the plan was made.
    Known(IpAddr),
    /// Known once an earlier step has made the node or its IP (a worker delivered without
    /// IPv6 has none, and the address is then left out).
    Pending { address_of: NodeOf, family: Family },
}

impl Address {
    /// The address, once the steps before have run.
    pub fn resolve(&self, known: &Known) -> Option<IpAddr> {
        match self {
            Address::Known(address) => Some(*address),
            Address::Pending { address_of, family } => known.address(address_of, *family),
        }
    }
}

/// What is known of the cluster's nodes: found by the plan's reads, then updated by each step
/// that creates, changes or waits for one.
#[derive(Debug, Clone, Default)]
pub struct Known {
    pub created: Created,
    /// The control planes' flexible IPs, by node.
    pub ips: BTreeMap<String, instance::Ip>,
    /// The control planes, by node.
    pub servers: BTreeMap<String, instance::Server>,
    /// The workers, by the config's name.
    pub workers: BTreeMap<String, baremetal::Server>,
    /// The worker servers of the cluster the config no longer lists: out of DNS, still let in.
    pub leaving: Vec<baremetal::Server>,
    /// The security group's editable rules as found, to keep the ids of those that stay.
    pub rules: Vec<(firewall::RuleSpec, String)>,
    /// Its editable rules that are not inbound accept rules (none of the cluster's).
    pub foreign_rules: usize,
    /// The IAM id of the worker's SSH key, found or registered.
    pub ssh_key_id: Option<String>,
}

impl Known {
    /// The public address of `node` of `family`, as far as it is known now.
    pub fn address(&self, node: &NodeOf, family: Family) -> Option<IpAddr> {
        match node {
            NodeOf::Worker(name) => {
                let worker = self.workers.get(name)?;
                match family {
                    Family::Ipv4 => worker.ipv4().map(IpAddr::V4),
                    Family::Ipv6 => worker.ipv6().map(IpAddr::V6),
                }
            }
            NodeOf::ControlPlane(name) => {
                let server = self.servers.get(name);
                match family {
                    Family::Ipv4 => control_plane_ipv4(server, self.ips.get(name)).map(IpAddr::V4),
                    Family::Ipv6 => server.and_then(control_plane_ipv6).map(IpAddr::V6),
                }
            }
        }
    }
}

/// Reads the cluster's resources and lists what `apply` must do, in the order it runs: the
/// registry namespace (free, but its name is unique across Scaleway, so it is the step most
/// likely to be refused: first, before anything billed), the security group, the flexible IPs,
/// the control planes (and the Talos image, when one must be made), the worker and its SSH key,
/// the firewall rules, the DNS records.
pub fn plan(cluster: &Cluster<'_>, inputs: &ApplyInputs) -> R<ApplyPlan> {
    let mut steps = Steps::default();
    let mut known = Known::default();
    registry::plan(cluster, &mut steps)?;
    let group = firewall::plan_group(cluster, &mut steps, &mut known)?;
    let ips = ips::plan(cluster, &mut steps, &mut known)?;
    instances::plan(cluster, inputs, &mut steps, &mut known, &group, &ips)?;
    let workers_settle = worker::plan(cluster, inputs, &mut steps, &mut known)?;
    let names = cluster.names();
    // A control plane's address is its flexible IP's: pending while a step makes the IP (the
    // server's own address, if it has one, is not the one it will keep).
    let control_planes: Vec<Address> = names
        .control_planes()
        .into_iter()
        .filter_map(|node| {
            let of = NodeOf::ControlPlane(node.clone());
            match ips.get(&node) {
                Some(Ref::Planned(_)) => Some(Address::Pending {
                    address_of: of,
                    family: Family::Ipv4,
                }),
                _ => address(&known, of, Family::Ipv4, true),
            }
        })
        .collect();
    let workers: Vec<&str> = cluster.config.worker_names().collect();
    let addresses_of = |names: &[&str]| -> Vec<Address> {
        names
            .iter()
            .flat_map(|name| {
                let settles = workers_settle.contains(*name);
                let known = &known;
                [Family::Ipv4, Family::Ipv6]
                    .into_iter()
                    .filter_map(move |family| {
                        address(known, NodeOf::Worker((*name).to_owned()), family, settles)
                    })
            })
            .collect()
    };
    let worker_addresses = addresses_of(&workers);
    let serving = addresses_of(&serving_workers(&known, inputs, &workers));
    // A leaving worker is still a node until remove-worker has drained it: let in, not named.
    let let_in: Vec<Address> = known
        .leaving
        .iter()
        .flat_map(|s| s.public_addresses().map(Address::Known))
        .chain(worker_addresses.iter().cloned())
        .collect();
    firewall::plan_rules(
        cluster,
        &mut steps,
        &known,
        &group,
        &control_planes,
        &let_in,
    )?;
    dns::plan(cluster, &mut steps, &control_planes, &serving)?;
    Ok(ApplyPlan { steps, known })
}

/// The workers the edge names point at: those an earlier inventory records as proved ours
/// (configured, running our Talos), so that a worker added to a running edge gets traffic only
/// once it can serve it (`make add-worker` applies again once the edge runs there); every worker
/// while none is (a new cluster, whose names must resolve for its first certificates).
fn serving_workers<'a>(known: &Known, inputs: &ApplyInputs, workers: &[&'a str]) -> Vec<&'a str> {
    let proved: Vec<&str> = workers
        .iter()
        .copied()
        .filter(|name| {
            known
                .workers
                .get(*name)
                .is_some_and(|s| inputs.proved_ours.contains(&s.id))
        })
        .collect();
    if proved.is_empty() {
        workers.to_vec()
    } else {
        proved
    }
}

/// The address of `node` as a step should name it: the one known now; else, when a step of this
/// plan will make or change the node (`settles`), the one it will have; else none.
fn address(known: &Known, node: NodeOf, family: Family, settles: bool) -> Option<Address> {
    match known.address(&node, family) {
        Some(address) => Some(Address::Known(address)),
        None if settles => Some(Address::Pending {
            address_of: node,
            family,
        }),
        None => None,
    }
}

/// Runs the plan's steps in order; returns the inventory of the nodes as they now are.
pub fn execute(cluster: &Cluster<'_>, inputs: &ApplyInputs, plan: ApplyPlan) -> R<NodeInventory> {
    let mut known = plan.known;
    for (n, step) in plan.steps.numbered() {
        match step {
            ApplyStep::CreateSecurityGroup(s) => s.execute(cluster, &mut known)?,
            ApplyStep::CreateFlexibleIp(s) => s.execute(cluster, &mut known)?,
            ApplyStep::ImportTalosImage(s) => s.execute(cluster, inputs, &mut known)?,
            ApplyStep::WaitTalosImage(s) => s.execute(cluster)?,
            ApplyStep::CreateInstance(s) => s.execute(cluster, &mut known, n)?,
            ApplyStep::SetUserData(s) => s.execute(cluster, inputs, &known, n)?,
            ApplyStep::MoveInstance(s) => s.execute(cluster, &mut known, n)?,
            ApplyStep::AttachFlexibleIp(s) => s.execute(cluster, &mut known, n)?,
            ApplyStep::PowerInstance(s) => s.execute(cluster, &known.created, n)?,
            ApplyStep::WaitInstance(s) => {
                let server = s.execute(cluster, &known.created, n)?;
                known.servers.insert(s.node.clone(), server);
            }
            ApplyStep::RegisterSshKey(s) => s.execute(cluster, &mut known)?,
            ApplyStep::OrderWorker(s) => s.execute(cluster, &mut known)?,
            ApplyStep::PowerWorker(s) => s.execute(cluster, &known.created, n)?,
            ApplyStep::WaitWorker(s) => {
                let server = s.execute(cluster, &known.created, n)?;
                known.workers.insert(s.name.clone(), server);
            }
            ApplyStep::SetFirewallRules(s) => s.execute(cluster, &known, n)?,
            ApplyStep::SetDnsRecords(s) => s.execute(cluster, &known)?,
            ApplyStep::ShowDnsRecords(s) => s.show(&known),
            ApplyStep::CreateRegistryNamespace(s) => s.execute(cluster)?,
        }
    }
    inventory(cluster, &known)
}

/// The nodes as `known` has them after the steps: every control plane, then every worker.
fn inventory(cluster: &Cluster<'_>, known: &Known) -> R<NodeInventory> {
    let names = cluster.names();
    let mut nodes = Vec::new();
    for name in names.control_planes() {
        let server = known
            .servers
            .get(&name)
            .ok_or_else(|| InfraError::Vanished {
                what: "Instance",
                name: name.clone(),
                id: String::new(),
            })?;
        nodes.push(instance_node(server, known.ips.get(&name)));
    }
    for worker in &cluster.config.workers {
        let server = known
            .workers
            .get(&worker.name)
            .ok_or_else(|| InfraError::Vanished {
                what: "Elastic Metal server",
                name: worker.name.clone(),
                id: String::new(),
            })?;
        // A worker is named as the config names it, whatever an adopted server is called at
        // Scaleway: that name is its Talos hostname (a HostnameConfig patch), hence its
        // Kubernetes node name (PlatformInputs.edge_nodes).
        nodes.push(baremetal_node(server, worker));
    }
    Ok(NodeInventory {
        kind: Default::default(),
        version: Version,
        cluster_name: cluster.config.cluster_name.clone(),
        cluster_endpoint: cluster.config.cluster_endpoint.clone(),
        ssh_key_ids: known.ssh_key_id.iter().cloned().collect(),
        nodes,
    })
}

pub(crate) fn control_plane_ipv4(
    server: Option<&instance::Server>,
    ip: Option<&instance::Ip>,
) -> Option<Ipv4Addr> {
    ip.and_then(|i| i.address.as_deref()?.parse().ok())
        .or_else(|| {
            server?
                .public_ips
                .iter()
                .find_map(|i| i.address.parse().ok())
        })
}

fn control_plane_ipv6(server: &instance::Server) -> Option<Ipv6Addr> {
    server
        .public_ips
        .iter()
        .find_map(|i| i.address.parse().ok())
}

fn instance_node(server: &instance::Server, ip: Option<&instance::Ip>) -> Node {
    Node {
        name: server.name.clone(),
        role: NodeRole::Controlplane,
        kind: NodeKind::Instance,
        zone: server.zone.clone(),
        id: server.id.clone(),
        public_ipv4: control_plane_ipv4(Some(server), ip),
        public_ipv6: control_plane_ipv6(server),
        private_ipv4: server.private_ip.as_deref().and_then(|a| a.parse().ok()),
        install_disk: None,
        steps: BTreeMap::new(),
    }
}

fn baremetal_node(server: &baremetal::Server, worker: &crate::config::Worker) -> Node {
    Node {
        name: worker.name.clone(),
        role: NodeRole::Worker,
        kind: NodeKind::ElasticMetal,
        zone: server.zone.clone(),
        id: server.id.clone(),
        public_ipv4: server.ipv4(),
        public_ipv6: server.ipv6(),
        private_ipv4: None,
        install_disk: Some(worker.install_disk.clone()),
        steps: BTreeMap::new(),
    }
}
