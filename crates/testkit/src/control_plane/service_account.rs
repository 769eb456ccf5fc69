//! A ServiceAccount's credentials, as a pod holds them.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{ControlPlane, write, write_private};

/// A ServiceAccount's credentials, laid out as in a pod's
/// `/var/run/secrets/kubernetes.io/serviceaccount` (what the kubelet's projected volume holds):
/// `token` (a TokenRequest, for the API server's own audience, one hour), `ca.crt` (the
/// namespace's `kube-root-ca.crt` ConfigMap, which the controller manager publishes) and
/// `namespace`; beside them a kubeconfig that authenticates with that token file. The token is
/// written 0600 and never passes through an argument. Removed when dropped.
#[derive(Debug)]
pub struct ServiceAccount {
    dir: tempfile::TempDir,
    kubectl: PathBuf,
}

impl ServiceAccount {
    #[allow(clippy::panic)] // a test helper: credentials that cannot be made fail the test
    #[track_caller]
    pub(super) fn issue(plane: &ControlPlane, namespace: &str, name: &str) -> ServiceAccount {
        let dir = match tempfile::Builder::new()
            .prefix("edgepop-serviceaccount-")
            .tempdir()
        {
            Ok(dir) => dir,
            Err(err) => panic!("cannot make a folder for {namespace}/{name}'s credentials: {err}"),
        };
        let account = ServiceAccount {
            kubectl: plane.kubectl.clone(),
            dir,
        };
        let ns = format!("--namespace={namespace}");
        let token = plane.kubectl_ok(&["create", "token", name, &ns, "--duration=1h"], "");
        write_private(&account.token(), token.trim());
        // Published by the controller manager's root-ca-cert-publisher soon after the namespace.
        plane.kubectl_ok(
            &[
                "wait",
                "--for=create",
                "configmap/kube-root-ca.crt",
                &ns,
                "--timeout=60s",
            ],
            "",
        );
        let ca = plane.kubectl_ok(
            &[
                "get",
                "configmap",
                "kube-root-ca.crt",
                &ns,
                "--output=jsonpath={.data.ca\\.crt}",
            ],
            "",
        );
        write(&account.ca(), &ca);
        write(&account.dir.path().join("namespace"), namespace);
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{
                "name": "edgepop-test",
                "cluster": {"server": plane.server, "certificate-authority": account.ca()},
            }],
            "users": [{"name": name, "user": {"tokenFile": account.token()}}],
            "contexts": [{
                "name": name,
                "context": {"cluster": "edgepop-test", "user": name, "namespace": namespace},
            }],
            "current-context": name,
        });
        write(&account.kubeconfig(), &config.to_string());
        account
    }

    /// The folder, for a program that reads it as a pod would (`token`, `ca.crt`, `namespace`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn token(&self) -> PathBuf {
        self.dir.path().join("token")
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// A kubeconfig whose user is this ServiceAccount (its namespace is the default one).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// The pinned kubectl, authenticated as this ServiceAccount.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(&self.kubectl);
        command.arg("--kubeconfig").arg(self.kubeconfig());
        command
    }
}
