//! The narrow edge to the network: one request in, one response out. The client's logic (auth,
//! retries, pagination, errors) is tested over fakes of [`Transport`]; [`UreqTransport`] is the
//! real one.
//!
//! Every request carries a credential (the `X-Auth-Token` header, or an S3 signature), so the
//! transport follows no redirect: a 3xx is an answer, and the credential never reaches another
//! host. The endpoints are checked once, where they are configured ([`check_endpoint`]): https,
//! or plain http on a loopback address only (the tests' stand-ins).

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
#[error("{message}")]
pub struct TransportError {
    pub failure: Failure,
    /// What the HTTP library said.
    pub message: String,
}

/// How a request failed to get an answer: whether sending it again can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The host name did not resolve (the resolver failed or gave no address): a wrong name or
    /// a machine without DNS, which a retry seconds later does not change. Nothing was sent.
    Resolve,
    /// Refused, timed out, reset, cut before the whole answer: worth another try (and, for a
    /// call that changes something, the request may have arrived).
    Connection,
}

impl TransportError {
    pub fn connection(message: impl Into<String>) -> TransportError {
        TransportError {
            failure: Failure::Connection,
            message: message.into(),
        }
    }

    pub fn resolve(message: impl Into<String>) -> TransportError {
        TransportError {
            failure: Failure::Resolve,
            message: message.into(),
        }
    }

    /// Whether a retry may get an answer: not when the name does not resolve.
    pub fn retryable(&self) -> bool {
        self.failure != Failure::Resolve
    }

    /// What follows `METHOD URL: ` in a report of it after `attempts`: which host could not be
    /// found, or what happened and how many times it was tried.
    pub fn detail(&self, url: &str, attempts: u32) -> String {
        match self.failure {
            Failure::Resolve => format!(
                "cannot resolve the host {} ({}): not retried, check the name and this \
                 machine's DNS",
                host_of(url),
                self.message
            ),
            Failure::Connection => format!("{} (gave up after {attempts} attempts)", self.message),
        }
    }
}

/// The host (and port) of a URL: what lies between `scheme://` and the path.
pub fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest)
}

/// The ureq error of a request that got no answer, classified: a name that does not resolve is
/// ureq's `HostNotFound` (the resolver gave no address) or the resolver's own error, which
/// ureq passes on as `Io`: std's getaddrinfo error reads `failed to lookup address
/// information: <gai_strerror>` (`cvt_gai`, in std's unix socket module).
fn classify(error: &ureq::Error) -> TransportError {
    let message = error.to_string();
    let resolve = match error {
        ureq::Error::HostNotFound => true,
        ureq::Error::Io(io) => io
            .to_string()
            .starts_with("failed to lookup address information"),
        _ => false,
    };
    if resolve {
        TransportError::resolve(message)
    } else {
        TransportError::connection(message)
    }
}

/// Sends one request: the network, as the client and the S3 signer see it (handed in as
/// `&dyn Transport`, so tests script it).
pub trait Transport: std::fmt::Debug {
    fn send(&self, request: &HttpRequest) -> Result<HttpResponse, TransportError>;
}

/// Why an endpoint is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} `{url}`: {why}")]
pub struct EndpointError {
    /// Where it was configured (`SCW_API_URL`, `SCW_S3_ENDPOINT`).
    pub what: String,
    pub url: String,
    pub why: &'static str,
}

/// Why [`check_url`] refuses a URL; each caller words it for its own flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlRefusal {
    NotAUrl,
    NoHost,
    /// `user:secret@` before the host: it would also let `http://127.0.0.1:x@elsewhere/` read
    /// as loopback.
    Credentials,
    /// `http://` to a host that is not loopback.
    PlainHttp,
    NotHttp,
}

/// A URL something may be sent to or fetched from: `https://host...`, or `http://` on a loopback
/// address (127.0.0.0/8, ::1, localhost), where nothing leaves the machine; never with
/// credentials before the host. Returns it parsed.
pub fn check_url(url: &str) -> Result<ureq::http::Uri, UrlRefusal> {
    let uri: ureq::http::Uri = url.parse().map_err(|_| UrlRefusal::NotAUrl)?;
    let host = uri.host().ok_or(UrlRefusal::NoHost)?;
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(UrlRefusal::Credentials);
    }
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") if pop_common::url::is_loopback_host(host) => {}
        Some("http") => return Err(UrlRefusal::PlainHttp),
        _ => return Err(UrlRefusal::NotHttp),
    }
    Ok(uri)
}

/// An endpoint a credential may be sent to: a URL [`check_url`] takes, without a query.
pub fn check_endpoint(what: &str, url: &str) -> Result<(), EndpointError> {
    let refuse = |why| {
        Err(EndpointError {
            what: what.to_owned(),
            url: url.to_owned(),
            why,
        })
    };
    match check_url(url) {
        Ok(uri) if uri.query().is_some() => refuse("a URL with a query"),
        Ok(_) => Ok(()),
        Err(UrlRefusal::NotAUrl) => refuse("not a URL"),
        Err(UrlRefusal::NoHost) => refuse("not an absolute URL with a host"),
        Err(UrlRefusal::Credentials) => refuse("a URL with credentials in it"),
        Err(UrlRefusal::PlainHttp) => {
            refuse("plain http is only for a loopback address: use https")
        }
        Err(UrlRefusal::NotHttp) => refuse("not an http(s) URL"),
    }
}

/// The real transport: ureq, rustls, statuses returned as answers (a redirect too: none is
/// followed), bounded by a timeout.
#[derive(Debug)]
pub struct UreqTransport {
    agent: ureq::Agent,
}

impl UreqTransport {
    /// Every request bounded by `timeout`, from connecting to the answer's last byte.
    pub fn new(timeout: Duration) -> UreqTransport {
        Self::build(Self::config().timeout_global(Some(timeout)))
    }

    /// For large bodies sent several at once (the parts of an upload to Object Storage): how long
    /// one takes depends on the link and on how many share it, so a request has no total bound,
    /// but a connection on which no byte moves for `stall` is given up (and the request retried).
    /// Up to `connections` idle connections are kept per host, one for each request in flight, so
    /// that none is opened again (a TLS handshake) for the next part; ureq keeps 3 by default.
    pub fn for_uploads(stall: Duration, connections: usize) -> UreqTransport {
        Self::build(
            Self::config()
                .timeout_connect(Some(stall))
                .timeout_per_read(Some(stall))
                .timeout_per_write(Some(stall))
                .max_idle_connections(connections.max(10))
                .max_idle_connections_per_host(connections),
        )
    }

    fn config() -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            // ureq follows redirects by default, headers and all: the token would go to
            // whatever host a redirect names.
            .max_redirects(0)
            .user_agent(concat!("edgepop/", env!("CARGO_PKG_VERSION")))
    }

    fn build(config: ureq::config::ConfigBuilder<ureq::typestate::AgentScope>) -> UreqTransport {
        UreqTransport {
            agent: config.build().into(),
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
        let fail = |err: &dyn std::fmt::Display| TransportError::connection(err.to_string());
        let result = match &request.body {
            Some(body) => self
                .agent
                // Sent from the request's own buffer: a part is tens of MiB, not worth a copy.
                .run(builder.body(body.as_slice()).map_err(|e| fail(&e))?),
            None => self.agent.run(builder.body(()).map_err(|e| fail(&e))?),
        };
        let mut response = result.map_err(|e| classify(&e))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_a_url_is_between_the_scheme_and_the_path() {
        assert_eq!(host_of("https://api.scaleway.com"), "api.scaleway.com");
        assert_eq!(
            host_of("https://s3.fr-par.scw.cloud/b/k"),
            "s3.fr-par.scw.cloud"
        );
        assert_eq!(host_of("http://127.0.0.1:8080/x?y=1"), "127.0.0.1:8080");
        assert_eq!(host_of("http://[::1]:9000"), "[::1]:9000");
    }

    #[test]
    fn an_endpoint_is_https_or_plain_http_on_loopback() {
        for good in [
            "https://api.scaleway.com",
            "https://s3.fr-par.scw.cloud/",
            "http://127.0.0.1:8080",
            "http://127.1.2.3",
            "http://[::1]:9000",
            "http://localhost:1",
        ] {
            assert_eq!(check_endpoint("SCW_API_URL", good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("http://api.scaleway.com", "plain http"),
            ("http://10.0.0.1", "plain http"),
            ("http://127.0.0.1.evil.example", "plain http"),
            ("ftp://127.0.0.1", "not an http"),
            ("api.scaleway.com", "not an http"),
            ("/relative", "host"),
            ("https://user:pw@api.scaleway.com", "credentials"),
            ("https://api.scaleway.com/?x=1", "query"),
        ] {
            let err = check_endpoint("SCW_API_URL", bad).unwrap_err().to_string();
            assert!(
                err.contains(why) && err.contains("SCW_API_URL"),
                "{bad}: {err}"
            );
        }
    }
}
