//! IAM v1alpha1 (`../shared/scaleway-openapi/scaleway.iam.v1alpha1.Api.yml`): the project's SSH
//! keys, which Scaleway installs on the servers it boots (the rescue system included).

use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::error::R;
use crate::owned;

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
    pub fn ssh_keys(&self, name: &str) -> R<Vec<SshKey>> {
        self.client
            .named_mine("/iam/v1alpha1/ssh-keys", "ssh_keys", name, |k: &SshKey| {
                &k.name
            })
    }

    /// Every SSH key of the project, whatever its name.
    pub fn project_ssh_keys(&self) -> R<Vec<SshKey>> {
        self.client.list_mine(
            "/iam/v1alpha1/ssh-keys",
            "project_id",
            &[],
            "ssh_keys",
            "page_size",
        )
    }

    /// Registers a key (answered with a 5xx or cut, a key of this name and public key is looked
    /// for before it is sent again).
    pub fn create_ssh_key(&self, body: &CreateSshKey) -> R<SshKey> {
        self.client.create("/iam/v1alpha1/ssh-keys", body, &|| {
            Ok(self
                .ssh_keys(&body.name)?
                .into_iter()
                .filter(|k| same_key(&k.public_key, &body.public_key))
                .collect())
        })
    }

    pub fn delete_ssh_key(&self, id: &str) -> R<()> {
        self.client.delete(&format!("/iam/v1alpha1/ssh-keys/{id}"))
    }
}

/// Two OpenSSH public keys are the same key when their type and base64 body are (the comment
/// may differ).
pub fn same_key(a: &str, b: &str) -> bool {
    let fields = |k: &str| {
        k.split_whitespace()
            .take(2)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    fields(a) == fields(b) && fields(a).len() == 2
}

owned!(SshKey: "IAM SSH key");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_without_their_comment() {
        assert!(same_key(
            "ssh-ed25519 AAAA me@host",
            "ssh-ed25519 AAAA other\n"
        ));
        assert!(!same_key("ssh-ed25519 AAAA", "ssh-ed25519 AAAB"));
        assert!(!same_key("", ""));
    }
}
