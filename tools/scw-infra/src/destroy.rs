//! `destroy`: the plan lists every resource of the cluster in the credentials' project, found by
//! its tags (or, for what has no tags, matched as exactly as the API allows), in dependency
//! order: DNS records, Instances (then the root volumes they leave behind), the Elastic Metal
//! worker, the Talos image, its snapshot, the bucket's objects and the bucket, the flexible IPs,
//! the security group, the SSH key. A volume attached to an Instance by hand is not ours: the
//! termination detaches it, and it stays.
//!
//! The same list is what `--dry-run` prints, what the question shows before anything is
//! deleted, and what the run prints as each resource goes: one [`Removal`] each, one JSON line
//! each. Executing removes exactly the plan's resources, and nothing else. `--plan-out` writes
//! the plan to a file (after a [`Whose`] line) for the Makefile to show and ask; `--plan` carries
//! out that file, and only when a new plan lists exactly the same resources.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use scaleway::block::VolumeStatus;
use scaleway::dns::{Change, RecordType};
use scaleway::instance::{ServerAction, VolumeType};
use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::error::{InfraError, R};
use crate::wait;

mod worker;
use scaleway::iam::same_key;

/// The key of an Instance's root volume in its `volumes` map: the one made from the image when
/// the server was created; the volumes attached later are "1", "2"... (scaleway-cli,
/// `internal/namespaces/instance/v1/custom_server_create.go`: `volumes["0"]` is the root volume,
/// additional volumes `i + 1`).
pub const ROOT_VOLUME: &str = "0";

/// How an Instance goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceRemoval {
    /// A running server: terminated with its local volumes.
    Terminate,
    /// A stopped server: deleted; its volumes are removed on their own.
    Delete,
}

/// Where a volume lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeApi {
    /// A Block volume: it outlives its server and is deleted once detached.
    Block,
    /// A local volume of a deleted (not terminated) server.
    Instance,
}

/// One resource `destroy` removes. `name` is for people; `id` is what is deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "removed", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Removal {
    DnsRecord {
        id: String,
        /// `<name> <type> <data>`.
        name: String,
    },
    InstanceServer {
        id: String,
        name: String,
        how: InstanceRemoval,
    },
    Volume {
        id: String,
        /// The volume type (`sbs_volume`, `l_ssd`).
        name: String,
        api: VolumeApi,
    },
    ElasticMetalServer {
        id: String,
        name: String,
    },
    Image {
        id: String,
        name: String,
    },
    Snapshot {
        id: String,
        name: String,
    },
    Object {
        /// The key.
        id: String,
        name: String,
        bucket: String,
    },
    Bucket {
        id: String,
        name: String,
    },
    FlexibleIp {
        id: String,
        /// The address.
        name: String,
    },
    SecurityGroup {
        id: String,
        name: String,
    },
    SshKey {
        id: String,
        name: String,
    },
}

impl Removal {
    /// The resource's kind, as the JSON line's `removed` says.
    pub fn kind(&self) -> &'static str {
        match self {
            Removal::DnsRecord { .. } => "dns-record",
            Removal::InstanceServer { .. } => "instance-server",
            Removal::Volume { .. } => "volume",
            Removal::ElasticMetalServer { .. } => "elastic-metal-server",
            Removal::Image { .. } => "image",
            Removal::Snapshot { .. } => "snapshot",
            Removal::Object { .. } => "object",
            Removal::Bucket { .. } => "bucket",
            Removal::FlexibleIp { .. } => "flexible-ip",
            Removal::SecurityGroup { .. } => "security-group",
            Removal::SshKey { .. } => "ssh-key",
        }
    }

    pub fn id(&self) -> &str {
        self.id_and_name().0
    }

    fn id_and_name(&self) -> (&str, &str) {
        match self {
            Removal::DnsRecord { id, name }
            | Removal::InstanceServer { id, name, .. }
            | Removal::Volume { id, name, .. }
            | Removal::ElasticMetalServer { id, name }
            | Removal::Image { id, name }
            | Removal::Snapshot { id, name }
            | Removal::Object { id, name, .. }
            | Removal::Bucket { id, name }
            | Removal::FlexibleIp { id, name }
            | Removal::SecurityGroup { id, name }
            | Removal::SshKey { id, name } => (id, name),
        }
    }

    /// The JSON line of this removal (the plan's, and the run's once it is done).
    pub fn write_line(&self, mut out: impl Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut out, self)?;
        out.write_all(b"\n")?;
        out.flush()
    }
}

/// `<kind> <name> (<id>)`: one line of the question.
impl fmt::Display for Removal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (id, name) = self.id_and_name();
        write!(f, "{} {name} ({id})", self.kind())?;
        if let Removal::InstanceServer { how, .. } = self {
            let how = match how {
                InstanceRemoval::Terminate => "terminated",
                InstanceRemoval::Delete => "deleted",
            };
            write!(f, ", {how}")?;
        }
        Ok(())
    }
}

/// Whose resources a plan file lists: its first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Whose {
    kind: PlanKind,
    pub cluster: String,
    pub project: String,
    pub zone: String,
}

/// The `kind` of a plan file's first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum PlanKind {
    DestroyPlan,
}

impl Whose {
    pub fn new(cluster: &str, project: &str, zone: &str) -> Whose {
        Whose {
            kind: PlanKind::DestroyPlan,
            cluster: cluster.to_owned(),
            project: project.to_owned(),
            zone: zone.to_owned(),
        }
    }
}

/// Why a plan file is not carried out (nothing is deleted).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{}: cannot write: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: cannot read: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: not a destroy plan written by scw-infra destroy --plan-out: {message}", path.display())]
    Format { path: PathBuf, message: String },
    #[error(
        "{}: the plan is for cluster {} in project {} ({}), not for cluster {} in project {} ({}): \
         nothing was deleted",
        path.display(), planned.cluster, planned.project, planned.zone, now.cluster, now.project,
        now.zone
    )]
    NotThisCluster {
        path: PathBuf,
        planned: Box<Whose>,
        now: Box<Whose>,
    },
    #[error(
        "{}: the plan no longer matches what exists (now also: {}; gone or changed: {}): nothing \
         was deleted; make a new plan and look at it again",
        path.display(),
        if added.is_empty() { "none".to_owned() } else { added.join(", ") },
        if gone.is_empty() { "none".to_owned() } else { gone.join(", ") }
    )]
    Stale {
        path: PathBuf,
        added: Vec<String>,
        gone: Vec<String>,
    },
}

/// Everything `destroy` will remove, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DestroyPlan {
    pub removals: Vec<Removal>,
}

impl DestroyPlan {
    /// Writes the plan to `path` (replaced whole, once written): `whose` first, then one line
    /// per removal.
    pub fn write_file(&self, path: &Path, whose: &Whose) -> Result<(), PlanError> {
        let fail = |error| PlanError::Write {
            path: path.to_path_buf(),
            error,
        };
        let mut text = serde_json::to_vec(whose).map_err(|e| fail(e.into()))?;
        text.push(b'\n');
        self.write_json_lines(&mut text).map_err(fail)?;
        let partial = path.with_extension("partial");
        std::fs::write(&partial, &text).map_err(fail)?;
        std::fs::rename(&partial, path).map_err(fail)
    }

    /// The plan of `path`, when it is one for `whose` (the cluster, project and zone of now).
    pub fn read_file(path: &Path, whose: &Whose) -> Result<DestroyPlan, PlanError> {
        let text = std::fs::read_to_string(path).map_err(|error| PlanError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        let format = |message: String| PlanError::Format {
            path: path.to_path_buf(),
            message,
        };
        let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
        let planned: Whose = serde_json::from_str(first).map_err(|e| format(e.to_string()))?;
        if planned != *whose {
            return Err(PlanError::NotThisCluster {
                path: path.to_path_buf(),
                planned: Box::new(planned),
                now: Box::new(whose.clone()),
            });
        }
        DestroyPlan::from_json_lines(rest).map_err(|e| format(e.to_string()))
    }

    /// Whether `now` (a plan made just now) lists exactly the resources of this one.
    pub fn still_matches(&self, now: &DestroyPlan, path: &Path) -> Result<(), PlanError> {
        let lines = |plan: &DestroyPlan| -> Vec<String> {
            let mut lines: Vec<String> = plan.removals.iter().map(ToString::to_string).collect();
            lines.sort();
            lines
        };
        let (planned, current) = (lines(self), lines(now));
        if planned == current {
            return Ok(());
        }
        Err(PlanError::Stale {
            path: path.to_path_buf(),
            added: current
                .iter()
                .filter(|l| !planned.contains(l))
                .cloned()
                .collect(),
            gone: planned
                .iter()
                .filter(|l| !current.contains(l))
                .cloned()
                .collect(),
        })
    }

    /// One JSON line per removal.
    pub fn write_json_lines(&self, mut out: impl Write) -> std::io::Result<()> {
        for removal in &self.removals {
            removal.write_line(&mut out)?;
        }
        Ok(())
    }

    /// A plan from its JSON lines (as `--dry-run` printed them).
    pub fn from_json_lines(text: &str) -> Result<DestroyPlan, serde_json::Error> {
        let removals = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?;
        Ok(DestroyPlan { removals })
    }
}

/// Finds every resource of the cluster (reads only), in the order they are removed.
/// What a plan removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// The whole cluster; the IAM SSH key is ours when it holds this public key.
    Cluster(&'a str),
    /// One control plane's Instance and the root volume it leaves behind, by its name: the
    /// address, the records and the security group stay for the one `apply` makes again.
    ControlPlane(&'a str),
    /// A worker the config no longer lists, by its name (its `edgepop-node` tag): its Elastic
    /// Metal server, and any record of ours still pointing at its addresses (an apply since it
    /// left the config has taken those out already).
    FormerWorker(&'a str),
}

pub fn plan(cluster: &Cluster<'_>, scope: Scope<'_>) -> R<DestroyPlan> {
    let ssh_public_key = match scope {
        Scope::Cluster(key) => key,
        Scope::ControlPlane(name) => {
            let mut removals = Vec::new();
            plan_instances(cluster, Some(name), &mut removals)?;
            return Ok(DestroyPlan { removals });
        }
        Scope::FormerWorker(name) => return worker::plan_former_worker(cluster, name),
    };
    let zone = cluster.zone();
    let names = cluster.names();
    let cluster_tag = vec![names.cluster_tag()];
    let mut removals = Vec::new();
    plan_dns_records(cluster, &mut removals, |_| true)?;
    plan_instances(cluster, None, &mut removals)?;
    for s in cluster.api.baremetal().servers(zone, &cluster_tag)? {
        removals.push(Removal::ElasticMetalServer {
            id: s.id,
            name: s.name,
        });
    }
    plan_images_and_bucket(cluster, &mut removals)?;
    // Flexible IPs, then the security group (no server uses them any more).
    for ip in cluster.api.instance().ips(zone, &cluster_tag)? {
        removals.push(Removal::FlexibleIp {
            id: ip.id,
            name: ip.address.unwrap_or_default(),
        });
    }
    for g in cluster.api.instance().security_groups(zone, &cluster_tag)? {
        removals.push(Removal::SecurityGroup {
            id: g.id,
            name: g.name,
        });
    }

    // The SSH key: ours by name and by public key.
    for k in cluster.api.iam().ssh_keys(&names.ssh_key())? {
        if same_key(&k.public_key, ssh_public_key) {
            removals.push(Removal::SshKey {
                id: k.id,
                name: k.name,
            });
        }
    }
    Ok(DestroyPlan { removals })
}

/// The DNS records carrying our comment whose data `holding` takes, when Scaleway hosts the zone.
pub(crate) fn plan_dns_records(
    cluster: &Cluster<'_>,
    removals: &mut Vec<Removal>,
    holding: impl Fn(&str) -> bool,
) -> R<()> {
    let names = cluster.names();
    let config = cluster.config;
    let dns = cluster.api.dns();
    if dns.zone(&config.dns_zone)?.is_some() {
        let record_names =
            std::iter::once(config.api_hostname.as_str()).chain(config.edge_record_names());
        for name in record_names {
            for record_type in [RecordType::A, RecordType::Aaaa] {
                for r in dns.records(&config.dns_zone, name, &record_type)? {
                    if r.comment.as_deref() == Some(names.cluster_tag().as_str())
                        && holding(&r.data)
                    {
                        removals.push(Removal::DnsRecord {
                            name: format!("{} {} {}", r.name, r.record_type, r.data),
                            id: r.id,
                        });
                    }
                }
            }
        }
    }

    Ok(())
}

/// The Instances (or the one of this name) and the volumes they leave behind.
fn plan_instances(cluster: &Cluster<'_>, only: Option<&str>, removals: &mut Vec<Removal>) -> R<()> {
    let cluster_tag = vec![cluster.names().cluster_tag()];
    // Instances: a running one is terminated (its local volumes go with it), a stopped one
    // deleted; then the volumes they leave behind.
    let mut volumes = Vec::new();
    for s in cluster
        .api
        .instance()
        .servers(cluster.zone(), &cluster_tag)?
        .into_iter()
        .filter(|s| only.is_none_or(|name| s.name == name))
    {
        let how = if s.allows(&ServerAction::Terminate) {
            InstanceRemoval::Terminate
        } else if s.state.is_off() {
            InstanceRemoval::Delete
        } else {
            return Err(InfraError::InstanceBusy {
                name: s.name,
                state: s.state.to_string(),
            });
        };
        for (key, v) in &s.volumes {
            if key != ROOT_VOLUME {
                // Not made by scw-infra: someone attached it. A Block volume survives the
                // termination (detached); a local one would be deleted with the server.
                if v.volume_type != VolumeType::SbsVolume && how == InstanceRemoval::Terminate {
                    return Err(InfraError::ForeignLocalVolume {
                        server: s.name,
                        volume: v.id.clone(),
                    });
                }
                pop_common::warn!(
                    "the volume {} attached to {} is not its root volume: not ours, it stays",
                    v.id,
                    s.name
                );
                continue;
            }
            let api = match (&v.volume_type, how) {
                (VolumeType::SbsVolume, _) => VolumeApi::Block,
                (_, InstanceRemoval::Delete) => VolumeApi::Instance,
                (_, InstanceRemoval::Terminate) => continue,
            };
            volumes.push(Removal::Volume {
                id: v.id.clone(),
                name: v.volume_type.to_string(),
                api,
            });
        }
        removals.push(Removal::InstanceServer {
            id: s.id,
            name: s.name,
            how,
        });
    }
    removals.extend(volumes);

    Ok(())
}

/// The Talos image, then its snapshot, then the bucket's objects and the bucket.
fn plan_images_and_bucket(cluster: &Cluster<'_>, removals: &mut Vec<Removal>) -> R<()> {
    let (zone, names) = (cluster.zone(), cluster.names());
    let cluster_tag = vec![names.cluster_tag()];
    for i in cluster.api.instance().images(zone, &cluster_tag)? {
        removals.push(Removal::Image {
            id: i.id,
            name: i.name,
        });
    }
    for s in cluster.api.block().snapshots(zone, &cluster_tag)? {
        removals.push(Removal::Snapshot {
            id: s.id,
            name: s.name,
        });
    }
    let bucket = names.bucket();
    if cluster.s3.bucket_exists(&bucket)? {
        let (ours, others): (Vec<String>, Vec<String>) = cluster
            .s3
            .list_keys(&bucket, "")?
            .into_iter()
            .partition(|k| k.starts_with("talos/"));
        for key in ours {
            removals.push(Removal::Object {
                id: key.clone(),
                name: key,
                bucket: bucket.clone(),
            });
        }
        if others.is_empty() {
            removals.push(Removal::Bucket {
                id: bucket.clone(),
                name: bucket,
            });
        } else {
            pop_common::warn!(
                "the bucket {bucket} is kept: it holds {} objects that are not ours",
                others.len()
            );
        }
    }

    Ok(())
}

/// Removes the plan's resources, in order; `done` is called with each once it is gone (and may
/// fail with the caller's own error, such as a closed output). DNS records go in one call;
/// Instances are all sent away before any is waited for.
pub fn execute<E: From<InfraError>>(
    cluster: &Cluster<'_>,
    plan: &DestroyPlan,
    mut done: impl FnMut(&Removal) -> Result<(), E>,
) -> Result<(), E> {
    let mut records: Vec<&Removal> = Vec::new();
    let mut instances: Vec<&Removal> = Vec::new();
    for removal in &plan.removals {
        if !matches!(removal, Removal::DnsRecord { .. }) {
            delete_records(cluster, &mut records, &mut done)?;
        }
        if !matches!(removal, Removal::InstanceServer { .. }) {
            settle_instances(cluster, &mut instances, &mut done)?;
        }
        match removal {
            Removal::DnsRecord { .. } => records.push(removal),
            Removal::InstanceServer { .. } => {
                remove_instance(cluster, removal)?;
                instances.push(removal);
            }
            other => {
                remove(cluster, other)?;
                done(other)?;
            }
        }
    }
    delete_records(cluster, &mut records, &mut done)?;
    settle_instances(cluster, &mut instances, &mut done)
}

fn delete_records<E: From<InfraError>>(
    cluster: &Cluster<'_>,
    records: &mut Vec<&Removal>,
    done: &mut impl FnMut(&Removal) -> Result<(), E>,
) -> Result<(), E> {
    if records.is_empty() {
        return Ok(());
    }
    let changes: Vec<Change> = records
        .iter()
        .map(|r| Change::Delete {
            id: r.id().to_owned(),
        })
        .collect();
    pop_common::info!("deleting {} DNS records", changes.len());
    cluster
        .api
        .dns()
        .change_records(&cluster.config.dns_zone, &changes)
        .map_err(InfraError::from)?;
    for r in records.drain(..) {
        done(r)?;
    }
    Ok(())
}

fn remove_instance(cluster: &Cluster<'_>, removal: &Removal) -> R<()> {
    let Removal::InstanceServer { id, name, how } = removal else {
        return Ok(());
    };
    let api = cluster.api.instance();
    match how {
        InstanceRemoval::Terminate => {
            pop_common::info!("terminating {name}");
            api.action(cluster.zone(), id, ServerAction::Terminate)?;
        }
        InstanceRemoval::Delete => {
            pop_common::info!("deleting {name}");
            api.delete_server(cluster.zone(), id)?;
        }
    }
    Ok(())
}

/// Waits until every terminated Instance is gone (what follows needs them gone: their volumes,
/// their IPs, their group), then reports them in plan order.
fn settle_instances<E: From<InfraError>>(
    cluster: &Cluster<'_>,
    instances: &mut Vec<&Removal>,
    done: &mut impl FnMut(&Removal) -> Result<(), E>,
) -> Result<(), E> {
    for removal in instances.drain(..) {
        if let Removal::InstanceServer {
            id,
            name,
            how: InstanceRemoval::Terminate,
        } = removal
        {
            wait::instance_gone(cluster, id, name)?;
        }
        done(removal)?;
    }
    Ok(())
}

/// Removes one resource of the kinds that go alone.
fn remove(cluster: &Cluster<'_>, removal: &Removal) -> R<()> {
    let zone = cluster.zone();
    let api = cluster.api;
    match removal {
        Removal::Volume {
            id,
            api: VolumeApi::Block,
            ..
        } => match wait::volume_detached(cluster, id)? {
            Some(v) if v.status != VolumeStatus::Deleted => {
                api.block().delete_volume(zone, id)?;
            }
            _ => pop_common::info!("the Block volume {id} is already gone"),
        },
        Removal::Volume {
            id,
            api: VolumeApi::Instance,
            ..
        } => match api.instance().delete_volume(zone, id) {
            Err(err) if err.status() == Some(404) => {
                pop_common::info!("the volume {id} is already gone");
            }
            other => other?,
        },
        Removal::ElasticMetalServer { id, name } => {
            pop_common::info!("deleting the Elastic Metal server {name}");
            api.baremetal().delete_server(zone, id)?;
        }
        Removal::Image { id, .. } => api.instance().delete_image(zone, id)?,
        Removal::Snapshot { id, name } => {
            wait::snapshot_released(cluster, id, name)?;
            api.block().delete_snapshot(zone, id)?;
        }
        Removal::Object { id, bucket, .. } => cluster.s3.delete_object(bucket, id)?,
        Removal::Bucket { id, .. } => cluster.s3.delete_bucket(id)?,
        Removal::FlexibleIp { id, .. } => api.instance().delete_ip(zone, id)?,
        Removal::SecurityGroup { id, .. } => api.instance().delete_security_group(zone, id)?,
        Removal::SshKey { id, .. } => api.iam().delete_ssh_key(id)?,
        Removal::DnsRecord { .. } | Removal::InstanceServer { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_printed_plan_reads_back_as_the_same_plan() {
        let plan = DestroyPlan {
            removals: vec![
                Removal::DnsRecord {
                    id: "r1".into(),
                    name: "api A 203.0.113.11".into(),
                },
                Removal::InstanceServer {
                    id: "s1".into(),
                    name: "edge-par-cp-1".into(),
                    how: InstanceRemoval::Terminate,
                },
                Removal::Volume {
                    id: "v1".into(),
                    name: "sbs_volume".into(),
                    api: VolumeApi::Block,
                },
                Removal::Object {
                    id: "talos/x.qcow2".into(),
                    name: "talos/x.qcow2".into(),
                    bucket: "edgepop-edge-par-11111111".into(),
                },
            ],
        };
        let mut out = Vec::new();
        plan.write_json_lines(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with(r#"{"removed":"dns-record","id":"r1","name":"api A 203.0.113.11"}"#),
            "{text}"
        );
        assert_eq!(DestroyPlan::from_json_lines(&text).unwrap(), plan);
        assert_eq!(
            plan.removals[1].to_string(),
            "instance-server edge-par-cp-1 (s1), terminated"
        );
        assert!(
            DestroyPlan::from_json_lines(r#"{"removed":"server","id":"x","name":"y"}"#).is_err()
        );
    }
}
