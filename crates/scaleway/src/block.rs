//! Block Storage v1 (`../shared/scaleway-openapi/scaleway.block.v1.Api.yml`): the snapshot a
//! QCOW2 object is imported as, and the volumes Instances leave behind.

use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::enums::api_enum;
use crate::error::R;
use crate::{owned, tagged, tags_query, with_every_tag};

/// The zones of the Block Storage API: the `zone` path parameter's enum, the same on every
/// operation of scaleway.block.v1.Api.yml.
pub const ZONES: &[&str] = &[
    "fr-par-1", "fr-par-2", "fr-par-3", "nl-ams-1", "nl-ams-2", "nl-ams-3", "pl-waw-1", "pl-waw-2",
    "pl-waw-3",
];

api_enum! {
    /// `Snapshot.status`.
    pub enum SnapshotStatus {
        UnknownStatus = "unknown_status",
        Creating = "creating",
        Available = "available",
        Error = "error",
        Deleting = "deleting",
        Deleted = "deleted",
        InUse = "in_use",
        Locked = "locked",
        Exporting = "exporting",
    }
}

api_enum! {
    /// `Volume.status`.
    pub enum VolumeStatus {
        UnknownStatus = "unknown_status",
        Creating = "creating",
        Available = "available",
        InUse = "in_use",
        Deleting = "deleting",
        Deleted = "deleted",
        Resizing = "resizing",
        Error = "error",
        Snapshotting = "snapshotting",
        Locked = "locked",
        Updating = "updating",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Snapshot {
    pub id: String,
    pub name: String,
    pub status: SnapshotStatus,
    #[serde(rename = "project_id")]
    pub project: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub zone: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Volume {
    pub id: String,
    pub status: VolumeStatus,
    #[serde(rename = "project_id")]
    pub project: String,
}

/// The body of `POST .../snapshots/import-from-object-storage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportSnapshot {
    pub bucket: String,
    pub key: String,
    pub name: String,
    pub project_id: String,
    pub tags: Vec<String>,
    /// Bytes; at least the image's virtual size.
    pub size: u64,
}

/// Block Storage v1.
#[derive(Debug, Clone, Copy)]
pub struct Block<'c> {
    client: &'c Client<'c>,
}

impl<'c> Block<'c> {
    pub fn new(client: &'c Client<'c>) -> Self {
        Block { client }
    }

    /// Imports a QCOW2 object of Object Storage as a snapshot (answered with a 5xx or cut, the
    /// import is looked for by its tags before it is sent again).
    pub fn import_snapshot(&self, zone: &str, body: &ImportSnapshot) -> R<Snapshot> {
        self.client.create(
            &format!("/block/v1/zones/{zone}/snapshots/import-from-object-storage"),
            body,
            &|| self.snapshots(zone, &body.tags),
        )
    }

    pub fn snapshot(&self, zone: &str, id: &str) -> R<Option<Snapshot>> {
        self.client
            .get_mine(&format!("/block/v1/zones/{zone}/snapshots/{id}"))
    }

    /// The project's snapshots carrying every tag of `tags` (an array query: one `tags=` per
    /// tag; the spec marks `include_deleted` as required).
    pub fn snapshots(&self, zone: &str, tags: &[String]) -> R<Vec<Snapshot>> {
        let mut filters = tags_query(tags);
        filters.push(("include_deleted", "false".into()));
        let all = self.client.list_mine(
            &format!("/block/v1/zones/{zone}/snapshots"),
            "project_id",
            &filters,
            "snapshots",
            "page_size",
        )?;
        Ok(with_every_tag(all, tags))
    }

    pub fn delete_snapshot(&self, zone: &str, id: &str) -> R<()> {
        self.client
            .delete(&format!("/block/v1/zones/{zone}/snapshots/{id}"))
    }

    /// One volume; `None` once it is gone.
    pub fn volume(&self, zone: &str, id: &str) -> R<Option<Volume>> {
        self.client
            .get_mine(&format!("/block/v1/zones/{zone}/volumes/{id}"))
    }

    pub fn delete_volume(&self, zone: &str, id: &str) -> R<()> {
        self.client
            .delete(&format!("/block/v1/zones/{zone}/volumes/{id}"))
    }
}

tagged!(Snapshot);

owned!(Snapshot: "Block snapshot", Volume: "Block volume");
