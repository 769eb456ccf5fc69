//! The few Kubernetes API calls the in-cluster jobs make (lists-refresh, etcd-backup): GET an
//! object, server-side apply a patch.
//!
//! A plain HTTPS client (ureq, rustls trusting only the cluster's CA) with the ServiceAccount's
//! bearer token: a handful of requests per run do not justify an async runtime and kube's stack
//! in a CronJob image. The token is read from its file and only ever sent in the Authorization
//! header: never logged, never in an argument.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// Where the kubelet projects a pod's ServiceAccount credentials (`token`, `ca.crt`).
pub const SERVICEACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Where the API server is: the URL given (`--api-server`), else the pod's, from
/// `KUBERNETES_SERVICE_HOST` and `_PORT` (an IPv6 host bracketed).
pub fn api_server(
    given: Option<String>,
    host: Option<&str>,
    port: Option<&str>,
) -> Result<String, ApiServerError> {
    let url = match (given, host, port) {
        (Some(url), _, _) => url,
        (None, Some(host), Some(port)) if host.contains(':') => format!("https://[{host}]:{port}"),
        (None, Some(host), Some(port)) => format!("https://{host}:{port}"),
        _ => return Err(ApiServerError::NotInCluster),
    };
    if url.starts_with("https://") || url.starts_with("http://") {
        Ok(url)
    } else {
        Err(ApiServerError::NotHttp(url))
    }
}

/// Why there is no API server to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiServerError {
    /// None given, and not in a pod.
    NotInCluster,
    /// The URL given is not an http(s) one.
    NotHttp(String),
}

/// Why a call failed: the client's inputs (CA, token), or the API server's answer.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("cluster CA {}: {reason}", path.display())]
    Ca { path: PathBuf, reason: String },
    #[error("ServiceAccount token {}: {source}", path.display())]
    Token {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{method} {path}: Kubernetes API unreachable: {detail}")]
    Unreachable {
        method: &'static str,
        path: String,
        detail: String,
    },
    /// The API server answered with an error status (its `Status.message` when it sent one).
    #[error("{method} {path}: HTTP {status}: {message}")]
    Status {
        method: &'static str,
        path: String,
        status: u16,
        message: String,
    },
    #[error("{method} {path}: invalid JSON: {detail}")]
    Json {
        method: &'static str,
        path: String,
        detail: String,
    },
}

impl KubeError {
    /// Whether the client's own inputs are wrong (a usage error), not the API server's answer.
    pub fn is_usage(&self) -> bool {
        matches!(self, KubeError::Ca { .. } | KubeError::Token { .. })
    }
}

/// A client for one API server.
#[derive(Debug)]
pub struct Kube {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Kube {
    /// `base` is `https://host:port` (or `http://` for a loopback stand-in). The CA file is
    /// trusted alone when present; the token file, when present, authenticates every request.
    /// `user_agent` names the job (`edgepop-lists-refresh/0.1.0`).
    pub fn new(
        base: &str,
        ca_file: &Path,
        token_file: &Path,
        user_agent: &str,
    ) -> Result<Kube, KubeError> {
        let mut config = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .user_agent(user_agent);
        if base.starts_with("https://") {
            let pem = std::fs::read(ca_file).map_err(|e| KubeError::Ca {
                path: ca_file.to_path_buf(),
                reason: e.to_string(),
            })?;
            let certs: Vec<_> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(cert)) => Some(cert),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err(KubeError::Ca {
                    path: ca_file.to_path_buf(),
                    reason: "no certificate".into(),
                });
            }
            let tls = ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)))
                .build();
            config = config.tls_config(tls);
        }
        let token = match std::fs::read_to_string(token_file) {
            Ok(token) => Some(token.trim().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(KubeError::Token {
                    path: token_file.to_path_buf(),
                    source: e,
                });
            }
        };
        Ok(Kube {
            base: base.trim_end_matches('/').to_string(),
            token,
            agent: config.build().into(),
        })
    }

    /// GETs `path`; `None` when the object does not exist.
    pub fn get(&self, path: &str) -> Result<Option<Value>, KubeError> {
        let mut request = self.agent.get(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let response = request.call().map_err(|e| api_error("GET", path, e))?;
        let status = response.status().as_u16();
        let body = read_body(response, "GET", path)?;
        match status {
            200 => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| KubeError::Json {
                    method: "GET",
                    path: path.to_owned(),
                    detail: e.to_string(),
                }),
            404 => Ok(None),
            _ => Err(status_error("GET", path, status, &body)),
        }
    }

    /// Server-side apply of `object` at `path`, as `field_manager`, taking over conflicting
    /// fields (`force=true`): the refresh is the only writer of what it applies.
    pub fn apply(&self, path: &str, object: &Value, field_manager: &str) -> Result<(), KubeError> {
        let url = format!(
            "{}{path}?fieldManager={field_manager}&force=true",
            self.base
        );
        let body = serde_json::to_vec(object).map_err(|e| KubeError::Json {
            method: "PATCH",
            path: path.to_owned(),
            detail: e.to_string(),
        })?;
        let mut request = self
            .agent
            .patch(url)
            .header("Content-Type", "application/apply-patch+yaml")
            .header("Accept", "application/json");
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let response = request
            .send(&body[..])
            .map_err(|e| api_error("PATCH", path, e))?;
        let status = response.status().as_u16();
        let answer = read_body(response, "PATCH", path)?;
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(status_error("PATCH", path, status, &answer))
        }
    }
}

fn read_body(
    response: ureq::http::Response<ureq::Body>,
    method: &'static str,
    path: &str,
) -> Result<Vec<u8>, KubeError> {
    response
        .into_body()
        .with_config()
        .limit(16 * 1024 * 1024)
        .read_to_vec()
        .map_err(|e| api_error(method, path, e))
}

fn api_error(method: &'static str, path: &str, err: ureq::Error) -> KubeError {
    KubeError::Unreachable {
        method,
        path: path.to_owned(),
        detail: err.to_string(),
    }
}

/// The API server's own message (`Status.message`) when it sent one.
fn status_error(method: &'static str, path: &str, status: u16, body: &[u8]) -> KubeError {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect());
    KubeError::Status {
        method,
        path: path.to_owned(),
        status,
        message,
    }
}
