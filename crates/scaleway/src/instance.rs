//! Instance v1 (`../shared/scaleway-openapi/scaleway.instance.v1.Api.yml`): security groups and
//! their rules, flexible IPs, images, servers and their actions. A single object comes wrapped in
//! a field named after it (`{"server": {...}}`); the `*Envelope` types are those answers.

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::client::{Client, Method};
use crate::enums::api_enum;
use crate::error::R;
use crate::{Owned, Tagged, owned, tagged, with_every_tag};

/// The zones of the Instance API: the `zone` path parameter's enum, the same on every operation
/// of scaleway.instance.v1.Api.yml.
pub const ZONES: &[&str] = &[
    "fr-par-1", "fr-par-2", "fr-par-3", "nl-ams-1", "nl-ams-2", "nl-ams-3", "pl-waw-1", "pl-waw-2",
    "pl-waw-3", "it-mil-1",
];

api_enum! {
    /// `Server.state`.
    pub enum ServerState {
        Running = "running",
        Stopped = "stopped",
        StoppedInPlace = "stopped in place",
        Starting = "starting",
        Stopping = "stopping",
        Locked = "locked",
    }
}

impl ServerState {
    /// Off: what `poweron` starts from, and what `delete` needs.
    pub fn is_off(&self) -> bool {
        matches!(self, ServerState::Stopped | ServerState::StoppedInPlace)
    }
}

api_enum! {
    /// `Image.state`.
    pub enum ImageState {
        Available = "available",
        Creating = "creating",
        Error = "error",
    }
}

api_enum! {
    /// `VolumeServer.VolumeType`: `l_ssd` lives and dies with its server, `sbs_volume` is a
    /// Block volume that outlives it.
    pub enum VolumeType {
        LSsd = "l_ssd",
        BSsd = "b_ssd",
        SbsVolume = "sbs_volume",
        Scratch = "scratch",
    }
}

api_enum! {
    /// `ServerAction.action`: the ones the tools send.
    pub enum ServerAction {
        PowerOn = "poweron",
        PowerOff = "poweroff",
        Terminate = "terminate",
    }
}

api_enum! {
    /// `SecurityGroup.inbound_default_policy` and `outbound_default_policy`.
    pub enum Policy {
        Accept = "accept",
        Drop = "drop",
    }
}

api_enum! {
    /// A rule's protocol (the ones the tools write).
    pub enum Protocol {
        Tcp = "TCP",
        Udp = "UDP",
        Icmp = "ICMP",
        Any = "ANY",
    }
}

/// Another object, named inside this one (`security_group`, `server`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct ObjectRef {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub project: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub inbound_default_policy: Policy,
    pub outbound_default_policy: Policy,
    #[serde(default)]
    pub stateful: bool,
    #[serde(default)]
    pub servers: Vec<ObjectRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SecurityGroupEnvelope {
    pub security_group: SecurityGroup,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Rule {
    pub id: String,
    pub protocol: Protocol,
    pub direction: String,
    pub action: String,
    pub ip_range: String,
    pub dest_port_from: Option<u32>,
    pub dest_port_to: Option<u32>,
    #[serde(default)]
    pub editable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RuleEnvelope {
    pub rule: Rule,
}

/// One address of a server's `public_ips`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ServerIp {
    pub id: String,
    pub address: String,
    #[serde(default)]
    pub family: Option<String>,
}

/// One volume of a server's `volumes`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ServerVolume {
    pub id: String,
    pub volume_type: VolumeType,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Server {
    pub id: String,
    pub name: String,
    pub project: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub state: ServerState,
    pub commercial_type: String,
    #[serde(default)]
    pub public_ips: Vec<ServerIp>,
    pub private_ip: Option<String>,
    /// A map keyed by "0", "1", ... (not an array).
    #[serde(default)]
    pub volumes: BTreeMap<String, ServerVolume>,
    pub security_group: Option<ObjectRef>,
    #[serde(default)]
    pub allowed_actions: Vec<String>,
    pub zone: String,
}

impl Server {
    /// Whether the API allows `action` on the server now.
    pub fn allows(&self, action: &ServerAction) -> bool {
        self.allowed_actions.iter().any(|a| a == action.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ServerEnvelope {
    pub server: Server,
}

/// A flexible IP.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Ip {
    pub id: String,
    /// `null` for a routed IPv6, which has a `prefix` instead.
    pub address: Option<String>,
    pub prefix: Option<String>,
    pub project: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub server: Option<ObjectRef>,
    #[serde(rename = "type", default)]
    pub ip_type: Option<String>,
    pub zone: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct IpEnvelope {
    pub ip: Ip,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub project: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub arch: String,
    pub state: ImageState,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ImageEnvelope {
    pub image: Image,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Task {
    pub id: String,
    pub description: String,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TaskEnvelope {
    pub task: Task,
}

/// The body of `POST .../security_groups`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateSecurityGroup {
    pub name: String,
    pub description: String,
    pub project: String,
    pub tags: Vec<String>,
    pub stateful: bool,
    pub inbound_default_policy: Policy,
    pub outbound_default_policy: Policy,
    pub enable_default_security: bool,
}

/// One rule of `PUT .../security_groups/{id}/rules` (SetSecurityGroupRules): with an `id` it is
/// kept (or updated), without one it is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetRule {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub action: &'static str,
    pub protocol: Protocol,
    pub direction: &'static str,
    pub ip_range: String,
    /// `null` for ICMP (and ANY), which take no ports.
    pub dest_port_from: Option<u32>,
    /// `null` for one port.
    pub dest_port_to: Option<u32>,
    pub position: u32,
}

/// The body of `POST .../ips`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateIp {
    pub project: String,
    pub tags: Vec<String>,
    #[serde(rename = "type")]
    pub ip_type: &'static str,
}

/// The body of `POST .../servers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateServer {
    pub name: String,
    pub commercial_type: String,
    pub image: String,
    pub project: String,
    pub tags: Vec<String>,
    pub security_group: String,
    /// Flexible IPs attached at creation.
    pub public_ips: Vec<String>,
    pub dynamic_ip_required: bool,
    pub enable_ipv6: bool,
    /// The root volume, made from the image (`volumes["0"]`).
    pub volumes: ServerVolumes,
}

/// `CreateServer.volumes`: only the root volume, key "0" (scaleway-cli
/// `internal/namespaces/instance/v1/custom_server_create.go`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerVolumes {
    #[serde(rename = "0")]
    pub root: RootVolume,
}

/// The root volume of a new Instance: a Block volume made from the image's snapshot, grown to
/// `size` bytes (whole GB, Block's granularity; the snapshot's size if it is smaller).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RootVolume {
    pub size: u64,
    pub volume_type: &'static str,
}

impl RootVolume {
    /// A Block (`sbs_volume`) root volume of `size` bytes.
    pub fn block(size: u64) -> Self {
        RootVolume {
            size,
            volume_type: "sbs_volume",
        }
    }
}

/// The body of `POST .../images` from a Block snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateImage {
    pub name: String,
    /// The Block snapshot's id.
    pub root_volume: String,
    pub arch: &'static str,
    pub project: String,
    pub tags: Vec<String>,
}

/// Instance v1, in one zone.
#[derive(Debug, Clone, Copy)]
pub struct Instance<'c> {
    client: &'c Client<'c>,
}

impl<'c> Instance<'c> {
    pub fn new(client: &'c Client<'c>) -> Self {
        Instance { client }
    }

    /// A list the API filters on the client's project and on tags (comma separated, pages of
    /// `per_page`, the list's key named as the collection), checked again here: an object is kept
    /// only in the project and with every tag.
    fn tagged<X: Tagged + Owned + DeserializeOwned>(
        &self,
        zone: &str,
        collection: &str,
        tags: &[String],
    ) -> R<Vec<X>> {
        let all = self.client.list_mine(
            &format!("/instance/v1/zones/{zone}/{collection}"),
            "project",
            &[("tags", tags.join(","))],
            collection,
            "per_page",
        )?;
        Ok(with_every_tag(all, tags))
    }

    /// The first object of the project carrying every tag of `tags`: what a creation answered
    /// with a 5xx or cut would have made (the plan found none before it sent it).
    fn made<X: Tagged + Owned + DeserializeOwned>(
        &self,
        zone: &str,
        collection: &str,
        tags: &[String],
    ) -> R<Option<X>> {
        Ok(self.tagged(zone, collection, tags)?.into_iter().next())
    }

    fn path(zone: &str, rest: &str) -> String {
        format!("/instance/v1/zones/{zone}/{rest}")
    }

    /// Creates an object of `collection` with the tags `tags` (its answer the envelope `E`, which
    /// `wrap` and `unwrap` put it in and take it out of); answered with a 5xx or cut, what
    /// [`Instance::made`] finds is what it made. The object is the project's.
    fn create<B: Serialize, X: Tagged + Owned + DeserializeOwned, E: DeserializeOwned>(
        &self,
        zone: &str,
        collection: &str,
        body: &B,
        tags: &[String],
        wrap: fn(X) -> E,
        unwrap: fn(E) -> X,
    ) -> R<X> {
        let answer: E = self
            .client
            .post_checked(&Self::path(zone, collection), body, &|| {
                Ok(self.made(zone, collection, tags)?.map(wrap))
            })?;
        self.client.mine(unwrap(answer))
    }

    /// The object `id` of `collection`, taken out of its envelope `E` by `unwrap`; `None` once
    /// it is gone. The object is the project's.
    fn one<X: Owned, E: DeserializeOwned>(
        &self,
        zone: &str,
        collection: &str,
        id: &str,
        unwrap: fn(E) -> X,
    ) -> R<Option<X>> {
        let answer: Option<E> = self
            .client
            .get_opt(&Self::path(zone, &format!("{collection}/{id}")))?;
        answer.map(|a| self.client.mine(unwrap(a))).transpose()
    }

    // ---- security groups

    pub fn security_groups(&self, zone: &str, tags: &[String]) -> R<Vec<SecurityGroup>> {
        self.tagged(zone, "security_groups", tags)
    }

    pub fn create_security_group(
        &self,
        zone: &str,
        body: &CreateSecurityGroup,
    ) -> R<SecurityGroup> {
        self.create(
            zone,
            "security_groups",
            body,
            &body.tags,
            |security_group| SecurityGroupEnvelope { security_group },
            |answer| answer.security_group,
        )
    }

    pub fn delete_security_group(&self, zone: &str, id: &str) -> R<()> {
        self.client
            .delete(&Self::path(zone, &format!("security_groups/{id}")))
    }

    pub fn rules(&self, zone: &str, group: &str) -> R<Vec<Rule>> {
        self.client.list(
            &Self::path(zone, &format!("security_groups/{group}/rules")),
            &[],
            "rules",
            "per_page",
        )
    }

    /// Replaces every editable rule of the group with `rules` in one call (SetSecurityGroupRules:
    /// a rule with an `id` is kept or updated, one without is created, an editable rule left out
    /// is deleted; the others are untouched).
    pub fn set_rules(&self, zone: &str, group: &str, rules: &[SetRule]) -> R<()> {
        #[derive(Serialize)]
        struct Body<'a> {
            rules: &'a [SetRule],
        }
        let _: IgnoredAny = self.client.send(
            Method::Put,
            &Self::path(zone, &format!("security_groups/{group}/rules")),
            &Body { rules },
        )?;
        Ok(())
    }

    // ---- flexible IPs

    pub fn ips(&self, zone: &str, tags: &[String]) -> R<Vec<Ip>> {
        self.tagged(zone, "ips", tags)
    }

    pub fn create_ip(&self, zone: &str, body: &CreateIp) -> R<Ip> {
        self.create(
            zone,
            "ips",
            body,
            &body.tags,
            |ip| IpEnvelope { ip },
            |answer| answer.ip,
        )
    }

    /// Attaches the IP to a server.
    pub fn attach_ip(&self, zone: &str, ip: &str, server: &str) -> R<Ip> {
        #[derive(Serialize)]
        struct Body<'a> {
            server: &'a str,
        }
        let answer: IpEnvelope = self.client.send(
            Method::Patch,
            &Self::path(zone, &format!("ips/{ip}")),
            &Body { server },
        )?;
        self.client.mine(answer.ip)
    }

    pub fn delete_ip(&self, zone: &str, ip: &str) -> R<()> {
        self.client.delete(&Self::path(zone, &format!("ips/{ip}")))
    }

    // ---- images

    pub fn images(&self, zone: &str, tags: &[String]) -> R<Vec<Image>> {
        self.tagged(zone, "images", tags)
    }

    pub fn image(&self, zone: &str, id: &str) -> R<Option<Image>> {
        self.one(zone, "images", id, |answer: ImageEnvelope| answer.image)
    }

    pub fn create_image(&self, zone: &str, body: &CreateImage) -> R<Image> {
        self.create(
            zone,
            "images",
            body,
            &body.tags,
            |image| ImageEnvelope { image },
            |answer| answer.image,
        )
    }

    pub fn delete_image(&self, zone: &str, id: &str) -> R<()> {
        self.client
            .delete(&Self::path(zone, &format!("images/{id}")))
    }

    // ---- servers

    pub fn servers(&self, zone: &str, tags: &[String]) -> R<Vec<Server>> {
        self.tagged(zone, "servers", tags)
    }

    /// One server; `None` once it is gone.
    pub fn server(&self, zone: &str, id: &str) -> R<Option<Server>> {
        self.one(zone, "servers", id, |answer: ServerEnvelope| answer.server)
    }

    pub fn create_server(&self, zone: &str, body: &CreateServer) -> R<Server> {
        self.create(
            zone,
            "servers",
            body,
            &body.tags,
            |server| ServerEnvelope { server },
            |answer| answer.server,
        )
    }

    /// Puts the server in the security group.
    pub fn set_security_group(&self, zone: &str, id: &str, group: &str) -> R<Server> {
        #[derive(Serialize)]
        struct Group<'a> {
            id: &'a str,
        }
        #[derive(Serialize)]
        struct Body<'a> {
            security_group: Group<'a>,
        }
        let answer: ServerEnvelope = self.client.send(
            Method::Patch,
            &Self::path(zone, &format!("servers/{id}")),
            &Body {
                security_group: Group { id: group },
            },
        )?;
        self.client.mine(answer.server)
    }

    /// Sends `poweron`, `poweroff` or `terminate`. Answered with a 5xx or cut, the action took
    /// effect when the server no longer allows it (it is starting, stopping, or gone): only
    /// otherwise is it sent again.
    pub fn action(&self, zone: &str, id: &str, action: ServerAction) -> R<()> {
        #[derive(Serialize)]
        struct Body<'a> {
            action: &'a ServerAction,
        }
        let _: IgnoredAny = self.client.post_checked(
            &Self::path(zone, &format!("servers/{id}/action")),
            &Body { action: &action },
            &|| {
                Ok(match self.server(zone, id)? {
                    Some(server) if server.allows(&action) => None,
                    _ => Some(IgnoredAny),
                })
            },
        )?;
        Ok(())
    }

    /// The user data keys set on a server (`GET .../servers/{id}/user_data`).
    pub fn user_data_keys(&self, zone: &str, id: &str) -> R<Vec<String>> {
        #[derive(Deserialize)]
        struct Keys {
            user_data: Vec<String>,
        }
        let keys: Keys = self
            .client
            .get(&Self::path(zone, &format!("servers/{id}/user_data")), &[])?;
        Ok(keys.user_data)
    }

    /// Deletes the user data `key` of a server (`DELETE .../servers/{id}/user_data/{key}`).
    pub fn delete_user_data(&self, zone: &str, id: &str, key: &str) -> R<()> {
        self.client
            .delete(&Self::path(zone, &format!("servers/{id}/user_data/{key}")))
    }

    /// Sets the user data `key` of a server (`PATCH .../servers/{id}/user_data/{key}`, a
    /// `text/plain` body). Talos's Scaleway platform reads its machine config from the key
    /// `cloud-init` at boot.
    pub fn set_user_data(&self, zone: &str, id: &str, key: &str, content: &[u8]) -> R<()> {
        self.client.send_bytes(
            Method::Patch,
            &format!("/instance/v1/zones/{zone}/servers/{id}/user_data/{key}"),
            "text/plain",
            content,
        )
    }

    pub fn delete_server(&self, zone: &str, id: &str) -> R<()> {
        self.client
            .delete(&Self::path(zone, &format!("servers/{id}")))
    }

    /// A volume of the Instance API (a local volume a deleted server left behind).
    pub fn delete_volume(&self, zone: &str, id: &str) -> R<()> {
        self.client
            .delete(&Self::path(zone, &format!("volumes/{id}")))
    }
}

tagged!(SecurityGroup, Server, Ip, Image);

owned!(
    SecurityGroup: "security group",
    Server: "Instance",
    Ip: "flexible IP",
    Image: "image",
);
