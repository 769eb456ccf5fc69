//! The control plane's certificates and the kubeconfigs made of them.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{EXAMPLE_API_HOST, create_dir, path_str, write};

/// The control plane's certificates (one CA, ECDSA P-256), made with the openssl command.
#[derive(Debug)]
pub(super) struct Pki {
    dir: PathBuf,
    pub(super) ca: PathBuf,
    pub(super) ca_key: PathBuf,
    pub(super) service_account_key: PathBuf,
    pub(super) service_account_public: PathBuf,
}

impl Pki {
    pub(super) fn make(dir: &Path) -> Pki {
        create_dir(dir);
        let pki = Pki {
            dir: dir.to_path_buf(),
            ca: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            service_account_key: dir.join("service-account.key"),
            service_account_public: dir.join("service-account.pub"),
        };
        pki.issue(
            "ca",
            "/CN=edgepop-test-ca",
            &[
                "basicConstraints=critical,CA:TRUE",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        pki.issue(
            "apiserver",
            "/CN=kube-apiserver",
            &[
                "extendedKeyUsage=serverAuth",
                &format!("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:{EXAMPLE_API_HOST}"),
            ],
        );
        // The users the RBAC bootstrap roles are bound to.
        pki.issue(
            "admin",
            "/O=system:masters/CN=edgepop-test-admin",
            &["extendedKeyUsage=clientAuth"],
        );
        pki.issue(
            "kube-controller-manager",
            "/CN=system:kube-controller-manager",
            &["extendedKeyUsage=clientAuth"],
        );
        pki.issue(
            "kube-scheduler",
            "/CN=system:kube-scheduler",
            &["extendedKeyUsage=clientAuth"],
        );
        openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            &path_str(&pki.service_account_key),
        ]);
        openssl(&[
            "pkey",
            "-in",
            &path_str(&pki.service_account_key),
            "-pubout",
            "-out",
            &path_str(&pki.service_account_public),
        ]);
        pki
    }

    /// A new P-256 key `<name>.key` and its certificate `<name>.crt` for `subject`, valid two
    /// days: the CA's signs itself, every other is a leaf the CA signs.
    fn issue(&self, name: &str, subject: &str, extensions: &[&str]) {
        let (cert, key) = (path_str(&self.cert(name)), path_str(&self.key(name)));
        let (ca, ca_key) = (path_str(&self.ca), path_str(&self.ca_key));
        let mut args = vec!["-days", "2"];
        if name != "ca" {
            args.extend(["-CA", &ca, "-CAkey", &ca_key]);
            args.extend(["-addext", "basicConstraints=critical,CA:FALSE"]);
        }
        for extension in extensions {
            args.extend(["-addext", extension]);
        }
        crate::openssl::request(&self.dir, &key, subject, "-x509", &cert, &args);
    }

    pub(super) fn cert(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.crt"))
    }

    pub(super) fn key(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.key"))
    }
}

/// openssl with `args`; a certificate it cannot make fails the test, with openssl's words.
fn openssl(args: &[&str]) {
    crate::process::stdout_of(Command::new("openssl").args(args));
}

/// A kubeconfig for `user` (whose certificate is `<pki>/<user>.crt`), as JSON (which is YAML).
#[allow(clippy::panic)] // a test helper
pub(super) fn write_kubeconfig(path: &Path, server: &str, pki: &Pki, user: &str) {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "edgepop-test",
            "cluster": {"server": server, "certificate-authority": pki.ca},
        }],
        "users": [{
            "name": user,
            "user": {"client-certificate": pki.cert(user), "client-key": pki.key(user)},
        }],
        "contexts": [{"name": "edgepop-test", "context": {"cluster": "edgepop-test", "user": user}}],
        "current-context": "edgepop-test",
    });
    write(path, &config.to_string());
}
