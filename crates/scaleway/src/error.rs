//! Why a call failed ([`ApiError`]), and Scaleway's error body as it says it ([`ScwErrorBody`]).

use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use crate::client::Method;
use crate::http::{HttpResponse, TransportError};

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

/// What a call of the API gives.
pub(crate) type R<T> = Result<T, ApiError>;

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
    /// No answer: the URL (the endpoint and the path, without the query) names the host.
    #[error("{method} {url}: {}", error.detail(url, *attempts))]
    Transport {
        method: Method,
        url: String,
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
    /// while the API acted) or a connection cut before the answer. A name that did not resolve
    /// sent nothing.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, ApiError::Transport { error, .. } if error.retryable())
            || self.status().is_some_and(|s| s >= 500)
    }
}

pub(crate) fn is_transient(response: &HttpResponse) -> bool {
    (400..500).contains(&response.status)
        && serde_json::from_slice::<ScwErrorBody>(&response.body)
            .is_ok_and(|b| b.kind.as_deref() == Some("transient_state"))
}

pub(crate) fn status_error(method: Method, path: &str, response: &HttpResponse) -> ApiError {
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
