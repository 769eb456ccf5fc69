//! scw-infra: layer 1's Scaleway resources, ensured, powered and destroyed through the API and
//! found again by their tags (no state file: nothing to guard, nothing to drift).
//!
//! ```text
//! scw-infra apply --config config/infra.json --talos-version v1.13.11 [--previous FILE]... > nodes.json
//! scw-infra apply --config ... --talos-version ... --dry-run      # the plan, one JSON line a step
//! scw-infra power on|off --config config/infra.json [--nodes controlplane|worker] [--dry-run]
//! scw-infra state --config config/infra.json [--nodes controlplane|worker]   # running, stopped...
//! scw-infra clear-user-data --config config/infra.json [--dry-run] < nodes.json > nodes.json.new
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
pub mod check;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod destroy;
pub mod error;
pub mod outputs;
pub mod plan;
pub mod power;
pub mod resolve;
pub mod tags;
pub mod talos;
pub mod user_data;
pub mod wait;

use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;
use std::time::Duration;

use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::InputError;
use pop_common::records::NodeInventory;
use pop_common::wait::{Sleeper, ThreadSleeper};
use scaleway::s3::{self, S3};
use scaleway::{Client, CredentialsError, Transport, UreqTransport};

pub use crate::cli::{Cli, PowerState};
pub use crate::resolve::{Action, Config, DestroyHow, DestroyNode, Local, RunConfig, resolve};

use crate::cluster::Cluster;
use crate::error::InfraError;
use crate::power::Nodes;

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
        Config::Local(local) => return write_local(local, output),
        Config::Run(run) => run,
    };
    for cidr in run.infra.documentation_admin_cidrs() {
        pop_common::warn!(
            "admin_cidrs: {cidr} is a documentation range (RFC 5737, RFC 3849): no address on \
             the internet is in it, so the security group opens the Talos (50000) and Kubernetes \
             (6443) APIs to nobody; list the addresses you administer from"
        );
    }
    let client =
        Client::for_credentials(transport, sleeper, &run.credentials).with_policy(run.retry);
    let s3 = S3::new(
        object_storage,
        sleeper,
        &run.s3_endpoint,
        run.infra.region(),
        &run.credentials.object_storage_access_key(),
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
    let (api, object_storage) = (client.counts(), s3.counts());
    pop_common::info!(
        "API calls: {} reads, {} mutations ({} retries); Object Storage: {} reads, {} writes ({} retries)",
        api.reads,
        api.mutations,
        api.retries,
        object_storage.reads,
        object_storage.mutations,
        object_storage.retries
    );
    result
}

/// The answer of a command that reads local files only.
fn write_local(local: &Local, mut output: impl Write) -> Result<(), Error> {
    match local {
        Local::ConfigChecked(None) => Ok(output.flush().output()?),
        Local::ConfigChecked(Some(record)) => {
            serde_json::to_writer_pretty(&mut output, record)
                .map_err(io::Error::from)
                .output()?;
            Ok(writeln!(output).output()?)
        }
        Local::Credentials(c) => {
            let line = serde_json::json!({
                "access_key": c.access_key,
                "project_id": c.project_id,
                "api_url": c.api_url,
                "source": c.source,
            });
            Ok(writeln!(output, "{line}").output()?)
        }
        Local::Names {
            config,
            config_path,
            inventory,
        } => {
            for (key, value) in outputs::names(config, config_path, inventory.as_ref())? {
                writeln!(output, "{key}={value}").output()?;
            }
            Ok(output.flush().output()?)
        }
        Local::TalosPatches {
            values,
            patches,
            out_dir,
        } => {
            for rendered in talos::render_patches(values, patches, out_dir)? {
                let (label, path) = (rendered.label(), rendered.path.display());
                writeln!(output, "{label}\t{path}").output()?;
            }
            Ok(output.flush().output()?)
        }
        Local::TalosSchematic(schematic) => {
            Ok(output.write_all(schematic.yaml().as_bytes()).output()?)
        }
        Local::PlatformInputs { config, inventory } => {
            let record = outputs::platform_inputs(config, inventory)?;
            serde_json::to_writer_pretty(&mut output, &record)
                .map_err(io::Error::from)
                .output()?;
            Ok(writeln!(output).output()?)
        }
    }
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
        Action::ClearUserData { dry_run } => {
            let inventory: NodeInventory =
                pop_common::input::read_json_from(Path::new("<stdin>"), input)?;
            // Handed on whatever happens, as the node tools do: the pipe keeps what they did.
            let cleared = user_data::clear(cluster, &inventory, *dry_run);
            inventory.write_to(output).output()?;
            Ok(cleared?)
        }
        Action::Destroy {
            ssh_public_key,
            yes,
            how,
            node,
        } => {
            let scope = match node {
                Some(DestroyNode::ControlPlane(node)) => destroy::Scope::ControlPlane(node),
                Some(DestroyNode::FormerWorker(node)) => destroy::Scope::FormerWorker(node),
                None => destroy::Scope::Cluster(ssh_public_key),
            };
            destroy(run, cluster, scope, *yes, how, input, output)
        }
    }
}

fn destroy(
    run: &RunConfig,
    cluster: &Cluster<'_>,
    scope: destroy::Scope<'_>,
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
            let now = destroy::plan(cluster, scope)?;
            planned.still_matches(&now, file)?;
            planned
        }
        _ => destroy::plan(cluster, scope)?,
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
