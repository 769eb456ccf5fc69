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

/// An endpoint the client calls (method, path template), what the tool decodes its success body
/// into, and how many of its recorded successes and errors must decode at the least.
struct Endpoint {
    method: &'static str,
    path: &'static str,
    check: Check,
    successes: usize,
    errors: usize,
}

/// `method path`, whose success body the tool decodes into `T`.
fn decodes<T: DeserializeOwned>(method: &'static str, path: &'static str) -> Endpoint {
    Endpoint {
        method,
        path,
        check: as_type::<T>,
        successes: 0,
        errors: 0,
    }
}

/// `method path`, whose success body the tool does not read.
fn unread(method: &'static str, path: &'static str) -> Endpoint {
    Endpoint {
        check: |_| Ok(()),
        ..decodes::<()>(method, path)
    }
}

impl Endpoint {
    /// Recorded: at least `n` of its success bodies must have been seen and decoded.
    fn seen(self, n: usize) -> Endpoint {
        Endpoint {
            successes: n,
            ..self
        }
    }

    /// Recorded: at least `n` of its error bodies must have been seen and decoded.
    fn errors_seen(self, n: usize) -> Endpoint {
        Endpoint { errors: n, ..self }
    }
}

/// Every endpoint the client calls.
fn endpoints() -> Vec<Endpoint> {
    vec![
        decodes::<List<instance::SecurityGroup>>("GET", "/instance/v1/zones/*/security_groups"),
        decodes::<instance::SecurityGroupEnvelope>("GET", "/instance/v1/zones/*/security_groups/*"),
        decodes::<instance::SecurityGroupEnvelope>("POST", "/instance/v1/zones/*/security_groups")
            .seen(4),
        unread("DELETE", "/instance/v1/zones/*/security_groups/*"),
        decodes::<List<instance::Rule>>("GET", "/instance/v1/zones/*/security_groups/*/rules")
            .seen(1),
        decodes::<instance::RuleEnvelope>("POST", "/instance/v1/zones/*/security_groups/*/rules")
            .seen(1),
        decodes::<List<instance::Ip>>("GET", "/instance/v1/zones/*/ips"),
        decodes::<instance::IpEnvelope>("GET", "/instance/v1/zones/*/ips/*"),
        decodes::<instance::IpEnvelope>("POST", "/instance/v1/zones/*/ips").seen(5),
        decodes::<instance::IpEnvelope>("PATCH", "/instance/v1/zones/*/ips/*"),
        unread("DELETE", "/instance/v1/zones/*/ips/*"),
        decodes::<instance::ImageEnvelope>("GET", "/instance/v1/zones/*/images/*").seen(10),
        decodes::<List<instance::Server>>("GET", "/instance/v1/zones/*/servers"),
        decodes::<instance::ServerEnvelope>("GET", "/instance/v1/zones/*/servers/*")
            .seen(10)
            .errors_seen(1),
        decodes::<instance::ServerEnvelope>("POST", "/instance/v1/zones/*/servers").seen(10),
        decodes::<instance::TaskEnvelope>("POST", "/instance/v1/zones/*/servers/*/action").seen(5),
        decodes::<instance::ServerEnvelope>("PATCH", "/instance/v1/zones/*/servers/*").seen(2),
        unread("DELETE", "/instance/v1/zones/*/servers/*"),
        unread("DELETE", "/instance/v1/zones/*/volumes/*"),
        // Block v1 is not recorded; v1alpha1 volumes have the fields the client reads.
        decodes::<block::Volume>("GET", "/block/v1alpha1/zones/*/volumes/*"),
        unread("DELETE", "/block/v1alpha1/zones/*/volumes/*"),
        decodes::<Counted<baremetal::Server>>("GET", "/baremetal/v1/zones/*/servers"),
        decodes::<baremetal::Server>("GET", "/baremetal/v1/zones/*/servers/*").seen(10),
        decodes::<baremetal::Server>("POST", "/baremetal/v1/zones/*/servers").seen(3),
        decodes::<baremetal::Server>("POST", "/baremetal/v1/zones/*/servers/*/start")
            .errors_seen(1),
        decodes::<baremetal::Server>("POST", "/baremetal/v1/zones/*/servers/*/stop").errors_seen(1),
        decodes::<baremetal::Server>("POST", "/baremetal/v1/zones/*/servers/*/reboot"),
        decodes::<baremetal::Server>("DELETE", "/baremetal/v1/zones/*/servers/*"),
        decodes::<Counted<baremetal::Offer>>("GET", "/baremetal/v1/zones/*/offers").seen(3),
        decodes::<Counted<iam::SshKey>>("GET", "/iam/v1alpha1/ssh-keys").seen(1),
        decodes::<iam::SshKey>("POST", "/iam/v1alpha1/ssh-keys").seen(3),
        unread("DELETE", "/iam/v1alpha1/ssh-keys/*"),
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
        let Some(endpoint) = endpoints
            .iter()
            .find(|e| e.method == method && recorded::matches(e.path, path))
        else {
            continue;
        };
        let error = r.code >= 400;
        let result = if !error {
            if r.body.is_empty() && r.code == 204 {
                Ok(())
            } else {
                (endpoint.check)(&r.body)
            }
        } else {
            serde_json::from_str::<ScwErrorBody>(&r.body)
                .map_err(|e| e.to_string())
                .and_then(|b| b.message.map(|_| ()).ok_or_else(|| "no message".into()))
        };
        match result {
            Ok(()) => {
                *decoded
                    .entry((endpoint.method, endpoint.path, error))
                    .or_default() += 1
            }
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
    // What is recorded must have been seen and decoded (an endpoint with no minimum is only
    // checked to decode, above).
    for e in &endpoints {
        let minimums = [(false, e.successes), (true, e.errors)];
        for (error, at_least) in minimums.into_iter().filter(|(_, n)| *n > 0) {
            let (m, t) = (e.method, e.path);
            let n = decoded.get(&(m, t, error)).copied().unwrap_or(0);
            assert!(
                n >= at_least,
                "{m} {t} (errors: {error}): {n} decoded, expected at least {at_least}"
            );
        }
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
