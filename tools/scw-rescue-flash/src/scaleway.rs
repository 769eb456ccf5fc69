//! The three Elastic Metal calls this tool needs, behind a narrow trait (to be unified with
//! scw-infra's client). Paths and field names are those of the Elastic Metal API v1
//! (`../shared/scaleway-openapi/scaleway.baremetal.v1.Api.yml`):
//! - `POST /baremetal/v1/zones/{zone}/servers/{server_id}/reboot` `{boot_type, ssh_key_ids}`;
//! - `GET /baremetal/v1/zones/{zone}/servers/{server_id}` (`name`, `status`, `boot_type`, `tags`,
//!   `rescue_server{user, password}`: the password is never read into memory here);
//! - `PATCH /baremetal/v1/zones/{zone}/servers/{server_id}` `{tags}`.

use std::fmt;
use std::time::Duration;

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

/// The secret key, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretKey(String);

impl SecretKey {
    pub fn new(key: String) -> Self {
        SecretKey(key)
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(<redacted>)")
    }
}

/// The real API over https (ureq).
#[derive(Debug)]
pub struct UreqElasticMetal {
    base_url: String,
    secret_key: SecretKey,
    agent: ureq::Agent,
}

impl UreqElasticMetal {
    pub fn new(base_url: &str, secret_key: SecretKey, timeout: Duration) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .new_agent();
        UreqElasticMetal {
            base_url: base_url.trim_end_matches('/').to_owned(),
            secret_key,
            agent,
        }
    }

    fn server_url(&self, zone: &str, server_id: &str) -> String {
        format!(
            "{}/baremetal/v1/zones/{zone}/servers/{server_id}",
            self.base_url
        )
    }

    fn decode(
        what: &str,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Server, String> {
        let mut response = response.map_err(|e| format!("{what}: {e}"))?;
        let status = response.status();
        let body = response
            .body_mut()
            .read_to_string()
            .map_err(|e| format!("{what}: reading the answer: {e}"))?;
        if !status.is_success() {
            // Scaleway's error body: {"message", "type", ...}.
            let message = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
                .unwrap_or_default();
            return Err(format!("{what}: HTTP {}: {message}", status.as_u16()));
        }
        serde_json::from_str(&body).map_err(|e| format!("{what}: unexpected answer: {e}"))
    }
}

impl ElasticMetal for UreqElasticMetal {
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
        let response = self
            .agent
            .post(format!("{}/reboot", self.server_url(zone, server_id)))
            .header("X-Auth-Token", &self.secret_key.0)
            .header("Content-Type", "application/json")
            .send(body.to_string());
        Self::decode(
            &format!("reboot {server_id} ({})", boot_type.as_str()),
            response,
        )
    }

    fn get(&self, zone: &str, server_id: &str) -> Result<Server, String> {
        let response = self
            .agent
            .get(self.server_url(zone, server_id))
            .header("X-Auth-Token", &self.secret_key.0)
            .call();
        Self::decode(&format!("get server {server_id}"), response)
    }

    fn set_tags(&self, zone: &str, server_id: &str, tags: &[String]) -> Result<Server, String> {
        let response = self
            .agent
            .patch(self.server_url(zone, server_id))
            .header("X-Auth-Token", &self.secret_key.0)
            .header("Content-Type", "application/json")
            .send(serde_json::json!({ "tags": tags }).to_string());
        Self::decode(&format!("tag server {server_id}"), response)
    }
}
