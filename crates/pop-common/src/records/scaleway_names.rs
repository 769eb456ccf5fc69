//! The Scaleway names a record carries into API paths (`/instance/v1/zones/{zone}/servers/{id}`):
//! checked where they enter, when the record is read, so that no tool builds a path from a zone
//! or an id that is something else (a `/`, a `..`, a query).

use serde::{Deserialize, Deserializer};

/// A zone as Scaleway names it: region letters, location letters, a number (`fr-par-1`,
/// `nl-ams-3`, `pl-waw-2`).
pub fn check_zone(zone: &str) -> Result<(), String> {
    let parts: Vec<&str> = zone.split('-').collect();
    let letters = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_lowercase());
    let ok = parts.len() == 3
        && letters(parts[0], 2)
        && letters(parts[1], 3)
        && !parts[2].is_empty()
        && parts[2].len() <= 2
        && parts[2].bytes().all(|b| b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(format!("`{zone}` is not a Scaleway zone such as fr-par-1"))
    }
}

/// A Scaleway resource id: a UUID in lowercase hex, 8-4-4-4-12.
pub fn check_id(id: &str) -> Result<(), String> {
    let groups: Vec<&str> = id.split('-').collect();
    let ok = groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| {
            g.len() == n && g.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{id}` is not a Scaleway id (a UUID such as 11111111-2222-4333-8444-555555555555)"
        ))
    }
}

/// Deserializes a zone, refusing anything else.
pub(crate) fn zone<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    let zone = String::deserialize(de)?;
    check_zone(&zone).map_err(serde::de::Error::custom)?;
    Ok(zone)
}

/// Deserializes an id, refusing anything else.
pub(crate) fn id<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    let id = String::deserialize(de)?;
    check_id(&id).map_err(serde::de::Error::custom)?;
    Ok(id)
}

/// Deserializes a list of ids, refusing any that is not one.
pub(crate) fn ids<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<String>, D::Error> {
    let ids = Vec::<String>::deserialize(de)?;
    for id in &ids {
        check_id(id).map_err(serde::de::Error::custom)?;
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::assert_verdicts;

    #[test]
    fn zones_are_region_location_number() {
        assert_verdicts(
            check_zone,
            &["fr-par-1", "nl-ams-3", "pl-waw-2", "it-mil-1"],
            &[
                "",
                "fr-par",
                "fr-par-1/servers",
                "fr-par-1?x",
                "../fr-par-1",
                "FR-PAR-1",
                "fr-par-x",
                "fr-paris-1",
            ],
            "is not a Scaleway zone",
        );
    }

    #[test]
    fn ids_are_lowercase_uuids() {
        assert_verdicts(
            check_id,
            &["11111111-2222-4333-8444-555555555555"],
            &[
                "",
                "x",
                "11111111-2222-4333-8444-55555555555",
                "11111111-2222-4333-8444-555555555555/action",
                "../11111111-2222-4333-8444-55555555555",
                "11111111-2222-4333-8444-55555555555G",
                "AAAAAAAA-2222-4333-8444-555555555555",
            ],
            "not a Scaleway id",
        );
    }
}
