//! The Scaleway API client: the `X-Auth-Token` header, JSON in and out, retries with bounded
//! exponential backoff, jitter and `Retry-After`, Scaleway's error bodies shown on a 4xx,
//! pagination, and a count of the calls made. Every call returns `Result<R, ApiError>`: the
//! client sends what it is asked and knows nothing of plans or dry runs (those belong to the tool
//! that decides what to send).
//!
//! What is retried depends on what the call does ([`Method`]): a GET, PUT, PATCH or DELETE is
//! sent again on a 429, a 5xx or a cut connection; a POST (it creates or acts) only on a 429,
//! which is a refusal, and a transient state. A POST answered with a 5xx or cut may have been
//! done: [`Client::post_checked`] looks whether it took effect before it sends it again.
//!
//! The client belongs to one project: the product modules scope every list to it and check the
//! project of every object an answer carries ([`crate::Owned`]).
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

use crate::Owned;
use crate::creds::{Credentials, SecretKey};
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
    /// The answer is an object of another project than the client's: never ours to act on.
    #[error(
        "the {kind} {id} belongs to the project {project}, not to {expected}: not ours, left alone"
    )]
    OtherProject {
        kind: &'static str,
        id: String,
        project: String,
        expected: String,
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

    /// Whether the call may have been done although it failed: a 5xx (a gateway that gave up
    /// while the API acted) or a connection cut before the answer.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, ApiError::Transport { .. }) || self.status().is_some_and(|s| s >= 500)
    }
}

/// Counts of the calls sent (retries included), for the report and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    pub reads: u32,
    pub mutations: u32,
    pub retries: u32,
}

/// The client: one API endpoint, one secret key, one project.
#[derive(Debug)]
pub struct Client<'a> {
    transport: &'a dyn Transport,
    sleeper: &'a dyn Sleeper,
    base_url: String,
    secret: SecretKey,
    project: String,
    policy: RetryPolicy,
    counts: Cell<CallCounts>,
}

/// Never more pages than this in one list (100 per page: 50,000 objects).
pub const MAX_PAGES: u32 = 500;

impl<'a> Client<'a> {
    /// A client of `project`: the lists are scoped to it and every object checked against it.
    pub fn new(
        transport: &'a dyn Transport,
        sleeper: &'a dyn Sleeper,
        base_url: &str,
        secret: SecretKey,
        project: &str,
    ) -> Self {
        Client {
            transport,
            sleeper,
            base_url: base_url.trim_end_matches('/').to_owned(),
            secret,
            project: project.to_owned(),
            policy: RetryPolicy::default(),
            counts: Cell::default(),
        }
    }

    /// A client of the credentials' project, at their API URL.
    pub fn for_credentials(
        transport: &'a dyn Transport,
        sleeper: &'a dyn Sleeper,
        credentials: &Credentials,
    ) -> Self {
        Client::new(
            transport,
            sleeper,
            &credentials.api_url,
            credentials.secret_key.clone(),
            &credentials.project_id,
        )
    }

    /// The project every list is scoped to and every object must belong to.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The object, when it belongs to the client's project.
    pub(crate) fn mine<T: Owned>(&self, object: T) -> Result<T, ApiError> {
        if object.project() == self.project {
            Ok(object)
        } else {
            Err(ApiError::OtherProject {
                kind: T::KIND,
                id: object.id().to_owned(),
                project: object.project().to_owned(),
                expected: self.project.clone(),
            })
        }
    }

    /// The objects of a list scoped to the project that do belong to it: one of another project
    /// (the API did not apply the filter) is left out, and said.
    pub(crate) fn only_mine<T: Owned>(&self, objects: Vec<T>) -> Vec<T> {
        objects
            .into_iter()
            .filter(|o| {
                let mine = o.project() == self.project;
                if !mine {
                    pop_common::warn!(
                        "ignored the {} {} of the project {}: the list was asked for {} only",
                        T::KIND,
                        o.id(),
                        o.project(),
                        self.project
                    );
                }
                mine
            })
            .collect()
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

    /// A GET of one object of the project: `None` on a 404.
    pub(crate) fn get_mine<T: Owned + DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<Option<T>, ApiError> {
        let found: Option<T> = self.get_opt(path)?;
        found.map(|object| self.mine(object)).transpose()
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

    /// Every page of a list of the project's objects: the query carries the project filter
    /// (`project_param`: `project` for the Instance API, `project_id` elsewhere) before
    /// `filters`, and an object of another project in the answer is left out.
    pub(crate) fn list_mine<T: Owned + DeserializeOwned>(
        &self,
        path: &str,
        project_param: &'static str,
        filters: &[(&str, String)],
        items: &str,
        size_param: &'static str,
    ) -> Result<Vec<T>, ApiError> {
        let mut query = vec![(project_param, self.project.clone())];
        query.extend_from_slice(filters);
        Ok(self.only_mine(self.list(path, &query, items, size_param)?))
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

    /// A POST whose outcome is checked when it is unknown: answered with a 5xx or cut, it may
    /// have been done, so `done` looks (by tags, by name, by state) for what it would have made
    /// or changed; when `done` finds it, that is the answer, and only when it finds nothing is
    /// the POST sent again, within the retry policy's attempts. A 429 or a transient state is
    /// retried as for every call (the API refused it).
    pub fn post_checked<B: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        done: &dyn Fn() -> Result<Option<R>, ApiError>,
    ) -> Result<R, ApiError> {
        let mut attempt = 0;
        loop {
            let error = match self.send(Method::Post, path, body) {
                Ok(answer) => return Ok(answer),
                Err(error) if error.outcome_unknown() => error,
                Err(error) => return Err(error),
            };
            if let Some(found) = done()? {
                pop_common::warn!("{error}; it took effect all the same");
                return Ok(found);
            }
            attempt += 1;
            if attempt >= self.policy.attempts {
                return Err(error);
            }
            let wait = self.policy.delay(attempt - 1, None, random());
            pop_common::warn!(
                "{error}; it did not take effect: sending it again in {} ms",
                wait.as_millis()
            );
            self.sleeper.sleep(wait);
        }
    }

    /// A creation: a [`Client::post_checked`] whose outcome, when unknown, is the first object
    /// `made` lists (by the tags or the name the body gave it); the object is the project's.
    pub(crate) fn create<B: Serialize + ?Sized, T: Owned + DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        made: &dyn Fn() -> Result<Vec<T>, ApiError>,
    ) -> Result<T, ApiError> {
        let object = self.post_checked(path, body, &|| Ok(made()?.into_iter().next()))?;
        self.mine(object)
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

    /// One call, retried while the answer is a 429 or a transient state, and, for an idempotent
    /// call only, a 5xx or a cut connection.
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
            // A call answered with a 5xx or cut may have been done: only an idempotent one is
            // sent again blindly (a POST goes through `post_checked`).
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
/// final, and returns it with the number of attempts: a 429 or an answer `transient` describes
/// (refusals: nothing was done), and, when the call is `repeatable` (idempotent), a 5xx or a cut
/// connection, is sent again after a backoff that honours `Retry-After`, at most
/// `policy.attempts` times in all, each wait said on stderr under `label`. The one retry loop of
/// the API client and of Object Storage.
pub(crate) fn retrying(
    policy: &RetryPolicy,
    sleeper: &dyn Sleeper,
    label: &dyn fmt::Display,
    repeatable: bool,
    transient: impl Fn(&HttpResponse) -> Option<String>,
    mut send: impl FnMut(u32) -> Result<HttpResponse, TransportError>,
) -> (Result<HttpResponse, TransportError>, u32) {
    let mut retry = 0;
    loop {
        let outcome = send(retry);
        let again = match &outcome {
            Ok(response) if response.status < 300 => None,
            Ok(response) if response.status == 429 || (repeatable && response.status >= 500) => {
                let retry_after = response
                    .header("retry-after")
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                Some((format!("HTTP {}", response.status), retry_after))
            }
            Ok(response) => transient(response).map(|why| (why, None)),
            Err(error) if repeatable => Some((error.to_string(), None)),
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

    const PROJECT: &str = "11111111-1111-4111-8111-111111111111";

    fn client<'a>(script: &'a Script, sleeps: &'a Recorder) -> Client<'a> {
        Client::new(
            script,
            sleeps,
            "http://127.0.0.1:1/",
            SecretKey::new("s3cr3t"),
            PROJECT,
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

    fn posts(script: &Script) -> usize {
        script
            .seen
            .borrow()
            .iter()
            .filter(|r| r.method == "POST")
            .count()
    }

    #[test]
    fn a_post_is_retried_on_429_but_never_blindly_on_a_5xx() {
        let script = Script::default();
        script.answers.borrow_mut().extend([
            answer(429, &[("retry-after", "0")], ""),
            answer(201, &[], r#"{"id": "a"}"#),
            answer(502, &[], "bad gateway"),
        ]);
        let sleeps = Recorder::default();
        let c = client(&script, &sleeps);
        let made: Value = c.send(Method::Post, "/x", &serde_json::json!({})).unwrap();
        assert_eq!(made["id"], "a");
        assert_eq!(posts(&script), 2, "the 429 was a refusal: sent again");
        let err = c
            .send::<_, Value>(Method::Post, "/x", &serde_json::json!({}))
            .unwrap_err();
        assert_eq!(err.status(), Some(502));
        assert!(err.outcome_unknown());
        assert_eq!(posts(&script), 3, "the 502 was not repeated");
    }

    #[test]
    fn a_post_answered_502_that_took_effect_is_sent_once() {
        let script = Script::default();
        script.answers.borrow_mut().extend([
            answer(502, &[], "bad gateway"),
            // What would come next: a second server.
            answer(201, &[], r#"{"id": "second"}"#),
        ]);
        let sleeps = Recorder::default();
        let c = client(&script, &sleeps);
        let looked = Cell::new(0);
        let made: Value = c
            .post_checked("/servers", &serde_json::json!({"tags": ["t"]}), &|| {
                looked.set(looked.get() + 1);
                Ok(Some(serde_json::json!({"id": "first"})))
            })
            .unwrap();
        assert_eq!(made["id"], "first", "what the look found");
        assert_eq!(posts(&script), 1);
        assert_eq!(looked.get(), 1);
    }

    #[test]
    fn a_post_answered_502_that_did_not_take_effect_is_sent_again_within_the_bound() {
        let script = Script::default();
        script.answers.borrow_mut().extend([
            answer(502, &[], ""),
            Err(TransportError("connection reset".into())),
            answer(201, &[], r#"{"id": "made"}"#),
        ]);
        let sleeps = Recorder::default();
        let c = client(&script, &sleeps);
        let made: Value = c
            .post_checked("/servers", &serde_json::json!({}), &|| Ok(None))
            .unwrap();
        assert_eq!(made["id"], "made");
        assert_eq!(posts(&script), 3);
        assert_eq!(sleeps.0.borrow().len(), 2);

        let script = Script::default();
        for _ in 0..6 {
            script.answers.borrow_mut().push_back(answer(503, &[], ""));
        }
        let c = client(&script, &sleeps).with_policy(RetryPolicy {
            attempts: 3,
            ..RetryPolicy::default()
        });
        let err = c
            .post_checked::<_, Value>("/servers", &serde_json::json!({}), &|| Ok(None))
            .unwrap_err();
        assert_eq!(err.status(), Some(503));
        assert_eq!(posts(&script), 3, "bounded by the policy's attempts");
    }

    #[derive(Debug)]
    struct Thing {
        id: String,
        project: String,
    }

    crate::owned!(Thing: "thing");

    #[test]
    fn an_object_of_another_project_is_never_returned() {
        let script = Script::default();
        let sleeps = Recorder::default();
        let c = client(&script, &sleeps);
        let thing = |id: &str, project: &str| Thing {
            id: id.into(),
            project: project.into(),
        };
        let other = "22222222-2222-4222-8222-222222222222";
        let err = c.mine(thing("x", other)).unwrap_err().to_string();
        assert!(err.contains(other) && err.contains("not ours"), "{err}");
        assert_eq!(c.mine(thing("y", PROJECT)).unwrap().id, "y");
        let kept = c.only_mine(vec![thing("a", other), thing("b", PROJECT)]);
        assert_eq!(
            kept.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
            ["b"]
        );
    }
}
