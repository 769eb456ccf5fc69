//! Typed answers of exactly the endpoints this tool calls. Field names are the specs'
//! (`../shared/scaleway-openapi`); only the fields the tool reads are kept (serde ignores the
//! rest), and every field the recorded traffic shows as `null` is an `Option`. The cassette tests
//! (`tests/cassettes.rs`) decode every recorded body of these endpoints.
//!
//! Request bodies are built as JSON values next to their call (`crate::infra`), with the specs'
//! names; the stand-in refuses a name the spec does not have.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// An answer that wraps its one resource in a named field (`{"server": {...}}`), as the Instance
/// API does for a single object.
pub trait Envelope {
    type Inner;
    fn into_inner(self) -> Self::Inner;
}

macro_rules! envelope {
    ($($envelope:ident { $field:ident: $inner:ty }),* $(,)?) => {$(
        impl Envelope for $envelope {
            type Inner = $inner;
            fn into_inner(self) -> $inner {
                self.$field
            }
        }
    )*};
}

envelope! {
    SecurityGroupEnvelope { security_group: SecurityGroup },
    SecurityGroupRuleEnvelope { rule: SecurityGroupRule },
    InstanceServerEnvelope { server: InstanceServer },
    InstanceIpEnvelope { ip: InstanceIp },
    InstanceImageEnvelope { image: InstanceImage },
    TaskEnvelope { task: Task },
}

/// A resource carrying tags, so that a listing filtered by tags on the API side can be checked
/// again here.
pub trait Tagged {
    fn tags(&self) -> &[String];
}

macro_rules! tagged {
    ($($resource:ty),* $(,)?) => {$(
        impl Tagged for $resource {
            fn tags(&self) -> &[String] {
                &self.tags
            }
        }
    )*};
}

tagged!(
    SecurityGroup,
    InstanceServer,
    InstanceIp,
    InstanceImage,
    BlockSnapshot,
    BaremetalServer,
);

// ---- Instance v1 -------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Ref {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub inbound_default_policy: String,
    pub outbound_default_policy: String,
    #[serde(default)]
    pub stateful: bool,
    #[serde(default)]
    pub servers: Vec<Ref>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SecurityGroupEnvelope {
    pub security_group: SecurityGroup,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SecurityGroupRule {
    pub id: String,
    pub protocol: String,
    pub direction: String,
    pub action: String,
    pub ip_range: String,
    pub dest_port_from: Option<u32>,
    pub dest_port_to: Option<u32>,
    #[serde(default)]
    pub editable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SecurityGroupRuleEnvelope {
    pub rule: SecurityGroupRule,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ServerIp {
    pub id: String,
    pub address: String,
    #[serde(default)]
    pub family: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ServerVolume {
    pub id: String,
    #[serde(default)]
    pub volume_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InstanceServer {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub state: String,
    pub commercial_type: String,
    #[serde(default)]
    pub public_ips: Vec<ServerIp>,
    pub private_ip: Option<String>,
    /// A map keyed by "0", "1", ... (not an array).
    #[serde(default)]
    pub volumes: BTreeMap<String, ServerVolume>,
    pub security_group: Option<Ref>,
    #[serde(default)]
    pub allowed_actions: Vec<String>,
    pub zone: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InstanceServerEnvelope {
    pub server: InstanceServer,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InstanceIp {
    pub id: String,
    /// `null` for a routed IPv6, which has a `prefix` instead.
    pub address: Option<String>,
    pub prefix: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub server: Option<Ref>,
    #[serde(rename = "type", default)]
    pub ip_type: Option<String>,
    pub zone: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InstanceIpEnvelope {
    pub ip: InstanceIp,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InstanceImage {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub arch: String,
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InstanceImageEnvelope {
    pub image: InstanceImage,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Task {
    pub id: String,
    pub description: String,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TaskEnvelope {
    pub task: Task,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InstanceImageList {
    pub images: Vec<InstanceImage>,
}

// ---- Block v1 -----------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BlockSnapshot {
    pub id: String,
    pub name: String,
    pub status: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub zone: String,
}

// ---- Elastic Metal v1 ---------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BaremetalIp {
    pub id: String,
    pub address: String,
    /// `IPv4` or `IPv6`.
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BaremetalServer {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub status: String,
    pub offer_id: String,
    #[serde(default)]
    pub offer_name: Option<String>,
    #[serde(default)]
    pub ips: Vec<BaremetalIp>,
    pub zone: String,
    pub project_id: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BaremetalOffer {
    pub id: String,
    pub name: String,
    pub stock: String,
    pub enable: bool,
    #[serde(default)]
    pub subscription_period: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BaremetalServerList {
    pub total_count: u64,
    pub servers: Vec<BaremetalServer>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BaremetalOfferList {
    pub total_count: u64,
    pub offers: Vec<BaremetalOffer>,
}

// ---- IAM v1alpha1 ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SshKey {
    pub id: String,
    pub name: String,
    pub public_key: String,
    pub project_id: String,
    #[serde(default)]
    pub disabled: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SshKeyList {
    pub total_count: u64,
    pub ssh_keys: Vec<SshKey>,
}

// ---- Domain v2beta1 -------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DnsZone {
    pub domain: String,
    pub subdomain: String,
    pub status: String,
    pub project_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct DnsRecord {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub record_type: String,
    pub data: String,
    pub ttl: u32,
    #[serde(default)]
    pub comment: Option<String>,
}

// ---- Registry v1 (not in ../shared/scaleway-openapi; fields from the issue) -----------------

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RegistryNamespace {
    pub id: String,
    pub name: String,
    pub endpoint: String,
    pub is_public: bool,
    pub project_id: String,
}
