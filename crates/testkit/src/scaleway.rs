//! What the tests that drive the Scaleway stand-in share: its control endpoints (seed a
//! resource, inject faults, read the state; not Scaleway's API) and the reading of its request
//! log.

#![allow(clippy::unwrap_used)] // a test helper: a stand-in that does not answer fails the test

use serde_json::Value;

/// `POST <url>/__standin/<what>` with `body`, or a GET without one; the stand-in's JSON answer.
pub fn control(url: &str, what: &str, body: Option<&Value>) -> Value {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(true)
        .build()
        .into();
    let url = format!("{url}/__standin/{what}");
    let mut answer = match body {
        Some(body) => agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .unwrap(),
        None => agent.get(&url).call().unwrap(),
    };
    serde_json::from_str(&answer.body_mut().read_to_string().unwrap()).unwrap()
}

/// `"METHOD path"` of each logged Scaleway request that changes something (lines of another
/// shape, such as a talosctl stand-in's call logged into the same file, are left out).
pub fn mutations(log: &[Value]) -> Vec<String> {
    log.iter()
        .filter(|r| r.get("method").is_some_and(|m| m != "GET"))
        .map(|r| {
            format!(
                "{} {}",
                r["method"].as_str().unwrap(),
                r["path"].as_str().unwrap()
            )
        })
        .collect()
}

/// The objects of a list of the state (`state["servers"]`) that carry `tag`.
pub fn tagged<'a>(objects: &'a Value, tag: &str) -> Vec<&'a Value> {
    objects
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| {
            o["tags"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == tag))
        })
        .collect()
}

/// The lines of a request log shared by the Scaleway stand-in's requests and the talosctl
/// stand-in's calls (`{argv, scw_secret_in_env}`), in order, and empties it, so that the next
/// look sees what came after. Fails the test on a request the specs refused.
pub fn take_log(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    std::fs::write(path, "").unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for l in lines.iter().filter(|l| l.is_object()) {
        assert!(l.get("refused").is_none(), "the specs refuse: {l}");
    }
    lines
}

/// Points `command` at the Scaleway and S3 stand-ins with only the given credentials in its
/// environment: the profile file it would read instead (`SCW_CONFIG_PATH`) names one that does
/// not exist in `dir`, and scw-infra polls without waiting, since the stand-in's objects change
/// state at each look.
pub fn stand_in_env<'a>(
    command: &'a mut std::process::Command,
    dir: &std::path::Path,
    scaleway: &crate::standin::StandIn,
    s3: &crate::standin::StandIn,
    (access_key, secret, project): (&str, &str, &str),
) -> &'a mut std::process::Command {
    command
        .env("SCW_CONFIG_PATH", dir.join("no-such-config.yaml"))
        .env("SCW_API_URL", scaleway.url())
        .env("SCW_S3_ENDPOINT", s3.url())
        .env("SCW_ACCESS_KEY", access_key)
        .env("SCW_SECRET_KEY", secret)
        .env("SCW_DEFAULT_PROJECT_ID", project)
        .env("SCW_INFRA_POLL_SECONDS", "0")
        // The talosctl stand-in tells the Scaleway one when a node's guest powered itself off.
        .env("TALOSCTL_SCALEWAY", scaleway.url())
}
