//! What `apply`, `power` and `destroy` do, over the typed endpoints. No state file: every resource
//! is found again by its tags.
//!
//! # Tag scheme
//!
//! | tag | on | meaning |
//! | --- | --- | --- |
//! | `edgepop-cluster=<cluster_name>` | every taggable resource | it belongs to this cluster |
//! | `edgepop-role=controlplane` | Instances, their flexible IPs | a control plane |
//! | `edgepop-role=controlplane-firewall` | the security group | the control planes' group |
//! | `edgepop-role=worker` | the Elastic Metal server | the worker |
//! | `edgepop-node=<node name>` | Instances, flexible IPs, Elastic Metal | pairs an IP with its server |
//! | `edgepop-talos=<version>` | the Instance image (looked up) | the Talos image to boot |
//!
//! What cannot carry tags is matched as exactly as the API allows: DNS records by their
//! `comment` (`edgepop-cluster=<name>`), the IAM SSH key by its name (`edgepop-<cluster>`) and
//! its public key, the registry namespace by its name (never destroyed: it holds the images, and
//! it has no tags to prove it is ours).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use pop_common::records::{Node, NodeInventory, NodeKind, NodeRole, Version};
use serde_json::{Value, json};

use crate::api::client::{ApiError, Sleeper};
use crate::api::endpoints::Scaleway;
use crate::api::http::Transport;
use crate::api::types::*;
use crate::config::InfraConfig;
use crate::image::{self, ImageError, TalosSource};
use crate::s3::{S3, S3Error};

pub const TAG_CLUSTER: &str = "edgepop-cluster";
pub const TAG_ROLE: &str = "edgepop-role";
pub const TAG_NODE: &str = "edgepop-node";
pub const TAG_TALOS: &str = "edgepop-talos";

pub fn tag(key: &str, value: &str) -> String {
    format!("{key}={value}")
}

/// How long to wait for a state, and how often to look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    pub poll: Duration,
    pub instance: Duration,
    /// Elastic Metal delivery can take most of an hour.
    pub elastic_metal: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum InfraError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    S3(#[from] S3Error),
    #[error("timed out after {seconds} s waiting for {what}")]
    Timeout { what: String, seconds: u64 },
}

type R<T> = Result<T, InfraError>;

/// One thing `destroy` removed (or, in a dry run, would remove).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Removed {
    pub removed: &'static str,
    pub id: String,
    pub name: String,
}

/// The cluster's resources on Scaleway.
#[derive(Debug)]
pub struct Infra<'a, T, S> {
    pub api: Scaleway<'a, T, S>,
    pub config: &'a InfraConfig,
    pub project: &'a str,
    pub talos_version: &'a str,
    pub waits: Waits,
    /// The worker's SSH public key (one line).
    pub ssh_public_key: &'a str,
    /// Object Storage, for the Talos image import and its removal.
    pub s3: Option<&'a S3<T, S>>,
    /// The bucket the image is uploaded to (`edgepop-<cluster>-<project prefix>`).
    pub bucket: String,
    /// The pinned image to import when no Instance image of this version and digest exists.
    pub talos_source: Option<TalosSource>,
    /// Multipart upload part size, in bytes.
    pub part_size: usize,
}

impl<'a, T: Transport, S: Sleeper> Infra<'a, T, S> {
    fn zone(&self) -> &str {
        &self.config.zone
    }

    fn cluster_tag(&self) -> String {
        tag(TAG_CLUSTER, &self.config.cluster_name)
    }

    fn tags(&self, role: &str) -> Vec<String> {
        vec![self.cluster_tag(), tag(TAG_ROLE, role)]
    }

    fn node_tags(&self, role: &str, node: &str) -> Vec<String> {
        let mut tags = self.tags(role);
        tags.push(tag(TAG_NODE, node));
        tags
    }

    pub fn control_plane_names(&self) -> Vec<String> {
        (1..=self.config.control_plane.count)
            .map(|i| format!("{}-cp-{i}", self.config.cluster_name))
            .collect()
    }

    fn worker_name(&self) -> String {
        self.config.worker.name.clone()
    }

    fn ssh_key_name(&self) -> String {
        format!("edgepop-{}", self.config.cluster_name)
    }

    fn dry(&self) -> bool {
        self.api.client.dry_run()
    }

    // ---- apply -----------------------------------------------------------------------------

    /// Ensures every resource; returns the inventory (`None` in a dry run: ids are not known).
    pub fn apply(&self) -> R<Option<NodeInventory>> {
        let zone = self.zone().to_owned();
        let group = self.ensure_security_group()?;
        let ips = self.ensure_flexible_ips()?;
        let mut servers = self.api.servers(&zone, &self.tags("controlplane"))?;
        let mut image: Option<String> = None;
        let mut cp_nodes = Vec::new();
        for name in self.control_plane_names() {
            let ip = ips.get(&name).cloned();
            let found = take_by_node(&mut servers, &name)?;
            let server = match found {
                Some(server) => Some(server),
                None => {
                    let image = match &image {
                        Some(id) => id.clone(),
                        None => {
                            let id = self.talos_image()?;
                            image = Some(id.clone());
                            id
                        }
                    };
                    let ip_id = ip
                        .as_ref()
                        .map_or_else(|| placeholder("ip", &name), |i| i.id.clone());
                    pop_common::info!("creating the Instance {name}");
                    self.api.create_server(
                        &zone,
                        json!({
                            "name": name,
                            "commercial_type": self.config.control_plane.instance_type,
                            "image": image,
                            "project": self.project,
                            "tags": self.node_tags("controlplane", &name),
                            "security_group": group,
                            "public_ips": [ip_id],
                            "dynamic_ip_required": false,
                            "enable_ipv6": false,
                        }),
                    )?
                }
            };
            let Some(mut server) = server else {
                continue; // dry run
            };
            // A server made by hand or by a run that died may sit in the default group, which
            // accepts everything inbound.
            if server.security_group.as_ref().map(|g| g.id.as_str()) != Some(group.as_str()) {
                pop_common::info!("moving {name} into the control planes' security group");
                if let Some(updated) = self
                    .api
                    .set_server_security_group(&zone, &server.id, &group)?
                {
                    server = updated;
                }
            }
            // The flexible IP of this node, attached (a half-built run may have left it loose).
            if let Some(ip) = &ip {
                let attached = ip.server.as_ref().map(|s| s.id.as_str());
                if attached != Some(server.id.as_str()) {
                    if attached.is_some() {
                        return Err(InfraError::Refused(format!(
                            "the flexible IP {} tagged for {name} is attached to another server",
                            ip.id
                        )));
                    }
                    pop_common::info!("attaching the flexible IP {} to {name}", ip.id);
                    self.api.attach_ip(&zone, &ip.id, &server.id)?;
                }
            }
            let server = self.ensure_instance_running(server)?;
            cp_nodes.push(instance_node(&server, ip.as_ref()));
        }
        if let Some(extra) = servers.first() {
            pop_common::warn!(
                "the Instance {} ({}) carries this cluster's control-plane tags but is not one of its {} nodes: left alone",
                extra.name,
                extra.id,
                self.config.control_plane.count
            );
        }
        let worker = self.ensure_worker()?;
        let worker_node = worker.as_ref().map(baremetal_node);

        let mut addresses: Vec<IpAddr> = cp_nodes
            .iter()
            .filter_map(|n| n.public_ipv4.map(IpAddr::V4))
            .collect();
        if let Some(w) = &worker_node {
            addresses.extend(w.public_ipv4.map(IpAddr::V4));
            addresses.extend(w.public_ipv6.map(IpAddr::V6));
        }
        self.ensure_rules(&group, &addresses)?;
        self.ensure_dns(&cp_nodes, worker_node.as_ref())?;
        self.ensure_registry()?;

        if self.dry() {
            return Ok(None);
        }
        let mut nodes = cp_nodes;
        nodes.extend(worker_node);
        Ok(Some(NodeInventory {
            kind: Default::default(),
            version: Version,
            cluster_name: self.config.cluster_name.clone(),
            cluster_endpoint: self.config.cluster_endpoint.clone(),
            nodes,
        }))
    }

    /// The group's id (a placeholder in a dry run that would create it).
    fn ensure_security_group(&self) -> R<String> {
        let tags = self.tags("controlplane-firewall");
        let groups = self.api.security_groups(self.zone(), &tags)?;
        match groups.as_slice() {
            [group] => {
                if group.inbound_default_policy != "drop" {
                    return Err(InfraError::Refused(format!(
                        "the security group {} ({}) tagged for this cluster accepts inbound traffic by default; \
                         set its inbound default policy to drop, or delete it",
                        group.name, group.id
                    )));
                }
                Ok(group.id.clone())
            }
            [] => {
                pop_common::info!("creating the control planes' security group");
                let created = self.api.create_security_group(
                    self.zone(),
                    json!({
                        "name": format!("{}-controlplane", self.config.cluster_name),
                        "description": "edgepop control planes: inbound dropped unless a rule accepts it",
                        "project": self.project,
                        "tags": tags,
                        "stateful": true,
                        "inbound_default_policy": "drop",
                        "outbound_default_policy": "accept",
                        "enable_default_security": true,
                    }),
                )?;
                Ok(created.map_or_else(
                    || placeholder("security-group", &self.config.cluster_name),
                    |g| g.id,
                ))
            }
            many => Err(InfraError::Refused(format!(
                "{} security groups carry the tags {}: keep one",
                many.len(),
                tags.join(",")
            ))),
        }
    }

    /// The rules seed 004 needs, and only those: 6443 and 50000 from the admin CIDRs; between
    /// nodes 6443, 50000-50001, 10250, 2379-2380 (TCP) and 51871 (UDP, WireGuard).
    pub fn desired_rules(&self, nodes: &[IpAddr]) -> Vec<RuleSpec> {
        let mut rules = Vec::new();
        for cidr in &self.config.admin_cidrs {
            for port in [6443, 50000] {
                rules.push(RuleSpec::tcp(*cidr, port, port));
            }
        }
        for addr in nodes {
            let net = IpNet::from(*addr);
            for (from, to) in [(6443, 6443), (50000, 50001), (10250, 10250), (2379, 2380)] {
                rules.push(RuleSpec::tcp(net, from, to));
            }
            rules.push(RuleSpec {
                protocol: "UDP",
                ip_range: net,
                from: 51871,
                to: 51871,
            });
        }
        rules.sort();
        rules.dedup();
        rules
    }

    /// Makes the group's editable rules exactly the plan: nothing is sent when they already are,
    /// else one call replaces them all (rules already right keep their ids).
    fn ensure_rules(&self, group: &str, nodes: &[IpAddr]) -> R<()> {
        let desired = self.desired_rules(nodes);
        let existing = if group.starts_with('<') {
            Vec::new() // dry run: the group does not exist yet
        } else {
            self.api.security_group_rules(self.zone(), group)?
        };
        let mut kept: Vec<(RuleSpec, &str)> = Vec::new();
        let mut extra = 0;
        for rule in existing.iter().filter(|r| r.editable) {
            match RuleSpec::from_rule(rule) {
                Some(spec) if desired.contains(&spec) && !kept.iter().any(|(k, _)| *k == spec) => {
                    kept.push((spec, &rule.id));
                }
                _ => extra += 1,
            }
        }
        if extra == 0 && kept.len() == desired.len() {
            return Ok(());
        }
        pop_common::info!(
            "setting the {} firewall rules ({} kept, {} removed)",
            desired.len(),
            kept.len(),
            extra
        );
        let rules: Vec<Value> = desired
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let mut rule = json!({
                    "action": "accept",
                    "protocol": spec.protocol,
                    "direction": "inbound",
                    "ip_range": spec.ip_range.to_string(),
                    "dest_port_from": spec.from,
                    "dest_port_to": if spec.to == spec.from { Value::Null } else { json!(spec.to) },
                    "position": i + 1,
                });
                if let Some((_, id)) = kept.iter().find(|(k, _)| k == spec) {
                    rule["id"] = json!(id);
                }
                rule
            })
            .collect();
        self.api.set_rules(self.zone(), group, rules)?;
        Ok(())
    }

    /// One flexible IP per control plane, tagged with its node, by node name.
    fn ensure_flexible_ips(&self) -> R<BTreeMap<String, InstanceIp>> {
        let mut ips = self.api.ips(self.zone(), &self.tags("controlplane"))?;
        let mut by_node = BTreeMap::new();
        for name in self.control_plane_names() {
            let node_tag = tag(TAG_NODE, &name);
            let mut mine: Vec<InstanceIp> = Vec::new();
            let mut rest = Vec::new();
            for ip in ips.drain(..) {
                if ip.tags.contains(&node_tag) {
                    mine.push(ip);
                } else {
                    rest.push(ip);
                }
            }
            ips = rest;
            if mine.len() > 1 {
                return Err(InfraError::Refused(format!(
                    "{} flexible IPs carry the tag {node_tag}: keep one",
                    mine.len()
                )));
            }
            let ip = match mine.pop() {
                Some(ip) => Some(ip),
                None => {
                    pop_common::info!("creating the flexible IP of {name}");
                    self.api.create_ip(
                        self.zone(),
                        self.project,
                        &self.node_tags("controlplane", &name),
                    )?
                }
            };
            if let Some(ip) = ip {
                by_node.insert(name, ip);
            }
        }
        Ok(by_node)
    }

    /// The Instance image tagged with this Talos version (and the pinned digest, when one is
    /// given), imported when it is missing and a pinned source is given.
    fn talos_image(&self) -> R<String> {
        let mut tags = vec![tag(TAG_TALOS, self.talos_version)];
        if let Some(source) = &self.talos_source {
            tags.push(image::digest_tag(&source.sha256));
        }
        let images = self.api.images(self.zone(), &tags)?;
        if let Some(found) = images
            .iter()
            .find(|i| i.arch == "x86_64" && i.state != "error")
        {
            if found.state == "available" {
                return Ok(found.id.clone());
            }
            return self.wait_image(&found.id);
        }
        match (&self.talos_source, self.s3) {
            (Some(source), Some(s3)) => self.import_image(source, s3, tags),
            _ if self.dry() => Ok(placeholder("image", self.talos_version)),
            _ => Err(InfraError::Refused(format!(
                "no available x86_64 Instance image tagged {} in {}, and no pinned image to import \
                 (--talos-image-url and --talos-image-sha256). Import scaleway-amd64 of Talos {} \
                 by hand (scw block snapshot import-from-object-storage, then scw instance image \
                 create ... tags.0={}) or pass the pins, and run again",
                tags[0],
                self.zone(),
                self.talos_version,
                tags[0]
            ))),
        }
    }

    fn import_image(
        &self,
        source: &TalosSource,
        s3: &S3<T, S>,
        mut tags: Vec<String>,
    ) -> R<String> {
        let key = format!(
            "talos/{}-{}.qcow2",
            self.talos_version,
            source.sha256.get(..12).unwrap_or(&source.sha256)
        );
        let name = format!("talos-{}", self.talos_version);
        tags.push(self.cluster_tag());
        if self.dry() {
            // The download and conversion are local; the calls are planned as they would go.
            pop_common::info!("would download {} (sha256 {})", source.url, source.sha256);
            let client = &self.api.client;
            client.plan_external("PUT", &format!("s3:/{}/{key}", self.bucket));
            self.api.import_snapshot(
                self.zone(),
                json!({"bucket": self.bucket, "key": key, "name": name,
                       "project_id": self.project, "tags": tags}),
            )?;
            self.api.create_image(
                self.zone(),
                json!({"name": name, "root_volume": placeholder("snapshot", &name),
                       "arch": "x86_64", "project": self.project, "tags": tags}),
            )?;
            return Ok(placeholder("image", self.talos_version));
        }
        let work = tempfile::Builder::new()
            .prefix("scw-infra-image")
            .tempdir()
            .map_err(|e| InfraError::Refused(format!("cannot make a work directory: {e}")))?;
        let zst = image::download(source, work.path())?;
        let (qcow2, raw_size) = image::convert(&zst, work.path())?;
        let size = std::fs::metadata(&qcow2).map(|m| m.len()).unwrap_or(0);
        if !s3.bucket_exists(&self.bucket)? {
            pop_common::info!("creating the bucket {}", self.bucket);
            s3.create_bucket(&self.bucket)?;
        }
        if s3.object_size(&self.bucket, &key)? == Some(size) {
            pop_common::info!("{key} is already uploaded");
        } else {
            s3.upload_file(&self.bucket, &key, &qcow2, self.part_size)?;
        }
        pop_common::info!("importing {key} as a Block snapshot");
        let snapshot = self
            .api
            .import_snapshot(
                self.zone(),
                json!({
                    "bucket": self.bucket,
                    "key": key,
                    "name": name,
                    "project_id": self.project,
                    "tags": tags,
                    "size": image::snapshot_size(raw_size),
                }),
            )?
            .ok_or_else(|| InfraError::Refused("no snapshot in the answer".into()))?;
        let what = format!("the snapshot {name} to be available");
        self.wait(&what, self.waits.instance, || {
            match self.api.snapshot(self.zone(), &snapshot.id)? {
                Some(s) if s.status == "available" => Ok(true),
                Some(s) if s.status == "error" => Err(InfraError::Refused(format!(
                    "the import of {key} failed (snapshot {} in error)",
                    s.id
                ))),
                Some(_) => Ok(false),
                None => Err(InfraError::Refused(format!(
                    "the snapshot {} vanished",
                    snapshot.id
                ))),
            }
        })?;
        let created = self
            .api
            .create_image(
                self.zone(),
                json!({
                    "name": name,
                    "root_volume": snapshot.id,
                    "arch": "x86_64",
                    "project": self.project,
                    "tags": tags,
                }),
            )?
            .ok_or_else(|| InfraError::Refused("no image in the answer".into()))?;
        if created.state == "available" {
            return Ok(created.id);
        }
        self.wait_image(&created.id)
    }

    fn wait_image(&self, id: &str) -> R<String> {
        let what = format!("the image {id} to be available");
        self.wait(&what, self.waits.instance, || {
            match self.api.image(self.zone(), id)? {
                Some(i) if i.state == "available" => Ok(true),
                Some(i) if i.state == "error" => {
                    Err(InfraError::Refused(format!("the image {id} is in error")))
                }
                Some(_) => Ok(false),
                None => Err(InfraError::Refused(format!("the image {id} vanished"))),
            }
        })?;
        Ok(id.to_owned())
    }

    fn ensure_instance_running(&self, server: InstanceServer) -> R<InstanceServer> {
        if server.state == "running" {
            return Ok(server);
        }
        if server.state == "stopped" || server.state == "stopped in place" {
            pop_common::info!("powering on {}", server.name);
            if self
                .api
                .server_action(self.zone(), &server.id, "poweron")?
                .is_none()
            {
                return Ok(server);
            }
        }
        self.wait_instance(&server.id, &server.name, "running")
    }

    /// Polls until the Instance is in `state`, within the bound.
    fn wait_instance(&self, id: &str, name: &str, state: &str) -> R<InstanceServer> {
        let what = format!("the Instance {name} to be {state}");
        let mut found = None;
        self.wait(&what, self.waits.instance, || {
            match self.api.server(self.zone(), id)? {
                Some(s) if s.state == state => {
                    found = Some(s);
                    Ok(true)
                }
                Some(_) => Ok(false),
                None => Err(InfraError::Refused(format!(
                    "the Instance {name} ({id}) vanished"
                ))),
            }
        })?;
        found.ok_or_else(|| InfraError::Refused(format!("the Instance {name} ({id}) vanished")))
    }

    /// Calls `done` until it says yes, sleeping `poll` between calls, for at most `limit`
    /// (counted in polls, so an injected sleeper that does not sleep still stops).
    fn wait(&self, what: &str, limit: Duration, mut done: impl FnMut() -> R<bool>) -> R<()> {
        pop_common::info!("waiting for {what} (at most {} s)", limit.as_secs());
        let poll = self.waits.poll.max(Duration::from_millis(1));
        let max_polls = (limit.as_millis() / poll.as_millis()).clamp(1, 100_000);
        let start = Instant::now();
        let mut polls = 0u128;
        loop {
            if done()? {
                return Ok(());
            }
            polls += 1;
            if polls > max_polls || start.elapsed() > limit + poll {
                return Err(InfraError::Timeout {
                    what: what.to_owned(),
                    seconds: limit.as_secs(),
                });
            }
            self.api.client.sleeper().sleep(self.waits.poll);
        }
    }

    /// The worker: adopted by its tags, or ordered; its SSH key registered in IAM.
    fn ensure_worker(&self) -> R<Option<BaremetalServer>> {
        self.ensure_ssh_key()?;
        let name = self.worker_name();
        let mut servers = self
            .api
            .baremetal_servers(self.zone(), &self.tags("worker"))?;
        if servers.len() > 1 {
            return Err(InfraError::Refused(format!(
                "{} Elastic Metal servers carry this cluster's worker tags: keep one",
                servers.len()
            )));
        }
        let server = match servers.pop() {
            Some(server) => {
                if server.name != name {
                    pop_common::warn!(
                        "adopting the Elastic Metal server {} ({}) as the worker {name}",
                        server.name,
                        server.id
                    );
                }
                server
            }
            None => {
                let offers = self
                    .api
                    .baremetal_offers(self.zone(), &self.config.worker.offer)?;
                let Some(offer) = offers.iter().find(|o| o.enable) else {
                    return Err(InfraError::Refused(format!(
                        "no Elastic Metal offer named {} in {} (field worker.offer)",
                        self.config.worker.offer,
                        self.zone()
                    )));
                };
                if offer.stock == "empty" {
                    return Err(InfraError::Refused(format!(
                        "the offer {} is out of stock in {}",
                        offer.name,
                        self.zone()
                    )));
                }
                pop_common::info!("ordering the Elastic Metal server {name} ({})", offer.name);
                let created = self.api.create_baremetal_server(
                    self.zone(),
                    json!({
                        "offer_id": offer.id,
                        "project_id": self.project,
                        "name": name,
                        "description": format!("edgepop worker of {}", self.config.cluster_name),
                        "tags": self.node_tags("worker", &name),
                    }),
                )?;
                match created {
                    Some(server) => server,
                    None => return Ok(None),
                }
            }
        };
        if server.status == "ready" {
            return Ok(Some(server));
        }
        if server.status == "stopped" {
            pop_common::info!("starting the Elastic Metal server {}", server.name);
            self.api.baremetal_power(self.zone(), &server.id, "start")?;
        }
        self.wait_baremetal(&server.id, &server.name, "ready")
            .map(Some)
    }

    fn wait_baremetal(&self, id: &str, name: &str, status: &str) -> R<BaremetalServer> {
        let what = format!("the Elastic Metal server {name} to be {status}");
        let mut found = None;
        self.wait(&what, self.waits.elastic_metal, || {
            match self.api.baremetal_server(self.zone(), id)? {
                Some(s) if s.status == status => {
                    found = Some(s);
                    Ok(true)
                }
                Some(s) if s.status == "error" || s.status == "out_of_stock" => Err(
                    InfraError::Refused(format!("the Elastic Metal server {name} is {}", s.status)),
                ),
                Some(_) => Ok(false),
                None => Err(InfraError::Refused(format!(
                    "the Elastic Metal server {name} vanished"
                ))),
            }
        })?;
        found
            .ok_or_else(|| InfraError::Refused(format!("the Elastic Metal server {name} vanished")))
    }

    fn ensure_ssh_key(&self) -> R<()> {
        let name = self.ssh_key_name();
        let keys = self.api.ssh_keys(self.project, &name)?;
        if keys
            .iter()
            .any(|k| same_key(&k.public_key, self.ssh_public_key))
        {
            return Ok(());
        }
        if let Some(other) = keys.first() {
            return Err(InfraError::Refused(format!(
                "the IAM SSH key {name} ({}) holds another public key than {}: delete or rename it",
                other.id, self.config.ssh_public_key_path
            )));
        }
        pop_common::info!("registering the SSH key {name} in IAM");
        self.api
            .create_ssh_key(self.project, &name, self.ssh_public_key)?;
        Ok(())
    }

    /// The DNS records, when Scaleway hosts the zone: `api_hostname` to the control planes, each
    /// edge name to the worker. A record of the same name and type that is not ours stops it.
    fn ensure_dns(&self, cp: &[Node], worker: Option<&Node>) -> R<()> {
        let wanted = self.wanted_records(cp, worker);
        let Some(_zone) = self.api.dns_zone(self.project, &self.config.dns_zone)? else {
            pop_common::warn!(
                "the DNS zone {} is not hosted at Scaleway for this project: create these records yourself: {}",
                self.config.dns_zone,
                wanted
                    .iter()
                    .map(|(n, t, d)| format!("{n} {t} {}", d.join(",")))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            return Ok(());
        };
        let comment = self.cluster_tag();
        let mut changes = Vec::new();
        for (name, record_type, data) in &wanted {
            let existing = self
                .api
                .dns_records(&self.config.dns_zone, name, record_type)?;
            if let Some(foreign) = existing
                .iter()
                .find(|r| r.comment.as_deref() != Some(&comment))
            {
                return Err(InfraError::Refused(format!(
                    "the DNS record {name}.{} {record_type} {} is not ours (no comment {comment}): \
                     remove it or change the fields api_hostname/edge_hostnames",
                    self.config.dns_zone, foreign.data
                )));
            }
            let mut have: Vec<&str> = existing.iter().map(|r| r.data.as_str()).collect();
            have.sort_unstable();
            let mut want: Vec<&str> = data.iter().map(String::as_str).collect();
            want.sort_unstable();
            if have == want {
                continue;
            }
            let records: Vec<Value> = data
                .iter()
                .map(|d| json!({"name": name, "type": record_type, "data": d, "ttl": 300, "comment": comment}))
                .collect();
            changes.push(json!({"set": {"id_fields": {"name": name, "type": record_type}, "records": records}}));
        }
        if !changes.is_empty() {
            pop_common::info!(
                "setting {} DNS record sets in {}",
                changes.len(),
                self.config.dns_zone
            );
            self.api
                .change_dns_records(&self.config.dns_zone, changes)?;
        }
        Ok(())
    }

    /// (name in the zone, type, data) of every record this cluster owns.
    fn wanted_records(
        &self,
        cp: &[Node],
        worker: Option<&Node>,
    ) -> Vec<(String, &'static str, Vec<String>)> {
        let mut out = Vec::new();
        let api: Vec<String> = cp
            .iter()
            .filter_map(|n| n.public_ipv4)
            .map(|a| a.to_string())
            .collect();
        if !api.is_empty() {
            out.push((self.config.api_hostname.clone(), "A", api));
        }
        if let Some(worker) = worker {
            for name in &self.config.edge_hostnames {
                let name = if name == "@" {
                    String::new()
                } else {
                    name.clone()
                };
                if let Some(v4) = worker.public_ipv4 {
                    out.push((name.clone(), "A", vec![v4.to_string()]));
                }
                if let Some(v6) = worker.public_ipv6 {
                    out.push((name, "AAAA", vec![v6.to_string()]));
                }
            }
        }
        out
    }

    fn ensure_registry(&self) -> R<()> {
        let region = self.config.region();
        let name = &self.config.registry_namespace;
        let found = self.api.registry_namespaces(region, self.project, name)?;
        match found.first() {
            Some(ns) if !ns.is_public => pop_common::warn!(
                "the registry namespace {name} is private: nodes need credentials to pull from {}",
                ns.endpoint
            ),
            Some(_) => {}
            None => {
                pop_common::info!("creating the public registry namespace {name}");
                if let Some(ns) = self
                    .api
                    .create_registry_namespace(region, self.project, name)?
                {
                    pop_common::info!("registry: {}", ns.endpoint);
                }
            }
        }
        Ok(())
    }

    // ---- power -----------------------------------------------------------------------------

    pub fn power(&self, on: bool) -> R<()> {
        let zone = self.zone().to_owned();
        let servers = self.api.servers(&zone, &self.tags("controlplane"))?;
        let workers = self.api.baremetal_servers(&zone, &self.tags("worker"))?;
        if servers.is_empty() && workers.is_empty() {
            return Err(InfraError::Refused(format!(
                "no server carries the tag {}: run apply first",
                self.cluster_tag()
            )));
        }
        // Send every action first, then wait: the machines change state together.
        let mut wait_instances = Vec::new();
        for s in &servers {
            let (action, target, from) = if on {
                ("poweron", "running", ["stopped", "stopped in place"])
            } else {
                ("poweroff", "stopped", ["running", "stopped in place"])
            };
            if s.state == target {
                continue;
            }
            if from.contains(&s.state.as_str()) {
                pop_common::info!("{action} {}", s.name);
                if self.api.server_action(&zone, &s.id, action)?.is_none() {
                    continue;
                }
            }
            wait_instances.push((s, target));
        }
        let mut wait_workers = Vec::new();
        for w in &workers {
            let (action, target, from) = if on {
                ("start", "ready", "stopped")
            } else {
                ("stop", "stopped", "ready")
            };
            if w.status == target {
                continue;
            }
            if w.status == from {
                pop_common::info!("{action} {}", w.name);
                if self.api.baremetal_power(&zone, &w.id, action)?.is_none() {
                    continue;
                }
            }
            wait_workers.push((w, target));
        }
        for (s, target) in wait_instances {
            self.wait_instance(&s.id, &s.name, target)?;
        }
        for (w, target) in wait_workers {
            self.wait_baremetal(&w.id, &w.name, target)?;
        }
        Ok(())
    }

    // ---- destroy ---------------------------------------------------------------------------

    /// What destroy would remove, found by tags (reads only).
    pub fn inventory_for_destroy(&self) -> R<Vec<Removed>> {
        let zone = self.zone().to_owned();
        let mut out = Vec::new();
        for s in self.api.servers(&zone, &[self.cluster_tag()])? {
            out.push(Removed {
                removed: "instance-server",
                id: s.id,
                name: s.name,
            });
        }
        for s in self.api.baremetal_servers(&zone, &[self.cluster_tag()])? {
            out.push(Removed {
                removed: "elastic-metal-server",
                id: s.id,
                name: s.name,
            });
        }
        for ip in self.api.ips(&zone, &[self.cluster_tag()])? {
            out.push(Removed {
                removed: "flexible-ip",
                id: ip.id,
                name: ip.address.unwrap_or_default(),
            });
        }
        for g in self.api.security_groups(&zone, &[self.cluster_tag()])? {
            out.push(Removed {
                removed: "security-group",
                id: g.id,
                name: g.name,
            });
        }
        Ok(out)
    }

    /// Deletes every resource of this cluster, in dependency order: DNS records, servers (and
    /// their volumes), IPs, the security group, the SSH key. Returns what it removed.
    pub fn destroy(&self) -> R<Vec<Removed>> {
        let zone = self.zone().to_owned();
        let mut removed = Vec::new();
        let comment = self.cluster_tag();

        // 1. DNS records carrying our comment.
        if self
            .api
            .dns_zone(self.project, &self.config.dns_zone)?
            .is_some()
        {
            let mut changes = Vec::new();
            let mut names: Vec<String> = vec![self.config.api_hostname.clone()];
            names.extend(
                self.config
                    .edge_hostnames
                    .iter()
                    .map(|n| if n == "@" { String::new() } else { n.clone() }),
            );
            for name in names {
                for record_type in ["A", "AAAA"] {
                    for r in self
                        .api
                        .dns_records(&self.config.dns_zone, &name, record_type)?
                    {
                        if r.comment.as_deref() == Some(&comment) {
                            changes.push(json!({"delete": {"id": r.id}}));
                            removed.push(Removed {
                                removed: "dns-record",
                                id: r.id.clone(),
                                name: format!("{} {} {}", r.name, r.record_type, r.data),
                            });
                        }
                    }
                }
            }
            if !changes.is_empty() {
                self.api
                    .change_dns_records(&self.config.dns_zone, changes)?;
            }
        }

        // 2. Instances: terminate a running one (its local volumes go with it), delete a stopped
        // one; then the Block volumes they leave behind.
        let servers = self.api.servers(&zone, &[self.cluster_tag()])?;
        let mut volumes: Vec<(String, String)> = Vec::new();
        let mut terminating = Vec::new();
        for s in &servers {
            for v in s.volumes.values() {
                volumes.push((v.id.clone(), v.volume_type.clone().unwrap_or_default()));
            }
            if s.allowed_actions.iter().any(|a| a == "terminate") {
                pop_common::info!("terminating {}", s.name);
                if self.api.server_action(&zone, &s.id, "terminate")?.is_some() {
                    terminating.push(s);
                }
            } else if s.state == "stopped" || s.state == "stopped in place" {
                pop_common::info!("deleting {}", s.name);
                self.api.delete_server(&zone, &s.id)?;
            } else {
                return Err(InfraError::Refused(format!(
                    "the Instance {} is {}: neither terminate nor delete is possible now; run destroy again later",
                    s.name, s.state
                )));
            }
            removed.push(Removed {
                removed: "instance-server",
                id: s.id.clone(),
                name: s.name.clone(),
            });
        }
        for s in terminating {
            let what = format!("the Instance {} to be gone", s.name);
            self.wait(&what, self.waits.instance, || {
                Ok(self.api.server(&zone, &s.id)?.is_none())
            })?;
        }
        for (id, volume_type) in volumes {
            if volume_type == "sbs_volume" {
                if self.dry() {
                    self.api.delete_block_volume(&zone, &id)?;
                } else {
                    let what = format!("the Block volume {id} to be detached");
                    let mut status = None;
                    self.wait(&what, self.waits.instance, || {
                        status = self.api.block_volume_status(&zone, &id)?;
                        Ok(status.as_deref() != Some("in_use"))
                    })?;
                    if status.is_none() {
                        continue;
                    }
                    self.api.delete_block_volume(&zone, &id)?;
                }
            } else if !self.dry() {
                // A local volume goes with terminate; one of a deleted stopped server stays.
                if let Err(err) = self.api.delete_instance_volume(&zone, &id) {
                    if err.status() != Some(404) {
                        return Err(err.into());
                    }
                    continue;
                }
            }
            removed.push(Removed {
                removed: "volume",
                id,
                name: volume_type,
            });
        }

        // 3. The Elastic Metal worker.
        for s in self.api.baremetal_servers(&zone, &[self.cluster_tag()])? {
            pop_common::info!("deleting the Elastic Metal server {}", s.name);
            self.api.delete_baremetal_server(&zone, &s.id)?;
            removed.push(Removed {
                removed: "elastic-metal-server",
                id: s.id,
                name: s.name,
            });
        }

        // The Talos image, then its snapshot, then the bucket's objects and the bucket.
        for i in self.api.images(&zone, &[self.cluster_tag()])? {
            self.api.delete_image(&zone, &i.id)?;
            removed.push(Removed {
                removed: "image",
                id: i.id,
                name: i.name,
            });
        }
        for snap in self.api.snapshots(&zone, &[self.cluster_tag()])? {
            if !self.dry() {
                let what = format!("the snapshot {} to be released by its image", snap.name);
                self.wait(&what, self.waits.instance, || {
                    Ok(self
                        .api
                        .snapshot(&zone, &snap.id)?
                        .is_none_or(|s| s.status != "in_use"))
                })?;
            }
            self.api.delete_snapshot(&zone, &snap.id)?;
            removed.push(Removed {
                removed: "snapshot",
                id: snap.id,
                name: snap.name,
            });
        }
        if let Some(s3) = self.s3
            && s3.bucket_exists(&self.bucket)?
        {
            for key in s3.list_keys(&self.bucket, "talos/")? {
                if self.dry() {
                    self.api
                        .client
                        .plan_external("DELETE", &format!("s3:/{}/{key}", self.bucket));
                } else {
                    s3.delete_object(&self.bucket, &key)?;
                }
                removed.push(Removed {
                    removed: "object",
                    id: key.clone(),
                    name: key,
                });
            }
            if self.dry() {
                self.api
                    .client
                    .plan_external("DELETE", &format!("s3:/{}", self.bucket));
            } else {
                match s3.delete_bucket(&self.bucket) {
                    Ok(()) => removed.push(Removed {
                        removed: "bucket",
                        id: self.bucket.clone(),
                        name: self.bucket.clone(),
                    }),
                    Err(err) => pop_common::warn!(
                        "the bucket {} is kept: {err} (it holds objects that are not ours)",
                        self.bucket
                    ),
                }
            }
        }

        // 4. Flexible IPs, then 5. the security group (no server uses them any more).
        for ip in self.api.ips(&zone, &[self.cluster_tag()])? {
            self.api.delete_ip(&zone, &ip.id)?;
            removed.push(Removed {
                removed: "flexible-ip",
                id: ip.id,
                name: ip.address.unwrap_or_default(),
            });
        }
        for g in self.api.security_groups(&zone, &[self.cluster_tag()])? {
            self.api.delete_security_group(&zone, &g.id)?;
            removed.push(Removed {
                removed: "security-group",
                id: g.id,
                name: g.name,
            });
        }

        // 6. The SSH key: ours by name and by public key.
        let name = self.ssh_key_name();
        for k in self.api.ssh_keys(self.project, &name)? {
            if same_key(&k.public_key, self.ssh_public_key) {
                self.api.delete_ssh_key(&k.id)?;
                removed.push(Removed {
                    removed: "ssh-key",
                    id: k.id,
                    name: k.name,
                });
            }
        }
        Ok(removed)
    }
}

/// A firewall rule, as compared between the plan and the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleSpec {
    pub protocol: &'static str,
    pub ip_range: IpNet,
    pub from: u32,
    pub to: u32,
}

impl RuleSpec {
    fn tcp(ip_range: IpNet, from: u32, to: u32) -> RuleSpec {
        RuleSpec {
            protocol: "TCP",
            ip_range,
            from,
            to,
        }
    }

    /// An inbound accept rule as the API shows it (`dest_port_to` null for one port; an address
    /// without a prefix length is one host).
    fn from_rule(rule: &SecurityGroupRule) -> Option<RuleSpec> {
        if rule.direction != "inbound" || rule.action != "accept" {
            return None;
        }
        let protocol = match rule.protocol.as_str() {
            "TCP" => "TCP",
            "UDP" => "UDP",
            _ => return None,
        };
        let ip_range = rule
            .ip_range
            .parse::<IpNet>()
            .or_else(|_| rule.ip_range.parse::<IpAddr>().map(IpNet::from))
            .ok()?
            .trunc();
        let from = rule.dest_port_from?;
        let to = rule.dest_port_to.unwrap_or(from);
        Some(RuleSpec {
            protocol,
            ip_range,
            from,
            to,
        })
    }
}

/// Takes the server tagged for `node` out of `servers`.
fn take_by_node(servers: &mut Vec<InstanceServer>, node: &str) -> R<Option<InstanceServer>> {
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
        _ => Err(InfraError::Refused(format!(
            "{} Instances carry the tag {node_tag}: keep one",
            matching.len()
        ))),
    }
}

fn placeholder(kind: &str, name: &str) -> String {
    format!("<new {kind} {name}>")
}

/// Two OpenSSH public keys are the same key when their type and base64 body are.
fn same_key(a: &str, b: &str) -> bool {
    let fields = |k: &str| {
        k.split_whitespace()
            .take(2)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    fields(a) == fields(b) && fields(a).len() == 2
}

fn instance_node(server: &InstanceServer, ip: Option<&InstanceIp>) -> Node {
    let public_ipv4 = ip
        .and_then(|i| i.address.as_deref()?.parse::<Ipv4Addr>().ok())
        .or_else(|| {
            server
                .public_ips
                .iter()
                .find_map(|i| i.address.parse().ok())
        });
    let public_ipv6 = server
        .public_ips
        .iter()
        .find_map(|i| i.address.parse::<Ipv6Addr>().ok());
    Node {
        name: server.name.clone(),
        role: NodeRole::Controlplane,
        kind: NodeKind::Instance,
        zone: server.zone.clone(),
        id: server.id.clone(),
        public_ipv4,
        public_ipv6,
        private_ipv4: server.private_ip.as_deref().and_then(|a| a.parse().ok()),
        steps: BTreeMap::new(),
    }
}

fn baremetal_node(server: &BaremetalServer) -> Node {
    let v4 = server
        .ips
        .iter()
        .filter(|i| i.version == "IPv4")
        .find_map(|i| i.address.parse::<Ipv4Addr>().ok());
    let v6 = server
        .ips
        .iter()
        .filter(|i| i.version == "IPv6")
        .find_map(|i| i.address.parse::<Ipv6Addr>().ok());
    Node {
        name: server.name.clone(),
        role: NodeRole::Worker,
        kind: NodeKind::ElasticMetal,
        zone: server.zone.clone(),
        id: server.id.clone(),
        public_ipv4: v4,
        public_ipv6: v6,
        private_ipv4: None,
        steps: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn rules_read_back_from_the_api_compare_equal_to_the_plan() {
        let rule = SecurityGroupRule {
            id: "r".into(),
            protocol: "TCP".into(),
            direction: "inbound".into(),
            action: "accept".into(),
            ip_range: "203.0.113.7".into(),
            dest_port_from: Some(6443),
            dest_port_to: None,
            editable: true,
        };
        assert_eq!(
            RuleSpec::from_rule(&rule),
            Some(RuleSpec::tcp("203.0.113.7/32".parse().unwrap(), 6443, 6443))
        );
    }

    #[test]
    fn keys_compare_without_their_comment() {
        assert!(same_key(
            "ssh-ed25519 AAAA me@host",
            "ssh-ed25519 AAAA other\n"
        ));
        assert!(!same_key("ssh-ed25519 AAAA", "ssh-ed25519 AAAB"));
        assert!(!same_key("", ""));
    }
}
