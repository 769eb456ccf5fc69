//! Elastic Metal v1 (`../shared/scaleway-openapi/scaleway.baremetal.v1.Api.yml`): offers, and
//! the server as the tools order, power, reboot into rescue, tag and delete it. One answer shape
//! for every call on a server: [`Server`], its status and boot type as enums.

use serde::{Deserialize, Serialize};

use crate::client::{Client, Method};
use crate::enums::api_enum;
use crate::error::R;
use crate::{owned, tagged, tags_query, with_every_tag};

/// The zones of the Elastic Metal API: the `zone` path parameter's enum, the same on every
/// operation of scaleway.baremetal.v1.Api.yml.
pub const ZONES: &[&str] = &[
    "fr-par-1", "fr-par-2", "nl-ams-1", "nl-ams-2", "pl-waw-2", "pl-waw-3",
];

api_enum! {
    /// `Server.status`.
    pub enum ServerStatus {
        /// The API's own "unknown" (its default), not a value this client does not know.
        Unknown = "unknown",
        Delivering = "delivering",
        Ready = "ready",
        Stopping = "stopping",
        Stopped = "stopped",
        Starting = "starting",
        Error = "error",
        Deleting = "deleting",
        Locked = "locked",
        OutOfStock = "out_of_stock",
        Ordered = "ordered",
        Resetting = "resetting",
        Migrating = "migrating",
    }
}

impl ServerStatus {
    /// A status the server does not leave by itself: waiting for another one is vain.
    pub fn is_failed(&self) -> bool {
        matches!(self, ServerStatus::Error | ServerStatus::OutOfStock)
    }
}

api_enum! {
    /// `Server.boot_type`, and the boot type of a reboot or a start.
    pub enum BootType {
        UnknownBootType = "unknown_boot_type",
        Normal = "normal",
        Rescue = "rescue",
    }
}

api_enum! {
    /// `Offer.stock`.
    pub enum Stock {
        Empty = "empty",
        Low = "low",
        Available = "available",
    }
}

api_enum! {
    /// `IP.version`.
    pub enum IpVersion {
        V4 = "IPv4",
        V6 = "IPv6",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Ip {
    pub id: String,
    pub address: String,
    pub version: IpVersion,
}

/// `rescue_server`: the rescue system's user and password. The user logs in with an SSH key;
/// the password is what its `sudo` asks for (the rescue user is not root).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RescueServer {
    pub user: String,
    #[serde(default)]
    pub password: RescuePassword,
}

/// The rescue password: written only to `sudo -S`'s standard input.
pub type RescuePassword = crate::creds::Secret;

/// `scaleway.baremetal.v1.Server`: what the tools read of it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Server {
    pub id: String,
    pub name: String,
    #[serde(rename = "project_id")]
    pub project: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub status: ServerStatus,
    pub boot_type: BootType,
    pub offer_id: String,
    #[serde(default)]
    pub offer_name: Option<String>,
    #[serde(default)]
    pub ips: Vec<Ip>,
    pub zone: String,
    #[serde(default)]
    pub rescue_server: Option<RescueServer>,
}

impl Server {
    /// The first address of `version`, parsed (none when it does not parse as one).
    fn address<A: std::str::FromStr>(&self, version: &IpVersion) -> Option<A> {
        self.ips
            .iter()
            .find(|ip| ip.version == *version)
            .and_then(|ip| ip.address.parse().ok())
    }

    /// Its first public IPv4.
    pub fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        self.address(&IpVersion::V4)
    }

    /// Its first public IPv6.
    pub fn ipv6(&self) -> Option<std::net::Ipv6Addr> {
        self.address(&IpVersion::V6)
    }

    /// Its first public IPv4, then its first public IPv6, those it has.
    pub fn public_addresses(&self) -> impl Iterator<Item = std::net::IpAddr> {
        let v4 = self.ipv4().map(std::net::IpAddr::V4);
        v4.into_iter().chain(self.ipv6().map(std::net::IpAddr::V6))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Offer {
    pub id: String,
    pub name: String,
    pub stock: Stock,
    pub enable: bool,
    #[serde(default)]
    pub subscription_period: Option<String>,
}

/// The body of `POST .../servers` (an order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateServer {
    pub offer_id: String,
    pub project_id: String,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
}

/// The body of `POST .../servers/{id}/reboot` and of `.../start` (StartServer takes the same
/// `boot_type` and `ssh_key_ids`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reboot {
    pub boot_type: BootType,
    /// Extra keys for the rescue image, by IAM id (none is sent as no field).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ssh_key_ids: Vec<String>,
}

/// Elastic Metal v1.
#[derive(Debug, Clone, Copy)]
pub struct Baremetal<'c> {
    client: &'c Client<'c>,
}

impl<'c> Baremetal<'c> {
    pub fn new(client: &'c Client<'c>) -> Self {
        Baremetal { client }
    }

    fn server_path(zone: &str, id: &str) -> String {
        format!("/baremetal/v1/zones/{zone}/servers/{id}")
    }

    /// The project's servers carrying every tag of `tags` (an array query: one `tags=` per tag).
    pub fn servers(&self, zone: &str, tags: &[String]) -> R<Vec<Server>> {
        let all = self.client.list_mine(
            &format!("/baremetal/v1/zones/{zone}/servers"),
            "project_id",
            &tags_query(tags),
            "servers",
            "page_size",
        )?;
        Ok(with_every_tag(all, tags))
    }

    /// One server; `None` once it is gone.
    pub fn server(&self, zone: &str, id: &str) -> R<Option<Server>> {
        self.client.get_mine(&Self::server_path(zone, id))
    }

    /// The server, when its status is one of `statuses`: whether an action answered with a 5xx
    /// or cut took effect.
    fn now_in(&self, zone: &str, id: &str, statuses: &[ServerStatus]) -> R<Option<Server>> {
        Ok(self
            .server(zone, id)?
            .filter(|s| statuses.contains(&s.status)))
    }

    /// The hourly offers of this exact name.
    pub fn offers(&self, zone: &str, name: &str) -> R<Vec<Offer>> {
        let all: Vec<Offer> = self.client.list(
            &format!("/baremetal/v1/zones/{zone}/offers"),
            &[
                ("name", name.to_owned()),
                ("subscription_period", "hourly".into()),
            ],
            "offers",
            "page_size",
        )?;
        Ok(all.into_iter().filter(|o| o.name == name).collect())
    }

    /// Orders a server (a billed one: answered with a 5xx or cut, the order is looked for by its
    /// tags before it is sent again).
    pub fn create_server(&self, zone: &str, body: &CreateServer) -> R<Server> {
        self.client.create(
            &format!("/baremetal/v1/zones/{zone}/servers"),
            body,
            &|| self.servers(zone, &body.tags),
        )
    }

    /// POSTs the server action `action` (`start`, `stop`); answered with a 5xx or cut, it took
    /// effect when `done` finds the server in a status the action leads to.
    fn server_action<B: Serialize + ?Sized>(
        &self,
        zone: &str,
        id: &str,
        action: &str,
        body: &B,
        done: &dyn Fn() -> R<Option<Server>>,
    ) -> R<Server> {
        let server: Server = self.client.post_checked(
            &format!("{}/{action}", Self::server_path(zone, id)),
            body,
            done,
        )?;
        self.client.mine(server)
    }

    /// Starts a stopped server (no body field: the boot type stays).
    pub fn start(&self, zone: &str, id: &str) -> R<Server> {
        self.server_action(zone, id, "start", &serde_json::json!({}), &|| {
            self.now_in(zone, id, &[ServerStatus::Starting, ServerStatus::Ready])
        })
    }

    /// Starts a stopped server into `boot_type`, with SSH keys for the rescue image: a server
    /// with no installed OS answers no reboot, only a stop then this. Answered with a 5xx or
    /// cut, the start took effect when the server is starting or ready in that boot type.
    pub fn start_into(&self, zone: &str, id: &str, body: &Reboot) -> R<Server> {
        self.server_action(zone, id, "start", body, &|| {
            Ok(self
                .now_in(zone, id, &[ServerStatus::Starting, ServerStatus::Ready])?
                .filter(|s| s.boot_type == body.boot_type))
        })
    }

    pub fn stop(&self, zone: &str, id: &str) -> R<Server> {
        self.server_action(zone, id, "stop", &serde_json::json!({}), &|| {
            self.now_in(zone, id, &[ServerStatus::Stopping, ServerStatus::Stopped])
        })
    }

    /// Reboots into `boot_type`, with extra SSH keys for the rescue image. Never sent again after
    /// a 5xx or a cut: nothing in the server tells a reboot that was done from one that was not.
    pub fn reboot(&self, zone: &str, id: &str, body: &Reboot) -> R<Server> {
        let server: Server = self.client.send(
            Method::Post,
            &format!("{}/reboot", Self::server_path(zone, id)),
            body,
        )?;
        self.client.mine(server)
    }

    /// Replaces the server's tags.
    pub fn set_tags(&self, zone: &str, id: &str, tags: &[String]) -> R<Server> {
        #[derive(Serialize)]
        struct Body<'a> {
            tags: &'a [String],
        }
        let server: Server =
            self.client
                .send(Method::Patch, &Self::server_path(zone, id), &Body { tags })?;
        self.client.mine(server)
    }

    pub fn delete_server(&self, zone: &str, id: &str) -> R<()> {
        self.client.delete(&Self::server_path(zone, id))
    }
}

tagged!(Server);

owned!(Server: "Elastic Metal server");
