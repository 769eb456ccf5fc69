//! Domain v2beta1 (`../shared/scaleway-openapi/scaleway.domain.v2beta1.Api.yml`): the DNS zones
//! Scaleway hosts for the project, and their records.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::Owned;
use crate::client::{Client, Method};
use crate::enums::api_enum;
use crate::error::R;

api_enum! {
    /// A record's type (the ones the tools write).
    pub enum RecordType {
        A = "A",
        Aaaa = "AAAA",
        Cname = "CNAME",
        Txt = "TXT",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Zone {
    pub domain: String,
    pub subdomain: String,
    pub status: String,
    #[serde(rename = "project_id")]
    pub project: String,
}

impl Zone {
    /// The zone's full name: `subdomain.domain`, or `domain` when the subdomain is empty.
    pub fn name(&self) -> String {
        if self.subdomain.is_empty() {
            self.domain.clone()
        } else {
            format!("{}.{}", self.subdomain, self.domain)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Record {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub record_type: RecordType,
    pub data: String,
    pub ttl: u32,
    #[serde(default)]
    pub comment: Option<String>,
}

/// A record to write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewRecord {
    pub name: String,
    #[serde(rename = "type")]
    pub record_type: RecordType,
    pub data: String,
    pub ttl: u32,
    pub comment: String,
}

/// The `(name, type)` a `set` replaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IdFields {
    pub name: String,
    #[serde(rename = "type")]
    pub record_type: RecordType,
}

/// One change of a PATCH (the spec's `x-one-of: change`: one key per change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// Every record of `id_fields` becomes `records`.
    Set {
        id_fields: IdFields,
        records: Vec<NewRecord>,
    },
    /// The record of this id goes.
    Delete { id: String },
}

/// Domain v2beta1.
#[derive(Debug, Clone, Copy)]
pub struct Dns<'c> {
    client: &'c Client<'c>,
}

impl<'c> Dns<'c> {
    pub fn new(client: &'c Client<'c>) -> Self {
        Dns { client }
    }

    /// The zone, when Scaleway hosts it for the client's project (a 403 or a 404 is "not
    /// hosted").
    pub fn zone(&self, dns_zone: &str) -> R<Option<Zone>> {
        let zones: Vec<Zone> = match self.client.list_mine(
            "/domain/v2beta1/dns-zones",
            "project_id",
            &[
                ("domain", registered_domain(dns_zone).to_owned()),
                ("dns_zone", dns_zone.to_owned()),
            ],
            "dns_zones",
            "page_size",
        ) {
            Ok(zones) => zones,
            Err(err) if matches!(err.status(), Some(403 | 404)) => return Ok(None),
            Err(err) => return Err(err),
        };
        Ok(zones.into_iter().find(|z| z.name() == dns_zone))
    }

    /// The records of exactly this name and type.
    pub fn records(&self, dns_zone: &str, name: &str, record_type: &RecordType) -> R<Vec<Record>> {
        let all: Vec<Record> = self.client.list(
            &format!("/domain/v2beta1/dns-zones/{dns_zone}/records"),
            &[
                ("name", name.to_owned()),
                ("type", record_type.as_str().to_owned()),
            ],
            "records",
            "page_size",
        )?;
        Ok(all
            .into_iter()
            .filter(|r| r.name == name && r.record_type == *record_type)
            .collect())
    }

    /// One PATCH of record changes.
    pub fn change_records(&self, dns_zone: &str, changes: &[Change]) -> R<()> {
        #[derive(Serialize)]
        struct Body<'a> {
            changes: &'a [Change],
            return_all_records: bool,
        }
        let _: IgnoredAny = self.client.send(
            Method::Patch,
            &format!("/domain/v2beta1/dns-zones/{dns_zone}/records"),
            &Body {
                changes,
                return_all_records: false,
            },
        )?;
        Ok(())
    }
}

impl Owned for Zone {
    const KIND: &'static str = "DNS zone";
    fn id(&self) -> &str {
        &self.domain
    }
    fn project(&self) -> &str {
        &self.project
    }
}

/// The registered domain a zone belongs to, as the Domain API's required `domain` filter wants:
/// the last two labels (a zone under a two-label public suffix such as `co.uk` needs its
/// registered domain spelled out; not handled).
pub fn registered_domain(dns_zone: &str) -> &str {
    let mut dots = dns_zone.rmatch_indices('.');
    dots.next();
    match dots.next() {
        Some((i, _)) => &dns_zone[i + 1..],
        None => dns_zone,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_registered_domain_is_the_last_two_labels() {
        assert_eq!(registered_domain("example.com"), "example.com");
        assert_eq!(registered_domain("edge.example.com"), "example.com");
        assert_eq!(registered_domain("localhost"), "localhost");
    }

    #[test]
    fn a_change_is_one_key_named_after_it() {
        let changes = [
            Change::Delete { id: "r".into() },
            Change::Set {
                id_fields: IdFields {
                    name: "api".into(),
                    record_type: RecordType::A,
                },
                records: vec![],
            },
        ];
        assert_eq!(
            serde_json::to_value(changes).unwrap(),
            serde_json::json!([{"delete": {"id": "r"}},
                               {"set": {"id_fields": {"name": "api", "type": "A"}, "records": []}}])
        );
    }
}
