//! `lists-refresh`: the hourly CronJob that regenerates the policy lists, fetches the trusted
//! agents' key directories, and publishes both.
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
//! 3. Gets each trusted agent's keys (`agents` of the sources): its key directory fetched from
//!    its URL (see [`directory`]: the media type, the filter's parser, the response's own
//!    signatures), or its keys inline. A directory that fails (network, HTTP error, invalid,
//!    unsigned, no key) keeps the agent's previous keys (the ConfigMap's
//!    `<name>.directory.json`), is named in the log, and the run exits 1 naming it, as a list.
//! 4. Packs every list (`pow_core::packed`: sorted, delta-encoded, zlib, base64, about 1.3
//!    bytes a prefix against 16 as text), checks the ConfigMap's 1 MiB and the WasmPlugin's
//!    1.5 MiB (etcd's request limit) before any write, refusing naming each list with its
//!    prefix count and sizes, then server-side-applies, as field manager `edgepop-lists`
//!    (`force=true`):
//!    - the ConfigMap's `data`: `<name>.txt` per list (one CIDR per line), `version` and
//!      `generated_at`; when the text would not fit, the largest lists go packed instead, as
//!      `binaryData` `<name>.packed` (read back as the previous lists all the same). The failed
//!      lists are applied with their previous content, so they stay as they were (a key this
//!      manager stops applying would be deleted);
//!    - the ConfigMap's `<name>.directory.json` per agent: its keys as the filter reads them;
//!    - the WasmPlugin's `spec.pluginConfig.agents`: `{name: {"keys": directory}}`, the form the
//!      filter reads (it computes the thumbprints itself), and `spec.pluginConfig.lists`:
//!      `{"version", "generated_at", "packed":
//!      {name: packed set}, "tokens": {name: [User-Agent tokens]}}`, the form the filter reads
//!      (a few hundred thousand prefixes fit where the text held about 80k); `tokens` holds the
//!      crawler lists that have content (a kept one too), and comes from the sources, so the
//!      ConfigMap does not carry it.
//!
//!    Nothing is written when nothing changed and the WasmPlugin already has this version, these
//!    tokens and these keys.
//!
//! With `--out-dir DIR` (what `make lists` runs) the lists go to `DIR/<name>.txt` instead, one
//! CIDR per line, and each agent's keys to `DIR/<name>.directory.json`: no cluster, the previous
//! `<name>.txt` is the shrink check's baseline, a list or agent that fails keeps its file (or,
//! without one, gets none), and the run exits 1 naming it after writing the others.
//!
//! Why the WasmPlugin and not only the ConfigMap: Istio delivers a `pluginConfig` change to the
//! gateways by ECDS, as a fresh `on_configure` in the running VM, where the filter swaps its
//! table: the new lists apply within seconds to a minute, without restarting the gateway and
//! without a network hop per request (a filter cannot read a ConfigMap, and an HTTP call out of
//! the filter would add a hop and a failure mode). The ConfigMap stays the source of truth,
//! readable by people (`kubectl get cm policy-lists`) and the "previous" list of the next
//! run. The edge layer's apply owns neither the ConfigMap's keys nor `pluginConfig.lists` and
//! `pluginConfig.agents` (render-edge renders none of them), so a re-apply of the edge layer
//! never reverts them.

pub mod directory;
mod error;
mod generate;
mod out_dir;
mod plan;
mod publish;
pub mod signature;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use clap::Parser;
use lists_core::records::ListSources;
use pop_common::tool::Env;

pub use error::{Failed, Failure, GenerateError, RefreshError};
pub use kube_rest::Kube;
pub use plan::{agent_key_of, key_of};

/// The ConfigMap size limit enforced by the API server (data and binaryData together).
pub const CONFIGMAP_LIMIT: usize = 1024 * 1024;
/// etcd's default request limit, which bounds the whole WasmPlugin object.
pub const OBJECT_LIMIT: usize = 1536 * 1024;
/// The field manager of everything this job applies.
pub const FIELD_MANAGER: &str = "edgepop-lists";

use kube_rest::SERVICEACCOUNT_DIR;

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
    let api_server = kube_rest::api_server(
        cli.api_server.clone(),
        env.get("KUBERNETES_SERVICE_HOST")?,
        env.get("KUBERNETES_SERVICE_PORT")?,
    )
    .map_err(|error| match error {
        kube_rest::ApiServerError::NotInCluster => RefreshError::NotInCluster,
        kube_rest::ApiServerError::NotHttp(url) => RefreshError::ApiServerUrl(url),
    })?;
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
        Publish::Cluster(cluster) => publish::publish(config, cluster, &sources, output),
        Publish::Dir(dir) => out_dir::write_dir(config, dir, &sources, output),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pop_common::exit::{Exit, Report};

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
}
