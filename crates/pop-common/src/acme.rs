//! Let's Encrypt's ACME servers, as every layer that renders a ClusterIssuer names them: the
//! edge layer (render-edge) and the onprem profile's platform (render-platform).

use serde::Deserialize;
use serde_json::{Value, json};

/// Which Let's Encrypt server issues the certificates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AcmeServer {
    /// Untrusted certificates, generous rate limits: the default while trying things out.
    #[default]
    Staging,
    /// Trusted certificates; needs an email for expiry notices.
    Production,
}

impl AcmeServer {
    /// The server's ACME directory (letsencrypt.org, "ACME API Endpoints").
    pub fn directory(self) -> &'static str {
        match self {
            AcmeServer::Staging => "https://acme-staging-v02.api.letsencrypt.org/directory",
            AcmeServer::Production => "https://acme-v02.api.letsencrypt.org/directory",
        }
    }

    /// The ClusterIssuer of this server; its ACME account key is `<name>-account`.
    pub fn issuer_name(self) -> &'static str {
        match self {
            AcmeServer::Staging => "letsencrypt-staging",
            AcmeServer::Production => "letsencrypt-production",
        }
    }

    /// cert-manager's ClusterIssuer for this server ([`AcmeServer::issuer_name`]): challenges
    /// answered by `solver`, the account's contact `email` when there is one, the object
    /// labelled `labels`.
    pub fn cluster_issuer(self, solver: Value, email: Option<&str>, labels: Value) -> Value {
        self.cluster_issuer_named(self.issuer_name(), solver, email, labels)
    }

    /// [`AcmeServer::cluster_issuer`] under a name of the caller's, the same for either server
    /// (its ACME account key is `<name>-account`).
    pub fn cluster_issuer_named(
        self,
        name: &str,
        solver: Value,
        email: Option<&str>,
        labels: Value,
    ) -> Value {
        let mut acme = json!({
            "server": self.directory(),
            "privateKeySecretRef": {"name": format!("{name}-account")},
            "solvers": [solver],
        });
        if let Some(email) = email {
            acme["email"] = json!(email);
        }
        json!({
            "apiVersion": "cert-manager.io/v1",
            "kind": "ClusterIssuer",
            "metadata": {"name": name, "labels": labels},
            "spec": {"acme": acme},
        })
    }

    /// How the configs spell it.
    pub fn word(self) -> &'static str {
        match self {
            AcmeServer::Staging => "staging",
            AcmeServer::Production => "production",
        }
    }
}

/// The `acme` object of the configs that render a ClusterIssuer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeConfig {
    /// Staging until the chain works.
    #[serde(default)]
    pub server: AcmeServer,
    /// The ACME account's contact; required for production.
    #[serde(default)]
    pub email: Option<String>,
}
