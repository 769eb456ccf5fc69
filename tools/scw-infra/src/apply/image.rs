//! The Talos image the control planes boot from: the project's Instance image tagged with the
//! cluster, the Talos version (and the pinned digest, when one is given); when there is none and
//! the pins are given, it is
//! imported: the file downloaded and converted here ([`super::image_file`]), uploaded to the
//! cluster's bucket (SigV4, multipart), imported as a Block snapshot and made an Instance image.
//! A snapshot of the same tags that an earlier run imported (and was stopped before it made the
//! image) is used as it is: importing again would leave two.

use scaleway::block::{ImportSnapshot, SnapshotStatus};
use scaleway::instance::{CreateImage, ImageState};
use serde::Serialize;

use super::image_file::{self, TalosSource};
use super::{ApplyInputs, ApplyStep, Known};
use crate::cluster::Cluster;
use crate::error::{InfraError, R};
use crate::plan::{PlannedId, Ref, Steps};
use crate::wait;

/// The object metadata (`x-amz-meta-sha256`) that records the sha256 of the uploaded QCOW2, so
/// that a later run reuses the object only when it is that very file.
const SHA256_META: &str = "sha256";

/// Importing the pinned image: download, check, convert, upload to `bucket`/`key` (unless the
/// object there is this very file: the sha256 recorded in its metadata when it was uploaded is
/// this file's), import as the snapshot `name`, make the image `name`. With `snapshot`, the
/// snapshot an earlier run imported with these tags: only waited for, then made the image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Import {
    pub creates: PlannedId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    pub url: String,
    pub sha256: String,
    pub bucket: String,
    pub key: String,
    pub name: String,
    pub tags: Vec<String>,
}

/// Waiting for an image still being made (by an earlier run) to be available.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitImage {
    pub image: String,
    pub name: String,
}

/// The image to boot from: found (waited for while it is being made), or imported by a step.
pub fn plan(cluster: &Cluster<'_>, inputs: &ApplyInputs, steps: &mut Steps<ApplyStep>) -> R<Ref> {
    let names = cluster.names();
    let source = inputs.talos_source.as_ref();
    let tags = names.talos_image_tags(&inputs.talos_version, source.map(|s| s.sha256.as_str()));
    let images = cluster.api.instance().images(cluster.zone(), &tags)?;
    if let Some(found) = images
        .iter()
        .find(|i| i.arch == "x86_64" && i.state != ImageState::Error)
    {
        if found.state != ImageState::Available {
            steps.push(ApplyStep::WaitTalosImage(WaitImage {
                image: found.id.clone(),
                name: found.name.clone(),
            }));
        }
        return Ok(Ref::Existing(found.id.clone()));
    }
    let Some(source) = source else {
        return Err(InfraError::NoTalosImage {
            tags,
            zone: cluster.zone().to_owned(),
            version: inputs.talos_version.clone(),
        });
    };
    // Being imported, or imported, by a run stopped before it made the image.
    let snapshot = cluster
        .api
        .block()
        .snapshots(cluster.zone(), &tags)?
        .into_iter()
        .find(|s| {
            matches!(
                s.status,
                SnapshotStatus::Creating | SnapshotStatus::Available
            )
        })
        .map(|s| s.id);
    Ok(steps.create(|creates| {
        ApplyStep::ImportTalosImage(Import {
            creates,
            snapshot,
            url: source.url.clone(),
            sha256: source.sha256.clone(),
            bucket: names.bucket(),
            key: format!(
                "talos/{}-{}.qcow2",
                inputs.talos_version,
                source.sha256.get(..12).unwrap_or(&source.sha256)
            ),
            name: format!("talos-{}", inputs.talos_version),
            tags,
        })
    }))
}

impl Import {
    pub fn execute(&self, cluster: &Cluster<'_>, inputs: &ApplyInputs, known: &mut Known) -> R<()> {
        let snapshot = match &self.snapshot {
            Some(id) => {
                pop_common::info!(
                    "the snapshot {} ({id}) is already imported or importing: used",
                    self.name
                );
                id.clone()
            }
            None => self.import(cluster, inputs)?,
        };
        wait::snapshot_imported(cluster, &snapshot, &self.name)?;
        let image = cluster.api.instance().create_image(
            cluster.zone(),
            &CreateImage {
                name: self.name.clone(),
                root_volume: snapshot,
                arch: "x86_64",
                project: cluster.project.to_owned(),
                tags: self.tags.clone(),
            },
        )?;
        if image.state != ImageState::Available {
            wait::image(cluster, &image.id, &self.name)?;
        }
        known.created.insert(self.creates, &image.id);
        Ok(())
    }

    /// The file downloaded, converted, uploaded and imported; returns the snapshot's id.
    fn import(&self, cluster: &Cluster<'_>, inputs: &ApplyInputs) -> R<String> {
        let s3 = cluster.s3;
        let work = tempfile::Builder::new()
            .prefix("scw-infra-image")
            .tempdir()
            .map_err(InfraError::WorkDir)?;
        let source = TalosSource {
            url: self.url.clone(),
            sha256: self.sha256.clone(),
            file: inputs.talos_source.as_ref().and_then(|s| s.file.clone()),
        };
        let zst = image_file::obtain(&source, work.path())?;
        let (qcow2, raw_size) = image_file::convert(&zst, work.path())?;
        let size = std::fs::metadata(&qcow2).map(|m| m.len()).unwrap_or(0);
        let digest = image_file::sha256_file(&qcow2)?;
        if !s3.bucket_exists(&self.bucket)? {
            pop_common::info!("creating the bucket {}", self.bucket);
            s3.create_bucket(&self.bucket)?;
        }
        match s3.object(&self.bucket, &self.key)? {
            Some(found) if found.size == size && found.meta(SHA256_META) == Some(&digest) => {
                pop_common::info!("{} is already uploaded (sha256 {digest})", self.key);
            }
            found => {
                if let Some(found) = found {
                    pop_common::warn!(
                        "{} holds another file ({} bytes, sha256 {}): uploading this image over it",
                        self.key,
                        found.size,
                        found.meta(SHA256_META).unwrap_or("not recorded")
                    );
                }
                s3.upload_file(
                    &self.bucket,
                    &self.key,
                    &qcow2,
                    inputs.upload,
                    &[(SHA256_META, &digest)],
                )?;
            }
        }
        pop_common::info!("importing {} as a Block snapshot", self.key);
        let snapshot = cluster.api.block().import_snapshot(
            cluster.zone(),
            &ImportSnapshot {
                bucket: self.bucket.clone(),
                key: self.key.clone(),
                name: self.name.clone(),
                project_id: cluster.project.to_owned(),
                tags: self.tags.clone(),
                size: image_file::snapshot_size(raw_size),
            },
        )?;
        Ok(snapshot.id)
    }
}

impl WaitImage {
    pub fn execute(&self, cluster: &Cluster<'_>) -> R<()> {
        wait::image(cluster, &self.image, &self.name).map(drop)
    }
}
