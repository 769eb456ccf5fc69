//! `lists-refresh`: the hourly CronJob that regenerates the policy lists and publishes them.
//!
//! ```sh
//! lists-refresh --namespace=edge --configmap=policy-lists --wasmplugin=pow-filter \
//!   --sources=/etc/lists-refresh/sources.json
//! ```
//!
//! 1. Reads the `ListSources` record (`--sources`) and GETs the `policy-lists` ConfigMap: its
//!    `<name>.txt` keys are the previous lists.
//! 2. Runs each list's generator (`lists-gen-asn`, `lists-gen-tor`, `lists-gen-crawlers` with
//!    a `--token` per token of the list) in its own process, with the previous list for the
//!    shrink check. A generator that fails (source down, bad data, shrink) leaves its list at
//!    its previous version; its own message is in the job's log, and the run exits 1 naming it
//!    after publishing the others.
//! 3. Packs every list (`pow_core::packed`: sorted, delta-encoded, zlib, base64, about 1.3
//!    bytes a prefix against 16 as text), checks the ConfigMap's 1 MiB and the WasmPlugin's
//!    1.5 MiB (etcd's request limit) before any write, refusing naming each list with its
//!    prefix count and sizes, then server-side-applies, as field manager `edgepop-lists`
//!    (`force=true`):
//!    - the ConfigMap's `data`: `<name>.txt` per list (one CIDR per line), `version` and
//!      `generated_at`; when the text would not fit, the largest lists go packed instead, as
//!      `binaryData` `<name>.packed` (read back as the previous lists all the same). The failed
//!      lists are applied with their previous content, so they stay as they were (a key this
//!      manager stops applying would be deleted);
//!    - the WasmPlugin's `spec.pluginConfig.lists`: `{"version", "generated_at", "packed":
//!      {name: packed set}, "tokens": {name: [User-Agent tokens]}}`, the form the filter reads
//!      (a few hundred thousand prefixes fit where the text held about 80k); `tokens` holds the
//!      crawler lists that have content (a kept one too), and comes from the sources, so the
//!      ConfigMap does not carry it.
//!
//!    Nothing is written when nothing changed and the WasmPlugin already has this version and
//!    these tokens.
//!
//! With `--out-dir DIR` (what `make lists` runs) the lists go to `DIR/<name>.txt` instead, one
//! CIDR per line: no cluster, the previous `<name>.txt` is the shrink check's baseline, a list
//! whose generator fails keeps its file, and the run exits 1 naming it after writing the others.
//!
//! Why the WasmPlugin and not only the ConfigMap: Istio delivers a `pluginConfig` change to the
//! gateways by ECDS, as a fresh `on_configure` in the running VM, where the filter swaps its
//! table: the new lists apply within seconds to a minute, without restarting the gateway and
//! without a network hop per request (a filter cannot read a ConfigMap, and an HTTP call out of
//! the filter would add a hop and a failure mode). The ConfigMap stays the source of truth,
//! readable by people (`kubectl get cm policy-lists`) and the "previous" list of the next
//! run. The edge layer's apply owns neither the ConfigMap's list keys nor `pluginConfig.lists`
//! (render-edge renders neither), so a re-apply of the edge layer never reverts them.

mod kube;
mod plan;

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Parser;
use lists_core::records::{ListSource, ListSources, PolicyList};
use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::InputError;
use pop_common::records::{Problem, join_problems};
use pop_common::tool::Env;
use serde_json::Value;

pub use kube::Kube;
pub use plan::key_of;
use plan::{Plan, previous_of};

/// The ConfigMap size limit enforced by the API server (data and binaryData together).
pub const CONFIGMAP_LIMIT: usize = 1024 * 1024;
/// etcd's default request limit, which bounds the whole WasmPlugin object.
pub const OBJECT_LIMIT: usize = 1536 * 1024;
/// The field manager of everything this job applies.
pub const FIELD_MANAGER: &str = "edgepop-lists";

const SERVICEACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Command line (the CronJob's args).
#[derive(Debug, Parser)]
#[command(
    name = "lists-refresh",
    version,
    about = "Regenerate the policy lists and publish them"
)]
pub struct Cli {
    #[arg(long, default_value = "edge")]
    pub namespace: String,
    /// The ConfigMap holding the lists (source of truth, and the previous lists).
    #[arg(long, default_value = "policy-lists")]
    pub configmap: String,
    /// The WasmPlugin whose pluginConfig.lists is updated; empty to update only the ConfigMap.
    #[arg(long, default_value = "pow-filter")]
    pub wasmplugin: String,
    /// The ListSources record.
    #[arg(long, default_value = "/etc/lists-refresh/sources.json")]
    pub sources: PathBuf,
    /// Where the generators (lists-gen-asn, lists-gen-tor, lists-gen-crawlers) are (default:
    /// beside this program).
    #[arg(long)]
    pub generators_dir: Option<PathBuf>,
    /// The API server URL (default: from KUBERNETES_SERVICE_HOST and _PORT, in-cluster).
    #[arg(long)]
    pub api_server: Option<String>,
    /// The ServiceAccount directory holding `token` and `ca.crt`.
    #[arg(long, default_value = SERVICEACCOUNT_DIR)]
    pub serviceaccount_dir: PathBuf,
    /// Publish lists even when they shrank beyond the threshold.
    #[arg(long)]
    pub force: bool,
    /// The version stamp of what is published, RFC 3339 UTC (default: the current time). A
    /// fixed stamp makes a run reproducible.
    #[arg(long, value_name = "TIME")]
    pub now: Option<String>,
    /// Write each list into DIR/<name>.txt (one CIDR per line) instead of publishing it to the
    /// cluster; the previous DIR/<name>.txt is the shrink check's baseline.
    #[arg(long, value_name = "DIR", conflicts_with_all = [
        "namespace", "configmap", "wasmplugin", "api_server", "serviceaccount_dir", "now",
    ])]
    pub out_dir: Option<PathBuf>,
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub sources_file: PathBuf,
    pub generators_dir: PathBuf,
    pub force: bool,
    pub publish: Publish,
}

/// Where the lists go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Publish {
    /// Server-side applied to the ConfigMap and the WasmPlugin.
    Cluster(Cluster),
    /// Written into `<dir>/<name>.txt`.
    Dir(PathBuf),
}

/// The cluster the lists are published to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub namespace: String,
    pub configmap: String,
    pub wasmplugin: Option<String>,
    pub api_server: String,
    pub ca_file: PathBuf,
    pub token_file: PathBuf,
    /// The version stamp used when anything changed.
    pub now: String,
}

/// Why the refresh stopped, or which lists it could not refresh.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    #[error("not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset) and no --api-server")]
    NotInCluster,
    #[error("--api-server `{0}`: not an http(s) URL")]
    ApiServerUrl(String),
    #[error("--now `{0}`: not an RFC 3339 UTC time such as 2026-11-30T20:00:00Z")]
    Now(String),
    #[error(transparent)]
    Environment(#[from] pop_common::tool::NotUnicode),
    /// The ListSources file cannot be read or decoded.
    #[error(transparent)]
    Sources(#[from] InputError),
    /// The ListSources record decoded but breaks its rules.
    #[error("{}: {}", path.display(), join_problems(problems))]
    SourcesRules {
        path: PathBuf,
        problems: Vec<Problem>,
    },
    #[error("cluster CA {}: {reason}", path.display())]
    Ca { path: PathBuf, reason: String },
    #[error("ServiceAccount token {}: {source}", path.display())]
    Token {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot create a temporary directory: {0}")]
    TempDir(#[source] io::Error),
    #[error("cannot write {}: {source}", path.display())]
    WriteFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{method} {path}: Kubernetes API unreachable: {detail}")]
    Unreachable {
        method: &'static str,
        path: String,
        detail: String,
    },
    /// The API server answered with an error status (its `Status.message` when it sent one).
    #[error("{method} {path}: HTTP {status}: {message}")]
    Status {
        method: &'static str,
        path: String,
        status: u16,
        message: String,
    },
    #[error("{method} {path}: invalid JSON: {detail}")]
    Json {
        method: &'static str,
        path: String,
        detail: String,
    },
    #[error("the {what} would be {size} bytes, over the {limit}-byte limit{}; nothing was written", detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    TooLarge {
        what: &'static str,
        size: usize,
        limit: usize,
        detail: Option<String>,
    },
    /// The filter would refuse the WasmPlugin's pluginConfig with these lists. Envoy would then
    /// NACK the update and keep running the previous configuration, lists included, with no
    /// error where the job could see it: refused here instead.
    #[error(
        "the filter would refuse WasmPlugin {wasmplugin}'s pluginConfig with these lists ({reason}); nothing was written, the previous lists stay"
    )]
    FilterRefuses { wasmplugin: String, reason: String },
    /// A list the filter would refuse, whatever the form (a kept list edited by hand).
    #[error(
        "the filter would refuse list {list} ({reason}); nothing was written, the previous lists stay"
    )]
    ListRefused { list: String, reason: String },
    /// A previous list packed in the ConfigMap that does not decode.
    #[error("ConfigMap key binaryData.{key}: not a packed list ({reason}); nothing was written")]
    PreviousList { key: String, reason: String },
    #[error("every list failed ({}); nothing was written, the previous lists stay", ListFailure::join(.0))]
    AllFailed(Vec<ListFailure>),
    #[error("wrote the other lists; these failed and keep their previous version: {}", ListFailure::join(.0))]
    SomeFailed(Vec<ListFailure>),
    #[error("cannot write the summary: {0}")]
    Output(#[from] OutputError),
}

impl Report for RefreshError {
    fn exit(&self) -> Exit {
        match self {
            RefreshError::NotInCluster
            | RefreshError::ApiServerUrl(_)
            | RefreshError::Now(_)
            | RefreshError::Environment(_)
            | RefreshError::Sources(_)
            | RefreshError::SourcesRules { .. }
            | RefreshError::Ca { .. }
            | RefreshError::Token { .. } => Exit::Usage,
            RefreshError::TempDir(_)
            | RefreshError::WriteFile { .. }
            | RefreshError::Unreachable { .. }
            | RefreshError::Status { .. }
            | RefreshError::Json { .. }
            | RefreshError::TooLarge { .. }
            | RefreshError::FilterRefuses { .. }
            | RefreshError::ListRefused { .. }
            | RefreshError::PreviousList { .. }
            | RefreshError::AllFailed(_)
            | RefreshError::SomeFailed(_)
            | RefreshError::Output(_) => Exit::Failure,
        }
    }
}

/// A list whose generator failed: it keeps its previous version.
#[derive(Debug)]
pub struct ListFailure {
    pub list: String,
    pub reason: GenerateError,
}

impl ListFailure {
    fn join(failures: &[ListFailure]) -> String {
        failures
            .iter()
            .map(|f| format!("{} ({})", f.list, f.reason))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Why one generator gave no usable list.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("cannot run {}: {source}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{generator} exited with {code}")]
    Exited { generator: &'static str, code: i32 },
    #[error("{generator} was killed")]
    Killed { generator: &'static str },
    #[error("{generator} printed no PolicyList: {detail}")]
    NoRecord {
        generator: &'static str,
        detail: String,
    },
    #[error("{generator} printed an unsound list `{name}`: {}", Unsound(problems))]
    Unsound {
        generator: &'static str,
        name: String,
        problems: Vec<Problem>,
    },
}

/// The problems of an unsound list, or the name mismatch when that is all.
struct Unsound<'a>(&'a [Problem]);

impl fmt::Display for Unsound<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            write!(f, "not the list asked for")
        } else {
            write!(f, "{}", join_problems(self.0))
        }
    }
}

/// Resolves the arguments against the environment (the in-cluster API server address, and the
/// directory of this program for the generators).
pub fn resolve(cli: Cli, env: &Env) -> Result<Config, RefreshError> {
    let generators_dir = match &cli.generators_dir {
        Some(dir) => dir.clone(),
        None => env
            .program_dir()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
    };
    let publish = match cli.out_dir {
        Some(dir) => Publish::Dir(dir),
        None => Publish::Cluster(resolve_cluster(&cli, env)?),
    };
    Ok(Config {
        sources_file: cli.sources,
        generators_dir,
        force: cli.force,
        publish,
    })
}

fn resolve_cluster(cli: &Cli, env: &Env) -> Result<Cluster, RefreshError> {
    let api_server = match &cli.api_server {
        Some(url) => url.clone(),
        None => match (
            env.get("KUBERNETES_SERVICE_HOST")?,
            env.get("KUBERNETES_SERVICE_PORT")?,
        ) {
            (Some(host), Some(port)) if host.contains(':') => format!("https://[{host}]:{port}"),
            (Some(host), Some(port)) => format!("https://{host}:{port}"),
            _ => return Err(RefreshError::NotInCluster),
        },
    };
    if !(api_server.starts_with("https://") || api_server.starts_with("http://")) {
        return Err(RefreshError::ApiServerUrl(api_server));
    }
    let now = match &cli.now {
        Some(now) if pop_common::time::is_rfc3339_utc(now) => now.clone(),
        Some(now) => return Err(RefreshError::Now(now.clone())),
        None => pop_common::time::now_rfc3339(),
    };
    Ok(Cluster {
        namespace: cli.namespace.clone(),
        configmap: cli.configmap.clone(),
        wasmplugin: Some(cli.wasmplugin.clone()).filter(|w| !w.is_empty()),
        api_server,
        ca_file: cli.serviceaccount_dir.join("ca.crt"),
        token_file: cli.serviceaccount_dir.join("token"),
        now,
    })
}

/// Regenerates every list and publishes the result; prints a one-line JSON summary (which lists
/// were regenerated or kept, and the published version) on `output`. Nothing is read from
/// `input`.
pub fn run(config: &Config, _input: impl Read, output: impl Write) -> Result<(), RefreshError> {
    let sources: ListSources = pop_common::input::read_json(&config.sources_file)?;
    let problems = sources.problems();
    if !problems.is_empty() {
        return Err(RefreshError::SourcesRules {
            path: config.sources_file.clone(),
            problems,
        });
    }
    match &config.publish {
        Publish::Cluster(cluster) => publish(config, cluster, &sources, output),
        Publish::Dir(dir) => write_dir(config, dir, &sources, output),
    }
}

/// `--out-dir`: each list into `dir/<name>.txt`, its previous file the baseline of the shrink
/// check; a list that fails keeps its file.
fn write_dir(
    config: &Config,
    dir: &Path,
    sources: &ListSources,
    mut output: impl Write,
) -> Result<(), RefreshError> {
    let write_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RefreshError::WriteFile { path, source }
    };
    std::fs::create_dir_all(dir).map_err(write_error(dir))?;
    let (mut written, mut failed) = (Vec::new(), Vec::new());
    for list in &sources.lists {
        let file = dir.join(key_of(&list.name));
        let previous = std::fs::metadata(&file)
            .is_ok_and(|m| m.len() > 0)
            .then_some(file.as_path());
        match generate(config, sources, list, previous) {
            Ok(text) => {
                let tmp = dir.join(format!(".{}.tmp", key_of(&list.name)));
                std::fs::write(&tmp, &text)
                    .and_then(|()| std::fs::rename(&tmp, &file))
                    .map_err(write_error(&file))?;
                pop_common::info!(
                    "list {}: {} ({} prefixes)",
                    list.name,
                    file.display(),
                    text.lines().count()
                );
                written.push(list.name.clone());
            }
            Err(why) => {
                pop_common::warn!("list {}: keeps its previous version: {why}", list.name);
                failed.push(ListFailure {
                    list: list.name.clone(),
                    reason: why,
                });
            }
        }
    }
    let kept: Vec<&str> = failed.iter().map(|f| f.list.as_str()).collect();
    let summary = serde_json::json!({"out_dir": dir, "regenerated": written, "kept": kept});
    writeln!(output, "{summary}").output()?;
    match (written.is_empty(), failed.is_empty()) {
        (_, true) => Ok(()),
        (true, false) => Err(RefreshError::AllFailed(failed)),
        (false, false) => Err(RefreshError::SomeFailed(failed)),
    }
}

/// Publishes to the cluster: the ConfigMap, then the WasmPlugin.
fn publish(
    config: &Config,
    cluster: &Cluster,
    sources: &ListSources,
    output: impl Write,
) -> Result<(), RefreshError> {
    let kube = Kube::new(&cluster.api_server, &cluster.ca_file, &cluster.token_file)?;
    let cm_path = format!(
        "/api/v1/namespaces/{}/configmaps/{}",
        cluster.namespace, cluster.configmap
    );
    let current = kube.get(&cm_path)?;
    let old_data = previous_of(current.as_ref())?;

    // The previous lists, as files for the generators' shrink check.
    let work = tempfile::tempdir().map_err(RefreshError::TempDir)?;
    let mut fresh: BTreeMap<String, String> = BTreeMap::new();
    let mut failed = Vec::new();
    for list in &sources.lists {
        let previous = match old_data.get(&key_of(&list.name)) {
            Some(text) => {
                let file = work.path().join(key_of(&list.name));
                std::fs::write(&file, text).map_err(|source| RefreshError::WriteFile {
                    path: file.clone(),
                    source,
                })?;
                Some(file)
            }
            None => None,
        };
        match generate(config, sources, list, previous.as_deref()) {
            Ok(text) => {
                fresh.insert(list.name.clone(), text);
            }
            Err(why) => {
                pop_common::warn!("list {}: keeps its previous version: {why}", list.name);
                failed.push(ListFailure {
                    list: list.name.clone(),
                    reason: why,
                });
            }
        }
    }
    if fresh.is_empty() {
        return Err(RefreshError::AllFailed(failed));
    }

    let mut plan = Plan::new(sources, &old_data, &fresh, &cluster.now)?;
    // Measured before anything else is read, so that what cannot fit is refused first.
    let mut layout = plan.configmap_layout(current.as_ref())?;
    let wasm = match &cluster.wasmplugin {
        Some(name) => {
            let path = format!(
                "/apis/extensions.istio.io/v1alpha1/namespaces/{}/wasmplugins/{name}",
                cluster.namespace
            );
            let object = kube.get(&path)?;
            if object.is_none() {
                pop_common::warn!(
                    "WasmPlugin {}/{name} not found (filter disabled?): lists go to the ConfigMap only",
                    cluster.namespace
                );
            }
            object.map(|o| (path, name.clone(), o))
        }
        None => None,
    };
    if let Some((_, _, object)) = &wasm {
        if plan.compare_tokens(object) {
            // A new version stamp: the ConfigMap's data carries it.
            layout = plan.configmap_layout(current.as_ref())?;
        }
        plan.check_wasmplugin_size(object)?;
    }

    let wasm_current = wasm.as_ref().is_some_and(|(_, _, o)| {
        o.pointer("/spec/pluginConfig/lists/version")
            .and_then(Value::as_str)
            == old_data.get("version").map(String::as_str)
    });
    if !plan.changed && wasm.as_ref().is_none_or(|_| wasm_current) {
        pop_common::info!(
            "lists unchanged since version {}: nothing written",
            plan.old_version()
        );
    } else {
        if let Some((_, name, object)) = &wasm {
            plan.check_wasmplugin_config(object, &format!("{}/{name}", cluster.namespace))?;
        }
        let cm = plan.configmap(cluster, current.as_ref(), &layout);
        kube.apply(&cm_path, &cm, FIELD_MANAGER)?;
        let packed: Vec<&str> = layout.binary_data.keys().map(String::as_str).collect();
        pop_common::info!(
            "ConfigMap {}/{}: applied version {} ({}){}",
            cluster.namespace,
            cluster.configmap,
            plan.version,
            plan.summary(),
            if packed.is_empty() {
                String::new()
            } else {
                format!(
                    "; packed, as text would not fit: binaryData {}",
                    packed.join(", ")
                )
            }
        );
        if let Some((path, name, _)) = &wasm {
            kube.apply(path, &plan.wasmplugin(cluster, name), FIELD_MANAGER)?;
            pop_common::info!(
                "WasmPlugin {}/{name}: pluginConfig.lists at version {}",
                cluster.namespace,
                plan.version
            );
        }
    }
    write_summary(output, &plan).output()?;
    if failed.is_empty() {
        Ok(())
    } else {
        Err(RefreshError::SomeFailed(failed))
    }
}

/// The run's result for whoever reads stdout (the job's log): which version is live, which lists
/// were regenerated and which kept their previous content.
fn write_summary(mut output: impl Write, plan: &Plan) -> io::Result<()> {
    let summary = serde_json::json!({
        "version": plan.version,
        "changed": plan.changed,
        "regenerated": plan.fresh,
        "kept": plan.kept,
    });
    writeln!(output, "{summary}")
}

/// Runs one generator in its own process, with `previous` (a file) as the baseline of its shrink
/// check; its stderr goes to ours (the job's log). Returns the list as text, or why it failed.
fn generate(
    config: &Config,
    sources: &ListSources,
    list: &ListSource,
    previous: Option<&Path>,
) -> Result<String, GenerateError> {
    let generator = list.generator.command();
    let program = config.generators_dir.join(generator);
    let mut command = Command::new(&program);
    command
        .arg(format!("--list-name={}", list.name))
        .arg(format!(
            "--max-shrink-percent={}",
            sources.max_shrink_percent
        ))
        .arg(format!("--timeout={}", sources.timeout_seconds))
        .args(list.asns.iter().map(|a| format!("--asn={a}")))
        .args(list.tokens.iter().map(|t| format!("--token={t}")));
    if let Some(format) = &list.format {
        command.arg(format!("--format={format}"));
    }
    if let Some(previous) = previous {
        command.arg(format!("--previous={}", previous.display()));
    }
    if config.force {
        command.arg("--force");
    }
    command.arg("--").args(&list.sources);
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|source| GenerateError::Spawn {
            program: program.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(match output.status.code() {
            Some(code) => GenerateError::Exited { generator, code },
            None => GenerateError::Killed { generator },
        });
    }
    let record: PolicyList =
        serde_json::from_slice(&output.stdout).map_err(|e| GenerateError::NoRecord {
            generator,
            detail: e.to_string(),
        })?;
    let problems = record.problems();
    if !problems.is_empty() || record.name != list.name || record.tokens != list.tokens {
        return Err(GenerateError::Unsound {
            generator,
            name: record.name,
            problems,
        });
    }
    Ok(record.to_text())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("lists-refresh").chain(args.iter().copied())).unwrap()
    }

    fn in_cluster(host: &str) -> Env {
        Env::from_pairs([
            ("KUBERNETES_SERVICE_HOST", host),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ])
        .with_program("/usr/local/bin/lists-refresh")
    }

    /// The cluster a config publishes to.
    fn cluster(config: Config) -> Cluster {
        match config.publish {
            Publish::Cluster(cluster) => cluster,
            Publish::Dir(dir) => panic!("publishes to {}", dir.display()),
        }
    }

    #[test]
    fn in_cluster_the_api_server_comes_from_the_environment() {
        let config = resolve(
            cli(&[
                "--namespace=edge",
                "--configmap=policy-lists",
                "--wasmplugin=pow-filter",
                "--sources=/etc/lists-refresh/sources.json",
                "--now=2026-11-30T20:00:00Z",
            ]),
            &in_cluster("10.96.0.1"),
        )
        .unwrap();
        assert_eq!(config.generators_dir, Path::new("/usr/local/bin"));
        let config = cluster(config);
        assert_eq!(config.api_server, "https://10.96.0.1:443");
        assert_eq!(
            config.token_file,
            Path::new(SERVICEACCOUNT_DIR).join("token")
        );
        assert_eq!(config.ca_file, Path::new(SERVICEACCOUNT_DIR).join("ca.crt"));
        assert_eq!(config.wasmplugin.as_deref(), Some("pow-filter"));
        assert_eq!(config.now, "2026-11-30T20:00:00Z");
        assert_eq!(
            cluster(resolve(cli(&[]), &in_cluster("fd00::1")).unwrap()).api_server,
            "https://[fd00::1]:443"
        );
    }

    #[test]
    fn an_out_dir_needs_no_cluster_and_takes_no_cluster_setting() {
        let config = resolve(cli(&["--out-dir=talos/_out/lists"]), &Env::default()).unwrap();
        assert_eq!(
            config.publish,
            Publish::Dir(PathBuf::from("talos/_out/lists"))
        );
        for setting in [
            "--api-server=http://127.0.0.1:1",
            "--namespace=edge",
            "--now=x",
        ] {
            let parsed = Cli::try_parse_from(["lists-refresh", "--out-dir=d", setting]);
            assert!(parsed.is_err(), "{setting} was accepted with --out-dir");
        }
    }

    #[test]
    fn outside_a_cluster_an_api_server_is_needed_and_an_empty_wasmplugin_means_none() {
        let none = Env::default();
        let err = resolve(cli(&[]), &none).unwrap_err();
        assert!(matches!(err, RefreshError::NotInCluster), "{err}");
        assert_eq!(err.exit(), Exit::Usage);
        let config = resolve(
            cli(&["--api-server=http://127.0.0.1:1", "--wasmplugin="]),
            &none,
        )
        .unwrap();
        assert_eq!(cluster(config).wasmplugin, None);
        assert!(matches!(
            resolve(cli(&["--api-server=ftp://x"]), &none),
            Err(RefreshError::ApiServerUrl(_))
        ));
        assert!(matches!(
            resolve(cli(&["--api-server=http://x", "--now=yesterday"]), &none),
            Err(RefreshError::Now(_))
        ));
    }

    #[test]
    fn failed_lists_are_named_with_their_reason_and_the_run_fails() {
        let failures = vec![
            ListFailure {
                list: "tor".into(),
                reason: GenerateError::Exited {
                    generator: "lists-gen-tor",
                    code: 1,
                },
            },
            ListFailure {
                list: "hosting".into(),
                reason: GenerateError::Unsound {
                    generator: "lists-gen-asn",
                    name: "other".into(),
                    problems: vec![],
                },
            },
        ];
        let err = RefreshError::SomeFailed(failures);
        assert_eq!(err.exit(), Exit::Failure);
        assert_eq!(
            err.to_string(),
            "wrote the other lists; these failed and keep their previous version: \
             tor (lists-gen-tor exited with 1), \
             hosting (lists-gen-asn printed an unsound list `other`: not the list asked for)"
        );
    }
}
