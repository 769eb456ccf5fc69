//! The DNS records, when Scaleway hosts the zone for the project: `api_hostname` to the control
//! planes, each edge name to every worker, each record with the comment `edgepop-cluster=<name>`.
//! An edge name gets the worker's IPv6 addresses (AAAA) only once the edge serves IPv6
//! (`flows::EDGE_SERVES_IPV6`); until then an AAAA of ours found there goes. A record of the
//! same name and type without that comment is not ours and stops the plan. When the zone is
//! hosted elsewhere, the records are shown for the operator to create (and the AAAA to leave
//! out).

use std::net::IpAddr;

use scaleway::dns::{Change, IdFields, NewRecord, Record, RecordType};
use serde::Serialize;

use super::{Address, ApplyStep, Known};
use crate::cluster::Cluster;
use crate::config::InfraConfig;
use crate::error::{InfraError, R};
use crate::plan::Steps;

/// The time to live of the records written: also how long `make remove-worker` waits, once a
/// worker's records are gone, before draining it (resolvers may hand out its address until then).
pub const TTL: u32 = 300;

/// Making each record set (name and type) exactly these addresses, and each cleared set empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetRecords {
    pub dns_zone: String,
    pub sets: Vec<RecordSet>,
    /// Sets that must hold no record, with what they hold now (ours: another's stops the plan).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cleared: Vec<RecordSet>,
}

/// The records of one name and type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordSet {
    /// In the zone (`api`; empty for the apex).
    pub name: String,
    #[serde(rename = "type")]
    pub record_type: RecordType,
    pub data: Vec<Address>,
}

/// Every record set this cluster owns: `api_hostname` to the control planes, each of the
/// edge's names to every worker's IPv4 address (one A set holding them all: a resolver hands
/// them out in turn), and to their IPv6 ones once the edge serves IPv6.
pub fn wanted(
    config: &InfraConfig,
    control_planes: &[Address],
    workers: &[Address],
) -> Vec<RecordSet> {
    let mut out = Vec::new();
    if !control_planes.is_empty() {
        out.push(RecordSet {
            name: config.api_hostname.clone(),
            record_type: RecordType::A,
            data: control_planes.to_vec(),
        });
    }
    let of_type = |wanted: RecordType| -> Vec<Address> {
        workers
            .iter()
            .filter(|address| record_type(address) == wanted)
            .cloned()
            .collect()
    };
    let mut types = vec![(RecordType::A, of_type(RecordType::A))];
    if flows::EDGE_SERVES_IPV6 {
        types.push((RecordType::Aaaa, of_type(RecordType::Aaaa)));
    }
    for name in config.edge_record_names() {
        for (record_type, data) in &types {
            if !data.is_empty() {
                out.push(RecordSet {
                    name: name.to_owned(),
                    record_type: record_type.clone(),
                    data: data.clone(),
                });
            }
        }
    }
    out
}

/// The record type of an address: A for IPv4, AAAA for IPv6.
fn record_type(address: &Address) -> RecordType {
    match address {
        Address::Known(IpAddr::V4(_))
        | Address::Pending {
            family: super::Family::Ipv4,
            ..
        } => RecordType::A,
        _ => RecordType::Aaaa,
    }
}

/// The record sets this cluster must not have: each edge name's AAAA while the edge does not
/// serve IPv6 (one an earlier apply wrote is deleted), each with no address.
pub fn unwanted(config: &InfraConfig) -> Vec<RecordSet> {
    if flows::EDGE_SERVES_IPV6 {
        return Vec::new();
    }
    config
        .edge_record_names()
        .map(|name| RecordSet {
            name: name.to_owned(),
            record_type: RecordType::Aaaa,
            data: Vec::new(),
        })
        .collect()
}

/// The sets that differ from what the zone holds (none when it holds them all), or, when the
/// zone is not hosted at Scaleway for this project, the sets to show.
pub fn plan(
    cluster: &Cluster<'_>,
    steps: &mut Steps<ApplyStep>,
    control_planes: &[Address],
    worker: &[Address],
) -> R<()> {
    let dns_zone = &cluster.config.dns_zone;
    let sets = wanted(cluster.config, control_planes, worker);
    let dns = cluster.api.dns();
    if dns.zone(dns_zone)?.is_none() {
        steps.push(ApplyStep::ShowDnsRecords(SetRecords {
            dns_zone: dns_zone.clone(),
            sets,
            cleared: unwanted(cluster.config),
        }));
        return Ok(());
    }
    let mut changed = Vec::new();
    for set in sets {
        let existing = ours_only(cluster, dns_zone, &set)?;
        let want: Option<Vec<String>> = set
            .data
            .iter()
            .map(|a| match a {
                Address::Known(address) => Some(address.to_string()),
                Address::Pending { .. } => None,
            })
            .collect();
        let mut have: Vec<&str> = existing.iter().map(|r| r.data.as_str()).collect();
        have.sort_unstable();
        if let Some(mut want) = want {
            want.sort_unstable();
            if have == want {
                continue;
            }
        }
        changed.push(set);
    }
    let mut cleared = Vec::new();
    for mut set in unwanted(cluster.config) {
        let existing = ours_only(cluster, dns_zone, &set)?;
        set.data = existing
            .iter()
            .filter_map(|r| r.data.parse().ok())
            .map(Address::Known)
            .collect();
        if !existing.is_empty() {
            cleared.push(set);
        }
    }
    if !changed.is_empty() || !cleared.is_empty() {
        steps.push(ApplyStep::SetDnsRecords(SetRecords {
            dns_zone: dns_zone.clone(),
            sets: changed,
            cleared,
        }));
    }
    Ok(())
}

/// The records the zone holds now of `set`'s name and type, refused when one is not ours (no
/// comment of the cluster): a set replaces every record of its name and type.
fn ours_only(cluster: &Cluster<'_>, dns_zone: &str, set: &RecordSet) -> R<Vec<Record>> {
    let comment = cluster.names().cluster_tag();
    let existing = cluster
        .api
        .dns()
        .records(dns_zone, &set.name, &set.record_type)?;
    if let Some(foreign) = existing
        .iter()
        .find(|r| r.comment.as_deref() != Some(&comment))
    {
        return Err(InfraError::ForeignDnsRecord {
            name: set.name.clone(),
            dns_zone: dns_zone.to_owned(),
            record_type: set.record_type.to_string(),
            data: foreign.data.clone(),
            comment,
        });
    }
    Ok(existing)
}

impl SetRecords {
    /// Each set with its addresses resolved; a set left without any is dropped.
    fn resolved(&self, known: &Known) -> Vec<(&RecordSet, Vec<String>)> {
        self.sets
            .iter()
            .map(|set| {
                let data = set
                    .data
                    .iter()
                    .filter_map(|a| a.resolve(known))
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>();
                (set, data)
            })
            .filter(|(_, data)| !data.is_empty())
            .collect()
    }

    pub fn execute(&self, cluster: &Cluster<'_>, known: &Known) -> R<()> {
        // Checked again now: the plan read the zone before the waits (the worker's can take two
        // hours), and a record made since by someone else must not be written over.
        for set in &self.sets {
            ours_only(cluster, &self.dns_zone, set)?;
        }
        let mut deletions = Vec::new();
        for set in &self.cleared {
            deletions.extend(
                ours_only(cluster, &self.dns_zone, set)?
                    .into_iter()
                    .map(|record| Change::Delete { id: record.id }),
            );
        }
        let comment = cluster.names().cluster_tag();
        let mut changes: Vec<Change> = self
            .resolved(known)
            .into_iter()
            .map(|(set, data)| Change::Set {
                id_fields: IdFields {
                    name: set.name.clone(),
                    record_type: set.record_type.clone(),
                },
                records: data
                    .into_iter()
                    .map(|data| NewRecord {
                        name: set.name.clone(),
                        record_type: set.record_type.clone(),
                        data,
                        ttl: TTL,
                        comment: comment.clone(),
                    })
                    .collect(),
            })
            .collect();
        changes.extend(deletions);
        if changes.is_empty() {
            return Ok(());
        }
        pop_common::info!(
            "setting {} DNS record sets in {}",
            changes.len(),
            self.dns_zone
        );
        cluster.api.dns().change_records(&self.dns_zone, &changes)?;
        Ok(())
    }

    /// The records, for the operator to create where the zone is hosted.
    pub fn show(&self, known: &Known) {
        let records: Vec<String> = self
            .resolved(known)
            .into_iter()
            .map(|(set, data)| format!("{} {} {}", set.name, set.record_type, data.join(",")))
            .collect();
        let mut leave_out = String::new();
        if !self.cleared.is_empty() {
            let names: Vec<&str> = self
                .cleared
                .iter()
                .map(|set| {
                    if set.name.is_empty() {
                        "@"
                    } else {
                        set.name.as_str()
                    }
                })
                .collect();
            leave_out = format!(
                "; and no AAAA record for {}: the edge does not serve IPv6",
                names.join(", ")
            );
        }
        pop_common::warn!(
            "the DNS zone {} is not hosted at Scaleway for this project: create these records yourself: {}{leave_out}",
            self.dns_zone,
            records.join("; ")
        );
    }
}
