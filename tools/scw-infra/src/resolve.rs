//! `resolve`: the command line turned into what `run` needs. It reads the config, the SSH public
//! key, the previous inventories and the credentials (local files and the environment given);
//! nothing is sent.

use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pop_common::input::InputError;
use pop_common::records::{PlatformInputs, steps};
use pop_common::tool::Env;
use scaleway::s3::{self, multipart::Multipart};
use scaleway::{Credentials, RetryPolicy};

use crate::apply::image_file::TalosSource;
use crate::apply::{self, ApplyInputs};
use crate::cli::{ApplyArgs, Cli, CloudCommand, Command, Common, LocalCommand, PowerState};
use crate::config::InfraConfig;
use crate::outputs::InventoryFile;
use crate::power::Nodes;
use crate::wait::Waits;
use crate::{Error, talos};

/// What to do, resolved.
#[derive(Debug)]
pub enum Config {
    /// A command answered from local files alone: nothing is sent.
    Local(Box<Local>),
    /// A command that talks to Scaleway.
    Run(Box<RunConfig>),
}

/// The commands that read local files only.
#[derive(Debug)]
pub enum Local {
    Credentials(Credentials),
    /// The config was read and every check passed: nothing to print, or the record it gives.
    ConfigChecked(Option<Box<PlatformInputs>>),
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
        values: talos::Values,
        patches: PathBuf,
        out_dir: PathBuf,
    },
    TalosSchematic(talos::Schematic),
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
    ClearUserData {
        dry_run: bool,
    },
    Destroy {
        /// The key whose IAM copy is ours to delete (one line).
        ssh_public_key: String,
        yes: bool,
        how: DestroyHow,
        /// One node only (`--node`), its name checked against the config's.
        node: Option<DestroyNode>,
    },
}

/// The one node `destroy --node` removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestroyNode {
    /// A control plane of the config, to be made again by `apply`.
    ControlPlane(String),
    /// A worker the config no longer lists.
    FormerWorker(String),
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

/// Reads the config, the SSH public key, the previous inventory and the credentials (local
/// files and the environment); nothing is sent.
pub fn resolve(cli: Cli, env: &Env) -> Result<Config, Error> {
    match cli.command {
        Command::Local(command) => Ok(Config::Local(Box::new(resolve_local(command, env)?))),
        Command::Cloud(command) => resolve_cloud(command, env),
    }
}

/// A command answered from local files: its config and inventory read.
fn resolve_local(command: LocalCommand, env: &Env) -> Result<Local, Error> {
    let home = env.non_empty("HOME");
    Ok(match command {
        LocalCommand::Credentials => Local::Credentials(scaleway::creds::load(env)?),
        LocalCommand::CheckConfig {
            config,
            platform_inputs,
        } => {
            let infra = InfraConfig::load(&config, home)?;
            read_public_key(&config, &infra)?;
            talos::placeholders(&infra, &config, &talos::PINS)?;
            let record = platform_inputs
                .then(|| crate::check::placeholder_platform_inputs(&infra, &config))
                .transpose()?;
            Local::ConfigChecked(record.map(Box::new))
        }
        LocalCommand::Names { config, inventory } => {
            let infra = InfraConfig::load(&config, home)?;
            let inventory = inventory
                .as_deref()
                .map(|path| InventoryFile::read_for(path, &infra, &config))
                .transpose()?;
            Local::Names {
                config: infra,
                config_path: config,
                inventory,
            }
        }
        LocalCommand::TalosPatches {
            config,
            patches,
            out_dir,
        } => {
            let infra = InfraConfig::load(&config, home)?;
            let values = talos::placeholders(&infra, &config, &talos::PINS)?;
            Local::TalosPatches {
                values,
                patches,
                out_dir,
            }
        }
        LocalCommand::TalosSchematic { config } => {
            let infra = InfraConfig::load(&config, home)?;
            // Every worker's offer needs the one pinned schematic (checked here): any one's is it.
            talos::worker_schematic(&infra, &config, &talos::PINS)?;
            let offer = infra.workers.first().map_or("", |w| w.offer.as_str());
            Local::TalosSchematic(talos::Schematic::for_offer(offer))
        }
        LocalCommand::PlatformInputs { config, inventory } => {
            let infra = InfraConfig::load(&config, home)?;
            let inventory = InventoryFile::read_for(&inventory, &infra, &config)?;
            Local::PlatformInputs {
                config: infra,
                inventory,
            }
        }
    })
}

/// A command that talks to Scaleway: its config, its action's inputs, then the credentials.
fn resolve_cloud(command: CloudCommand, env: &Env) -> Result<Config, Error> {
    let home = env.non_empty("HOME");
    let (common, infra, action) = match command {
        CloudCommand::Apply(args) => {
            let (infra, action) = resolve_apply(&args, home)?;
            (args.common, infra, action)
        }
        CloudCommand::Power {
            state,
            common,
            nodes,
            dry_run,
        } => {
            let infra = InfraConfig::load(&common.config, home)?;
            let action = Action::Power {
                state,
                nodes,
                dry_run,
            };
            (common, infra, action)
        }
        CloudCommand::State {
            common,
            nodes,
            running_addresses,
        } => {
            let infra = InfraConfig::load(&common.config, home)?;
            let action = Action::State {
                nodes,
                running_addresses,
            };
            (common, infra, action)
        }
        CloudCommand::ClearUserData { common, dry_run } => {
            let infra = InfraConfig::load(&common.config, home)?;
            (common, infra, Action::ClearUserData { dry_run })
        }
        CloudCommand::Destroy {
            common,
            yes,
            dry_run,
            plan_out,
            plan,
            node,
        } => {
            let infra = InfraConfig::load(&common.config, home)?;
            let ssh_public_key = read_public_key(&common.config, &infra)?;
            let node = node
                .map(|node| destroy_node(&infra, &common.config, node))
                .transpose()?;
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
                node,
            };
            (common, infra, action)
        }
    };
    run_config(&common, infra, action, env)
}

/// `destroy --node`: one of the config's control planes, or a worker the config no longer lists.
/// A worker the config lists is never destroyed alone: `apply` would order it again.
fn destroy_node(infra: &InfraConfig, config: &Path, node: String) -> Result<DestroyNode, Error> {
    let names = infra.control_plane_names();
    if names.contains(&node) {
        return Ok(DestroyNode::ControlPlane(node));
    }
    if infra.worker_names().any(|w| w == node) {
        return Err(Error::Usage(format!(
            "--node {node}: {} still lists it under workers, and apply would order it again: \
             take it out of the config first (make remove-worker NODE={node} then drains and \
             deletes it); REFLASH=yes make apply-infra writes a listed worker again in place",
            config.display()
        )));
    }
    let control_plane_like = node.starts_with(&format!("{}-cp-", infra.cluster_name));
    if control_plane_like || !pop_common::records::is_dns_label(&node) {
        return Err(Error::Usage(format!(
            "--node `{node}` is not a control plane of cluster {} (its control planes: {}) nor a \
             worker's name",
            infra.cluster_name,
            names.join(", ")
        )));
    }
    Ok(DestroyNode::FormerWorker(node))
}

/// `apply`'s flags checked, then its config, previous inventories, key and machine config read.
fn resolve_apply(args: &ApplyArgs, home: Option<&str>) -> Result<(InfraConfig, Action), Error> {
    let talos_version = &args.talos_version;
    if !talos_version.starts_with('v') || talos_version.len() < 2 {
        return Err(Error::Usage(format!(
            "--talos-version `{talos_version}` is not a Talos version such as v1.13.11"
        )));
    }
    let talos_source = talos_source(
        args.talos_image_url.as_deref(),
        args.talos_image_sha256.as_deref(),
    )?
    .map(|source| TalosSource {
        file: args.talos_image_file.clone(),
        ..source
    });
    let upload_part_mib = args.upload_part_mib;
    if upload_part_mib < 5 {
        return Err(Error::Usage(format!(
            "--upload-part-mib {upload_part_mib}: S3 parts are at least 5 MiB"
        )));
    }
    let upload_parallel = args.upload_parallel;
    if !(1..=s3::multipart::MAX_PARALLEL).contains(&upload_parallel) {
        return Err(Error::Usage(format!(
            "--upload-parallel {upload_parallel}: between 1 and {} parts at once",
            s3::multipart::MAX_PARALLEL
        )));
    }
    let config_path = &args.common.config;
    let infra = InfraConfig::load(config_path, home)?;
    // A first run has no previous inventory: a missing file is no inventory.
    let previous = args
        .previous
        .iter()
        .filter(|path| path.exists())
        .map(|path| InventoryFile::read_for(path, &infra, config_path))
        .collect::<Result<Vec<_>, _>>()?;
    let ssh_public_key = read_public_key(config_path, &infra)?;
    let control_plane_config = args
        .control_plane_config
        .as_ref()
        .map(|path| {
            std::fs::read(path)
                .map(apply::UserData::new)
                .map_err(|source| InputError::Read {
                    path: path.clone(),
                    source,
                })
        })
        .transpose()?;
    let action = Action::Apply {
        inputs: Box::new(ApplyInputs {
            talos_version: talos_version.clone(),
            talos_source,
            ssh_public_key,
            upload: Multipart {
                part_size: upload_part_mib * 1024 * 1024,
                parallel: upload_parallel,
            },
            control_plane_config,
            proved_ours: previous
                .iter()
                .flat_map(|file| &file.inventory.nodes)
                .filter(|node| node.step(steps::PROVED_OURS).is_some())
                .map(|node| node.id.clone())
                .collect(),
        }),
        dry_run: args.dry_run,
        previous,
    };
    Ok((infra, action))
}

/// The pinned image to import, when both `--talos-image-url` and `--talos-image-sha256` are
/// given (clap requires the one with the other).
fn talos_source(url: Option<&str>, sha256: Option<&str>) -> Result<Option<TalosSource>, Error> {
    let (Some(url), Some(sha256)) = (url, sha256) else {
        return Ok(None);
    };
    scaleway::http::check_endpoint("--talos-image-url", url)
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
    Ok(Some(TalosSource {
        url: url.to_owned(),
        sha256: sha256.to_owned(),
        file: None,
    }))
}

/// What every command that talks to Scaleway needs besides its action: the credentials, the
/// Object Storage endpoint, the waits and the retry policy.
fn run_config(
    common: &Common,
    infra: InfraConfig,
    action: Action,
    env: &Env,
) -> Result<Config, Error> {
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
fn read_public_key(config_path: &Path, infra: &InfraConfig) -> Result<String, Error> {
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

#[cfg(test)]
mod tests {
    use clap::Parser;

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

    /// `check-config` on the example config, with `home` as HOME (where `~/.ssh` is read).
    fn check_config(
        home: &Path,
        edit: impl FnOnce(&mut serde_json::Value),
    ) -> Result<Config, Error> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let example = std::fs::read_to_string(root.join("config/infra.example.json")).unwrap();
        let mut config: serde_json::Value = serde_json::from_str(&example).unwrap();
        edit(&mut config);
        let path = home.join("infra.json");
        std::fs::write(&path, config.to_string()).unwrap();
        let args = [
            "scw-infra",
            "check-config",
            "--config",
            path.to_str().unwrap(),
        ];
        resolve(
            Cli::try_parse_from(args).unwrap(),
            &Env::from_pairs([("HOME", home.to_str().unwrap())]),
        )
    }

    #[test]
    fn check_config_reads_what_apply_reads_and_names_the_field_it_refuses() {
        let home = tempfile::tempdir().unwrap();
        // The SSH public key the example names is not there yet.
        let err = check_config(home.path(), |_| {}).unwrap_err();
        assert!(matches!(err, Error::Input(_)), "{err:?}");
        assert!(
            err.to_string().contains("field `ssh_public_key_path`"),
            "{err}"
        );
        std::fs::create_dir_all(home.path().join(".ssh")).unwrap();
        std::fs::write(
            home.path().join(".ssh/id_ed25519.pub"),
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEdgepopTestKeyOnly operator\n",
        )
        .unwrap();
        assert!(matches!(
            check_config(home.path(), |_| {}).unwrap(),
            Config::Local(local) if matches!(*local, Local::ConfigChecked(None))
        ));
        let err = check_config(home.path(), |c| c["control_plane"]["count"] = 2.into())
            .unwrap_err()
            .to_string();
        assert!(err.contains("field `control_plane.count`"), "{err}");
    }
}
