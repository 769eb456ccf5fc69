//! IAM v1alpha1 (`../shared/scaleway-openapi/scaleway.iam.v1alpha1.Api.yml`): the project's SSH
//! keys, which Scaleway installs on the servers it boots (the rescue system included).

use serde::{Deserialize, Serialize};

use crate::client::{ApiError, Client, Method};

type R<T> = Result<T, ApiError>;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SshKey {
    pub id: String,
    pub name: String,
    pub public_key: String,
    #[serde(rename = "project_id")]
    pub project: String,
    #[serde(default)]
    pub disabled: bool,
}

/// The body of `POST /iam/v1alpha1/ssh-keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateSshKey {
    pub name: String,
    pub public_key: String,
    pub project_id: String,
}

/// IAM v1alpha1.
#[derive(Debug, Clone, Copy)]
pub struct Iam<'c> {
    client: &'c Client<'c>,
}

impl<'c> Iam<'c> {
    pub fn new(client: &'c Client<'c>) -> Self {
        Iam { client }
    }

    /// The project's keys of exactly this name.
    pub fn ssh_keys(&self, project: &str, name: &str) -> R<Vec<SshKey>> {
        let all: Vec<SshKey> = self.client.list(
            "/iam/v1alpha1/ssh-keys",
            &[
                ("project_id", project.to_owned()),
                ("name", name.to_owned()),
            ],
            "ssh_keys",
            "page_size",
        )?;
        Ok(all.into_iter().filter(|k| k.name == name).collect())
    }

    pub fn create_ssh_key(&self, body: &CreateSshKey) -> R<SshKey> {
        self.client
            .send(Method::Post, "/iam/v1alpha1/ssh-keys", body)
    }

    pub fn delete_ssh_key(&self, id: &str) -> R<()> {
        self.client.delete(&format!("/iam/v1alpha1/ssh-keys/{id}"))
    }
}
