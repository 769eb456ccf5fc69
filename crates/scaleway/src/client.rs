//! The Scaleway API client: the `X-Auth-Token` header, JSON in and out, retries of 429 and 5xx
//! with bounded exponential backoff, jitter and `Retry-After`, Scaleway's error bodies shown on a
//! 4xx, pagination, and a count of the calls made. Every call returns `Result<R, ApiError>`: the
//! client sends what it is asked and knows nothing of plans or dry runs (those belong to the tool
//! that decides what to send).
//!
//! The outside world comes in as two narrow traits, `&dyn Transport` (the network) and
//! `&dyn Sleeper` (the clock between retries), as every outside dependency of the tools does.

use std::cell::Cell;
use std::fmt;
use std::time::Duration;

use pop_common::wait::Sleeper;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::creds::SecretKey;
use crate::http::{HttpRequest, HttpResponse, Transport, TransportError};

/// What a call does to the world, which decides what may be repeated after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    /// Creates (a server, an IP, an order) or acts (reboot, poweron): sent twice, it may do it
    /// twice, so a POST whose answer was lost is never sent again blindly.
    Post,
    Put,
    Patch,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }

    /// Sending it twice has the effect of sending it once (RFC 9110, 9.2.2): all but POST.
    pub fn idempotent(self) -> bool {
        self != Method::Post
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How hard to retry a 429, a 5xx or a cut connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (the first included).
    pub attempts: u32,
    /// The first backoff; doubled at each retry.
    pub base: Duration,
    /// No single wait is longer, `Retry-After` included.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 6,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0 for the first): full jitter over the upper half of
    /// the exponential step, never less than `Retry-After`, never more than the cap.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, random: u64) -> Duration {
        let step = self
            .base
            .saturating_mul(1u32.checked_shl(retry.min(20)).unwrap_or(u32::MAX))
            .min(self.cap);
        let half = step / 2;
        let spread = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
        let jitter = Duration::from_millis(if spread == 0 {
            0
        } else {
            random % (spread + 1)
        });
        let backoff = half + jitter;
        retry_after
            .map_or(backoff, |ra| ra.max(backoff))
            .min(self.cap)
    }
}

/// Scaleway's error body (scaleway-sdk-go `scw/errors.go`): every field optional, as the
/// Elastic Metal API answers a 400 with a `message` only.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ScwErrorBody {
    pub message: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub resource: Option<String>,
    pub resource_id: Option<String>,
    pub current_state: Option<String>,
    pub fields: Option<Value>,
    pub details: Option<Value>,
    pub help_message: Option<String>,
}

impl fmt::Display for ScwErrorBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message.as_deref().unwrap_or("(no message)"))?;
        if let Some(kind) = &self.kind {
            write!(f, " [type {kind}]")?;
        }
        if let Some(resource) = &self.resource {
            write!(f, " resource {resource}")?;
            if let Some(id) = &self.resource_id {
                write!(f, " {id}")?;
            }
        }
        if let Some(state) = &self.current_state {
            write!(f, " (current state {state})")?;
        }
        if let Some(help) = &self.help_message {
            write!(f, "; {help}")?;
        }
        if let Some(fields) = self.fields.as_ref().filter(|v| !v.is_null()) {
            write!(f, "; fields {fields}")?;
        }
        if let Some(details) = self.details.as_ref().filter(|v| !v.is_null()) {
            write!(f, "; details {details}")?;
        }
        Ok(())
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{method} {path}: HTTP {status}: {body}")]
    Status {
        method: Method,
        path: String,
        status: u16,
        body: Box<ScwErrorBody>,
    },
    #[error("{method} {path}: HTTP {status} (body is not a Scaleway error: {text})")]
    StatusRaw {
        method: Method,
        path: String,
        status: u16,
        text: String,
    },
    #[error("{method} {path}: {error} (gave up after {attempts} attempts)")]
    Transport {
        method: Method,
        path: String,
        attempts: u32,
        error: TransportError,
    },
    #[error("{method} {path}: the answer does not decode: {message}")]
    Decode {
        method: Method,
        path: String,
        message: String,
    },
    #[error("{method} {path}: more than {pages} pages; stopped")]
    TooManyPages {
        method: Method,
        path: String,
        pages: u32,
    },
}

impl ApiError {
    /// The HTTP status, when the API answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } | ApiError::StatusRaw { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Counts of the calls sent (retries included), for the report and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    pub reads: u32,
    pub mutations: u32,
    pub retries: u32,
}

/// The client: one API endpoint, one secret key.
#[derive(Debug)]
pub struct Client<'a> {
    transport: &'a dyn Transport,
    sleeper: &'a dyn Sleeper,
    base_url: String,
    secret: SecretKey,
    policy: RetryPolicy,
    counts: Cell<CallCounts>,
}

/// Never more pages than this in one list (100 per page: 50,000 objects).
pub const MAX_PAGES: u32 = 500;

impl<'a> Client<'a> {
    pub fn new(
        transport: &'a dyn Transport,
        sleeper: &'a dyn Sleeper,
        base_url: &str,
        secret: SecretKey,
    ) -> Self {
        Client {
            transport,
            sleeper,
            base_url: base_url.trim_end_matches('/').to_owned(),
            secret,
            policy: RetryPolicy::default(),
            counts: Cell::default(),
        }
    }

    pub fn with_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    pub fn counts(&self) -> CallCounts {
        self.counts.get()
    }

    /// A GET, decoded.
    pub fn get<R: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<R, ApiError> {
        let response = self.call(Method::Get, path, query, None)?;
        decode(Method::Get, path, &response.body)
    }

    /// A GET of one object: `None` on a 404.
    pub fn get_opt<R: DeserializeOwned>(&self, path: &str) -> Result<Option<R>, ApiError> {
        match self.call(Method::Get, path, &[], None) {
            Ok(response) => decode(Method::Get, path, &response.body).map(Some),
            Err(err) if err.status() == Some(404) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Every page of a list. `items` is the list's key in the body; `size_param` is the page-size
    /// query name (`per_page` for the Instance API, `page_size` elsewhere). The total comes from
    /// `X-Total-Count` (Instance) or the body's `total_count`.
    pub fn list<R: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
        items: &str,
        size_param: &'static str,
    ) -> Result<Vec<R>, ApiError> {
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let mut q = query.to_vec();
            q.push(("page", page.to_string()));
            q.push((size_param, "100".to_owned()));
            let response = self.call(Method::Get, path, &q, None)?;
            let body: Value = decode(Method::Get, path, &response.body)?;
            let header_total = response
                .header("x-total-count")
                .and_then(|v| v.trim().parse::<usize>().ok());
            let body_total = body
                .get("total_count")
                .and_then(Value::as_u64)
                .and_then(|v| usize::try_from(v).ok());
            let list = body.get(items).cloned().unwrap_or(Value::Array(Vec::new()));
            let page_items: Vec<R> =
                serde_json::from_value(list).map_err(|e| ApiError::Decode {
                    method: Method::Get,
                    path: path.to_owned(),
                    message: format!("`{items}`: {e}"),
                })?;
            let got = page_items.len();
            all.extend(page_items);
            let total = header_total.or(body_total).unwrap_or(all.len());
            if got == 0 || all.len() >= total {
                return Ok(all);
            }
        }
        Err(ApiError::TooManyPages {
            method: Method::Get,
            path: path.to_owned(),
            pages: MAX_PAGES,
        })
    }

    /// A call that changes something, with a JSON body; the answer decoded (into
    /// `serde::de::IgnoredAny` when it is not needed).
    pub fn send<B: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<R, ApiError> {
        let body = serde_json::to_value(body).map_err(|e| ApiError::Decode {
            method,
            path: path.to_owned(),
            message: format!("the request does not encode: {e}"),
        })?;
        let response = self.call(method, path, &[], Some(Body::Json(&body)))?;
        decode(method, path, &response.body)
    }

    /// A DELETE; its answer, if any, is not read.
    pub fn delete(&self, path: &str) -> Result<(), ApiError> {
        self.call(Method::Delete, path, &[], None).map(drop)
    }

    /// A call whose body is not JSON (an Instance's user data: `text/plain`); its answer, if
    /// any, is not read.
    pub fn send_bytes(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<(), ApiError> {
        self.call(
            method,
            path,
            &[],
            Some(Body::Bytes {
                content_type,
                bytes: body,
            }),
        )
        .map(drop)
    }

    /// One call, retried while the answer is 429, 5xx, a transient state, or (for an idempotent
    /// call) a cut connection.
    fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Body<'_>>,
    ) -> Result<HttpResponse, ApiError> {
        let mut url = format!("{}{}", self.base_url, path);
        if !query.is_empty() {
            let pairs: Vec<String> = query
                .iter()
                .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                .collect();
            url = format!("{url}?{}", pairs.join("&"));
        }
        let mut headers = vec![("X-Auth-Token".to_owned(), self.secret.expose().to_owned())];
        let body = body.map(|body| match body {
            Body::Json(value) => {
                headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
                serde_json::to_vec(value).unwrap_or_default()
            }
            Body::Bytes {
                content_type,
                bytes,
            } => {
                headers.push(("Content-Type".to_owned(), content_type.to_owned()));
                bytes.to_vec()
            }
        });
        let request = HttpRequest {
            method: method.as_str(),
            url,
            headers,
            body,
        };
        let counts = &self.counts;
        let (outcome, attempts) = retrying(
            &self.policy,
            self.sleeper,
            &format_args!("{method} {path}"),
            // A call whose answer was cut may have been done: only an idempotent one is sent
            // again. A POST is left to the next run, which finds what it made by its tags.
            method.idempotent(),
            // A resource in a transient state (`transient_state`: a server starting, a volume
            // detaching) is waited out like a 5xx, within the same bound.
            |response| {
                is_transient(response).then(|| status_error(method, path, response).to_string())
            },
            |retry| {
                let mut now = counts.get();
                if method == Method::Get {
                    now.reads += 1;
                } else {
                    now.mutations += 1;
                }
                if retry > 0 {
                    now.retries += 1;
                }
                counts.set(now);
                self.transport.send(&request)
            },
        );
        match outcome {
            Ok(response) if response.status < 300 => Ok(response),
            Ok(response) => Err(status_error(method, path, &response)),
            Err(error) => Err(ApiError::Transport {
                method,
                path: path.to_owned(),
                attempts,
                error,
            }),
        }
    }
}

/// A request's body.
enum Body<'a> {
    Json(&'a Value),
    Bytes {
        content_type: &'a str,
        bytes: &'a [u8],
    },
}

/// Sends with `send` (given the retry's number, 0 for the first attempt) until an outcome is
/// final, and returns it with the number of attempts: a 429, a 5xx, an answer `transient`
/// describes, or (with `retry_cut`) a cut connection is sent again after a backoff that honours
/// `Retry-After`, at most `policy.attempts` times in all, each wait said on stderr under `label`.
/// The one retry loop of the API client and of Object Storage.
pub(crate) fn retrying(
    policy: &RetryPolicy,
    sleeper: &dyn Sleeper,
    label: &dyn fmt::Display,
    retry_cut: bool,
    transient: impl Fn(&HttpResponse) -> Option<String>,
    mut send: impl FnMut(u32) -> Result<HttpResponse, TransportError>,
) -> (Result<HttpResponse, TransportError>, u32) {
    let mut retry = 0;
    loop {
        let outcome = send(retry);
        let again = match &outcome {
            Ok(response) if response.status < 300 => None,
            Ok(response) if response.status == 429 || response.status >= 500 => {
                let retry_after = response
                    .header("retry-after")
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                Some((format!("HTTP {}", response.status), retry_after))
            }
            Ok(response) => transient(response).map(|why| (why, None)),
            Err(error) if retry_cut => Some((error.to_string(), None)),
            Err(_) => None,
        };
        match again {
            Some((why, retry_after)) if retry + 1 < policy.attempts => {
                let wait = policy.delay(retry, retry_after, random());
                pop_common::warn!("{label}: {why}; retrying in {} ms", wait.as_millis());
                sleeper.sleep(wait);
                retry += 1;
            }
            _ => return (outcome, retry + 1),
        }
    }
}

fn is_transient(response: &HttpResponse) -> bool {
    (400..500).contains(&response.status)
        && serde_json::from_slice::<ScwErrorBody>(&response.body)
            .is_ok_and(|b| b.kind.as_deref() == Some("transient_state"))
}

fn status_error(method: Method, path: &str, response: &HttpResponse) -> ApiError {
    match serde_json::from_slice::<ScwErrorBody>(&response.body) {
        Ok(body) if body.message.is_some() || body.kind.is_some() => ApiError::Status {
            method,
            path: path.to_owned(),
            status: response.status,
            body: Box::new(body),
        },
        _ => ApiError::StatusRaw {
            method,
            path: path.to_owned(),
            status: response.status,
            text: String::from_utf8_lossy(&response.body)
                .chars()
                .take(300)
                .collect(),
        },
    }
}

fn decode<R: DeserializeOwned>(method: Method, path: &str, body: &[u8]) -> Result<R, ApiError> {
    // A 204 has no body: decode it as `null` (for `()`, `Option` and `IgnoredAny`).
    let body = if body.is_empty() {
        b"null".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| ApiError::Decode {
        method,
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// Percent-encoding of a query component (RFC 3986 unreserved characters kept).
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn random() -> u64 {
    getrandom::u64().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::cell::RefCell;
    use std::collections::VecDeque;

    #[derive(Debug, Default)]
    struct Script {
        answers: RefCell<VecDeque<Result<HttpResponse, TransportError>>>,
        seen: RefCell<Vec<HttpRequest>>,
    }

    impl Transport for Script {
        fn send(&self, request: &HttpRequest) -> Result<HttpResponse, TransportError> {
            self.seen.borrow_mut().push(request.clone());
            self.answers
                .borrow_mut()
                .pop_front()
                .expect("more calls than scripted")
        }
    }

    #[derive(Debug, Default)]
    struct Recorder(RefCell<Vec<Duration>>);
    impl Sleeper for Recorder {
        fn sleep(&self, d: Duration) {
            self.0.borrow_mut().push(d);
        }
    }

    fn answer(
        status: u16,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<HttpResponse, TransportError> {
        Ok(HttpResponse {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
        })
    }

    fn client<'a>(script: &'a Script, sleeps: &'a Recorder) -> Client<'a> {
        Client::new(
            script,
            sleeps,
            "http://127.0.0.1:1/",
            SecretKey::new("s3cr3t"),
        )
    }

    #[test]
    fn a_429_then_503_are_retried_honouring_retry_after() {
        let script = Script::default();
        script.answers.borrow_mut().extend([
            answer(429, &[("retry-after", "7")], ""),
            answer(503, &[], "oops"),
            answer(200, &[], r#"{"ok": true}"#),
        ]);
        let sleeps = Recorder::default();
        let c = client(&script, &sleeps);
        let v: Value = c.get("/x", &[]).unwrap();
        assert_eq!(v["ok"], true);
        let waits = sleeps.0.borrow().clone();
        assert_eq!(waits.len(), 2);
        assert!(waits[0] >= Duration::from_secs(7), "{waits:?}");
        assert!(waits[1] >= Duration::from_millis(500) && waits[1] <= Duration::from_secs(1));
        assert_eq!(c.counts().retries, 2);
        // The token is sent, as a header only.
        let seen = script.seen.borrow();
        assert!(
            seen[0]
                .headers
                .contains(&("X-Auth-Token".into(), "s3cr3t".into()))
        );
        assert!(!format!("{:?}", seen[0]).contains("s3cr3t"));
    }

    #[test]
    fn retries_are_bounded() {
        let script = Script::default();
        for _ in 0..6 {
            script
                .answers
                .borrow_mut()
                .push_back(answer(503, &[], "{}"));
        }
        let sleeps = Recorder::default();
        let err = client(&script, &sleeps)
            .get::<Value>("/x", &[])
            .unwrap_err();
        assert_eq!(err.status(), Some(503));
        assert_eq!(script.seen.borrow().len(), 6);
        assert_eq!(sleeps.0.borrow().len(), 5);
        assert!(
            sleeps
                .0
                .borrow()
                .iter()
                .all(|d| *d <= Duration::from_secs(30))
        );
    }

    #[test]
    fn the_backoff_grows_and_is_capped() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(0, None, 0), Duration::from_millis(250));
        assert_eq!(p.delay(3, None, 0), Duration::from_secs(2));
        assert_eq!(p.delay(30, None, 15_000), Duration::from_secs(30));
        assert!(p.delay(30, None, u64::MAX) <= Duration::from_secs(30));
        assert_eq!(
            p.delay(0, Some(Duration::from_secs(3600)), 0),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn a_transient_state_is_waited_out() {
        let script = Script::default();
        script.answers.borrow_mut().extend([
            answer(409, &[], r#"{"type": "transient_state", "message": "resource is in a transient state", "resource": "instance_server", "resource_id": "x", "current_state": "starting"}"#),
            answer(204, &[], ""),
        ]);
        let sleeps = Recorder::default();
        let c = client(&script, &sleeps);
        c.delete("/x").unwrap();
        assert_eq!(sleeps.0.borrow().len(), 1);
    }

    #[test]
    fn a_cut_post_is_not_repeated_but_a_cut_get_is() {
        let script = Script::default();
        script.answers.borrow_mut().extend([
            Err(TransportError("connection reset".into())),
            Err(TransportError("connection reset".into())),
            answer(200, &[], "{}"),
        ]);
        let sleeps = Recorder::default();
        let c = client(&script, &sleeps);
        let err = c
            .send::<_, Value>(Method::Post, "/x", &serde_json::json!({}))
            .unwrap_err();
        assert!(
            matches!(err, ApiError::Transport { attempts: 1, .. }),
            "{err}"
        );
        let _: Value = c.get("/x", &[]).unwrap();
    }

    #[test]
    fn a_4xx_shows_scaleway_s_error_body() {
        let script = Script::default();
        script.answers.borrow_mut().push_back(answer(
            400,
            &[],
            r#"{"type": "invalid_arguments", "message": "invalid argument(s)", "details": [{"argument_name": "image", "reason": "required", "help_message": "required key not provided"}]}"#,
        ));
        let sleeps = Recorder::default();
        let err = client(&script, &sleeps)
            .get::<Value>("/x", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("HTTP 400") && err.contains("invalid_arguments"),
            "{err}"
        );
        assert!(
            err.contains("argument_name") && err.contains("required key not provided"),
            "{err}"
        );
        assert!(sleeps.0.borrow().is_empty(), "a 4xx is not retried");
    }

    #[test]
    fn pages_are_followed_by_x_total_count_and_by_total_count() {
        let script = Script::default();
        script.answers.borrow_mut().extend([
            answer(
                200,
                &[("x-total-count", "3")],
                r#"{"servers": [{"id": "a"}, {"id": "b"}]}"#,
            ),
            answer(
                200,
                &[("x-total-count", "3")],
                r#"{"servers": [{"id": "c"}]}"#,
            ),
            answer(200, &[], r#"{"total_count": 1, "ssh_keys": [{"id": "k"}]}"#),
        ]);
        let sleeps = Recorder::default();
        let c = client(&script, &sleeps);
        let servers: Vec<Value> = c
            .list("/s", &[("tags", "a=b".into())], "servers", "per_page")
            .unwrap();
        assert_eq!(servers.len(), 3);
        let keys: Vec<Value> = c.list("/k", &[], "ssh_keys", "page_size").unwrap();
        assert_eq!(keys.len(), 1);
        let seen = script.seen.borrow();
        assert_eq!(
            seen[0].url,
            "http://127.0.0.1:1/s?tags=a%3Db&page=1&per_page=100"
        );
        assert!(seen[1].url.ends_with("page=2&per_page=100"));
        assert!(seen[2].url.ends_with("page=1&page_size=100"));
    }
}
