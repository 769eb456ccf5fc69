//! What stops a run, and what one list or agent that fails says.

use std::fmt;
use std::io;
use std::path::PathBuf;

use pop_common::exit::{Exit, OutputError, Report};
use pop_common::input::InputError;
use pop_common::records::{Problem, join_problems};

pub use crate::directory::DirectoryError;

/// Why the refresh stopped, or which lists it could not refresh.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    #[error("not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset) and no --api-server")]
    NotInCluster,
    #[error("--api-server `{0}`: not an http(s) URL")]
    ApiServerUrl(String),
    #[error("--now `{0}`: not an RFC 3339 UTC time such as 2026-11-30T20:00:00Z")]
    Now(String),
    #[error(transparent)]
    Environment(#[from] pop_common::tool::NotUnicode),
    /// The ListSources file cannot be read or decoded.
    #[error(transparent)]
    Sources(#[from] InputError),
    /// The ListSources record decoded but breaks its rules.
    #[error("{}: {}", path.display(), join_problems(problems))]
    SourcesRules {
        path: PathBuf,
        problems: Vec<Problem>,
    },
    /// A Kubernetes API call failed (or its client could not be made).
    #[error(transparent)]
    Kube(#[from] kube_rest::KubeError),
    #[error("cannot create a temporary directory: {0}")]
    TempDir(#[source] io::Error),
    #[error("cannot write {}: {source}", path.display())]
    WriteFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the {what} would be {size} bytes, over the {limit}-byte limit{}; nothing was written", detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    TooLarge {
        what: &'static str,
        size: usize,
        limit: usize,
        detail: Option<String>,
    },
    /// The filter would refuse the WasmPlugin's pluginConfig with these lists. Envoy would then
    /// NACK the update and keep running the previous configuration, lists included, with no
    /// error where the job could see it: refused here instead.
    #[error(
        "the filter would refuse WasmPlugin {wasmplugin}'s pluginConfig with these lists ({reason}); nothing was written, the previous lists stay"
    )]
    FilterRefuses { wasmplugin: String, reason: String },
    /// A list the filter would refuse, whatever the form (a kept list edited by hand).
    #[error(
        "the filter would refuse list {list} ({reason}); nothing was written, the previous lists stay"
    )]
    ListRefused { list: String, reason: String },
    /// A previous list packed in the ConfigMap that does not decode.
    #[error("ConfigMap key binaryData.{key}: not a packed list ({reason}); nothing was written")]
    PreviousList { key: String, reason: String },
    #[error("every list failed: {}; nothing was written, the previous lists stay", Failure::join(.0))]
    AllFailed(Vec<Failure>),
    #[error("wrote the others; these failed: {}", Failure::join(.0))]
    SomeFailed(Vec<Failure>),
    #[error("cannot write the summary: {0}")]
    Output(#[from] OutputError),
}

impl Report for RefreshError {
    fn exit(&self) -> Exit {
        match self {
            RefreshError::NotInCluster
            | RefreshError::ApiServerUrl(_)
            | RefreshError::Now(_)
            | RefreshError::Environment(_)
            | RefreshError::Sources(_)
            | RefreshError::SourcesRules { .. } => Exit::Usage,
            RefreshError::Kube(error) if error.is_usage() => Exit::Usage,
            RefreshError::TempDir(_)
            | RefreshError::WriteFile { .. }
            | RefreshError::Kube(_)
            | RefreshError::TooLarge { .. }
            | RefreshError::FilterRefuses { .. }
            | RefreshError::ListRefused { .. }
            | RefreshError::PreviousList { .. }
            | RefreshError::AllFailed(_)
            | RefreshError::SomeFailed(_)
            | RefreshError::Output(_) => Exit::Failure,
        }
    }
}

/// A list or an agent the run could not refresh: it keeps its previous version when it had one
/// (`kept`), and is left out otherwise.
#[derive(Debug)]
pub struct Failure {
    pub what: Failed,
    pub kept: bool,
}

/// What failed, and why.
#[derive(Debug)]
pub enum Failed {
    List {
        list: String,
        reason: GenerateError,
    },
    Agent {
        agent: String,
        reason: DirectoryError,
    },
}

impl Failure {
    pub fn list(list: &str, reason: GenerateError, kept: bool) -> Failure {
        Failure {
            what: Failed::List {
                list: list.to_owned(),
                reason,
            },
            kept,
        }
    }

    pub fn agent(agent: &str, reason: DirectoryError, kept: bool) -> Failure {
        Failure {
            what: Failed::Agent {
                agent: agent.to_owned(),
                reason,
            },
            kept,
        }
    }

    /// The name as the summary lists it (`tor`, `agent examplebot`).
    pub fn name(&self) -> String {
        match &self.what {
            Failed::List { list, .. } => list.clone(),
            Failed::Agent { agent, .. } => format!("agent {agent}"),
        }
    }

    /// What the log says of it, and of what is left: its previous version, or nothing.
    pub fn consequence(&self) -> &'static str {
        match (&self.what, self.kept) {
            (Failed::List { .. }, true) => "keeps its previous version",
            (Failed::Agent { .. }, true) => "keeps its previous keys",
            (_, false) => "has no previous version: nothing is written for it",
        }
    }

    /// The warning a failure logs when it happens: what failed, what is left, why.
    pub fn warn(&self) {
        let what = match &self.what {
            Failed::List { list, .. } => format!("list {list}"),
            Failed::Agent { agent, .. } => format!("agent {agent}"),
        };
        pop_common::warn!("{what}: {}: {}", self.consequence(), self.reason());
    }

    pub fn reason(&self) -> String {
        match &self.what {
            Failed::List { reason, .. } => reason.to_string(),
            Failed::Agent { reason, .. } => reason.to_string(),
        }
    }

    fn join(failures: &[Failure]) -> String {
        failures
            .iter()
            .map(|f| format!("{} ({}; {})", f.name(), f.reason(), f.consequence()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Why one generator gave no usable list.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("cannot run {}: {source}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{generator} exited with {code}")]
    Exited { generator: &'static str, code: i32 },
    #[error("{generator} was killed")]
    Killed { generator: &'static str },
    #[error("{generator} printed no PolicyList: {detail}")]
    NoRecord {
        generator: &'static str,
        detail: String,
    },
    #[error("{generator} printed an unsound list `{name}`: {}", Unsound(problems))]
    Unsound {
        generator: &'static str,
        name: String,
        problems: Vec<Problem>,
    },
}

/// The problems of an unsound list, or the name mismatch when that is all.
struct Unsound<'a>(&'a [Problem]);

impl fmt::Display for Unsound<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            write!(f, "not the list asked for")
        } else {
            write!(f, "{}", join_problems(self.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_named_with_their_reason_and_what_is_left_and_the_run_fails() {
        let failures = vec![
            Failure::list(
                "tor",
                GenerateError::Exited {
                    generator: "lists-gen-tor",
                    code: 1,
                },
                true,
            ),
            Failure::list(
                "hosting",
                GenerateError::Unsound {
                    generator: "lists-gen-asn",
                    name: "other".into(),
                    problems: vec![],
                },
                false,
            ),
            Failure::agent(
                "examplebot",
                DirectoryError::Status {
                    url: "https://bot.example/d".into(),
                    status: 503,
                },
                true,
            ),
        ];
        let err = RefreshError::SomeFailed(failures);
        assert_eq!(err.exit(), Exit::Failure);
        assert_eq!(
            err.to_string(),
            "wrote the others; these failed: \
             tor (lists-gen-tor exited with 1; keeps its previous version), \
             hosting (lists-gen-asn printed an unsound list `other`: not the list asked for; \
             has no previous version: nothing is written for it), \
             agent examplebot (key directory https://bot.example/d: HTTP 503; keeps its previous \
             keys)"
        );
    }
}
