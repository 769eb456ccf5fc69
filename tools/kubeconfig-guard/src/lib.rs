//! `kubeconfig-guard`: the cluster a kubeconfig points at, checked against this cluster's before
//! the Makefile writes to it.
//!
//! ```text
//! kubeconfig-guard --kubeconfig talos/_out/kubeconfig --inputs talos/_out/platform-inputs.json
//! kubeconfig-guard --kubeconfig FILE --endpoint https://k8s.example.net:6443 --cluster-name demo
//! ```
//!
//! kubectl and helm act on the API server of the kubeconfig's current context. This tool reads
//! that server (`current-context`, its context's `cluster`, that cluster's `server`) and compares
//! it with `cluster_endpoint` of the `PlatformInputs` record the infra layer wrote, or, for a
//! cluster this Makefile did not make (another platform profile), with the endpoint its config
//! declares (`--endpoint`): the same URL
//! (scheme and host in any case, the default port spelled or not, no trailing slash) prints
//! `CLUSTER_NAME=<name>` and `CLUSTER_ENDPOINT=<url>` on stdout, for the question that names the
//! cluster; another is refused (exit 1), naming the file, the context, the server it points at
//! and the endpoint.
//! Nothing of the kubeconfig but names and the server is read into an error: it holds keys.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use clap::Parser;
use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::InputError;
use pop_common::records::PlatformInputs;
use pop_common::tool::Env;
use serde::Deserialize;

#[derive(Debug, Parser)]
#[command(name = "kubeconfig-guard", version, about)]
pub struct Cli {
    /// The kubeconfig kubectl and helm will use (one file).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,
    /// The PlatformInputs record of the cluster (talos/_out/platform-inputs.json).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "endpoint",
        conflicts_with = "endpoint"
    )]
    pub inputs: Option<PathBuf>,
    /// The API server of a cluster the infra layer did not make (its platform profile's
    /// `cluster_endpoint`), with --cluster-name.
    #[arg(long, value_name = "URL", requires = "cluster_name")]
    pub endpoint: Option<String>,
    /// That cluster's name, printed for the questions that name it.
    #[arg(long, value_name = "NAME", requires = "endpoint")]
    pub cluster_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub kubeconfig: PathBuf,
    pub expected: Expected,
}

/// The cluster the kubeconfig must point at, and where that was read (for the refusal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub cluster_name: String,
    pub endpoint: String,
    /// `cluster_endpoint of FILE`, or `--endpoint`.
    pub read_from: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{}: cannot read the kubeconfig: {message}", path.display())]
    Read { path: PathBuf, message: String },
    // The parser's own message is left out: it may quote a value, and a value may be a key.
    #[error("{}: not a kubeconfig (near {location})", path.display())]
    Syntax { path: PathBuf, location: String },
    #[error("{}: {message}", path.display())]
    Kubeconfig { path: PathBuf, message: String },
    #[error(
        "{}: the current context `{context}` points at {server}, not at this cluster's {endpoint} \
         ({expected_from}): refusing to act on it; this Makefile uses talos/_out/kubeconfig, or the file \
         given as make KUBECONFIG=...",
        kubeconfig.display()
    )]
    OtherCluster {
        kubeconfig: PathBuf,
        context: String,
        server: String,
        endpoint: String,
        expected_from: String,
    },
    #[error("--endpoint `{0}`: not an https:// URL with a host")]
    Endpoint(String),
    #[error("cannot write the output: {0}")]
    Output(#[from] OutputError),
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Input(_) | Error::Read { .. } | Error::Syntax { .. } | Error::Endpoint(_) => {
                Exit::Usage
            }
            Error::Kubeconfig { .. } | Error::OtherCluster { .. } | Error::Output(_) => {
                Exit::Failure
            }
        }
    }
}

/// Reads the PlatformInputs record, or checks the endpoint given.
pub fn resolve(cli: Cli, _env: &Env) -> Result<Config, Error> {
    let expected = match (cli.inputs, cli.endpoint, cli.cluster_name) {
        (Some(path), _, _) => {
            let inputs: PlatformInputs = pop_common::input::read_json(&path)?;
            Expected {
                cluster_name: inputs.cluster_name,
                endpoint: inputs.cluster_endpoint,
                read_from: format!("cluster_endpoint of {}", path.display()),
            }
        }
        (None, Some(endpoint), Some(cluster_name)) => {
            let host = endpoint.strip_prefix("https://").unwrap_or_default();
            if host.is_empty() || host.starts_with(['/', ':']) {
                return Err(Error::Endpoint(endpoint));
            }
            Expected {
                cluster_name,
                endpoint,
                read_from: "--endpoint".to_owned(),
            }
        }
        // clap requires --inputs or both of the others.
        _ => return Err(Error::Endpoint(String::new())),
    };
    Ok(Config {
        kubeconfig: cli.kubeconfig,
        expected,
    })
}

/// What is read of a kubeconfig (every other key is ignored).
#[derive(Debug, Deserialize)]
struct Kubeconfig {
    #[serde(rename = "current-context", default)]
    current_context: Option<String>,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "context", alias = "cluster")]
    value: T,
}

#[derive(Debug, Deserialize)]
struct Context {
    cluster: String,
}

#[derive(Debug, Deserialize)]
struct Cluster {
    server: String,
}

/// The current context's name and its API server.
pub fn current_server(path: &Path, text: &str) -> Result<(String, String), Error> {
    let bad = |message: String| Error::Kubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let config: Kubeconfig = serde_norway::from_str(text).map_err(|err| Error::Syntax {
        path: path.to_path_buf(),
        location: err
            .location()
            .map(|l| format!("line {}, column {}", l.line(), l.column()))
            .unwrap_or_else(|| "an unknown place".into()),
    })?;
    let context = config
        .current_context
        .filter(|c| !c.is_empty())
        .ok_or_else(|| bad("no current-context".into()))?;
    let cluster = &config
        .contexts
        .iter()
        .find(|c| c.name == context)
        .ok_or_else(|| {
            bad(format!(
                "the current context `{context}` is not among its contexts"
            ))
        })?
        .value
        .cluster;
    let server = &config
        .clusters
        .iter()
        .find(|c| c.name == *cluster)
        .ok_or_else(|| {
            bad(format!(
                "the cluster `{cluster}` of the context `{context}` is not among its clusters"
            ))
        })?
        .value
        .server;
    Ok((context, server.clone()))
}

/// A URL as compared: scheme and host in lower case, the default port of the scheme left out,
/// no trailing slash.
pub fn normalize(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_ascii_lowercase();
    };
    let scheme = scheme.to_ascii_lowercase();
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut authority = authority.to_ascii_lowercase();
    let default = match scheme.as_str() {
        "https" => ":443",
        "http" => ":80",
        _ => "",
    };
    if !default.is_empty() && authority.ends_with(default) {
        authority.truncate(authority.len() - default.len());
    }
    format!("{scheme}://{authority}{path}")
}

pub fn run(config: &Config, _input: impl Read, mut output: impl Write) -> Result<(), Error> {
    let path = &config.kubeconfig;
    let text = std::fs::read_to_string(path).map_err(|e| Error::Read {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let (context, server) = current_server(path, &text)?;
    let expected = &config.expected;
    let endpoint = &expected.endpoint;
    if normalize(&server) != normalize(endpoint) {
        return Err(Error::OtherCluster {
            kubeconfig: path.clone(),
            context,
            server,
            endpoint: endpoint.clone(),
            expected_from: expected.read_from.clone(),
        });
    }
    pop_common::info!(
        "{}: the context `{context}` is the cluster {} ({endpoint})",
        path.display(),
        expected.cluster_name
    );
    writeln!(
        output,
        "CLUSTER_NAME={}\nCLUSTER_ENDPOINT={endpoint}",
        expected.cluster_name
    )
    .output()?;
    Ok(output.flush().output()?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// What `talosctl kubeconfig` writes, in shape (the key material shortened).
    const TALOS: &str = "\
apiVersion: v1
kind: Config
clusters:
    - name: edge-par
      cluster:
        server: https://api.example.com:6443
        certificate-authority-data: LS0tLS1CRUdJTi==
    - name: prod
      cluster:
        server: https://prod.example.net:6443
users:
    - name: admin@edge-par
      user:
        client-certificate-data: LS0tLS1CRUdJTi==
        client-key-data: c2VjcmV0LWtleS1tYXRlcmlhbA==
contexts:
    - context:
        cluster: edge-par
        namespace: default
        user: admin@edge-par
      name: admin@edge-par
    - context:
        cluster: prod
        user: admin@edge-par
      name: prod
current-context: admin@edge-par
";

    fn config(dir: &Path, kubeconfig: &str) -> Config {
        let path = dir.join("kubeconfig");
        std::fs::write(&path, kubeconfig).unwrap();
        let inputs = dir.join("platform-inputs.json");
        std::fs::write(
            &inputs,
            r#"{"kind": "PlatformInputs", "version": 4, "cluster_name": "edge-par",
                "cluster_endpoint": "https://api.example.com:6443", "dns_zone": "example.com",
                "edge_hostnames": ["www.example.com"],
                "edge_nodes": [{"name": "edge-worker-1", "public_ipv4": "203.0.113.10"}],
                "admin_cidrs": ["198.51.100.0/24"], "control_plane_addresses": ["203.0.113.11"],
                "worker_addresses": ["203.0.113.10"]}"#,
        )
        .unwrap();
        resolve(
            Cli {
                kubeconfig: path,
                inputs: Some(inputs),
                endpoint: None,
                cluster_name: None,
            },
            &Env::from_pairs(Vec::<(String, String)>::new()),
        )
        .unwrap()
    }

    fn check(kubeconfig: &str) -> Result<String, Error> {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path(), kubeconfig);
        let mut out = Vec::new();
        run(&config, std::io::empty(), &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn the_cluster_s_own_kubeconfig_passes_and_names_the_cluster() {
        assert_eq!(
            check(TALOS).unwrap(),
            "CLUSTER_NAME=edge-par\nCLUSTER_ENDPOINT=https://api.example.com:6443\n"
        );
    }

    #[test]
    fn another_current_context_is_refused_naming_what_it_points_at() {
        let err = check(&TALOS.replace("current-context: admin@edge-par", "current-context: prod"))
            .unwrap_err();
        assert_eq!(err.exit(), Exit::Failure);
        let text = err.to_string();
        testkit::process::assert_says_all(
            &text,
            &[
                "`prod`",
                "https://prod.example.net:6443",
                "https://api.example.com:6443",
                "platform-inputs.json",
            ],
        );
        assert!(!text.contains("c2VjcmV0"), "{text}");
    }

    #[test]
    fn a_cluster_the_infra_layer_did_not_make_is_checked_against_the_endpoint_given() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, TALOS).unwrap();
        let cli = |endpoint: &str| {
            Cli::try_parse_from([
                "kubeconfig-guard",
                "--kubeconfig",
                path.to_str().unwrap(),
                "--endpoint",
                endpoint,
                "--cluster-name",
                "demo",
            ])
            .unwrap()
        };
        let env = Env::from_pairs(Vec::<(String, String)>::new());
        let config = resolve(cli("https://API.example.com:6443/"), &env).unwrap();
        let mut out = Vec::new();
        run(&config, std::io::empty(), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "CLUSTER_NAME=demo\nCLUSTER_ENDPOINT=https://API.example.com:6443/\n"
        );
        let other = resolve(cli("https://prod.example.net:6443"), &env).unwrap();
        let text = run(&other, std::io::empty(), Vec::new())
            .unwrap_err()
            .to_string();
        assert!(text.contains("(--endpoint)"), "{text}");
        for bad in ["http://api.example.com", "https://", "https://:6443"] {
            let err = resolve(cli(bad), &env).unwrap_err();
            assert_eq!(err.exit(), Exit::Usage, "{bad}");
        }
        // --inputs or --endpoint with --cluster-name: never neither, never both.
        assert!(Cli::try_parse_from(["kubeconfig-guard", "--kubeconfig", "k"]).is_err());
        assert!(
            Cli::try_parse_from(["kubeconfig-guard", "--kubeconfig", "k", "--endpoint", "x"])
                .is_err()
        );
        assert!(
            Cli::try_parse_from([
                "kubeconfig-guard",
                "--kubeconfig",
                "k",
                "--inputs",
                "i",
                "--endpoint",
                "x",
                "--cluster-name",
                "n",
            ])
            .is_err()
        );
    }

    #[test]
    fn a_kubeconfig_without_a_usable_current_context_is_refused() {
        for (kubeconfig, needle) in [
            (
                TALOS.replace("current-context: admin@edge-par", ""),
                "no current-context",
            ),
            (
                TALOS.replace("current-context: admin@edge-par", "current-context: gone"),
                "`gone` is not among its contexts",
            ),
            (
                TALOS
                    .replace("cluster: prod\n", "cluster: nowhere\n")
                    .replace("current-context: admin@edge-par", "current-context: prod"),
                "`nowhere`",
            ),
        ] {
            let text = check(&kubeconfig).unwrap_err().to_string();
            assert!(text.contains(needle), "{needle}: {text}");
        }
        let text = check("clusters: [\n  client-key-data: c2VjcmV0\n")
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("not a kubeconfig") && !text.contains("c2VjcmV0"),
            "{text}"
        );
    }

    #[test]
    fn urls_compare_without_case_default_port_or_trailing_slash() {
        assert_eq!(
            normalize("HTTPS://API.Example.com:443/"),
            normalize("https://api.example.com")
        );
        assert_eq!(
            normalize("https://api.example.com:6443/"),
            "https://api.example.com:6443"
        );
        assert_ne!(
            normalize("https://api.example.com:6443"),
            normalize("https://api.example.com")
        );
        assert_ne!(
            normalize("http://api.example.com:6443"),
            normalize("https://api.example.com:6443")
        );
    }
}
