//! `etcd-backup`: the scheduled etcd backup, run in the cluster by a CronJob.
//!
//! ```sh
//! etcd-backup --cluster edge-par --bucket edgepop-edge-par-0123abcd --region fr-par \
//!   --age-recipient age1... --keep 48
//! ```
//!
//! 1. `talosctl etcd snapshot` with the talosconfig Talos writes into the pod for a Talos
//!    `ServiceAccount` (`/var/run/secrets/talos.dev/config`, endpoint `talos.default`: a control
//!    plane's apid, which streams its member's snapshot; role `os:etcd:backup` is all it needs).
//!    talosctl writes the file 0600 through a `.part` file, refuses one without the sha256
//!    trailer (`size % 512 != 32`) and prints etcd's status of it (cmd/talosctl/cmd/talos/etcd.go
//!    l.334-401 at v1.13.9), which is read here.
//! 2. The trailer is checked here as well: the sha256 of the database must be its last 32
//!    bytes, the check etcdutl's restore makes unless told to skip it. A snapshot cut short or
//!    damaged on the way is refused before anything leaves the pod.
//! 3. `age --encrypt --recipient R`: the snapshot holds every Secret of the cluster, so it
//!    leaves the pod only encrypted, to a key whose private half the operator keeps elsewhere.
//! 4. The encrypted file goes to `<bucket>/<prefix>/<cluster>-<YYYYMMDDTHHMMSSZ>.snapshot.age`
//!    (one PUT, or a multipart upload when large), its status as the object's metadata.
//! 5. With `--keep N`, once the upload succeeded, the oldest backups of the prefix beyond the N
//!    newest are deleted (only objects named as this tool names them).
//!
//! One `EtcdBackup` record on stdout. Object Storage's keys come from the environment
//! (`SCW_ACCESS_KEY`, `SCW_SECRET_KEY`, `SCW_DEFAULT_PROJECT_ID`: the Secret the CronJob mounts),
//! never from the command line; `SCW_S3_ENDPOINT` replaces `https://s3.<region>.scw.cloud`.
//! The snapshot and its encrypted copy live in a private temporary folder, gone when the run ends.

mod cluster;
mod error;
mod programs;
mod prune;

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use clap::Parser;
use pop_common::records::{EtcdBackup, Kind, Version};
use pop_common::tool::Env;
use pop_common::wait::{Sleeper, ThreadSleeper};
use scaleway::s3::S3;
use scaleway::s3::multipart::Multipart;
use scaleway::{Credentials, RetryPolicy, Transport, UreqTransport};
use sha2::{Digest as _, Sha256};

pub use cluster::{ClusterApi, Nodes, TALOS_API_SLICE, talos_api_addresses};
pub use error::Error;
pub use programs::{Programs, Snapshots, parse_snapshot_info};
pub use prune::{is_backup_name, object_name, to_prune};

/// The upload's parts: 32 MiB, two at once, so the pod holds about 64 MiB of them (its limit is
/// 512 MiB); etcd's default 2 GiB quota makes 64 parts, far below Object Storage's 1,000.
const UPLOAD_PARTS: Multipart = Multipart {
    part_size: 32 * 1024 * 1024,
    parallel: 2,
};

/// Where Talos mounts a Talos ServiceAccount's talosconfig in a pod (constants.go
/// `ServiceAccountMountPath` and `TalosconfigFilename` at v1.13.9).
pub const IN_CLUSTER_TALOSCONFIG: &str = "/var/run/secrets/talos.dev/config";

#[derive(Debug, Parser)]
#[command(
    name = "etcd-backup",
    version,
    about = "Take an etcd snapshot through the Talos API, encrypt it with age, store it in Object Storage"
)]
pub struct Cli {
    /// The cluster's name: the snapshot's file name starts with it.
    #[arg(long)]
    pub cluster: String,
    /// The Object Storage bucket the backups go to.
    #[arg(long)]
    pub bucket: String,
    /// The bucket's region (`fr-par`, `nl-ams`, `pl-waw`).
    #[arg(long)]
    pub region: String,
    /// The folder of the bucket the backups go to; the cluster's name by default.
    #[arg(long)]
    pub prefix: Option<String>,
    /// The age public key (`age1...`) the snapshot is encrypted to.
    #[arg(long)]
    pub age_recipient: String,
    /// Keep the N newest backups of the prefix, delete the older ones after the upload.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// A control plane to take the snapshot from, by its address (repeat it: the first that
    /// answers gives the snapshot). Without it, the control planes are read from the
    /// EndpointSlice `default/talos-ipv4` that Talos keeps for its API.
    #[arg(long = "node", value_name = "ADDRESS")]
    pub nodes: Vec<String>,
    /// The API server URL, for the EndpointSlice (default: from KUBERNETES_SERVICE_HOST and
    /// _PORT, in-cluster).
    #[arg(long, conflicts_with = "nodes")]
    pub api_server: Option<String>,
    /// The ServiceAccount directory holding `token` and `ca.crt`.
    #[arg(long, default_value = kube_rest::SERVICEACCOUNT_DIR, conflicts_with = "nodes")]
    pub serviceaccount_dir: PathBuf,
    /// The talosconfig to reach the Talos API with.
    #[arg(long, default_value = IN_CLUSTER_TALOSCONFIG)]
    pub talosconfig: PathBuf,
    /// The talosctl and age programs to run (by default from PATH).
    #[arg(long, default_value = "talosctl")]
    pub talosctl: PathBuf,
    #[arg(long, default_value = "age")]
    pub age: PathBuf,
    /// Where the private temporary folder is made (by default TMPDIR, else /tmp).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// A resolved run.
#[derive(Debug)]
pub struct Config {
    pub cluster: String,
    pub bucket: String,
    pub region: String,
    pub prefix: String,
    pub age_recipient: String,
    pub keep: Option<usize>,
    pub nodes: Nodes,
    pub programs: Programs,
    pub work_dir: Option<PathBuf>,
    pub credentials: Credentials,
    /// `SCW_S3_ENDPOINT`, else `https://s3.<region>.scw.cloud`.
    pub s3_endpoint: String,
}

/// The arguments and the environment as a run, every field checked.
pub fn resolve(cli: Cli, env: &Env) -> Result<Config, Error> {
    let usage = |field: &str, message: String| Error::Usage(format!("--{field}: {message}"));
    pop_common::records::check_cluster_name(&cli.cluster)
        .map_err(|e| usage("cluster", e.to_string()))?;
    pop_common::backup::check_bucket_name(&cli.bucket).map_err(|m| usage("bucket", m))?;
    if !pop_common::records::is_dns_label(&cli.region) {
        return Err(usage("region", format!("{:?} is not a region", cli.region)));
    }
    let prefix = cli.prefix.unwrap_or_else(|| cli.cluster.clone());
    pop_common::backup::check_object_prefix(&prefix).map_err(|m| usage("prefix", m))?;
    pop_common::backup::check_age_recipient(&cli.age_recipient)
        .map_err(|m| usage("age-recipient", m))?;
    if cli.keep == Some(0) {
        return Err(usage(
            "keep",
            "0 would delete the backup just made: keep at least 1".into(),
        ));
    }
    let nodes = resolve_nodes(cli.nodes, cli.api_server, &cli.serviceaccount_dir, env)?;
    let credentials = scaleway::creds::load(env).map_err(Error::Credentials)?;
    let s3_endpoint = env.non_empty("SCW_S3_ENDPOINT").map_or_else(
        || format!("https://s3.{}.scw.cloud", cli.region),
        str::to_owned,
    );
    scaleway::http::check_endpoint("SCW_S3_ENDPOINT", &s3_endpoint)
        .map_err(|e| Error::Usage(e.to_string()))?;
    Ok(Config {
        cluster: cli.cluster,
        bucket: cli.bucket,
        region: cli.region,
        prefix,
        age_recipient: cli.age_recipient,
        keep: cli.keep,
        nodes,
        programs: Programs {
            talosctl: cli.talosctl,
            talosconfig: cli.talosconfig,
            age: cli.age,
        },
        work_dir: cli
            .work_dir
            .or_else(|| env.non_empty("TMPDIR").map(PathBuf::from)),
        credentials,
        s3_endpoint,
    })
}

/// The addresses given, or where to read them in the cluster.
fn resolve_nodes(
    given: Vec<String>,
    api_server: Option<String>,
    serviceaccount_dir: &Path,
    env: &Env,
) -> Result<Nodes, Error> {
    let usage = |field: &str, message: String| Error::Usage(format!("--{field}: {message}"));
    if let Some(bad) = given
        .iter()
        .find(|n| n.parse::<std::net::IpAddr>().is_err())
    {
        return Err(usage("node", format!("{bad:?} is not an IP address")));
    }
    if !given.is_empty() {
        return Ok(Nodes::Given(given));
    }
    let base = kube_rest::api_server(
        api_server,
        env.get("KUBERNETES_SERVICE_HOST")?,
        env.get("KUBERNETES_SERVICE_PORT")?,
    )
    .map_err(|error| match error {
        kube_rest::ApiServerError::NotInCluster => usage(
            "node",
            "none given, and not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset) to read the \
             control planes from: name them, or give --api-server"
                .into(),
        ),
        kube_rest::ApiServerError::NotHttp(url) => {
            usage("api-server", format!("{url:?} is not an http(s) URL"))
        }
    })?;
    Ok(Nodes::FromCluster(ClusterApi {
        base,
        ca_file: serviceaccount_dir.join("ca.crt"),
        token_file: serviceaccount_dir.join("token"),
    }))
}

/// Runs against the real Object Storage (or `SCW_S3_ENDPOINT`) with the real programs.
pub fn run(config: &Config, input: impl Read, output: impl Write) -> Result<(), Error> {
    let stall = std::time::Duration::from_secs(120);
    let transport = UreqTransport::for_uploads(stall, scaleway::s3::multipart::MAX_PARALLEL);
    run_with(
        config,
        &config.programs,
        &transport,
        &ThreadSleeper,
        input,
        output,
        pop_common::time::now_secs(),
    )
}

/// [`run`] with any snapshot source, transport and clock (`now`: seconds since the epoch).
pub fn run_with(
    config: &Config,
    snapshots: &dyn Snapshots,
    transport: &(dyn Transport + Sync),
    sleeper: &(dyn Sleeper + Sync),
    _input: impl Read,
    mut output: impl Write,
    now: u64,
) -> Result<(), Error> {
    let work = private_temp_dir(config.work_dir.as_deref())?;
    let name = object_name(&config.cluster, now);
    let plain = work.path().join(name.trim_end_matches(".age"));
    let nodes = cluster::addresses(&config.nodes)?;
    let status = first_snapshot(snapshots, &nodes, &plain)?;
    let snapshot_bytes = check_trailer(&plain)?;
    pop_common::info!(
        "snapshot: {snapshot_bytes} bytes, hash {}, revision {}, {} keys; sha256 trailer checked",
        status.hash,
        status.revision,
        status.total_keys
    );
    let sealed = work.path().join(&name);
    snapshots.encrypt(&config.age_recipient, &plain, &sealed)?;
    std::fs::remove_file(&plain).map_err(|e| Error::file(&plain, &e))?;
    let s3 = S3::new(
        transport,
        sleeper,
        &config.s3_endpoint,
        &config.region,
        &config.credentials.object_storage_access_key(),
        config.credentials.secret_key.clone(),
        RetryPolicy::default(),
    );
    let key = format!("{}/{name}", config.prefix);
    let revision = status.revision.to_string();
    let keys = status.total_keys.to_string();
    let bytes = s3
        .upload_file(
            &config.bucket,
            &key,
            &sealed,
            UPLOAD_PARTS,
            &[
                ("etcd-hash", &status.hash),
                ("etcd-revision", &revision),
                ("etcd-total-keys", &keys),
            ],
        )
        .map_err(|source| Error::Upload {
            bucket: config.bucket.clone(),
            key: key.clone(),
            source: Box::new(source),
        })?;
    pop_common::info!("uploaded {}/{key} ({bytes} bytes)", config.bucket);
    let pruned = match config.keep {
        Some(keep) => prune::prune(&s3, &config.bucket, &config.prefix, &config.cluster, keep)?,
        None => Vec::new(),
    };
    let record = EtcdBackup {
        kind: Kind::new(),
        version: Version,
        cluster_name: config.cluster.clone(),
        bucket: config.bucket.clone(),
        key,
        taken_at: pop_common::time::rfc3339(now),
        snapshot_bytes,
        bytes,
        status,
        pruned,
    };
    serde_json::to_writer(&mut output, &record).map_err(std::io::Error::from)?;
    writeln!(output)?;
    Ok(())
}

/// The snapshot of the first of `nodes` that gives one; every node's failure when none does.
fn first_snapshot(
    snapshots: &dyn Snapshots,
    nodes: &[String],
    path: &Path,
) -> Result<pop_common::records::EtcdSnapshotStatus, Error> {
    let mut failures = Vec::new();
    for node in nodes {
        pop_common::info!("talosctl --nodes {node} etcd snapshot {}", path.display());
        match snapshots.snapshot(node, path) {
            Ok(status) => return Ok(status),
            Err(error) => {
                pop_common::warn!("{node}: {error}");
                failures.push(format!("{node}: {error}"));
            }
        }
    }
    Err(Error::NoSnapshot(failures))
}

/// A temporary folder only this user can read (it holds the snapshot in clear a moment).
fn private_temp_dir(parent: Option<&Path>) -> Result<tempfile::TempDir, Error> {
    let mut builder = tempfile::Builder::new();
    builder.prefix("etcd-backup-");
    let made = match parent {
        Some(dir) => builder.tempdir_in(dir),
        None => builder.tempdir(),
    };
    // tempfile makes its folders 0700.
    made.map_err(|e| Error::file(parent.unwrap_or(Path::new("the temporary folder")), &e))
}

/// The snapshot's size, once the sha256 of its database is found to be its last 32 bytes.
pub fn check_trailer(path: &Path) -> Result<u64, Error> {
    const TRAILER: u64 = 32;
    let mut file = File::open(path).map_err(|e| Error::file(path, &e))?;
    let size = file.metadata().map_err(|e| Error::file(path, &e))?.len();
    if size < TRAILER || size % 512 != TRAILER {
        return Err(Error::Snapshot {
            path: path.to_path_buf(),
            message: format!("{size} bytes: no sha256 trailer (size % 512 is not 32)"),
        });
    }
    let mut hasher = Sha256::new();
    let mut left = size - TRAILER;
    let mut buffer = vec![0u8; 1 << 20];
    while left > 0 {
        let want = usize::try_from(left.min(buffer.len() as u64)).unwrap_or(buffer.len());
        let got = file
            .read(&mut buffer[..want])
            .map_err(|e| Error::file(path, &e))?;
        if got == 0 {
            return Err(Error::Snapshot {
                path: path.to_path_buf(),
                message: "shorter than its size while read".into(),
            });
        }
        hasher.update(&buffer[..got]);
        left -= got as u64;
    }
    let mut trailer = [0u8; 32];
    file.read_exact(&mut trailer)
        .map_err(|e| Error::file(path, &e))?;
    if hasher.finalize().as_slice() == trailer {
        Ok(size)
    } else {
        Err(Error::Snapshot {
            path: path.to_path_buf(),
            message: "the sha256 of the database is not its trailer: damaged or cut short".into(),
        })
    }
}

#[cfg(test)]
mod tests;
