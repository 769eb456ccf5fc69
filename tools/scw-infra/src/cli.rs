//! The command line of `scw-infra`: its subcommands and flags, as clap parses them.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use scaleway::s3::multipart::Multipart;

use crate::power::Nodes;

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
    #[command(flatten)]
    Cloud(CloudCommand),
    #[command(flatten)]
    Local(LocalCommand),
}

/// The commands that talk to Scaleway.
#[derive(Debug, Subcommand)]
pub enum CloudCommand {
    /// Ensure every resource of the cluster (idempotent) and print the node inventory.
    Apply(ApplyArgs),
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
    /// Read the node inventory on stdin; delete the machine config kept as user data of each
    /// control plane it records as proved ours (Talos reads the config on its disk first, so
    /// the copy, every cluster CA key, has no use left); print the inventory.
    ClearUserData {
        #[command(flatten)]
        common: Common,
        /// Say which control planes' user data would go, and change nothing.
        #[arg(long)]
        dry_run: bool,
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
        /// Only this node. A control plane (`<cluster>-cp-N`): its Instance and the root volume it
        /// leaves behind; its flexible IP, the DNS records and everything else stay, so that
        /// `apply` makes it again under the same name and address (replacing a control plane).
        /// A worker the config no longer lists: its Elastic Metal server, and any DNS record of
        /// ours that still points at it (removing a worker).
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
    },
}

/// The commands that read local files only: nothing is sent.
#[derive(Debug, Subcommand)]
pub enum LocalCommand {
    /// Say which credentials resolve (access key and profile; never the secret key).
    Credentials,
    /// Check the config as apply reads it (every field, the SSH public key it names, the
    /// worker's Image Factory schematic); print nothing, exit 2 naming the field of a refusal.
    CheckConfig {
        /// The infra config.
        #[arg(long, value_name = "FILE", default_value = "config/infra.json")]
        config: PathBuf,
        /// Print the PlatformInputs record this config would give once its servers exist,
        /// documentation addresses standing for theirs (what make check renders the edge
        /// config against before the first apply).
        #[arg(long)]
        platform_inputs: bool,
    },
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
    /// as `<talosctl gen config flag><TAB><path>`, in name order, then each worker's own
    /// (`*.each-worker.yaml`, rendered into DIR/workers/<name>/) as
    /// `--each-worker=<name><TAB><path>`, worker by worker.
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

/// `apply`: what it is given.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub common: Common,
    /// The Talos version whose Instance image (tagged edgepop-talos=<version>) boots the
    /// control planes (k8s/versions.env: TALOS_VERSION).
    #[arg(long, value_name = "VERSION")]
    pub talos_version: String,
    /// Print the plan (one JSON line a step) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The inventory of the last run, when there is one: what the node tools recorded on
    /// each server (image flashed, config applied) is carried over, by server id. Repeat it
    /// to carry over from several (an unfinished run's, then the last good one): the first
    /// file that records a step gives its value. A file that does not exist is skipped.
    #[arg(long, value_name = "FILE")]
    pub previous: Vec<PathBuf>,
    /// The Image Factory's scaleway-amd64.raw.zst to import when no Instance image of this
    /// version and digest exists (with --talos-image-sha256).
    #[arg(long, value_name = "URL", requires = "talos_image_sha256")]
    pub talos_image_url: Option<String>,
    /// The pinned sha256 of that file (64 hex digits); a download that differs is refused.
    #[arg(long, value_name = "HEX", requires = "talos_image_url")]
    pub talos_image_sha256: Option<String>,
    /// That file, already downloaded (make talos-image-digests keeps it): imported from here
    /// when it holds the pinned sha256, else downloaded again. A missing file is downloaded.
    #[arg(long, value_name = "FILE", requires = "talos_image_url")]
    pub talos_image_file: Option<PathBuf>,
    /// The part size of the image upload, in MiB (at least 5).
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub upload_part_mib: usize,
    /// Parts of the image upload sent at once (1 to 32); each is held in memory meanwhile.
    #[arg(long, value_name = "N", default_value_t = Multipart::default().parallel)]
    pub upload_parallel: usize,
    /// The control planes' machine config (talos/_out/controlplane.yaml): each new control
    /// plane gets it as user data before its first boot, and boots configured.
    #[arg(long, value_name = "FILE")]
    pub control_plane_config: Option<PathBuf>,
}
