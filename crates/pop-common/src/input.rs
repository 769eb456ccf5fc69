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
    /// The document as a whole is not what was expected (a required field missing at the top).
    #[error("{}: {message}", path.display())]
    Document { path: PathBuf, message: String },
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
        let message = in_words(&err.inner().to_string());
        match err.path().to_string() {
            top if top == "." => InputError::Document {
                path: path.to_path_buf(),
                message,
            },
            field => InputError::Field {
                path: path.to_path_buf(),
                field,
                message,
            },
        }
    })
}

/// serde's messages in the words of a config's reader: `missing field zone`, `unknown value
/// prod, expected one of: staging, production`, `expected a whole number from 0 to 65535, got
/// the string "x"` (serde's own forms, serde/src/de/mod.rs: `Error::missing_field`,
/// `unknown_variant`, `invalid_type`, `OneOf`, `Unexpected`). serde_json's trailing ` at line L
/// column C` is kept: it helps find the spot. Anything else is left as it is.
fn in_words(message: &str) -> String {
    let (message, at) = match message.rfind(" at line ") {
        Some(i) => message.split_at(i),
        None => (message, ""),
    };
    let name = |rest: &str| {
        rest.trim_start_matches('`')
            .trim_end_matches('`')
            .to_owned()
    };
    let words = if let Some(rest) = message.strip_prefix("missing field ") {
        format!("missing field {}", name(rest))
    } else if let Some(rest) = message.strip_prefix("duplicate field ") {
        format!("field {} is given twice", name(rest))
    } else if let Some((what, rest)) = unknown(message) {
        match rest.split_once(", expected ") {
            Some((got, expected)) => format!(
                "unknown {what} {}, expected {}",
                name(got),
                one_of(expected)
            ),
            None => format!(
                "unknown {what} {}",
                name(rest.split(',').next().unwrap_or(rest))
            ),
        }
    } else if let Some((got, expected)) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|rest| rest.rsplit_once(", expected "))
    {
        format!(
            "expected {}, got {}",
            expected_words(expected),
            got_words(got)
        )
    } else {
        message.to_owned()
    };
    format!("{words}{at}")
}

/// `unknown field ...` or `unknown variant ...`: which, and the rest.
fn unknown(message: &str) -> Option<(&'static str, &str)> {
    if let Some(rest) = message.strip_prefix("unknown field ") {
        Some(("field", rest))
    } else {
        message
            .strip_prefix("unknown variant ")
            .map(|rest| ("value", rest))
    }
}

/// serde's `OneOf` (`` `a` ``, `` `a` or `b` ``, `` one of `a`, `b`, `c` ``) as `one of: a, b`.
fn one_of(expected: &str) -> String {
    let names: Vec<&str> = expected
        .trim_start_matches("one of ")
        .split([',', ' '])
        .filter(|w| w.starts_with('`') && w.ends_with('`') && w.len() > 1)
        .map(|w| &w[1..w.len() - 1])
        .collect();
    match names.as_slice() {
        [] => expected.to_owned(),
        [one] => (*one).to_owned(),
        many => format!("one of: {}", many.join(", ")),
    }
}

/// What a visitor expects (`u16`, `a sequence`, `struct X`), in words.
fn expected_words(expected: &str) -> String {
    let whole = |max: u64| format!("a whole number from 0 to {max}");
    match expected {
        "u8" => whole(u8::MAX.into()),
        "u16" => whole(u16::MAX.into()),
        "u32" => whole(u32::MAX.into()),
        "u64" | "usize" => "a whole number from 0".to_owned(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".to_owned(),
        "f32" | "f64" => "a number".to_owned(),
        "a boolean" => "true or false".to_owned(),
        "a sequence" | "a tuple" => "a list".to_owned(),
        "a map" => "an object".to_owned(),
        "variant identifier" => "a word (a string)".to_owned(),
        struct_name if struct_name.starts_with("struct ") => "an object".to_owned(),
        other => other.to_owned(),
    }
}

/// What was found instead (serde's `Unexpected`), in words.
fn got_words(got: &str) -> String {
    let quoted = |rest: &str| rest.trim_matches('`').to_owned();
    if let Some(rest) = got.strip_prefix("string ") {
        format!("the string {rest}")
    } else if let Some(rest) = got
        .strip_prefix("integer ")
        .or_else(|| got.strip_prefix("floating point "))
    {
        format!("the number {}", quoted(rest))
    } else if let Some(rest) = got.strip_prefix("boolean ") {
        quoted(rest)
    } else {
        match got {
            "map" => "an object".to_owned(),
            "sequence" => "a list".to_owned(),
            "unit" | "null" => "null".to_owned(),
            other => other.to_owned(),
        }
    }
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
        assert!(text.contains("unknown field prot, expected port"), "{text}");
    }

    #[test]
    fn a_missing_field_is_named() {
        let text = decode(r#"{"inner":{"port":1}}"#).unwrap_err().to_string();
        assert!(text.starts_with("cfg.json: missing field name"), "{text}");
        let text = decode(r#"{"name":"a","inner":{}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            text.starts_with("cfg.json: field `inner`: missing field port"),
            "{text}"
        );
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Shapes {
        #[serde(default)]
        port: Option<u16>,
        #[serde(default)]
        asns: Vec<u32>,
        #[serde(default)]
        server: Option<Server>,
        #[serde(default)]
        on: Option<bool>,
        #[serde(default)]
        names: Option<Vec<String>>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Server {
        Staging,
        Production,
    }

    #[test]
    fn types_and_values_are_told_in_words_not_in_rust() {
        let cases = [
            (
                r#"{"asns": ["AS13335"]}"#,
                "field `asns[0]`: expected a whole number from 0 to 4294967295, got the string \"AS13335\"",
            ),
            (
                r#"{"port": 70000}"#,
                "field `port`: expected a whole number from 0 to 65535, got the number 70000",
            ),
            (
                r#"{"server": "prod"}"#,
                "field `server`: unknown value prod, expected one of: staging, production",
            ),
            (
                r#"{"on": "yes"}"#,
                "field `on`: expected true or false, got the string \"yes\"",
            ),
            (
                r#"{"names": {"a": 1}}"#,
                "field `names`: expected a list, got an object",
            ),
        ];
        for (text, want) in cases {
            let err = decode_json::<Shapes>(Path::new("cfg.json"), text.as_bytes()).unwrap_err();
            let got = err.to_string();
            assert!(
                got.starts_with(&format!("cfg.json: {want} at line 1")),
                "{got}"
            );
            for rust in ["u32", "u16", "variant", "sequence", "map"] {
                assert!(!got.contains(rust), "{rust} in {got}");
            }
        }
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
