//! `NodeInventory`: the cluster's nodes, as `scw-infra apply` found or made them, enriched by each
//! tool that acts on them (`scw-infra apply | scw-rescue-flash | talos-apply-insecure`).
//!
//! A tool reads it on stdin, does its step on the nodes that need it, and writes it back on
//! stdout with what it did recorded in the node's `steps` (so a re-run skips what is done).
//!
//! ```json
//! {
//!   "kind": "NodeInventory",
//!   "version": 2,
//!   "cluster_name": "edge-par",
//!   "cluster_endpoint": "https://api.example.com:6443",
//!   "ssh_key_ids": ["33333333-3333-4333-8333-333333333333"],
//!   "nodes": [
//!     {
//!       "name": "edge-par-cp-1", "role": "controlplane", "kind": "instance",
//!       "zone": "fr-par-1", "id": "11111111-1111-4111-8111-111111111111",
//!       "public_ipv4": "203.0.113.11", "public_ipv6": null, "private_ipv4": "10.194.0.11",
//!       "steps": {}
//!     },
//!     {
//!       "name": "edge-par-worker-1", "role": "worker", "kind": "elastic-metal",
//!       "zone": "fr-par-1", "id": "22222222-2222-4222-8222-222222222222",
//!       "public_ipv4": "203.0.113.10", "public_ipv6": "2001:db8::10", "private_ipv4": null,
//!       "steps": { "image_flashed": "sha256:9f86d08…", "config_applied": "sha256:2c26b46…" }
//!     }
//!   ]
//! }
//! ```

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::exit::{OutputError, WritingOutput};
use crate::input::{InputError, read_json_from};

pub const NODE_INVENTORY_VERSION: u32 = 2;

/// The step names tools record in [`Node::steps`], defined once.
pub mod steps {
    /// `scw-rescue-flash`: the digest (`sha256:<hex>`) of the image written onto the disk.
    pub const IMAGE_FLASHED: &str = "image_flashed";
    /// `talos-apply-insecure`: the digest (`sha256:<hex>`) of the machine config it sent, recorded
    /// only once the node proved to be ours (it answered mutual TLS with our talosconfig, with a
    /// certificate that chains to our machine CA).
    pub const CONFIG_APPLIED: &str = "config_applied";
    /// `talos-apply-insecure`: the node answered mutual TLS with our talosconfig, whether this
    /// run configured it or found it configured. On a flashed node, the image digest (the
    /// `image_flashed` value) it ran then: a proof that comes a run late (the first run's wait
    /// ran out, or the run was cut) records no config, yet the node is live, and this is what
    /// tells `scw-rescue-flash` so. On a node never flashed (a control plane), [`PROVED`]: its
    /// config is on its disk, and the copy in its user data can go (`scw-infra
    /// clear-user-data`).
    pub const PROVED_OURS: &str = "proved_ours";
    /// The [`PROVED_OURS`] value of a node that was never flashed.
    pub const PROVED: &str = "ours";
}

crate::record! {
    /// Every node of one cluster.
    pub struct NodeInventory, version NODE_INVENTORY_VERSION {
        /// The cluster's name: also the tag that finds its Scaleway resources.
        pub cluster_name: String,
        /// The Kubernetes API URL (`https://<api_hostname>.<dns_zone>:6443`).
        pub cluster_endpoint: String,
        /// The IAM ids of the SSH keys `scw-infra` registered for the cluster: the keys Scaleway
        /// configures on the rescue image of the Elastic Metal servers (the `ssh_key_ids` of their
        /// start into rescue), as a server ordered without an OS has none of its own (UUIDs,
        /// checked when read).
        #[serde(deserialize_with = "super::scaleway_names::ids")]
        pub ssh_key_ids: Vec<String>,
        pub nodes: Vec<Node>,
    }
}

/// One machine of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// The node's name (the Scaleway server's name, and the Kubernetes node's).
    pub name: String,
    pub role: NodeRole,
    pub kind: NodeKind,
    /// The Scaleway zone, such as `fr-par-1` (checked when read: it goes into API paths).
    #[serde(deserialize_with = "super::scaleway_names::zone")]
    pub zone: String,
    /// The Scaleway server id (Instance or Elastic Metal; a UUID, checked when read).
    #[serde(deserialize_with = "super::scaleway_names::id")]
    pub id: String,
    pub public_ipv4: Option<Ipv4Addr>,
    pub public_ipv6: Option<Ipv6Addr>,
    pub private_ipv4: Option<Ipv4Addr>,
    /// The disk Talos is written to and installed on (a worker's, from the infra config): the
    /// flash writes the image there. Checked when read: it goes onto the rescue system's `dd`
    /// line.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "install_disk"
    )]
    pub install_disk: Option<String>,
    /// What each step did to this node, by step name ([`steps`]): usually a digest.
    #[serde(default)]
    pub steps: BTreeMap<String, String>,
}

/// An install disk as [`super::check_install_disk`] takes it.
fn install_disk<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let disk = String::deserialize(d)?;
    super::check_install_disk(&disk).map_err(serde::de::Error::custom)?;
    Ok(Some(disk))
}

/// What the node does in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeRole {
    Controlplane,
    Worker,
}

/// What kind of Scaleway server the node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    /// An Instance (the control planes), booted from the imported Talos image.
    Instance,
    /// An Elastic Metal server (the worker), flashed with Talos from rescue mode.
    ElasticMetal,
}

impl NodeInventory {
    /// Writes the inventory as the next tool of the pipe reads it: pretty JSON, one final newline,
    /// flushed (so a tool that fails right after has still handed on what it did).
    pub fn write_to(&self, mut out: impl Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut out, self)?;
        out.write_all(b"\n")?;
        out.flush()
    }

    /// A node tool's pass over the pipe: the inventory read on `input` (stdin), changed by
    /// `work`, written on `output` even when nodes failed (the next run keeps what the others
    /// did), then the nodes `work` failed on as the error.
    pub fn pass_through<E>(
        input: impl io::Read,
        mut output: impl Write,
        work: impl FnOnce(&mut NodeInventory) -> Result<Vec<NodeFailure>, E>,
    ) -> Result<(), E>
    where
        E: From<InputError> + From<OutputError> + From<NodeFailures>,
    {
        let mut inventory: NodeInventory = read_json_from(Path::new("<stdin>"), input)?;
        let failures = work(&mut inventory)?;
        inventory.write_to(&mut output).output()?;
        Ok(NodeFailures::check(failures)?)
    }
}

/// One node a tool's step failed on, and why (the tool's own typed error).
#[derive(Debug, thiserror::Error)]
#[error("{node}: {error}")]
pub struct NodeFailure {
    /// The node's name, as in the inventory.
    pub node: String,
    pub error: Box<dyn std::error::Error + Send + Sync>,
}

impl NodeFailure {
    pub fn new(
        node: impl Into<String>,
        error: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        NodeFailure {
            node: node.into(),
            error: error.into(),
        }
    }
}

/// The nodes a tool's step failed on, one `<node>: <why>` line each; the other nodes were done
/// and recorded in the inventory the tool wrote anyway.
#[derive(Debug, thiserror::Error)]
#[error("{} node(s) failed:\n{}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct NodeFailures(pub Vec<NodeFailure>);

impl NodeFailures {
    /// `Ok` when no node failed, else the failures as one error.
    pub fn check(failures: Vec<NodeFailure>) -> Result<(), NodeFailures> {
        if failures.is_empty() {
            Ok(())
        } else {
            Err(NodeFailures(failures))
        }
    }
}

impl Node {
    /// What `step` recorded on this node, if it ran.
    pub fn step(&self, step: &str) -> Option<&str> {
        self.steps.get(step).map(String::as_str)
    }

    /// The image the inventory says this node runs as a live node of ours: the flashed image,
    /// once a config was applied over it or the node proved ours while running it.
    pub fn proved_image(&self) -> Option<&str> {
        let image = self.step(steps::IMAGE_FLASHED)?;
        let proved = self.step(steps::CONFIG_APPLIED).is_some()
            || self.step(steps::PROVED_OURS) == Some(image);
        proved.then_some(image)
    }

    /// Records that the node proved ours: while running the image recorded as flashed, or, for
    /// a node never flashed (an Instance), [`steps::PROVED`].
    pub fn record_proved_ours(&mut self) {
        let value = self
            .step(steps::IMAGE_FLASHED)
            .unwrap_or(steps::PROVED)
            .to_owned();
        self.steps.insert(steps::PROVED_OURS.to_owned(), value);
    }
}

/// The nodes one step of a node tool has to act on, and the ones it has already done: the one
/// filter of the node tools.
#[derive(Debug)]
pub struct StepNodes<'a> {
    /// The nodes the step concerns whose record is not what the step wants now, in inventory
    /// order.
    pub todo: Vec<StepTodo<'a>>,
    /// The names of the nodes whose record already is what the step wants.
    pub done: Vec<String>,
}

/// One node a step has to act on.
#[derive(Debug)]
pub struct StepTodo<'a> {
    pub node: &'a mut Node,
    step: &'static str,
    /// What the step records on the node once it has acted (usually a digest).
    pub wanted: String,
}

impl StepTodo<'_> {
    /// Records on the node that the step did what it wanted.
    pub fn record(&mut self) {
        self.node
            .steps
            .insert(self.step.to_owned(), self.wanted.clone());
    }
}

impl NodeInventory {
    /// Splits the nodes for `step` (a name of [`steps`]): `wants` gives what the step would
    /// record on a node now (`None` for a node the step does not concern, such as an Instance for
    /// the flash); a node whose record already equals it is done, the others are to do.
    pub fn for_step(
        &mut self,
        step: &'static str,
        wants: impl Fn(&Node) -> Option<String>,
    ) -> StepNodes<'_> {
        let mut todo = Vec::new();
        let mut done = Vec::new();
        for node in &mut self.nodes {
            let Some(wanted) = wants(node) else {
                continue;
            };
            if node.step(step) == Some(wanted.as_str()) {
                done.push(node.name.clone());
            } else {
                todo.push(StepTodo { node, step, wanted });
            }
        }
        StepNodes { todo, done }
    }

    /// Carries over what the node tools recorded in `previous` (earlier inventories of the same
    /// cluster, the newest first), node by node, matched by server id: a server found again
    /// keeps the steps of the first inventory that lists it (whole: a step an older one records
    /// may since have been undone, as a reflash undoes the applied config), a new server starts
    /// with none. A step this inventory already records wins.
    pub fn carry_steps_from(&mut self, previous: &[&NodeInventory]) {
        for node in &mut self.nodes {
            let newest = previous
                .iter()
                .find_map(|inventory| inventory.nodes.iter().find(|o| o.id == node.id));
            if let Some(old) = newest {
                for (step, value) in &old.steps {
                    node.steps
                        .entry(step.clone())
                        .or_insert_with(|| value.clone());
                }
            }
        }
    }

    /// The first control plane of the inventory (the one etcd is bootstrapped on).
    pub fn first_control_plane(&self) -> Option<&Node> {
        self.nodes.iter().find(|n| n.role == NodeRole::Controlplane)
    }

    /// The Elastic Metal workers, which receive the edge's public traffic, in inventory order.
    pub fn edge_workers(&self) -> impl Iterator<Item = &Node> {
        self.nodes
            .iter()
            .filter(|n| n.role == NodeRole::Worker && n.kind == NodeKind::ElasticMetal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{
        "kind": "NodeInventory", "version": 2,
        "cluster_name": "edge-par", "cluster_endpoint": "https://api.example.com:6443",
        "ssh_key_ids": ["33333333-3333-4333-8333-333333333333"],
        "nodes": [
          { "name": "edge-par-cp-1", "role": "controlplane", "kind": "instance",
            "zone": "fr-par-1", "id": "11111111-1111-4111-8111-111111111111",
            "public_ipv4": "203.0.113.11", "public_ipv6": null, "private_ipv4": "10.194.0.11",
            "steps": {} },
          { "name": "edge-par-worker-1", "role": "worker", "kind": "elastic-metal",
            "zone": "fr-par-1", "id": "22222222-2222-4222-8222-222222222222",
            "public_ipv4": "203.0.113.10", "public_ipv6": "2001:db8::10", "private_ipv4": null,
            "steps": { "image_flashed": "sha256:00" } }
        ]
    }"#;

    #[test]
    fn the_documented_example_reads_and_writes_back_the_same() {
        let inventory: NodeInventory = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(inventory.nodes[1].kind, NodeKind::ElasticMetal);
        assert_eq!(inventory.nodes[0].role, NodeRole::Controlplane);
        assert_eq!(
            inventory.nodes[1].step(steps::IMAGE_FLASHED),
            Some("sha256:00")
        );
        assert_eq!(inventory.nodes[0].step(steps::IMAGE_FLASHED), None);
        let text = serde_json::to_string(&inventory).unwrap();
        assert!(text.contains(r#""kind":"elastic-metal""#), "{text}");
        let again: NodeInventory = serde_json::from_str(&text).unwrap();
        assert_eq!(inventory, again);
    }

    #[test]
    fn a_zone_or_an_id_that_would_bend_an_api_path_is_refused_naming_the_field() {
        for (good, bad, field) in [
            ("\"fr-par-1\"", "\"fr-par-1/../../iam\"", "nodes[0].zone"),
            (
                "\"11111111-1111-4111-8111-111111111111\"",
                "\"11111111-1111-4111-8111-111111111111/action\"",
                "nodes[0].id",
            ),
            (
                "\"33333333-3333-4333-8333-333333333333\"",
                "\"33333333-3333-4333-8333-333333333333&x=1\"",
                "ssh_key_ids",
            ),
        ] {
            let text = EXAMPLE.replacen(good, bad, 1);
            let err = crate::input::decode_json::<NodeInventory>(
                std::path::Path::new("inventory.json"),
                text.as_bytes(),
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("inventory.json") && err.contains(field) && err.contains("Scaleway"),
                "{err}"
            );
        }
    }

    #[test]
    fn write_to_writes_pretty_json_and_one_newline_that_reads_back() {
        let inventory: NodeInventory = serde_json::from_str(EXAMPLE).unwrap();
        let mut out = Vec::new();
        inventory.write_to(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("{\n  \"kind\": \"NodeInventory\""),
            "{text}"
        );
        assert!(text.ends_with("}\n") && !text.ends_with("\n\n"), "{text}");
        assert_eq!(
            serde_json::from_str::<NodeInventory>(&text).unwrap(),
            inventory
        );
    }

    #[test]
    fn write_to_reports_a_failing_writer() {
        /// A writer whose reader has gone away.
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let inventory: NodeInventory = serde_json::from_str(EXAMPLE).unwrap();
        let err = inventory.write_to(Closed).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn node_failures_are_an_error_only_when_there_are_some_and_list_each_node() {
        assert!(NodeFailures::check(Vec::new()).is_ok());
        let err = NodeFailures::check(vec![
            NodeFailure::new("w1", "refused"),
            NodeFailure::new("w2", std::io::Error::from(std::io::ErrorKind::TimedOut)),
        ]);
        assert_eq!(
            err.unwrap_err().to_string(),
            "2 node(s) failed:\nw1: refused\nw2: timed out"
        );
    }

    #[test]
    fn a_step_acts_on_the_nodes_it_concerns_whose_record_differs() {
        let mut inventory: NodeInventory = serde_json::from_str(EXAMPLE).unwrap();
        // The worker already has image "sha256:00"; the control plane is not concerned.
        let split = inventory.for_step(steps::IMAGE_FLASHED, |n| {
            (n.kind == NodeKind::ElasticMetal).then(|| "sha256:00".to_owned())
        });
        assert_eq!(split.done, ["edge-par-worker-1"]);
        assert!(split.todo.is_empty());
        let mut split = inventory.for_step(steps::CONFIG_APPLIED, |n| {
            Some(format!("sha256:{:?}", n.role))
        });
        assert!(split.done.is_empty());
        let names: Vec<&str> = split.todo.iter().map(|t| t.node.name.as_str()).collect();
        assert_eq!(names, ["edge-par-cp-1", "edge-par-worker-1"]);
        split.todo[1].record();
        assert_eq!(
            inventory.nodes[1].step(steps::CONFIG_APPLIED),
            Some("sha256:Worker")
        );
        assert_eq!(inventory.nodes[0].step(steps::CONFIG_APPLIED), None);
    }

    #[test]
    fn steps_are_carried_by_server_id_and_a_fresh_record_wins() {
        let previous: NodeInventory = serde_json::from_str(EXAMPLE).unwrap();
        let mut fresh = previous.clone();
        for node in &mut fresh.nodes {
            node.steps.clear();
        }
        // A new control plane (another id) and a worker with a step of its own.
        fresh.nodes[0].id = "33333333-3333-4333-8333-333333333333".into();
        fresh.nodes[1]
            .steps
            .insert(steps::CONFIG_APPLIED.into(), "sha256:11".into());
        // An unfinished run, newer than a last good one where the worker was configured: it
        // reflashed the worker, which undid that config. Its record of the worker is taken whole.
        let mut configured = previous.clone();
        configured.nodes[1]
            .steps
            .insert(steps::CONFIG_APPLIED.into(), "sha256:11".into());
        let mut unfinished = previous.clone();
        unfinished.nodes.retain(|n| n.role == NodeRole::Worker);
        unfinished.nodes[0].steps = [(steps::IMAGE_FLASHED.to_owned(), "sha256:22".to_owned())]
            .into_iter()
            .collect();
        let mut after_unfinished = previous.clone();
        after_unfinished.nodes[1].steps.clear();
        after_unfinished.carry_steps_from(&[&unfinished, &configured]);
        assert_eq!(after_unfinished.nodes[1].steps, unfinished.nodes[0].steps);

        fresh.carry_steps_from(&[&previous]);
        assert!(fresh.nodes[0].steps.is_empty());
        assert_eq!(fresh.nodes[1].step(steps::IMAGE_FLASHED), Some("sha256:00"));
        assert_eq!(
            fresh.nodes[1].step(steps::CONFIG_APPLIED),
            Some("sha256:11")
        );
        assert_eq!(
            fresh.first_control_plane().map(|n| n.name.as_str()),
            Some("edge-par-cp-1")
        );
        let edge: Vec<&str> = fresh.edge_workers().map(|n| n.name.as_str()).collect();
        assert_eq!(edge, ["edge-par-worker-1"]);
    }

    #[test]
    fn the_edge_workers_are_every_elastic_metal_worker_in_inventory_order() {
        let mut inventory: NodeInventory = serde_json::from_str(EXAMPLE).unwrap();
        let mut second = inventory.nodes[1].clone();
        second.name = "edge-par-worker-2".into();
        let mut instance = second.clone();
        instance.name = "edge-par-worker-3".into();
        instance.kind = NodeKind::Instance;
        inventory.nodes.insert(1, second);
        inventory.nodes.push(instance);
        let edge: Vec<&str> = inventory.edge_workers().map(|n| n.name.as_str()).collect();
        assert_eq!(edge, ["edge-par-worker-2", "edge-par-worker-1"]);
    }

    #[test]
    fn unknown_fields_other_kinds_and_unknown_roles_are_refused() {
        let extra = EXAMPLE.replace(r#""version": 2,"#, r#""version": 2, "state": "x","#);
        assert!(serde_json::from_str::<NodeInventory>(&extra).is_err());
        let node_extra = EXAMPLE.replace(r#""steps": {} }"#, r#""steps": {}, "ssh": 22 }"#);
        assert!(serde_json::from_str::<NodeInventory>(&node_extra).is_err());
        let kind = EXAMPLE.replace(r#""kind": "NodeInventory""#, r#""kind": "PlatformInputs""#);
        assert!(serde_json::from_str::<NodeInventory>(&kind).is_err());
        // Version 1 had no ssh_key_ids: a reader of version 2 refuses it, saying so.
        let version = EXAMPLE.replace(r#""version": 2"#, r#""version": 1"#);
        let err = serde_json::from_str::<NodeInventory>(&version).unwrap_err();
        assert!(err.to_string().contains("unsupported version 1"), "{err}");
        let role = EXAMPLE.replace(r#""role": "worker""#, r#""role": "etcd""#);
        assert!(serde_json::from_str::<NodeInventory>(&role).is_err());
    }
}
