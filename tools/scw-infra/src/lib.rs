//! scw-infra: layer 1's Scaleway resources, ensured, powered and destroyed through the API and
//! found again by their tags (no state file: nothing to guard, nothing to drift).
//!
//! ```text
//! scw-infra apply --config config/infra.json --talos-version v1.13.11 [--previous FILE]... > nodes.json
//! scw-infra apply --config ... --talos-version ... --dry-run      # the plan, one JSON line a step
//! scw-infra power on|off --config config/infra.json [--nodes controlplane|worker] [--dry-run]
//! scw-infra state --config config/infra.json [--nodes controlplane|worker]   # running, stopped...
//! scw-infra destroy --config config/infra.json [--yes] [--dry-run]
//! scw-infra destroy --config config/infra.json --plan-out FILE    # the plan, for a person to read
//! scw-infra destroy --config config/infra.json --plan FILE [--yes] # exactly that plan, if still true
//! scw-infra credentials                                            # which profile resolves
//! scw-infra names --config config/infra.json [--inventory FILE]   # KEY=value for infra.sh
//! scw-infra platform-inputs --config config/infra.json --inventory FILE
//! scw-infra talos-patches --config config/infra.json --out-dir talos/_out/patches
//! scw-infra talos-schematic --config config/infra.json     # the worker's Image Factory schematic
//! ```
//!
//! Each of `apply`, `power` and `destroy` first computes a plan from reads only ([`plan`]), then
//! executes exactly that plan; `--dry-run` prints it and stops. The tag scheme is documented in
//! [`tags`]. Credentials are resolved as Scaleway's own tools do (`scaleway::creds`); the secret
//! key is only ever sent as the `X-Auth-Token` header, to an https endpoint (plain http only on
//! loopback). Every list is scoped to the credentials' project and the cluster's tags. `apply`
//! prints the `NodeInventory` record (pop-common) on stdout; `destroy` prints one JSON line per
//! resource removed.

pub mod apply;
pub mod cluster;
pub mod config;
pub mod destroy;
pub mod error;
pub mod outputs;
pub mod plan;
pub mod power;
pub mod tags;
pub mod talos;
pub mod wait;

use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::InputError;
use pop_common::records::NodeInventory;
use pop_common::tool::Env;
use pop_common::wait::{Sleeper, ThreadSleeper};
use scaleway::s3::multipart::Multipart;
use scaleway::s3::{self, S3};
use scaleway::{Client, Credentials, CredentialsError, RetryPolicy, Transport, UreqTransport};

use crate::apply::ApplyInputs;
use crate::apply::image_file::TalosSource;
use crate::cluster::Cluster;
use crate::config::InfraConfig;
use crate::error::InfraError;
use crate::outputs::InventoryFile;
use crate::power::Nodes;
use crate::wait::Waits;

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
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 10,
        env = "SCW_INFRA_POLL_SECONDS"
    )]
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
        /// Print the plan (one JSON line a step) and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// The inventory of the last run, when there is one: what the node tools recorded on
        /// each server (image flashed, config applied) is carried over, by server id. Repeat it
        /// to carry over from several (an unfinished run's, then the last good one): the first
        /// file that records a step gives its value. A file that does not exist is skipped.
        #[arg(long, value_name = "FILE")]
        previous: Vec<PathBuf>,
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
        /// Parts of the image upload sent at once (1 to 32); each is held in memory meanwhile.
        #[arg(long, value_name = "N", default_value_t = Multipart::default().parallel)]
        upload_parallel: usize,
        /// The control planes' machine config (talos/_out/controlplane.yaml): each new control
        /// plane gets it as user data before its first boot, and boots configured.
        #[arg(long, value_name = "FILE")]
        control_plane_config: Option<PathBuf>,
    },
    /// Power the servers on or off (instances poweron/poweroff, Elastic Metal start/stop).
    Power {
        #[arg(value_enum)]
        state: PowerState,
        #[command(flatten)]
        common: Common,
        /// Which servers: the control planes, the worker, or all of them.
        #[arg(long, value_enum, default_value = "all")]
        nodes: Nodes,
        /// Print the plan (one JSON line a step) and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print where the servers are: running, stopped, absent or mixed (one word).
    State {
        #[command(flatten)]
        common: Common,
        /// Which servers: the control planes, the worker, or all of them.
        #[arg(long, value_enum, default_value = "all")]
        nodes: Nodes,
        /// Print instead the public IPv4 of each server that runs, one a line (none: nothing):
        /// the nodes to shut down through Talos before their power is cut.
        #[arg(long)]
        running_addresses: bool,
    },
    /// Delete every resource of this cluster, in dependency order, after showing the list.
    Destroy {
        #[command(flatten)]
        common: Common,
        /// Do not ask (required when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
        /// Print what would be removed (one JSON line each, as the run prints them) and change
        /// nothing.
        #[arg(long, conflicts_with_all = ["plan", "plan_out"])]
        dry_run: bool,
        /// Write the plan to FILE, show it on stderr, print CLUSTER, PROJECT, RESOURCES and
        /// POWER as KEY=value lines, and change nothing.
        #[arg(long, value_name = "FILE", conflicts_with = "plan")]
        plan_out: Option<PathBuf>,
        /// Remove exactly the resources of this plan (written by --plan-out), and only when it
        /// still lists what exists: a plan that no longer matches is refused.
        #[arg(long, value_name = "FILE")]
        plan: Option<PathBuf>,
    },
    /// Say which credentials resolve (access key and profile; never the secret key).
    Credentials,
    /// Print, as KEY=value lines, the values the infra pipeline needs from the config (and, with
    /// --inventory, the first control plane's address).
    Names {
        /// The infra config.
        #[arg(long, value_name = "FILE", default_value = "config/infra.json")]
        config: PathBuf,
        /// A node inventory (talos/_out/inventory.json).
        #[arg(long, value_name = "FILE")]
        inventory: Option<PathBuf>,
    },
    /// Render talos/patches/ with the config's values into a folder; print each rendered patch
    /// as `<talosctl gen config flag><TAB><path>`, in name order.
    TalosPatches {
        /// The infra config.
        #[arg(long, value_name = "FILE", default_value = "config/infra.json")]
        config: PathBuf,
        /// The patches, with their `${NAME}` placeholders.
        #[arg(long, value_name = "DIR", default_value = "talos/patches")]
        patches: PathBuf,
        /// Where the rendered patches go (a file is rewritten only when it changes).
        #[arg(long, value_name = "DIR")]
        out_dir: PathBuf,
    },
    /// Print the Image Factory schematic (YAML) of the worker's Talos image: the kernel
    /// arguments its offer needs.
    TalosSchematic {
        /// The infra config.
        #[arg(long, value_name = "FILE", default_value = "config/infra.json")]
        config: PathBuf,
    },
    /// Print the PlatformInputs record the platform and edge layers read.
    PlatformInputs {
        /// The infra config.
        #[arg(long, value_name = "FILE", default_value = "config/infra.json")]
        config: PathBuf,
        /// The node inventory (talos/_out/inventory.json).
        #[arg(long, value_name = "FILE")]
        inventory: PathBuf,
    },
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
    Names {
        config: InfraConfig,
        config_path: PathBuf,
        inventory: Option<InventoryFile>,
    },
    PlatformInputs {
        config: InfraConfig,
        inventory: InventoryFile,
    },
    TalosPatches {
        values: std::collections::BTreeMap<&'static str, String>,
        patches: PathBuf,
        out_dir: PathBuf,
    },
    TalosSchematic(talos::Schematic),
    Run(Box<RunConfig>),
}

#[derive(Debug)]
pub struct RunConfig {
    pub action: Action,
    pub infra: InfraConfig,
    pub credentials: Credentials,
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
        inputs: Box<ApplyInputs>,
        dry_run: bool,
        /// The inventories to carry steps from, in order of precedence.
        previous: Vec<InventoryFile>,
    },
    Power {
        state: PowerState,
        nodes: Nodes,
        dry_run: bool,
    },
    State {
        nodes: Nodes,
        /// The running servers' addresses rather than one word.
        running_addresses: bool,
    },
    Destroy {
        /// The key whose IAM copy is ours to delete (one line).
        ssh_public_key: String,
        yes: bool,
        how: DestroyHow,
    },
}

/// What `destroy` does with its plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestroyHow {
    /// Plans, asks (unless --yes), removes.
    Run,
    /// Prints the plan's lines.
    DryRun,
    /// Writes the plan to the file and shows it.
    PlanOut(PathBuf),
    /// Removes what the file's plan lists, if it is still what exists.
    Plan(PathBuf),
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
    #[error(transparent)]
    Patches(#[from] talos::PatchError),
    #[error(transparent)]
    Plan(#[from] destroy::PlanError),
    #[error("cannot write the output: {0}")]
    Output(#[from] OutputError),
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Input(_) | Error::Credentials(_) | Error::Usage(_) => Exit::Usage,
            Error::Infra(err) => err.exit(),
            Error::Patches(talos::PatchError::Input(_)) => Exit::Usage,
            // A --plan that cannot be read, is not a plan, or is another cluster's: bad input.
            Error::Plan(
                destroy::PlanError::Read { .. }
                | destroy::PlanError::Format { .. }
                | destroy::PlanError::NotThisCluster { .. },
            ) => Exit::Usage,
            Error::Cancelled | Error::Output(_) | Error::Patches(_) | Error::Plan(_) => {
                Exit::Failure
            }
        }
    }
}

/// Reads the config, the SSH public key, the previous inventory and the credentials (local
/// files and the environment); nothing is sent.
pub fn resolve(cli: Cli, env: &Env) -> Result<Config, Error> {
    let (common, action) = match cli.command {
        Command::Credentials => return Ok(Config::Credentials(scaleway::creds::load(env)?)),
        Command::Names { config, inventory } => {
            let infra = InfraConfig::load(&config, env.non_empty("HOME"))?;
            return Ok(Config::Names {
                inventory: inventory
                    .as_deref()
                    .map(|path| InventoryFile::read_for(path, &infra, &config))
                    .transpose()?,
                config: infra,
                config_path: config,
            });
        }
        Command::TalosPatches {
            config,
            patches,
            out_dir,
        } => {
            let infra = InfraConfig::load(&config, env.non_empty("HOME"))?;
            return Ok(Config::TalosPatches {
                values: talos::placeholders(&infra, &config, &talos::PINS)?,
                patches,
                out_dir,
            });
        }
        Command::TalosSchematic { config } => {
            let infra = InfraConfig::load(&config, env.non_empty("HOME"))?;
            return Ok(Config::TalosSchematic(talos::Schematic::for_offer(
                &infra.worker.offer,
            )));
        }
        Command::PlatformInputs { config, inventory } => {
            let infra = InfraConfig::load(&config, env.non_empty("HOME"))?;
            return Ok(Config::PlatformInputs {
                inventory: InventoryFile::read_for(&inventory, &infra, &config)?,
                config: infra,
            });
        }
        Command::Apply {
            common,
            talos_version,
            dry_run,
            previous,
            talos_image_url,
            talos_image_sha256,
            upload_part_mib,
            upload_parallel,
            control_plane_config,
        } => {
            if !talos_version.starts_with('v') || talos_version.len() < 2 {
                return Err(Error::Usage(format!(
                    "--talos-version `{talos_version}` is not a Talos version such as v1.13.11"
                )));
            }
            let talos_source = match (talos_image_url, talos_image_sha256) {
                (Some(url), Some(sha256)) => {
                    scaleway::http::check_endpoint("--talos-image-url", &url)
                        .map_err(|e| Error::Usage(e.to_string()))?;
                    if sha256.len() != 64
                        || !sha256
                            .bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                    {
                        return Err(Error::Usage(format!(
                            "--talos-image-sha256 `{sha256}` is not 64 lowercase hex digits"
                        )));
                    }
                    Some(TalosSource { url, sha256 })
                }
                _ => None,
            };
            if upload_part_mib < 5 {
                return Err(Error::Usage(format!(
                    "--upload-part-mib {upload_part_mib}: S3 parts are at least 5 MiB"
                )));
            }
            if !(1..=s3::multipart::MAX_PARALLEL).contains(&upload_parallel) {
                return Err(Error::Usage(format!(
                    "--upload-parallel {upload_parallel}: between 1 and {} parts at once",
                    s3::multipart::MAX_PARALLEL
                )));
            }
            let infra = InfraConfig::load(&common.config, env.non_empty("HOME"))?;
            // A first run has no previous inventory: a missing file is no inventory.
            let previous = previous
                .iter()
                .filter(|path| path.exists())
                .map(|path| InventoryFile::read_for(path, &infra, &common.config))
                .collect::<Result<Vec<_>, _>>()?;
            let ssh_public_key = read_public_key(&common.config, &infra)?;
            let action = Action::Apply {
                inputs: Box::new(ApplyInputs {
                    talos_version,
                    talos_source,
                    ssh_public_key,
                    upload: Multipart {
                        part_size: upload_part_mib * 1024 * 1024,
                        parallel: upload_parallel,
                    },
                    control_plane_config: control_plane_config
                        .map(|path| {
                            std::fs::read(&path)
                                .map(apply::UserData::new)
                                .map_err(|source| InputError::Read { path, source })
                        })
                        .transpose()?,
                }),
                dry_run,
                previous,
            };
            (common, (infra, action))
        }
        Command::Power {
            state,
            common,
            nodes,
            dry_run,
        } => {
            let infra = InfraConfig::load(&common.config, env.non_empty("HOME"))?;
            let action = Action::Power {
                state,
                nodes,
                dry_run,
            };
            (common, (infra, action))
        }
        Command::State {
            common,
            nodes,
            running_addresses,
        } => {
            let infra = InfraConfig::load(&common.config, env.non_empty("HOME"))?;
            let action = Action::State {
                nodes,
                running_addresses,
            };
            (common, (infra, action))
        }
        Command::Destroy {
            common,
            yes,
            dry_run,
            plan_out,
            plan,
        } => {
            let infra = InfraConfig::load(&common.config, env.non_empty("HOME"))?;
            let ssh_public_key = read_public_key(&common.config, &infra)?;
            let how = match (dry_run, plan_out, plan) {
                (true, _, _) => DestroyHow::DryRun,
                (_, Some(file), _) => DestroyHow::PlanOut(file),
                (_, _, Some(file)) => DestroyHow::Plan(file),
                _ => DestroyHow::Run,
            };
            let action = Action::Destroy {
                ssh_public_key,
                yes,
                how,
            };
            (common, (infra, action))
        }
    };
    let (infra, action) = action;
    let credentials = scaleway::creds::load(env)?;
    let s3_endpoint = env.non_empty("SCW_S3_ENDPOINT").map_or_else(
        || format!("https://s3.{}.scw.cloud", infra.region()),
        str::to_owned,
    );
    // Every S3 request is signed with the secret key.
    scaleway::http::check_endpoint("SCW_S3_ENDPOINT", &s3_endpoint)
        .map_err(|e| Error::Usage(e.to_string()))?;
    Ok(Config::Run(Box::new(RunConfig {
        action,
        infra,
        credentials,
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

/// The first line of the file `ssh_public_key_path` names, which must be an OpenSSH public key.
fn read_public_key(config_path: &std::path::Path, infra: &InfraConfig) -> Result<String, Error> {
    let path = PathBuf::from(&infra.ssh_public_key_path);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        InputError::field(
            config_path,
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
            config_path,
            "ssh_public_key_path",
            format!("{} is not an OpenSSH public key", path.display()),
        )
        .into());
    }
    Ok(line.to_owned())
}

/// Runs against the real API (or `SCW_API_URL`).
pub fn run(config: &Config, input: impl Read, output: impl Write) -> Result<(), Error> {
    // An image part's time depends on the link and on the parts sent at once: Object Storage's
    // requests are bounded by the time nothing moves, not by their total.
    let stall = Duration::from_secs(120);
    run_with(
        config,
        &UreqTransport::new(stall),
        &UreqTransport::for_uploads(stall, s3::multipart::MAX_PARALLEL),
        &ThreadSleeper,
        input,
        output,
    )
}

/// [`run`] over any transports (the API's, Object Storage's) and clock.
pub fn run_with(
    config: &Config,
    transport: &dyn Transport,
    object_storage: &(dyn Transport + Sync),
    sleeper: &(dyn Sleeper + Sync),
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
        Config::Names {
            config,
            config_path,
            inventory,
        } => {
            for (key, value) in outputs::names(config, config_path, inventory.as_ref())? {
                writeln!(output, "{key}={value}").output()?;
            }
            return Ok(output.flush().output()?);
        }
        Config::TalosPatches {
            values,
            patches,
            out_dir,
        } => {
            for rendered in talos::render_patches(values, patches, out_dir)? {
                writeln!(
                    output,
                    "{}\t{}",
                    rendered.scope.flag(),
                    rendered.path.display()
                )
                .output()?;
            }
            return Ok(output.flush().output()?);
        }
        Config::TalosSchematic(schematic) => {
            return Ok(output.write_all(schematic.yaml().as_bytes()).output()?);
        }
        Config::PlatformInputs { config, inventory } => {
            let record = outputs::platform_inputs(config, inventory)?;
            serde_json::to_writer_pretty(&mut output, &record)
                .map_err(io::Error::from)
                .output()?;
            return Ok(writeln!(output).output()?);
        }
        Config::Run(run) => run,
    };
    let client =
        Client::for_credentials(transport, sleeper, &run.credentials).with_policy(run.retry);
    let s3 = S3::new(
        object_storage,
        sleeper,
        &run.s3_endpoint,
        run.infra.region(),
        &run.credentials.access_key,
        run.credentials.secret_key.clone(),
        run.retry,
    );
    let cluster = Cluster {
        api: &client,
        s3: &s3,
        sleeper,
        config: &run.infra,
        project: &run.credentials.project_id,
        waits: run.waits,
    };
    let result = act(run, &cluster, input, &mut output);
    let counts = client.counts();
    pop_common::info!(
        "API calls: {} reads, {} mutations ({} retries)",
        counts.reads,
        counts.mutations,
        counts.retries
    );
    result
}

fn act(
    run: &RunConfig,
    cluster: &Cluster<'_>,
    input: impl Read,
    output: &mut impl Write,
) -> Result<(), Error> {
    match &run.action {
        Action::Apply {
            inputs,
            dry_run,
            previous,
        } => {
            let plan = apply::plan(cluster, inputs)?;
            pop_common::info!("apply: {} steps planned", plan.steps.len());
            if *dry_run {
                return Ok(plan.steps.write_json_lines(output).output()?);
            }
            let mut inventory = apply::execute(cluster, inputs, plan)?;
            let previous: Vec<&NodeInventory> = previous.iter().map(|f| &f.inventory).collect();
            inventory.carry_steps_from(&previous);
            Ok(inventory.write_to(output).output()?)
        }
        Action::Power {
            state,
            nodes,
            dry_run,
        } => {
            let steps = power::plan(cluster, *state == PowerState::On, *nodes)?;
            if *dry_run {
                return Ok(steps.write_json_lines(output).output()?);
            }
            Ok(power::execute(cluster, &steps)?)
        }
        Action::State {
            nodes,
            running_addresses: false,
        } => {
            let power = power::state(cluster, *nodes)?;
            Ok(writeln!(output, "{}", power.as_str()).output()?)
        }
        Action::State {
            nodes,
            running_addresses: true,
        } => {
            let text: String = power::running_addresses(cluster, *nodes)?
                .iter()
                .map(|address| format!("{address}\n"))
                .collect();
            Ok(output.write_all(text.as_bytes()).output()?)
        }
        Action::Destroy {
            ssh_public_key,
            yes,
            how,
        } => destroy(run, cluster, ssh_public_key, *yes, how, input, output),
    }
}

fn destroy(
    run: &RunConfig,
    cluster: &Cluster<'_>,
    ssh_public_key: &str,
    yes: bool,
    how: &DestroyHow,
    input: impl Read,
    output: &mut impl Write,
) -> Result<(), Error> {
    let asks = !yes && matches!(how, DestroyHow::Run | DestroyHow::Plan(_));
    if asks && !run.interactive {
        return Err(Error::Usage(
            "destroy asks for confirmation and stdin is not a terminal: pass --yes".into(),
        ));
    }
    let whose = destroy::Whose::new(
        &run.infra.cluster_name,
        &run.credentials.project_id,
        &run.infra.zone,
    );
    let plan = match how {
        DestroyHow::Plan(file) => {
            let planned = destroy::DestroyPlan::read_file(file, &whose)?;
            let now = destroy::plan(cluster, ssh_public_key)?;
            planned.still_matches(&now, file)?;
            planned
        }
        _ => destroy::plan(cluster, ssh_public_key)?,
    };
    match how {
        DestroyHow::DryRun => return Ok(plan.write_json_lines(output).output()?),
        DestroyHow::PlanOut(file) => {
            plan.write_file(file, &whose)?;
            let power = power::state(cluster, Nodes::All)?;
            let mut shown = io::stderr().lock();
            for removal in &plan.removals {
                let _ = writeln!(shown, "  {removal}");
            }
            pop_common::info!(
                "{} resources of cluster {} in project {} ({}); the plan is in {}",
                plan.removals.len(),
                whose.cluster,
                whose.project,
                whose.zone,
                file.display()
            );
            for (key, value) in [
                ("CLUSTER", whose.cluster.clone()),
                ("PROJECT", whose.project.clone()),
                ("RESOURCES", plan.removals.len().to_string()),
                ("POWER", power.as_str().to_owned()),
            ] {
                writeln!(output, "{key}={value}").output()?;
            }
            return Ok(output.flush().output()?);
        }
        DestroyHow::Run | DestroyHow::Plan(_) => {}
    }
    if plan.removals.is_empty() {
        pop_common::info!(
            "nothing of {} in project {} to remove",
            whose.cluster,
            whose.project
        );
        return Ok(());
    }
    if asks && !confirm(&plan, &whose, input)? {
        return Err(Error::Cancelled);
    }
    destroy::execute(cluster, &plan, |removal| {
        removal.write_line(&mut *output).output()?;
        Ok::<(), Error>(())
    })?;
    if let DestroyHow::Plan(file) = how {
        // Carried out: a second run with it would only be refused as stale.
        let _ = std::fs::remove_file(file);
    }
    Ok(())
}

/// Shows the plan on the terminal (stderr) and asks for the cluster's name.
fn confirm(
    plan: &destroy::DestroyPlan,
    whose: &destroy::Whose,
    input: impl Read,
) -> Result<bool, Error> {
    let mut err = io::stderr().lock();
    let mut question = String::new();
    for removal in &plan.removals {
        question.push_str(&format!("  {removal}\n"));
    }
    question.push_str(&format!(
        "Delete these {} resources of cluster {} in project {}? Type the cluster name: ",
        plan.removals.len(),
        whose.cluster,
        whose.project
    ));
    // The terminal is stderr: a write that fails there leaves nobody to answer.
    err.write_all(question.as_bytes())
        .and_then(|()| err.flush())
        .map_err(|e| Error::Usage(format!("cannot ask on stderr: {e}")))?;
    let mut answer = String::new();
    BufReader::new(input)
        .read_line(&mut answer)
        .map_err(|e| Error::Usage(format!("cannot read the answer: {e}")))?;
    Ok(answer.trim() == whose.cluster)
}

// `s3::MIN_PART` is the floor of --upload-part-mib.
const _: () = assert!(s3::MIN_PART == 5 * 1024 * 1024);

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(extra: &[&str]) -> Result<Config, Error> {
        let mut args = vec!["scw-infra", "apply", "--config", "/nonexistent/infra.json"];
        args.extend(["--talos-version", "v1.14.0"]);
        args.extend(extra);
        resolve(
            Cli::try_parse_from(args).unwrap(),
            &Env::from_pairs([("HOME", "/nonexistent")]),
        )
    }

    #[test]
    fn the_parts_sent_at_once_are_between_1_and_the_bound() {
        for bad in ["0", "33"] {
            let err = apply(&["--upload-parallel", bad]).unwrap_err().to_string();
            assert!(
                err.contains(&format!("--upload-parallel {bad}: between 1 and 32")),
                "{err}"
            );
        }
        // In bounds, the resolution goes on and stops at the missing config, not at the flag.
        for good in ["1", "32"] {
            let err = apply(&["--upload-parallel", good]).unwrap_err().to_string();
            assert!(err.contains("/nonexistent/infra.json"), "{err}");
        }
    }
}
