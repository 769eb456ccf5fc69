//! Pushing an image layout to a registry through the OCI distribution API (distribution-spec
//! "push": blob upload by POST then PUT with `?digest=`, then the manifest PUT by tag), with the
//! registry's token or basic authentication.
//!
//! A registry on a loopback address is spoken to in plain HTTP (as Docker and skopeo treat
//! `localhost`); every other one in HTTPS with the webpki roots.

use std::cell::RefCell;
use std::fmt;
use std::io::Read;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::layout::{Layout, MANIFEST_MEDIA_TYPE};

/// A user name and password (or token) for the registry. Never printed: `Debug` hides both.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

impl Credentials {
    fn basic(&self) -> String {
        let pair = format!("{}:{}", self.username, self.password);
        format!("Basic {}", BASE64.encode(pair))
    }
}

/// Where a registry is: `host[:port]`, and whether it is spoken to in plain HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub host: String,
    pub plain_http: bool,
}

impl Host {
    pub fn new(host: &str) -> Host {
        let name = match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        };
        let plain_http = matches!(name, "localhost" | "127.0.0.1" | "[::1]");
        Host {
            host: host.to_string(),
            plain_http,
        }
    }

    fn base(&self) -> String {
        let scheme = if self.plain_http { "http" } else { "https" };
        format!("{scheme}://{}", self.host)
    }
}

/// The push failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PushError(pub String);

struct Answer {
    status: u16,
    location: Option<String>,
    digest: Option<String>,
    authenticate: Option<String>,
    body: String,
}

/// A client of one registry.
pub struct Client {
    host: Host,
    credentials: Option<Credentials>,
    agent: ureq::Agent,
    /// The Authorization header that worked for a repository, so each request does not
    /// start with a 401.
    authorization: RefCell<Option<(String, String)>>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("host", &self.host)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub fn new(host: Host, credentials: Option<Credentials>) -> Client {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(300)))
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(concat!("edgepop-oci-image/", env!("CARGO_PKG_VERSION")))
            .build();
        Client {
            host,
            credentials,
            agent: config.into(),
            authorization: RefCell::new(None),
        }
    }

    /// Pushes every blob of `layout` that the registry lacks, then its manifest as
    /// `repository:tag`; returns the digest the registry computed, which must be ours.
    pub fn push(&self, layout: &Layout, repository: &str) -> Result<String, PushError> {
        let blobs = std::iter::once(&layout.parsed.config).chain(&layout.parsed.layers);
        for blob in blobs {
            let url = format!("{}/v2/{repository}/blobs/{}", self.host.base(), blob.digest);
            let answer = self.request(repository, "HEAD", &url, None, None)?;
            if answer.status == 200 {
                pop_common::info!("{repository}: blob {} already there", blob.digest);
                continue;
            }
            let bytes = Layout::blob(&layout.dir, &blob.digest).map_err(PushError)?;
            self.upload(repository, &blob.digest, &bytes)?;
            pop_common::info!(
                "{repository}: pushed blob {} ({} bytes)",
                blob.digest,
                bytes.len()
            );
        }
        let url = format!(
            "{}/v2/{repository}/manifests/{}",
            self.host.base(),
            layout.tag
        );
        let answer = self.request(
            repository,
            "PUT",
            &url,
            Some(MANIFEST_MEDIA_TYPE),
            Some(&layout.manifest),
        )?;
        if answer.status != 201 {
            return Err(status_error("PUT manifest", &url, &answer));
        }
        match answer.digest {
            Some(digest) if digest != layout.manifest_digest => Err(PushError(format!(
                "{url}: the registry stored the manifest as {digest}, not {}: it rewrote it, \
                 and the digest pinned by the edge would not match what it serves",
                layout.manifest_digest
            ))),
            _ => Ok(layout.manifest_digest.clone()),
        }
    }

    fn upload(&self, repository: &str, digest: &str, bytes: &[u8]) -> Result<(), PushError> {
        let start = format!("{}/v2/{repository}/blobs/uploads/", self.host.base());
        let answer = self.request(repository, "POST", &start, None, Some(&[]))?;
        if answer.status != 202 {
            return Err(status_error("POST blob upload", &start, &answer));
        }
        let location = answer
            .location
            .ok_or_else(|| PushError(format!("{start}: 202 without a Location header")))?;
        let location = if location.starts_with('/') {
            format!("{}{location}", self.host.base())
        } else {
            location
        };
        let separator = if location.contains('?') { '&' } else { '?' };
        let url = format!("{location}{separator}digest={digest}");
        let answer = self.request(
            repository,
            "PUT",
            &url,
            Some("application/octet-stream"),
            Some(bytes),
        )?;
        if answer.status != 201 {
            return Err(status_error("PUT blob", &start, &answer));
        }
        Ok(())
    }

    /// One request, authenticated: on a 401 the challenge is answered once (basic, or a bearer
    /// token from the realm it names) and the request sent again.
    fn request(
        &self,
        repository: &str,
        method: &str,
        url: &str,
        content_type: Option<&str>,
        body: Option<&[u8]>,
    ) -> Result<Answer, PushError> {
        // An upload Location may point elsewhere (a storage backend): the registry's
        // credentials and token are for the registry only.
        if !url.starts_with(&format!("{}/", self.host.base())) {
            return self.send(method, url, content_type, body, None);
        }
        let cached = self
            .authorization
            .borrow()
            .as_ref()
            .filter(|(repo, _)| repo == repository)
            .map(|(_, header)| header.clone());
        let answer = self.send(method, url, content_type, body, cached.as_deref())?;
        if answer.status != 401 {
            return Ok(answer);
        }
        let challenge = answer.authenticate.unwrap_or_default();
        let header = self.answer_challenge(&challenge, repository)?;
        let answer = self.send(method, url, content_type, body, Some(&header))?;
        if answer.status == 401 {
            return Err(PushError(format!(
                "{method} {url}: the registry refused the credentials (401)"
            )));
        }
        *self.authorization.borrow_mut() = Some((repository.to_string(), header));
        Ok(answer)
    }

    fn answer_challenge(&self, challenge: &str, repository: &str) -> Result<String, PushError> {
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        let params = parse_params(params);
        let missing = || {
            PushError(format!(
                "{} asks for credentials: set EDGEPOP_REGISTRY_USERNAME and \
                 EDGEPOP_REGISTRY_PASSWORD, or EDGEPOP_REGISTRY_AUTH_FILE",
                self.host.host
            ))
        };
        if scheme.eq_ignore_ascii_case("basic") {
            return self
                .credentials
                .as_ref()
                .map(Credentials::basic)
                .ok_or_else(missing);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(PushError(format!(
                "{}: unknown authentication challenge `{challenge}`",
                self.host.host
            )));
        }
        let realm = params
            .iter()
            .find(|(k, _)| k == "realm")
            .map(|(_, v)| v.clone())
            .ok_or_else(|| PushError(format!("bearer challenge without realm: `{challenge}`")))?;
        let scope = percent_encode(&format!("repository:{repository}:pull,push"));
        let separator = if realm.contains('?') { '&' } else { '?' };
        let mut url = format!("{realm}{separator}scope={scope}");
        if let Some((_, service)) = params.iter().find(|(k, _)| k == "service") {
            url.push_str("&service=");
            url.push_str(&percent_encode(service));
        }
        let basic = self.credentials.as_ref().map(Credentials::basic);
        let answer = self.send("GET", &url, None, None, basic.as_deref())?;
        if answer.status == 401 || answer.status == 403 {
            return Err(if self.credentials.is_some() {
                PushError(format!(
                    "{realm}: the token service refused the credentials ({})",
                    answer.status
                ))
            } else {
                missing()
            });
        }
        if answer.status != 200 {
            return Err(status_error("GET token", &realm, &answer));
        }
        let json: serde_json::Value = serde_json::from_str(&answer.body)
            .map_err(|e| PushError(format!("{realm}: the token answer is not JSON: {e}")))?;
        let token = json
            .get("token")
            .or_else(|| json.get("access_token"))
            .and_then(|t| t.as_str())
            .ok_or_else(|| PushError(format!("{realm}: the token answer has no token")))?;
        Ok(format!("Bearer {token}"))
    }

    fn send(
        &self,
        method: &str,
        url: &str,
        content_type: Option<&str>,
        body: Option<&[u8]>,
        authorization: Option<&str>,
    ) -> Result<Answer, PushError> {
        let mut request = ureq::http::Request::builder().method(method).uri(url);
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        if let Some(content_type) = content_type {
            request = request.header("Content-Type", content_type);
        }
        if method == "HEAD" || method == "GET" {
            request = request.header("Accept", MANIFEST_MEDIA_TYPE);
        }
        let request = request
            .body(body.unwrap_or_default().to_vec())
            .map_err(|e| PushError(format!("{method} {url}: {e}")))?;
        let response = self
            .agent
            .run(request)
            .map_err(|e| PushError(format!("{method} {url}: registry unreachable: {e}")))?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let status = response.status().as_u16();
        let location = header("location");
        let digest = header("docker-content-digest");
        let authenticate = header("www-authenticate");
        let mut text = String::new();
        if method != "HEAD" {
            response
                .into_body()
                .into_reader()
                .take(1024 * 1024)
                .read_to_string(&mut text)
                .map_err(|e| PushError(format!("{method} {url}: reading the answer: {e}")))?;
        }
        Ok(Answer {
            status,
            location,
            digest,
            authenticate,
            body: text,
        })
    }
}

fn status_error(what: &str, url: &str, answer: &Answer) -> PushError {
    let body: String = answer.body.chars().take(400).collect();
    PushError(format!("{what} {url}: status {}: {body}", answer.status))
}

/// `realm="https://x",service="y",scope="z"` into pairs.
fn parse_params(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.split_once('"') {
                Some((value, next)) => (value, next),
                None => (quoted, ""),
            }
        } else {
            after.split_once(',').unwrap_or((after, ""))
        };
        out.push((key, value.to_string()));
        rest = next.trim_start_matches(',').trim();
    }
    out
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_is_split_into_its_parameters() {
        let params = parse_params(
            r#"realm="https://api.scaleway.com/registry-internal/v1/regions/fr-par/tokens",service="registry",scope="repository:edgepop/pow-filter:pull,push""#,
        );
        assert_eq!(
            params,
            vec![
                (
                    "realm".to_string(),
                    "https://api.scaleway.com/registry-internal/v1/regions/fr-par/tokens"
                        .to_string()
                ),
                ("service".to_string(), "registry".to_string()),
                (
                    "scope".to_string(),
                    "repository:edgepop/pow-filter:pull,push".to_string()
                ),
            ]
        );
    }

    #[test]
    fn only_loopback_registries_are_plain_http() {
        assert!(Host::new("127.0.0.1:5000").plain_http);
        assert!(Host::new("localhost:5000").plain_http);
        assert!(Host::new("[::1]:5000").plain_http);
        assert!(!Host::new("rg.fr-par.scw.cloud").plain_http);
        assert!(!Host::new("127.0.0.1.example.com").plain_http);
    }

    #[test]
    fn credentials_never_show_in_debug_output() {
        let creds = Credentials {
            username: "nologin".into(),
            password: "s3cret-key".into(),
        };
        let client = Client::new(Host::new("rg.fr-par.scw.cloud"), Some(creds));
        let text = format!("{client:?}");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(!text.contains("nologin"), "{text}");
    }
}
