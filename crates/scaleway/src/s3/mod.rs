//! Scaleway Object Storage (the S3 API), path-style, every request signed with AWS Signature
//! Version 4 ([`sigv4`]) and its payload hashed (`x-amz-content-sha256`). Large files go up in
//! parts sent concurrently ([`multipart`]), with progress on stderr; 5xx and 429 (`SlowDown`) are
//! retried with the client's bounded backoff, request by request.

pub mod multipart;
pub mod sigv4;

use std::sync::atomic::{AtomicU32, Ordering};

use pop_common::wait::Sleeper;

use crate::client::CallCounts;
use crate::creds::SecretKey;
use crate::http::{HttpRequest, HttpResponse, Transport, TransportError};
use crate::retry::{RetryPolicy, retrying};
use sigv4::{Request, Signer, sha256_hex};

/// The smallest part S3 accepts (every part but the last).
pub const MIN_PART: usize = 5 * 1024 * 1024;

/// The header prefix of an object's user metadata (AWS, "Working with object metadata").
const META_PREFIX: &str = "x-amz-meta-";

/// What a HEAD says of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectHead {
    pub size: u64,
    /// As S3 computes it: the quoted MD5 of an object put whole; for a multipart upload, the MD5
    /// of its parts' MD5s, a dash and the count of parts (AWS S3 User Guide, "Checking object
    /// integrity").
    pub etag: Option<String>,
    /// Its user metadata, by name (without the `x-amz-meta-` prefix, in lower case).
    pub metadata: Vec<(String, String)>,
}

impl ObjectHead {
    pub fn meta(&self, name: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    #[error("S3 {method} {path}: HTTP {status}{}", status_detail(*status, code, message))]
    Status {
        method: &'static str,
        path: String,
        status: u16,
        code: String,
        message: String,
    },
    /// No answer: the URL (the endpoint and the path, without the query) names the host.
    #[error("S3 {method} {url}: {}", error.detail(url, *attempts))]
    Transport {
        method: &'static str,
        url: String,
        attempts: u32,
        error: TransportError,
    },
    #[error("{}: {error}", path.display())]
    File {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("S3 {0}: an answer without {1}")]
    Answer(String, &'static str),
    /// One part of a multipart upload failed for good (after its own retries).
    #[error("part {number} of {parts} (bytes {first}-{last}): {source}")]
    Part {
        number: u64,
        parts: u64,
        first: u64,
        last: u64,
        source: Box<S3Error>,
    },
    #[error(
        "{}: {size} bytes in parts of {part_size} bytes is {parts} parts, more than the {max} \
         Object Storage accepts: use larger parts",
        path.display()
    )]
    TooManyParts {
        path: std::path::PathBuf,
        size: u64,
        part_size: usize,
        parts: u64,
        max: u64,
    },
}

/// An S3 client for one endpoint and region. It is `Sync`: the parts of an upload are sent from
/// several threads through the same transport.
#[derive(Debug)]
pub struct S3<'a> {
    transport: &'a (dyn Transport + Sync),
    sleeper: &'a (dyn Sleeper + Sync),
    /// `http(s)://host[:port]`, no trailing slash.
    endpoint: String,
    host: String,
    signer: Signer,
    policy: RetryPolicy,
    /// The requests sent (retries included), counted from every thread of an upload.
    sent: Counts,
}

/// [`CallCounts`] that threads add to.
#[derive(Debug, Default)]
struct Counts {
    reads: AtomicU32,
    writes: AtomicU32,
    retries: AtomicU32,
}

impl<'a> S3<'a> {
    pub fn new(
        transport: &'a (dyn Transport + Sync),
        sleeper: &'a (dyn Sleeper + Sync),
        endpoint: &str,
        region: &str,
        access_key: &str,
        secret: SecretKey,
        policy: RetryPolicy,
    ) -> Self {
        let endpoint = endpoint.trim_end_matches('/').to_owned();
        let host = endpoint
            .split_once("://")
            .map_or(endpoint.as_str(), |(_, h)| h)
            .to_owned();
        S3 {
            transport,
            sleeper,
            endpoint,
            host,
            signer: Signer {
                access_key: access_key.to_owned(),
                secret,
                region: region.to_owned(),
                service: "s3".to_owned(),
            },
            policy,
            sent: Counts::default(),
        }
    }

    /// The requests sent so far: reads (GET, HEAD), writes (the others), and how many of them
    /// were retries.
    pub fn counts(&self) -> CallCounts {
        CallCounts {
            reads: self.sent.reads.load(Ordering::Relaxed),
            mutations: self.sent.writes.load(Ordering::Relaxed),
            retries: self.sent.retries.load(Ordering::Relaxed),
        }
    }

    /// One signed request, retried on 429/5xx and on a cut connection.
    fn call(
        &self,
        method: &'static str,
        path: &str,
        query: &str,
        body: Vec<u8>,
    ) -> Result<HttpResponse, S3Error> {
        self.call_as(
            &format_args!("S3 {method} {}{path}", self.endpoint),
            method,
            path,
            query,
            body,
            &[],
        )
    }

    /// [`Self::call`], its retries logged as `label`, with more headers, signed with the others
    /// (S3 wants every `x-amz-*` header signed). The payload's digest is computed once, whatever
    /// the retries.
    fn call_as(
        &self,
        label: &dyn std::fmt::Display,
        method: &'static str,
        path: &str,
        query: &str,
        body: Vec<u8>,
        extra: &[(String, String)],
    ) -> Result<HttpResponse, S3Error> {
        let payload = sha256_hex(&body);
        let url = if query.is_empty() {
            format!("{}{path}", self.endpoint)
        } else {
            format!("{}{path}?{query}", self.endpoint)
        };
        // The body is moved in once; only the date and signature change between attempts.
        let mut request = HttpRequest {
            method,
            url,
            headers: Vec::new(),
            body: if body.is_empty() && matches!(method, "GET" | "HEAD" | "DELETE") {
                None
            } else {
                Some(body)
            },
        };
        // Every S3 call here is safe to repeat after a cut: a part or an object put twice is the
        // same part or object.
        let (outcome, attempts) = retrying(
            &self.policy,
            self.sleeper,
            label,
            true,
            |_| None,
            |retry| {
                let kind = if matches!(method, "GET" | "HEAD") {
                    &self.sent.reads
                } else {
                    &self.sent.writes
                };
                kind.fetch_add(1, Ordering::Relaxed);
                if retry > 0 {
                    self.sent.retries.fetch_add(1, Ordering::Relaxed);
                }
                // Signed again at each attempt: the date is part of the signature.
                let date = sigv4::amz_date(pop_common::time::now_secs());
                let mut headers = vec![
                    ("host".to_owned(), self.host.clone()),
                    ("x-amz-content-sha256".to_owned(), payload.clone()),
                    ("x-amz-date".to_owned(), date.clone()),
                ];
                headers.extend(extra.iter().cloned());
                let authorization = self.signer.authorization(
                    &date,
                    &Request {
                        method,
                        path,
                        query,
                        headers: &headers,
                        payload_sha256: &payload,
                    },
                    false,
                );
                headers.push(("authorization".to_owned(), authorization));
                // The transport sets Host itself, from the URL: the same value as signed.
                headers.retain(|(k, _)| k != "host");
                request.headers = headers;
                self.transport.send(&request)
            },
        );
        match outcome {
            Ok(r) if r.status < 300 => Ok(r),
            Ok(r) => Err(S3Error::status(method, path, r.status, &r.body)),
            Err(error) => Err(S3Error::Transport {
                method,
                url: format!("{}{path}", self.endpoint),
                attempts,
                error,
            }),
        }
    }

    fn exists(&self, path: &str) -> Result<Option<HttpResponse>, S3Error> {
        match self.call("HEAD", path, "", Vec::new()) {
            Ok(r) => Ok(Some(r)),
            Err(S3Error::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn bucket_exists(&self, bucket: &str) -> Result<bool, S3Error> {
        Ok(self.exists(&format!("/{bucket}"))?.is_some())
    }

    pub fn create_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        self.call("PUT", &format!("/{bucket}"), "", Vec::new())?;
        Ok(())
    }

    /// The object's size and user metadata, `None` when it does not exist.
    pub fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectHead>, S3Error> {
        let path = object_path(bucket, key);
        Ok(self.exists(&path)?.map(|r| ObjectHead {
            size: r
                .header("content-length")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
            etag: r.header("etag").map(str::to_owned),
            metadata: r
                .headers
                .iter()
                .filter_map(|(k, v)| {
                    k.strip_prefix(META_PREFIX)
                        .map(|name| (name.to_owned(), v.clone()))
                })
                .collect(),
        }))
    }

    /// The keys under `prefix` (ListObjectsV2, every page).
    pub fn list_keys(&self, bucket: &str, prefix: &str) -> Result<Vec<String>, S3Error> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..1000 {
            let mut query = format!("list-type=2&prefix={}", sigv4::uri_encode(prefix, false));
            if let Some(t) = &token {
                query = format!("continuation-token={}&{query}", sigv4::uri_encode(t, false));
            }
            let r = self.call("GET", &format!("/{bucket}"), &query, Vec::new())?;
            let text = String::from_utf8_lossy(&r.body).into_owned();
            keys.extend(xml_values(&text, "Key"));
            token = xml_value(&text, "NextContinuationToken");
            if xml_value(&text, "IsTruncated").as_deref() != Some("true") || token.is_none() {
                break;
            }
        }
        Ok(keys)
    }

    pub fn delete_object(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        self.call("DELETE", &object_path(bucket, key), "", Vec::new())?;
        Ok(())
    }

    pub fn delete_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        self.call("DELETE", &format!("/{bucket}"), "", Vec::new())?;
        Ok(())
    }
}

impl S3Error {
    /// An answer that is an error: its status, and S3's code and message from its XML body.
    pub(crate) fn status(method: &'static str, path: &str, status: u16, body: &[u8]) -> S3Error {
        let text = String::from_utf8_lossy(body);
        S3Error::Status {
            method,
            path: path.to_owned(),
            status,
            code: xml_value(&text, "Code").unwrap_or_default(),
            message: xml_value(&text, "Message").unwrap_or_default(),
        }
    }
}

/// What follows the status in an [`S3Error::Status`]: S3's code and message, or, for an answer
/// without them (a HEAD answer never has a body), what a 403 can mean.
fn status_detail(status: u16, code: &str, message: &str) -> String {
    match (code.is_empty(), message.is_empty()) {
        (false, false) => format!(": {code}: {message}"),
        (false, true) => format!(": {code}"),
        (true, false) => format!(": {message}"),
        (true, true) if status == 403 => " without a reason (a HEAD answer has no body): a wrong \
            key or secret, no access to the bucket, or this machine's clock more than 15 minutes \
            off (S3's RequestTimeTooSkewed)"
            .to_owned(),
        (true, true) => " without a reason (a HEAD answer has no body)".to_owned(),
    }
}

fn object_path(bucket: &str, key: &str) -> String {
    format!("/{bucket}/{}", sigv4::uri_encode(key, true))
}

/// The text of the first `<tag>` element (S3's XML answers are flat enough for this).
pub fn xml_value(xml: &str, tag: &str) -> Option<String> {
    xml_values(xml, tag).into_iter().next()
}

pub fn xml_values(xml: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else {
            break;
        };
        out.push(
            after[..end]
                .replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&"),
        );
        rest = &after[end + close.len()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_without_a_body_says_what_it_can_mean() {
        let status = |status, code: &str, message: &str| {
            S3Error::Status {
                method: "HEAD",
                path: "/b/k".to_owned(),
                status,
                code: code.to_owned(),
                message: message.to_owned(),
            }
            .to_string()
        };
        assert_eq!(
            status(403, "AccessDenied", "Access Denied"),
            "S3 HEAD /b/k: HTTP 403: AccessDenied: Access Denied"
        );
        let bare = status(403, "", "");
        assert!(
            bare.starts_with("S3 HEAD /b/k: HTTP 403 without a reason"),
            "{bare}"
        );
        assert!(bare.contains("clock more than 15 minutes off"), "{bare}");
        assert!(!status(500, "", "").contains("clock"));
    }

    #[test]
    fn xml_values_are_found_and_unescaped() {
        let xml = "<R><Key>a</Key><Key>b&amp;c</Key><UploadId>x</UploadId></R>";
        assert_eq!(xml_values(xml, "Key"), vec!["a", "b&c"]);
        assert_eq!(xml_value(xml, "UploadId").as_deref(), Some("x"));
        assert_eq!(xml_value(xml, "Nope"), None);
    }
}
