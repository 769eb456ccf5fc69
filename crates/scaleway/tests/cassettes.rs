//! Contract: real traffic. Every response body that Scaleway's own CLI and SDK recorded against
//! the live API (`../shared/scaleway-cassettes`, go-vcr v1 and v2) for an endpoint the client
//! calls decodes into the client's type for that endpoint; every error body of those endpoints
//! decodes into `ScwErrorBody` with its message. A minimum count per endpoint keeps the test
//! from passing on nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use scaleway::client::ScwErrorBody;
use scaleway::{baremetal, block, iam, instance};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use testkit::cassettes as recorded;

/// An Instance list: the items under the collection's name.
#[derive(Deserialize)]
#[allow(dead_code)] // decoded to prove the shape, not read
struct List<T> {
    #[serde(
        alias = "security_groups",
        alias = "rules",
        alias = "ips",
        alias = "images"
    )]
    #[serde(alias = "servers")]
    items: Vec<T>,
}

/// A list of the other APIs: the items and `total_count`.
#[derive(Deserialize)]
#[allow(dead_code)] // decoded to prove the shape, not read
struct Counted<T> {
    total_count: u64,
    #[serde(alias = "servers", alias = "offers", alias = "ssh_keys")]
    items: Vec<T>,
}

type Check = fn(&str) -> Result<(), String>;

fn as_type<T: DeserializeOwned>(body: &str) -> Result<(), String> {
    serde_json::from_str::<T>(body)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn block_volume(body: &str) -> Result<(), String> {
    as_type::<block::Volume>(body)
}

/// (method, path template, what the tool decodes the success body into).
type Endpoint = (&'static str, &'static str, Check);

/// Every endpoint the client calls.
fn endpoints() -> Vec<Endpoint> {
    let mut all = instance_endpoints();
    all.extend(other_endpoints());
    all
}

/// The Instance API's.
fn instance_endpoints() -> Vec<Endpoint> {
    vec![
        (
            "GET",
            "/instance/v1/zones/*/security_groups",
            as_type::<List<instance::SecurityGroup>>,
        ),
        (
            "GET",
            "/instance/v1/zones/*/security_groups/*",
            as_type::<instance::SecurityGroupEnvelope>,
        ),
        (
            "POST",
            "/instance/v1/zones/*/security_groups",
            as_type::<instance::SecurityGroupEnvelope>,
        ),
        ("DELETE", "/instance/v1/zones/*/security_groups/*", |_| {
            Ok(())
        }),
        (
            "GET",
            "/instance/v1/zones/*/security_groups/*/rules",
            as_type::<List<instance::Rule>>,
        ),
        (
            "POST",
            "/instance/v1/zones/*/security_groups/*/rules",
            as_type::<instance::RuleEnvelope>,
        ),
        (
            "GET",
            "/instance/v1/zones/*/ips",
            as_type::<List<instance::Ip>>,
        ),
        (
            "GET",
            "/instance/v1/zones/*/ips/*",
            as_type::<instance::IpEnvelope>,
        ),
        (
            "POST",
            "/instance/v1/zones/*/ips",
            as_type::<instance::IpEnvelope>,
        ),
        (
            "PATCH",
            "/instance/v1/zones/*/ips/*",
            as_type::<instance::IpEnvelope>,
        ),
        ("DELETE", "/instance/v1/zones/*/ips/*", |_| Ok(())),
        (
            "GET",
            "/instance/v1/zones/*/images/*",
            as_type::<instance::ImageEnvelope>,
        ),
        (
            "GET",
            "/instance/v1/zones/*/servers",
            as_type::<List<instance::Server>>,
        ),
        (
            "GET",
            "/instance/v1/zones/*/servers/*",
            as_type::<instance::ServerEnvelope>,
        ),
        (
            "POST",
            "/instance/v1/zones/*/servers",
            as_type::<instance::ServerEnvelope>,
        ),
        (
            "POST",
            "/instance/v1/zones/*/servers/*/action",
            as_type::<instance::TaskEnvelope>,
        ),
        (
            "PATCH",
            "/instance/v1/zones/*/servers/*",
            as_type::<instance::ServerEnvelope>,
        ),
        ("DELETE", "/instance/v1/zones/*/servers/*", |_| Ok(())),
        ("DELETE", "/instance/v1/zones/*/volumes/*", |_| Ok(())),
    ]
}

/// Block, Elastic Metal and IAM's.
fn other_endpoints() -> Vec<Endpoint> {
    vec![
        // Block v1 is not recorded; v1alpha1 volumes have the fields the client reads.
        ("GET", "/block/v1alpha1/zones/*/volumes/*", block_volume),
        ("DELETE", "/block/v1alpha1/zones/*/volumes/*", |_| Ok(())),
        (
            "GET",
            "/baremetal/v1/zones/*/servers",
            as_type::<Counted<baremetal::Server>>,
        ),
        (
            "GET",
            "/baremetal/v1/zones/*/servers/*",
            as_type::<baremetal::Server>,
        ),
        (
            "POST",
            "/baremetal/v1/zones/*/servers",
            as_type::<baremetal::Server>,
        ),
        (
            "POST",
            "/baremetal/v1/zones/*/servers/*/start",
            as_type::<baremetal::Server>,
        ),
        (
            "POST",
            "/baremetal/v1/zones/*/servers/*/stop",
            as_type::<baremetal::Server>,
        ),
        (
            "POST",
            "/baremetal/v1/zones/*/servers/*/reboot",
            as_type::<baremetal::Server>,
        ),
        (
            "DELETE",
            "/baremetal/v1/zones/*/servers/*",
            as_type::<baremetal::Server>,
        ),
        (
            "GET",
            "/baremetal/v1/zones/*/offers",
            as_type::<Counted<baremetal::Offer>>,
        ),
        (
            "GET",
            "/iam/v1alpha1/ssh-keys",
            as_type::<Counted<iam::SshKey>>,
        ),
        ("POST", "/iam/v1alpha1/ssh-keys", as_type::<iam::SshKey>),
        ("DELETE", "/iam/v1alpha1/ssh-keys/*", |_| Ok(())),
    ]
}

#[test]
fn every_recorded_body_of_the_endpoints_used_decodes() {
    let Some(shared) = testkit::workspace::shared_dir("cassettes") else {
        return;
    };
    let endpoints = endpoints();
    let mut decoded: BTreeMap<(&str, &str, bool), usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for r in recorded::load(&shared.join("scaleway-cassettes")) {
        let path = r.path.as_str();
        let method = r.method.as_str();
        let Some((m, template, check)) = endpoints
            .iter()
            .find(|(m, t, _)| *m == method && recorded::matches(t, path))
        else {
            continue;
        };
        let error = r.code >= 400;
        let result = if !error {
            if r.body.is_empty() && r.code == 204 {
                Ok(())
            } else {
                check(&r.body)
            }
        } else {
            serde_json::from_str::<ScwErrorBody>(&r.body)
                .map_err(|e| e.to_string())
                .and_then(|b| b.message.map(|_| ()).ok_or_else(|| "no message".into()))
        };
        match result {
            Ok(()) => *decoded.entry((m, template, error)).or_default() += 1,
            Err(e) => failures.push(format!("{}: {method} {path} {}: {e}", r.file, r.code)),
        }
    }
    assert!(
        failures.is_empty(),
        "bodies that do not decode:\n{}",
        failures.join("\n")
    );
    for ((m, t, error), n) in &decoded {
        eprintln!("{n:4} {m} {t}{}", if *error { " (errors)" } else { "" });
    }
    // Each of these is recorded: it must have been seen and decoded.
    for (m, t, error, at_least) in [
        ("POST", "/instance/v1/zones/*/servers", false, 10),
        ("GET", "/instance/v1/zones/*/servers/*", false, 10),
        ("POST", "/instance/v1/zones/*/servers/*/action", false, 5),
        ("PATCH", "/instance/v1/zones/*/servers/*", false, 2),
        ("POST", "/instance/v1/zones/*/ips", false, 5),
        ("POST", "/instance/v1/zones/*/security_groups", false, 4),
        (
            "POST",
            "/instance/v1/zones/*/security_groups/*/rules",
            false,
            1,
        ),
        (
            "GET",
            "/instance/v1/zones/*/security_groups/*/rules",
            false,
            1,
        ),
        ("GET", "/instance/v1/zones/*/images/*", false, 10),
        ("POST", "/baremetal/v1/zones/*/servers", false, 3),
        ("GET", "/baremetal/v1/zones/*/offers", false, 3),
        ("GET", "/baremetal/v1/zones/*/servers/*", false, 10),
        ("POST", "/baremetal/v1/zones/*/servers/*/start", true, 1),
        ("POST", "/baremetal/v1/zones/*/servers/*/stop", true, 1),
        ("GET", "/iam/v1alpha1/ssh-keys", false, 1),
        ("POST", "/iam/v1alpha1/ssh-keys", false, 3),
        ("GET", "/instance/v1/zones/*/servers/*", true, 1),
    ] {
        let n = decoded.get(&(m, t, error)).copied().unwrap_or(0);
        assert!(
            n >= at_least,
            "{m} {t} (errors: {error}): {n} decoded, expected at least {at_least}"
        );
    }
}

/// The `zone` path parameter's enums of a spec: one set per distinct list.
fn zone_enums(shared: &std::path::Path, spec: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(shared.join("scaleway-openapi").join(spec)).unwrap();
    let doc: serde_json::Value = serde_norway::from_str(&text).unwrap();
    let mut enums: Vec<Vec<String>> = Vec::new();
    for operations in doc["paths"].as_object().unwrap().values() {
        for operation in operations.as_object().unwrap().values() {
            let parameters = operation["parameters"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for parameter in parameters {
                if parameter["in"] == "path" && parameter["name"] == "zone" {
                    let zones =
                        serde_json::from_value(parameter["schema"]["enum"].clone()).unwrap();
                    if !enums.contains(&zones) {
                        enums.push(zones);
                    }
                }
            }
        }
    }
    enums
}

#[test]
fn each_product_s_zones_are_those_its_openapi_lists_on_every_operation() {
    let Some(shared) = testkit::workspace::shared_dir("each_product_s_zones") else {
        return;
    };
    for (spec, zones) in [
        ("scaleway.instance.v1.Api.yml", instance::ZONES),
        ("scaleway.baremetal.v1.Api.yml", baremetal::ZONES),
        ("scaleway.block.v1.Api.yml", block::ZONES),
    ] {
        assert_eq!(zone_enums(&shared, spec), [zones.to_vec()], "{spec}");
    }
}
