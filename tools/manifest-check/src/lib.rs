//! Strict validation of Kubernetes objects against JSON Schemas laid out as kubeconform expects.
//!
//! The schema of an object is found from its `apiVersion` and `kind` exactly as
//! `shared/schemas/PROVENANCE.md` describes (the kind is lower-cased), trying in order:
//!
//! 1. `{kind}-{version}.json` for the core group, `{kind}-{first label of group}-{version}.json`
//!    otherwise (kubeconform's `{{ .ResourceKind }}{{ .KindSuffix }}.json`), at the top level;
//! 2. `{group}/{kind}_{version}.json` for the other groups (the CRD catalog layout).
//!
//! A kind with no schema is a [`Violation`] that names both paths looked for: it never passes
//! silently (kubeconform's behaviour without `-ignore-missing-schemas`). Schemas are compiled
//! lazily, once per file, and cached in the [`Validator`].
//!
//! The command (`manifest-check [--schemas DIR] [FILE]`) reads a YAML stream or JSON (one object,
//! a `v1` `List` whose items are checked one by one, or several concatenated objects) from FILE or
//! stdin and writes its report on stdout, as kubeconform does: one line per valid object
//! (`ok Gateway edge/edge-gateway`) and one line per violation
//! (`invalid Gateway edge/edge-gateway: at /spec/listeners/0: ...`). A summary goes to stderr.
//!
//! Exit codes: 0 every object is valid; 1 at least one object is invalid or has no schema (the
//! report on stdout says which); 2 bad usage or bad input (no schema directory, unreadable or
//! unparsable input, no object at all).

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::tool::Env;
use serde_json::Value;

/// The environment variable that overrides the default schema directory.
pub const SCHEMAS_DIR_VAR: &str = "SCHEMAS_DIR";
/// The schema directory when neither `--schemas` nor `SCHEMAS_DIR` says otherwise: the shared
/// folder beside the checkout, relative to the current directory.
pub const DEFAULT_SCHEMAS_DIR: &str = "../shared/schemas";
/// Longest message kept in a violation: a failed `oneOf` quotes the whole instance.
const MAX_MESSAGE: usize = 400;

/// Where the objects come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Stdin,
    File(PathBuf),
}

impl Input {
    /// How the input is named in messages.
    pub fn name(&self) -> String {
        match self {
            Input::Stdin => "<stdin>".to_string(),
            Input::File(path) => path.display().to_string(),
        }
    }
}

/// Everything `run` needs, resolved from the arguments and the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub schemas_dir: PathBuf,
    pub input: Input,
}

/// Validate Kubernetes objects (a YAML stream, a JSON object or List) strictly against JSON
/// Schemas in kubeconform's layout. Exit 0 all valid, 1 some invalid, 2 bad input.
#[derive(Debug, clap::Parser)]
#[command(name = "manifest-check", version)]
pub struct Cli {
    /// Schema directory (kubeconform layout) [env: SCHEMAS_DIR; default: ../shared/schemas]
    #[arg(long, value_name = "DIR")]
    pub schemas: Option<PathBuf>,
    /// File to check; stdin when absent or `-`
    pub file: Option<PathBuf>,
}

/// Resolves the configuration: `--schemas` wins over `SCHEMAS_DIR` (when set and not empty,
/// and read as bytes: a directory's name need not be UTF-8), which wins over
/// [`DEFAULT_SCHEMAS_DIR`]; no file or `-` means stdin.
pub fn resolve(cli: Cli, env: &Env) -> Result<Config, Error> {
    let schemas_dir = cli
        .schemas
        .clone()
        .or_else(|| {
            env.get_os(SCHEMAS_DIR_VAR)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SCHEMAS_DIR));
    let input = match &cli.file {
        None => Input::Stdin,
        Some(path) if path.as_os_str() == "-" => Input::Stdin,
        Some(path) => Input::File(path.clone()),
    };
    Ok(Config { schemas_dir, input })
}

/// Why the check could not be done, or did not pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The schema directory is missing or unreadable (exit 2).
    #[error(
        "schema directory {}: {source} (set --schemas or {SCHEMAS_DIR_VAR})",
        dir.display()
    )]
    SchemasDir {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The schema directory is a file (exit 2).
    #[error("schema directory {}: not a directory", dir.display())]
    SchemasNotDir { dir: PathBuf },
    /// The input could not be read (exit 2).
    #[error("{name}: cannot read: {source}")]
    Read {
        name: String,
        #[source]
        source: io::Error,
    },
    /// The input is not a YAML stream or JSON, or a document is not an object (exit 2).
    #[error("{name}: {message}")]
    Parse { name: String, message: String },
    /// The input holds no object at all (exit 2): an empty render is a bug upstream.
    #[error("{name}: no object to validate (empty input)")]
    Empty { name: String },
    /// Some objects are invalid or have no schema; the report on stdout names them (exit 1).
    #[error("{invalid} of {total} objects are invalid (see the report on stdout)")]
    Invalid { invalid: usize, total: usize },
    /// The report could not be written (exit 1; a closed pipe is success).
    #[error("cannot write the report: {0}")]
    Write(#[from] OutputError),
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::SchemasDir { .. }
            | Error::SchemasNotDir { .. }
            | Error::Read { .. }
            | Error::Parse { .. }
            | Error::Empty { .. } => Exit::Usage,
            Error::Invalid { .. } | Error::Write(_) => Exit::Failure,
        }
    }
}

/// One reason an object is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The object's identity: `Gateway edge/edge-gateway`, `Namespace edge`.
    pub object: String,
    /// JSON Pointer to the offending value in the object (`/spec/listeners/0`); empty for the
    /// object as a whole.
    pub path: String,
    /// What is wrong. For a missing schema it names every path looked for.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.object, self.message)
        } else {
            write!(f, "{}: at {}: {}", self.object, self.path, self.message)
        }
    }
}

/// How an object is named in reports: `Kind namespace/name`, `Kind name` when cluster-scoped.
pub fn identity(object: &Value) -> String {
    fn text(v: Option<&Value>) -> Option<&str> {
        v.and_then(Value::as_str).filter(|s| !s.is_empty())
    }
    let kind = text(object.get("kind")).unwrap_or("(no kind)");
    let metadata = object.get("metadata");
    let name = text(metadata.and_then(|m| m.get("name")))
        .or_else(|| text(metadata.and_then(|m| m.get("generateName"))))
        .unwrap_or("(no name)");
    match text(metadata.and_then(|m| m.get("namespace"))) {
        Some(namespace) => format!("{kind} {namespace}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// The schema files that may hold the schema of `apiVersion`/`kind`, in lookup order, relative
/// to the schema directory. Fails when either value cannot name a schema (empty, or characters
/// that could never be part of a group, version or kind, such as `/` or `..`).
pub fn schema_candidates(api_version: &str, kind: &str) -> Result<Vec<PathBuf>, String> {
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    };
    let label_ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let group_ok = group.is_empty() || group.split('.').all(label_ok);
    if !group_ok || !label_ok(version) || version.contains('/') {
        return Err(format!(
            "apiVersion {api_version:?} is not of the form <version> or <group>/<version>"
        ));
    }
    if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!("kind {kind:?} is not a Kubernetes kind"));
    }
    let kind = kind.to_ascii_lowercase();
    Ok(match group.split('.').next().filter(|g| !g.is_empty()) {
        None => vec![PathBuf::from(format!("{kind}-{version}.json"))],
        Some(first_label) => vec![
            PathBuf::from(format!("{kind}-{first_label}-{version}.json")),
            Path::new(group).join(format!("{kind}_{version}.json")),
        ],
    })
}

/// A compiled schema, or why it could not be compiled (cached too, so it is reported once per
/// object without reading the file again).
type Compiled = Result<Arc<jsonschema::Validator>, String>;

/// Validates objects against the schemas of one directory; compiles each schema file once.
pub struct Validator {
    dir: PathBuf,
    cache: Mutex<HashMap<PathBuf, Compiled>>,
}

impl fmt::Debug for Validator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Validator")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Validator {
    /// A validator over `schemas_dir`, which must be a readable directory. Nothing is compiled
    /// until an object needs it.
    pub fn new(schemas_dir: &Path) -> Result<Validator, Error> {
        let meta = fs::metadata(schemas_dir).map_err(|source| Error::SchemasDir {
            dir: schemas_dir.to_path_buf(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(Error::SchemasNotDir {
                dir: schemas_dir.to_path_buf(),
            });
        }
        Ok(Validator {
            dir: schemas_dir.to_path_buf(),
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The schema directory.
    pub fn schemas_dir(&self) -> &Path {
        &self.dir
    }

    /// The schema file for `object` (the first candidate that exists), or the violation that says
    /// why there is none.
    pub fn schema_path(&self, object: &Value) -> Result<PathBuf, Violation> {
        let whole = |message: String| Violation {
            object: identity(object),
            path: String::new(),
            message,
        };
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| whole("no apiVersion (a string is required)".to_string()))?;
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .ok_or_else(|| whole("no kind (a string is required)".to_string()))?;
        let candidates = schema_candidates(api_version, kind).map_err(&whole)?;
        let paths: Vec<PathBuf> = candidates.iter().map(|c| self.dir.join(c)).collect();
        if let Some(found) = paths.iter().find(|p| p.is_file()) {
            return Ok(found.clone());
        }
        let looked: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        Err(whole(format!(
            "no schema for {api_version} {kind}: looked for {}",
            looked.join(" and ")
        )))
    }

    /// Checks one object strictly. Every problem is a [`Violation`]: a missing `apiVersion` or
    /// `kind`, a kind with no schema, a schema that cannot be compiled, and each schema error.
    pub fn validate(&self, object: &Value) -> Result<(), Vec<Violation>> {
        if !object.is_object() {
            return Err(vec![Violation {
                object: "(not an object)".to_string(),
                path: String::new(),
                message: format!(
                    "a Kubernetes object is a mapping, got {}",
                    type_name(object)
                ),
            }]);
        }
        let path = self.schema_path(object).map_err(|v| vec![v])?;
        let schema = self.compiled(&path).map_err(|message| {
            vec![Violation {
                object: identity(object),
                path: String::new(),
                message,
            }]
        })?;
        let violations: Vec<Violation> = schema
            .iter_errors(object)
            .map(|err| Violation {
                object: identity(object),
                path: err.instance_path().as_str().to_string(),
                message: shorten(err.to_string()),
            })
            .collect();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }

    /// Compiles every `*.json` schema under the directory (recursively) and returns how many
    /// compiled, or every failure. Useful to fail fast when a schema tree is broken.
    pub fn compile_all(&self) -> Result<usize, Vec<String>> {
        let mut files = Vec::new();
        let mut dirs = vec![self.dir.clone()];
        let mut failures = Vec::new();
        while let Some(dir) = dirs.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) => {
                    failures.push(format!("{}: cannot list: {e}", dir.display()));
                    continue;
                }
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "json") {
                    files.push(path);
                }
            }
        }
        files.sort();
        for file in &files {
            if let Err(message) = self.compiled(file) {
                failures.push(message);
            }
        }
        if failures.is_empty() {
            Ok(files.len())
        } else {
            Err(failures)
        }
    }

    fn compiled(&self, path: &Path) -> Compiled {
        // A poisoned lock only means another thread panicked mid-insert of a whole entry: the
        // map itself is still consistent.
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = cache.get(path) {
            return entry.clone();
        }
        let entry = compile(path);
        cache.insert(path.to_path_buf(), entry.clone());
        entry
    }
}

fn compile(path: &Path) -> Compiled {
    let text =
        fs::read(path).map_err(|e| format!("schema {}: cannot read: {e}", path.display()))?;
    let schema: Value = serde_json::from_slice(&text)
        .map_err(|e| format!("schema {}: invalid JSON: {e}", path.display()))?;
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .should_validate_formats(true)
        .build(&schema)
        .map(Arc::new)
        .map_err(|e| format!("schema {}: cannot compile: {e}", path.display()))
}

fn shorten(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str(" [...]");
    }
    message
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Reads the objects of a YAML stream, or of JSON when the text starts with `{` (one object or
/// several concatenated). Empty YAML documents are skipped; a `v1` `List` stands for its items.
/// `name` only names the input in errors.
pub fn parse_objects(name: &str, text: &str) -> Result<Vec<Value>, Error> {
    let parse = |message: String| Error::Parse {
        name: name.to_string(),
        message,
    };
    let mut documents = Vec::new();
    if text.trim_start().starts_with('{') {
        for value in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
            documents.push(value.map_err(|e| parse(format!("invalid JSON: {e}")))?);
        }
    } else {
        for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
            // Through serde_norway's own Value first: it refuses duplicate keys, as the API
            // server's strict decoding does, where a JSON map would keep the last one silently.
            let yaml: serde_norway::Value = serde::Deserialize::deserialize(document)
                .map_err(|e| parse(format!("document {}: invalid YAML: {e}", index + 1)))?;
            let value = serde_json::to_value(&yaml).map_err(|e| {
                parse(format!(
                    "document {}: not representable as JSON: {e}",
                    index + 1
                ))
            })?;
            if !value.is_null() {
                documents.push(value);
            }
        }
    }
    let mut objects = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        if !document.is_object() {
            return Err(parse(format!(
                "document {} is {}, not a Kubernetes object",
                index + 1,
                type_name(&document)
            )));
        }
        if is_list(&document) {
            let items = match document.get("items") {
                Some(Value::Array(items)) => items.clone(),
                Some(Value::Null) | None => Vec::new(),
                Some(other) => {
                    return Err(parse(format!(
                        "document {}: List items is {}, not a list",
                        index + 1,
                        type_name(other)
                    )));
                }
            };
            objects.extend(items);
        } else {
            objects.push(document);
        }
    }
    Ok(objects)
}

fn is_list(document: &Value) -> bool {
    document.get("kind").and_then(Value::as_str) == Some("List")
        && document.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// Validates every object of the configured input (the file, or `stdin` when there is none) and
/// writes the report to `output` (see the crate docs).
pub fn run(config: &Config, stdin: impl Read, output: impl Write) -> Result<(), Error> {
    let name = config.input.name();
    let validator = Validator::new(&config.schemas_dir)?;
    let read_error = |source| Error::Read {
        name: name.clone(),
        source,
    };
    let text = match &config.input {
        Input::Stdin => read_text(stdin),
        Input::File(path) => fs::File::open(path).and_then(read_text),
    }
    .map_err(read_error)?;
    let objects = parse_objects(&name, &text)?;
    if objects.is_empty() {
        return Err(Error::Empty { name });
    }
    let mut out = BufWriter::new(output);
    let mut invalid = 0;
    for object in &objects {
        match validator.validate(object) {
            Ok(()) => writeln!(out, "ok {}", identity(object)).output()?,
            Err(violations) => {
                invalid += 1;
                for violation in violations {
                    writeln!(out, "invalid {violation}").output()?;
                }
            }
        }
    }
    out.flush().output()?;
    let total = objects.len();
    pop_common::info!(
        "{name}: {total} objects, {} valid, {invalid} invalid (schemas in {})",
        total - invalid,
        config.schemas_dir.display()
    );
    if invalid > 0 {
        return Err(Error::Invalid { invalid, total });
    }
    Ok(())
}

fn read_text(mut input: impl Read) -> io::Result<String> {
    let mut text = String::new();
    input.read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolved(args: &[&str], schemas_env: Option<&str>) -> Config {
        use clap::Parser;
        let cli =
            Cli::try_parse_from(std::iter::once("manifest-check").chain(args.iter().copied()))
                .unwrap();
        let env = Env::from_pairs(schemas_env.map(|dir| (SCHEMAS_DIR_VAR, dir)));
        resolve(cli, &env).unwrap()
    }

    #[test]
    fn config_flag_beats_env_beats_default() {
        let c = resolved(&["--schemas", "a"], Some("b"));
        assert_eq!(c.schemas_dir, PathBuf::from("a"));
        assert_eq!(c.input, Input::Stdin);
        let c = resolved(&["x.yaml"], Some("b"));
        assert_eq!(c.schemas_dir, PathBuf::from("b"));
        assert_eq!(c.input, Input::File("x.yaml".into()));
        let c = resolved(&["-"], Some(""));
        assert_eq!(c.schemas_dir, PathBuf::from(DEFAULT_SCHEMAS_DIR));
        assert_eq!(c.input, Input::Stdin);
    }

    #[test]
    fn candidates_follow_the_kubeconform_layout() {
        let c = |a, k| schema_candidates(a, k).unwrap();
        assert_eq!(
            c("v1", "Namespace"),
            vec![PathBuf::from("namespace-v1.json")]
        );
        assert_eq!(
            c("apps/v1", "Deployment"),
            vec![
                PathBuf::from("deployment-apps-v1.json"),
                PathBuf::from("apps/deployment_v1.json")
            ]
        );
        assert_eq!(
            c("gateway.networking.k8s.io/v1", "HTTPRoute"),
            vec![
                PathBuf::from("httproute-gateway-v1.json"),
                PathBuf::from("gateway.networking.k8s.io/httproute_v1.json")
            ]
        );
    }

    #[test]
    fn names_that_could_escape_the_directory_are_refused() {
        assert!(schema_candidates("../v1", "Namespace").is_err());
        assert!(schema_candidates("a/b/v1", "Namespace").is_err());
        assert!(schema_candidates("v1", "../../etc/passwd").is_err());
        assert!(schema_candidates("", "Namespace").is_err());
        assert!(schema_candidates("v1", "").is_err());
    }

    #[test]
    fn identity_names_kind_namespace_and_name() {
        let gw = json!({"kind": "Gateway", "metadata": {"name": "g", "namespace": "edge"}});
        assert_eq!(identity(&gw), "Gateway edge/g");
        assert_eq!(
            identity(&json!({"kind": "Namespace", "metadata": {"name": "edge"}})),
            "Namespace edge"
        );
        assert_eq!(identity(&json!({})), "(no kind) (no name)");
    }

    #[test]
    fn yaml_streams_skip_empty_documents_and_lists_expand() {
        let text = "---\n# only a comment\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace, metadata: {name: b}}\n";
        let objects = parse_objects("t", text).unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[1]["metadata"]["name"], "b");
    }

    #[test]
    fn json_list_and_concatenated_objects() {
        let text =
            r#"{"apiVersion":"v1","kind":"List","items":[{"kind":"A"},{"kind":"B"}]} {"kind":"C"}"#;
        let objects = parse_objects("t", text).unwrap();
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["A", "B", "C"]);
    }

    #[test]
    fn duplicate_yaml_keys_and_scalars_are_bad_input() {
        let err = parse_objects("t", "kind: A\nkind: B\n").unwrap_err();
        assert!(err.to_string().contains("document 1"), "{err}");
        assert_eq!(err.exit(), Exit::Usage);
        let err = parse_objects("t", "just a string\n").unwrap_err();
        assert!(err.to_string().contains("not a Kubernetes object"), "{err}");
    }

    #[test]
    fn long_messages_are_shortened_on_a_char_boundary() {
        let long = "é".repeat(MAX_MESSAGE);
        let short = shorten(long);
        assert!(short.ends_with(" [...]"));
        assert!(short.len() <= MAX_MESSAGE + 6);
    }

    #[test]
    fn a_missing_schema_directory_is_a_usage_error() {
        let err = Validator::new(Path::new("/nonexistent/schemas")).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        assert!(err.to_string().contains("/nonexistent/schemas"), "{err}");
    }
}
