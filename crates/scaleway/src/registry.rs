//! Container Registry v1 (not in `../shared/scaleway-openapi`; paths and fields from Scaleway's
//! public API documentation): the namespace the edge's images are pushed to.

use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::error::R;
use crate::owned;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Namespace {
    pub id: String,
    pub name: String,
    pub endpoint: String,
    pub is_public: bool,
    #[serde(rename = "project_id")]
    pub project: String,
}

/// The body of `POST /registry/v1/regions/{region}/namespaces`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateNamespace {
    pub name: String,
    pub project_id: String,
    pub is_public: bool,
}

/// Container Registry v1.
#[derive(Debug, Clone, Copy)]
pub struct Registry<'c> {
    client: &'c Client<'c>,
}

impl<'c> Registry<'c> {
    pub fn new(client: &'c Client<'c>) -> Self {
        Registry { client }
    }

    /// The project's namespaces of exactly this name.
    pub fn namespaces(&self, region: &str, name: &str) -> R<Vec<Namespace>> {
        self.client.named_mine(
            &format!("/registry/v1/regions/{region}/namespaces"),
            "namespaces",
            name,
            |n: &Namespace| &n.name,
        )
    }

    /// Creates a namespace (answered with a 5xx or cut, one of this name is looked for before
    /// it is sent again).
    pub fn create_namespace(&self, region: &str, body: &CreateNamespace) -> R<Namespace> {
        self.client.create(
            &format!("/registry/v1/regions/{region}/namespaces"),
            body,
            &|| self.namespaces(region, &body.name),
        )
    }
}

owned!(Namespace: "registry namespace");
