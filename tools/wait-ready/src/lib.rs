//! `wait-ready`: hands control back only when the cluster `make up` powered on can take work:
//! every node Ready, the nodes it is told to uncordon uncordoned, then every pod Running and
//! Ready (a container in CrashLoopBackOff keeps its pod Running but not Ready), except what is
//! done with: pods of a finished Job, Succeeded pods, pods the kubelet evicted or stopped for a
//! node shutdown, and Failed pods whose owner serves again through a replacement.
//!
//! Watch-based: one list then one watch per resource, resumed from the last resourceVersion; no
//! polling loop. While the API server refuses connections (a waking node), it retries with a
//! bounded exponential backoff until its deadline. Says on stderr what it waits for; prints a JSON
//! summary on stdout; on timeout exits 1 naming every stuck node and pod and why (conditions,
//! reasons, the pod's last event).

mod duration;
mod state;
mod watch;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::tool::Env;

pub use duration::parse_duration;
pub use state::{
    NodeView, PodView, Selection, Summary, blocking, node_view, pod_view, to_uncordon,
};

#[derive(Debug, Parser)]
#[command(name = "wait-ready", version, about)]
pub struct Cli {
    /// The kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// How long to wait in all, e.g. 900s, 15m, 1h.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// A node to uncordon once every node is Ready (repeat for several).
    #[arg(
        long = "uncordon",
        value_name = "NODE",
        conflicts_with = "uncordon_all"
    )]
    pub uncordon: Vec<String>,
    /// Uncordon every cordoned node once every node is Ready.
    #[arg(long)]
    pub uncordon_all: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub kubeconfig: PathBuf,
    pub timeout: Duration,
    pub uncordon: Selection,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no kubeconfig: pass --kubeconfig, or set KUBECONFIG or HOME")]
    NoKubeconfig,
    #[error("{}: {message}", path.display())]
    Kubeconfig { path: PathBuf, message: String },
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("the API server refused the request: {0}")]
    Api(String),
    #[error("asked to uncordon {0}, which is not a node of this cluster")]
    UnknownNode(String),
    #[error("timed out after {}: {stuck}", duration::human(*waited))]
    Timeout { waited: Duration, stuck: String },
    #[error("writing the summary: {0}")]
    Write(#[from] OutputError),
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::NoKubeconfig | Error::Kubeconfig { .. } | Error::UnknownNode(_) => Exit::Usage,
            _ => Exit::Failure,
        }
    }
}

pub fn resolve(cli: Cli, env: &Env) -> Result<Config, Error> {
    let kubeconfig = match &cli.kubeconfig {
        Some(path) => path.clone(),
        None => match (env.non_empty("KUBECONFIG"), env.non_empty("HOME")) {
            // kubectl's KUBECONFIG may be a list: the first file is the one that is read here.
            (Some(list), _) => PathBuf::from(list.split(':').next().unwrap_or(list)),
            (None, Some(home)) => PathBuf::from(home).join(".kube/config"),
            (None, None) => return Err(Error::NoKubeconfig),
        },
    };
    let uncordon = if cli.uncordon_all {
        Selection::All
    } else {
        Selection::Named(cli.uncordon.iter().cloned().collect::<BTreeSet<_>>())
    };
    Ok(Config {
        kubeconfig,
        timeout: cli.timeout,
        uncordon,
    })
}

pub fn run(config: &Config, _input: impl Read, mut output: impl Write) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let summary = runtime.block_on(watch::wait(config))?;
    let mut text = serde_json::to_string(&summary)
        .map_err(|e| Error::Write(std::io::Error::other(e).into()))?;
    text.push('\n');
    output.write_all(text.as_bytes()).output()?;
    Ok(output.flush().output()?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("wait-ready").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn the_kubeconfig_comes_from_the_flag_then_kubeconfig_then_home() {
        let env = Env::from_pairs([("KUBECONFIG", "/a/one:/a/two"), ("HOME", "/home/x")]);
        let flag = resolve(cli(&["--kubeconfig", "/k"]), &env).unwrap();
        assert_eq!(flag.kubeconfig, PathBuf::from("/k"));
        assert_eq!(
            resolve(cli(&[]), &env).unwrap().kubeconfig,
            PathBuf::from("/a/one")
        );
        let home = Env::from_pairs([("HOME", "/home/x")]);
        assert_eq!(
            resolve(cli(&[]), &home).unwrap().kubeconfig,
            PathBuf::from("/home/x/.kube/config")
        );
        assert!(matches!(
            resolve(cli(&[]), &Env::default()),
            Err(Error::NoKubeconfig)
        ));
    }

    #[test]
    fn uncordon_is_a_list_or_all_never_both() {
        let env = Env::from_pairs([("HOME", "/h")]);
        let named = resolve(cli(&["--uncordon", "a", "--uncordon", "b"]), &env).unwrap();
        assert_eq!(
            named.uncordon,
            Selection::Named(["a".to_owned(), "b".to_owned()].into())
        );
        let all = resolve(cli(&["--uncordon-all"]), &env).unwrap();
        assert_eq!(all.uncordon, Selection::All);
        assert!(Cli::try_parse_from(["wait-ready", "--uncordon", "a", "--uncordon-all"]).is_err());
        assert_eq!(
            resolve(cli(&["--timeout", "90s"]), &env).unwrap().timeout,
            Duration::from_secs(90)
        );
        assert!(Cli::try_parse_from(["wait-ready", "--timeout", "soon"]).is_err());
    }
}
