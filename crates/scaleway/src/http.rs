//! The narrow edge to the network: one request in, one response out. The client's logic (auth,
//! retries, pagination, errors) is tested over fakes of [`Transport`]; [`UreqTransport`] is the
//! real one.

use std::time::Duration;

/// One HTTP request, as the client builds it.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: &'static str,
    pub url: String,
    /// Includes `X-Auth-Token`: this type has a redacting `Debug` for that reason.
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

impl std::fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("url", &self.url)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("body_len", &self.body.as_ref().map(Vec::len))
            .finish()
    }
}

/// One HTTP response: any status (a 4xx is an answer, not a transport error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The connection failed or was cut before a whole response arrived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

/// Sends one request: the network, as the client and the S3 signer see it (handed in as
/// `&dyn Transport`, so tests script it).
pub trait Transport: std::fmt::Debug {
    fn send(&self, request: &HttpRequest) -> Result<HttpResponse, TransportError>;
}

/// The real transport: ureq, rustls, statuses returned as answers, bounded by a timeout.
#[derive(Debug)]
pub struct UreqTransport {
    agent: ureq::Agent,
}

impl UreqTransport {
    pub fn new(timeout: Duration) -> UreqTransport {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .user_agent(concat!("edgepop/", env!("CARGO_PKG_VERSION")))
            .build();
        UreqTransport {
            agent: config.into(),
        }
    }
}

impl Transport for UreqTransport {
    fn send(&self, request: &HttpRequest) -> Result<HttpResponse, TransportError> {
        let mut builder = ureq::http::Request::builder()
            .method(request.method)
            .uri(&request.url);
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        // ureq's errors name the URL and the cause, never a header value.
        let fail = |err: &dyn std::fmt::Display| TransportError(err.to_string());
        let result = match &request.body {
            Some(body) => self
                .agent
                .run(builder.body(body.clone()).map_err(|e| fail(&e))?),
            None => self.agent.run(builder.body(()).map_err(|e| fail(&e))?),
        };
        let mut response = result.map_err(|e| fail(&e))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = response
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_vec()
            .map_err(|e| fail(&e))?;
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}
