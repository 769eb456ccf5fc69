//! The edge's names: the platform inputs' `edge_hostnames`, declared once in the infra config
//! (which makes their DNS records), each checked as a name the gateway can serve; and the edge
//! config's own `hostnames`, which may only repeat them.

use std::collections::BTreeSet;
use std::path::Path;

use pop_common::input::InputError;
use pop_common::records::PlatformInputs;

use super::{MAX_HOSTNAMES, MAX_NAME, check_dns_name};
use crate::render;

/// The inputs' `edge_hostnames`, each one a name the gateway can serve in the zone `zone`. They
/// are the infra config's, so a refusal says where to fix them.
pub(super) fn served(
    inputs: &PlatformInputs,
    inputs_path: &Path,
    zone: &str,
) -> Result<Vec<String>, InputError> {
    let refuse = |field: &str, why: String| {
        InputError::field(
            inputs_path,
            field,
            format!(
                "{why} (the infra config's edge_hostnames: fix them there and rerun `make \
                 apply-infra`)"
            ),
        )
    };
    let hostnames = &inputs.edge_hostnames;
    if hostnames.is_empty() {
        return Err(refuse(
            "edge_hostnames",
            "is empty: the gateway has nothing to serve".to_owned(),
        ));
    }
    if hostnames.len() > MAX_HOSTNAMES {
        return Err(refuse(
            "edge_hostnames",
            format!(
                "{} hostnames, at most {MAX_HOSTNAMES}: the HTTP listener's redirect route lists \
                 them all, and an HTTPRoute holds at most {MAX_HOSTNAMES}",
                hostnames.len()
            ),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, host) in hostnames.iter().enumerate() {
        let field = format!("edge_hostnames[{i}]");
        check_dns_name(host).map_err(|why| refuse(&field, format!("`{host}`: {why}")))?;
        for (what, name) in render::names_of_hostname(host) {
            if name.len() > MAX_NAME {
                return Err(refuse(
                    &field,
                    format!(
                        "`{host}` is too long: {what} would be named with {} characters, over \
                         the {MAX_NAME} of a Kubernetes name",
                        name.len()
                    ),
                ));
            }
        }
        if host != zone && !host.ends_with(&format!(".{zone}")) {
            return Err(refuse(
                &field,
                format!("`{host}` is outside the DNS zone `{zone}` (dns_zone)"),
            ));
        }
        if !seen.insert(host.as_str()) {
            return Err(refuse(
                &field,
                format!("`{host}` is listed twice: two listeners cannot share a hostname"),
            ));
        }
    }
    Ok(hostnames.clone())
}

/// The edge config's own `hostnames`, when it still has one: the names are declared once, in
/// the infra config, so a list that differs is refused, naming what differs. The same names
/// only draw a warning: what is served is what it says.
pub(super) fn check_config(
    theirs: Option<&[String]>,
    config_path: &Path,
    served: &[String],
    inputs_path: &Path,
) -> Result<(), InputError> {
    let Some(theirs) = theirs else {
        return Ok(());
    };
    let from = format!(
        "the edge's names are the infra config's edge_hostnames, read from {}",
        inputs_path.display()
    );
    let listed: BTreeSet<&str> = theirs.iter().map(String::as_str).collect();
    let served: BTreeSet<&str> = served.iter().map(String::as_str).collect();
    if listed == served {
        pop_common::warn!(
            "{}: field `hostnames` is ignored: {from}, which lists the same names; remove it",
            config_path.display()
        );
        return Ok(());
    }
    let names = |set: Vec<&&str>| set.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>();
    let mut differs = Vec::new();
    let unserved = names(listed.difference(&served).collect());
    if !unserved.is_empty() {
        differs.push(format!(
            "{} not in edge_hostnames (add it there for its DNS records, then rerun `make \
             apply-infra`)",
            unserved.join(", ")
        ));
    }
    let unlisted = names(served.difference(&listed).collect());
    if !unlisted.is_empty() {
        differs.push(format!(
            "{} served but not listed here",
            unlisted.join(", ")
        ));
    }
    Err(InputError::field(
        config_path,
        "hostnames",
        format!(
            "not read: {from}; this list differs from them ({}): remove it",
            differs.join("; ")
        ),
    ))
}
