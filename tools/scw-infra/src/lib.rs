//! scw-infra: layer 1's Scaleway resources, ensured, powered and destroyed through the API and
//! found again by their tags (no state file: nothing to guard, nothing to drift).
//!
//! ```text
//! scw-infra apply --config config/infra.json --talos-version v1.13.11 > nodes.json
//! scw-infra apply --config ... --talos-version ... --dry-run      # planned calls, JSON lines
//! scw-infra power on|off --config config/infra.json
//! scw-infra destroy --config config/infra.json [--yes] [--dry-run]
//! scw-infra credentials                                            # which profile resolves
//! ```
//!
//! The tag scheme is documented in [`infra`]. Credentials are resolved as Scaleway's own tools
//! do ([`api::creds`]); the secret key is only ever sent as the `X-Auth-Token` header.
//! `apply` prints the `NodeInventory` record (pop-common) on stdout; `destroy` prints one JSON
//! line per resource removed.

pub mod api;
pub mod config;
pub mod image;
pub mod infra;
pub mod s3;

use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::InputError;
use pop_common::tool::Env;

use crate::api::client::{Client, RealSleeper, RetryPolicy, Sleeper};
use crate::api::creds::{Credentials, CredentialsError};
use crate::api::endpoints::Scaleway;
use crate::api::http::{Transport, UreqTransport};
use crate::config::InfraConfig;
use crate::image::TalosSource;
use crate::infra::{Infra, InfraError, Waits};
use crate::s3::S3;

/// The cluster's Scaleway resources, through the API.
#[derive(Debug, Parser)]
#[command(name = "scw-infra", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// The infra config (see config/infra.example.json).
    #[arg(long, value_name = "FILE", default_value = "config/infra.json")]
    pub config: PathBuf,
    /// Seconds between two looks at a server that is changing state.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub poll_seconds: u64,
    /// The first wait before retrying a 429, a 5xx or a cut connection (doubled each time, with
    /// jitter, at most 6 attempts and 30 s a wait).
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub retry_base_ms: u64,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ensure every resource of the cluster (idempotent) and print the node inventory.
    Apply {
        #[command(flatten)]
        common: Common,
        /// The Talos version whose Instance image (tagged edgepop-talos=<version>) boots the
        /// control planes (k8s/versions.env: TALOS_VERSION).
        #[arg(long, value_name = "VERSION")]
        talos_version: String,
        /// Print the mutating calls it would make (JSON lines) and make none.
        #[arg(long)]
        dry_run: bool,
        /// The Image Factory's scaleway-amd64.raw.zst to import when no Instance image of this
        /// version and digest exists (with --talos-image-sha256).
        #[arg(long, value_name = "URL", requires = "talos_image_sha256")]
        talos_image_url: Option<String>,
        /// The pinned sha256 of that file (64 hex digits); a download that differs is refused.
        #[arg(long, value_name = "HEX", requires = "talos_image_url")]
        talos_image_sha256: Option<String>,
        /// The part size of the image upload, in MiB (at least 5).
        #[arg(long, value_name = "MIB", default_value_t = 64)]
        upload_part_mib: usize,
    },
    /// Power the servers on or off (instances poweron/poweroff, Elastic Metal start/stop).
    Power {
        #[arg(value_enum)]
        state: PowerState,
        #[command(flatten)]
        common: Common,
    },
    /// Delete every resource tagged for this cluster, in dependency order.
    Destroy {
        #[command(flatten)]
        common: Common,
        /// Do not ask (required when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
        /// Print the deleting calls it would make (JSON lines) and make none.
        #[arg(long)]
        dry_run: bool,
    },
    /// Say which credentials resolve (access key and profile; never the secret key).
    Credentials,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PowerState {
    On,
    Off,
}

/// What to do, resolved.
#[derive(Debug)]
pub enum Config {
    Credentials(Credentials),
    Run(Box<RunConfig>),
}

#[derive(Debug)]
pub struct RunConfig {
    pub action: Action,
    pub infra: InfraConfig,
    pub credentials: Credentials,
    pub ssh_public_key: String,
    pub waits: Waits,
    pub retry: RetryPolicy,
    /// Object Storage: `SCW_S3_ENDPOINT`, else `https://s3.<region>.scw.cloud` (path-style).
    pub s3_endpoint: String,
    /// Whether a person can answer the destroy question (stdin is a terminal).
    pub interactive: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Apply {
        talos_version: String,
        dry_run: bool,
        talos_source: Option<TalosSource>,
        part_size: usize,
    },
    Power(PowerState),
    Destroy {
        yes: bool,
        dry_run: bool,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    #[error(transparent)]
    Infra(#[from] InfraError),
    #[error("{0}")]
    Usage(String),
    #[error("destroy cancelled: nothing was deleted")]
    Cancelled,
    #[error("cannot write the output: {0}")]
    Output(#[from] OutputError),
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Input(_) | Error::Credentials(_) | Error::Usage(_) => Exit::Usage,
            Error::Infra(_) | Error::Cancelled | Error::Output(_) => Exit::Failure,
        }
    }
}

/// Reads the config, the SSH public key and the credentials; nothing is sent.
pub fn resolve(cli: Cli, env: &Env) -> Result<Config, Error> {
    let (common, action) = match &cli.command {
        Command::Credentials => return Ok(Config::Credentials(api::creds::load(env)?)),
        Command::Apply {
            common,
            talos_version,
            dry_run,
            talos_image_url,
            talos_image_sha256,
            upload_part_mib,
        } => {
            if !talos_version.starts_with('v') || talos_version.len() < 2 {
                return Err(Error::Usage(format!(
                    "--talos-version `{talos_version}` is not a Talos version such as v1.13.11"
                )));
            }
            let talos_source = match (talos_image_url, talos_image_sha256) {
                (Some(url), Some(sha256)) => {
                    if sha256.len() != 64
                        || !sha256
                            .bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                    {
                        return Err(Error::Usage(format!(
                            "--talos-image-sha256 `{sha256}` is not 64 lowercase hex digits"
                        )));
                    }
                    Some(TalosSource {
                        url: url.clone(),
                        sha256: sha256.clone(),
                    })
                }
                _ => None,
            };
            if *upload_part_mib < 5 {
                return Err(Error::Usage(format!(
                    "--upload-part-mib {upload_part_mib}: S3 parts are at least 5 MiB"
                )));
            }
            (
                common,
                Action::Apply {
                    talos_version: talos_version.clone(),
                    dry_run: *dry_run,
                    talos_source,
                    part_size: upload_part_mib * 1024 * 1024,
                },
            )
        }
        Command::Power { state, common } => (common, Action::Power(*state)),
        Command::Destroy {
            common,
            yes,
            dry_run,
        } => (
            common,
            Action::Destroy {
                yes: *yes,
                dry_run: *dry_run,
            },
        ),
    };
    let infra = InfraConfig::load(&common.config, env.non_empty("HOME"))?;
    let ssh_public_key = match action {
        Action::Power(_) => String::new(),
        _ => {
            let path = PathBuf::from(&infra.ssh_public_key_path);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                InputError::field(
                    &common.config,
                    "ssh_public_key_path",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            let line = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim();
            if !line.starts_with("ssh-") && !line.starts_with("ecdsa-") {
                return Err(InputError::field(
                    &common.config,
                    "ssh_public_key_path",
                    format!("{} is not an OpenSSH public key", path.display()),
                )
                .into());
            }
            line.to_owned()
        }
    };
    let credentials = api::creds::load(env)?;
    let s3_endpoint = env.non_empty("SCW_S3_ENDPOINT").map_or_else(
        || format!("https://s3.{}.scw.cloud", infra.region()),
        str::to_owned,
    );
    Ok(Config::Run(Box::new(RunConfig {
        action,
        infra,
        credentials,
        ssh_public_key,
        waits: Waits {
            poll: Duration::from_secs(common.poll_seconds),
            instance: Duration::from_secs(15 * 60),
            elastic_metal: Duration::from_secs(120 * 60),
        },
        retry: RetryPolicy {
            base: Duration::from_millis(common.retry_base_ms),
            ..RetryPolicy::default()
        },
        s3_endpoint,
        interactive: io::stdin().is_terminal(),
    })))
}

/// Runs against the real API (or `SCW_API_URL`).
pub fn run(config: &Config, input: impl Read, output: impl Write) -> Result<(), Error> {
    run_with(
        config,
        UreqTransport::new(Duration::from_secs(120)),
        RealSleeper,
        input,
        output,
    )
}

/// [`run`] over any transport and sleeper.
pub fn run_with<T: Transport, S: Sleeper>(
    config: &Config,
    transport: T,
    sleeper: S,
    input: impl Read,
    mut output: impl Write,
) -> Result<(), Error> {
    let run = match config {
        Config::Credentials(c) => {
            let line = serde_json::json!({
                "access_key": c.access_key,
                "project_id": c.project_id,
                "api_url": c.api_url,
                "source": c.source,
            });
            return Ok(writeln!(output, "{line}").output()?);
        }
        Config::Run(run) => run,
    };
    let dry_run = matches!(
        run.action,
        Action::Apply { dry_run: true, .. } | Action::Destroy { dry_run: true, .. }
    );
    let client = Client::new(
        &transport,
        &sleeper,
        &run.credentials.api_url,
        run.credentials.secret_key.clone(),
    )
    .with_dry_run(dry_run)
    .with_policy(run.retry);
    let s3 = S3::new(
        &transport,
        &sleeper,
        &run.s3_endpoint,
        run.infra.region(),
        &run.credentials.access_key,
        run.credentials.secret_key.clone(),
        run.retry,
    );
    let (talos_version, talos_source, part_size) = match &run.action {
        Action::Apply {
            talos_version,
            talos_source,
            part_size,
            ..
        } => (talos_version.as_str(), talos_source.clone(), *part_size),
        _ => ("", None, s3::MIN_PART),
    };
    let project_prefix: String = run.credentials.project_id.chars().take(8).collect();
    let infra = Infra {
        api: Scaleway::new(&client),
        config: &run.infra,
        project: &run.credentials.project_id,
        talos_version,
        waits: run.waits,
        ssh_public_key: &run.ssh_public_key,
        s3: Some(&s3),
        bucket: format!("edgepop-{}-{project_prefix}", run.infra.cluster_name).to_ascii_lowercase(),
        talos_source,
        part_size,
    };
    let result = act(run, &infra, input, &mut output);
    let counts = client.counts();
    pop_common::info!(
        "API calls: {} reads, {} mutations ({} retries)",
        counts.reads,
        counts.mutations,
        counts.retries
    );
    if dry_run {
        for call in client.planned() {
            let line = serde_json::to_string(&call)
                .map_err(|e| Error::Output(io::Error::from(e).into()))?;
            writeln!(output, "{line}").output()?;
        }
    }
    result
}

fn act<T: Transport, S: Sleeper>(
    run: &RunConfig,
    infra: &Infra<'_, T, S>,
    input: impl Read,
    output: &mut impl Write,
) -> Result<(), Error> {
    match &run.action {
        Action::Apply { .. } => {
            if let Some(inventory) = infra.apply()? {
                inventory.write_to(output).output()?;
            }
            Ok(())
        }
        Action::Power(state) => Ok(infra.power(*state == PowerState::On)?),
        Action::Destroy { yes, dry_run } => {
            if !yes && !dry_run {
                if !run.interactive {
                    return Err(Error::Usage(
                        "destroy asks for confirmation and stdin is not a terminal: pass --yes"
                            .into(),
                    ));
                }
                let found = infra.inventory_for_destroy()?;
                let mut err = io::stderr().lock();
                for r in &found {
                    let _ = writeln!(err, "  {} {} ({})", r.removed, r.name, r.id);
                }
                let _ = write!(
                    err,
                    "Delete these {} resources of {} (and its DNS records and SSH key)? Type the cluster name: ",
                    found.len(),
                    run.infra.cluster_name
                );
                let _ = err.flush();
                let mut answer = String::new();
                BufReader::new(input).read_line(&mut answer).output()?;
                if answer.trim() != run.infra.cluster_name {
                    return Err(Error::Cancelled);
                }
            }
            let removed = infra.destroy()?;
            if !dry_run {
                for r in removed {
                    let line = serde_json::to_string(&r)
                        .map_err(|e| Error::Output(io::Error::from(e).into()))?;
                    writeln!(output, "{line}").output()?;
                }
            }
            Ok(())
        }
    }
}
