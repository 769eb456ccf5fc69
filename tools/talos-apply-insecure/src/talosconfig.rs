//! The trust of our cluster, read from the talosconfig `talosctl gen config` wrote: the machine
//! (OS) CA every configured node's API certificate chains to, and the admin client certificate
//! and key a configured node's API requires (mutual TLS). A node is ours only if it takes that
//! client certificate and presents a certificate of that CA.
//!
//! The talosconfig is YAML: `context: <name>`, `contexts: {<name>: {ca, crt, key, ...}}`, each of
//! the three a base64-encoded PEM. Talos writes its Ed25519 keys as `ED25519 PRIVATE KEY` blocks
//! whose content is PKCS#8 (siderolabs/crypto x509), so the block's label is not trusted to say
//! the key's encoding.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
};
use serde::Deserialize;

#[derive(Deserialize)]
struct File {
    context: String,
    contexts: BTreeMap<String, Context>,
}

#[derive(Deserialize)]
struct Context {
    ca: String,
    crt: String,
    key: String,
}

/// Why the talosconfig cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct TalosconfigError {
    pub path: PathBuf,
    pub message: String,
}

/// Our cluster's trust: what proves a node ours.
#[derive(Clone)]
pub struct Trust {
    /// The talosconfig's context.
    pub context: String,
    /// The machine CA.
    pub ca: Vec<CertificateDer<'static>>,
    /// The admin client certificate (and any intermediate after it).
    pub chain: Vec<CertificateDer<'static>>,
    pub key: std::sync::Arc<PrivateKeyDer<'static>>,
}

impl fmt::Debug for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("Trust")
            .field("context", &self.context)
            .field("ca", &self.ca.len())
            .field("chain", &self.chain.len())
            .finish_non_exhaustive()
    }
}

impl PartialEq for Trust {
    fn eq(&self, other: &Self) -> bool {
        self.context == other.context && self.ca == other.ca && self.chain == other.chain
    }
}

impl Eq for Trust {}

/// One PEM block: its label and its decoded content.
fn pem_blocks(text: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(label) = line
            .trim()
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        loop {
            let Some(line) = lines.next() else {
                return Err(format!("a {label} block has no END line"));
            };
            if line.trim() == end {
                break;
            }
            body.push_str(line.trim());
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|e| format!("a {label} block is not base64: {e}"))?;
        blocks.push((label.to_owned(), bytes));
    }
    Ok(blocks)
}

/// The PEM text a talosconfig field holds (base64 of the PEM).
fn field_pem(value: &str, name: &str) -> Result<String, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .map_err(|e| format!("`{name}` is not base64: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("`{name}` is not a PEM text"))
}

fn certificates(value: &str, name: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates: Vec<CertificateDer<'static>> = pem_blocks(&field_pem(value, name)?)?
        .into_iter()
        .filter(|(label, _)| label == "CERTIFICATE")
        .map(|(_, der)| CertificateDer::from(der))
        .collect();
    if certificates.is_empty() {
        return Err(format!("`{name}` holds no CERTIFICATE"));
    }
    Ok(certificates)
}

fn private_key(value: &str) -> Result<PrivateKeyDer<'static>, String> {
    let (label, der) = pem_blocks(&field_pem(value, "key")?)?
        .into_iter()
        .find(|(label, _)| label.ends_with("PRIVATE KEY"))
        .ok_or("`key` holds no PRIVATE KEY")?;
    Ok(match label.as_str() {
        "RSA PRIVATE KEY" => PrivatePkcs1KeyDer::from(der).into(),
        "EC PRIVATE KEY" => PrivateSec1KeyDer::from(der).into(),
        // `PRIVATE KEY`, and Talos's `ED25519 PRIVATE KEY`: PKCS#8.
        _ => PrivatePkcs8KeyDer::from(der).into(),
    })
}

/// Reads the talosconfig at `path`: its current context's CA, client certificate and key.
pub fn read(path: &Path) -> Result<Trust, TalosconfigError> {
    let error = |message: String| TalosconfigError {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| error(format!("cannot read: {e}")))?;
    let file: File =
        serde_norway::from_str(&text).map_err(|e| error(format!("not a talosconfig: {e}")))?;
    let context = file.contexts.get(&file.context).ok_or_else(|| {
        error(format!(
            "the current context `{}` is not in `contexts`",
            file.context
        ))
    })?;
    let parsed = (|| {
        Ok::<_, String>(Trust {
            context: file.context.clone(),
            ca: certificates(&context.ca, "ca")?,
            chain: certificates(&context.crt, "crt")?,
            key: std::sync::Arc::new(private_key(&context.key)?),
        })
    })();
    parsed.map_err(|message| error(format!("context `{}`: {message}", file.context)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    #[test]
    fn pem_blocks_are_read_whatever_their_label_and_a_cut_block_is_refused() {
        let text = "junk\n-----BEGIN ED25519 PRIVATE KEY-----\nAAEC\nAw==\n-----END ED25519 PRIVATE KEY-----\n";
        assert_eq!(
            pem_blocks(text).unwrap(),
            [("ED25519 PRIVATE KEY".to_owned(), vec![0, 1, 2, 3])]
        );
        let cut = "-----BEGIN CERTIFICATE-----\nAAEC\n";
        assert!(pem_blocks(cut).unwrap_err().contains("no END line"));
    }

    #[test]
    fn a_talosconfig_without_its_context_or_with_a_bad_field_is_named() {
        let (_dir, path) = testkit::temp_file(
            "talosconfig",
            "context: a\ncontexts:\n  b: {ca: x, crt: y, key: z}\n",
        );
        let err = read(&path).unwrap_err().to_string();
        assert!(
            err.contains("talosconfig") && err.contains("`a` is not in"),
            "{err}"
        );
        let cert = b64("-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n");
        std::fs::write(
            &path,
            format!("context: a\ncontexts:\n  a: {{ca: {cert}, crt: {cert}, key: {cert}}}\n"),
        )
        .unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(
            err.contains("context `a`: `key` holds no PRIVATE KEY"),
            "{err}"
        );
        let key =
            b64("-----BEGIN ED25519 PRIVATE KEY-----\nAAEC\n-----END ED25519 PRIVATE KEY-----\n");
        std::fs::write(
            &path,
            format!("context: a\ncontexts:\n  a: {{ca: {cert}, crt: {cert}, key: {key}}}\n"),
        )
        .unwrap();
        let trust = read(&path).unwrap();
        assert!(matches!(*trust.key, PrivateKeyDer::Pkcs8(_)));
        assert!(!format!("{trust:?}").contains("AAEC"));
    }
}
