//! The command line, and what it asks for.

use std::path::PathBuf;

use clap::Parser;
use pop_common::tool::Env;

use crate::{Error, Profile};

#[derive(Debug, Parser)]
#[command(name = "render-platform", version, about)]
pub struct Cli {
    /// The cluster profile.
    #[arg(long, value_enum, default_value_t = Profile::Edge)]
    pub profile: Profile,
    /// The profile's config (edge: config/platform.json; onprem: config/onprem.json; examples
    /// beside them, *.example.json).
    #[arg(long, required_unless_present_any = ["secrets", "stale_rules", "environment_secret"])]
    pub config: Option<PathBuf>,
    /// The component whose rendered layer to print.
    pub component: Option<String>,
    /// Write every component's rendered layer into DIR/<component>.json, then DIR/components.tsv.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// The infra layer's output (talos/_out/platform-inputs.json): the addresses the edge's host
    /// firewall is rendered from. Needed with --out-dir for the edge profile.
    #[arg(long, value_name = "FILE")]
    pub inputs: Option<PathBuf>,
    /// The PublishedImages record (`make publish-images`): the etcd backup's image, pinned by
    /// digest. Needed with --out-dir when the edge config sets `etcd_backup`.
    #[arg(long, value_name = "FILE")]
    pub published_images: Option<PathBuf>,
    /// Apply time: read the decrypted SOPS document (JSON) on stdin and print the Secrets of this
    /// template (DIR/<component>.json of a `secrets` component).
    #[arg(long, value_name = "TEMPLATE", conflicts_with_all = ["config", "component", "out_dir", "inputs", "published_images", "print_names"])]
    pub secrets: Option<PathBuf>,
    /// Apply time: read the worker's active machine config on stdin, as `talosctl get
    /// machineconfig v1alpha1 -o json` prints it, and print the documents that delete the host
    /// firewall rules it holds that this rendered patch (DIR/talos-firewall.worker.yaml) no
    /// longer has: the render's own rules only, nothing when there are none.
    #[arg(long, value_name = "PATCH", conflicts_with_all = ["config", "component", "out_dir", "inputs", "print_names", "secrets", "cluster"])]
    pub stale_rules: Option<PathBuf>,
    /// Apply time: print the Secret NAMESPACE/NAME that a component's plan line lists, made from
    /// the operator's environment (the etcd backup's Object Storage key:
    /// EDGEPOP_BACKUP_ACCESS_KEY, EDGEPOP_BACKUP_SECRET_KEY, EDGEPOP_BACKUP_PROJECT_ID); nothing
    /// when none of its variables is set.
    #[arg(long, value_name = "NAMESPACE/NAME", conflicts_with_all = ["config", "component", "out_dir", "inputs", "print_names", "secrets", "stale_rules", "cluster"])]
    pub environment_secret: Option<String>,
    /// Check that every component renders, writing nothing, and print the names `make check`
    /// and `make cluster-status` share with the render (what --out-dir writes as status.env:
    /// the cluster's endpoint, its SOPS file and its recipients, ...). Not for the edge profile.
    #[arg(long, conflicts_with_all = ["component", "out_dir", "inputs"])]
    pub print_names: bool,
    /// The cluster the config must be (make CLUSTER=NAME: clusters/NAME/onprem.json, rendered
    /// into a folder of that name): a config whose cluster_name is another is refused, nothing
    /// written. Not for the edge profile.
    #[arg(long, value_name = "NAME", conflicts_with = "secrets")]
    pub cluster: Option<String>,
}

/// What to do: the files named are read by `run` (they are input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Config {
    Render {
        profile: Profile,
        config: PathBuf,
        target: Target,
        /// The platform inputs (the edge's host firewall).
        inputs: Option<PathBuf>,
        /// The PublishedImages record (the etcd backup's image).
        published: Option<PathBuf>,
        /// The cluster_name the config must have (`--cluster`).
        cluster: Option<String>,
    },
    FillSecrets {
        template: PathBuf,
    },
    StaleRules {
        patch: PathBuf,
    },
    /// The Secret made from the environment, or none when no variable of it is set.
    EnvironmentSecret(SecretObject),
}

/// A Secret's object, values included: its `Debug` says only whether there is one.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretObject(pub Option<serde_json::Value>);

impl std::fmt::Debug for SecretObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "SecretObject(<redacted>)"
        } else {
            "SecretObject(None)"
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One component's rendered layer on stdout.
    Stdout(String),
    /// Every component's rendered layer and the plan into this directory.
    Dir(PathBuf),
    /// Every component rendered, nothing written; the names of status.env on stdout.
    Names,
}

/// The arguments into what to do; the environment only fills `--environment-secret`.
pub fn resolve(cli: Cli, env: &Env) -> Result<Config, Error> {
    if let Some(reference) = cli.environment_secret {
        return crate::etcd_backup::environment_secret(&reference, env)
            .map(|secret| Config::EnvironmentSecret(SecretObject(secret)))
            .map_err(Error::EnvironmentSecret);
    }
    if let Some(template) = cli.secrets {
        return Ok(Config::FillSecrets { template });
    }
    if let Some(patch) = cli.stale_rules {
        return Ok(Config::StaleRules { patch });
    }
    let target = match (cli.component, cli.out_dir, cli.print_names) {
        (Some(component), None, false) => Target::Stdout(component),
        (None, Some(dir), false) => Target::Dir(dir),
        (None, None, true) if cli.profile == Profile::Edge => {
            return Err(Error::NoNames(cli.profile.name()));
        }
        (None, None, true) => Target::Names,
        _ => return Err(Error::Target),
    };
    if cli.profile == Profile::Edge && matches!(target, Target::Dir(_)) && cli.inputs.is_none() {
        return Err(Error::Inputs);
    }
    if cli.profile == Profile::Edge && cli.cluster.is_some() {
        return Err(Error::NoCluster);
    }
    Ok(Config::Render {
        profile: cli.profile,
        // clap requires --config without --secrets.
        config: cli.config.ok_or(Error::Target)?,
        target,
        inputs: cli.inputs,
        published: cli.published_images,
        cluster: cli.cluster,
    })
}
