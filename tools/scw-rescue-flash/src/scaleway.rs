//! The three Elastic Metal calls this tool needs, behind a narrow trait, made through scw-infra's
//! client (the same credentials, retries on 429 and 5xx with backoff, and Scaleway's error body
//! shown). Paths and field names are those of the Elastic Metal API v1
//! (`../shared/scaleway-openapi/scaleway.baremetal.v1.Api.yml`):
//! - `POST /baremetal/v1/zones/{zone}/servers/{server_id}/reboot` `{boot_type, ssh_key_ids}`;
//! - `GET /baremetal/v1/zones/{zone}/servers/{server_id}` (`name`, `status`, `boot_type`, `tags`,
//!   `rescue_server{user, password}`: the password is never read into memory here);
//! - `PATCH /baremetal/v1/zones/{zone}/servers/{server_id}` `{tags}`.

use scw_infra::api::client::{ApiError, Client, Sleeper};
use scw_infra::api::http::Transport;
use serde::Deserialize;

/// `boot_type` of a reboot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootType {
    Normal,
    Rescue,
}

impl BootType {
    pub fn as_str(self) -> &'static str {
        match self {
            BootType::Normal => "normal",
            BootType::Rescue => "rescue",
        }
    }
}

/// What this tool reads of `scaleway.baremetal.v1.Server`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Server {
    pub id: String,
    pub name: String,
    pub status: String,
    pub boot_type: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub rescue_server: Option<RescueServer>,
}

/// `rescue_server`: only the user (the password is ignored: key authentication only).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RescueServer {
    pub user: String,
}

/// The calls scw-rescue-flash makes to Scaleway.
pub trait ElasticMetal {
    fn reboot(
        &self,
        zone: &str,
        server_id: &str,
        boot_type: BootType,
        ssh_key_ids: &[String],
    ) -> Result<Server, String>;
    fn get(&self, zone: &str, server_id: &str) -> Result<Server, String>;
    /// Replaces the server's tags.
    fn set_tags(&self, zone: &str, server_id: &str, tags: &[String]) -> Result<Server, String>;
}

/// The real API, through scw-infra's client.
#[derive(Debug)]
pub struct ScwElasticMetal<T, S> {
    client: Client<T, S>,
}

impl<T: Transport, S: Sleeper> ScwElasticMetal<T, S> {
    pub fn new(client: Client<T, S>) -> Self {
        ScwElasticMetal { client }
    }

    fn server_path(zone: &str, server_id: &str) -> String {
        format!("/baremetal/v1/zones/{zone}/servers/{server_id}")
    }

    /// A mutating call's answer: this client never runs dry, so an answer is always there.
    fn answered(what: &str, answer: Result<Option<Server>, ApiError>) -> Result<Server, String> {
        match answer {
            Ok(Some(server)) => Ok(server),
            Ok(None) => Err(format!("{what}: no answer (dry run)")),
            Err(err) => Err(format!("{what}: {err}")),
        }
    }
}

impl<T: Transport, S: Sleeper> ElasticMetal for ScwElasticMetal<T, S> {
    fn reboot(
        &self,
        zone: &str,
        server_id: &str,
        boot_type: BootType,
        ssh_key_ids: &[String],
    ) -> Result<Server, String> {
        let mut body = serde_json::json!({ "boot_type": boot_type.as_str() });
        if !ssh_key_ids.is_empty() {
            body["ssh_key_ids"] = serde_json::json!(ssh_key_ids);
        }
        let path = format!("{}/reboot", Self::server_path(zone, server_id));
        Self::answered(
            &format!("reboot {server_id} ({})", boot_type.as_str()),
            self.client.mutate("POST", &path, Some(body)),
        )
    }

    fn get(&self, zone: &str, server_id: &str) -> Result<Server, String> {
        self.client
            .get(&Self::server_path(zone, server_id), &[])
            .map_err(|e| format!("get server {server_id}: {e}"))
    }

    fn set_tags(&self, zone: &str, server_id: &str, tags: &[String]) -> Result<Server, String> {
        Self::answered(
            &format!("tag server {server_id}"),
            self.client.mutate(
                "PATCH",
                &Self::server_path(zone, server_id),
                Some(serde_json::json!({ "tags": tags })),
            ),
        )
    }
}
