//! `pow-demo explain`: a policy tried before it is deployed. Reads the edge config (its
//! `pow.plugin_config`, list sources and trusted agents), a folder of generated lists
//! (`<name>.txt`, as `make lists` writes them) and the agents' key directory files (each
//! `--agent-directory NAME=FILE`, else `<name>.directory.json` in the lists' folder, which
//! `make lists` writes; an agent with its keys inline needs none), builds the pluginConfig the
//! lists job would deliver, loads the real module in the host with it, then
//! reads request descriptions as JSON lines on stdin and prints, for each, one JSON line: the
//! rule that decided, the action, and for a challenge its difficulty and kind, as the module
//! said them in `pow-decision`.
//!
//! A request description: `{"method": "GET", "host": "example.org", "path": "/feed",
//! "headers": {"user-agent": "...", "accept": "..."}, "address": "203.0.113.7"}`; `method`
//! defaults to GET, `path` to `/`, `scheme` (`https` by default) may be given.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use proxy_wasm_host::{Host, HostConfig, Outcome, Request};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::DemoError;

/// What `explain` runs, resolved from its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainConfig {
    pub wasm: PathBuf,
    /// The pluginConfig JSON the module is loaded with.
    pub plugin_config: String,
}

/// Why `explain` could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("cannot read {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("{}: {reason}", path.display())]
    Config { path: PathBuf, reason: String },
    #[error("{}: no list `{name}` (pow.lists.sources names it): run `make lists` first", path.display())]
    MissingList { path: PathBuf, name: String },
    #[error("--agent-directory `{0}`: NAME=FILE, NAME an agent of pow.agents")]
    AgentFlag(String),
    #[error("--agent-directory {name}=...: no agent `{name}` in pow.agents")]
    UnknownAgent { name: String },
    #[error("agent `{name}`: no key directory file: give --agent-directory {name}=FILE (make explain: AGENT_DIRECTORIES), or run `make lists`, which writes {}", path.display())]
    MissingAgent { name: String, path: PathBuf },
    #[error("agent `{name}`: {}: not a key directory: {reason}", path.display())]
    AgentFile {
        name: String,
        path: PathBuf,
        reason: String,
    },
    #[error("stdin line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("cannot write the answer: {0}")]
    Write(String),
}

/// The pluginConfig the edge config gives the filter, with the lists of `lists_dir` and the
/// agents' keys of `agent_directories` (`NAME=FILE` each).
pub fn resolve(
    config_path: &Path,
    lists_dir: &Path,
    agent_directories: &[String],
    wasm: PathBuf,
) -> Result<ExplainConfig, ExplainError> {
    let text = std::fs::read_to_string(config_path).map_err(|e| ExplainError::Read {
        path: config_path.to_owned(),
        reason: e.to_string(),
    })?;
    let config: render_edge::config::EdgeConfig =
        serde_json::from_str(&text).map_err(|e| ExplainError::Config {
            path: config_path.to_owned(),
            reason: e.to_string(),
        })?;
    let Some(pow) = config.pow else {
        return Err(ExplainError::Config {
            path: config_path.to_owned(),
            reason: "no `pow` section: the filter does not run".to_owned(),
        });
    };
    let mut sets = BTreeMap::new();
    let mut tokens = BTreeMap::new();
    for source in &pow.lists.sources {
        // A crawler list's User-Agent tokens come from its source, as lists-refresh writes them.
        if !source.tokens.is_empty() {
            tokens.insert(source.name.clone(), source.tokens.clone());
        }
        let path = lists_dir.join(format!("{}.txt", source.name));
        let text = std::fs::read_to_string(&path).map_err(|_| ExplainError::MissingList {
            path: path.clone(),
            name: source.name.clone(),
        })?;
        sets.insert(source.name.clone(), text);
    }
    if pow.plugin_config.contains_key("agents") {
        return Err(ExplainError::Config {
            path: config_path.to_owned(),
            reason: "pow.plugin_config.agents: name the agents in pow.agents (the lists job \
                     delivers their keys)"
                .to_owned(),
        });
    }
    let agents = agent_keys(&pow.agents, lists_dir, agent_directories)?;
    let mut plugin_config = Value::Object(pow.plugin_config);
    plugin_config["lists"] = json!({"version": "explain", "sets": sets, "tokens": tokens});
    if !agents.is_empty() {
        plugin_config["agents"] = json!(agents);
    }
    let plugin_config = plugin_config.to_string();
    // The filter's own decoder, so that a config it refuses is named here, not as a refused
    // on_configure.
    pow_core::PluginConfig::from_json(plugin_config.as_bytes()).map_err(|e| {
        ExplainError::Config {
            path: config_path.to_owned(),
            reason: format!("pow.plugin_config: {e}"),
        }
    })?;
    Ok(ExplainConfig {
        wasm,
        plugin_config,
    })
}

/// Each agent's keys as the lists job delivers them (`{"keys": directory}`): inline, or read
/// from its directory file.
fn agent_keys(
    agents: &[lists_core::records::AgentSource],
    lists_dir: &Path,
    flags: &[String],
) -> Result<BTreeMap<String, Value>, ExplainError> {
    let mut files = BTreeMap::new();
    for flag in flags {
        let (name, file) = flag
            .split_once('=')
            .filter(|(name, file)| !name.is_empty() && !file.is_empty())
            .ok_or_else(|| ExplainError::AgentFlag(flag.clone()))?;
        if !agents.iter().any(|a| a.name == name) {
            return Err(ExplainError::UnknownAgent {
                name: name.to_owned(),
            });
        }
        files.insert(name.to_owned(), PathBuf::from(file));
    }
    let mut keys = BTreeMap::new();
    for agent in agents {
        let directory = match (&agent.keys, files.remove(&agent.name)) {
            (_, Some(path)) => read_directory(&agent.name, &path)?,
            (Some(inline), None) => inline.clone(),
            (None, None) => {
                let path = lists_dir.join(format!("{}.directory.json", agent.name));
                if !path.is_file() {
                    return Err(ExplainError::MissingAgent {
                        name: agent.name.clone(),
                        path,
                    });
                }
                read_directory(&agent.name, &path)?
            }
        };
        keys.insert(agent.name.clone(), json!({"keys": directory}));
    }
    Ok(keys)
}

/// A key directory file, decoded by the filter's own parser (its keys are checked with the rest
/// of the pluginConfig).
fn read_directory(
    name: &str,
    path: &Path,
) -> Result<pow_core::web_bot_auth::KeyDirectory, ExplainError> {
    let unreadable = |reason: String| ExplainError::AgentFile {
        name: name.to_owned(),
        path: path.to_owned(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| unreadable(e.to_string()))?;
    pow_core::web_bot_auth::KeyDirectory::from_json(&bytes).map_err(unreadable)
}

/// One request description of stdin.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Described {
    #[serde(default = "get")]
    method: String,
    host: String,
    #[serde(default = "root")]
    path: String,
    #[serde(default = "https")]
    scheme: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    address: String,
}

fn get() -> String {
    "GET".to_owned()
}
fn root() -> String {
    "/".to_owned()
}
fn https() -> String {
    "https".to_owned()
}

/// Loads the module, then decides each request of `input`.
pub fn run(
    config: &ExplainConfig,
    input: impl BufRead,
    mut output: impl Write,
) -> Result<(), DemoError> {
    if !config.wasm.is_file() {
        return Err(DemoError::NoModule(config.wasm.clone()));
    }
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| DemoError::Random(e.to_string()))?;
    let secret: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let mut host = Host::load(
        &config.wasm,
        HostConfig {
            plugin_config: config.plugin_config.clone().into_bytes(),
            env: vec![(crate::SECRET_ENV.to_owned(), secret.into_bytes())],
            ..HostConfig::default()
        },
    )?;
    for (at, line) in input.lines().enumerate() {
        let line_no = at + 1;
        let line = line.map_err(|e| ExplainError::Line {
            line: line_no,
            reason: e.to_string(),
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let described: Described = serde_json::from_str(&line).map_err(|e| ExplainError::Line {
            line: line_no,
            reason: e.to_string(),
        })?;
        let request = request_of(described).map_err(|reason| ExplainError::Line {
            line: line_no,
            reason,
        })?;
        let outcome = host.request(request)?;
        let answer = answer_of(&outcome).map_err(|reason| ExplainError::Line {
            line: line_no,
            reason,
        })?;
        writeln!(output, "{answer}").map_err(|e| ExplainError::Write(e.to_string()))?;
    }
    Ok(())
}

fn request_of(d: Described) -> Result<Request, String> {
    let address: std::net::IpAddr = d
        .address
        .parse()
        .map_err(|_| format!("`address`: `{}` is not an IP address", d.address))?;
    let mut request = Request {
        method: d.method,
        path: d.path,
        authority: d.host,
        scheme: d.scheme,
        ..Request::default()
    }
    .from_address(&std::net::SocketAddr::new(address, 40000).to_string());
    for (name, value) in d.headers {
        if name.starts_with(':') || name.eq_ignore_ascii_case("host") {
            return Err(format!(
                "`headers.{name}`: give the host, method and path as their own fields"
            ));
        }
        request = request.header(&name.to_ascii_lowercase(), &value);
    }
    Ok(request)
}

/// The module's `pow-decision`, as JSON.
fn answer_of(outcome: &Outcome) -> Result<Value, String> {
    let (headers, status) = match outcome {
        Outcome::Continue { headers } => (headers, None),
        Outcome::Local {
            status, headers, ..
        } => (headers, Some(*status)),
    };
    let decision = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(pow_core::filter::DECISION_HEADER))
        .map(|(_, v)| v.as_str());
    let Some(decision) = decision else {
        // The verify endpoint and an unprotected filter say nothing of a rule.
        return Ok(json!({"rule": null, "action": null, "status": status}));
    };
    let mut answer = json!({"status": status});
    for part in decision.split(';') {
        let Some((key, value)) = part.trim().split_once('=') else {
            return Err(format!(
                "the module's pow-decision `{decision}` is malformed"
            ));
        };
        answer[key] = match value.parse::<u64>() {
            Ok(n) if key == "difficulty" => json!(n),
            _ => json!(value),
        };
    }
    Ok(answer)
}
