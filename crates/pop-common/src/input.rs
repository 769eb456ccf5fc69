//! Reading input files: every error names the file, and the field when there is one.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// What was wrong with an input file.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be opened or read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file is not valid JSON.
    #[error("{}: invalid JSON: {message}", path.display())]
    Syntax { path: PathBuf, message: String },
    /// The JSON is well-formed but a field is missing, unknown, of the wrong type, or refused
    /// by a check of its value.
    #[error("{}: field `{field}`: {message}", path.display())]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
}

impl InputError {
    /// A value that decoded but breaks a rule (a bad hostname, a duplicate, ...).
    pub fn field(path: &Path, field: impl fmt::Display, message: impl fmt::Display) -> Self {
        InputError::Field {
            path: path.to_path_buf(),
            field: field.to_string(),
            message: message.to_string(),
        }
    }
}

/// Reads and decodes a JSON file into `T`, naming the file and the field on failure.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, InputError> {
    let bytes = std::fs::read(path).map_err(|source| InputError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    decode_json(path, &bytes)
}

/// Reads `input` to its end (a pipe, stdin) and decodes it like [`read_json`]; `name` says
/// where it came from in errors (`<stdin>`).
pub fn read_json_from<T: DeserializeOwned>(
    name: &Path,
    mut input: impl io::Read,
) -> Result<T, InputError> {
    let mut bytes = Vec::new();
    input
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Read {
            path: name.to_path_buf(),
            source,
        })?;
    decode_json(name, &bytes)
}

/// Decodes JSON bytes that came from `path` (which is only used to name it in errors).
pub fn decode_json<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, InputError> {
    // A syntax error is reported as such first, so that "invalid JSON" is not mistaken for a
    // field problem.
    if let Err(err) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        return Err(InputError::Syntax {
            path: path.to_path_buf(),
            message: err.to_string(),
        });
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let field = match err.path().to_string() {
            p if p == "." => "(top level)".to_string(),
            p => p,
        };
        // serde_json appends " at line L column C"; keep it, it helps find the spot.
        InputError::Field {
            path: path.to_path_buf(),
            field,
            message: err.inner().to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        inner: Inner,
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        port: u16,
    }

    fn decode(text: &str) -> Result<Outer, InputError> {
        decode_json(Path::new("cfg.json"), text.as_bytes())
    }

    #[test]
    fn an_unknown_nested_field_is_named_with_its_path() {
        let err = decode(r#"{"name":"a","inner":{"port":1,"prot":2}}"#).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("cfg.json: field `inner.prot`"), "{text}");
        assert!(text.contains("unknown field `prot`"), "{text}");
    }

    #[test]
    fn a_missing_field_is_named() {
        let text = decode(r#"{"inner":{"port":1}}"#).unwrap_err().to_string();
        assert!(text.contains("missing field `name`"), "{text}");
    }

    #[test]
    fn broken_json_is_a_syntax_error_not_a_field_error() {
        let err = decode(r#"{"name": "a","#).unwrap_err();
        assert!(matches!(err, InputError::Syntax { .. }), "{err}");
        assert!(err.to_string().starts_with("cfg.json: invalid JSON"));
    }

    #[test]
    fn a_missing_file_names_the_file() {
        let err = read_json::<Outer>(Path::new("/nonexistent/edge.json")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/nonexistent/edge.json: cannot read")
        );
    }
}
