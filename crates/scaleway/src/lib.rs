//! The Scaleway client of the tools: credentials resolved as Scaleway's own tools resolve them
//! ([`creds`]), one narrow HTTP transport ([`http`]), the client with its retries, pagination and
//! typed errors ([`client`]), one module per product with its objects and calls ([`instance`],
//! [`block`], [`baremetal`], [`iam`], [`dns`], [`registry`]), and Object Storage signed with AWS
//! Signature V4 ([`s3`]).
//!
//! Paths and field names are those of Scaleway's OpenAPI specs (`../shared/scaleway-openapi`);
//! every answer type decodes the traffic Scaleway's own CLI recorded (`tests/cassettes.rs`).
//! Every call returns `Result<R, ApiError>`: the client sends what it is asked, and deciding
//! what to send (a plan, a dry run) is the business of the tool that uses it.
//!
//! A client belongs to one project: every list it sends carries the project filter of the spec
//! (`project` or `project_id`: an API key reads every project of its organization, and a list
//! without the filter answers with all of them), and every object an answer carries is checked
//! against it ([`Owned`]): one of another project is left out of a list, and is an error as the
//! answer of a call on one object.
//!
//! ```text
//! let client = Client::for_credentials(&transport, &sleeper, &credentials);
//! let servers = client.instance().servers("fr-par-1", &tags)?;
//! client.baremetal().reboot("fr-par-1", &id, &Reboot { boot_type: BootType::Rescue, ssh_key_ids })?;
//! ```

mod enums;

pub mod baremetal;
pub mod block;
pub mod client;
pub mod creds;
pub mod dns;
mod error;
pub mod http;
pub mod iam;
pub mod instance;
pub mod registry;
mod retry;
pub mod s3;

pub use client::{ApiError, Client, Method, RetryPolicy};
pub use creds::{Credentials, CredentialsError, SecretKey};
pub use http::{Transport, UreqTransport};

/// An object that carries tags: a listing the API filters by tags is checked again here (the
/// API's filters are not trusted to be exact).
pub trait Tagged {
    fn tags(&self) -> &[String];
}

/// An object that belongs to a project: checked against the client's before it is returned.
pub trait Owned {
    /// What it is, for messages (`Instance server`).
    const KIND: &'static str;
    fn id(&self) -> &str;
    fn project(&self) -> &str;
}

/// `impl Owned` for objects whose `id` and `project` fields say it, each with its kind.
macro_rules! owned {
    ($($resource:ty: $kind:literal),* $(,)?) => {$(
        impl $crate::Owned for $resource {
            const KIND: &'static str = $kind;
            fn id(&self) -> &str {
                &self.id
            }
            fn project(&self) -> &str {
                &self.project
            }
        }
    )*};
}
pub(crate) use owned;

/// `impl Tagged` for objects whose `tags` field says it.
macro_rules! tagged {
    ($($resource:ty),* $(,)?) => {$(
        impl $crate::Tagged for $resource {
            fn tags(&self) -> &[String] {
                &self.tags
            }
        }
    )*};
}
pub(crate) use tagged;

/// The objects of a list filtered by `tags` that do carry every one of them.
pub(crate) fn with_every_tag<T: Tagged>(objects: Vec<T>, tags: &[String]) -> Vec<T> {
    objects
        .into_iter()
        .filter(|o| has_tags(o.tags(), tags))
        .collect()
}

/// The tags filter of the APIs that take an array query: one `tags=` per tag.
pub(crate) fn tags_query(tags: &[String]) -> Vec<(&'static str, String)> {
    tags.iter().map(|t| ("tags", t.clone())).collect()
}

/// Whether `have` holds every tag of `want`.
pub fn has_tags(have: &[String], want: &[String]) -> bool {
    want.iter().all(|w| have.contains(w))
}

impl<'a> Client<'a> {
    pub fn instance(&'a self) -> instance::Instance<'a> {
        instance::Instance::new(self)
    }

    pub fn block(&'a self) -> block::Block<'a> {
        block::Block::new(self)
    }

    pub fn baremetal(&'a self) -> baremetal::Baremetal<'a> {
        baremetal::Baremetal::new(self)
    }

    pub fn iam(&'a self) -> iam::Iam<'a> {
        iam::Iam::new(self)
    }

    pub fn dns(&'a self) -> dns::Dns<'a> {
        dns::Dns::new(self)
    }

    pub fn registry(&'a self) -> registry::Registry<'a> {
        registry::Registry::new(self)
    }
}
