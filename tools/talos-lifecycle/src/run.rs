//! The two actions: the reads and gates, the plan, then (unless `--dry-run`) its steps.

use std::io::Write;
use std::path::Path;

use pop_common::records::{EtcdRecovery, EtcdSnapshot, Kind, Version};
use pop_common::wait::{Poll, Sleeper};

use crate::quorum::{self, ControlPlane, Quorum};
use crate::talos::Talos;
use crate::{Config, Error, observe, plan, read_quorum, write_line, write_plan};

/// What a restore is asked for.
#[derive(Debug)]
pub struct Restore<'a> {
    pub snapshot: &'a Path,
    pub skip_hash_check: bool,
    pub wait: Poll,
}

pub fn snapshot(
    config: &Config,
    talos: &dyn Talos,
    cluster: &str,
    nodes: &[ControlPlane],
    path: &Path,
    now: u64,
    output: &mut dyn Write,
) -> Result<(), Error> {
    let observed = observe(talos, nodes);
    let source = quorum::snapshot_source(&observed).ok_or_else(|| Error::NoNode {
        cluster: cluster.to_owned(),
        wanted: "has an etcd member that answers with a leader and no error",
        answers: observed.iter().map(ToString::to_string).collect(),
    })?;
    let steps = plan::snapshot(source, path);
    if config.dry_run {
        return write_plan(&steps, output);
    }
    if path.exists() {
        return Err(Error::File {
            path: path.to_path_buf(),
            message: "exists already: a snapshot is never written over".into(),
        });
    }
    private_dir(path.parent().unwrap_or(Path::new(".")))?;
    pop_common::info!("{}", steps[0].says);
    talos.snapshot(source, path).map_err(|error| Error::Node {
        node: source.name.clone(),
        doing: "etcd snapshot",
        error,
    })?;
    let status = talos
        .snapshot_status(path)
        .map_err(|message| Error::Snapshot {
            path: path.to_path_buf(),
            message,
        })?;
    let bytes = private_file(path)?;
    pop_common::info!(
        "{}: hash {}, revision {}, {} keys",
        path.display(),
        status.hash,
        status.revision,
        status.total_keys
    );
    write_line(
        &EtcdSnapshot {
            kind: Kind::new(),
            version: Version,
            cluster_name: cluster.to_owned(),
            node: source.name.clone(),
            path: path.to_path_buf(),
            taken_at: pop_common::time::rfc3339(now),
            bytes,
            status,
        },
        output,
    )
}

/// The folder of the snapshots, made 0700 when missing (they hold every Secret of the cluster).
fn private_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt as _;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|err| Error::File {
            path: dir.to_path_buf(),
            message: format!("cannot make the folder: {err}"),
        })
}

/// The snapshot's size, once its mode is checked to be 0600 (talosctl creates it so).
fn private_file(path: &Path) -> Result<u64, Error> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(path).map_err(|err| Error::File {
        path: path.to_path_buf(),
        message: err.to_string(),
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode != 0o600 {
        return Err(Error::File {
            path: path.to_path_buf(),
            message: format!("mode {mode:o}, not 600: others may read every Secret in it"),
        });
    }
    Ok(meta.len())
}

pub fn restore(
    config: &Config,
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    cluster: &str,
    nodes: &[ControlPlane],
    restore: &Restore<'_>,
    output: &mut dyn Write,
) -> Result<(), Error> {
    let status = talos
        .snapshot_status(restore.snapshot)
        .map_err(|message| Error::Snapshot {
            path: restore.snapshot.to_path_buf(),
            message,
        })?;
    let observed = observe(talos, nodes);
    if let Quorum::Healthy {
        leader,
        healthy,
        members,
    } = read_quorum(talos, &observed)
    {
        return Err(Error::QuorumHealthy {
            cluster: cluster.to_owned(),
            leader,
            healthy,
            members,
        });
    }
    let target = quorum::recovery_target(&observed).ok_or_else(|| Error::NoNode {
        cluster: cluster.to_owned(),
        wanted: "answers on its Talos API",
        answers: observed.iter().map(ToString::to_string).collect(),
    })?;
    let steps = plan::restore(target, restore.snapshot, &status, restore.skip_hash_check);
    if config.dry_run {
        return write_plan(&steps, output);
    }
    pop_common::info!("{}", steps[1].says);
    talos
        .recover(target, restore.snapshot, restore.skip_hash_check)
        .map_err(|error| Error::Node {
            node: target.name.clone(),
            doing: "bootstrap --recover-from",
            error,
        })?;
    let member_id = wait_healthy(talos, sleeper, target, restore.wait)?;
    pop_common::info!("{}: etcd recovered, member {member_id}", target.name);
    // etcd went back to the snapshot's revision without a bump (Talos restores with etcdutl's
    // defaults), so a running API server never learns: its watch cache keeps what it held.
    pop_common::warn!(
        "now restart the kube-apiserver of every control plane (reboot them one at a time: \
         talosctl --nodes <address> reboot): a running API server keeps serving what its cache \
         held before the restore, objects made after the snapshot included"
    );
    write_line(
        &EtcdRecovery {
            kind: Kind::new(),
            version: Version,
            cluster_name: cluster.to_owned(),
            node: target.name.clone(),
            snapshot: restore.snapshot.to_path_buf(),
            status,
            member_id,
        },
        output,
    )
}

/// Asks `node`'s member until it answers healthy: its member id.
fn wait_healthy(
    talos: &dyn Talos,
    sleeper: &dyn Sleeper,
    node: &ControlPlane,
    wait: Poll,
) -> Result<String, Error> {
    let mut last = String::from("no answer yet");
    let found = wait.until(sleeper, |_| {
        let status = talos.etcd_status(node);
        let observed = quorum::Observed {
            node: node.clone(),
            status: status.clone(),
        };
        last = observed.to_string();
        Ok::<_, Error>(status.ok().filter(|s| s.healthy()).map(|s| s.member_id))
    })?;
    found.ok_or(Error::NotBack {
        node: node.name.clone(),
        tries: wait.tries,
        interval: wait.interval,
        last,
    })
}
