//! Waiting for a resource to reach a state, within a bound, looking every `--poll-seconds`: the
//! steps that wait call these once the action they wait for has been sent.

use std::time::Duration;

use pop_common::wait::Poll;
use scaleway::baremetal::{self, ServerStatus};
use scaleway::block::{SnapshotStatus, Volume, VolumeStatus};
use scaleway::instance::{self, Image, ImageState};

use crate::cluster::Cluster;
use crate::error::{InfraError, R};
use crate::power::InstanceTarget;

/// How long to wait for a state, and how often to look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    pub poll: Duration,
    /// An Instance, an image, a snapshot, a volume.
    pub instance: Duration,
    /// Elastic Metal delivery can take most of an hour.
    pub elastic_metal: Duration,
}

/// Looks with `look` until it gives a value, within `limit`; a timeout names `what`.
pub fn until<T>(
    cluster: &Cluster<'_>,
    limit: Duration,
    what: &str,
    mut look: impl FnMut() -> R<Option<T>>,
) -> R<T> {
    pop_common::info!("waiting for {what} (at most {} s)", limit.as_secs());
    Poll::within(limit, cluster.waits.poll)
        .until(cluster.sleeper, |_| look())?
        .ok_or_else(|| InfraError::Timeout {
            what: what.to_owned(),
            seconds: limit.as_secs(),
        })
}

/// Until the Instance is `target`; its last look.
pub fn instance(
    cluster: &Cluster<'_>,
    id: &str,
    name: &str,
    target: InstanceTarget,
) -> R<instance::Server> {
    let what = format!("the Instance {name} to be {target}");
    until(cluster, cluster.waits.instance, &what, || {
        match cluster.api.instance().server(cluster.zone(), id)? {
            Some(s) if target.reached(&s.state) => Ok(Some(s)),
            Some(_) => Ok(None),
            None => Err(vanished("Instance", name, id)),
        }
    })
}

/// Until the Instance is gone (terminated).
pub fn instance_gone(cluster: &Cluster<'_>, id: &str, name: &str) -> R<()> {
    let what = format!("the Instance {name} to be gone");
    until(cluster, cluster.waits.instance, &what, || {
        Ok(cluster
            .api
            .instance()
            .server(cluster.zone(), id)?
            .is_none()
            .then_some(()))
    })
}

/// Until the Elastic Metal server has `status`; its last look.
pub fn worker(
    cluster: &Cluster<'_>,
    id: &str,
    name: &str,
    status: &ServerStatus,
) -> R<baremetal::Server> {
    let what = format!("the Elastic Metal server {name} to be {status}");
    until(
        cluster,
        cluster.waits.elastic_metal,
        &what,
        || match cluster.api.baremetal().server(cluster.zone(), id)? {
            Some(s) if s.status == *status => Ok(Some(s)),
            Some(s) if s.status.is_failed() => {
                Err(failed("Elastic Metal server", name, id, &s.status))
            }
            Some(_) => Ok(None),
            None => Err(vanished("Elastic Metal server", name, id)),
        },
    )
}

/// Until the Instance image is available.
pub fn image(cluster: &Cluster<'_>, id: &str, name: &str) -> R<Image> {
    let what = format!("the image {name} to be available");
    until(cluster, cluster.waits.instance, &what, || {
        match cluster.api.instance().image(cluster.zone(), id)? {
            Some(i) if i.state == ImageState::Available => Ok(Some(i)),
            Some(i) if i.state == ImageState::Error => Err(failed("image", name, id, &i.state)),
            Some(_) => Ok(None),
            None => Err(vanished("image", name, id)),
        }
    })
}

/// Until the imported snapshot is available (an import in error fails).
pub fn snapshot_imported(cluster: &Cluster<'_>, id: &str, name: &str) -> R<()> {
    let what = format!("the snapshot {name} to be available");
    until(cluster, cluster.waits.instance, &what, || {
        match cluster.api.block().snapshot(cluster.zone(), id)? {
            Some(s) if s.status == SnapshotStatus::Available => Ok(Some(())),
            Some(s) if s.status == SnapshotStatus::Error => {
                Err(failed("imported snapshot", name, id, &s.status))
            }
            Some(_) => Ok(None),
            None => Err(vanished("snapshot", name, id)),
        }
    })
}

/// Until no image uses the snapshot any more (or it is gone).
pub fn snapshot_released(cluster: &Cluster<'_>, id: &str, name: &str) -> R<()> {
    let what = format!("the snapshot {name} to be released by its image");
    until(cluster, cluster.waits.instance, &what, || {
        Ok(cluster
            .api
            .block()
            .snapshot(cluster.zone(), id)?
            .is_none_or(|s| s.status != SnapshotStatus::InUse)
            .then_some(()))
    })
}

/// Until the Block volume is detached from its server: the volume, or `None` once it is gone.
pub fn volume_detached(cluster: &Cluster<'_>, id: &str) -> R<Option<Volume>> {
    let what = format!("the Block volume {id} to be detached");
    until(cluster, cluster.waits.instance, &what, || {
        match cluster.api.block().volume(cluster.zone(), id)? {
            Some(v) if v.status == VolumeStatus::InUse => Ok(None),
            found => Ok(Some(found)),
        }
    })
}

/// The resource reached a state it does not leave by itself.
fn failed(what: &'static str, name: &str, id: &str, state: &dyn std::fmt::Display) -> InfraError {
    InfraError::Failed {
        what,
        name: name.to_owned(),
        id: id.to_owned(),
        state: state.to_string(),
    }
}

fn vanished(what: &'static str, name: &str, id: &str) -> InfraError {
    InfraError::Vanished {
        what,
        name: name.to_owned(),
        id: id.to_owned(),
    }
}
