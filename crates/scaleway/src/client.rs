//! The Scaleway API client: the `X-Auth-Token` header, JSON in and out, retries with bounded
//! exponential backoff, jitter and `Retry-After`, Scaleway's error bodies shown on a 4xx,
//! pagination, and a count of the calls made. Every call returns `Result<R, ApiError>`: the
//! client sends what it is asked and knows nothing of plans or dry runs (those belong to the tool
//! that decides what to send).
//!
//! What is retried depends on what the call does ([`Method`]): a GET, PUT, PATCH or DELETE is
//! sent again on a 429, a 5xx or a cut connection; a POST (it creates or acts) only on a 429,
//! which is a refusal, and a transient state. A POST answered with a 5xx or cut may have been
//! done: [`Client::post_checked`] looks whether it took effect before it sends it again. A host
//! name that does not resolve is not retried (nothing was sent); every error without an answer
//! names the URL, hence the host, it was for.
//!
//! The client belongs to one project: the product modules scope every list to it and check the
//! project of every object an answer carries ([`crate::Owned`]).
//!
//! The outside world comes in as two narrow traits, `&dyn Transport` (the network) and
//! `&dyn Sleeper` (the clock between retries), as every outside dependency of the tools does.

use std::cell::Cell;
use std::fmt;

use pop_common::wait::Sleeper;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Owned;
use crate::creds::{Credentials, SecretKey};
pub use crate::error::{ApiError, ScwErrorBody};
use crate::error::{is_transient, status_error};
use crate::http::{HttpRequest, HttpResponse, Transport};
pub use crate::retry::RetryPolicy;
use crate::retry::{random, retrying};

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

    /// The project's objects of exactly `name`, as `name_of` reads it off one (the lists' `name`
    /// filter is not trusted to be exact).
    pub(crate) fn named_mine<T: Owned + DeserializeOwned>(
        &self,
        path: &str,
        items: &str,
        name: &str,
        name_of: impl Fn(&T) -> &str,
    ) -> Result<Vec<T>, ApiError> {
        let all: Vec<T> = self.list_mine(
            path,
            "project_id",
            &[("name", name.to_owned())],
            items,
            "page_size",
        )?;
        Ok(all.into_iter().filter(|o| name_of(o) == name).collect())
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
            &format_args!("{method} {}{path}", self.base_url),
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
                url: format!("{}{path}", self.base_url),
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

#[cfg(test)]
mod tests;
