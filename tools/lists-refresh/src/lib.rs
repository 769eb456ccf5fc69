//! `lists-refresh`: the hourly CronJob that regenerates the policy lists and publishes them.
//!
//! ```sh
//! lists-refresh --namespace=edge --configmap=policy-lists --wasmplugin=pow-filter \
//!   --sources=/etc/lists-refresh/sources.json
//! ```
//!
//! 1. Reads the `ListSources` record (`--sources`) and GETs the `policy-lists` ConfigMap: its
//!    `<name>.txt` keys are the previous lists.
//! 2. Runs each list's generator (`lists-gen-asn`, `lists-gen-tor`) in its own process, with
//!    the previous list for the shrink check. A generator that fails (source down, bad data,
//!    shrink) leaves its list at its previous version; its own message is in the job's log, and
//!    the run exits 1 naming it after publishing the others.
//! 3. Checks the ConfigMap's 1 MiB limit before any write, then server-side-applies, as field
//!    manager `edgepop-lists` (`force=true`):
//!    - the ConfigMap's `data`: `<name>.txt` per list (one CIDR per line), `version` and
//!      `generated_at`. The failed lists are applied with their previous content, so they stay
//!      as they were (a key this manager stops applying would be deleted);
//!    - the WasmPlugin's `spec.pluginConfig.lists`: `{"version", "generated_at", "sets": {name:
//!      CIDRs separated by newlines}}`, the format the filter reads.
//!
//!    Nothing is written when nothing changed and the WasmPlugin already has this version.
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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Parser;
use pop_common::exit::{Exit, Report};
use pop_common::records::{ListSource, ListSources, PolicyList};
use serde_json::{Value, json};

pub use kube::Kube;

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
    /// Where lists-gen-asn and lists-gen-tor are (default: beside this program).
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
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub namespace: String,
    pub configmap: String,
    pub wasmplugin: Option<String>,
    pub sources_file: PathBuf,
    pub generators_dir: PathBuf,
    pub api_server: String,
    pub ca_file: PathBuf,
    pub token_file: PathBuf,
    pub force: bool,
}

/// Why the refresh stopped, or which lists it could not refresh.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Api(String),
    #[error("{0}; nothing was written")]
    TooLarge(String),
    #[error("every list failed ({0}); nothing was written, the previous lists stay")]
    AllFailed(String),
    #[error("published the other lists; these failed and keep their previous version: {0}")]
    SomeFailed(String),
}

impl Report for RefreshError {
    fn exit(&self) -> Exit {
        match self {
            RefreshError::Usage(_) => Exit::Usage,
            _ => Exit::Failure,
        }
    }
}

/// Resolves the arguments; `env` reads the environment (injected for tests).
pub fn resolve(cli: &Cli, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, RefreshError> {
    let api_server = match &cli.api_server {
        Some(url) => url.clone(),
        None => match (
            env("KUBERNETES_SERVICE_HOST"),
            env("KUBERNETES_SERVICE_PORT"),
        ) {
            (Some(host), Some(port)) if host.contains(':') => format!("https://[{host}]:{port}"),
            (Some(host), Some(port)) => format!("https://{host}:{port}"),
            _ => {
                return Err(RefreshError::Usage(
                    "not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset) and no --api-server"
                        .into(),
                ));
            }
        },
    };
    if !(api_server.starts_with("https://") || api_server.starts_with("http://")) {
        return Err(RefreshError::Usage(format!(
            "--api-server `{api_server}`: not an http(s) URL"
        )));
    }
    let generators_dir = match &cli.generators_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from(".")),
    };
    Ok(Config {
        namespace: cli.namespace.clone(),
        configmap: cli.configmap.clone(),
        wasmplugin: Some(cli.wasmplugin.clone()).filter(|w| !w.is_empty()),
        sources_file: cli.sources.clone(),
        generators_dir,
        api_server,
        ca_file: cli.serviceaccount_dir.join("ca.crt"),
        token_file: cli.serviceaccount_dir.join("token"),
        force: cli.force,
    })
}

/// Regenerates every list and publishes the result.
pub fn run(config: &Config) -> Result<(), RefreshError> {
    let sources: ListSources = pop_common::input::read_json(&config.sources_file)
        .map_err(|e| RefreshError::Usage(e.to_string()))?;
    let problems = sources.problems();
    if !problems.is_empty() {
        return Err(RefreshError::Usage(format!(
            "{}: {}",
            config.sources_file.display(),
            problems.join("; ")
        )));
    }
    let kube = Kube::new(&config.api_server, &config.ca_file, &config.token_file)?;
    let cm_path = format!(
        "/api/v1/namespaces/{}/configmaps/{}",
        config.namespace, config.configmap
    );
    let current = kube.get(&cm_path)?;
    let old_data = data_of(current.as_ref());

    let work = tempfile::tempdir()
        .map_err(|e| RefreshError::Usage(format!("cannot create a temporary directory: {e}")))?;
    let mut fresh: BTreeMap<String, String> = BTreeMap::new();
    let mut failed = Vec::new();
    for list in &sources.lists {
        let previous = old_data.get(&key_of(&list.name));
        match generate(config, &sources, list, previous, work.path()) {
            Ok(text) => {
                fresh.insert(list.name.clone(), text);
            }
            Err(why) => {
                pop_common::warn!("list {}: keeps its previous version: {why}", list.name);
                failed.push(format!("{} ({why})", list.name));
            }
        }
    }
    if fresh.is_empty() {
        return Err(RefreshError::AllFailed(failed.join(", ")));
    }

    let plan = Plan::new(&sources, &old_data, &fresh);
    plan.check_size(current.as_ref())?;
    let wasm = match &config.wasmplugin {
        Some(name) => {
            let path = format!(
                "/apis/extensions.istio.io/v1alpha1/namespaces/{}/wasmplugins/{name}",
                config.namespace
            );
            let object = kube.get(&path)?;
            if object.is_none() {
                pop_common::warn!(
                    "WasmPlugin {}/{name} not found (filter disabled?): lists go to the ConfigMap only",
                    config.namespace
                );
            }
            object.map(|o| (path, name.clone(), o))
        }
        None => None,
    };
    if let Some((_, _, object)) = &wasm {
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
        let cm = plan.configmap(config, current.as_ref());
        kube.apply(&cm_path, &cm, FIELD_MANAGER)?;
        pop_common::info!(
            "ConfigMap {}/{}: applied version {} ({})",
            config.namespace,
            config.configmap,
            plan.version,
            plan.summary()
        );
        if let Some((path, name, _)) = &wasm {
            kube.apply(path, &plan.wasmplugin(config, name), FIELD_MANAGER)?;
            pop_common::info!(
                "WasmPlugin {}/{name}: pluginConfig.lists at version {}",
                config.namespace,
                plan.version
            );
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(RefreshError::SomeFailed(failed.join(", ")))
    }
}

/// The ConfigMap key of a list.
pub fn key_of(name: &str) -> String {
    format!("{name}.txt")
}

fn data_of(object: Option<&Value>) -> BTreeMap<String, String> {
    object
        .and_then(|o| o.get("data"))
        .and_then(Value::as_object)
        .map(|data| {
            data.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs one generator in its own process; its stderr goes to ours (the job's log). Returns the
/// list as text, or why it failed.
fn generate(
    config: &Config,
    sources: &ListSources,
    list: &ListSource,
    previous: Option<&String>,
    work: &Path,
) -> Result<String, String> {
    let program = config.generators_dir.join(list.generator.command());
    let mut command = Command::new(&program);
    command
        .arg(format!("--list-name={}", list.name))
        .arg(format!(
            "--max-shrink-percent={}",
            sources.max_shrink_percent
        ))
        .arg(format!("--timeout={}", sources.timeout_seconds))
        .args(list.asns.iter().map(|a| format!("--asn={a}")));
    if let Some(format) = &list.format {
        command.arg(format!("--format={format}"));
    }
    if let Some(previous) = previous {
        let file = work.join(key_of(&list.name));
        std::fs::write(&file, previous)
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        command.arg(format!("--previous={}", file.display()));
    }
    if config.force {
        command.arg("--force");
    }
    command.arg("--").args(&list.sources);
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if !output.status.success() {
        return Err(match output.status.code() {
            Some(code) => format!("{} exited with {code}", list.generator.command()),
            None => format!("{} was killed", list.generator.command()),
        });
    }
    let record: PolicyList = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("{} printed no PolicyList: {e}", list.generator.command()))?;
    let problems = record.problems();
    if !problems.is_empty() || record.name != list.name {
        return Err(format!(
            "{} printed an unsound list `{}`: {}",
            list.generator.command(),
            record.name,
            problems.join("; ")
        ));
    }
    Ok(record.to_text())
}

/// What will be applied.
#[derive(Debug)]
struct Plan {
    /// Every list of the sources that has content: fresh, or the previous one kept.
    sets: BTreeMap<String, String>,
    fresh: Vec<String>,
    kept: Vec<String>,
    changed: bool,
    version: String,
    old_version: Option<String>,
}

impl Plan {
    fn new(
        sources: &ListSources,
        old: &BTreeMap<String, String>,
        fresh: &BTreeMap<String, String>,
    ) -> Plan {
        let mut sets = BTreeMap::new();
        let (mut fresh_names, mut kept) = (Vec::new(), Vec::new());
        let mut changed = false;
        for list in &sources.lists {
            let old_text = old.get(&key_of(&list.name));
            if let Some(text) = fresh.get(&list.name) {
                changed |= old_text != Some(text);
                sets.insert(list.name.clone(), text.clone());
                fresh_names.push(list.name.clone());
            } else if let Some(text) = old_text {
                sets.insert(list.name.clone(), text.clone());
                kept.push(list.name.clone());
            }
        }
        // A list removed from the sources disappears from what we apply: a change too.
        let listed = |key: &str| {
            key.strip_suffix(".txt")
                .is_some_and(|n| sets.contains_key(n))
        };
        changed |= old.keys().any(|k| k.ends_with(".txt") && !listed(k));
        let now = lists_now();
        Plan {
            sets,
            fresh: fresh_names,
            kept,
            changed,
            version: if changed {
                now
            } else {
                old.get("version").cloned().unwrap_or(now)
            },
            old_version: old.get("version").cloned(),
        }
    }

    fn old_version(&self) -> &str {
        self.old_version.as_deref().unwrap_or("(none)")
    }

    fn summary(&self) -> String {
        let mut parts: Vec<String> = self
            .sets
            .iter()
            .map(|(name, text)| format!("{name}: {} prefixes", text.lines().count()))
            .collect();
        if !self.kept.is_empty() {
            parts.push(format!("kept: {}", self.kept.join(", ")));
        }
        parts.push(format!("regenerated: {}", self.fresh.join(", ")));
        parts.join("; ")
    }

    /// The ConfigMap's data this job owns.
    fn data(&self) -> BTreeMap<String, String> {
        let mut data: BTreeMap<String, String> = self
            .sets
            .iter()
            .map(|(name, text)| (key_of(name), text.clone()))
            .collect();
        data.insert("version".into(), self.version.clone());
        data.insert("generated_at".into(), self.version.clone());
        data
    }

    /// Refuses a ConfigMap over 1 MiB: ours plus the keys other managers put there.
    fn check_size(&self, current: Option<&Value>) -> Result<(), RefreshError> {
        let ours = self.data();
        let others: usize = data_of(current)
            .iter()
            .filter(|(k, _)| !(k.ends_with(".txt") || *k == "version" || *k == "generated_at"))
            .map(|(k, v)| k.len() + v.len())
            .sum();
        let binary: usize = current
            .and_then(|o| o.get("binaryData"))
            .and_then(Value::as_object)
            .map(|b| {
                b.iter()
                    .map(|(k, v)| k.len() + v.as_str().map_or(0, |s| s.len() / 4 * 3))
                    .sum()
            })
            .unwrap_or(0);
        let size: usize =
            ours.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() + others + binary;
        if size > CONFIGMAP_LIMIT {
            return Err(RefreshError::TooLarge(format!(
                "the policy-lists ConfigMap would hold {size} bytes, over the {CONFIGMAP_LIMIT}-byte limit ({})",
                self.summary()
            )));
        }
        Ok(())
    }

    /// Refuses a WasmPlugin that would exceed what etcd stores in one object.
    fn check_wasmplugin_size(&self, current: &Value) -> Result<(), RefreshError> {
        let mut object = current.clone();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        if let Some(config) = object
            .pointer_mut("/spec/pluginConfig")
            .and_then(Value::as_object_mut)
        {
            config.remove("lists");
        }
        let size = json_len(&object) + json_len(&self.lists());
        if size > OBJECT_LIMIT {
            return Err(RefreshError::TooLarge(format!(
                "the WasmPlugin would be {size} bytes, over the {OBJECT_LIMIT}-byte object limit"
            )));
        }
        Ok(())
    }

    /// The filter's `lists` object.
    fn lists(&self) -> Value {
        json!({"version": self.version, "generated_at": self.version, "sets": self.sets})
    }

    fn configmap(&self, config: &Config, current: Option<&Value>) -> Value {
        let mut metadata = json!({"name": config.configmap, "namespace": config.namespace});
        // Optimistic concurrency: if someone wrote the ConfigMap since we read it, the apply
        // fails with 409 instead of overwriting what we did not read.
        if let Some(rv) = current.and_then(|o| o.pointer("/metadata/resourceVersion")) {
            metadata["resourceVersion"] = rv.clone();
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": self.data()})
    }

    fn wasmplugin(&self, config: &Config, name: &str) -> Value {
        json!({
            "apiVersion": "extensions.istio.io/v1alpha1",
            "kind": "WasmPlugin",
            "metadata": {"name": name, "namespace": config.namespace},
            "spec": {"pluginConfig": {"lists": self.lists()}},
        })
    }
}

fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(0, |v| v.len())
}

/// The version stamp: the generation time, RFC 3339 UTC (`EDGEPOP_LISTS_NOW` fixes it, for
/// tests).
fn lists_now() -> String {
    std::env::var("EDGEPOP_LISTS_NOW").unwrap_or_else(|_| pop_common::time::now_rfc3339())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("lists-refresh").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn in_cluster_the_api_server_comes_from_the_environment() {
        let env = |name: &str| match name {
            "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        };
        let config = resolve(
            &cli(&[
                "--namespace=edge",
                "--configmap=policy-lists",
                "--wasmplugin=pow-filter",
                "--sources=/etc/lists-refresh/sources.json",
            ]),
            &env,
        )
        .unwrap();
        assert_eq!(config.api_server, "https://10.96.0.1:443");
        assert_eq!(
            config.token_file,
            Path::new(SERVICEACCOUNT_DIR).join("token")
        );
        assert_eq!(config.ca_file, Path::new(SERVICEACCOUNT_DIR).join("ca.crt"));
        assert_eq!(config.wasmplugin.as_deref(), Some("pow-filter"));
        let v6 = |name: &str| match name {
            "KUBERNETES_SERVICE_HOST" => Some("fd00::1".to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        };
        assert_eq!(
            resolve(&cli(&[]), &v6).unwrap().api_server,
            "https://[fd00::1]:443"
        );
    }

    #[test]
    fn outside_a_cluster_an_api_server_is_needed_and_an_empty_wasmplugin_means_none() {
        let none = |_: &str| None;
        assert!(
            resolve(&cli(&[]), &none)
                .unwrap_err()
                .to_string()
                .contains("not in a cluster")
        );
        let config = resolve(
            &cli(&["--api-server=http://127.0.0.1:1", "--wasmplugin="]),
            &none,
        )
        .unwrap();
        assert_eq!(config.wasmplugin, None);
        assert!(resolve(&cli(&["--api-server=ftp://x"]), &none).is_err());
    }

    fn sources(names: &[&str]) -> ListSources {
        let lists: Vec<String> = names
            .iter()
            .map(|n| format!(r#"{{"name":"{n}","generator":"tor","sources":["/x"]}}"#))
            .collect();
        serde_json::from_str(&format!(
            r#"{{"kind":"ListSources","version":1,"lists":[{}]}}"#,
            lists.join(",")
        ))
        .unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_failed_list_keeps_its_previous_content_and_unchanged_lists_keep_the_version() {
        let old = map(&[
            ("tor.txt", "192.0.2.1/32\n"),
            ("hosting.txt", "10.0.0.0/8\n"),
            ("version", "v1"),
        ]);
        let plan = Plan::new(
            &sources(&["tor", "hosting"]),
            &old,
            &map(&[("tor", "192.0.2.1/32\n")]),
        );
        assert!(!plan.changed);
        assert_eq!(plan.version, "v1");
        assert_eq!(plan.kept, ["hosting"]);
        assert_eq!(plan.data()["hosting.txt"], "10.0.0.0/8\n");
        let plan = Plan::new(
            &sources(&["tor", "hosting"]),
            &old,
            &map(&[("tor", "192.0.2.9/32\n")]),
        );
        assert!(plan.changed);
        assert_ne!(plan.version, "v1");
        // A list dropped from the sources is a change (its key goes away).
        let plan = Plan::new(&sources(&["tor"]), &old, &map(&[("tor", "192.0.2.1/32\n")]));
        assert!(plan.changed);
        assert!(!plan.data().contains_key("hosting.txt"));
    }

    #[test]
    fn the_size_check_counts_other_keys_and_refuses_over_one_mib() {
        let big = "x".repeat(CONFIGMAP_LIMIT / 2);
        let plan = Plan::new(&sources(&["tor"]), &BTreeMap::new(), &map(&[("tor", &big)]));
        assert!(plan.check_size(None).is_ok());
        let current = json!({"data": {"notes": big, "tor.txt": "old"}});
        let err = plan.check_size(Some(&current)).unwrap_err();
        assert!(
            err.to_string().contains("over the 1048576-byte limit"),
            "{err}"
        );
    }
}
