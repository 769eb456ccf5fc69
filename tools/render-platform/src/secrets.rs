//! Secrets from a cluster's SOPS file (age recipients).
//!
//! The file is a YAML document of values, committed encrypted: SOPS encrypts every value and
//! keeps the keys readable, so this module checks its shape at render time without decrypting
//! anything (every key the profile reads is there, nothing else, every value encrypted, the
//! `sops` metadata present), and a missing or clear value stops `make` before any install.
//!
//! At apply time `pipelines/platform.sh` pipes `sops --decrypt --output-type json` into
//! `render-platform --secrets <template>`, which writes the Secrets (values base64 in `data`) on
//! stdout into a 0600 file that the script removes. The [`SecretsTemplate`] says which value of
//! the document goes into which key of which Secret: one value may feed Secrets in several
//! namespaces (the CrowdSec bouncer key), so it is declared once.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use pop_common::exit::{OutputError, WritingOutput};
use pop_common::input::InputError;
use pop_common::records::{Kind, Version};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The record version of the template file.
pub const TEMPLATE_VERSION: u32 = 1;

pop_common::record! {
    /// Which value of the SOPS document goes into which Secret. Written by render-platform at
    /// render time beside the plan; holds no secret.
    pub struct SecretsTemplate, version TEMPLATE_VERSION {
        /// The SOPS file these Secrets are made from.
        pub source: PathBuf,
        pub secrets: Vec<SecretSpec>,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSpec {
    pub namespace: String,
    pub name: String,
    /// Secret key -> where its value comes from.
    pub data: BTreeMap<String, Source>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Source {
    /// The value at this dotted path of the SOPS document (`ovh.consumer_key`).
    Sops(String),
    /// A value of the cluster's config, not secret (the Ceph user's name).
    Value(String),
}

impl SecretsTemplate {
    pub fn new(source: PathBuf, secrets: Vec<SecretSpec>) -> Self {
        SecretsTemplate {
            kind: Kind::new(),
            version: Version,
            source,
            secrets,
        }
    }

    /// Every dotted path of the SOPS document the template reads, sorted, once each.
    pub fn paths(&self) -> Vec<&str> {
        let mut paths: Vec<&str> = self
            .secrets
            .iter()
            .flat_map(|s| s.data.values())
            .filter_map(|source| match source {
                Source::Sops(path) => Some(path.as_str()),
                Source::Value(_) => None,
            })
            .collect();
        paths.sort_unstable();
        paths.dedup();
        paths
    }

    /// `namespace/name` of each Secret.
    pub fn names(&self) -> Vec<String> {
        self.secrets
            .iter()
            .map(|s| format!("{}/{}", s.namespace, s.name))
            .collect()
    }
}

/// The leaves of a document as `(dotted path, value)`, SOPS's own metadata left out.
fn leaves(document: &Value) -> Vec<(String, &Value)> {
    fn walk<'a>(prefix: &str, value: &'a Value, out: &mut Vec<(String, &'a Value)>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    walk(&path, value, out);
                }
            }
            _ => out.push((prefix.to_owned(), value)),
        }
    }
    let mut out = Vec::new();
    if let Value::Object(map) = document {
        for (key, value) in map {
            if key != "sops" {
                walk(key, value, &mut out);
            }
        }
    }
    out
}

/// The document's leaves against the template's paths: `Err((field, why))` for the first one
/// missing or not read by anybody (a typo, most likely).
fn same_paths(
    template: &SecretsTemplate,
    found: &[(String, &Value)],
) -> Result<(), (String, String)> {
    let wanted = template.paths();
    if let Some(missing) = wanted.iter().find(|p| !found.iter().any(|(f, _)| f == *p)) {
        return Err((
            (*missing).to_owned(),
            "missing: the profile reads it".to_owned(),
        ));
    }
    if let Some((extra, _)) = found.iter().find(|(f, _)| !wanted.contains(&f.as_str())) {
        return Err((
            extra.clone(),
            format!("read by nothing (the profile reads {})", wanted.join(", ")),
        ));
    }
    Ok(())
}

/// The SOPS file as a document (YAML).
fn read_document(path: &Path) -> Result<Value, InputError> {
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_norway::from_str(&text).map_err(|err| InputError::Syntax {
        path: path.to_path_buf(),
        message: format!("not a YAML document: {err}"),
    })
}

/// The age recipients SOPS's metadata names (`sops.age[].recipient`), in its order.
fn recipients_of(document: &Value) -> Vec<String> {
    document
        .pointer("/sops/age")
        .and_then(Value::as_array)
        .map(|keys| {
            keys.iter()
                .filter_map(|key| key.get("recipient").and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The encrypted value at a dotted path of the SOPS file (`ENC[...]`, as committed: nothing is
/// decrypted).
pub fn encrypted_value(path: &Path, dotted: &str) -> Result<String, InputError> {
    let document = read_document(path)?;
    leaves(&document)
        .into_iter()
        .find(|(found, _)| found == dotted)
        .and_then(|(_, value)| value.as_str().map(str::to_owned))
        .ok_or_else(|| InputError::field(path, dotted, "missing: the profile reads it"))
}

/// The age recipients the SOPS file is encrypted to (public keys: nothing is decrypted).
pub fn age_recipients(path: &Path) -> Result<Vec<String>, InputError> {
    Ok(recipients_of(&read_document(path)?))
}

/// Checks the encrypted SOPS file at render time: its keys are the template's, every value is
/// encrypted, and SOPS's metadata names at least one age recipient.
pub fn check_encrypted(path: &Path, template: &SecretsTemplate) -> Result<(), InputError> {
    let document = read_document(path)?;
    let field = |field: &str, why: &str| InputError::field(path, field, why);
    if recipients_of(&document).is_empty() {
        return Err(field(
            "sops.age",
            "no age recipient: the file is not encrypted with sops --age (docs/onprem.md, its config and its secrets, says how)",
        ));
    }
    let found = leaves(&document);
    same_paths(template, &found).map_err(|(f, why)| field(&f, &why))?;
    for (path_in_doc, value) in &found {
        // SOPS writes every encrypted value as ENC[AES256_GCM,data:...,type:...].
        if !value.as_str().is_some_and(|v| v.starts_with("ENC[")) {
            return Err(field(
                path_in_doc,
                "is not encrypted: a clear secret must never be committed; encrypt the file with sops",
            ));
        }
    }
    Ok(())
}

/// What went wrong turning the decrypted document into Secrets. Never holds a secret value.
#[derive(Debug, thiserror::Error)]
pub enum FillError {
    #[error("the decrypted SOPS document (stdin) is not JSON: {0}")]
    Syntax(String),
    #[error("the decrypted SOPS document (stdin): field `{0}`: {1}")]
    Field(String, String),
    #[error("writing the Secrets: {0}")]
    Write(#[from] OutputError),
}

/// Reads the decrypted document (JSON, as `sops --decrypt --output-type json` prints it) and
/// writes the template's Secrets as a `v1` `List`. Nothing is written unless every value is there.
pub fn fill(
    template: &SecretsTemplate,
    mut input: impl Read,
    mut output: impl Write,
) -> Result<(), FillError> {
    let mut bytes = Vec::new();
    input
        .read_to_end(&mut bytes)
        .map_err(|err| FillError::Syntax(err.to_string()))?;
    // The parser's message may quote the input: only its position is kept.
    let document: Value = serde_json::from_slice(&bytes).map_err(|err| {
        FillError::Syntax(format!("at line {} column {}", err.line(), err.column()))
    })?;
    let found = leaves(&document);
    same_paths(template, &found).map_err(|(f, why)| FillError::Field(f, why))?;
    let value_at = |path: &str| -> Result<&str, FillError> {
        found
            .iter()
            .find(|(f, _)| f == path)
            .and_then(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| FillError::Field(path.to_owned(), "must be a non-empty string".into()))
    };
    let mut items = Vec::new();
    for secret in &template.secrets {
        let mut data = serde_json::Map::new();
        for (key, source) in &secret.data {
            let clear = match source {
                Source::Sops(path) => value_at(path)?,
                Source::Value(value) => value.as_str(),
            };
            data.insert(
                key.clone(),
                json!(base64::engine::general_purpose::STANDARD.encode(clear)),
            );
        }
        items.push(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": secret.name,
                "namespace": secret.namespace,
                "labels": crate::onprem::labels("secrets"),
            },
            "type": "Opaque",
            "data": data,
        }));
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let mut text = serde_json::to_vec_pretty(&list)
        .map_err(|err| FillError::Write(std::io::Error::other(err).into()))?;
    text.push(b'\n');
    output.write_all(&text).output()?;
    output.flush().output()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn template() -> SecretsTemplate {
        SecretsTemplate::new(
            PathBuf::from("secrets.sops.yaml"),
            vec![
                SecretSpec {
                    namespace: "a".into(),
                    name: "creds".into(),
                    data: BTreeMap::from([
                        ("key".into(), Source::Sops("dns.key".into())),
                        ("user".into(), Source::Value("k8s".into())),
                    ]),
                },
                SecretSpec {
                    namespace: "b".into(),
                    name: "creds".into(),
                    data: BTreeMap::from([("key".into(), Source::Sops("dns.key".into()))]),
                },
            ],
        )
    }

    #[test]
    fn a_template_of_another_kind_or_version_is_refused_naming_the_field() {
        let written = serde_json::to_value(template()).unwrap();
        assert_eq!(written["kind"], "SecretsTemplate");
        assert_eq!(written["version"], 1);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.template.json");
        for (field, value) in [("kind", json!("Other")), ("version", json!(7))] {
            let mut other = written.clone();
            other[field] = value;
            std::fs::write(&path, other.to_string()).unwrap();
            let err = pop_common::input::read_json::<SecretsTemplate>(&path)
                .unwrap_err()
                .to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
    }

    #[test]
    fn one_value_feeds_every_secret_that_names_it_base64_in_data() {
        let mut out = Vec::new();
        fill(&template(), &br#"{"dns": {"key": "s3cret"}}"#[..], &mut out).unwrap();
        let list: Value = serde_json::from_slice(&out).unwrap();
        let items = list["items"].as_array().unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["metadata"]["namespace"], json!("a"));
        assert_eq!(items[0]["data"]["key"], json!("czNjcmV0"));
        assert_eq!(items[0]["data"]["user"], json!("azhz"));
        assert_eq!(items[1]["metadata"]["namespace"], json!("b"));
        assert_eq!(items[1]["data"]["key"], json!("czNjcmV0"));
        assert!(!String::from_utf8(out).unwrap().contains("s3cret"));
    }

    #[test]
    fn a_missing_an_extra_or_an_empty_value_is_refused_naming_the_field_not_the_value() {
        for (doc, field, why) in [
            (r#"{"dns": {}}"#, "dns.key", "missing"),
            (
                r#"{"dns": {"key": "s3cret", "kee": "s3cret"}}"#,
                "dns.kee",
                "read by nothing",
            ),
            (r#"{"dns": {"key": ""}}"#, "dns.key", "non-empty"),
        ] {
            let mut out = Vec::new();
            let err = fill(&template(), doc.as_bytes(), &mut out).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains(&format!("`{field}`")) && text.contains(why),
                "{text}"
            );
            assert!(!text.contains("s3cret"), "{text}");
            assert!(out.is_empty(), "nothing is written");
        }
        let err = fill(&template(), &b"{\"dns\": s3cret"[..], Vec::new()).unwrap_err();
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    fn encrypted(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("secrets.sops.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    const SOPS_META: &str = "sops:\n  age:\n    - recipient: age1test\n      enc: x\n  mac: ENC[AES256_GCM,data:m,type:str]\n";

    #[test]
    fn an_encrypted_file_with_the_templates_keys_passes() {
        let dir = tempfile::tempdir().unwrap();
        let path = encrypted(
            dir.path(),
            &format!("dns:\n  key: ENC[AES256_GCM,data:abc,type:str]\n{SOPS_META}"),
        );
        check_encrypted(&path, &template()).unwrap();
    }

    #[test]
    fn a_clear_value_no_recipient_or_a_missing_key_is_refused_at_render_time() {
        let dir = tempfile::tempdir().unwrap();
        for (text, field) in [
            (format!("dns:\n  key: s3cret\n{SOPS_META}"), "dns.key"),
            (
                "dns:\n  key: ENC[AES256_GCM,data:abc,type:str]\n".to_owned(),
                "sops.age",
            ),
            (format!("dns:\n  other: ENC[x]\n{SOPS_META}"), "dns.key"),
        ] {
            let path = encrypted(dir.path(), &text);
            let err = check_encrypted(&path, &template()).unwrap_err().to_string();
            assert!(err.contains(&format!("field `{field}`")), "{err}");
            assert!(!err.contains("s3cret"), "{err}");
        }
    }
}
